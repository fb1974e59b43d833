package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/goflink/goflink/connector/postgres/pgspec"
	"github.com/goflink/goflink/record"
)

// column is one column of a table as the probe reads it from the catalog.
type column struct {
	name     string
	typ      string // format_type: "bigint", "character varying(20)"
	typname  string // pg_type.typname of the base type: "int8", "varchar"
	category string // pg_type.typcategory of the base type (N numeric, S string, ...)
	notNull  bool
	defaults bool // has a default, is an identity or generated column
	computed bool // a generated column: it cannot be written
}

// table is what the probe reads of a table.
type table struct {
	name string // as the spec names it
	oid  uint32
	cols []column
}

func (t *table) column(name string) (column, bool) {
	i := slices.IndexFunc(t.cols, func(c column) bool { return c.name == name })
	if i < 0 {
		return column{}, false
	}
	return t.cols[i], true
}

func (t *table) names() string {
	names := make([]string, len(t.cols))
	for i, c := range t.cols {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
}

// readTable reads a table's columns from the catalog; a table that does not exist is an
// error that says so.
func readTable(ctx context.Context, conn *pgx.Conn, name string) (*table, error) {
	parts, err := pgspec.TableName(name)
	if err != nil {
		return nil, fmt.Errorf("table %q: %w", name, err)
	}
	t := &table{name: name}
	var oid *uint32
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1)::oid", pgx.Identifier(parts).Sanitize()).Scan(&oid); err != nil {
		return nil, fmt.Errorf("looking up table %q: %w", name, err)
	}
	if oid == nil {
		return nil, fmt.Errorf("table %q does not exist in the database (names are case-sensitive; create it first)", name)
	}
	t.oid = *oid
	rows, err := conn.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod),
		coalesce(b.typname, t.typname), coalesce(b.typcategory, t.typcategory)::text,
		a.attnotnull, a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> '', a.attgenerated <> ''
		FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid LEFT JOIN pg_type b ON t.typtype = 'd' AND b.oid = t.typbasetype
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, t.oid)
	if err == nil {
		t.cols, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
			var c column
			err := r.Scan(&c.name, &c.typ, &c.typname, &c.category, &c.notNull, &c.defaults, &c.computed)
			return c, err
		})
	}
	if err != nil {
		return nil, fmt.Errorf("reading the columns of table %q: %w", name, err)
	}
	return t, nil
}

// fits says whether the sink can write a field of type ft into column c.
func fits(ft record.Type, c column) bool {
	switch ft {
	case record.Int64:
		return c.category == "N" && c.typname != "money"
	case record.Float64:
		return c.category == "N" && c.typname != "money"
	case record.Bool:
		return c.category == "B"
	case record.String:
		// Text, enums, dates and times, network addresses, json, uuid: the server parses the
		// text. Not numbers or booleans, which a string would write only if it parsed.
		return !slices.Contains([]string{"N", "B", "A", "P", "X"}, c.category)
	case record.Bytes:
		return c.typname == "bytea"
	case record.Timestamp:
		return slices.Contains([]string{"timestamptz", "timestamp", "date"}, c.typname)
	case record.Map:
		return slices.Contains([]string{"json", "jsonb", "hstore"}, c.typname)
	}
	return false
}

// wantFor names the column types a field of type ft fits, for errors.
func wantFor(ft record.Type) string {
	switch ft {
	case record.Int64, record.Float64:
		return "a numeric column (bigint, integer, smallint, numeric, double precision, real)"
	case record.Bool:
		return "a boolean column"
	case record.String:
		return "a text-like column (text, varchar, an enum, json, uuid, a date or time)"
	case record.Bytes:
		return "a bytea column"
	case record.Timestamp:
		return "a timestamptz, timestamp or date column"
	case record.Map:
		return "a json, jsonb or hstore column"
	}
	return "a column of another type"
}

// probeSink checks, from this TaskManager, that the sink can write: it connects (the server,
// the password), reads the table's columns and checks them against the input's fields
// (names, types, NOT NULL columns no field writes), the upsert key against the table's
// unique constraints, the privileges, and for exactly-once max_prepared_transactions.
func probeSink(ctx context.Context, c *pgspec.SinkConfig, in *record.Schema) error {
	w, err := newWriter(c, in)
	if err != nil {
		return err
	}
	d := newDialer(c)
	conn, err := d.dialContext(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	t, err := readTable(ctx, conn, c.Table)
	if err != nil {
		return d.red.Err(err)
	}
	var problems []string
	for i, name := range w.cols {
		col, ok := t.column(name)
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("table %q has no column %q (a field of the input); its columns are %s", t.name, name, t.names()))
		case col.computed:
			problems = append(problems, fmt.Sprintf("column %q of table %q is generated: it cannot be written (drop the field)", name, t.name))
		case !fits(w.types[i], col):
			problems = append(problems, fmt.Sprintf("field %q is %s, but column %q of table %q is %s: %s needs %s",
				name, w.types[i], name, t.name, col.typ, w.types[i], wantFor(w.types[i])))
		}
	}
	for _, col := range t.cols {
		if col.notNull && !col.defaults && !slices.Contains(w.cols, col.name) {
			problems = append(problems, fmt.Sprintf("column %q of table %q is NOT NULL without a default, and no field of the input writes it", col.name, t.name))
		}
	}
	if c.Mode == pgspec.ModeUpsert {
		ok, err := hasUniqueKey(ctx, conn, t.oid, c.Key)
		if err != nil {
			return d.red.Err(fmt.Errorf("reading the unique constraints of table %q: %w", t.name, err))
		}
		if !ok {
			problems = append(problems, fmt.Sprintf("mode upsert: table %q has no primary key or unique constraint on exactly the key %v (INSERT ... ON CONFLICT needs one)", t.name, c.Key))
		}
	}
	privs := []string{"INSERT"}
	if c.Mode == pgspec.ModeUpsert {
		privs = append(privs, "UPDATE")
	}
	if c.OpField != "" {
		privs = append(privs, "DELETE")
	}
	for _, p := range privs {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT has_table_privilege($1::oid, $2::text)", t.oid, p).Scan(&ok); err != nil {
			return d.red.Err(fmt.Errorf("checking the privileges on table %q: %w", t.name, err))
		}
		if !ok {
			problems = append(problems, fmt.Sprintf("the user %q may not %s on table %q (GRANT %s ON %s TO ...)", conn.Config().User, p, t.name, p, t.name))
		}
	}
	if c.DeliveryGuarantee == pgspec.ExactlyOnce {
		var n int
		if err := conn.QueryRow(ctx, "SELECT current_setting('max_prepared_transactions')::int").Scan(&n); err != nil {
			return d.red.Err(fmt.Errorf("reading max_prepared_transactions: %w", err))
		}
		if n == 0 {
			problems = append(problems, "delivery-guarantee exactly-once needs prepared transactions, which the server does not allow: "+
				"set max_prepared_transactions in postgresql.conf to at least twice the sink's parallelism (and restart the server)")
		}
	}
	if len(problems) > 0 {
		return d.red.Err(errors.New(strings.Join(problems, "; ")))
	}
	return nil
}

// hasUniqueKey says whether the table has a primary key or unique constraint (a unique index
// without predicate or expressions) on exactly the columns key, in any order.
func hasUniqueKey(ctx context.Context, conn *pgx.Conn, oid uint32, key []string) (bool, error) {
	rows, err := conn.Query(ctx, `SELECT array_agg(a.attname::text ORDER BY a.attname)
		FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
		WHERE i.indrelid = $1 AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL
		GROUP BY i.indexrelid`, oid)
	if err != nil {
		return false, err
	}
	sets, err := pgx.CollectRows(rows, pgx.RowTo[[]string])
	if err != nil {
		return false, err
	}
	want := slices.Sorted(slices.Values(key))
	for _, s := range sets {
		if slices.Equal(s, want) {
			return true, nil
		}
	}
	return false, nil
}

// readable says whether the postgres-cdc source can read column c (its text, as pgoutput
// sends it) as a field of type ft.
func readable(ft record.Type, c column) bool {
	switch ft {
	case record.Int64:
		return slices.Contains([]string{"int2", "int4", "int8", "oid"}, c.typname)
	case record.Float64:
		return c.category == "N" && c.typname != "money"
	case record.Bool:
		return c.category == "B"
	case record.String:
		return true // every value has a text form
	case record.Bytes:
		return c.typname == "bytea"
	case record.Timestamp:
		return slices.Contains([]string{"timestamptz", "timestamp", "date"}, c.typname)
	}
	return false
}

// readableAs names the column types a field of type ft can be read from, for errors.
func readableAs(ft record.Type) string {
	switch ft {
	case record.Int64:
		return "an integer column (bigint, integer, smallint)"
	case record.Float64:
		return "a numeric column"
	case record.String:
		return "any column"
	}
	return wantFor(ft)
}

// probeCDC checks, from this TaskManager, that the postgres-cdc source can read: it connects,
// checks wal_level, the user's REPLICATION attribute, a free replication slot, the table,
// the declared columns (present, of readable types), SELECT on the table, and the
// publication (publishing the table, or one the user may create).
func probeCDC(ctx context.Context, c *pgspec.CDCConfig) error {
	d := newDialer(cdcConnection(c))
	conn, err := d.dialContext(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var (
		walLevel                 string
		replication              bool
		slots, maxSlots, senders int
		slotExists               bool
	)
	err = conn.QueryRow(ctx, `SELECT current_setting('wal_level'),
		(SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user),
		(SELECT count(*) FROM pg_replication_slots), current_setting('max_replication_slots')::int,
		current_setting('max_wal_senders')::int,
		EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`, c.Slot).
		Scan(&walLevel, &replication, &slots, &maxSlots, &senders, &slotExists)
	if err != nil {
		return d.red.Err(fmt.Errorf("reading the server's replication settings: %w", err))
	}
	if walLevel != "logical" {
		// Nothing else can work: say only this.
		return fmt.Errorf("the server's wal_level is %q: postgres-cdc reads logical replication; set wal_level = logical in postgresql.conf (and restart the server)", walLevel)
	}
	var problems []string
	if !replication {
		problems = append(problems, fmt.Sprintf("the user %q may not replicate: ALTER ROLE %s REPLICATION", conn.Config().User, pgx.Identifier{conn.Config().User}.Sanitize()))
	}
	if senders == 0 {
		problems = append(problems, "the server allows no replication connection: set max_wal_senders above 0")
	}
	if !slotExists && slots >= maxSlots {
		problems = append(problems, fmt.Sprintf("the server's %d replication slots (max_replication_slots) are all in use: drop one or raise the setting", maxSlots))
	}
	t, err := readTable(ctx, conn, c.Table)
	if err != nil {
		return d.red.Err(err)
	}
	for _, f := range c.Schema {
		col, ok := t.column(f.Name)
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("schema.%s: table %q has no column %q; its columns are %s", f.Name, t.name, f.Name, t.names()))
		case !readable(f.Type, col):
			problems = append(problems, fmt.Sprintf("schema.%s: column %q of table %q is %s, which cannot be read as %s: %s needs %s",
				f.Name, f.Name, t.name, col.typ, f.Type, f.Type, readableAs(f.Type)))
		}
	}
	var canSelect, published, pubExists, canCreate bool
	err = conn.QueryRow(ctx, `SELECT has_table_privilege($1::oid, 'SELECT'),
		EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $2),
		EXISTS (SELECT 1 FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid WHERE p.pubname = $2 AND r.prrelid = $1)
			OR EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $2 AND puballtables),
		(SELECT pg_has_role(relowner, 'USAGE') FROM pg_class WHERE oid = $1) AND has_database_privilege(current_database(), 'CREATE')`,
		t.oid, c.Publication).Scan(&canSelect, &pubExists, &published, &canCreate)
	if err != nil {
		return d.red.Err(fmt.Errorf("checking the privileges and the publication of table %q: %w", t.name, err))
	}
	if !canSelect {
		problems = append(problems, fmt.Sprintf("the user %q may not SELECT from table %q (the initial snapshot reads it)", conn.Config().User, t.name))
	}
	switch {
	case pubExists && !published:
		problems = append(problems, fmt.Sprintf("publication %q does not publish table %q (ALTER PUBLICATION %s ADD TABLE %s)",
			c.Publication, t.name, pgx.Identifier{c.Publication}.Sanitize(), t.name))
	case !pubExists && !canCreate:
		problems = append(problems, fmt.Sprintf("publication %q does not exist and the user %q may not create it (it must own table %q): "+
			"have the owner run CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert, update, delete'), or name an existing one in the field publication",
			c.Publication, conn.Config().User, t.name, pgx.Identifier{c.Publication}.Sanitize(), t.name))
	}
	if len(problems) > 0 {
		return d.red.Err(errors.New(strings.Join(problems, "; ")))
	}
	return nil
}

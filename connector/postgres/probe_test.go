package postgres

import (
	"strings"
	"testing"

	"github.com/goflink/goflink/connector/postgres/pgspec"
	"github.com/goflink/goflink/internal/pgtest"
	"github.com/goflink/goflink/record"
)

// TestProbeSink: the probe at submit names what is wrong with the server, the table and its
// columns for the sink's input, without the password; a sink that can write passes.
func TestProbeSink(t *testing.T) {
	e := startPG(t)
	for _, sql := range []string{
		"CREATE TABLE wide (k text NOT NULL, n bigint, must bigint NOT NULL, opt bigint NOT NULL DEFAULT 0)",
		"CREATE TABLE nokey (k text, n bigint)",
		"CREATE TABLE gen (k text, n bigint, twice bigint GENERATED ALWAYS AS (n * 2) STORED)",
		"CREATE TABLE \"Mixed\" (k varchar(10) PRIMARY KEY, n integer)",
		"CREATE TABLE typed (id bigint PRIMARY KEY, f double precision, b boolean, s text, raw bytea, at timestamptz, m jsonb)",
		"CREATE ROLE reader LOGIN PASSWORD 'reader-pw'",
		"GRANT SELECT ON out TO reader",
	} {
		if _, err := e.conn.Exec(t.Context(), sql); err != nil {
			t.Fatal(err)
		}
	}
	const secret = "wrong-s3cr3t"
	kn := testSchema
	sn := record.MustSchema(record.Field{Name: "k", Type: record.String}, record.Field{Name: "n", Type: record.String})
	typed := record.MustSchema(record.Field{Name: "id", Type: record.Int64}, record.Field{Name: "f", Type: record.Float64},
		record.Field{Name: "b", Type: record.Bool}, record.Field{Name: "s", Type: record.String}, record.Field{Name: "raw", Type: record.Bytes},
		record.Field{Name: "at", Type: record.Timestamp}, record.Field{Name: "m", Type: record.Map})
	for _, tc := range []struct {
		name string
		in   *record.Schema
		spec func(c *pgspec.SinkConfig)
		want string // "" passes
	}{
		{"insert passes", kn, func(*pgspec.SinkConfig) {}, ""},
		{"upsert passes", kn, func(c *pgspec.SinkConfig) { c.Table, c.Mode, c.Key = "up", pgspec.ModeUpsert, []string{"k"} }, ""},
		{"exactly-once passes", kn, func(c *pgspec.SinkConfig) { c.DeliveryGuarantee = pgspec.ExactlyOnce }, ""},
		{"case-sensitive name", kn, func(c *pgspec.SinkConfig) { c.Table, c.Mode, c.Key = "Mixed", pgspec.ModeUpsert, []string{"k"} }, ""},
		{"every type", typed, func(c *pgspec.SinkConfig) { c.Table = "typed" }, ""},
		{"no server", kn, func(c *pgspec.SinkConfig) {
			c.DSN = "postgres://goflink:" + secret + "@127.0.0.1:1/test?connect_timeout=5"
		}, "connect: "},
		{"wrong password", kn, func(c *pgspec.SinkConfig) { c.DSN = e.srv.DSNFor(pgtest.User, secret, e.srv.Database) }, "password authentication failed"},
		{"no database", kn, func(c *pgspec.SinkConfig) { c.DSN = e.srv.DSN("nodb") }, `database "nodb" does not exist`},
		{"no table", kn, func(c *pgspec.SinkConfig) { c.Table = "missing" }, `table "missing" does not exist`},
		{"lower-case of a mixed-case table", kn, func(c *pgspec.SinkConfig) { c.Table = "mixed" }, `table "mixed" does not exist`},
		{"no column", record.MustSchema(record.Field{Name: "k", Type: record.String}, record.Field{Name: "count", Type: record.Int64}),
			func(*pgspec.SinkConfig) {}, `table "out" has no column "count" (a field of the input); its columns are k, n`},
		{"type mismatch", sn, func(*pgspec.SinkConfig) {}, `field "n" is string, but column "n" of table "out" is bigint: string needs a text-like column`},
		{"not null unwritten", kn, func(c *pgspec.SinkConfig) { c.Table = "wide" }, `column "must" of table "wide" is NOT NULL without a default`},
		{"generated", record.MustSchema(record.Field{Name: "k", Type: record.String}, record.Field{Name: "twice", Type: record.Int64}),
			func(c *pgspec.SinkConfig) { c.Table = "gen" }, `column "twice" of table "gen" is generated`},
		{"upsert without unique key", kn, func(c *pgspec.SinkConfig) { c.Table, c.Mode, c.Key = "nokey", pgspec.ModeUpsert, []string{"k"} },
			`table "nokey" has no primary key or unique constraint on exactly the key [k]`},
		{"upsert key not the unique one", kn, func(c *pgspec.SinkConfig) { c.Table, c.Mode, c.Key = "up", pgspec.ModeUpsert, []string{"k", "n"} },
			`table "up" has no primary key or unique constraint on exactly the key [k n]`},
		{"no privilege", kn, func(c *pgspec.SinkConfig) { c.DSN = e.srv.DSNFor("reader", "reader-pw", e.srv.Database) },
			`the user "reader" may not INSERT on table "out"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := e.spec("out", pgspec.AtLeastOnce)
			tc.spec(c)
			err := probeSink(t.Context(), c, tc.in)
			t.Logf("probe: %v", err)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("probe: %v, want it to pass", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("probe: %v, want an error containing %q", err, tc.want)
			case err != nil && strings.Contains(err.Error(), secret):
				t.Errorf("the error names the password: %v", err)
			}
		})
	}
}

// TestProbeSinkNoPreparedTransactions: exactly-once on a server without prepared
// transactions says what to set.
func TestProbeSinkNoPreparedTransactions(t *testing.T) {
	srv := pgtest.Start(t, "max_prepared_transactions=0")
	conn := srv.Connect(t)
	if _, err := conn.Exec(t.Context(), "CREATE TABLE out (k text, n bigint)"); err != nil {
		t.Fatal(err)
	}
	c := &pgspec.SinkConfig{DSN: srv.DSN(srv.Database), Table: "out", Mode: pgspec.ModeInsert, BatchSize: 10, DeliveryGuarantee: pgspec.ExactlyOnce}
	err := probeSink(t.Context(), c, testSchema)
	if err == nil || !strings.Contains(err.Error(), "set max_prepared_transactions in postgresql.conf") {
		t.Fatalf("probe: %v, want it to ask for max_prepared_transactions", err)
	}
	c.DeliveryGuarantee = pgspec.AtLeastOnce
	if err := probeSink(t.Context(), c, testSchema); err != nil {
		t.Fatalf("at-least-once probe: %v", err)
	}
}

// TestProbeCDC: the probe of a postgres-cdc source names what is wrong with the server, the
// user, the table, the declared columns and the publication; a source that can read passes.
func TestProbeCDC(t *testing.T) {
	e := startPG(t)
	for _, sql := range []string{
		"CREATE TABLE src (id bigint PRIMARY KEY, name text, price numeric(10,2), ok boolean, at timestamptz, raw bytea)",
		"CREATE TABLE other (id bigint PRIMARY KEY)",
		"CREATE PUBLICATION pub_other FOR TABLE other",
		"CREATE ROLE plain LOGIN PASSWORD 'plain-pw'",
		"CREATE ROLE repl LOGIN REPLICATION PASSWORD 'repl-pw'",
	} {
		if _, err := e.conn.Exec(t.Context(), sql); err != nil {
			t.Fatal(err)
		}
	}
	schema := []record.Field{{Name: "id", Type: record.Int64}, {Name: "name", Type: record.String}, {Name: "price", Type: record.Float64},
		{Name: "ok", Type: record.Bool}, {Name: "at", Type: record.Timestamp}, {Name: "raw", Type: record.Bytes}}
	for _, tc := range []struct {
		name string
		spec func(c *pgspec.CDCConfig)
		want string // "" passes
	}{
		{"passes", func(*pgspec.CDCConfig) {}, ""},
		{"any column as a string", func(c *pgspec.CDCConfig) { c.Schema = []record.Field{{Name: "price", Type: record.String}} }, ""},
		{"wrong password", func(c *pgspec.CDCConfig) { c.DSN = e.srv.DSNFor(pgtest.User, "wrong-s3cr3t", e.srv.Database) }, "password authentication failed"},
		{"no table", func(c *pgspec.CDCConfig) { c.Table = "missing" }, `table "missing" does not exist`},
		{"no column", func(c *pgspec.CDCConfig) { c.Schema = append(c.Schema, record.Field{Name: "gone", Type: record.Int64}) },
			`schema.gone: table "src" has no column "gone"; its columns are id, name, price, ok, at, raw`},
		{"type mismatch", func(c *pgspec.CDCConfig) { c.Schema = []record.Field{{Name: "price", Type: record.Int64}} },
			`schema.price: column "price" of table "src" is numeric(10,2), which cannot be read as int64`},
		{"publication without the table", func(c *pgspec.CDCConfig) { c.Publication = "pub_other" }, `publication "pub_other" does not publish table "src"`},
		{"no replication", func(c *pgspec.CDCConfig) { c.DSN = e.srv.DSNFor("plain", "plain-pw", e.srv.Database) },
			`the user "plain" may not replicate: ALTER ROLE "plain" REPLICATION`},
		{"no select, may not create the publication", func(c *pgspec.CDCConfig) { c.DSN = e.srv.DSNFor("repl", "repl-pw", e.srv.Database) },
			`the user "repl" may not SELECT from table "src"`},
		{"may not create the publication", func(c *pgspec.CDCConfig) { c.DSN = e.srv.DSNFor("repl", "repl-pw", e.srv.Database) },
			`publication "goflink_s" does not exist and the user "repl" may not create it`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &pgspec.CDCConfig{DSN: e.srv.DSN(e.srv.Database), Table: "src", Schema: schema, Slot: "s", Publication: "goflink_s"}
			tc.spec(c)
			err := probeCDC(t.Context(), c)
			t.Logf("probe: %v", err)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("probe: %v, want it to pass", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("probe: %v, want an error containing %q", err, tc.want)
			case err != nil && strings.Contains(err.Error(), "wrong-s3cr3t"):
				t.Errorf("the error names the password: %v", err)
			}
		})
	}
}

// TestProbeCDCWalLevel: a server without logical replication says what to set.
func TestProbeCDCWalLevel(t *testing.T) {
	srv := pgtest.Start(t, "wal_level=replica")
	c := &pgspec.CDCConfig{DSN: srv.DSN(srv.Database), Table: "src", Schema: []record.Field{{Name: "id", Type: record.Int64}}, Slot: "s", Publication: "goflink_s"}
	err := probeCDC(t.Context(), c)
	if err == nil || !strings.Contains(err.Error(), `the server's wal_level is "replica": postgres-cdc reads logical replication; set wal_level = logical`) {
		t.Fatalf("probe: %v, want it to ask for wal_level = logical", err)
	}
}

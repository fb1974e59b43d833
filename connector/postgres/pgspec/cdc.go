package pgspec

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/goflink/goflink/operator"
	"github.com/goflink/goflink/record"
)

// CDCType is the "postgres-cdc" operator type as JobManagers check it (it has no runtime
// here): a source that reads a table's rows, then its changes, from PostgreSQL's logical
// replication (a replication slot with the pgoutput plugin). It runs in one subtask: a slot is
// one stream (operator.Type.Global).
var CDCType = operator.Define(operator.Type{Name: "postgres-cdc", Role: operator.RoleSource, Global: true, ChangelogField: OpField,
	Fields: cdcFields, Probed: true}, planCDC, nil)

var cdcFields = append(slices.Clone(connectionFields), "table", "schema", "slot", "publication")

// OpField is the first field of the postgres-cdc source's records: the kind of change, one of
// the Op values.
const OpField = "op"

// The kinds of change in the op field. An update emits OpUpdateBefore (the old row, only
// when the server sends it: REPLICA IDENTITY FULL, or a changed key) then OpUpdateAfter.
const (
	OpInsert       = "insert"
	OpUpdateBefore = "update_before"
	OpUpdateAfter  = "update_after"
	OpDelete       = "delete"
)

// maxIdentifier is the longest name PostgreSQL keeps (NAMEDATALEN - 1).
const maxIdentifier = 63

// slotName is what a replication slot's name may be (PostgreSQL's rule).
var slotName = regexp.MustCompile(`^[a-z0-9_]+$`)

// CDCConfig is the configuration of a postgres-cdc source.
type CDCConfig struct {
	// DSN is a libpq connection string (URL or key=value); its password, if any, is a secret.
	// The user needs the REPLICATION attribute, SELECT on Table, and to create Publication
	// unless it exists (owner of the table).
	DSN string `json:"dsn"`
	// PasswordFile (a file on the TaskManagers, read when the source opens; a trailing newline
	// is dropped) or PasswordEnv (an environment variable of the TaskManagers) give the
	// password instead of the DSN.
	PasswordFile string `json:"password_file,omitempty"`
	PasswordEnv  string `json:"password_env,omitempty"`
	// Table is the table read, optionally schema-qualified (schema.table).
	Table string `json:"table"`
	// Schema are the columns emitted after the op field, by name, with the types their text
	// is parsed into.
	Schema []record.Field `json:"schema"`
	// Slot is the logical replication slot the source creates on its first start and reads
	// from; Publication the publication it reads (created FOR TABLE Table if missing).
	Slot        string `json:"slot"`
	Publication string `json:"publication"`
}

// LocalPaths is the password file, which TaskManagers read (operator.PathNamer).
func (c CDCConfig) LocalPaths() []operator.LocalPath {
	if c.PasswordFile == "" {
		return nil
	}
	return []operator.LocalPath{{Field: "password-file", Path: c.PasswordFile}}
}

// CDCSchema is the output schema of a postgres-cdc source with these declared columns: the op
// field, then the columns.
func CDCSchema(declared []record.Field) (*record.Schema, error) {
	return record.NewSchema(append([]record.Field{{Name: OpField, Type: record.String}}, declared...)...)
}

// planCDC plans a postgres-cdc operator: the connection as the sink's, the table, the
// declared columns, the slot and the publication. Whether the table has the columns is for
// the source to find when it opens.
func planCDC(p *operator.Planner) (CDCConfig, *operator.Shape) {
	var c CDCConfig
	c.DSN, c.PasswordFile, c.PasswordEnv = planConnection(p)
	c.Table = planTable(p)
	var declared []record.Field
	open := true
	if e, ok := p.Require("schema"); ok {
		declared, open = operator.DeclaredFields(e, func(name string) string {
			if name == OpField {
				return fmt.Sprintf("%q is the field the source adds itself (the kind of change: insert, update_before, update_after, delete)", name)
			}
			return ""
		})
		m, _ := e.Map()
		for i, f := range declared {
			if f.Type == record.Map {
				if fe, ok := m.Get(f.Name); ok {
					fe.Problemf("postgres-cdc cannot read a column as map (want int64, float64, bool, string, bytes or timestamp)")
				}
				declared[i].Type = record.Invalid
			}
			if declared[i].Type != record.Invalid {
				c.Schema = append(c.Schema, f)
			}
		}
	}
	if e, ok := p.Require("slot"); ok {
		if s, ok := e.NonEmpty(); ok {
			c.Slot = s
			if err := checkName(s); err != nil {
				e.Problemf("%v", err)
			}
		}
	}
	if e, has := p.Field("publication"); has {
		if s, ok := e.NonEmpty(); ok {
			c.Publication = s
			if err := checkName(s); err != nil {
				e.Problemf("%v", err)
			}
		}
	} else if c.Slot != "" {
		c.Publication = "goflink_" + c.Slot
		if len(c.Publication) > maxIdentifier {
			p.At("slot").Problemf("the default publication %s is longer than %d characters: set publication", c.Publication, maxIdentifier)
		}
	}
	return c, operator.NewShape(append([]record.Field{{Name: OpField, Type: record.String}}, declared...), open)
}

// checkName checks a replication slot's or publication's name: lower-case letters, digits
// and underscores, at most 63 of them.
func checkName(s string) error {
	if !slotName.MatchString(s) || len(s) > maxIdentifier {
		return fmt.Errorf("want lower-case letters, digits and underscores, at most %d, got %q", maxIdentifier, s)
	}
	return nil
}

// planTable plans the field table (table or schema.table) of the sink and the source.
func planTable(p *operator.Planner) string {
	e, ok := p.Require("table")
	if !ok {
		return ""
	}
	t, ok := e.NonEmpty()
	if ok {
		if _, err := TableName(t); err != nil {
			e.Problemf("%v", err)
		}
	}
	return t
}

// connectionFields are the fields of a connection, of the sink and the source.
var connectionFields = []string{"dsn", "host", "port", "database", "user", "password-file", "password-env"}

// planConnection reads the fields of a connection of the sink and the source: a dsn, or its
// parts host, port (default 5432), database and user (default the server's: the operating
// system user's name), made into a key=value dsn; and at most one of password-file and
// password-env, when the dsn has no password.
func planConnection(p *operator.Planner) (dsn, passwordFile, passwordEnv string) {
	var parts []string
	for _, k := range []string{"host", "port", "database", "user"} {
		if _, has := p.Field(k); has {
			parts = append(parts, k)
		}
	}
	if e, has := p.Field("dsn"); has {
		if len(parts) > 0 {
			p.At(parts[0]).Problemf("give either dsn or host, port, database and user, not both")
		}
		if v, ok := e.NonEmpty(); ok {
			dsn = v
			if err := checkDSN(v); err != nil {
				e.Problemf("%v", err)
			}
		}
	} else if len(parts) == 0 {
		p.Require("dsn")
	} else {
		dsn = planDSNParts(p)
	}
	var pwFields []string
	for _, k := range []string{"password-file", "password-env"} {
		if e, has := p.Field(k); has {
			pwFields = append(pwFields, k)
			v, _ := e.NonEmpty()
			if k == "password-file" {
				passwordFile = v
			} else {
				passwordEnv = v
			}
		}
	}
	switch {
	case len(pwFields) > 1:
		p.At("password-env").Problemf("give only one of password-file, password-env")
	case len(pwFields) == 1 && dsn != "" && DSNHasPassword(dsn):
		p.At(pwFields[0]).Problemf("the dsn has a password already: give it in only one place")
	}
	return dsn, passwordFile, passwordEnv
}

// planDSNParts makes a key=value dsn of the fields host, port, database and user ("" after a
// problem).
func planDSNParts(p *operator.Planner) string {
	kv := map[string]string{"port": "5432"}
	ok := true
	for _, k := range []string{"host", "database", "user"} {
		e, has := p.Field(k)
		if !has {
			if k != "user" {
				p.Require(k)
				ok = false
			}
			continue
		}
		v, good := e.NonEmpty()
		switch {
		case !good:
			ok = false
		case strings.ContainsAny(v, "\x00'\\ \t\n"):
			e.Problemf("want a name without spaces, quotes or backslashes")
			ok = false
		default:
			kv[k] = v
		}
	}
	if e, has := p.Field("port"); has {
		if n, good := e.Int(); !good || n < 1 || n > 65535 {
			e.Problemf("want a port from 1 to 65535, got %s", e.Kind())
			ok = false
		} else {
			kv["port"] = strconv.FormatInt(n, 10)
		}
	}
	if !ok {
		return ""
	}
	dsn := "host=" + kv["host"] + " port=" + kv["port"] + " dbname=" + kv["database"]
	if u, has := kv["user"]; has {
		dsn += " user=" + u
	}
	return dsn
}

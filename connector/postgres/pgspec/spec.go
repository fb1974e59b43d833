// Package pgspec describes the PostgreSQL connector's operator type "postgres" (a sink) as
// job specs write it: its fields, how they are checked, and the configuration its runtime
// gets. It does not link a PostgreSQL client: JobManagers register Type to check specs,
// TaskManagers register the runtime of package postgres (the parent directory), which builds
// on it.
package pgspec

import (
	"errors"
	"net/url"
	"slices"
	"strings"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/operator"
	"github.com/goflink/goflink/record"
)

// Type is the "postgres" operator type as JobManagers check it (it has no runtime here).
var Type = operator.Define(operator.Type{Name: "postgres", Role: operator.RoleSink, Fields: sinkFields, Probed: true}, planSink, nil)

var sinkFields = append(slices.Clone(connectionFields), "table", "mode", "key", "op-field", "batch-size", "delivery-guarantee")

// Modes and delivery guarantees of the sink (spec mode and delivery-guarantee).
const (
	ModeInsert  = "insert"
	ModeUpsert  = "upsert"
	ExactlyOnce = "exactly-once"
	AtLeastOnce = "at-least-once"
)

// DefaultBatchSize is the sink's batch-size when the spec sets none: the rows buffered before
// they are sent to the server in one COPY or one pipelined batch of upserts.
const DefaultBatchSize = 1000

// SinkConfig is the configuration of a postgres sink.
type SinkConfig struct {
	// DSN is a libpq connection string (URL or key=value); its password, if any, is a secret.
	DSN string `json:"dsn"`
	// PasswordFile (a file on the TaskManagers, read when the sink opens; a trailing newline is
	// dropped) or PasswordEnv (an environment variable of the TaskManagers) give the password
	// instead of the DSN.
	PasswordFile string `json:"password_file,omitempty"`
	PasswordEnv  string `json:"password_env,omitempty"`
	// Table is the table written, optionally schema-qualified (schema.table).
	Table string `json:"table"`
	// Mode is "insert" or "upsert" (on a conflict over Key, the other columns are updated).
	Mode string   `json:"mode"`
	Key  []string `json:"key,omitempty"`
	// OpField (mode upsert) names a string field of the input that gives each record's kind
	// of change (OpInsert, OpUpdateBefore, OpUpdateAfter, OpDelete): a changelog such as the
	// postgres-cdc source emits. It is not written as a column: insert and update_after
	// upsert the row, delete deletes the key's row, update_before is skipped.
	OpField string `json:"op_field,omitempty"`
	// BatchSize is how many rows are sent to the server at once.
	BatchSize int `json:"batch_size"`
	// DeliveryGuarantee is "exactly-once" (prepared transactions committed on checkpoint
	// completion) or "at-least-once" (a commit at every checkpoint).
	DeliveryGuarantee string `json:"delivery_guarantee"`
}

// LocalPaths is the password file, which TaskManagers read (operator.PathNamer).
func (c SinkConfig) LocalPaths() []operator.LocalPath {
	if c.PasswordFile == "" {
		return nil
	}
	return []operator.LocalPath{{Field: "password-file", Path: c.PasswordFile}}
}

// planSink plans a postgres operator: it checks each field, and that the key names fields of
// the input (the columns are the input's fields). Whether the table has those columns, of
// fitting types, the key a unique constraint, and the server prepared transactions, a
// TaskManager's probe says at submit (the runtime's operator.Probes).
func planSink(p *operator.Planner) (SinkConfig, *operator.Shape) {
	c := SinkConfig{BatchSize: DefaultBatchSize}
	c.DSN, c.PasswordFile, c.PasswordEnv = planConnection(p)
	c.Table = planTable(p)
	c.Mode, _ = p.Choice("mode", ModeInsert, ModeInsert, ModeUpsert)
	if e, has := p.Field("key"); has {
		if c.Mode == ModeInsert {
			e.Problemf("only used with mode: upsert")
		} else if names, ok := e.Names(); ok {
			if len(names) == 0 {
				e.Problemf("needs at least one column")
			}
			seen := map[string]bool{}
			for _, v := range names {
				name, _ := v.String()
				if seen[name] {
					v.Problemf("column %q named twice", name)
				}
				seen[name] = true
				if _, found := p.FieldNamed(v, name); found || p.In == nil || !p.In.Lacks(name) {
					c.Key = append(c.Key, name)
				}
			}
		}
	} else if c.Mode == ModeUpsert {
		p.At("mode").Problemf("mode: upsert needs the field \"key\" (the columns of the table's primary key or a unique constraint)")
	}
	if e, has := p.Field("op-field"); has {
		if name, ok := e.NonEmpty(); ok {
			switch f, found := p.FieldNamed(e.Value, name); {
			case c.Mode != ModeUpsert:
				e.Problemf("only used with mode: upsert (a delete needs the key)")
			case slices.Contains(c.Key, name):
				e.Problemf("%q is a key column: the kind of change is a field of its own", name)
			case found && f.Type != record.String:
				e.Problemf("field %q is %s, want a string (insert, update_before, update_after, delete)", name, f.Type)
			default:
				c.OpField = name
			}
		}
	}
	if e, has := p.Field("batch-size"); has {
		if n, ok := e.Int(); !ok || n < 1 || n > 1<<20 {
			e.Problemf("want a whole number from 1 to %d, got %s", 1<<20, e.Kind())
		} else {
			c.BatchSize = int(n)
		}
	}
	c.DeliveryGuarantee, _ = p.Choice("delivery-guarantee", AtLeastOnce, ExactlyOnce, AtLeastOnce)
	if c.DeliveryGuarantee == ExactlyOnce && p.Config.Duration(config.CheckpointInterval) <= 0 {
		p.At("delivery-guarantee").Problemf("exactly-once commits PostgreSQL transactions on checkpoints: set %s", config.CheckpointInterval)
	}
	return c, nil
}

// checkDSN checks the shape of a connection string, without naming its password: a
// postgres:// or postgresql:// URL, or key=value pairs (values may be 'quoted'). The server
// and the libpq rules the runtime applies decide the rest.
func checkDSN(dsn string) error {
	const want = "want a PostgreSQL connection string: postgres://user@host:port/db or host=h dbname=db"
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		if _, err := url.Parse(dsn); err != nil {
			return errors.New(want + ": the URL does not parse")
		}
		return nil
	}
	if strings.Contains(dsn, "://") {
		return errors.New(want + ": the URL's scheme is not postgres or postgresql")
	}
	for rest := strings.TrimSpace(dsn); rest != ""; rest = strings.TrimSpace(rest) {
		key, v, ok := strings.Cut(rest, "=")
		key = strings.TrimSpace(key)
		if !ok || key == "" || strings.ContainsAny(key, " \t'") {
			return errors.New(want)
		}
		v = strings.TrimLeft(v, " \t")
		if q, ok := strings.CutPrefix(v, "'"); ok {
			end := -1
			for j := 0; j < len(q); j++ {
				if q[j] == '\\' {
					j++
				} else if q[j] == '\'' {
					end = j
					break
				}
			}
			if end < 0 {
				return errors.New(want + ": a quoted value of " + key + " does not end")
			}
			rest = q[end+1:]
			continue
		}
		if i := strings.IndexAny(v, " \t"); i >= 0 {
			rest = v[i:]
		} else {
			rest = ""
		}
	}
	return nil
}

// DSNHasPassword says the connection string names a password.
func DSNHasPassword(dsn string) bool { return DSNPassword(dsn) != "" }

// DSNPassword is the password a connection string names ("" for none), for redaction. It
// reads the URL form's user info and the key=value form's password, and errs towards
// finding one (a value of a key named password wherever it appears).
func DSNPassword(dsn string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		if u, err := url.Parse(dsn); err == nil {
			if pw, ok := u.User.Password(); ok {
				return pw
			}
			if pw := u.Query().Get("password"); pw != "" {
				return pw
			}
			return ""
		}
		// Unparsable: take what sits between the first ':' after the scheme and the last '@'.
		rest := dsn[strings.Index(dsn, "//")+2:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
				return pw
			}
		}
		return ""
	}
	// key=value form: password=secret or password='se cret'.
	i := strings.Index(dsn, "password")
	for i >= 0 {
		rest := strings.TrimLeft(dsn[i+len("password"):], " \t")
		if v, ok := strings.CutPrefix(rest, "="); ok {
			v = strings.TrimLeft(v, " \t")
			if q, ok := strings.CutPrefix(v, "'"); ok {
				var b strings.Builder
				for j := 0; j < len(q); j++ {
					if q[j] == '\\' && j+1 < len(q) {
						j++
					} else if q[j] == '\'' {
						break
					}
					b.WriteByte(q[j])
				}
				return b.String()
			}
			if end := strings.IndexAny(v, " \t"); end >= 0 {
				v = v[:end]
			}
			return v
		}
		next := strings.Index(dsn[i+1:], "password")
		if next < 0 {
			break
		}
		i += 1 + next
	}
	return ""
}

// TableName splits a table's name into its schema (optional) and table.
func TableName(t string) ([]string, error) {
	parts := strings.Split(t, ".")
	if len(parts) > 2 {
		return nil, errors.New("want table or schema.table (quoted names are not supported)")
	}
	for _, p := range parts {
		if p == "" || strings.ContainsAny(p, "\"\x00") {
			return nil, errors.New("want table or schema.table (quoted names are not supported)")
		}
	}
	return parts, nil
}

// Redactor replaces secrets in text: every error the sink returns passes through it.
type Redactor struct{ secrets []string }

// NewRedactor returns a Redactor of the non-empty secrets (and their URL-escaped forms).
func NewRedactor(secrets ...string) *Redactor {
	r := &Redactor{}
	for _, s := range secrets {
		if s != "" {
			r.secrets = append(r.secrets, s)
			if e := url.QueryEscape(s); e != s {
				r.secrets = append(r.secrets, e)
			}
			if e := url.PathEscape(s); e != s {
				r.secrets = append(r.secrets, e)
			}
		}
	}
	return r
}

// String returns s with every secret replaced by "xxxxx".
func (r *Redactor) String(s string) string {
	for _, sec := range r.secrets {
		s = strings.ReplaceAll(s, sec, "xxxxx")
	}
	return s
}

// Err returns err with the secrets replaced (nil for nil). The result does not wrap err, so
// no caller can print the original's text; it keeps err's message only.
func (r *Redactor) Err(err error) error {
	if err == nil {
		return nil
	}
	return errors.New(r.String(err.Error()))
}

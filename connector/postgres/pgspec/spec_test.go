package pgspec_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/goflink/goflink/connector/postgres/pgspec"
	"github.com/goflink/goflink/job"
	"github.com/goflink/goflink/operator"
)

const head = `name: pg
config:
  execution.checkpointing.interval: 1s
operators:
  - {name: n, type: sequence, from: 1, to: 9}
  - {name: kv, type: map, fields: {k: "string(value % 3)", v: "value"}}
`

func build(spec string) (pgspec.SinkConfig, error) {
	g, err := job.Build(job.Request{Spec: []byte(spec), SpecName: "pg.yaml"}, job.Env{Operators: operator.MustRegistry(pgspec.Type)})
	if err != nil {
		return pgspec.SinkConfig{}, err
	}
	for _, v := range g.GetVertices() {
		for _, op := range v.GetOperators() {
			if op.GetType() == "postgres" {
				var c pgspec.SinkConfig
				err := json.Unmarshal(op.GetConfig(), &c)
				return c, err
			}
		}
	}
	return pgspec.SinkConfig{}, errors.New("no postgres operator")
}

// TestPlanSink: the fields reach the configuration, with the defaults.
func TestPlanSink(t *testing.T) {
	c, err := build(head + `  - {name: out, type: postgres, dsn: "postgres://u@h:5432/db", table: public.t, mode: upsert, key: [k], batch-size: 10, delivery-guarantee: exactly-once, password-env: PGPW}
`)
	if err != nil {
		t.Fatal(err)
	}
	want := pgspec.SinkConfig{DSN: "postgres://u@h:5432/db", PasswordEnv: "PGPW", Table: "public.t", Mode: "upsert",
		Key: []string{"k"}, BatchSize: 10, DeliveryGuarantee: "exactly-once"}
	if c.DSN != want.DSN || c.PasswordEnv != want.PasswordEnv || c.Table != want.Table || c.Mode != want.Mode ||
		!slices.Equal(c.Key, want.Key) || c.BatchSize != want.BatchSize || c.DeliveryGuarantee != want.DeliveryGuarantee {
		t.Errorf("config = %+v, want %+v", c, want)
	}
	c, err = build(head + `  - {name: out, type: postgres, dsn: "host=h dbname=db password='a b'", table: t}
`)
	if err != nil {
		t.Fatal(err)
	}
	if c.Mode != "insert" || c.BatchSize != pgspec.DefaultBatchSize || c.DeliveryGuarantee != "at-least-once" || c.OpField != "" {
		t.Errorf("defaults = %+v", c)
	}
	c, err = build(head + `  - {name: out, type: postgres, host: db.example, port: 6432, database: app, user: writer, password-env: PW, table: t}
`)
	if err != nil {
		t.Fatal(err)
	}
	if want := "host=db.example port=6432 dbname=app user=writer"; c.DSN != want || c.PasswordEnv != "PW" {
		t.Errorf("dsn from its parts = %q (password-env %q), want %q", c.DSN, c.PasswordEnv, want)
	}
	c, err = build(head + `  - {name: out, type: postgres, host: db.example, database: app, table: t}
`)
	if err != nil {
		t.Fatal(err)
	}
	if want := "host=db.example port=5432 dbname=app"; c.DSN != want {
		t.Errorf("dsn from its parts = %q, want %q", c.DSN, want)
	}
	c, err = build(head + `  - {name: ch, type: map, fields: {op: "'delete'", k: "k", v: "v"}}
  - {name: out, type: postgres, dsn: "host=h", table: t, mode: upsert, key: [k], op-field: op}
`)
	if err != nil {
		t.Fatal(err)
	}
	if c.OpField != "op" {
		t.Errorf("op-field = %q, want op", c.OpField)
	}
}

// TestPlanSinkProblems: each bad field is named, and no problem echoes a password.
func TestPlanSinkProblems(t *testing.T) {
	for _, tc := range []struct {
		name, op string
		want     []string
	}{
		{"needs dsn and table", `{name: out, type: postgres}`, []string{`postgres needs the field "dsn"`, `postgres needs the field "table"`}},
		{"bad dsn url", `{name: out, type: postgres, dsn: "mysql://u:hunter2@h/db", table: t}`, []string{`"out".dsn: want a PostgreSQL connection string`}},
		{"bad dsn pairs", `{name: out, type: postgres, dsn: "host=h password='hunter2", table: t}`, []string{`"out".dsn: want a PostgreSQL connection string`, `a quoted value of password does not end`}},
		{"bad table", `{name: out, type: postgres, dsn: "host=h", table: "a.b.c"}`, []string{`"out".table: want table or schema.table`}},
		{"bad mode", `{name: out, type: postgres, dsn: "host=h", table: t, mode: merge}`, []string{`"out".mode: unknown mode "merge" (want insert or upsert)`}},
		{"upsert without key", `{name: out, type: postgres, dsn: "host=h", table: t, mode: upsert}`, []string{`"out".mode: mode: upsert needs the field "key"`}},
		{"key without upsert", `{name: out, type: postgres, dsn: "host=h", table: t, key: [k]}`, []string{`"out".key: only used with mode: upsert`}},
		{"key not a field", `{name: out, type: postgres, dsn: "host=h", table: t, mode: upsert, key: [kk]}`, []string{`no field "kk" in the input`, `did you mean "k"?`}},
		{"bad batch size", `{name: out, type: postgres, dsn: "host=h", table: t, batch-size: 0}`, []string{`"out".batch-size: want a whole number from 1 to 1048576`}},
		{"bad guarantee", `{name: out, type: postgres, dsn: "host=h", table: t, delivery-guarantee: none}`, []string{`"out".delivery-guarantee: unknown delivery guarantee "none" (want exactly-once or at-least-once)`}},
		{"two passwords", `{name: out, type: postgres, dsn: "postgres://u:hunter2@h/db", table: t, password-file: /pw}`, []string{`"out".password-file: the dsn has a password already`}},
		{"file and env", `{name: out, type: postgres, dsn: "host=h", table: t, password-file: /pw, password-env: PW}`, []string{`give only one of password-file, password-env`}},
		{"unknown field", `{name: out, type: postgres, dsn: "host=h", table: t, password: x}`, []string{`unknown field "password" for type postgres`}},
		{"dsn and parts", `{name: out, type: postgres, dsn: "host=h", host: h, table: t}`, []string{`"out".host: give either dsn or host, port, database and user, not both`}},
		{"parts without database", `{name: out, type: postgres, host: h, table: t}`, []string{`postgres needs the field "database"`}},
		{"bad port", `{name: out, type: postgres, host: h, port: 70000, database: d, table: t}`, []string{`"out".port: want a port from 1 to 65535`}},
		{"bad host", `{name: out, type: postgres, host: "h x", database: d, table: t}`, []string{`"out".host: want a name without spaces`}},
		{"op-field without upsert", `{name: out, type: postgres, dsn: "host=h", table: t, op-field: k}`, []string{`"out".op-field: only used with mode: upsert`}},
		{"op-field not a field", `{name: out, type: postgres, dsn: "host=h", table: t, mode: upsert, key: [k], op-field: opp}`, []string{`"out".op-field: no field "opp" in the input`}},
		{"op-field not a string", `{name: out, type: postgres, dsn: "host=h", table: t, mode: upsert, key: [k], op-field: v}`, []string{`"out".op-field: field "v" is int64, want a string`}},
		{"op-field is the key", `{name: out, type: postgres, dsn: "host=h", table: t, mode: upsert, key: [k], op-field: k}`, []string{`"out".op-field: "k" is a key column`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := build(head + "  - " + tc.op + "\n")
			if err == nil {
				t.Fatal("Build succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error:\n%v\nwant it to contain:\n%s", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error names the password:\n%v", err)
			}
		})
	}
}

// TestExactlyOnceNeedsCheckpoints: exactly-once without a checkpoint interval is refused.
func TestExactlyOnceNeedsCheckpoints(t *testing.T) {
	spec := strings.Replace(head, "config:\n  execution.checkpointing.interval: 1s\n", "", 1) +
		`  - {name: out, type: postgres, dsn: "host=h", table: t, delivery-guarantee: exactly-once}` + "\n"
	if _, err := build(spec); err == nil || !strings.Contains(err.Error(), "set execution.checkpointing.interval") {
		t.Errorf("Build: %v, want a problem asking for execution.checkpointing.interval", err)
	}
}

// TestDSNPassword: the password of both forms of connection strings, for redaction.
func TestDSNPassword(t *testing.T) {
	for _, tc := range []struct{ dsn, want string }{
		{"postgres://u:p%40ss@h/db", "p@ss"},
		{"postgres://u@h/db?password=qq", "qq"},
		{"postgresql://u@h/db", ""},
		{"host=h password=secret dbname=d", "secret"},
		{"host=h password = 'a \\'b' dbname=d", "a 'b"},
		{"host=h dbname=d", ""},
	} {
		if got := pgspec.DSNPassword(tc.dsn); got != tc.want {
			t.Errorf("DSNPassword(%q) = %q, want %q", tc.dsn, got, tc.want)
		}
	}
	r := pgspec.NewRedactor("p@ss")
	if got := r.String("postgres://u:p%40ss@h and p@ss"); strings.Contains(got, "ss") {
		t.Errorf("redacted = %q", got)
	}
}

// TestLocalPaths: the password file is a path the processes confine.
func TestLocalPaths(t *testing.T) {
	c := pgspec.SinkConfig{PasswordFile: "/run/pw"}
	if got := c.LocalPaths(); len(got) != 1 || got[0].Path != "/run/pw" || got[0].Field != "password-file" || got[0].Output {
		t.Errorf("LocalPaths = %v", got)
	}
}

package pgspec_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/goflink/goflink/connector/postgres/pgspec"
	"github.com/goflink/goflink/job"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

const cdcHead = `name: cdc
parallelism: 3
config:
  execution.checkpointing.interval: 1s
operators:
`

// buildCDC plans a spec and returns the postgres-cdc operator's configuration, its output
// schema and its vertex.
func buildCDC(spec string) (pgspec.CDCConfig, *record.Schema, *pb.JobVertex, error) {
	g, err := job.Build(job.Request{Spec: []byte(spec), SpecName: "cdc.yaml"}, job.Env{Operators: operator.MustRegistry(pgspec.CDCType)})
	if err != nil {
		return pgspec.CDCConfig{}, nil, nil, err
	}
	for _, v := range g.GetVertices() {
		for _, op := range v.GetOperators() {
			if op.GetType() == "postgres-cdc" {
				var c pgspec.CDCConfig
				if err := json.Unmarshal(op.GetConfig(), &c); err != nil {
					return c, nil, nil, err
				}
				s, err := record.SchemaFromProto(op.GetOutputSchema())
				return c, s, v, err
			}
		}
	}
	return pgspec.CDCConfig{}, nil, nil, errors.New("no postgres-cdc operator")
}

// TestPlanCDC: the fields reach the configuration, the publication defaults to goflink_<slot>,
// the output is op then the declared columns, and the vertex runs in one subtask whatever the
// job's parallelism.
func TestPlanCDC(t *testing.T) {
	c, s, v, err := buildCDC(cdcHead + `  - {name: src, type: postgres-cdc, dsn: "postgres://u@h/db", password-file: /pw, table: public.items, slot: items_1, schema: {id: int64, name: string, price: float64, ok: bool, at: timestamp, raw: bytes}}
  - {name: by-id, type: key-by, key: id}
  - {name: out, type: print}
`)
	if err != nil {
		t.Fatal(err)
	}
	if c.DSN != "postgres://u@h/db" || c.PasswordFile != "/pw" || c.Table != "public.items" || c.Slot != "items_1" || c.Publication != "goflink_items_1" {
		t.Errorf("config = %+v", c)
	}
	if got, want := s.String(), "{op: string, id: int64, name: string, price: float64, ok: bool, at: timestamp, raw: bytes}"; got != want {
		t.Errorf("output schema = %s, want %s", got, want)
	}
	if v.GetParallelism() != 1 || !v.GetFixedParallelism() {
		t.Errorf("vertex parallelism %d (fixed %v), want 1, fixed", v.GetParallelism(), v.GetFixedParallelism())
	}
	if got := c.LocalPaths(); len(got) != 1 || got[0].Field != "password-file" || got[0].Path != "/pw" {
		t.Errorf("LocalPaths = %+v, want the password file", got)
	}
	c, _, _, err = buildCDC(cdcHead + `  - {name: src, type: postgres-cdc, dsn: "host=h dbname=db", table: t, slot: s, publication: mine, schema: {id: int64}}
  - {name: by-id, type: key-by, key: id}
  - {name: out, type: print}
`)
	if err != nil {
		t.Fatal(err)
	}
	if c.Publication != "mine" {
		t.Errorf("publication = %q, want mine", c.Publication)
	}
}

// TestPlanCDCProblems: each bad field is named, and no problem echoes a password.
func TestPlanCDCProblems(t *testing.T) {
	const ok = `dsn: "host=h", table: t, slot: s, schema: {id: int64}`
	long := strings.Repeat("s", 60)
	for _, tc := range []struct {
		name, op string
		want     []string
	}{
		{"needs fields", `{name: src, type: postgres-cdc}`, []string{`postgres-cdc needs the field "dsn"`, `needs the field "table"`, `needs the field "schema"`, `needs the field "slot"`}},
		{"op column", `{name: src, type: postgres-cdc, dsn: "host=h", table: t, slot: s, schema: {op: string, id: int64}}`, []string{`"src".schema.op: "op" is the field the source adds itself`}},
		{"bad type", `{name: src, type: postgres-cdc, dsn: "host=h", table: t, slot: s, schema: {id: int32}}`, []string{`"src".schema.id: unknown type "int32"`}},
		{"map type", `{name: src, type: postgres-cdc, dsn: "host=h", table: t, slot: s, schema: {m: map}}`, []string{`"src".schema.m: postgres-cdc cannot read a column as map`}},
		{"empty schema", `{name: src, type: postgres-cdc, dsn: "host=h", table: t, slot: s, schema: {}}`, []string{`"src".schema: needs at least one field`}},
		{"bad slot", `{name: src, type: postgres-cdc, dsn: "host=h", table: t, slot: My-Slot, schema: {id: int64}}`, []string{`"src".slot: want lower-case letters, digits and underscores, at most 63, got "My-Slot"`}},
		{"long default publication", `{name: src, type: postgres-cdc, dsn: "host=h", table: t, slot: ` + long + `, schema: {id: int64}}`, []string{`"src".slot: the default publication goflink_` + long + ` is longer than 63 characters: set publication`}},
		{"bad publication", `{name: src, type: postgres-cdc, ` + ok + `, publication: "a b"}`, []string{`"src".publication: want lower-case letters`}},
		{"parallelism", `{name: src, type: postgres-cdc, ` + ok + `, parallelism: 2}`, []string{`"src".parallelism: postgres-cdc runs in one subtask: its parallelism is 1, got 2`}},
		{"bad table", `{name: src, type: postgres-cdc, dsn: "host=h", table: "a.b.c", slot: s, schema: {id: int64}}`, []string{`"src".table: want table or schema.table`}},
		{"two passwords", `{name: src, type: postgres-cdc, dsn: "postgres://u:hunter2@h/db", table: t, slot: s, schema: {id: int64}, password-env: PW}`, []string{`"src".password-env: the dsn has a password already`}},
		{"unknown field", `{name: src, type: postgres-cdc, ` + ok + `, mode: upsert}`, []string{`unknown field "mode"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, err := buildCDC(cdcHead + "  - " + tc.op + "\n  - {name: out, type: print}\n")
			if err == nil {
				t.Fatal("built, want problems")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("problems %q\nlack %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("problems %q show the password", err)
			}
		})
	}
}

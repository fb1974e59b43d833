package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"

	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// A new operator type is one definition — name, role, fields, plan, runtime — and one line
// that registers it: this file holds all of "shout", which upper-cases a string field, and
// the test registers it with the cluster's JobManager and TaskManagers (minicluster.Options.Operators), as
// operator/registry.go's builtins table registers the built-in types.
var shout = operator.Define(operator.Type{Name: "shout", Fields: []string{"field"}},
	func(p *operator.Planner) (shoutConfig, *operator.Shape) {
		var c shoutConfig
		if e, ok := p.Require("field"); ok {
			if c.Field, ok = e.String(); ok {
				if f, found := p.FieldNamed(e.Value, c.Field); found && f.Type != record.String && f.Type != record.Invalid {
					e.Problemf("field %q is %v; shout needs a string", c.Field, f.Type)
				}
			}
		}
		return c, p.In
	},
	func(c shoutConfig, in, _ *record.Schema) (any, error) {
		return &shoutOp{field: in.Index(c.Field), row: make(record.Row, in.Len())}, nil
	})

type shoutConfig struct {
	Field string `json:"field"`
}

type shoutOp struct {
	operator.Base
	field int
	row   record.Row
}

func (s *shoutOp) Process(row record.Row) error {
	copy(s.row, row)
	s.row[s.field] = record.StringValue(strings.Map(unicode.ToUpper, row[s.field].Str()))
	return s.Emit(s.row)
}

func TestToyOperatorTypeInOneFile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 1, Slots: 2, Operators: []operator.Type{shout}})
	out := filepath.Join(t.TempDir(), "out")
	spec := `name: toy
operators:
  - {name: n, type: sequence, from: 1, to: 3}
  - {name: words, type: map, fields: {w: "'word' + string(value)"}}
  - {name: loud, type: shout, field: w}
  - {name: out, type: file, path: ` + out + `}
`
	id := submit(t, ctx, cl, spec)
	watchFinished(t, ctx, cl, id, -1)
	files, _ := filepath.Glob(filepath.Join(out, "part-*"))
	var got []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, strings.Fields(string(data))...)
	}
	if strings.Join(got, " ") != `{"w":"WORD1"} {"w":"WORD2"} {"w":"WORD3"}` {
		t.Errorf("output %v, want WORD1..WORD3", got)
	}
	// Its plan runs at submit like a built-in's: a problem names the field and its line.
	_, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(strings.Replace(spec, "field: w", "field: value", 1))})
	if err == nil || !strings.Contains(err.Error(), `line 5: operators[2] "loud".field: no field "value" in the input {w: string}`) {
		t.Errorf("submit with a bad field = %v", err)
	}
}

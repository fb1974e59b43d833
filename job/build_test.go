package job

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// designExample is the odd-even spec exactly as the design documents write it.
const designExample = `name: odd-even
parallelism: 2
config:
  execution.checkpointing.interval: 500ms
operators:
  - {name: numbers, type: sequence, from: 1, to: 1000, rate: 200}
  - {name: parity,  type: map, fields: {parity: "value % 2 == 0 ? 'even' : 'odd'", value: "value"}}
  - {name: by-parity, type: key-by, key: "parity"}
  - {name: sum_odd_even, type: sum, field: value}
  - {name: out, type: file, path: out/odd-even}
`

func build(t *testing.T, spec string) *pb.JobGraph {
	t.Helper()
	g, err := Build(Request{Spec: []byte(spec), SpecName: "test.yaml"}, Env{})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return g
}

func TestDesignExample(t *testing.T) {
	g := build(t, designExample)
	if len(g.Vertices) != 2 {
		t.Fatalf("vertices = %d, want 2 (numbers -> parity, sum_odd_even -> out)", len(g.Vertices))
	}
	if got := g.Vertices[0].Name; got != "numbers -> parity" {
		t.Errorf("vertex 0 = %q", got)
	}
	if got := g.Vertices[1].Name; got != "sum_odd_even -> out" {
		t.Errorf("vertex 1 = %q", got)
	}
	for _, v := range g.Vertices {
		if v.Parallelism != 2 || v.MaxParallelism != 128 {
			t.Errorf("vertex %q parallelism %d max %d, want 2 and 128", v.Name, v.Parallelism, v.MaxParallelism)
		}
	}
	if len(g.Edges) != 1 {
		t.Fatalf("edges = %d, want 1", len(g.Edges))
	}
	e := g.Edges[0]
	if e.Partitioner != pb.Partitioner_PARTITIONER_HASH || e.Key != "parity" || e.KeyType != pb.FieldType_FIELD_TYPE_STRING {
		t.Errorf("edge = %v", e)
	}
	out, err := record.SchemaFromProto(g.Vertices[0].Operators[1].OutputSchema)
	if err != nil || out.String() != "{parity: string, value: int64}" {
		t.Errorf("map output schema = %v, %v", out, err)
	}
	if g.Config[config.CheckpointInterval] != "500 ms" {
		t.Errorf("config = %v", g.Config)
	}
}

func TestPartitionersAndChaining(t *testing.T) {
	g := build(t, `
name: shapes
parallelism: 4
operators:
  - {name: src, type: sequence, from: 0, to: 99}
  - {name: narrow, type: map, parallelism: 2, fields: {v: "value * 2"}}
  - {name: f, type: filter, parallelism: 2, condition: "v > 10"}
  - {name: a, type: print}
  - {name: b, type: discard, parallelism: 2, inputs: f}
`)
	var names []string
	for _, v := range g.Vertices {
		names = append(names, v.Name)
	}
	if strings.Join(names, "|") != "src|narrow -> f|a|b" {
		t.Fatalf("vertices = %q", names)
	}
	want := []pb.Partitioner{pb.Partitioner_PARTITIONER_REBALANCE, pb.Partitioner_PARTITIONER_REBALANCE, pb.Partitioner_PARTITIONER_FORWARD}
	for i, e := range g.Edges {
		if e.Partitioner != want[i] {
			t.Errorf("edge %d %d->%d = %v, want %v", i, e.Source, e.Target, e.Partitioner, want[i])
		}
	}
}

func TestOverridesPrecedence(t *testing.T) {
	defaults := config.New()
	if err := defaults.Set(config.ParallelismDefault, "3"); err != nil {
		t.Fatal(err)
	}
	if err := defaults.Set(config.SlotRequestTimeout, "1 min"); err != nil {
		t.Fatal(err)
	}
	spec := "name: p\nconfig: {slot.request.timeout: 30 s}\noperators:\n  - {name: s, type: sequence, from: 1, to: 2}\n  - {name: o, type: print}\n"
	g, err := Build(Request{Spec: []byte(spec)}, Env{Defaults: defaults})
	if err != nil {
		t.Fatal(err)
	}
	if g.Vertices[0].Parallelism != 3 || g.Config[config.SlotRequestTimeout] != "30 s" {
		t.Errorf("cluster default parallelism / spec config: got p=%d timeout=%q", g.Vertices[0].Parallelism, g.Config[config.SlotRequestTimeout])
	}
	g, err = Build(Request{Spec: []byte(spec), Parallelism: 5, Overrides: map[string]string{config.SlotRequestTimeout: "10 s"}}, Env{Defaults: defaults})
	if err != nil {
		t.Fatal(err)
	}
	if g.Vertices[0].Parallelism != 5 || g.Config[config.SlotRequestTimeout] != "10 s" {
		t.Errorf("flag overrides: got p=%d timeout=%q", g.Vertices[0].Parallelism, g.Config[config.SlotRequestTimeout])
	}
}

func TestInvalidSpecs(t *testing.T) {
	for _, tc := range []struct {
		name, spec string
		want       []string
	}{
		{"unknown operator", `
name: x
operators:
  - {name: n, type: sequence, from: 1, to: 5}
  - {name: m, type: mapp, fields: {a: value}}
  - {name: o, type: print}
`, []string{`line 5: operators[1] "m".type: unknown operator type "mapp"; did you mean "map"?`}},
		{"missing input", `
name: x
operators:
  - {name: numbers, type: sequence, from: 1, to: 5}
  - {name: o, type: print, inputs: [numbrs]}
`, []string{`line 5: operators[1] "o".inputs: missing input: no operator "numbrs"; did you mean "numbers"?`}},
		{"first operator without input", `
name: x
operators:
  - {name: m, type: map, fields: {a: "1"}}
  - {name: o, type: print}
`, []string{`line 4: operators[0] "m": missing input: the first operator must be a source`}},
		{"type error in expression", `
name: x
operators:
  - {name: n, type: sequence, from: 1, to: 5}
  - {name: m, type: map, fields: {p: "value + 'x'"}}
  - {name: f, type: filter, condition: "p * 2"}
  - {name: o, type: print}
`, []string{`line 5: operators[1] "m".fields.p: expression "value + 'x'": invalid operation: + (mismatched types int and string) (column 7)`}},
		{"filter not bool", `
name: x
operators:
  - {name: n, type: sequence, from: 1, to: 5}
  - {name: f, type: filter, condition: "value * 2"}
  - {name: o, type: print}
`, []string{`line 5: operators[1] "f".condition: expression "value * 2": result is int64, want bool`}},
		{"unknown config key", `
name: x
config:
  execution.checkpointing.intervall: 1s
operators:
  - {name: n, type: sequence, from: 1, to: 5}
  - {name: o, type: print}
`, []string{`line 4: config: unknown config key "execution.checkpointing.intervall"; did you mean "execution.checkpointing.interval"?`}},
		{"process key in job", `
name: x
config: {taskmanager.numberOfTaskSlots: 4}
operators:
  - {name: n, type: sequence, from: 1, to: 5}
  - {name: o, type: print}
`, []string{`cannot be set by a job`}},
		{"unknown field", `
name: x
operators:
  - {name: n, type: sequence, from: 1, to: 5, rat: 3}
  - {name: o, type: print}
`, []string{`line 4: operators[0] "n": unknown field "rat" for type sequence; did you mean "rate"?`}},
		{"sum without key-by", `
name: x
operators:
  - {name: n, type: sequence, from: 1, to: 5}
  - {name: s, type: sum, field: value}
  - {name: o, type: print}
`, []string{`sum keeps state per key and needs keyed inputs: put a key-by before it`}},
		{"sum of a string", `
name: x
operators:
  - {name: n, type: sequence, from: 1, to: 5}
  - {name: m, type: map, fields: {s: "'a'"}}
  - {name: k, type: key-by, key: s}
  - {name: s, type: sum, field: s}
  - {name: o, type: print}
`, []string{`field "s" is string; sum needs int64 or float64`}},
		{"duplicate names and no sink", `
name: x
operators:
  - {name: n, type: sequence, from: 1, to: 5}
  - {name: n, type: map, fields: {a: value}}
`, []string{`line 5: operators[1] "n": duplicate operator name (first used on line 4)`}},
		{"dangling output", `
name: x
operators:
  - {name: n, type: sequence, from: 1, to: 5}
  - {name: m, type: map, fields: {a: value}}
  - {name: o, type: print, inputs: n}
`, []string{`operators[1] "m": its output goes nowhere`}},
		{"bad yaml", "name: x\noperators: [\n", []string{"not valid YAML"}},
		{"no name, bad parallelism", `
parallelism: 0
operators:
  - {name: n, type: sequence, from: 5, to: 1}
  - {name: o, type: print}
`, []string{`name: a job needs a name`, `line 2: parallelism: must be between 1 and 32768, got 0`, `line 4: operators[0] "n".to: to (1) is below from (5)`}},
		{"max parallelism below parallelism", `
name: x
parallelism: 8
config: {pipeline.max-parallelism: 4}
operators:
  - {name: n, type: sequence, from: 1, to: 5}
  - {name: o, type: print}
`, []string{`parallelism 8 exceeds max parallelism 4`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Build(Request{Spec: []byte(tc.spec), SpecName: "bad.yaml"}, Env{})
			if err == nil {
				t.Fatalf("Build succeeded: %v", g)
			}
			if !errors.Is(err, ErrInvalidSpec) {
				t.Errorf("error %v is not ErrInvalidSpec", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error:\n%v\nwant it to contain:\n%s", err, w)
				}
			}
		})
	}
}

func TestOverrideErrorsNameTheFlag(t *testing.T) {
	_, err := Build(Request{Spec: []byte(designExample), Overrides: map[string]string{"parallelism.defualt": "2"}}, Env{})
	if err == nil || !strings.Contains(err.Error(), `-D parallelism.defualt: unknown config key "parallelism.defualt"; did you mean "parallelism.default"?`) {
		t.Errorf("Build with bad -D = %v", err)
	}
}

func TestCustomOperator(t *testing.T) {
	type slowConfig struct {
		Delay time.Duration `json:"delay"`
	}
	reg := operator.MustRegistry(operator.Define(operator.Type{Name: "slow-sink", Role: operator.RoleSink, Fields: []string{"delay"}},
		func(p *operator.Planner) (slowConfig, *operator.Shape) {
			var c slowConfig
			if e, ok := p.Require("delay"); ok {
				c.Delay, _ = e.Duration()
			}
			return c, nil
		}, nil))
	spec := "name: c\noperators:\n  - {name: n, type: sequence, from: 1}\n  - {name: s, type: slow-sink, delay: 1ms}\n"
	g, err := Build(Request{Spec: []byte(spec)}, Env{Operators: reg})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(g.Vertices[0].Operators[1].GetConfig()); got != `{"delay":1000000}` {
		t.Errorf("custom configuration = %s", got)
	}
	_, err = Build(Request{Spec: []byte(strings.Replace(spec, ", delay: 1ms", "", 1))}, Env{Operators: reg})
	if err == nil || !strings.Contains(err.Error(), `line 4: operators[1] "s": slow-sink needs the field "delay"`) {
		t.Errorf("custom plan's problem = %v", err)
	}
	_, err = Build(Request{Spec: []byte(strings.Replace(spec, "delay: 1ms", "delay: soon, speed: 2", 1))}, Env{Operators: reg})
	if err == nil || !strings.Contains(err.Error(), `unknown field "speed" for type slow-sink`) || !strings.Contains(err.Error(), `operators[1] "s".delay: `) {
		t.Errorf("custom fields' problems = %v", err)
	}
	if _, err := Build(Request{Spec: []byte(spec)}, Env{}); err == nil || !strings.Contains(err.Error(), `unknown operator type "slow-sink"`) {
		t.Errorf("unregistered custom type = %v", err)
	}
}

// TestWindowBoundsClash checks that a window keyed by a field window_start or window_end
// reports the clash with the bounds it adds (its output schema had two fields of one name,
// reported as "its output schema could not be derived"), that a window-join renames its
// inputs' window_start and window_end, and that the renamed specs build.
func TestWindowBoundsClash(t *testing.T) {
	const head = `
name: x
operators:
  - {name: n, type: sequence, from: 1, to: 50}
  - {name: wm, type: watermark, timestamp: "value * 100"}
  - {name: k, type: key-by, key: "value % 3"}
  - {name: counts, type: window, size: 1s, aggregates: {n: "count()"}}
`
	for _, tc := range []struct {
		name, ops string
		want      []string
	}{
		{"window keyed by window_end", `
  - {name: by-end, type: key-by, key: window_end}
  - {name: top, type: window, size: 1s, aggregates: {hi: "max(n)"}}
  - {name: o, type: print}
`, []string{
			`line 10: operators[5] "top": the key field "window_end" clashes with the window's own window_end: key by a field of another name (rename it with a map before the key-by)`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := specProblems(t, head+tc.ops, Env{}); !slices.Equal(got, tc.want) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
	// A window-join of two window outputs read as they are: their bounds are renamed.
	g := build(t, head+`
  - {name: left, type: key-by, key: key}
  - {name: m, type: map, inputs: [counts], fields: {key: key, window_start: window_start, window_end: window_end, total: n}}
  - {name: right, type: key-by, key: key}
  - {name: j, type: window-join, inputs: [left, right], size: 1s}
  - {name: o, type: print}
`)
	var got []string
	for _, v := range g.GetVertices() {
		for _, op := range v.GetOperators() {
			if op.GetName() == "j" {
				out, err := record.SchemaFromProto(op.GetOutputSchema())
				if err != nil {
					t.Fatal(err)
				}
				for i := range out.Len() {
					got = append(got, out.Field(i).Name)
				}
			}
		}
	}
	want := []string{"key", "left_window_start", "left_window_end", "n", "right_key", "right_window_start", "right_window_end", "total", "window_start", "window_end"}
	if !slices.Equal(got, want) {
		t.Errorf("window-join of two window outputs has fields %v, want %v", got, want)
	}
	build(t, head+`
  - {name: ends, type: map, fields: {wend: window_end, n: n}}
  - {name: by-end, type: key-by, key: wend}
  - {name: top, type: window, size: 1s, aggregates: {hi: "max(n)"}}
  - {name: left, type: key-by, inputs: [ends], key: wend}
  - {name: tops, type: map, inputs: [top], fields: {wend: wend, hi: hi}}
  - {name: right, type: key-by, key: wend}
  - {name: j, type: window-join, inputs: [left, right], size: 1s}
  - {name: o, type: print}
`)
}

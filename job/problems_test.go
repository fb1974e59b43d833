package job

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/goflink/goflink/connector/kafka/kafkaspec"
	"github.com/goflink/goflink/operator"
)

// specProblems builds an invalid spec and returns its problems as printed.
func specProblems(t *testing.T, spec string, env Env) []string {
	t.Helper()
	g, err := Build(Request{Spec: []byte(spec), SpecName: "bad.yaml"}, env)
	var se *SpecError
	if !errors.As(err, &se) {
		t.Fatalf("Build = %v, %v; want a *SpecError", g, err)
	}
	out := make([]string, len(se.Problems))
	for i, p := range se.Problems {
		out[i] = p.String()
	}
	return out
}

// TestEveryProblemReported checks that a broken operator does not hide the problems of the
// operators reading from it, and that what is only its consequence is not reported.
func TestEveryProblemReported(t *testing.T) {
	const knownTypes = "sequence, map, filter, key-by, watermark, window, window-all, window-join, interval-join, sum, count, reduce, fail, throttle, print, file, discard, kafka"
	needsX := operator.MustRegistry(kafkaspec.Type, operator.Define(operator.Type{Name: "needs-x"},
		func(p *operator.Planner) (struct{}, *operator.Shape) {
			if p.In.Lacks("x") {
				p.Problemf("needs-x reads a field x")
			}
			return struct{}{}, p.In
		}, nil))
	for _, tc := range []struct {
		name string
		spec string
		env  Env
		want []string
	}{
		{"two broken operators in a row", `
name: x
operators:
  - {name: n, type: sequence, from: 5, to: 1}
  - {name: k, type: key-by, key: value}
  - {name: s, type: sum, field: vlaue}
  - {name: o, type: print}
`, Env{}, []string{
			`line 4: operators[0] "n".to: to (1) is below from (5)`,
			`line 6: operators[2] "s".field: no field "vlaue" in the input {value: int64}; did you mean "value"?`,
		}},
		{"three broken operators and a broken sink", `
name: x
operators:
  - {name: n, type: sequence, from: 1, rate: -3}
  - {name: m, type: map, fields: {v: "value +", w: "value"}}
  - {name: f, type: filter, condition: "w > 'a'"}
  - {name: o, type: file, path: out, format: csv}
`, Env{}, []string{
			`line 4: operators[0] "n".rate: must not be negative, got -3`,
			`line 5: operators[1] "m".fields.v: expression "value +": unexpected token EOF (column 7)`,
			`line 6: operators[2] "f".condition: expression "w > 'a'": invalid operation: > (mismatched types int and string) (column 3)`,
			`line 7: operators[3] "o".format: unknown format "csv" (the file sink writes json)`,
		}},
		{"throttle without a positive rate", `
name: x
operators:
  - {name: n, type: sequence, from: 1, to: 5}
  - {name: t, type: throttle}
  - {name: u, type: throttle, rate: 0}
  - {name: f, type: filter, condition: "value > 2"}
  - {name: o, type: print}
`, Env{}, []string{
			`line 5: operators[1] "t": throttle needs the field "rate"`,
			`line 6: operators[2] "u".rate: must be positive (records per second), got 0`,
		}},
		{"broken operator and a broken reader", `
name: x
operators:
  - {name: n, type: sequence, from: 1, to: 5}
  - {name: f, type: filter, condition: "value * 2"}
  - {name: m, type: map, fields: {v: "valeu * 2"}}
  - {name: o, type: print}
`, Env{}, []string{
			`line 5: operators[1] "f".condition: expression "value * 2": result is int64, want bool`,
			`line 6: operators[2] "m".fields.v: expression "valeu * 2": unknown name valeu (fields: value); did you mean "value"? (column 1)`,
		}},
		{"broken map and healthy readers of its fields", `
name: x
operators:
  - {name: n, type: sequence, from: 1, to: 5}
  - {name: m, type: map, fields: {p: "valeu % 2 == 0", v: "value"}}
  - {name: f, type: filter, condition: "p && v > 2"}
  - {name: k, type: key-by, key: p}
  - {name: c, type: count}
  - {name: o, type: print}
  - {name: s, type: sum, inputs: k, field: v}
  - {name: o2, type: discard}
`, Env{}, []string{
			`line 5: operators[1] "m".fields.p: expression "valeu % 2 == 0": unknown name valeu (fields: value); did you mean "value"? (column 1)`,
		}},
		{"broken map and a typo in a reader", `
name: x
operators:
  - {name: n, type: sequence, from: 1, to: 5}
  - {name: m, type: map, fields: {p: "value +", v: "value"}}
  - {name: f, type: filter, condition: "vv > 2"}
  - {name: o, type: print}
`, Env{}, []string{
			`line 5: operators[1] "m".fields.p: expression "value +": unexpected token EOF (column 7)`,
			`line 6: operators[2] "f".condition: expression "vv > 2": unknown name vv (fields: p, v); did you mean "v"? (column 1)`,
		}},
		{"unknown type and readers of what it would emit", `
name: x
operators:
  - {name: n, type: sequence, from: 1, to: 5}
  - {name: m, type: mapp, fields: {v: "value * 2"}}
  - {name: f, type: filter, condition: "v > 2"}
  - {name: o, type: print}
`, Env{}, []string{
			`line 5: operators[1] "m".type: unknown operator type "mapp"; did you mean "map"? (known: ` + knownTypes + `)`,
		}},
		{"map fields not a map and their readers", `
name: x
operators:
  - {name: n, type: sequence, from: 1, to: 5}
  - {name: m, type: map, fields: "value * 2", parallelism: 0}
  - {name: f, type: filter, condition: "doubled > 2", bogus: 1}
  - {name: o, type: print, inputs: [f, f]}
`, Env{}, []string{
			`line 5: operators[1] "m".fields: want a map, got "value * 2"`,
			`line 5: operators[1] "m".parallelism: must be between 1 and 32768, got 0`,
			`line 6: operators[2] "f": unknown field "bogus" for type filter`,
			`line 7: operators[3] "o".inputs: input "f" is listed twice`,
		}},
		{"inputs of a broken and a healthy map that differ", `
name: x
operators:
  - {name: n, type: sequence, from: 1, to: 5}
  - {name: a, type: map, fields: {v: "valeu"}}
  - {name: b, type: map, inputs: n, fields: {w: "value"}}
  - {name: o, type: print, inputs: [a, b]}
`, Env{}, []string{
			`line 5: operators[1] "a".fields.v: expression "valeu": unknown name valeu (fields: value); did you mean "value"? (column 1)`,
			`line 7: operators[3] "o".inputs: inputs must have the same fields: "a" has {v: unknown}, "b" has {w: int64}`,
		}},
		{"inputs of a broken and a healthy map that agree", `
name: x
operators:
  - {name: n, type: sequence, from: 1, to: 5}
  - {name: a, type: map, fields: {v: "valeu"}}
  - {name: b, type: map, inputs: n, fields: {v: "value"}}
  - {name: f, type: filter, inputs: [a, b], condition: "v"}
  - {name: o, type: print}
`, Env{}, []string{
			`line 5: operators[1] "a".fields.v: expression "valeu": unknown name valeu (fields: value); did you mean "value"? (column 1)`,
			`line 7: operators[3] "f".condition: expression "v": result is int64, want bool`,
		}},
		{"keyed chain with a broken key-by and a broken sum", `
name: x
operators:
  - {name: n, type: sequence, from: 1, to: 5}
  - {name: k, type: key-by, key: "valeu % 3", parallelism: 2}
  - {name: s, type: sum, field: count}
  - {name: o, type: print}
`, Env{}, []string{
			`line 5: operators[1] "k".key: expression "valeu % 3": unknown name valeu (fields: value); did you mean "value"? (column 1)`,
			`line 5: operators[1] "k".parallelism: key-by only routes records and has no parallelism of its own`,
			`line 6: operators[2] "s".field: no field "count" in the input {value: int64}`,
		}},
		{"keyed chain behind a broken map", `
name: x
operators:
  - {name: n, type: sequence, from: 1, to: 5}
  - {name: m, type: map, fields: {k: "value % 3", v: "valeu"}}
  - {name: by, type: key-by, key: k}
  - {name: r, type: reduce, fields: {v: "max(acc.v, v)", w: "1"}}
  - {name: s, type: sum, field: v}
  - {name: o, type: print}
`, Env{}, []string{
			`line 5: operators[1] "m".fields.v: expression "valeu": unknown name valeu (fields: value); did you mean "value"? (column 1)`,
			`line 7: operators[3] "r".fields.w: no field "w" in the input {k: int64, v: unknown}`,
			`line 8: operators[4] "s".inputs: sum keeps state per key and needs keyed inputs: put a key-by before it`,
		}},
		{"keyed inputs, one with a broken key", `
name: x
operators:
  - {name: n, type: sequence, from: 1, to: 5}
  - {name: k1, type: key-by, key: "valeu"}
  - {name: k2, type: key-by, inputs: n, key: "value"}
  - {name: s, type: sum, inputs: [k1, k2], field: value}
  - {name: o, type: print}
`, Env{}, []string{
			`line 5: operators[1] "k1".key: expression "valeu": unknown name valeu (fields: value); did you mean "value"? (column 1)`,
		}},
		{"keyed operator behind an unknown type", `
name: x
operators:
  - {name: n, type: sequence, from: 1, to: 5}
  - {name: k, type: keyby, key: value}
  - {name: s, type: sum, field: value}
  - {name: o, type: print}
`, Env{}, []string{
			`line 5: operators[1] "k".type: unknown operator type "keyby"; did you mean "key-by"? (known: ` + knownTypes + `)`,
		}},
		{"sinks reading a broken operator", `
name: x
operators:
  - {name: n, type: sequence, from: 1, to: 5}
  - {name: m, type: map, fields: {k: "valeu"}}
  - {name: f, type: file}
  - {name: out, type: kafka, inputs: m, brokers: "k:9092", key: "k + 1", headers: "kk"}
  - {name: p, type: print, inputs: m}
`, Env{}, []string{
			`line 5: operators[1] "m".fields.k: expression "valeu": unknown name valeu (fields: value); did you mean "value"? (column 1)`,
			`line 6: operators[2] "f": file needs the field "path"`,
			`line 7: operators[3] "out": kafka needs the field "topic"`,
			`line 7: operators[3] "out".headers: expression "kk": unknown name kk (fields: k); did you mean "k"? (column 1)`,
		}},
		{"missing input", `
name: x
operators:
  - {name: numbers, type: sequence, from: 1, to: 5}
  - {name: o, type: print, inputs: [numbrs]}
`, Env{}, []string{
			`line 5: operators[1] "o".inputs: missing input: no operator "numbrs"; did you mean "numbers"?`,
		}},
		{"first operator not a source and its reader", `
name: x
operators:
  - {name: m, type: map, fields: {a: "1"}}
  - {name: f, type: filter, condition: "a"}
  - {name: o, type: print}
`, Env{}, []string{
			`line 4: operators[0] "m": missing input: the first operator must be a source, or name its inputs`,
			`line 5: operators[1] "f".condition: expression "a": result is int64, want bool`,
		}},
		{"names wrong and fields wrong", `
name: x
operators:
  - {name: n, type: sequence, from: 1, to: 5}
  - {name: n, type: filter, condition: "valeu > 1"}
  - {type: print}
`, Env{}, []string{
			`line 5: operators[1] "n": duplicate operator name (first used on line 4)`,
			`line 5: operators[1] "n".condition: expression "valeu > 1": unknown name valeu (fields: value); did you mean "value"? (column 1)`,
			`line 6: operators[2]: an operator needs a name`,
		}},
		{"common fields of the wrong kind, each reported once", `
name: [x]
operators:
  - {name: [n], type: sequence, from: 1, to: 5}
  - {name: f, type: [filter], condition: "value > 1"}
  - {name: o, type: print, inputs: {a: b}}
`, Env{}, []string{
			`line 2: name: want a text value, got a list`,
			`line 4: operators[0].name: want a text value, got a list`,
			`line 5: operators[1] "f".type: want a text value, got a list`,
			`line 6: operators[2] "o".inputs: want a name or a list of names, got a map`,
		}},
		{"kafka fields that depend on a bad choice", `
name: x
operators:
  - {name: in, type: kafka, brokers: "k:9092", topic: t, format: jsn, schema: {a: int64}, start: latst, start-timestamp: 5}
  - {name: out, type: kafka, brokers: "k:9092", topic: t, format: rw, value: "key", delivery-guarantee: exactly, transaction-timeout: 1s}
`, Env{}, []string{
			`line 4: operators[0] "in".start: unknown start "latst" (want earliest, latest, committed or timestamp)`,
			`line 4: operators[0] "in".format: unknown format "jsn" (want raw or json)`,
			`line 5: operators[1] "out".format: unknown format "rw" (want json or raw)`,
			`line 5: operators[1] "out".delivery-guarantee: unknown delivery guarantee "exactly" (want exactly-once, at-least-once or none)`,
		}},
		{"kafka source with a bad declared type", `
name: x
operators:
  - {name: in, type: kafka, brokers: "k:9092", topic: t, format: json, schema: {id: int64, name: strin}}
  - {name: f, type: filter, condition: "name != '' && nmea != ''"}
  - {name: o, type: print}
`, Env{}, []string{
			`line 4: operators[0] "in".schema.name: unknown type "strin" (want one of int64, float64, string, bool, bytes, timestamp, map)`,
			`line 5: operators[1] "f".condition: expression "name != '' && nmea != ''": unknown name nmea (fields: id, name, topic, partition, offset, timestamp, headers); did you mean "name"? (column 15)`,
		}},
		{"custom operator behind a broken map", `
name: x
operators:
  - {name: n, type: sequence, from: 1, to: 5}
  - {name: m, type: map, fields: {x: "valeu"}}
  - {name: c, type: needs-x}
  - {name: o, type: print}
`, Env{Operators: needsX}, []string{
			`line 5: operators[1] "m".fields.x: expression "valeu": unknown name valeu (fields: value); did you mean "value"? (column 1)`,
		}},
		{"max parallelism and a broken operator", `
name: x
parallelism: 8
config: {pipeline.max-parallelism: 4}
operators:
  - {name: n, type: sequence, from: 1, to: 5}
  - {name: m, type: map, fields: {v: "valeu"}}
  - {name: o, type: print}
`, Env{}, []string{
			`line 6: operators[0] "n": parallelism 8 exceeds max parallelism 4 (pipeline.max-parallelism)`,
			`line 7: operators[1] "m".fields.v: expression "valeu": unknown name valeu (fields: value); did you mean "value"? (column 1)`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env.Operators == nil {
				tc.env.Operators = operator.MustRegistry(kafkaspec.Type)
			}
			got := specProblems(t, tc.spec, tc.env)
			want := slices.Sorted(slices.Values(tc.want))
			if !slices.Equal(slices.Sorted(slices.Values(got)), want) {
				t.Errorf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
		})
	}
}

// TestSpecErrorListsEveryProblem pins the printed form flinkctl shows: the count, then one
// problem a line, by line number.
func TestSpecErrorListsEveryProblem(t *testing.T) {
	spec := `name: x
operators:
  - {name: n, type: sequence, from: 1, to: 5}
  - {name: f, type: filter, condition: "value * 2"}
  - {name: m, type: map, fields: {v: "valeu * 2"}}
  - {name: o, type: print}
`
	_, err := Build(Request{Spec: []byte(spec), SpecName: "job.yaml"}, Env{})
	if !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("Build = %v, want ErrInvalidSpec", err)
	}
	want := `invalid job.yaml (2 problems):
  line 4: operators[1] "f".condition: expression "value * 2": result is int64, want bool
  line 5: operators[2] "m".fields.v: expression "valeu * 2": unknown name valeu (fields: value); did you mean "value"? (column 1)`
	if err.Error() != want {
		t.Errorf("error:\n%s\nwant:\n%s", err, want)
	}
}

// TestFileSinkS3Path: a file sink's s3:// path is checked at plan time (bucket, prefix),
// with the problem on field path.
func TestFileSinkS3Path(t *testing.T) {
	spec := func(path string) string {
		return "name: x\noperators:\n  - {name: n, type: sequence, from: 1, to: 5}\n  - {name: o, type: file, path: \"" + path + "\"}\n"
	}
	for path, want := range map[string]string{
		"s3://":            `line 4: operators[1] "o".path: storage: location "s3://" names no bucket (s3://bucket/prefix)`,
		"s3:///prefix":     `line 4: operators[1] "o".path: storage: location "s3:///prefix" names no bucket (s3://bucket/prefix)`,
		"s3://b/a/../../x": `line 4: operators[1] "o".path: storage: location "s3://b/a/../../x": invalid prefix "a/../../x"`,
	} {
		if got := specProblems(t, spec(path), Env{}); !slices.Equal(got, []string{want}) {
			t.Errorf("path %q: problems %q, want %q", path, got, want)
		}
	}
	if _, err := Build(Request{Spec: []byte(spec("s3://bucket/out/x")), SpecName: "ok.yaml"}, Env{}); err != nil {
		t.Errorf("path s3://bucket/out/x: %v", err)
	}
}

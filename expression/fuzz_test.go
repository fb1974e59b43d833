package expression

import (
	"math"
	"testing"
	"time"

	"github.com/goflink/goflink/record"
)

// fuzzSchema has a field of every type, so that fuzzed expressions can reach every operator.
var fuzzSchema = record.MustSchema(
	record.Field{Name: "value", Type: record.Int64},
	record.Field{Name: "price", Type: record.Float64},
	record.Field{Name: "parity", Type: record.String},
	record.Field{Name: "ok", Type: record.Bool},
	record.Field{Name: "raw", Type: record.Bytes},
	record.Field{Name: "ts", Type: record.Timestamp},
	record.Field{Name: "headers", Type: record.Map},
)

// fuzzRow and fuzzAcc are the fixed rows fuzzed expressions are evaluated against.
var (
	fuzzRow = record.Row{
		record.IntValue(7), record.FloatValue(2.5), record.StringValue("odd"), record.BoolValue(true),
		record.BytesValue([]byte{0, 1, 0xff}), record.TimeValue(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)),
		record.MapValue(map[string]string{"k": "v", "trace": "abc"}),
	}
	fuzzAcc = record.Row{
		record.IntValue(-3), record.FloatValue(math.NaN()), record.StringValue(""), record.BoolValue(false),
		record.BytesValue(nil), record.TimeValue(time.Unix(0, 0)), record.Value{},
	}
)

// FuzzCompile compiles arbitrary expression text (a job spec is user input) against a schema
// of every type, with and without acc, checks it as the job builder does, and evaluates what
// compiles, natively and on the VM. It must never panic (a runtime failure is an error), Check
// must agree with Compile, and the native closures must give what the VM gives.
func FuzzCompile(f *testing.F) {
	for _, src := range []string{
		"value % 2 == 0 ? 'even' : 'odd'", "value * 3 - 1", "value / 0", "value % 0", "price ** 2",
		"parity + '-' + parity", "upper(parity)", "len(parity) > 2 && ok", "value in [1, 2, 3]",
		"headers['k']", "headers.trace ?? 'none'", "ts", "raw", "ts.Unix()",
		"int(price * 3.5) + value", "float(value) / 3", "string(value) + parity", "acc.value + value",
		"max(acc.value, value)", "acc.parity + parity", "let x = value; x * x", "filter([1, 2, 3], # > value)",
		"map(1..3, # * value)", "toJSON(headers)", "keys(headers)", "date('2026-01-02')",
		"duration('1s')", "ts + duration('1h')", "trim('  a ')", "parity matches '^o'",
		"-value", "!ok", "value == price", "parity < 'p'", "ok ? price : -price",
	} {
		f.Add(src)
	}

	f.Fuzz(func(t *testing.T, src string) {
		for _, opts := range []Options{{}, {Acc: true}} {
			p, err := Compile(src, fuzzSchema, opts)
			typ, checkErr := Check(src, fieldList(fuzzSchema.Fields()), false, opts)
			if errString(checkErr) != errString(err) || (err == nil && typ != p.Type()) {
				t.Fatalf("%q %+v: Check = %v, %v; Compile = %v", src, opts, typ, checkErr, describeProgram(p, err))
			}
			if err != nil {
				continue
			}
			var acc record.Row
			if opts.Acc {
				acc = fuzzAcc
			}
			a, errA := p.NewEvaluator().Eval(fuzzRow, acc)
			if !opts.Acc {
				c, errC := p.NewSelector().Eval(fuzzRow)
				same := c == a || (p.Type() == record.Float64 && math.IsNaN(a.Float()) && math.IsNaN(c.Float()))
				if (errA == nil) != (errC == nil) || errA == nil && !same {
					t.Fatalf("%q: selector %s (%v), evaluator %s (%v)", src, c.Format(p.Type()), errC, a.Format(p.Type()), errA)
				}
			}
			if !p.Native() {
				continue
			}
			vmp := *p
			vmp.fast = nil
			b, errB := vmp.NewEvaluator().Eval(fuzzRow, acc)
			if (errA == nil) != (errB == nil) {
				t.Fatalf("%q %+v: native err %v, vm err %v", src, opts, errA, errB)
			}
			same := a == b || (p.Type() == record.Float64 && math.IsNaN(a.Float()) && math.IsNaN(b.Float()))
			if errA == nil && !same {
				t.Fatalf("%q %+v: native %s, vm %s", src, opts, a.Format(p.Type()), b.Format(p.Type()))
			}
		}
	})
}

package expression

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/goflink/goflink/record"
)

var testSchema = record.MustSchema(
	record.Field{Name: "value", Type: record.Int64},
	record.Field{Name: "price", Type: record.Float64},
	record.Field{Name: "parity", Type: record.String},
	record.Field{Name: "ok", Type: record.Bool},
	record.Field{Name: "count", Type: record.Int64},
)

func row(v int64, price float64, parity string, ok bool, count int64) record.Row {
	return record.Row{record.IntValue(v), record.FloatValue(price), record.StringValue(parity), record.BoolValue(ok), record.IntValue(count)}
}

func TestCompileTypes(t *testing.T) {
	for _, tc := range []struct {
		src    string
		want   record.Type
		native bool
	}{
		{"value % 2 == 0 ? 'even' : 'odd'", record.String, true},
		{"value * 2 + 1", record.Int64, true},
		{"value / 2", record.Float64, true},
		{"price > 1.5 && ok", record.Bool, true},
		{"count + 1", record.Int64, true},
		{"parity + '-' + parity", record.String, true},
		{"upper(parity)", record.String, false},
		{"len(parity)", record.Int64, false},
		{"value in [1, 2, 3]", record.Bool, false},
	} {
		p, err := Compile(tc.src, testSchema, Options{})
		if err != nil {
			t.Errorf("Compile(%q): %v", tc.src, err)
			continue
		}
		if p.Type() != tc.want || p.Native() != tc.native {
			t.Errorf("Compile(%q) = type %v native %v, want %v native %v", tc.src, p.Type(), p.Native(), tc.want, tc.native)
		}
	}
}

func TestCompileErrors(t *testing.T) {
	for _, tc := range []struct {
		src  string
		opts Options
		want string
	}{
		{"valeu + 1", Options{}, `unknown name valeu (fields: value, price, parity, ok, count); did you mean "value"? (column 1)`},
		{"parity * 2", Options{}, "invalid operation"},
		{"value + 1", Options{Want: record.Bool}, "result is int64, want bool"},
		{"", Options{}, "expression is empty"},
		{"nil", Options{}, "is not a record type"},
		{"value +", Options{}, "unexpected token"},
		{"acc.value", Options{}, "unknown name acc"},
		// expr's compiler panics on a pointer it does not know and reports the panic with a
		// Go stack trace; the error keeps the message only.
		{"map(1..3, #x % nosuch)", Options{}, "unknown pointer #x: in a predicate # is the element, #index its index and #acc the accumulator of reduce"},
	} {
		_, err := Compile(tc.src, testSchema, tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Compile(%q) error = %v, want it to contain %q", tc.src, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "goroutine") {
			t.Errorf("Compile(%q) error carries a stack trace: %v", tc.src, err)
		}
	}
}

func TestEvalRuntimeError(t *testing.T) {
	for _, src := range []string{"value % count", "value % (count * 1) + len(parity)"} {
		p, err := Compile(src, testSchema, Options{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.NewEvaluator().Eval(row(5, 0, "x", false, 0), nil)
		if err == nil || !strings.Contains(err.Error(), "divide by zero") {
			t.Errorf("Eval(%q) with count=0 = %v, want divide by zero error", src, err)
		}
	}
}

func TestReduceAcc(t *testing.T) {
	p, err := Compile("max(acc.value, value)", testSchema, Options{Acc: true})
	if err != nil {
		t.Fatal(err)
	}
	q, err := Compile("acc.value + value", testSchema, Options{Acc: true})
	if err != nil {
		t.Fatal(err)
	}
	if !q.Native() {
		t.Errorf("acc.value + value is not native")
	}
	for _, prog := range []*Program{p, q} {
		e := prog.NewEvaluator()
		got, err := e.Eval(row(3, 0, "", false, 0), row(10, 0, "", false, 0))
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int64{p.Source(): 10, q.Source(): 13}[prog.Source()]
		if got.Int() != want {
			t.Errorf("Eval(%q) = %d, want %d", prog.Source(), got.Int(), want)
		}
		if got, _ := e.Eval(row(3, 0, "", false, 0), nil); got.Int() != 3 {
			t.Errorf("Eval(%q) with nil acc = %d, want 3", prog.Source(), got.Int())
		}
	}
}

// TestNativeMatchesVM evaluates every native expression both ways on random rows.
func TestNativeMatchesVM(t *testing.T) {
	exprs := []string{
		"value % 2 == 0 ? 'even' : 'odd'", "value * 3 - count", "-value + 7", "value / 3", "value / 0",
		"price * value", "price / 2 + value", "value ** 2", "value == price", "value != count",
		"value < count", "value >= price", "parity == 'a'", "parity < 'b'", "parity + 'x'",
		"ok == true", "!ok || value > 3", "not ok and price <= 0.5", "ok ? price : -price",
		"value % 7 == 3 ? count : value", "(value + count) % 5", "ok != (value > 0)",
		"int(value / 10)", "int(price * 3.5) + value", "int(value)", "int(-price)",
	}
	r := rand.New(rand.NewPCG(1, 2))
	parities := []string{"a", "b", "c", ""}
	for _, src := range exprs {
		p, err := Compile(src, testSchema, Options{})
		if err != nil {
			t.Fatalf("Compile(%q): %v", src, err)
		}
		if !p.Native() {
			t.Errorf("%q is not native", src)
			continue
		}
		vmp := *p
		vmp.fast = nil
		fast, slow := p.NewEvaluator(), vmp.NewEvaluator()
		for range 200 {
			in := row(r.Int64N(2001)-1000, math.Round(r.Float64()*100-50)/4, parities[r.IntN(len(parities))], r.IntN(2) == 0, r.Int64N(21)-10)
			a, errA := fast.Eval(in, nil)
			b, errB := slow.Eval(in, nil)
			if (errA == nil) != (errB == nil) {
				t.Fatalf("%q on %v: native err %v, vm err %v", src, in, errA, errB)
			}
			same := a == b || (p.Type() == record.Float64 && math.IsNaN(a.Float()) && math.IsNaN(b.Float()))
			if !same {
				t.Fatalf("%q on %v: native %s, vm %s", src, in, a.Format(p.Type()), b.Format(p.Type()))
			}
		}
	}
}

// A timestamp or bytes field read as it is runs natively and gives what the VM gives.
func TestNativeFieldOfEveryType(t *testing.T) {
	s := record.MustSchema(record.Field{Name: "ts", Type: record.Timestamp}, record.Field{Name: "raw", Type: record.Bytes})
	in := record.Row{record.TimeValue(time.UnixMilli(-1234567).UTC()), record.BytesValue([]byte{0, 1, 255})}
	for _, src := range []string{"ts", "raw"} {
		p, err := Compile(src, s, Options{})
		if err != nil {
			t.Fatalf("Compile(%q): %v", src, err)
		}
		if !p.Native() {
			t.Errorf("%q is not native", src)
		}
		vmp := *p
		vmp.fast = nil
		a, errA := p.NewEvaluator().Eval(in, nil)
		b, errB := vmp.NewEvaluator().Eval(in, nil)
		if errA != nil || errB != nil || a != b {
			t.Errorf("%q: native %v (%v), vm %v (%v)", src, a, errA, b, errB)
		}
	}
}

func BenchmarkEval(b *testing.B) {
	for _, src := range []string{"value % 1024", "value % 2 == 0 ? 'even' : 'odd'"} {
		p, err := Compile(src, testSchema, Options{})
		if err != nil {
			b.Fatal(err)
		}
		vmp := *p
		vmp.fast = nil
		for name, prog := range map[string]*Program{"native": p, "vm": &vmp} {
			b.Run(name+"/"+src, func(b *testing.B) {
				e := prog.NewEvaluator()
				in := row(0, 1, "x", true, 1)
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					in[0] = record.IntValue(int64(i))
					if _, err := e.Eval(in, nil); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

var mapSchema = record.MustSchema(
	record.Field{Name: "headers", Type: record.Map},
	record.Field{Name: "name", Type: record.String},
)

// Map fields (Kafka headers) index by key natively and on the VM alike; a missing key is "".
func TestMapFields(t *testing.T) {
	rows := []record.Row{
		{record.MapValue(map[string]string{"trace": "t-1", "tenant": "acme"}), record.StringValue("x")},
		{record.MapValue(map[string]string{"tenant": ""}), record.StringValue("y")},
		{record.Value{}, record.StringValue("z")},
	}
	for _, tc := range []struct {
		src    string
		want   []string // Format of the result per row
		typ    record.Type
		native bool
	}{
		{`headers["trace"]`, []string{"t-1", "", ""}, record.String, true},
		{`headers.tenant + "/" + name`, []string{"acme/x", "/y", "/z"}, record.String, true},
		{`"tenant" in headers`, []string{"true", "true", "false"}, record.Bool, false},
		{`len(headers)`, []string{"2", "1", "0"}, record.Int64, false},
		{`headers`, []string{`{"tenant":"acme","trace":"t-1"}`, `{"tenant":""}`, `{}`}, record.Map, true},
	} {
		p, err := Compile(tc.src, mapSchema, Options{})
		if err != nil {
			t.Fatalf("Compile(%q): %v", tc.src, err)
		}
		if p.Type() != tc.typ || p.Native() != tc.native {
			t.Errorf("Compile(%q) = type %v native %v, want %v native %v", tc.src, p.Type(), p.Native(), tc.typ, tc.native)
		}
		vmp := *p
		vmp.fast = nil
		for _, prog := range []*Program{p, &vmp} {
			e := prog.NewEvaluator()
			for i, in := range rows {
				v, err := e.Eval(in, nil)
				if err != nil {
					t.Fatalf("%q on row %d: %v", tc.src, i, err)
				}
				if got := v.Format(p.Type()); got != tc.want[i] {
					t.Errorf("%q on row %d (native %v) = %s, want %s", tc.src, i, prog.Native(), got, tc.want[i])
				}
			}
		}
	}
	if _, err := Compile(`{"a": name}`, mapSchema, Options{}); err == nil || !strings.Contains(err.Error(), "not a record type") {
		t.Errorf("a map literal of any values compiled: %v", err)
	}
}

package window

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/goflink/goflink/record"
)

var inSchema = record.MustSchema(
	record.Field{Name: "i", Type: record.Int64},
	record.Field{Name: "f", Type: record.Float64},
	record.Field{Name: "s", Type: record.String},
	record.Field{Name: "t", Type: record.Timestamp},
	record.Field{Name: "b", Type: record.Bool},
	record.Field{Name: "m", Type: record.Map},
)

func lookup(s *record.Schema) func(string) (record.Type, bool) {
	return func(name string) (record.Type, bool) {
		if i := s.Index(name); i >= 0 {
			return s.Field(i).Type, true
		}
		return record.Invalid, false
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		expr    string
		open    bool
		want    record.Type
		wantErr string // substring
	}{
		{expr: "count()", want: record.Int64},
		{expr: "  count ( )  ", want: record.Int64},
		{expr: "sum(i)", want: record.Int64},
		{expr: "sum( f )", want: record.Float64},
		{expr: "avg(i)", want: record.Float64},
		{expr: "avg(f)", want: record.Float64},
		{expr: "min(s)", want: record.String},
		{expr: "max(t)", want: record.Timestamp},
		{expr: "max(f)", want: record.Float64},
		{expr: "first(b)", want: record.Bool},
		{expr: "last(m)", want: record.Map},
		{expr: "count(i)", wantErr: `count() takes no argument`},
		{expr: "sum(s)", wantErr: `sum needs int64 or float64, field "s" is string`},
		{expr: "avg(t)", wantErr: `avg needs int64 or float64, field "t" is timestamp`},
		{expr: "min(b)", wantErr: `min needs int64, float64, string or timestamp, field "b" is bool`},
		{expr: "max(m)", wantErr: `max needs int64, float64, string or timestamp, field "m" is map`},
		{expr: "median(i)", wantErr: `unknown aggregate "median"; want one of count(), sum(x), avg(x), min(x), max(x), first(x), last(x)`},
		{expr: "summ(i)", wantErr: `(did you mean sum?)`},
		{expr: "SUM(i)", wantErr: `unknown aggregate "SUM"; want one of count(), sum(x), avg(x), min(x), max(x), first(x), last(x) (did you mean sum?)`},
		{expr: "sum(nope)", wantErr: `aggregate "sum(nope)": no field "nope" in the input`},
		{expr: "sum(nope)", open: true, want: record.Invalid},
		{expr: "avg(nope)", open: true, want: record.Float64},
		{expr: "first(nope)", open: true, want: record.Invalid},
		{expr: "count()", open: true, want: record.Int64},
		{expr: "sum(s)", open: true, wantErr: `sum needs int64 or float64`}, // listed fields still checked
		{expr: "sum(", wantErr: `aggregate "sum(": missing closing ")"`},
		{expr: "sum(a b)", wantErr: `aggregate "sum(a b)": argument "a b" is not a field name`},
		{expr: "sum(i + 1)", wantErr: `argument "i + 1" is not a field name`},
		{expr: "sum((i))", wantErr: `argument "(i)" is not a field name`},
		{expr: "sum(1i)", wantErr: `argument "1i" is not a field name`},
		{expr: "sum()", wantErr: `sum needs a field name, as in sum(x)`},
		{expr: "sum", wantErr: `aggregate "sum" is not a call`},
		{expr: "", wantErr: `aggregate "" is not a call`},
		{expr: "sum(i) x", wantErr: `missing closing ")"`},
		{expr: "(i)", wantErr: `unknown aggregate ""`},
	} {
		t.Run(tc.expr, func(t *testing.T) {
			got, err := Check(tc.expr, lookup(inSchema), tc.open)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Check(%q, open=%v) error = %v, want one containing %q", tc.expr, tc.open, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Check(%q, open=%v) = %v, %v, want %v", tc.expr, tc.open, got, err, tc.want)
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	_, err := New([]string{"count()", "sum(s)"}, inSchema)
	if err == nil || err.Error() != `aggregate 2: sum needs int64 or float64, field "s" is string` {
		t.Fatalf("New error = %v", err)
	}
	a, err := New(nil, inSchema)
	if err != nil || a.AccSchema().Len() != 1 || len(a.Types()) != 0 {
		t.Fatalf("New(nil) = %v, %v", a, err)
	}
}

var allExprs = []string{"count()", "sum(i)", "sum(f)", "avg(i)", "avg(f)", "min(i)", "max(i)",
	"min(f)", "max(f)", "min(s)", "max(s)", "min(t)", "max(t)", "first(s)", "last(s)", "first(i)", "last(b)"}

func row(i int64, f float64, s string, ts time.Time) record.Row {
	return record.Row{record.IntValue(i), record.FloatValue(f), record.StringValue(s), record.TimeValue(ts),
		record.BoolValue(i%2 == 0), record.StringValue("")}
}

func TestAggregates(t *testing.T) {
	a, err := New(allExprs, inSchema)
	if err != nil {
		t.Fatal(err)
	}
	wantTypes := []record.Type{record.Int64, record.Int64, record.Float64, record.Float64, record.Float64,
		record.Int64, record.Int64, record.Float64, record.Float64, record.String, record.String,
		record.Timestamp, record.Timestamp, record.String, record.String, record.Int64, record.Bool}
	for i, typ := range a.Types() {
		if typ != wantTypes[i] {
			t.Errorf("Types()[%d] (%s) = %v, want %v", i, allExprs[i], typ, wantTypes[i])
		}
	}
	if _, err := record.NewSchema(a.AccSchema().Fields()...); err != nil {
		t.Fatalf("AccSchema %v: %v", a.AccSchema(), err)
	}
	t0 := time.Unix(0, 0)
	type in struct {
		r  record.Row
		ts int64
	}
	// Arrival order is not event-time order: first is the record at ts 5, last at ts 30.
	ins := []in{
		{row(4, 1.5, "b", t0.Add(time.Second)), 20},
		{row(-7, -2.25, "zz", t0.Add(-time.Hour)), 30},
		{row(10, 0.5, "a", t0), 5},
		{row(3, 4, "d", t0.Add(2*time.Second)), 20},
	}
	acc := a.NewAcc()
	for _, x := range ins {
		// The input row is borrowed, as from a network buffer: scribble over it afterwards.
		buf := []byte(x.r[2].Str())
		x.r[2] = record.StringValue(unsafe.String(&buf[0], len(buf)))
		a.Add(acc, x.r, x.ts)
		for i := range buf {
			buf[i] = '!'
		}
	}
	out := make(record.Row, len(allExprs))
	a.Result(acc, out)
	want := record.Row{
		record.IntValue(4),
		record.IntValue(10), record.FloatValue(3.75),
		record.FloatValue(2.5), record.FloatValue(3.75 / 4),
		record.IntValue(-7), record.IntValue(10),
		record.FloatValue(-2.25), record.FloatValue(4),
		record.StringValue("a"), record.StringValue("zz"),
		record.TimeValue(t0.Add(-time.Hour)), record.TimeValue(t0.Add(2 * time.Second)),
		record.StringValue("a"), record.StringValue("zz"),
		record.IntValue(10), record.BoolValue(false),
	}
	for i := range want {
		if out[i] != want[i] {
			t.Errorf("%s = %s, want %s", allExprs[i], out[i].Format(wantTypes[i]), want[i].Format(wantTypes[i]))
		}
	}
}

func TestFirstLastTies(t *testing.T) {
	a, err := New([]string{"first(s)", "last(s)"}, inSchema)
	if err != nil {
		t.Fatal(err)
	}
	r := func(s string) record.Row { return row(0, 0, s, time.Time{}) }
	out := make(record.Row, 2)
	check := func(name string, acc record.Row, first, last string) {
		t.Helper()
		a.Result(acc, out)
		if out[0].Str() != first || out[1].Str() != last {
			t.Errorf("%s: first, last = %q, %q, want %q, %q", name, out[0].Str(), out[1].Str(), first, last)
		}
	}
	acc := a.NewAcc()
	a.Add(acc, r("x"), 7)
	a.Add(acc, r("y"), 7)
	a.Add(acc, r("z"), 7)
	check("add", acc, "x", "z")

	dst, src := a.NewAcc(), a.NewAcc()
	a.Add(dst, r("d"), 7)
	a.Add(src, r("s"), 7)
	a.Merge(dst, src)
	check("merge tie", dst, "d", "s")

	dst, src = a.NewAcc(), a.NewAcc()
	a.Add(dst, r("late"), 9)
	a.Add(src, r("early"), -3)
	a.Merge(dst, src)
	check("merge order", dst, "early", "late")

	empty := a.NewAcc()
	a.Merge(empty, dst)
	check("merge into empty", empty, "early", "late")
	a.Merge(dst, a.NewAcc())
	check("merge empty", dst, "early", "late")
}

func TestMinMaxNaN(t *testing.T) {
	a, err := New([]string{"min(f)", "max(f)"}, inSchema)
	if err != nil {
		t.Fatal(err)
	}
	for _, order := range [][]float64{{1, math.NaN(), 3}, {math.NaN(), 1, 3}, {3, 1, math.NaN()}} {
		acc, out := a.NewAcc(), make(record.Row, 2)
		for _, f := range order {
			a.Add(acc, row(0, f, "", time.Time{}), 0)
		}
		a.Result(acc, out)
		if !math.IsNaN(out[0].Float()) || out[1].Float() != 3 {
			t.Errorf("over %v: min, max = %v, %v, want NaN, 3", order, out[0].Float(), out[1].Float())
		}
	}
}

func TestSumIntWraps(t *testing.T) {
	a, _ := New([]string{"sum(i)"}, inSchema)
	acc, out := a.NewAcc(), make(record.Row, 1)
	a.Add(acc, row(math.MaxInt64, 0, "", time.Time{}), 0)
	a.Add(acc, row(2, 0, "", time.Time{}), 0)
	a.Result(acc, out)
	if got := out[0].Int(); got != math.MinInt64+1 {
		t.Errorf("sum = %d, want %d", got, int64(math.MinInt64+1))
	}
}

// TestMergeProperty checks that merging accumulators of a random split of the records, in
// order, equals adding them all to one accumulator. Floats are multiples of 1/4 so that
// float sums are exact whatever the grouping.
func TestMergeProperty(t *testing.T) {
	a, err := New(allExprs, inSchema)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 8))
	words := []string{"a", "b", "c", "ab", "ba", ""}
	for iter := range 2000 {
		n := r.IntN(12) + 1
		rows, tss := make([]record.Row, n), make([]int64, n)
		for i := range rows {
			rows[i] = row(r.Int64N(21)-10, float64(r.IntN(41)-20)/4, words[r.IntN(len(words))],
				time.Unix(0, r.Int64N(1000)))
			tss[i] = r.Int64N(5) // many ties
		}
		whole := a.NewAcc()
		for i := range rows {
			a.Add(whole, rows[i], tss[i])
		}
		// Split into consecutive parts, some empty, merged left to right.
		merged := a.NewAcc()
		for i := 0; i <= n; {
			part := a.NewAcc()
			j := i + r.IntN(n-i+1)
			for ; i < j; i++ {
				a.Add(part, rows[i], tss[i])
			}
			a.Merge(merged, part)
			if j == n {
				break
			}
		}
		w, m := make(record.Row, len(allExprs)), make(record.Row, len(allExprs))
		a.Result(whole, w)
		a.Result(merged, m)
		for i := range w {
			if w[i] != m[i] {
				t.Fatalf("iteration %d: %s: merged %s, added %s", iter, allExprs[i],
					m[i].Format(a.Types()[i]), w[i].Format(a.Types()[i]))
			}
		}
	}
}

func BenchmarkAdd(b *testing.B) {
	a, err := New([]string{"count()", "sum(i)", "sum(f)", "avg(f)", "min(i)", "max(f)", "first(i)", "last(t)"}, inSchema)
	if err != nil {
		b.Fatal(err)
	}
	rows := make([]record.Row, 64)
	for i := range rows {
		rows[i] = row(int64(i*7%13), float64(i), "s", time.Unix(int64(i), 0))
	}
	acc := a.NewAcc()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		a.Add(acc, rows[i%64], int64(i%100))
	}
}

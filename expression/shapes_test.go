package expression

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The one-closure shapes of keys (a field, a field modulo a constant, `field op constant`)
// and `%` by a constant without a division give what the VM gives, also at the ends of the
// int64 range, and only a divisor that may be zero can fail.
func TestNativeKeyShapes(t *testing.T) {
	for _, tc := range []struct {
		src      string
		fallible bool
	}{
		{"value", false}, {"value % 1024", false}, {"value % -1024", false}, {"value % 1", false},
		{"value % -1", false}, {"value % 2", false}, {"value % 1000", false}, {"value % -7", false},
		{"value % 9223372036854775807", false}, {"value % 4611686018427387904", false},
		{"(value * 3) % 16", false}, {"(value * 3) % 10", false}, {"value % 1024 == 3", false},
		{"value + 5", false}, {"value - 5", false}, {"value * -3", false}, {"count % 4 + value % 8", false},
		{"value % count", true}, {"value % 0", true}, {"(value + 1) % 0", true}, {"parity + parity", true},
	} {
		p, err := Compile(tc.src, testSchema, Options{})
		if err != nil {
			t.Fatalf("Compile(%q): %v", tc.src, err)
		}
		if !p.Native() || p.fallible != tc.fallible {
			t.Errorf("Compile(%q): native %v fallible %v, want native, fallible %v", tc.src, p.Native(), p.fallible, tc.fallible)
			continue
		}
		vmp := *p
		vmp.fast = nil
		fast, slow := p.NewEvaluator(), vmp.NewEvaluator()
		r := rand.New(rand.NewPCG(3, 4))
		values := []int64{0, 1, -1, 2, -2, 1023, 1024, -1024, -1025, math.MaxInt64, math.MinInt64, math.MinInt64 + 1, math.MaxInt64 - 1}
		for range 300 {
			values = append(values, r.Int64(), -r.Int64(), r.Int64N(5000)-2500)
		}
		for _, v := range values {
			in := row(v, 0, "p", true, v%7-3)
			a, errA := fast.Eval(in, nil)
			b, errB := slow.Eval(in, nil)
			if (errA == nil) != (errB == nil) || a != b {
				t.Fatalf("%q on value %d: native %s (%v), vm %s (%v)", tc.src, v, a.Format(p.Type()), errA, b.Format(p.Type()), errB)
			}
		}
	}
}

func TestProgramField(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want int // -1: not a plain field
	}{
		{"value", 0}, {"price", 1}, {"parity", 2}, {"ok", 3}, {"count", 4},
		{"value + 0", -1}, {"value % 8", -1}, {"-value", -1}, {"int(value)", -1}, {"float(value)", -1},
	} {
		p, err := Compile(tc.src, testSchema, Options{})
		if err != nil {
			t.Fatalf("Compile(%q): %v", tc.src, err)
		}
		i, ok := p.Field()
		if !ok {
			i = -1
		}
		if i != tc.want {
			t.Errorf("Compile(%q).Field() = %d, %v, want %d", tc.src, i, ok, tc.want)
		}
		if ok {
			in := row(-5, 2.5, "odd", true, 7)
			if v, err := p.NewEvaluator().Eval(in, nil); err != nil || v != in[i] {
				t.Errorf("%q: Eval = %v, %v, want row[%d] = %v", tc.src, v, err, i, in[i])
			}
		}
	}
	p, err := Compile("acc.value", testSchema, Options{Acc: true})
	if err != nil {
		t.Fatal(err)
	}
	if i, ok := p.Field(); ok {
		t.Errorf("acc.value: Field() = %d, true; it reads the accumulator, not the row", i)
	}
}

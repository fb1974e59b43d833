package expression

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// The one-closure shapes of keys (a field, a field modulo a constant, `field op constant`)
// and `%` by a constant without a division give what the VM gives, also at the ends of the
// int64 range, and only a divisor that may be zero can fail; so does a Selector of each,
// inline or not.
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
		fast, slow, sel := p.NewEvaluator(), vmp.NewEvaluator(), p.NewSelector()
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
			if c, errC := sel.Eval(in); (errC == nil) != (errB == nil) || c != b {
				t.Fatalf("%q on value %d: selector %s (%v), vm %s (%v)", tc.src, v, c.Format(p.Type()), errC, b.Format(p.Type()), errB)
			}
		}
	}
}

// A Selector computes a field and an int64 field modulo a non-zero constant inline, and
// everything else (other shapes, the accumulator) through an evaluator, with its errors.
func TestSelectorShapes(t *testing.T) {
	for _, tc := range []struct {
		src   string
		kind  shapeKind
		field int
	}{
		{"value", shapeField, 0}, {"price", shapeField, 1}, {"parity", shapeField, 2}, {"ok", shapeField, 3}, {"count", shapeField, 4},
		{"value % 8", shapeModPow2, 0}, {"count % -1", shapeModPow2, 4}, {"value % 1000", shapeMod, 0}, {"count % -7", shapeMod, 4},
		{"value + 0", shapeOther, 0}, {"-value", shapeOther, 0}, {"int(value)", shapeOther, 0}, {"float(value)", shapeOther, 0},
		{"value % 0", shapeOther, 0}, {"value % count", shapeOther, 0}, {"(value * 3) % 16", shapeOther, 0},
	} {
		p, err := Compile(tc.src, testSchema, Options{})
		if err != nil {
			t.Fatalf("Compile(%q): %v", tc.src, err)
		}
		s := p.NewSelector()
		if s.kind != tc.kind || tc.kind != shapeOther && s.field != tc.field {
			t.Errorf("Compile(%q): selector shape %d field %d, want %d field %d", tc.src, s.kind, s.field, tc.kind, tc.field)
		}
		if (s.eval == nil) != (tc.kind != shapeOther) {
			t.Errorf("Compile(%q): selector has an evaluator %v, want %v", tc.src, s.eval != nil, tc.kind == shapeOther)
		}
		in := row(-5, 2.5, "odd", true, 7)
		want, wantErr := p.NewEvaluator().Eval(in, nil)
		if got, err := s.Eval(in); got != want || (err == nil) != (wantErr == nil) {
			t.Errorf("%q: Selector.Eval = %v, %v, want %v, %v", tc.src, got, err, want, wantErr)
		}
	}
	p, err := Compile("acc.value", testSchema, Options{Acc: true})
	if err != nil {
		t.Fatal(err)
	}
	if s := p.NewSelector(); s.kind != shapeOther {
		t.Errorf("acc.value: selector shape %d; it reads the accumulator, not the row", s.kind)
	}
	p, err = Compile("value % count", testSchema, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.NewSelector().Eval(row(5, 0, "p", true, 0)); err == nil || !strings.Contains(err.Error(), "divide by zero") {
		t.Errorf("value %% count with count 0: Selector.Eval error %v, want integer divide by zero", err)
	}
}

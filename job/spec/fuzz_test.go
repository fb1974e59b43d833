package spec

import (
	"testing"
)

// fuzzMaxDepth bounds how deep FuzzParse walks a document, so that the walk itself cannot
// exhaust the stack on deeply nested input; the parser is what is under test.
const fuzzMaxDepth = 64

// walk reads v with every getter, as operator types do with the fields they expect, and
// descends into lists and maps.
func walk(v Value, depth int) {
	_ = v.Kind()
	_, _ = v.String()
	_, _ = v.NonEmpty()
	_, _ = v.Int()
	_, _ = v.Float()
	_, _ = v.Bool()
	_, _ = v.Duration()
	_ = v.Text()
	_, _ = v.Choice("mode", "a", "b", "c")
	_, _ = v.Names()
	var out any
	_ = v.Decode(&out)
	if depth >= fuzzMaxDepth {
		return
	}
	if l, ok := v.List(); ok {
		for _, e := range l {
			walk(e, depth+1)
		}
	}
	if m, ok := v.Map(); ok {
		m.CheckKeys([]string{"name", "type", "inputs"}, "of the fuzz map")
		_ = m.Has("name")
		_, _ = m.Get("type")
		m = m.At("at").Without("inputs")
		for _, e := range m.Entries() {
			e.Problemf("seen")
			walk(e.Value, depth+1)
		}
	}
}

// FuzzParse parses arbitrary text as a job spec and reads every value of it with every
// getter. It must never panic, and the problems it reports must come in line order.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"name: odd-even\nparallelism: 2\nconfig:\n  execution.checkpointing.interval: 500ms\n" +
			"operators:\n  - {name: numbers, type: sequence, from: 1, to: 1000, rate: 200}\n" +
			"  - {name: parity, type: map, fields: {parity: \"value % 2 == 0 ? 'even' : 'odd'\"}}\n",
		"a: &x {b: [1, 2.5, true, null, 10 s]}\nc: *x\nd: !!binary aGk=\n",
		"- [a, b]\n- {k: v, k: w}\n- 0x1f\n- -.inf\n- 1e400\n- ''\n",
		"",
		"{",
	} {
		f.Add([]byte(s))
	}

	f.Fuzz(func(t *testing.T, src []byte) {
		ps := &Problems{}
		if v, ok := Parse(src, ps); ok {
			walk(v, 0)
		} else if ps.Len() == 0 {
			t.Fatal("Parse failed without a problem")
		}
		last := 0
		for _, p := range ps.Sorted() {
			if p.Line < last {
				t.Fatalf("problems out of line order: %v", ps.Sorted())
			}
			last = p.Line
			_ = p.String()
		}
	})
}

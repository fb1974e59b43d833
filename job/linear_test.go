package job

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// wideSpec is a source, a map to n fields, a map reading each of them, and a sink.
func wideSpec(n int) string {
	var b strings.Builder
	b.WriteString("name: wide\noperators:\n  - {name: src, type: sequence, from: 1, to: 10}\n  - name: m1\n    type: map\n    fields:\n")
	for i := range n {
		fmt.Fprintf(&b, "      f%d: value\n", i)
	}
	b.WriteString("  - name: m2\n    type: map\n    fields:\n")
	for i := range n {
		fmt.Fprintf(&b, "      g%d: f%d + 1\n", i, i)
	}
	b.WriteString("  - {name: out, type: discard}\n")
	return b.String()
}

// filtersOfWide is a map to w fields read by n filters in a chain: n × w fields.
func filtersOfWide(w, n int) string {
	var b strings.Builder
	b.WriteString("name: filters\noperators:\n  - {name: src, type: sequence, from: 1, to: 10}\n  - name: m\n    type: map\n    fields:\n")
	for i := range w {
		fmt.Fprintf(&b, "      f%d: value\n", i)
	}
	for i := range n {
		fmt.Fprintf(&b, "  - {name: c%d, type: filter, condition: \"f%d > 0\"}\n", i, w-1)
	}
	b.WriteString("  - {name: out, type: discard}\n")
	return b.String()
}

// brokenInputs is n operators that each read an operator that does not exist.
func brokenInputs(n int) string {
	var b strings.Builder
	b.WriteString("name: broken\noperators:\n  - {name: src, type: sequence, from: 1, to: 10}\n")
	for i := range n {
		fmt.Fprintf(&b, "  - {name: p%d, type: print, inputs: [nowhere%d]}\n", i, i)
	}
	return b.String()
}

// unknownFields is a map to w fields, then n maps whose expressions name a field that does not
// exist (each a problem with a did-you-mean among w fields).
func unknownFields(w, n int) string {
	var b strings.Builder
	b.WriteString("name: unknown\noperators:\n  - {name: src, type: sequence, from: 1, to: 10}\n  - name: m\n    type: map\n    fields:\n")
	for i := range w {
		fmt.Fprintf(&b, "      f%d: value\n", i)
	}
	for i := range n {
		fmt.Fprintf(&b, "  - {name: u%d, type: map, inputs: [m], fields: {x: \"nope%d + 1\"}}\n", i, i)
	}
	b.WriteString("  - {name: out, type: discard, inputs: [m]}\n")
	return b.String()
}

// Building a job costs its spec's size: doubling a spec of each shape at most doubles the
// allocations (security review F10: a 2.2 MB spec of 40,000 operators cost 15 s of CPU and
// 8 GiB, for the vertex name built operator by operator; a wide record read by many
// expressions cost its width for each one). A spec beyond a bound (the fields all operators
// read and emit, the problems reported) stops at the bound: its allocations stay flat.
func TestBuildIsLinear(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spec  func(n int) string
		n     int
		valid bool
	}{
		{"a chain of maps", specOfMaps, 4000, true},
		{"a wide record", wideSpec, 2000, true},
		{"filters of a wide record, beyond the fields bound", func(n int) string { return filtersOfWide(2000, n) }, 500, false},
		{"operators reading no operator", brokenInputs, 2000, false},
		{"expressions naming no field of a wide record", func(n int) string { return unknownFields(n, n) }, 2000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cost := func(n int) (allocs, bytes float64) {
				spec := []byte(tc.spec(n))
				build := func() {
					if _, err := Build(Request{Spec: spec}, Env{}); (err == nil) != tc.valid {
						t.Fatalf("Build(%d) = %v, want valid=%v", n, err, tc.valid)
					}
				}
				allocs = testing.AllocsPerRun(1, build)
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				build()
				runtime.ReadMemStats(&after)
				return allocs, float64(after.TotalAlloc - before.TotalAlloc)
			}
			a1, b1 := cost(tc.n)
			a2, b2 := cost(2 * tc.n)
			t.Logf("n=%d: %.0f allocations, %.1f MB; n=%d: %.0f allocations, %.1f MB", tc.n, a1, b1/1e6, 2*tc.n, a2, b2/1e6)
			if a2/a1 > 2.5 || b2/b1 > 2.5 {
				t.Errorf("doubling n multiplies allocations by %.2f and bytes by %.2f; want at most 2.5 (linear)", a2/a1, b2/b1)
			}
		})
	}
}

package job

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/goflink/goflink/job/spec"
)

// specOfMaps is a valid spec of a source, n maps in a chain and a sink.
func specOfMaps(n int) string {
	var b strings.Builder
	b.WriteString("name: big\noperators:\n  - {name: src, type: sequence, from: 1, to: 10}\n")
	for i := range n {
		fmt.Fprintf(&b, "  - {name: m%d, type: map, fields: {value: \"value + 1\"}}\n", i)
	}
	b.WriteString("  - {name: out, type: discard}\n")
	return b.String()
}

// A submission beyond a limit is refused with one problem that names the limit, before the work
// the limit bounds: the spec's size, its number of operators, and every parallelism, however it
// is given (security review F7: parallelism.default 4000000000000000000 spun a JobManager
// goroutine for ever; F10: a 2.2 MB spec of 40,000 operators cost 15 s and 8 GiB).
func TestSubmissionLimits(t *testing.T) {
	const maxSpecBytes, maxOperators = 1 << 20, 10000 // the documented limits
	const small = "name: x\noperators:\n  - {name: n, type: sequence, from: 1, to: 5}\n  - {name: o, type: print}\n"
	for _, tc := range []struct {
		name string
		req  Request
		want string
	}{
		{"spec above 1 MiB", Request{Spec: []byte(small + "# " + strings.Repeat("x", maxSpecBytes) + "\n")},
			fmt.Sprintf("the spec is %d bytes; the limit is 1048576 bytes (1 MiB)", len(small)+maxSpecBytes+3)},
		{"too many operators", Request{Spec: []byte(specOfMaps(maxOperators - 1))},
			`line 2: operators: 10001 operators; the limit is 10000`},
		{"parallelism.default beyond the bound", Request{Spec: []byte("config: {parallelism.default: 4000000000000000000}\n" + small)},
			`line 1: config: config key "parallelism.default": 4000000000000000000 is above the maximum 32768`},
		{"-D parallelism.default", Request{Spec: []byte(small), Overrides: map[string]string{"parallelism.default": "40000"}},
			`-D parallelism.default: config key "parallelism.default": 40000 is above the maximum 32768`},
		{"pipeline.max-parallelism", Request{Spec: []byte("config: {pipeline.max-parallelism: 4294967296}\n" + small)},
			`line 1: config: config key "pipeline.max-parallelism": 4294967296 is above the maximum 32768`},
		{"requested parallelism negative", Request{Spec: []byte(small), Parallelism: -1},
			`-p: the job's parallelism must be between 1 and 32768, got -1`},
		{"requested parallelism above the bound", Request{Spec: []byte(small), Parallelism: 32769},
			`-p: the job's parallelism must be between 1 and 32768, got 32769`},
		{"spec parallelism", Request{Spec: []byte("parallelism: 4000000000000000000\n" + small)},
			`line 1: parallelism: must be between 1 and 32768, got 4000000000000000000`},
		{"operator parallelism", Request{Spec: []byte(strings.Replace(small, "from: 1,", "from: 1, parallelism: -7,", 1))},
			`line 3: operators[0] "n".parallelism: must be between 1 and 32768, got -7`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Build(tc.req, Env{})
			if err == nil {
				t.Fatalf("Build = %d vertices, want an error", len(g.GetVertices()))
			}
			var se *SpecError
			ok := errors.As(err, &se)
			if !ok || len(se.Problems) != 1 || se.Problems[0].String() != tc.want {
				t.Errorf("Build error = %v\nwant the one problem %q", err, tc.want)
			}
		})
	}
	// At the limits a spec builds.
	if _, err := Build(Request{Spec: []byte(specOfMaps(maxOperators - 2)), Parallelism: 32768}, Env{}); err != nil {
		t.Errorf("Build(%d operators, -p 32768) = %v", maxOperators, err)
	}
}

// Past spec.MaxProblems problems the builder stops looking, and says there may be more; names
// of a job or an operator beyond 256 bytes are problems (messages and task names repeat them).
func TestProblemsBounded(t *testing.T) {
	g, err := Build(Request{Spec: []byte(brokenInputs(300)), SpecName: "broken.yaml"}, Env{})
	var se *SpecError
	ok := errors.As(err, &se)
	if !ok {
		t.Fatalf("Build = %v, %v; want a *SpecError", g, err)
	}
	if len(se.Problems) != spec.MaxProblems || !se.Truncated {
		t.Errorf("Build: %d problems, truncated %v; want %d, true", len(se.Problems), se.Truncated, spec.MaxProblems)
	}
	if want := "invalid broken.yaml (the first 100 problems; there may be more):\n  line 4: "; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Build error starts %.80q, want %q", err.Error(), want)
	}

	long := strings.Repeat("n", 257)
	for _, tc := range []struct{ name, spec, want string }{
		{"job", "name: " + long + "\noperators:\n  - {name: s, type: sequence, from: 1}\n  - {name: o, type: print}\n",
			"line 1: name: a name of 257 bytes; the limit is 256"},
		{"operator", "name: x\noperators:\n  - {name: s, type: sequence, from: 1}\n  - {name: " + long + ", type: print}\n",
			"line 4: operators[1].name: a name of 257 bytes; the limit is 256"},
	} {
		_, err := Build(Request{Spec: []byte(tc.spec)}, Env{})
		if se := (*SpecError)(nil); !errors.As(err, &se) || len(se.Problems) != 1 || se.Problems[0].String() != tc.want {
			t.Errorf("%s name: Build = %v, want the one problem %q", tc.name, err, tc.want)
		}
	}
}

// A sliding window of more panes than window.MaxPanes is refused at its slide: each window is
// computed from its panes, so a day sliding by a millisecond cost 86,400,000 steps a record.
func TestWindowPanesBounded(t *testing.T) {
	const spec = `name: w
operators:
  - {name: n, type: sequence, from: 1, to: 5, watermark: {timestamp: "value"}}
  - {name: k, type: key-by, key: "value %% 2"}
  - {name: w, type: window, size: %s, slide: %s, aggregates: {c: "count()"}}
  - {name: o, type: print}
`
	for _, tc := range []struct{ size, slide, want string }{
		{"1d", "1ms", `line 5: operators[2] "w".slide: cuts each window of 24h0m0s into 86400000 panes of 1ms (size / gcd(size, slide)); the limit is 1048576`},
		{"7d", "1s", ""},
		{"1048576ms", "1ms", ""},
		{"1048577ms", "1ms", "into 1048577 panes of 1ms"},
		{"3d", "7ms", "into 259200000 panes of 1ms"},
		{"7d", "1ms", "into 604800000 panes of 1ms"},
	} {
		_, err := Build(Request{Spec: []byte(fmt.Sprintf(spec, tc.size, tc.slide))}, Env{})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("size %s slide %s: %v", tc.size, tc.slide, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("size %s slide %s: Build = %v, want a problem containing %q", tc.size, tc.slide, err, tc.want)
		}
	}
}

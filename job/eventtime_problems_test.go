package job

import (
	"strings"
	"testing"
)

// TestEventTimeBadInput checks that each bad event-time spec is refused at submit with one
// problem that names the operator, its line and the field, and says what is wrong.
func TestEventTimeBadInput(t *testing.T) {
	const src = `
name: bad
operators:
  - {name: n, type: sequence, from: 1, to: 10}
  - {name: s, type: map, fields: {k: "value % 3", v: "value", ts: "value * 10", word: "'w'", at: "now()"}}
`
	const timed = src + `  - {name: wm, type: watermark, timestamp: "ts"}
  - {name: by-k, type: key-by, key: "k"}
`
	for _, tc := range []struct {
		name, spec, want string
	}{
		{"window without key-by", src + `  - {name: w, type: window, size: 1s, time: processing, aggregates: {n: "count()"}}
  - {name: o, type: print}`, `line 6: operators[2] "w".inputs: window keeps state per key and needs keyed inputs: put a key-by before it; for a non-keyed stream use window-all`},
		{"event-time window without watermark", src + `  - {name: by-k, type: key-by, key: "k"}
  - {name: w, type: window, size: 1s, aggregates: {n: "count()"}}
  - {name: o, type: print}`, `line 7: operators[3] "w": an event-time window needs a watermark upstream`},
		{"event-time join without watermark", src + `  - {name: l, type: key-by, key: "k"}
  - {name: r, type: key-by, inputs: [s], key: "k"}
  - {name: j, type: window-join, inputs: [l, r], size: 1s}
  - {name: o, type: print}`, `line 8: operators[4] "j": an event-time join needs a watermark upstream`},
		{"zero size", timed + `  - {name: w, type: window, size: 0s, aggregates: {n: "count()"}}
  - {name: o, type: print}`, `operators[4] "w".size: must be positive, got 0s`},
		{"negative slide", timed + `  - {name: w, type: window, size: 1s, slide: -1s, aggregates: {n: "count()"}}
  - {name: o, type: print}`, `operators[4] "w".slide:`},
		{"zero gap", timed + `  - {name: w, type: window, gap: 0ms, aggregates: {n: "count()"}}
  - {name: o, type: print}`, `operators[4] "w".gap: must be positive, got 0s`},
		{"slide larger than size", timed + `  - {name: w, type: window, size: 1s, slide: 2s, aggregates: {n: "count()"}}
  - {name: o, type: print}`, `operators[4] "w".slide: slide (2s) is larger than the size (1s)`},
		{"unknown aggregate", timed + `  - {name: w, type: window, size: 1s, aggregates: {n: "cnt()"}}
  - {name: o, type: print}`, `unknown aggregate "cnt"`},
		{"sum of a string", timed + `  - {name: w, type: window, size: 1s, aggregates: {t: "sum(word)"}}
  - {name: o, type: print}`, `sum needs int64 or float64, field "word" is string`},
		{"avg of a string", timed + `  - {name: w, type: window, size: 1s, aggregates: {t: "avg(word)"}}
  - {name: o, type: print}`, `avg needs int64 or float64, field "word" is string`},
		{"timestamp of another type", src + `  - {name: wm, type: watermark, timestamp: "word"}
  - {name: o, type: print}`, `operators[2] "wm".timestamp: expression "word" is string; a timestamp is a timestamp or int64 epoch milliseconds`},
		{"negative lateness", timed + `  - {name: w, type: window, size: 1s, allowed-lateness: -1s, aggregates: {n: "count()"}}
  - {name: o, type: print}`, `operators[4] "w".allowed-lateness:`},
		{"negative out-of-orderness", src + `  - {name: wm, type: watermark, timestamp: "ts", max-out-of-orderness: -5ms}
  - {name: o, type: print}`, `operators[2] "wm".max-out-of-orderness:`},
		{"side output of an operator without one", timed + `  - {name: o, type: print, inputs: [by-k.late]}`, `operators[4] "o".inputs: operator "by-k" (key-by) has no side outputs`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := specProblems(t, tc.spec, Env{})
			if len(got) != 1 || !strings.Contains(got[0], tc.want) {
				t.Errorf("problems:\n%s\nwant one containing %q", strings.Join(got, "\n"), tc.want)
			}
		})
	}
}

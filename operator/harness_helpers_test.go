package operator_test

import (
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/goflink/goflink/operator/operatortest"
	"github.com/goflink/goflink/state"
)

// The event-time tests run operators of a job spec in an operatortest.Harness, on both state
// backends. Their input is a keyed stream of rows {k, v, f, s, ts}: key k, an int64 v, a
// float64 f, a string s and an int64 ts (the harness hands timestamps over itself).

var backends = []string{state.BackendHashMap, state.BackendBBolt}

// forBackends runs f as a subtest per state backend.
func forBackends(t *testing.T, f func(t *testing.T, backend string)) {
	for _, b := range backends {
		t.Run(b, func(t *testing.T) { f(t, b) })
	}
}

// keyedSpec is a job whose operator "op" (fields opFields, e.g. `type: window, size: 10ms,
// aggregates: {n: "count()"}`) reads a key-by on k of the rows {k, v, f, s, ts}.
func keyedSpec(opFields string) string {
	return fmt.Sprintf(`
name: harness
operators:
  - {name: src, type: sequence, from: 1, to: 10}
  - {name: m, type: map, fields: {k: "value %% 5", v: "value", f: "float(value)", s: "string(value)", ts: "value"}}
  - {name: wm, type: watermark, timestamp: "ts"}
  - {name: by-k, type: key-by, key: "k"}
  - {name: op, %s}
  - {name: out, type: discard, inputs: [op]}
`, opFields)
}

// row is the input row of key k and value v.
func row(k, v int64) []any { return []any{k, v, float64(v), strconv.FormatInt(v, 10), v} }

// process hands the harness the record (k, v) at ts, failing the test on an error.
func process(t testing.TB, h *operatortest.Harness, ts, k, v int64) {
	t.Helper()
	if err := h.Process(ts, h.Row(0, row(k, v)...)); err != nil {
		t.Fatalf("Process(ts %d, k %d, v %d) = %v", ts, k, v, err)
	}
}

// watermark advances the harness's watermark, failing the test on an error.
func watermark(t testing.TB, h *operatortest.Harness, wm int64) {
	t.Helper()
	if err := h.AdvanceWatermark(wm); err != nil {
		t.Fatalf("AdvanceWatermark(%d) = %v", wm, err)
	}
}

// clock sets the harness's processing time, failing the test on an error.
func clock(t testing.TB, h *operatortest.Harness, now int64) {
	t.Helper()
	if err := h.SetProcessingTime(now); err != nil {
		t.Fatalf("SetProcessingTime(%d) = %v", now, err)
	}
}

// take returns the formatted main output since the last take, sorted: the order of records
// at one timestamp (timers of several keys) is not defined.
func take(h *operatortest.Harness) []string {
	var out []string
	for _, r := range h.Output() {
		out = append(out, h.Format(r))
	}
	h.ClearOutput()
	slices.Sort(out)
	return out
}

// lateRecords returns the records on the "late" side output as "v@timestamp", in order.
func lateRecords(h *operatortest.Harness) []string {
	var out []string
	for _, r := range h.SideOutput("late") {
		out = append(out, fmt.Sprintf("%d@%d", r.Row[1].Int(), r.Timestamp))
	}
	return out
}

// checkOutput compares the sorted output since the last take with want (sorted here).
func checkOutput(t testing.TB, h *operatortest.Harness, what string, want ...string) {
	t.Helper()
	got := take(h)
	want = slices.Clone(want)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s: output\n  %q\nwant\n  %q", what, got, want)
	}
}

// entries returns the keyed state's entries, failing the test on an error.
func entries(t testing.TB, h *operatortest.Harness) map[string]int {
	t.Helper()
	m, err := h.StateEntries()
	if err != nil {
		t.Fatalf("StateEntries() = %v", err)
	}
	return m
}

// checkEmpty fails the test when the operator's keyed state holds anything.
func checkEmpty(t testing.TB, h *operatortest.Harness, what string) {
	t.Helper()
	if m := entries(t, h); len(m) != 0 {
		t.Errorf("%s: keyed state holds %v, want nothing", what, m)
	}
}

// restart snapshots h as checkpoint id, closes it and returns a harness of the same spec
// restored from the snapshot on backend.
func restart(t testing.TB, h *operatortest.Harness, spec string, id int64, backend string) *operatortest.Harness {
	t.Helper()
	snap, err := h.Snapshot(id)
	if err != nil {
		t.Fatalf("Snapshot(%d) = %v", id, err)
	}
	now := h.ProcessingTime()
	if err := h.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	return operatortest.New(t, spec, "op", operatortest.Options{Backend: backend, Restore: []*operatortest.Snapshot{snap}, ProcessingTime: now})
}

// win formats an expected window result of key k with the aggregates in aggs (as
// "name=value ..."), timestamped end − 1.
func win(k, start, end int64, aggs string) string {
	return fmt.Sprintf("{k=%d window_start=%d window_end=%d %s}@%d", k, start, end, aggs, end-1)
}

// joinSpec is a job whose join "op" (fields opFields) reads a key-by on k of the rows
// {k, lv, ts} (left) and {k, rv, ts} (right).
func joinSpec(opFields string) string {
	return fmt.Sprintf(`
name: harness
operators:
  - {name: s1, type: sequence, from: 1, to: 10}
  - {name: l, type: map, fields: {k: "value %% 5", lv: "value", ts: "value"}}
  - {name: wl, type: watermark, timestamp: "ts"}
  - {name: by-l, type: key-by, key: "k"}
  - {name: s2, type: sequence, from: 1, to: 10}
  - {name: r, type: map, fields: {k: "value %% 5", rv: "value", ts: "value"}}
  - {name: wr, type: watermark, timestamp: "ts"}
  - {name: by-r, type: key-by, key: "k"}
  - {name: op, inputs: [by-l, by-r], %s}
  - {name: out, type: discard, inputs: [op]}
`, opFields)
}

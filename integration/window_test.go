package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
)

// Processing-time windows fire on the TaskManager's clock while the job runs: a source that
// runs for about 1.5 s fills 100 ms windows, which fire one after the other. (Those still open
// when the input ends do not fire, as in Flink.)
func TestProcessingTimeWindowsFireWhileRunning(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 1, Slots: 2})
	out := filepath.Join(t.TempDir(), "out")
	const n = 3000
	spec := fmt.Sprintf(`name: processing-time
parallelism: 2
config:
  execution.checkpointing.interval: 200ms
operators:
  - {name: numbers, type: sequence, from: 1, to: %d, rate: 2000}
  - {name: by-parity, type: key-by, key: "value %% 2"}
  - {name: windows, type: window, time: processing, size: 100ms, aggregates: {n: "count()", total: "sum(value)"}}
  - {name: out, type: file, path: %q}
`, n, out)
	id := submit(t, ctx, cl, spec)
	watchFinished(t, ctx, cl, id, -1)
	type result struct {
		Key         int64
		WindowStart time.Time `json:"window_start"`
		WindowEnd   time.Time `json:"window_end"`
		N           int64
		Total       int64
	}
	rows := committedRows[result](t, out)
	if len(rows) < 10 {
		t.Fatalf("%d window results, want at least 10 (about 15 windows of 100 ms per key fire while the source runs): %+v", len(rows), rows)
	}
	seen, counted := map[string]bool{}, int64(0)
	for _, r := range rows {
		if d := r.WindowEnd.Sub(r.WindowStart); d != 100*time.Millisecond || r.WindowStart.UnixMilli()%100 != 0 {
			t.Errorf("window [%v, %v) is not an aligned 100 ms window", r.WindowStart, r.WindowEnd)
		}
		if r.N <= 0 || r.Key != 0 && r.Key != 1 {
			t.Errorf("result %+v: want key 0 or 1 and a positive count", r)
		}
		k := fmt.Sprint(r.Key, r.WindowStart.UnixMilli())
		if seen[k] {
			t.Errorf("window %s of key %d fired twice", r.WindowStart, r.Key)
		}
		seen[k] = true
		counted += r.N
	}
	if counted > n {
		t.Errorf("windows counted %d records, more than the %d the source emitted", counted, n)
	}
}

// A bounded source ends event time with the maximum watermark: windows that no watermark of
// the data reaches (an hour-long window over a second of records) fire at the end of the
// input, on every subtask, and the results are committed.
func TestBoundedInputFiresEveryWindow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 2, Slots: 1})
	out := filepath.Join(t.TempDir(), "out")
	spec := fmt.Sprintf(`name: end-of-input
parallelism: 2
config:
  execution.checkpointing.interval: 100ms
operators:
  - {name: numbers, type: sequence, from: 1, to: 1000, watermark: {timestamp: "value", max-out-of-orderness: 10ms}}
  - {name: by-k, type: key-by, key: "value %% 3"}
  - {name: hours, type: window, size: 1h, aggregates: {n: "count()", total: "sum(value)"}}
  - {name: out, type: file, path: %q}
`, out)
	id := submit(t, ctx, cl, spec)
	watchFinished(t, ctx, cl, id, -1)
	type result struct{ Key, N, Total int64 }
	rows := committedRows[result](t, out)
	got := map[int64]result{}
	for _, r := range rows {
		if _, dup := got[r.Key]; dup {
			t.Errorf("key %d fired twice: %+v", r.Key, rows)
		}
		got[r.Key] = r
	}
	for k := int64(0); k < 3; k++ {
		var n, total int64
		for v := int64(1); v <= 1000; v++ {
			if v%3 == k {
				n, total = n+1, total+v
			}
		}
		if r := got[k]; r.N != n || r.Total != total {
			t.Errorf("key %d: %+v, want n %d, total %d (the window fires only on the final watermark)", k, r, n, total)
		}
	}
}

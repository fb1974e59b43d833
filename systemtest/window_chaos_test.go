package systemtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/goflink/goflink/client"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// The event-time chaos test: a deterministic source whose records carry event time (value ×
// 10 ms), tumbling and sliding windows per key, a window join and an interval join, two-phase-commit file sinks,
// and TaskManagers SIGKILLed at seeded moments (during alignment, right after a task
// acknowledged, between a checkpoint's completion and its commit, at a random time). Windows
// and timers are restored from keyed state and the watermarks are generated again, so the
// committed output must equal a failure-free run's: every window exactly once, with the
// results a plain computation over the input gives.
//
// GOFLINK_WINDOW_CHAOS_SEEDS sets the seeds like GOFLINK_CHAOS_SEEDS. CI runs 3.

const (
	windowChaosKeys    = 5
	windowChaosRecords = 3000 // event time 0 .. 30 s
	windowChaosRate    = 200  // records per second: about 15 s per run
)

func TestWindowChaosExactlyOnce(t *testing.T) {
	skipShort(t)
	for _, seed := range seedsFrom(t, "GOFLINK_WINDOW_CHAOS_SEEDS", "3") {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { windowChaosRun(t, seed) })
	}
}

func windowChaosRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed^0x51ed2701f3a5c7b9))
	c := startCluster(t, 3, 1)
	out := t.TempDir()
	backend := [...]string{"hashmap", "bbolt"}[seed%2]
	id := c.submit(windowChaosSpec(t, seed, out, backend))
	cl, err := client.New(c.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	kills, log := killTaskManagers(t, ctx, c, cl, id, rng, func(f fault) fault { return f })
	last, err := cl.Watch(ctx, id, func(*pb.JobDetails) error { return nil })
	if err != nil {
		t.Fatalf("watch job: %v", err)
	}
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("seed %d: job ended %v: %s\nfaults: %v", seed, last.GetStatus(), last.GetFailureCause(), log)
	}
	faults := checkFaults(t, seed, kills, last.GetRestarts(), log)
	tumbling := checkWindows(t, filepath.Join(out, "tumbling"), windowChaosWant(1000, 1000))
	sliding := checkWindows(t, filepath.Join(out, "sliding"), windowChaosWant(2000, 500))
	pairs := checkJoin(t, filepath.Join(out, "join"), func(l, r int64) bool { return r >= l-l%50 && r < l-l%50+50 })
	// interval join: r's event time (r × 10 ms) within l's + [-100 ms, 50 ms].
	near := checkJoin(t, filepath.Join(out, "near"), func(l, r int64) bool { return r >= l-10 && r <= l+5 })
	t.Logf("seed %d (%s backend): %s; committed %d tumbling and %d sliding windows, %d window-joined and %d interval-joined pairs, each exactly once and as a failure-free run",
		seed, backend, faults, tumbling, sliding, pairs, near)
}

func windowChaosSpec(t *testing.T, seed uint64, out, backend string) string {
	return writeSpec(t, fmt.Sprintf(`name: window-chaos-%d
parallelism: 2
config:
  execution.checkpointing.interval: 200ms
  execution.checkpointing.dir: %s
  state.backend.type: %s
  restart-strategy.type: fixed-delay
  restart-strategy.fixed-delay.attempts: 100
  restart-strategy.fixed-delay.delay: 100ms
operators:
  - {name: numbers, type: sequence, from: 0, to: %d, rate: %d, watermark: {timestamp: "value * 10", max-out-of-orderness: 50ms}}
  - {name: by-key, type: key-by, key: "value %% %d"}
  - {name: tumbling, type: window, size: 1s, aggregates: {n: "count()", total: "sum(value)", lo: "min(value)", hi: "last(value)"}}
  - {name: sliding, type: window, inputs: [by-key], size: 2s, slide: 500ms, aggregates: {n: "count()", total: "sum(value)", lo: "first(value)", hi: "max(value)"}}
  - {name: evens, type: filter, inputs: [numbers], condition: "value %% 2 == 0"}
  - {name: evens-by-key, type: key-by, key: "value %% %d"}
  - {name: join, type: window-join, inputs: [by-key, evens-by-key], size: 500ms}
  - {name: near, type: interval-join, inputs: [by-key, evens-by-key], between: [-100ms, 50ms]}
  - {name: out-tumbling, type: file, inputs: [tumbling], path: %s}
  - {name: out-sliding, type: file, inputs: [sliding], path: %s}
  - {name: out-join, type: file, inputs: [join], path: %s}
  - {name: out-near, type: file, inputs: [near], path: %s}
`, seed, filepath.Join(t.TempDir(), "checkpoints"), backend, windowChaosRecords-1, windowChaosRate,
		windowChaosKeys, windowChaosKeys, filepath.Join(out, "tumbling"), filepath.Join(out, "sliding"), filepath.Join(out, "join"),
		filepath.Join(out, "near")))
}

// windowResult is one window's row in the committed output.
type windowResult struct {
	Key         int64     `json:"key"`
	WindowStart time.Time `json:"window_start"`
	WindowEnd   time.Time `json:"window_end"`
	N           int64     `json:"n"`
	Total       int64     `json:"total"`
	Lo          int64     `json:"lo"`
	Hi          int64     `json:"hi"`
}

// windowChaosWant computes every window's result of a failure-free run: value v has event time
// v × 10 ms and key v % keys; windows of size ms starting every slide ms.
func windowChaosWant(size, slide int64) map[[2]int64]windowResult {
	want := map[[2]int64]windowResult{}
	for v := range int64(windowChaosRecords) {
		ts := v * 10
		for start := ts - ts%slide; start > ts-size; start -= slide {
			k := [2]int64{v % windowChaosKeys, start}
			r, ok := want[k]
			if !ok {
				r = windowResult{Key: k[0], WindowStart: time.UnixMilli(start).UTC(), WindowEnd: time.UnixMilli(start + size).UTC(), Lo: v}
			}
			r.N++
			r.Total += v
			r.Hi = v // values arrive per key in increasing time: the last is the largest
			want[k] = r
		}
	}
	return want
}

// checkWindows checks that the committed windows are exactly want, each once, and returns
// their number.
func checkWindows(t *testing.T, dir string, want map[[2]int64]windowResult) int {
	t.Helper()
	got := map[[2]int64]int{}
	readRows(t, dir, func(file string, r windowResult) {
		k := [2]int64{r.Key, r.WindowStart.UnixMilli()}
		got[k]++
		w, ok := want[k]
		switch {
		case !ok:
			t.Errorf("%s: unexpected window %+v", file, r)
		case got[k] == 1 && (r.N != w.N || r.Total != w.Total || r.Lo != w.Lo || r.Hi != w.Hi || !r.WindowEnd.Equal(w.WindowEnd)):
			t.Errorf("%s: window %+v, want %+v", file, r, w)
		}
	})
	for k := range want {
		if got[k] != 1 {
			t.Errorf("%s: key %d window at %d ms committed %d times, want exactly once", dir, k[0], k[1], got[k])
		}
	}
	return len(got)
}

// checkJoin checks that the committed pairs are every (l, r) of equal key, r even, with
// together(l, r) (in the same 500 ms window, or within the interval join's bounds), each once,
// and returns their number.
func checkJoin(t *testing.T, dir string, together func(l, r int64) bool) int {
	t.Helper()
	type pair struct{ L, R int64 }
	got := map[pair]int{}
	readRows(t, dir, func(file string, r struct {
		Value      int64 `json:"value"`
		RightValue int64 `json:"right_value"`
	}) {
		got[pair{r.Value, r.RightValue}]++
	})
	want := 0
	for l := range int64(windowChaosRecords) {
		for r := max(l-100, 0); r < l+100 && r < windowChaosRecords; r++ {
			if r%2 != 0 || r%windowChaosKeys != l%windowChaosKeys || !together(l, r) {
				continue
			}
			want++
			if n := got[pair{l, r}]; n != 1 {
				t.Errorf("%s: pair (%d, %d) committed %d times, want exactly once", dir, l, r, n)
			}
		}
	}
	if len(got) != want {
		t.Errorf("%s: committed %d distinct pairs, want %d", dir, len(got), want)
	}
	return want
}

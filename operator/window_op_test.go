package operator_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/goflink/goflink/operator"
	"github.com/goflink/goflink/operator/operatortest"
)

// step is one step of a scripted run: a record (ts, k, v), a watermark or a move of the
// processing-time clock. After each step the output since the previous one must be want
// (in any order), so a step that emits nothing has none.
type step struct {
	kind     byte // 'r' record, 'w' watermark, 'c' clock
	ts, k, v int64
	want     []string
}

func rec(ts, k, v int64, want ...string) step { return step{kind: 'r', ts: ts, k: k, v: v, want: want} }
func wm(w int64, want ...string) step         { return step{kind: 'w', ts: w, want: want} }
func clk(now int64, want ...string) step      { return step{kind: 'c', ts: now, want: want} }

func (s step) String() string {
	switch s.kind {
	case 'r':
		return fmt.Sprintf("record ts=%d k=%d v=%d", s.ts, s.k, s.v)
	case 'w':
		return fmt.Sprintf("watermark %d", s.ts)
	}
	return fmt.Sprintf("clock %d", s.ts)
}

// run runs the steps on h, checking the output after each.
func run(t *testing.T, h *operatortest.Harness, steps []step) {
	t.Helper()
	for i, s := range steps {
		switch s.kind {
		case 'r':
			process(t, h, s.ts, s.k, s.v)
		case 'w':
			watermark(t, h, s.ts)
		case 'c':
			clock(t, h, s.ts)
		}
		checkOutput(t, h, fmt.Sprintf("step %d (%v)", i, s), s.want...)
	}
}

// Records are assigned to their windows exactly at the boundaries: a window is [start, end),
// aligned to the epoch plus the offset, also for negative timestamps and offsets, and it fires
// when the watermark reaches end − 1, not before. Sliding windows whose size is not a multiple
// of the slide put a record in 3 or 4 windows.
func TestWindowAssignment(t *testing.T) {
	tests := []struct {
		name   string
		fields string
		steps  []step
	}{
		{
			name:   "tumbling/edges",
			fields: `size: 10ms`,
			steps: []step{
				rec(0, 1, 1), rec(9, 1, 2), rec(10, 1, 3), rec(19, 1, 4), rec(20, 1, 5),
				wm(8),
				wm(9, win(1, 0, 10, "n=2")),
				wm(18),
				wm(19, win(1, 10, 20, "n=2")),
				wm(operator.MaxWatermark, win(1, 20, 30, "n=1")),
			},
		},
		{
			name:   "tumbling/negative",
			fields: `size: 10ms`,
			steps: []step{
				rec(-1, 1, 1), rec(-10, 1, 2), rec(-11, 1, 3), rec(-20, 1, 4), rec(-21, 1, 5), rec(0, 1, 6),
				wm(-12, win(1, -30, -20, "n=1")),
				wm(-11, win(1, -20, -10, "n=2")),
				wm(-2),
				wm(-1, win(1, -10, 0, "n=2")),
				wm(9, win(1, 0, 10, "n=1")),
			},
		},
		{
			name:   "tumbling/offset",
			fields: `size: 10ms, offset: 3ms`,
			steps: []step{
				rec(2, 1, 1), rec(3, 1, 2), rec(12, 1, 3), rec(13, 1, 4), rec(-8, 1, 5),
				wm(2, win(1, -7, 3, "n=1"), win(1, -17, -7, "n=1")),
				wm(12, win(1, 3, 13, "n=2")),
				wm(22, win(1, 13, 23, "n=1")),
			},
		},
		{
			// An offset of -3 ms aligns the windows as one of 7 ms.
			name:   "tumbling/negative-offset",
			fields: `size: 10ms, offset: -3ms`,
			steps: []step{
				rec(6, 1, 1), rec(7, 1, 2), rec(-4, 1, 3), rec(-3, 1, 4),
				wm(-4, win(1, -13, -3, "n=1")),
				wm(6, win(1, -3, 7, "n=2")),
				wm(16, win(1, 7, 17, "n=1")),
			},
		},
		{
			name:   "tumbling/keys",
			fields: `size: 10ms`,
			steps: []step{
				rec(1, 1, 1), rec(2, 2, 1), rec(3, 1, 1), rec(11, 2, 1),
				wm(9, win(1, 0, 10, "n=2"), win(2, 0, 10, "n=1")),
				wm(19, win(2, 10, 20, "n=1")),
			},
		},
		{
			name:   "sliding/10-5",
			fields: `size: 10ms, slide: 5ms`,
			steps: []step{
				rec(4, 1, 1), rec(5, 1, 2), rec(10, 1, 3),
				wm(3),
				wm(4, win(1, -5, 5, "n=1")),
				wm(9, win(1, 0, 10, "n=2")),
				wm(14, win(1, 5, 15, "n=2")),
				wm(19, win(1, 10, 20, "n=1")),
				wm(100),
			},
		},
		{
			// 10/3: windows start every 3 ms; ts 0 is in four windows, ts 1 in three.
			name:   "sliding/10-3",
			fields: `size: 10ms, slide: 3ms`,
			steps: []step{
				rec(0, 1, 1), rec(1, 1, 2),
				wm(0, win(1, -9, 1, "n=1")),
				wm(3, win(1, -6, 4, "n=2")),
				wm(6, win(1, -3, 7, "n=2")),
				wm(9, win(1, 0, 10, "n=2")),
				wm(100),
			},
		},
		{
			name:   "sliding/10-3-negative",
			fields: `size: 10ms, slide: 3ms`,
			steps: []step{
				rec(-10, 1, 1),
				wm(-10),
				wm(-9, win(1, -18, -8, "n=1")),
				wm(-6, win(1, -15, -5, "n=1")),
				wm(-3, win(1, -12, -2, "n=1")),
				wm(-1),
				wm(100),
			},
		},
		{
			name:   "sliding/10-4-offset",
			fields: `size: 10ms, slide: 4ms, offset: 1ms`,
			steps: []step{
				rec(1, 1, 1), rec(4, 1, 2), rec(5, 1, 3),
				// windows start at 1 + 4i: [-7,3) [-3,7) [1,11) [5,15)
				wm(2, win(1, -7, 3, "n=1")),
				wm(6, win(1, -3, 7, "n=3")),
				wm(10, win(1, 1, 11, "n=3")),
				wm(14, win(1, 5, 15, "n=1")),
				wm(100),
			},
		},
		{
			name:   "sliding/ratio-1",
			fields: `size: 10ms, slide: 10ms`,
			steps: []step{
				rec(9, 1, 1), rec(10, 1, 2),
				wm(9, win(1, 0, 10, "n=1")),
				wm(19, win(1, 10, 20, "n=1")),
			},
		},
		{
			name:   "session",
			fields: `gap: 5ms`,
			steps: []step{
				rec(0, 1, 1), rec(4, 1, 2), // [0, 9)
				rec(20, 1, 3),  // [20, 25)
				rec(-10, 1, 4), // [-10, -5)
				wm(-6, win(1, -10, -5, "n=1")),
				rec(9, 1, 5), // touches [0, 9): [0, 14)
				wm(8),
				wm(13, win(1, 0, 14, "n=3")),
				wm(24, win(1, 20, 25, "n=1")),
			},
		},
		{
			name:   "session/out-of-order-bridge",
			fields: `gap: 10ms`,
			steps: []step{
				rec(100, 1, 1), rec(118, 1, 2), rec(109, 1, 3), // bridges both: [100, 128)
				rec(100, 2, 1),
				wm(109, win(2, 100, 110, "n=1")),
				wm(127, win(1, 100, 128, "n=3")),
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			forBackends(t, func(t *testing.T, backend string) {
				h := operatortest.New(t, keyedSpec(`type: window, `+tc.fields+`, aggregates: {n: "count()"}`), "op", operatortest.Options{Backend: backend})
				run(t, h, tc.steps)
			})
		})
	}
}

// Every aggregate through the operator: first and last are the values of the records with the
// smallest and the largest timestamp (ties: the first and the last to arrive), whatever the
// arrival order.
func TestWindowAggregates(t *testing.T) {
	const aggs = `aggregates: {n: "count()", si: "sum(v)", sf: "sum(f)", av: "avg(v)", af: "avg(f)", lo: "min(v)", hi: "max(f)", ls: "min(s)", fst: "first(v)", lst: "last(s)"}`
	for _, fields := range []string{`size: 100ms`, `size: 100ms, slide: 25ms`, `gap: 100ms`} {
		t.Run(fields, func(t *testing.T) {
			forBackends(t, func(t *testing.T, backend string) {
				h := operatortest.New(t, keyedSpec(`type: window, `+fields+`, `+aggs), "op", operatortest.Options{Backend: backend})
				for _, r := range [][2]int64{{50, 7}, {10, 3}, {90, -2}, {10, 11}, {90, 40}, {60, 5}} {
					process(t, h, r[0], 1, r[1])
				}
				watermark(t, h, operator.MaxWatermark)
				got := take(h)
				var want string
				const results = "n=6 si=64 sf=64 av=10.666666666666666 af=10.666666666666666 lo=-2 hi=40 ls=-2 fst=3 lst=40"
				switch fields {
				case `gap: 100ms`:
					want = win(1, 10, 190, results)
				default:
					want = win(1, 0, 100, results)
				}
				if !slices.Contains(got, want) {
					t.Errorf("output %q lacks %q", got, want)
				}
			})
		})
	}
}

// Session windows merge whatever the order of their records; with an allowed lateness of 0 a
// record for a session that fired is late, even when it would touch a later session.
func TestSessionMerging(t *testing.T) {
	tests := []struct {
		name   string
		fields string
		steps  []step
		late   []string
	}{
		{
			name:   "chain",
			fields: `gap: 10ms`,
			steps: []step{
				rec(0, 1, 1), rec(20, 1, 2), rec(40, 1, 3), // three sessions
				rec(30, 1, 4), // merges [20,30) and [40,50): [20, 50)
				rec(10, 1, 5), // merges [0,10) and [20,50): [0, 50)
				wm(48),
				wm(49, win(1, 0, 50, "n=5 hi=3")),
			},
		},
		{
			name:   "lateness-0",
			fields: `gap: 10ms`,
			steps: []step{
				rec(0, 1, 1), rec(25, 1, 2),
				wm(9, win(1, 0, 10, "n=1 hi=1")),
				// [5, 15) overlaps [0, 10), which fired and was cleaned up at once: a session
				// of its own, not late (its end is after the watermark), as in Flink.
				rec(5, 1, 3),
				rec(14, 1, 4), // [5, 24)
				wm(23, win(1, 5, 24, "n=2 hi=4")),
				rec(3, 1, 5),  // [3, 13) ended before the watermark: late
				rec(16, 1, 6), // [16, 26) touches [25, 35), which has not fired: [16, 35)
				wm(34, win(1, 16, 35, "n=2 hi=2")),
			},
			late: []string{"5@3"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			forBackends(t, func(t *testing.T, backend string) {
				h := operatortest.New(t, keyedSpec(`type: window, `+tc.fields+`, aggregates: {n: "count()", hi: "last(v)"}`), "op", operatortest.Options{Backend: backend})
				run(t, h, tc.steps)
				if got := lateRecords(h); !slices.Equal(got, tc.late) {
					t.Errorf("late side output = %q, want %q", got, tc.late)
				}
				checkEmpty(t, h, "after the last session")
			})
		})
	}
}

// Within the allowed lateness a late record updates its window, which fires again with the
// full updated result (Flink's EventTimeTrigger); beyond it the record goes to the side output
// "late" and is counted; a window's panes and timers are cleaned up once the watermark passes
// its end − 1 + lateness.
func TestWindowLateness(t *testing.T) {
	tests := []struct {
		name   string
		fields string
		steps  []step
		late   []string // v@ts
	}{
		{
			name:   "tumbling",
			fields: `size: 10ms, allowed-lateness: 5ms`,
			steps: []step{
				rec(1, 1, 1), rec(2, 1, 2),
				wm(9, win(1, 0, 10, "n=2 total=3")),
				rec(3, 1, 4, win(1, 0, 10, "n=3 total=7")),
				wm(13),
				rec(9, 1, 8, win(1, 0, 10, "n=4 total=15")), // 9 + 5 > 13: still within
				wm(14),
				rec(0, 1, 16),  // 9 + 5 <= 14: beyond
				rec(12, 1, 32), // its window [10, 20) has not fired
				wm(19, win(1, 10, 20, "n=1 total=32")),
				wm(30),
			},
			late: []string{"16@0"},
		},
		{
			name:   "tumbling/lateness-0",
			fields: `size: 10ms`,
			steps: []step{
				rec(1, 1, 1),
				wm(9, win(1, 0, 10, "n=1 total=1")),
				rec(9, 1, 2),
				wm(20),
			},
			late: []string{"2@9"},
		},
		{
			// A late record is in the windows [0,10) and [5,15): the first fired and is within
			// its lateness, so it fires again; the second fires at its time.
			name:   "sliding",
			fields: `size: 10ms, slide: 5ms, allowed-lateness: 3ms`,
			steps: []step{
				rec(6, 1, 1),
				wm(9, win(1, 0, 10, "n=1 total=1")),
				rec(7, 1, 2, win(1, 0, 10, "n=2 total=3")),
				wm(14, win(1, 5, 15, "n=2 total=3")),
				rec(8, 1, 4, win(1, 5, 15, "n=3 total=7")), // [0,10) expired at 12: not again
				wm(17),
				rec(9, 1, 8), // both windows expired
				wm(30),
			},
			late: []string{"8@9"},
		},
		{
			name:   "session",
			fields: `gap: 10ms, allowed-lateness: 10ms`,
			steps: []step{
				rec(0, 1, 1),
				wm(9, win(1, 0, 10, "n=1 total=1")),
				rec(5, 1, 2), // merged into [0, 15), which ends after the watermark
				wm(18, win(1, 0, 15, "n=2 total=3")),
				rec(2, 1, 4, win(1, 0, 15, "n=3 total=7")),
				wm(24),
				rec(4, 1, 8),    // [4, 14) merges with [0, 15), which expired at 24
				rec(-20, 1, 16), // a session of its own, expired long ago
				wm(40),
			},
			late: []string{"8@4", "16@-20"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			forBackends(t, func(t *testing.T, backend string) {
				spec := keyedSpec(`type: window, ` + tc.fields + `, aggregates: {n: "count()", total: "sum(v)"}`)
				h := operatortest.New(t, spec, "op", operatortest.Options{Backend: backend})
				run(t, h, tc.steps)
				if got := lateRecords(h); !slices.Equal(got, tc.late) {
					t.Errorf("late side output = %q, want %q", got, tc.late)
				}
				if got := h.Dropped(); got != int64(len(tc.late)) {
					t.Errorf("Dropped() = %d, want %d", got, len(tc.late))
				}
				checkEmpty(t, h, "after the watermark passed every window's end + lateness")

				// Nobody reads the side output: late records are dropped and counted all the same.
				h2 := operatortest.New(t, spec, "op", operatortest.Options{Backend: backend, DropSideOutputs: true})
				run(t, h2, tc.steps)
				if got := h2.Dropped(); got != int64(len(tc.late)) {
					t.Errorf("without a side output: Dropped() = %d, want %d", got, len(tc.late))
				}
			})
		})
	}
}

// The panes of a window are cleaned up when the watermark passes its end − 1 + lateness and
// not before: a late record within the lateness still finds them.
func TestWindowCleanupTiming(t *testing.T) {
	for _, fields := range []string{`size: 10ms`, `size: 10ms, slide: 5ms`, `size: 10ms, slide: 4ms`, `gap: 10ms`} {
		for _, lateness := range []int64{0, 1, 7, 10} {
			t.Run(fmt.Sprintf("%s/lateness=%d", fields, lateness), func(t *testing.T) {
				forBackends(t, func(t *testing.T, backend string) {
					spec := keyedSpec(fmt.Sprintf(`type: window, %s, allowed-lateness: %dms, aggregates: {n: "count()"}`, fields, lateness))
					h := operatortest.New(t, spec, "op", operatortest.Options{Backend: backend})
					process(t, h, 0, 1, 1)
					process(t, h, 0, 2, 1)
					// The last window of ts 0 ends at 10 for all of these.
					watermark(t, h, 9+lateness-1)
					if m := entries(t, h); m["window/panes"]+m["window/sessions"] == 0 {
						t.Errorf("at wm %d the window state is gone already: %v", 9+lateness-1, m)
					}
					watermark(t, h, 9+lateness)
					checkEmpty(t, h, fmt.Sprintf("at wm %d", 9+lateness))
				})
			})
		}
	}
}

// Processing-time windows fire when the clock reaches their end − 1, whatever the watermark;
// records are assigned by the clock, not their timestamps, and are never late.
func TestProcessingTimeWindows(t *testing.T) {
	tests := []struct {
		name   string
		fields string
		steps  []step
	}{
		{
			name:   "tumbling",
			fields: `size: 10ms`,
			steps: []step{
				clk(1000), rec(-5, 1, 1), rec(1_000_000, 1, 2),
				wm(operator.MaxWatermark),
				clk(1008),
				clk(1009, win(1, 1000, 1010, "n=2")),
				// At 1009 the record is in [1000, 1010) again, whose new timer is due at once
				// (Flink's ProcessingTimeTrigger does the same).
				rec(0, 1, 3),
				clk(1009, win(1, 1000, 1010, "n=1")),
				clk(1015), rec(0, 1, 4),
				clk(1100, win(1, 1010, 1020, "n=1")),
			},
		},
		{
			name:   "sliding",
			fields: `size: 10ms, slide: 5ms`,
			steps: []step{
				clk(1003), rec(0, 1, 1),
				clk(1004, win(1, 995, 1005, "n=1")),
				clk(1006), rec(0, 1, 2),
				clk(1020, win(1, 1000, 1010, "n=2"), win(1, 1005, 1015, "n=1")),
			},
		},
		{
			name:   "session",
			fields: `gap: 10ms`,
			steps: []step{
				clk(1000), rec(0, 1, 1),
				clk(1005), rec(0, 1, 2),
				wm(operator.MaxWatermark),
				clk(1014, win(1, 1000, 1015, "n=2")),
				clk(1030), rec(0, 1, 3),
				clk(1039, win(1, 1030, 1040, "n=1")),
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			forBackends(t, func(t *testing.T, backend string) {
				h := operatortest.New(t, keyedSpec(`type: window, time: processing, `+tc.fields+`, aggregates: {n: "count()"}`), "op", operatortest.Options{Backend: backend})
				run(t, h, tc.steps)
				checkEmpty(t, h, "after the last window fired")
				if h.Dropped() != 0 {
					t.Errorf("Dropped() = %d, want 0", h.Dropped())
				}
			})
		})
	}
}

// window-all runs keyed by one constant key: all records in one window, no key in the output.
func TestWindowAll(t *testing.T) {
	const spec = `
name: harness
operators:
  - {name: src, type: sequence, from: 1, to: 10}
  - {name: m, type: map, fields: {k: "value % 5", v: "value", ts: "value"}}
  - {name: wm, type: watermark, timestamp: "ts"}
  - {name: op, type: window-all, size: 10ms, slide: 5ms, aggregates: {n: "count()", total: "sum(v)"}}
  - {name: out, type: discard}
`
	forBackends(t, func(t *testing.T, backend string) {
		h := operatortest.New(t, spec, "op", operatortest.Options{Backend: backend})
		for i, k := range []int64{1, 2, 3} {
			if err := h.Process(int64(i*4), h.Row(0, k, k*10, 0)); err != nil {
				t.Fatal(err)
			}
		}
		watermark(t, h, operator.MaxWatermark)
		checkOutput(t, h, "window-all",
			"{window_start=-5 window_end=5 n=2 total=30}@4",
			"{window_start=0 window_end=10 n=3 total=60}@9",
			"{window_start=5 window_end=15 n=1 total=30}@14")
		checkEmpty(t, h, "at the maximum watermark")
	})
}

// A checkpoint in the middle of a window stream, restored on either backend (also the other
// one), gives the same output as an uninterrupted run: panes, sessions and timers (event and
// processing time) are in the snapshot. The restored watermark starts from the minimum, as a
// task's does; the test re-sends the last one, as the regenerated watermarks would.
func TestWindowCheckpointRestore(t *testing.T) {
	for _, fields := range []string{
		`size: 10ms, allowed-lateness: 5ms`,
		`size: 10ms, slide: 3ms, allowed-lateness: 4ms`,
		`gap: 4ms, allowed-lateness: 6ms`,
		`time: processing, size: 10ms, slide: 5ms`,
		`time: processing, gap: 5ms`,
	} {
		t.Run(fields, func(t *testing.T) {
			spec := keyedSpec(`type: window, ` + fields + `, aggregates: {n: "count()", total: "sum(v)", fst: "first(v)"}`)
			// A script of records (ts, k, v), watermarks and clock ticks: w and c steps.
			script := []step{
				clk(100), rec(1, 1, 1), rec(3, 2, 2), rec(12, 1, 3), wm(5), clk(103), rec(2, 1, 4), rec(14, 2, 5),
				wm(11), clk(107), rec(7, 1, 6), rec(22, 1, 7), rec(9, 2, 8), wm(16), clk(111), rec(13, 1, 9),
				rec(30, 2, 10), wm(24), clk(118), rec(20, 1, 11), rec(4, 1, 12), wm(100), clk(200),
			}
			play := func(t *testing.T, h *operatortest.Harness, steps []step) {
				for _, s := range steps {
					switch s.kind {
					case 'r':
						process(t, h, s.ts, s.k, s.v)
					case 'w':
						watermark(t, h, s.ts)
					case 'c':
						clock(t, h, s.ts)
					}
				}
			}
			ref := operatortest.New(t, spec, "op", operatortest.Options{})
			play(t, ref, script)
			want := take(ref)
			if len(want) < 4 {
				t.Fatalf("the uninterrupted run emitted %q: too little to compare", want)
			}
			for _, from := range backends {
				for _, to := range backends {
					for cut := 1; cut < len(script); cut += 3 {
						t.Run(fmt.Sprintf("%s-to-%s/cut-%d", from, to, cut), func(t *testing.T) {
							h := operatortest.New(t, spec, "op", operatortest.Options{Backend: from})
							play(t, h, script[:cut])
							before := take(h)
							lastWM := h.Watermark()
							h = restart(t, h, spec, int64(cut), to)
							if lastWM != operator.MinWatermark {
								watermark(t, h, lastWM)
							}
							play(t, h, script[cut:])
							got := append(before, take(h)...)
							slices.Sort(got)
							if !slices.Equal(got, want) {
								t.Errorf("output with a restore after step %d\n  %q\nwant\n  %q", cut, got, want)
							}
							checkEmpty(t, h, "at the end")
						})
					}
				}
			}
		})
	}
}

// A snapshot of one subtask restores into two of a new parallelism, each taking its key
// groups (window state and timers), and together they emit what one would have.
func TestWindowRescale(t *testing.T) {
	spec := keyedSpec(`type: window, size: 10ms, aggregates: {n: "count()", total: "sum(v)"}`)
	forBackends(t, func(t *testing.T, backend string) {
		one := operatortest.New(t, spec, "op", operatortest.Options{Backend: backend})
		for k := range int64(20) {
			process(t, one, k%10, k, k)
			process(t, one, 11, k, 100)
		}
		snap, err := one.Snapshot(1)
		if err != nil {
			t.Fatal(err)
		}
		watermark(t, one, operator.MaxWatermark)
		want := take(one)

		var got []string
		var owned []int
		for sub := range 2 {
			h := operatortest.New(t, spec, "op", operatortest.Options{Backend: backend, Subtask: sub, Parallelism: 2, Restore: []*operatortest.Snapshot{snap}})
			watermark(t, h, operator.MaxWatermark)
			out := take(h)
			owned = append(owned, len(out))
			got = append(got, out...)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("two subtasks emitted\n  %q\nwant\n  %q", got, want)
		}
		if owned[0] == 0 || owned[1] == 0 {
			t.Errorf("subtasks emitted %v records: the keys were not split", owned)
		}
	})
}

// A key outside the harness's key groups fails in the state backend, as in a task.
func TestWindowKeyOutOfRange(t *testing.T) {
	h := operatortest.New(t, keyedSpec(`type: window, size: 10ms, aggregates: {n: "count()"}`), "op", operatortest.Options{Subtask: 1, Parallelism: 2})
	var in, out int
	for k := range int64(20) {
		r := h.Row(0, row(k, k)...)
		owns, err := h.Owns(0, r)
		if err != nil {
			t.Fatal(err)
		}
		err = h.Process(0, r)
		switch {
		case owns && err != nil:
			t.Errorf("Process(key %d), which the subtask owns = %v", k, err)
		case !owns && err == nil:
			t.Errorf("Process(key %d), which the subtask does not own, succeeded", k)
		case owns:
			in++
		default:
			out++
		}
	}
	if in == 0 || out == 0 {
		t.Errorf("%d keys owned, %d not: want both", in, out)
	}
	if m := entries(t, h); m["window/panes"] != in {
		t.Errorf("state entries = %v, want %d panes", m, in)
	}
}

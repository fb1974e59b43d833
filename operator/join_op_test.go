package operator_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/goflink/goflink/operator"
	"github.com/goflink/goflink/operator/operatortest"
)

// side hands a join a record of input i (0 left, 1 right) of key k and value v at ts.
func side(t testing.TB, h *operatortest.Harness, i int, ts, k, v int64) {
	t.Helper()
	if err := h.ProcessInput(i, ts, h.Row(i, k, v, ts)); err != nil {
		t.Fatalf("ProcessInput(%d, ts %d, k %d, v %d) = %v", i, ts, k, v, err)
	}
}

// jstep is a step of a join script: a left or right record, or a watermark; the output after
// it must be want (in any order).
type jstep struct {
	input    int // 0 left, 1 right, -1 watermark, -2 clock
	ts, k, v int64
	want     []string
}

func left(ts, k, v int64, want ...string) jstep {
	return jstep{input: 0, ts: ts, k: k, v: v, want: want}
}
func right(ts, k, v int64, want ...string) jstep {
	return jstep{input: 1, ts: ts, k: k, v: v, want: want}
}
func jwm(w int64, want ...string) jstep    { return jstep{input: -1, ts: w, want: want} }
func jclk(now int64, want ...string) jstep { return jstep{input: -2, ts: now, want: want} }

func runJoin(t *testing.T, h *operatortest.Harness, steps []jstep) {
	t.Helper()
	for i, s := range steps {
		switch s.input {
		case -1:
			watermark(t, h, s.ts)
		case -2:
			clock(t, h, s.ts)
		default:
			side(t, h, s.input, s.ts, s.k, s.v)
		}
		checkOutput(t, h, fmt.Sprintf("step %d (%+v)", i, s), s.want...)
	}
}

// wpair is a window-join result: the left (lv at lts) and right (rv at rts) records of key k
// in window [start, end).
func wpair(k, lv, lts, rv, rts, start, end int64) string {
	return fmt.Sprintf("{k=%d lv=%d ts=%d right_k=%d rv=%d right_ts=%d window_start=%d window_end=%d}@%d", k, lv, lts, k, rv, rts, start, end, end-1)
}

// ipair is an interval-join result, timestamped with the later of the two records.
func ipair(k, lv, lts, rv, rts int64) string {
	return fmt.Sprintf("{k=%d lv=%d ts=%d right_k=%d rv=%d right_ts=%d}@%d", k, lv, lts, k, rv, rts, max(lts, rts))
}

// A window join emits, when a window fires, every pair of a left and a right record of one
// key in it: per window (a pair in two sliding windows twice), never across keys or windows.
// A record whose windows have all fired is late: dropped and counted. Once the watermark
// passed every window the buffers and timers are empty.
func TestWindowJoin(t *testing.T) {
	tests := []struct {
		name    string
		fields  string
		steps   []jstep
		dropped int64
	}{
		{
			name:   "tumbling",
			fields: `size: 10ms`,
			steps: []jstep{
				left(0, 1, 1), right(9, 1, 2), right(10, 1, 3), left(9, 2, 4), right(5, 2, 5), right(3, 3, 6),
				left(19, 1, 7), left(-1, 1, 8), right(-10, 1, 9),
				jwm(-1, wpair(1, 8, -1, 9, -10, -10, 0)),
				jwm(8),
				jwm(9, wpair(1, 1, 0, 2, 9, 0, 10), wpair(2, 4, 9, 5, 5, 0, 10)),
				left(9, 1, 10), // late: [0, 10) fired
				right(10, 1, 11),
				jwm(19, wpair(1, 7, 19, 3, 10, 10, 20), wpair(1, 7, 19, 11, 10, 10, 20)),
			},
			dropped: 1,
		},
		{
			name:   "sliding",
			fields: `size: 10ms, slide: 5ms`,
			steps: []jstep{
				left(7, 1, 1), right(8, 1, 2), right(12, 1, 3),
				jwm(9, wpair(1, 1, 7, 2, 8, 0, 10)),
				left(6, 1, 4), // still in [5, 15), which has not fired: not late
				jwm(14, wpair(1, 1, 7, 2, 8, 5, 15), wpair(1, 1, 7, 3, 12, 5, 15), wpair(1, 4, 6, 2, 8, 5, 15), wpair(1, 4, 6, 3, 12, 5, 15)),
				right(9, 1, 5), // both its windows fired: late
				jwm(19),
			},
			dropped: 1,
		},
		{
			// size 10, slide 3: ts 0 is in four windows, all four fire a pair at 0.
			name:   "sliding-10-3",
			fields: `size: 10ms, slide: 3ms`,
			steps: []jstep{
				left(0, 1, 1), right(0, 1, 2),
				jwm(0, wpair(1, 1, 0, 2, 0, -9, 1)),
				jwm(100, wpair(1, 1, 0, 2, 0, -6, 4), wpair(1, 1, 0, 2, 0, -3, 7), wpair(1, 1, 0, 2, 0, 0, 10)),
			},
		},
		{
			name:   "offset",
			fields: `size: 10ms, offset: 5ms`,
			steps: []jstep{
				left(4, 1, 1), right(5, 1, 2), right(0, 1, 3),
				jwm(4, wpair(1, 1, 4, 3, 0, -5, 5)),
				jwm(14),
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			forBackends(t, func(t *testing.T, backend string) {
				h := operatortest.New(t, joinSpec(`type: window-join, `+tc.fields), "op", operatortest.Options{Backend: backend})
				runJoin(t, h, tc.steps)
				if got := h.Dropped(); got != tc.dropped {
					t.Errorf("Dropped() = %d, want %d", got, tc.dropped)
				}
				checkEmpty(t, h, "after every window fired")
			})
		})
	}
}

// A processing-time window join assigns records by the clock and fires on it.
func TestWindowJoinProcessingTime(t *testing.T) {
	forBackends(t, func(t *testing.T, backend string) {
		h := operatortest.New(t, joinSpec(`type: window-join, size: 10ms, time: processing`), "op", operatortest.Options{Backend: backend, ProcessingTime: 100})
		runJoin(t, h, []jstep{
			left(-50, 1, 1), jclk(105), right(7, 1, 2),
			jwm(operator.MaxWatermark),
			jclk(109, "{k=1 lv=1 ts=-50 right_k=1 rv=2 right_ts=7 window_start=100 window_end=110}@109"),
			right(0, 1, 3), // at 109 in [100, 110) again, without its left partner (gone)
			jclk(200),
		})
		checkEmpty(t, h, "after the last window")
	})
}

// An interval join emits a pair as soon as both records are there, when the right one's
// timestamp is within [left + lower, left + upper] (inclusive), timestamped with the later of
// the two. A record behind the watermark is late and dropped; a record is kept until the
// watermark shows no partner can come (left: ts + upper, right: ts − lower), so once it
// passed the last one the state is empty.
func TestIntervalJoin(t *testing.T) {
	tests := []struct {
		name    string
		between string
		steps   []jstep
		dropped int64
	}{
		{
			name:    "symmetric",
			between: `[-5ms, 5ms]`,
			steps: []jstep{
				left(10, 1, 1),
				right(5, 1, 2, ipair(1, 1, 10, 2, 5)),   // 10 − 5: the lower bound, included
				right(15, 1, 3, ipair(1, 1, 10, 3, 15)), // 10 + 5: the upper bound, included
				right(4, 1, 4), right(16, 1, 5),         // just outside
				right(10, 2, 6), // another key
				left(20, 1, 7, ipair(1, 7, 20, 3, 15), ipair(1, 7, 20, 5, 16)),
				jwm(12),
				left(11, 1, 8),                          // late: 11 < 12
				right(12, 1, 9, ipair(1, 1, 10, 9, 12)), // not late: 12 is not behind 12
				jwm(25),
				jwm(26),
			},
			dropped: 1,
		},
		{
			name:    "ahead",
			between: `[2ms, 8ms]`,
			steps: []jstep{
				left(0, 1, 1), right(1, 1, 2), right(2, 1, 3, ipair(1, 1, 0, 3, 2)), right(8, 1, 4, ipair(1, 1, 0, 4, 8)), right(9, 1, 5),
				left(-3, 1, 6, ipair(1, 6, -3, 2, 1), ipair(1, 6, -3, 3, 2)),
				jwm(7),
				right(7, 1, 7, ipair(1, 1, 0, 7, 7)), // the left at 0 is kept until 0 + 8
				jwm(8),
				right(8, 1, 8), // no partner left: the left at 0 went at 8
				jwm(100),
			},
		},
		{
			name:    "behind",
			between: `[-8ms, -2ms]`,
			steps: []jstep{
				right(0, 1, 1), left(1, 1, 2), left(2, 1, 3, ipair(1, 3, 2, 1, 0)), left(8, 1, 4, ipair(1, 4, 8, 1, 0)),
				jwm(7),
				left(6, 1, 5), // late
				left(7, 1, 6, ipair(1, 6, 7, 1, 0)),
				jwm(100),
			},
			dropped: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			forBackends(t, func(t *testing.T, backend string) {
				h := operatortest.New(t, joinSpec(`type: interval-join, between: `+tc.between), "op", operatortest.Options{Backend: backend})
				runJoin(t, h, tc.steps)
				if got := h.Dropped(); got != tc.dropped {
					t.Errorf("Dropped() = %d, want %d", got, tc.dropped)
				}
				checkEmpty(t, h, "after the watermark passed every record's time")
			})
		})
	}
}

// The interval join keeps a record exactly until the watermark reaches its last possible
// partner's time, not longer.
func TestIntervalJoinCleanupTiming(t *testing.T) {
	forBackends(t, func(t *testing.T, backend string) {
		h := operatortest.New(t, joinSpec(`type: interval-join, between: [-3ms, 7ms]`), "op", operatortest.Options{Backend: backend})
		side(t, h, 0, 100, 1, 1) // kept until 107
		side(t, h, 1, 100, 2, 1) // kept until 103
		watermark(t, h, 102)
		if m := entries(t, h); m["join/left"] != 1 || m["join/right"] != 1 {
			t.Errorf("at wm 102: %v, want a left and a right record", m)
		}
		watermark(t, h, 103)
		if m := entries(t, h); m["join/left"] != 1 || m["join/right"] != 0 {
			t.Errorf("at wm 103: %v, want only the left record", m)
		}
		watermark(t, h, 106)
		if m := entries(t, h); m["join/left"] != 1 {
			t.Errorf("at wm 106: %v, want the left record", m)
		}
		watermark(t, h, 107)
		checkEmpty(t, h, "at wm 107")
	})
}

// A checkpoint in the middle of a join, restored on either backend (also the other), gives
// the same pairs as an uninterrupted run.
func TestJoinCheckpointRestore(t *testing.T) {
	for _, fields := range []string{`type: window-join, size: 10ms, slide: 5ms`, `type: interval-join, between: [-4ms, 6ms]`} {
		t.Run(fields, func(t *testing.T) {
			spec := joinSpec(fields)
			script := []jstep{
				left(1, 1, 1), right(3, 1, 2), left(4, 2, 3), jwm(2), right(6, 2, 4), left(8, 1, 5), right(12, 1, 6),
				jwm(9), left(13, 1, 7), right(9, 1, 8), right(14, 2, 9), jwm(15), left(18, 2, 10), right(21, 2, 11),
				left(16, 1, 12), jwm(30), jwm(operator.MaxWatermark),
			}
			play := func(t *testing.T, h *operatortest.Harness, steps []jstep) {
				for _, s := range steps {
					if s.input < 0 {
						watermark(t, h, s.ts)
					} else {
						side(t, h, s.input, s.ts, s.k, s.v)
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
					for cut := 1; cut < len(script)-1; cut += 2 {
						t.Run(fmt.Sprintf("%s-to-%s/cut-%d", from, to, cut), func(t *testing.T) {
							h := operatortest.New(t, spec, "op", operatortest.Options{Backend: from})
							play(t, h, script[:cut])
							got := take(h)
							lastWM := h.Watermark()
							h = restart(t, h, spec, int64(cut), to)
							if lastWM != operator.MinWatermark {
								watermark(t, h, lastWM)
							}
							play(t, h, script[cut:])
							got = append(got, take(h)...)
							slices.Sort(got)
							if !slices.Equal(got, want) {
								t.Errorf("pairs with a restore after step %d\n  %q\nwant\n  %q", cut, got, want)
							}
							checkEmpty(t, h, "at the end")
						})
					}
				}
			}
		})
	}
}

package operator_test

import (
	"slices"
	"testing"

	"github.com/goflink/goflink/operator/operatortest"
)

// Regression tests of window bugs, each named by the case that showed it.

// A late record within the allowed lateness that bridges two sessions that have fired merges
// them, and the merged session fires again at once with the merged result, as Flink's
// EventTimeTrigger (FIRE on an element of a window whose end passed the watermark). It fires
// once: not again when the watermark next advances. Its state is gone once the watermark
// passes its end + lateness.
func TestSessionLateMergeRefires(t *testing.T) {
	forBackends(t, func(t *testing.T, backend string) {
		h := operatortest.New(t, keyedSpec(`type: window, gap: 10ms, allowed-lateness: 100ms, aggregates: {n: "count()", total: "sum(v)"}`), "op", operatortest.Options{Backend: backend})
		run(t, h, []step{
			rec(0, 1, 1), rec(15, 1, 2),
			wm(30, win(1, 0, 10, "n=1 total=1"), win(1, 15, 25, "n=1 total=2")),
			rec(8, 1, 4, win(1, 0, 25, "n=3 total=7")), // [8, 18) bridges both
			wm(31), // fired once
			rec(3, 1, 8, win(1, 0, 25, "n=4 total=15")), // late, within the merged session
			wm(123),
		})
		if got := h.SideOutput("late"); len(got) != 0 {
			t.Errorf("late side output = %v, want none", got)
		}
		if m := entries(t, h); len(m) == 0 {
			t.Errorf("state is empty before the end of the lateness (wm 123 < 24 + 100)")
		}
		run(t, h, []step{wm(124)})
		checkEmpty(t, h, "after the watermark passed end + lateness")
		run(t, h, []step{rec(15, 1, 9)}) // [15, 25) is beyond the lateness now: late
		if got, want := lateRecords(h), []string{"9@15"}; !slices.Equal(got, want) {
			t.Errorf("late side output = %q, want %q", got, want)
		}
		if h.Dropped() != 1 {
			t.Errorf("Dropped() = %d, want 1", h.Dropped())
		}
	})
}

// A session's timers are per key and time, which another session of the key may share: a
// session's cleanup time (end − 1 + lateness) can be another session's firing time. A late
// record merging the first session must not delete the other's timer, or the other never
// fires.
func TestSessionMergeKeepsSharedTimers(t *testing.T) {
	forBackends(t, func(t *testing.T, backend string) {
		h := operatortest.New(t, keyedSpec(`type: window, gap: 3ms, allowed-lateness: 5ms, aggregates: {n: "count()"}`), "op", operatortest.Options{Backend: backend})
		run(t, h, []step{
			rec(0, 1, 1), // [0, 3): fires at 2, cleaned up at 7
			rec(5, 1, 2), // [5, 8): fires at 7
			wm(3, win(1, 0, 3, "n=1")),
			rec(1, 1, 3, win(1, 0, 4, "n=2")), // late within the lateness: [0, 4) fires again
			wm(7, win(1, 5, 8, "n=1")),
			wm(20),
		})
		checkEmpty(t, h, "after every session expired")
	})
}

// A late record within the allowed lateness of some of its sliding windows fires those again,
// not the ones past their own end + lateness: Flink drops the record from an expired window
// (WindowOperator skips windows whose cleanup time passed), whose panes may be gone already.
func TestSlidingLateRecordSkipsExpiredWindows(t *testing.T) {
	forBackends(t, func(t *testing.T, backend string) {
		h := operatortest.New(t, keyedSpec(`type: window, size: 10ms, slide: 5ms, allowed-lateness: 3ms, aggregates: {n: "count()"}`), "op", operatortest.Options{Backend: backend})
		run(t, h, []step{
			rec(1, 1, 1), rec(6, 1, 2),
			wm(9, win(1, -5, 5, "n=1"), win(1, 0, 10, "n=2")),
			wm(14, win(1, 5, 15, "n=1")),
			// ts 8 is in [0, 10), expired at 12, and [5, 15), within its lateness until 17.
			rec(8, 1, 3, win(1, 5, 15, "n=2")),
			wm(30),
		})
		checkEmpty(t, h, "after the lateness")
	})
}

// An offset may be negative, as in Flink (a day's windows in UTC+8 take -8h): -3 ms aligns
// 10 ms windows as +7 ms does. The planner rejected it as an invalid duration.
func TestWindowNegativeOffset(t *testing.T) {
	for _, typ := range []string{"window", "window-join"} {
		spec := keyedSpec(`type: window, size: 10ms, offset: -3ms, aggregates: {n: "count()"}`)
		if typ == "window-join" {
			spec = joinSpec(`type: window-join, size: 10ms, offset: -3ms`)
		}
		if _, err := operatortest.Open(t, spec, "op", operatortest.Options{}); err != nil {
			t.Errorf("%s with offset -3ms: %v", typ, err)
		}
	}
	h := operatortest.New(t, keyedSpec(`type: window, size: 10ms, offset: -3ms, aggregates: {n: "count()"}`), "op", operatortest.Options{})
	run(t, h, []step{
		rec(6, 1, 1), rec(7, 1, 2), rec(-4, 1, 3), rec(-3, 1, 4),
		wm(-4, win(1, -13, -3, "n=1")),
		wm(6, win(1, -3, 7, "n=2")),
		wm(16, win(1, 7, 17, "n=1")),
	})
}

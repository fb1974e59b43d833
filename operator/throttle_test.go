package operator

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/goflink/goflink/record"
)

// openThrottle opens a throttle of rate records/s as subtask 0 of p on a fake clock, whose
// sleeps advance the clock (and are recorded).
func openThrottle(t *testing.T, rate float64, p int) (*throttleOp, *capture, *fakeClock, *[]time.Duration) {
	t.Helper()
	clock := newFakeClock()
	op := newThrottle(throttleConfig{Rate: rate})
	var sleeps []time.Duration
	op.sleep = func(d time.Duration) {
		if d <= 0 {
			t.Fatalf("sleep(%v): a throttle never sleeps for nothing", d)
		}
		sleeps = append(sleeps, d)
		clock.advance(d)
	}
	out := &capture{}
	if err := op.Open(&Context{OperatorName: "t", Parallelism: p, Now: clock.Now}, out); err != nil {
		t.Fatal(err)
	}
	return op, out, clock, &sleeps
}

// TestThrottlePacesRecords checks that records pass unchanged and in order, at the subtask's
// share of the rate (rate/p) over a busy input, each in one wait of at most one record's
// interval.
func TestThrottlePacesRecords(t *testing.T) {
	for _, tc := range []struct {
		name string
		rate float64
		p    int
	}{{"100/s p1", 100, 1}, {"100/s p2", 100, 2}, {"1000/s p4", 1000, 4}} {
		t.Run(tc.name, func(t *testing.T) {
			op, out, clock, sleeps := openThrottle(t, tc.rate, tc.p)
			start := clock.Now()
			perSubtask := tc.rate / float64(tc.p)
			n := int(5 * perSubtask) // five seconds' worth
			for i := range n {
				if err := op.Process(record.Row{record.IntValue(int64(i))}); err != nil {
					t.Fatal(err)
				}
				if len(out.rows) != i+1 {
					t.Fatalf("record %d not emitted before Process returned", i)
				}
			}
			if got := out.ints(0); !slices.Equal(got, seqInts(n)) {
				t.Errorf("emitted %v…, want 0..%d in order", got[:min(5, len(got))], n-1)
			}
			elapsed := clock.Now().Sub(start).Seconds()
			if want := float64(n-1) / perSubtask; math.Abs(elapsed-want) > 1/perSubtask+1e-9 {
				t.Errorf("%d records took %.3f s, want %.3f s (%v/s per subtask)", n, elapsed, want, perSubtask)
			}
			interval := time.Duration(float64(time.Second) / perSubtask)
			for i, d := range *sleeps {
				if d > interval+time.Millisecond || d > maxThrottleWait {
					t.Fatalf("sleep %d was %v, want at most one record's interval %v and %v", i, d, interval, maxThrottleWait)
				}
			}
			if len(*sleeps) < n-int(perSubtask)-1 {
				t.Errorf("%d sleeps for %d records, want about one per record after the first second's", len(*sleeps), n)
			}
		})
	}
}

// TestThrottleWaitIsBounded checks that a rate below ten records/s per subtask never holds the
// task longer than maxThrottleWait for one record, so that a cancel or barrier is not held up.
func TestThrottleWaitIsBounded(t *testing.T) {
	op, out, _, sleeps := openThrottle(t, 1, 2) // half a record per second per subtask
	for i := range 10 {
		if err := op.Process(record.Row{record.IntValue(int64(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if len(out.rows) != 10 {
		t.Fatalf("emitted %d records, want 10", len(out.rows))
	}
	if len(*sleeps) == 0 {
		t.Fatal("a throttle at 0.5 records/s never waited")
	}
	for i, d := range *sleeps {
		if d > maxThrottleWait {
			t.Errorf("sleep %d was %v, want at most %v", i, d, maxThrottleWait)
		}
	}
}

// TestThrottleIdleInputDoesNotWait checks that a slow input passes without waiting: the rate
// is a ceiling, not a delay (only the first record waits one interval: the pace starts with
// it).
func TestThrottleIdleInputDoesNotWait(t *testing.T) {
	op, out, clock, sleeps := openThrottle(t, 10, 1)
	for i := range 20 {
		clock.advance(200 * time.Millisecond) // 5 records/s, below the rate
		if err := op.Process(record.Row{record.IntValue(int64(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if len(*sleeps) != 1 || (*sleeps)[0] != 100*time.Millisecond || len(out.rows) != 20 {
		t.Errorf("input below the rate: sleeps %v, %d records; want one of 100ms (the first record's), 20", *sleeps, len(out.rows))
	}
}

func seqInts(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i)
	}
	return out
}

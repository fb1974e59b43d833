package failover

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/goflink/goflink/config"
)

// t0 is the fake clock's origin; failures happen at t0 plus an offset.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// step is one failure at t0+at and the decision expected for it.
type step struct {
	at   time.Duration
	want Decision
}

func restartAfter(d time.Duration) Decision {
	return Decision{Restart: true, Delay: d, NewAttempt: true}
}

// merged is the decision for a failure merged into the restart due in d.
func merged(d time.Duration) Decision { return Decision{Restart: true, Delay: d} }

var refuse = Decision{NewAttempt: true}

func runSteps(t *testing.T, s RestartStrategy, steps []step) {
	t.Helper()
	for i, st := range steps {
		if got := s.OnFailure(t0.Add(st.at)); got != st.want {
			t.Errorf("failure #%d at +%v: OnFailure = %+v, want %+v (%s)", i+1, st.at, got, st.want, s.Name())
		}
	}
}

func TestNoRestartRefusesEveryFailure(t *testing.T) {
	var s RestartStrategy = NoRestart{}
	runSteps(t, s, []step{{0, refuse}, {time.Hour, refuse}, {48 * time.Hour, refuse}})
	if s.Name() != "NoRestartBackoffTimeStrategy" {
		t.Errorf("Name() = %q", s.Name())
	}
}

func TestFixedDelayCountsEveryFailure(t *testing.T) {
	for _, tc := range []struct {
		name     string
		attempts int
		delay    time.Duration
		steps    []step
	}{
		{"attempts=1: first restarts, second fails", 1, time.Second, []step{
			{0, restartAfter(time.Second)}, {10 * time.Minute, refuse}}},
		{"attempts=0 never restarts", 0, time.Second, []step{{0, refuse}}},
		// Simultaneous failures (one lost TaskManager, several tasks) each count.
		{"simultaneous failures count one by one", 2, 0, []step{
			{0, restartAfter(0)}, {0, restartAfter(0)}, {0, refuse}}},
		// No time-based forgiveness: failures days apart still use up the attempts.
		{"attempts do not recover with time", 3, 250 * time.Millisecond, []step{
			{0, restartAfter(250 * time.Millisecond)}, {24 * time.Hour, restartAfter(250 * time.Millisecond)},
			{48 * time.Hour, restartAfter(250 * time.Millisecond)}, {72 * time.Hour, refuse}, {96 * time.Hour, refuse}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewFixedDelay(tc.attempts, tc.delay)
			if err != nil {
				t.Fatal(err)
			}
			runSteps(t, s, tc.steps)
		})
	}
}

func TestFailureRateTripsAboveNPerIntervalAndRecovers(t *testing.T) {
	const d = 500 * time.Millisecond
	for _, tc := range []struct {
		name     string
		max      int
		interval time.Duration
		steps    []step
	}{
		{"defaults 1 per min: second failure within the minute fails", 1, time.Minute, []step{
			{0, restartAfter(d)}, {30 * time.Second, refuse}}},
		{"1 per min: failures more than a minute apart keep restarting", 1, time.Minute, []step{
			{0, restartAfter(d)}, {time.Minute + time.Millisecond, restartAfter(d)},
			{2*time.Minute + 2*time.Millisecond, restartAfter(d)}}},
		// The window is inclusive: exactly one interval apart is still "within" it.
		{"1 per min: exactly one interval apart trips", 1, time.Minute, []step{
			{0, restartAfter(d)}, {time.Minute, refuse}}},
		{"3 per 10 s: the fourth within 10 s trips", 3, 10 * time.Second, []step{
			{0, restartAfter(d)}, {time.Second, restartAfter(d)}, {2 * time.Second, restartAfter(d)},
			{3 * time.Second, refuse}}},
		// Only the last max+1 failures matter: the oldest slides out of the window.
		{"3 per 10 s: sliding window recovers after the interval", 3, 10 * time.Second, []step{
			{0, restartAfter(d)}, {4 * time.Second, restartAfter(d)}, {8 * time.Second, restartAfter(d)},
			{10*time.Second + time.Millisecond, restartAfter(d)}, // last 4 failures span 0..10.001 s
			{14500 * time.Millisecond, restartAfter(d)},          // 4..14.5 s: 10.5 s
			{16 * time.Second, refuse},                           // 8..16 s: 4 failures in 8 s
			{40 * time.Second, restartAfter(d)},                  // 10.001..40 s
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewFailureRate(tc.max, tc.interval, d)
			if err != nil {
				t.Fatal(err)
			}
			runSteps(t, s, tc.steps)
		})
	}
}

// expOpts returns exponential-delay options without jitter, for exact delays.
func expOpts(initial, maxB time.Duration, mult float64, reset time.Duration, attempts int) ExponentialDelayOptions {
	return ExponentialDelayOptions{InitialBackoff: initial, MaxBackoff: maxB, BackoffMultiplier: mult,
		ResetBackoffThreshold: reset, AttemptsBeforeResetBackoff: attempts}
}

func TestExponentialDelay(t *testing.T) {
	const s, ms = time.Second, time.Millisecond
	inf := config.Infinite
	for _, tc := range []struct {
		name  string
		opts  ExponentialDelayOptions
		steps []step
	}{
		{"grows by the multiplier up to max-backoff", expOpts(s, 10*s, 2, time.Hour, inf), []step{
			{0, restartAfter(1 * s)},       // restart due at 1 s
			{2 * s, restartAfter(2 * s)},   // due at 4 s
			{5 * s, restartAfter(4 * s)},   // due at 9 s
			{10 * s, restartAfter(8 * s)},  // due at 18 s
			{19 * s, restartAfter(10 * s)}, // 16 s capped; due at 29 s
			{30 * s, restartAfter(10 * s)},
		}},
		// Flink 2.x defaults: 1 s × 1.5^a truncated to whole ms, capped at 1 min.
		{"default multiplier 1.5 in whole milliseconds", expOpts(s, time.Minute, 1.5, time.Hour, inf), []step{
			{0, restartAfter(1000 * ms)}, {2 * s, restartAfter(1500 * ms)}, {4 * s, restartAfter(2250 * ms)},
			{7 * s, restartAfter(3375 * ms)}, {11 * s, restartAfter(5062 * ms)}, {17 * s, restartAfter(7593 * ms)},
			{25 * s, restartAfter(11390 * ms)}, {37 * s, restartAfter(17085 * ms)}, {55 * s, restartAfter(25628 * ms)},
			{81 * s, restartAfter(38443 * ms)}, {120 * s, restartAfter(57665 * ms)}, {178 * s, restartAfter(60000 * ms)},
			{239 * s, restartAfter(60000 * ms)},
		}},
		{"failures up to the scheduled restart merge into it", expOpts(s, time.Minute, 2, time.Hour, inf), []step{
			{0, restartAfter(1 * s)},        // due at 1 s
			{300 * ms, merged(700 * ms)},    // before the restart: same attempt, remaining delay
			{1 * s, merged(0)},              // exactly at the scheduled time: still merged
			{1*s + ms, restartAfter(2 * s)}, // after it: next attempt, backoff grew once only
			{2 * s, merged(1*s + ms)},       // due at 3.001 s
			{4 * s, restartAfter(4 * s)},
		}},
		// The threshold counts from the scheduled restart time, not from the failure: the last
		// failure below is more than 1 h after the previous failure but only 1 h − 1 ms after
		// the restart scheduled for it, so it does not reset.
		{"no reset below the threshold from the scheduled restart", expOpts(s, time.Minute, 2, time.Hour, inf), []step{
			{0, restartAfter(1 * s)}, {2 * s, restartAfter(2 * s)}, {5 * s, restartAfter(4 * s)}, // due at 9 s
			{9*s + time.Hour - ms, restartAfter(8 * s)},
		}},
		{"reset at the threshold from the scheduled restart", expOpts(s, time.Minute, 2, time.Hour, inf), []step{
			{0, restartAfter(1 * s)}, {2 * s, restartAfter(2 * s)}, {5 * s, restartAfter(4 * s)}, // due at 9 s
			{9*s + time.Hour, restartAfter(1 * s)}, // reset: initial backoff again
			{9*s + time.Hour + 2*s, restartAfter(2 * s)},
		}},
		{"stops after attempts-before-reset-backoff; merged failures do not count", expOpts(s, time.Minute, 2, time.Hour, 2), []step{
			{0, restartAfter(1 * s)},
			{500 * ms, merged(500 * ms)}, // merged: still attempt 1
			{2 * s, restartAfter(2 * s)}, // attempt 2, due at 4 s
			{3 * s, merged(1 * s)},
			{5 * s, refuse}, // attempt 3 > 2
		}},
		{"attempts-before-reset-backoff counts again after a reset", expOpts(s, time.Minute, 2, time.Minute, 1), []step{
			{0, restartAfter(1 * s)}, // due at 1 s
			{2 * s, refuse},          // attempt 2 > 1; due at 4 s
			{4*s + time.Minute, restartAfter(1 * s)},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := NewExponentialDelay(tc.opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			runSteps(t, st, tc.steps)
		})
	}
}

// scriptedRand always returns the lowest or the highest value of the range.
type scriptedRand struct{ high bool }

func (r scriptedRand) Int64N(n int64) int64 {
	if r.high {
		return n - 1
	}
	return 0
}

// TestExponentialDelayJitterExtremes pins the jitter range [−⌊b·j⌋, +⌊b·j⌋] and the clamping
// to [initial-backoff, max-backoff] with a random source that returns its extremes.
func TestExponentialDelayJitterExtremes(t *testing.T) {
	const ms = time.Millisecond
	opts := ExponentialDelayOptions{InitialBackoff: 1000 * ms, MaxBackoff: 7000 * ms, BackoffMultiplier: 2,
		ResetBackoffThreshold: time.Hour, JitterFactor: 0.25, AttemptsBeforeResetBackoff: config.Infinite}
	// b = 1000, 2000, 4000, 8000; ⌊b/4⌋ = 250, 500, 1000, 2000.
	for _, tc := range []struct {
		high bool
		want []time.Duration
	}{
		{false, []time.Duration{1000 * ms /* 750 raised to initial */, 1500 * ms, 3000 * ms, 6000 * ms}},
		{true, []time.Duration{1250 * ms, 2500 * ms, 5000 * ms, 7000 * ms /* 10000 capped */}},
	} {
		s, err := NewExponentialDelay(opts, scriptedRand{tc.high})
		if err != nil {
			t.Fatal(err)
		}
		now := t0
		for i, want := range tc.want {
			d := s.OnFailure(now)
			if !d.Restart || !d.NewAttempt || d.Delay != want {
				t.Errorf("high=%v attempt %d: %+v, want delay %v", tc.high, i+1, d, want)
			}
			now = now.Add(d.Delay + ms)
		}
	}
}

// TestExponentialDelayJitterBounds checks over many random draws that every delay stays within
// b ± ⌊b·jitter⌋ (clamped to initial/max) and that the jitter really spreads the delays.
func TestExponentialDelayJitterBounds(t *testing.T) {
	const ms = time.Millisecond
	for _, jitter := range []float64{0.1, 0.5, 1} {
		opts := ExponentialDelayOptions{InitialBackoff: 100 * ms, MaxBackoff: time.Hour, BackoffMultiplier: 3,
			ResetBackoffThreshold: time.Hour, JitterFactor: jitter, AttemptsBeforeResetBackoff: config.Infinite}
		rnd := rand.New(rand.NewPCG(1, uint64(jitter*100)))
		const attempts = 6
		lo, hi := make([]time.Duration, attempts), make([]time.Duration, attempts)
		for run := range 2000 {
			s, err := NewExponentialDelay(opts, rnd)
			if err != nil {
				t.Fatal(err)
			}
			now := t0
			b := int64(100)
			for a := range attempts {
				d := s.OnFailure(now)
				off := int64(float64(b) * jitter)
				minD := time.Duration(max(100, b-off)) * ms
				maxD := time.Duration(b+off) * ms
				if !d.Restart || d.Delay < minD || d.Delay > maxD || d.Delay%ms != 0 {
					t.Fatalf("jitter %v run %d attempt %d: delay %v outside [%v, %v] or not whole ms", jitter, run, a+1, d.Delay, minD, maxD)
				}
				if run == 0 || d.Delay < lo[a] {
					lo[a] = d.Delay
				}
				if run == 0 || d.Delay > hi[a] {
					hi[a] = d.Delay
				}
				now = now.Add(d.Delay + ms)
				b *= 3
			}
		}
		// From the second attempt on (the first is clamped below by initial-backoff), the
		// draws must reach close to both ends of the range.
		b := int64(300)
		for a := 1; a < attempts; a++ {
			off := int64(float64(b) * jitter)
			if lo[a] > time.Duration(max(100, b-off*8/10))*ms || hi[a] < time.Duration(b+off*8/10)*ms {
				t.Errorf("jitter %v attempt %d: delays spread only over [%v, %v], want close to %d±%d ms", jitter, a+1, lo[a], hi[a], b, off)
			}
			b *= 3
		}
	}
}

func TestNames(t *testing.T) {
	fd, _ := NewFixedDelay(3, time.Second)
	fr, _ := NewFailureRate(2, time.Minute, 1500*time.Millisecond)
	ed, _ := NewExponentialDelay(DefaultExponentialDelayOptions(), scriptedRand{})
	for _, tc := range []struct {
		s    RestartStrategy
		want string
	}{
		{NoRestart{}, "NoRestartBackoffTimeStrategy"},
		{fd, "FixedDelayRestartBackoffTimeStrategy(maxNumberRestartAttempts=3, backoffTimeMS=1000)"},
		{fr, "FailureRateRestartBackoffTimeStrategy(failuresIntervalMS=60000,backoffTimeMS=1500,maxFailuresPerInterval=2)"},
		{ed, "ExponentialDelayRestartBackoffTimeStrategy(initialBackoffMS=1000, maxBackoffMS=60000, backoffMultiplier=1.5, " +
			"resetBackoffThresholdMS=3600000, jitterFactor=0.1, attemptsBeforeResetBackoff=2147483647, currentRestartAttempt=0, nextRestartTimestamp=-2147483648)"},
	} {
		if got := tc.s.Name(); got != tc.want {
			t.Errorf("Name() = %q\nwant     %q", got, tc.want)
		}
	}
	ed.OnFailure(t0)
	if want := "currentRestartAttempt=1, nextRestartTimestamp=" + "1767225601000)"; !strings.HasSuffix(ed.Name(), want) {
		t.Errorf("after a failure Name() = %q, want suffix %q", ed.Name(), want)
	}
	for f, want := range map[float64]string{2: "2.0", 1.5: "1.5", 0: "0.0", 0.1: "0.1", 1e-4: "1.0E-4", 1.25e8: "1.25E8"} {
		if got := javaDouble(f); got != want {
			t.Errorf("javaDouble(%v) = %q, want %q", f, got, want)
		}
	}
}

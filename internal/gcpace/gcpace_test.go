package gcpace

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		live, headroom uint64
		want           int
	}{
		{live: 0, headroom: 64 * mib, want: 100},        // nothing known yet: Go's default
		{live: 4 * mib, headroom: 64 * mib, want: 1600}, // goal 68 MiB = live + headroom
		{live: 3 * mib, headroom: 64 * mib, want: 2133},
		{live: 64 * mib, headroom: 64 * mib, want: 100},   // goal 128 MiB either way
		{live: 1024 * mib, headroom: 64 * mib, want: 100}, // a large heap: Go's default
		{live: 1, headroom: 64 * mib, want: maxPercent},
	} {
		if got := Percent(tc.live, tc.headroom); got != tc.want {
			t.Errorf("Percent(%d, %d) = %d, want %d", tc.live, tc.headroom, got, tc.want)
		}
		if p := Percent(tc.live, tc.headroom); tc.live > 0 && p < maxPercent {
			// The goal it gives is max(2*live, live+headroom), to a percent's rounding.
			goal := tc.live + tc.live*uint64(p)/100
			want := max(2*tc.live, tc.live+tc.headroom)
			if goal > want || want-goal > tc.live/100+1 {
				t.Errorf("Percent(%d, %d) = %d: goal %d, want %d", tc.live, tc.headroom, p, goal, want)
			}
		}
	}
}

func gogc() uint64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestRunPacesAndRestores runs the pacer in this test's process (live heap a few MiB): it
// raises GOGC so that the goal is the live heap plus the headroom, and sets it back when
// stopped.
func TestRunPacesAndRestores(t *testing.T) {
	if !Enabled() {
		t.Fatal("GOGC is set in the environment: the pacer would be off")
	}
	before := gogc()
	runtime.GC() // a live heap measured
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, slog.New(slog.DiscardHandler), DefaultHeadroom)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for gogc() < 1000 {
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("GOGC stayed %d with a live heap of a few MiB and a headroom of 64 MiB", gogc())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if got := gogc(); got != before {
		t.Fatalf("GOGC after Run = %d, want %d as before", got, before)
	}
}

func TestStartStops(t *testing.T) {
	stop := Start(slog.New(slog.DiscardHandler))
	stop() // goleak (TestMain) fails the package if its goroutine outlived this
}

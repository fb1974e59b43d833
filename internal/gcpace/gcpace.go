// Package gcpace paces the Go garbage collector of a process whose live heap is small and
// whose allocation rate is high, as a TaskManager's: with Go's default GOGC of 100 a live heap
// of a few MiB is collected every few MiB allocated, dozens of times a second, and the
// collector takes a large share of the CPU (a fifth of the keyed sum's throughput in
// make bench).
//
// Run keeps the heap goal at the larger of twice the live heap (GOGC 100, Go's default) and
// the live heap plus a fixed headroom, by setting GOGC from the live heap the last collection
// found. So a process holds at most headroom bytes more than Go's default would let it, and a
// large heap is paced as Go paces it. A GOGC in the environment is the operator's choice and
// turns the pacing off (Enabled); GOMEMLIMIT, a soft limit, still applies over the pacing.
package gcpace

import (
	"context"
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// DefaultHeadroom is how far the heap may grow beyond the live heap before a collection.
const DefaultHeadroom = 64 << 20

// interval is how often Run looks at the live heap, which changes only when a collection
// ends: at most once an interval the goal lags behind a live heap that grew.
const interval = 250 * time.Millisecond

// maxPercent bounds the GOGC Run sets: a live heap of a few bytes paces the same at any
// large value.
const maxPercent = 1 << 20

// Enabled reports whether the process should pace its collector: not when the environment
// sets GOGC.
func Enabled() bool { return os.Getenv("GOGC") == "" }

// Percent is the GOGC that puts the heap goal, live*(1+GOGC/100), at max(2*live,
// live+headroom).
func Percent(live, headroom uint64) int {
	const def = 100
	if live == 0 || headroom <= live {
		return def
	}
	return int(min(headroom*100/live, maxPercent))
}

// Run paces the collector with headroom until ctx is done, then sets GOGC back to what it
// found.
func Run(ctx context.Context, log *slog.Logger, headroom uint64) {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	found := debug.SetGCPercent(100)
	defer debug.SetGCPercent(found)
	log.Debug("pacing the garbage collector", "headroom_bytes", headroom)
	cur := 100
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		metrics.Read(sample)
		var live uint64
		if sample[0].Value.Kind() == metrics.KindUint64 {
			live = sample[0].Value.Uint64()
		}
		// Move only on a change of more than an eighth: each change recomputes the
		// collector's trigger under the heap lock.
		if p := Percent(live, headroom); p > cur+cur/8 || p < cur-cur/8 {
			debug.SetGCPercent(p)
			cur = p
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Start runs Run on a goroutine of its own when Enabled, and returns a function that stops
// it and waits until it has (a no-op when not Enabled).
func Start(log *slog.Logger) (stop func()) {
	if !Enabled() {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, log, DefaultHeadroom)
	}()
	return func() {
		cancel()
		<-done
	}
}

package operator

import (
	"math"
	"time"
)

// RateLimiter paces a source to Rate records per second. A source that fell more than a
// second behind (backpressure, a restore) does not burst to catch up: at most one second's
// worth of records (and at least one) is ever ready. The zero Rate is unlimited.
type RateLimiter struct {
	Rate float64
	// Now is the clock (Context.Now); time.Now when nil.
	Now func() time.Time

	started time.Time
	emitted float64 // records emitted since started
}

// Allowance returns how many records, up to limit, may be emitted now, or how long to wait
// for one. With no rate it allows limit.
func (r *RateLimiter) Allowance(limit int) (int, time.Duration) {
	if r.Rate <= 0 {
		return limit, 0
	}
	now := time.Now()
	if r.Now != nil {
		now = r.Now()
	}
	if r.started.IsZero() {
		r.started = now
	}
	due := now.Sub(r.started).Seconds() * r.Rate
	if burst := max(r.Rate, 1); due-r.emitted > burst {
		r.emitted = due - burst
	}
	allowed := math.Floor(due - r.emitted)
	if allowed >= 1 {
		return min(limit, int(min(allowed, math.MaxInt32))), 0
	}
	wait := time.Duration((r.emitted + 1 - due) / r.Rate * float64(time.Second))
	return 0, max(wait, time.Millisecond)
}

// Emitted counts n records as emitted.
func (r *RateLimiter) Emitted(n int) { r.emitted += float64(n) }

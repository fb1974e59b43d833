package operator

import (
	"time"

	"github.com/goflink/goflink/record"
)

// Throttle passes records through unchanged at most rate records per second across the job
// (spec field rate; each of p subtasks passes rate/p, as the sequence source paces itself):
// deliberate backpressure for tests and benchmarks, such as a slow sink (a throttle chained
// before it).
var Throttle = Define(Type{Name: "throttle", Fields: []string{"rate"}}, planThrottle,
	func(c throttleConfig, _, _ *record.Schema) (any, error) { return newThrottle(c), nil })

// maxThrottleWait bounds how long one record waits in Process: the task's event loop serves
// nothing else meanwhile (a cancel, a barrier), so it is never held up longer. A subtask's
// rate below one record per maxThrottleWait (10 records/s) is therefore not reached: each
// record then waits maxThrottleWait.
const maxThrottleWait = 100 * time.Millisecond

type throttleConfig struct {
	Rate float64 `json:"rate"`
}

func planThrottle(p *Planner) (throttleConfig, *Shape) {
	var c throttleConfig
	if e, ok := p.Require("rate"); ok {
		if rate, ok := e.Float(); ok {
			if rate <= 0 {
				e.Problemf("must be positive (records per second), got %v", rate)
			}
			c.Rate = rate
		}
	}
	return c, p.In
}

// throttleOp delays each record until the rate allows it, then emits it: a record is always
// passed on before Process returns, so a barrier behind it finds nothing held back.
type throttleOp struct {
	Base
	rate  float64 // records per second of the whole operator
	pace  RateLimiter
	sleep func(time.Duration) // time.Sleep; a test's fake clock advances instead
}

func newThrottle(c throttleConfig) *throttleOp {
	return &throttleOp{rate: c.Rate, sleep: time.Sleep}
}

func (t *throttleOp) Open(ctx *Context, out Output) error {
	t.pace = RateLimiter{Rate: t.rate / float64(max(ctx.Parallelism, 1)), Now: ctx.Now}
	return t.Base.Open(ctx, out)
}

func (t *throttleOp) Process(row record.Row) error {
	if n, wait := t.pace.Allowance(1); n == 0 {
		// One wait for one record: the limiter says when the next is due (at most one
		// record's interval away), bounded by maxThrottleWait.
		t.sleep(min(wait, maxThrottleWait))
	}
	t.pace.Emitted(1)
	return t.out.Emit(row)
}

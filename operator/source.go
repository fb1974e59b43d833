package operator

import (
	"math"
	"time"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// SequenceSchema is the output schema of the sequence source.
var SequenceSchema = record.MustSchema(record.Field{Name: "value", Type: record.Int64})

// sequence emits from..to (or forever); subtask i of p emits from+i, from+i+p, ...
type sequence struct {
	from    int64
	to      int64
	bounded bool
	rate    float64 // records per second for this subtask; 0 = unlimited

	ctx     *Context
	out     Output
	next    int64
	step    int64
	row     record.Row
	done    bool
	started time.Time
	emitted float64 // records emitted since started (for the rate limit)
}

func newSequence(s *pb.SequenceSource) *sequence {
	return &sequence{from: s.GetFrom(), to: s.GetTo(), bounded: s.To != nil, rate: s.GetRate()}
}

func (s *sequence) Open(ctx *Context, out Output) error {
	s.ctx, s.out = ctx, out
	s.step = int64(ctx.Parallelism)
	s.next = s.from + int64(ctx.Subtask)
	s.row = make(record.Row, 1)
	s.rate /= float64(ctx.Parallelism)
	s.done = s.bounded && s.next > s.to
	return nil
}

// Position returns the next value this subtask will emit.
func (s *sequence) Position() int64 { return s.next }

func (s *sequence) Emit(max int) (int, time.Duration, bool, error) {
	if s.done {
		return 0, 0, true, nil
	}
	if s.rate > 0 {
		allowed, wait := s.allowance()
		if allowed == 0 {
			return 0, wait, false, nil
		}
		max = min(max, allowed)
	}
	n := 0
	for n < max {
		s.row[0] = record.IntValue(s.next)
		if err := s.out.Emit(s.row); err != nil {
			return n, 0, false, err
		}
		n++
		if s.bounded && s.to-s.next < s.step {
			s.done = true
			break
		}
		s.next += s.step
	}
	s.emitted += float64(n)
	return n, 0, s.done, nil
}

// allowance returns how many records the rate allows now, or how long to wait for one. A
// source that fell more than a second behind (backpressure) does not burst to catch up.
func (s *sequence) allowance() (int, time.Duration) {
	now := s.ctx.Now()
	if s.started.IsZero() {
		s.started = now
	}
	elapsed := now.Sub(s.started).Seconds()
	due := elapsed * s.rate
	// Keep at most one second's worth (and at least one record) ready to emit.
	if burst := max(s.rate, 1); due-s.emitted > burst {
		s.emitted = due - burst
	}
	allowed := math.Floor(due - s.emitted)
	if allowed >= 1 {
		return int(min(allowed, math.MaxInt32)), 0
	}
	wait := time.Duration((s.emitted + 1 - due) / s.rate * float64(time.Second))
	return 0, max(wait, time.Millisecond)
}

func (s *sequence) Close() error { return nil }

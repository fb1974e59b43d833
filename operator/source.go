package operator

import (
	"encoding/json"
	"fmt"
	"time"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// SequenceSchema is the output schema of the sequence source.
var SequenceSchema = record.MustSchema(record.Field{Name: "value", Type: record.Int64})

// Sequence emits the numbers from..to, or from on for ever without to; rate limits the
// records per second of the whole source.
var Sequence = Define(Type{Name: "sequence", Role: RoleSource, Fields: []string{"from", "to", "rate"}}, planSequence,
	func(c sequenceConfig, _, _ *record.Schema) (any, error) { return newSequence(c), nil })

type sequenceConfig struct {
	From int64   `json:"from"`
	To   *int64  `json:"to,omitempty"`
	Rate float64 `json:"rate,omitempty"`
}

func planSequence(p *Planner) (sequenceConfig, *Shape) {
	var c sequenceConfig
	fromOK := false
	if e, ok := p.Require("from"); ok {
		c.From, fromOK = e.Int()
	}
	if e, ok := p.Field("to"); ok {
		if to, ok := e.Int(); ok {
			if fromOK && to < c.From {
				e.Problemf("to (%d) is below from (%d)", to, c.From)
			}
			c.To = &to
		}
	}
	if e, ok := p.Field("rate"); ok {
		if rate, ok := e.Float(); ok && rate < 0 {
			e.Problemf("must not be negative, got %v", rate)
		} else {
			c.Rate = rate
		}
	}
	return c, KnownShape(SequenceSchema)
}

// sequence emits from..to (or forever); subtask i of p emits from+i, from+i+p, ...
//
// It is checkpointable: its position is the operator list state "position" (union
// distributed), one element per subtask. A restored subtask continues after the last value it
// emitted before the checkpoint's barrier; the rate limit starts afresh from there (no burst to
// catch up). It cannot be rescaled: a restore with another parallelism fails.
type sequence struct {
	from    int64
	to      int64
	bounded bool
	rate    float64 // records per second of the whole source; 0 = unlimited

	ctx   *Context
	out   Output
	next  int64
	step  int64
	row   record.Row
	done  bool
	pace  RateLimiter
	count int64 // records emitted by this subtask in total, across restores

	list       ListState
	restoredID int64
	restored   []sequencePosition // every subtask's position, applied in Open
}

// sequencePositionState is the operator list state of the sequence source.
const sequencePositionState = "position"

// sequencePosition is one subtask's element of the position state.
type sequencePosition struct {
	Subtask     int   `json:"subtask"`
	Parallelism int   `json:"parallelism"`
	Next        int64 `json:"next"`    // the next value to emit (unless Done)
	Emitted     int64 `json:"emitted"` // records emitted so far
	Done        bool  `json:"done,omitempty"`
}

func newSequence(c sequenceConfig) *sequence {
	s := &sequence{from: c.From, bounded: c.To != nil, rate: c.Rate}
	if c.To != nil {
		s.to = *c.To
	}
	return s
}

func (s *sequence) Open(ctx *Context, out Output) error {
	s.ctx, s.out = ctx, out
	s.step = int64(ctx.Parallelism)
	s.next = s.from + int64(ctx.Subtask)
	s.row = make(record.Row, 1)
	s.pace = RateLimiter{Rate: s.rate / float64(ctx.Parallelism), Now: ctx.Now}
	s.done = s.bounded && s.next > s.to
	if s.restoredID > 0 {
		return s.restore()
	}
	return nil
}

// InitializeState registers the position state; the restored position is applied in Open,
// which knows the subtask.
func (s *sequence) InitializeState(sc StateContext) error {
	l, err := sc.ListState(sequencePositionState, pb.ListDistribution_LIST_DISTRIBUTION_UNION)
	if err != nil {
		return fmt.Errorf("sequence source: %w", err)
	}
	s.list, s.restoredID, s.restored = l, sc.RestoredCheckpointID(), nil
	for i, b := range l.Get() {
		var p sequencePosition
		if err := json.Unmarshal(b, &p); err != nil {
			return fmt.Errorf("sequence source: restoring checkpoint %d: position element %d: %w", s.restoredID, i, err)
		}
		s.restored = append(s.restored, p)
	}
	return nil
}

// restore rewinds to this subtask's position in the restored checkpoint.
func (s *sequence) restore() error {
	log := s.ctx.Log()
	if len(s.restored) == 0 {
		log.Warn("sequence source has no position in the restored checkpoint; starting from the beginning",
			"checkpoint", s.restoredID)
		return nil
	}
	var mine *sequencePosition
	for i := range s.restored {
		p := &s.restored[i]
		if p.Parallelism != s.ctx.Parallelism {
			return fmt.Errorf("sequence source cannot be rescaled: checkpoint has parallelism %d, job has %d",
				p.Parallelism, s.ctx.Parallelism)
		}
		if p.Subtask == s.ctx.Subtask {
			mine = p
		}
	}
	if mine == nil {
		if s.done { // an empty range: the subtask finished before any checkpoint, emitting nothing
			s.restored = nil
			return nil
		}
		return fmt.Errorf("sequence source: checkpoint %d holds no position of subtask %d", s.restoredID, s.ctx.Subtask)
	}
	s.next, s.count = mine.Next, mine.Emitted
	s.done = mine.Done || (s.bounded && s.next > s.to)
	s.restored = nil
	log.Info("restored source position", "checkpoint", s.restoredID, "next", s.next,
		"emitted", s.count, "done", s.done)
	return nil
}

// SnapshotState stores this subtask's position.
func (s *sequence) SnapshotState(id int64) error {
	if s.list == nil {
		return fmt.Errorf("sequence source: snapshot of checkpoint %d without InitializeState", id)
	}
	b, err := json.Marshal(sequencePosition{
		Subtask: s.ctx.Subtask, Parallelism: s.ctx.Parallelism, Next: s.next, Emitted: s.count, Done: s.done,
	})
	if err != nil {
		return fmt.Errorf("sequence source: %w", err)
	}
	s.list.Update([][]byte{b})
	return nil
}

func (s *sequence) Emit(limit int) (int, time.Duration, bool, error) {
	if s.done {
		return 0, 0, true, nil
	}
	limit, wait := s.pace.Allowance(limit)
	if limit == 0 {
		return 0, wait, false, nil
	}
	n := 0
	var err error
	for n < limit {
		s.row[0] = record.IntValue(s.next)
		if err = s.out.Emit(s.row); err != nil {
			break
		}
		n++
		if s.bounded && s.to-s.next < s.step {
			s.done = true
			break
		}
		s.next += s.step
	}
	s.pace.Emitted(n)
	s.count += int64(n)
	return n, 0, s.done, err // not done after an error: it breaks before done is set
}

func (s *sequence) Close() error { return nil }

var (
	_ Source      = (*sequence)(nil)
	_ Stateful    = (*sequence)(nil)
	_ Snapshotter = (*sequence)(nil)
)

package nexmark

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// source is one subtask of a nexmark source: subtask i of p emits the events n with
// n % p == i, in increasing order.
//
// It is checkpointable like the sequence source: its position is the operator list state
// "position" (union distributed), one element per subtask. A restored subtask continues with
// the first event it had not emitted before the checkpoint's barrier; the rate limit starts
// afresh there. It cannot be rescaled: a restore with another parallelism fails.
type source struct {
	cfg Config
	gen *generator

	ctx   *operator.Context
	out   operator.Output
	row   record.Row
	next  int64 // the next event number to emit (unless done)
	step  int64
	done  bool
	pace  operator.RateLimiter
	count int64 // events emitted by this subtask in total, across restores

	list       operator.ListState
	restoredID int64
	restored   []position // every subtask's position, applied in Open
}

// positionState is the name of the source's operator list state.
const positionState = "position"

// position is one subtask's element of the position state.
type position struct {
	Subtask     int   `json:"subtask"`
	Parallelism int   `json:"parallelism"`
	Next        int64 `json:"next"`    // the next event number to emit (unless Done)
	Emitted     int64 `json:"emitted"` // events emitted so far
	Done        bool  `json:"done,omitempty"`
}

func newSource(c Config) *source { return &source{cfg: c} }

// Open prepares the subtask's generator and applies its restored position.
func (s *source) Open(ctx *operator.Context, out operator.Output) error {
	s.ctx, s.out = ctx, out
	s.gen = newGenerator(s.cfg)
	s.row = make(record.Row, numFields)
	s.step = int64(ctx.Parallelism)
	s.next = int64(ctx.Subtask)
	s.pace = operator.RateLimiter{Rate: s.cfg.Rate / float64(ctx.Parallelism), Now: ctx.Now}
	s.done = s.exhausted()
	if s.restoredID > 0 {
		return s.restore()
	}
	return nil
}

// exhausted reports whether a bounded source has no event left at next.
func (s *source) exhausted() bool { return s.cfg.Events != nil && s.next >= *s.cfg.Events }

// InitializeState registers the position state; the restored position is applied in Open,
// which knows the subtask.
func (s *source) InitializeState(sc operator.StateContext) error {
	l, err := sc.ListState(positionState, pb.ListDistribution_LIST_DISTRIBUTION_UNION)
	if err != nil {
		return fmt.Errorf("nexmark source: %w", err)
	}
	s.list, s.restoredID, s.restored = l, sc.RestoredCheckpointID(), nil
	for i, b := range l.Get() {
		var p position
		if err := json.Unmarshal(b, &p); err != nil {
			return fmt.Errorf("nexmark source: restoring checkpoint %d: position element %d: %w", s.restoredID, i, err)
		}
		s.restored = append(s.restored, p)
	}
	return nil
}

// restore moves to this subtask's position in the restored checkpoint.
func (s *source) restore() error {
	log := s.ctx.Log()
	if len(s.restored) == 0 {
		log.Warn("nexmark source has no position in the restored checkpoint; starting from the beginning",
			"checkpoint_id", s.restoredID)
		return nil
	}
	var mine *position
	for i := range s.restored {
		p := &s.restored[i]
		if p.Parallelism != s.ctx.Parallelism {
			return fmt.Errorf("nexmark source cannot be rescaled: checkpoint %d has parallelism %d, job has %d",
				s.restoredID, p.Parallelism, s.ctx.Parallelism)
		}
		if p.Subtask == s.ctx.Subtask {
			mine = p
		}
	}
	if mine == nil {
		if s.done { // no event for this subtask: it finished before any checkpoint
			s.restored = nil
			return nil
		}
		return fmt.Errorf("nexmark source: checkpoint %d holds no position of subtask %d", s.restoredID, s.ctx.Subtask)
	}
	s.next, s.count = mine.Next, mine.Emitted
	s.done = mine.Done || s.exhausted()
	s.restored = nil
	log.Info("restored source position", "checkpoint_id", s.restoredID, "next", s.next,
		"emitted", s.count, "done", s.done)
	return nil
}

// SnapshotState stores this subtask's position.
func (s *source) SnapshotState(id int64) error {
	if s.list == nil {
		return fmt.Errorf("nexmark source: snapshot of checkpoint %d without InitializeState", id)
	}
	b, err := json.Marshal(position{
		Subtask: s.ctx.Subtask, Parallelism: s.ctx.Parallelism, Next: s.next, Emitted: s.count, Done: s.done,
	})
	if err != nil {
		return fmt.Errorf("nexmark source: %w", err)
	}
	s.list.Update([][]byte{b})
	return nil
}

// Emit emits up to limit events, fewer when the rate limit or the end of a bounded source
// comes first.
func (s *source) Emit(limit int) (int, time.Duration, bool, error) {
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
		s.gen.fill(s.next, s.row)
		if err = s.out.Emit(s.row); err != nil {
			break
		}
		n++
		s.next += s.step
		if s.exhausted() {
			s.done = true
			break
		}
	}
	s.pace.Emitted(n)
	s.count += int64(n)
	return n, 0, s.done, err
}

// Close releases nothing: the source holds no resources.
func (s *source) Close() error { return nil }

var (
	_ operator.Source      = (*source)(nil)
	_ operator.Stateful    = (*source)(nil)
	_ operator.Snapshotter = (*source)(nil)
)

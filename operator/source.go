package operator

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// SequenceSchema is the output schema of the sequence source.
var SequenceSchema = record.MustSchema(record.Field{Name: "value", Type: record.Int64})

// Sequence emits the numbers from..to, or from on without to (up to math.MaxInt64, which in
// practice is for ever); rate limits the records per second of the whole source. Any int64
// range works, the whole of it too.
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

// sequence emits from..to (or forever), split like Flink's NumberSequenceSource so that it
// rescales without gaps or repeats: the sequence is cut into S strided splits, split k holding
// from+k, from+k+S, from+k+2S, …, where S is the max parallelism at the job's first start (the
// most subtasks it can ever have). Subtask i of p owns the splits k with k % p == i and emits
// from them in turn, ascending k; unrestored (and whenever p divides S) that is from+i,
// from+i+p, from+i+2p, …
//
// It is checkpointable: its position is the operator list state "position" (union
// distributed), one element per split with the split's next value. A restored subtask takes
// the splits it owns at its parallelism, whatever the parallelism that wrote them; the rate
// limit starts afresh (no burst to catch up).
type sequence struct {
	from int64
	to   int64   // math.MaxInt64 when unbounded
	rate float64 // records per second of the whole source; 0 = unlimited

	ctx   *Context
	out   Output
	row   record.Row
	done  bool
	pace  RateLimiter
	count int64 // records emitted by this subtask's splits in total, across restores

	// splits are the owned splits not exhausted, in emission order (ascending k, or ascending
	// next values after a restore); cur is the next to emit from. exhausted are the owned
	// splits with nothing left, kept for the snapshot.
	splits    []seqSplit
	exhausted []seqSplit
	nsplit    int64 // S
	cur       int

	list       ListState
	restoredID int64
	restored   []sequencePosition // every split's position, applied in Open
}

// seqSplit is one owned split: k, its next value, and how many it emitted.
type seqSplit struct {
	k, next, emitted int64
}

// sequencePositionState is the operator list state of the sequence source.
const sequencePositionState = "position"

// sequencePosition is one split's element of the position state. Checkpoints of earlier
// versions hold one element per subtask without Splits: subtask Subtask of Parallelism
// emitted from+Subtask+j*Parallelism, which is split Subtask of Parallelism splits.
type sequencePosition struct {
	Split       int64 `json:"split"`
	Splits      int64 `json:"splits,omitempty"`
	Next        int64 `json:"next"`    // the split's next value to emit (unless Done)
	Emitted     int64 `json:"emitted"` // records the split emitted so far
	Done        bool  `json:"done,omitempty"`
	Subtask     int   `json:"subtask,omitempty"`
	Parallelism int   `json:"parallelism,omitempty"`
}

func newSequence(c sequenceConfig) *sequence {
	s := &sequence{from: c.From, to: math.MaxInt64, rate: c.Rate}
	if c.To != nil {
		s.to = *c.To
	}
	return s
}

// span is b - a for a <= b, exact over the whole int64 range (up to 2^64-1): the sequence's
// arithmetic is on distances, which overflow an int64 once a range spans 2^63 or more.
func span(a, b int64) uint64 { return uint64(b) - uint64(a) }

// holds reports whether split k has a first value: from+k <= to.
func (s *sequence) holds(k int64) bool { return s.from <= s.to && uint64(k) <= span(s.from, s.to) }

func (s *sequence) Open(ctx *Context, out Output) error {
	s.ctx, s.out = ctx, out
	s.row = make(record.Row, 1)
	s.pace = RateLimiter{Rate: s.rate / float64(ctx.Parallelism), Now: ctx.Now}
	if s.restoredID > 0 && len(s.restored) > 0 {
		return s.restore()
	}
	if s.restoredID > 0 {
		ctx.Log().Warn("sequence source has no position in the restored checkpoint; starting from the beginning",
			"checkpoint", s.restoredID)
	}
	s.nsplit = int64(max(ctx.MaxParallelism, ctx.Parallelism, 1))
	s.splits, s.exhausted = nil, nil
	for k := int64(ctx.Subtask); k < s.nsplit; k += int64(ctx.Parallelism) {
		if !s.holds(k) { // from + k would be beyond to, maybe beyond int64
			s.exhausted = append(s.exhausted, seqSplit{k: k})
			continue
		}
		s.addSplit(seqSplit{k: k, next: s.from + k})
	}
	s.done = len(s.splits) == 0
	return nil
}

// addSplit takes an owned split, to emit from unless it is exhausted.
func (s *sequence) addSplit(sp seqSplit) {
	s.count += sp.emitted
	if sp.next > s.to {
		s.exhausted = append(s.exhausted, sp)
		return
	}
	s.splits = append(s.splits, sp)
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
		if p.Splits == 0 { // an element of an earlier version: one per subtask
			p.Split, p.Splits = int64(p.Subtask), int64(p.Parallelism)
		}
		s.restored = append(s.restored, p)
	}
	return nil
}

// restore takes the splits this subtask owns at its parallelism from every split's position in
// the restored checkpoint.
func (s *sequence) restore() error {
	n := s.restored[0].Splits
	seen := make(map[int64]bool, len(s.restored))
	s.splits, s.exhausted, s.count = nil, nil, 0
	for _, p := range s.restored {
		switch {
		case p.Splits != n || n < 1:
			return fmt.Errorf("sequence source: checkpoint %d mixes positions of %d and %d splits", s.restoredID, n, p.Splits)
		case p.Split < 0 || p.Split >= n || seen[p.Split]:
			return fmt.Errorf("sequence source: checkpoint %d holds split %d twice or out of 0..%d", s.restoredID, p.Split, n-1)
		case !p.Done && !s.onSplit(p):
			return fmt.Errorf("sequence source: checkpoint %d: position %d (emitted %d) is not one of split %d of %d from %d",
				s.restoredID, p.Next, p.Emitted, p.Split, n, s.from)
		}
		seen[p.Split] = true
		if p.Split%int64(s.ctx.Parallelism) != int64(s.ctx.Subtask) {
			continue
		}
		sp := seqSplit{k: p.Split, next: p.Next, emitted: p.Emitted}
		if p.Done {
			s.count += p.Emitted
			s.exhausted = append(s.exhausted, sp)
			continue
		}
		s.addSplit(sp)
	}
	for k := range n {
		// A split without a position is one whose subtask finished before any checkpoint:
		// that is only possible for an empty one; otherwise its position was lost.
		if !seen[k] && s.holds(k) {
			return fmt.Errorf("sequence source: checkpoint %d holds no position of split %d (of %d)", s.restoredID, k, n)
		}
	}
	// In the order of their next values: a subtask restored at the same parallelism goes on
	// emitting in increasing order (a snapshot falls within a round, where the splits before
	// the turn are one value ahead).
	slices.SortFunc(s.splits, func(a, b seqSplit) int { return cmp.Or(cmp.Compare(a.next, b.next), cmp.Compare(a.k, b.k)) })
	s.nsplit, s.cur, s.done = n, 0, len(s.splits) == 0
	next := int64(0)
	if len(s.splits) > 0 {
		next = s.splits[0].next
	}
	s.ctx.Log().Info("restored source position", "checkpoint", s.restoredID, "splits", len(s.splits),
		"of", n, "next", next, "emitted", s.count, "done", s.done)
	s.restored = nil
	return nil
}

// onSplit reports whether a restored position is split p.Split's value after p.Emitted
// values: from+k+emitted*S, computed without overflow (a checkpoint of another job, or a
// damaged one, fails the restore instead of emitting values twice or never). p.Split is in
// 0..p.Splits-1.
func (s *sequence) onSplit(p sequencePosition) bool {
	if p.Emitted < 0 || p.Next < s.from {
		return false
	}
	off := span(s.from, p.Next) // = k + emitted*S
	k, n := uint64(p.Split), uint64(p.Splits)
	return off >= k && (off-k)%n == 0 && (off-k)/n == uint64(p.Emitted)
}

// SnapshotState stores the position of every split this subtask owns, exhausted ones too (a
// restore at another parallelism needs them all).
func (s *sequence) SnapshotState(id int64) error {
	if s.list == nil {
		return fmt.Errorf("sequence source: snapshot of checkpoint %d without InitializeState", id)
	}
	var elems [][]byte
	add := func(p sequencePosition) error {
		b, err := json.Marshal(p)
		if err != nil {
			return fmt.Errorf("sequence source: %w", err)
		}
		elems = append(elems, b)
		return nil
	}
	for _, sp := range s.splits {
		if err := add(sequencePosition{Split: sp.k, Splits: s.nsplit, Next: sp.next, Emitted: sp.emitted}); err != nil {
			return err
		}
	}
	for _, sp := range s.exhausted {
		if err := add(sequencePosition{Split: sp.k, Splits: s.nsplit, Emitted: sp.emitted, Done: true}); err != nil {
			return err
		}
	}
	s.list.Update(elems)
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
	for n < limit && len(s.splits) > 0 {
		sp := &s.splits[s.cur]
		s.row[0] = record.IntValue(sp.next)
		if err = s.out.Emit(s.row); err != nil {
			break
		}
		n++
		sp.emitted++
		if span(sp.next, s.to) < uint64(s.nsplit) { // next + S would pass to
			// Exhausted: set it aside, keeping the turn at the split after it.
			s.exhausted = append(s.exhausted, seqSplit{k: sp.k, emitted: sp.emitted})
			s.splits = slices.Delete(s.splits, s.cur, s.cur+1)
		} else {
			sp.next += s.nsplit
			s.cur++
		}
		if s.cur >= len(s.splits) {
			s.cur = 0
		}
	}
	s.done = len(s.splits) == 0
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

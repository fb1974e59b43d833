package operator

import (
	"container/heap"
	"fmt"
	"slices"
	"time"

	"github.com/goflink/goflink/record"
	"github.com/goflink/goflink/state"
)

// TimeDomain says which clock a timer follows.
type TimeDomain uint8

// The time domains of timers.
const (
	// EventTime timers fire when the operator's input watermark reaches their time.
	EventTime TimeDomain = iota
	// ProcessingTime timers fire when the TaskManager's clock reaches their time.
	ProcessingTime
)

func (d TimeDomain) String() string {
	if d == ProcessingTime {
		return "processing time"
	}
	return "event time"
}

// Timer is a timer that fires: its time (epoch milliseconds), domain and key.
type Timer struct {
	Time   int64
	Domain TimeDomain
	Key    record.Value
}

// TimerListener operators receive their timers. When OnTimer runs the timer's key is the
// current key (Context.Key and the keyed state), and records emitted carry the timer's time as
// their timestamp for an event-time timer.
type TimerListener interface {
	OnTimer(t Timer) error
}

// TimerService holds the timers of one keyed operator, per key and time domain, as Flink's
// KeyedProcessFunction has them. Timers live in keyed state (so they are checkpointed,
// restored and split by key group like the operator's other state) and, per domain, in
// buckets in memory by time, rebuilt from the state when the task starts: a window's timers
// share a few times (the window ends) over many keys, so a registration appends a key to a
// bucket and firing walks one. Registering a timer that exists does nothing. It belongs to
// the task's goroutine.
type TimerService struct {
	kb     state.KeyedBackend
	ctx    *Context
	queues [2]timerQueue
}

// timerQueue is the timers of one domain: per key in state (sorted times, the truth), and in
// memory the keys of each time in a bucket, with a min-heap of the bucket times. A deleted
// timer's key stays in its bucket until it is reached (the state shows it gone); live counts
// a bucket's timers that exist.
type timerQueue struct {
	st      *state.ValueState[[]int64]
	times   timeHeap
	buckets map[int64]*timerBucket
}

// timerBucket is the keys with a timer at one time, in registration order; next is the first
// not yet fired. Scheduled timers (Schedule) are in memory only, in scheduled.
type timerBucket struct {
	keys      []record.Value
	next      int
	scheduled []record.Value
	nextSched int
	live      int
}

type timeHeap []int64

func (h timeHeap) Len() int           { return len(h) }
func (h timeHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h timeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timeHeap) Push(x any)        { *h = append(*h, x.(int64)) }
func (h *timeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// timerStateNames are the keyed states of the two domains.
var timerStateNames = [2]string{"timers/event", "timers/processing"}

// NewTimerService returns the timer service of the operator of ctx on keyed backend kb,
// restoring the timers the backend holds. The task creates it.
func NewTimerService(kb state.KeyedBackend, ctx *Context) (*TimerService, error) {
	ts := &TimerService{kb: kb, ctx: ctx}
	for d := range ts.queues {
		q := &ts.queues[d]
		st, err := state.NewValueState(kb, timerStateNames[d], state.Codec[[]int64](int64sCodec{}))
		if err != nil {
			return nil, fmt.Errorf("timers: %w", err)
		}
		q.st, q.buckets = st, map[int64]*timerBucket{}
		keys, err := st.Keys()
		if err != nil {
			return nil, fmt.Errorf("timers: restore: %w", err)
		}
		for _, k := range keys {
			kb.SetCurrentKey(k)
			times, _, err := st.Value()
			if err != nil {
				return nil, fmt.Errorf("timers: restore: %w", err)
			}
			for _, t := range times {
				q.add(t, k)
			}
		}
	}
	return ts, nil
}

// bucket returns the bucket of time t, creating it.
func (q *timerQueue) bucket(t int64) *timerBucket {
	b := q.buckets[t]
	if b == nil {
		b = &timerBucket{}
		q.buckets[t] = b
		heap.Push(&q.times, t)
	}
	return b
}

// add puts key k (owned by the queue) in the bucket of time t.
func (q *timerQueue) add(t int64, k record.Value) {
	b := q.bucket(t)
	b.keys = append(b.keys, k)
	b.live++
}

// CurrentWatermark is the operator's input watermark.
func (ts *TimerService) CurrentWatermark() int64 { return ts.ctx.CurrentWatermark() }

// CurrentProcessingTime is the TaskManager's clock in epoch milliseconds.
func (ts *TimerService) CurrentProcessingTime() int64 { return ts.ctx.now().UnixMilli() }

// Register adds a timer at time t in domain d for the current key.
func (ts *TimerService) Register(d TimeDomain, t int64) error {
	q := &ts.queues[d]
	times, _, err := q.st.Value()
	if err != nil {
		return err
	}
	i, found := slices.BinarySearch(times, t)
	if found {
		return nil
	}
	if i == len(times) {
		times = append(times, t) // the usual case, a later time: in place (a state allows appending)
	} else {
		times = slices.Insert(slices.Clone(times), i, t)
	}
	if err := q.st.Update(times); err != nil {
		return err
	}
	q.add(t, ts.kb.CurrentKey().Clone())
	return nil
}

// Schedule adds a timer at time t in domain d for the current key that is kept in memory
// only: not in state, so not in checkpoints, and not deduplicated. It is for an operator
// whose state says which timers it needs (a join's buffers say when they expire): it
// schedules a timer once for what needs one, and after a restore schedules them again from
// its state (in Open). It cannot be deleted; the operator's OnTimer must tolerate a timer
// that finds nothing to do.
func (ts *TimerService) Schedule(d TimeDomain, t int64) {
	b := ts.queues[d].bucket(t)
	b.scheduled = append(b.scheduled, ts.kb.CurrentKey().Clone())
	b.live++
}

// Delete removes the current key's timer at time t in domain d, if it exists.
func (ts *TimerService) Delete(d TimeDomain, t int64) error {
	q := &ts.queues[d]
	removed, err := q.removeFromState(t)
	if err != nil || !removed {
		return err
	}
	if b := q.buckets[t]; b != nil {
		b.live--
	}
	return nil
}

// removeFromState drops time t from the current key's timers in state, reporting whether it
// was there.
func (q *timerQueue) removeFromState(t int64) (bool, error) {
	times, _, err := q.st.Value()
	if err != nil {
		return false, err
	}
	i, found := slices.BinarySearch(times, t)
	switch {
	case !found:
		return false, nil
	case len(times) == 1:
		return true, q.st.Clear()
	case i == 0:
		return true, q.st.Update(times[1:]) // the usual case, the earliest: no copy
	}
	return true, q.st.Update(slices.Delete(slices.Clone(times), i, i+1))
}

// earliest returns the earliest time with a timer that exists, dropping the buckets before it
// that have none left.
func (q *timerQueue) earliest() (int64, bool) {
	for len(q.times) > 0 {
		t := q.times[0]
		if b := q.buckets[t]; b.live > 0 {
			return t, true
		}
		heap.Pop(&q.times)
		delete(q.buckets, t)
	}
	return 0, false
}

// Next returns the time of the earliest timer of domain d.
func (ts *TimerService) Next(d TimeDomain) (int64, bool) { return ts.queues[d].earliest() }

// Fire fires, in time order, every timer of domain d at or before t, on l; a timer registered
// while firing fires too when it is due. The task calls it when the watermark or the clock
// advances.
func (ts *TimerService) Fire(d TimeDomain, t int64, l TimerListener) error {
	q := &ts.queues[d]
	for {
		next, ok := q.earliest()
		if !ok || next > t {
			return nil
		}
		b := q.buckets[next]
		var k record.Value
		if b.nextSched < len(b.scheduled) {
			k = b.scheduled[b.nextSched]
			b.scheduled[b.nextSched] = record.Value{} // the bucket's memory no longer holds the key
			if b.nextSched++; b.nextSched == len(b.scheduled) {
				b.scheduled, b.nextSched = b.scheduled[:0], 0
			}
			ts.kb.SetCurrentKey(k)
		} else {
			k = b.keys[b.next]
			b.keys[b.next] = record.Value{}
			if b.next++; b.next == len(b.keys) {
				b.keys, b.next = b.keys[:0], 0
			}
			ts.kb.SetCurrentKey(k)
			removed, err := q.removeFromState(next)
			if err != nil {
				return err
			}
			if !removed {
				continue // deleted, or registered again after a delete: a key's stale entry
			}
		}
		b.live--
		ts.ctx.SetKey(k)
		if d == EventTime {
			ts.ctx.SetTimestamp(next)
		}
		if err := l.OnTimer(Timer{Time: next, Domain: d, Key: k}); err != nil {
			return err
		}
	}
}

// now is the context's clock.
func (c *Context) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// int64sCodec encodes a sorted list of times, 8 bytes each.
type int64sCodec struct{}

func (int64sCodec) Append(b []byte, v []int64) []byte {
	for _, t := range v {
		b = state.Int64Codec{}.Append(b, t)
	}
	return b
}

func (int64sCodec) Decode(b []byte) ([]int64, error) {
	if len(b)%8 != 0 {
		return nil, fmt.Errorf("%w: timer list of %d bytes", state.ErrCorrupt, len(b))
	}
	out := make([]int64, 0, len(b)/8)
	for i := 0; i < len(b); i += 8 {
		t, err := state.Int64Codec{}.Decode(b[i : i+8])
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

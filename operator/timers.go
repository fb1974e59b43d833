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
// restored and split by key group like the operator's other state) and in a queue in memory
// per domain, rebuilt from the state when the task starts. Registering a timer that exists
// does nothing. It belongs to the task's goroutine.
type TimerService struct {
	kb     state.KeyedBackend
	ctx    *Context
	queues [2]timerQueue
}

// timerQueue is the timers of one domain: per key in state (sorted times), and a min-heap of
// every timer in memory. Deleted timers stay in the heap until they reach its top (lazy
// deletion); set says which timers exist.
type timerQueue struct {
	st   *state.ValueState[[]int64]
	heap timerHeap
	set  map[timerKey]struct{}
}

type timerKey struct {
	time int64
	key  record.Value
}

type timerHeap []timerKey

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].time < h[j].time }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)        { *h = append(*h, x.(timerKey)) }
func (h *timerHeap) Pop() any {
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
		q.st, q.set = st, map[timerKey]struct{}{}
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
				q.set[timerKey{t, k}] = struct{}{}
				q.heap = append(q.heap, timerKey{t, k})
			}
		}
		heap.Init(&q.heap)
	}
	return ts, nil
}

// CurrentWatermark is the operator's input watermark.
func (ts *TimerService) CurrentWatermark() int64 { return ts.ctx.CurrentWatermark() }

// CurrentProcessingTime is the TaskManager's clock in epoch milliseconds.
func (ts *TimerService) CurrentProcessingTime() int64 { return ts.ctx.now().UnixMilli() }

// Register adds a timer at time t in domain d for the current key.
func (ts *TimerService) Register(d TimeDomain, t int64) error {
	q := &ts.queues[d]
	k := timerKey{t, ts.kb.CurrentKey()}
	if _, ok := q.set[k]; ok {
		return nil
	}
	times, _, err := q.st.Value()
	if err != nil {
		return err
	}
	i, _ := slices.BinarySearch(times, t)
	if err := q.st.Update(slices.Insert(slices.Clone(times), i, t)); err != nil {
		return err
	}
	k.key = k.key.Clone()
	q.set[k] = struct{}{}
	heap.Push(&q.heap, k)
	return nil
}

// Delete removes the current key's timer at time t in domain d, if it exists.
func (ts *TimerService) Delete(d TimeDomain, t int64) error {
	q := &ts.queues[d]
	k := timerKey{t, ts.kb.CurrentKey()}
	if _, ok := q.set[k]; !ok {
		return nil
	}
	delete(q.set, k)
	return q.removeFromState(t)
}

// removeFromState drops time t from the current key's timers in state.
func (q *timerQueue) removeFromState(t int64) error {
	times, _, err := q.st.Value()
	if err != nil {
		return err
	}
	i, found := slices.BinarySearch(times, t)
	if !found {
		return nil
	}
	if len(times) == 1 {
		return q.st.Clear()
	}
	return q.st.Update(slices.Delete(slices.Clone(times), i, i+1))
}

// Next returns the time of the earliest timer of domain d.
func (ts *TimerService) Next(d TimeDomain) (int64, bool) {
	q := &ts.queues[d]
	for len(q.heap) > 0 {
		top := q.heap[0]
		if _, ok := q.set[top]; ok {
			return top.time, true
		}
		heap.Pop(&q.heap) // deleted
	}
	return 0, false
}

// Fire fires, in time order, every timer of domain d at or before t, on l; a timer registered
// while firing fires too when it is due. The task calls it when the watermark or the clock
// advances.
func (ts *TimerService) Fire(d TimeDomain, t int64, l TimerListener) error {
	q := &ts.queues[d]
	for {
		next, ok := ts.Next(d)
		if !ok || next > t {
			return nil
		}
		k := heap.Pop(&q.heap).(timerKey)
		delete(q.set, k)
		ts.kb.SetCurrentKey(k.key)
		ts.ctx.SetKey(k.key)
		if err := q.removeFromState(k.time); err != nil {
			return err
		}
		if d == EventTime {
			ts.ctx.SetTimestamp(k.time)
		}
		if err := l.OnTimer(Timer{Time: k.time, Domain: d, Key: k.key}); err != nil {
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

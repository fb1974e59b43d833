package worker

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// gateItem is one buffer (or a channel failure) delivered to a task.
type gateItem struct {
	ch  *inputChannel
	buf *buffer
	err error
	// prio: a priority event, taken ahead of its channel's queue; it spent no credit unless
	// spent is set (an aligned barrier converted at its timeout, see convertTimedOut).
	// recovered: a buffer of channel state restored from a checkpoint; it spent no credit.
	prio, spent, recovered bool
	// marker holds the place of a priority event in its channel's queue: what is queued
	// ahead of it came before the event. The gate skips it.
	marker bool
}

// isPriority reports whether ev overtakes the buffers queued before it: the barrier of a
// checkpoint taken unaligned.
func isPriority(ev *pb.Event) bool {
	b := ev.GetBarrier()
	return b != nil && priorityBarrier(b)
}

// priorityBarrier reports whether b is the barrier of a checkpoint taken unaligned.
func priorityBarrier(b *pb.CheckpointBarrier) bool {
	return b.GetUnaligned() && b.GetAlignedTimeoutMs() == 0
}

// inputGate merges a task's input channels. Each channel's goroutine pushes what it reads, in
// order, into that channel's queue; the task polls the queues round robin, skipping blocked
// channels (an aligned checkpoint's alignment). A priority event is polled before anything
// else and leaves a marker at its place in its channel's queue; channel failures are polled
// first too. Pushing never blocks: credits bound each channel's queue.
//
// While an unaligned checkpoint collects its input channel state (capture), the gate records
// the data buffers that came before the checkpoint's barrier on each channel: those queued at
// the start and those pushed later, until the barrier (or the channel's end) is pushed.
type inputGate struct {
	mu      sync.Mutex
	queues  [][]gateItem // per channel
	ready   []int        // channels with a queued item, each once, in poll order
	inReady []bool
	prio    []gateItem
	capture *channelCapture
	// timed are the queued barriers of checkpoints that switch to unaligned after their
	// aligned-checkpoint timeout, oldest first (see convertTimedOut).
	timed []gateItem
	// notify wakes the task (capacity 1): something was pushed.
	notify chan struct{}
	// urgent is set while a priority item waits: the task stops in the middle of a buffer.
	urgent atomic.Bool
}

// channelCapture is the input channel state an unaligned checkpoint collects.
type channelCapture struct {
	id       int64
	spilling []bool // per channel: its barrier has not been pushed yet
	numSpill int
	bufs     [][]*buffer // per channel, oldest first
}

func newInputGate(channels int) *inputGate {
	return &inputGate{
		queues:  make([][]gateItem, channels),
		inReady: make([]bool, channels),
		notify:  make(chan struct{}, 1),
	}
}

// push appends buffer b to channel c's queue.
func (g *inputGate) push(c *inputChannel, b *buffer) {
	g.add(gateItem{ch: c, buf: b}, false)
}

// pushRecovered appends a restored channel state buffer to channel c's queue.
func (g *inputGate) pushRecovered(c *inputChannel, b *buffer) {
	g.add(gateItem{ch: c, buf: b, recovered: true}, false)
}

// pushPriority puts event b ahead of everything queued, and its marker at the end of
// channel c's queue.
func (g *inputGate) pushPriority(c *inputChannel, b *buffer) {
	g.add(gateItem{ch: c, buf: b}, true)
}

// fail hands channel c's failure to the task ahead of everything queued.
func (g *inputGate) fail(c *inputChannel, err error) {
	g.mu.Lock()
	g.prio = append(g.prio, gateItem{ch: c, err: err, prio: true})
	g.urgent.Store(true)
	g.mu.Unlock()
	signal(g.notify)
}

func (g *inputGate) add(it gateItem, prio bool) {
	ch := it.ch.idx
	g.mu.Lock()
	g.spill(ch, it.buf)
	if prio {
		g.prio = append(g.prio, gateItem{ch: it.ch, buf: it.buf, prio: true})
		g.urgent.Store(true)
		it = gateItem{ch: it.ch, buf: it.buf, marker: true}
	} else if it.buf.event != nil && isTimeoutable(it.buf.event) {
		g.timed = append(g.timed, it)
	}
	g.queues[ch] = append(g.queues[ch], it)
	if !g.inReady[ch] {
		g.inReady[ch] = true
		g.ready = append(g.ready, ch)
	}
	g.mu.Unlock()
	signal(g.notify)
}

// spill records b for the capture in progress if channel ch is spilling, or ends the
// channel's capture at its barrier or end. g.mu is held.
func (g *inputGate) spill(ch int, b *buffer) {
	c := g.capture
	if c == nil || !c.spilling[ch] {
		return
	}
	if b.event == nil {
		c.bufs[ch] = append(c.bufs[ch], b)
		return
	}
	if endsCapture(b, c.id) {
		c.spilling[ch] = false
		c.numSpill--
	}
}

// endsCapture reports whether b, on a channel, ends that channel's capture for checkpoint id:
// its barrier (or a newer one, or its cancellation) or the channel's end.
func endsCapture(b *buffer, id int64) bool {
	if b.isEndOfPartition() {
		return true
	}
	if bar := b.event.GetBarrier(); bar != nil {
		return bar.GetCheckpointId() >= id
	}
	if cm := b.event.GetCancelCheckpoint(); cm != nil {
		return cm.GetCheckpointId() >= id
	}
	return false
}

// poll returns the next item for the task: a priority item, else, when data is true, the
// head of the next ready channel that is not blocked. ok is false when there is none.
func (g *inputGate) poll(blocked []bool, data bool) (it gateItem, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.prio) > 0 {
		it = g.prio[0]
		g.prio[0] = gateItem{}
		g.prio = g.prio[1:]
		g.urgent.Store(len(g.prio) > 0)
		return it, true
	}
	if !data {
		return gateItem{}, false
	}
	for i := 0; i < len(g.ready); i++ {
		ch := g.ready[i]
		if blocked[ch] {
			continue
		}
		q := g.queues[ch]
		for len(q) > 0 && q[0].marker {
			q[0] = gateItem{}
			q = q[1:]
		}
		if len(q) > 0 {
			it, ok = q[0], true
			q[0] = gateItem{}
			q = q[1:]
		}
		g.queues[ch] = q
		g.ready = append(g.ready[:i], g.ready[i+1:]...)
		if len(q) > 0 {
			g.ready = append(g.ready, ch) // round robin
		} else {
			g.inReady[ch] = false
		}
		if ok {
			return it, true
		}
		i-- // the channel held only markers
	}
	return gateItem{}, false
}

// nextDeadline is when the oldest queued barrier that may go unaligned does so.
func (g *inputGate) nextDeadline() (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.timed) == 0 {
		return time.Time{}, false
	}
	return timedDeadline(g.timed[0].buf.event.GetBarrier()), true
}

// timedDeadline is when barrier b's checkpoint goes unaligned.
func timedDeadline(b *pb.CheckpointBarrier) time.Time {
	return time.UnixMilli(b.GetTimestampMs() + b.GetAlignedTimeoutMs())
}

// convertTimedOut turns every barrier still queued whose aligned-checkpoint timeout passed
// into a priority event (an unaligned barrier), leaving a marker at its place, as Flink
// converts announced barriers: it overtakes the buffers queued before it, which the
// checkpoint then collects as channel state.
func (g *inputGate) convertTimedOut(now time.Time) {
	g.mu.Lock()
	converted := false
	for len(g.timed) > 0 && !now.Before(timedDeadline(g.timed[0].buf.event.GetBarrier())) {
		tb := g.timed[0]
		g.timed = g.timed[1:]
		q := g.queues[tb.ch.idx]
		i := slices.IndexFunc(q, func(it gateItem) bool { return it.buf == tb.buf && !it.marker })
		if i < 0 {
			continue // taken in order already
		}
		q[i].marker = true
		ub := proto.Clone(tb.buf.event.GetBarrier()).(*pb.CheckpointBarrier)
		ub.AlignedTimeoutMs = 0
		g.prio = append(g.prio, gateItem{ch: tb.ch, buf: &buffer{event: &pb.Event{Kind: &pb.Event_Barrier{Barrier: ub}}}, prio: true, spent: true})
		g.urgent.Store(true)
		converted = true
	}
	g.mu.Unlock()
	if converted {
		signal(g.notify)
	}
}

// startCapture begins collecting the input channel state of unaligned checkpoint id: for
// each channel not skipped (its barrier was already processed in order, or it ended), the
// data buffers queued ahead of the barrier, and if the barrier has not been pushed yet, those
// pushed until it is.
func (g *inputGate) startCapture(id int64, skip []bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := &channelCapture{id: id, spilling: make([]bool, len(g.queues)), bufs: make([][]*buffer, len(g.queues))}
	for ch, q := range g.queues {
		if skip[ch] {
			continue
		}
		ended := false
		for _, it := range q {
			if it.buf.event == nil {
				c.bufs[ch] = append(c.bufs[ch], it.buf)
				continue
			}
			if endsCapture(it.buf, id) {
				ended = true
				break
			}
		}
		if !ended {
			c.spilling[ch] = true
			c.numSpill++
		}
	}
	g.capture = c
}

// prependCapture puts b, the rest of the buffer of channel ch that the task is in the middle
// of, first in the capture of checkpoint id: it came before everything queued.
func (g *inputGate) prependCapture(id int64, ch int, b *buffer) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c := g.capture; c != nil && c.id == id && len(b.data) > 0 {
		c.bufs[ch] = append([]*buffer{b}, c.bufs[ch]...)
	}
}

// takeCapture ends the capture of checkpoint id and returns it; nil when it is not the one
// in progress. complete says every channel's barrier (or end) was pushed.
func (g *inputGate) takeCapture(id int64) (c *channelCapture, complete bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c = g.capture
	if c == nil || c.id != id {
		return nil, false
	}
	g.capture = nil
	return c, c.numSpill == 0
}

// dropCapture abandons the capture of checkpoint id, if it is in progress.
func (g *inputGate) dropCapture(id int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.capture != nil && g.capture.id == id {
		g.capture = nil
	}
}

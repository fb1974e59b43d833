package worker

import (
	"fmt"
	"slices"
	"testing"
	"time"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// gateFixture is a gate of n channels and helpers to name buffers.
type gateFixture struct {
	g  *inputGate
	ch []*inputChannel
}

func newGateFixture(n int) *gateFixture {
	f := &gateFixture{g: newInputGate(n)}
	for i := range n {
		f.ch = append(f.ch, &inputChannel{idx: i, gate: f.g})
	}
	return f
}

// data is a data buffer whose bytes name it.
func data(name string) *buffer { return &buffer{data: []byte(name), records: 1} }

func barrierBuf(id int64, unaligned bool) *buffer {
	return &buffer{event: &pb.Event{Kind: &pb.Event_Barrier{Barrier: &pb.CheckpointBarrier{CheckpointId: id, Unaligned: unaligned}}}}
}

// name describes a gate item: "c0:a" for data "a" on channel 0, "c1:bar2" for a barrier, "c1:!bar2" for
// a priority one.
func name(it gateItem) string {
	switch {
	case it.err != nil:
		return fmt.Sprintf("c%d:err", it.ch.idx)
	case it.buf.event == nil:
		return fmt.Sprintf("c%d:%s", it.ch.idx, it.buf.data)
	case it.buf.event.GetBarrier() != nil:
		p := ""
		if it.prio {
			p = "!"
		}
		return fmt.Sprintf("c%d:%sbar%d", it.ch.idx, p, it.buf.event.GetBarrier().GetCheckpointId())
	case it.buf.isEndOfPartition():
		return fmt.Sprintf("c%d:eop", it.ch.idx)
	}
	return fmt.Sprintf("c%d:event", it.ch.idx)
}

// drain polls until nothing is left.
func (f *gateFixture) drain(blocked []bool, dataOK bool) []string {
	var got []string
	for {
		it, ok := f.g.poll(blocked, dataOK)
		if !ok {
			return got
		}
		got = append(got, name(it))
	}
}

func names(bufs []*buffer) []string {
	var s []string
	for _, b := range bufs {
		s = append(s, string(b.data))
	}
	return s
}

func TestGatePollOrder(t *testing.T) {
	f := newGateFixture(3)
	f.g.push(f.ch[0], data("a1"))
	f.g.push(f.ch[0], data("a2"))
	f.g.push(f.ch[1], data("b1"))
	f.g.push(f.ch[2], data("c1"))
	f.g.pushPriority(f.ch[2], barrierBuf(7, true))
	f.g.push(f.ch[2], data("c2"))
	f.g.fail(f.ch[1], fmt.Errorf("lost"))

	// Without room for data only the priority items come, oldest first.
	if got, want := f.drain(make([]bool, 3), false), []string{"c2:!bar7", "c1:err"}; !slices.Equal(got, want) {
		t.Fatalf("poll without data = %q, want %q", got, want)
	}
	// Round robin over the channels; a blocked one is skipped; the marker is never polled.
	blocked := []bool{false, true, false}
	if got, want := f.drain(blocked, true), []string{"c0:a1", "c2:c1", "c0:a2", "c2:c2"}; !slices.Equal(got, want) {
		t.Fatalf("poll with channel 1 blocked = %q, want %q", got, want)
	}
	if got, want := f.drain(make([]bool, 3), true), []string{"c1:b1"}; !slices.Equal(got, want) {
		t.Fatalf("poll after unblocking = %q, want %q", got, want)
	}
	select {
	case <-f.g.notify:
	default:
		t.Fatal("no notification after pushes")
	}
}

// The capture of an unaligned checkpoint holds exactly the data buffers ahead of each
// channel's barrier: queued ones and later ones, whichever way the barrier comes.
func TestGateCapture(t *testing.T) {
	f := newGateFixture(5)
	// Channel 0: its priority barrier arrived, behind a1 a2 (still queued).
	f.g.push(f.ch[0], data("a1"))
	f.g.push(f.ch[0], data("a2"))
	f.g.pushPriority(f.ch[0], barrierBuf(3, true))
	f.g.push(f.ch[0], data("a3")) // after the barrier
	// Channel 1: b1 queued, barrier still to come (in priority, later).
	f.g.push(f.ch[1], data("b1"))
	// Channel 2: c1 queued, then an in-order barrier (a forward edge's) and c2.
	f.g.push(f.ch[2], data("c1"))
	f.g.push(f.ch[2], barrierBuf(3, false))
	f.g.push(f.ch[2], data("c2"))
	// Channel 3: skipped (its barrier was processed in order already).
	f.g.push(f.ch[3], data("d1"))
	// Channel 4: nothing yet; it ends later.

	// The trigger's priority barrier is polled first.
	if it, _ := f.g.poll(make([]bool, 5), true); name(it) != "c0:!bar3" {
		t.Fatalf("first poll = %s, want c0:!bar3", name(it))
	}
	f.g.startCapture(3, []bool{false, false, false, true, false})
	if c, complete := f.g.takeCapture(2); c != nil || complete {
		t.Fatal("takeCapture of another checkpoint returned a capture")
	}
	// Processing does not change the capture: it is by position.
	if it, _ := f.g.poll(make([]bool, 5), true); name(it) != "c0:a1" {
		t.Fatalf("poll = %s, want c0:a1", name(it))
	}
	f.g.push(f.ch[1], data("b2"))
	f.g.pushPriority(f.ch[1], barrierBuf(3, true))
	f.g.push(f.ch[1], data("b3"))
	f.g.push(f.ch[4], data("e1"))
	f.g.push(f.ch[4], &buffer{event: endOfPartition})
	f.g.push(f.ch[4], data("never")) // cannot happen; not collected anyway

	c, complete := f.g.takeCapture(3)
	if c == nil || !complete {
		t.Fatalf("takeCapture(3) = %v, %v; want a complete capture", c, complete)
	}
	want := [][]string{{"a1", "a2"}, {"b1", "b2"}, {"c1"}, nil, {"e1"}}
	for ch := range want {
		if got := names(c.bufs[ch]); !slices.Equal(got, want[ch]) {
			t.Errorf("channel %d captured %q, want %q", ch, got, want[ch])
		}
	}
	if c, _ := f.g.takeCapture(3); c != nil {
		t.Error("second takeCapture(3) returned a capture")
	}
}

func TestGateCaptureIncompleteAndDropped(t *testing.T) {
	f := newGateFixture(2)
	f.g.startCapture(5, []bool{false, false})
	f.g.push(f.ch[0], data("x"))
	f.g.pushPriority(f.ch[0], barrierBuf(5, true))
	if c, complete := f.g.takeCapture(5); c == nil || complete {
		t.Fatalf("takeCapture with channel 1's barrier missing = %v, %v; want an incomplete capture", c, complete)
	}
	f.g.startCapture(6, []bool{false, false})
	f.g.dropCapture(6)
	f.g.push(f.ch[1], data("y"))
	if c, _ := f.g.takeCapture(6); c != nil {
		t.Fatal("takeCapture after dropCapture returned a capture")
	}
	// A newer barrier or a cancellation ends a channel's capture too.
	f.g.startCapture(7, []bool{false, false})
	f.g.push(f.ch[0], barrierBuf(8, false))
	f.g.push(f.ch[1], &buffer{event: &pb.Event{Kind: &pb.Event_CancelCheckpoint{CancelCheckpoint: &pb.CancelCheckpointMarker{CheckpointId: 7}}}})
	if c, complete := f.g.takeCapture(7); c == nil || !complete || len(c.bufs[0])+len(c.bufs[1]) != 2 {
		t.Fatalf("takeCapture(7) = %v, %v; want a complete capture of the 2 queued buffers", c, complete)
	}
}

// A subpartition's priority event overtakes the queued buffers, needs no credit, and reports
// the data buffers it overtook.
func TestSubpartitionPriority(t *testing.T) {
	p := newResultPartition("k", 1, 2, nil)
	s := p.subs[0]
	if !s.add(data("a"), 2) || !s.add(&buffer{event: endOfData}, 2) || s.add(data("c"), 2) {
		t.Fatal("add within/over the limit")
	}
	s.add(data("c"), 0) // no limit: a partly filled buffer before a priority event
	over := s.addPriority(barrierBuf(1, true))
	if got := names(over); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("overtaken = %q, want [a c] (events are not channel state)", got)
	}
	if b, used := s.poll(false); !isPriority(b.event) || used {
		t.Fatalf("poll without credit = %v, %v; want the priority barrier, no credit used", b, used)
	}
	if b, _ := s.poll(false); b != nil {
		t.Fatal("poll without credit returned a buffer")
	}
	select {
	case <-s.space:
		t.Fatal("space signalled before a buffer was taken")
	default:
	}
	if b, used := s.poll(true); string(b.data) != "a" || !used {
		t.Fatalf("poll with credit = %v, %v; want buffer a, credit used", b, used)
	}
	select {
	case <-s.space:
	default:
		t.Fatal("no space signal after a buffer was taken")
	}
}

// timedBarrierBuf is the barrier of checkpoint id triggered at ts that goes unaligned after
// timeout.
func timedBarrierBuf(id int64, ts time.Time, timeout time.Duration) *buffer {
	return &buffer{event: &pb.Event{Kind: &pb.Event_Barrier{Barrier: &pb.CheckpointBarrier{
		CheckpointId: id, Unaligned: true, TimestampMs: ts.UnixMilli(), AlignedTimeoutMs: timeout.Milliseconds(),
	}}}}
}

// A barrier still queued in the input gate at its aligned-checkpoint timeout becomes a
// priority event that overtakes the buffers before it; its place stays as a marker, so that
// a capture collects exactly those buffers, and its credit is given back when it is processed.
func TestGateConvertsTimedOutBarrier(t *testing.T) {
	f := newGateFixture(2)
	t0 := time.UnixMilli(1_000_000)
	f.g.push(f.ch[0], data("a1"))
	f.g.push(f.ch[0], timedBarrierBuf(3, t0, time.Second))
	f.g.push(f.ch[0], data("a2"))
	f.g.push(f.ch[1], timedBarrierBuf(3, t0, time.Second))
	if at, ok := f.g.nextDeadline(); !ok || !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("nextDeadline() = %v, %v; want %v", at, ok, t0.Add(time.Second))
	}
	// Channel 1's barrier is taken in order before the deadline: nothing to convert there.
	blocked := []bool{true, false}
	if it, _ := f.g.poll(blocked, true); name(it) != "c1:bar3" {
		t.Fatalf("poll = %s, want c1:bar3", name(it))
	}
	f.g.convertTimedOut(t0.Add(999 * time.Millisecond))
	if got := f.drain(blocked, false); got != nil {
		t.Fatalf("before the deadline: priority items %q, want none", got)
	}
	f.g.convertTimedOut(t0.Add(time.Second))
	it, ok := f.g.poll(nil, false)
	if !ok || !it.prio || !it.spent || !isPriority(it.buf.event) || it.ch.idx != 0 {
		t.Fatalf("after the deadline: poll = %+v, %v; want channel 0's barrier as a priority event that spent a credit", it, ok)
	}
	if _, has := f.g.nextDeadline(); has {
		t.Error("nextDeadline after both barriers were handled: still one")
	}
	f.g.startCapture(3, []bool{false, true})
	if got := f.drain(make([]bool, 2), true); !slices.Equal(got, []string{"c0:a1", "c0:a2"}) {
		t.Fatalf("channel 0 after the conversion = %q, want a1 a2 (the marker skipped)", got)
	}
	c, complete := f.g.takeCapture(3)
	if !complete || !slices.Equal(names(c.bufs[0]), []string{"a1"}) {
		t.Fatalf("capture = %q (complete %v), want a1, complete", names(c.bufs[0]), complete)
	}
}

// A barrier still queued in a subpartition at its aligned-checkpoint timeout overtakes the
// data buffers before it, which its handle returns; one taken in order returns none.
func TestSubpartitionConvertsTimedOutBarrier(t *testing.T) {
	t0 := time.UnixMilli(2_000_000)
	p := newResultPartition("k", 2, 4, nil)
	s0, s1 := p.subs[0], p.subs[1]
	s0.add(data("a"), 0)
	s0.add(&buffer{event: endOfData}, 0)
	s0.add(data("b"), 0)
	tb0 := s0.addTimed(timedBarrierBuf(5, t0, time.Second))
	s0.add(data("c"), 0)
	tb1 := s1.addTimed(timedBarrierBuf(5, t0, time.Second))
	if b, used := s1.poll(true); b.event.GetBarrier() == nil || !used {
		t.Fatal("the barrier was not taken in order on subpartition 1")
	}
	select {
	case <-tb1.resolved:
		if tb1.converted || tb1.overtaken != nil {
			t.Errorf("subpartition 1: converted %v, overtaken %d; want neither", tb1.converted, len(tb1.overtaken))
		}
	default:
		t.Fatal("subpartition 1's barrier taken in order but not resolved")
	}
	if at, ok := s0.nextDeadline(); !ok || !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("nextDeadline() = %v, %v", at, ok)
	}
	s0.convertTimedOut(t0.Add(time.Second))
	<-tb0.resolved
	if !tb0.converted || !slices.Equal(names(tb0.overtaken), []string{"a", "b"}) {
		t.Fatalf("subpartition 0: converted %v, overtaken %q; want a b", tb0.converted, names(tb0.overtaken))
	}
	b, used := s0.poll(false)
	if b == nil || !isPriority(b.event) || used {
		t.Fatalf("poll without credit = %v; want the barrier as a priority event", b)
	}
	var rest []string
	for b, _ := s0.poll(true); b != nil; b, _ = s0.poll(true) {
		if b.event != nil {
			rest = append(rest, "event")
			continue
		}
		rest = append(rest, string(b.data))
	}
	if !slices.Equal(rest, []string{"a", "event", "b", "c"}) {
		t.Fatalf("queue after the conversion = %q, want a event b c", rest)
	}
	// A release settles a barrier still queued.
	tb := s1.addTimed(timedBarrierBuf(6, t0, time.Hour))
	p.release(errPartitionReleased)
	select {
	case <-tb.resolved:
	default:
		t.Fatal("release left a timed barrier unresolved")
	}
}

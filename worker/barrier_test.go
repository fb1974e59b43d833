package worker

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// recorder is a fake barrierActions that logs every call as a short string:
// "block 2", "unblock", "trigger 7 ts=700 align=3s", "abort 7 CHECKPOINT_DECLINED_SUBSUMED".
type recorder struct {
	calls      []string
	triggerErr error // returned by triggerCheckpoint
	abortErr   error // returned by abortCheckpoint
}

func (r *recorder) blockChannel(ch int) { r.calls = append(r.calls, fmt.Sprintf("block %d", ch)) }

func (r *recorder) unblockAll() { r.calls = append(r.calls, "unblock") }

func (r *recorder) triggerCheckpoint(b *pb.CheckpointBarrier, alignment time.Duration) error {
	r.calls = append(r.calls, fmt.Sprintf("trigger %d ts=%d align=%v", b.GetCheckpointId(), b.GetTimestampMs(), alignment))
	return r.triggerErr
}

func (r *recorder) abortCheckpoint(id int64, reason pb.CheckpointFailureReason) error {
	r.calls = append(r.calls, fmt.Sprintf("abort %d %s", id, strings.TrimPrefix(reason.String(), "CHECKPOINT_FAILURE_REASON_")))
	return r.abortErr
}

func (r *recorder) triggerUnaligned(b *pb.CheckpointBarrier, skip []bool, alignment time.Duration) error {
	r.calls = append(r.calls, fmt.Sprintf("unaligned %d ts=%d timeout=%d skip=%v align=%v", b.GetCheckpointId(), b.GetTimestampMs(), b.GetAlignedTimeoutMs(), skip, alignment))
	return r.triggerErr
}

func (r *recorder) completeChannelState(id int64) error {
	r.calls = append(r.calls, fmt.Sprintf("complete %d", id))
	return nil
}

// fakeClock is a manually advanced clock.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// Short names for the expected calls.
const (
	subsumed  = "CHECKPOINT_DECLINED_SUBSUMED"
	cancelled = "CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER"
	eos       = "CHECKPOINT_DECLINED_INPUT_END_OF_STREAM"
)

// trig is the expected log line of triggering checkpoint id (barrier timestamp id*100).
func trig(id int64, alignment time.Duration) string {
	return fmt.Sprintf("trigger %d ts=%d align=%v", id, id*100, alignment)
}

// abrt is the expected log line of aborting checkpoint id.
func abrt(id int64, reason string) string { return fmt.Sprintf("abort %d %s", id, reason) }

// step is one event fed to a handler, with the calls it must cause, in order.
type step struct {
	kind string // "barrier", "cancel", "eop", "tick" (advance the clock by d), "pending" (check)
	id   int64
	ch   int
	d    time.Duration
	want []string
	// For "pending": whether a checkpoint must be pending (and then which: id).
	pending bool
}

func bar(id int64, ch int, want ...string) step {
	return step{kind: "barrier", id: id, ch: ch, want: want}
}
func cancel(id int64, ch int, want ...string) step {
	return step{kind: "cancel", id: id, ch: ch, want: want}
}
func eop(ch int, want ...string) step { return step{kind: "eop", ch: ch, want: want} }

// ubar is the barrier of checkpoint id taken unaligned (a priority event) from channel ch.
func ubar(id int64, ch int, want ...string) step {
	return step{kind: "ubarrier", id: id, ch: ch, want: want}
}

// tbar is the barrier of checkpoint id that starts aligned and goes unaligned after timeout,
// triggered at timeoutBase+id*100 ms.
func tbar(id int64, ch int, timeout time.Duration, want ...string) step {
	return step{kind: "tbarrier", id: id, ch: ch, d: timeout, want: want}
}

// timeout is the task's aligned-checkpoint timer firing.
func timeout(want ...string) step { return step{kind: "timeout", want: want} }

// timeoutBase is the trigger time of tbar's checkpoints: the fake clock's start.
const timeoutBase = 1_000_000

// unal is the expected log line of taking checkpoint id unaligned (barrier timestamp ts).
func unal(id, ts int64, skip []bool, alignment time.Duration) string {
	return fmt.Sprintf("unaligned %d ts=%d timeout=0 skip=%v align=%v", id, ts, skip, alignment)
}

func complete(id int64) string  { return fmt.Sprintf("complete %d", id) }
func tick(d time.Duration) step { return step{kind: "tick", d: d} }
func pend(id int64) step        { return step{kind: "pending", id: id, pending: true} }
func noPend() step              { return step{kind: "pending"} }

// newBarrier returns the barrier of checkpoint id, with timestamp id*100.
func newBarrier(id int64, mode pb.CheckpointingMode) *pb.CheckpointBarrier {
	return &pb.CheckpointBarrier{CheckpointId: id, TimestampMs: id * 100, Mode: mode}
}

// pendingCheckpoint reports the checkpoint that h is aligning (aligned mode) or the newest one
// it tracks (at-least-once mode), if any.
func pendingCheckpoint(h barrierHandler) (int64, bool) {
	switch h := h.(type) {
	case *alignedHandler:
		return h.currentID, h.isPending()
	case *trackerHandler:
		if len(h.pending) > 0 {
			return h.pending[len(h.pending)-1].id, true
		}
	}
	return 0, false
}

// runSteps feeds steps to h and checks that each causes exactly its expected calls.
func runSteps(t *testing.T, h barrierHandler, rec *recorder, clk *fakeClock, mode pb.CheckpointingMode, steps []step) {
	t.Helper()
	for i, s := range steps {
		before := len(rec.calls)
		var err error
		switch s.kind {
		case "barrier":
			err = h.processBarrier(newBarrier(s.id, mode), s.ch)
		case "ubarrier":
			b := newBarrier(s.id, mode)
			b.Unaligned = true
			err = h.processBarrier(b, s.ch)
		case "tbarrier":
			b := newBarrier(s.id, mode)
			b.Unaligned, b.TimestampMs, b.AlignedTimeoutMs = true, timeoutBase+s.id*100, s.d.Milliseconds()
			err = h.processBarrier(b, s.ch)
		case "timeout":
			err = h.(*alignedHandler).alignmentTimeout()
		case "cancel":
			err = h.processCancellation(s.id, s.ch)
		case "eop":
			err = h.processEndOfPartition(s.ch)
		case "tick":
			clk.t = clk.t.Add(s.d)
			continue
		case "pending":
			id, ok := pendingCheckpoint(h)
			if ok != s.pending || (ok && id != s.id) {
				t.Fatalf("step %d: pendingCheckpoint() = %d, %v; want %d, %v", i, id, ok, s.id, s.pending)
			}
			continue
		default:
			t.Fatalf("step %d: unknown kind %q", i, s.kind)
		}
		if err != nil {
			t.Fatalf("step %d (%s %d on channel %d): %v", i, s.kind, s.id, s.ch, err)
		}
		if got := rec.calls[before:]; !slices.Equal(got, s.want) {
			t.Fatalf("step %d (%s %d on channel %d): calls %q, want %q", i, s.kind, s.id, s.ch, got, s.want)
		}
	}
}

func TestBarrierAligned(t *testing.T) {
	cases := []struct {
		name     string
		channels int
		steps    []step
	}{
		{
			name:     "three channels align, trigger once, then unblock",
			channels: 3,
			steps: []step{
				noPend(),
				bar(1, 0, "block 0"),
				pend(1),
				tick(2 * time.Second),
				bar(1, 2, "block 2"),
				tick(3 * time.Second),
				bar(1, 1, "block 1", trig(1, 5*time.Second), "unblock"),
				noPend(),
				// The next checkpoint aligns afresh: the alignment of 1 was reset.
				tick(time.Minute),
				bar(2, 1, "block 1"),
				bar(2, 0, "block 0"),
				pend(2),
				tick(time.Second),
				bar(2, 2, "block 2", trig(2, time.Second), "unblock"),
				noPend(),
			},
		},
		{
			name:     "obsolete barriers are ignored and do not block",
			channels: 3,
			steps: []step{
				bar(2, 0, "block 0"),
				bar(2, 1, "block 1"),
				bar(2, 2, "block 2", trig(2, 0), "unblock"),
				// Completed checkpoint: equal and older ids are obsolete.
				bar(2, 0),
				bar(1, 1),
				noPend(),
				// While 4 is pending, a barrier of 3 neither blocks nor counts.
				bar(4, 0, "block 0"),
				bar(3, 1),
				bar(3, 2),
				pend(4),
				bar(4, 1, "block 1"),
				bar(4, 2, "block 2", trig(4, 0), "unblock"),
			},
		},
		{
			name:     "newer barrier subsumes the pending checkpoint",
			channels: 3,
			steps: []step{
				bar(1, 0, "block 0"),
				bar(1, 1, "block 1"),
				tick(time.Second),
				bar(2, 2, "unblock", abrt(1, subsumed), "block 2"),
				pend(2),
				// Late barriers of 1 are obsolete now.
				bar(1, 2),
				tick(4 * time.Second),
				bar(2, 0, "block 0"),
				bar(2, 1, "block 1", trig(2, 4*time.Second), "unblock"),
				noPend(),
			},
		},
		{
			name:     "cancellation of a newer id with nothing pending",
			channels: 3,
			steps: []step{
				cancel(5, 0, abrt(5, cancelled)),
				noPend(),
				// Further markers of 5 are not declined again.
				cancel(5, 1),
				// Barriers of 5 are obsolete.
				bar(5, 1),
				bar(5, 2),
				noPend(),
				bar(6, 0, "block 0"),
				bar(6, 1, "block 1"),
				bar(6, 2, "block 2", trig(6, 0), "unblock"),
			},
		},
		{
			name:     "cancellation of the current id with aligned channels",
			channels: 3,
			steps: []step{
				bar(1, 0, "block 0"),
				cancel(1, 1, "unblock", abrt(1, cancelled)),
				noPend(),
				cancel(1, 2),
				bar(1, 2),
				bar(1, 1),
				noPend(),
				bar(2, 2, "block 2"),
				pend(2),
			},
		},
		{
			name:     "cancellation of a newer id while one is pending",
			channels: 3,
			steps: []step{
				bar(1, 0, "block 0"),
				// As in Flink, only the cancelled id is declined; 1 is dropped with it.
				cancel(2, 1, "unblock", abrt(2, cancelled)),
				noPend(),
				bar(1, 2),
				bar(2, 2),
				bar(2, 0),
				noPend(),
			},
		},
		{
			name:     "obsolete cancellation markers are ignored",
			channels: 2,
			steps: []step{
				bar(3, 0, "block 0"),
				bar(3, 1, "block 1", trig(3, 0), "unblock"),
				cancel(3, 0),
				cancel(2, 1),
				noPend(),
				bar(4, 0, "block 0"),
				// An older marker does not abort the pending checkpoint.
				cancel(3, 1),
				pend(4),
				bar(4, 1, "block 1", trig(4, 0), "unblock"),
			},
		},
		{
			name:     "end of partition of the last missing channel triggers",
			channels: 3,
			steps: []step{
				bar(1, 0, "block 0"),
				tick(time.Second),
				bar(1, 1, "block 1"),
				tick(3 * time.Second),
				eop(2, trig(1, 4*time.Second), "unblock"),
				noPend(),
				// Channel 2 is closed: the next checkpoint needs channels 0 and 1 only.
				bar(2, 1, "block 1"),
				tick(time.Second),
				bar(2, 0, "block 0", trig(2, time.Second), "unblock"),
			},
		},
		{
			name:     "end of partition during alignment counts as aligned",
			channels: 3,
			steps: []step{
				bar(1, 0, "block 0"),
				eop(1),
				pend(1),
				tick(2 * time.Second),
				bar(1, 2, "block 2", trig(1, 2*time.Second), "unblock"),
			},
		},
		{
			name:     "end of partition with nothing pending",
			channels: 3,
			steps: []step{
				eop(0),
				noPend(),
				eop(2),
				// One open channel left: its barrier completes alignment at once.
				tick(time.Second),
				bar(1, 1, "block 1", trig(1, 0), "unblock"),
				noPend(),
			},
		},
		{
			name:     "single channel triggers at once",
			channels: 1,
			steps: []step{
				tick(time.Second),
				bar(1, 0, "block 0", trig(1, 0), "unblock"),
				noPend(),
				bar(1, 0),
				bar(2, 0, "block 0", trig(2, 0), "unblock"),
				cancel(3, 0, abrt(3, cancelled)),
				bar(3, 0),
				bar(4, 0, "block 0", trig(4, 0), "unblock"),
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			clk := &fakeClock{t: time.Unix(1_000, 0)}
			h := newAlignedHandler(tc.channels, rec, clk.now)
			runSteps(t, h, rec, clk, pb.CheckpointingMode_CHECKPOINTING_MODE_EXACTLY_ONCE, tc.steps)
		})
	}
}

func TestUnalignedBarriers(t *testing.T) {
	no, yes := false, true
	cases := []struct {
		name     string
		channels int
		steps    []step
	}{
		{
			name: "the first barrier takes it unaligned, the last completes it", channels: 3,
			steps: []step{
				ubar(1, 1, unal(1, 100, []bool{no, no, no}, 0)),
				pend(1),
				ubar(1, 0),
				ubar(1, 2, complete(1)),
				noPend(),
				ubar(1, 0), // obsolete
			},
		},
		{
			name: "one channel", channels: 1,
			steps: []step{ubar(1, 0, unal(1, 100, []bool{no}, 0), complete(1)), noPend()},
		},
		{
			name: "an ended channel counts, and is not collected", channels: 2,
			steps: []step{
				eop(0),
				ubar(1, 1, unal(1, 100, []bool{yes, no}, 0), complete(1)),
			},
		},
		{
			name: "an end of partition completes it", channels: 2,
			steps: []step{
				ubar(1, 0, unal(1, 100, []bool{no, no}, 0)),
				eop(1, complete(1)),
				noPend(),
			},
		},
		{
			name: "an aligned barrier (a forward edge) then an unaligned one", channels: 2,
			steps: []step{
				bar(1, 0, "block 0"),
				tick(time.Second),
				ubar(1, 1, unal(1, 100, []bool{yes, no}, time.Second), "unblock", complete(1)),
			},
		},
		{
			name: "after the switch, an aligned barrier completes it without blocking", channels: 2,
			steps: []step{
				ubar(1, 1, unal(1, 100, []bool{no, no}, 0)),
				bar(1, 0, complete(1)),
			},
		},
		{
			name: "the timer switches an aligned checkpoint to unaligned", channels: 2,
			steps: []step{
				tbar(1, 0, time.Second, "block 0"),
				tick(999 * time.Millisecond),
				timeout(), // not yet: 100 ms after the trigger are left
				tick(200 * time.Millisecond),
				timeout(unal(1, timeoutBase+100, []bool{yes, no}, 1199*time.Millisecond), "unblock"),
				pend(1),
				tbar(1, 1, time.Second, complete(1)),
				noPend(),
				timeout(),
			},
		},
		{
			name: "a barrier after the timeout switches it", channels: 3,
			steps: []step{
				tbar(1, 0, time.Second, "block 0"),
				tbar(1, 1, time.Second, "block 1"),
				tick(2 * time.Second),
				tbar(1, 2, time.Second, unal(1, timeoutBase+100, []bool{yes, yes, yes}, 2*time.Second), "unblock", complete(1)),
			},
		},
		{
			name: "aligned within the timeout", channels: 2,
			steps: []step{
				tbar(1, 0, time.Second, "block 0"),
				tbar(1, 1, time.Second, "block 1", fmt.Sprintf("trigger 1 ts=%d align=0s", timeoutBase+100), "unblock"),
				tick(5 * time.Second),
				timeout(),
			},
		},
		{
			name: "cancelled while collecting", channels: 2,
			steps: []step{
				ubar(1, 0, unal(1, 100, []bool{no, no}, 0)),
				cancel(1, 1, abrt(1, cancelled)),
				noPend(),
				ubar(1, 1),
			},
		},
		{
			name: "subsumed while collecting", channels: 2,
			steps: []step{
				ubar(1, 0, unal(1, 100, []bool{no, no}, 0)),
				ubar(2, 1, abrt(1, subsumed), unal(2, 200, []bool{no, no}, 0)),
				ubar(1, 1), // obsolete
				ubar(2, 0, complete(2)),
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			clk := &fakeClock{t: time.UnixMilli(timeoutBase)}
			h := newAlignedHandler(tc.channels, rec, clk.now)
			runSteps(t, h, rec, clk, pb.CheckpointingMode_CHECKPOINTING_MODE_EXACTLY_ONCE, tc.steps)
		})
	}
	t.Run("second barrier on a channel", func(t *testing.T) {
		rec := &recorder{}
		h := newAlignedHandler(2, rec, time.Now)
		b := newBarrier(1, pb.CheckpointingMode_CHECKPOINTING_MODE_EXACTLY_ONCE)
		b.Unaligned = true
		if err := h.processBarrier(b, 0); err != nil {
			t.Fatal(err)
		}
		if err := h.processBarrier(b, 0); err == nil {
			t.Fatal("second barrier of checkpoint 1 on channel 0: nil error, want one")
		}
	})
}

func TestBarrierTracker(t *testing.T) {
	cases := []struct {
		name     string
		channels int
		steps    []step
	}{
		{
			name:     "no blocking, trigger when all channels delivered",
			channels: 3,
			steps: []step{
				noPend(),
				bar(1, 0),
				pend(1),
				tick(time.Second),
				bar(1, 2),
				// A repeated barrier from one channel does not count twice.
				bar(1, 2),
				tick(time.Second),
				bar(1, 1, trig(1, 0)),
				noPend(),
				bar(1, 1),
				noPend(),
			},
		},
		{
			name:     "interleaved checkpoints complete in order",
			channels: 2,
			steps: []step{
				bar(1, 0),
				bar(2, 0),
				pend(2),
				bar(1, 1, trig(1, 0)),
				pend(2),
				bar(2, 1, trig(2, 0)),
				noPend(),
			},
		},
		{
			name:     "a completed checkpoint pops older pending ones",
			channels: 3,
			steps: []step{
				bar(1, 0),
				bar(2, 0),
				bar(2, 1),
				bar(1, 1),
				bar(3, 0),
				bar(2, 2, trig(2, 0)),
				pend(3),
				// 1 is gone and older than the newest id: never triggered.
				bar(1, 2),
				pend(3),
				bar(3, 1),
				bar(3, 2, trig(3, 0)),
				noPend(),
			},
		},
		{
			name:     "first barrier of an older id is ignored",
			channels: 2,
			steps: []step{
				bar(2, 0),
				bar(1, 1),
				bar(1, 0),
				pend(2),
				bar(2, 1, trig(2, 0)),
				noPend(),
			},
		},
		{
			name:     "cancellation aborts older entries and itself once",
			channels: 3,
			steps: []step{
				bar(1, 0),
				bar(2, 0),
				bar(3, 0),
				cancel(2, 1, abrt(1, cancelled), abrt(2, cancelled)),
				pend(3),
				cancel(2, 2),
				// Barrier 3 still completes.
				bar(3, 1),
				bar(3, 2, trig(3, 0)),
				noPend(),
			},
		},
		{
			name:     "aborted entry counts barriers but never triggers",
			channels: 3,
			steps: []step{
				bar(1, 0),
				cancel(1, 1, abrt(1, cancelled)),
				pend(1),
				bar(1, 2),
				noPend(),
				bar(2, 0),
				bar(2, 1),
				bar(2, 2, trig(2, 0)),
			},
		},
		{
			name:     "cancellation of an unseen newer id",
			channels: 3,
			steps: []step{
				bar(1, 0),
				cancel(5, 0, abrt(1, cancelled), abrt(5, cancelled)),
				pend(5),
				bar(5, 1),
				bar(5, 2),
				noPend(),
				// Older and repeated markers are ignored.
				cancel(4, 1),
				cancel(5, 1),
				noPend(),
				bar(6, 0),
				bar(6, 1),
				bar(6, 2, trig(6, 0)),
			},
		},
		{
			name:     "end of partition aborts all pending",
			channels: 3,
			steps: []step{
				bar(1, 0),
				bar(2, 1),
				eop(2, abrt(1, eos), abrt(2, eos)),
				noPend(),
				bar(2, 0),
				noPend(),
				// Two open channels now.
				bar(3, 0),
				bar(3, 1, trig(3, 0)),
				// An entry aborted already is not declined again.
				cancel(4, 0, abrt(4, cancelled)),
				pend(4),
				eop(1),
				noPend(),
				// One open channel: every barrier triggers.
				bar(5, 0, trig(5, 0)),
				bar(6, 0, trig(6, 0)),
				cancel(7, 0, abrt(7, cancelled)),
			},
		},
		{
			name:     "single channel triggers on every barrier",
			channels: 1,
			steps: []step{
				tick(time.Second),
				bar(1, 0, trig(1, 0)),
				bar(2, 0, trig(2, 0)),
				noPend(),
				cancel(3, 0, abrt(3, cancelled)),
				bar(4, 0, trig(4, 0)),
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			clk := &fakeClock{t: time.Unix(1_000, 0)}
			h := newTrackerHandler(tc.channels, rec, clk.now)
			runSteps(t, h, rec, clk, pb.CheckpointingMode_CHECKPOINTING_MODE_AT_LEAST_ONCE, tc.steps)
		})
	}
}

// TestBarrierTrackerManyConcurrent checks that at most 50 checkpoints are tracked (Flink's
// MAX_CHECKPOINTS_TO_TRACK): with one more, the oldest is forgotten (silently) and never triggers.
func TestBarrierTrackerManyConcurrent(t *testing.T) {
	const limit = 50
	const n = limit + 1
	rec := &recorder{}
	clk := &fakeClock{t: time.Unix(1_000, 0)}
	h := newTrackerHandler(2, rec, clk.now)
	var steps []step
	for id := int64(1); id <= n; id++ {
		steps = append(steps, bar(id, 0))
	}
	steps = append(steps,
		pend(n),
		bar(1, 1), // forgotten
		bar(2, 1, trig(2, 0)),
		bar(3, 1, trig(3, 0)),
		pend(n),
		bar(n, 1, trig(n, 0)), // pops 4..n-1 as subsumed
		noPend(),
		bar(n-1, 1),
		noPend(),
	)
	runSteps(t, h, rec, clk, pb.CheckpointingMode_CHECKPOINTING_MODE_AT_LEAST_ONCE, steps)

	// Exactly 50 entries are kept: 50 concurrent ids all still complete.
	rec = &recorder{}
	h = newTrackerHandler(2, rec, clk.now)
	steps = nil
	for id := int64(1); id <= limit; id++ {
		steps = append(steps, bar(id, 0))
	}
	for id := int64(1); id <= limit; id++ {
		steps = append(steps, bar(id, 1, trig(id, 0)))
	}
	runSteps(t, h, rec, clk, pb.CheckpointingMode_CHECKPOINTING_MODE_AT_LEAST_ONCE, steps)
}

// TestBarrierActionErrors checks that errors of triggerCheckpoint and abortCheckpoint are
// returned by the handler method that caused the call.
func TestBarrierActionErrors(t *testing.T) {
	errTrigger := errors.New("snapshot failed")
	errAbort := errors.New("decline failed")
	exactly := pb.CheckpointingMode_CHECKPOINTING_MODE_EXACTLY_ONCE
	cases := []struct {
		name string
		// run feeds events to a 2-channel handler and returns the error of the last one.
		run     func(h barrierHandler) error
		tracker bool
		want    error
	}{
		{"aligned trigger", func(h barrierHandler) error {
			_ = h.processBarrier(newBarrier(1, exactly), 0)
			return h.processBarrier(newBarrier(1, exactly), 1)
		}, false, errTrigger},
		{"aligned trigger on end of partition", func(h barrierHandler) error {
			_ = h.processBarrier(newBarrier(1, exactly), 0)
			return h.processEndOfPartition(1)
		}, false, errTrigger},
		{"aligned subsumed", func(h barrierHandler) error {
			_ = h.processBarrier(newBarrier(1, exactly), 0)
			return h.processBarrier(newBarrier(2, exactly), 1)
		}, false, errAbort},
		{"aligned cancellation", func(h barrierHandler) error {
			return h.processCancellation(1, 0)
		}, false, errAbort},
		{"tracker trigger", func(h barrierHandler) error {
			_ = h.processBarrier(newBarrier(1, exactly), 0)
			return h.processBarrier(newBarrier(1, exactly), 1)
		}, true, errTrigger},
		{"tracker cancellation", func(h barrierHandler) error {
			return h.processCancellation(1, 0)
		}, true, errAbort},
		{"tracker end of partition", func(h barrierHandler) error {
			_ = h.processBarrier(newBarrier(1, exactly), 0)
			return h.processEndOfPartition(1)
		}, true, errAbort},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{triggerErr: errTrigger, abortErr: errAbort}
			clk := &fakeClock{t: time.Unix(1_000, 0)}
			var h barrierHandler
			if tc.tracker {
				h = newTrackerHandler(2, rec, clk.now)
			} else {
				h = newAlignedHandler(2, rec, clk.now)
			}
			if err := tc.run(h); !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v (calls %q)", err, tc.want, rec.calls)
			}
		})
	}
}

// TestBarrierProtocolErrors checks that events breaking the channel protocol fail the task.
func TestBarrierProtocolErrors(t *testing.T) {
	exactly := pb.CheckpointingMode_CHECKPOINTING_MODE_EXACTLY_ONCE
	cases := []struct {
		name    string
		run     func(h barrierHandler) error
		tracker bool
		want    string
	}{
		{"aligned channel out of range", func(h barrierHandler) error {
			return h.processBarrier(newBarrier(1, exactly), 2)
		}, false, "2 input channels"},
		{"aligned negative channel", func(h barrierHandler) error {
			return h.processCancellation(1, -1)
		}, false, "2 input channels"},
		{"aligned barrier after end of partition", func(h barrierHandler) error {
			_ = h.processEndOfPartition(1)
			return h.processBarrier(newBarrier(1, exactly), 1)
		}, false, "after its end of partition"},
		{"aligned end of partition twice", func(h barrierHandler) error {
			_ = h.processEndOfPartition(0)
			return h.processEndOfPartition(0)
		}, false, "after its end of partition"},
		{"aligned barrier from a blocked channel", func(h barrierHandler) error {
			_ = h.processBarrier(newBarrier(1, exactly), 0)
			return h.processBarrier(newBarrier(1, exactly), 0)
		}, false, "which is blocked"},
		{"aligned nil barrier", func(h barrierHandler) error {
			return h.processBarrier(nil, 0)
		}, false, "nil checkpoint barrier"},
		{"tracker channel out of range", func(h barrierHandler) error {
			return h.processEndOfPartition(5)
		}, true, "2 input channels"},
		{"tracker cancellation after end of partition", func(h barrierHandler) error {
			_ = h.processEndOfPartition(0)
			return h.processCancellation(1, 0)
		}, true, "after its end of partition"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			clk := &fakeClock{t: time.Unix(1_000, 0)}
			var h barrierHandler
			if tc.tracker {
				h = newTrackerHandler(2, rec, clk.now)
			} else {
				h = newAlignedHandler(2, rec, clk.now)
			}
			err := tc.run(h)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

package coordinator

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/goflink/goflink/config"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// Tests of the checkpoint coordinator against the rules of the Flink CheckpointCoordinator
// (triggering, admission, completion, failure accounting, pending checkpoints). Everything is synchronous: a fake clock advanced by hand, a fake
// checkpointIO that records every call and simulates the Raft checkpoint store.

const (
	ckptDeclined      = pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_DECLINED
	ckptAsync         = pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_ASYNC_EXCEPTION
	ckptExpired       = pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_EXPIRED
	ckptIOException   = pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_IO_EXCEPTION
	ckptFinalizeFail  = pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_FINALIZE_CHECKPOINT_FAILURE
	ckptSubsumed      = pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_SUBSUMED
	ckptMinPause      = pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_MINIMUM_TIME_BETWEEN_CHECKPOINTS
	ckptNotRunning    = pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_NOT_ALL_REQUIRED_TASKS_RUNNING
	ckptTriggerFail   = pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_TRIGGER_CHECKPOINT_FAILURE
	ckptJobFailover   = pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_JOB_FAILOVER
	ckptTaskFailure   = pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_TASK_FAILURE
	ckptShutdown      = pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_COORDINATOR_SHUTDOWN
	ckptSuspend       = pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_COORDINATOR_SUSPEND
	ckptOnCancelBarr  = pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER
	ckptDeclSubsumed  = pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_DECLINED_SUBSUMED
	ckptDeclNotReady  = pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_DECLINED_TASK_NOT_READY
	ckptDeclEndOfIn   = pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_DECLINED_INPUT_END_OF_STREAM
	ckptTooManyReqs   = pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_TOO_MANY_CHECKPOINT_REQUESTS
	ckptStatusDone    = pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED
	ckptStatusFailed  = pb.CheckpointStatus_CHECKPOINT_STATUS_FAILED
	ckptStatusRunning = pb.CheckpointStatus_CHECKPOINT_STATUS_IN_PROGRESS
)

// ckptT0 is the fake clock's start.
var ckptT0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// ckptAt is ckptT0 plus d.
func ckptAt(d time.Duration) time.Time { return ckptT0.Add(d) }

// ckptClock is a clock advanced by hand.
type ckptClock struct{ t time.Time }

func (c *ckptClock) now() time.Time { return c.t }

// ckptCall is one recorded checkpointIO call.
type ckptCall struct {
	op     string // plan, allocateID, triggerTasks, finalize, commit, notifyComplete, notifyAborted, discard, failJob
	id     int64
	latest int64 // notifyAborted: the latest completed checkpoint
}

func (c ckptCall) String() string {
	if c.op == "notifyAborted" {
		return fmt.Sprintf("%s(%d,%d)", c.op, c.id, c.latest)
	}
	return fmt.Sprintf("%s(%d)", c.op, c.id)
}

type ckptFinalized struct {
	trigger time.Time
	states  []*pb.OperatorSubtaskState
	size    int64
}

// ckptIO is a fake checkpointIO. Its commit simulates the job's checkpoint store in the Raft
// FSM (applyCompleteCheckpoint): append, never go back, keep the newest numRetained.
type ckptIO struct {
	clk   *ckptClock
	calls []ckptCall

	planOK      bool
	tasks       checkpointPlan
	nextID      int64
	allocErr    error
	finalizeErr error
	commitErr   error
	numRetained int
	store       []*pb.CompletedCheckpoint

	barriers  []*pb.CheckpointBarrier
	triggered [][]string // the tasks of each triggerTasks call
	// ready overrides tasks.trigger as what triggerable returns, once set.
	ready      []string
	finalized  map[int64]ckptFinalized
	failCauses []string
}

var _ checkpointIO = (*ckptIO)(nil)

func (f *ckptIO) rec(op string, id, latest int64) {
	f.calls = append(f.calls, ckptCall{op: op, id: id, latest: latest})
}

func (f *ckptIO) plan() (checkpointPlan, bool) {
	f.rec("plan", 0, 0)
	return f.tasks, f.planOK
}

func (f *ckptIO) allocateID() (int64, error) {
	if f.allocErr != nil {
		f.rec("allocateID", -1, 0)
		return 0, f.allocErr
	}
	id := f.nextID
	f.nextID++
	f.rec("allocateID", id, 0)
	return id, nil
}

func (f *ckptIO) triggerable() []string {
	if f.ready != nil {
		return f.ready
	}
	return f.tasks.trigger
}

func (f *ckptIO) triggerTasks(tasks []string, b *pb.CheckpointBarrier) {
	f.rec("triggerTasks", b.GetCheckpointId(), 0)
	f.barriers = append(f.barriers, b)
	f.triggered = append(f.triggered, tasks)
}

func (f *ckptIO) finalize(id int64, trigger time.Time, states []*pb.OperatorSubtaskState, size int64, _ *savepointRequest) (*pb.CompletedCheckpoint, error) {
	f.rec("finalize", id, 0)
	f.finalized[id] = ckptFinalized{trigger: trigger, states: slices.Clone(states), size: size}
	if f.finalizeErr != nil {
		return nil, f.finalizeErr
	}
	return &pb.CompletedCheckpoint{Id: id, Path: fmt.Sprintf("chk-%d", id), TriggerTime: timestamppb.New(trigger),
		CompletionTime: timestamppb.New(f.clk.now()), StateSizeBytes: size, BaseDir: "/ckpt/job"}, nil
}

func (f *ckptIO) commit(cp *pb.CompletedCheckpoint, _ bool) ([]*pb.CompletedCheckpoint, error) {
	f.rec("commit", cp.GetId(), 0)
	if f.commitErr != nil {
		return nil, f.commitErr
	}
	if n := len(f.store); n > 0 && f.store[n-1].GetId() >= cp.GetId() {
		return nil, nil
	}
	f.store = append(f.store, cp)
	var subsumed []*pb.CompletedCheckpoint
	if drop := len(f.store) - max(f.numRetained, 1); drop > 0 {
		subsumed = slices.Clone(f.store[:drop])
		f.store = slices.Clone(f.store[drop:])
	}
	return subsumed, nil
}

func (f *ckptIO) notifyComplete(id int64)                     { f.rec("notifyComplete", id, 0) }
func (f *ckptIO) notifyAborted(id, latest int64)              { f.rec("notifyAborted", id, latest) }
func (f *ckptIO) discard(id int64, _ *savepointRequest)       { f.rec("discard", id, 0) }
func (f *ckptIO) discardCompleted(cp *pb.CompletedCheckpoint) { f.rec("discard", cp.GetId(), 0) }
func (f *ckptIO) stopFailed(_ *savepointRequest, msg string)  { f.rec("stopFailed", 0, 0) }
func (f *ckptIO) failJob(cause string) {
	f.rec("failJob", 0, 0)
	f.failCauses = append(f.failCauses, cause)
}
func (f *ckptIO) count(op string) int                { return len(f.ids(op)) }
func (f *ckptIO) has(op string, id int64) bool       { return f.index(op, id) >= 0 }
func (f *ckptIO) storeIDs() []int64                  { return ckptIDs(f.store) }
func (f *ckptIO) lastBarrier() *pb.CheckpointBarrier { return f.barriers[len(f.barriers)-1] }

// ids lists the checkpoint IDs of every call of op, in call order.
func (f *ckptIO) ids(op string) []int64 {
	var out []int64
	for _, c := range f.calls {
		if c.op == op {
			out = append(out, c.id)
		}
	}
	return out
}

// index is the position of the first call op(id) in the call log, -1 if none.
func (f *ckptIO) index(op string, id int64) int {
	return slices.IndexFunc(f.calls, func(c ckptCall) bool { return c.op == op && c.id == id })
}

func ckptIDs(cps []*pb.CompletedCheckpoint) []int64 {
	var out []int64
	for _, cp := range cps {
		out = append(out, cp.GetId())
	}
	return out
}

// ckptDefaults are the settings the tests start from.
func ckptDefaults() checkpointSettings {
	return checkpointSettings{interval: 10 * time.Second, timeout: time.Minute, maxConcurrent: 1, numRetained: 1,
		mode: pb.CheckpointingMode_CHECKPOINTING_MODE_EXACTLY_ONCE}
}

// ckptHarness is a coordinator wired to a fake clock and a fake checkpointIO.
type ckptHarness struct {
	t       *testing.T
	clk     *ckptClock
	io      *ckptIO
	c       *checkpointCoordinator
	rndArgs []int64
}

// newCkptHarness builds a coordinator with settings s (modified by mod) whose random source
// returns the largest value (the first periodic trigger lands on the interval).
func newCkptHarness(t *testing.T, mod func(*checkpointSettings), retained ...*pb.CompletedCheckpoint) *ckptHarness {
	t.Helper()
	s := ckptDefaults()
	if mod != nil {
		mod(&s)
	}
	clk := &ckptClock{t: ckptT0}
	io := &ckptIO{clk: clk, planOK: true, nextID: 1, numRetained: s.numRetained, store: slices.Clone(retained),
		finalized: map[int64]ckptFinalized{},
		tasks:     checkpointPlan{trigger: []string{"src#0"}, wait: []string{"src#0", "map#0", "sink#0"}}}
	if n := len(retained); n > 0 {
		io.nextID = retained[n-1].GetId() + 1
	}
	h := &ckptHarness{t: t, clk: clk, io: io}
	h.c = newCheckpointCoordinator(s, io, clk.now, retained)
	h.setRnd(func(n int64) int64 { return n - 1 })
	return h
}

// setRnd replaces the coordinator's random source, recording the arguments it gets.
func (h *ckptHarness) setRnd(f func(n int64) int64) {
	h.c.rnd = func(n int64) int64 {
		if n <= 0 {
			h.t.Fatalf("rnd(%d): the argument must be positive", n)
		}
		h.rndArgs = append(h.rndArgs, n)
		return f(n)
	}
}

// advanceTo moves the clock forward to t (never backwards).
func (h *ckptHarness) advanceTo(t time.Time) {
	h.t.Helper()
	if t.Before(h.clk.t) {
		h.t.Fatalf("clock cannot go back from %v to %v", h.clk.t.Sub(ckptT0), t.Sub(ckptT0))
	}
	h.clk.t = t
}

// tick advances the clock to t and runs onTimer.
func (h *ckptHarness) tick(t time.Time) {
	h.t.Helper()
	h.advanceTo(t)
	h.c.onTimer()
}

// fire advances the clock to the coordinator's next deadline, runs onTimer and returns the
// deadline.
func (h *ckptHarness) fire() time.Time {
	h.t.Helper()
	d := h.c.nextDeadline()
	if d.IsZero() {
		h.t.Fatalf("fire: nothing scheduled")
	}
	h.tick(d)
	return d
}

// wantNext asserts the next deadline (ckptT0+d; d<0: nothing scheduled).
func (h *ckptHarness) wantNext(d time.Duration) {
	h.t.Helper()
	got := h.c.nextDeadline()
	if d < 0 {
		if !got.IsZero() {
			h.t.Fatalf("nextDeadline = T0+%v, want nothing scheduled", got.Sub(ckptT0))
		}
		return
	}
	if got.IsZero() || !got.Equal(ckptAt(d)) {
		h.t.Fatalf("nextDeadline = %v, want T0+%v", ckptFmt(got), d)
	}
}

func ckptFmt(t time.Time) string {
	if t.IsZero() {
		return "zero"
	}
	return "T0+" + t.Sub(ckptT0).String()
}

// wantTriggered asserts the IDs sent to the tasks so far.
func (h *ckptHarness) wantTriggered(ids ...int64) {
	h.t.Helper()
	if got := h.io.ids("triggerTasks"); !slices.Equal(got, ids) {
		h.t.Fatalf("triggered checkpoints %v, want %v (calls %v)", got, ids, h.io.calls)
	}
}

// wantTriggeredAt asserts that checkpoint id was triggered (barrier timestamp) at T0+d.
func (h *ckptHarness) wantTriggeredAt(id int64, d time.Duration) {
	h.t.Helper()
	for _, b := range h.io.barriers {
		if b.GetCheckpointId() == id {
			if b.GetTimestampMs() != ckptAt(d).UnixMilli() {
				h.t.Fatalf("checkpoint %d triggered at T0+%v, want T0+%v", id,
					time.UnixMilli(b.GetTimestampMs()).Sub(ckptT0), d)
			}
			return
		}
	}
	h.t.Fatalf("checkpoint %d was never triggered (calls %v)", id, h.io.calls)
}

// manual requests a checkpoint; the channel has room for more than one reply so that a double
// reply is detected instead of blocking.
func (h *ckptHarness) manual() chan checkpointResult {
	ch := make(chan checkpointResult, 4)
	h.c.triggerManual(ch, nil)
	return ch
}

// startManual requests a checkpoint and returns its ID; it must be triggered at once.
func (h *ckptHarness) startManual() (int64, chan checkpointResult) {
	h.t.Helper()
	n := len(h.io.barriers)
	ch := h.manual()
	if len(h.io.barriers) != n+1 {
		h.t.Fatalf("manual checkpoint was not triggered at once (calls %v)", h.io.calls)
	}
	return h.io.lastBarrier().GetCheckpointId(), ch
}

// ackAll acknowledges checkpoint id from every task of the plan, asserting each ack is taken.
// Task i reports state size 100·(i+1) and alignment ckptAlign[i].
func (h *ckptHarness) ackAll(id int64) {
	h.t.Helper()
	for i, task := range h.io.tasks.wait {
		if !h.ack(task, id, i) {
			h.t.Fatalf("ack(%s, %d) = false, want true", task, id)
		}
	}
}

var ckptAlign = []int64{5, 40, 7}

func (h *ckptHarness) ack(task string, id int64, i int) bool {
	snap := &pb.TaskStateSnapshot{Operators: []*pb.OperatorSubtaskState{{Operator: task, Subtask: int32(i)}}}
	return h.c.ack(task, id, snap, &pb.CheckpointMetrics{StateSizeBytes: int64(100 * (i + 1)), AlignmentMs: ckptAlign[i%len(ckptAlign)]})
}

// info returns the history entry of checkpoint id.
func (h *ckptHarness) info(id int64) *pb.CheckpointInfo {
	h.t.Helper()
	for _, i := range h.c.historyView() {
		if i.GetId() == id {
			return i
		}
	}
	h.t.Fatalf("checkpoint %d not in the history", id)
	return nil
}

// wantFailed asserts that checkpoint id failed with reason, was announced as aborted (with the
// latest completed checkpoint) and had its files discarded.
func (h *ckptHarness) wantFailed(id int64, reason pb.CheckpointFailureReason, latest int64) {
	h.t.Helper()
	i := h.info(id)
	if i.GetStatus() != ckptStatusFailed || i.GetFailureReason() != reason {
		h.t.Fatalf("checkpoint %d: %v/%v, want FAILED/%v", id, i.GetStatus(), i.GetFailureReason(), reason)
	}
	if h.io.index("notifyAborted", id) < 0 {
		h.t.Fatalf("checkpoint %d: notifyAborted not called (calls %v)", id, h.io.calls)
	}
	if c := h.io.calls[h.io.index("notifyAborted", id)]; c.latest != latest {
		h.t.Fatalf("notifyAborted(%d, %d), want latest completed %d", id, c.latest, latest)
	}
	if !h.io.has("discard", id) {
		h.t.Fatalf("checkpoint %d: discard not called (calls %v)", id, h.io.calls)
	}
	if h.io.has("notifyComplete", id) {
		h.t.Fatalf("checkpoint %d failed but notifyComplete was called", id)
	}
	if h.c.find(id) != nil {
		h.t.Fatalf("checkpoint %d failed but is still pending", id)
	}
}

func (h *ckptHarness) wantFailJobs(n int) {
	h.t.Helper()
	if got := h.io.count("failJob"); got != n {
		h.t.Fatalf("failJob called %d times, want %d (causes %q)", got, n, h.io.failCauses)
	}
}

// ckptRecv takes the one reply a manual request must have received by now.
func ckptRecv(t *testing.T, ch chan checkpointResult) checkpointResult {
	t.Helper()
	select {
	case r := <-ch:
		select {
		case r2 := <-ch:
			t.Fatalf("manual request answered twice: %+v then %+v", r, r2)
		default:
		}
		return r
	default:
		t.Fatalf("manual request not answered")
		return checkpointResult{}
	}
}

func ckptNoReply(t *testing.T, ch chan checkpointResult) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("manual request answered early: %+v", r)
	default:
	}
}

// ckptRetained is a checkpoint of an earlier run, triggered at T0+trig and completed dur later.
func ckptRetained(id int64, trig, dur time.Duration) *pb.CompletedCheckpoint {
	return &pb.CompletedCheckpoint{Id: id, Path: fmt.Sprintf("chk-%d", id), TriggerTime: timestamppb.New(ckptAt(trig)),
		CompletionTime: timestamppb.New(ckptAt(trig + dur)), StateSizeBytes: 1000 + id, BaseDir: "/ckpt/job"}
}

// --- start and the periodic trigger -------------------------------------------------------

func TestCheckpointStartFirstTriggerDelay(t *testing.T) {
	for _, tc := range []struct {
		name              string
		interval, minPaus time.Duration
		rnd               func(n int64) int64
		wantFirst         time.Duration
		wantRndArg        int64 // 0: not checked
	}{
		{"random 0 gives min pause", 10 * time.Second, 2 * time.Second, func(int64) int64 { return 0 }, 2 * time.Second, int64(8*time.Second) + 1},
		{"random max gives interval", 10 * time.Second, 2 * time.Second, func(n int64) int64 { return n - 1 }, 10 * time.Second, int64(8*time.Second) + 1},
		{"random in between", 10 * time.Second, 2 * time.Second, func(int64) int64 { return int64(3 * time.Second) }, 5 * time.Second, int64(8*time.Second) + 1},
		{"no min pause, random 0 gives an immediate trigger", 10 * time.Second, 0, func(int64) int64 { return 0 }, 0, int64(10*time.Second) + 1},
		{"no min pause, random max", 10 * time.Second, 0, func(n int64) int64 { return n - 1 }, 10 * time.Second, int64(10*time.Second) + 1},
		{"min pause above the interval", 5 * time.Second, 8 * time.Second, func(n int64) int64 { return n - 1 }, 8 * time.Second, 0},
		{"min pause equals the interval", 5 * time.Second, 5 * time.Second, func(n int64) int64 { return n - 1 }, 5 * time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newCkptHarness(t, func(s *checkpointSettings) {
				s.interval, s.minPause, s.timeout = tc.interval, tc.minPaus, time.Hour
			})
			h.setRnd(tc.rnd)
			h.wantNext(-1)
			h.c.start()
			h.wantNext(tc.wantFirst)
			if tc.wantRndArg != 0 && !slices.Equal(h.rndArgs, []int64{tc.wantRndArg}) {
				t.Fatalf("rnd called with %v, want [%d] (a uniform delay in [minPause, interval])", h.rndArgs, tc.wantRndArg)
			}
			if tc.wantFirst > 0 {
				h.tick(ckptAt(tc.wantFirst - time.Nanosecond))
				h.wantTriggered()
			}
			h.tick(ckptAt(tc.wantFirst))
			h.wantTriggered(1)
			h.wantTriggeredAt(1, tc.wantFirst)
			// then at a fixed rate
			h.ackAll(1)
			h.wantNext(tc.wantFirst + tc.interval)
		})
	}
}

func TestCheckpointStartIsIdempotentAndNeedsAnInterval(t *testing.T) {
	h := newCkptHarness(t, nil)
	h.c.start()
	h.wantNext(10 * time.Second)
	h.setRnd(func(int64) int64 { return 0 })
	h.advanceTo(ckptAt(time.Second))
	h.c.start() // already started: must not reschedule
	h.wantNext(10 * time.Second)

	off := newCkptHarness(t, func(s *checkpointSettings) { s.interval = 0 })
	off.c.start()
	off.wantNext(-1)
	off.tick(ckptAt(24 * time.Hour))
	if n := len(off.io.calls); n != 0 {
		t.Fatalf("checkpointing off: calls %v, want none", off.io.calls)
	}
}

func TestCheckpointPeriodicFixedRate(t *testing.T) {
	h := newCkptHarness(t, func(s *checkpointSettings) { s.interval = 10 * time.Second })
	h.setRnd(func(int64) int64 { return int64(3 * time.Second) })
	h.c.start()
	h.wantNext(3 * time.Second)

	h.fire()
	h.wantTriggeredAt(1, 3*time.Second)
	h.advanceTo(ckptAt(4 * time.Second))
	h.ackAll(1)
	h.wantNext(13 * time.Second)

	h.fire()
	h.wantTriggeredAt(2, 13*time.Second)
	h.advanceTo(ckptAt(19 * time.Second)) // a long checkpoint does not shift the schedule
	h.ackAll(2)
	h.wantNext(23 * time.Second)

	// The timer runs late: the checkpoint is taken then, the schedule keeps its phase.
	h.tick(ckptAt(23*time.Second + 500*time.Millisecond))
	h.wantTriggeredAt(3, 23*time.Second+500*time.Millisecond)
	h.ackAll(3)
	h.wantNext(33 * time.Second)

	// Far behind: one checkpoint, and the next firing is on the original grid.
	h.tick(ckptAt(61 * time.Second))
	h.wantTriggered(1, 2, 3, 4)
	h.ackAll(4)
	h.wantNext(63 * time.Second)
}

// --- max-concurrent ------------------------------------------------------------------------

func TestCheckpointMaxConcurrentOneQueuesPeriodic(t *testing.T) {
	t.Run("runs when the pending one completes", func(t *testing.T) {
		h := newCkptHarness(t, nil) // interval 10s, min pause 0, max concurrent 1
		h.c.start()
		h.fire() // T0+10s
		h.wantTriggered(1)
		h.fire() // T0+20s: one is pending
		h.wantTriggered(1)
		h.fire() // T0+30s
		h.wantTriggered(1)
		if n := h.io.count("allocateID"); n != 1 {
			t.Fatalf("allocateID called %d times while blocked, want 1", n)
		}
		for _, i := range h.c.historyView() {
			if i.GetFailureReason() == ckptMinPause || i.GetStatus() == ckptStatusFailed {
				t.Fatalf("a queued request was dropped: %v", i)
			}
		}
		h.wantNext(40 * time.Second)

		h.advanceTo(ckptAt(34 * time.Second))
		h.ackAll(1)
		h.wantTriggered(1, 2)
		h.wantTriggeredAt(2, 34*time.Second)
		if h.io.index("triggerTasks", 2) < h.io.index("commit", 1) {
			t.Fatalf("checkpoint 2 triggered before checkpoint 1 was committed: %v", h.io.calls)
		}
		h.wantNext(40 * time.Second) // the fixed rate goes on

		// Nothing queued now: completing 2 before the next firing triggers nothing.
		h.advanceTo(ckptAt(35 * time.Second))
		h.ackAll(2)
		h.wantTriggered(1, 2)
		h.fire()
		h.wantTriggeredAt(3, 40*time.Second)
	})
	t.Run("runs when the pending one expires", func(t *testing.T) {
		h := newCkptHarness(t, func(s *checkpointSettings) {
			s.timeout, s.minPause, s.tolerable = 15*time.Second, 5*time.Second, 10
		})
		h.c.start()
		h.fire() // T0+10s
		h.wantTriggered(1)
		h.fire() // T0+20s: queued
		h.wantTriggered(1)
		h.wantNext(25 * time.Second)
		h.fire() // T0+25s: 1 expires, the queued request runs (a failure starts no min pause)
		h.wantFailed(1, ckptExpired, 0)
		h.wantTriggered(1, 2)
		h.wantTriggeredAt(2, 25*time.Second)
	})
	t.Run("runs when the pending one is declined", func(t *testing.T) {
		h := newCkptHarness(t, func(s *checkpointSettings) { s.tolerable = 10 })
		h.c.start()
		h.fire()
		h.fire() // queued
		h.advanceTo(ckptAt(22 * time.Second))
		h.c.decline("map#0", 1, ckptDeclined, "no")
		h.wantFailed(1, ckptDeclined, 0)
		h.wantTriggered(1, 2)
		h.wantTriggeredAt(2, 22*time.Second)
	})
}

func TestCheckpointMaxConcurrentTwo(t *testing.T) {
	h := newCkptHarness(t, func(s *checkpointSettings) { s.maxConcurrent = 2 })
	h.c.start()
	h.fire() // T0+10s
	h.fire() // T0+20s
	h.wantTriggered(1, 2)
	if n := len(h.c.pending); n != 2 {
		t.Fatalf("%d pending, want 2", n)
	}
	h.fire() // T0+30s: both slots taken, queued
	h.wantTriggered(1, 2)
	h.wantNext(40 * time.Second)

	h.advanceTo(ckptAt(31 * time.Second))
	h.ackAll(1)
	h.wantTriggered(1, 2, 3)
	h.wantTriggeredAt(3, 31*time.Second)
	if h.c.find(2) == nil {
		t.Fatalf("checkpoint 2 (newer than the completed 1) must stay pending")
	}
	if n := len(h.c.pending); n != 2 {
		t.Fatalf("%d pending, want 2", n)
	}
}

// --- min-pause -----------------------------------------------------------------------------

func TestCheckpointMinPause(t *testing.T) {
	t.Run("periodic request within the pause is dropped and rescheduled", func(t *testing.T) {
		h := newCkptHarness(t, func(s *checkpointSettings) { s.minPause, s.tolerable = 6*time.Second, 5 })
		h.c.start()
		h.fire() // T0+10s (random max)
		h.wantTriggeredAt(1, 10*time.Second)
		h.advanceTo(ckptAt(15 * time.Second))
		h.ackAll(1) // last completion T0+15s
		h.wantNext(20 * time.Second)

		h.fire() // T0+20s < 15s+6s
		h.wantTriggered(1)
		if n := h.io.count("allocateID"); n != 1 {
			t.Fatalf("a dropped request allocated an ID (%d allocations)", n)
		}
		view := h.c.historyView()
		if d := view[0]; d.GetStatus() != ckptStatusFailed || d.GetFailureReason() != ckptMinPause || d.GetId() != 0 ||
			!d.GetTriggerTime().AsTime().Equal(ckptAt(20*time.Second)) {
			t.Fatalf("newest history entry %v, want a FAILED MINIMUM_TIME_BETWEEN_CHECKPOINTS entry at T0+20s", d)
		}
		if h.c.consecutive != 0 {
			t.Fatalf("a min-pause drop was counted as a failure (%d)", h.c.consecutive)
		}
		h.wantNext(21 * time.Second) // last completion + min pause

		h.fire() // T0+21s: exactly at the end of the pause
		h.wantTriggered(1, 2)
		h.wantTriggeredAt(2, 21*time.Second)
		h.wantNext(31 * time.Second) // fixed rate from the new phase

		// A failure does not start a pause: checkpoint 2 fails at T0+30.5s, 3 is taken at T0+31s.
		h.advanceTo(ckptAt(30*time.Second + 500*time.Millisecond))
		h.c.decline("sink#0", 2, ckptDeclined, "no")
		h.wantFailed(2, ckptDeclined, 1)
		h.fire()
		h.wantTriggered(1, 2, 3)
		h.wantTriggeredAt(3, 31*time.Second)
	})
	t.Run("queued periodic request is dropped when the pending one completes", func(t *testing.T) {
		h := newCkptHarness(t, func(s *checkpointSettings) { s.minPause = 5 * time.Second })
		h.c.start()
		h.fire() // T0+10s
		h.fire() // T0+20s: queued behind 1
		h.advanceTo(ckptAt(24 * time.Second))
		h.ackAll(1)
		h.wantTriggered(1)
		if d := h.c.historyView()[0]; d.GetFailureReason() != ckptMinPause {
			t.Fatalf("newest history entry %v, want the dropped request", d)
		}
		h.wantNext(29 * time.Second)
		h.fire()
		h.wantTriggeredAt(2, 29*time.Second)
		h.wantNext(39 * time.Second)
	})
	t.Run("manual request ignores the pause", func(t *testing.T) {
		h := newCkptHarness(t, func(s *checkpointSettings) { s.interval, s.minPause = 0, time.Minute })
		h.startManual()
		h.advanceTo(ckptAt(time.Second))
		h.ackAll(1)
		h.advanceTo(ckptAt(2 * time.Second))
		id, _ := h.startManual()
		if id != 2 {
			t.Fatalf("manual checkpoint got ID %d, want 2", id)
		}
		h.wantTriggeredAt(2, 2*time.Second)
	})
	t.Run("no pause before the first completion", func(t *testing.T) {
		h := newCkptHarness(t, func(s *checkpointSettings) { s.minPause, s.timeout, s.tolerable = 9*time.Second, 5*time.Second, 5 })
		h.c.start()
		h.fire() // T0+10s
		h.fire() // T0+15s: 1 expires
		h.wantFailed(1, ckptExpired, 0)
		h.fire() // T0+20s: the expiry at 15s started no pause
		h.wantTriggeredAt(2, 20*time.Second)
	})
}

// --- timeout and late acks -----------------------------------------------------------------

func TestCheckpointTimeout(t *testing.T) {
	h := newCkptHarness(t, func(s *checkpointSettings) { s.interval, s.timeout = time.Hour, 30*time.Second },
		ckptRetained(7, -time.Hour, time.Second))
	h.setRnd(func(int64) int64 { return 0 })
	h.c.start()
	h.fire() // T0
	h.wantTriggered(8)
	h.wantNext(30 * time.Second)

	h.advanceTo(ckptAt(20 * time.Second))
	if !h.ack("src#0", 8, 0) {
		t.Fatalf("ack before the timeout rejected")
	}
	h.wantNext(30 * time.Second) // an ack does not extend the deadline

	h.tick(ckptAt(30*time.Second - time.Nanosecond))
	if h.c.find(8) == nil || h.io.count("notifyAborted") != 0 {
		t.Fatalf("checkpoint expired before its deadline (calls %v)", h.io.calls)
	}

	h.tick(ckptAt(30 * time.Second))
	h.wantFailed(8, ckptExpired, 7)
	if d := h.info(8).GetDurationMs(); d != 30000 {
		t.Fatalf("expired checkpoint duration %dms, want 30000", d)
	}
	h.wantFailJobs(1) // counted, tolerable 0

	if h.ack("map#0", 8, 1) {
		t.Fatalf("late ack of an expired checkpoint accepted")
	}
	if !h.c.isLateAck(8) {
		t.Fatalf("isLateAck(8) = false after expiry")
	}
	for _, id := range []int64{7, 9} {
		if h.c.isLateAck(id) {
			t.Fatalf("isLateAck(%d) = true, it never expired", id)
		}
	}
	if h.io.has("finalize", 8) {
		t.Fatalf("expired checkpoint finalized")
	}
}

func TestCheckpointLateAckRemembersLast16Expired(t *testing.T) {
	h := newCkptHarness(t, func(s *checkpointSettings) { s.interval, s.timeout, s.tolerable = 0, time.Second, math.MaxInt })
	for range 17 {
		h.startManual()
		h.fire()
	}
	h.wantFailJobs(0)
	if h.c.isLateAck(1) {
		t.Fatalf("isLateAck(1) = true: only the last 16 expired IDs are remembered")
	}
	for id := int64(2); id <= 17; id++ {
		if !h.c.isLateAck(id) {
			t.Fatalf("isLateAck(%d) = false, it is among the last 16 expired", id)
		}
	}
}

// --- failure accounting --------------------------------------------------------------------

// ckptStep is one step of a failure-accounting scenario; failJobs is the number of failJob
// calls expected after it.
type ckptStep struct {
	name     string
	do       func(h *ckptHarness)
	failJobs int
}

func ckptDecline(r pb.CheckpointFailureReason, n int) ckptStep {
	return ckptStep{"decline " + r.String(), func(h *ckptHarness) {
		id, _ := h.startManual()
		h.c.decline("map#0", id, r, "declined")
	}, n}
}

func ckptExpire(n int) ckptStep {
	return ckptStep{"expire", func(h *ckptHarness) {
		h.startManual()
		h.fire()
	}, n}
}

func ckptSucceed(n int) ckptStep {
	return ckptStep{"succeed", func(h *ckptHarness) {
		id, _ := h.startManual()
		h.ackAll(id)
	}, n}
}

func ckptFailFinalize(n int) ckptStep {
	return ckptStep{"finalize fails", func(h *ckptHarness) {
		h.io.finalizeErr = errors.New("disk full")
		id, _ := h.startManual()
		h.ackAll(id)
		h.io.finalizeErr = nil
	}, n}
}

func ckptFailCommit(n int) ckptStep {
	return ckptStep{"commit fails", func(h *ckptHarness) {
		h.io.commitErr = errors.New("raft: apply failed")
		id, _ := h.startManual()
		h.ackAll(id)
		h.io.commitErr = nil
	}, n}
}

func ckptFailAllocate(n int) ckptStep {
	return ckptStep{"ID allocation fails", func(h *ckptHarness) {
		h.io.allocErr = errors.New("raft: timeout")
		h.manual()
		h.io.allocErr = nil
	}, n}
}

func ckptTriggerRPCFails(n int) ckptStep {
	return ckptStep{"trigger RPC fails", func(h *ckptHarness) {
		id, _ := h.startManual()
		h.c.triggerFailed(id, "connection refused")
	}, n}
}

func ckptPlanNotReady(n int) ckptStep {
	return ckptStep{"plan not ready", func(h *ckptHarness) {
		h.io.planOK = false
		h.manual()
		h.io.planOK = true
	}, n}
}

func ckptStopWith(r pb.CheckpointFailureReason, n int) ckptStep {
	return ckptStep{"stop " + r.String(), func(h *ckptHarness) {
		h.startManual()
		h.c.stop(r, "stopping")
	}, n}
}

// ckptSubsume completes a newer checkpoint while an older one is pending.
func ckptSubsume(n int) ckptStep {
	return ckptStep{"subsume", func(h *ckptHarness) {
		h.c.s.maxConcurrent = 2
		h.startManual()
		id, _ := h.startManual()
		h.ackAll(id)
		h.c.s.maxConcurrent = 1
	}, n}
}

// ckptReport reports a failure of checkpoint id directly to the failure accounting (as a
// second decline of an already aborted checkpoint would).
func ckptReport(id int64, r pb.CheckpointFailureReason, n int) ckptStep {
	return ckptStep{fmt.Sprintf("report %d %v", id, r), func(h *ckptHarness) { h.c.onFailure(id, r) }, n}
}

// ckptReportLast reports another failure of the last triggered checkpoint.
func ckptReportLast(r pb.CheckpointFailureReason, n int) ckptStep {
	return ckptStep{"report the last checkpoint again", func(h *ckptHarness) {
		h.c.onFailure(h.io.lastBarrier().GetCheckpointId(), r)
	}, n}
}

// ckptDeclineTwice has two tasks decline the same checkpoint.
func ckptDeclineTwice(n int) ckptStep {
	return ckptStep{"two declines of one checkpoint", func(h *ckptHarness) {
		id, _ := h.startManual()
		h.c.decline("map#0", id, ckptDeclined, "first")
		h.c.decline("sink#0", id, ckptDeclined, "second")
	}, n}
}

func TestCheckpointTolerableFailures(t *testing.T) {
	for _, tc := range []struct {
		name      string
		tolerable int
		retained  []*pb.CompletedCheckpoint
		steps     []ckptStep
	}{
		{name: "tolerable 0: the first counted failure fails the job", tolerable: 0,
			steps: []ckptStep{ckptDecline(ckptDeclined, 1)}},
		{name: "tolerable 2: the third consecutive counted failure fails the job", tolerable: 2,
			steps: []ckptStep{ckptDecline(ckptDeclined, 0), ckptExpire(0), ckptDecline(ckptAsync, 1)}},
		{name: "every counted reason counts", tolerable: 5,
			steps: []ckptStep{ckptDecline(ckptDeclined, 0), ckptDecline(ckptAsync, 0), ckptExpire(0),
				ckptFailFinalize(0), ckptFailCommit(0), ckptFailAllocate(1)}},
		{name: "failures of one checkpoint ID count once", tolerable: 1,
			steps: []ckptStep{ckptDeclineTwice(0), ckptReportLast(ckptDeclined, 0), ckptReportLast(ckptExpired, 0),
				ckptDecline(ckptDeclined, 1)}},
		{name: "pre-flight failures without an ID count each time", tolerable: 1,
			steps: []ckptStep{ckptFailAllocate(0), ckptFailAllocate(1)}},
		{name: "failures at or below the last success are ignored", tolerable: 0,
			steps: []ckptStep{ckptSucceed(0), ckptSucceed(0), ckptReport(2, ckptDeclined, 0), ckptReport(1, ckptExpired, 0),
				ckptReport(3, ckptDeclined, 1)}},
		{name: "failures at or below the restored checkpoint are ignored", tolerable: 0,
			retained: []*pb.CompletedCheckpoint{ckptRetained(10, -time.Minute, time.Second)},
			steps:    []ckptStep{ckptReport(10, ckptDeclined, 0), ckptReport(4, ckptExpired, 0), ckptDecline(ckptDeclined, 1)}},
		{name: "non-counted reasons never count", tolerable: 0,
			steps: []ckptStep{ckptDecline(ckptOnCancelBarr, 0), ckptDecline(ckptDeclSubsumed, 0), ckptDecline(ckptDeclNotReady, 0),
				ckptDecline(ckptDeclEndOfIn, 0), ckptDecline(ckptTaskFailure, 0), ckptDecline(ckptJobFailover, 0),
				ckptDecline(ckptSubsumed, 0), ckptDecline(ckptTooManyReqs, 0), ckptTriggerRPCFails(0), ckptPlanNotReady(0),
				ckptSubsume(0), ckptStopWith(ckptJobFailover, 0), ckptStopWith(ckptSuspend, 0), ckptStopWith(ckptShutdown, 0),
				ckptReport(-1, ckptNotRunning, 0), ckptReport(-1, ckptMinPause, 0),
				ckptDecline(ckptDeclined, 1)}},
		{name: "a success resets the counter", tolerable: 1,
			steps: []ckptStep{ckptDecline(ckptDeclined, 0), ckptSucceed(0), ckptDecline(ckptDeclined, 0), ckptExpire(1)}},
		{name: "failing the job resets the counter", tolerable: 1,
			steps: []ckptStep{ckptDecline(ckptDeclined, 0), ckptDecline(ckptDeclined, 1), ckptDecline(ckptDeclined, 1),
				ckptDecline(ckptDeclined, 2)}},
		{name: "unlimited tolerance", tolerable: math.MaxInt,
			steps: []ckptStep{ckptDecline(ckptDeclined, 0), ckptExpire(0), ckptFailAllocate(0), ckptFailFinalize(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newCkptHarness(t, func(s *checkpointSettings) {
				s.interval, s.timeout, s.tolerable, s.numRetained = 0, 10*time.Second, tc.tolerable, 3
			}, tc.retained...)
			for i, st := range tc.steps {
				st.do(h)
				if got := h.io.count("failJob"); got != st.failJobs {
					t.Fatalf("after step %d (%s): failJob called %d times, want %d (causes %q)", i, st.name, got, st.failJobs, h.io.failCauses)
				}
			}
			for _, c := range h.io.failCauses {
				if !strings.Contains(c, "tolerable failure threshold") || !strings.Contains(c, config.CheckpointTolerable) {
					t.Fatalf("failJob cause %q does not name the exceeded threshold", c)
				}
			}
		})
	}
}

func TestCheckpointCountedReasonsMatchReference(t *testing.T) {
	counted := map[pb.CheckpointFailureReason]bool{ckptIOException: true, ckptAsync: true, ckptDeclined: true,
		ckptExpired: true, ckptFinalizeFail: true}
	for v := range pb.CheckpointFailureReason_name {
		r := pb.CheckpointFailureReason(v)
		if got := countedReason(r); got != counted[r] {
			t.Errorf("countedReason(%v) = %v, want %v", r, got, counted[r])
		}
	}
}

// --- completion ----------------------------------------------------------------------------

func TestCheckpointCompletion(t *testing.T) {
	h := newCkptHarness(t, func(s *checkpointSettings) {
		s.interval, s.mode = 0, pb.CheckpointingMode_CHECKPOINTING_MODE_AT_LEAST_ONCE
	})
	h.advanceTo(ckptAt(time.Second))
	id, ch := h.startManual()
	if id != 1 {
		t.Fatalf("first checkpoint ID %d, want 1", id)
	}
	b, triggered := h.io.lastBarrier(), h.io.triggered[0]
	if b.GetTimestampMs() != ckptAt(time.Second).UnixMilli() || b.GetMode() != pb.CheckpointingMode_CHECKPOINTING_MODE_AT_LEAST_ONCE {
		t.Fatalf("barrier %v, want timestamp T0+1s and AT_LEAST_ONCE", b)
	}
	if !slices.Equal(triggered, []string{"src#0"}) {
		t.Fatalf("triggered tasks %v, want the plan's sources", triggered)
	}
	if i := h.info(1); i.GetStatus() != ckptStatusRunning || i.GetTotal() != 3 || i.GetAcknowledged() != 0 {
		t.Fatalf("pending info %v, want IN_PROGRESS 0/3", i)
	}

	h.advanceTo(ckptAt(2 * time.Second))
	if !h.ack("src#0", 1, 0) {
		t.Fatalf("first ack rejected")
	}
	if h.ack("src#0", 1, 0) {
		t.Fatalf("duplicate ack from the same task accepted")
	}
	if h.ack("other#0", 1, 1) {
		t.Fatalf("ack from a task outside the plan accepted")
	}
	if h.ack("map#0", 99, 1) {
		t.Fatalf("ack of an unknown checkpoint accepted")
	}
	if i := h.info(1); i.GetAcknowledged() != 1 || i.GetStateSizeBytes() != 100 {
		t.Fatalf("after one ack (and rejected ones) info %v, want 1 acknowledged, 100 bytes", i)
	}
	if !h.ack("map#0", 1, 1) {
		t.Fatalf("second ack rejected")
	}
	if h.io.count("finalize") != 0 || h.io.count("notifyComplete") != 0 {
		t.Fatalf("finalized before every task acknowledged: %v", h.io.calls)
	}
	ckptNoReply(t, ch)
	h.advanceTo(ckptAt(3*time.Second + 500*time.Millisecond))
	if !h.ack("sink#0", 1, 2) {
		t.Fatalf("last ack rejected")
	}

	fin, com, not := h.io.index("finalize", 1), h.io.index("commit", 1), h.io.index("notifyComplete", 1)
	if fin < 0 || com < 0 || not < 0 || !(fin < com && com < not) {
		t.Fatalf("want finalize(1) < commit(1) < notifyComplete(1), calls %v", h.io.calls)
	}
	if h.io.count("notifyAborted") != 0 || h.io.count("discard") != 0 {
		t.Fatalf("a completed checkpoint was aborted or discarded: %v", h.io.calls)
	}
	f := h.io.finalized[1]
	if !f.trigger.Equal(ckptAt(time.Second)) || f.size != 600 || len(f.states) != 3 {
		t.Fatalf("finalize got trigger %v, size %d, %d states; want T0+1s, 600, 3", ckptFmt(f.trigger), f.size, len(f.states))
	}
	var ops []string
	for _, s := range f.states {
		ops = append(ops, s.GetOperator())
	}
	slices.Sort(ops)
	if !slices.Equal(ops, []string{"map#0", "sink#0", "src#0"}) {
		t.Fatalf("finalized states of %v, want one per task", ops)
	}

	i := h.info(1)
	if i.GetStatus() != ckptStatusDone || i.GetDurationMs() != 2500 || i.GetStateSizeBytes() != 600 ||
		i.GetAlignmentMs() != 40 || i.GetAcknowledged() != 3 || i.GetPath() != "/ckpt/job/chk-1" || !i.GetManual() {
		t.Fatalf("completed info %v, want COMPLETED, 2500ms, 600 bytes, alignment 40ms (max), 3/3, /ckpt/job/chk-1, manual", i)
	}
	r := ckptRecv(t, ch)
	if r.err != nil || r.info.GetId() != 1 || r.info.GetStatus() != ckptStatusDone {
		t.Fatalf("manual reply %+v, want the completed checkpoint 1", r)
	}
	if h.c.find(1) != nil || !h.c.isRetained(1) || !slices.Equal(h.io.storeIDs(), []int64{1}) {
		t.Fatalf("after completion: pending %v, store %v", h.c.find(1) != nil, h.io.storeIDs())
	}
	if h.c.latestComplete != 1 || !h.c.lastCompletion.Equal(ckptAt(3500*time.Millisecond)) {
		t.Fatalf("latest completed %d at %v, want 1 at T0+3.5s", h.c.latestComplete, ckptFmt(h.c.lastCompletion))
	}
	if lc := h.c.lastCompleted(); lc.GetId() != 1 || lc.GetStatus() != ckptStatusDone {
		t.Fatalf("lastCompleted %v, want checkpoint 1", lc)
	}
	if h.ack("sink#0", 1, 2) || h.c.isLateAck(1) {
		t.Fatalf("ack after completion accepted or taken as a late ack of an expired checkpoint")
	}
	h.wantFailJobs(0)
}

func TestCheckpointFinalizeOrCommitFailure(t *testing.T) {
	for _, tc := range []struct {
		name        string
		finalizeErr error
		commitErr   error
		wantCommit  bool
	}{
		{name: "metadata write fails", finalizeErr: errors.New("disk full")},
		{name: "store commit fails", commitErr: errors.New("raft: apply failed"), wantCommit: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newCkptHarness(t, func(s *checkpointSettings) { s.interval = 0 })
			h.io.finalizeErr, h.io.commitErr = tc.finalizeErr, tc.commitErr
			id, ch := h.startManual()
			h.ackAll(id)
			if got := h.io.has("commit", id); got != tc.wantCommit {
				t.Fatalf("commit called: %v, want %v (calls %v)", got, tc.wantCommit, h.io.calls)
			}
			h.wantFailed(id, ckptFinalizeFail, 0)
			h.wantFailJobs(1) // counted (newest Flink master)
			r := ckptRecv(t, ch)
			if r.err == nil || r.info.GetStatus() != ckptStatusFailed {
				t.Fatalf("manual reply %+v, want an error", r)
			}
			if h.c.isRetained(id) || len(h.io.store) != 0 || h.c.latestComplete != 0 || !h.c.lastCompletion.IsZero() {
				t.Fatalf("a failed checkpoint was recorded as completed")
			}
			// The next checkpoint goes through.
			h.io.finalizeErr, h.io.commitErr = nil, nil
			id2, _ := h.startManual()
			h.ackAll(id2)
			if !h.io.has("notifyComplete", id2) {
				t.Fatalf("next checkpoint did not complete: %v", h.io.calls)
			}
		})
	}
	t.Run("lost leadership keeps the files", func(t *testing.T) {
		h := newCkptHarness(t, func(s *checkpointSettings) { s.interval = 0 })
		h.io.commitErr = fmt.Errorf("commit: %w", ErrNotLeader)
		id, ch := h.startManual()
		h.ackAll(id)
		if h.io.has("discard", id) || h.io.has("notifyComplete", id) {
			t.Fatalf("outcome unknown: files must be kept and no completion sent (calls %v)", h.io.calls)
		}
		if r := ckptRecv(t, ch); !errors.Is(r.err, ErrNotLeader) {
			t.Fatalf("manual reply error %v, want ErrNotLeader", r.err)
		}
		if h.c.find(id) != nil {
			t.Fatalf("checkpoint still pending")
		}
		h.wantFailJobs(0)
	})
}

// --- subsumption and retention -------------------------------------------------------------

func TestCheckpointSubsumption(t *testing.T) {
	h := newCkptHarness(t, func(s *checkpointSettings) { s.interval, s.maxConcurrent, s.numRetained = 0, 2, 2 },
		ckptRetained(1, -time.Hour, time.Second))
	id2, ch2 := h.startManual()
	id3, ch3 := h.startManual()
	if id2 != 2 || id3 != 3 {
		t.Fatalf("IDs %d, %d, want 2, 3 (after the restored 1)", id2, id3)
	}
	h.advanceTo(ckptAt(time.Second))
	h.ack("src#0", 2, 0)
	h.ackAll(3)

	h.wantFailed(2, ckptSubsumed, 3)
	if h.c.consecutive != 0 {
		t.Fatalf("a subsumed checkpoint was counted as a failure")
	}
	h.wantFailJobs(0)
	if !h.io.has("notifyComplete", 3) || h.io.has("notifyComplete", 2) {
		t.Fatalf("notifications: %v", h.io.calls)
	}
	if r := ckptRecv(t, ch2); r.err == nil || r.info.GetFailureReason() != ckptSubsumed {
		t.Fatalf("subsumed manual checkpoint answered %+v", r)
	}
	if r := ckptRecv(t, ch3); r.err != nil {
		t.Fatalf("completed manual checkpoint answered %+v", r)
	}
	if h.ack("map#0", 2, 1) || h.c.isLateAck(2) {
		t.Fatalf("an ack of the subsumed checkpoint was accepted or taken for a late ack of an expired one")
	}
	if !slices.Equal(h.io.storeIDs(), []int64{1, 3}) || h.io.has("discard", 1) {
		t.Fatalf("store %v (discards %v), want [1 3] with nothing discarded from it", h.io.storeIDs(), h.io.ids("discard"))
	}

	for _, id := range []int64{4, 5} {
		got, _ := h.startManual()
		if got != id {
			t.Fatalf("ID %d, want %d", got, id)
		}
		h.ackAll(id)
	}
	if got := h.io.ids("discard"); !slices.Equal(got, []int64{2, 1, 3}) {
		t.Fatalf("discarded %v, want [2 1 3]: the subsumed pending one, then the store's oldest", got)
	}
	if c4, d1 := h.io.index("commit", 4), h.io.index("discard", 1); d1 < c4 {
		t.Fatalf("checkpoint 1 discarded before checkpoint 4 was committed: %v", h.io.calls)
	}
	if c5, d3 := h.io.index("commit", 5), h.io.index("discard", 3); d3 < c5 {
		t.Fatalf("checkpoint 3 discarded before checkpoint 5 was committed: %v", h.io.calls)
	}
	want := []int64{4, 5}
	if !slices.Equal(h.io.storeIDs(), want) || !slices.Equal(ckptIDs(h.c.retained), want) {
		t.Fatalf("store %v, coordinator's view %v, want %v", h.io.storeIDs(), ckptIDs(h.c.retained), want)
	}
	for id := int64(1); id <= 5; id++ {
		if got := h.c.isRetained(id); got != slices.Contains(want, id) {
			t.Fatalf("isRetained(%d) = %v", id, got)
		}
	}
}

func TestCheckpointSubsumptionAbortsEveryOlderPending(t *testing.T) {
	h := newCkptHarness(t, func(s *checkpointSettings) { s.interval, s.maxConcurrent = 0, 3 })
	h.startManual()
	h.startManual()
	h.startManual()
	h.ackAll(3)
	h.wantFailed(1, ckptSubsumed, 3)
	h.wantFailed(2, ckptSubsumed, 3)
	if len(h.c.pending) != 0 {
		t.Fatalf("%d still pending", len(h.c.pending))
	}

	// A newer pending checkpoint is not subsumed by an older one's completion.
	h.startManual() // 4
	h.startManual() // 5
	h.ackAll(4)
	if h.c.find(5) == nil || h.io.has("notifyAborted", 5) {
		t.Fatalf("checkpoint 5 aborted by the completion of 4")
	}
	h.wantFailJobs(0)
}

// --- stop ----------------------------------------------------------------------------------

func TestCheckpointStop(t *testing.T) {
	t.Run("aborts pending and queued, no further triggers", func(t *testing.T) {
		h := newCkptHarness(t, nil)
		h.c.start()
		h.fire() // periodic 1 at T0+10s
		queued := h.manual()
		h.fire() // T0+20s: periodic queued as well
		h.wantTriggered(1)
		ckptNoReply(t, queued)

		h.advanceTo(ckptAt(25 * time.Second))
		h.c.stop(ckptJobFailover, "job failover")
		h.wantFailed(1, ckptJobFailover, 0)
		h.wantFailJobs(0)
		if r := ckptRecv(t, queued); r.err == nil {
			t.Fatalf("queued manual request answered %+v, want an error", r)
		}
		h.wantTriggered(1)
		if n := h.io.count("allocateID"); n != 1 {
			t.Fatalf("a queued request ran after stop (%d allocations)", n)
		}
		h.wantNext(-1)
		h.tick(ckptAt(time.Hour))
		h.wantTriggered(1)
		if len(h.c.pending) != 0 {
			t.Fatalf("pending after stop")
		}

		// start resumes periodic checkpoints.
		h.c.start()
		h.wantNext(time.Hour + 10*time.Second)
		h.fire()
		h.wantTriggered(1, 2)
	})
	t.Run("forgets a queued periodic request", func(t *testing.T) {
		h := newCkptHarness(t, func(s *checkpointSettings) { s.maxConcurrent = 2 })
		h.c.start()
		h.fire() // 1
		h.fire() // 2
		h.fire() // T0+30s: queued
		h.wantTriggered(1, 2)
		h.c.stop(ckptJobFailover, "job failover")
		h.wantTriggered(1, 2)
		h.startManual() // 3: only the manual request runs, max-concurrent would allow two
		h.wantTriggered(1, 2, 3)
		if !h.info(3).GetManual() {
			t.Fatalf("checkpoint 3 should be the manual one")
		}
	})
	t.Run("pending manual request gets an error", func(t *testing.T) {
		h := newCkptHarness(t, func(s *checkpointSettings) { s.interval, s.maxConcurrent = 0, 2 })
		_, ch1 := h.startManual()
		_, ch2 := h.startManual()
		h.c.stop(ckptShutdown, "shutdown")
		for id, ch := range map[int64]chan checkpointResult{1: ch1, 2: ch2} {
			h.wantFailed(id, ckptShutdown, 0)
			if r := ckptRecv(t, ch); r.err == nil || r.info.GetStatus() != ckptStatusFailed {
				t.Fatalf("manual checkpoint %d answered %+v, want an error", id, r)
			}
		}
		h.wantFailJobs(0)
	})
}

// --- manual triggers -----------------------------------------------------------------------

func TestCheckpointManualTrigger(t *testing.T) {
	t.Run("runs with periodic checkpoints off", func(t *testing.T) {
		h := newCkptHarness(t, func(s *checkpointSettings) { s.interval = 0 })
		h.c.start()
		h.wantNext(-1)
		ch := h.manual()
		h.wantTriggered(1)
		if !h.info(1).GetManual() {
			t.Fatalf("manual checkpoint not marked manual")
		}
		ckptNoReply(t, ch)
		h.ackAll(1)
		r := ckptRecv(t, ch)
		if r.err != nil || r.info.GetId() != 1 || r.info.GetStatus() != ckptStatusDone || !r.info.GetManual() {
			t.Fatalf("reply %+v, want the completed checkpoint 1", r)
		}
	})
	t.Run("queues behind max-concurrent", func(t *testing.T) {
		h := newCkptHarness(t, func(s *checkpointSettings) { s.interval = 0 })
		ch1 := h.manual()
		ch2 := h.manual()
		h.wantTriggered(1)
		if n := h.io.count("allocateID"); n != 1 {
			t.Fatalf("%d IDs allocated, want 1", n)
		}
		h.advanceTo(ckptAt(3 * time.Second))
		h.ackAll(1)
		if r := ckptRecv(t, ch1); r.err != nil || r.info.GetId() != 1 {
			t.Fatalf("first reply %+v", r)
		}
		h.wantTriggered(1, 2)
		h.wantTriggeredAt(2, 3*time.Second)
		ckptNoReply(t, ch2)
		h.c.decline("map#0", 2, ckptDeclined, "no")
		r := ckptRecv(t, ch2)
		if r.err == nil || r.info.GetId() != 2 || r.info.GetFailureReason() != ckptDeclined {
			t.Fatalf("second reply %+v, want the declined checkpoint 2 with an error", r)
		}
	})
	t.Run("goes before a queued periodic request", func(t *testing.T) {
		h := newCkptHarness(t, nil)
		h.c.start()
		h.fire() // periodic 1
		h.fire() // periodic request queued
		ch := h.manual()
		h.ackAll(1)
		h.wantTriggered(1, 2)
		if !h.info(2).GetManual() {
			t.Fatalf("checkpoint 2 is the periodic one; the manual request must go first")
		}
		h.ackAll(2)
		if r := ckptRecv(t, ch); r.err != nil || r.info.GetId() != 2 {
			t.Fatalf("manual reply %+v", r)
		}
		h.wantTriggered(1, 2, 3) // then the periodic one
		if h.info(3).GetManual() {
			t.Fatalf("checkpoint 3 should be the periodic one")
		}
	})
	t.Run("failed trigger answers the request", func(t *testing.T) {
		h := newCkptHarness(t, func(s *checkpointSettings) { s.interval, s.tolerable = 0, 5 })
		h.io.allocErr = errors.New("raft: timeout")
		ch := h.manual()
		r := ckptRecv(t, ch)
		if r.err == nil || r.info.GetFailureReason() != ckptIOException || r.info.GetStatus() != ckptStatusFailed {
			t.Fatalf("reply %+v, want an IO_EXCEPTION failure", r)
		}
		h.wantTriggered()
		if len(h.c.pending) != 0 {
			t.Fatalf("a checkpoint without an ID is pending")
		}
	})
}

// --- pre-flight failures -------------------------------------------------------------------

func TestCheckpointPlanNotReady(t *testing.T) {
	h := newCkptHarness(t, nil)
	h.io.planOK = false
	h.c.start()
	h.fire() // T0+10s
	if got := h.io.ids("plan"); len(got) != 1 || h.io.count("allocateID") != 0 || h.io.count("triggerTasks") != 0 {
		t.Fatalf("calls %v, want only plan (no ID allocated, nothing triggered)", h.io.calls)
	}
	d := h.c.historyView()[0]
	if d.GetStatus() != ckptStatusFailed || d.GetFailureReason() != ckptNotRunning || d.GetId() != 0 ||
		!d.GetTriggerTime().AsTime().Equal(ckptAt(10*time.Second)) {
		t.Fatalf("history entry %v, want FAILED NOT_ALL_REQUIRED_TASKS_RUNNING at T0+10s without ID", d)
	}
	h.wantFailJobs(0)
	if h.c.consecutive != 0 {
		t.Fatalf("a pre-flight NOT_ALL_REQUIRED_TASKS_RUNNING was counted")
	}
	h.wantNext(20 * time.Second)

	ch := h.manual()
	if r := ckptRecv(t, ch); r.err == nil || r.info.GetFailureReason() != ckptNotRunning {
		t.Fatalf("manual reply %+v, want NOT_ALL_REQUIRED_TASKS_RUNNING", r)
	}

	h.io.planOK = true
	h.fire()           // T0+20s
	h.wantTriggered(1) // no ID was used up
	h.wantTriggeredAt(1, 20*time.Second)
	h.wantFailJobs(0)
}

func TestCheckpointTriggerRPCFailure(t *testing.T) {
	h := newCkptHarness(t, func(s *checkpointSettings) { s.interval = 0 })
	id, ch := h.startManual()
	h.c.triggerFailed(id+7, "unknown checkpoint")
	if h.c.find(id) == nil {
		t.Fatalf("a trigger failure of another checkpoint aborted %d", id)
	}
	h.c.triggerFailed(id, "connection refused")
	h.wantFailed(id, ckptTriggerFail, 0)
	h.wantFailJobs(0)
	if r := ckptRecv(t, ch); r.err == nil {
		t.Fatalf("reply %+v, want an error", r)
	}
}

// --- history -------------------------------------------------------------------------------

func TestCheckpointHistoryView(t *testing.T) {
	r3, r4 := ckptRetained(3, -100*time.Second, time.Second), ckptRetained(4, -50*time.Second, 2*time.Second)
	h := newCkptHarness(t, func(s *checkpointSettings) { s.interval, s.numRetained, s.tolerable = 0, 3, 5 }, r3, r4)

	if lc := h.c.lastCompleted(); lc.GetId() != 4 || lc.GetStatus() != ckptStatusDone || lc.GetDurationMs() != 2000 {
		t.Fatalf("lastCompleted %v, want the restored checkpoint 4", lc)
	}

	h.advanceTo(ckptAt(10 * time.Second))
	h.startManual() // 5
	h.advanceTo(ckptAt(12 * time.Second))
	h.ackAll(5)
	h.advanceTo(ckptAt(20 * time.Second))
	h.startManual() // 6
	h.advanceTo(ckptAt(21 * time.Second))
	h.c.decline("map#0", 6, ckptDeclined, "no")
	h.advanceTo(ckptAt(25 * time.Second))
	h.io.planOK = false
	h.manual() // pre-flight failure, no ID
	h.io.planOK = true
	h.advanceTo(ckptAt(30 * time.Second))
	h.startManual() // 7, pending

	view := h.c.historyView()
	type row struct {
		id     int64
		status pb.CheckpointStatus
		at     time.Duration
	}
	want := []row{
		{7, ckptStatusRunning, 30 * time.Second},
		{0, ckptStatusFailed, 25 * time.Second},
		{6, ckptStatusFailed, 20 * time.Second},
		{5, ckptStatusDone, 10 * time.Second},
		{4, ckptStatusDone, -50 * time.Second},
		{3, ckptStatusDone, -100 * time.Second},
	}
	var got []row
	for _, i := range view {
		got = append(got, row{i.GetId(), i.GetStatus(), i.GetTriggerTime().AsTime().Sub(ckptT0)})
	}
	if !slices.Equal(got, want) {
		t.Fatalf("history\n got %v\nwant %v (newest first, restored checkpoints included, each once)", got, want)
	}
	if v := view[4]; v.GetPath() != "/ckpt/job/chk-4" || v.GetDurationMs() != 2000 || v.GetStateSizeBytes() != 1004 {
		t.Fatalf("restored checkpoint entry %v, want path /ckpt/job/chk-4, 2000ms, 1004 bytes", v)
	}
	if v := view[3]; v.GetDurationMs() != 2000 || v.GetStateSizeBytes() != 600 || v.GetAlignmentMs() != 40 {
		t.Fatalf("checkpoint 5 entry %v, want the coordinator's own record", v)
	}

	// The checkpoint in progress is a copy: its acknowledgements go on changing the
	// coordinator's record. Ended ones, never changed again, are shared (read only).
	view[0].Status = ckptStatusDone
	if h.info(7).GetStatus() != ckptStatusRunning {
		t.Fatalf("historyView returned the coordinator's own record of the checkpoint in progress")
	}
	if view[3] != h.info(5) || view[2] != h.info(6) {
		t.Fatalf("historyView copied the records of ended checkpoints, want them shared")
	}
	if lc := h.c.lastCompleted(); lc.GetId() != 5 || lc.GetAlignmentMs() != 40 {
		t.Fatalf("lastCompleted %v, want checkpoint 5 with its stats", lc)
	}
}

func TestCheckpointHistoryIsBounded(t *testing.T) {
	h := newCkptHarness(t, func(s *checkpointSettings) { s.interval = 0 })
	h.io.planOK = false
	for i := range maxHistory + 20 {
		h.advanceTo(ckptAt(time.Duration(i) * time.Second))
		h.manual()
	}
	if n := len(h.c.historyView()); n != maxHistory {
		t.Fatalf("history has %d entries, want %d", n, maxHistory)
	}
	if at := h.c.historyView()[0].GetTriggerTime().AsTime(); !at.Equal(ckptAt(time.Duration(maxHistory+19) * time.Second)) {
		t.Fatalf("newest entry at %v, want the last request", ckptFmt(at))
	}
}

// --- settings ------------------------------------------------------------------------------

func TestCheckpointSettingsFromConfig(t *testing.T) {
	cfg := config.New()
	if s := checkpointSettingsFrom(cfg); s.enabled() || s.mode != pb.CheckpointingMode_CHECKPOINTING_MODE_EXACTLY_ONCE {
		t.Fatalf("defaults %+v: want checkpointing off, exactly-once", s)
	}
	for k, v := range map[string]string{
		config.CheckpointInterval: "30 s", config.CheckpointTimeout: "2 min", config.CheckpointMinPause: "5 s",
		config.CheckpointMaxConcurrent: "2", config.CheckpointTolerable: "3", config.CheckpointNumRetained: "4",
		config.CheckpointMode: "AT_LEAST_ONCE", config.CheckpointUnalignedAlias: "true", config.CheckpointAlignedTimeout: "2 s",
	} {
		if err := cfg.Set(k, v); err != nil {
			t.Fatalf("Set(%s, %s): %v", k, v, err)
		}
	}
	want := checkpointSettings{interval: 30 * time.Second, timeout: 2 * time.Minute, minPause: 5 * time.Second, maxConcurrent: 2,
		tolerable: 3, numRetained: 4, mode: pb.CheckpointingMode_CHECKPOINTING_MODE_AT_LEAST_ONCE, unaligned: true, alignedTimeout: 2 * time.Second}
	if s := checkpointSettingsFrom(cfg); s != want || !s.enabled() {
		t.Fatalf("settings %+v, want %+v", s, want)
	}
}

// A task that waits for its final checkpoint asks for one at once instead of waiting for the
// interval; admission still applies (max-concurrent), and a second request while one is queued
// adds nothing.
func TestCheckpointTriggerSoon(t *testing.T) {
	h := newCkptHarness(t, nil) // interval 10 s
	h.c.triggerSoon()
	if h.io.count("allocateID") != 0 {
		t.Fatalf("triggerSoon before start triggered a checkpoint")
	}
	h.c.start()
	h.advanceTo(ckptAt(time.Second))
	h.c.triggerSoon()
	h.wantTriggered(1)
	h.wantTriggeredAt(1, time.Second)
	h.c.triggerSoon() // checkpoint 1 pending: queued, not dropped
	h.c.triggerSoon() // already queued
	h.wantTriggered(1)
	for _, task := range []string{"src#0", "map#0", "sink#0"} {
		h.c.ack(task, 1, &pb.TaskStateSnapshot{}, &pb.CheckpointMetrics{})
	}
	h.wantTriggered(1, 2) // the queued request ran when 1 completed
}

// A finished task no longer holds a checkpoint back, and its consumers, once all their
// producers finished, get the barrier by RPC for the pending checkpoint (their inputs carry
// none): a checkpoint triggered while tasks finish completes instead of failing.
func TestCheckpointTriggersConsumersOfFinishedTasks(t *testing.T) {
	h := newCkptHarness(t, func(s *checkpointSettings) { s.interval = 0 })
	h.io.tasks = checkpointPlan{trigger: []string{"src#0", "src#1"}, wait: []string{"src#0", "src#1", "sum#0", "sink#0"}}
	id, ch := h.startManual()
	if got := h.io.triggered[0]; !slices.Equal(got, []string{"src#0", "src#1"}) {
		t.Fatalf("triggered %v, want the sources", got)
	}
	// src#0 finished before its trigger arrived; src#1 still runs: sum#0 gets the barrier
	// from src#1.
	h.io.ready = []string{"src#1"}
	h.c.taskFinished("src#0", []*pb.OperatorSubtaskState{{Operator: "src", Subtask: 0}})
	if n := len(h.io.triggered); n != 1 {
		t.Fatalf("triggered again %v while a producer of sum#0 runs", h.io.triggered[1:])
	}
	// src#1 finished too (its barrier may or may not have gone out): sum#0 is triggered by RPC,
	// once, with the checkpoint's own barrier.
	h.io.ready = []string{"sum#0"}
	h.c.taskFinished("src#1", []*pb.OperatorSubtaskState{{Operator: "src", Subtask: 1}})
	h.c.taskFinished("src#1", nil) // a duplicate report changes nothing
	if len(h.io.triggered) != 2 || !slices.Equal(h.io.triggered[1], []string{"sum#0"}) {
		t.Fatalf("RPC triggers %v, want [sum#0] once after the last producer finished", h.io.triggered)
	}
	if b := h.io.lastBarrier(); b.GetCheckpointId() != id {
		t.Fatalf("sum#0 got barrier %d, want checkpoint %d's", b.GetCheckpointId(), id)
	}
	h.ack("sum#0", id, 10)
	h.ack("sink#0", id, 5)
	r := <-ch
	if r.err != nil || r.info.GetStatus() != ckptStatusDone {
		t.Fatalf("checkpoint %d: %v %v, want completed", id, r.info, r.err)
	}
	var ops []string
	for _, st := range h.io.finalized[id].states {
		ops = append(ops, fmt.Sprintf("%s/%d", st.GetOperator(), st.GetSubtask()))
	}
	if want := []string{"src/0", "src/1", "sum#0/10", "sink#0/5"}; !slices.Equal(ops, want) {
		t.Fatalf("finalized states %v, want %v (the finished sources' and the acknowledged ones)", ops, want)
	}
	for _, c := range h.c.historyView() {
		if c.GetStatus() == ckptStatusFailed {
			t.Fatalf("failed checkpoint in the history: %v", c)
		}
	}
}

// A task waiting for its final checkpoint brings the next periodic trigger forward; within the
// minimum pause it moves to the end of the pause (nothing is recorded as failed), and while a
// checkpoint is pending it comes when that one ends.
func TestCheckpointTriggerSoonRespectsMinPause(t *testing.T) {
	h := newCkptHarness(t, func(s *checkpointSettings) { s.minPause = 2 * time.Second })
	h.c.start()
	h.fire() // the first periodic checkpoint, at the interval
	h.wantTriggered(1)
	h.c.triggerSoon() // pending: remembered
	h.wantTriggered(1)
	h.advanceTo(ckptAt(10*time.Second + 100*time.Millisecond))
	for _, task := range []string{"src#0", "map#0", "sink#0"} {
		h.ack(task, 1, 0)
	}
	h.wantTriggered(1)                                // within the pause: not yet
	h.wantNext(12*time.Second + 100*time.Millisecond) // the end of the pause
	h.fire()
	h.wantTriggered(1, 2)
	for _, c := range h.c.historyView() {
		if c.GetStatus() == ckptStatusFailed {
			t.Fatalf("failed checkpoint in the history: %v", c)
		}
	}
}

// When every task finished, a trigger has nothing to do: no checkpoint, no failure recorded.
func TestCheckpointNotTriggeredWhenEveryTaskFinished(t *testing.T) {
	h := newCkptHarness(t, func(s *checkpointSettings) { s.interval = 0 })
	h.io.tasks = checkpointPlan{}
	reply := make(chan checkpointResult, 1)
	h.c.triggerManual(reply, nil)
	if r := <-reply; r.err == nil {
		t.Fatalf("manual trigger with every task finished: %v, want an error", r.info)
	}
	if h.io.count("allocateID") != 0 || len(h.c.historyView()) != 0 {
		t.Fatalf("calls %v, history %v: want neither a checkpoint nor a failure", h.io.calls, h.c.historyView())
	}
}

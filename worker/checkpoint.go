package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"math"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/internal/execid"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/state"
	"github.com/goflink/goflink/storage"
)

// maxAbortedIDs bounds the checkpoint IDs a task remembers as aborted (Flink: 128).
const maxAbortedIDs = 128

var (
	// errTaskNotRunning is returned for checkpoint commands to a task that does not run.
	errTaskNotRunning = errors.New("task is not running")
	// errTaskFinished is returned for checkpoint commands to a task that ended successfully.
	errTaskFinished = errors.New("task finished")
)

// stateContext is what one operator of a task sees of its state (operator.StateContext).
type stateContext struct {
	store    *state.OperatorStateStore
	keyed    state.KeyedBackend
	restored int64
}

func (s *stateContext) ListState(name string, d pb.ListDistribution) (operator.ListState, error) {
	return s.store.ListState(name, d)
}

func (s *stateContext) KeyedBackend() state.KeyedBackend { return s.keyed }
func (s *stateContext) RestoredCheckpointID() int64      { return s.restored }

// chainMember is one operator (or the source) of the task's chain, in chain order.
type chainMember struct {
	name  string
	uid   string // its state's name in snapshots
	impl  any
	store *state.OperatorStateStore
}

// post hands an action to the task's goroutine (the mailbox). It fails when the task has
// ended or ends before taking the action.
func (t *task) post(ctx context.Context, f func() error) error {
	select {
	case t.mail <- f:
		return nil
	case <-t.done:
	case <-t.ctx.Done():
	case <-ctx.Done():
		return ctx.Err()
	}
	if t.finished.Load() {
		return errTaskFinished
	}
	return errTaskNotRunning
}

// initState creates the task's state before its operators open: the keyed backend for a keyed
// stream, and the operator state stores, restored from the checkpoint the task starts from.
func (t *task) initState(keyType keyInfo) error {
	r := t.req.GetRestore()
	// The restored checkpoint is complete, and nothing was emitted since.
	t.lastCheckpoint, t.lastCompleted = r.GetCheckpointId(), r.GetCheckpointId()
	t.restoredID = r.GetCheckpointId()
	states := map[string][]*pb.OperatorSubtaskState{}
	var keyed []*pb.KeyedStateHandle
	var channels *pb.ChannelStateHandle
	for _, st := range r.GetStates() {
		if st.GetParallelism() != t.vertex.GetParallelism() {
			t.rescaled = true
		}
		states[st.GetOperator()] = append(states[st.GetOperator()], st)
		if st.GetKeyed() != nil {
			keyed = append(keyed, st.GetKeyed())
		}
		if st.GetChannelState() != nil {
			// Every subtask's operator states come along (for list state); the channel
			// state is this subtask's alone.
			if st.GetSubtask() == t.id.GetSubtask() || st.GetParallelism() != t.vertex.GetParallelism() {
				channels = st.GetChannelState()
			}
		}
	}
	if channels != nil {
		if t.rescaled {
			return fmt.Errorf("restore from checkpoint %d: it holds in-flight data (an unaligned checkpoint) of another parallelism than %d; rescale from a savepoint or an aligned checkpoint",
				r.GetCheckpointId(), t.vertex.GetParallelism())
		}
		root, err := storage.OpenRoot(r.GetBaseDir(), t.env.s3)
		if err == nil {
			t.recovered, err = readChannelState(t.ctx, root, channels)
		}
		if err != nil {
			return fmt.Errorf("restore channel state from checkpoint %d: %w", r.GetCheckpointId(), err)
		}
	}
	for i := range t.chain {
		m := &t.chain[i]
		m.store = state.NewOperatorStateStore()
		if err := m.store.Restore(states[m.uid], int(t.id.GetSubtask()), int(t.vertex.GetParallelism())); err != nil {
			return fmt.Errorf("restore operator state of %s: %w", m.name, err)
		}
	}
	if !keyType.keyed {
		return nil
	}
	maxP := int(t.vertex.GetMaxParallelism())
	kr := state.RangeForOperator(int(t.id.GetSubtask()), maxP, int(t.vertex.GetParallelism()))
	dir, err := t.env.scratch.taskDir()
	if err != nil {
		return err
	}
	t.closers = append(t.closers, closer{"scratch dir", dir}) // closed after the backend
	kb, err := state.NewKeyedBackend(state.KeyedBackendOptions{
		Kind: t.jobCfg.String(config.StateBackend), KeyType: keyType.typ, MaxParallelism: maxP, Range: kr, Dir: string(dir),
	})
	if err != nil {
		return fmt.Errorf("keyed state backend: %w", err)
	}
	t.keyed = kb
	t.closers = append(t.closers, closer{"keyed state backend", kb})
	if len(keyed) > 0 {
		root, err := storage.OpenRoot(r.GetBaseDir(), t.env.s3)
		if err != nil {
			return fmt.Errorf("restore keyed state from checkpoint %d: %w", r.GetCheckpointId(), err)
		}
		open := func(h *pb.FileHandle) (io.ReadCloser, error) { return root.OpenFile(t.ctx, h) }
		if err := kb.Restore(keyed, open); err != nil {
			return fmt.Errorf("restore keyed state from checkpoint %d: %w", r.GetCheckpointId(), err)
		}
	}
	if r != nil {
		t.log.Info("restored keyed state from checkpoint", "task", t.name, "checkpoint_id", r.GetCheckpointId(),
			"key_groups", fmt.Sprintf("%d-%d", kr.Start, kr.End), "keyed_files", len(keyed))
	}
	return nil
}

// barrierActions of the task (see barrier.go).

func (t *task) blockChannel(ch int) { t.blocked[ch] = true }

// unblockAll resumes every blocked channel; the gate kept their buffers queued.
func (t *task) unblockAll() { clear(t.blocked) }

func (t *task) abortCheckpoint(id int64, reason pb.CheckpointFailureReason) error {
	t.dropCapture(id)
	t.decline(id, reason, "aborted at the barrier")
	return t.broadcastEvent(&pb.Event{Kind: &pb.Event_CancelCheckpoint{CancelCheckpoint: &pb.CancelCheckpointMarker{CheckpointId: id}}})
}

// triggerFromRPC starts a checkpoint at a source task, or at a task whose producers all
// finished. Such a task takes it once its input has ended: a producer finishes only after a
// completed checkpoint covered everything it emitted, so what is left on its channels is its
// end of partition, and the checkpoint covers the same records either way.
func (t *task) triggerFromRPC(b *pb.CheckpointBarrier) error {
	if t.source == nil && !t.ending {
		t.deferred = append(t.deferred, b)
		return nil
	}
	if t.source != nil && b.GetStop() && b.GetDrain() && b.GetCheckpointId() > t.lastCheckpoint && !t.aborted[b.GetCheckpointId()] {
		// A draining stop: event time ends and every operator's input ends before the
		// barrier, downstream too (EndOfData), so the savepoint holds what they emitted last.
		if err := t.endInput(); err != nil {
			return err
		}
		if err := t.broadcastEvent(endOfData); err != nil {
			return err
		}
	}
	return t.triggerCheckpoint(b, 0)
}

// takeDeferred takes the checkpoints triggered before the input ended, oldest first
// (triggerCheckpoint skips any that a newer one overtook, and sends on aborted ones as
// cancellation markers).
func (t *task) takeDeferred() error {
	slices.SortFunc(t.deferred, func(a, b *pb.CheckpointBarrier) int { return cmp.Compare(a.GetCheckpointId(), b.GetCheckpointId()) })
	for _, b := range t.deferred {
		if err := t.triggerCheckpoint(b, 0); err != nil {
			return err
		}
	}
	t.deferred = nil
	return nil
}

// inputCapture is an unaligned checkpoint's input channel state on its way to the
// checkpoint's asynchronous part, which waits for it: it is complete once every input channel
// delivered the checkpoint's barrier.
type inputCapture struct {
	id    int64
	taken bool                 // triggerCheckpoint handed it to the asynchronous part
	done  chan *channelCapture // capacity 1; closed when the checkpoint is aborted
}

// triggerUnaligned takes checkpoint b unaligned: the input channels not in skip collect their
// in-flight buffers until their barrier arrives (completeChannelState).
func (t *task) triggerUnaligned(b *pb.CheckpointBarrier, skip []bool, alignment time.Duration) error {
	id := b.GetCheckpointId()
	t.dropCapture(math.MaxInt64) // at most one unaligned checkpoint at a time
	t.gate.startCapture(id, skip)
	if c := &t.cur; c.active && !skip[c.it.ch.idx] {
		t.gate.prependCapture(id, c.it.ch.idx, c.rest())
	}
	t.capture = &inputCapture{id: id, done: make(chan *channelCapture, 1)}
	if err := t.triggerCheckpoint(b, alignment); err != nil {
		return err
	}
	if t.capture != nil && t.capture.id == id && !t.capture.taken {
		t.dropCapture(id) // not taken: out of order, aborted or declined
	}
	return nil
}

// completeChannelState hands unaligned checkpoint id's input channel state to its
// asynchronous part.
func (t *task) completeChannelState(id int64) error {
	c := t.capture
	if c == nil || c.id != id {
		return nil // aborted meanwhile
	}
	t.capture = nil
	in, complete := t.gate.takeCapture(id)
	if in == nil || !complete {
		return fmt.Errorf("checkpoint %d: every barrier arrived but its channel state is incomplete", id)
	}
	c.done <- in
	return nil
}

// dropCapture abandons the input channel state of an unaligned checkpoint up to id.
func (t *task) dropCapture(id int64) {
	if c := t.capture; c != nil && c.id <= id {
		t.gate.dropCapture(c.id)
		close(c.done)
		t.capture = nil
	}
}

// alignmentTimer returns the timer of the next aligned-checkpoint timeout, arming it: the
// pending checkpoint's, or that of a barrier still queued in the input gate; nil without one.
func (t *task) alignmentTimer() <-chan time.Time {
	h, ok := t.barriers.(*alignedHandler)
	if !ok {
		return nil
	}
	at, ok := h.alignmentDeadline()
	if queued, has := t.gate.nextDeadline(); has && (!ok || queued.Before(at)) {
		at, ok = queued, true
	}
	if !ok {
		t.alignAt = time.Time{}
		return nil
	}
	if !at.Equal(t.alignAt) {
		d := max(time.Until(at), 0)
		if t.alignTimer == nil {
			t.alignTimer = time.NewTimer(d)
		} else {
			t.alignTimer.Reset(d)
		}
		t.alignAt = at
	}
	return t.alignTimer.C
}

// alignmentDue reports whether the armed aligned-checkpoint timeout has passed.
func (t *task) alignmentDue() bool {
	return !t.alignAt.IsZero() && !time.Now().Before(t.alignAt)
}

// alignmentTimeout converts the queued barriers whose timeout passed into priority events and
// switches the pending checkpoint to unaligned when its timeout passed.
func (t *task) alignmentTimeout() error {
	t.alignAt = time.Time{} // re-armed if it is still pending
	h, ok := t.barriers.(*alignedHandler)
	if !ok {
		return nil
	}
	t.gate.convertTimedOut(time.Now())
	return h.alignmentTimeout()
}

// checkpointing reports whether the job takes checkpoints.
func (t *task) checkpointing() bool {
	return t.req.GetCheckpointingMode() != pb.CheckpointingMode_CHECKPOINTING_MODE_UNSPECIFIED
}

// triggerCheckpoint takes the task's part of a checkpoint, in Flink's order: sinks pre-commit,
// the barrier goes downstream, the synchronous snapshot, then the upload and the
// acknowledgement off the task goroutine. An error fails the task (a synchronous-phase
// failure).
func (t *task) triggerCheckpoint(b *pb.CheckpointBarrier, alignment time.Duration) error {
	id := b.GetCheckpointId()
	if id <= t.lastCheckpoint {
		return nil // out of order: a newer checkpoint was already taken
	}
	t.lastCheckpoint = id
	t.meter.alignment.Store(int64(alignment))
	if ms := b.GetTimestampMs(); ms > 0 {
		delay := time.Since(time.UnixMilli(ms)) - alignment
		t.meter.startDelay.Store(max(int64(delay), 0))
	}
	if t.aborted[id] {
		return t.broadcastEvent(&pb.Event{Kind: &pb.Event_CancelCheckpoint{CancelCheckpoint: &pb.CancelCheckpointMarker{CheckpointId: id}}})
	}
	for _, m := range t.chain {
		if d, ok := m.impl.(operator.CheckpointDecliner); ok {
			if reason := d.DeclineCheckpoint(id); reason != "" {
				t.log.Info("checkpoint declined", "task", t.name, "checkpoint_id", id, "operator", m.name, "reason", reason)
				t.decline(id, pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_DECLINED_TASK_NOT_READY, m.name+": "+reason)
				return t.broadcastEvent(&pb.Event{Kind: &pb.Event_CancelCheckpoint{CancelCheckpoint: &pb.CancelCheckpointMarker{CheckpointId: id}}})
			}
		}
	}
	start := time.Now()
	if err := forChain(t, id, "checkpoint %d: pre-barrier of %s: %w", operator.PreBarrier.PrepareSnapshotPreBarrier); err != nil {
		return err
	}
	output, err := t.sendBarrier(b)
	if err != nil {
		return err
	}
	var input *inputCapture
	if c := t.capture; c != nil && c.id == id {
		c.taken, input = true, c
	}
	// The cut: what the task read and emitted so far is in this checkpoint.
	t.inAtCheckpoint, t.outAtCheckpoint = t.in, t.out
	states := make([]*pb.OperatorSubtaskState, 0, len(t.chain))
	for _, m := range t.chain {
		if s, ok := m.impl.(operator.Snapshotter); ok {
			if err := s.SnapshotState(id); err != nil {
				return fmt.Errorf("checkpoint %d: snapshot of %s: %w", id, m.name, err)
			}
		}
		states = append(states, &pb.OperatorSubtaskState{
			Operator: m.uid, Subtask: t.id.GetSubtask(), Parallelism: t.vertex.GetParallelism(),
			MaxParallelism: t.vertex.GetMaxParallelism(), Lists: m.store.Snapshot(),
		})
	}
	var snap state.Snapshot
	if t.keyed != nil {
		var err error
		if snap, err = t.keyed.Snapshot(); err != nil {
			return fmt.Errorf("checkpoint %d: keyed state snapshot: %w", id, err)
		}
	}
	if b.GetStop() {
		t.stopID, t.stopped = id, false
	}
	metrics := &pb.CheckpointMetrics{AlignmentMs: alignment.Milliseconds(), SyncMs: time.Since(start).Milliseconds(), Unaligned: input != nil}
	dir := b.GetSavepointDir()
	t.async.Go(func() { t.finishCheckpoint(id, dir, snap, states, metrics, input, output) })
	return nil
}

// sendBarrier sends barrier b downstream and returns the checkpoint's output channel state
// (nil for an aligned checkpoint). An unaligned checkpoint's barrier overtakes the queued
// output buffers, which are that state; one that goes unaligned after its timeout is queued
// in order, and what it overtakes if converted joins the state (outputState.wait). Either goes
// in order and aligned on forward edges (as Flink keeps pointwise edges aligned) and after the
// task's input ended (its final checkpoint, whose state later checkpoints reuse once it
// finished, holds no in-flight data).
func (t *task) sendBarrier(b *pb.CheckpointBarrier) (*outputState, error) {
	if !b.GetUnaligned() {
		return nil, t.broadcastEvent(&pb.Event{Kind: &pb.Event_Barrier{Barrier: b}})
	}
	aligned := &pb.Event{Kind: &pb.Event_Barrier{Barrier: alignedBarrier(b)}}
	ev := &pb.Event{Kind: &pb.Event_Barrier{Barrier: b}}
	out := &outputState{}
	for i, w := range t.writers {
		switch {
		case t.ending || w.part == pb.Partitioner_PARTITIONER_FORWARD:
			if err := w.BroadcastEvent(aligned); err != nil {
				return nil, err
			}
		case priorityBarrier(b):
			out.unaligned = true
			for c, bufs := range w.BroadcastPriority(ev) {
				if len(bufs) > 0 {
					out.data = append(out.data, channelData{key: keyOf(t.outEdges[i], int32(c)), bufs: bufs})
				}
			}
		default: // aligned, unaligned once its timeout passes
			tbs, err := w.BroadcastTimed(ev)
			if err != nil {
				return nil, err
			}
			for c, tb := range tbs {
				out.timed = append(out.timed, timedOutput{key: keyOf(t.outEdges[i], int32(c)), tb: tb})
			}
		}
	}
	return out, nil
}

// outputState is a checkpoint's output channel state: the buffers its barrier overtook at
// once (an unaligned checkpoint), or those its barriers overtake when their aligned-checkpoint
// timeout passes while they are still queued.
type outputState struct {
	unaligned bool
	data      []channelData
	timed     []timedOutput
}

type timedOutput struct {
	key channelKey
	tb  *timedBarrier
}

// wait waits until every timed barrier was taken in order or converted, and adds what the
// converted ones overtook.
func (o *outputState) wait(ctx context.Context) error {
	for _, to := range o.timed {
		select {
		case <-to.tb.resolved:
		case <-ctx.Done():
			return ctx.Err()
		}
		if to.tb.converted {
			o.unaligned = true
		}
		if len(to.tb.overtaken) > 0 {
			o.data = append(o.data, channelData{key: to.key, bufs: to.tb.overtaken})
		}
	}
	o.timed = nil
	return nil
}

// alignedBarrier is b as sent in order: it does not overtake anything, and its consumer
// aligns it.
func alignedBarrier(b *pb.CheckpointBarrier) *pb.CheckpointBarrier {
	a := proto.Clone(b).(*pb.CheckpointBarrier)
	a.Unaligned, a.AlignedTimeoutMs = false, 0
	return a
}

// finishCheckpoint is the asynchronous part: write the keyed state, then acknowledge. A
// failure here declines the checkpoint; the task keeps running.
func (t *task) finishCheckpoint(id int64, savepointDir string, snap state.Snapshot, states []*pb.OperatorSubtaskState, m *pb.CheckpointMetrics,
	input *inputCapture, output *outputState,
) {
	start := time.Now()
	if err := t.finishChannelState(id, states[0], m, input, output); err != nil {
		if snap != nil {
			snap.Release()
		}
		if !errors.Is(err, errCheckpointAborted) && t.ctx.Err() == nil {
			t.log.Warn("checkpoint channel state upload failed", "checkpoint_id", id, "err", err)
			t.decline(id, pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_ASYNC_EXCEPTION, err.Error())
		}
		return
	}
	if snap != nil {
		keyed, err := t.writeKeyed(id, savepointDir, snap)
		if err != nil {
			if t.ctx.Err() == nil {
				level := slog.LevelWarn
				if errors.Is(err, fs.ErrNotExist) {
					// Its directory was deleted under it: the JobManager aborted the checkpoint
					// (a failover, or the job ending) while it was being written.
					level = slog.LevelInfo
				}
				t.log.Log(t.ctx, level, "checkpoint upload failed", "checkpoint_id", id, "err", err)
				t.decline(id, pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_ASYNC_EXCEPTION, err.Error())
			}
			return
		}
		states[0].Keyed = keyed
		m.StateSizeBytes += keyed.GetFile().GetSize()
	}
	for _, s := range states {
		for _, l := range s.GetLists() {
			for _, e := range l.GetElements() {
				m.StateSizeBytes += int64(len(e))
			}
		}
	}
	m.AsyncMs = time.Since(start).Milliseconds()
	if t.ctx.Err() != nil {
		return // the task is gone; the JobManager aborts the checkpoint and deletes its files
	}
	t.env.ack(&pb.AcknowledgeCheckpointRequest{
		RegistrationId: t.registration, Execution: t.id, CheckpointId: id,
		State: &pb.TaskStateSnapshot{Operators: states}, Metrics: m,
	})
}

// errCheckpointAborted ends the asynchronous part of a checkpoint aborted meanwhile.
var errCheckpointAborted = errors.New("checkpoint aborted")

// finishChannelState waits for an unaligned checkpoint's input channel state, then writes it
// and the output channel state into the checkpoint's channel state file, on the chain head's
// state st.
func (t *task) finishChannelState(id int64, st *pb.OperatorSubtaskState, m *pb.CheckpointMetrics, input *inputCapture, output *outputState) error {
	var out []channelData
	if output != nil {
		if err := output.wait(t.ctx); err != nil {
			return err
		}
		out = output.data
		m.Unaligned = m.GetUnaligned() || output.unaligned
	}
	var in []channelData
	if input != nil {
		var c *channelCapture
		select {
		case c = <-input.done:
		case <-t.ctx.Done():
			return t.ctx.Err()
		}
		if c == nil {
			return errCheckpointAborted
		}
		for ch, bufs := range c.bufs {
			if len(bufs) > 0 {
				in = append(in, channelData{key: keyOf(t.inputs[t.channels[ch].edge].edge, t.channels[ch].producer.GetSubtask()), bufs: bufs})
			}
		}
	}
	if len(in) == 0 && len(out) == 0 {
		return nil
	}
	root, err := storage.OpenRoot(storage.JobDir(t.jobCfg.String(config.CheckpointDir), t.id.GetJobId()), t.env.s3)
	if err != nil {
		return err
	}
	f, err := root.CreateFile(t.ctx, id, fmt.Sprintf("channels-v%d-s%d-a%d", t.id.GetVertexId(), t.id.GetSubtask(), t.id.GetAttempt()))
	if err != nil {
		return err
	}
	inLocs, outLocs, err := writeChannelState(f, in, out)
	if err != nil {
		return errors.Join(fmt.Errorf("write channel state: %w", err), f.Abort())
	}
	h, err := f.Commit()
	if err != nil {
		return err
	}
	st.ChannelState = &pb.ChannelStateHandle{File: h, Input: inLocs, Output: outLocs}
	m.InFlightBytes = h.GetSize()
	return nil
}

// writeKeyed writes the keyed state of checkpoint id into the job's checkpoint directory, or
// of a savepoint into its directory.
func (t *task) writeKeyed(id int64, savepointDir string, snap state.Snapshot) (*pb.KeyedStateHandle, error) {
	defer snap.Release()
	name := fmt.Sprintf("keyed-v%d-s%d-a%d", t.id.GetVertexId(), t.id.GetSubtask(), t.id.GetAttempt())
	var f *storage.FileWriter
	var err error
	if savepointDir != "" {
		// A local path or an s3:// location, as the JobManager chose it.
		var root storage.Root
		root, err = storage.OpenRoot(savepointDir, t.env.s3)
		if err == nil {
			f, err = root.CreateSavepointFile(t.ctx, name)
		}
	} else {
		var root storage.Root
		root, err = storage.OpenRoot(storage.JobDir(t.jobCfg.String(config.CheckpointDir), t.id.GetJobId()), t.env.s3)
		if err == nil {
			f, err = root.CreateFile(t.ctx, id, name)
		}
	}
	if err != nil {
		return nil, err
	}
	offsets, err := snap.WriteSnapshot(f)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("write keyed state: %w", err), f.Abort())
	}
	h, err := f.Commit()
	if err != nil {
		return nil, err
	}
	kr := t.keyed.KeyGroupRange()
	return &pb.KeyedStateHandle{File: h, KeyGroupStart: int32(kr.Start), KeyGroupEnd: int32(kr.End), Offsets: offsets}, nil
}

// decline tells the JobManager that this task does not take checkpoint id.
func (t *task) decline(id int64, reason pb.CheckpointFailureReason, msg string) {
	t.env.decline(&pb.DeclineCheckpointRequest{
		RegistrationId: t.registration, Execution: t.id, CheckpointId: id, Reason: reason, Message: fmt.Sprintf("%s: %s", t.name, msg),
	})
}

// broadcastEvent sends an event on every output channel, after the records before it.
func (t *task) broadcastEvent(ev *pb.Event) error {
	for _, w := range t.writers {
		if err := w.BroadcastEvent(ev); err != nil {
			return err
		}
	}
	return nil
}

// notifyComplete delivers a completion: everything up to id is committed. Completions are
// monotonic; older ones are ignored.
func (t *task) notifyComplete(id int64) error {
	if t.stopID != 0 && id >= t.stopID && !t.stopped {
		t.stopped = true // once the chain committed it, below
		defer t.log.Info("stop savepoint completed; the task ends", "task", t.name, "savepoint_id", t.stopID)
	}
	if id <= t.lastCompleted {
		return nil
	}
	t.lastCompleted = id
	return forChain(t, id, "checkpoint %d complete: %s: %w", operator.CheckpointListener.NotifyCheckpointComplete)
}

// notifyAborted delivers an abort, after redelivering the latest completion (which may have
// been lost).
func (t *task) notifyAborted(id, latestCompleted int64) error {
	if latestCompleted > 0 {
		if err := t.notifyComplete(latestCompleted); err != nil {
			return err
		}
	}
	if id == t.stopID && !t.stopped {
		t.stopID = 0
		t.log.Info("stop savepoint aborted; the task goes on", "task", t.name, "savepoint_id", id)
	}
	if id > t.lastCheckpoint {
		t.aborted[id] = true // its barrier, when it comes, is skipped
		maps.DeleteFunc(t.aborted, func(a int64, _ bool) bool { return a < id-maxAbortedIDs })
	}
	return forChain(t, id, "checkpoint %d aborted: %s: %w", operator.CheckpointListener.NotifyCheckpointAborted)
}

// forChain calls f with checkpoint id on every member of the chain that implements I. An error
// is formatted with format, which takes the id, the member's name and the error.
func forChain[I any](t *task, id int64, format string, f func(I, int64) error) error {
	for _, m := range t.chain {
		if x, ok := m.impl.(I); ok {
			if err := f(x, id); err != nil {
				return fmt.Errorf(format, id, m.name, err)
			}
		}
	}
	return nil
}

// checkpointCommand runs a checkpoint RPC of the current leader term and registration on the
// task's goroutine.
func (tm *TaskManager) checkpointCommand(ctx context.Context, registration string, term uint64, id *pb.ExecutionAttemptID, f func(t *task) error) error {
	if id == nil {
		return status.Error(codes.InvalidArgument, "execution is required")
	}
	tm.mu.Lock()
	err := tm.checkCommandLocked(registration, term)
	t := tm.tasks[execid.Key(id)]
	tm.mu.Unlock()
	if err != nil {
		return err
	}
	if t == nil {
		return status.Errorf(codes.FailedPrecondition, "execution %s: %v", execid.Key(id), errTaskNotRunning)
	}
	return t.post(ctx, func() error { return f(t) })
}

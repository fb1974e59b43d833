package coordinator

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/goflink/goflink/config"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/storage"
)

// The checkpoint coordinator of one job (Flink's CheckpointCoordinator). It is
// decision logic owned by the job master's loop goroutine: it never blocks on the network and
// takes the time from an injectable clock. What it needs done goes through checkpointIO; the
// synchronous calls there (ID allocation and the completion commit through Raft, the metadata
// write) are short, the RPCs to tasks are asynchronous.

// maxHistory bounds the checkpoint history kept for flinkctl checkpoints.
const maxHistory = 100

// recentExpiredSize is how many expired checkpoint IDs are remembered to tell late acks apart.
const recentExpiredSize = 16

// errNotTriggered is the error of a manual checkpoint or savepoint that was never triggered
// (its job fails over, ends, or not every task runs).
var errNotTriggered = errors.New("checkpoint not triggered")

// checkpointSettings are the job's checkpointing keys.
type checkpointSettings struct {
	interval      time.Duration // 0: periodic checkpoints are off
	timeout       time.Duration
	minPause      time.Duration
	maxConcurrent int
	tolerable     int
	numRetained   int
	mode          pb.CheckpointingMode
	// unaligned: checkpoints (never savepoints) may be taken unaligned, switching after
	// alignedTimeout when it is positive (execution.checkpointing.unaligned and
	// aligned-checkpoint-timeout).
	unaligned      bool
	alignedTimeout time.Duration
}

// checkpointSettingsFrom reads the checkpointing keys of a job's configuration.
func checkpointSettingsFrom(cfg *config.Config) checkpointSettings {
	s := checkpointSettings{
		interval:       cfg.Duration(config.CheckpointInterval), // no default: 0 when unset
		timeout:        cfg.Duration(config.CheckpointTimeout),
		minPause:       cfg.Duration(config.CheckpointMinPause),
		maxConcurrent:  cfg.Int(config.CheckpointMaxConcurrent),
		tolerable:      cfg.Int(config.CheckpointTolerable),
		numRetained:    cfg.Int(config.CheckpointNumRetained),
		mode:           pb.CheckpointingMode_CHECKPOINTING_MODE_EXACTLY_ONCE,
		unaligned:      cfg.Bool(config.CheckpointUnaligned),
		alignedTimeout: cfg.Duration(config.CheckpointAlignedTimeout),
	}
	if cfg.String(config.CheckpointMode) == "AT_LEAST_ONCE" {
		s.mode = pb.CheckpointingMode_CHECKPOINTING_MODE_AT_LEAST_ONCE
	}
	return s
}

// enabled reports whether the job takes checkpoints.
func (s checkpointSettings) enabled() bool { return s.interval > 0 }

// checkpointPlan is the set of tasks one checkpoint involves.
type checkpointPlan struct {
	// trigger holds the execution keys of the running tasks that get the barrier by RPC:
	// sources, and tasks whose producers all finished (the rest get it from their inputs).
	trigger []string
	wait    []string // execution keys of every running task
	// finished holds the state of tasks that finished before the checkpoint: their state in
	// the last checkpoint they took part in (a restore must not run them again).
	finished []*pb.OperatorSubtaskState
}

// checkpointIO is what the coordinator needs from the job master.
type checkpointIO interface {
	// plan returns the tasks of a checkpoint, or ok=false when not all of them are running;
	// none to wait for when every task finished.
	plan() (p checkpointPlan, ok bool)
	// triggerable returns the tasks that a checkpoint triggers by RPC now (plan's trigger): a
	// task becomes one when its last producer finishes.
	triggerable() []string
	// allocateID takes the next checkpoint ID from the replicated counter.
	allocateID() (int64, error)
	// triggerTasks sends the barrier to tasks (asynchronously; a failed RPC comes back as
	// triggerFailed).
	triggerTasks(tasks []string, b *pb.CheckpointBarrier)
	// finalize writes the checkpoint's metadata and returns its store record.
	// A savepoint's metadata goes into its own directory (sp.dir).
	finalize(id int64, trigger time.Time, states []*pb.OperatorSubtaskState, size int64, sp *savepointRequest) (*pb.CompletedCheckpoint, error)
	// commit adds the checkpoint to the replicated store: the commit point. It returns the
	// checkpoints the store subsumed.
	// savepointOnly records an intermediate savepoint, which the store does not retain.
	commit(cp *pb.CompletedCheckpoint, savepointOnly bool) ([]*pb.CompletedCheckpoint, error)
	// notifyComplete and notifyAborted tell every task (best effort, asynchronous).
	notifyComplete(id int64)
	notifyAborted(id, latestCompleted int64)
	// discard deletes the files of a checkpoint that did not complete, or of a savepoint's
	// directory (asynchronously); discardCompleted those of a subsumed one the job owns.
	discard(id int64, sp *savepointRequest)
	discardCompleted(cp *pb.CompletedCheckpoint)
	// stopFailed tells the job master that its stop-with-savepoint failed.
	stopFailed(sp *savepointRequest, msg string)
	// failJob triggers a failover because the checkpoint failures exceeded the tolerance.
	failJob(cause string)
}

// pendingCheckpoint is a checkpoint that was triggered and is not complete yet.
type pendingCheckpoint struct {
	id       int64
	trigger  time.Time
	deadline time.Time
	barrier  *pb.CheckpointBarrier
	waiting  map[string]bool // tasks that have not acknowledged yet
	// triggered holds the tasks sent the barrier by RPC; more join when their producers finish.
	triggered map[string]bool
	states    []*pb.OperatorSubtaskState
	info      *pb.CheckpointInfo // its history entry, updated in place (acks, state size, alignment)
	replies   []chan<- checkpointResult
	// sp is set for a savepoint.
	sp *savepointRequest
}

// savepointRequest makes a triggered checkpoint a savepoint.
type savepointRequest struct {
	dir         string // the savepoint's own directory (absolute or s3://; created by its writers)
	stop, drain bool   // stop-with-savepoint, with a drain
}

// intermediate reports whether a savepoint is not a stop's: it commits nothing, and no
// failover restores it (Flink 1.15+).
func (sp *savepointRequest) intermediate() bool { return sp != nil && !sp.stop }

// manualRequest is a checkpoint or savepoint requested by a user.
type manualRequest struct {
	reply chan<- checkpointResult
	sp    *savepointRequest
	// aligned: a checkpoint taken aligned even when the job's are unaligned (the checkpoint
	// a rescale restores: channel state restores only at the parallelism it was taken at).
	aligned bool
}

// checkpointResult answers a manual trigger.
type checkpointResult struct {
	info *pb.CheckpointInfo
	err  error
}

// checkpointCoordinator triggers, tracks and completes the checkpoints of one job.
type checkpointCoordinator struct {
	s   checkpointSettings
	io  checkpointIO
	now func() time.Time
	rnd func(n int64) int64

	periodic       bool
	nextPeriodic   time.Time // zero: no periodic trigger scheduled
	periodicQueued bool      // a periodic request waits for max-concurrent
	// soon: a task waits for its final checkpoint; when a pending one ends, the next periodic
	// trigger comes forward (see triggerSoon).
	soon        bool
	manualQueue []manualRequest
	// paused: a stop-with-savepoint is under way; no periodic checkpoints meanwhile.
	paused         bool
	pending        []*pendingCheckpoint // ascending IDs
	lastCompletion time.Time
	latestComplete int64
	// latestSavepoint is the newest intermediate savepoint completed by this job master: a
	// job that ends for good commits its sinks' transactions up to it too (endedAt).
	latestSavepoint int64
	retained        []*pb.CompletedCheckpoint // the store, oldest first

	// failure accounting (CheckpointFailureManager)
	lastSucceeded int64
	consecutive   int
	countedIDs    map[int64]bool

	recentExpired []int64
	history       []*pb.CheckpointInfo // newest last
	// dropped counts the checkpoints that left the history, for the metrics' totals.
	dropped checkpointCounts
}

func newCheckpointCoordinator(s checkpointSettings, io checkpointIO, now func() time.Time, retained []*pb.CompletedCheckpoint) *checkpointCoordinator {
	c := &checkpointCoordinator{
		s: s, io: io, now: now, rnd: rand.Int64N, countedIDs: map[int64]bool{},
		retained: slices.Clone(retained),
	}
	if n := len(retained); n > 0 {
		c.latestComplete = retained[n-1].GetId()
		c.lastSucceeded = c.latestComplete
	}
	return c
}

// start begins periodic checkpoints: the first after a random delay in [minPause, interval]
// (as Flink's CheckpointCoordinator schedules it), then at a fixed rate.
func (c *checkpointCoordinator) start() {
	if !c.s.enabled() || c.periodic {
		return
	}
	c.periodic = true
	base := max(c.s.interval, c.s.minPause)
	delay := c.s.minPause
	if span := int64(base - c.s.minPause); span > 0 {
		delay += time.Duration(c.rnd(span + 1))
	}
	c.nextPeriodic = c.now().Add(delay)
}

// stop ends periodic checkpoints and aborts every queued and pending checkpoint with reason
// (a job failover, suspension or the job's end: none of these count as failures).
func (c *checkpointCoordinator) stop(reason pb.CheckpointFailureReason, msg string) {
	c.periodic, c.nextPeriodic, c.periodicQueued, c.soon, c.paused = false, time.Time{}, false, false, false
	for _, r := range c.manualQueue {
		r.reply <- checkpointResult{err: fmt.Errorf("%w: %s", errNotTriggered, msg)}
		if r.sp != nil && r.sp.stop {
			c.io.stopFailed(r.sp, msg)
		}
	}
	c.manualQueue = nil
	for len(c.pending) > 0 {
		c.abort(c.pending[0], reason, msg)
	}
}

// triggerManual queues a checkpoint (sp nil) or savepoint requested by a user; reply receives
// its outcome. A stop-with-savepoint pauses periodic checkpoints until it fails.
func (c *checkpointCoordinator) triggerManual(reply chan<- checkpointResult, sp *savepointRequest) {
	if sp != nil && sp.stop {
		c.paused = true
	}
	c.manualQueue = append(c.manualQueue, manualRequest{reply: reply, sp: sp})
	c.runQueued()
}

// triggerAligned queues a checkpoint requested to be aligned, whatever the job's
// execution.checkpointing.unaligned (a rescale's); reply receives its outcome.
func (c *checkpointCoordinator) triggerAligned(reply chan<- checkpointResult) {
	c.manualQueue = append(c.manualQueue, manualRequest{reply: reply, aligned: true})
	c.runQueued()
}

// triggerSoon brings the next periodic checkpoint forward because a task waits for its final
// checkpoint (Flink waits for the next interval): to now, or to the end of the minimum pause
// since the last completion; while max-concurrent checkpoints are pending, to when one ends.
// So a bounded job ends soon after its input, and no request is dropped for the pause.
func (c *checkpointCoordinator) triggerSoon() {
	if !c.periodic || c.paused {
		return
	}
	if len(c.pending) >= c.s.maxConcurrent {
		c.soon = true
		return
	}
	c.soon = false
	at := c.now()
	if end := c.lastCompletion.Add(c.s.minPause); !c.lastCompletion.IsZero() && end.After(at) {
		if c.nextPeriodic.IsZero() || end.Before(c.nextPeriodic) {
			c.nextPeriodic = end
		}
		return
	}
	if !c.periodicQueued {
		c.periodicQueued = true
		c.runQueued()
	}
}

// nextDeadline is when the coordinator must run onTimer next (zero: nothing scheduled).
func (c *checkpointCoordinator) nextDeadline() time.Time {
	d := c.nextPeriodic
	for _, p := range c.pending {
		if d.IsZero() || p.deadline.Before(d) {
			d = p.deadline
		}
	}
	return d
}

// onTimer fires the periodic trigger and expires checkpoints whose time is up.
func (c *checkpointCoordinator) onTimer() {
	now := c.now()
	for _, p := range slices.Clone(c.pending) {
		if c.find(p.id) == nil {
			continue // aborted meanwhile (a failover triggered by an earlier expiry)
		}
		if !now.Before(p.deadline) {
			c.recentExpired = append(c.recentExpired, p.id)
			if len(c.recentExpired) > recentExpiredSize {
				c.recentExpired = c.recentExpired[1:]
			}
			c.abort(p, pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_EXPIRED,
				fmt.Sprintf("checkpoint expired before completing (timeout %v)", c.s.timeout))
		}
	}
	if c.periodic && !c.paused && !c.nextPeriodic.IsZero() && !now.Before(c.nextPeriodic) {
		// Fixed rate: the next firing is one interval after this one was due.
		for !c.nextPeriodic.After(now) {
			c.nextPeriodic = c.nextPeriodic.Add(c.s.interval)
		}
		c.periodicQueued = true
		c.runQueued()
	}
}

// runQueued executes queued requests while max-concurrent allows (CheckpointRequestDecider).
// Manual requests go first and ignore the minimum pause; a periodic request within the pause is
// dropped and the periodic trigger moved to the end of the pause.
func (c *checkpointCoordinator) runQueued() {
	for len(c.pending) < c.s.maxConcurrent {
		switch {
		case len(c.manualQueue) > 0:
			r := c.manualQueue[0]
			c.manualQueue = c.manualQueue[1:]
			c.triggerNow(r.reply, r.sp, r.aligned)
		case c.periodicQueued && !c.paused:
			c.periodicQueued = false
			if wait := c.lastCompletion.Add(c.s.minPause).Sub(c.now()); !c.lastCompletion.IsZero() && wait > 0 {
				c.record(&pb.CheckpointInfo{Status: pb.CheckpointStatus_CHECKPOINT_STATUS_FAILED,
					TriggerTime: timestamppb.New(c.now()), FailureReason: pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_MINIMUM_TIME_BETWEEN_CHECKPOINTS,
					Failure: fmt.Sprintf("minimum pause %v since the last completion not over", c.s.minPause)})
				c.nextPeriodic = c.now().Add(wait)
				continue
			}
			c.triggerNow(nil, nil, false)
		default:
			return
		}
	}
}

// triggerNow starts one checkpoint (or savepoint): plan, ID, pending entry, barriers to the
// sources. A checkpoint is unaligned when the job's are and it is not requested aligned.
func (c *checkpointCoordinator) triggerNow(reply chan<- checkpointResult, sp *savepointRequest, aligned bool) {
	now := c.now()
	fail := func(reason pb.CheckpointFailureReason, msg string) {
		info := &pb.CheckpointInfo{Status: pb.CheckpointStatus_CHECKPOINT_STATUS_FAILED, TriggerTime: timestamppb.New(now),
			FailureReason: reason, Failure: msg, Manual: reply != nil, Savepoint: sp != nil}
		c.record(info)
		c.onFailure(-1, reason)
		if reply != nil {
			reply <- checkpointResult{info: info, err: fmt.Errorf("%w: %s", errNotTriggered, msg)}
		}
		if sp != nil && sp.stop {
			c.io.stopFailed(sp, msg)
		}
	}
	plan, ok := c.io.plan()
	if !ok {
		fail(pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_NOT_ALL_REQUIRED_TASKS_RUNNING, "not all required tasks are currently running")
		return
	}
	if len(plan.wait) == 0 {
		// Every task finished (the job ends next): nothing is left to checkpoint.
		if reply != nil {
			reply <- checkpointResult{err: fmt.Errorf("%w: every task has finished", errNotTriggered)}
		}
		if sp != nil && sp.stop {
			c.io.stopFailed(sp, "every task has finished")
		}
		return
	}
	id, err := c.io.allocateID()
	if err != nil {
		fail(pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_IO_EXCEPTION, fmt.Sprintf("allocating a checkpoint ID: %v", err))
		return
	}
	b := &pb.CheckpointBarrier{CheckpointId: id, TimestampMs: now.UnixMilli(), Mode: c.s.mode}
	if c.s.unaligned && sp == nil && !aligned {
		b.Unaligned, b.AlignedTimeoutMs = true, c.s.alignedTimeout.Milliseconds()
	}
	if sp != nil {
		// A savepoint is always aligned (as in Flink, also with at-least-once checkpoints).
		b.Mode, b.SavepointDir, b.Stop, b.Drain = pb.CheckpointingMode_CHECKPOINTING_MODE_EXACTLY_ONCE, sp.dir, sp.stop, sp.stop && sp.drain
	}
	p := &pendingCheckpoint{id: id, trigger: now, deadline: now.Add(c.s.timeout), barrier: b, sp: sp,
		waiting: map[string]bool{}, triggered: map[string]bool{}, states: slices.Clone(plan.finished)}
	for _, k := range plan.wait {
		p.waiting[k] = true
	}
	for _, k := range plan.trigger {
		p.triggered[k] = true
	}
	if reply != nil {
		p.replies = append(p.replies, reply)
	}
	p.info = &pb.CheckpointInfo{Id: id, Status: pb.CheckpointStatus_CHECKPOINT_STATUS_IN_PROGRESS, TriggerTime: timestamppb.New(now),
		Total: int32(len(plan.wait)), Manual: reply != nil, Savepoint: sp != nil}
	c.record(p.info)
	c.pending = append(c.pending, p)
	c.io.triggerTasks(plan.trigger, b)
}

// ack handles a task's acknowledgement. It returns false when the checkpoint is not pending
// (late, unknown, aborted): the caller then discards the acknowledged state.
func (c *checkpointCoordinator) ack(task string, id int64, snap *pb.TaskStateSnapshot, m *pb.CheckpointMetrics) bool {
	p := c.find(id)
	if p == nil || !p.waiting[task] {
		return false
	}
	delete(p.waiting, task)
	p.states = append(p.states, snap.GetOperators()...)
	p.info.Acknowledged++
	// The state size includes the channel state, as Flink's (OperatorSubtaskState counts its
	// input channel and result subpartition state): a task's state_size_bytes is its operators'
	// state, in_flight_bytes the channel state it persisted besides.
	p.info.StateSizeBytes += m.GetStateSizeBytes() + m.GetInFlightBytes()
	p.info.AlignmentMs = max(p.info.AlignmentMs, m.GetAlignmentMs())
	p.info.Unaligned = p.info.Unaligned || m.GetUnaligned()
	p.info.InFlightBytes += m.GetInFlightBytes()
	if len(p.waiting) == 0 {
		c.complete(p)
	}
	return true
}

// taskFinished handles a task that finished: pending checkpoints stop waiting for it and take
// the state it finished with, and trigger its consumers by RPC once all their producers
// finished (their inputs will carry no barrier: FLIP-147). A task finishes only after a
// completed checkpoint covered all its output, so it may finish before or after its trigger
// arrives; either way the checkpoint goes on.
func (c *checkpointCoordinator) taskFinished(task string, states []*pb.OperatorSubtaskState) {
	for _, p := range slices.Clone(c.pending) {
		if c.find(p.id) == nil || !p.waiting[task] {
			continue
		}
		delete(p.waiting, task)
		p.states = append(p.states, states...)
		p.info.Acknowledged++
		if len(p.waiting) == 0 {
			c.complete(p)
			continue
		}
		var more []string
		for _, k := range c.io.triggerable() {
			if p.waiting[k] && !p.triggered[k] {
				p.triggered[k] = true
				more = append(more, k)
			}
		}
		if len(more) > 0 {
			c.io.triggerTasks(more, p.barrier)
		}
	}
}

// isLateAck reports whether an unknown checkpoint ID is one that expired recently.
func (c *checkpointCoordinator) isLateAck(id int64) bool { return slices.Contains(c.recentExpired, id) }

// isRetained reports whether a checkpoint is in the store (its files must never be deleted
// because of a duplicate acknowledgement).
func (c *checkpointCoordinator) isRetained(id int64) bool {
	return slices.ContainsFunc(c.retained, func(cp *pb.CompletedCheckpoint) bool { return cp.GetId() == id })
}

// decline handles a task's refusal to take a checkpoint.
func (c *checkpointCoordinator) decline(task string, id int64, reason pb.CheckpointFailureReason, msg string) {
	if p := c.find(id); p != nil {
		c.abort(p, reason, fmt.Sprintf("declined by %s: %s", task, msg))
	}
}

// triggerFailed handles a failed trigger RPC.
func (c *checkpointCoordinator) triggerFailed(id int64, msg string) {
	if p := c.find(id); p != nil {
		c.abort(p, pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_TRIGGER_CHECKPOINT_FAILURE, msg)
	}
}

func (c *checkpointCoordinator) find(id int64) *pendingCheckpoint {
	if i := slices.IndexFunc(c.pending, func(p *pendingCheckpoint) bool { return p.id == id }); i >= 0 {
		return c.pending[i]
	}
	return nil
}

// complete finalizes a fully acknowledged checkpoint: metadata, then the Raft commit (the
// commit point), then subsumption and notifications.
func (c *checkpointCoordinator) complete(p *pendingCheckpoint) {
	cp, err := c.io.finalize(p.id, p.trigger, p.states, p.info.GetStateSizeBytes(), p.sp)
	if err == nil {
		cp.Unaligned, cp.InFlightBytes = p.info.GetUnaligned(), p.info.GetInFlightBytes()
		var subsumed []*pb.CompletedCheckpoint
		subsumed, err = c.io.commit(cp, p.sp.intermediate())
		if err == nil {
			c.completed(p, cp, subsumed)
			return
		}
		if errors.Is(err, ErrNotLeader) || errors.Is(err, ErrShuttingDown) {
			// The outcome is unknown to us: a new leader decides. Keep the files; nothing
			// counts, nothing is notified (this job master stops).
			c.remove(p)
			p.info.Status = pb.CheckpointStatus_CHECKPOINT_STATUS_FAILED
			p.info.FailureReason = pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_COORDINATOR_SUSPEND
			p.info.Failure = fmt.Sprintf("completion not recorded, outcome unknown: %v", err)
			c.reply(p, checkpointResult{info: p.info, err: err})
			return
		}
	}
	c.abort(p, pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_FINALIZE_CHECKPOINT_FAILURE, err.Error())
}

// endedAt is the snapshot up to which the two-phase-commit sinks of a job that ends for good
// commit their pending transactions (operator.JobEnder): the newest completed checkpoint or
// intermediate savepoint. A savepoint is not notified while the job runs (its transactions are
// committed with the next checkpoint, or by a restore from it); when the job ends instead, its
// transactions must be committed, or a restore from it, the way a job is upgraded (take a
// savepoint, cancel, run -s), would find them rolled back.
func (c *checkpointCoordinator) endedAt() int64 { return max(c.latestComplete, c.latestSavepoint) }

func (c *checkpointCoordinator) completed(p *pendingCheckpoint, cp *pb.CompletedCheckpoint, subsumed []*pb.CompletedCheckpoint) {
	now := c.now()
	c.remove(p)
	if p.sp.intermediate() {
		// A savepoint beside the checkpoints: nothing is retained, subsumed or notified.
		c.latestSavepoint = max(c.latestSavepoint, p.id)
		p.info.Status = pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED
		p.info.DurationMs = now.Sub(p.trigger).Milliseconds()
		p.info.Path = p.sp.dir
		c.onSuccess(p.id)
		c.reply(p, checkpointResult{info: p.info})
		c.runQueued()
		c.resumeSoon()
		return
	}
	c.retained = append(c.retained, cp)
	for _, s := range subsumed {
		c.retained = slices.DeleteFunc(c.retained, func(r *pb.CompletedCheckpoint) bool { return r.GetId() == s.GetId() })
		c.io.discardCompleted(s)
	}
	c.latestComplete = p.id
	c.lastCompletion = now
	p.info.Status = pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED
	p.info.DurationMs = now.Sub(p.trigger).Milliseconds()
	p.info.Path = storage.JoinPath(cp.GetBaseDir(), cp.GetPath())
	c.onSuccess(p.id)
	// Older pending checkpoints can no longer matter: subsume them (not counted).
	for len(c.pending) > 0 && c.pending[0].id < p.id {
		c.abort(c.pending[0], pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_SUBSUMED,
			fmt.Sprintf("subsumed by checkpoint %d", p.id))
	}
	c.io.notifyComplete(p.id)
	c.reply(p, checkpointResult{info: p.info})
	c.runQueued()
	c.resumeSoon()
}

// resumeSoon brings the next periodic checkpoint forward if a task asked for one while
// max-concurrent checkpoints were pending.
func (c *checkpointCoordinator) resumeSoon() {
	if c.soon && len(c.pending) < c.s.maxConcurrent {
		c.triggerSoon()
	}
}

// abort disposes a pending checkpoint, counts the failure if its reason counts, tells the
// tasks and deletes its files.
func (c *checkpointCoordinator) abort(p *pendingCheckpoint, reason pb.CheckpointFailureReason, msg string) {
	c.remove(p)
	p.info.Status = pb.CheckpointStatus_CHECKPOINT_STATUS_FAILED
	p.info.FailureReason, p.info.Failure = reason, msg
	p.info.DurationMs = c.now().Sub(p.trigger).Milliseconds()
	c.io.notifyAborted(p.id, c.latestComplete)
	c.io.discard(p.id, p.sp)
	c.reply(p, checkpointResult{info: p.info, err: fmt.Errorf("checkpoint %d failed: %s", p.id, msg)})
	c.onFailure(p.id, reason)
	if p.sp != nil && p.sp.stop {
		c.paused = false
		c.io.stopFailed(p.sp, msg)
	}
	if c.periodic || len(c.manualQueue) > 0 {
		c.runQueued()
		c.resumeSoon()
	}
}

func (c *checkpointCoordinator) remove(p *pendingCheckpoint) {
	c.pending = slices.DeleteFunc(c.pending, func(q *pendingCheckpoint) bool { return q == p })
}

func (c *checkpointCoordinator) reply(p *pendingCheckpoint, r checkpointResult) {
	for _, ch := range p.replies {
		ch <- r
	}
	p.replies = nil
}

// countedReason reports whether a failure counts against the tolerance (Flink's CheckpointFailureManager).
func countedReason(r pb.CheckpointFailureReason) bool {
	switch r {
	case pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_IO_EXCEPTION,
		pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_ASYNC_EXCEPTION,
		pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_DECLINED,
		pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_EXPIRED,
		pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_FINALIZE_CHECKPOINT_FAILURE:
		return true
	}
	return false
}

// onFailure counts a checkpoint failure: at most once per ID, never for IDs at or below the
// last success, and only for counted reasons. Past the tolerance the job fails over.
func (c *checkpointCoordinator) onFailure(id int64, reason pb.CheckpointFailureReason) {
	if !countedReason(reason) || (id != -1 && (id <= c.lastSucceeded || c.countedIDs[id])) {
		return
	}
	if id != -1 {
		c.countedIDs[id] = true
	}
	c.consecutive++
	if c.consecutive > c.s.tolerable {
		c.consecutive = 0
		clear(c.countedIDs)
		c.io.failJob(fmt.Sprintf("Exceeded checkpoint tolerable failure threshold (%s = %d).", config.CheckpointTolerable, c.s.tolerable))
	}
}

func (c *checkpointCoordinator) onSuccess(id int64) {
	if id > c.lastSucceeded {
		c.lastSucceeded = id
		c.consecutive = 0
		clear(c.countedIDs)
	}
}

// record adds an entry to the history; pending ones are updated in place.
func (c *checkpointCoordinator) record(info *pb.CheckpointInfo) {
	c.history = append(c.history, info)
	if len(c.history) > maxHistory {
		for _, old := range c.history[:len(c.history)-maxHistory] {
			switch old.GetStatus() {
			case pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED:
				c.dropped.completed++
			case pb.CheckpointStatus_CHECKPOINT_STATUS_FAILED:
				c.dropped.failed++
			}
		}
		c.history = slices.Clone(c.history[len(c.history)-maxHistory:])
	}
}

// historyView returns the history for readers, newest first, including retained checkpoints
// from the store that this coordinator did not take (an earlier run or leader). A checkpoint
// that ended is never changed again and is shared with the readers, who must not change it;
// one in progress is copied (its acknowledgements still update it). The job master publishes a
// view after every event, so sharing spares it copying up to maxHistory entries each time.
func (c *checkpointCoordinator) historyView() []*pb.CheckpointInfo {
	out := make([]*pb.CheckpointInfo, 0, len(c.history)+len(c.retained))
	seen := make(map[int64]bool, len(c.history))
	for _, h := range slices.Backward(c.history) {
		if !infoEnded(h) {
			h = proto.CloneOf(h)
		}
		out = append(out, h)
		if h.GetId() > 0 {
			seen[h.GetId()] = true
		}
	}
	for _, r := range slices.Backward(c.retained) {
		if seen[r.GetId()] {
			continue
		}
		out = append(out, completedInfo(r))
	}
	slices.SortStableFunc(out, func(a, b *pb.CheckpointInfo) int {
		return b.GetTriggerTime().AsTime().Compare(a.GetTriggerTime().AsTime())
	})
	return out
}

// infoEnded reports whether checkpoint info h describes a checkpoint that completed or failed.
func infoEnded(h *pb.CheckpointInfo) bool {
	s := h.GetStatus()
	return s == pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED || s == pb.CheckpointStatus_CHECKPOINT_STATUS_FAILED
}

// lastCompleted describes the newest retained checkpoint, or nil.
func (c *checkpointCoordinator) lastCompleted() *pb.CheckpointInfo {
	if len(c.retained) == 0 {
		return nil
	}
	r := c.retained[len(c.retained)-1]
	for _, h := range slices.Backward(c.history) {
		if h.GetId() == r.GetId() {
			return h // completed: never changed again (see historyView)
		}
	}
	return completedInfo(r)
}

func completedInfo(r *pb.CompletedCheckpoint) *pb.CheckpointInfo {
	return &pb.CheckpointInfo{Id: r.GetId(), Status: pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED, TriggerTime: r.GetTriggerTime(),
		DurationMs: r.GetCompletionTime().AsTime().Sub(r.GetTriggerTime().AsTime()).Milliseconds(), StateSizeBytes: r.GetStateSizeBytes(), Path: storage.JoinPath(r.GetBaseDir(), r.GetPath()), Savepoint: r.GetSavepoint(),
		Unaligned: r.GetUnaligned(), InFlightBytes: r.GetInFlightBytes()}
}

// checkpointCounts are numbers of completed and failed checkpoints.
type checkpointCounts struct{ completed, failed int }

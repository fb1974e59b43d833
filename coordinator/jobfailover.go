package coordinator

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/failover"
	"github.com/goflink/goflink/internal/execid"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// Failover on the job master (Flink's DefaultScheduler with its restart and failover strategies): a failed task asks the restart strategy; if it
// allows a restart, the failover strategy names the subtasks to restart (the failed task's
// pipelined region, or every subtask for "full" and for global failures), those are cancelled
// while the rest keep running, every pending checkpoint is aborted, and once they are all gone
// and the backoff has passed they are redeployed with new attempt numbers, restoring the
// latest completed checkpoint. Restarted tasks keep the slots of live TaskManagers; those of a
// lost TaskManager get new slots.
//
// The job is RESTARTING from the failure until the redeployment (unlike Flink, where a job
// whose region restarts stays RUNNING: here the status says that part of the job is down).
// Each redeployment is a new run in the replicated record, whose number is the restarted
// tasks' attempt number, so attempt IDs never repeat, also across JobManager failovers.

// pendingRestart is a restart in progress: the subtasks being cancelled and redeployed.
// Failures while it is pending join it (exponential-delay merges them, as in Flink).
type pendingRestart struct {
	tasks map[string]bool // subtaskKey
	// due is when the redeployment may start: the latest failure time plus its backoff.
	due time.Time
	// attempt is the job restart it leads to (JobDetails.restarts once it runs).
	attempt int32
	// verifying is set while the checkpoint to restore is being verified (verifyRestore);
	// restore is the checkpoint chosen, nil until then.
	verifying bool
	restore   *restoreChoice
}

// failure describes one failure for handleFailure.
type failure struct {
	task, tm, cause string
	// exec is the failed execution; nil for a global (job-level) failure, which restarts
	// every task.
	exec          *execution
	unrecoverable bool
}

// failExecution marks an execution failed. A failure of a task that was asked to cancel (for
// a restart or the job's end) is a consequence, not a new failure; any other goes to
// handleFailure.
func (m *jobMaster) failExecution(e *execution, cause string, unrecoverable bool) {
	canceling := e.state == pb.ExecutionState_EXECUTION_STATE_CANCELING
	e.state = pb.ExecutionState_EXECUTION_STATE_FAILED
	if canceling {
		m.log.Debug("task failed while canceling", "task", e.name, "cause", cause)
	} else {
		m.log.Warn("task failed", "task", e.name, "tm_id", e.tm.id, "cause", cause)
		m.handleFailure(failure{task: e.name, tm: e.tm.id, cause: cause, exec: e, unrecoverable: unrecoverable})
	}
	m.checkTerminal()
}

// handleFailure records a failure in the exception history and decides: fail the job
// (unrecoverable error, or the restart strategy says no), or cancel the tasks the failover
// strategy names and schedule their restart.
func (m *jobMaster) handleFailure(f failure) {
	if m.ctx.Err() != nil {
		return // stopped (leadership lost): the next leader takes over
	}
	now := time.Now()
	entry := &pb.ExceptionEntry{Time: timestamppb.New(now), Task: f.task, Taskmanager: f.tm, Cause: f.cause}
	// An entry is added once complete (published views share entries, so they never change
	// after being added) and before the job can end (watchers see it with the end status).
	record := func() { m.recordException(entry) }
	if m.status != pb.JobStatus_JOB_STATUS_RUNNING && m.status != pb.JobStatus_JOB_STATUS_RESTARTING {
		record() // ending already
		return
	}
	if f.unrecoverable {
		entry.Handling = pb.FailureHandling_FAILURE_HANDLING_UNRECOVERABLE
		record()
		m.log.Info("unrecoverable failure; the job fails without restarts", "task", f.task, "cause", f.cause)
		m.failJobNow(fmt.Sprintf("Unrecoverable failure in %s (a restart would fail the same way): %s", f.task, f.cause))
		return
	}
	subtasks, how := m.failover.GlobalFailure(), "global"
	if f.exec != nil {
		subtasks, how = m.failover.TasksToRestart(failover.Subtask{Vertex: f.exec.vertex.GetId(), Index: f.exec.id.GetSubtask()}), m.failover.Name()
	}
	d := m.restart.OnFailure(now)
	if !d.Restart {
		entry.Handling = pb.FailureHandling_FAILURE_HANDLING_SUPPRESSED
		record()
		m.log.Info("recovery is suppressed", "strategy", m.restart.Name(), "cause", f.cause)
		m.failJobNow(fmt.Sprintf("Recovery is suppressed by %s: %s: %s", m.restart.Name(), f.task, f.cause))
		return
	}
	// The restart this failure leads to: a new one, or the pending one it joins (whose
	// backoff becomes the later of the two; fixed-delay and failure-rate still count it).
	p := m.pending
	entry.Handling = pb.FailureHandling_FAILURE_HANDLING_MERGED
	if p == nil {
		p = &pendingRestart{tasks: map[string]bool{}, attempt: m.restarts + 1, due: now}
		entry.Handling = pb.FailureHandling_FAILURE_HANDLING_RESTART
	}
	if due := now.Add(d.Delay); due.After(p.due) {
		p.due = due
	}
	entry.Failover, entry.RestartAttempt, entry.RestartDelayMs = how, p.attempt, p.due.Sub(now).Milliseconds()
	var cancel []*execution
	for _, st := range subtasks {
		k := subtaskKey(st.Vertex, st.Index)
		if e := m.bySubtask[k]; e != nil {
			entry.RestartedTasks = append(entry.RestartedTasks, e.name)
			if !p.tasks[k] {
				p.tasks[k] = true
				cancel = append(cancel, e)
			}
		}
	}
	record() // before RESTARTING is published, so watchers see its cause with it
	// All pending checkpoints are aborted, even for a small region (as Flink does), and not counted.
	m.cp.stop(pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_JOB_FAILOVER, "the job is failing over")
	if m.pending == nil {
		if err := m.setStatus(pb.JobStatus_JOB_STATUS_RESTARTING, ""); err != nil {
			return
		}
		m.pending = p
	}
	for _, e := range cancel {
		m.cancelExecution(e)
	}
	m.log.Info("restarting tasks", "failover", how, "tasks", len(entry.RestartedTasks), "strategy", m.restart.Name(),
		"delay", p.due.Sub(now), "new_attempt", d.NewAttempt, "restart", p.attempt, "cause", f.cause)
}

// failJobNow fails the job: every task is cancelled and the job ends FAILED with cause.
func (m *jobMaster) failJobNow(cause string) {
	m.failureCause = cause
	m.dropPendingRestart()
	if err := m.setStatus(pb.JobStatus_JOB_STATUS_FAILING, cause); err != nil {
		return
	}
	m.cp.stop(pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_COORDINATOR_SHUTDOWN, "the job is failing")
	m.cancelAll()
}

// dropPendingRestart forgets a pending restart (the job is ending instead).
func (m *jobMaster) dropPendingRestart() {
	m.pending = nil
	stopTimer(&m.restartTimer)
}

// cancelAll asks every unfinished task to cancel.
func (m *jobMaster) cancelAll() {
	for _, e := range m.execs {
		m.cancelExecution(e)
	}
	m.stopSlotWait()
	m.checkTerminal()
}

// cancelExecution asks an unfinished execution to cancel; one never submitted is canceled at
// once.
func (m *jobMaster) cancelExecution(e *execution) {
	if e.terminal() || e.state == pb.ExecutionState_EXECUTION_STATE_CANCELING {
		return
	}
	if !e.submitted {
		e.state = pb.ExecutionState_EXECUTION_STATE_CANCELED
		return
	}
	e.state, e.cancelAt = pb.ExecutionState_EXECUTION_STATE_CANCELING, time.Now()
	m.sendCancel(e)
	if m.cancelTimer == nil {
		m.cancelTimer = time.NewTimer(cancelTimeout)
	}
}

// maybeRestart redeploys the pending restart's tasks once all of them have settled, the
// backoff has passed and the checkpoint to restore is chosen; until then it keeps the restart
// timer armed, or starts verifying the retained checkpoints (evRestoreVerified goes on).
func (m *jobMaster) maybeRestart() {
	p := m.pending
	if p == nil || p.verifying || m.ended || m.ctx.Err() != nil {
		return
	}
	for k := range p.tasks {
		if e := m.bySubtask[k]; e != nil && !e.terminal() {
			return
		}
	}
	if wait := time.Until(p.due); wait > 0 {
		if m.restartTimer == nil { // one that fires early re-arms here
			m.restartTimer = time.NewTimer(wait)
		}
		return
	}
	if p.restore == nil {
		m.verifyRestore(p)
		if p.restore == nil {
			return // verifying
		}
	}
	m.dropPendingRestart()
	m.redeploy(p.tasks, p.restore)
	if m.pending != nil { // a task failed during the redeployment itself
		m.maybeRestart()
	}
}

// redeploy starts a new run of the given subtasks: the checkpoint to restore, status RUNNING
// (a new attempt number), new executions that wait for slots, and their deployment.
func (m *jobMaster) redeploy(tasks map[string]bool, restore *restoreChoice) {
	for k := range tasks {
		// A finished task keeps its partitions for consumers that will not read them now.
		if e := m.bySubtask[k]; e != nil && e.submitted && e.state == pb.ExecutionState_EXECUTION_STATE_FINISHED {
			m.sendCancel(e)
		}
	}
	m.useRestore(restore)
	// A new run: a stop-with-savepoint of the previous one (completed, then a failure before
	// every task ended) is over; the job runs on from its savepoint.
	m.stopping = false
	if err := m.setStatus(pb.JobStatus_JOB_STATUS_RUNNING, ""); err != nil {
		return
	}
	execs := make([]*execution, 0, len(m.execs))
	fresh, now := 0, time.Now()
	for _, v := range m.graph.GetVertices() {
		for i := range v.GetParallelism() {
			k := subtaskKey(v.GetId(), i)
			old := m.bySubtask[k]
			if old != nil && !tasks[k] {
				execs = append(execs, old)
				continue
			}
			if old != nil {
				delete(m.byKey, old.key)
			}
			id := &pb.ExecutionAttemptID{JobId: m.id, VertexId: v.GetId(), Subtask: i, Attempt: m.attempt}
			e := &execution{id: id, key: execid.Key(id), vertex: v, tm: unassigned, slot: -1, scheduledAt: now,
				name: taskName(v, i), state: pb.ExecutionState_EXECUTION_STATE_SCHEDULED}
			m.byKey[e.key], m.bySubtask[k] = e, e
			execs = append(execs, e)
			fresh++
		}
	}
	m.execs = execs
	m.dropRemovedSubtasks()
	m.log.Info("redeploying tasks", "tasks", fresh, "of", len(execs), "attempt", m.attempt, "restored_checkpoint_id", m.restoredID)
	m.tryAssignSlots()
}

// dropRemovedSubtasks forgets the executions of subtasks the graph no longer has (a rescale
// to a lower parallelism) and frees the slots beyond the job's new slot count.
func (m *jobMaster) dropRemovedSubtasks() {
	for k, e := range m.bySubtask {
		if m.graph.GetVertices()[e.id.GetVertexId()].GetParallelism() <= e.id.GetSubtask() {
			delete(m.bySubtask, k)
			delete(m.byKey, e.key)
		}
	}
	if n := m.slotCount(); len(m.slots) > n {
		m.rm.releaseSlots(m.id, m.slots[n:])
		m.slots = slices.Clone(m.slots[:n])
	}
}

// unassigned is the TaskManager of an execution that waits for a slot.
var unassigned = &taskManager{id: "", addr: "no slot yet"}

// slotCount is the number of slots the job holds: subtask i of every vertex shares slot i.
func (m *jobMaster) slotCount() int { return int(maxParallelism(m.graph)) }

// maxParallelism is the highest parallelism of g's vertices: the job's parallelism.
func maxParallelism(g *pb.JobGraph) int32 {
	var n int32
	for _, v := range g.GetVertices() {
		n = max(n, v.GetParallelism())
	}
	return n
}

// waiting returns the executions that wait for a slot, grouped by the redeployment that
// created them (their attempt number), oldest first. A group is deployed whole or not at all:
// a job never holds half the slots it needs to start, and the tasks of a restarted region
// exchange data. Groups are independent, so a region restarted later is not held back by one
// that still waits for a slot.
func (m *jobMaster) waiting() [][]*execution {
	byAttempt := map[int32][]*execution{}
	for _, e := range m.execs {
		if e.state == pb.ExecutionState_EXECUTION_STATE_SCHEDULED {
			byAttempt[e.id.GetAttempt()] = append(byAttempt[e.id.GetAttempt()], e)
		}
	}
	groups := make([][]*execution, 0, len(byAttempt))
	for _, a := range slices.Sorted(maps.Keys(byAttempt)) {
		groups = append(groups, byAttempt[a])
	}
	return groups
}

// missingSlots returns the slot indices that the given executions need and the job no longer
// holds (never had, or their TaskManager is gone).
func (m *jobMaster) missingSlots(execs []*execution) []int {
	for len(m.slots) < m.slotCount() {
		m.slots = append(m.slots, slotRef{slot: -1})
	}
	var missing []int
	for _, e := range execs {
		i := int(e.id.GetSubtask())
		if slices.Contains(missing, i) {
			continue
		}
		if _, ok := m.rm.get(m.slots[i].tm); !ok {
			missing = append(missing, i)
		}
	}
	return missing
}

// tryAssignSlots gives waiting executions their slots, a group (waiting) at a time, and
// deploys every group that has them all; the others wait for slots to become free, each execution up to
// slot.request.timeout from its redeployment.
func (m *jobMaster) tryAssignSlots() {
	m.slotWatch = nil
	watch := m.rm.watch() // before allocating: a slot freed in between wakes us
	var ready []*execution
	blocked := false
	for _, group := range m.waiting() {
		if missing := m.missingSlots(group); len(missing) > 0 {
			refs := m.rm.allocate(m.id, len(missing))
			if refs == nil {
				blocked = true
				continue
			}
			for j, i := range missing {
				m.slots[i] = refs[j]
			}
		}
		for _, e := range group {
			ref := m.slots[e.id.GetSubtask()]
			tm, ok := m.rm.get(ref.tm)
			if !ok { // lost since allocate; its deployment fails in submit
				tm = &taskManager{regID: ref.tm, id: "unknown", addr: "unknown"}
			}
			e.tm, e.slot, e.state = tm, ref.slot, pb.ExecutionState_EXECUTION_STATE_DEPLOYING
		}
		ready = append(ready, group...)
	}
	m.stopSlotWait()
	if blocked {
		m.slotWatch = watch
		m.armSlotDeadline()
	}
	if len(ready) > 0 {
		m.submit(ready)
	}
}

// armSlotDeadline sets the slot timer to the earliest moment a waiting execution times out.
func (m *jobMaster) armSlotDeadline() {
	var first time.Time
	for _, e := range m.execs {
		if e.state == pb.ExecutionState_EXECUTION_STATE_SCHEDULED && (first.IsZero() || e.scheduledAt.Before(first)) {
			first = e.scheduledAt
		}
	}
	if !first.IsZero() {
		m.slotDeadline = time.NewTimer(time.Until(first.Add(m.cfg.Duration(config.SlotRequestTimeout))))
	}
}

// stopSlotWait ends waiting for slots.
func (m *jobMaster) stopSlotWait() {
	m.slotWatch = nil
	stopTimer(&m.slotDeadline)
}

// slotsTimedOut fails the job when an execution waited slot.request.timeout for its slot.
func (m *jobMaster) slotsTimedOut() {
	timeout := m.cfg.Duration(config.SlotRequestTimeout)
	waiting := slices.Concat(m.waiting()...)
	if !slices.ContainsFunc(waiting, func(e *execution) bool { return !time.Now().Before(e.scheduledAt.Add(timeout)) }) {
		m.armSlotDeadline()
		return
	}
	missing := m.missingSlots(waiting)
	free, total := m.rm.freeCount()
	need := fmt.Sprint(len(missing))
	if held := m.slotCount() - len(missing); held > 0 {
		need = fmt.Sprintf("%d more (it holds %d)", len(missing), held)
	}
	cause := fmt.Sprintf("could not acquire the required slots: the job needs %s, the cluster has %d free of %d (waited %s = %v)",
		need, free, total, config.SlotRequestTimeout, timeout)
	m.recordException(&pb.ExceptionEntry{Time: timestamppb.Now(), Task: "slot allocation", Cause: cause})
	m.failJobNow(cause)
}

// submit deploys executions that have their slots. Producer locations come from the current
// executions, restarted or not (a restarted task's producers are always restarted with it:
// they share its pipelined region).
func (m *jobMaster) submit(batch []*execution) {
	grid := map[int32][]*execution{}
	for _, e := range m.execs {
		grid[e.vertex.GetId()] = append(grid[e.vertex.GetId()], e)
	}
	for _, e := range batch {
		// (One that failed here may cancel the others of its region: those are skipped.)
		if e.tm.client == nil && e.state == pb.ExecutionState_EXECUTION_STATE_DEPLOYING {
			m.failExecution(e, fmt.Sprintf("could not deploy %s: its TaskManager was lost before deployment", e.name), false)
		}
	}
	m.publish() // before any SubmitTask, so heartbeat reconciliation expects these tasks
	n := 0
	for _, e := range batch {
		if e.state != pb.ExecutionState_EXECUTION_STATE_DEPLOYING {
			continue // failed above, or cancelled by that failure
		}
		e.submitted = true
		n++
		req := &pb.SubmitTaskRequest{RegistrationId: e.tm.regID, LeaderTerm: e.tm.term, Execution: e.id, JobGraph: m.graph, Slot: int32(e.slot),
			Restore: m.taskRestore(e.vertex)}
		if m.cpSettings.enabled() {
			req.CheckpointingMode = m.cpSettings.mode
		}
		for i, edge := range m.graph.GetEdges() {
			if edge.GetTarget() != e.vertex.GetId() {
				continue
			}
			in := &pb.InputGateDeployment{Edge: int32(i)}
			for _, p := range grid[edge.GetSource()] {
				if connected(edge, p, e) {
					in.Producers = append(in.Producers, &pb.ProducerLocation{Execution: p.id, TaskmanagerAddress: p.tm.addr})
				}
			}
			req.Inputs = append(req.Inputs, in)
		}
		client := e.tm.client
		m.goRPC(deployTimeout, func(ctx context.Context) {
			if _, err := client.SubmitTask(ctx, req); err != nil && m.ctx.Err() == nil {
				m.send(evDeployFailed{key: e.key, err: err})
			}
		})
	}
	m.log.Info("tasks deployed", "tasks", n, "restored_checkpoint_id", m.restoredID)
}

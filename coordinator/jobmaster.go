package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/failover"
	"github.com/goflink/goflink/internal/execid"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// cancelTimeout bounds how long a job waits for its tasks to confirm cancellation before it
// treats them as gone.
const cancelTimeout = 10 * time.Second

// deployTimeout bounds one SubmitTask RPC.
const deployTimeout = 10 * time.Second

// execution is one attempt of one subtask, as the job master sees it.
type execution struct {
	id      *pb.ExecutionAttemptID
	key     string
	vertex  *pb.JobVertex
	name    string
	state   pb.ExecutionState
	tm      *taskManager
	slot    int
	in, out int64
	// submitted is set once a SubmitTask RPC was sent; an execution never submitted is
	// settled at once when the job is cancelled.
	submitted bool
}

func (e *execution) terminal() bool {
	switch e.state {
	case pb.ExecutionState_EXECUTION_STATE_FINISHED, pb.ExecutionState_EXECUTION_STATE_CANCELED, pb.ExecutionState_EXECUTION_STATE_FAILED:
		return true
	}
	return false
}

// Events of the job master's loop.
type (
	evTaskState struct {
		req *pb.UpdateTaskExecutionStateRequest
	}
	evTMLost struct {
		tm     *taskManager
		reason string
	}
	evCancel struct {
		reply chan error
	}
	evDeployFailed struct {
		key string
		err error
	}
)

// jobHost is what a job master needs from the JobManager.
type jobHost interface {
	// setJobStatus commits a status change through Raft and returns the job's record after it.
	setJobStatus(ctx context.Context, jobID string, s pb.JobStatus, cause string) (*pb.JobRecord, error)
	notify()
}

// jobMaster runs one job on the leader: it acquires slots, deploys the tasks, follows their
// states and takes the job to FINISHED, FAILED or CANCELED. All its state is owned by its loop
// goroutine; other goroutines talk to it through inbox and read details().
type jobMaster struct {
	id    string
	graph *pb.JobGraph
	cfg   *config.Config
	// attempt numbers this run's executions: the number of earlier runs, so a job run again
	// after a JobManager failover never reuses an execution attempt ID.
	attempt int32
	host    jobHost
	restart failover.RestartStrategy
	rm      *resourceManager
	log     *slog.Logger

	inbox  chan any
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	wg     sync.WaitGroup // deploy and cancel RPCs

	published atomic.Pointer[jobView]

	// owned by the loop
	status       pb.JobStatus
	execs        []*execution
	byKey        map[string]*execution
	exceptions   []*pb.ExceptionEntry
	failureCause string
	startTime    *timestamppb.Timestamp
	endTime      *timestamppb.Timestamp
	restarts     int32
	ended        bool
	cancelTimer  *time.Timer
}

func newJobMaster(parent context.Context, rec *pb.JobRecord, host jobHost, rm *resourceManager, log *slog.Logger) (*jobMaster, error) {
	cfg := config.New()
	if err := cfg.SetAll(rec.GetGraph().GetConfig()); err != nil {
		return nil, fmt.Errorf("job %s config: %w", rec.GetId(), err)
	}
	ctx, cancel := context.WithCancel(parent)
	m := &jobMaster{
		id: rec.GetId(), graph: rec.GetGraph(), cfg: cfg, host: host, rm: rm, restart: failover.NoRestart{},
		log: log.With("job_id", rec.GetId()), inbox: make(chan any, 256), ctx: ctx, cancel: cancel,
		done: make(chan struct{}), status: rec.GetStatus(), byKey: map[string]*execution{},
		startTime: rec.GetStartTime(), failureCause: rec.GetFailureCause(),
	}
	m.publish()
	return m, nil
}

// send delivers an event to the loop unless the job master has stopped.
func (m *jobMaster) send(ev any) {
	select {
	case m.inbox <- ev:
	case <-m.done:
	case <-m.ctx.Done():
	}
}

// requestCancel asks the loop to cancel the job.
func (m *jobMaster) requestCancel(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case m.inbox <- evCancel{reply: reply}:
	case <-m.done:
		return fmt.Errorf("cancel job %s: %w", m.id, ErrJobTerminal)
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-m.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stop ends the loop without changing the job's status (leadership loss or shutdown) and
// waits for it.
func (m *jobMaster) stop() {
	m.cancel()
	<-m.done
}

// jobView is what a job master publishes for readers: its details, and for every task the
// registration and execution key to look up live counters.
type jobView struct {
	details *pb.JobDetails
	regs    []string
	keys    []string
}

func (m *jobMaster) view() *jobView { return m.published.Load() }

func (m *jobMaster) run() {
	defer close(m.done)
	defer m.wg.Wait()
	defer m.cancel()
	switch m.status {
	case pb.JobStatus_JOB_STATUS_CANCELLING: // the leader before us was cancelling it
		m.finish(pb.JobStatus_JOB_STATUS_CANCELED, "")
		return
	case pb.JobStatus_JOB_STATUS_FAILING: // the leader before us was failing it
		m.finish(pb.JobStatus_JOB_STATUS_FAILED, m.failureCause)
		return
	case pb.JobStatus_JOB_STATUS_RUNNING:
		// The job ran under an earlier leader: record a restart, so that this run is counted
		// and its attempts get new numbers.
		if err := m.setStatus(pb.JobStatus_JOB_STATUS_RESTARTING, ""); err != nil {
			return
		}
	}
	if err := m.setStatus(pb.JobStatus_JOB_STATUS_RUNNING, ""); err != nil {
		return
	}
	if !m.acquireAndDeploy() {
		return
	}
	for !m.ended {
		var cancelC <-chan time.Time
		if m.cancelTimer != nil {
			cancelC = m.cancelTimer.C
		}
		select {
		case ev := <-m.inbox:
			m.handle(ev)
		case <-cancelC:
			m.cancelTimer = nil
			m.giveUpOnCancel()
		case <-m.ctx.Done():
			return
		}
		m.publish()
	}
}

// acquireAndDeploy waits for slots (up to slot.request.timeout) and deploys every task.
func (m *jobMaster) acquireAndDeploy() bool {
	need := 0
	for _, v := range m.graph.GetVertices() {
		need = max(need, int(v.GetParallelism()))
	}
	timeout := m.cfg.Duration(config.SlotRequestTimeout)
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		changed := m.rm.watch()
		if slots := m.rm.allocate(m.id, need); slots != nil {
			m.deploy(slots)
			return true
		}
		select {
		case <-changed:
		case ev := <-m.inbox:
			if c, ok := ev.(evCancel); ok {
				m.finish(pb.JobStatus_JOB_STATUS_CANCELED, "")
				c.reply <- nil
				return false
			}
		case <-deadline.C:
			free, total := m.rm.freeCount()
			m.finish(pb.JobStatus_JOB_STATUS_FAILED, fmt.Sprintf(
				"could not acquire the required slots: the job needs %d, the cluster has %d free of %d (waited %s = %v)",
				need, free, total, config.SlotRequestTimeout, timeout))
			return false
		case <-m.ctx.Done():
			return false
		}
	}
}

// deploy creates one execution per subtask (slot sharing: subtask i of every vertex goes to
// slot i) and submits them all.
func (m *jobMaster) deploy(slots []slotRef) {
	m.execs = m.execs[:0]
	clear(m.byKey)
	grid := make([][]*execution, len(m.graph.GetVertices()))
	for _, v := range m.graph.GetVertices() {
		for i := range int(v.GetParallelism()) {
			tm, ok := m.rm.get(slots[i].tm)
			id := &pb.ExecutionAttemptID{JobId: m.id, VertexId: v.GetId(), Subtask: int32(i), Attempt: m.attempt}
			e := &execution{id: id, key: execid.Key(id), vertex: v, slot: slots[i].slot, tm: tm,
				name:  fmt.Sprintf("%s (%d/%d)", v.GetName(), i+1, v.GetParallelism()),
				state: pb.ExecutionState_EXECUTION_STATE_DEPLOYING}
			if !ok { // lost between allocate and now; failed below
				e.tm = &taskManager{regID: slots[i].tm, id: "unknown", addr: "unknown"}
			}
			grid[v.GetId()] = append(grid[v.GetId()], e)
			m.execs = append(m.execs, e)
			m.byKey[e.key] = e
		}
	}
	for _, e := range m.execs {
		if e.tm.client == nil {
			m.failExecution(e, fmt.Sprintf("could not deploy %s: its TaskManager was lost before deployment", e.name))
			return
		}
	}
	m.publish() // before any SubmitTask, so heartbeat reconciliation expects these tasks
	for _, e := range m.execs {
		e.submitted = true
		req := &pb.SubmitTaskRequest{RegistrationId: e.tm.regID, Execution: e.id, JobGraph: m.graph, Slot: int32(e.slot)}
		for i, edge := range m.graph.GetEdges() {
			if edge.GetTarget() != e.vertex.GetId() {
				continue
			}
			in := &pb.InputGateDeployment{Edge: int32(i)}
			for _, p := range grid[edge.GetSource()] {
				in.Producers = append(in.Producers, &pb.ProducerLocation{Execution: p.id, TaskmanagerAddress: p.tm.addr})
			}
			req.Inputs = append(req.Inputs, in)
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			ctx, cancel := context.WithTimeout(m.ctx, deployTimeout)
			defer cancel()
			if _, err := e.tm.client.SubmitTask(ctx, req); err != nil && m.ctx.Err() == nil {
				m.send(evDeployFailed{key: e.key, err: err})
			}
		}()
	}
	m.log.Info("job deployed", "tasks", len(m.execs), "slots", len(slots))
}

func (m *jobMaster) handle(ev any) {
	switch ev := ev.(type) {
	case evTaskState:
		m.onTaskState(ev.req)
	case evDeployFailed:
		if e := m.byKey[ev.key]; e != nil && !e.terminal() {
			m.failExecution(e, fmt.Sprintf("could not deploy %s to %s: %v", e.name, e.tm.describe(), ev.err))
		}
	case evTMLost:
		for _, e := range m.execs {
			if e.tm.regID == ev.tm.regID && !e.terminal() {
				m.failExecution(e, fmt.Sprintf("%s is lost: %s", ev.tm.describe(), ev.reason))
			}
		}
	case evCancel:
		if m.status == pb.JobStatus_JOB_STATUS_CANCELLING || m.status == pb.JobStatus_JOB_STATUS_FAILING {
			ev.reply <- nil
			return
		}
		if err := m.setStatus(pb.JobStatus_JOB_STATUS_CANCELLING, ""); err != nil {
			ev.reply <- err
			return
		}
		ev.reply <- nil
		m.cancelAll()
	}
}

func (m *jobMaster) onTaskState(r *pb.UpdateTaskExecutionStateRequest) {
	e := m.byKey[execid.Key(r.GetExecution())]
	if e == nil || e.tm.regID != r.GetRegistrationId() || e.terminal() {
		return // an older attempt, another registration, or already settled
	}
	e.in, e.out = r.GetRecordsIn(), r.GetRecordsOut()
	switch s := r.GetState(); s {
	case pb.ExecutionState_EXECUTION_STATE_FAILED:
		cause := r.GetFailure()
		if p := m.byKey[execid.Key(r.GetFailedProducer())]; r.GetFailedProducer() != nil && p != nil {
			cause = fmt.Sprintf("%s lost its input from %s on %s: %s", e.name, p.name, p.tm.describe(), cause)
		}
		m.failExecution(e, cause)
	case pb.ExecutionState_EXECUTION_STATE_CANCELED:
		e.state = s
		if m.status == pb.JobStatus_JOB_STATUS_RUNNING {
			m.failJob(fmt.Sprintf("%s on %s was canceled unexpectedly", e.name, e.tm.describe()))
		}
		m.checkTerminal()
	case pb.ExecutionState_EXECUTION_STATE_FINISHED:
		e.state = s
		m.checkTerminal()
	default:
		if e.state != pb.ExecutionState_EXECUTION_STATE_CANCELING { // never back out of CANCELING
			e.state = s
		}
	}
}

// failExecution records a task failure in the exception history and fails the job (no restart
// strategy yet: every task failure is a job failure).
func (m *jobMaster) failExecution(e *execution, cause string) {
	e.state = pb.ExecutionState_EXECUTION_STATE_FAILED
	m.exceptions = append(m.exceptions, &pb.ExceptionEntry{Time: timestamppb.Now(), Task: e.name, Taskmanager: e.tm.id, Cause: cause})
	m.log.Warn("task failed", "task", e.name, "tm_id", e.tm.id, "cause", cause)
	if m.status == pb.JobStatus_JOB_STATUS_RUNNING {
		m.failJob(cause)
	}
	m.checkTerminal()
}

// failJob asks the restart strategy; when it refuses, the job fails with cause as its root
// cause.
func (m *jobMaster) failJob(cause string) {
	m.failureCause = cause
	if restart, _ := m.restart.OnFailure(time.Now()); !restart {
		m.log.Info("recovery is suppressed", "strategy", m.restart.Name(), "cause", cause)
	}
	if err := m.setStatus(pb.JobStatus_JOB_STATUS_FAILING, ""); err != nil {
		return
	}
	m.cancelAll()
}

// cancelAll asks every unfinished task to cancel and arms the cancel timeout.
func (m *jobMaster) cancelAll() {
	for _, e := range m.execs {
		if e.terminal() {
			continue
		}
		if !e.submitted {
			e.state = pb.ExecutionState_EXECUTION_STATE_CANCELED
			continue
		}
		e.state = pb.ExecutionState_EXECUTION_STATE_CANCELING
		m.sendCancel(e)
	}
	if m.cancelTimer == nil {
		m.cancelTimer = time.NewTimer(cancelTimeout)
	}
	m.checkTerminal()
}

// sendCancel asks an execution's TaskManager to cancel it and release its partitions. It is
// best effort: a TaskManager that cannot be reached is lost soon, and heartbeat reconciliation
// cancels any task that survives.
func (m *jobMaster) sendCancel(e *execution) {
	req := &pb.CancelTaskRequest{RegistrationId: e.tm.regID, Execution: e.id}
	client := e.tm.client
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		ctx, cancel := context.WithTimeout(m.ctx, deployTimeout)
		defer cancel()
		_, _ = client.CancelTask(ctx, req)
	}()
}

// giveUpOnCancel treats tasks that never confirmed their cancellation as canceled.
func (m *jobMaster) giveUpOnCancel() {
	for _, e := range m.execs {
		if !e.terminal() {
			m.log.Warn("task did not confirm cancellation in time", "task", e.name, "tm_id", e.tm.id, "timeout", cancelTimeout)
			e.state = pb.ExecutionState_EXECUTION_STATE_CANCELED
		}
	}
	m.checkTerminal()
}

// checkTerminal ends the job once every task has settled.
func (m *jobMaster) checkTerminal() {
	for _, e := range m.execs {
		if !e.terminal() {
			return
		}
	}
	switch m.status {
	case pb.JobStatus_JOB_STATUS_RUNNING:
		m.finish(pb.JobStatus_JOB_STATUS_FINISHED, "")
	case pb.JobStatus_JOB_STATUS_FAILING:
		m.finish(pb.JobStatus_JOB_STATUS_FAILED, m.failureCause)
	case pb.JobStatus_JOB_STATUS_CANCELLING:
		m.finish(pb.JobStatus_JOB_STATUS_CANCELED, "")
	}
}

func (m *jobMaster) finish(s pb.JobStatus, cause string) {
	if m.cancelTimer != nil {
		m.cancelTimer.Stop()
		m.cancelTimer = nil
	}
	m.failureCause = cause
	if err := m.setStatus(s, cause); err != nil {
		return
	}
	if s != pb.JobStatus_JOB_STATUS_FINISHED {
		// Finished producers keep their partitions until consumers read them; these
		// consumers never will.
		for _, e := range m.execs {
			if e.submitted && e.state == pb.ExecutionState_EXECUTION_STATE_FINISHED {
				m.sendCancel(e)
			}
		}
	}
	m.rm.release(m.id)
	m.ended = true
	m.log.Info("job ended", "status", s, "cause", cause)
}

// setStatus commits a status change through Raft. If that fails (leadership lost, shutdown)
// the job master stops; the next leader takes the job over.
func (m *jobMaster) setStatus(s pb.JobStatus, cause string) error {
	rec, err := m.commitStatus(s, cause)
	if err != nil {
		m.log.Warn("cannot record job status; stopping job master", "status", s, "err", err)
		m.cancel()
		return err
	}
	m.status = s
	m.startTime, m.endTime = rec.GetStartTime(), rec.GetEndTime()
	if s == pb.JobStatus_JOB_STATUS_RUNNING {
		m.attempt = rec.GetRuns() - 1
		m.restarts = m.attempt
	}
	m.publish()
	return nil
}

// commitStatus commits a status change, retrying transient Raft errors (a full apply queue,
// a slow disk) for as long as this leadership lasts. Leadership loss, shutdown and domain
// rejections are returned at once.
func (m *jobMaster) commitStatus(s pb.JobStatus, cause string) (*pb.JobRecord, error) {
	backoff := 50 * time.Millisecond
	for {
		rec, err := m.host.setJobStatus(m.ctx, m.id, s, cause)
		if err == nil || errors.Is(err, ErrNotLeader) || errors.Is(err, ErrShuttingDown) ||
			errors.Is(err, ErrJobTerminal) || errors.Is(err, ErrJobNotFound) {
			return rec, err
		}
		m.log.Warn("recording job status failed; retrying", "status", s, "err", err)
		select {
		case <-time.After(backoff):
		case <-m.ctx.Done():
			return nil, m.ctx.Err()
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

// publish stores a fresh view for readers and wakes watchers.
func (m *jobMaster) publish() {
	d := &pb.JobDetails{
		Id: m.id, Name: m.graph.GetName(), Status: m.status, StartTime: m.startTime, EndTime: m.endTime,
		Restarts: m.restarts, Exceptions: append([]*pb.ExceptionEntry(nil), m.exceptions...), FailureCause: m.failureCause,
	}
	for _, v := range m.graph.GetVertices() {
		d.Parallelism = max(d.Parallelism, v.GetParallelism())
	}
	v := &jobView{details: d}
	for _, e := range m.execs {
		d.Tasks = append(d.Tasks, &pb.TaskDetails{
			Operator: e.vertex.GetName(), Subtask: e.id.GetSubtask(), Attempt: e.id.GetAttempt(),
			Status: e.state, Taskmanager: e.tm.id, RecordsIn: e.in, RecordsOut: e.out,
		})
		v.regs = append(v.regs, e.tm.regID)
		v.keys = append(v.keys, e.key)
	}
	m.published.Store(v)
	m.host.notify()
}

package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/failover"
	"github.com/goflink/goflink/internal/execid"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/storage"
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
	// cancelAt is when the execution was asked to cancel.
	cancelAt time.Time
	// scheduledAt is when it was created to wait for a slot.
	scheduledAt time.Time
	// endOfData is set once it reported that its input ended (it waits for a final
	// checkpoint).
	endOfData bool
}

func (e *execution) terminal() bool {
	switch e.state {
	case pb.ExecutionState_EXECUTION_STATE_FINISHED, pb.ExecutionState_EXECUTION_STATE_CANCELED, pb.ExecutionState_EXECUTION_STATE_FAILED:
		return true
	}
	return false
}

// Events of the job master's loop: every type sent to its inbox is declared here and has a
// case in handle (TestJobMasterHandlesEveryEvent).
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
	evAck struct {
		req *pb.AcknowledgeCheckpointRequest
	}
	evDecline struct {
		req *pb.DeclineCheckpointRequest
	}
	evTriggerFailed struct {
		id  int64
		key string // the execution triggered
		msg string
	}
	evTriggerCheckpoint struct {
		reply chan checkpointResult
		// savepoint is set for a savepoint (flinkctl savepoint, stop).
		savepoint *pb.TriggerSavepointRequest
		// aligned asks for an aligned checkpoint (a rescale's), also of an unaligned job.
		aligned bool
	}
	evRescale struct {
		parallelism int32
		reply       chan error
	}
	// evRestoreVerified is the outcome of verifying the checkpoints a restart may restore
	// (verifyRestore), for that restart.
	evRestoreVerified struct {
		restart *pendingRestart
		choice  *restoreChoice
	}
)

// jobHost is what a job master needs from the JobManager.
type jobHost interface {
	// setJobStatus commits a status change through Raft and returns the job's record after it.
	setJobStatus(ctx context.Context, jobID string, s pb.JobStatus, cause string) (*pb.JobRecord, error)
	// allocateCheckpointID and completeCheckpoint go through Raft (see dispatcher).
	allocateCheckpointIDs(jobID string, count int) (int64, error)
	completeCheckpoint(jobID string, cp *pb.CompletedCheckpoint, numRetained int, savepointOnly bool) ([]*pb.CompletedCheckpoint, error)
	// rescaleJob records the job's graph at a new parallelism through Raft.
	rescaleJob(jobID string, g *pb.JobGraph) error
	// jobRecord returns the replicated record of a job.
	jobRecord(jobID string) (*pb.JobRecord, bool)
	notify()
}

// jobMaster runs one job on the leader: it acquires slots, deploys the tasks, follows their
// states and takes the job to FINISHED, FAILED or CANCELED. All its state is owned by its loop
// goroutine; other goroutines talk to it through inbox and read details().
type jobMaster struct {
	id      string
	graph   *pb.JobGraph
	jobPlan *pb.JobPlan // of graph, for the published details (shared with their readers, read only)
	cfg     *config.Config
	// attempt numbers this run's executions: the number of earlier runs, so a job run again
	// after a JobManager failover never reuses an execution attempt ID.
	attempt  int32
	host     jobHost
	restart  failover.RestartStrategy
	failover failover.FailoverStrategy
	rm       *resourceManager
	log      *slog.Logger
	// leader is this leadership; prevLeader the one that last changed the job's status (from
	// the job's record), which a job taken over names in its exception history.
	leader, prevLeader leaderInfo

	inbox  chan any
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	wg     sync.WaitGroup // deploy and cancel RPCs

	published atomic.Pointer[jobView]

	// owned by the loop
	status pb.JobStatus
	// execs holds the current execution of every subtask, in vertex order then subtask order;
	// a restart replaces some of them. byKey finds them by execution attempt ID, bySubtask by
	// subtaskKey.
	execs     []*execution
	byKey     map[string]*execution
	bySubtask map[string]*execution
	// slots[i] is the slot of subtask i of every vertex (slot sharing); a restart keeps the
	// slots of live TaskManagers and replaces those of lost ones.
	slots []slotRef
	// pending is the restart in progress (also the first deployment): nil while none.
	pending *pendingRestart
	// slotWatch is set while new executions wait for slots; slotDeadline bounds the wait.
	slotWatch    <-chan struct{}
	slotDeadline *time.Timer
	exceptions   []*pb.ExceptionEntry
	// historySize bounds exceptions (web.exception-history-size); 0: unbounded.
	historySize  int
	failureCause string
	startTime    *timestamppb.Timestamp
	endTime      *timestamppb.Timestamp
	restarts     int32
	ended        bool
	cancelTimer  *time.Timer

	cpSettings   checkpointSettings
	cp           *checkpointCoordinator
	jobDir       string // checkpoint storage of this job
	restartTimer *time.Timer
	restoredID   int64 // checkpoint the current run restored from
	restoredAt   time.Time
	statusSince  time.Time // when status last changed
	restore      *pb.CheckpointMetadata
	// lastStates holds each subtask's states ("vertex/subtask") in the newest restored or
	// completed checkpoint.
	lastStates map[string][]*pb.OperatorSubtaskState
	// nextID..endID are checkpoint IDs reserved in Raft and not used yet.
	nextID, endID int64
	// stopping: a stop-with-savepoint is under way; drainFailed is set when one that drained
	// the input failed (the loop restarts the job from its latest checkpoint).
	stopping    bool
	drainFailed string
	// restoreDir is the directory the restored snapshot's file paths are relative to.
	restoreDir string
	// verify reads a checkpoint's metadata and checks its files (storage.Verify); tests
	// replace it.
	verify func(jobDir, chkPath string) (*pb.CheckpointMetadata, error)
	// s3 configures s3:// checkpoint locations (the JobManager's s3.* keys).
	s3 storage.S3Settings
}

func newJobMaster(parent context.Context, rec *pb.JobRecord, leader leaderInfo, cluster *config.Config, host jobHost, rm *resourceManager, log *slog.Logger) (*jobMaster, error) {
	cfg := config.New()
	if err := cfg.SetAll(rec.GetGraph().GetConfig()); err != nil {
		return nil, fmt.Errorf("job %s config: %w", rec.GetId(), err)
	}
	cps := checkpointSettingsFrom(cfg)
	restart, err := restartStrategy(rec.GetGraph(), cluster, cps.enabled())
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", rec.GetId(), err)
	}
	fo, err := failover.NewFailoverStrategy(cfg.String(config.FailoverStrategy), rec.GetGraph())
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", rec.GetId(), err)
	}
	ctx, cancel := context.WithCancel(parent)
	m := &jobMaster{
		id: rec.GetId(), graph: rec.GetGraph(), jobPlan: planOf(rec.GetGraph()), cfg: cfg, host: host, rm: rm, restart: restart, failover: fo,
		leader: leader, prevLeader: leaderInfo{id: rec.GetLeaderId(), term: rec.GetLeaderTerm()},
		log: log.With("job_id", rec.GetId()), inbox: make(chan any, 256), ctx: ctx, cancel: cancel,
		done: make(chan struct{}), status: rec.GetStatus(), byKey: map[string]*execution{}, bySubtask: map[string]*execution{},
		startTime: rec.GetStartTime(), failureCause: rec.GetFailureCause(), restarts: max(rec.GetRuns()-1, 0),
		cpSettings: cps, lastStates: map[string][]*pb.OperatorSubtaskState{}, jobDir: storage.JobDir(cfg.String(config.CheckpointDir), rec.GetId()),
	}
	m.verify = m.verifyCheckpoint
	m.cp = newCheckpointCoordinator(cps, m, time.Now, rec.GetCheckpoints())
	m.publish()
	return m, nil
}

// verifyCheckpoint reads the metadata of the checkpoint at chkPath in dir (a local directory
// or an s3:// location) and checks its files (storage.Root.Verify).
func (m *jobMaster) verifyCheckpoint(dir, chkPath string) (*pb.CheckpointMetadata, error) {
	r, err := storage.OpenRoot(dir, m.s3)
	if err != nil {
		return nil, err
	}
	return r.Verify(m.ctx, chkPath)
}

// send delivers an event to the loop unless the job master has stopped. A nil job master (the
// job has none on this JobManager: dispatcher.master found none) drops it.
func (m *jobMaster) send(ev any) {
	if m == nil {
		return
	}
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
	details     *pb.JobDetails
	regs        []string
	keys        []string
	checkpoints []*pb.CheckpointInfo
	// For the metrics: the checkpoints no longer in the history, when the job's status last
	// changed, and when it last restored a checkpoint (zero: never).
	dropped     checkpointCounts
	statusSince time.Time
	restoredAt  time.Time
}

func (m *jobMaster) view() *jobView { return m.published.Load() }

func (m *jobMaster) run() {
	defer close(m.done)
	defer m.wg.Wait()
	defer m.cancel()
	defer stopTimer(&m.cancelTimer)
	defer stopTimer(&m.restartTimer)
	defer stopTimer(&m.slotDeadline)
	switch m.status {
	case pb.JobStatus_JOB_STATUS_CANCELLING: // the leader before us was cancelling it
		m.finish(pb.JobStatus_JOB_STATUS_CANCELED, "")
		return
	case pb.JobStatus_JOB_STATUS_FAILING: // the leader before us was failing it
		m.finish(pb.JobStatus_JOB_STATUS_FAILED, m.failureCause)
		return
	case pb.JobStatus_JOB_STATUS_RUNNING, pb.JobStatus_JOB_STATUS_RESTARTING:
		// The job ran (or was restarting) under an earlier leader: every task restarts. The
		// exception history says why, before RESTARTING is published; a running job records
		// a restart, so that this run is counted and its attempts get new numbers.
		m.recordLeaderChange()
		if m.status == pb.JobStatus_JOB_STATUS_RUNNING {
			if err := m.setStatus(pb.JobStatus_JOB_STATUS_RESTARTING, ""); err != nil {
				return
			}
		}
	}
	// The first deployment is a restart of every subtask, due at once.
	m.pending = &pendingRestart{tasks: map[string]bool{}, due: time.Now()}
	for _, v := range m.graph.GetVertices() {
		for i := range v.GetParallelism() {
			m.pending.tasks[subtaskKey(v.GetId(), i)] = true
		}
	}
	m.maybeRestart()
	m.publish() // the tasks, SCHEDULED while they wait for slots; the loop publishes after every event
	cpTimer := time.NewTimer(time.Hour)
	defer cpTimer.Stop()
	for !m.ended && m.ctx.Err() == nil {
		var cpC <-chan time.Time
		if d := m.cp.nextDeadline(); !d.IsZero() {
			cpTimer.Reset(time.Until(d))
			cpC = cpTimer.C
		}
		select {
		case ev := <-m.inbox:
			m.handle(ev)
		case <-timerC(m.cancelTimer):
			m.cancelTimer = nil
			m.giveUpOnCancel()
		case <-timerC(m.restartTimer):
			m.restartTimer = nil
		case <-m.slotWatch:
			m.tryAssignSlots()
		case <-timerC(m.slotDeadline):
			m.slotDeadline = nil
			m.slotsTimedOut()
		case <-cpC:
			m.cp.onTimer()
		case <-m.ctx.Done():
			m.cp.stop(pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_COORDINATOR_SUSPEND, "the job master stopped")
			return
		}
		m.restartAfterDrain()
		m.maybeRestart()
		m.publish()
	}
}

// recordException adds an entry to the job's exception history, which keeps the newest
// historySize entries (Flink's web.exception-history-size).
func (m *jobMaster) recordException(e *pb.ExceptionEntry) {
	m.exceptions = append(m.exceptions, e)
	if n := m.historySize; n > 0 && len(m.exceptions) > n {
		m.exceptions = slices.Clone(m.exceptions[len(m.exceptions)-n:])
	}
}

// leaderChangeTask is the exception history's "task" of a JobManager leader change.
const leaderChangeTask = "jobmanager leader change"

// recordLeaderChange adds the takeover of a running or restarting job by this leader to the
// exception history: a global restart of every task from the latest checkpoint, handled like
// a failure's restart (the restart strategy is not asked, as in Flink).
func (m *jobMaster) recordLeaderChange() {
	var checkpoint int64
	if rec, ok := m.host.jobRecord(m.id); ok && len(rec.GetCheckpoints()) > 0 {
		checkpoint = rec.GetCheckpoints()[len(rec.GetCheckpoints())-1].GetId()
	}
	cause := leaderChangeCause(m.prevLeader, m.leader, m.status == pb.JobStatus_JOB_STATUS_RESTARTING, checkpoint)
	entry := &pb.ExceptionEntry{Time: timestamppb.Now(), Task: leaderChangeTask, Cause: cause,
		Handling: pb.FailureHandling_FAILURE_HANDLING_RESTART, Failover: "global", RestartAttempt: m.restarts + 1}
	for _, v := range m.graph.GetVertices() {
		for i := range v.GetParallelism() {
			entry.RestartedTasks = append(entry.RestartedTasks, taskName(v, i))
		}
	}
	m.recordException(entry)
	m.log.Info("taking over the job from an earlier leader", "previous_leader", m.prevLeader.id, "previous_term", m.prevLeader.term,
		"term", m.leader.term, "status", m.status, "restart", entry.RestartAttempt)
}

// leaderChangeCause says how a job came to this leader (cur) from the one that last changed
// its status (prev; unknown in records of older versions) and where it restarts from: the
// checkpoint, or the beginning when checkpoint is 0.
func leaderChangeCause(prev, cur leaderInfo, restarting bool, checkpoint int64) string {
	var change string
	switch {
	case prev.id == "":
		change = fmt.Sprintf("a new JobManager leader took over (%s, term %d)", cur.id, cur.term)
	case prev.id == cur.id:
		change = fmt.Sprintf("JobManager %s lost its leadership and regained it (term %d → %d)", cur.id, prev.term, cur.term)
	default:
		change = fmt.Sprintf("the JobManager leader changed (%s → %s, term %d)", prev.id, cur.id, cur.term)
	}
	if restarting {
		change += " while the job was restarting"
	}
	if checkpoint == 0 {
		return change + ": no checkpoint completed yet: the job starts over"
	}
	return fmt.Sprintf("%s: the job restarts from checkpoint %d", change, checkpoint)
}

// taskName names subtask i of a vertex as the exception history and logs do: "map (2/4)".
func taskName(v *pb.JobVertex, i int32) string {
	return fmt.Sprintf("%s (%d/%d)", v.GetName(), i+1, v.GetParallelism())
}

// stopTimer stops and forgets one of the loop's timers, if it is set.
func stopTimer(t **time.Timer) {
	if *t != nil {
		(*t).Stop()
		*t = nil
	}
}

// timerC is the channel of one of the loop's timers, or nil (never ready) when it is not set.
func timerC(t *time.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C
}

// restoreChoice is the checkpoint a restart restores: the newest retained one whose files are
// intact (nil cp when none is retained or none is intact), after the corrupt ones skipped.
type restoreChoice struct {
	cp      *pb.CompletedCheckpoint
	md      *pb.CheckpointMetadata
	corrupt []corruptCheckpoint // newest first; every retained one when cp is nil
}

// corruptCheckpoint is a retained checkpoint whose files failed verification.
type corruptCheckpoint struct {
	id       int64
	err      error
	fallback int64 // the next older retained checkpoint, 0 when none
}

// verifyRestore starts choosing the checkpoint restart p restores. Verification reads and
// checksums every file of a checkpoint, which takes as long as the files take to read, so it
// runs on a goroutine of the job master and the loop goes on handling events (a cancel, task
// reports); the outcome comes back as evRestoreVerified. With no checkpoint retained there is
// nothing to verify: p.restore is set at once.
func (m *jobMaster) verifyRestore(p *pendingRestart) {
	var cps []*pb.CompletedCheckpoint
	if rec, ok := m.host.jobRecord(m.id); ok {
		cps = rec.GetCheckpoints()
	}
	if len(cps) == 0 {
		p.restore = &restoreChoice{}
		return
	}
	p.verifying = true
	ctx, g, verifyFiles := m.ctx, m.graph, m.verify
	// A checkpoint with channel state at another parallelism than the graph's (a rescale
	// since) cannot be restored, like a corrupt one.
	verify := func(jobDir, chkPath string) (*pb.CheckpointMetadata, error) {
		md, err := verifyFiles(jobDir, chkPath)
		if err == nil {
			err = checkUnalignedRestore(g, md.GetCheckpointId(), md)
		}
		return md, err
	}
	m.wg.Go(func() {
		if c := chooseRestore(ctx, cps, verify, m.awaitStorage); c != nil {
			m.send(evRestoreVerified{restart: p, choice: c})
		}
	})
}

// Backoff of restore verification while the checkpoint storage does not answer.
const (
	storageRetryFirst = 200 * time.Millisecond
	storageRetryMax   = 5 * time.Second
)

// awaitStorage waits before verifying checkpoint id again, after its storage did not answer
// for the attempt-th time (from 1). It returns false when the job master stopped meanwhile.
func (m *jobMaster) awaitStorage(id int64, attempt int, err error) bool {
	if attempt == 1 || attempt%10 == 0 {
		m.log.Warn("checkpoint storage unreachable; the restart waits for it, retrying", "checkpoint_id", id, "attempt", attempt, "err", err)
	}
	d := min(storageRetryFirst<<min(attempt-1, 5), storageRetryMax)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-m.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// chooseRestore verifies retained checkpoints, newest first, up to the first intact one. A
// checkpoint whose storage does not answer (storage.ErrUnreachable) is neither intact nor
// corrupt: falling back to an older one would give up exactly-once for nothing (it is in the
// same storage), so its verification is retried after await(id, attempt, err) until the
// storage answers. It gives up, returning nil, when ctx ends or await says the job master
// stopped.
func chooseRestore(ctx context.Context, cps []*pb.CompletedCheckpoint, verify func(jobDir, chkPath string) (*pb.CheckpointMetadata, error),
	await func(id int64, attempt int, err error) bool,
) *restoreChoice {
	c := &restoreChoice{}
	for i := len(cps) - 1; i >= 0; i-- {
		if ctx.Err() != nil {
			return nil
		}
		cp := cps[i]
		md, err := verify(cp.GetBaseDir(), cp.GetPath())
		for attempt := 1; errors.Is(err, storage.ErrUnreachable); attempt++ {
			if !await(cp.GetId(), attempt, err) || ctx.Err() != nil {
				return nil
			}
			md, err = verify(cp.GetBaseDir(), cp.GetPath())
		}
		if err == nil {
			c.cp, c.md = cp, md
			return c
		}
		bad := corruptCheckpoint{id: cp.GetId(), err: err}
		if i > 0 {
			bad.fallback = cps[i-1].GetId()
		}
		c.corrupt = append(c.corrupt, bad)
	}
	return c
}

// onRestoreVerified takes the checkpoint chosen for the pending restart: each corrupt one
// skipped goes loudly into the log and the exception history, and the job fails when none of
// the retained checkpoints is intact. The restart goes on in maybeRestart.
func (m *jobMaster) onRestoreVerified(ev evRestoreVerified) {
	p := m.pending
	if p == nil || ev.restart != p {
		return // the restart was dropped meanwhile: the job is ending
	}
	p.verifying = false
	c := ev.choice
	for _, bad := range c.corrupt {
		cause := fmt.Sprintf("checkpoint %d cannot be restored: %v", bad.id, bad.err)
		if bad.fallback != 0 {
			cause += fmt.Sprintf("; falling back to checkpoint %d: output that sinks committed after it"+
				" may appear twice (exactly-once is lost for that span)", bad.fallback)
		}
		m.log.Error("corrupt checkpoint", "checkpoint_id", bad.id, "err", bad.err)
		m.recordException(&pb.ExceptionEntry{Time: timestamppb.Now(), Task: "checkpoint restore", Cause: cause})
	}
	if c.cp == nil && len(c.corrupt) > 0 {
		m.failJobNow(fmt.Sprintf("none of the %d retained checkpoints can be restored (see the exception history)", len(c.corrupt)))
		return
	}
	p.restore = c
}

// useRestore makes c the checkpoint this run restores.
func (m *jobMaster) useRestore(c *restoreChoice) {
	m.restore, m.restoredID = nil, 0
	clear(m.lastStates)
	if c.cp == nil {
		return
	}
	m.restore, m.restoredID, m.restoredAt = c.md, c.cp.GetId(), time.Now()
	m.restoreDir = c.cp.GetBaseDir()
	m.rememberStates(c.md.GetStates())
	m.log.Info("restoring job from checkpoint", "checkpoint_id", c.cp.GetId(), "path", storage.JoinPath(c.cp.GetBaseDir(), c.cp.GetPath()))
}

// taskRestore is the state a vertex's tasks restore: the states of every subtask of the
// vertex's operators in the restored checkpoint.
func (m *jobMaster) taskRestore(v *pb.JobVertex) *pb.TaskRestore {
	if m.restore == nil {
		return nil
	}
	r := &pb.TaskRestore{CheckpointId: m.restoredID, BaseDir: m.restoreDir}
	for _, st := range m.restore.GetStates() {
		for _, op := range v.GetOperators() {
			if storage.OperatorUID(op) == st.GetOperator() {
				r.States = append(r.States, st)
			}
		}
	}
	return r
}

// handle handles one event of the inbox. It panics on an event of a type it does not know.
func (m *jobMaster) handle(ev any) {
	switch ev := ev.(type) {
	case evTaskState:
		m.onTaskState(ev.req)
	case evDeployFailed:
		if e := m.byKey[ev.key]; e != nil && !e.terminal() {
			m.failExecution(e, fmt.Sprintf("could not deploy %s to %s: %v", e.name, e.tm.describe(), ev.err), false)
		}
	case evTMLost:
		// Every task on it fails; each counts as a failure of its own region, as in Flink
		// (tasks of one region after the first are already being restarted).
		cause := fmt.Sprintf("%s is lost: %s", ev.tm.describe(), ev.reason)
		var lost []*execution
		var names []string
		for _, e := range m.execs {
			if e.tm.regID == ev.tm.regID && !e.terminal() {
				lost = append(lost, e)
				if e.state == pb.ExecutionState_EXECUTION_STATE_CANCELING {
					names = append(names, e.name)
				}
			}
		}
		if len(names) > 0 {
			// Its tasks were being cancelled already (an earlier report of this loss, such as
			// a consumer's broken input, failed them over): the loss is recorded, not counted.
			m.recordException(&pb.ExceptionEntry{Time: timestamppb.Now(),
				Task: strings.Join(names, ", "), Taskmanager: ev.tm.id, Cause: cause})
		}
		for _, e := range lost {
			m.failExecution(e, cause, false)
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
		m.cp.stop(pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_COORDINATOR_SHUTDOWN, "the job is being cancelled")
		m.dropPendingRestart()
		m.cancelAll()
	case evAck:
		m.onAck(ev.req)
	case evDecline:
		r := ev.req
		if e := m.byKey[execid.Key(r.GetExecution())]; e != nil && e.tm.regID == r.GetRegistrationId() {
			m.cp.decline(e.name, r.GetCheckpointId(), r.GetReason(), r.GetMessage())
		}
	case evTriggerFailed:
		if e := m.byKey[ev.key]; e != nil && e.state == pb.ExecutionState_EXECUTION_STATE_FINISHED {
			return // it finished before the trigger arrived: the checkpoint took its final state
		}
		m.cp.triggerFailed(ev.id, ev.msg)
	case evTriggerCheckpoint:
		switch {
		case !m.cpSettings.enabled():
			ev.reply <- checkpointResult{err: fmt.Errorf("job %s: %w", m.id, ErrCheckpointingDisabled)}
		case m.status != pb.JobStatus_JOB_STATUS_RUNNING || m.pending != nil:
			ev.reply <- checkpointResult{err: fmt.Errorf("job %s is %s: %w", m.id, statusName(m.status), ErrJobNotRunning)}
		case m.stopping && ev.savepoint != nil:
			ev.reply <- checkpointResult{err: fmt.Errorf("job %s: %w", m.id, ErrStopInProgress)}
		case ev.savepoint != nil:
			sp, err := m.savepointRequest(ev.savepoint)
			if err != nil {
				ev.reply <- checkpointResult{err: err}
				return
			}
			m.stopping = sp.stop
			m.cp.triggerManual(ev.reply, sp)
		case ev.aligned:
			m.cp.triggerAligned(ev.reply)
		default:
			m.cp.triggerManual(ev.reply, nil)
		}
	case evRescale:
		ev.reply <- m.rescale(ev.parallelism)
	case evRestoreVerified:
		m.onRestoreVerified(ev)
	default:
		// Only this package sends events, each of a type above: another is a bug here, not
		// input, and dropping it would leave its sender waiting or its job wrong.
		panic(fmt.Sprintf("job master %s: unknown event %T", m.id, ev))
	}
}

// onAck hands an acknowledgement to the coordinator; the state of one it does not want (late,
// duplicate, from an old attempt) is deleted unless the checkpoint is retained.
func (m *jobMaster) onAck(r *pb.AcknowledgeCheckpointRequest) {
	id := r.GetCheckpointId()
	e := m.byKey[execid.Key(r.GetExecution())]
	if e != nil && e.tm.regID == r.GetRegistrationId() && m.cp.ack(e.key, id, r.GetState(), r.GetMetrics()) {
		return
	}
	if m.cp.find(id) != nil || m.cp.isRetained(id) {
		return
	}
	if m.cp.isLateAck(id) {
		m.log.Info("late acknowledgement of an expired checkpoint; discarding its state", "checkpoint_id", id)
	}
	m.discard(id, nil)
}

func (m *jobMaster) onTaskState(r *pb.UpdateTaskExecutionStateRequest) {
	e := m.byKey[execid.Key(r.GetExecution())]
	if e == nil || e.tm.regID != r.GetRegistrationId() || e.terminal() {
		return // an older attempt, another registration, or already settled
	}
	e.in, e.out = r.GetRecordsIn(), r.GetRecordsOut()
	switch s := r.GetState(); s {
	case pb.ExecutionState_EXECUTION_STATE_FAILED:
		m.failExecution(e, m.reportedCause(e, r), r.GetUnrecoverable())
	case pb.ExecutionState_EXECUTION_STATE_CANCELED:
		// A task canceled without being asked to is a failure: its TaskManager stopped it,
		// or its producer was canceled (the report says which).
		if e.state != pb.ExecutionState_EXECUTION_STATE_CANCELING {
			cause := fmt.Sprintf("%s on %s was canceled unexpectedly", e.name, e.tm.describe())
			if r.GetFailure() != "" {
				cause = m.reportedCause(e, r)
			}
			m.failExecution(e, cause, false)
		}
		e.state = s
		m.checkTerminal()
	case pb.ExecutionState_EXECUTION_STATE_FINISHED:
		e.state = s
		// Checkpoints go on without it (sources wait for a final checkpoint before they
		// finish); pending ones take the state it finished with.
		m.cp.taskFinished(e.key, m.finishedState(e))
		m.checkTerminal()
		m.maybeStartCheckpoints()
	default:
		if e.state != pb.ExecutionState_EXECUTION_STATE_CANCELING { // never back out of CANCELING
			e.state = s
		}
		if s == pb.ExecutionState_EXECUTION_STATE_RUNNING {
			m.maybeStartCheckpoints()
			if r.GetEndOfData() {
				e.endOfData = true
				if m.inputEnded() {
					m.cp.triggerSoon() // the final checkpoint of the job: no need to wait for the interval
				}
			}
		}
	}
}

// inputEnded reports whether every source subtask's input ended (it reported end of data
// or finished): the job is about to end, and the tasks waiting for their final checkpoint
// need not wait for the interval. While a source still reads, they wait for the next
// periodic checkpoint, as in Flink, rather than bring one forward that would snapshot the
// running rest of the job early.
func (m *jobMaster) inputEnded() bool {
	for _, e := range m.execs {
		if m.isSource(e.vertex) && !e.endOfData && e.state != pb.ExecutionState_EXECUTION_STATE_FINISHED {
			return false
		}
	}
	return true
}

// isSource reports whether vertex v reads no input.
func (m *jobMaster) isSource(v *pb.JobVertex) bool {
	for _, edge := range m.graph.GetEdges() {
		if edge.GetTarget() == v.GetId() {
			return false
		}
	}
	return true
}

// reportedCause is the failure a task reported, naming the producer whose input it lost.
func (m *jobMaster) reportedCause(e *execution, r *pb.UpdateTaskExecutionStateRequest) string {
	cause := r.GetFailure()
	if p := m.byKey[execid.Key(r.GetFailedProducer())]; r.GetFailedProducer() != nil && p != nil {
		cause = fmt.Sprintf("%s lost its input from %s on %s: %s", e.name, p.name, p.tm.describe(), cause)
	}
	return cause
}

// maybeStartCheckpoints starts periodic checkpoints once every task of the run is running or
// already finished (a task restored as finished ends at once) and one still runs.
func (m *jobMaster) maybeStartCheckpoints() {
	if m.pending != nil || m.status != pb.JobStatus_JOB_STATUS_RUNNING || len(m.execs) == 0 {
		return
	}
	running := false
	for _, e := range m.execs {
		switch e.state {
		case pb.ExecutionState_EXECUTION_STATE_RUNNING:
			running = true
		case pb.ExecutionState_EXECUTION_STATE_FINISHED:
		default:
			return
		}
	}
	if running {
		m.cp.start()
	}
}

// sendCancel asks an execution's TaskManager to cancel it and release its partitions. It is
// best effort: a TaskManager that cannot be reached is lost soon, and heartbeat reconciliation
// cancels any task that survives. While the job is cancelling or failing for good (its
// checkpointing stopped), the request says so, with the newest completed checkpoint or savepoint (endedAt): no
// restore follows, so the task's two-phase-commit sinks end their pending transactions
// (operator.JobEnder).
func (m *jobMaster) sendCancel(e *execution) {
	req := &pb.CancelTaskRequest{RegistrationId: e.tm.regID, LeaderTerm: e.tm.term, Execution: e.id}
	if m.status == pb.JobStatus_JOB_STATUS_CANCELLING || m.status == pb.JobStatus_JOB_STATUS_FAILING {
		req.JobEnded, req.LastCompletedCheckpoint = true, m.cp.endedAt()
	}
	client := e.tm.client
	m.goRPC(deployTimeout, func(ctx context.Context) { _, _ = client.CancelTask(ctx, req) })
}

// goRPC makes an RPC to a task on a goroutine of m.wg, with a context that ends after timeout
// or when the job master stops.
func (m *jobMaster) goRPC(timeout time.Duration, call func(ctx context.Context)) {
	m.wg.Go(func() {
		ctx, cancel := context.WithTimeout(m.ctx, timeout)
		defer cancel()
		call(ctx)
	})
}

// giveUpOnCancel treats tasks that did not confirm their cancellation within cancelTimeout
// as canceled, and waits on for the others.
func (m *jobMaster) giveUpOnCancel() {
	now := time.Now()
	var next time.Time
	for _, e := range m.execs {
		if e.state != pb.ExecutionState_EXECUTION_STATE_CANCELING {
			continue
		}
		if give := e.cancelAt.Add(cancelTimeout); give.After(now) {
			if next.IsZero() || give.Before(next) {
				next = give
			}
			continue
		}
		m.log.Warn("task did not confirm cancellation in time", "task", e.name, "tm_id", e.tm.id, "timeout", cancelTimeout)
		e.state = pb.ExecutionState_EXECUTION_STATE_CANCELED
		// It may still run there: its replacement must not share its slot. The slot stays
		// reserved for the job (released when the job ends), and heartbeat reconciliation
		// keeps asking the TaskManager to cancel the task.
		if i := int(e.id.GetSubtask()); i < len(m.slots) && m.slots[i].tm == e.tm.regID && m.slots[i].slot == e.slot {
			m.slots[i] = slotRef{slot: -1}
		}
	}
	if !next.IsZero() {
		m.cancelTimer = time.NewTimer(next.Sub(now))
	}
	m.checkTerminal()
}

// checkTerminal ends the job once every task has settled. A restarting job goes on when its
// restart is due (maybeRestart).
func (m *jobMaster) checkTerminal() {
	if m.ctx.Err() != nil {
		return // stopped without a status change: nothing more may be committed
	}
	if slices.ContainsFunc(m.execs, func(e *execution) bool { return !e.terminal() }) {
		return
	}
	switch m.status {
	case pb.JobStatus_JOB_STATUS_RUNNING:
		if m.pending == nil {
			m.finish(pb.JobStatus_JOB_STATUS_FINISHED, "")
		}
	case pb.JobStatus_JOB_STATUS_FAILING:
		m.finish(pb.JobStatus_JOB_STATUS_FAILED, m.failureCause)
	case pb.JobStatus_JOB_STATUS_CANCELLING:
		m.finish(pb.JobStatus_JOB_STATUS_CANCELED, "")
	}
}

func (m *jobMaster) finish(s pb.JobStatus, cause string) {
	stopTimer(&m.cancelTimer)
	m.failureCause = cause
	m.dropPendingRestart()
	m.stopSlotWait()
	if err := m.setStatus(s, cause); err != nil {
		return
	}
	m.cp.stop(pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_COORDINATOR_SHUTDOWN, "the job ended")
	m.sweepCheckpoints()
	if s != pb.JobStatus_JOB_STATUS_FINISHED {
		m.releaseFinished()
	}
	m.rm.release(m.id)
	m.ended = true
	m.log.Info("job ended", "status", s, "cause", cause)
}

// releaseFinished cancels finished tasks: finished producers keep their partitions until
// consumers read them, and these consumers never will.
func (m *jobMaster) releaseFinished() {
	for _, e := range m.execs {
		if e.submitted && e.state == pb.ExecutionState_EXECUTION_STATE_FINISHED {
			m.sendCancel(e)
		}
	}
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
	m.status, m.statusSince = s, time.Now()
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
		if err := m.ctx.Err(); err != nil {
			return nil, err // stopped: a status change now could contradict the next leader
		}
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
		LastCheckpoint: m.cp.lastCompleted(), RestoredCheckpointId: m.restoredID, Parallelism: maxParallelism(m.graph),
		Plan: m.jobPlan,
	}
	v := &jobView{details: d, checkpoints: m.cp.historyView(), dropped: m.cp.dropped, statusSince: m.statusSince, restoredAt: m.restoredAt}
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

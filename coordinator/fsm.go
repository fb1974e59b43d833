package coordinator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// fsmVersion is the version of the snapshot format.
const fsmVersion = 1

// fsm is the replicated state machine of the JobManagers: every job and its status. Apply is
// deterministic (times and IDs come inside the commands) and idempotent; it has no side
// effects. Readers get copies. Safe for concurrent use.
type fsm struct {
	log *slog.Logger

	mu   sync.RWMutex
	jobs map[string]*pb.JobRecord
	// order lists job IDs in submission order.
	order []string
	// jobmanagers maps a JobManager's Raft node ID to its RPC address.
	jobmanagers map[string]string

	// changed is closed and replaced after every applied change.
	changed chan struct{}
}

func newFSM(log *slog.Logger) *fsm {
	return &fsm{log: log, jobs: map[string]*pb.JobRecord{}, jobmanagers: map[string]string{}, changed: make(chan struct{})}
}

// Apply applies one committed log entry. Nothing in the log makes it panic, since the log is
// input (a forged AppendEntries, an entry of a newer version): an entry that does not decode,
// holds no command the FSM knows, or holds one that is invalid (values out of range,
// validateCommand) or invalid for the state (an unknown or ended job) is rejected. The state is
// then unchanged, the error is the entry's result for the proposer, and the rejection is logged
// with the entry's index and term. The decision depends only on the entry and the state, so
// every replica makes the same one.
func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	var cmd pb.RaftCommand
	var res any
	if err := proto.Unmarshal(l.Data, &cmd); err != nil {
		res = fmt.Errorf("%w: the entry does not decode: %w", ErrInvalidCommand, err)
	} else if err := validateCommand(&cmd); err != nil {
		res = err
	} else {
		f.mu.Lock()
		res = f.applyCommand(&cmd, l.Term)
		if _, rejected := res.(error); !rejected {
			broadcast(&f.changed)
		}
		f.mu.Unlock()
	}
	if err, ok := res.(error); ok {
		level := slog.LevelInfo // a command the state does not admit (any more): the proposer decides
		if errors.Is(err, ErrInvalidCommand) {
			level = slog.LevelWarn
		}
		f.log.Log(context.Background(), level, "raft entry rejected", "index", l.Index, "term", l.Term,
			"proposer", cmd.GetProposer(), "err", err)
	}
	return res
}

// applyCommand applies a valid command (validateCommand) to the state; f.mu is held.
func (f *fsm) applyCommand(cmd *pb.RaftCommand, term uint64) any {
	switch op := cmd.GetOp().(type) {
	case *pb.RaftCommand_SubmitJob:
		return f.applySubmitJob(cmd, op.SubmitJob)
	case *pb.RaftCommand_UpdateJobStatus:
		return f.applyUpdateJobStatus(cmd, op.UpdateJobStatus, term)
	case *pb.RaftCommand_AllocateCheckpointId:
		return f.applyAllocateCheckpointID(op.AllocateCheckpointId)
	case *pb.RaftCommand_CompleteCheckpoint:
		return f.applyCompleteCheckpoint(op.CompleteCheckpoint)
	case *pb.RaftCommand_RescaleJob:
		return f.applyRescaleJob(op.RescaleJob)
	case *pb.RaftCommand_RegisterJobmanager:
		return f.applyRegisterJobManager(op.RegisterJobmanager)
	case *pb.RaftCommand_RemoveJobs:
		return f.applyRemoveJobs(op.RemoveJobs)
	}
	return fmt.Errorf("%w: unknown command %T", ErrInvalidCommand, cmd.GetOp()) // validateCommand knows every command
}

func (f *fsm) applySubmitJob(cmd *pb.RaftCommand, c *pb.SubmitJobCommand) error {
	if _, ok := f.jobs[c.GetJobId()]; ok {
		return nil // applied before
	}
	rec := &pb.JobRecord{
		Id: c.GetJobId(), Graph: c.GetGraph(), Status: pb.JobStatus_JOB_STATUS_CREATED, SubmitTime: cmd.GetTime(),
	}
	if r := c.GetRestore(); r != nil {
		// Started from a snapshot: it is the job's first retained checkpoint, and the job's
		// checkpoint IDs go on after it (its sinks' pending transactions carry its IDs).
		rec.Checkpoints = []*pb.CompletedCheckpoint{r}
		rec.LastCheckpointId = r.GetId()
	}
	f.jobs[c.GetJobId()] = rec
	f.order = append(f.order, c.GetJobId())
	return nil
}

// applyUpdateJobStatus changes a job's status and records the leader that changed it (the
// command's proposer, in term, the Raft term of the entry).
func (f *fsm) applyUpdateJobStatus(cmd *pb.RaftCommand, c *pb.UpdateJobStatusCommand, term uint64) error {
	j, ok := f.jobs[c.GetJobId()]
	if !ok {
		return fmt.Errorf("update job %s: %w", c.GetJobId(), ErrJobNotFound)
	}
	if j.Status == c.GetStatus() {
		return nil
	}
	if isTerminalJob(j.Status) {
		return fmt.Errorf("update job %s to %v: %w (it is %v)", c.GetJobId(), c.GetStatus(), ErrJobTerminal, j.Status)
	}
	j.Status = c.GetStatus()
	j.LeaderId, j.LeaderTerm = cmd.GetProposer(), term
	switch {
	case j.Status == pb.JobStatus_JOB_STATUS_RUNNING:
		if j.StartTime == nil {
			j.StartTime = cmd.GetTime()
		}
		j.Runs++
	case isTerminalJob(j.Status):
		j.EndTime = cmd.GetTime()
		j.FailureCause = c.GetFailureCause()
	case j.Status == pb.JobStatus_JOB_STATUS_FAILING:
		j.FailureCause = c.GetFailureCause()
	}
	return nil
}

// maxCheckpointIDBlock bounds one reservation of checkpoint IDs.
const maxCheckpointIDBlock = 1 << 16

// applyAllocateCheckpointID reserves the next checkpoint IDs of a job and returns the first to
// the proposer (an int64). IDs grow strictly for the life of the job, across leaders.
func (f *fsm) applyAllocateCheckpointID(c *pb.AllocateCheckpointIdCommand) any {
	j, ok := f.jobs[c.GetJobId()]
	if !ok {
		return fmt.Errorf("allocate checkpoint ID for job %s: %w", c.GetJobId(), ErrJobNotFound)
	}
	if isTerminalJob(j.Status) {
		return fmt.Errorf("allocate checkpoint ID for job %s: %w", c.GetJobId(), ErrJobTerminal)
	}
	n := int64(min(max(c.GetCount(), 1), maxCheckpointIDBlock))
	if j.LastCheckpointId > maxCheckpointID-n {
		return fmt.Errorf("allocate checkpoint ID for job %s: the counter (%d) would pass the highest ID %d", c.GetJobId(), j.LastCheckpointId, int64(maxCheckpointID))
	}
	first := j.LastCheckpointId + 1
	j.LastCheckpointId += n
	return first
}

// applyCompleteCheckpoint adds a completed checkpoint to the job's store and keeps the newest
// num_retained. It returns the checkpoints the store dropped (subsumed, a
// []*pb.CompletedCheckpoint), whose files the proposer deletes. It is idempotent: a checkpoint
// already in the store (or older than its newest) is not added again.
func (f *fsm) applyCompleteCheckpoint(c *pb.CompleteCheckpointCommand) any {
	j, ok := f.jobs[c.GetJobId()]
	if !ok {
		return fmt.Errorf("complete checkpoint of job %s: %w", c.GetJobId(), ErrJobNotFound)
	}
	if isTerminalJob(j.Status) {
		return fmt.Errorf("complete checkpoint of job %s: %w", c.GetJobId(), ErrJobTerminal)
	}
	cp := c.GetCheckpoint()
	var subsumed []*pb.CompletedCheckpoint
	if cp.GetSavepoint() && cp.GetId() <= j.LastCheckpointId &&
		!slices.ContainsFunc(j.Savepoints, func(s *pb.CompletedCheckpoint) bool { return s.GetId() == cp.GetId() }) {
		j.Savepoints = append(j.Savepoints, cp)
		if drop := len(j.Savepoints) - maxSavepointRecords; drop > 0 {
			j.Savepoints = slices.Clone(j.Savepoints[drop:])
		}
	}
	if c.GetSavepointOnly() {
		return subsumed
	}
	if n := len(j.Checkpoints); n > 0 && j.Checkpoints[n-1].GetId() >= cp.GetId() {
		return subsumed // applied before, or older than the newest: never go back
	}
	if cp.GetId() > j.LastCheckpointId {
		return fmt.Errorf("complete checkpoint %d of job %s: ID was never allocated (last %d)", cp.GetId(), c.GetJobId(), j.LastCheckpointId)
	}
	j.Checkpoints = append(j.Checkpoints, cp)
	retain := max(int(c.GetNumRetained()), 1)
	if drop := len(j.Checkpoints) - retain; drop > 0 {
		subsumed = slices.Clone(j.Checkpoints[:drop])
		j.Checkpoints = slices.Clone(j.Checkpoints[drop:])
	}
	return subsumed
}

// applyRemoveJobs removes the listed jobs that have ended and returns their records (a
// []*pb.JobRecord, in submission order), whose checkpoint directories the proposer deletes.
// Jobs that have not ended, and IDs it does not know (removed before), are left alone.
func (f *fsm) applyRemoveJobs(c *pb.RemoveJobsCommand) any {
	remove := map[string]bool{}
	for _, id := range c.GetJobIds() {
		if j, ok := f.jobs[id]; ok && isTerminalJob(j.GetStatus()) {
			remove[id] = true
		}
	}
	removed := make([]*pb.JobRecord, 0, len(remove))
	f.order = slices.DeleteFunc(f.order, func(id string) bool {
		if remove[id] {
			removed = append(removed, f.jobs[id])
			delete(f.jobs, id)
		}
		return remove[id]
	})
	return removed
}

// maxSavepointRecords bounds a job's savepoint records (the oldest are forgotten, not deleted).
const maxSavepointRecords = 100

// applyRescaleJob replaces a job's graph by the same job at another parallelism.
func (f *fsm) applyRescaleJob(c *pb.RescaleJobCommand) error {
	j, ok := f.jobs[c.GetJobId()]
	if !ok {
		return fmt.Errorf("rescale job %s: %w", c.GetJobId(), ErrJobNotFound)
	}
	if isTerminalJob(j.Status) {
		return fmt.Errorf("rescale job %s: %w", c.GetJobId(), ErrJobTerminal)
	}
	if len(c.GetGraph().GetVertices()) != len(j.GetGraph().GetVertices()) {
		return fmt.Errorf("rescale job %s: the new graph has %d vertices, the job %d", c.GetJobId(),
			len(c.GetGraph().GetVertices()), len(j.GetGraph().GetVertices()))
	}
	j.Graph = c.GetGraph()
	return nil
}

// isTerminalJob reports whether a job status is globally terminal.
func isTerminalJob(s pb.JobStatus) bool {
	switch s {
	case pb.JobStatus_JOB_STATUS_FINISHED, pb.JobStatus_JOB_STATUS_FAILED, pb.JobStatus_JOB_STATUS_CANCELED:
		return true
	}
	return false
}

// job returns a copy of one job record.
func (f *fsm) job(id string) (*pb.JobRecord, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	j, ok := f.jobs[id]
	if !ok {
		return nil, false
	}
	return proto.CloneOf(j), true
}

// list returns copies of all job records in submission order.
func (f *fsm) list() []*pb.JobRecord {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]*pb.JobRecord, 0, len(f.order))
	for _, id := range f.order {
		out = append(out, proto.CloneOf(f.jobs[id]))
	}
	return out
}

// watch returns a channel closed at the next change.
func (f *fsm) watch() <-chan struct{} {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.changed
}

// broadcast wakes the watchers of *ch by closing it, and replaces it for the next change. The
// caller holds the lock that guards *ch.
func broadcast(ch *chan struct{}) {
	close(*ch)
	*ch = make(chan struct{})
}

// state returns the whole state as a snapshot message.
func (f *fsm) state() *pb.FSMSnapshot {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := &pb.FSMSnapshot{Version: fsmVersion}
	for _, id := range f.order {
		s.Jobs = append(s.Jobs, f.jobs[id])
	}
	for _, id := range slices.Sorted(maps.Keys(f.jobmanagers)) {
		s.Jobmanagers = append(s.Jobmanagers, &pb.JobManagerRecord{NodeId: id, RpcAddress: f.jobmanagers[id]})
	}
	return proto.CloneOf(s)
}

// Snapshot captures the state. Records are cloned under the read lock so Persist can run while
// Apply continues.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	return &fsmSnapshot{state: f.state()}, nil
}

// Restore replaces the whole state with a snapshot's. A snapshot that does not decode, or
// holds a record Apply would never have made (checkJobRecord), is an error, and the state is
// left as it was.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("fsm restore: %w", err)
	}
	var s pb.FSMSnapshot
	if err := proto.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("fsm restore: %w", err)
	}
	if s.GetVersion() != fsmVersion {
		return fmt.Errorf("fsm restore: snapshot version %d, want %d", s.GetVersion(), fsmVersion)
	}
	jobs := make(map[string]*pb.JobRecord, len(s.GetJobs()))
	order := make([]string, 0, len(s.GetJobs()))
	for i, j := range s.GetJobs() {
		if err := checkJobRecord(j); err != nil {
			return fmt.Errorf("fsm restore: job %d of the snapshot: %w", i, err)
		}
		if _, dup := jobs[j.GetId()]; dup {
			return fmt.Errorf("fsm restore: job %s is in the snapshot twice", j.GetId())
		}
		jobs[j.GetId()] = j
		order = append(order, j.GetId())
	}
	jms := make(map[string]string, len(s.GetJobmanagers()))
	for _, r := range s.GetJobmanagers() {
		if err := checkNodeID(r.GetNodeId()); err != nil {
			return fmt.Errorf("fsm restore: jobmanager record: %w", err)
		}
		if err := checkHostPort(r.GetRpcAddress()); err != nil {
			return fmt.Errorf("fsm restore: jobmanager %s: rpc_address: %w", r.GetNodeId(), err)
		}
		jms[r.GetNodeId()] = r.GetRpcAddress()
	}
	f.mu.Lock()
	f.jobs, f.order, f.jobmanagers = jobs, slices.Clip(order), jms
	broadcast(&f.changed)
	f.mu.Unlock()
	return nil
}

type fsmSnapshot struct {
	state *pb.FSMSnapshot
}

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	data, err := proto.Marshal(s.state)
	if err == nil {
		_, err = sink.Write(data)
	}
	if err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("fsm snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}

// applyRegisterJobManager records a JobManager's RPC address.
func (f *fsm) applyRegisterJobManager(c *pb.RegisterJobManagerCommand) error {
	f.jobmanagers[c.GetNodeId()] = c.GetRpcAddress()
	return nil
}

// jobManagerAddr returns the RPC address recorded for a JobManager's node ID.
func (f *fsm) jobManagerAddr(nodeID string) (string, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	a, ok := f.jobmanagers[nodeID]
	return a, ok
}

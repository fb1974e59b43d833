package coordinator

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/storage"
)

// checkpointRPCTimeout bounds one checkpoint RPC to a task.
const checkpointRPCTimeout = 10 * time.Second

// The job master is the checkpoint coordinator's I/O (checkpointIO). These methods run on the
// job master's loop goroutine; RPCs and file deletions run on goroutines of m.wg.

// plan returns the running tasks to wait for, the tasks to trigger — running sources, and
// running tasks whose producers all finished (their input ended; they wait for a final
// checkpoint) — and the state of finished tasks. Any task that is neither running nor
// finished (deploying, failing) makes the checkpoint wait for a later trigger. When every task
// finished there is nothing to wait for: the job is about to end.
func (m *jobMaster) plan() (checkpointPlan, bool) {
	if m.status != pb.JobStatus_JOB_STATUS_RUNNING || m.pending != nil || len(m.execs) == 0 {
		return checkpointPlan{}, false
	}
	var p checkpointPlan
	for _, e := range m.execs {
		switch e.state {
		case pb.ExecutionState_EXECUTION_STATE_RUNNING:
			p.wait = append(p.wait, e.key)
		case pb.ExecutionState_EXECUTION_STATE_FINISHED:
			p.finished = append(p.finished, m.finishedState(e)...)
		default:
			return checkpointPlan{}, false
		}
	}
	p.trigger = m.triggerable()
	return p, len(p.trigger) > 0 || len(p.wait) == 0
}

// triggerable returns the running tasks whose producers all finished: sources, and tasks whose
// input ended or is ending.
func (m *jobMaster) triggerable() []string {
	var keys []string
	for _, e := range m.execs {
		if e.state == pb.ExecutionState_EXECUTION_STATE_RUNNING && m.producersFinished(e) {
			keys = append(keys, e.key)
		}
	}
	return keys
}

// producersFinished reports whether every producer of an execution has finished (true for a
// source, which has none).
func (m *jobMaster) producersFinished(e *execution) bool {
	for _, edge := range m.graph.GetEdges() {
		if edge.GetTarget() != e.vertex.GetId() {
			continue
		}
		for _, p := range m.execs {
			if p.vertex.GetId() != edge.GetSource() || !connected(edge, p, e) {
				continue
			}
			if p.state != pb.ExecutionState_EXECUTION_STATE_FINISHED {
				return false
			}
		}
	}
	return true
}

// connected reports whether producer feeds consumer over edge: a forward edge connects the
// subtasks of equal index (one to one, as failover's pipelined regions assume), every other
// edge connects all of them.
func connected(edge *pb.JobEdge, producer, consumer *execution) bool {
	return edge.GetPartitioner() != pb.Partitioner_PARTITIONER_FORWARD || producer.id.GetSubtask() == consumer.id.GetSubtask()
}

// checkpointIDBlock is how many checkpoint IDs one Raft entry reserves: a checkpoint then
// costs one Raft round trip (its completion), not two.
const checkpointIDBlock = 64

// allocateID hands out the next reserved checkpoint ID, reserving a new block through Raft
// when the reservation is used up. A new job master (a new leader) always reserves anew.
func (m *jobMaster) allocateID() (int64, error) {
	if m.nextID == 0 || m.nextID > m.endID {
		first, err := m.host.allocateCheckpointIDs(m.id, checkpointIDBlock)
		if err != nil {
			return 0, err
		}
		m.nextID, m.endID = first, first+checkpointIDBlock-1
	}
	id := m.nextID
	m.nextID++
	return id, nil
}

func (m *jobMaster) triggerTasks(tasks []string, b *pb.CheckpointBarrier) {
	for _, k := range tasks {
		e := m.byKey[k]
		req := &pb.TriggerTaskCheckpointRequest{RegistrationId: e.tm.regID, LeaderTerm: e.tm.term, Execution: e.id, Barrier: b}
		client, name := e.tm.client, e.name
		m.goRPC(checkpointRPCTimeout, func(ctx context.Context) {
			if _, err := client.TriggerTaskCheckpoint(ctx, req); err != nil && m.ctx.Err() == nil {
				m.send(evTriggerFailed{id: b.GetCheckpointId(), key: k, msg: fmt.Sprintf("triggering %s: %v", name, err)})
			}
		})
	}
}

func (m *jobMaster) finalize(id int64, trigger time.Time, states []*pb.OperatorSubtaskState, size int64, sp *savepointRequest) (*pb.CompletedCheckpoint, error) {
	md := &pb.CheckpointMetadata{Version: 1, JobId: m.id, CheckpointId: id, TriggerTimeMs: trigger.UnixMilli(), States: states}
	cp := &pb.CompletedCheckpoint{Id: id, TriggerTime: timestamppb.New(trigger), StateSizeBytes: size}
	if sp != nil {
		root, err := storage.OpenRoot(sp.dir, m.s3)
		if err != nil {
			return nil, fmt.Errorf("write savepoint %d metadata: %w", id, err)
		}
		if err := root.WriteSavepointMetadata(m.ctx, md); err != nil {
			return nil, fmt.Errorf("write savepoint %d metadata: %w", id, err)
		}
		// A stop's savepoint is retained for a failover until the job ends; the job never
		// deletes a savepoint.
		cp.Path, cp.BaseDir, cp.Savepoint, cp.NotOwned = ".", sp.dir, true, true
	} else {
		root, err := storage.OpenRoot(m.jobDir, m.s3)
		if err != nil {
			return nil, fmt.Errorf("write checkpoint %d metadata: %w", id, err)
		}
		path, err := root.WriteMetadata(m.ctx, md)
		if err != nil {
			return nil, fmt.Errorf("write checkpoint %d metadata: %w", id, err)
		}
		cp.Path, cp.BaseDir = path, m.jobDir
	}
	if !sp.intermediate() {
		m.rememberStates(states)
	}
	cp.CompletionTime = timestamppb.Now()
	return cp, nil
}

func (m *jobMaster) commit(cp *pb.CompletedCheckpoint, savepointOnly bool) ([]*pb.CompletedCheckpoint, error) {
	subsumed, err := m.host.completeCheckpoint(m.id, cp, m.cpSettings.numRetained, savepointOnly)
	if err == nil {
		kind := "checkpoint"
		if cp.GetSavepoint() {
			kind = "savepoint"
		}
		m.log.Info(kind+" completed", "checkpoint_id", cp.GetId(), "size_bytes", cp.GetStateSizeBytes(),
			"duration", cp.GetCompletionTime().AsTime().Sub(cp.GetTriggerTime().AsTime()).Round(time.Millisecond),
			"path", storage.JoinPath(cp.GetBaseDir(), cp.GetPath()))
	}
	return subsumed, err
}

// notifyTasks sends a notification to every task of the current run that may still run: one
// RPC per TaskManager, naming its tasks (a job of many tasks on few TaskManagers costs the
// JobManager few RPCs per checkpoint).
func (m *jobMaster) notifyTasks(send func(ctx context.Context, tm *taskManager, ids []*pb.ExecutionAttemptID) error) {
	var tms []*taskManager
	byTM := map[*taskManager][]*pb.ExecutionAttemptID{}
	for _, e := range m.execs {
		if !e.submitted || e.terminal() || e.tm.client == nil {
			continue
		}
		if _, ok := byTM[e.tm]; !ok {
			tms = append(tms, e.tm)
		}
		byTM[e.tm] = append(byTM[e.tm], e.id)
	}
	for _, tm := range tms {
		ids := byTM[tm]
		m.goRPC(checkpointRPCTimeout, func(ctx context.Context) {
			if err := send(ctx, tm, ids); err != nil && m.ctx.Err() == nil {
				m.log.Debug("checkpoint notification not delivered", "taskmanager", tm.regID, "tasks", len(ids), "err", err)
			}
		})
	}
}

func (m *jobMaster) notifyComplete(id int64) {
	m.notifyTasks(func(ctx context.Context, tm *taskManager, ids []*pb.ExecutionAttemptID) error {
		_, err := tm.client.NotifyCheckpointComplete(ctx, &pb.NotifyCheckpointCompleteRequest{RegistrationId: tm.regID, LeaderTerm: tm.term, Executions: ids, CheckpointId: id})
		return err
	})
}

func (m *jobMaster) notifyAborted(id, latestCompleted int64) {
	m.notifyTasks(func(ctx context.Context, tm *taskManager, ids []*pb.ExecutionAttemptID) error {
		_, err := tm.client.NotifyCheckpointAborted(ctx, &pb.NotifyCheckpointAbortedRequest{RegistrationId: tm.regID, LeaderTerm: tm.term, Executions: ids,
			CheckpointId: id, LatestCompletedId: latestCompleted})
		return err
	})
}

func (m *jobMaster) discard(id int64, sp *savepointRequest) {
	root, rel := m.jobDir, storage.CheckpointDirName(id)
	if sp != nil {
		root, rel = sp.dir, "."
	}
	m.discardAt(id, root, rel)
}

// discardCompleted deletes a subsumed checkpoint's files unless the job does not own them (a
// snapshot it was started from without claiming it, a savepoint).
func (m *jobMaster) discardCompleted(cp *pb.CompletedCheckpoint) {
	if cp.GetNotOwned() {
		return
	}
	m.discardAt(cp.GetId(), cmp.Or(cp.GetBaseDir(), m.jobDir), cp.GetPath())
}

func (m *jobMaster) discardAt(id int64, root, rel string) {
	m.wg.Go(func() {
		if err := m.discardFiles(root, rel); err != nil {
			m.log.Warn("cannot delete checkpoint files", "checkpoint_id", id, "err", err)
		}
	})
}

// sweepCheckpoints deletes, once the job ended and every task settled, each checkpoint
// directory of the job directory that is not a retained checkpoint's: what is left of a
// checkpoint aborted while a task still wrote its state (the task committed its file after the
// abort deleted the directory, and was cancelled before it could acknowledge it, so nothing
// said the file exists). No task writes into the directory any more.
func (m *jobMaster) sweepCheckpoints() {
	keep := map[int64]bool{}
	for _, cp := range m.cp.retained {
		keep[cp.GetId()] = true
	}
	m.wg.Go(func() {
		root, err := storage.OpenRoot(m.jobDir, m.s3)
		var ids []int64
		if err == nil {
			ids, err = root.CheckpointIDs(context.WithoutCancel(m.ctx))
		}
		if err != nil {
			m.log.Warn("cannot list the job's checkpoint directories to delete what aborted checkpoints left", "dir", m.jobDir, "err", err)
			return
		}
		for _, id := range ids {
			if keep[id] {
				continue
			}
			if err := m.discardFiles(m.jobDir, storage.CheckpointDirName(id)); err != nil {
				m.log.Warn("cannot delete what an aborted checkpoint left", "checkpoint_id", id, "err", err)
				continue
			}
			m.log.Info("deleted what an aborted checkpoint left", "checkpoint_id", id)
		}
	})
}

// discardFiles deletes the snapshot at rel in root: a checkpoint's chk-<n> in a local or
// s3:// job directory, or a savepoint's own directory, ".", local or on S3.
func (m *jobMaster) discardFiles(root, rel string) error {
	if !storage.IsURI(root) {
		return storage.DiscardAt(root, rel)
	}
	if rel == "." {
		return storage.DiscardSnapshotDir(context.WithoutCancel(m.ctx), root, m.s3)
	}
	r, err := storage.OpenRoot(root, m.s3)
	if err != nil {
		return err
	}
	// The job master may be stopping; the deletion finishes all the same (bounded by the
	// client's retries).
	return r.Discard(context.WithoutCancel(m.ctx), rel)
}

// stopFailed handles a stop-with-savepoint that failed. Without a drain the tasks go on (the
// abort notification resumes them). After a drain their input has ended, so the job restarts
// from its latest checkpoint, as after a failure (handled by the loop: see run).
func (m *jobMaster) stopFailed(sp *savepointRequest, msg string) {
	m.stopping = false
	m.log.Warn("stop-with-savepoint failed; the job keeps running", "drain", sp.drain, "cause", msg)
	if sp.drain {
		m.drainFailed = "stop-with-savepoint --drain failed after the input was drained: " + msg
	}
}

func (m *jobMaster) failJob(cause string) {
	if m.status == pb.JobStatus_JOB_STATUS_RUNNING && m.pending == nil {
		m.handleFailure(failure{task: "checkpoint coordinator", cause: cause})
		m.checkTerminal()
	}
}

// subtaskKey names a subtask across attempts: vertex and subtask index.
func subtaskKey(vertex, subtask int32) string { return fmt.Sprintf("%d/%d", vertex, subtask) }

// rememberStates keeps, per subtask, its states in the newest checkpoint (restored or
// completed), so that a subtask that finishes can hand them to later checkpoints.
func (m *jobMaster) rememberStates(states []*pb.OperatorSubtaskState) {
	byOp := vertexByUID(m.graph)
	fresh := map[string][]*pb.OperatorSubtaskState{}
	for _, st := range states {
		v, ok := byOp[st.GetOperator()]
		if !ok {
			continue
		}
		k := subtaskKey(v.GetId(), st.GetSubtask())
		fresh[k] = append(fresh[k], st)
	}
	maps.Copy(m.lastStates, fresh)
}

// finishedState is the state a finished task contributes to later checkpoints: its operator
// state in the last checkpoint it took part in (a finished source restores as finished). Its
// keyed state and channel state are left out: a finished task receives no more records and
// delivered all it sent, and the files may be deleted with their checkpoint.
func (m *jobMaster) finishedState(e *execution) []*pb.OperatorSubtaskState {
	var out []*pb.OperatorSubtaskState
	for _, st := range m.lastStates[subtaskKey(e.vertex.GetId(), e.id.GetSubtask())] {
		c := proto.CloneOf(st)
		c.Keyed, c.ChannelState = nil, nil
		out = append(out, c)
	}
	return out
}

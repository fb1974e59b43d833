package coordinator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/failover"
	"github.com/goflink/goflink/internal/dirsync"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
	"github.com/goflink/goflink/state"
	"github.com/goflink/goflink/storage"
)

// Savepoints, stop-with-savepoint, starting a job from a snapshot, and rescaling (DESIGN.md §4
// "Savepoints and rescaling"). A savepoint is a checkpoint whose files and _metadata go into a
// directory of its own (storage.NewSavepointDir), always aligned and complete. An intermediate
// savepoint is recorded among the job's savepoints only: it commits no transaction and no
// failover restores it (Flink 1.15+). A stop's savepoint is also retained as a checkpoint
// (never deleted by the job): its completion commits the sinks, and the tasks then end.

// savepointRequest checks a savepoint request against the job and creates the savepoint's
// directory, so that an unusable one fails the request at once.
func (m *jobMaster) savepointRequest(r *pb.TriggerSavepointRequest) (*savepointRequest, error) {
	target := cmp.Or(r.GetTargetDirectory(), m.cfg.String(config.SavepointDir))
	if target == "" {
		return nil, fmt.Errorf("savepoint of job %s: %w", m.id, ErrNoSavepointDir)
	}
	dir, err := storage.NewSavepointDir(target, m.id)
	if err != nil {
		return nil, fmt.Errorf("savepoint of job %s: %w: %w", m.id, ErrInvalidArgument, err)
	}
	// An s3:// target has no directories; the dispatcher probed it before the request came.
	if !storage.IsURI(dir) {
		if err := dirsync.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("savepoint of job %s: %w: cannot create the savepoint directory: %w", m.id, ErrInvalidArgument, err)
		}
	}
	m.log.Info("triggering savepoint", "dir", dir, "stop", r.GetStop(), "drain", r.GetDrain())
	return &savepointRequest{dir: dir, stop: r.GetStop(), drain: r.GetStop() && r.GetDrain()}, nil
}

// restartAfterDrain restarts the job from its latest checkpoint when a draining
// stop-with-savepoint failed: the tasks' input has ended, so they cannot go on.
func (m *jobMaster) restartAfterDrain() {
	cause := m.drainFailed
	if cause == "" {
		return
	}
	m.drainFailed = ""
	if m.status == pb.JobStatus_JOB_STATUS_RUNNING && m.pending == nil && m.ctx.Err() == nil {
		m.handleFailure(failure{task: "stop-with-savepoint", cause: cause})
		m.checkTerminal()
	}
}

// rescale changes the running job's parallelism in place: the new graph is recorded through
// Raft, every task is cancelled, and the job is redeployed at the new parallelism from its
// latest checkpoint (taken just before by the dispatcher), each subtask restoring its key-group
// range and its share of operator state. It is not a failure: the restart strategy is not
// asked.
func (m *jobMaster) rescale(n int32) error {
	switch {
	case !m.cpSettings.enabled():
		return fmt.Errorf("rescale job %s: %w", m.id, ErrCheckpointingDisabled)
	case m.status != pb.JobStatus_JOB_STATUS_RUNNING || m.pending != nil:
		return fmt.Errorf("rescale job %s: it is %s: %w", m.id, statusName(m.status), ErrJobNotRunning)
	case m.stopping:
		return fmt.Errorf("rescale job %s: %w", m.id, ErrStopInProgress)
	case len(m.cp.retained) == 0:
		return fmt.Errorf("rescale job %s: %w: it has no completed checkpoint to restore", m.id, ErrJobNotRunning)
	case m.cp.retained[len(m.cp.retained)-1].GetUnaligned():
		// The dispatcher took an aligned one, but an unaligned one completed after it.
		return fmt.Errorf("rescale job %s: %w: its latest checkpoint %d is unaligned (it holds in-flight data), which restores only at the parallelism it was taken at; try again, or take a savepoint and run -s it at the new parallelism",
			m.id, ErrInvalidRestore, m.cp.retained[len(m.cp.retained)-1].GetId())
	}
	g, changed, err := rescaledGraph(m.graph, n)
	if err != nil || !changed {
		return err
	}
	if extra := int(maxParallelism(g)) - m.slotCount(); extra > 0 {
		if free, total := m.rm.freeCount(); free < extra {
			return fmt.Errorf("rescale job %s to %d: %w: it needs %d more slots, the cluster has %d free of %d",
				m.id, n, ErrNotEnoughSlots, extra, free, total)
		}
	}
	fo, err := failover.NewFailoverStrategy(m.cfg.String(config.FailoverStrategy), g)
	if err != nil {
		return fmt.Errorf("rescale job %s: %w", m.id, err)
	}
	if err := m.host.rescaleJob(m.id, g); err != nil {
		return fmt.Errorf("rescale job %s: %w", m.id, err)
	}
	old := maxParallelism(m.graph)
	m.graph, m.failover = g, fo
	m.restartAll("rescale", fmt.Sprintf("rescaled from parallelism %d to %d", old, maxParallelism(g)))
	return nil
}

// restartAll cancels every task and redeploys the job's current graph from its latest
// checkpoint, without asking the restart strategy (a rescale).
func (m *jobMaster) restartAll(task, cause string) {
	now := time.Now()
	p := &pendingRestart{tasks: map[string]bool{}, attempt: m.restarts + 1, due: now}
	entry := &pb.ExceptionEntry{Time: timestamppb.New(now), Task: task, Cause: cause,
		Handling: pb.FailureHandling_FAILURE_HANDLING_RESTART, Failover: "global", RestartAttempt: p.attempt}
	for _, e := range m.execs {
		p.tasks[subtaskKey(e.vertex.GetId(), e.id.GetSubtask())] = true
		entry.RestartedTasks = append(entry.RestartedTasks, e.name)
	}
	for _, v := range m.graph.GetVertices() {
		for i := range v.GetParallelism() {
			p.tasks[subtaskKey(v.GetId(), i)] = true
		}
	}
	m.recordException(entry)
	m.cp.stop(pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_JOB_FAILOVER, "the job is being "+task+"d")
	if err := m.setStatus(pb.JobStatus_JOB_STATUS_RESTARTING, ""); err != nil {
		return
	}
	m.pending = p
	for _, e := range m.execs {
		m.cancelExecution(e)
	}
	m.log.Info("restarting every task", "reason", cause, "tasks", len(entry.RestartedTasks))
}

// rescaledGraph returns g with every vertex whose parallelism is not fixed by the spec at
// parallelism n, and whether anything changed. Forward edges between vertices of different
// parallelism become rebalancing ones, as the spec's planning makes them.
func rescaledGraph(g *pb.JobGraph, n int32) (*pb.JobGraph, bool, error) {
	if n < 1 || n > state.UpperBoundMaxParallelism {
		return nil, false, fmt.Errorf("%w: parallelism must be between 1 and %d, got %d", ErrInvalidArgument, state.UpperBoundMaxParallelism, n)
	}
	out := proto.CloneOf(g)
	changed, scalable := false, false
	for _, v := range out.GetVertices() {
		if v.GetFixedParallelism() {
			continue
		}
		scalable = true
		if n > v.GetMaxParallelism() {
			return nil, false, fmt.Errorf("%w: parallelism %d is above the max parallelism %d of %q (%s): its keyed state has %d key groups",
				ErrInvalidArgument, n, v.GetMaxParallelism(), v.GetName(), config.MaxParallelism, v.GetMaxParallelism())
		}
		if v.GetParallelism() != n {
			v.Parallelism, changed = n, true
		}
	}
	if !scalable {
		return nil, false, fmt.Errorf("%w: every operator's parallelism is set in the spec (or is 1 by its type); nothing to rescale", ErrInvalidArgument)
	}
	for _, e := range out.GetEdges() {
		src, dst := out.GetVertices()[e.GetSource()], out.GetVertices()[e.GetTarget()]
		if e.GetPartitioner() == pb.Partitioner_PARTITIONER_FORWARD && src.GetParallelism() != dst.GetParallelism() {
			e.Partitioner = pb.Partitioner_PARTITIONER_REBALANCE
		}
	}
	return out, changed, nil
}

// restoreFrom checks that a job can start from the snapshot a submission names and returns the
// record that makes it the job's first retained checkpoint. The snapshot is verified (every
// file's size and checksum) before anything is recorded; its state is matched to the job's
// operators by uid. The graph's max parallelism is the snapshot's where the spec did not set
// one (as Flink keeps a restored max parallelism).
func restoreFrom(ctx context.Context, g *pb.JobGraph, req *pb.SubmitJobRequest, s3 storage.S3Settings) (*pb.CompletedCheckpoint, error) {
	snap, err := storage.OpenSnapshotAt(ctx, req.GetRestorePath(), s3)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrInvalidRestore, req.GetRestorePath(), err)
	}
	md := snap.Metadata
	vertexOf := vertexByUID(g)
	var missing []string
	restoredMaxP := map[*pb.JobVertex]int32{}
	var size int64
	for _, st := range md.GetStates() {
		size += st.GetKeyed().GetFile().GetSize()
		v, ok := vertexOf[st.GetOperator()]
		if !ok {
			if hasState(st) && !slices.Contains(missing, st.GetOperator()) {
				missing = append(missing, st.GetOperator())
			}
			continue
		}
		if st.GetKeyed() != nil {
			restoredMaxP[v] = st.GetMaxParallelism()
		}
	}
	if len(missing) > 0 && !req.GetAllowNonRestoredState() {
		slices.Sort(missing)
		return nil, fmt.Errorf("%w %s: it holds state of operator uid(s) %q that the job does not have; give those operators their uid back, or skip that state with -n (--allow-non-restored-state)",
			ErrInvalidRestore, snap.Dir, missing)
	}
	_, maxPSet := g.GetJobConfig()[config.MaxParallelism]
	for _, v := range g.GetVertices() {
		mp, ok := restoredMaxP[v]
		if !ok || mp == v.GetMaxParallelism() {
			continue
		}
		if maxPSet {
			return nil, fmt.Errorf("%w %s: %s changed: the keyed state of %q has %d key groups (max parallelism %d), the job sets %d; keyed state cannot be restored into another number of key groups",
				ErrInvalidRestore, snap.Dir, config.MaxParallelism, v.GetName(), mp, mp, v.GetMaxParallelism())
		}
		if v.GetParallelism() > mp {
			return nil, fmt.Errorf("%w %s: %q has parallelism %d, above the snapshot's max parallelism %d (its number of key groups)",
				ErrInvalidRestore, snap.Dir, v.GetName(), v.GetParallelism(), mp)
		}
		v.MaxParallelism = mp
	}
	if err := checkKeyTypes(ctx, g, vertexOf, snap); err != nil {
		return nil, err
	}
	if err := checkUnalignedRestore(g, md.GetCheckpointId(), md); err != nil {
		return nil, fmt.Errorf("%s: %w", snap.Dir, err)
	}
	inFlight := channelStateBytes(md)
	return &pb.CompletedCheckpoint{
		Id: md.GetCheckpointId(), Path: snap.Path, BaseDir: snap.Root, TriggerTime: timestamppb.New(time.UnixMilli(md.GetTriggerTimeMs())),
		CompletionTime: timestamppb.New(time.UnixMilli(md.GetTriggerTimeMs())), StateSizeBytes: size + inFlight,
		Savepoint: md.GetSavepoint(), NotOwned: req.GetClaimMode() != pb.ClaimMode_CLAIM_MODE_CLAIM,
		Unaligned: hasChannelState(md), InFlightBytes: inFlight,
	}, nil
}

// hasState reports whether an operator's snapshot holds anything (stateless operators have
// an empty entry).
func hasState(st *pb.OperatorSubtaskState) bool {
	if st.GetKeyed() != nil || st.GetChannelState() != nil {
		return true
	}
	for _, l := range st.GetLists() {
		if len(l.GetElements()) > 0 {
			return true
		}
	}
	return false
}

// vertexByUID maps each operator's uid to the vertex that runs it.
func vertexByUID(g *pb.JobGraph) map[string]*pb.JobVertex {
	vertexOf := map[string]*pb.JobVertex{}
	for _, v := range g.GetVertices() {
		for _, op := range v.GetOperators() {
			vertexOf[storage.OperatorUID(op)] = v
		}
	}
	return vertexOf
}

// checkKeyTypes refuses a snapshot whose keyed state has another key type than the vertex
// that restores it is keyed by (vertexOf: vertexByUID of g).
func checkKeyTypes(ctx context.Context, g *pb.JobGraph, vertexOf map[string]*pb.JobVertex, snap *storage.Snapshot) error {
	keyOf := map[int32]*pb.JobEdge{}
	for _, e := range g.GetEdges() {
		if e.GetPartitioner() == pb.Partitioner_PARTITIONER_HASH {
			keyOf[e.GetTarget()] = e
		}
	}
	checked := map[string]bool{}
	for _, st := range snap.Metadata.GetStates() {
		v, h := vertexOf[st.GetOperator()], st.GetKeyed().GetFile()
		if v == nil || h == nil || checked[st.GetOperator()] {
			continue
		}
		checked[st.GetOperator()] = true
		e := keyOf[v.GetId()]
		if e == nil {
			return fmt.Errorf("%w %s: operator uid %q has keyed state, but %q is not keyed in this job", ErrInvalidRestore, snap.Dir, st.GetOperator(), v.GetName())
		}
		t, err := snapshotKeyType(ctx, snap, h)
		if err != nil {
			return fmt.Errorf("%w %s: %w", ErrInvalidRestore, snap.Dir, err)
		}
		if want := record.TypeFromProto(e.GetKeyType()); t != want {
			return fmt.Errorf("%w %s: the keyed state of operator uid %q is keyed by %s, the job keys %q by %s (%s); a changed key type cannot be restored",
				ErrInvalidRestore, snap.Dir, st.GetOperator(), t, v.GetName(), want, e.GetKey())
		}
	}
	return nil
}

// snapshotKeyType reads the key type of the keyed state file h of snap (local or on S3).
func snapshotKeyType(ctx context.Context, snap *storage.Snapshot, h *pb.FileHandle) (record.Type, error) {
	f, err := snap.Files.OpenFile(ctx, h)
	if err != nil {
		return record.Invalid, err
	}
	defer f.Close()
	return state.ReadSnapshotKeyType(f, storage.JoinPath(snap.Root, h.GetPath()))
}

// triggerSavepoint takes a savepoint of a running job (with stop: stops the job with it) and
// waits for its outcome; a stop also waits for the job's end.
func (d *dispatcher) triggerSavepoint(ctx context.Context, req *pb.TriggerSavepointRequest) (*pb.TriggerSavepointResponse, error) {
	id := req.GetJobId()
	m, err := d.liveMaster(id, "savepoint")
	if err != nil {
		return nil, err
	}
	if t := req.GetTargetDirectory(); t != "" {
		if !storage.IsURI(t) && !filepath.IsAbs(t) {
			return nil, fmt.Errorf("savepoint of job %s: %w: directory %q is not an absolute path or an s3:// location", id, ErrInvalidArgument, t)
		}
		if err := d.paths.checkLocation("savepoint directory", t); err != nil {
			return nil, fmt.Errorf("savepoint of job %s: %w", id, err)
		}
	}
	// An s3:// target, given or the job's default, is probed before anything is triggered:
	// a missing bucket, refused credentials or an endpoint that does not answer fail the
	// request, naming the location, and the job goes on untouched.
	rec, _ := d.fsm.job(id)
	if t := cmp.Or(req.GetTargetDirectory(), rec.GetGraph().GetConfig()[config.SavepointDir]); storage.IsURI(t) {
		if err := d.probeLocation(ctx, "savepoint directory", t); err != nil {
			return nil, fmt.Errorf("savepoint of job %s: %w", id, err)
		}
	}
	reply := make(chan checkpointResult, 1)
	m.send(evTriggerCheckpoint{reply: reply, savepoint: req})
	var r checkpointResult
	select {
	case r = <-reply:
	case <-m.done:
		return nil, fmt.Errorf("savepoint of job %s: %w", id, ErrJobTerminal)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if r.err != nil {
		if r.info != nil || errors.Is(r.err, errNotTriggered) {
			return nil, fmt.Errorf("%w: job %s: %w", ErrSavepointFailed, id, r.err)
		}
		return nil, r.err
	}
	resp := &pb.TriggerSavepointResponse{SavepointPath: r.info.GetPath(), Checkpoint: r.info}
	if !req.GetStop() {
		return resp, nil
	}
	for {
		w := d.fsm.watch()
		rec, ok := d.fsm.job(id)
		if !ok || isTerminalJob(rec.GetStatus()) {
			if s := rec.GetStatus(); s != pb.JobStatus_JOB_STATUS_FINISHED {
				return nil, fmt.Errorf("job %s ended %s after its stop savepoint %s completed: %s", id, statusName(s), resp.GetSavepointPath(), rec.GetFailureCause())
			}
			// The end is committed; the job master publishes it in the job's details (its
			// tasks' final states too) as it stops: a caller reads the job FINISHED afterwards.
			select {
			case <-m.done:
				return resp, nil
			case <-ctx.Done():
				return nil, fmt.Errorf("savepoint %s completed and the job finished; its job master was still stopping: %w", resp.GetSavepointPath(), ctx.Err())
			}
		}
		select {
		case <-w:
		case <-ctx.Done():
			return nil, fmt.Errorf("savepoint %s completed; the job was still ending: %w", resp.GetSavepointPath(), ctx.Err())
		}
	}
}

// rescale changes a running job's parallelism: an aligned checkpoint first (the job keeps
// running during it), then the job master redeploys from it.
func (d *dispatcher) rescale(ctx context.Context, id string, n int32) (int64, error) {
	m, err := d.liveMaster(id, "rescale")
	if err != nil {
		return 0, err
	}
	rec, _ := d.fsm.job(id)
	if _, _, err := rescaledGraph(rec.GetGraph(), n); err != nil {
		return 0, fmt.Errorf("rescale job %s: %w", id, err)
	}
	// Aligned: an unaligned checkpoint's channel state restores only at its parallelism.
	info, err := d.triggerCheckpointOf(ctx, id, true)
	if err != nil {
		return 0, fmt.Errorf("rescale job %s: the checkpoint to rescale from failed: %w", id, err)
	}
	reply := make(chan error, 1)
	m.send(evRescale{parallelism: n, reply: reply})
	select {
	case err := <-reply:
		return info.GetId(), err
	case <-m.done:
		return 0, fmt.Errorf("rescale job %s: %w", id, ErrJobTerminal)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// liveMaster returns the job master of a job that has not ended.
func (d *dispatcher) liveMaster(id, op string) (*jobMaster, error) {
	rec, ok := d.fsm.job(id)
	if !ok {
		return nil, fmt.Errorf("job %s: %w", id, ErrJobNotFound)
	}
	if isTerminalJob(rec.GetStatus()) {
		return nil, fmt.Errorf("%s job %s: %w (it is %s)", op, id, ErrJobTerminal, statusName(rec.GetStatus()))
	}
	m := d.master(id)
	if m == nil {
		return nil, fmt.Errorf("%s job %s: %w", op, id, ErrNoLeader)
	}
	return m, nil
}

// rescaleJob records a job's new graph through Raft (jobHost).
func (d *dispatcher) rescaleJob(jobID string, g *pb.JobGraph) error {
	cmd := &pb.RaftCommand{Op: &pb.RaftCommand_RescaleJob{RescaleJob: &pb.RescaleJobCommand{JobId: jobID, Graph: g}}}
	_, err := d.node.apply(cmd, applyTimeout)
	return err
}

// disposeSavepoint deletes a savepoint: a local one, or every object of one on S3 (reached
// with s3).
func disposeSavepoint(ctx context.Context, p string, s3 storage.S3Settings) (string, error) {
	if !storage.IsURI(p) && !filepath.IsAbs(p) {
		return "", fmt.Errorf("%w: savepoint path %q is not absolute", ErrInvalidArgument, p)
	}
	dir, err := storage.DisposeSavepointAt(ctx, p, s3)
	if errors.Is(err, storage.ErrNotSnapshot) || (err != nil && !errors.Is(err, os.ErrPermission) && !isStorageFailure(err)) {
		return "", fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	return dir, err
}

// isStorageFailure reports whether err is an S3 location's failure (a missing bucket, refused
// credentials, an endpoint down), which maps to its own status.
func isStorageFailure(err error) bool {
	return errors.Is(err, storage.ErrNoSuchBucket) || errors.Is(err, storage.ErrAccessDenied) || errors.Is(err, storage.ErrUnreachable)
}

package coordinator

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/failover"
	"github.com/goflink/goflink/internal/execid"
	"github.com/goflink/goflink/job"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/storage"
)

// applyTimeout bounds one Raft proposal.
const applyTimeout = 10 * time.Second

// dispatcher runs one job master per non-terminal job while this JobManager leads. It submits
// jobs through Raft, routes task reports and TaskManager losses to the job masters, and serves
// job views. Safe for concurrent use.
type dispatcher struct {
	node     *raftNode
	fsm      *fsm
	rm       *resourceManager
	log      *slog.Logger
	defaults *config.Config
	// s3 configures the s3:// checkpoint locations of jobs (the JobManager's s3.* keys).
	s3        storage.S3Settings
	operators *operator.Registry
	// historySize bounds each job's exception history (web.exception-history-size); set
	// before the dispatcher is used.
	historySize int
	paths       jobPaths

	// submitMu guards reserved: the sink directories of the submissions between the check
	// that no job writes into them and their record in Raft, so that two submissions at once
	// cannot both take one directory.
	submitMu sync.Mutex
	reserved map[string]string // resolved directory → the name of the job being submitted

	mu      sync.Mutex
	ctx     context.Context // the current leadership; nil while not leading
	leader  leaderInfo      // this JobManager and the term of the current leadership
	masters map[string]*jobMaster
	wg      sync.WaitGroup

	notifyMu sync.Mutex    // guards changed only; taken with no other lock held (LOCKORDER.md)
	changed  chan struct{} // closed and replaced when any job view changes
}

func newDispatcher(node *raftNode, f *fsm, rm *resourceManager, log *slog.Logger, defaults *config.Config, ops *operator.Registry, paths jobPaths) *dispatcher {
	return &dispatcher{node: node, fsm: f, rm: rm, log: log, defaults: defaults, operators: ops, paths: paths,
		masters: map[string]*jobMaster{}, reserved: map[string]string{}, changed: make(chan struct{})}
}

// leaderInfo names a leadership: the leading JobManager's Raft node ID and its term.
type leaderInfo struct {
	id   string
	term uint64
}

// start begins leading in the given leadership: every job that has not ended runs again, from
// its latest checkpoint.
func (d *dispatcher) start(ctx context.Context, leader leaderInfo) {
	d.mu.Lock()
	d.ctx, d.leader = ctx, leader
	d.mu.Unlock()
	for _, rec := range d.fsm.list() {
		if isTerminalJob(rec.GetStatus()) {
			continue
		}
		d.log.Info("recovering job", "job_id", rec.GetId(), "status", rec.GetStatus())
		if err := d.launch(rec); err != nil {
			d.log.Error("cannot recover job", "job_id", rec.GetId(), "err", err)
		}
	}
}

// stop ends leading: every job master stops without changing its job's status.
func (d *dispatcher) stop() {
	d.mu.Lock()
	d.ctx = nil
	masters := d.masters
	d.masters = map[string]*jobMaster{}
	d.mu.Unlock()
	for _, m := range masters {
		m.stop()
	}
	d.wg.Wait()
}

// launch starts a job master for a job unless one runs already. The job master is built
// outside d.mu: building it publishes its first view, which takes notifyMu (LOCKORDER.md).
func (d *dispatcher) launch(rec *pb.JobRecord) error {
	d.mu.Lock()
	ctx, leader := d.ctx, d.leader
	_, running := d.masters[rec.GetId()]
	d.mu.Unlock()
	if ctx == nil {
		return ErrNotLeader
	}
	if running {
		return nil
	}
	m, err := newJobMaster(ctx, rec, leader, d.defaults, d, d.rm, d.log)
	if m != nil {
		m.s3 = d.s3
	}
	if err != nil {
		return err
	}
	m.historySize = d.historySize
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ctx != ctx { // the leadership ended meanwhile; a new one recovers the job itself
		m.cancel()
		return ErrNotLeader
	}
	if _, running := d.masters[rec.GetId()]; running { // launched meanwhile (start and submit)
		m.cancel()
		return nil
	}
	d.masters[rec.GetId()] = m
	d.wg.Go(m.run)
	return nil
}

// probeTimeout bounds one probe at submit: of an S3 location, or a TaskManager's probe of
// the job's operators (probeOperators), which asks probeTaskManagers at most.
const (
	probeTimeout      = 30 * time.Second
	probeTaskManagers = 3
)

// probeLocation checks that the JobManager can write, read and delete in the s3:// location
// loc (storage.Probe), which what names in errors.
func (d *dispatcher) probeLocation(ctx context.Context, what, loc string) error {
	fsys, err := storage.Open(loc, d.s3)
	if err != nil {
		return fmt.Errorf("%w: %s %q: %w", ErrInvalidArgument, what, loc, err)
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if err := storage.Probe(ctx, fsys); err != nil {
		return fmt.Errorf("%s %q is not usable: %w", what, loc, err)
	}
	return nil
}

// probeCheckpointDir checks that the JobManager can write, read and delete in a job's s3://
// checkpoint directory (storage.Probe), so that a missing bucket, refused credentials or an
// endpoint that does not answer refuse the job at submit, before anything is scheduled. A
// local directory is created when the first checkpoint is written, as before.
func (d *dispatcher) probeCheckpointDir(g *pb.JobGraph) error {
	dir := g.GetConfig()[config.CheckpointDir]
	if !storage.IsURI(dir) {
		return nil
	}
	return d.probeLocation(context.Background(), config.CheckpointDir, dir)
}

// probeSinkLocations probes, as probeCheckpointDir does, every s3:// location a sink of the
// job writes into (the file sink's path; operator.LocationNamer), so that a missing bucket
// or refused credentials refuse the job at submit instead of failing its tasks at open.
func (d *dispatcher) probeSinkLocations(g *pb.JobGraph) error {
	for _, v := range g.GetVertices() {
		for _, op := range v.GetOperators() {
			locs, err := d.operators.Locations(op)
			if err != nil {
				return err
			}
			for _, l := range locs {
				what := fmt.Sprintf("operator %q (line %d), field %s", op.GetName(), op.GetLine(), l.Field)
				if err := d.probeLocation(context.Background(), what, l.URI); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// probeOperators has a TaskManager probe the operators of the job whose types check the
// external systems they connect to (operator.Type.Probed: a PostgreSQL table's columns, the
// server's settings), so that a missing table, a wrong password or a server that is not set
// up refuse the job at submit, in the words of a spec error, rather than fail its tasks. The
// JobManager plans specs without the connectors' clients and without the secrets the
// TaskManagers hold (a password-file), so it asks the first of up to probeTaskManagers
// that answers. With none registered, or none answering, the job is submitted unprobed (its
// tasks report what is wrong) and the JobManager logs why.
func (d *dispatcher) probeOperators(name string, g *pb.JobGraph) error {
	var ops []*pb.Operator
	for _, v := range g.GetVertices() {
		for _, op := range v.GetOperators() {
			if d.operators.Probed(op) {
				ops = append(ops, op)
			}
		}
	}
	if len(ops) == 0 {
		return nil
	}
	tms := d.rm.ready()
	if len(tms) == 0 {
		d.log.Warn("job submitted without probing its connectors: no TaskManager is registered", "name", name)
		return nil
	}
	// Each TaskManager that does not answer costs up to probeTimeout: ask a few at most.
	for _, tm := range tms[:min(len(tms), probeTaskManagers)] {
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		resp, err := tm.client.ProbeOperators(ctx, &pb.ProbeOperatorsRequest{RegistrationId: tm.regID, LeaderTerm: tm.term, Operators: ops})
		cancel()
		if err != nil {
			d.log.Warn("probing the job's connectors failed on a TaskManager", "name", name, "taskmanager", tm.describe(), "err", err)
			continue
		}
		if len(resp.GetProblems()) == 0 {
			return nil
		}
		e := &job.SpecError{}
		for _, p := range resp.GetProblems() {
			e.Problems = append(e.Problems, job.Problem{Line: int(p.GetLine()), Path: strconv.Quote(p.GetOperator()), Msg: p.GetMessage()})
		}
		return e
	}
	d.log.Warn("job submitted without probing its connectors: no TaskManager answered", "name", name, "asked", min(len(tms), probeTaskManagers))
	return nil
}

// randomHex returns n random bytes in hex: a job ID (16) or a TaskManager registration ID (8).
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// submit validates a spec, records the job through Raft and starts it.
func (d *dispatcher) submit(req *pb.SubmitJobRequest) (string, error) {
	graph, err := job.Build(job.Request{
		Spec: req.GetSpec(), SpecName: req.GetSpecName(), Overrides: req.GetConfig(), Parallelism: int(req.GetParallelism()),
	}, job.Env{Defaults: d.defaults, Operators: d.operators})
	if err != nil {
		return "", err
	}
	if err := resolveCheckpointDir(graph, d.paths.defaultCheckpointDir); err != nil {
		return "", err
	}
	outputs, err := d.paths.checkGraph(graph, d.operators)
	if err != nil {
		return "", err
	}
	if p := req.GetRestorePath(); p != "" {
		if err := d.paths.checkLocation("restore path (-s)", p); err != nil {
			return "", err
		}
	}
	if err := validateRestartStrategy(graph, d.defaults); err != nil {
		return "", err
	}
	if err := validateRetention(graph); err != nil {
		return "", err
	}
	if err := validateUnaligned(graph); err != nil {
		return "", err
	}
	if err := d.probeCheckpointDir(graph); err != nil {
		return "", err
	}
	if err := d.probeSinkLocations(graph); err != nil {
		return "", err
	}
	if err := d.probeOperators(graph.GetName(), graph); err != nil {
		return "", err
	}
	var restore *pb.CompletedCheckpoint
	if req.GetRestorePath() != "" {
		if graph.GetConfig()[config.CheckpointInterval] == "" {
			return "", fmt.Errorf("%w %s: the job does not take checkpoints (set %s)", ErrInvalidRestore, req.GetRestorePath(), config.CheckpointInterval)
		}
		// Verification reads every state file; the S3 client's retries bound a location that
		// does not answer.
		if restore, err = restoreFrom(context.Background(), graph, req, d.s3); err != nil {
			return "", err
		}
	}
	id := randomHex(16)
	cmd := &pb.RaftCommand{Op: &pb.RaftCommand_SubmitJob{SubmitJob: &pb.SubmitJobCommand{JobId: id, Graph: graph, Restore: restore}}}
	if err := d.record(cmd, graph.GetName(), outputs); err != nil {
		return "", err
	}
	rec, ok := d.fsm.job(id)
	if !ok {
		return "", fmt.Errorf("job %s vanished after it was recorded", id)
	}
	d.log.Info("job submitted", "job_id", id, "name", graph.GetName(), "restore", req.GetRestorePath())
	if err := d.launch(rec); err != nil {
		return "", err
	}
	return id, nil
}

// record commits a job submission through Raft, once no job that has not ended, and no
// other submission under way, writes into its sinks' directories. They stay reserved until
// the job is in the replicated state (or its record failed).
func (d *dispatcher) record(cmd *pb.RaftCommand, name string, outputs []outputDir) error {
	if err := d.reserve(name, outputs); err != nil {
		return err
	}
	defer func() {
		d.submitMu.Lock()
		for _, o := range outputs {
			delete(d.reserved, o.dir)
		}
		d.submitMu.Unlock()
	}()
	if _, err := d.node.apply(cmd, applyTimeout); err != nil {
		return fmt.Errorf("record job: %w", err)
	}
	return nil
}

// reserve checks that no job that has not ended and no submission under way writes into
// outputs, and reserves them.
func (d *dispatcher) reserve(name string, outputs []outputDir) error {
	d.submitMu.Lock()
	defer d.submitMu.Unlock()
	// Under submitMu: a submission that reserved before is in the list once it unreserved.
	if err := d.paths.checkOutputsFree(outputs, d.fsm.list(), d.operators); err != nil {
		return err
	}
	var errs []error
	for _, o := range outputs {
		if other, ok := d.reserved[o.dir]; ok {
			errs = append(errs, fmt.Errorf("%w: operator %q (line %d), field %s: %s is the output of a sink of job %q, which is being submitted",
				ErrOutputInUse, o.operator, o.line, o.field, o.dir, other))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, o := range outputs {
		d.reserved[o.dir] = name
	}
	return nil
}

// validateRestartStrategy checks the job's restart strategy settings across keys (initial
// backoff not above the maximum, …) before anything is recorded.
func validateRestartStrategy(g *pb.JobGraph, cluster *config.Config) error {
	cfg := config.New()
	if err := cfg.SetAll(g.GetConfig()); err != nil {
		return fmt.Errorf("%w: %w", job.ErrInvalidSpec, err)
	}
	if _, err := restartStrategy(g, cluster, checkpointSettingsFrom(cfg).enabled()); err != nil {
		return fmt.Errorf("%w: %w", job.ErrInvalidSpec, err)
	}
	jobLayer := config.New()
	_ = jobLayer.SetAll(g.GetJobConfig()) // checked by restartStrategy
	if unread := failover.Unread(jobLayer); len(unread) > 0 {
		chosen := "the default restart strategy (exponential-delay with its built-in settings with checkpointing, none without)"
		if cluster != nil && cluster.IsSet(config.RestartStrategy) {
			chosen = fmt.Sprintf("the cluster's restart strategy (%s = %s), which takes its parameters from the cluster's configuration",
				config.RestartStrategy, cluster.String(config.RestartStrategy))
		}
		return fmt.Errorf("%w: %s set for the job would be ignored: the job sets no %s, so %s, as in Flink; set %s for the job too",
			job.ErrInvalidSpec, strings.Join(unread, ", "), config.RestartStrategy, chosen, config.RestartStrategy)
	}
	return nil
}

// maxNumRetained bounds execution.checkpointing.num-retained at submit: every retained
// checkpoint is a record in the replicated state of every JobManager (and in every Raft
// snapshot) and a directory the job keeps, and a fallback from a corrupt checkpoint needs one
// or two. It is checked at submit only, so that jobs recorded by earlier versions recover.
const maxNumRetained = 100

// validateRetention checks the job's execution.checkpointing.num-retained against
// maxNumRetained.
func validateRetention(g *pb.JobGraph) error {
	cfg := config.New()
	if err := cfg.SetAll(g.GetConfig()); err != nil {
		return fmt.Errorf("%w: %w", job.ErrInvalidSpec, err)
	}
	if n := cfg.Int(config.CheckpointNumRetained); n > maxNumRetained {
		return fmt.Errorf("%w: config key %q: %d is above the maximum %d", job.ErrInvalidSpec, config.CheckpointNumRetained, n, maxNumRetained)
	}
	return nil
}

// validateUnaligned checks execution.checkpointing.unaligned against the keys it cannot be
// combined with, as Flink does: unaligned checkpoints exist for exactly-once only, and one at
// a time (a second one's barriers would overtake the first's channel state).
func validateUnaligned(g *pb.JobGraph) error {
	cfg := config.New()
	if err := cfg.SetAll(g.GetConfig()); err != nil {
		return fmt.Errorf("%w: %w", job.ErrInvalidSpec, err)
	}
	if !cfg.Bool(config.CheckpointUnaligned) {
		return nil
	}
	var errs []error
	if n := cfg.Int(config.CheckpointMaxConcurrent); n > 1 {
		errs = append(errs, fmt.Errorf("%w: %s = true needs %s = 1, got %d: unaligned checkpoints are taken one at a time",
			job.ErrInvalidSpec, config.CheckpointUnaligned, config.CheckpointMaxConcurrent, n))
	}
	if m := cfg.String(config.CheckpointMode); m != "EXACTLY_ONCE" {
		errs = append(errs, fmt.Errorf("%w: %s = true needs %s = EXACTLY_ONCE, got %s: unaligned checkpoints exist for exactly-once only (at-least-once does not align at all)",
			job.ErrInvalidSpec, config.CheckpointUnaligned, config.CheckpointMode, m))
	}
	return errors.Join(errs...)
}

// restartStrategy selects a job's restart strategy by Flink's rule, from the job's own keys
// over the cluster configuration (failover.NewRestartStrategy, which validates the strategy of
// the layer whose type it takes: the job's own whenever the job sets one).
func restartStrategy(g *pb.JobGraph, cluster *config.Config, checkpointing bool) (failover.RestartStrategy, error) {
	jobLayer := config.New()
	if err := jobLayer.SetAll(g.GetJobConfig()); err != nil {
		return nil, err
	}
	return failover.NewRestartStrategy(jobLayer, cluster, checkpointing, nil)
}

// resolveCheckpointDir fixes the checkpoint directory of a job that takes checkpoints: the
// configured one made absolute (tasks on other processes must find the same place), or the
// JobManager's default (jobPaths).
func resolveCheckpointDir(g *pb.JobGraph, defaultDir string) error {
	if g.GetConfig()[config.CheckpointInterval] == "" {
		return nil
	}
	dir := cmp.Or(g.GetConfig()[config.CheckpointDir], defaultDir)
	abs := dir
	if storage.IsURI(dir) {
		if err := storage.CheckLocation(dir); err != nil {
			return fmt.Errorf("%w: %s %q: %w", ErrInvalidArgument, config.CheckpointDir, dir, err)
		}
	} else {
		var err error
		if abs, err = filepath.Abs(dir); err != nil {
			return fmt.Errorf("%s %q: %w", config.CheckpointDir, dir, err)
		}
	}
	if g.Config == nil {
		g.Config = map[string]string{}
	}
	g.Config[config.CheckpointDir] = abs
	if sp := g.GetConfig()[config.SavepointDir]; storage.IsURI(sp) {
		if err := storage.CheckLocation(sp); err != nil {
			return fmt.Errorf("%w: %s %q: %w", ErrInvalidArgument, config.SavepointDir, sp, err)
		}
	} else if sp != "" {
		abs, err := filepath.Abs(sp)
		if err != nil {
			return fmt.Errorf("%s %q: %w", config.SavepointDir, sp, err)
		}
		g.Config[config.SavepointDir] = abs
	}
	return nil
}

// setJobStatus commits a job status change and returns the job's record after it (jobHost).
func (d *dispatcher) setJobStatus(_ context.Context, jobID string, s pb.JobStatus, cause string) (*pb.JobRecord, error) {
	cmd := &pb.RaftCommand{Op: &pb.RaftCommand_UpdateJobStatus{UpdateJobStatus: &pb.UpdateJobStatusCommand{JobId: jobID, Status: s, FailureCause: cause}}}
	if _, err := d.node.apply(cmd, applyTimeout); err != nil {
		return nil, err
	}
	rec, ok := d.fsm.job(jobID)
	if !ok {
		return nil, fmt.Errorf("job %s: %w", jobID, ErrJobNotFound)
	}
	return rec, nil
}

// allocateCheckpointIDs reserves the job's next count checkpoint IDs from the replicated
// counter and returns the first (jobHost).
func (d *dispatcher) allocateCheckpointIDs(jobID string, count int) (int64, error) {
	cmd := &pb.RaftCommand{Op: &pb.RaftCommand_AllocateCheckpointId{AllocateCheckpointId: &pb.AllocateCheckpointIdCommand{JobId: jobID, Count: int32(count)}}}
	res, err := d.node.apply(cmd, applyTimeout)
	if err != nil {
		return 0, err
	}
	first, ok := res.(int64)
	if !ok {
		return 0, fmt.Errorf("allocate checkpoint ID: unexpected result %T", res)
	}
	return first, nil
}

// completeCheckpoint commits a completed checkpoint through Raft: the commit point of the
// checkpoint (jobHost). It returns the checkpoints the store subsumed.
func (d *dispatcher) completeCheckpoint(jobID string, cp *pb.CompletedCheckpoint, numRetained int, savepointOnly bool) ([]*pb.CompletedCheckpoint, error) {
	cmd := &pb.RaftCommand{Op: &pb.RaftCommand_CompleteCheckpoint{CompleteCheckpoint: &pb.CompleteCheckpointCommand{
		JobId: jobID, Checkpoint: cp, NumRetained: int32(numRetained), SavepointOnly: savepointOnly}}}
	res, err := d.node.apply(cmd, applyTimeout)
	if err != nil {
		return nil, err
	}
	subsumed, _ := res.([]*pb.CompletedCheckpoint)
	return subsumed, nil
}

// jobRecord returns the replicated record of a job (jobHost).
func (d *dispatcher) jobRecord(id string) (*pb.JobRecord, bool) { return d.fsm.job(id) }

// checkpoints returns a job's checkpoint history, newest first.
func (d *dispatcher) checkpoints(id string) ([]*pb.CheckpointInfo, error) {
	rec, ok := d.fsm.job(id)
	if !ok {
		return nil, fmt.Errorf("job %s: %w", id, ErrJobNotFound)
	}
	var out []*pb.CheckpointInfo
	if m := d.master(id); m != nil {
		out = slices.Clone(m.view().checkpoints)
	} else {
		for _, cp := range slices.Backward(rec.GetCheckpoints()) {
			out = append(out, completedInfo(cp))
		}
	}
	// The job's savepoints, also those of earlier leaders and runs.
	seen := map[int64]bool{}
	for _, c := range out {
		if c.GetStatus() == pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED {
			seen[c.GetId()] = true
		}
	}
	for _, sp := range rec.GetSavepoints() {
		if !seen[sp.GetId()] {
			out = append(out, completedInfo(sp))
		}
	}
	slices.SortStableFunc(out, func(a, b *pb.CheckpointInfo) int {
		return b.GetTriggerTime().AsTime().Compare(a.GetTriggerTime().AsTime())
	})
	return out, nil
}

// triggerCheckpoint triggers a checkpoint of a running job and waits for its outcome.
func (d *dispatcher) triggerCheckpoint(ctx context.Context, id string) (*pb.CheckpointInfo, error) {
	return d.triggerCheckpointOf(ctx, id, false)
}

// triggerCheckpointOf triggers a checkpoint of a job, aligned (also for a job whose
// checkpoints are unaligned) when asked, and waits for its outcome.
func (d *dispatcher) triggerCheckpointOf(ctx context.Context, id string, aligned bool) (*pb.CheckpointInfo, error) {
	rec, ok := d.fsm.job(id)
	if !ok {
		return nil, fmt.Errorf("job %s: %w", id, ErrJobNotFound)
	}
	if isTerminalJob(rec.GetStatus()) {
		return nil, fmt.Errorf("checkpoint job %s: %w (it is %s)", id, ErrJobTerminal, statusName(rec.GetStatus()))
	}
	m := d.master(id)
	if m == nil {
		return nil, fmt.Errorf("checkpoint job %s: %w", id, ErrNoLeader)
	}
	reply := make(chan checkpointResult, 1)
	m.send(evTriggerCheckpoint{reply: reply, aligned: aligned})
	select {
	case r := <-reply:
		return r.info, r.err
	case <-m.done:
		return nil, fmt.Errorf("checkpoint job %s: %w", id, ErrJobTerminal)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// notify wakes watchers (jobHost).
func (d *dispatcher) notify() {
	d.notifyMu.Lock()
	broadcast(&d.changed)
	d.notifyMu.Unlock()
}

func (d *dispatcher) watch() <-chan struct{} {
	d.notifyMu.Lock()
	defer d.notifyMu.Unlock()
	return d.changed
}

func (d *dispatcher) master(id string) *jobMaster {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.masters[id]
}

// allMasters returns the job masters, by job ID.
func (d *dispatcher) allMasters() []*jobMaster {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*jobMaster, 0, len(d.masters))
	for _, id := range slices.Sorted(maps.Keys(d.masters)) {
		out = append(out, d.masters[id])
	}
	return out
}

// cancel cancels a job.
func (d *dispatcher) cancel(ctx context.Context, id string) error {
	rec, ok := d.fsm.job(id)
	if !ok {
		return fmt.Errorf("job %s: %w", id, ErrJobNotFound)
	}
	if isTerminalJob(rec.GetStatus()) {
		return fmt.Errorf("cancel job %s: %w (it is %s)", id, ErrJobTerminal, statusName(rec.GetStatus()))
	}
	m := d.master(id)
	if m == nil {
		return fmt.Errorf("cancel job %s: %w", id, ErrNoLeader)
	}
	return m.requestCancel(ctx)
}

// details returns a job's current view.
func (d *dispatcher) details(id string) (*pb.JobDetails, error) {
	if m := d.master(id); m != nil {
		v := m.view()
		det := proto.CloneOf(v.details) // the view is shared; fill a copy
		for i, t := range det.GetTasks() {
			if r := d.rm.lastReport(v.regs[i], v.keys[i]); r != nil {
				t.RecordsIn, t.RecordsOut = max(t.RecordsIn, r.GetRecordsIn()), max(t.RecordsOut, r.GetRecordsOut())
				if t.GetStatus() == pb.ExecutionState_EXECUTION_STATE_RUNNING {
					t.Load = proto.CloneOf(r.GetLoad())
				}
			}
		}
		return det, nil
	}
	rec, ok := d.fsm.job(id)
	if !ok {
		return nil, fmt.Errorf("job %s: %w", id, ErrJobNotFound)
	}
	return &pb.JobDetails{Id: rec.GetId(), Name: rec.GetGraph().GetName(), Status: rec.GetStatus(), StartTime: rec.GetStartTime(),
		EndTime: rec.GetEndTime(), FailureCause: rec.GetFailureCause(), Restarts: max(rec.GetRuns()-1, 0),
		Parallelism: maxParallelism(rec.GetGraph()), Plan: planOf(rec.GetGraph())}, nil
}

// list summarizes every job, newest first.
func (d *dispatcher) list() []*pb.JobSummary {
	recs := d.fsm.list()
	out := make([]*pb.JobSummary, 0, len(recs))
	for _, r := range slices.Backward(recs) {
		out = append(out, &pb.JobSummary{Id: r.GetId(), Name: r.GetGraph().GetName(), Status: r.GetStatus(), StartTime: r.GetStartTime(), EndTime: r.GetEndTime()})
	}
	return out
}

// shouldCancel says whether a task a TaskManager reports running must be cancelled: its job
// or attempt is unknown here, or its job master has it cancelling, cancelled or failed (a
// CancelTask was lost or overtook its SubmitTask). Finished tasks are left alone: their
// partitions may still be read.
func (d *dispatcher) shouldCancel(regID string, id *pb.ExecutionAttemptID) bool {
	m := d.master(id.GetJobId())
	if m == nil {
		return true
	}
	v := m.view()
	key := execid.Key(id)
	for i, k := range v.keys {
		if k != key || v.regs[i] != regID {
			continue
		}
		switch v.details.GetTasks()[i].GetStatus() {
		case pb.ExecutionState_EXECUTION_STATE_CANCELING, pb.ExecutionState_EXECUTION_STATE_CANCELED, pb.ExecutionState_EXECUTION_STATE_FAILED:
			return true
		}
		return false
	}
	return true
}

// tmLost tells every job master that a TaskManager is gone.
func (d *dispatcher) tmLost(tm *taskManager, reason string) {
	d.mu.Lock()
	masters := slices.Collect(maps.Values(d.masters))
	d.mu.Unlock()
	for _, m := range masters {
		m.send(evTMLost{tm: tm, reason: reason})
	}
}

// statusName is a job status without its enum prefix: "RUNNING".
func statusName(s pb.JobStatus) string { return strings.TrimPrefix(s.String(), "JOB_STATUS_") }

// planOf is g as the dashboard draws it: vertices, their operators' names and types, and edges,
// without the operators' configuration (which may hold credentials).
func planOf(g *pb.JobGraph) *pb.JobPlan {
	p := &pb.JobPlan{}
	for _, v := range g.GetVertices() {
		pv := &pb.PlanVertex{Id: v.GetId(), Name: v.GetName(), Parallelism: v.GetParallelism()}
		for _, op := range v.GetOperators() {
			pv.Operators = append(pv.Operators, &pb.PlanOperator{Name: op.GetName(), Type: op.GetType()})
		}
		p.Vertices = append(p.Vertices, pv)
	}
	for _, e := range g.GetEdges() {
		p.Edges = append(p.Edges, &pb.PlanEdge{Source: e.GetSource(), Target: e.GetTarget(),
			Partitioner: strings.TrimPrefix(e.GetPartitioner().String(), "PARTITIONER_"), SideOutput: e.GetSideOutput()})
	}
	return p
}

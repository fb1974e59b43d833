// Package web serves a JobManager's dashboard and its JSON API on rest.port: Flink-like read
// paths (/overview, /jobs/overview, /jobs/{id}, /jobs/{id}/checkpoints, /jobs/{id}/exceptions,
// /taskmanagers), actions (cancel, trigger a checkpoint or a savepoint), and the dashboard's
// pages, embedded in the binary. Its data comes from the cluster's own gRPC API, so a follower
// serves it too: the JobManager forwards the calls to the leader.
package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// Cluster is what the API reads and does: the cluster's gRPC API (client.Client).
type Cluster interface {
	Cluster(ctx context.Context) (*pb.GetClusterResponse, error)
	List(ctx context.Context) ([]*pb.JobSummary, error)
	Job(ctx context.Context, id string) (*pb.JobDetails, error)
	Checkpoints(ctx context.Context, id string) ([]*pb.CheckpointInfo, error)
	Cancel(ctx context.Context, id string) error
	TriggerCheckpoint(ctx context.Context, id string) (*pb.CheckpointInfo, error)
	TriggerSavepoint(ctx context.Context, req *pb.TriggerSavepointRequest) (*pb.TriggerSavepointResponse, error)
}

// Limits of the API: a call to the cluster, and a request body (a savepoint's target).
const (
	callTimeout      = 10 * time.Second
	savepointTimeout = 10 * time.Minute
	maxBodyBytes     = 4 << 10
)

// api serves the JSON paths.
type api struct {
	cl  Cluster
	log *slog.Logger
}

// routes registers the API's paths on mux, each through guard (client authorization).
func (a *api) routes(mux *http.ServeMux, guard func(http.Handler) http.Handler) {
	handle := func(pattern string, timeout time.Duration, fn func(ctx context.Context, r *http.Request) (any, error)) {
		mux.Handle(pattern, guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), timeout)
			defer cancel()
			v, err := fn(ctx, r)
			if err != nil {
				a.writeError(w, r, err)
				return
			}
			writeJSON(w, http.StatusOK, v)
		})))
	}
	// job adapts a handler of one job: the path's ID, checked.
	job := func(fn func(ctx context.Context, id string, r *http.Request) (any, error)) func(context.Context, *http.Request) (any, error) {
		return func(ctx context.Context, r *http.Request) (any, error) {
			id, err := jobID(r)
			if err != nil {
				return nil, err
			}
			return fn(ctx, id, r)
		}
	}
	handle("GET /overview", callTimeout, a.overview)
	handle("GET /jobs/overview", callTimeout, a.jobsOverview)
	handle("GET /jobs/{id}", callTimeout, job(a.job))
	handle("GET /jobs/{id}/checkpoints", callTimeout, job(a.checkpoints))
	handle("GET /jobs/{id}/exceptions", callTimeout, job(a.exceptions))
	handle("GET /taskmanagers", callTimeout, a.taskManagers)
	handle("GET /jobmanagers", callTimeout, a.jobManagers)
	handle("POST /jobs/{id}/cancel", callTimeout, job(a.cancel))
	handle("POST /jobs/{id}/checkpoints", savepointTimeout, job(a.triggerCheckpoint))
	handle("POST /jobs/{id}/savepoints", savepointTimeout, job(a.triggerSavepoint))
}

// jsonErrors answers the mux's own errors (an unknown path, a method a path does not take) as
// the API's JSON errors; the pages and their assets keep the mux's answers.
func jsonErrors(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern == "" && r.URL.Path != "/" {
			// No route: find out whether the path has routes for other methods.
			probe := r.Clone(r.Context())
			allowed := []string{}
			for _, m := range []string{http.MethodGet, http.MethodPost} {
				probe.Method = m
				if _, p := mux.Handler(probe); p != "" {
					allowed = append(allowed, m)
				}
			}
			if len(allowed) > 0 {
				w.Header().Set("Allow", strings.Join(allowed, ", "))
				writeJSON(w, http.StatusMethodNotAllowed, map[string][]string{"errors": {r.Method + " " + r.URL.Path + ": method not allowed (" + strings.Join(allowed, ", ") + ")"}})
				return
			}
			writeJSON(w, http.StatusNotFound, map[string][]string{"errors": {r.URL.Path + ": not found"}})
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// jobID returns the request's job ID, refusing one that cannot be a job's.
func jobID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if id == "" || len(id) > 64 || strings.Trim(id, "0123456789abcdefABCDEF-") != "" {
		return "", badRequest("job ID %q is not a job ID (hexadecimal)", id)
	}
	return id, nil
}

type overviewJSON struct {
	TaskManagers   int `json:"taskmanagers"`
	SlotsTotal     int `json:"slots_total"`
	SlotsAvailable int `json:"slots_available"`
	JobsRunning    int `json:"jobs_running"`
	JobsFinished   int `json:"jobs_finished"`
	JobsCancelled  int `json:"jobs_cancelled"`
	JobsFailed     int `json:"jobs_failed"`
	// JobManagers are the Raft group's members with their roles.
	JobManagers []jobManagerJSON `json:"jobmanagers"`
}

func (a *api) overview(ctx context.Context, _ *http.Request) (any, error) {
	cl, err := a.cl.Cluster(ctx)
	if err != nil {
		return nil, err
	}
	jobs, err := a.cl.List(ctx)
	if err != nil {
		return nil, err
	}
	o := overviewJSON{TaskManagers: len(cl.GetTaskmanagers()), JobManagers: jobManagersOf(cl), JobsRunning: 0}
	for _, tm := range cl.GetTaskmanagers() {
		o.SlotsTotal += int(tm.GetSlots())
		o.SlotsAvailable += int(tm.GetFreeSlots())
	}
	for _, j := range jobs {
		switch j.GetStatus() { // isEnded's statuses, and the others running
		case pb.JobStatus_JOB_STATUS_FINISHED:
			o.JobsFinished++
		case pb.JobStatus_JOB_STATUS_CANCELED:
			o.JobsCancelled++
		case pb.JobStatus_JOB_STATUS_FAILED:
			o.JobsFailed++
		default:
			o.JobsRunning++
		}
	}
	return o, nil
}

type jobSummaryJSON struct {
	ID        string  `json:"id"`
	Name      string  `json:"name"`
	Status    string  `json:"status"`
	StartTime *string `json:"start_time"`
	EndTime   *string `json:"end_time"`
}

func (a *api) jobsOverview(ctx context.Context, _ *http.Request) (any, error) {
	jobs, err := a.cl.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]jobSummaryJSON, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, jobSummaryJSON{ID: j.GetId(), Name: j.GetName(), Status: jobStatus(j.GetStatus()),
			StartTime: timeJSON(j.GetStartTime()), EndTime: timeJSON(j.GetEndTime())})
	}
	return map[string]any{"jobs": out}, nil
}

type jobJSON struct {
	ID                   string          `json:"id"`
	Name                 string          `json:"name"`
	Status               string          `json:"status"`
	Parallelism          int32           `json:"parallelism"`
	StartTime            *string         `json:"start_time"`
	EndTime              *string         `json:"end_time"`
	Restarts             int32           `json:"restarts"`
	FailureCause         string          `json:"failure_cause,omitempty"`
	RestoredCheckpointID int64           `json:"restored_checkpoint_id"`
	LastCheckpoint       *checkpointJSON `json:"last_checkpoint"`
	Vertices             []vertexJSON    `json:"vertices"`
	Edges                []edgeJSON      `json:"edges"`
}

// vertexJSON is one operator chain with its subtasks and their load summed up.
type vertexJSON struct {
	ID          int32      `json:"id"`
	Name        string     `json:"name"`
	Parallelism int32      `json:"parallelism"`
	Operators   []opJSON   `json:"operators"`
	Tasks       []taskJSON `json:"tasks"`
	// The vertex's records per second (sums over its subtasks), and its busiest subtask's busy
	// and backpressured milliseconds per second (Flink's web UI colours a vertex by them).
	RecordsInPerSecond  float64 `json:"records_in_per_second"`
	RecordsOutPerSecond float64 `json:"records_out_per_second"`
	BusyMaxMsPerSecond  float64 `json:"busy_max_ms_per_second"`
	BackPressuredMax    float64 `json:"backpressured_max_ms_per_second"`
	// InputWatermark is the lowest input watermark of its subtasks (epoch ms), absent without
	// event time.
	InputWatermark *int64 `json:"input_watermark,omitempty"`
}

type opJSON struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

type edgeJSON struct {
	Source      int32  `json:"source"`
	Target      int32  `json:"target"`
	Partitioner string `json:"partitioner"`
	SideOutput  string `json:"side_output,omitempty"`
}

type taskJSON struct {
	Subtask             int32   `json:"subtask"`
	Attempt             int32   `json:"attempt"`
	Status              string  `json:"status"`
	TaskManager         string  `json:"taskmanager"`
	RecordsIn           int64   `json:"records_in"`
	RecordsOut          int64   `json:"records_out"`
	RecordsInPerSecond  float64 `json:"records_in_per_second"`
	RecordsOutPerSecond float64 `json:"records_out_per_second"`
	Busy                float64 `json:"busy_ms_per_second"`
	BackPressured       float64 `json:"backpressured_ms_per_second"`
	Idle                float64 `json:"idle_ms_per_second"`
	InputWatermark      *int64  `json:"input_watermark,omitempty"`
	OutputWatermark     *int64  `json:"output_watermark,omitempty"`
}

func (a *api) job(ctx context.Context, id string, _ *http.Request) (any, error) {
	d, err := a.cl.Job(ctx, id)
	if err != nil {
		return nil, err
	}
	return jobOf(d), nil
}

// jobOf is a job's details as the API shows them: the plan's vertices with their tasks.
func jobOf(d *pb.JobDetails) jobJSON {
	j := jobJSON{ID: d.GetId(), Name: d.GetName(), Status: jobStatus(d.GetStatus()), Parallelism: d.GetParallelism(),
		StartTime: timeJSON(d.GetStartTime()), EndTime: timeJSON(d.GetEndTime()), Restarts: d.GetRestarts(),
		FailureCause: d.GetFailureCause(), RestoredCheckpointID: d.GetRestoredCheckpointId(),
		Vertices: []vertexJSON{}, Edges: []edgeJSON{}}
	if lc := d.GetLastCheckpoint(); lc != nil {
		cp := checkpointOf(lc)
		j.LastCheckpoint = &cp
	}
	byName := map[string]int{}
	for _, v := range d.GetPlan().GetVertices() {
		vj := vertexJSON{ID: v.GetId(), Name: v.GetName(), Parallelism: v.GetParallelism(), Operators: []opJSON{}, Tasks: []taskJSON{}}
		for _, op := range v.GetOperators() {
			vj.Operators = append(vj.Operators, opJSON{Name: op.GetName(), Type: op.GetType()})
		}
		byName[v.GetName()] = len(j.Vertices)
		j.Vertices = append(j.Vertices, vj)
	}
	for _, e := range d.GetPlan().GetEdges() {
		j.Edges = append(j.Edges, edgeJSON{Source: e.GetSource(), Target: e.GetTarget(), Partitioner: e.GetPartitioner(), SideOutput: e.GetSideOutput()})
	}
	for _, t := range d.GetTasks() {
		i, ok := byName[t.GetOperator()]
		if !ok {
			continue
		}
		v := &j.Vertices[i]
		l := t.GetLoad()
		tj := taskJSON{Subtask: t.GetSubtask(), Attempt: t.GetAttempt(), Status: execState(t.GetStatus()), TaskManager: t.GetTaskmanager(),
			RecordsIn: t.GetRecordsIn(), RecordsOut: t.GetRecordsOut(), RecordsInPerSecond: l.GetRecordsInPerSecond(),
			RecordsOutPerSecond: l.GetRecordsOutPerSecond(), Busy: l.GetBusyTimeMsPerSecond(), BackPressured: l.GetBackPressuredTimeMsPerSecond(),
			Idle: l.GetIdleTimeMsPerSecond()}
		if l.GetHasWatermarks() {
			in, out := l.GetInputWatermark(), l.GetOutputWatermark()
			tj.InputWatermark, tj.OutputWatermark = watermarkJSON(in), watermarkJSON(out)
			if tj.InputWatermark != nil && (v.InputWatermark == nil || in < *v.InputWatermark) {
				v.InputWatermark = tj.InputWatermark
			}
		}
		v.Tasks = append(v.Tasks, tj)
		v.RecordsInPerSecond += tj.RecordsInPerSecond
		v.RecordsOutPerSecond += tj.RecordsOutPerSecond
		v.BusyMaxMsPerSecond = max(v.BusyMaxMsPerSecond, tj.Busy)
		v.BackPressuredMax = max(v.BackPressuredMax, tj.BackPressured)
	}
	return j
}

// watermarkJSON is a watermark, nil for none (Flink's Long.MIN_VALUE).
func watermarkJSON(wm int64) *int64 {
	if wm == operator.MinWatermark {
		return nil
	}
	return &wm
}

type checkpointJSON struct {
	ID             int64   `json:"id"`
	Status         string  `json:"status"`
	Savepoint      bool    `json:"savepoint"`
	TriggerTime    *string `json:"trigger_time"`
	DurationMs     int64   `json:"duration_ms"`
	StateSizeBytes int64   `json:"state_size_bytes"`
	AlignmentMs    int64   `json:"alignment_ms"`
	Acknowledged   int32   `json:"acknowledged"`
	Total          int32   `json:"total"`
	Failure        string  `json:"failure"`
	FailureReason  string  `json:"failure_reason"`
	Path           string  `json:"path"`
	// Flink's REST fields: checkpoint_type is CHECKPOINT, UNALIGNED_CHECKPOINT (some task took
	// it unaligned) or SAVEPOINT, persisted_data the in-flight data it persisted (channel state,
	// also counted in state_size_bytes).
	CheckpointType string `json:"checkpoint_type"`
	PersistedData  int64  `json:"persisted_data"`
}

// checkpointType is Flink's checkpoint_type of a checkpoint.
func checkpointType(c *pb.CheckpointInfo) string {
	switch {
	case c.GetSavepoint():
		return "SAVEPOINT"
	case c.GetUnaligned():
		return "UNALIGNED_CHECKPOINT"
	}
	return "CHECKPOINT"
}

func checkpointOf(c *pb.CheckpointInfo) checkpointJSON {
	reason := ""
	if r := c.GetFailureReason(); r != pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_UNSPECIFIED {
		reason = strings.TrimPrefix(r.String(), "CHECKPOINT_FAILURE_REASON_")
	}
	return checkpointJSON{ID: c.GetId(), Status: strings.TrimPrefix(c.GetStatus().String(), "CHECKPOINT_STATUS_"), Savepoint: c.GetSavepoint(),
		TriggerTime: timeJSON(c.GetTriggerTime()), DurationMs: c.GetDurationMs(), StateSizeBytes: c.GetStateSizeBytes(),
		AlignmentMs: c.GetAlignmentMs(), Acknowledged: c.GetAcknowledged(), Total: c.GetTotal(), Failure: c.GetFailure(),
		FailureReason: reason, Path: c.GetPath(), CheckpointType: checkpointType(c), PersistedData: c.GetInFlightBytes()}
}

// checkpointsJSON is the checkpoint history, newest first, with Flink's counts.
type checkpointsJSON struct {
	Counts  map[string]int   `json:"counts"`
	History []checkpointJSON `json:"history"`
}

func (a *api) checkpoints(ctx context.Context, id string, _ *http.Request) (any, error) {
	cps, err := a.cl.Checkpoints(ctx, id)
	if err != nil {
		return nil, err
	}
	out := checkpointsJSON{Counts: map[string]int{"completed": 0, "failed": 0, "in_progress": 0}, History: []checkpointJSON{}}
	for _, c := range cps {
		cj := checkpointOf(c)
		switch c.GetStatus() {
		case pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED:
			out.Counts["completed"]++
		case pb.CheckpointStatus_CHECKPOINT_STATUS_FAILED:
			out.Counts["failed"]++
		default:
			out.Counts["in_progress"]++
		}
		out.History = append(out.History, cj)
	}
	return out, nil
}

type exceptionJSON struct {
	Time           *string  `json:"time"`
	Task           string   `json:"task"`
	TaskManager    string   `json:"taskmanager"`
	Cause          string   `json:"cause"`
	Handling       string   `json:"handling"`
	Failover       string   `json:"failover"`
	RestartedTasks []string `json:"restarted_tasks"`
}

func (a *api) exceptions(ctx context.Context, id string, _ *http.Request) (any, error) {
	d, err := a.cl.Job(ctx, id)
	if err != nil {
		return nil, err
	}
	out := make([]exceptionJSON, 0, len(d.GetExceptions()))
	for _, e := range d.GetExceptions() {
		handling := ""
		if h := e.GetHandling(); h != pb.FailureHandling_FAILURE_HANDLING_UNSPECIFIED {
			handling = strings.ToLower(strings.TrimPrefix(h.String(), "FAILURE_HANDLING_"))
		}
		out = append(out, exceptionJSON{Time: timeJSON(e.GetTime()), Task: e.GetTask(), TaskManager: e.GetTaskmanager(), Cause: e.GetCause(),
			Handling: handling, Failover: e.GetFailover(), RestartedTasks: append([]string{}, e.GetRestartedTasks()...)})
	}
	return map[string]any{"exceptions": out, "failure_cause": d.GetFailureCause()}, nil
}

type taskManagerJSON struct {
	ID            string  `json:"id"`
	Address       string  `json:"address"`
	Slots         int32   `json:"slots"`
	FreeSlots     int32   `json:"free_slots"`
	LastHeartbeat *string `json:"last_heartbeat"`
	// Tasks are the tasks of jobs that have not ended deployed on it.
	Tasks []tmTaskJSON `json:"tasks"`
}

// tmTaskJSON is a task on a TaskManager, with its job.
type tmTaskJSON struct {
	JobID    string `json:"job_id"`
	JobName  string `json:"job_name"`
	Operator string `json:"operator"`
	taskJSON
}

// maxTaskManagerJobs bounds the jobs whose tasks /taskmanagers lists (one call each).
const maxTaskManagerJobs = 50

func (a *api) taskManagers(ctx context.Context, _ *http.Request) (any, error) {
	cl, err := a.cl.Cluster(ctx)
	if err != nil {
		return nil, err
	}
	jobs, err := a.cl.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]taskManagerJSON, 0, len(cl.GetTaskmanagers()))
	index := map[string]int{}
	for _, tm := range cl.GetTaskmanagers() {
		index[tm.GetId()] = len(out)
		out = append(out, taskManagerJSON{ID: tm.GetId(), Address: tm.GetAddress(), Slots: tm.GetSlots(), FreeSlots: tm.GetFreeSlots(),
			LastHeartbeat: timeJSON(tm.GetLastHeartbeat()), Tasks: []tmTaskJSON{}})
	}
	listed := 0
	for _, j := range jobs {
		if isEnded(j.GetStatus()) || listed == maxTaskManagerJobs {
			continue
		}
		listed++
		d, err := a.cl.Job(ctx, j.GetId())
		if err != nil {
			continue // ended meanwhile
		}
		for _, v := range jobOf(d).Vertices {
			for _, t := range v.Tasks {
				if i, ok := index[t.TaskManager]; ok && !isEndedTask(t.Status) {
					out[i].Tasks = append(out[i].Tasks, tmTaskJSON{JobID: d.GetId(), JobName: d.GetName(), Operator: v.Name, taskJSON: t})
				}
			}
		}
	}
	return map[string]any{"taskmanagers": out}, nil
}

func isEnded(s pb.JobStatus) bool {
	return s == pb.JobStatus_JOB_STATUS_FINISHED || s == pb.JobStatus_JOB_STATUS_CANCELED || s == pb.JobStatus_JOB_STATUS_FAILED
}

func isEndedTask(status string) bool {
	return status == "FINISHED" || status == "CANCELED" || status == "FAILED"
}

type jobManagerJSON struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Role    string `json:"role"`
	Term    uint64 `json:"term"`
	Leader  bool   `json:"leader"`
	Error   string `json:"error,omitempty"`
}

func jobManagersOf(cl *pb.GetClusterResponse) []jobManagerJSON {
	out := make([]jobManagerJSON, 0, len(cl.GetJobmanagers()))
	for _, jm := range cl.GetJobmanagers() {
		out = append(out, jobManagerJSON{ID: jm.GetId(), Address: jm.GetAddress(), Role: jm.GetRole(), Term: jm.GetTerm(), Leader: jm.GetLeader(), Error: jm.GetError()})
	}
	return out
}

func (a *api) jobManagers(ctx context.Context, _ *http.Request) (any, error) {
	cl, err := a.cl.Cluster(ctx)
	if err != nil {
		return nil, err
	}
	return map[string]any{"jobmanagers": jobManagersOf(cl)}, nil
}

func (a *api) cancel(ctx context.Context, id string, r *http.Request) (any, error) {
	if err := a.cl.Cancel(ctx, id); err != nil {
		return nil, err
	}
	a.log.Info("job cancelled through the dashboard", "job_id", id, "remote", r.RemoteAddr)
	return map[string]any{"job_id": id, "status": "CANCELLING"}, nil
}

func (a *api) triggerCheckpoint(ctx context.Context, id string, _ *http.Request) (any, error) {
	cp, err := a.cl.TriggerCheckpoint(ctx, id)
	if err != nil {
		return nil, err
	}
	return checkpointOf(cp), nil
}

// savepointRequest is the optional body of POST /jobs/{id}/savepoints.
type savepointRequest struct {
	TargetDirectory string `json:"target_directory"`
}

func (a *api) triggerSavepoint(ctx context.Context, id string, r *http.Request) (any, error) {
	var req savepointRequest
	body := http.MaxBytesReader(nil, r.Body, maxBodyBytes)
	if err := json.NewDecoder(body).Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
			return nil, &httpError{code: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("body: larger than %d bytes", maxBodyBytes)}
		}
		return nil, badRequest("body: %v (want {\"target_directory\": \"…\"} or nothing)", err)
	}
	resp, err := a.cl.TriggerSavepoint(ctx, &pb.TriggerSavepointRequest{JobId: id, TargetDirectory: req.TargetDirectory})
	if err != nil {
		return nil, err
	}
	a.log.Info("savepoint triggered through the dashboard", "job_id", id, "path", resp.GetSavepointPath(), "remote", r.RemoteAddr)
	return map[string]any{"savepoint_path": resp.GetSavepointPath()}, nil
}

// httpError is an error with its HTTP status.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &httpError{code: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// statusOf maps an error (a gRPC status from the cluster, or the API's own) to its HTTP status.
func statusOf(err error) int {
	var he *httpError
	if errors.As(err, &he) {
		return he.code
	}
	switch status.Code(err) {
	case codes.NotFound:
		return http.StatusNotFound
	case codes.InvalidArgument, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.FailedPrecondition, codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded, codes.Canceled:
		return http.StatusGatewayTimeout
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	}
	return http.StatusInternalServerError
}

// writeError answers {"errors": ["…"]}, as Flink's REST API does.
func (a *api) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code := statusOf(err)
	msg := err.Error()
	if s, ok := status.FromError(err); ok && s.Code() != codes.Unknown {
		msg = s.Message()
	}
	if code >= 500 {
		a.log.Warn("dashboard API call failed", "path", r.URL.Path, "err", err)
	}
	writeJSON(w, code, map[string][]string{"errors": {msg}})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client went away
}

// jobStatus is Flink's name of a job status (RUNNING, …).
func jobStatus(s pb.JobStatus) string { return strings.TrimPrefix(s.String(), "JOB_STATUS_") }

// execState is Flink's name of a task's execution state.
func execState(s pb.ExecutionState) string { return strings.TrimPrefix(s.String(), "EXECUTION_STATE_") }

// timeJSON is a timestamp in RFC 3339 (UTC), nil when unset.
func timeJSON(ts *timestamppb.Timestamp) *string {
	if ts == nil {
		return nil
	}
	s := ts.AsTime().UTC().Format(time.RFC3339Nano)
	return &s
}

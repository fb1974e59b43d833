package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// fakeJobService is a JobService on loopback that answers from canned data, so the checkpoint
// commands can be tested without a cluster.
type fakeJobService struct {
	pb.UnimplementedJobServiceServer
	checkpoints map[string][]*pb.CheckpointInfo
	trigger     map[string]func(ctx context.Context) (*pb.CheckpointInfo, error)
	jobs        map[string]*pb.JobDetails
	notLeader   bool   // answer everything with the NOT_LEADER status of a follower
	leaderAddr  string // the leader a NOT_LEADER answer names, "" for none

	mu            sync.Mutex
	unavailable   int // answer this many more calls with UNAVAILABLE, as during an election
	calls         int // every call received
	triggerCalls  int
	triggerBudget time.Duration // time left until the deadline of the last TriggerCheckpoint
}

func (f *fakeJobService) checkLeader() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.unavailable > 0 {
		f.unavailable--
		return status.Error(codes.Unavailable, "no jobmanager leader is known")
	}
	if !f.notLeader {
		return nil
	}
	info := &errdetails.ErrorInfo{Reason: "NOT_LEADER", Domain: "goflink"}
	if f.leaderAddr != "" {
		info.Metadata = map[string]string{"leader": f.leaderAddr, "leader_id": "jm-leader"}
	}
	st, err := status.New(codes.FailedPrecondition, "this jobmanager is not the leader").WithDetails(info)
	if err != nil {
		return err
	}
	return st.Err()
}

func (f *fakeJobService) ListCheckpoints(_ context.Context, req *pb.ListCheckpointsRequest) (*pb.ListCheckpointsResponse, error) {
	if err := f.checkLeader(); err != nil {
		return nil, err
	}
	cps, ok := f.checkpoints[req.GetJobId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "job %s: job not found", req.GetJobId())
	}
	return &pb.ListCheckpointsResponse{Checkpoints: cps}, nil
}

func (f *fakeJobService) TriggerCheckpoint(ctx context.Context, req *pb.TriggerCheckpointRequest) (*pb.TriggerCheckpointResponse, error) {
	if err := f.checkLeader(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.triggerCalls++
	if dl, ok := ctx.Deadline(); ok {
		f.triggerBudget = time.Until(dl)
	} else {
		f.triggerBudget = 0
	}
	f.mu.Unlock()
	fn, ok := f.trigger[req.GetJobId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "job %s: job not found", req.GetJobId())
	}
	cp, err := fn(ctx)
	if err != nil {
		return nil, err
	}
	return &pb.TriggerCheckpointResponse{Checkpoint: cp}, nil
}

func (f *fakeJobService) GetJob(_ context.Context, req *pb.GetJobRequest) (*pb.GetJobResponse, error) {
	if err := f.checkLeader(); err != nil {
		return nil, err
	}
	d, ok := f.jobs[req.GetJobId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "job %s: job not found", req.GetJobId())
	}
	return &pb.GetJobResponse{Job: d}, nil
}

func (f *fakeJobService) lastTrigger() (calls int, budget time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.triggerCalls, f.triggerBudget
}

// serve starts f on a loopback port for the test and returns its address.
func serve(t *testing.T, f *fakeJobService) string {
	t.Helper()
	lis := listen(t)
	serveOn(t, lis, f, nil)
	return lis.Addr().String()
}

var (
	// cpTime is the trigger time of the canned checkpoints.
	cpTime = time.Date(2024, 5, 6, 7, 8, 9, 123_000_000, time.UTC)
	// longFailure is longer than the table shows.
	// preflightFailure is why a trigger could not start a checkpoint.
	preflightFailure = "not all required tasks are currently running"
	longFailure      = "checkpoint 11 expired before completing: tasks numbers (1/2), counts -> out (2/2) did not acknowledge within 10m0s"
)

// history is a job's checkpoint history, newest first: one in progress, one completed, one
// expired and a trigger that could not start.
func history() []*pb.CheckpointInfo {
	ts := timestamppb.New(cpTime)
	return []*pb.CheckpointInfo{
		{Id: 13, Status: pb.CheckpointStatus_CHECKPOINT_STATUS_IN_PROGRESS, TriggerTime: ts, Acknowledged: 1, Total: 4},
		{Id: 12, Status: pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED, TriggerTime: ts, DurationMs: 35, StateSizeBytes: 1229,
			AlignmentMs: 3, Acknowledged: 4, Total: 4, Path: "/var/checkpoints/j1/chk-12", Manual: true},
		{Id: 11, Status: pb.CheckpointStatus_CHECKPOINT_STATUS_FAILED, TriggerTime: ts, DurationMs: 600_000, Acknowledged: 2, Total: 4,
			FailureReason: pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_EXPIRED, Failure: longFailure},
		{Id: 0, Status: pb.CheckpointStatus_CHECKPOINT_STATUS_FAILED, TriggerTime: ts,
			FailureReason: pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_NOT_ALL_REQUIRED_TASKS_RUNNING, Failure: preflightFailure},
	}
}

func completedCheckpoint() *pb.CheckpointInfo { return history()[1] }

// unalignedHistory is the history of a job with unaligned checkpoints, newest first: one in
// progress that a task took unaligned so far, an unaligned and an aligned one completed (its
// tasks' alignment ended before the aligned-checkpoint-timeout), and a savepoint.
func unalignedHistory() []*pb.CheckpointInfo {
	ts := timestamppb.New(cpTime)
	return []*pb.CheckpointInfo{
		{Id: 24, Status: pb.CheckpointStatus_CHECKPOINT_STATUS_IN_PROGRESS, TriggerTime: ts, Acknowledged: 1, Total: 4, Unaligned: true, InFlightBytes: 2048},
		{Id: 23, Status: pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED, TriggerTime: ts, DurationMs: 40, StateSizeBytes: 3 << 20,
			Acknowledged: 4, Total: 4, Unaligned: true, InFlightBytes: 3<<20 - 1024},
		{Id: 22, Status: pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED, TriggerTime: ts, DurationMs: 900, StateSizeBytes: 1024, AlignmentMs: 850,
			Acknowledged: 4, Total: 4},
		{Id: 21, Status: pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED, TriggerTime: ts, DurationMs: 1200, StateSizeBytes: 1024, AlignmentMs: 1100,
			Acknowledged: 4, Total: 4, Savepoint: true},
	}
}

// newFake is a JobService knowing job j1 (checkpointing on) and job plain (checkpointing off).
func newFake() *fakeJobService {
	fail := func(cp *pb.CheckpointInfo, err error) func(context.Context) (*pb.CheckpointInfo, error) {
		return func(context.Context) (*pb.CheckpointInfo, error) { return cp, err }
	}
	return &fakeJobService{
		checkpoints: map[string][]*pb.CheckpointInfo{"j1": history(), "fresh": nil, "uc": unalignedHistory()},
		trigger: map[string]func(context.Context) (*pb.CheckpointInfo, error){
			"j1": fail(completedCheckpoint(), nil),
			"declined": fail(&pb.CheckpointInfo{Id: 14, Status: pb.CheckpointStatus_CHECKPOINT_STATUS_FAILED, TriggerTime: timestamppb.New(cpTime),
				DurationMs: 20, Acknowledged: 1, Total: 4, Manual: true,
				FailureReason: pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_DECLINED, Failure: "task counts (1/2) declined: state backend closed"}, nil),
			"starting": fail(&pb.CheckpointInfo{Status: pb.CheckpointStatus_CHECKPOINT_STATUS_FAILED, TriggerTime: timestamppb.New(cpTime), Manual: true,
				FailureReason: pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_NOT_ALL_REQUIRED_TASKS_RUNNING, Failure: preflightFailure}, nil),
			"plain": fail(nil, status.Error(codes.FailedPrecondition, "job plain: checkpointing is not enabled for this job (set execution.checkpointing.interval)")),
			"slow": func(ctx context.Context) (*pb.CheckpointInfo, error) {
				<-ctx.Done()
				return nil, status.FromContextError(ctx.Err()).Err()
			},
		},
		jobs: map[string]*pb.JobDetails{
			"j1": {Id: "j1", Name: "keyed-count", Status: pb.JobStatus_JOB_STATUS_RUNNING, Parallelism: 2, StartTime: timestamppb.New(cpTime),
				LastCheckpoint: completedCheckpoint(), RestoredCheckpointId: 11},
			"plain": {Id: "plain", Name: "keyed-count", Status: pb.JobStatus_JOB_STATUS_RUNNING, Parallelism: 2, StartTime: timestamppb.New(cpTime)},
			"loaded": {Id: "loaded", Name: "busy", Status: pb.JobStatus_JOB_STATUS_RUNNING, Parallelism: 1, StartTime: timestamppb.New(cpTime),
				Tasks: []*pb.TaskDetails{
					{Operator: "numbers", Status: pb.ExecutionState_EXECUTION_STATE_RUNNING, Taskmanager: "tm-0", RecordsOut: 9000,
						Load: &pb.TaskLoad{RecordsOutPerSecond: 3000, BusyTimeMsPerSecond: 120, BackPressuredTimeMsPerSecond: 850,
							IdleTimeMsPerSecond: 30, BytesOut: 72000}},
					{Operator: "slow", Status: pb.ExecutionState_EXECUTION_STATE_RUNNING, Taskmanager: "tm-1", RecordsIn: 9000,
						Load: &pb.TaskLoad{RecordsInPerSecond: 2999.6, BusyTimeMsPerSecond: 990, IdleTimeMsPerSecond: 10, BytesIn: 72000,
							HasWatermarks: true, InputWatermark: 1733212800000, OutputWatermark: 1733212800000}},
					{Operator: "done", Status: pb.ExecutionState_EXECUTION_STATE_FINISHED, Taskmanager: "tm-1"},
				}},
		},
	}
}

// checkpointKeys are the keys of a checkpoint in JSON output: the documented contract.
var checkpointKeys = []string{"acknowledged", "alignment_ms", "duration_ms", "failure", "failure_reason", "id", "in_flight_bytes", "manual", "path", "savepoint",
	"state_size_bytes", "status", "total", "trigger_time", "unaligned"}

// requireCheckpointShape checks that m has exactly the checkpoint keys, and its trigger time.
func requireCheckpointShape(t *testing.T, what string, m map[string]any) {
	t.Helper()
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if strings.Join(keys, ",") != strings.Join(checkpointKeys, ",") {
		t.Errorf("%s keys = %v, want %v", what, keys, checkpointKeys)
	}
	s, _ := m["trigger_time"].(string)
	if tm, err := time.Parse(time.RFC3339Nano, s); err != nil || !tm.Equal(cpTime) || !strings.HasSuffix(s, "Z") {
		t.Errorf("%s trigger_time = %v, want %s in RFC 3339, UTC", what, m["trigger_time"], cpTime.Format(time.RFC3339Nano))
	}
}

// checkFields compares m's fields with want (JSON numbers are float64).
func checkFields(t *testing.T, what string, m map[string]any, want map[string]any) {
	t.Helper()
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s %s = %#v, want %#v", what, k, m[k], v)
		}
	}
}

// tableRows splits table output into rows of cells (tabwriter pads cells with 2+ spaces; cells
// themselves hold single spaces only).
func tableRows(out string) [][]string {
	var rows [][]string
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		rows = append(rows, regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1))
	}
	return rows
}

func TestCheckpointsTable(t *testing.T) {
	addr := serve(t, newFake())
	code, stdout, stderr := execute(t, "-m", addr, "checkpoints", "j1")
	if code != ExitOK {
		t.Fatalf("checkpoints j1 = exit %d, want %d; stderr:\n%s", code, ExitOK, stderr)
	}
	local := cpTime.Local().Format("2006-01-02 15:04:05.000")
	want := [][]string{
		{"ID", "TYPE", "STATUS", "TRIGGERED", "DURATION", "SIZE", "IN-FLIGHT", "ALIGNMENT", "ACKS", "FAILURE"},
		{"13", "aligned checkpoint", "IN_PROGRESS", local, "-", "-", "-", "-", "1/4", "-"},
		{"12", "aligned checkpoint", "COMPLETED", local, "35 ms", "1.2 KiB", "0 B", "3 ms", "4/4", "-"},
		{"11", "aligned checkpoint", "FAILED", local, "10m0s", "-", "-", "-", "2/4", "<truncated>"},
		{"-", "aligned checkpoint", "FAILED", local, "-", "-", "-", "-", "-", "NOT_ALL_REQUIRED_TASKS_RUNNING: not all required tasks are currently running"},
	}
	rows := tableRows(stdout)
	if len(rows) != len(want) {
		t.Fatalf("checkpoints j1 printed %d lines, want %d:\n%s", len(rows), len(want), stdout)
	}
	for i, row := range rows {
		if len(row) != len(want[i]) {
			t.Errorf("line %d has %d columns, want %d: %q", i, len(row), len(want[i]), row)
			continue
		}
		for j, cell := range row {
			if want[i][j] == "<truncated>" {
				// The reason, then as much of the message as fits, marked as cut.
				full := "CHECKPOINT_EXPIRED: " + longFailure
				if !strings.HasSuffix(cell, "…") || !strings.HasPrefix(full, strings.TrimSuffix(cell, "…")) ||
					len([]rune(cell)) > 80 || len([]rune(cell)) < 40 {
					t.Errorf("line %d %s = %q, want %q cut to at most 80 characters ending in …", i, want[0][j], cell, full)
				}
				continue
			}
			if cell != want[i][j] {
				t.Errorf("line %d %s = %q, want %q", i, want[0][j], cell, want[i][j])
			}
		}
	}
}

func TestCheckpointsJSON(t *testing.T) {
	addr := serve(t, newFake())
	code, stdout, stderr := execute(t, "-m", addr, "-o", "json", "checkpoints", "j1")
	if code != ExitOK {
		t.Fatalf("checkpoints -o json j1 = exit %d, want %d; stderr:\n%s", code, ExitOK, stderr)
	}
	var cps []map[string]any
	if err := json.Unmarshal([]byte(stdout), &cps); err != nil {
		t.Fatalf("output is not a JSON array of objects: %v\n%s", err, stdout)
	}
	if len(cps) != 4 {
		t.Fatalf("got %d checkpoints, want 4:\n%s", len(cps), stdout)
	}
	for i, cp := range cps {
		requireCheckpointShape(t, fmt.Sprintf("checkpoints[%d]", i), cp)
	}
	checkFields(t, "in progress", cps[0], map[string]any{"id": 13.0, "status": "IN_PROGRESS", "acknowledged": 1.0, "total": 4.0,
		"failure_reason": "", "failure": "", "path": "", "manual": false})
	checkFields(t, "completed", cps[1], map[string]any{"id": 12.0, "status": "COMPLETED", "duration_ms": 35.0, "state_size_bytes": 1229.0,
		"alignment_ms": 3.0, "acknowledged": 4.0, "total": 4.0, "failure_reason": "", "failure": "", "path": "/var/checkpoints/j1/chk-12", "manual": true,
		"unaligned": false, "in_flight_bytes": 0.0})
	checkFields(t, "expired", cps[2], map[string]any{"id": 11.0, "status": "FAILED", "duration_ms": 600000.0,
		"failure_reason": "CHECKPOINT_EXPIRED", "failure": longFailure}) // JSON is never truncated
	checkFields(t, "pre-flight", cps[3], map[string]any{"id": 0.0, "status": "FAILED", "failure_reason": "NOT_ALL_REQUIRED_TASKS_RUNNING",
		"failure": preflightFailure, "total": 0.0})

	// No checkpoints yet: an empty array, not null.
	code, stdout, stderr = execute(t, "-m", addr, "-o", "json", "checkpoints", "fresh")
	if code != ExitOK || strings.TrimSpace(stdout) != "[]" {
		t.Errorf("checkpoints -o json fresh = exit %d, output %q, want 0 and []; stderr:\n%s", code, stdout, stderr)
	}
}

func TestCheckpointsUnknownJob(t *testing.T) {
	addr := serve(t, newFake())
	code, stdout, stderr := execute(t, "-m", addr, "checkpoints", "nope")
	if code != ExitFailure || !strings.Contains(stderr, "job nope: job not found") || stdout != "" {
		t.Errorf("checkpoints nope = exit %d, stdout %q, stderr %q; want exit 1 naming the missing job", code, stdout, stderr)
	}
}

// executeNoDeadline is execute without the test's own deadline, for checking the deadline
// flinkctl itself puts on a call.
func executeNoDeadline(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := Execute(ctx, args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestCheckpointCompleted(t *testing.T) {
	f := newFake()
	addr := serve(t, f)
	code, stdout, stderr := executeNoDeadline(t, "-m", addr, "checkpoint", "j1")
	if code != ExitOK {
		t.Fatalf("checkpoint j1 = exit %d, want %d; stderr:\n%s", code, ExitOK, stderr)
	}
	if want := "Checkpoint 12 of job j1 completed in 35 ms (1.2 KiB) at /var/checkpoints/j1/chk-12\n"; stdout != want {
		t.Errorf("checkpoint j1 printed %q, want %q", stdout, want)
	}
	// The JobManager may take up to execution.checkpointing.timeout (10 min by default): the
	// call must not give up sooner.
	if calls, budget := f.lastTrigger(); calls != 1 || budget < 9*time.Minute || budget > 10*time.Minute {
		t.Errorf("TriggerCheckpoint called %d times with %v left until the deadline, want once with about 10m", calls, budget)
	}

	code, stdout, stderr = executeNoDeadline(t, "-m", addr, "-o", "json", "checkpoint", "--timeout", "3m", "j1")
	if code != ExitOK {
		t.Fatalf("checkpoint -o json --timeout 3m j1 = exit %d, want %d; stderr:\n%s", code, ExitOK, stderr)
	}
	m := decodeObject(t, stdout)
	requireCheckpointShape(t, "checkpoint", m)
	checkFields(t, "checkpoint", m, map[string]any{"id": 12.0, "status": "COMPLETED", "duration_ms": 35.0, "state_size_bytes": 1229.0,
		"path": "/var/checkpoints/j1/chk-12", "manual": true, "failure_reason": ""})
	if _, budget := f.lastTrigger(); budget < 2*time.Minute || budget > 3*time.Minute {
		t.Errorf("with --timeout 3m, TriggerCheckpoint had %v left until the deadline, want about 3m", budget)
	}
}

func TestCheckpointFailed(t *testing.T) {
	addr := serve(t, newFake())
	for _, tc := range []struct {
		job, want string
		id        float64
		reason    string
	}{
		{"declined", "Checkpoint 14 of job declined failed: CHECKPOINT_DECLINED: task counts (1/2) declined: state backend closed\n", 14, "CHECKPOINT_DECLINED"},
		// A trigger that could not start has no ID.
		{"starting", "Checkpoint of job starting failed: NOT_ALL_REQUIRED_TASKS_RUNNING: not all required tasks are currently running\n", 0, "NOT_ALL_REQUIRED_TASKS_RUNNING"},
	} {
		t.Run(tc.job, func(t *testing.T) {
			code, stdout, stderr := execute(t, "-m", addr, "checkpoint", tc.job)
			if code != ExitFailure {
				t.Errorf("checkpoint %s = exit %d, want %d; stderr:\n%s", tc.job, code, ExitFailure, stderr)
			}
			if stdout != tc.want {
				t.Errorf("checkpoint %s printed %q, want %q", tc.job, stdout, tc.want)
			}
			code, stdout, stderr = execute(t, "-m", addr, "-o", "json", "checkpoint", tc.job)
			if code != ExitFailure {
				t.Errorf("checkpoint -o json %s = exit %d, want %d; stderr:\n%s", tc.job, code, ExitFailure, stderr)
			}
			m := decodeObject(t, stdout)
			requireCheckpointShape(t, "checkpoint", m)
			checkFields(t, "checkpoint", m, map[string]any{"id": tc.id, "status": "FAILED", "failure_reason": tc.reason, "manual": true})
		})
	}
}

func TestCheckpointDisabled(t *testing.T) {
	addr := serve(t, newFake())
	for _, output := range []string{"table", "json"} {
		code, stdout, stderr := execute(t, "-m", addr, "-o", output, "checkpoint", "plain")
		want := "flinkctl: job plain: checkpointing is not enabled for this job (set execution.checkpointing.interval)\n"
		if code != ExitFailure || stderr != want || stdout != "" {
			t.Errorf("checkpoint -o %s plain = exit %d, stdout %q, stderr %q; want exit %d, nothing on stdout and stderr %q",
				output, code, stdout, stderr, ExitFailure, want)
		}
	}
}

func TestCheckpointTimeout(t *testing.T) {
	addr := serve(t, newFake())
	code, stdout, stderr := execute(t, "-m", addr, "checkpoint", "--timeout", "200ms", "slow")
	if code != ExitFailure || stdout != "" {
		t.Errorf("checkpoint --timeout 200ms slow = exit %d, stdout %q, want exit %d and nothing on stdout", code, stdout, ExitFailure)
	}
	// The hint names the JobManagers the command was given.
	for _, want := range []string{"checkpoint of job slow did not end within 200ms", "--timeout", "flinkctl -m " + addr + " checkpoints slow"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("checkpoint --timeout 200ms slow stderr = %q, want it to contain %q", stderr, want)
		}
	}
}

// A follower's NOT_LEADER answer sends the call on to the next JobManager.
func TestCheckpointRetriesOnFollower(t *testing.T) {
	follower := newFake()
	follower.notLeader = true
	leader := newFake()
	addrs := serve(t, follower) + "," + serve(t, leader)
	code, stdout, stderr := execute(t, "-m", addrs, "checkpoint", "j1")
	if code != ExitOK || !strings.HasPrefix(stdout, "Checkpoint 12 of job j1 completed") {
		t.Errorf("checkpoint j1 via a follower = exit %d, stdout %q, stderr %q; want the leader's answer", code, stdout, stderr)
	}
	code, stdout, stderr = execute(t, "-m", addrs, "-o", "json", "checkpoints", "j1")
	var cps []map[string]any
	if err := json.Unmarshal([]byte(stdout), &cps); code != ExitOK || err != nil || len(cps) != 4 {
		t.Errorf("checkpoints j1 via a follower = exit %d, stdout %q, stderr %q; want the leader's 4 checkpoints", code, stdout, stderr)
	}
}

func TestStatusCheckpointJSON(t *testing.T) {
	addr := serve(t, newFake())
	code, stdout, stderr := execute(t, "-m", addr, "-o", "json", "status", "j1")
	if code != ExitOK {
		t.Fatalf("status -o json j1 = exit %d, want %d; stderr:\n%s", code, ExitOK, stderr)
	}
	m := decodeObject(t, stdout)
	requireKeys(t, "status JSON", m, "id", "status", "last_checkpoint", "restored_checkpoint_id")
	if m["restored_checkpoint_id"] != 11.0 {
		t.Errorf("restored_checkpoint_id = %v, want 11", m["restored_checkpoint_id"])
	}
	last, ok := m["last_checkpoint"].(map[string]any)
	if !ok {
		t.Fatalf("last_checkpoint = %v, want an object", m["last_checkpoint"])
	}
	requireCheckpointShape(t, "last_checkpoint", last)
	checkFields(t, "last_checkpoint", last, map[string]any{"id": 12.0, "status": "COMPLETED", "duration_ms": 35.0,
		"state_size_bytes": 1229.0, "path": "/var/checkpoints/j1/chk-12"})

	// Without checkpoints: null and 0, both present.
	code, stdout, stderr = execute(t, "-m", addr, "-o", "json", "status", "plain")
	if code != ExitOK {
		t.Fatalf("status -o json plain = exit %d, want %d; stderr:\n%s", code, ExitOK, stderr)
	}
	m = decodeObject(t, stdout)
	requireKeys(t, "status JSON", m, "last_checkpoint", "restored_checkpoint_id")
	if m["last_checkpoint"] != nil || m["restored_checkpoint_id"] != 0.0 {
		t.Errorf("last_checkpoint, restored_checkpoint_id = %v, %v, want null, 0", m["last_checkpoint"], m["restored_checkpoint_id"])
	}
}

func TestStatusCheckpointTable(t *testing.T) {
	addr := serve(t, newFake())
	code, stdout, stderr := execute(t, "-m", addr, "status", "j1")
	if code != ExitOK {
		t.Fatalf("status j1 = exit %d, want %d; stderr:\n%s", code, ExitOK, stderr)
	}
	for _, want := range []string{
		`(?m)^Last checkpoint:\s+12 \(COMPLETED, 35 ms, 1\.2 KiB\)$`,
		`(?m)^Restored from checkpoint:\s+11$`,
		`(?m)^Job:\s+j1$`,
	} {
		if !regexp.MustCompile(want).MatchString(stdout) {
			t.Errorf("status j1 output does not match %s:\n%s", want, stdout)
		}
	}
	code, stdout, stderr = execute(t, "-m", addr, "status", "plain")
	if code != ExitOK || strings.Contains(stdout, "checkpoint") {
		t.Errorf("status plain = exit %d, stderr %q; want no checkpoint lines for a job without checkpoints:\n%s", code, stderr, stdout)
	}
}

// status shows each running task's load: records/s and its busy and backpressured share; a
// task without one (not running) shows dashes, and -o json has the figures.
func TestStatusShowsTaskLoad(t *testing.T) {
	addr := serve(t, newFake())
	code, stdout, stderr := execute(t, "-m", addr, "status", "loaded")
	if code != ExitOK {
		t.Fatalf("status loaded = exit %d; stderr:\n%s", code, stderr)
	}
	for _, want := range []string{
		`(?m)^OPERATOR\s+SUBTASK\s+ATTEMPT\s+STATUS\s+TASKMANAGER\s+RECORDS IN\s+RECORDS OUT\s+IN/S\s+OUT/S\s+BUSY\s+BACKPRESSURED$`,
		`(?m)^numbers\s+0\s+0\s+RUNNING\s+tm-0\s+0\s+9000\s+0\s+3000\s+12%\s+85%$`,
		`(?m)^slow\s+0\s+0\s+RUNNING\s+tm-1\s+9000\s+0\s+3000\s+0\s+99%\s+0%$`,
		`(?m)^done\s+0\s+0\s+FINISHED\s+tm-1\s+0\s+0\s+-\s+-\s+-\s+-$`,
	} {
		if !regexp.MustCompile(want).MatchString(stdout) {
			t.Errorf("status loaded output does not match %s:\n%s", want, stdout)
		}
	}
	code, stdout, stderr = execute(t, "-m", addr, "-o", "json", "status", "loaded")
	if code != ExitOK {
		t.Fatalf("status -o json loaded = exit %d; stderr:\n%s", code, stderr)
	}
	tasks, ok := decodeObject(t, stdout)["tasks"].([]any)
	if !ok || len(tasks) != 3 {
		t.Fatalf("tasks = %v, want 3", tasks)
	}
	checkFields(t, "numbers", tasks[0].(map[string]any), map[string]any{"records_out_per_second": 3000.0, "busy_ratio": 0.12,
		"backpressured_ratio": 0.85, "idle_ratio": 0.03, "bytes_out": 72000.0})
	checkFields(t, "slow", tasks[1].(map[string]any), map[string]any{"records_in_per_second": 2999.6, "busy_ratio": 0.99,
		"input_watermark": 1733212800000.0})
	if _, ok := tasks[0].(map[string]any)["input_watermark"]; ok {
		t.Errorf("a task without watermarks has input_watermark: %v", tasks[0])
	}
}

func TestCheckpointFormatting(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {1229, "1.2 KiB"}, {1048524, "1023.9 KiB"}, {1048575, "1.0 MiB"}, {3 << 30, "3.0 GiB"}} {
		if got := bytesText(tc.n); got != tc.want {
			t.Errorf("bytesText(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
	for _, tc := range []struct {
		ms   int64
		want string
	}{{0, "0 ms"}, {35, "35 ms"}, {999, "999 ms"}, {2500, "2.5 s"}, {200_000, "3m20s"}} {
		if got := msText(tc.ms); got != tc.want {
			t.Errorf("msText(%d) = %q, want %q", tc.ms, got, tc.want)
		}
	}
}

// TestCheckpointsUnaligned checks how flinkctl checkpoints shows unaligned checkpoints: the
// table's TYPE says aligned or unaligned (a savepoint is always aligned) and IN-FLIGHT the
// persisted in-flight data; JSON has unaligned and in_flight_bytes for each.
func TestCheckpointsUnaligned(t *testing.T) {
	addr := serve(t, newFake())
	code, stdout, stderr := execute(t, "-m", addr, "checkpoints", "uc")
	if code != ExitOK {
		t.Fatalf("checkpoints uc = exit %d; stderr:\n%s", code, stderr)
	}
	local := cpTime.Local().Format("2006-01-02 15:04:05.000")
	want := [][]string{
		{"ID", "TYPE", "STATUS", "TRIGGERED", "DURATION", "SIZE", "IN-FLIGHT", "ALIGNMENT", "ACKS", "FAILURE"},
		{"24", "unaligned checkpoint", "IN_PROGRESS", local, "-", "-", "2.0 KiB", "-", "1/4", "-"},
		{"23", "unaligned checkpoint", "COMPLETED", local, "40 ms", "3.0 MiB", "3.0 MiB", "0 ms", "4/4", "-"},
		{"22", "aligned checkpoint", "COMPLETED", local, "900 ms", "1.0 KiB", "0 B", "850 ms", "4/4", "-"},
		{"21", "savepoint", "COMPLETED", local, "1.2 s", "1.0 KiB", "0 B", "1.1 s", "4/4", "-"},
	}
	if rows := tableRows(stdout); !slices.EqualFunc(rows, want, slices.Equal) {
		t.Errorf("checkpoints uc printed\n%s\nwant rows %q", stdout, want)
	}

	code, stdout, stderr = execute(t, "-m", addr, "-o", "json", "checkpoints", "uc")
	if code != ExitOK {
		t.Fatalf("checkpoints -o json uc = exit %d; stderr:\n%s", code, stderr)
	}
	var cps []map[string]any
	if err := json.Unmarshal([]byte(stdout), &cps); err != nil || len(cps) != 4 {
		t.Fatalf("output is not a JSON array of 4 checkpoints (%v):\n%s", err, stdout)
	}
	for i, w := range []map[string]any{
		{"id": 24.0, "unaligned": true, "in_flight_bytes": 2048.0, "savepoint": false},
		{"id": 23.0, "unaligned": true, "in_flight_bytes": float64(3<<20 - 1024), "state_size_bytes": float64(3 << 20)},
		{"id": 22.0, "unaligned": false, "in_flight_bytes": 0.0},
		{"id": 21.0, "unaligned": false, "in_flight_bytes": 0.0, "savepoint": true},
	} {
		requireCheckpointShape(t, fmt.Sprintf("checkpoints[%d]", i), cps[i])
		checkFields(t, fmt.Sprintf("checkpoints[%d]", i), cps[i], w)
	}
}

// flinkctl checkpoint says when the checkpoint it took was unaligned, and how much it persisted
// in flight.
func TestCheckpointOutcomeUnaligned(t *testing.T) {
	for _, tc := range []struct {
		cp   *pb.CheckpointInfo
		want string
	}{
		{unalignedHistory()[1], "Checkpoint 23 of job uc completed in 40 ms (3.0 MiB, unaligned: 3.0 MiB in flight)"},
		{unalignedHistory()[2], "Checkpoint 22 of job uc completed in 900 ms (1.0 KiB)"},
	} {
		if got := checkpointOutcome("uc", tc.cp); got != tc.want {
			t.Errorf("checkpointOutcome(%d) = %q, want %q", tc.cp.GetId(), got, tc.want)
		}
	}
}

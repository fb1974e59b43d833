package cli

import (
	"context"
	"encoding/json"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/goflink/goflink/internal/grpctest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// fakeClusterService answers GetCluster with canned JobManagers; only the JobManager marked
// as the leader lists the TaskManagers, like a real follower.
type fakeClusterService struct {
	pb.UnimplementedClusterServiceServer
	resp *pb.GetClusterResponse

	mu    sync.Mutex
	calls int
}

func (f *fakeClusterService) GetCluster(context.Context, *pb.GetClusterRequest) (*pb.GetClusterResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return f.resp, nil
}

func (f *fakeClusterService) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// listen reserves a loopback address for a fake that is started later (its answers name it).
func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

// serveOn serves the services on lis for the test.
func serveOn(t *testing.T, lis net.Listener, jobs pb.JobServiceServer, cluster pb.ClusterServiceServer) {
	t.Helper()
	grpctest.ServeOn(t, lis, func(srv *grpc.Server) {
		if jobs != nil {
			pb.RegisterJobServiceServer(srv, jobs)
		}
		if cluster != nil {
			pb.RegisterClusterServiceServer(srv, cluster)
		}
	})
}

var heartbeat = time.Date(2024, 5, 6, 7, 8, 9, 500_000_000, time.UTC)

// threeJobManagers is the group as jm1 (leader, at leaderAddr) or jm2 (follower, at
// followerAddr) describes it: jm3 is down.
func threeJobManagers(leaderAddr, followerAddr string) []*pb.JobManagerInfo {
	return []*pb.JobManagerInfo{
		{Id: "jm1", Address: leaderAddr, RaftAddress: "127.0.0.1:7001", Role: "Leader", Term: 3, LastIndex: 42, Leader: true},
		{Id: "jm2", Address: followerAddr, RaftAddress: "127.0.0.1:7002", Role: "Follower", Term: 3, LastIndex: 41},
		{Id: "jm3", Address: "127.0.0.1:1", RaftAddress: "127.0.0.1:7003", Error: "unreachable: connection refused"},
	}
}

func taskManagers() []*pb.TaskManagerInfo {
	return []*pb.TaskManagerInfo{
		{Id: "tm-0", Address: "127.0.0.1:6122", Slots: 2, FreeSlots: 1, LastHeartbeat: timestamppb.New(heartbeat)},
		{Id: "tm-1", Address: "127.0.0.1:6132", Slots: 2, FreeSlots: 2},
	}
}

// startGroup serves a leader and a follower; the follower lists no TaskManagers.
func startGroup(t *testing.T) (leaderAddr, followerAddr string, leader, follower *fakeClusterService) {
	t.Helper()
	ll, fl := listen(t), listen(t)
	leaderAddr, followerAddr = ll.Addr().String(), fl.Addr().String()
	jms := threeJobManagers(leaderAddr, followerAddr)
	leader = &fakeClusterService{resp: &pb.GetClusterResponse{Jobmanagers: jms, Taskmanagers: taskManagers(), AnsweredBy: "jm1"}}
	follower = &fakeClusterService{resp: &pb.GetClusterResponse{Jobmanagers: jms, AnsweredBy: "jm2"}}
	serveOn(t, ll, nil, leader)
	serveOn(t, fl, nil, follower)
	return leaderAddr, followerAddr, leader, follower
}

// The view is shown whole, and as jm3 could not be asked flinkctl says so and exits 1.
func TestClusterTable(t *testing.T) {
	leaderAddr, followerAddr, _, _ := startGroup(t)
	code, stdout, stderr := execute(t, "-m", leaderAddr, "cluster")
	if want := "flinkctl: incomplete cluster view: jobmanager jm3 could not be asked (unreachable: connection refused)\n"; code != ExitFailure || stderr != want {
		t.Fatalf("cluster with jm3 down = exit %d, stderr %q; want %d, %q", code, stderr, ExitFailure, want)
	}
	jmTable, tmTable, ok := strings.Cut(stdout, "\n\n")
	if !ok {
		t.Fatalf("cluster output has no blank line between the tables:\n%s", stdout)
	}
	want := [][]string{
		{"JOBMANAGER", "RPC ADDRESS", "RAFT ADDRESS", "ROLE", "TERM", "LAST INDEX", "LEADER"},
		{"jm1", leaderAddr, "127.0.0.1:7001", "Leader", "3", "42", "*"},
		{"jm2", followerAddr, "127.0.0.1:7002", "Follower", "3", "41"},
		{"jm3", "127.0.0.1:1", "127.0.0.1:7003", "-", "-", "-"},
		{"jm3: unreachable: connection refused"},
	}
	if got := tableRows(jmTable); !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("JobManagers =\n%q\nwant\n%q", got, want)
	}
	local := heartbeat.Local().Format("2006-01-02 15:04:05.000")
	want = [][]string{
		{"TASKMANAGER", "ADDRESS", "SLOTS", "FREE", "LAST HEARTBEAT"},
		{"tm-0", "127.0.0.1:6122", "2", "1", local},
		{"tm-1", "127.0.0.1:6132", "2", "2", "-"},
	}
	if got := tableRows(tmTable); !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("TaskManagers =\n%q\nwant\n%q", got, want)
	}
	for i, line := range strings.Split(stdout, "\n") {
		if strings.TrimRight(line, " ") != line {
			t.Errorf("line %d ends in blanks: %q", i, line)
		}
	}
}

func TestClusterTableWithoutLeader(t *testing.T) {
	lis := listen(t)
	cs := &fakeClusterService{resp: &pb.GetClusterResponse{Jobmanagers: []*pb.JobManagerInfo{
		{Id: "jm1", Address: lis.Addr().String(), RaftAddress: "127.0.0.1:7001", Role: "Candidate", Term: 4, LastIndex: 42},
	}}}
	serveOn(t, lis, nil, cs)
	code, stdout, stderr := execute(t, "-m", lis.Addr().String(), "cluster")
	if code != ExitFailure || !strings.Contains(stdout, "\nNo leader is known: an election may be under way.\n") ||
		!strings.Contains(stderr, "no leader is known (an election may be under way), so no TaskManagers are listed") {
		t.Errorf("cluster during an election = exit %d, stdout:\n%s\nstderr: %s\nwant a line saying no leader is known, and exit 1 saying the TaskManagers are missing", code, stdout, stderr)
	}
}

// jobManagerKeys and taskManagerKeys are the keys of cluster -o json: the documented contract.
var (
	jobManagerKeys  = []string{"address", "error", "id", "last_index", "leader", "raft_address", "role", "term"}
	taskManagerKeys = []string{"address", "free_slots", "id", "last_heartbeat", "slots"}
)

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func TestClusterJSON(t *testing.T) {
	leaderAddr, followerAddr, _, _ := startGroup(t)
	code, stdout, stderr := execute(t, "-m", leaderAddr, "-o", "json", "cluster")
	if code != ExitFailure || !strings.Contains(stderr, "jobmanager jm3 could not be asked") {
		t.Fatalf("cluster -o json with jm3 down = exit %d, want %d saying jm3 could not be asked; stderr:\n%s", code, ExitFailure, stderr)
	}
	var out struct {
		JobManagers  []map[string]any `json:"jobmanagers"`
		TaskManagers []map[string]any `json:"taskmanagers"`
	}
	if keys := sortedKeys(decodeObject(t, stdout)); !slices.Equal(keys, []string{"jobmanagers", "taskmanagers"}) {
		t.Errorf("cluster JSON keys = %v, want [jobmanagers taskmanagers]", keys)
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil || len(out.JobManagers) != 3 || len(out.TaskManagers) != 2 {
		t.Fatalf("cluster JSON = %v (%v), want 3 JobManagers and 2 TaskManagers:\n%s", out, err, stdout)
	}
	for i, jm := range out.JobManagers {
		if keys := sortedKeys(jm); !slices.Equal(keys, jobManagerKeys) {
			t.Errorf("jobmanagers[%d] keys = %v, want %v", i, keys, jobManagerKeys)
		}
	}
	for i, tm := range out.TaskManagers {
		if keys := sortedKeys(tm); !slices.Equal(keys, taskManagerKeys) {
			t.Errorf("taskmanagers[%d] keys = %v, want %v", i, keys, taskManagerKeys)
		}
	}
	checkFields(t, "jobmanagers[0]", out.JobManagers[0], map[string]any{"id": "jm1", "address": leaderAddr, "raft_address": "127.0.0.1:7001",
		"role": "Leader", "term": 3.0, "last_index": 42.0, "leader": true, "error": ""})
	checkFields(t, "jobmanagers[1]", out.JobManagers[1], map[string]any{"id": "jm2", "address": followerAddr, "role": "Follower",
		"term": 3.0, "last_index": 41.0, "leader": false, "error": ""})
	checkFields(t, "jobmanagers[2]", out.JobManagers[2], map[string]any{"id": "jm3", "role": "", "term": 0.0, "leader": false,
		"error": "unreachable: connection refused"})
	checkFields(t, "taskmanagers[0]", out.TaskManagers[0], map[string]any{"id": "tm-0", "address": "127.0.0.1:6122", "slots": 2.0,
		"free_slots": 1.0, "last_heartbeat": heartbeat.Format(time.RFC3339Nano)})
	checkFields(t, "taskmanagers[1]", out.TaskManagers[1], map[string]any{"id": "tm-1", "last_heartbeat": nil})

	// Empty lists are [], not null (and an answer without a leader is incomplete).
	lis := listen(t)
	serveOn(t, lis, nil, &fakeClusterService{resp: &pb.GetClusterResponse{}})
	code, stdout, stderr = execute(t, "-m", lis.Addr().String(), "-o", "json", "cluster")
	if m := decodeObject(t, stdout); code != ExitFailure || !isEmptyList(m["jobmanagers"]) || !isEmptyList(m["taskmanagers"]) {
		t.Errorf("cluster -o json of an empty cluster = exit %d, %s (stderr %s); want exit 1 with empty lists", code, stdout, stderr)
	}
}

func isEmptyList(v any) bool {
	l, ok := v.([]any)
	return ok && len(l) == 0
}

// Given a down JobManager and a follower, flinkctl cluster shows the leader's view: the
// follower names the leader, which lists the TaskManagers.
func TestClusterViaFollower(t *testing.T) {
	_, followerAddr, leader, follower := startGroup(t)
	down := listen(t)
	downAddr := down.Addr().String()
	down.Close()
	code, stdout, stderr := execute(t, "-m", downAddr+", "+followerAddr, "-o", "json", "cluster")
	if want := "flinkctl: incomplete cluster view: jobmanager jm3 could not be asked (unreachable: connection refused)\n"; code != ExitFailure || stderr != want {
		t.Fatalf("cluster via %s,%s = exit %d, stderr %q; want %d, %q (jm3 is down; the rest is whole)", downAddr, followerAddr, code, stderr, ExitFailure, want)
	}
	var out clusterJSON
	if err := json.Unmarshal([]byte(stdout), &out); err != nil || len(out.TaskManagers) != 2 {
		t.Errorf("cluster via a follower = %s (%v), want the leader's 2 TaskManagers", stdout, err)
	}
	if f, l := follower.callCount(), leader.callCount(); f != 1 || l != 1 {
		t.Errorf("follower, leader got %d, %d GetCluster calls; want 1, 1", f, l)
	}
}

// Given only a follower's address, flinkctl reaches the leader it names.
func TestCommandFollowsLeaderHint(t *testing.T) {
	leader := newFake()
	ll := listen(t)
	serveOn(t, ll, leader, nil)
	follower := newFake()
	follower.notLeader, follower.leaderAddr = true, ll.Addr().String()
	code, stdout, stderr := execute(t, "-m", serve(t, follower), "-o", "json", "checkpoints", "j1")
	var cps []map[string]any
	if err := json.Unmarshal([]byte(stdout), &cps); code != ExitOK || err != nil || len(cps) != 4 {
		t.Errorf("checkpoints j1 given a follower = exit %d, stdout %q, stderr %q; want the leader's 4 checkpoints", code, stdout, stderr)
	}
}

// During an election flinkctl waits for a leader instead of failing.
func TestCommandWaitsForLeader(t *testing.T) {
	f := newFake()
	f.unavailable = 4
	code, stdout, stderr := execute(t, "-m", serve(t, f), "checkpoints", "j1")
	if code != ExitOK || !strings.HasPrefix(stdout, "ID ") {
		t.Errorf("checkpoints j1 during an election = exit %d, stdout %q, stderr %q; want the table once a leader answers", code, stdout, stderr)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls != 5 {
		t.Errorf("the JobManager got %d calls, want 5 (4 during the election, then the answer)", f.calls)
	}
}

// fakeStreamJM accepts a submission and streams canned job details, then ends the stream with
// end (nil: a terminal status was sent).
type fakeStreamJM struct {
	pb.UnimplementedJobServiceServer
	details []*pb.JobDetails
	end     error
}

func (f *fakeStreamJM) SubmitJob(context.Context, *pb.SubmitJobRequest) (*pb.SubmitJobResponse, error) {
	return &pb.SubmitJobResponse{JobId: "j1"}, nil
}

func (f *fakeStreamJM) WatchJob(_ *pb.WatchJobRequest, stream pb.JobService_WatchJobServer) error {
	for _, d := range f.details {
		if err := stream.Send(&pb.WatchJobResponse{Job: d}); err != nil {
			return err
		}
	}
	return f.end
}

// flinkctl run follows the job across a leader change: the old leader's stream ends with
// NOT_LEADER, the watch resumes on the new leader, and failures in the new leader's exception
// history are printed although it is not longer than the old one.
func TestRunFollowsAcrossLeaderChange(t *testing.T) {
	nl := listen(t)
	failure := func(sec int, cause string) *pb.ExceptionEntry {
		return &pb.ExceptionEntry{Time: timestamppb.New(heartbeat.Add(time.Duration(sec) * time.Second)), Task: "map (1/2)",
			Taskmanager: "tm-0", Cause: cause}
	}
	running := func(ex ...*pb.ExceptionEntry) *pb.JobDetails {
		return &pb.JobDetails{Id: "j1", Status: pb.JobStatus_JOB_STATUS_RUNNING, Exceptions: ex}
	}
	old := &fakeStreamJM{details: []*pb.JobDetails{running(), running(failure(1, "first failure"))}, end: notLeaderStatus(t, nl.Addr().String())}
	// The new leader took the job over: RUNNING again, one restart more, from a checkpoint.
	restarted := running(failure(5, "second failure"))
	restarted.Restarts, restarted.RestoredCheckpointId = 1, 3
	lead := &fakeStreamJM{details: []*pb.JobDetails{restarted,
		{Id: "j1", Status: pb.JobStatus_JOB_STATUS_FINISHED, Exceptions: []*pb.ExceptionEntry{failure(5, "second failure")}}}}
	serveOn(t, nl, lead, nil)
	ol := listen(t)
	serveOn(t, ol, old, nil)

	code, stdout, stderr := execute(t, "-m", ol.Addr().String(), "run", writeSpec(t, "job.yaml", okSpec))
	if code != ExitOK {
		t.Fatalf("run = exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, ExitOK, stdout, stderr)
	}
	for _, want := range []string{"failure: map (1/2): first failure\n", "failure: map (1/2): second failure\n", "job j1 RUNNING\n",
		"job j1 RUNNING (restart 1, state and source offsets restored from checkpoint 3)\n", "job j1 FINISHED"} {
		if n := strings.Count(stdout, want); n != 1 {
			t.Errorf("run output has %q %d times, want once:\n%s", want, n, stdout)
		}
	}
}

func notLeaderStatus(t *testing.T, leader string) error {
	t.Helper()
	st, err := status.New(codes.FailedPrecondition, "this jobmanager is not the leader").
		WithDetails(&errdetails.ErrorInfo{Reason: "NOT_LEADER", Domain: "goflink", Metadata: map[string]string{"leader": leader}})
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

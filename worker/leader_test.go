package worker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/goflink/goflink/internal/execid"
	"github.com/goflink/goflink/internal/grpctest"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/job"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/worker"
)

// fakeJM is a JobManager's TaskManagerService on a loopback port whose leadership the test
// sets: it leads (accepting registrations at its term), follows (NOT_LEADER, naming a leader or
// not) or waits for an election (UNAVAILABLE).
type fakeJM struct {
	pb.UnimplementedTaskManagerServiceServer
	name string
	addr string

	mu            sync.Mutex
	refusal       error  // the answer to every RPC; nil while leading
	reportRefusal error  // the answer to UpdateTaskExecutionState while leading
	term          uint64 // the leader term while leading
	registerCalls int
	regs          []string // accepted registration IDs
	heartbeats    map[string]int
	reports       []*pb.UpdateTaskExecutionStateRequest
}

func startFakeJM(t *testing.T, name string) *fakeJM {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeJM{name: name, addr: lis.Addr().String(), heartbeats: map[string]int{}, refusal: noLeaderStatus(true)}
	grpctest.ServeOn(t, lis, func(srv *grpc.Server) { pb.RegisterTaskManagerServiceServer(srv, f) })
	return f
}

// lead makes the fake the leader of this term.
func (f *fakeJM) lead(term uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refusal, f.term = nil, term
}

// follow makes the fake a follower naming leader ("" for none).
func (f *fakeJM) follow(leader string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refusal = notLeaderStatus(leader)
}

// elect makes the fake answer UNAVAILABLE, with the NO_LEADER reason or without a detail.
func (f *fakeJM) elect(withReason bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refusal = noLeaderStatus(withReason)
}

func (f *fakeJM) refuseReports(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reportRefusal = err
}

func (f *fakeJM) answer() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refusal
}

func notLeaderStatus(leader string) error {
	info := &errdetails.ErrorInfo{Reason: "NOT_LEADER", Domain: "goflink"}
	if leader != "" {
		info.Metadata = map[string]string{"leader": leader, "leader_id": "jm-" + leader}
	}
	st, err := status.New(codes.FailedPrecondition, "this jobmanager is not the leader").WithDetails(info)
	if err != nil {
		panic(err)
	}
	return st.Err()
}

func noLeaderStatus(withReason bool) error {
	st := status.New(codes.Unavailable, "no jobmanager leader is known")
	if withReason {
		var err error
		if st, err = st.WithDetails(&errdetails.ErrorInfo{Reason: "NO_LEADER", Domain: "goflink"}); err != nil {
			panic(err)
		}
	}
	return st.Err()
}

func (f *fakeJM) RegisterTaskManager(_ context.Context, req *pb.RegisterTaskManagerRequest) (*pb.RegisterTaskManagerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.registerCalls++
	if f.refusal != nil {
		return nil, f.refusal
	}
	id := fmt.Sprintf("%s-reg-%d", f.name, len(f.regs)+1)
	f.regs = append(f.regs, id)
	return &pb.RegisterTaskManagerResponse{
		RegistrationId: id, JobmanagerId: f.name, LeaderTerm: f.term,
		HeartbeatIntervalMs: 20, HeartbeatTimeoutMs: 30_000,
	}, nil
}

// Heartbeat answers heartbeats while the fake leads and ends the stream with its refusal once
// it does not.
func (f *fakeJM) Heartbeat(stream pb.TaskManagerService_HeartbeatServer) error {
	for {
		if err := f.answer(); err != nil {
			return err
		}
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		f.mu.Lock()
		f.heartbeats[req.GetRegistrationId()]++
		f.mu.Unlock()
		if err := f.answer(); err != nil {
			return err
		}
		if err := stream.Send(&pb.HeartbeatResponse{}); err != nil {
			return err
		}
	}
}

func (f *fakeJM) UpdateTaskExecutionState(_ context.Context, req *pb.UpdateTaskExecutionStateRequest) (*pb.UpdateTaskExecutionStateResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refusal != nil {
		return nil, f.refusal
	}
	if f.reportRefusal != nil {
		return nil, f.reportRefusal
	}
	f.reports = append(f.reports, req)
	return &pb.UpdateTaskExecutionStateResponse{}, nil
}

func (f *fakeJM) registerCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.registerCalls
}

func (f *fakeJM) registrations() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.regs)
}

func (f *fakeJM) heartbeatsOf(registration string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.heartbeats[registration]
}

func (f *fakeJM) reported(key string, state pb.ExecutionState) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.ContainsFunc(f.reports, func(r *pb.UpdateTaskExecutionStateRequest) bool {
		return execid.Key(r.GetExecution()) == key && r.GetState() == state
	})
}

// waitFor polls cond until it holds, for up to 15 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 15*time.Second, what, func() error {
		if !cond() {
			return errors.New("not yet")
		}
		return nil
	})
}

// startTM starts a TaskManager given these JobManager addresses; it closes with the test.
func startTM(t *testing.T, jobmanagers ...string) *worker.TaskManager {
	t.Helper()
	tm, err := worker.Start(worker.Config{
		Addr: "127.0.0.1:0", JobManagers: jobmanagers, Stdout: io.Discard,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tm.Close() })
	return tm
}

// waitRegistered waits until jm accepted a registration and the TaskManager heartbeats on it
// (so it adopted it), and returns the registration ID.
func waitRegistered(t *testing.T, jm *fakeJM) string {
	t.Helper()
	var reg string
	waitFor(t, "a registration with "+jm.name, func() bool {
		regs := jm.registrations()
		if len(regs) == 0 {
			return false
		}
		reg = regs[len(regs)-1]
		return jm.heartbeatsOf(reg) > 0
	})
	return reg
}

// executor is a JobManager's client of the TaskManager's TaskExecutorService.
func executor(t *testing.T, tm *worker.TaskManager) pb.TaskExecutorServiceClient {
	t.Helper()
	c, err := grpc.NewClient(tm.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return pb.NewTaskExecutorServiceClient(c)
}

// startLedTM starts a fake JobManager leading in term and a TaskManager registered with it,
// and returns them, the registration ID and a client of the TaskManager's executor service.
func startLedTM(t *testing.T, term uint64) (*fakeJM, *worker.TaskManager, string, pb.TaskExecutorServiceClient) {
	t.Helper()
	leader := startFakeJM(t, "leader")
	leader.lead(term)
	tm := startTM(t, leader.addr)
	reg := waitRegistered(t, leader)
	return leader, tm, reg, executor(t, tm)
}

// endlessJob is a one-vertex job (a rate-limited endless sequence into a discard sink) whose
// task runs until it is cancelled.
func endlessJob(t *testing.T) *pb.JobGraph {
	t.Helper()
	g, err := job.Build(job.Request{SpecName: "endless", Spec: []byte(`name: endless
operators:
  - {name: numbers, type: sequence, from: 0, rate: 100}
  - {name: out, type: discard}
`)}, job.Env{})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func attempt(n int32) *pb.ExecutionAttemptID {
	return &pb.ExecutionAttemptID{JobId: "j", VertexId: 0, Subtask: 0, Attempt: n}
}

func running(tm *worker.TaskManager, id *pb.ExecutionAttemptID) bool {
	return slices.Contains(tm.RunningTasks(), execid.Key(id))
}

func rpcCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wantRefused checks that err is FAILED_PRECONDITION with msg in its message.
func wantRefused(t *testing.T, what string, err error, msg string) {
	t.Helper()
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), msg) {
		t.Fatalf("%s = %v, want FAILED_PRECONDITION with %q", what, err, msg)
	}
}

// (a) A follower listed first names the leader: the TaskManager registers there at once,
// without trying the JobManagers listed between them.
func TestRegister_FollowerHintLeadsToListedLeader(t *testing.T) {
	follower, electing, leader := startFakeJM(t, "follower"), startFakeJM(t, "electing"), startFakeJM(t, "leader")
	leader.lead(5)
	follower.follow(leader.addr)
	startTM(t, follower.addr, electing.addr, leader.addr)
	waitRegistered(t, leader)
	if n := follower.registerCount(); n != 1 {
		t.Errorf("follower got %d registration attempts, want 1", n)
	}
	if n := electing.registerCount(); n != 0 {
		t.Errorf("JobManager between follower and hinted leader got %d registration attempts, want 0", n)
	}
	if n := len(leader.registrations()); n != 1 {
		t.Errorf("leader accepted %d registrations, want 1", n)
	}
}

// (b) The TaskManager knows only a follower; it dials the leader the follower names.
func TestRegister_FollowsHintToUnlistedLeader(t *testing.T) {
	follower, leader := startFakeJM(t, "follower"), startFakeJM(t, "leader")
	leader.lead(2)
	follower.follow(leader.addr)
	startTM(t, follower.addr)
	waitRegistered(t, leader)
}

// (c) While no JobManager leads (UNAVAILABLE, with or without the NO_LEADER reason) the
// TaskManager keeps trying every JobManager, and registers once one leads.
func TestRegister_RetriesThroughElection(t *testing.T) {
	a, b := startFakeJM(t, "a"), startFakeJM(t, "b")
	a.elect(true)
	b.elect(false)
	startTM(t, a.addr, b.addr)
	waitFor(t, "three registration rounds during the election", func() bool {
		return a.registerCount() >= 3 && b.registerCount() >= 3
	})
	b.lead(3)
	a.follow(b.addr)
	waitRegistered(t, b)
	if n := len(a.registrations()); n != 0 {
		t.Errorf("follower accepted %d registrations", n)
	}
}

// A JobManager that accepts a registration at a term below one already seen is a deposed
// leader that does not know it yet: the TaskManager does not adopt that registration, and
// registers with the real leader once it is found.
func TestRegister_RefusesDeposedLeader(t *testing.T) {
	leader, deposed := startFakeJM(t, "leader"), startFakeJM(t, "deposed")
	leader.lead(5)
	deposed.follow(leader.addr)
	startTM(t, leader.addr)
	reg := waitRegistered(t, leader)
	// The leader steps down naming a JobManager that still believes it leads at term 4.
	deposed.lead(4)
	leader.follow(deposed.addr)
	waitFor(t, "registration attempts with the deposed leader", func() bool { return deposed.registerCount() >= 2 })
	for _, r := range deposed.registrations() {
		if n := deposed.heartbeatsOf(r); n != 0 {
			t.Fatalf("the TaskManager heartbeats %d times on registration %s of a deposed leader", n, r)
		}
	}
	leader.lead(6)
	waitFor(t, "a new registration with the leader", func() bool {
		regs := leader.registrations()
		return len(regs) == 2 && regs[1] != reg && leader.heartbeatsOf(regs[1]) > 0
	})
}

// (d) Commands of a leader term below the highest seen are refused and have no effect; commands
// of the current term work, and a command of a newer term raises the term.
func TestCommands_FencedByLeaderTerm(t *testing.T) {
	leader, tm, reg, ex := startLedTM(t, 7)
	ctx := rpcCtx(t)
	g := endlessJob(t)
	submit := func(term uint64, registration string, id *pb.ExecutionAttemptID) error {
		_, err := ex.SubmitTask(ctx, &pb.SubmitTaskRequest{RegistrationId: registration, LeaderTerm: term, Execution: id, JobGraph: g})
		return err
	}
	cancel := func(term uint64, registration string, id *pb.ExecutionAttemptID) error {
		_, err := ex.CancelTask(ctx, &pb.CancelTaskRequest{RegistrationId: registration, LeaderTerm: term, Execution: id})
		return err
	}

	wantRefused(t, "SubmitTask(term 6)", submit(6, reg, attempt(1)), "stale leader term 6 < 7")
	if got := tm.RunningTasks(); len(got) != 0 {
		t.Fatalf("a stale SubmitTask started tasks %v", got)
	}
	// A stale CancelTask would leave a tombstone that refuses the SubmitTask after it.
	wantRefused(t, "CancelTask(term 6)", cancel(6, reg, attempt(2)), "stale leader term 6 < 7")
	if err := submit(7, reg, attempt(2)); err != nil {
		t.Fatalf("SubmitTask(term 7) after a stale CancelTask: %v", err)
	}
	waitFor(t, "the task to run", func() bool { return running(tm, attempt(2)) })

	wantRefused(t, "CancelTask(term 6) of a running task", cancel(6, reg, attempt(2)), "stale leader term 6 < 7")
	_, err := ex.TriggerTaskCheckpoint(ctx, &pb.TriggerTaskCheckpointRequest{RegistrationId: reg, LeaderTerm: 6, Execution: attempt(2),
		Barrier: &pb.CheckpointBarrier{CheckpointId: 1}})
	wantRefused(t, "TriggerTaskCheckpoint(term 6)", err, "stale leader term 6 < 7")
	_, err = ex.NotifyCheckpointComplete(ctx, &pb.NotifyCheckpointCompleteRequest{RegistrationId: reg, LeaderTerm: 6, Execution: attempt(2), CheckpointId: 1})
	wantRefused(t, "NotifyCheckpointComplete(term 6)", err, "stale leader term 6 < 7")
	_, err = ex.NotifyCheckpointAborted(ctx, &pb.NotifyCheckpointAbortedRequest{RegistrationId: reg, LeaderTerm: 6, Execution: attempt(2), CheckpointId: 1})
	wantRefused(t, "NotifyCheckpointAborted(term 6)", err, "stale leader term 6 < 7")
	// Without a term, only the current registration is trusted.
	wantRefused(t, "CancelTask(term 0) of another registration", cancel(0, "old-reg", attempt(2)), "without a leader term")
	wantRefused(t, "SubmitTask(term 0) of another registration", submit(0, "old-reg", attempt(3)), "without a leader term")
	if _, err := ex.NotifyCheckpointAborted(ctx, &pb.NotifyCheckpointAbortedRequest{RegistrationId: reg, Execution: attempt(2), CheckpointId: 1}); err != nil {
		t.Fatalf("NotifyCheckpointAborted(term 0) of the current registration: %v", err)
	}
	if !running(tm, attempt(2)) {
		t.Fatal("refused commands stopped the task")
	}

	// A command of a newer term (the same leader re-elected) is accepted and fences term 7.
	if _, err := ex.NotifyCheckpointComplete(ctx, &pb.NotifyCheckpointCompleteRequest{RegistrationId: reg, LeaderTerm: 8, Execution: attempt(2), CheckpointId: 1}); err != nil {
		t.Fatalf("NotifyCheckpointComplete(term 8): %v", err)
	}
	wantRefused(t, "CancelTask(term 7) after term 8", cancel(7, reg, attempt(2)), "stale leader term 7 < 8")
	if err := cancel(8, reg, attempt(2)); err != nil {
		t.Fatalf("CancelTask(term 8): %v", err)
	}
	waitFor(t, "the cancelled task to end", func() bool { return !running(tm, attempt(2)) })
	waitFor(t, "the CANCELED report", func() bool {
		return leader.reported(execid.Key(attempt(2)), pb.ExecutionState_EXECUTION_STATE_CANCELED)
	})
}

// A command of a registration that is not the TaskManager's current one cannot raise its
// leader term: one CancelTask with term 2^64-1 once made a TaskManager refuse every later
// command of its real leader and every registration, while it looked healthy. The forged
// commands are refused, the leader's commands still work, and a new leader's registration
// still raises the term.
func TestCommands_ForeignRegistrationCannotRaiseTheTerm(t *testing.T) {
	leader, next := startFakeJM(t, "leader"), startFakeJM(t, "next")
	leader.lead(7)
	next.follow(leader.addr)
	tm := startTM(t, leader.addr, next.addr)
	reg := waitRegistered(t, leader)
	ex := executor(t, tm)
	ctx := rpcCtx(t)
	g := endlessJob(t)
	const poison = math.MaxUint64
	for _, registration := range []string{"forged", ""} {
		_, err := ex.CancelTask(ctx, &pb.CancelTaskRequest{RegistrationId: registration, LeaderTerm: poison, Execution: attempt(1)})
		wantRefused(t, fmt.Sprintf("CancelTask(term 2^64-1, registration %q)", registration), err, "is not adopted (leader term 7)")
		_, err = ex.SubmitTask(ctx, &pb.SubmitTaskRequest{RegistrationId: registration, LeaderTerm: poison, Execution: attempt(1), JobGraph: g})
		wantRefused(t, fmt.Sprintf("SubmitTask(term 2^64-1, registration %q)", registration), err, "is not adopted")
		_, err = ex.TriggerTaskCheckpoint(ctx, &pb.TriggerTaskCheckpointRequest{RegistrationId: registration, LeaderTerm: poison, Execution: attempt(1),
			Barrier: &pb.CheckpointBarrier{CheckpointId: 1}})
		wantRefused(t, fmt.Sprintf("TriggerTaskCheckpoint(term 2^64-1, registration %q)", registration), err, "is not adopted")
		_, err = ex.NotifyCheckpointComplete(ctx, &pb.NotifyCheckpointCompleteRequest{RegistrationId: registration, LeaderTerm: poison, Execution: attempt(1), CheckpointId: 1})
		wantRefused(t, fmt.Sprintf("NotifyCheckpointComplete(term 2^64-1, registration %q)", registration), err, "is not adopted")
		_, err = ex.NotifyCheckpointAborted(ctx, &pb.NotifyCheckpointAbortedRequest{RegistrationId: registration, LeaderTerm: poison, Execution: attempt(1), CheckpointId: 1})
		wantRefused(t, fmt.Sprintf("NotifyCheckpointAborted(term 2^64-1, registration %q)", registration), err, "is not adopted")
	}
	// The leader's commands still pass: the term is still 7.
	if _, err := ex.SubmitTask(ctx, &pb.SubmitTaskRequest{RegistrationId: reg, LeaderTerm: 7, Execution: attempt(1), JobGraph: g}); err != nil {
		t.Fatalf("SubmitTask of the leader after the forged commands: %v", err)
	}
	waitFor(t, "the leader's task to run", func() bool { return running(tm, attempt(1)) })
	// A new leader's registration raises the term, as before.
	next.lead(8)
	leader.follow(next.addr)
	newReg := waitRegistered(t, next)
	if _, err := ex.SubmitTask(ctx, &pb.SubmitTaskRequest{RegistrationId: newReg, LeaderTerm: 8, Execution: attempt(2), JobGraph: g}); err != nil {
		t.Fatalf("SubmitTask of the new leader: %v", err)
	}
	waitFor(t, "the new leader's task to run", func() bool { return running(tm, attempt(2)) })
	_, err := ex.SubmitTask(ctx, &pb.SubmitTaskRequest{RegistrationId: reg, LeaderTerm: 7, Execution: attempt(3), JobGraph: g})
	wantRefused(t, "SubmitTask of the old leader", err, "stale leader term 7 < 8")
}

// (e) The leader steps down and says so on the heartbeat stream, naming the new leader: the
// TaskManager cancels the tasks of the old registration, registers with the new leader straight
// away, and refuses the old leader's commands.
func TestLeaderChange_OnHeartbeat_CancelsTasksAndFollowsNewLeader(t *testing.T) {
	old, next := startFakeJM(t, "old"), startFakeJM(t, "next")
	old.lead(3)
	next.follow(old.addr)
	tm := startTM(t, old.addr, next.addr)
	reg := waitRegistered(t, old)
	ex := executor(t, tm)
	ctx := rpcCtx(t)
	g := endlessJob(t)
	if _, err := ex.SubmitTask(ctx, &pb.SubmitTaskRequest{RegistrationId: reg, LeaderTerm: 3, Execution: attempt(1), JobGraph: g}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the task to run", func() bool { return running(tm, attempt(1)) })

	next.lead(4)
	old.follow(next.addr)
	waitFor(t, "the task to be cancelled", func() bool { return !running(tm, attempt(1)) })
	newReg := waitRegistered(t, next)
	if n := old.registerCount(); n != 1 {
		t.Errorf("old leader got %d registration attempts, want 1 (the hint names the new leader)", n)
	}
	_, err := ex.SubmitTask(ctx, &pb.SubmitTaskRequest{RegistrationId: reg, LeaderTerm: 3, Execution: attempt(2), JobGraph: g})
	wantRefused(t, "SubmitTask of the old leader", err, "stale leader term 3 < 4")
	if _, err := ex.SubmitTask(ctx, &pb.SubmitTaskRequest{RegistrationId: newReg, LeaderTerm: 4, Execution: attempt(3), JobGraph: g}); err != nil {
		t.Fatalf("SubmitTask of the new leader: %v", err)
	}
	waitFor(t, "the new leader's task to run", func() bool { return running(tm, attempt(3)) })
}

// A JobManager that answers a task state report with NOT_LEADER loses the registration even
// though its heartbeats still pass: the TaskManager cancels the task and follows the hint.
func TestLeaderChange_OnReport_CancelsTasksAndFollowsNewLeader(t *testing.T) {
	old, next := startFakeJM(t, "old"), startFakeJM(t, "next")
	old.lead(1)
	next.lead(2)
	old.refuseReports(notLeaderStatus(next.addr))
	tm := startTM(t, old.addr)
	reg := waitRegistered(t, old)
	ex := executor(t, tm)
	if _, err := ex.SubmitTask(rpcCtx(t), &pb.SubmitTaskRequest{RegistrationId: reg, LeaderTerm: 1, Execution: attempt(1), JobGraph: endlessJob(t)}); err != nil {
		t.Fatal(err)
	}
	waitRegistered(t, next)
	waitFor(t, "the task to be cancelled", func() bool { return !running(tm, attempt(1)) })
	if n := old.registerCount(); n != 1 {
		t.Errorf("old leader got %d registration attempts, want 1", n)
	}
}

func TestParseJobManagers(t *testing.T) {
	tests := []struct {
		name    string
		in      []string
		want    []string
		wantErr string
	}{
		{"one", []string{"jm1:6123"}, []string{"jm1:6123"}, ""},
		{"comma-separated", []string{"jm1:6123, jm2:6123 ,jm3:6123"}, []string{"jm1:6123", "jm2:6123", "jm3:6123"}, ""},
		{"repeated", []string{"jm1:6123", "jm2:6123,jm3:6123"}, []string{"jm1:6123", "jm2:6123", "jm3:6123"}, ""},
		{"duplicates dropped", []string{"jm1:6123,jm1:6123", "jm1:6123"}, []string{"jm1:6123"}, ""},
		{"ipv6", []string{"[::1]:6123"}, []string{"[::1]:6123"}, ""},
		{"none", nil, nil, "at least one jobmanager address"},
		{"empty entry", []string{"jm1:6123,,jm2:6123"}, nil, `empty jobmanager address in "jm1:6123,,jm2:6123"`},
		{"missing port", []string{"jm1"}, nil, `jobmanager address "jm1"`},
		{"missing host", []string{":6123"}, nil, `jobmanager address ":6123": missing host`},
		{"bad port", []string{"jm1:http"}, nil, "port must be a number from 1 to 65535"},
		{"port out of range", []string{"jm1:70000"}, nil, "port must be a number from 1 to 65535"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := worker.ParseJobManagers(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseJobManagers(%q) = %v, %v; want error with %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("ParseJobManagers(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

// One notification names several tasks of the TaskManager (the JobManager sends one per
// TaskManager): each running task takes it, a task that does not run is skipped, and a
// request with an entry without a job ID or no task at all is refused before any task takes it.
func TestNotifyCheckpoint_SeveralTasksInOneRequest(t *testing.T) {
	_, tm, reg, ex := startLedTM(t, 3)
	ctx := rpcCtx(t)
	g := endlessJob(t)
	for _, n := range []int32{1, 2} {
		if _, err := ex.SubmitTask(ctx, &pb.SubmitTaskRequest{RegistrationId: reg, LeaderTerm: 3, Execution: attempt(n), JobGraph: g}); err != nil {
			t.Fatalf("SubmitTask(attempt %d): %v", n, err)
		}
	}
	waitFor(t, "both tasks to run", func() bool { return running(tm, attempt(1)) && running(tm, attempt(2)) })
	wantCompleted := func(what string, want int64) {
		t.Helper()
		for _, n := range []int32{1, 2} {
			if got, ok := tm.LastCompletedCheckpoint(ctx, execid.Key(attempt(n))); !ok || got != want {
				t.Fatalf("%s: attempt %d's last completed checkpoint = %d (running %v), want %d", what, n, got, ok, want)
			}
		}
	}

	if _, err := ex.NotifyCheckpointComplete(ctx, &pb.NotifyCheckpointCompleteRequest{RegistrationId: reg, LeaderTerm: 3,
		Executions: []*pb.ExecutionAttemptID{attempt(1), attempt(9), attempt(2)}, CheckpointId: 4}); err != nil {
		t.Fatalf("NotifyCheckpointComplete of two running tasks and one that does not run: %v", err)
	}
	wantCompleted("after completion 4", 4)

	_, err := ex.NotifyCheckpointComplete(ctx, &pb.NotifyCheckpointCompleteRequest{RegistrationId: reg, LeaderTerm: 3,
		Executions: []*pb.ExecutionAttemptID{attempt(1), nil}, CheckpointId: 5})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "execution 2 of 2 has no job_id") {
		t.Fatalf("NotifyCheckpointComplete with an empty entry = %v, want INVALID_ARGUMENT naming the second execution", err)
	}
	_, err = ex.NotifyCheckpointAborted(ctx, &pb.NotifyCheckpointAbortedRequest{RegistrationId: reg, LeaderTerm: 3, CheckpointId: 5, LatestCompletedId: 5})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "execution is required") {
		t.Fatalf("NotifyCheckpointAborted naming no task = %v, want INVALID_ARGUMENT", err)
	}
	wantCompleted("after the refused requests", 4)

	// execution and executions together: an abort redelivers the latest completion to both.
	if _, err := ex.NotifyCheckpointAborted(ctx, &pb.NotifyCheckpointAbortedRequest{RegistrationId: reg, LeaderTerm: 3,
		Execution: attempt(2), Executions: []*pb.ExecutionAttemptID{attempt(1)}, CheckpointId: 7, LatestCompletedId: 6}); err != nil {
		t.Fatalf("NotifyCheckpointAborted: %v", err)
	}
	wantCompleted("after abort 7 (latest completed 6)", 6)
}

package client

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goflink/goflink/internal/grpctest"
	"github.com/goflink/goflink/internal/leaderrpc"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// fakeJobs is a JobService on loopback for the checkpoint calls; a follower answers NOT_LEADER.
type fakeJobs struct {
	pb.UnimplementedJobServiceServer
	follower bool
	calls    atomic.Int32
}

func (f *fakeJobs) notLeader() error {
	st, err := status.New(codes.FailedPrecondition, "this jobmanager is not the leader").
		WithDetails(&errdetails.ErrorInfo{Reason: leaderrpc.ReasonNotLeader, Domain: "goflink"})
	if err != nil {
		return err
	}
	return st.Err()
}

func (f *fakeJobs) ListCheckpoints(_ context.Context, req *pb.ListCheckpointsRequest) (*pb.ListCheckpointsResponse, error) {
	f.calls.Add(1)
	if f.follower {
		return nil, f.notLeader()
	}
	return &pb.ListCheckpointsResponse{Checkpoints: []*pb.CheckpointInfo{
		{Id: 2, Status: pb.CheckpointStatus_CHECKPOINT_STATUS_IN_PROGRESS},
		{Id: 1, Status: pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED, Path: req.GetJobId() + "/chk-1"},
	}}, nil
}

func (f *fakeJobs) TriggerCheckpoint(_ context.Context, req *pb.TriggerCheckpointRequest) (*pb.TriggerCheckpointResponse, error) {
	f.calls.Add(1)
	switch {
	case f.follower:
		return nil, f.notLeader()
	case req.GetJobId() == "plain":
		return nil, status.Error(codes.FailedPrecondition, "job plain: checkpointing is not enabled for this job (set execution.checkpointing.interval)")
	case req.GetJobId() == "empty":
		return &pb.TriggerCheckpointResponse{}, nil
	}
	return &pb.TriggerCheckpointResponse{Checkpoint: &pb.CheckpointInfo{Id: 3, Status: pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED,
		Path: req.GetJobId() + "/chk-3"}}, nil
}

func serveFake(t *testing.T, f *fakeJobs) string {
	t.Helper()
	addr, _ := grpctest.Serve(t, func(srv *grpc.Server) { pb.RegisterJobServiceServer(srv, f) })
	return addr
}

func TestCheckpointCalls(t *testing.T) {
	follower, leader := &fakeJobs{follower: true}, &fakeJobs{}
	c, err := New(serveFake(t, follower) + "," + serveFake(t, leader))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	cps, err := c.Checkpoints(ctx, "j1")
	if err != nil || len(cps) != 2 || cps[0].GetId() != 2 || cps[1].GetPath() != "j1/chk-1" {
		t.Errorf("Checkpoints(j1) = %v, %v; want the leader's two checkpoints, newest first", cps, err)
	}
	cp, err := c.TriggerCheckpoint(ctx, "j1")
	if err != nil || cp.GetId() != 3 || cp.GetPath() != "j1/chk-3" {
		t.Errorf("TriggerCheckpoint(j1) = %v, %v; want the leader's checkpoint 3", cp, err)
	}
	if f, l := follower.calls.Load(), leader.calls.Load(); f != 1 || l != 2 {
		t.Errorf("follower, leader served %d, %d calls; want 1, 2 (the first call tried on the follower, then the leader; the second on the leader alone)", f, l)
	}

	// A precondition that is not NOT_LEADER is the answer: no retry.
	before := leader.calls.Load()
	_, err = c.TriggerCheckpoint(ctx, "plain")
	if st, _ := status.FromError(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "checkpointing is not enabled") {
		t.Errorf("TriggerCheckpoint(plain) error = %v, want FAILED_PRECONDITION saying checkpointing is not enabled", err)
	}
	if n := leader.calls.Load() - before; n != 1 {
		t.Errorf("TriggerCheckpoint(plain) reached the leader %d times, want 1", n)
	}

	if cp, err := c.TriggerCheckpoint(ctx, "empty"); err == nil || !strings.Contains(err.Error(), "without a checkpoint") {
		t.Errorf("TriggerCheckpoint(empty) = %v, %v; want an error for an answer without a checkpoint", cp, err)
	}
}

func TestRunningAt(t *testing.T) {
	running := &pb.TaskDetails{Operator: "src", Status: pb.ExecutionState_EXECUTION_STATE_RUNNING}
	finished := &pb.TaskDetails{Operator: "src", Subtask: 1, Status: pb.ExecutionState_EXECUTION_STATE_FINISHED}
	job := func(s pb.JobStatus, p int32, tasks ...*pb.TaskDetails) *pb.JobDetails {
		return &pb.JobDetails{Status: s, Parallelism: p, Tasks: tasks}
	}
	for _, tc := range []struct {
		d    *pb.JobDetails
		p    int32
		want string // "" = running
	}{
		{job(pb.JobStatus_JOB_STATUS_RUNNING, 2, running, running), 2, ""},
		{job(pb.JobStatus_JOB_STATUS_RUNNING, 2, running, running), 0, ""},
		{job(pb.JobStatus_JOB_STATUS_RUNNING, 2, running, running), 3, "parallelism 2"},
		{job(pb.JobStatus_JOB_STATUS_RESTARTING, 2, running, running), 2, "RESTARTING"},
		{job(pb.JobStatus_JOB_STATUS_RUNNING, 2, running, finished), 2, "task src 1 is EXECUTION_STATE_FINISHED"},
		{job(pb.JobStatus_JOB_STATUS_RUNNING, 2), 2, "no tasks"},
	} {
		err := RunningAt(tc.d, tc.p)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("RunningAt(%v, %d) = %v, want %q", tc.d, tc.p, err, tc.want)
		}
	}
}

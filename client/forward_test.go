package client

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/goflink/goflink/internal/grpctest"
	"github.com/goflink/goflink/internal/leaderrpc"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// servingJM serves job j1 (RUNNING, then FINISHED on the second message of a watch) and counts
// its calls. With names set it answers like a follower that forwarded the call: the header names
// that leader.
type servingJM struct {
	pb.UnimplementedJobServiceServer
	names string

	mu    sync.Mutex
	calls map[string]int
}

func (s *servingJM) count(ctx context.Context, method string) error {
	s.mu.Lock()
	s.calls[method]++
	s.mu.Unlock()
	if s.names == "" {
		return nil
	}
	return grpc.SetHeader(ctx, metadata.Pairs(leaderrpc.LeaderHeader, s.names))
}

func (s *servingJM) callsOf(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method]
}

func (s *servingJM) GetJob(ctx context.Context, req *pb.GetJobRequest) (*pb.GetJobResponse, error) {
	if err := s.count(ctx, "GetJob"); err != nil {
		return nil, err
	}
	return &pb.GetJobResponse{Job: &pb.JobDetails{Id: req.GetJobId(), Status: pb.JobStatus_JOB_STATUS_RUNNING}}, nil
}

func (s *servingJM) WatchJob(req *pb.WatchJobRequest, stream pb.JobService_WatchJobServer) error {
	if err := s.count(stream.Context(), "WatchJob"); err != nil {
		return err
	}
	for _, st := range []pb.JobStatus{pb.JobStatus_JOB_STATUS_RUNNING, pb.JobStatus_JOB_STATUS_FINISHED} {
		if err := stream.Send(&pb.WatchJobResponse{Job: &pb.JobDetails{Id: req.GetJobId(), Status: st}}); err != nil {
			return err
		}
	}
	return nil
}

func startServing(t *testing.T, names string) (*servingJM, string) {
	t.Helper()
	s := &servingJM{names: names, calls: map[string]int{}}
	addr, _ := grpctest.Serve(t, func(srv *grpc.Server) { pb.RegisterJobServiceServer(srv, s) })
	return s, addr
}

// After a follower forwarded a call and named the leader, the next calls (a watch too) go to
// the leader directly.
func TestCallsGoToTheLeaderAFollowerNamed(t *testing.T) {
	leader, leaderAddr := startServing(t, "")
	follower, followerAddr := startServing(t, leaderAddr)
	cl := newClient(t, followerAddr)
	ctx := testContext(t)
	for range 2 {
		if _, err := cl.Job(ctx, "j1"); err != nil {
			t.Fatalf("Job(j1) = %v", err)
		}
	}
	if f, l := follower.callsOf("GetJob"), leader.callsOf("GetJob"); f != 1 || l != 1 {
		t.Errorf("follower, leader served %d, %d GetJob calls; want 1, 1 (the second call at the leader the follower named)", f, l)
	}
	if last, err := cl.Watch(ctx, "j1", func(*pb.JobDetails) error { return nil }); err != nil || !IsTerminal(last.GetStatus()) {
		t.Fatalf("Watch(j1) = %v, %v", last.GetStatus(), err)
	}
	if f, l := follower.callsOf("WatchJob"), leader.callsOf("WatchJob"); f != 0 || l != 1 {
		t.Errorf("follower, leader served %d, %d WatchJob calls; want 0, 1", f, l)
	}
}

// A named leader this machine cannot reach (a name only the cluster's network resolves, a port
// it cannot connect to) costs one try: the forwarding follower serves every call, and the named
// leader is not tried again.
func TestUnreachableNamedLeaderLeavesCallsToTheFollower(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := closed.Addr().String()
	closed.Close()
	for _, named := range []string{"jm2.invalid:6123", refused} {
		follower, followerAddr := startServing(t, named)
		cl := newClient(t, followerAddr)
		ctx := testContext(t)
		start := time.Now()
		for range 4 {
			if _, err := cl.Job(ctx, "j1"); err != nil {
				t.Fatalf("Job(j1) at a follower naming %s = %v", named, err)
			}
		}
		if last, err := cl.Watch(ctx, "j1", func(*pb.JobDetails) error { return nil }); err != nil || !IsTerminal(last.GetStatus()) {
			t.Fatalf("Watch(j1) at a follower naming %s = %v, %v", named, last.GetStatus(), err)
		}
		if n, took := follower.callsOf("GetJob"), time.Since(start); n != 4 || took > 3*time.Second {
			t.Errorf("follower naming %s served %d of 4 calls in %v; want all, in well under 3 s", named, n, took)
		}
		cl.mu.Lock()
		leader, unreached := cl.leader, cl.unreached[named]
		cl.mu.Unlock()
		if leader != "" || !unreached {
			t.Errorf("after the calls: named leader %q, %s unreached %v; want none, true", leader, named, unreached)
		}
	}
}

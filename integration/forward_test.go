package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/goflink/goflink/client"
	"github.com/goflink/goflink/internal/leaderrpc"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// Leader forwarding with a Raft group of three JobManagers: a follower serves every client call
// through the leader, one address of any JobManager is enough.

// checkpointedSpec is a job that takes checkpoints and runs until cancelled, or for n values.
func checkpointedSpec(t *testing.T, n int) string {
	to := ""
	if n > 0 {
		to = fmt.Sprintf(" to: %d,", n)
	}
	return fmt.Sprintf(`name: forwarded
parallelism: 2
config:
  execution.checkpointing.interval: 100ms
  execution.checkpointing.dir: %s
operators:
  - {name: numbers, type: sequence, from: 1,%s rate: 300}
  - {name: out, type: discard}
`, filepath.Join(t.TempDir(), "cp"), to)
}

// dialJM is a plain gRPC connection to one JobManager: it follows no hint and tries no other.
func dialJM(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// checkForwarded fails the test unless header names the leader, as a forwarded answer's does.
func checkForwarded(t *testing.T, call string, header metadata.MD, leader string) {
	t.Helper()
	if got := header.Get(leaderrpc.LeaderHeader); !slices.Equal(got, []string{leader}) {
		t.Errorf("%s at a follower: header %s = %q, want the leader %s (a forwarded answer)", call, leaderrpc.LeaderHeader, got, leader)
	}
}

// Every JobService call and GetCluster, made at a follower with a plain connection, is served
// by the leader and answered through the follower, WatchJob's stream included; the follower
// answers GetJobManagerStatus itself.
func TestFollowerForwardsClientCalls(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, _ := miniclustertest.StartT(t, minicluster.Options{JobManagers: 3, TaskManagers: 2, Slots: 2})
	leader := waitLeader(t, c, 10*time.Second)
	follower := (leader + 1) % 3
	leaderAddr := c.JMs[leader].Addr()
	conn := dialJM(t, c.JMs[follower].Addr())
	jobs, cluster := pb.NewJobServiceClient(conn), pb.NewClusterServiceClient(conn)

	var h metadata.MD
	sub, err := jobs.SubmitJob(ctx, &pb.SubmitJobRequest{Spec: []byte(checkpointedSpec(t, 0))}, grpc.Header(&h))
	if err != nil {
		t.Fatalf("SubmitJob at a follower = %v", err)
	}
	checkForwarded(t, "SubmitJob", h, leaderAddr)
	id := sub.GetJobId()

	h = nil
	list, err := jobs.ListJobs(ctx, &pb.ListJobsRequest{}, grpc.Header(&h))
	if err != nil || len(list.GetJobs()) != 1 || list.GetJobs()[0].GetId() != id {
		t.Fatalf("ListJobs at a follower = %v, %v; want job %s", list, err, id)
	}
	checkForwarded(t, "ListJobs", h, leaderAddr)

	watch, err := jobs.WatchJob(ctx, &pb.WatchJobRequest{JobId: id})
	if err != nil {
		t.Fatalf("WatchJob at a follower = %v", err)
	}
	first, err := watch.Recv()
	if err != nil || first.GetJob().GetId() != id {
		t.Fatalf("WatchJob at a follower: first message %v, %v; want job %s", first, err, id)
	}
	if h, err := watch.Header(); err != nil {
		t.Errorf("WatchJob header: %v", err)
	} else {
		checkForwarded(t, "WatchJob", h, leaderAddr)
	}

	poll.Until(t, 30*time.Second, "the job running with a checkpoint, seen through the follower", func() error {
		h = nil
		resp, err := jobs.GetJob(ctx, &pb.GetJobRequest{JobId: id}, grpc.Header(&h))
		if err != nil {
			return err
		}
		if resp.GetJob().GetStatus() != pb.JobStatus_JOB_STATUS_RUNNING || resp.GetJob().GetLastCheckpoint() == nil {
			return fmt.Errorf("job %v, last checkpoint %v", resp.GetJob().GetStatus(), resp.GetJob().GetLastCheckpoint())
		}
		return nil
	})
	checkForwarded(t, "GetJob", h, leaderAddr)

	h = nil
	cp, err := jobs.TriggerCheckpoint(ctx, &pb.TriggerCheckpointRequest{JobId: id}, grpc.Header(&h))
	if err != nil || cp.GetCheckpoint().GetStatus() != pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED {
		t.Fatalf("TriggerCheckpoint at a follower = %v, %v; want a completed checkpoint", cp, err)
	}
	checkForwarded(t, "TriggerCheckpoint", h, leaderAddr)

	h = nil
	cps, err := jobs.ListCheckpoints(ctx, &pb.ListCheckpointsRequest{JobId: id}, grpc.Header(&h))
	if err != nil || !slices.ContainsFunc(cps.GetCheckpoints(), func(i *pb.CheckpointInfo) bool { return i.GetId() == cp.GetCheckpoint().GetId() }) {
		t.Fatalf("ListCheckpoints at a follower = %v, %v; want checkpoint %d among them", cps, err, cp.GetCheckpoint().GetId())
	}
	checkForwarded(t, "ListCheckpoints", h, leaderAddr)

	h = nil
	view, err := cluster.GetCluster(ctx, &pb.GetClusterRequest{}, grpc.Header(&h))
	if err != nil || view.GetAnsweredBy() != fmt.Sprintf("jm-%d", leader+1) || len(view.GetTaskmanagers()) != 2 {
		t.Fatalf("GetCluster at a follower = %v, %v; want the leader jm-%d's view with 2 TaskManagers", view, err, leader+1)
	}
	checkForwarded(t, "GetCluster", h, leaderAddr)

	h = nil
	own, err := cluster.GetJobManagerStatus(ctx, &pb.GetJobManagerStatusRequest{}, grpc.Header(&h))
	if err != nil || own.GetJobmanager().GetId() != fmt.Sprintf("jm-%d", follower+1) || len(h.Get(leaderrpc.LeaderHeader)) != 0 {
		t.Errorf("GetJobManagerStatus at jm-%d = %v, %v, header %v; want its own status, not forwarded", follower+1, own, err, h)
	}

	h = nil
	if _, err := jobs.CancelJob(ctx, &pb.CancelJobRequest{JobId: id}, grpc.Header(&h)); err != nil {
		t.Fatalf("CancelJob at a follower = %v", err)
	}
	checkForwarded(t, "CancelJob", h, leaderAddr)

	// The relayed stream carries the job to its end.
	last := first.GetJob()
	for {
		m, err := watch.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("WatchJob at a follower broke: %v (last status %v)", err, last.GetStatus())
		}
		last = m.GetJob()
	}
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_CANCELED {
		t.Errorf("WatchJob at a follower ended with %v, want CANCELED", last.GetStatus())
	}
}

// A client given only a follower's address runs every call, and a Watch follows the job to its
// end while the leader is stopped: the stream breaks, and the watch resumes through the follower
// on the new leader.
func TestClientThroughOneFollower(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, _ := miniclustertest.StartT(t, minicluster.Options{JobManagers: 3, TaskManagers: 2, Slots: 2})
	leader := waitLeader(t, c, 10*time.Second)
	follower := (leader + 1) % 3
	cl, err := client.New(c.JMs[follower].Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	id, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(checkpointedSpec(t, 0))})
	if err != nil {
		t.Fatalf("Submit() = %v", err)
	}
	if jobs, err := cl.List(ctx); err != nil || len(jobs) != 1 {
		t.Fatalf("List() = %v, %v; want the job", jobs, err)
	}
	poll.Until(t, 30*time.Second, "a checkpoint", func() error {
		d, err := cl.Job(ctx, id)
		if err != nil {
			return err
		}
		if d.GetLastCheckpoint() == nil {
			return fmt.Errorf("job %v without a checkpoint", d.GetStatus())
		}
		return nil
	})
	if cp, err := cl.TriggerCheckpoint(ctx, id); err != nil || cp.GetStatus() != pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED {
		t.Fatalf("TriggerCheckpoint() = %v, %v; want a completed checkpoint", cp, err)
	}
	if cps, err := cl.Checkpoints(ctx, id); err != nil || len(cps) == 0 {
		t.Fatalf("Checkpoints() = %v, %v; want some", cps, err)
	}
	if view, err := cl.Cluster(ctx); err != nil || len(view.GetTaskmanagers()) != 2 || len(view.GetJobmanagers()) != 3 {
		t.Fatalf("Cluster() = %v, %v; want 3 JobManagers and 2 TaskManagers", view, err)
	}
	if err := cl.Cancel(ctx, id); err != nil {
		t.Fatalf("Cancel() = %v", err)
	}
	if last := watchEnd(t, ctx, cl, id); last.GetStatus() != pb.JobStatus_JOB_STATUS_CANCELED {
		t.Fatalf("cancelled job ended %v", last.GetStatus())
	}

	// A bounded job, watched while the leader stops.
	id, err = cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(checkpointedSpec(t, 3000))})
	if err != nil {
		t.Fatalf("Submit() = %v", err)
	}
	checkpointed := make(chan struct{})
	var once sync.Once
	type result struct {
		last *pb.JobDetails
		err  error
	}
	done := make(chan result, 1)
	go func() {
		last, err := cl.Watch(ctx, id, func(d *pb.JobDetails) error {
			if d.GetLastCheckpoint() != nil {
				once.Do(func() { close(checkpointed) })
			}
			return nil
		})
		done <- result{last, err}
	}()
	select {
	case <-checkpointed:
	case r := <-done:
		t.Fatalf("Watch() ended before the leader stopped: %v, %v", r.last.GetStatus(), r.err)
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if err := c.StopJobManager(leader); err != nil {
		t.Fatalf("stop the leader: %v", err)
	}
	r := <-done
	if r.err != nil || r.last.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("Watch() through jm-%d across the leader's stop = %v, %v; want FINISHED", follower+1, r.last.GetStatus(), r.err)
	}
	if r.last.GetRestarts() < 1 {
		t.Errorf("job finished with %d restarts; want it run again by the new leader (the watch saw the failover)", r.last.GetRestarts())
	}
}

// A relayed WatchJob stream ends with an error a client retries when the leader stops, and the
// same follower then relays the new leader's stream (or serves it, having been elected).
func TestFollowerRelaysWatchAcrossLeaderChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, cl := miniclustertest.StartT(t, minicluster.Options{JobManagers: 3, TaskManagers: 2, Slots: 2})
	leader := waitLeader(t, c, 10*time.Second)
	follower := (leader + 1) % 3
	id, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(checkpointedSpec(t, 0))})
	if err != nil {
		t.Fatalf("Submit() = %v", err)
	}
	waitRunning(t, ctx, cl, id, 2)
	jobs := pb.NewJobServiceClient(dialJM(t, c.JMs[follower].Addr()))
	watch, err := jobs.WatchJob(ctx, &pb.WatchJobRequest{JobId: id})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatalf("WatchJob at a follower: %v", err)
	}
	if err := c.StopJobManager(leader); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := watch.Recv()
		if err == nil {
			continue
		}
		if !leaderrpc.Retryable(err) {
			t.Fatalf("relayed WatchJob ended with %v when the leader stopped; want an error a client retries", err)
		}
		break
	}
	poll.Until(t, 20*time.Second, "a WatchJob at the follower after the leader change", func() error {
		w, err := jobs.WatchJob(ctx, &pb.WatchJobRequest{JobId: id})
		if err != nil {
			return err
		}
		m, err := w.Recv()
		if err != nil {
			return err
		}
		if m.GetJob().GetId() != id {
			return fmt.Errorf("watch of %s sent job %q", id, m.GetJob().GetId())
		}
		watch = w
		return nil
	})
	if _, err := jobs.CancelJob(ctx, &pb.CancelJobRequest{JobId: id}); err != nil {
		t.Fatalf("CancelJob at jm-%d = %v", follower+1, err)
	}
	for {
		m, err := watch.Recv()
		if err != nil {
			t.Fatalf("WatchJob after the leader change broke: %v", err)
		}
		if m.GetJob().GetStatus() == pb.JobStatus_JOB_STATUS_CANCELED {
			break
		}
	}
}

// While no leader is known a follower holds a call (up to the coordinator's forwardHold, 5 s)
// and then answers UNAVAILABLE NO_LEADER; a leader elected while it holds one serves it.
func TestFollowerHoldsCallsUntilALeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, _ := miniclustertest.StartT(t, minicluster.Options{JobManagers: 3, TaskManagers: 1})
	leader := waitLeader(t, c, 10*time.Second)
	left, other := (leader+1)%3, (leader+2)%3
	for _, i := range []int{leader, other} {
		if err := c.StopJobManager(i); err != nil {
			t.Fatal(err)
		}
	}
	conn := dialJM(t, c.JMs[left].Addr())
	poll.Until(t, 10*time.Second, "the last JobManager standing for election", func() error {
		resp, err := pb.NewClusterServiceClient(conn).GetJobManagerStatus(ctx, &pb.GetJobManagerStatusRequest{})
		if err != nil {
			return err
		}
		if role := resp.GetJobmanager().GetRole(); role != "Candidate" {
			return fmt.Errorf("jm-%d is %s", left+1, role)
		}
		return nil
	})
	jobs := pb.NewJobServiceClient(conn)
	start := time.Now()
	_, err := jobs.ListJobs(ctx, &pb.ListJobsRequest{})
	held := time.Since(start)
	if status.Code(err) != codes.Unavailable || leaderrpc.Reason(err) != leaderrpc.ReasonNoLeader || held < 5*time.Second {
		t.Errorf("ListJobs without a leader = %v after %v; want UNAVAILABLE NO_LEADER after the 5 s hold", err, held.Round(time.Millisecond))
	}

	served := make(chan error, 1)
	go func() {
		_, err := jobs.ListJobs(ctx, &pb.ListJobsRequest{})
		served <- err
	}()
	if err := c.StartJobManager(other); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Errorf("ListJobs held while a leader is elected = %v, want the leader's answer", err)
	}
}

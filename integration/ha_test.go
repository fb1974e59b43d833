package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/goflink/goflink/internal/leaderrpc"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// High availability with a Raft group of three JobManagers in one process (real Raft over
// loopback TCP): leader failover with a running exactly-once job, leader hints from followers,
// and a restart of the whole group from disk.

// waitLeader waits until exactly one running JobManager leads and returns its index.
func waitLeader(t *testing.T, c *minicluster.Cluster, timeout time.Duration) int {
	t.Helper()
	leader := -1
	poll.Until(t, timeout, "a leader", func() error {
		n := 0
		for i, jm := range c.JMs {
			if jm != nil && jm.IsLeader() {
				leader, n = i, n+1
			}
		}
		if n != 1 {
			return fmt.Errorf("%d leaders", n)
		}
		return nil
	})
	return leader
}

// A follower answers a leader-only call that was forwarded to it already (it forwards no call
// twice) with NOT_LEADER and the leader's RPC address, and GetCluster from any member lists the
// whole group with one leader.
func TestFollowerHintsTheLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, _ := miniclustertest.StartT(t, minicluster.Options{JobManagers: 3, TaskManagers: 1})
	leader := waitLeader(t, c, 10*time.Second)
	follower := (leader + 1) % 3
	conn, err := grpc.NewClient(c.JMs[follower].Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	forwarded := metadata.AppendToOutgoingContext(ctx, leaderrpc.ForwardedByHeader, "jm-other")
	poll.Until(t, 10*time.Second, "a leader hint", func() error {
		_, err := pb.NewJobServiceClient(conn).ListJobs(forwarded, &pb.ListJobsRequest{})
		st := status.Convert(err)
		if st.Code() != codes.FailedPrecondition {
			return fmt.Errorf("ListJobs at a follower = %w, want FAILED_PRECONDITION", err)
		}
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == "NOT_LEADER" {
				if got := info.GetMetadata()["leader"]; got != c.JMs[leader].Addr() {
					return fmt.Errorf("hint %q, want the leader's %s", got, c.JMs[leader].Addr())
				}
				return nil
			}
		}
		return fmt.Errorf("no NOT_LEADER detail in %w", err)
	})
	poll.Until(t, 10*time.Second, "the whole group in GetCluster", func() error {
		resp, err := pb.NewClusterServiceClient(conn).GetCluster(ctx, &pb.GetClusterRequest{})
		if err != nil {
			return err
		}
		leaders := 0
		for _, jm := range resp.GetJobmanagers() {
			if jm.GetError() != "" || jm.GetRole() == "" || jm.GetLastIndex() == 0 || jm.GetTerm() == 0 {
				return fmt.Errorf("jobmanager %s: %v", jm.GetId(), jm)
			}
			if jm.GetLeader() {
				leaders++
				if jm.GetRole() != "Leader" || jm.GetAddress() != c.JMs[leader].Addr() {
					return fmt.Errorf("leader entry %v, want role Leader at %s", jm, c.JMs[leader].Addr())
				}
			}
		}
		if len(resp.GetJobmanagers()) != 3 || leaders != 1 {
			return fmt.Errorf("%d jobmanagers, %d leaders: %v", len(resp.GetJobmanagers()), leaders, resp.GetJobmanagers())
		}
		return nil
	})
}

// The leader is stopped while an exactly-once job runs: a new leader is elected, recovers the
// job from its latest checkpoint (the TaskManagers register with it), checkpoint IDs keep
// growing, and the committed output holds every value exactly once. The exception history
// names the leader change as the cause of the restart, and a watch that follows the job
// across the failover (as flinkctl run does) sees it.
func TestLeaderFailoverKeepsExactlyOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, cl := miniclustertest.StartT(t, minicluster.Options{JobManagers: 3, TaskManagers: 2, Slots: 2})
	const n = 1200
	out := filepath.Join(t.TempDir(), "out")
	spec := fmt.Sprintf(`name: ha
parallelism: 2
config:
  execution.checkpointing.interval: 50ms
  execution.checkpointing.dir: %s
  restart-strategy.type: fixed-delay
  restart-strategy.fixed-delay.attempts: 100
  restart-strategy.fixed-delay.delay: 10ms
operators:
  - {name: numbers, type: sequence, from: 1, to: %d, rate: 400}
  - {name: out, type: file, path: %q}
`, filepath.Join(t.TempDir(), "cp"), n, out)
	id := submit(t, ctx, cl, spec)
	var seen []int64 // completed checkpoint IDs as observed, in order
	observe := func() error {
		d, err := cl.Job(ctx, id)
		if err != nil {
			return err
		}
		if cp := d.GetLastCheckpoint().GetId(); cp > 0 && (len(seen) == 0 || seen[len(seen)-1] != cp) {
			seen = append(seen, cp)
		}
		if len(seen) < 3 {
			return fmt.Errorf("%d checkpoints completed", len(seen))
		}
		return nil
	}
	poll.Until(t, 20*time.Second, "checkpoints before the failover", observe)
	type watchResult struct {
		changes map[string]bool
		err     error
	}
	watched := make(chan watchResult, 1)
	go func() { // follows the job to its end, as flinkctl run does, collecting leader changes
		changes := map[string]bool{}
		_, err := cl.Watch(ctx, id, func(d *pb.JobDetails) error {
			for _, e := range leaderChangeEntries(d) {
				changes[e.GetCause()] = true
			}
			return nil
		})
		watched <- watchResult{changes, err}
	}()
	old := waitLeader(t, c, 10*time.Second)
	stopped := time.Now()
	if err := c.StopJobManager(old); err != nil {
		t.Fatalf("stop leader: %v", err)
	}
	leader := waitLeader(t, c, 10*time.Second)
	elected := time.Since(stopped)
	before := len(seen)
	poll.Until(t, 30*time.Second, "checkpoints under the new leader", func() error {
		if err := observe(); err != nil {
			return err
		}
		if len(seen) < before+2 {
			return fmt.Errorf("%d checkpoints since the failover", len(seen)-before)
		}
		return nil
	})
	t.Logf("leader jm-%d stopped; jm-%d elected after %v; checkpoints %v", old+1, leader+1, elected.Round(time.Millisecond), seen)
	for i := 1; i < len(seen); i++ {
		if seen[i] <= seen[i-1] {
			t.Errorf("checkpoint IDs %v do not grow strictly", seen)
		}
	}
	last := watchFinished(t, ctx, cl, id, -1)
	checkEachValueOnce(t, out, n)
	checkLeaderChangeEntry(t, last, fmt.Sprintf("jm-%d", old+1), fmt.Sprintf("jm-%d", leader+1), seen[before-1])
	select {
	case got := <-watched:
		want := leaderChangeEntries(last)[0].GetCause() // checkLeaderChangeEntry found exactly one
		if got.err != nil {
			t.Errorf("the watch that followed the job across the failover failed: %v (it saw leader changes %v)", got.err, got.changes)
		} else if !got.changes[want] {
			t.Errorf("the watch that followed the job across the failover saw leader changes %v, want %q among them", got.changes, want)
		}
	case <-ctx.Done():
		t.Fatal("the watch did not end with the job")
	}
	if err := c.StartJobManager(old); err != nil {
		t.Fatalf("restart the old leader: %v", err)
	}
}

// All three JobManagers stop and start again on their data: the jobs come back from disk, a
// finished job stays finished and a running one runs again.
func TestGroupRestartRecoversJobs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, cl := miniclustertest.StartT(t, minicluster.Options{JobManagers: 3, TaskManagers: 1, Slots: 2, DataDir: t.TempDir()})
	done := submit(t, ctx, cl, "name: short\noperators:\n  - {name: n, type: sequence, from: 1, to: 5}\n  - {name: o, type: discard}\n")
	watchFinished(t, ctx, cl, done, -1)
	live := submit(t, ctx, cl, unboundedSpec)
	waitRunning(t, ctx, cl, live, 2)
	for i := range c.JMs {
		if err := c.StopJobManager(i); err != nil {
			t.Fatal(err)
		}
	}
	for i := range c.JMs {
		if err := c.StartJobManager(i); err != nil {
			t.Fatal(err)
		}
	}
	waitLeader(t, c, 10*time.Second)
	d := waitRunning(t, ctx, cl, live, 2)
	if d.GetRestarts() < 1 {
		t.Errorf("recovered job has %d restarts, want a new run counted", d.GetRestarts())
	}
	if j, err := cl.Job(ctx, done); err != nil || j.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("finished job after the restart: %v, %v; want FINISHED", j.GetStatus(), err)
	}
	if err := cl.Cancel(ctx, live); err != nil {
		t.Fatal(err)
	}
	watchEnd(t, ctx, cl, live)
}

// leaderChangeCause matches the cause of a leader change entry: the previous leader, the one
// that took the job over, and the checkpoint it restarts from.
var leaderChangeCause = regexp.MustCompile(`^the JobManager leader changed \((jm-\d+) → (jm-\d+), term \d+\)(?: while the job was restarting)?: the job restarts from checkpoint (\d+)$`)

// leaderChangeEntries returns the leader change entries of the job's exception history.
func leaderChangeEntries(d *pb.JobDetails) []*pb.ExceptionEntry {
	var entries []*pb.ExceptionEntry
	for _, e := range d.GetExceptions() {
		if e.GetTask() == "jobmanager leader change" {
			entries = append(entries, e)
		}
	}
	return entries
}

// checkLeaderChangeEntry checks the leader change entry of a job taken over after the leader
// stopped and the survivors elected another: one (the history is the last leader's), from the
// stopped leader to the elected one — or, when the survivors elected again, from the one
// elected first to the other — and the restart it led to: every task, globally, from a
// checkpoint no older than minCheckpoint.
func checkLeaderChangeEntry(t *testing.T, d *pb.JobDetails, stopped, elected string, minCheckpoint int64) {
	t.Helper()
	entries := leaderChangeEntries(d)
	if len(entries) != 1 {
		t.Fatalf("exception history %v has %d leader change entries, want 1", d.GetExceptions(), len(entries))
	}
	e := entries[0]
	m := leaderChangeCause.FindStringSubmatch(e.GetCause())
	if m == nil {
		t.Fatalf("leader change cause %q does not say which leader handed the job to which", e.GetCause())
	}
	switch prev, next := m[1], m[2]; {
	case next == elected && prev != stopped:
		t.Errorf("leader change cause %q: want the job taken over from the stopped %s by %s", e.GetCause(), stopped, elected)
	case next != elected && (prev != elected || next == stopped):
		t.Errorf("leader change cause %q: %s was elected after %s stopped; want a later change from it to the other survivor", e.GetCause(), elected, stopped)
	case next != elected:
		t.Logf("the survivors elected again: the job came from %s to %s", prev, next)
	}
	if cp, _ := strconv.ParseInt(m[3], 10, 64); cp < minCheckpoint {
		t.Errorf("leader change cause %q: want the checkpoint restored named (at least %d)", e.GetCause(), minCheckpoint)
	}
	var tasks []string
	for _, task := range d.GetTasks() {
		tasks = append(tasks, fmt.Sprintf("%s (%d/%d)", task.GetOperator(), task.GetSubtask()+1, d.GetParallelism()))
	}
	if e.GetHandling() != pb.FailureHandling_FAILURE_HANDLING_RESTART || e.GetFailover() != "global" || e.GetRestartAttempt() < 1 ||
		!slices.Equal(e.GetRestartedTasks(), tasks) || e.GetTaskmanager() != "" {
		t.Errorf("leader change entry %v, want handling RESTART, failover global, a restart attempt, restarted tasks %v, no TaskManager", e, tasks)
	}
	if d.GetRestarts() < 1 {
		t.Errorf("job has %d restarts after a leader change, want the restart counted", d.GetRestarts())
	}
}

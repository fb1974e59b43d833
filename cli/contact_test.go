package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/goflink/goflink/internal/grpctest"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// running is flinkctl running in the background.
type running struct {
	stdout, stderr miniclustertest.Buffer // what flinkctl writes while the test reads it
	cancel         context.CancelFunc     // Ctrl-C
	done           chan int               // the exit code
}

// start runs flinkctl with args in the background; the test's end cancels it and waits for it.
func start(t *testing.T, args ...string) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan int, 1)}
	go func() { r.done <- Execute(ctx, args, &r.stdout, &r.stderr) }()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

// waitOutput waits until stdout or stderr (stream "stdout" or "stderr") contains want.
func (r *running) waitOutput(t *testing.T, stream, want string, timeout time.Duration) {
	t.Helper()
	buf := &r.stdout
	if stream == "stderr" {
		buf = &r.stderr
	}
	poll.Until(t, timeout, fmt.Sprintf("%q in flinkctl's %s", want, stream), func() error {
		if !strings.Contains(buf.String(), want) {
			return fmt.Errorf("stdout:\n%s\nstderr:\n%s", r.stdout.String(), r.stderr.String())
		}
		return nil
	})
}

// exit waits for flinkctl's exit code.
func (r *running) exit(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case code := <-r.done:
		r.done <- code // for the cleanup
		return code
	case <-time.After(timeout):
		t.Fatalf("flinkctl did not exit within %v; stdout:\n%s\nstderr:\n%s", timeout, r.stdout.String(), r.stderr.String())
		return -1
	}
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	lis := listen(t)
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// Given only the leader's address, flinkctl run follows the job to the new leader after the
// leader dies: it learned the other members from the group.
func TestRunFollowsJobToLearnedMember(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, cl := miniclustertest.StartT(t, minicluster.Options{JobManagers: 3, TaskManagers: 1, Slots: 1, Stdout: io.Discard})
	// Members register their RPC addresses with the leader shortly after they start.
	poll.Until(t, 30*time.Second, "the group to list its 3 members' addresses", func() error {
		info, err := cl.Cluster(ctx)
		if err != nil {
			return err
		}
		for _, jm := range info.GetJobmanagers() {
			if jm.GetAddress() == "" {
				return fmt.Errorf("no address for %s: %v", jm.GetId(), info.GetJobmanagers())
			}
		}
		if n := len(info.GetJobmanagers()); n != 3 {
			return fmt.Errorf("%d members: %v", n, info.GetJobmanagers())
		}
		return nil
	})
	leader := c.Leader()
	if leader < 0 {
		t.Fatal("the ready cluster has no leader")
	}
	spec := writeSpec(t, "slow.yaml", `name: slow
parallelism: 1
config: {execution.checkpointing.interval: 100ms}
operators:
  - {name: numbers, type: sequence, from: 1, to: 40, rate: 10}
  - {name: out, type: discard}
`)
	r := start(t, "-m", c.JMs[leader].Addr(), "run", spec)
	r.waitOutput(t, "stdout", "checkpoint 2 completed", 30*time.Second)
	if err := c.StopJobManager(leader); err != nil {
		t.Fatal(err)
	}
	if code := r.exit(t, time.Minute); code != ExitOK {
		t.Fatalf("run given only the leader, which died = exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, ExitOK, r.stdout.String(), r.stderr.String())
	}
	if out := r.stdout.String(); !strings.Contains(out, " FINISHED after ") {
		t.Errorf("run output has no FINISHED line:\n%s", out)
	}
}

// A JobManager that streams a running job until the test stops it.
type endlessJM struct {
	pb.UnimplementedJobServiceServer
}

func (endlessJM) SubmitJob(context.Context, *pb.SubmitJobRequest) (*pb.SubmitJobResponse, error) {
	return &pb.SubmitJobResponse{JobId: "j1"}, nil
}

func (endlessJM) WatchJob(_ *pb.WatchJobRequest, stream pb.JobService_WatchJobServer) error {
	if err := stream.Send(&pb.WatchJobResponse{Job: &pb.JobDetails{Id: "j1", Status: pb.JobStatus_JOB_STATUS_RUNNING}}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return status.FromContextError(stream.Context().Err()).Err()
}

// serveStoppable serves jobs on a loopback port and returns its address and a func that stops it.
func serveStoppable(t *testing.T, jobs pb.JobServiceServer) (string, func()) {
	t.Helper()
	return grpctest.Serve(t, func(srv *grpc.Server) { pb.RegisterJobServiceServer(srv, jobs) })
}

// When every JobManager is gone, flinkctl run says the job may still be running, how to check,
// and exits with ExitLostContact, after a notice that it is retrying.
func TestRunLostContact(t *testing.T) {
	t.Parallel()
	addr, stop := serveStoppable(t, endlessJM{})
	r := start(t, "-m", addr, "run", writeSpec(t, "job.yaml", okSpec))
	r.waitOutput(t, "stdout", "job j1 RUNNING", 10*time.Second)
	stop()
	r.waitOutput(t, "stderr", "flinkctl: retrying for up to ", 10*time.Second)
	code := r.exit(t, time.Minute)
	stderr := r.stderr.String()
	if code != ExitLostContact {
		t.Errorf("run after every JobManager went away = exit %d, want %d; stderr:\n%s", code, ExitLostContact, stderr)
	}
	for _, want := range []string{
		"flinkctl: lost contact with the jobmanagers while following job j1: no jobmanager could serve the request within 15s (tried " + addr + ")",
		"flinkctl: the job may still be running; its outcome is unknown: check with flinkctl -m " + addr + " status j1\n",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not contain %q:\n%s", want, stderr)
		}
	}
}

// Ctrl-C stops following a job on a cluster: flinkctl says it still runs and how to cancel it.
func TestRunInterrupted(t *testing.T) {
	addr, _ := serveStoppable(t, endlessJM{})
	r := start(t, "-m", addr, "run", writeSpec(t, "job.yaml", okSpec))
	r.waitOutput(t, "stdout", "job j1 RUNNING", 10*time.Second)
	r.cancel()
	code := r.exit(t, 10*time.Second)
	want := "flinkctl: stopped following job j1; it is still running: flinkctl -m " + addr + " cancel j1 (or see it: flinkctl -m " + addr + " status j1)\n"
	if code != ExitInterrupted || r.stderr.String() != want {
		t.Errorf("run interrupted = exit %d, stderr %q; want exit %d and %q", code, r.stderr.String(), ExitInterrupted, want)
	}
}

// Ctrl-C while flinkctl checkpoint waits says the checkpoint may still complete.
func TestCheckpointInterrupted(t *testing.T) {
	f := newFake()
	addr := serve(t, f)
	r := start(t, "-m", addr, "checkpoint", "slow")
	poll.Until(t, 10*time.Second, "the checkpoint to be triggered", func() error {
		if calls, _ := f.lastTrigger(); calls == 0 {
			return errors.New("no trigger call")
		}
		return nil
	})
	r.cancel()
	code := r.exit(t, 10*time.Second)
	want := "flinkctl: stopped waiting for the checkpoint of job slow; it may still complete: flinkctl -m " + addr + " checkpoints slow\n"
	if code != ExitInterrupted || r.stderr.String() != want {
		t.Errorf("checkpoint interrupted = exit %d, stderr %q; want exit %d and %q", code, r.stderr.String(), ExitInterrupted, want)
	}
}

// While no JobManager answers, flinkctl says it is retrying instead of keeping silent; Ctrl-C
// then ends it.
func TestRetryingNoticeAndInterrupt(t *testing.T) {
	dead := deadAddr(t)
	r := start(t, "-m", dead, "list")
	r.waitOutput(t, "stderr", "flinkctl: retrying for up to ", 10*time.Second)
	r.cancel()
	code := r.exit(t, 10*time.Second)
	stderr := r.stderr.String()
	if code != ExitInterrupted || !strings.Contains(stderr, "no jobmanager could serve the request yet (tried "+dead+"; last error from "+dead+": dial tcp "+dead+": connect: connection refused)\n") ||
		!strings.HasSuffix(stderr, "flinkctl: interrupted\n") {
		t.Errorf("list against a dead address, interrupted = exit %d, stderr:\n%s\nwant exit %d, the retrying notice naming the address and the error, then \"interrupted\"", code, stderr, ExitInterrupted)
	}
}

// rawTCP listens on loopback like the JobManager's Raft port: it accepts connections and closes
// them without a word of gRPC.
func rawTCP(t *testing.T) string {
	t.Helper()
	lis := listen(t)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				_, _ = conn.Read(make([]byte, 64))
				conn.Close()
			})
		}
	})
	t.Cleanup(func() {
		lis.Close()
		wg.Wait()
	})
	return lis.Addr().String()
}

// The Raft port given for -m is reported at once, not retried for 15 s.
func TestRaftPortReported(t *testing.T) {
	addr := rawTCP(t)
	start := time.Now()
	code, stdout, stderr := execute(t, "-m", addr, "list")
	// The server closes with the client's settings frame unread or read:
	// the transport reports a reset or an EOF, both the same answer.
	head := "flinkctl: " + addr + " does not answer as a goflink JobManager (error reading server preface: "
	tail := "); is it the Raft port? the RPC port is 6123 by default\n"
	detail, ok := strings.CutPrefix(stderr, head)
	if ok {
		detail, ok = strings.CutSuffix(detail, tail)
	}
	if code != ExitFailure || stdout != "" || !ok || (detail != "EOF" && !strings.Contains(detail, "connection reset by peer")) {
		t.Errorf("list -m <Raft port> = exit %d, stdout %q, stderr %q; want exit %d and %q + EOF or a reset + %q", code, stdout, stderr, ExitFailure, head, tail)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("list -m <Raft port> took %v, want an answer at once", took)
	}
}

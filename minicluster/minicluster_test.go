package minicluster

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A cluster runs a job to its end, and a JobManager stopped and started again comes back on
// the address it had (bound before it first started), so clients keep working.
func TestJobRunsAndJobManagerRestartsOnItsAddress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := StartReady(ctx, Options{TaskManagers: 2, Slots: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := c.Addr()
	if err := c.StopJobManager(0); err != nil {
		t.Fatal(err)
	}
	if err := c.StartJobManager(0); err != nil {
		t.Fatalf("StartJobManager on %s again: %v", addr, err)
	}
	if got := c.JM.Addr(); c.Addr() != addr || got != addr {
		t.Fatalf("after a restart the JobManager is at %s (cluster address %s), want %s", got, c.Addr(), addr)
	}
	cl, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	id, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte("name: n\nparallelism: 2\noperators:\n  - {name: n, type: sequence, from: 1, to: 1000}\n  - {name: o, type: discard}\n")})
	if err != nil {
		t.Fatal(err)
	}
	last, err := cl.Watch(ctx, id, func(*pb.JobDetails) error { return nil })
	if err != nil || last.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("job ended %v (%s), %v; want FINISHED", last.GetStatus(), last.GetFailureCause(), err)
	}
}

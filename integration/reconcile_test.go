package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// TestNoTaskOutlivesItsJob cancels jobs at random moments around deployment (a CancelTask can
// overtake its SubmitTask) and requires every TaskManager to end up running nothing.
func TestNoTaskOutlivesItsJob(t *testing.T) {
	settings := config.New()
	if err := settings.SetAll(map[string]string{config.HeartbeatInterval: "50ms", config.HeartbeatTimeout: "5s"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 2, Slots: 2, Settings: settings})
	spec := []byte("name: endless\nparallelism: 4\noperators:\n  - {name: n, type: sequence, from: 0, rate: 1000}\n  - {name: k, type: key-by, key: value % 3}\n  - {name: c, type: count}\n  - {name: o, type: discard}\n")
	r := rand.New(rand.NewPCG(7, 11))
	for i := range 25 {
		id, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Duration(r.IntN(3000)) * time.Microsecond; d > 0 {
			time.Sleep(d) // the fault timing under test: cancel at a random point of deployment
		}
		if err := cl.Cancel(ctx, id); err != nil {
			t.Fatalf("round %d: cancel: %v", i, err)
		}
		last, err := cl.Watch(ctx, id, func(*pb.JobDetails) error { return nil })
		if err != nil || last.GetStatus() != pb.JobStatus_JOB_STATUS_CANCELED {
			t.Fatalf("round %d: job ended %v, %v", i, last.GetStatus(), err)
		}
	}
	poll.Until(t, 30*time.Second, "the tasks of the cancelled jobs to end", func() error {
		var left []string
		for _, tm := range c.TMs {
			left = append(left, tm.RunningTasks()...)
		}
		if len(left) > 0 {
			return fmt.Errorf("tasks still running: %v", left)
		}
		return nil
	})
}

package coordinator

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/job"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// testGraph builds a small job graph from a spec's YAML.
func testGraph(t *testing.T, spec string) *pb.JobGraph {
	t.Helper()
	g, err := job.Build(job.Request{Spec: []byte(spec)}, job.Env{Defaults: config.New()})
	if err != nil {
		t.Fatalf("Build() = %v", err)
	}
	return g
}

// waitForStack polls the stacks of every goroutine until one shows frame, or fails at a
// deadline.
func waitForStack(t *testing.T, frame string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	poll.Until(t, 10*time.Second, "a goroutine to reach "+frame, func() error {
		if n := runtime.Stack(buf, true); !strings.Contains(string(buf[:n]), frame) {
			return errors.New("no goroutine there yet")
		}
		return nil
	})
}

// LOCKORDER.md: dispatcher.mu is never held while notifyMu is taken. launch builds the job
// master, which publishes its first view and so wakes watchers under notifyMu; while that
// waits for notifyMu, d.mu must be free.
func TestLaunchPublishesWithoutTheDispatcherLock(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	d := newDispatcher(nil, newFSM(discardLog), newResourceManager(log, time.Second, time.Second, nil), log, config.New(), nil, jobPaths{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the job master stops as soon as it runs: this test is about launch alone
	d.ctx = ctx
	rec := &pb.JobRecord{Id: "j1", Status: pb.JobStatus_JOB_STATUS_CREATED,
		Graph: testGraph(t, "name: j\noperators:\n  - {name: n, type: sequence, from: 1, to: 3}\n  - {name: out, type: discard}\n")}

	d.notifyMu.Lock() // a watcher being woken: the first publish waits here
	launched := make(chan error, 1)
	go func() { launched <- d.launch(rec) }()
	waitForStack(t, "coordinator.(*dispatcher).notify(")
	if !d.mu.TryLock() {
		d.notifyMu.Unlock()
		t.Fatalf("launch holds dispatcher.mu while publishing (which takes notifyMu); launch = %v", <-launched)
	}
	d.mu.Unlock()
	d.notifyMu.Unlock()
	if err := <-launched; err != nil {
		t.Fatalf("launch() = %v", err)
	}
	d.stop()
	if m := d.master("j1"); m != nil {
		t.Errorf("job master still registered after stop")
	}
}

package integration

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// TestConcurrentReadersOfARunningJob reads a running job from many goroutines while heartbeats
// update its counters; under -race this catches writes into the shared job view. It also
// checks that a watcher sees counter updates that only heartbeats bring.
func TestConcurrentReadersOfARunningJob(t *testing.T) {
	settings := config.New()
	if err := settings.SetAll(map[string]string{config.HeartbeatInterval: "20ms", config.HeartbeatTimeout: "5s"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 2, Slots: 1, Settings: settings})
	id := submit(t, ctx, cl, "name: r\nparallelism: 2\noperators:\n  - {name: n, type: sequence, from: 0, rate: 2000}\n  - {name: k, type: key-by, key: value % 5}\n  - {name: s, type: sum, field: value}\n  - {name: o, type: discard}\n")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if _, err := cl.Job(ctx, id); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	// A watcher must see records_in grow although no task changes state.
	wctx, stop := context.WithCancel(ctx)
	var seen []int64
	_, err := cl.Watch(wctx, id, func(d *pb.JobDetails) error {
		var in int64
		for _, task := range d.GetTasks() {
			in += task.GetRecordsIn()
		}
		if len(seen) == 0 || in != seen[len(seen)-1] {
			seen = append(seen, in)
		}
		if len(seen) >= 3 {
			stop()
		}
		return nil
	})
	wg.Wait()
	if len(seen) < 3 {
		t.Fatalf("watcher saw counters %v, %v; want them to grow", seen, err)
	}
	if err := cl.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	if last, err := cl.Watch(ctx, id, func(*pb.JobDetails) error { return nil }); err != nil || last.GetStatus() != pb.JobStatus_JOB_STATUS_CANCELED {
		t.Fatalf("after cancel: %v, %v", last.GetStatus(), err)
	}
}

package worker_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// slowSink consumes at most about `perMilli` records per millisecond, or with sleep set, a
// record per sleep.
type slowSink struct {
	n        int
	perMilli int
	sleep    time.Duration
	consumed *atomic.Int64
}

func (s *slowSink) Open(*operator.Context, operator.Output) error { return nil }
func (s *slowSink) Flush() error                                  { return nil }
func (s *slowSink) EndInput() error                               { return nil }
func (s *slowSink) Close() error                                  { return nil }
func (s *slowSink) Process(record.Row) error {
	s.n++
	s.consumed.Add(1)
	if s.sleep > 0 {
		time.Sleep(s.sleep)
	} else if s.n%s.perMilli == 0 {
		time.Sleep(time.Millisecond)
	}
	return nil
}

// TestBackpressureBoundsMemory runs an unthrottled source into a slow sink over a local and a
// remote channel. Credit-based flow control must throttle the source: the records in flight
// never exceed what the configured buffers can hold, and the heap does not grow.
func TestBackpressureBoundsMemory(t *testing.T) {
	var consumed atomic.Int64
	slow := operator.Define(operator.Type{Name: "slow-sink", Role: operator.RoleSink},
		func(*operator.Planner) (struct{}, *operator.Shape) { return struct{}{}, nil },
		func(struct{}, *record.Schema, *record.Schema) (any, error) {
			return &slowSink{perMilli: 50, consumed: &consumed}, nil
		})
	const credits, queue = 2, 2
	settings := config.New()
	if err := settings.SetAll(map[string]string{
		config.BuffersPerChannel: fmt.Sprint(credits), config.MaxBuffersPerChannel: fmt.Sprint(queue),
		config.HeartbeatInterval: "50ms", config.HeartbeatTimeout: "5s",
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 2, Slots: 1, Settings: settings, Operators: []operator.Type{slow}})

	heapBefore := heapInUse()
	// The source (p=1) rebalances into two sink subtasks: one on its own TaskManager (a local
	// channel) and one on the other (a remote channel).
	spec := `name: backpressure
operators:
  - {name: numbers, type: sequence, from: 0, parallelism: 1}
  - {name: slow, type: slow-sink, parallelism: 2}
`
	started := time.Now()
	id, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(spec)})
	if err != nil {
		t.Fatal(err)
	}
	// A buffer holds maxBufferBytes/8 int64 records. Per channel the producer may queue `queue`
	// buffers and the overdraft ones (worker's maxOverdraftBuffers, 5) and fill one more, the
	// consumer holds up to `credits` in flight plus one being processed.
	const perBuffer = (32<<10 - 64) / 8
	const overdraft = 5
	const bound = 2 * (queue + overdraft + credits + 2) * perBuffer
	for _, target := range []int64{150_000, 300_000, 450_000} {
		var produced int64
		poll.Until(t, 30*time.Second, fmt.Sprintf("the sink to consume %d records", target), func() error {
			if n := consumed.Load(); n < target {
				return fmt.Errorf("sink consumed only %d records", n)
			}
			return nil
		})
		d, err := cl.Job(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range d.GetTasks() {
			if task.GetOperator() == "numbers" {
				produced = task.GetRecordsOut()
			}
		}
		// The source's counter comes with heartbeats (every 50 ms); allow what the sink consumes
		// in four heartbeat intervals on top of the structural bound.
		slack := int64(float64(consumed.Load()) / time.Since(started).Seconds() * 0.2)
		inFlight := produced - consumed.Load()
		t.Logf("consumed %d, source emitted %d, in flight %d (bound %d + slack %d)", consumed.Load(), produced, inFlight, bound, slack)
		if inFlight > bound+slack+perBuffer {
			t.Fatalf("source ran %d records ahead of the sink, more than the buffers can hold (%d): backpressure does not work", inFlight, bound)
		}
	}
	if grown := heapInUse() - heapBefore; grown > 48<<20 {
		t.Errorf("heap grew by %d MiB while the sink was slow", grown>>20)
	}
	if err := cl.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	last, err := cl.Watch(ctx, id, func(*pb.JobDetails) error { return nil })
	if err != nil || last.GetStatus() != pb.JobStatus_JOB_STATUS_CANCELED {
		t.Fatalf("after cancel: %v %v", last.GetStatus(), err)
	}
}

// TestUnalignedCheckpointOvertakesBackpressure: behind a sink slow enough that one buffer takes
// about 20 s, with every queue between the source and it full, an unaligned checkpoint
// completes while the sink processes a fraction of one buffer: its barrier overtakes the
// queued buffers (persisted as in-flight data) and stops the sink's buffer between two
// records. An aligned one would wait for every queued buffer.
func TestUnalignedCheckpointOvertakesBackpressure(t *testing.T) {
	var consumed atomic.Int64
	slow := operator.Define(operator.Type{Name: "slow-sink", Role: operator.RoleSink},
		func(*operator.Planner) (struct{}, *operator.Shape) { return struct{}{}, nil },
		func(struct{}, *record.Schema, *record.Schema) (any, error) {
			return &slowSink{perMilli: 1, consumed: &consumed, sleep: 5 * time.Millisecond}, nil
		})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 2, Slots: 1, Operators: []operator.Type{slow}})
	spec := fmt.Sprintf(`name: unaligned-backpressure
config:
  execution.checkpointing.interval: 1 h
  execution.checkpointing.unaligned: true
  execution.checkpointing.dir: %s
operators:
  - {name: numbers, type: sequence, from: 0, parallelism: 1}
  - {name: slow, type: slow-sink, parallelism: 2}
`, t.TempDir())
	id, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(spec)})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "the sink to consume records", func() error {
		if n := consumed.Load(); n < 200 {
			return fmt.Errorf("sink consumed only %d records", n)
		}
		return nil
	})
	before := consumed.Load()
	cp, err := cl.TriggerCheckpoint(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	during := consumed.Load() - before
	const perBuffer = (32<<10 - 64) / 8
	t.Logf("checkpoint %d %v in %d ms: unaligned %v, %d in-flight bytes; the sink consumed %d records meanwhile (a buffer holds %d)",
		cp.GetId(), cp.GetStatus(), cp.GetDurationMs(), cp.GetUnaligned(), cp.GetInFlightBytes(), during, perBuffer)
	if cp.GetStatus() != pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED || !cp.GetUnaligned() || cp.GetInFlightBytes() < 32<<10 {
		t.Fatalf("checkpoint %v, unaligned %v, %d in-flight bytes; want completed, unaligned, at least a buffer in flight", cp.GetStatus(), cp.GetUnaligned(), cp.GetInFlightBytes())
	}
	if during >= perBuffer/4 {
		t.Errorf("the sink consumed %d records before the checkpoint completed, a quarter buffer is %d: the barrier waited for the buffers", during, perBuffer/4)
	}
	if err := cl.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	if last, err := cl.Watch(ctx, id, func(*pb.JobDetails) error { return nil }); err != nil || last.GetStatus() != pb.JobStatus_JOB_STATUS_CANCELED {
		t.Fatalf("after cancel: %v %v", last.GetStatus(), err)
	}
}

func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

package systemtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/goflink/goflink/internal/proccluster"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// The exactly-once chaos test with unaligned checkpoints under backpressure: the keyed count's
// task passes its output through a throttle at half the source's rate before the file sink, so
// the queues between the source and it stay full while the source runs, and barriers overtake
// them; the in-flight buffers are persisted with each checkpoint and restored after the
// SIGKILLs. Odd seeds take every checkpoint unaligned at once; even seeds start each aligned
// and switch once it has run 20 ms (execution.checkpointing.aligned-checkpoint-timeout). The
// oracle is the aligned chaos test's: every (key, seq) committed exactly once with count =
// seq+1. A seed in which no completed checkpoint persisted in-flight data fails: it proved
// nothing about them.
//
// GOFLINK_CHAOS_SEEDS sets the seeds as for TestChaosExactlyOnce; without it, seeds 1 and 2.
func TestChaosExactlyOnceUnaligned(t *testing.T) {
	skipShort(t)
	for _, seed := range seedsFrom(t, "GOFLINK_CHAOS_SEEDS", "2") {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { unalignedChaosRun(t, seed) })
	}
}

const (
	unalignedRecords = 4800 // 600 per key
	unalignedRate    = 480  // the source: 10 s
	unalignedSink    = 240  // the throttle before the sink: 20 s
)

func unalignedChaosRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	c := startClusterOf(t, proccluster.Options{TaskManagers: 3, Slots: 1})
	out := filepath.Join(t.TempDir(), "out")
	backend := [...]string{"hashmap", "bbolt"}[seed/2%2]
	timeout := "0 ms"
	if seed%2 == 0 {
		timeout = "20 ms"
	}
	spec := writeSpec(t, fmt.Sprintf(`name: unaligned-chaos-%d
parallelism: 2
config:
  execution.checkpointing.interval: 200ms
  execution.checkpointing.dir: %s
  execution.checkpointing.unaligned: true
  execution.checkpointing.aligned-checkpoint-timeout: %s
  state.backend.type: %s
  restart-strategy.type: fixed-delay
  restart-strategy.fixed-delay.attempts: 100
  restart-strategy.fixed-delay.delay: 100ms
operators:
  - {name: numbers, type: sequence, from: 0, to: %d, rate: %d}
  - {name: keyed, type: map, fields: {key: "value %% %d", seq: "int(value / %d)"}}
  - {name: by-key, type: key-by, key: key}
  - {name: counts, type: count}
  - {name: slow, type: throttle, rate: %d}
  - {name: out, type: file, path: %s}
`, seed, filepath.Join(t.TempDir(), "checkpoints"), timeout, backend, unalignedRecords-1, unalignedRate, chaosKeys, chaosKeys, unalignedSink, out))
	id := c.submit(spec)
	cl := c.newClient()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The history keeps the newest checkpoints only: collect them while the job runs.
	completedCps := map[int64]*pb.CheckpointInfo{}
	collect := func() {
		cps, err := cl.Checkpoints(ctx, id)
		if err != nil {
			return // the next round or the last one gets them
		}
		for _, cp := range cps {
			if cp.GetStatus() == pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED {
				completedCps[cp.GetId()] = cp
			}
		}
	}
	done := make(chan struct{})
	var collector sync.WaitGroup
	collector.Go(func() {
		tk := time.NewTicker(time.Second)
		defer tk.Stop()
		for {
			select {
			case <-tk.C:
				collect()
			case <-done:
				return
			}
		}
	})
	stopCollecting := sync.OnceFunc(func() { close(done); collector.Wait() })
	defer stopCollecting()
	kills, log := killTaskManagers(t, ctx, c, cl, id, rng, func(f fault) fault { return f })
	last, err := cl.Watch(ctx, id, func(*pb.JobDetails) error { return nil })
	stopCollecting()
	collect()
	if err != nil {
		t.Fatalf("watch job: %v", err)
	}
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("seed %d: job ended %v: %s\nfaults: %v", seed, last.GetStatus(), last.GetFailureCause(), log)
	}
	completed, unaligned := len(completedCps), 0
	var inFlight int64
	for _, cp := range completedCps {
		if cp.GetUnaligned() && cp.GetInFlightBytes() > 0 {
			unaligned++
			inFlight += cp.GetInFlightBytes()
		}
	}
	if unaligned == 0 {
		t.Errorf("seed %d: none of %d completed checkpoints persisted in-flight data", seed, completed)
	}
	faults := checkFaults(t, seed, kills, last.GetRestarts(), log)
	rows := checkCountsOnce(t, out, chaosKeys, unalignedRecords)
	if want := unalignedRecords / chaosKeys * chaosKeys; rows != want {
		t.Errorf("committed %d rows, want %d", rows, want)
	}
	t.Logf("seed %d (%s backend, aligned-checkpoint-timeout %s): %s; %d completed checkpoints, %d unaligned with %d in-flight bytes in all; %d committed rows, each (key, seq) exactly once with count = seq+1",
		seed, backend, timeout, faults, completed, unaligned, inFlight, rows)
}

package systemtest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goflink/goflink/client"
	"github.com/goflink/goflink/internal/proccluster"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// The exactly-once chaos test: a deterministic source of per-key sequence numbers, a keyed
// count, a two-phase-commit file sink, and TaskManager processes killed with SIGKILL at seeded
// moments (at a random time, while a checkpoint is in progress, right after one completed).
// At the end the committed files must hold every (key, seq) exactly once, and every row's
// count must equal seq+1: the keyed state went through the failures exactly once too.
//
// GOFLINK_CHAOS_SEEDS sets the seeds: a number N (seeds 1..N) or a list "3,17,42". CI runs 5.

const (
	chaosKeys    = 8
	chaosRecords = 3200 // 400 per key
	chaosRate    = 200  // records per second over the whole job: about 16 s per run
)

func chaosSeeds(t *testing.T) []uint64 { return seedsFrom(t, "GOFLINK_CHAOS_SEEDS", "5") }

// seedsFrom reads seeds from an environment variable: a count N (seeds 1..N) or a list
// "3,17,42"; def when it is unset.
func seedsFrom(t *testing.T, env, def string) []uint64 {
	v := os.Getenv(env)
	if v == "" {
		v = def
	}
	if !strings.Contains(v, ",") {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a count or a comma-separated list of seeds", env, v)
		}
		seeds := make([]uint64, n)
		for i := range seeds {
			seeds[i] = uint64(i + 1)
		}
		return seeds
	}
	var seeds []uint64
	for _, f := range strings.Split(v, ",") {
		s, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %q is not a seed", env, v, f)
		}
		seeds = append(seeds, s)
	}
	return seeds
}

func TestChaosExactlyOnce(t *testing.T) {
	skipShort(t)
	for _, seed := range chaosSeeds(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { chaosRun(t, seed) })
	}
}

// fault is one way to pick the moment of a kill.
type fault int

const (
	faultRandomTime fault = iota
	faultDuringCheckpoint
	faultAfterAck
	faultAfterCompletion
	numFaults
)

func (f fault) String() string {
	return [...]string{"at a random time", "while a checkpoint is in progress (alignment)",
		"right after a task acknowledged", "right after a checkpoint completed (before the commit)"}[f]
}

func chaosRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	c := startCluster(t, 3, 1)
	out := filepath.Join(t.TempDir(), "out")
	backend, spec := chaosSpec(t, seed, out)
	stdout, stderr, code := c.flinkctl("run", "-d", spec, "-o", "json")
	if code != 0 {
		t.Fatalf("flinkctl run: exit %d: %s %s", code, stdout, stderr)
	}
	var sub struct {
		JobID string `json:"job_id"`
	}
	if err := json.Unmarshal([]byte(stdout), &sub); err != nil {
		t.Fatalf("flinkctl run output %q: %v", stdout, err)
	}
	cl, err := client.New(c.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	live := map[string]*proccluster.Proc{}
	for i, p := range c.TMs {
		live[fmt.Sprintf("tm-%d", i)] = p
	}
	kills := 1 + rng.IntN(3)
	var log []string
	for k := range kills {
		d := waitJobRunning(t, ctx, cl, sub.JobID)
		if d == nil {
			break // finished before all faults ran
		}
		f := fault(rng.IntN(int(numFaults)))
		if !waitForFault(ctx, cl, sub.JobID, f, rng) {
			break
		}
		victim := pickVictim(d, live, rng)
		if victim == "" {
			break
		}
		at := time.Now()
		live[victim].Kill()
		delete(live, victim)
		id := fmt.Sprintf("tm-r%d", k)
		live[id] = c.startTM(id)
		log = append(log, fmt.Sprintf("kill %s %v (%s)", victim, f, at.Format("15:04:05.000")))
	}
	last, err := cl.Watch(ctx, sub.JobID, func(*pb.JobDetails) error { return nil })
	if err != nil {
		t.Fatalf("watch job: %v", err)
	}
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("seed %d: job ended %v: %s\nfaults: %v", seed, last.GetStatus(), last.GetFailureCause(), log)
	}
	cps, _ := cl.Checkpoints(ctx, sub.JobID)
	completed := 0
	for _, cp := range cps {
		if cp.GetStatus() == pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED {
			completed++
		}
	}
	rows := checkExactlyOnce(t, out)
	t.Logf("seed %d (%s backend): %d faults %v; %d restarts; %d completed checkpoints; %d committed rows, each (key, seq) exactly once with count = seq+1",
		seed, backend, len(log), log, last.GetRestarts(), completed, rows)
}

// chaosSpec writes the exactly-once chaos job for a seed (bbolt state on odd seeds) and returns
// its state backend and spec path.
func chaosSpec(t *testing.T, seed uint64, out string) (backend, path string) {
	backend = [...]string{"hashmap", "bbolt"}[seed%2]
	return backend, writeSpec(t, fmt.Sprintf(`name: chaos-%d
parallelism: 2
config:
  execution.checkpointing.interval: 200ms
  execution.checkpointing.dir: %s
  state.backend.type: %s
  restart-strategy.type: fixed-delay
  restart-strategy.fixed-delay.attempts: 100
  restart-strategy.fixed-delay.delay: 100ms
operators:
  - {name: numbers, type: sequence, from: 0, to: %d, rate: %d}
  - {name: keyed, type: map, fields: {key: "value %% %d", seq: "int(value / %d)"}}
  - {name: by-key, type: key-by, key: key}
  - {name: counts, type: count}
  - {name: out, type: file, path: %s}
`, seed, filepath.Join(t.TempDir(), "checkpoints"), backend, chaosRecords-1, chaosRate, chaosKeys, chaosKeys, out))
}

// waitJobRunning waits until every task of the job runs, and returns its details (nil once the
// job ended).
func waitJobRunning(t *testing.T, ctx context.Context, cl *client.Client, id string) *pb.JobDetails {
	t.Helper()
	for {
		d, err := cl.Job(ctx, id)
		if err != nil {
			t.Fatalf("job %s: %v", id, err)
		}
		if client.IsTerminal(d.GetStatus()) {
			return nil
		}
		running := d.GetStatus() == pb.JobStatus_JOB_STATUS_RUNNING && len(d.GetTasks()) > 0
		for _, task := range d.GetTasks() {
			running = running && task.GetStatus() == pb.ExecutionState_EXECUTION_STATE_RUNNING
		}
		if running {
			return d
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			t.Fatalf("job %s did not run again: %v", id, ctx.Err())
		}
	}
}

// waitForFault waits for the moment a fault kind wants; false when the job ended first.
func waitForFault(ctx context.Context, cl *client.Client, id string, f fault, rng *rand.Rand) bool {
	if f == faultRandomTime {
		select {
		case <-time.After(time.Duration(500+rng.IntN(10_000)) * time.Millisecond):
			return true
		case <-ctx.Done():
			return false
		}
	}
	var seen int64
	if cps, err := cl.Checkpoints(ctx, id); err == nil && len(cps) > 0 {
		seen = cps[0].GetId()
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		d, err := cl.Job(ctx, id)
		if err != nil || client.IsTerminal(d.GetStatus()) {
			return false
		}
		cps, err := cl.Checkpoints(ctx, id)
		if err == nil {
			for _, cp := range cps {
				if cp.GetId() <= seen {
					continue
				}
				inProgress := cp.GetStatus() == pb.CheckpointStatus_CHECKPOINT_STATUS_IN_PROGRESS
				if f == faultDuringCheckpoint && inProgress && cp.GetAcknowledged() == 0 {
					return true
				}
				if f == faultAfterAck && inProgress && cp.GetAcknowledged() > 0 {
					return true
				}
				if f == faultAfterCompletion && cp.GetStatus() == pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED {
					return true
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true // no such moment came; kill anyway
}

// pickVictim chooses a live TaskManager that runs tasks of the job.
func pickVictim(d *pb.JobDetails, live map[string]*proccluster.Proc, rng *rand.Rand) string {
	var hosts []string
	seen := map[string]bool{}
	for _, task := range d.GetTasks() {
		tm := task.GetTaskmanager()
		if live[tm] != nil && !seen[tm] {
			seen[tm] = true
			hosts = append(hosts, tm)
		}
	}
	if len(hosts) == 0 {
		return ""
	}
	return hosts[rng.IntN(len(hosts))]
}

// checkExactlyOnce reads the committed part files and checks the oracle; it returns the number
// of rows.
func checkExactlyOnce(t *testing.T, dir string) int {
	t.Helper()
	rows := checkCountsOnce(t, dir, chaosKeys, chaosRecords)
	if want := chaosRecords / chaosKeys * chaosKeys; rows != want {
		t.Errorf("committed %d rows, want %d", rows, want)
	}
	return rows
}

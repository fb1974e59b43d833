package systemtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goflink/goflink/client"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/internal/proccluster"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// The exactly-once chaos test: a deterministic source of per-key sequence numbers, a keyed
// count, a two-phase-commit file sink, and TaskManager processes killed with SIGKILL at seeded
// moments (at a random time, while a checkpoint is in progress, right after one completed).
// At the end the committed files must hold every (key, seq) exactly once, and every row's
// count must equal seq+1: the keyed state went through the failures exactly once too. Each
// kill must restart the job, and a seed in which none did fails: it proved nothing.
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
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { chaosRun(t, seed, false) })
	}
}

// TestChaosExactlyOnceTLS is the chaos test with internal mutual TLS on every connection (RPC,
// data exchange, Raft) and the token for clients: the first seed (GOFLINK_CHAOS_SEEDS
// chooses others).
func TestChaosExactlyOnceTLS(t *testing.T) {
	skipShort(t)
	seeds := chaosSeeds(t)
	for _, seed := range seeds[:1] {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { chaosRun(t, seed, true) })
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

func chaosRun(t *testing.T, seed uint64, secure bool) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	c := startClusterOf(t, proccluster.Options{TaskManagers: 3, Slots: 1, Secure: secure})
	out := filepath.Join(t.TempDir(), "out")
	backend, spec := chaosSpec(t, seed, out)
	id := c.submit(spec)
	cl := c.newClient()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	kills, log := killTaskManagers(t, ctx, c, cl, id, rng, func(f fault) fault { return f })
	last, err := cl.Watch(ctx, id, func(*pb.JobDetails) error { return nil })
	if err != nil {
		t.Fatalf("watch job: %v", err)
	}
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("seed %d: job ended %v: %s\nfaults: %v", seed, last.GetStatus(), last.GetFailureCause(), log)
	}
	cps, _ := cl.Checkpoints(ctx, id)
	completed := 0
	for _, cp := range cps {
		if cp.GetStatus() == pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED {
			completed++
		}
	}
	faults := checkFaults(t, seed, kills, last.GetRestarts(), log)
	rows := checkExactlyOnce(t, out)
	t.Logf("seed %d (%s backend): %s; %d completed checkpoints; %d committed rows, each (key, seq) exactly once with count = seq+1",
		seed, backend, faults, completed, rows)
}

// chaosSpec writes the exactly-once chaos job for a seed (bbolt state on odd seeds) and returns
// its state backend and spec path.
func chaosSpec(t *testing.T, seed uint64, out string) (backend, path string) {
	backend = [...]string{"hashmap", "bbolt"}[seed%2]
	return backend, keyedSpec(t, fmt.Sprintf("chaos-%d", seed), out, chaosRecords, chaosRate, chaosKeys, backend, 200*time.Millisecond, 100, 100*time.Millisecond)
}

// killTaskManagers SIGKILLs a TaskManager running tasks of the job 1 to 3 times, each at the
// moment of a seeded fault kind (which moment may change the kind), starting a new
// TaskManager in its place, and waits after each kill until the job restarted. It returns the
// number of kills that restarted the job and the log of the faults. It stops early once the
// job ended.
func killTaskManagers(t *testing.T, ctx context.Context, c *cluster, cl *client.Client, id string, rng *rand.Rand, moment func(fault) fault) (int, []string) {
	t.Helper()
	live := map[string]*proccluster.Proc{}
	for i, p := range c.TMs {
		live[fmt.Sprintf("tm-%d", i)] = p
	}
	kills := 0
	var log []string
	for k := range 1 + rng.IntN(3) {
		if waitJobRunning(t, ctx, cl, id) == nil {
			return kills, append(log, "the job ended before the next kill")
		}
		f := moment(fault(rng.IntN(int(numFaults))))
		d := waitForFault(t, ctx, cl, id, f, rng)
		if d == nil {
			return kills, append(log, fmt.Sprintf("the job ended while waiting to kill %v", f))
		}
		victim := pickVictim(d, live, rng)
		if victim == "" {
			t.Fatalf("no live TaskManager runs a task of the job: %v", d.GetTasks())
		}
		at := live[victim].Kill()
		delete(live, victim)
		name := fmt.Sprintf("tm-r%d", k)
		live[name] = c.startTM(name)
		restarts, ok := waitRestart(t, ctx, cl, id, d.GetRestarts())
		if !ok {
			return kills, append(log, fmt.Sprintf("kill %s %v: the job had ended, no fault", victim, f))
		}
		kills++
		log = append(log, fmt.Sprintf("kill %s %v (%s) → restart %d", victim, f, at.Format("15:04:05.000"), restarts))
	}
	return kills, log
}

// waitJobRunning waits until every task of the job runs, and returns its details (nil once the
// job ended).
func waitJobRunning(t *testing.T, ctx context.Context, cl *client.Client, id string) *pb.JobDetails {
	t.Helper()
	var d *pb.JobDetails
	err := poll.Wait(ctx, func() (err error) {
		if d, err = cl.Job(ctx, id); err != nil {
			return poll.Stop(err)
		}
		if client.IsTerminal(d.GetStatus()) {
			d = nil
			return nil
		}
		if !allRunning(d) {
			return fmt.Errorf("job %v", d.GetStatus())
		}
		return nil
	})
	if err != nil {
		t.Fatalf("job %s did not run again: %v", id, err)
	}
	return d
}

// allRunning reports whether the job and each of its tasks run.
func allRunning(d *pb.JobDetails) bool {
	running := d.GetStatus() == pb.JobStatus_JOB_STATUS_RUNNING && len(d.GetTasks()) > 0
	for _, task := range d.GetTasks() {
		running = running && task.GetStatus() == pb.ExecutionState_EXECUTION_STATE_RUNNING
	}
	return running
}

// faultTimeout bounds the wait for a checkpoint moment: with a checkpoint every 200 ms, dozens
// of checkpoints pass meanwhile.
const faultTimeout = 10 * time.Second

// waitForFault waits for the moment a fault kind wants and returns the job's details then, or
// nil when the job ended first. A checkpoint moment that does not come within faultTimeout
// fails the test: a kill then would not be the fault it is logged as.
func waitForFault(t *testing.T, ctx context.Context, cl *client.Client, id string, f fault, rng *rand.Rand) *pb.JobDetails {
	t.Helper()
	if f == faultRandomTime {
		return jobAfter(t, ctx, cl, id, time.Duration(500+rng.IntN(10_000))*time.Millisecond)
	}
	wctx, cancel := context.WithTimeout(ctx, faultTimeout)
	defer cancel()
	seen := int64(-1) // the newest checkpoint when the wait began
	var d *pb.JobDetails
	err := poll.Wait(wctx, func() (err error) {
		if d, err = cl.Job(wctx, id); err != nil {
			return err
		}
		if client.IsTerminal(d.GetStatus()) {
			d = nil
			return nil
		}
		cps, err := cl.Checkpoints(wctx, id)
		if err != nil {
			return err
		}
		if seen < 0 {
			seen = 0
			if len(cps) > 0 {
				seen = cps[0].GetId()
			}
		}
		for _, cp := range cps {
			if cp.GetId() <= seen {
				continue
			}
			inProgress := cp.GetStatus() == pb.CheckpointStatus_CHECKPOINT_STATUS_IN_PROGRESS
			if f == faultDuringCheckpoint && inProgress && cp.GetAcknowledged() == 0 ||
				f == faultAfterAck && inProgress && cp.GetAcknowledged() > 0 ||
				f == faultAfterCompletion && cp.GetStatus() == pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED {
				return nil
			}
		}
		return fmt.Errorf("no checkpoint after %d was seen %v", seen, f)
	})
	if err != nil {
		t.Fatalf("the moment to kill %v did not come: %v", f, err)
	}
	return d
}

// jobAfter waits d, the timing of a fault, and returns the job's details then, or nil once it
// ended.
func jobAfter(t *testing.T, ctx context.Context, cl *client.Client, id string, d time.Duration) *pb.JobDetails {
	t.Helper()
	select {
	case <-time.After(d):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	job, err := cl.Job(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if client.IsTerminal(job.GetStatus()) {
		return nil
	}
	return job
}

// pickVictim chooses a live TaskManager that runs tasks of the job ("" when none does).
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

// waitRestart waits until the job restarted after a kill (its restart count passed before) and
// returns the count; false when the job ended without restarting (the kill came after its
// tasks had finished: no fault of the job).
func waitRestart(t *testing.T, ctx context.Context, cl *client.Client, id string, before int32) (int32, bool) {
	t.Helper()
	var d *pb.JobDetails
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := poll.Wait(wctx, func() (err error) {
		if d, err = cl.Job(wctx, id); err != nil {
			return err
		}
		if d.GetRestarts() <= before && !client.IsTerminal(d.GetStatus()) {
			return fmt.Errorf("job %v after %d restarts", d.GetStatus(), d.GetRestarts())
		}
		return nil
	})
	if err != nil {
		t.Fatalf("job %s did not restart after the kill: %v", id, err)
	}
	return d.GetRestarts(), d.GetRestarts() > before
}

// checkFaults fails a chaos run in which no kill took effect (the job restarted after none),
// or whose job restarted fewer times than kills took effect, and returns the run's account of
// its faults for the log.
func checkFaults(t *testing.T, seed uint64, kills int, restarts int32, log []string) string {
	t.Helper()
	if kills == 0 {
		t.Fatalf("seed %d injected no fault: no kill restarted the job (%v)", seed, log)
	}
	if restarts < int32(kills) {
		t.Errorf("seed %d: %d kills restarted the job, but it reports %d restarts (%v)", seed, kills, restarts, log)
	}
	return fmt.Sprintf("%d kills, %d restarts: %v", kills, restarts, log)
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

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goflink/goflink/client"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// recoveryResult is what one TaskManager kill measured, each time from the SIGKILL.
type recoveryResult struct {
	victim     string
	hosted     []string
	detected   time.Duration // the job left RUNNING (failover started)
	running    time.Duration // the job is RUNNING again (a new run; tasks are being deployed)
	tasks      time.Duration // every task of the new run is RUNNING
	committed  time.Duration // the first part file of the new run is committed (visible)
	restoredID int64
	cause      string
}

// recoveryPoll is how often the job status and the output directory are looked at after the
// kill. The status comes from the Go client (one cheap RPC), not a flinkctl process per poll,
// which would cost more CPU than the recovery it measures on 2 cores.
const recoveryPoll = 5 * time.Millisecond

// recoveryWarmFiles is how many part files a job must have committed before the kill (two a
// checkpoint at parallelism 2).
const recoveryWarmFiles = 10

// recovery measures the time from a TaskManager SIGKILL to the job running and committing
// output again: 3 TaskManagers with 1 slot, a parallelism-2 job with a file sink; each round
// kills a TaskManager that hosts tasks, and a new TaskManager replaces it before the next.
func recovery(o options, v *verdicts) (err error) {
	c, err := startCluster(o.bin, 3)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			c.dumpLog(os.Stderr)
		}
		c.stop()
	}()
	cl, err := client.New(c.jm)
	if err != nil {
		return err
	}
	defer cl.Close()
	fmt.Printf("\n== recovery from a TaskManager SIGKILL ==\n")
	fmt.Printf("3 TaskManager processes with 1 slot; job: sequence from 0, unbounded, %d records/s -> key-by value %% 1024 -> count -> file sink (2PC), parallelism 2\n", o.recRate)
	fmt.Printf("execution.checkpointing.interval %s (EXACTLY_ONCE, hashmap), restart-strategy.type fixed-delay, delay %s, attempts 10\n", durText(o.recInterval), durText(o.recDelay))
	fmt.Printf("heartbeat.interval 1 s, heartbeat.timeout 5 s (defaults; a killed TaskManager is noticed when its heartbeat stream breaks, not by the timeout)\n")
	fmt.Printf("each round: a new job; wait until it runs and committed >= %d part files, SIGKILL a TaskManager hosting tasks, then poll every %s\n", recoveryWarmFiles, durText(recoveryPoll))
	fmt.Printf("the job status (Go client) and the output directory (new output = part files of the new run's higher attempt number;\n")
	fmt.Printf("it needs the new run's first checkpoint, so it includes up to one interval); a new TaskManager replaces the killed one afterwards\n\n")
	live := []string{"tm-0", "tm-1", "tm-2"}
	var results []recoveryResult
	for round := range o.recRuns {
		r, err := recoverOnce(c, cl, o, round)
		if err != nil {
			return fmt.Errorf("recovery round %d: %w", round+1, err)
		}
		results = append(results, r)
		fmt.Printf("  kill %d: %s (hosting %s): failover started %s, job RUNNING %s, all tasks RUNNING %s, first new committed part file %s (restored checkpoint %d)\n",
			round+1, r.victim, strings.Join(r.hosted, ", "), ms(r.detected), ms(r.running), ms(r.tasks), ms(r.committed), r.restoredID)
		if round == 0 && r.cause != "" {
			fmt.Printf("          cause recorded by the JobManager: %s\n", r.cause)
		}
		live = slices.DeleteFunc(live, func(id string) bool { return id == r.victim })
		if round < o.recRuns-1 {
			id := fmt.Sprintf("tm-%d", 3+round)
			if err := c.startTM(id); err != nil {
				return err
			}
			live = append(live, id)
			if err := c.waitTaskManagers(live, 30*time.Second); err != nil {
				return err
			}
		}
	}
	pick := func(f func(recoveryResult) time.Duration) (time.Duration, string) {
		var ds []time.Duration
		var each []string
		for _, r := range results {
			ds = append(ds, f(r))
			each = append(each, ms(f(r)))
		}
		return median(ds), strings.Join(each, ", ")
	}
	fmt.Println()
	for _, row := range []struct {
		name string
		f    func(recoveryResult) time.Duration
	}{
		{"kill -> failover started:", func(r recoveryResult) time.Duration { return r.detected }},
		{"kill -> job RUNNING again:", func(r recoveryResult) time.Duration { return r.running }},
		{"kill -> all tasks RUNNING:", func(r recoveryResult) time.Duration { return r.tasks }},
		{"kill -> first new committed part file:", func(r recoveryResult) time.Duration { return r.committed }},
	} {
		m, each := pick(row.f)
		fmt.Printf("  %-40s median %9s  (each: %s)\n", row.name, ms(m), each)
	}
	fmt.Printf("  target: none in the issue (reported)\n")
	return nil
}

func recoverOnce(c *cluster, cl *client.Client, o options, round int) (r recoveryResult, err error) {
	out := filepath.Join(c.dir, fmt.Sprintf("recovery-out-%d", round+1))
	cfg := jobConfig(
		"execution.checkpointing.interval", fmt.Sprintf("%dms", o.recInterval.Milliseconds()),
		"execution.checkpointing.mode", "EXACTLY_ONCE",
		"execution.checkpointing.dir", filepath.Join(c.dir, "checkpoints"),
		"state.backend.type", "hashmap",
		"restart-strategy.type", "fixed-delay",
		"restart-strategy.fixed-delay.delay", fmt.Sprintf("%dms", o.recDelay.Milliseconds()),
		"restart-strategy.fixed-delay.attempts", "10")
	spec := fmt.Sprintf(`name: bench-recovery-%d
parallelism: 2
%soperators:
  - {name: numbers, type: sequence, from: 0, rate: %d}
  - {name: by-key, type: key-by, key: "value %% 1024"}
  - {name: counts, type: count}
  - {name: out, type: file, path: %q}
`, round+1, cfg, o.recRate, out)
	id, err := c.startJob(fmt.Sprintf("recovery-%d", round+1), spec, 50*time.Millisecond)
	if id != "" {
		defer func() {
			if cerr := c.cancel(id); cerr != nil && err == nil {
				err = cerr
			}
		}()
	}
	if err != nil {
		return r, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		files, err := committedParts(out)
		if err != nil {
			return r, err
		}
		if len(files) >= recoveryWarmFiles {
			break
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("job %s committed %d part files in 30 s, want %d", id, len(files), recoveryWarmFiles)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	before, err := cl.Job(ctx, id)
	if err != nil {
		return r, err
	}
	if before.GetStatus() != pb.JobStatus_JOB_STATUS_RUNNING {
		return r, fmt.Errorf("job %s is %v before the kill", id, before.GetStatus())
	}
	var attempt int32
	for _, t := range before.GetTasks() {
		attempt = max(attempt, t.GetAttempt())
		if r.victim == "" {
			r.victim = t.GetTaskmanager()
		}
	}
	for _, t := range before.GetTasks() {
		if t.GetTaskmanager() == r.victim {
			r.hosted = append(r.hosted, fmt.Sprintf("%s (%d/%d)", t.GetOperator(), t.GetSubtask()+1, before.GetParallelism()))
		}
	}
	killed, err := c.killTM(r.victim)
	if err != nil {
		return r, err
	}
	for r.committed == 0 || r.tasks == 0 {
		d, err := cl.Job(ctx, id)
		if err != nil {
			return r, fmt.Errorf("job status after the kill: %w", err)
		}
		now := time.Since(killed)
		restarted := d.GetRestarts() > before.GetRestarts()
		if r.detected == 0 && (d.GetStatus() != pb.JobStatus_JOB_STATUS_RUNNING || restarted) {
			r.detected = now
		}
		if r.running == 0 && restarted && d.GetStatus() == pb.JobStatus_JOB_STATUS_RUNNING {
			r.running = now
			r.restoredID = d.GetRestoredCheckpointId()
		}
		if r.tasks == 0 && restarted && newRunRunning(d, attempt) {
			r.tasks = now
		}
		if client.IsTerminal(d.GetStatus()) {
			return r, fmt.Errorf("job %s ended %v after the kill: %s", id, d.GetStatus(), d.GetFailureCause())
		}
		if r.committed == 0 {
			files, err := committedParts(out)
			if err != nil {
				return r, err
			}
			for _, f := range files {
				if a, ok := partAttempt(f); ok && a > int(attempt) {
					r.committed = time.Since(killed)
					break
				}
			}
		}
		if ctx.Err() != nil {
			return r, fmt.Errorf("job %s did not recover within 90 s of the kill (status %v)", id, d.GetStatus())
		}
		time.Sleep(recoveryPoll)
	}
	if d, err := cl.Job(ctx, id); err == nil {
		for _, e := range d.GetExceptions() {
			if e.GetTaskmanager() == r.victim {
				r.cause = e.GetCause()
				break
			}
		}
	}
	return r, nil
}

// newRunRunning reports whether every task runs in an attempt after attempt.
func newRunRunning(d *pb.JobDetails, attempt int32) bool {
	if d.GetStatus() != pb.JobStatus_JOB_STATUS_RUNNING || len(d.GetTasks()) == 0 {
		return false
	}
	for _, t := range d.GetTasks() {
		if t.GetAttempt() <= attempt || t.GetStatus() != pb.ExecutionState_EXECUTION_STATE_RUNNING {
			return false
		}
	}
	return true
}

// committedParts lists the committed part files of a file sink directory: visible files
// named part-*; hidden ones (leading dot) are in progress or pending.
func committedParts(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "part-") {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// partAttempt parses the execution attempt of "part-<subtask>-<attempt>-<n>.jsonl".
func partAttempt(name string) (int, bool) {
	f := strings.Split(name, "-")
	if len(f) < 4 {
		return 0, false
	}
	a, err := strconv.Atoi(f[2])
	return a, err == nil
}

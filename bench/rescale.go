package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/goflink/goflink/client"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// rescaleTarget and rescaleGoal are the target and goal for the rescale downtime with
// 1 million keys: command to all tasks RUNNING at the new parallelism.
const (
	rescaleTarget = 2 * time.Second
	rescaleGoal   = 500 * time.Millisecond
	rescalePoll   = 5 * time.Millisecond
)

// rescaleResult is one rescale or stop of the rescale section.
type rescaleResult struct {
	from, to   int32
	total      time.Duration // command to all tasks RUNNING at the new parallelism
	checkpoint time.Duration // of which the checkpoint the rescale restores (the job runs meanwhile)
	down       time.Duration // the job not RUNNING: cancel, redeploy, restore
	committed  time.Duration // command to the first committed output of the new attempt
}

// rescaleSection measures, per state backend and key count, a job rescaled in place 2 → 4 → 2
// (command to all tasks RUNNING at the new parallelism, and to the first committed output of
// the redeployed tasks), then stopped with a savepoint (command to FINISHED).
func rescaleSection(o options, v *verdicts) (err error) {
	c, err := startCluster(o.bin, 1, 2, 4, false)
	if err != nil {
		return err
	}
	defer c.finish(&err)
	cl, err := client.New(c.Addr)
	if err != nil {
		return err
	}
	defer cl.Close()
	fmt.Printf("\n== savepoints and rescaling ==\n")
	fmt.Printf("2 TaskManager processes with 4 slots; job: sequence from 0, unbounded, %d records/s -> key-by value %% K -> count -> file sink (2PC),\n", o.rescaleRate)
	fmt.Printf("checkpoints every %s (EXACTLY_ONCE); each state backend and K: start at parallelism 2, wait until every key has state and a checkpoint\n", durText(o.rescaleInterval))
	fmt.Printf("covers it, rescale to 4, then to 2 (flinkctl rescale: a checkpoint, then every task redeployed restoring it), then stop with a savepoint;\n")
	fmt.Printf("polled every %s. total: command -> all tasks RUNNING at the new parallelism (the issue's downtime); checkpoint: of which the\n", durText(rescalePoll))
	fmt.Printf("checkpoint taken first (the job runs on); down: the job not RUNNING; output: command -> first committed part file of the new attempt\n\n")
	fmt.Printf("  %-8s %9s  %-6s %10s %11s %9s %10s\n", "backend", "keys", "step", "total", "checkpoint", "down", "output")
	for _, keys := range o.rescaleKeys {
		for _, backend := range []string{"hashmap", "bbolt"} {
			rs, stop, err := rescaleRun(c, cl, o, backend, keys)
			if err != nil {
				return fmt.Errorf("rescale %s %d keys: %w", backend, keys, err)
			}
			for _, r := range rs {
				fmt.Printf("  %-8s %9d  %d -> %d %10s %11s %9s %10s\n", backend, keys, r.from, r.to, ms(r.total), ms(r.checkpoint), ms(r.down), ms(r.committed))
			}
			fmt.Printf("  %-8s %9d  %-6s %10s  (stop-with-savepoint: command -> savepoint completed and the job FINISHED)\n", backend, keys, "stop", ms(stop))
			if keys >= 1_000_000 {
				worst := max(rs[0].total, rs[1].total)
				word := v.check(fmt.Sprintf("rescale %s %d keys: command -> all tasks RUNNING, max %s < %s", backend, keys, ms(worst), ms(rescaleTarget)), worst < rescaleTarget)
				goal := "goal met"
				if worst >= rescaleGoal {
					goal = "goal (" + ms(rescaleGoal) + ") not met"
				}
				fmt.Printf("  target: %s with 1 million keys: %s; %s\n", ms(rescaleTarget), word, goal)
			}
		}
	}
	return nil
}

// rescaleRun runs one job through 2 → 4 → 2 and a stop with a savepoint.
func rescaleRun(c *cluster, cl *client.Client, o options, backend string, keys int) (rs []rescaleResult, stop time.Duration, err error) {
	ctx := context.Background()
	name := fmt.Sprintf("rescale-%s-%d", backend, keys)
	out := filepath.Join(c.dir, name+"-out")
	spec := fmt.Sprintf(`name: bench-%s
parallelism: 2
%soperators:
  - {name: numbers, type: sequence, from: 0, rate: %d}
  - {name: by-key, type: key-by, key: "value %% %d"}
  - {name: counts, type: count}
  - {name: out, type: file, path: %q}
`, name, checkpointConfig(fmt.Sprintf("%dms", o.rescaleInterval.Milliseconds()), filepath.Join(c.dir, "checkpoints"),
		"state.backend.type", backend, "execution.checkpointing.timeout", "5min"), o.rescaleRate, keys, out)
	id, err := c.startJob(name, spec, 20*time.Millisecond)
	stopped := false
	defer func() {
		if !stopped {
			c.cancelAtReturn(id, &err)
		}
	}()
	if err != nil {
		return nil, 0, err
	}
	// Every key has state once keys records were counted; then one more checkpoint.
	if err := waitRecords(cl, id, int64(keys)+int64(o.rescaleRate)/2, 10*time.Minute); err != nil {
		return nil, 0, err
	}
	for _, to := range []int32{4, 2} {
		r, err := rescaleOnce(cl, id, out, to)
		if err != nil {
			return nil, 0, err
		}
		rs = append(rs, r)
	}
	start := time.Now()
	if _, err := cl.TriggerSavepoint(ctx, &pb.TriggerSavepointRequest{JobId: id, TargetDirectory: filepath.Join(c.dir, "savepoints"), Stop: true}); err != nil {
		return nil, 0, err
	}
	stopped = true
	return rs, time.Since(start), nil
}

// rescaleOnce rescales the job to parallelism to and measures it.
func rescaleOnce(cl *client.Client, id, out string, to int32) (rescaleResult, error) {
	ctx := context.Background()
	before, err := cl.Job(ctx, id)
	if err != nil {
		return rescaleResult{}, err
	}
	r := rescaleResult{from: before.GetParallelism(), to: to}
	start := time.Now()
	type reply struct {
		cp  int64
		err error
	}
	done := make(chan reply, 1)
	go func() {
		cp, err := cl.Rescale(ctx, id, int(to))
		done <- reply{cp, err}
	}()
	var downAt time.Time
	var attempt int32
	deadline := time.Now().Add(5 * time.Minute)
	for r.total == 0 || r.committed == 0 {
		if time.Now().After(deadline) {
			return r, fmt.Errorf("rescale to %d: not done within 5 min", to)
		}
		select {
		case rep := <-done:
			if rep.err != nil {
				return r, rep.err
			}
			done = nil
			cps, err := cl.Checkpoints(ctx, id)
			if err != nil {
				return r, err
			}
			for _, cp := range cps {
				if cp.GetId() == rep.cp {
					r.checkpoint = time.Duration(cp.GetDurationMs()) * time.Millisecond
				}
			}
		default:
		}
		d, err := cl.Job(ctx, id)
		if err != nil {
			return r, err
		}
		now := time.Since(start)
		if d.GetStatus() != pb.JobStatus_JOB_STATUS_RUNNING && downAt.IsZero() {
			downAt = time.Now()
		}
		if r.total == 0 && d.GetParallelism() == to && allTasksRunning(d) {
			r.total = now
			attempt = d.GetTasks()[0].GetAttempt()
			if !downAt.IsZero() {
				r.down = time.Since(downAt)
			}
		}
		if r.total > 0 && r.committed == 0 {
			files, err := committedParts(out)
			if err != nil {
				return r, err
			}
			for _, f := range files {
				// part-<subtask>-<attempt>-<n>.jsonl
				if parts := strings.Split(f, "-"); len(parts) >= 3 {
					if a, err := strconv.Atoi(parts[2]); err == nil && int32(a) == attempt {
						r.committed = time.Since(start)
						break
					}
				}
			}
		}
		time.Sleep(rescalePoll)
	}
	if done != nil {
		if rep := <-done; rep.err != nil {
			return r, rep.err
		}
	}
	return r, nil
}

// waitRecords waits until the job's tasks read at least n records in total at their inputs
// (the count's input: every record once).
func waitRecords(cl *client.Client, id string, n int64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		d, err := cl.Job(context.Background(), id)
		if err != nil {
			return err
		}
		var in int64
		for _, t := range d.GetTasks() {
			if strings.HasPrefix(t.GetOperator(), "counts") {
				in += t.GetRecordsIn()
			}
		}
		if in >= n {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("the job did not read %d records within %v", n, timeout)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goflink/goflink/internal/proccluster"
)

// jobConfig renders a spec's config: block (keys in the given order).
func jobConfig(kv ...string) string {
	if len(kv) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("config:\n")
	for i := 0; i+1 < len(kv); i += 2 {
		fmt.Fprintf(&b, "  %s: %q\n", kv[i], kv[i+1])
	}
	return b.String()
}

// checkpointConfig renders a spec's config: block with EXACTLY_ONCE checkpoints every
// interval to dir, then the keys and values more.
func checkpointConfig(interval, dir string, more ...string) string {
	return jobConfig(append([]string{"execution.checkpointing.interval", interval,
		"execution.checkpointing.mode", "EXACTLY_ONCE", "execution.checkpointing.dir", dir}, more...)...)
}

// writeSpec writes a job spec into the cluster's directory and returns its path.
func (c *cluster) writeSpec(name, spec string) (string, error) {
	p := filepath.Join(c.dir, name+".yaml")
	return p, os.WriteFile(p, []byte(spec), 0o644)
}

// runToEnd runs a job to completion and returns its details and duration (JobManager start
// to end time).
func (c *cluster) runToEnd(spec string) (proccluster.JobStatus, float64, error) {
	var st proccluster.JobStatus
	if err := c.FlinkctlJSON(context.Background(), &st, "run", spec); err != nil {
		return st, 0, err
	}
	if st.Status != "FINISHED" {
		return st, 0, fmt.Errorf("bench job ended %s", st.Status)
	}
	s, err1 := time.Parse(time.RFC3339Nano, st.StartTime)
	e, err2 := time.Parse(time.RFC3339Nano, st.EndTime)
	if err := errors.Join(err1, err2); err != nil {
		return st, 0, err
	}
	return st, e.Sub(s).Seconds(), nil
}

func (c *cluster) checkpoints(id string) ([]proccluster.Checkpoint, error) {
	var cps []proccluster.Checkpoint
	return cps, c.FlinkctlJSON(context.Background(), &cps, "checkpoints", id)
}

// waitStatus polls the job until cond holds, it ended otherwise, or timeout.
func (c *cluster) waitStatus(id string, timeout, every time.Duration, what string, cond func(*proccluster.JobStatus) bool) error {
	deadline := time.Now().Add(timeout)
	for {
		st, err := c.Status(context.Background(), id)
		if err == nil && cond(st) {
			return nil
		}
		if err == nil && ended(st.Status) {
			return fmt.Errorf("job %s ended %s while waiting until %s", id, st.Status, what)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("job %s: not %s after %v (status %s): %w", id, what, timeout, st.Status, err)
		}
		time.Sleep(every)
	}
}

func ended(status string) bool {
	return status == "FINISHED" || status == "FAILED" || status == "CANCELED"
}

// allRunning reports whether the job and all its tasks are RUNNING.
func allRunning(st *proccluster.JobStatus) bool {
	return st.Status == "RUNNING" && len(st.Tasks) > 0 &&
		!slices.ContainsFunc(st.Tasks, func(t proccluster.Task) bool { return t.Status != "RUNNING" })
}

// cancel cancels a job and waits until it is CANCELED.
func (c *cluster) cancel(id string) error {
	if _, errOut, err := c.Flinkctl(context.Background(), "cancel", id); err != nil {
		return fmt.Errorf("flinkctl cancel %s: %w: %s", id, err, strings.TrimSpace(errOut))
	}
	return c.waitStatus(id, 30*time.Second, 50*time.Millisecond, "CANCELED", func(st *proccluster.JobStatus) bool { return st.Status == "CANCELED" })
}

// cancelAtReturn cancels the job id, if startJob submitted it, when the caller returns: a
// failed cancel is the caller's error unless it has one. defer c.cancelAtReturn(id, &err)
func (c *cluster) cancelAtReturn(id string, err *error) {
	if id == "" {
		return
	}
	if cerr := c.cancel(id); cerr != nil && *err == nil {
		*err = cerr
	}
}

// startJob writes a spec, submits it and waits until all its tasks run (polling every
// poll). The caller cancels the job.
func (c *cluster) startJob(name, spec string, poll time.Duration) (string, error) {
	path, err := c.writeSpec(name, spec)
	if err != nil {
		return "", err
	}
	id, err := c.Submit(context.Background(), path)
	if err != nil {
		return "", err
	}
	if err := c.waitStatus(id, 30*time.Second, poll, "RUNNING", allRunning); err != nil {
		return id, err
	}
	return id, nil
}

// clockTicks is Linux's USER_HZ, the unit of /proc/<pid>/stat's CPU times.
const clockTicks = 100

// cpuSeconds is the CPU time (user and system) process p has used so far, from
// /proc/<pid>/stat.
func cpuSeconds(p *proccluster.Proc) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("cpu time of %s: %w", p.Name, err)
	}
	// pid (comm) state ppid ...: the command may hold spaces and parentheses, the fields
	// after its last ")" do not; utime and stime are the 14th and 15th fields.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("cpu time of %s: short /proc stat %q", p.Name, s)
	}
	var ticks float64
	for _, x := range f[11:13] {
		n, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("cpu time of %s: %w", p.Name, err)
		}
		ticks += float64(n)
	}
	return ticks / clockTicks, nil
}

// taskManagersCPU is the CPU time the cluster's TaskManagers have used so far.
func (c *cluster) taskManagersCPU() (float64, error) {
	var sum float64
	for _, p := range c.TMs {
		s, err := cpuSeconds(p)
		if err != nil {
			return 0, err
		}
		sum += s
	}
	return sum, nil
}

// runMeasured is runToEnd that also returns the TaskManagers' CPU time per record of n.
func (c *cluster) runMeasured(spec string, n int64) (st proccluster.JobStatus, secs, cpuPerRecord float64, err error) {
	before, err := c.taskManagersCPU()
	if err != nil {
		return st, 0, 0, err
	}
	if st, secs, err = c.runToEnd(spec); err != nil {
		return st, 0, 0, err
	}
	after, err := c.taskManagersCPU()
	if err != nil {
		return st, 0, 0, err
	}
	return st, secs, (after - before) / float64(n), nil
}

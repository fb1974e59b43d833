package systemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goflink/goflink/client"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/internal/proccluster"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// Failover with real processes (issue 4, acceptance items (a)–(e)): region and full failover
// of a forward-only job, growing exponential-delay backoffs, failure-rate suppressing
// recovery, and a TaskManager SIGKILL with a spare slot.

// handled returns the exception entries with the given handling, in history order.
func handled(st *proccluster.JobStatus, handling string) []proccluster.Exception {
	var es []proccluster.Exception
	for _, e := range st.Exceptions {
		if e.Handling == handling {
			es = append(es, e)
		}
	}
	return es
}

func (c *cluster) submit(spec string) string {
	c.t.Helper()
	id, err := c.Submit(context.Background(), spec)
	if err != nil {
		c.t.Fatal(err)
	}
	return id
}

// waitStatus polls the job's `flinkctl status` until cond holds of it, and returns it.
func (c *cluster) waitStatus(id string, timeout time.Duration, what string, cond func(*proccluster.JobStatus) error) *proccluster.JobStatus {
	c.t.Helper()
	var st *proccluster.JobStatus
	poll.Until(c.t, timeout, what, func() (err error) {
		if st, err = c.Status(context.Background(), id); err != nil {
			return err
		}
		return cond(st)
	})
	return st
}

func (c *cluster) newClient() *client.Client {
	c.t.Helper()
	cl, err := c.Client()
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

func statusName(s pb.JobStatus) string {
	return strings.TrimPrefix(s.String(), "JOB_STATUS_")
}

const (
	fwdParallelism = 4
	fwdRecords     = 600 // values 0..599; subtask i emits the values v with v % 4 == i
	fwdRate        = 200 // records per second over the whole job: about 3 s
	fwdFailValue   = 302 // emitted by subtask 2 only, about 1.5 s in
	fwdFailSubtask = fwdFailValue % fwdParallelism
)

// forwardJobRun is what one run of the forward-only job showed.
type forwardJobRun struct {
	statuses []string    // job statuses as the watch saw them, consecutive duplicates dropped
	before   map[int]int // subtask → attempt while the first run ran
	status   *proccluster.JobStatus
	out      string
}

// runForwardJob runs sequence → map → fail (once, in one subtask) → file sink, with forward
// edges only (4 pipelined regions), under the given failover strategy, to its end.
func runForwardJob(t *testing.T, strategy string) *forwardJobRun {
	c := startCluster(t, 2, 2)
	out := filepath.Join(t.TempDir(), "out")
	spec := writeSpec(t, fmt.Sprintf(`name: forward-%s
parallelism: %d
config:
  jobmanager.execution.failover-strategy: %s
  execution.checkpointing.interval: 100ms
  execution.checkpointing.dir: %s
  restart-strategy.type: fixed-delay
  restart-strategy.fixed-delay.attempts: 1
  restart-strategy.fixed-delay.delay: 100ms
operators:
  - {name: numbers, type: sequence, from: 0, to: %d, rate: %d}
  - {name: tagged, type: map, fields: {value: "value", lane: "value %% %d"}}
  - {name: fail-once, type: fail, when: "value == %d", attempt: 0}
  - {name: out, type: file, path: %s}
`, strategy, fwdParallelism, strategy, filepath.Join(t.TempDir(), "checkpoints"), fwdRecords-1, fwdRate,
		fwdParallelism, fwdFailValue, out))
	id := c.submit(spec)
	cl := c.newClient()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := &forwardJobRun{out: out}
	last, err := cl.Watch(ctx, id, func(d *pb.JobDetails) error {
		s := statusName(d.GetStatus())
		if len(r.statuses) == 0 || r.statuses[len(r.statuses)-1] != s {
			r.statuses = append(r.statuses, s)
		}
		if r.before == nil && d.GetRestarts() == 0 && len(d.GetExceptions()) == 0 &&
			d.GetStatus() == pb.JobStatus_JOB_STATUS_RUNNING && len(d.GetTasks()) == fwdParallelism {
			r.before = map[int]int{}
			for _, task := range d.GetTasks() {
				r.before[int(task.GetSubtask())] = int(task.GetAttempt())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("watch job: %v", err)
	}
	if r.before == nil {
		t.Fatalf("the watch never saw the first run with its %d tasks (statuses %v)", fwdParallelism, r.statuses)
	}
	if r.status, err = c.Status(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("job ended %v: %s\nexceptions: %+v", last.GetStatus(), last.GetFailureCause(), r.status.Exceptions)
	}
	// A job with one restart: RUNNING → RESTARTING → RUNNING → FINISHED (CREATED may come first).
	got := slices.DeleteFunc(slices.Clone(r.statuses), func(s string) bool { return s == "CREATED" })
	if want := []string{"RUNNING", "RESTARTING", "RUNNING", "FINISHED"}; !slices.Equal(got, want) {
		t.Errorf("job statuses %v, want %v", r.statuses, want)
	}
	if r.status.Restarts != 1 {
		t.Errorf("restarts = %d, want 1", r.status.Restarts)
	}
	if len(r.status.Tasks) != fwdParallelism {
		t.Fatalf("%d tasks, want %d (the chain numbers -> tagged -> fail-once -> out per subtask): %+v",
			len(r.status.Tasks), fwdParallelism, r.status.Tasks)
	}
	return r
}

// theFailure checks that the exception history holds exactly the one injected failure, of
// subtask fwdFailSubtask, handled by a restart, and returns it.
func (r *forwardJobRun) theFailure(t *testing.T) proccluster.Exception {
	t.Helper()
	if len(r.status.Exceptions) != 1 {
		t.Fatalf("exception history has %d entries, want the one injected failure: %+v", len(r.status.Exceptions), r.status.Exceptions)
	}
	e := r.status.Exceptions[0]
	if !strings.Contains(e.Cause, "injected failure") || !strings.HasSuffix(e.Task, subtaskSuffix(fwdFailSubtask)) {
		t.Errorf("exception %+v: want the injected failure of task ...%s", e, subtaskSuffix(fwdFailSubtask))
	}
	if e.Handling != "restart" || e.RestartAttempt != 1 {
		t.Errorf("exception handling %q, restart_attempt %d; want \"restart\", 1", e.Handling, e.RestartAttempt)
	}
	return e
}

func subtaskSuffix(subtask int) string { return fmt.Sprintf(" (%d/%d)", subtask+1, fwdParallelism) }

// TestFailoverRegionRestartsOnlyFailedSubtask is issue 4 (a): a forward-only job with
// parallelism 4 has 4 pipelined regions; a failure in one subtask restarts only that region.
func TestFailoverRegionRestartsOnlyFailedSubtask(t *testing.T) {
	skipShort(t)
	r := runForwardJob(t, "region")
	e := r.theFailure(t)
	if e.Failover != "region" {
		t.Errorf("exception failover %q, want \"region\"", e.Failover)
	}
	if len(e.RestartedTasks) != 1 || !strings.HasSuffix(e.RestartedTasks[0], subtaskSuffix(fwdFailSubtask)) {
		t.Errorf("restarted_tasks %q, want only the task of subtask %d (...%s)", e.RestartedTasks, fwdFailSubtask, subtaskSuffix(fwdFailSubtask))
	}
	for _, task := range r.status.Tasks {
		before := r.before[task.Subtask]
		switch {
		case task.Subtask == fwdFailSubtask && task.Attempt == before:
			t.Errorf("failed task %s/%d still has attempt %d: it was not redeployed", task.Operator, task.Subtask, task.Attempt)
		case task.Subtask != fwdFailSubtask && task.Attempt != before:
			t.Errorf("task %s/%d went from attempt %d to %d: a region that did not fail was restarted",
				task.Operator, task.Subtask, before, task.Attempt)
		}
	}
	// The output shows it too: the untouched subtasks committed only files of their first attempt.
	for sub, attempts := range partAttempts(t, r.out) {
		if sub != fwdFailSubtask && (len(attempts) != 1 || attempts[0] != r.before[sub]) {
			t.Errorf("subtask %d committed part files of attempts %v, want only its first attempt %d", sub, attempts, r.before[sub])
		}
	}
	rows := checkValuesOnce(t, r.out, fwdRecords)
	t.Logf("region failover: statuses %v; restarted %q; task attempts %v → %s; %d committed rows, each value exactly once",
		r.statuses, e.RestartedTasks, r.before, taskAttempts(r.status), rows)
}

// TestFailoverFullRestartsAllTasks is issue 4 (b): the same job with the full failover
// strategy restarts every task.
func TestFailoverFullRestartsAllTasks(t *testing.T) {
	skipShort(t)
	r := runForwardJob(t, "full")
	e := r.theFailure(t)
	if e.Failover != "full" {
		t.Errorf("exception failover %q, want \"full\"", e.Failover)
	}
	var restarted []int
	for _, name := range e.RestartedTasks {
		for sub := range fwdParallelism {
			if strings.HasSuffix(name, subtaskSuffix(sub)) {
				restarted = append(restarted, sub)
			}
		}
	}
	slices.Sort(restarted)
	if !slices.Equal(restarted, []int{0, 1, 2, 3}) || len(e.RestartedTasks) != fwdParallelism {
		t.Errorf("restarted_tasks %q, want all %d tasks", e.RestartedTasks, fwdParallelism)
	}
	for _, task := range r.status.Tasks {
		if task.Attempt == r.before[task.Subtask] {
			t.Errorf("task %s/%d still has attempt %d: full failover did not redeploy it", task.Operator, task.Subtask, task.Attempt)
		}
	}
	rows := checkValuesOnce(t, r.out, fwdRecords)
	t.Logf("full failover: statuses %v; task attempts %v → %s; %d committed rows, each value exactly once",
		r.statuses, r.before, taskAttempts(r.status), rows)
}

func taskAttempts(st *proccluster.JobStatus) string {
	m := map[int]int{}
	for _, task := range st.Tasks {
		m[task.Subtask] = task.Attempt
	}
	return fmt.Sprint(m)
}

// crashLoopSpec is a job whose only task fails on its first record in every attempt.
func crashLoopSpec(t *testing.T, name, restartConfig string) string {
	return writeSpec(t, fmt.Sprintf(`name: %s
parallelism: 1
config:
%soperators:
  - {name: numbers, type: sequence, from: 0, rate: 100}
  - {name: crash, type: fail, when: "value >= 0"}
  - {name: sink, type: discard}
`, name, restartConfig))
}

// TestFailoverExponentialDelayGrows is issue 4 (c): a crash-looping job under
// exponential-delay (no jitter) shows growing restart delays in its exception history.
func TestFailoverExponentialDelayGrows(t *testing.T) {
	skipShort(t)
	c := startCluster(t, 1, 1)
	const restarts = 4 // delays 100, 200, 400, 800 ms: about 1.5 s
	id := c.submit(crashLoopSpec(t, "crash-loop-exponential", `  restart-strategy.type: exponential-delay
  restart-strategy.exponential-delay.initial-backoff: 100ms
  restart-strategy.exponential-delay.backoff-multiplier: 2
  restart-strategy.exponential-delay.max-backoff: 2s
  restart-strategy.exponential-delay.jitter-factor: 0
`))
	st := c.waitStatus(id, 30*time.Second, fmt.Sprintf("%d failures of the crash-looping job", restarts), func(st *proccluster.JobStatus) error {
		if client.IsTerminal(pb.JobStatus(pb.JobStatus_value["JOB_STATUS_"+st.Status])) {
			t.Fatalf("crash-looping job ended %s: %s\nexceptions: %+v", st.Status, st.FailureCause, st.Exceptions)
		}
		if len(st.Exceptions) < restarts {
			return fmt.Errorf("%d failures in the exception history", len(st.Exceptions))
		}
		return nil
	})
	if n := len(handled(st, "restart")); n < restarts {
		t.Fatalf("%d of the first %d failures handled \"restart\", want all: %+v", n, len(st.Exceptions), st.Exceptions)
	}
	var delays []int64
	var attempts []int
	for _, e := range handled(st, "restart") {
		delays = append(delays, e.RestartDelayMs)
		attempts = append(attempts, e.RestartAttempt)
	}
	for i := 1; i < len(delays); i++ {
		if delays[i] < delays[i-1] {
			t.Errorf("restart_delay_ms %v decreases at restart %d", delays, i+1)
		}
		if attempts[i] <= attempts[i-1] {
			t.Errorf("restart_attempt %v does not grow at restart %d", attempts, i+1)
		}
	}
	if delays[0] <= 0 || delays[len(delays)-1] <= delays[0] {
		t.Errorf("restart_delay_ms %v: want a positive first delay and later ones larger", delays)
	}
	for _, d := range delays {
		if d > 2000 {
			t.Errorf("restart_delay_ms %v exceeds max-backoff 2000", delays)
			break
		}
	}
	if _, stderr, code := c.flinkctl("cancel", id); code != 0 {
		t.Fatalf("flinkctl cancel: exit %d: %s", code, stderr)
	}
	c.waitStatus(id, 30*time.Second, "the job to be canceled", func(st *proccluster.JobStatus) error {
		if st.Status != "CANCELED" {
			return fmt.Errorf("job is %s", st.Status)
		}
		return nil
	})
	t.Logf("exponential-delay: restart_delay_ms %v, restart_attempt %v; canceled", delays, attempts)
}

// TestFailoverFailureRateEndsFailed is issue 4 (d): failure-rate tolerates 2 failures in the
// interval; the third fails the job with recovery suppressed.
func TestFailoverFailureRateEndsFailed(t *testing.T) {
	skipShort(t)
	c := startCluster(t, 1, 1)
	id := c.submit(crashLoopSpec(t, "crash-loop-failure-rate", `  restart-strategy.type: failure-rate
  restart-strategy.failure-rate.max-failures-per-interval: 2
  restart-strategy.failure-rate.failure-rate-interval: 1 min
  restart-strategy.failure-rate.delay: 50ms
`))
	st := c.waitStatus(id, 30*time.Second, "recovery to be suppressed", func(st *proccluster.JobStatus) error {
		if st.Status != "FAILED" {
			return fmt.Errorf("job is %s with %d exceptions", st.Status, len(st.Exceptions))
		}
		return nil
	})
	if !strings.Contains(st.FailureCause, "Recovery is suppressed by") {
		t.Errorf("failure_cause %q, want \"Recovery is suppressed by ...\"", st.FailureCause)
	}
	if len(st.Exceptions) == 0 || st.Exceptions[len(st.Exceptions)-1].Handling != "suppressed" {
		t.Errorf("exception history %+v: want the last entry handled \"suppressed\"", st.Exceptions)
	}
	if n := len(handled(st, "restart")); n != 2 || st.Restarts != 2 {
		t.Errorf("%d failures restarted the job (restarts %d), want 2 (max-failures-per-interval)\nexceptions: %+v",
			n, st.Restarts, st.Exceptions)
	}
	t.Logf("failure-rate: FAILED after %d restarts: %s", st.Restarts, st.FailureCause)
}

const (
	lossKeys    = 4
	lossRecords = 1200 // 300 per key
	lossRate    = 300  // about 4 s
)

// TestFailoverTaskManagerLossOntoSpareSlot is issue 4 (e): a TaskManager hosting tasks is
// SIGKILLed while a spare TaskManager has a free slot; the job runs again on the spare and
// keeps committing output, exactly once.
func TestFailoverTaskManagerLossOntoSpareSlot(t *testing.T) {
	skipShort(t)
	c := startCluster(t, 3, 1)
	out := filepath.Join(t.TempDir(), "out")
	id := c.submit(lossSpec(t, out, lossRecords, lossRate))

	// Wait until every task runs and output is being committed.
	st := c.waitStatus(id, 30*time.Second, "every task to run and commit output", func(st *proccluster.JobStatus) error {
		if st.Status != "RUNNING" || len(st.Tasks) == 0 {
			return fmt.Errorf("job is %s with %d tasks", st.Status, len(st.Tasks))
		}
		for _, task := range st.Tasks {
			if task.Status != "RUNNING" {
				return fmt.Errorf("task %s/%d is %s", task.Operator, task.Subtask, task.Status)
			}
		}
		if n := len(committedParts(t, out)); n < 2 {
			return fmt.Errorf("%d committed part files", n)
		}
		return nil
	})
	hosts := map[string]bool{}
	maxAttempt := 0
	for _, task := range st.Tasks {
		hosts[task.TaskManager] = true
		maxAttempt = max(maxAttempt, task.Attempt)
	}
	victim, spare := -1, ""
	for i := range c.TMs {
		tm := fmt.Sprintf("tm-%d", i)
		if hosts[tm] && victim < 0 {
			victim = i
		}
		if !hosts[tm] {
			spare = tm
		}
	}
	if victim < 0 || spare == "" || len(hosts) != 2 {
		t.Fatalf("tasks run on %v: want two of the three single-slot TaskManagers, one spare", hosts)
	}
	restarts := st.Restarts

	cl := c.newClient()
	killed := time.Now()
	c.TMs[victim].Kill()
	toRunning := pollJob(t, cl, id, 20*time.Second, func(d *pb.JobDetails) bool {
		return d.GetStatus() == pb.JobStatus_JOB_STATUS_RUNNING && int(d.GetRestarts()) > restarts
	})
	toTasks := pollJob(t, cl, id, 20*time.Second, func(d *pb.JobDetails) bool {
		if int(d.GetRestarts()) <= restarts || len(d.GetTasks()) == 0 {
			return false
		}
		for _, task := range d.GetTasks() {
			if task.GetStatus() != pb.ExecutionState_EXECUTION_STATE_RUNNING {
				return false
			}
		}
		return true
	})
	// New output: a committed part file written by an attempt after the kill.
	var toOutput time.Duration
	poll.Until(t, 20*time.Second, "output of an attempt after the kill", func() error {
		for _, p := range committedParts(t, out) {
			if p.attempt > maxAttempt {
				toOutput = time.Since(killed)
				return nil
			}
		}
		return fmt.Errorf("no committed part file of an attempt after %d", maxAttempt)
	})
	t.Logf("SIGKILL of tm-%d → job RUNNING again after %v, all tasks RUNNING after %v, new committed output seen after %v",
		victim, toRunning.Sub(killed).Round(time.Millisecond), toTasks.Sub(killed).Round(time.Millisecond), toOutput.Round(time.Millisecond))

	st = c.waitStatus(id, 60*time.Second, "the job to end", func(st *proccluster.JobStatus) error {
		if client.IsTerminal(pb.JobStatus(pb.JobStatus_value["JOB_STATUS_"+st.Status])) {
			return nil
		}
		return fmt.Errorf("job is %s", st.Status)
	})
	if st.Status != "FINISHED" {
		t.Fatalf("job ended %s: %s\nexceptions: %+v", st.Status, st.FailureCause, st.Exceptions)
	}
	onSpare, named := false, false
	for _, task := range st.Tasks {
		if task.TaskManager == fmt.Sprintf("tm-%d", victim) {
			t.Errorf("task %s/%d ran on the killed TaskManager tm-%d after the restart", task.Operator, task.Subtask, victim)
		}
		onSpare = onSpare || task.TaskManager == spare
	}
	// The first report may come from a task on a surviving TaskManager that lost its input
	// from the killed one; either way the history names the killed TaskManager.
	for _, e := range st.Exceptions {
		named = named || e.TaskManager == fmt.Sprintf("tm-%d", victim) ||
			strings.Contains(e.Cause, fmt.Sprintf("TaskManager tm-%d ", victim))
	}
	if !onSpare {
		t.Errorf("no task ran on the spare TaskManager %s after the kill: %+v", spare, st.Tasks)
	}
	if !named {
		t.Errorf("exception history %+v does not name the killed tm-%d", st.Exceptions, victim)
	}
	rows := checkCountsOnce(t, out, lossKeys, lossRecords)
	t.Logf("%d restarts; %d committed rows, each (key, seq) exactly once with count = seq+1", st.Restarts, rows)
}

// pollJob polls the job until cond holds and returns when it first did.
func pollJob(t *testing.T, cl *client.Client, id string, timeout time.Duration, cond func(*pb.JobDetails) bool) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	poll.Until(t, timeout, "job "+id, func() error {
		d, err := cl.Job(ctx, id)
		if err != nil {
			return err
		}
		if !cond(d) {
			return fmt.Errorf("status %v, restarts %d", d.GetStatus(), d.GetRestarts())
		}
		return nil
	})
	return time.Now()
}

// partFile is a committed file sink part: part-<subtask>-<attempt>-<n>.jsonl.
type partFile struct {
	path             string
	subtask, attempt int
}

func committedParts(t *testing.T, dir string) []partFile {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "part-*"))
	if err != nil {
		t.Fatal(err)
	}
	var parts []partFile
	for _, p := range paths {
		f := strings.Split(strings.TrimSuffix(filepath.Base(p), ".jsonl"), "-")
		if len(f) != 4 {
			t.Fatalf("committed file %s is not part-<subtask>-<attempt>-<n>.jsonl", p)
		}
		sub, err1 := strconv.Atoi(f[1])
		attempt, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil {
			t.Fatalf("committed file %s is not part-<subtask>-<attempt>-<n>.jsonl", p)
		}
		parts = append(parts, partFile{path: p, subtask: sub, attempt: attempt})
	}
	return parts
}

// partAttempts maps each subtask to the sorted attempts its committed part files came from.
func partAttempts(t *testing.T, dir string) map[int][]int {
	m := map[int][]int{}
	for _, p := range committedParts(t, dir) {
		if !slices.Contains(m[p.subtask], p.attempt) {
			m[p.subtask] = append(m[p.subtask], p.attempt)
		}
	}
	for _, a := range m {
		slices.Sort(a)
	}
	return m
}

// readRows decodes every line of the committed part files.
func readRows[R any](t *testing.T, dir string, each func(file string, r R)) {
	t.Helper()
	for _, p := range committedParts(t, dir) {
		data, err := os.ReadFile(p.path)
		if err != nil {
			t.Fatal(err)
		}
		for line := range bytes.Lines(data) {
			var r R
			if err := json.Unmarshal(line, &r); err != nil {
				t.Fatalf("%s: %q: %v", p.path, line, err)
			}
			each(p.path, r)
		}
	}
}

// checkValuesOnce checks that the committed output holds every value 0..n-1 exactly once and
// returns the number of rows.
func checkValuesOnce(t *testing.T, dir string, n int) int {
	t.Helper()
	seen := make([]int, n)
	rows := 0
	readRows(t, dir, func(file string, r struct{ Value int64 }) {
		rows++
		if r.Value < 0 || r.Value >= int64(n) {
			t.Fatalf("%s: value %d out of range", file, r.Value)
		}
		seen[r.Value]++
	})
	for v, k := range seen {
		if k != 1 {
			t.Errorf("value %d committed %d times, want exactly once", v, k)
		}
	}
	return rows
}

// checkCountsOnce checks keyed counts: every (key, seq) committed exactly once, with count
// seq+1; it returns the number of rows.
func checkCountsOnce(t *testing.T, dir string, keys, records int) int {
	t.Helper()
	perKey := records / keys
	seen := make([][]int, keys)
	for k := range seen {
		seen[k] = make([]int, perKey)
	}
	rows := 0
	readRows(t, dir, func(file string, r struct{ Key, Seq, Count int64 }) {
		rows++
		if r.Key < 0 || r.Key >= int64(keys) || r.Seq < 0 || r.Seq >= int64(perKey) {
			t.Fatalf("%s: row %+v out of range", file, r)
		}
		seen[r.Key][r.Seq]++
		if r.Count != r.Seq+1 {
			t.Errorf("key %d seq %d has count %d, want %d: the keyed state saw a record twice or missed one", r.Key, r.Seq, r.Count, r.Seq+1)
		}
	})
	for k, seqs := range seen {
		for s, n := range seqs {
			if n != 1 {
				t.Errorf("key %d seq %d committed %d times, want exactly once", k, s, n)
			}
		}
	}
	return rows
}

// lossSpec is an exactly-once keyed job: (key, seq) records, a count per key, a file sink.
func lossSpec(t *testing.T, out string, records, rate int) string {
	return keyedSpec(t, "tm-loss", out, records, rate, lossKeys, "hashmap", 100*time.Millisecond, 3, 0)
}

// keyedSpec writes an exactly-once job of keys keys: a sequence of records at rate made (key,
// seq) records, counted per key into a file sink; fixed-delay restarts.
func keyedSpec(t *testing.T, name, out string, records, rate, keys int, backend string, interval time.Duration, attempts int, delay time.Duration) string {
	return keyedSpecAt(t, name, out, filepath.Join(t.TempDir(), "checkpoints"), records, rate, keys, backend, interval, attempts, delay)
}

// keyedSpecAt is keyedSpec with its checkpoints in chkDir.
func keyedSpecAt(t *testing.T, name, out, chkDir string, records, rate, keys int, backend string, interval time.Duration, attempts int, delay time.Duration) string {
	return writeSpec(t, fmt.Sprintf(`name: %s
parallelism: 2
config:
  execution.checkpointing.interval: %dms
  execution.checkpointing.dir: %s
  state.backend.type: %s
  restart-strategy.type: fixed-delay
  restart-strategy.fixed-delay.attempts: %d
  restart-strategy.fixed-delay.delay: %dms
operators:
  - {name: numbers, type: sequence, from: 0, to: %d, rate: %d}
  - {name: keyed, type: map, fields: {key: "value %% %d", seq: "int(value / %d)"}}
  - {name: by-key, type: key-by, key: key}
  - {name: counts, type: count}
  - {name: out, type: file, path: %s}
`, name, interval.Milliseconds(), chkDir, backend, attempts, delay.Milliseconds(), records-1, rate, keys, keys, out))
}

// A TaskManager that is alive but unreachable (SIGSTOP: no broken connection, just silence)
// is declared lost after heartbeat.timeout. With no spare slot the job waits for one; a
// TaskManager that joins later gets the tasks. When the stopped one resumes it is a new
// TaskManager: its old tasks are cancelled (fenced), not resumed.
func TestFailoverPartitionedTaskManagerFencedAndReplacedLater(t *testing.T) {
	skipShort(t)
	const records, rate = 2400, 300 // about 8 s
	c := startCluster(t, 2, 1)
	out := filepath.Join(t.TempDir(), "out")
	id := c.submit(lossSpec(t, out, records, rate))
	c.waitStatus(id, 30*time.Second, "the job to run and commit output", func(st *proccluster.JobStatus) error {
		if st.Status != "RUNNING" || len(committedParts(t, out)) < 2 {
			return fmt.Errorf("job is %s, %d committed part files", st.Status, len(committedParts(t, out)))
		}
		return nil
	})
	victim := c.TMs[0]
	if err := victim.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = victim.Cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	defer resume()

	// Lost by heartbeat timeout (2 s in the harness); the job restarts and waits for a slot.
	c.waitStatus(id, 20*time.Second, "the stopped TaskManager to be declared lost", func(st *proccluster.JobStatus) error {
		lost := false
		for _, e := range st.Exceptions {
			lost = lost || strings.Contains(e.Cause, "no heartbeat")
		}
		waiting := 0
		for _, task := range st.Tasks {
			if task.Status == "SCHEDULED" {
				waiting++
			}
		}
		if !lost || st.Status != "RUNNING" || waiting == 0 {
			return fmt.Errorf("job %s, %d tasks waiting for a slot, heartbeat loss recorded: %v", st.Status, waiting, lost)
		}
		return nil
	})
	// A TaskManager that joins later takes the tasks.
	c.TMs = append(c.TMs, c.startTM("tm-2"))
	c.waitStatus(id, 20*time.Second, "the tasks to move to the new tm-2", func(st *proccluster.JobStatus) error {
		on := map[string]bool{}
		for _, task := range st.Tasks {
			if task.Status != "RUNNING" && task.Status != "FINISHED" {
				return fmt.Errorf("task %s/%d is %s", task.Operator, task.Subtask, task.Status)
			}
			on[task.TaskManager] = true
		}
		if !on["tm-2"] || on["tm-0"] {
			return fmt.Errorf("tasks run on %v, want tm-2 and not the lost tm-0", on)
		}
		return nil
	})
	// The stopped TaskManager resumes: it registers again as a new TaskManager and its old
	// tasks are cancelled, so its slot is free again.
	resume()
	poll.Until(t, 20*time.Second, "tm-0 to register again with a free slot", func() error {
		var info struct {
			TaskManagers []struct {
				ID        string `json:"id"`
				FreeSlots int    `json:"free_slots"`
			} `json:"taskmanagers"`
		}
		if err := c.FlinkctlJSON(context.Background(), &info, "cluster"); err != nil {
			return err
		}
		for _, tm := range info.TaskManagers {
			if tm.ID == "tm-0" && tm.FreeSlots == 1 {
				return nil
			}
		}
		return fmt.Errorf("tm-0 not registered again with a free slot: %+v", info.TaskManagers)
	})
	st := c.waitStatus(id, 60*time.Second, "the job to end", func(st *proccluster.JobStatus) error {
		if st.Status == "RUNNING" || st.Status == "RESTARTING" {
			return fmt.Errorf("job is %s", st.Status)
		}
		return nil
	})
	if st.Status != "FINISHED" {
		t.Fatalf("job ended %s: %s\nexceptions: %+v", st.Status, st.FailureCause, st.Exceptions)
	}
	rows := checkCountsOnce(t, out, lossKeys, records)
	t.Logf("%d restarts; %d committed rows, each (key, seq) exactly once with count = seq+1", st.Restarts, rows)
}

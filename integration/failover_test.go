package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// forwardSpec is an embarrassingly parallel job: a sequence source of 1..n split over p
// subtasks (subtask s emits 1+s, 1+s+p, …), a map and a file sink, all on forward edges, so
// every subtask is its own pipelined region. The fail operator fires once, in the subtask
// that emits failAt, on its first attempt.
func forwardSpec(p, n, rate, failAt int, strategy, out, cpDir string) string {
	return fmt.Sprintf(`name: forward
parallelism: %d
config:
  execution.checkpointing.interval: 50ms
  execution.checkpointing.dir: %s
  jobmanager.execution.failover-strategy: %s
  restart-strategy.type: fixed-delay
  restart-strategy.fixed-delay.attempts: 3
  restart-strategy.fixed-delay.delay: 20ms
operators:
  - {name: numbers, type: sequence, from: 1, to: %d, rate: %d}
  - {name: double, type: map, fields: {value: "value", twice: "value * 2"}}
  - {name: boom, type: fail, when: "value == %d", attempt: 0}
  - {name: out, type: file, path: %q}
`, p, cpDir, strategy, n, rate, failAt, out)
}

// runForward runs forwardSpec to its end and checks what every failover strategy must give:
// one restart, recorded in the exception history, and every value committed exactly once.
func runForward(t *testing.T, strategy string, failAt int) *pb.JobDetails {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 2, Slots: 2})
	const p, n = 4, 400
	out := filepath.Join(t.TempDir(), "out")
	id := submit(t, ctx, cl, forwardSpec(p, n, 200, failAt, strategy, out, filepath.Join(t.TempDir(), "cp")))
	last := watchFinished(t, ctx, cl, id, 1)
	checkEachValueOnce(t, out, n)
	var failures []*pb.ExceptionEntry
	for _, e := range last.GetExceptions() {
		if e.GetHandling() != pb.FailureHandling_FAILURE_HANDLING_UNSPECIFIED {
			failures = append(failures, e)
		}
	}
	if len(failures) != 1 {
		t.Fatalf("exception history %v, want exactly the injected failure", last.GetExceptions())
	}
	f := failures[0]
	if f.GetHandling() != pb.FailureHandling_FAILURE_HANDLING_RESTART || f.GetFailover() != strategy || f.GetRestartAttempt() != 1 ||
		!strings.Contains(f.GetCause(), "injected failure") {
		t.Errorf("exception = %v, want the injected failure restarted (restart 1) by %s failover", f, strategy)
	}
	return last
}

func TestRegionFailoverRestartsOnlyTheFailedRegion(t *testing.T) {
	const failAt = 202 // emitted by subtask (202-1) % 4 = 1
	last := runForward(t, "region", failAt)
	f := last.GetExceptions()[len(last.GetExceptions())-1]
	for _, name := range f.GetRestartedTasks() {
		if !strings.HasSuffix(name, "(2/4)") {
			t.Errorf("restarted tasks %v: %q is not of the failed subtask 2/4", f.GetRestartedTasks(), name)
		}
	}
	if len(f.GetRestartedTasks()) == 0 {
		t.Errorf("no restarted tasks recorded in %v", f)
	}
	for _, task := range last.GetTasks() {
		want := int32(0)
		if task.GetSubtask() == 1 {
			want = 1
		}
		if task.GetAttempt() != want {
			t.Errorf("task %s (%d) has attempt %d, want %d: only the failed region restarts", task.GetOperator(), task.GetSubtask(), task.GetAttempt(), want)
		}
	}
}

func TestFullFailoverRestartsEveryTask(t *testing.T) {
	last := runForward(t, "full", 202)
	f := last.GetExceptions()[len(last.GetExceptions())-1]
	if len(f.GetRestartedTasks()) != len(last.GetTasks()) {
		t.Errorf("restarted tasks %v, want all %d tasks", f.GetRestartedTasks(), len(last.GetTasks()))
	}
	for _, task := range last.GetTasks() {
		if task.GetAttempt() != 1 {
			t.Errorf("task %s (%d) has attempt %d, want 1: full failover restarts every task", task.GetOperator(), task.GetSubtask(), task.GetAttempt())
		}
	}
}

func TestUnrecoverableFailureIsNotRestarted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 1, Slots: 1})
	// A restart strategy that would restart forever, and a modulo by zero at value 5.
	spec := fmt.Sprintf(`name: bad-expression
config:
  execution.checkpointing.interval: 50ms
  execution.checkpointing.dir: %s
  restart-strategy.type: fixed-delay
  restart-strategy.fixed-delay.attempts: 1000
  restart-strategy.fixed-delay.delay: 10ms
operators:
  - {name: numbers, type: sequence, from: 1, to: 10, rate: 100}
  - {name: ratio, type: map, fields: {r: "100 %% (value - 5)"}}
  - {name: out, type: discard}
`, filepath.Join(t.TempDir(), "cp"))
	id := submit(t, ctx, cl, spec)
	last := watchEnd(t, ctx, cl, id)
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FAILED || last.GetRestarts() != 0 {
		t.Fatalf("job ended %v after %d restarts, want FAILED without restarts", last.GetStatus(), last.GetRestarts())
	}
	if !strings.Contains(last.GetFailureCause(), "Unrecoverable") || !strings.Contains(last.GetFailureCause(), "ratio") {
		t.Errorf("failure cause %q, want it to name the unrecoverable failure in operator ratio", last.GetFailureCause())
	}
	ex := last.GetExceptions()
	if len(ex) == 0 || ex[len(ex)-1].GetHandling() != pb.FailureHandling_FAILURE_HANDLING_UNRECOVERABLE {
		t.Errorf("exception history %v, want the failure marked unrecoverable", ex)
	}
}

// Two regions failing within the backoff make one restart: the second failure merges into the
// pending restart (exponential-delay does not grow its backoff for it), and both regions are
// redeployed together while the other two keep running.
func TestConcurrentRegionFailuresMergeIntoOneRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 2, Slots: 2})
	const n = 400
	out := filepath.Join(t.TempDir(), "out")
	// Values 202 and 203 are the 51st values of subtasks 1 and 2: emitted about together.
	spec := fmt.Sprintf(`name: two-failures
parallelism: 4
config:
  execution.checkpointing.interval: 50ms
  execution.checkpointing.dir: %s
  restart-strategy.type: exponential-delay
  restart-strategy.exponential-delay.initial-backoff: 1s
  restart-strategy.exponential-delay.jitter-factor: 0
operators:
  - {name: numbers, type: sequence, from: 1, to: %d, rate: 200}
  - {name: boom, type: fail, when: "value == 202 || value == 203", attempt: 0}
  - {name: out, type: file, path: %q}
`, filepath.Join(t.TempDir(), "cp"), n, out)
	id := submit(t, ctx, cl, spec)
	last := watchFinished(t, ctx, cl, id, 1)
	var got []pb.FailureHandling
	for _, e := range last.GetExceptions() {
		got = append(got, e.GetHandling())
		if e.GetRestartAttempt() != 1 || len(e.GetRestartedTasks()) != 1 {
			t.Errorf("exception %v: want restart attempt 1 of its own region's task", e)
		}
	}
	want := []pb.FailureHandling{pb.FailureHandling_FAILURE_HANDLING_RESTART, pb.FailureHandling_FAILURE_HANDLING_MERGED}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("exception handling %v, want %v", got, want)
	}
	for _, task := range last.GetTasks() {
		want := int32(0)
		if task.GetSubtask() == 1 || task.GetSubtask() == 2 {
			want = 1
		}
		if task.GetAttempt() != want {
			t.Errorf("task %s (%d) has attempt %d, want %d", task.GetOperator(), task.GetSubtask(), task.GetAttempt(), want)
		}
	}
	checkEachValueOnce(t, out, n)
}

// A region restarted later is not held back by one that still waits for a slot: with one
// region's TaskManager gone and no spare, the other region fails and comes back at once in the
// slot it holds; the first runs again once a TaskManager joins. Output stays exactly once.
func TestRegionWithItsSlotIsNotHeldBackByOneWaiting(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 2, Slots: 1})
	const n = 600 // 300 per subtask at 100/s each: 3 s
	out := filepath.Join(t.TempDir(), "out")
	// Each subtask fails on its first attempt at its 151st value (301 and 302), about 1.5 s in.
	spec := fmt.Sprintf(`name: held-back
parallelism: 2
config:
  execution.checkpointing.interval: 50ms
  execution.checkpointing.dir: %s
  restart-strategy.type: fixed-delay
  restart-strategy.fixed-delay.attempts: 10
  restart-strategy.fixed-delay.delay: 0ms
operators:
  - {name: numbers, type: sequence, from: 1, to: %d, rate: 200}
  - {name: boom, type: fail, when: "value == 301 || value == 302", attempt: 0}
  - {name: out, type: file, path: %q}
`, filepath.Join(t.TempDir(), "cp"), n, out)
	id := submit(t, ctx, cl, spec)
	d := waitRunning(t, ctx, cl, id, 2)
	// Stop the TaskManager of subtask 0: its region waits for a slot (attempt 1, SCHEDULED).
	var gone int
	for i, tm := range c.TMs {
		for _, task := range d.GetTasks() {
			if task.GetSubtask() == 0 && task.GetTaskmanager() == tm.ID() {
				gone = i
			}
		}
	}
	if err := c.TMs[gone].Close(); err != nil {
		t.Fatal(err)
	}
	// Subtask 1 fails at 302 on attempt 0 and is redeployed in its own slot while subtask 0
	// still waits.
	poll.Until(t, 20*time.Second, "subtask 1 running again while subtask 0 waits", func() error {
		d, err := cl.Job(ctx, id)
		if err != nil {
			return err
		}
		var s0, s1 *pb.TaskDetails
		for _, task := range d.GetTasks() {
			if task.GetSubtask() == 0 {
				s0 = task
			} else {
				s1 = task
			}
		}
		if s0.GetStatus() != pb.ExecutionState_EXECUTION_STATE_SCHEDULED || s1.GetAttempt() < 2 ||
			s1.GetStatus() != pb.ExecutionState_EXECUTION_STATE_RUNNING {
			return fmt.Errorf("subtask 0 %v (attempt %d), subtask 1 %v (attempt %d)", s0.GetStatus(), s0.GetAttempt(), s1.GetStatus(), s1.GetAttempt())
		}
		return nil
	})
	if _, err := c.AddTaskManager(); err != nil {
		t.Fatal(err)
	}
	watchFinished(t, ctx, cl, id, -1)
	checkEachValueOnce(t, out, n)
}

// checkEachValueOnce checks that a file sink committed every value 1..n exactly once, and
// nothing else.
func checkEachValueOnce(t *testing.T, dir string, n int) {
	t.Helper()
	got := committedValues(t, dir)
	for v := 1; v <= n; v++ {
		if got[int64(v)] != 1 {
			t.Errorf("value %d committed %d times, want exactly once", v, got[int64(v)])
		}
	}
	if len(got) != n {
		t.Errorf("%d distinct values committed, want %d", len(got), n)
	}
}

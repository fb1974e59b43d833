package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goflink/goflink/client"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// testTimeout bounds every cluster test.
const testTimeout = 60 * time.Second

// submit submits a job and returns its ID.
func submit(t *testing.T, ctx context.Context, cl *client.Client, spec string) string {
	t.Helper()
	id, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(spec)})
	if err != nil {
		t.Fatalf("Submit() = %v", err)
	}
	return id
}

// waitRunning waits until the job is RUNNING with every task RUNNING, and returns its details.
func waitRunning(t *testing.T, ctx context.Context, cl *client.Client, id string, wantTasks int) *pb.JobDetails {
	t.Helper()
	var d *pb.JobDetails
	poll.Until(t, 30*time.Second, "job "+id+" and its tasks to run", func() error {
		var err error
		if d, err = cl.Job(ctx, id); err != nil {
			return err
		}
		if client.IsTerminal(d.GetStatus()) {
			t.Fatalf("job %s ended %v (%s) while waiting for it to run", id, d.GetStatus(), d.GetFailureCause())
		}
		if d.GetStatus() != pb.JobStatus_JOB_STATUS_RUNNING {
			return fmt.Errorf("job is %v", d.GetStatus())
		}
		if len(d.GetTasks()) != wantTasks {
			return fmt.Errorf("job has %d tasks, want %d", len(d.GetTasks()), wantTasks)
		}
		for _, task := range d.GetTasks() {
			if task.GetStatus() != pb.ExecutionState_EXECUTION_STATE_RUNNING {
				return fmt.Errorf("task %s/%d is %v", task.GetOperator(), task.GetSubtask(), task.GetStatus())
			}
		}
		return nil
	})
	return d
}

// watchEnd follows a job until it ends and returns its last details.
func watchEnd(t *testing.T, ctx context.Context, cl *client.Client, id string) *pb.JobDetails {
	t.Helper()
	last, err := cl.Watch(ctx, id, func(*pb.JobDetails) error { return nil })
	if err != nil {
		t.Fatalf("Watch(%s) = %v (last %v)", id, err, last)
	}
	return last
}

// watchFinished follows a job until it ends and fails the test unless it FINISHED, after
// restarts restarts (any number when restarts < 0); it returns the job's last details.
func watchFinished(t *testing.T, ctx context.Context, cl *client.Client, id string, restarts int32) *pb.JobDetails {
	t.Helper()
	last := watchEnd(t, ctx, cl, id)
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED || restarts >= 0 && last.GetRestarts() != restarts {
		t.Fatalf("job ended %v after %d restarts (%s), want FINISHED after %d", last.GetStatus(), last.GetRestarts(), last.GetFailureCause(), restarts)
	}
	return last
}

const unboundedSpec = `name: endless
parallelism: 2
operators:
  - {name: numbers, type: sequence, from: 1, rate: 1000}
  - {name: out, type: discard}
`

func TestCancelRunningJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 2, Slots: 1})

	id := submit(t, ctx, cl, unboundedSpec)
	d := waitRunning(t, ctx, cl, id, 2)
	tms := map[string]bool{}
	for _, task := range d.GetTasks() {
		tms[task.GetTaskmanager()] = true
	}
	if len(tms) != 2 {
		t.Errorf("tasks run on TaskManagers %v, want both of the 2 (one slot each)", tms)
	}

	if err := cl.Cancel(ctx, id); err != nil {
		t.Fatalf("Cancel(%s) = %v", id, err)
	}
	last := watchEnd(t, ctx, cl, id)
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_CANCELED {
		t.Fatalf("Watch(%s) ended %v (%s), want CANCELED", id, last.GetStatus(), last.GetFailureCause())
	}
	if last.GetEndTime() == nil {
		t.Errorf("Watch(%s) ended with CANCELED but no end time", id)
	}
	for _, task := range last.GetTasks() {
		if task.GetStatus() != pb.ExecutionState_EXECUTION_STATE_CANCELED {
			t.Errorf("task %s/%d of the canceled job is %v, want CANCELED", task.GetOperator(), task.GetSubtask(), task.GetStatus())
		}
	}
	if n := len(last.GetExceptions()); n != 0 {
		t.Errorf("canceled job has %d exceptions, want none: %v", n, last.GetExceptions())
	}

	for _, tc := range []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"cancel again", func() error { return cl.Cancel(ctx, id) }, codes.FailedPrecondition},
		{"get unknown job", func() error { _, err := cl.Job(ctx, "no-such-job"); return err }, codes.NotFound},
		{"cancel unknown job", func() error { return cl.Cancel(ctx, "no-such-job") }, codes.NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); status.Code(err) != tc.want {
				t.Errorf("%s = %v (code %v), want code %v", tc.name, err, status.Code(err), tc.want)
			}
		})
	}

	// Every slot is free again.
	poll.Until(t, 10*time.Second, "slots to be released", func() error {
		info, err := cl.Cluster(ctx)
		if err != nil {
			return err
		}
		for _, tm := range info.GetTaskmanagers() {
			if tm.GetFreeSlots() != tm.GetSlots() {
				return fmt.Errorf("TaskManager %s has %d of %d slots free", tm.GetId(), tm.GetFreeSlots(), tm.GetSlots())
			}
		}
		return nil
	})
}

func TestFailOperatorFailsJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, cl := miniclustertest.StartT(t, minicluster.Options{})

	spec := `name: failing
parallelism: 1
operators:
  - {name: numbers, type: sequence, from: 1, to: 100}
  - {name: boom, type: fail, when: "value == 7"}
  - {name: out, type: discard}
`
	id := submit(t, ctx, cl, spec)
	last := watchEnd(t, ctx, cl, id)
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FAILED {
		t.Fatalf("job ended %v, want FAILED", last.GetStatus())
	}
	for _, want := range []string{"injected failure", "value == 7"} {
		if !strings.Contains(last.GetFailureCause(), want) {
			t.Errorf("failure cause %q does not contain %q", last.GetFailureCause(), want)
		}
	}
	if len(last.GetExceptions()) == 0 {
		t.Fatalf("FAILED job has no exceptions")
	}
	found := false
	for _, e := range last.GetExceptions() {
		if strings.Contains(e.GetTask(), "boom") && strings.Contains(e.GetCause(), "injected failure") {
			found = true
			if e.GetTaskmanager() == "" || e.GetTime() == nil {
				t.Errorf("exception %v lacks its TaskManager or time", e)
			}
		}
	}
	if !found {
		t.Errorf("exceptions %v name no failing task \"boom\" with the injected failure", last.GetExceptions())
	}

	// The failure is durable: the Raft record agrees.
	jobs, err := cl.List(ctx)
	if err != nil {
		t.Fatalf("List() = %v", err)
	}
	if len(jobs) != 1 || jobs[0].GetStatus() != pb.JobStatus_JOB_STATUS_FAILED {
		t.Errorf("List() = %v, want the one job FAILED", jobs)
	}
}

func TestPrintSinkWritesJSONLines(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	out := &miniclustertest.Buffer{}
	_, cl := miniclustertest.StartT(t, minicluster.Options{Slots: 2, Stdout: out})

	for _, tc := range []struct {
		name   string
		spec   string
		sorted bool // parallel sinks interleave: compare sorted lines
		want   []string
	}{
		{
			name: "one subtask, no prefix, in order",
			spec: `name: printer
parallelism: 1
operators:
  - {name: numbers, type: sequence, from: 1, to: 4}
  - {name: shape, type: map, fields: {value: "value", double: "value * 2", odd: "value % 2 == 1", label: "'n' + string(value)"}}
  - {name: out, type: print}
`,
			want: []string{
				`{"value":1,"double":2,"odd":true,"label":"n1"}`,
				`{"value":2,"double":4,"odd":false,"label":"n2"}`,
				`{"value":3,"double":6,"odd":true,"label":"n3"}`,
				`{"value":4,"double":8,"odd":false,"label":"n4"}`,
			},
		},
		{
			name: "two subtasks, prefixed with the subtask",
			spec: `name: printer2
parallelism: 2
operators:
  - {name: numbers, type: sequence, from: 1, to: 4}
  - {name: out, type: print}
`,
			sorted: true,
			want:   []string{`1> {"value":1}`, `1> {"value":3}`, `2> {"value":2}`, `2> {"value":4}`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out.Reset()
			id := submit(t, ctx, cl, tc.spec)
			watchFinished(t, ctx, cl, id, -1)
			got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			if tc.sorted {
				slices.Sort(got)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("print output =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestFinishedJobSurvivesRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	dir := t.TempDir()

	c1, cl := miniclustertest.StartT(t, minicluster.Options{DataDir: dir})
	spec := `name: durable
parallelism: 1
operators:
  - {name: numbers, type: sequence, from: 1, to: 100}
  - {name: out, type: discard}
`
	id := submit(t, ctx, cl, spec)
	watchFinished(t, ctx, cl, id, -1)
	before, err := cl.List(ctx)
	if err != nil {
		t.Fatalf("List() = %v", err)
	}
	if err := c1.Close(); err != nil {
		t.Fatalf("closing the first cluster: %v", err)
	}

	_, cl2 := miniclustertest.StartT(t, minicluster.Options{DataDir: dir})
	after, err := cl2.List(ctx)
	if err != nil {
		t.Fatalf("List() after restart = %v", err)
	}
	if len(after) != 1 {
		t.Fatalf("List() after restart = %v, want 1 job", after)
	}
	got := after[0]
	if got.GetId() != id || got.GetName() != "durable" || got.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("List() after restart = [%s %s %v], want [%s durable FINISHED]", got.GetId(), got.GetName(), got.GetStatus(), id)
	}
	if !got.GetStartTime().AsTime().Equal(before[0].GetStartTime().AsTime()) || !got.GetEndTime().AsTime().Equal(before[0].GetEndTime().AsTime()) {
		t.Errorf("times after restart = %v..%v, want %v..%v", got.GetStartTime().AsTime(), got.GetEndTime().AsTime(),
			before[0].GetStartTime().AsTime(), before[0].GetEndTime().AsTime())
	}
	d, err := cl2.Job(ctx, id)
	if err != nil {
		t.Fatalf("Job(%s) after restart = %v", id, err)
	}
	if d.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED || d.GetRestarts() != 0 {
		t.Errorf("Job(%s) after restart = %v with %d restarts, want FINISHED with 0", id, d.GetStatus(), d.GetRestarts())
	}
}

// TestRunningJobRecoveredAfterRestart closes the whole cluster (Cluster.Close) while a job
// runs and starts it again on the same data directory: the job must come back.
func TestRunningJobRecoveredAfterRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	dir := t.TempDir()
	opts := minicluster.Options{DataDir: dir, TaskManagers: 2, Slots: 1}

	c1, cl := miniclustertest.StartT(t, opts)
	id := submit(t, ctx, cl, unboundedSpec)
	first := waitRunning(t, ctx, cl, id, 2)
	for _, task := range first.GetTasks() {
		if task.GetAttempt() != 0 {
			t.Errorf("first run: task %s/%d attempt = %d, want 0", task.GetOperator(), task.GetSubtask(), task.GetAttempt())
		}
	}
	if err := c1.Close(); err != nil {
		t.Fatalf("closing the first cluster: %v", err)
	}

	_, cl2 := miniclustertest.StartT(t, opts)
	d := waitRunning(t, ctx, cl2, id, 2)
	if d.GetRestarts() < 1 {
		t.Errorf("recovered job restarts = %d, want >= 1", d.GetRestarts())
	}
	for _, task := range d.GetTasks() {
		if task.GetAttempt() != 1 {
			t.Errorf("recovered task %s/%d attempt = %d, want 1", task.GetOperator(), task.GetSubtask(), task.GetAttempt())
		}
	}
	if err := cl2.Cancel(ctx, id); err != nil {
		t.Fatalf("Cancel(%s) = %v", id, err)
	}
	if last := watchEnd(t, ctx, cl2, id); last.GetStatus() != pb.JobStatus_JOB_STATUS_CANCELED {
		t.Errorf("recovered job ended %v (%s), want CANCELED", last.GetStatus(), last.GetFailureCause())
	}
}

// crash stops the JobManager before the TaskManagers, so the Raft log ends as after a crash of
// the whole cluster: nothing is recorded on the way down.
func crash(t *testing.T, c *minicluster.Cluster) {
	t.Helper()
	for i := range c.JMs {
		if err := c.StopJobManager(i); err != nil {
			t.Errorf("JobManager %d Close() = %v", i, err)
		}
	}
	for _, tm := range c.TMs {
		if err := tm.Close(); err != nil {
			t.Errorf("TaskManager Close() = %v", err)
		}
	}
	c.TMs = nil
}

// TestRunningJobRecoveredAfterEveryCrash crashes the cluster twice while a job runs. Each
// recovery is a new run: the restarts count grows and no execution attempt ID is reused
// (coordinator/DESIGN.md, invariant 5).
func TestRunningJobRecoveredAfterEveryCrash(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	opts := minicluster.Options{DataDir: t.TempDir(), TaskManagers: 2, Slots: 1}

	c, cl := miniclustertest.StartT(t, opts)
	id := submit(t, ctx, cl, unboundedSpec)
	waitRunning(t, ctx, cl, id, 2)
	for run := int32(1); run <= 2; run++ {
		crash(t, c)
		c, cl = miniclustertest.StartT(t, opts)
		d := waitRunning(t, ctx, cl, id, 2)
		if d.GetRestarts() != run {
			t.Errorf("after crash %d: restarts = %d, want %d", run, d.GetRestarts(), run)
		}
		for _, task := range d.GetTasks() {
			if task.GetAttempt() != run {
				t.Errorf("after crash %d: task %s/%d attempt = %d, want %d", run, task.GetOperator(), task.GetSubtask(), task.GetAttempt(), run)
			}
		}
	}
	if err := cl.Cancel(ctx, id); err != nil {
		t.Fatalf("Cancel(%s) = %v", id, err)
	}
	if last := watchEnd(t, ctx, cl, id); last.GetStatus() != pb.JobStatus_JOB_STATUS_CANCELED {
		t.Errorf("recovered job ended %v (%s), want CANCELED", last.GetStatus(), last.GetFailureCause())
	}
}

func TestInvalidSpecRejected(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, cl := miniclustertest.StartT(t, minicluster.Options{})

	for _, tc := range []struct {
		name string
		spec string
		want []string // in the status message
	}{
		{
			name: "unknown operator type",
			spec: `name: bad
parallelism: 1
operators:
  - {name: numbers, type: sequence, from: 1, to: 10}
  - {name: squares, type: mapp, fields: {v: "value * value"}}
  - {name: out, type: discard}
`,
			want: []string{"line 5", `"squares"`, `"mapp"`, `did you mean "map"`},
		},
		{
			name: "expression typo",
			spec: `name: bad
operators:
  - {name: numbers, type: sequence, from: 1, to: 10}
  - {name: evens, type: filter, condition: "valeu % 2 == 0"}
  - {name: out, type: discard}
`,
			want: []string{"line 4", `"evens"`, "valeu"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(tc.spec), SpecName: "bad.yaml"})
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("Submit(%s) = %q, %v (code %v), want code %v", tc.name, id, err, status.Code(err), codes.InvalidArgument)
			}
			msg := status.Convert(err).Message()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("Submit(%s) message %q does not contain %q", tc.name, msg, w)
				}
			}
			jobs, err := cl.List(ctx)
			if err != nil {
				t.Fatalf("List() = %v", err)
			}
			if len(jobs) != 0 {
				t.Errorf("List() after a rejected spec = %v, want no jobs", jobs)
			}
		})
	}
}

// TestJobWaitsForTaskManagers submits jobs that need one slot more than the cluster has: each
// waits (slot.request.timeout) RUNNING with its tasks SCHEDULED until a new TaskManager
// registers, then runs on all of them.
// Deploying to a TaskManager right after it registered is racy, so this runs several rounds.
func TestJobWaitsForTaskManagers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 1, Slots: 1})

	for round := 1; round <= 20; round++ {
		par := len(c.TMs) + 1
		spec := fmt.Sprintf("name: wait-%d\nparallelism: %d\noperators:\n"+
			"  - {name: numbers, type: sequence, from: 1, rate: 100}\n  - {name: out, type: discard}\n", round, par)
		id := submit(t, ctx, cl, spec)
		// While it waits, the job is RUNNING with every task listed SCHEDULED (as in Flink),
		// not RUNNING without tasks.
		poll.Until(t, 10*time.Second, "the job RUNNING with its tasks SCHEDULED", func() error {
			d, err := cl.Job(ctx, id)
			if err != nil {
				return err
			}
			if d.GetStatus() != pb.JobStatus_JOB_STATUS_RUNNING || len(d.GetTasks()) != par {
				return fmt.Errorf("job is %v with %d tasks, want RUNNING with %d", d.GetStatus(), len(d.GetTasks()), par)
			}
			for _, task := range d.GetTasks() {
				if task.GetStatus() != pb.ExecutionState_EXECUTION_STATE_SCHEDULED || task.GetTaskmanager() != "" {
					t.Fatalf("round %d: job needing %d slots of %d has task %s/%d %v on %q, want SCHEDULED on none",
						round, par, len(c.TMs), task.GetOperator(), task.GetSubtask(), task.GetStatus(), task.GetTaskmanager())
				}
			}
			return nil
		})
		if _, err := c.AddTaskManager(); err != nil {
			t.Fatalf("round %d: AddTaskManager() = %v", round, err)
		}
		d := waitRunning(t, ctx, cl, id, par)
		tms := map[string]bool{}
		for _, task := range d.GetTasks() {
			tms[task.GetTaskmanager()] = true
		}
		if len(tms) != par {
			t.Errorf("round %d: %d tasks ran on %d TaskManagers, want %d (one slot each)", round, par, len(tms), par)
		}
		if err := cl.Cancel(ctx, id); err != nil {
			t.Fatalf("round %d: Cancel(%s) = %v", round, id, err)
		}
		if last := watchEnd(t, ctx, cl, id); last.GetStatus() != pb.JobStatus_JOB_STATUS_CANCELED {
			t.Fatalf("round %d: job ended %v (%s), want CANCELED", round, last.GetStatus(), last.GetFailureCause())
		}
	}
}

package systemtest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goflink/goflink/internal/proccluster"
)

// TestKeyedJobAcrossTwoTaskManagers runs a keyed running sum with parallelism 4 over two
// TaskManager processes and checks every update and the exact final sum of every key.
func TestKeyedJobAcrossTwoTaskManagers(t *testing.T) {
	skipShort(t)
	c := startCluster(t, 2, 2)
	const n, keys = 200_000, 7
	out := filepath.Join(t.TempDir(), "out")
	spec := writeSpec(t, fmt.Sprintf(`name: keyed-sum
parallelism: 4
operators:
  - {name: numbers, type: sequence, from: 1, to: %d}
  - {name: keyed, type: map, fields: {key: "value %% %d", value: "value"}}
  - {name: by-key, type: key-by, key: key}
  - {name: total, type: sum, field: value}
  - {name: out, type: file, path: %s}
`, n, keys, out))
	stdout, stderr, code := c.flinkctl("run", spec)
	if code != 0 {
		t.Fatalf("flinkctl run exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	id := ""
	for _, f := range strings.Fields(stdout) {
		if len(f) == 32 {
			id = f
			break
		}
	}
	if !strings.Contains(stdout, "FINISHED") || id == "" {
		t.Fatalf("flinkctl run output lacks FINISHED or a job ID:\n%s", stdout)
	}

	want := make([]int64, keys)
	for v := int64(1); v <= n; v++ {
		want[v%keys] += v
	}
	got := make([]int64, keys)
	updates := make([]int, keys)
	lines := 0
	readRows(t, out, func(_ string, r struct{ Key, Value int64 }) {
		if r.Value <= got[r.Key] && updates[r.Key] > 0 {
			t.Fatalf("key %d: running sum went from %d to %d", r.Key, got[r.Key], r.Value)
		}
		got[r.Key] = r.Value
		updates[r.Key]++
		lines++
	})
	if lines != n {
		t.Errorf("sink wrote %d records, want %d (one update per input)", lines, n)
	}
	for k := range keys {
		if got[k] != want[k] {
			t.Errorf("final sum of key %d = %d, want %d", k, got[k], want[k])
		}
		if updates[k] != n/keys+map[bool]int{true: 1, false: 0}[k >= 1 && k <= n%keys] {
			t.Errorf("key %d has %d updates", k, updates[k])
		}
	}

	var list []struct{ ID, Status string }
	if err := c.FlinkctlJSON(context.Background(), &list, "list"); err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != id || list[0].Status != "FINISHED" {
		t.Errorf("flinkctl list -o json = %+v, want the job %s FINISHED", list, id)
	}
	var st proccluster.JobStatus
	if err := c.FlinkctlJSON(context.Background(), &st, "status", id); err != nil {
		t.Fatal(err)
	}
	perTM := map[string]int{}
	for _, task := range st.Tasks {
		perTM[task.TaskManager]++
		if task.Status != "FINISHED" {
			t.Errorf("task %s/%d is %s", task.Operator, task.Subtask, task.Status)
		}
	}
	if len(perTM) != 2 {
		t.Errorf("tasks ran on %v, want both TaskManagers", perTM)
	}
}

// TestTaskManagerKilledFailsJob kills a TaskManager with SIGKILL while a job runs on it: the
// job must end FAILED with a cause naming that TaskManager.
func TestTaskManagerKilledFailsJob(t *testing.T) {
	skipShort(t)
	c := startCluster(t, 2, 2)
	spec := writeSpec(t, `name: endless
parallelism: 4
operators:
  - {name: numbers, type: sequence, from: 0, rate: 20000}
  - {name: by-key, type: key-by, key: "value % 10"}
  - {name: total, type: sum, field: value}
  - {name: sink, type: discard}
`)
	id := c.submit(spec)
	c.waitStatus(id, 30*time.Second, "all 8 tasks to run", func(st *proccluster.JobStatus) error {
		if len(st.Tasks) != 8 {
			return fmt.Errorf("%d tasks", len(st.Tasks))
		}
		for _, task := range st.Tasks {
			if task.Status != "RUNNING" {
				return fmt.Errorf("task %s/%d is %s", task.Operator, task.Subtask, task.Status)
			}
		}
		return nil
	})
	killed := time.Now()
	c.TMs[1].Kill()
	st := c.waitStatus(id, 30*time.Second, "the job to fail", func(st *proccluster.JobStatus) error {
		if st.Status != "FAILED" {
			return fmt.Errorf("job is %s", st.Status)
		}
		return nil
	})
	t.Logf("job FAILED %v after SIGKILL of tm-1: %s", time.Since(killed).Round(time.Millisecond), st.FailureCause)
	if !strings.Contains(st.FailureCause, "TaskManager tm-1 ") || !strings.Contains(st.FailureCause, "lost") {
		t.Errorf("failure cause %q does not name the lost TaskManager tm-1", st.FailureCause)
	}
	named := false
	for _, e := range st.Exceptions {
		named = named || (e.TaskManager == "tm-1" && strings.Contains(e.Cause, "tm-1"))
	}
	if !named {
		t.Errorf("exception history %+v has no entry for tm-1", st.Exceptions)
	}
}

// TestBadInputIsRejectedAtSubmit submits broken specs through flinkctl: each fails with a
// message naming the problem, and nothing is scheduled.
func TestBadInputIsRejectedAtSubmit(t *testing.T) {
	skipShort(t)
	c := startCluster(t, 1, 1)
	head := "name: bad\noperators:\n  - {name: numbers, type: sequence, from: 1, to: 10}\n"
	for _, tc := range []struct {
		name, spec string
		args       []string
		want       string
	}{
		{"unknown operator", head + "  - {name: m, type: mapp, fields: {a: value}}\n  - {name: o, type: print}\n", nil,
			`line 4: operators[1] "m".type: unknown operator type "mapp"; did you mean "map"?`},
		{"missing input", head + "  - {name: o, type: print, inputs: [numbrs]}\n", nil,
			`line 4: operators[1] "o".inputs: missing input: no operator "numbrs"; did you mean "numbers"?`},
		{"type error", head + "  - {name: m, type: filter, condition: \"value + 1\"}\n  - {name: o, type: print}\n", nil,
			`line 4: operators[1] "m".condition: expression "value + 1": result is int64, want bool`},
		{"unknown config key in spec", "config: {heartbeat.intervall: 1s}\n" + head + "  - {name: o, type: print}\n", nil,
			`line 1: config: unknown config key "heartbeat.intervall"; did you mean "heartbeat.interval"?`},
		{"unknown config key in -D", head + "  - {name: o, type: print}\n", []string{"-D", "parallelism.defualt=2"},
			`-D parallelism.defualt: unknown config key "parallelism.defualt"; did you mean "parallelism.default"?`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"run", "-d", writeSpec(t, tc.spec)}, tc.args...)
			_, stderr, code := c.flinkctl(args...)
			if code != 1 || !strings.Contains(stderr, tc.want) {
				t.Errorf("flinkctl run: exit %d, stderr:\n%s\nwant exit 1 and:\n%s", code, stderr, tc.want)
			}
		})
	}
	var list []struct{ ID string }
	if err := c.FlinkctlJSON(context.Background(), &list, "list"); err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Errorf("rejected specs created jobs: %+v", list)
	}
	if _, stderr, code := c.flinkctl("status"); code != 2 || !strings.Contains(stderr, "want a job ID") {
		t.Errorf("flinkctl status without ID: exit %d, %s; want usage exit 2", code, stderr)
	}
}

// TestMissingSlotsFailAfterTimeout submits a job needing more slots than the cluster has.
func TestMissingSlotsFailAfterTimeout(t *testing.T) {
	skipShort(t)
	c := startCluster(t, 1, 2)
	spec := writeSpec(t, "name: too-wide\nparallelism: 3\noperators:\n  - {name: n, type: sequence, from: 1, to: 10}\n  - {name: o, type: discard}\n")
	stdout, _, code := c.flinkctl("run", spec, "-D", "slot.request.timeout=1s")
	if code != 1 || !strings.Contains(stdout, "FAILED") || !strings.Contains(stdout, "the job needs 3, the cluster has 2 free of 2") {
		t.Errorf("flinkctl run: exit %d, output:\n%s\nwant FAILED naming the missing slots", code, stdout)
	}
}

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const (
	okSpec = `name: keyed-count
parallelism: 2
operators:
  - {name: numbers, type: sequence, from: 1, to: 100}
  - {name: by-mod, type: key-by, key: "value % 3"}
  - {name: counts, type: count}
  - {name: out, type: discard}
`
	failSpec = `name: doomed
parallelism: 1
operators:
  - {name: numbers, type: sequence, from: 1, to: 100}
  - {name: boom, type: fail, when: "value == 7"}
  - {name: out, type: discard}
`
	badSpec = `name: broken
operators:
  - {name: numbers, type: sequence, from: 1, to: 10}
  - {name: squares, type: mapp, fields: {v: "value * value"}}
  - {name: out, type: discard}
`
)

// writeSpec writes a spec into the test's temporary directory and returns its path.
func writeSpec(t *testing.T, name, spec string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// execute runs flinkctl with args and returns its exit code, stdout and stderr.
func execute(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := Execute(ctx, args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// decodeObject decodes a JSON object, failing the test if the output is anything else.
func decodeObject(t *testing.T, out string) map[string]any {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out)
	}
	if dec.More() {
		t.Fatalf("output has more than one JSON value:\n%s", out)
	}
	return m
}

// requireKeys checks that every key is present in m (null counts as present).
func requireKeys(t *testing.T, what string, m map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("%s has no key %q: %v", what, k, m)
		}
	}
}

func TestRunLocalJSON(t *testing.T) {
	spec := writeSpec(t, "count.yaml", okSpec)
	code, stdout, stderr := execute(t, "run", "--local", "-o", "json", spec)
	if code != ExitOK {
		t.Fatalf("run --local -o json %s = exit %d, want %d; stderr:\n%s", spec, code, ExitOK, stderr)
	}
	m := decodeObject(t, stdout)
	requireKeys(t, "status JSON", m, "id", "name", "status", "restarts", "tasks", "exceptions", "last_checkpoint")

	if id, _ := m["id"].(string); !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(id) {
		t.Errorf("id = %v, want 32 hex digits", m["id"])
	}
	for key, want := range map[string]any{"name": "keyed-count", "status": "FINISHED", "restarts": 0.0} {
		if m[key] != want {
			t.Errorf("%s = %v, want %v", key, m[key], want)
		}
	}
	// A finished job has both times, and the run took no negative time.
	var times []time.Time
	for _, key := range []string{"start_time", "end_time"} {
		s, _ := m[key].(string)
		if tm, err := time.Parse(time.RFC3339Nano, s); err != nil {
			t.Errorf("%s = %v, want an RFC 3339 time", key, m[key])
		} else {
			times = append(times, tm)
		}
	}
	if len(times) == 2 && times[1].Before(times[0]) {
		t.Errorf("end_time %v is before start_time %v", times[1], times[0])
	}
	if ex, ok := m["exceptions"].([]any); !ok || len(ex) != 0 {
		t.Errorf("exceptions = %v, want an empty list", m["exceptions"])
	}

	tasks, ok := m["tasks"].([]any)
	if !ok {
		t.Fatalf("tasks = %v, want a list", m["tasks"])
	}
	// numbers (2 subtasks) -> hash -> counts -> out (chained, 2 subtasks).
	if len(tasks) != 4 {
		t.Fatalf("tasks has %d entries, want 4: %v", len(tasks), tasks)
	}
	subtasks := map[string][]float64{}
	for i, raw := range tasks {
		task, ok := raw.(map[string]any)
		if !ok {
			t.Fatalf("tasks[%d] = %v, want an object", i, raw)
		}
		requireKeys(t, "task", task, "operator", "subtask", "attempt", "status", "taskmanager")
		if task["status"] != "FINISHED" || task["attempt"] != 0.0 {
			t.Errorf("tasks[%d] status, attempt = %v, %v, want FINISHED, 0", i, task["status"], task["attempt"])
		}
		if tm, _ := task["taskmanager"].(string); tm == "" {
			t.Errorf("tasks[%d] taskmanager = %v, want a TaskManager ID", i, task["taskmanager"])
		}
		op, _ := task["operator"].(string)
		sub, _ := task["subtask"].(float64)
		subtasks[op] = append(subtasks[op], sub)
	}
	for _, op := range []string{"numbers", "counts -> out"} {
		if got := subtasks[op]; len(got) != 2 || got[0]+got[1] != 1 {
			t.Errorf("subtasks of %q = %v, want 0 and 1", op, got)
		}
	}
}

func TestRunLocalTable(t *testing.T) {
	spec := writeSpec(t, "count.yaml", okSpec)
	code, stdout, stderr := execute(t, "run", "--local", spec)
	if code != ExitOK {
		t.Fatalf("run --local %s = exit %d, want %d; stderr:\n%s", spec, code, ExitOK, stderr)
	}
	for _, want := range []string{"Job has been submitted with JobID ", " FINISHED after "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("run --local output does not contain %q:\n%s", want, stdout)
		}
	}
}

// run --local knows the connectors' types as a JobManager does: a nexmark job runs.
func TestRunLocalConnectorType(t *testing.T) {
	spec := writeSpec(t, "nexmark.yaml", `name: nexmark
parallelism: 2
operators:
  - {name: events, type: nexmark, events: 1000}
  - {name: out, type: discard}
`)
	code, stdout, stderr := execute(t, "run", "--local", spec)
	if code != ExitOK || !strings.Contains(stdout, " FINISHED after ") {
		t.Fatalf("run --local %s = exit %d, want %d and FINISHED; stdout:\n%s\nstderr:\n%s", spec, code, ExitOK, stdout, stderr)
	}
}

func TestRunLocalFailingJob(t *testing.T) {
	spec := writeSpec(t, "doomed.yaml", failSpec)
	code, stdout, stderr := execute(t, "run", "--local", "-o", "json", spec)
	if code != ExitFailure {
		t.Fatalf("run --local -o json %s = exit %d, want %d; stderr:\n%s", spec, code, ExitFailure, stderr)
	}
	m := decodeObject(t, stdout)
	if m["status"] != "FAILED" {
		t.Errorf("status = %v, want FAILED", m["status"])
	}
	if cause, _ := m["failure_cause"].(string); !strings.Contains(cause, "injected failure") {
		t.Errorf("failure_cause = %q, want it to contain %q", cause, "injected failure")
	}
	ex, _ := m["exceptions"].([]any)
	if len(ex) == 0 {
		t.Fatalf("exceptions = %v, want the task failure", m["exceptions"])
	}
	first, _ := ex[0].(map[string]any)
	requireKeys(t, "exception", first, exceptionKeys...)
	if _, ok := first["restarted_tasks"].([]any); !ok {
		t.Errorf("exceptions[0].restarted_tasks = %#v, want a list", first["restarted_tasks"])
	}
	if task, _ := first["task"].(string); !strings.Contains(task, "boom") {
		t.Errorf("exceptions[0].task = %q, want the task of operator boom", task)
	}
}

func TestExitCodes(t *testing.T) {
	spec := writeSpec(t, "count.yaml", okSpec)
	bad := writeSpec(t, "broken.yaml", badSpec)
	missing := filepath.Join(t.TempDir(), "no-such-job.yaml")
	for _, tc := range []struct {
		name   string
		args   []string
		want   int
		stderr string // in stderr
	}{
		{"unknown flag", []string{"run", "--bogus", spec}, ExitUsage, "unknown flag: --bogus"},
		{"unknown shorthand flag", []string{"list", "-z"}, ExitUsage, "-z"},
		{"unknown command", []string{"nope"}, ExitUsage, "nope"},
		{"status without a job id", []string{"status"}, ExitUsage, "a job ID"},
		{"status with two job ids", []string{"status", "a", "b"}, ExitUsage, "a job ID"},
		{"cancel without a job id", []string{"cancel"}, ExitUsage, "a job ID"},
		{"run without a file", []string{"run"}, ExitUsage, "a job spec file"},
		{"checkpoints without a job id", []string{"checkpoints"}, ExitUsage, "a job ID"},
		{"checkpoint with two job ids", []string{"checkpoint", "a", "b"}, ExitUsage, "a job ID"},
		{"checkpoint with a zero timeout", []string{"checkpoint", "--timeout", "0s", "a"}, ExitUsage, "--timeout must be positive"},
		{"checkpoint with a bad timeout", []string{"checkpoint", "--timeout", "soon", "a"}, ExitUsage, "soon"},
		{"bad output format on checkpoints", []string{"checkpoints", "-o", "yaml", "a"}, ExitUsage, `"yaml"`},
		{"bad output format", []string{"list", "-o", "yaml"}, ExitUsage, `"yaml"`},
		{"bad output format on run", []string{"run", "--local", "-o", "xml", spec}, ExitUsage, `"xml"`},
		{"negative parallelism", []string{"run", "--local", "-p", "-1", spec}, ExitUsage, "parallelism"},
		{"zero parallelism", []string{"run", "--local", "-p", "0", spec}, ExitUsage, "--parallelism must be at least 1, got 0"},
		{"zero parallelism on a cluster", []string{"run", "-m", "127.0.0.1:1", "--parallelism=0", spec}, ExitUsage, "--parallelism must be at least 1, got 0"},
		// Checked before it travels as an int32 (security review F7: 4294967297 arrived as 1).
		{"parallelism above int32", []string{"run", "-m", "127.0.0.1:1", "-p", "4294967297", spec}, ExitUsage,
			"--parallelism must be at most 32768 (Flink's upper bound of the max parallelism), got 4294967297"},
		{"parallelism above the bound", []string{"run", "--local", "-p", "32769", spec}, ExitUsage, "--parallelism must be at most 32768"},
		{"parallelism beyond int", []string{"run", "-m", "127.0.0.1:1", "-p", "99999999999999999999", spec}, ExitUsage, "value out of range"},
		{"rescale to a parallelism above int32", []string{"-m", "127.0.0.1:1", "rescale", "j1", "-p", "4294967298"}, ExitUsage,
			"--parallelism must be at most 32768 (Flink's upper bound of the max parallelism), got 4294967298"},
		{"rescale to zero", []string{"-m", "127.0.0.1:1", "rescale", "j1", "-p", "0"}, ExitUsage, "--parallelism must be at least 1, got 0"},
		{"too many local taskmanagers", []string{"run", "--local", "--taskmanagers", "1000000000", spec}, ExitUsage,
			"--taskmanagers must be between 1 and 64, got 1000000000"},
		{"too many local slots", []string{"run", "--local", "--slots", "4294967297", spec}, ExitUsage, "--slots must be between 1 and 1024, got 4294967297"},
		{"no command", nil, ExitUsage, "Usage:"},
		{"malformed port", []string{"-m", "localhost:6123x", "list"}, ExitUsage, `-m/--jobmanager: jobmanager address "localhost:6123x": port "6123x": want a number from 1 to 65535`},
		{"malformed address in a list", []string{"-m", "127.0.0.1:6123,a:b:c", "status", "j1"}, ExitUsage, `jobmanager address "a:b:c": want host:port`},
		{"malformed address on run", []string{"-m", "http://jm:6123", "run", spec}, ExitUsage, `jobmanager address "http://jm:6123"`},
		{"malformed address on checkpoint", []string{"-m", "jm:0", "checkpoint", "j1"}, ExitUsage, `port "0"`},
		{"too few local slots", []string{"run", "--local", "--taskmanagers", "1", "--slots", "1", spec}, ExitUsage,
			`the local cluster would have 1 slot (--taskmanagers 1 × --slots 1), but job "keyed-count" needs 2 (operator "numbers" runs 2 subtasks): use --slots 2, or leave --slots out`},
		{"zero local slots", []string{"run", "--local", "--slots", "0", spec}, ExitUsage, "--slots must be between 1 and 1024, got 0"},
		{"define without a value", []string{"run", "--local", "-D", "nokey", spec}, ExitUsage, "key=value"},
		{"no taskmanagers", []string{"run", "--local", "--taskmanagers", "0", spec}, ExitUsage, "taskmanagers"},
		{"missing spec file", []string{"run", "--local", missing}, ExitFailure, "no-such-job.yaml"},
		{"invalid spec", []string{"run", "--local", bad}, ExitFailure, "line 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := execute(t, tc.args...)
			if code != tc.want {
				t.Errorf("Execute(%q) = exit %d, want %d; stdout:\n%s\nstderr:\n%s", tc.args, code, tc.want, stdout, stderr)
			}
			if !strings.Contains(stderr, tc.stderr) {
				t.Errorf("Execute(%q) stderr = %q, want it to contain %q", tc.args, stderr, tc.stderr)
			}
		})
	}
}

// FLINKCTL_JOBMANAGER is checked like -m, and named when it is malformed; a host without a
// port gets 6123.
func TestJobManagerFromEnv(t *testing.T) {
	t.Setenv("FLINKCTL_JOBMANAGER", "localhost:6123x")
	code, _, stderr := execute(t, "list")
	if want := `flinkctl: FLINKCTL_JOBMANAGER: jobmanager address "localhost:6123x": port "6123x": want a number from 1 to 65535` + "\n"; code != ExitUsage || stderr != want {
		t.Errorf("list with a malformed FLINKCTL_JOBMANAGER = exit %d, stderr %q; want exit %d and %q", code, stderr, ExitUsage, want)
	}
	// -m overrides it.
	addr := serve(t, newFake())
	if code, _, stderr := execute(t, "-m", addr, "checkpoints", "j1"); code != ExitOK {
		t.Errorf("checkpoints with -m and a malformed FLINKCTL_JOBMANAGER = exit %d, stderr %q; want exit 0", code, stderr)
	}
	g := &globals{jobmanager: "127.0.0.1"}
	if list, err := g.addrs(); err != nil || len(list) != 1 || list[0] != "127.0.0.1:6123" {
		t.Errorf("addrs of -m 127.0.0.1 = %q, %v; want 127.0.0.1:6123", list, err)
	}
}

const printSpec = `name: printed
parallelism: 1
operators:
  - {name: numbers, type: sequence, from: 1, to: 5}
  - {name: doubled, type: map, fields: {v: "value * 2"}}
  - {name: show, type: print}
`

// With -o json, stdout holds only the JSON: the print sink's lines go to stderr, and "->" in
// task names is not escaped.
func TestRunLocalJSONWithPrintSink(t *testing.T) {
	code, stdout, stderr := execute(t, "run", "--local", "-o", "json", writeSpec(t, "printed.yaml", printSpec))
	if code != ExitOK {
		t.Fatalf("run --local -o json = exit %d; stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	m := decodeObject(t, stdout)
	if m["status"] != "FINISHED" {
		t.Errorf("status = %v, want FINISHED", m["status"])
	}
	if !strings.Contains(stdout, `"numbers -> doubled -> show"`) || strings.Contains(stdout, `\u003e`) {
		t.Errorf("stdout does not name the task \"numbers -> doubled -> show\" unescaped:\n%s", stdout)
	}
	for i := 1; i <= 5; i++ {
		if want := fmt.Sprintf(`{"v":%d}`, 2*i); !strings.Contains(stderr, want) {
			t.Errorf("stderr has no printed record %s:\n%s", want, stderr)
		}
	}
}

// run --local without -v shows no warnings of the embedded cluster (the failure is in run's
// own output); with -v it logs at INFO.
func TestRunLocalLogLevel(t *testing.T) {
	spec := writeSpec(t, "doomed.yaml", failSpec)
	code, stdout, stderr := execute(t, "run", "--local", spec)
	if code != ExitFailure || !strings.Contains(stdout, "injected failure") {
		t.Fatalf("run --local doomed = exit %d, stdout:\n%s\nwant exit 1 and the failure", code, stdout)
	}
	if strings.Contains(stderr, "level=WARN") || strings.Contains(stderr, "level=INFO") {
		t.Errorf("run --local without -v logged below ERROR:\n%s", stderr)
	}
	code, _, stderr = execute(t, "run", "--local", "-v", spec)
	if code != ExitFailure || !strings.Contains(stderr, "level=WARN") || !strings.Contains(stderr, "level=INFO") {
		t.Errorf("run --local -v = exit %d, stderr:\n%s\nwant the cluster's INFO and WARN logs", code, stderr)
	}
}

// run --local confines the job's paths like any cluster (the working directory by default),
// and takes -D io.allowed-paths for its embedded cluster: the process key no job may set.
func TestRunLocalAllowedPaths(t *testing.T) {
	dir := t.TempDir() // not under the working directory
	out := filepath.Join(dir, "out")
	spec := writeSpec(t, "file.yaml", fmt.Sprintf("name: to-file\noperators:\n  - {name: numbers, type: sequence, from: 1, to: 5}\n  - {name: out, type: file, path: %s}\n", out))
	code, _, stderr := execute(t, "run", "--local", spec)
	if code != ExitFailure || !strings.Contains(stderr, "path not allowed") || !strings.Contains(stderr, `operator "out" (line 4), field path`) {
		t.Errorf("run --local (sink outside the working directory) = exit %d, stderr:\n%s\nwant exit %d and the path refused", code, stderr, ExitFailure)
	}
	code, stdout, stderr := execute(t, "run", "--local", "-D", "io.allowed-paths="+dir, spec)
	if code != ExitOK {
		t.Fatalf("run --local -D io.allowed-paths=%s = exit %d; stdout:\n%s\nstderr:\n%s", dir, code, stdout, stderr)
	}
	if files, err := filepath.Glob(filepath.Join(out, "part-*")); err != nil || len(files) == 0 {
		t.Errorf("committed files in %s: %v, %v; want the job's output", out, files, err)
	}
	if code, _, stderr := execute(t, "run", "--local", "-D", "io.allowed-paths=/a;;/b", spec); code != ExitUsage || !strings.Contains(stderr, "io.allowed-paths") {
		t.Errorf("run --local -D io.allowed-paths=/a;;/b = exit %d, stderr:\n%s\nwant a usage error naming the key", code, stderr)
	}
}

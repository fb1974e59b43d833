package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goflink/goflink/client/clienttest"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/storage"
)

// countSpec is a keyed count with per-key sequence numbers: 1..n at rate records per second,
// keyed by value % keys, each record's running count per key into a two-phase-commit file
// sink. Its exactly-once oracle is checkCounts.
func countSpec(n, rate, keys int, out, config string) string {
	return fmt.Sprintf(`name: keyed-count
config:
  execution.checkpointing.interval: 100ms
%s
operators:
  - {name: numbers, type: sequence, from: 1, to: %d, rate: %d}
  - {name: keyed, type: map, fields: {key: "value %% %d", value: "value"}}
  - {name: by-key, type: key-by, key: "key"}
  - {name: counts, type: count}
  - {name: out, type: file, path: %q}
`, config, n, rate, keys, out)
}

type countRow struct {
	Key, Value, Count int64
}

// checkCounts checks the committed output of countSpec's jobs against a failure-free run:
// every value 1..n exactly once, and per key the counts 1..(its values) each exactly once.
func checkCounts(t *testing.T, out string, n, keys int) {
	t.Helper()
	rows := committedRows[countRow](t, out)
	values := map[int64]int{}
	counts := map[int64]map[int64]int{}
	for _, r := range rows {
		values[r.Value]++
		if counts[r.Key] == nil {
			counts[r.Key] = map[int64]int{}
		}
		counts[r.Key][r.Count]++
		if r.Key != r.Value%int64(keys) {
			t.Errorf("row %+v: key is not value %% %d", r, keys)
		}
	}
	bad := 0
	for v := int64(1); v <= int64(n); v++ {
		if values[v] != 1 && bad < 10 {
			t.Errorf("value %d committed %d times, want once", v, values[v])
			bad++
		}
	}
	for k := range int64(keys) {
		per := int64(0)
		for v := int64(1); v <= int64(n); v++ {
			if v%int64(keys) == k {
				per++
			}
		}
		for c := int64(1); c <= per; c++ {
			if counts[k][c] != 1 && bad < 20 {
				t.Errorf("key %d: count %d committed %d times, want once", k, c, counts[k][c])
				bad++
			}
		}
	}
	if len(rows) != n {
		t.Errorf("%d rows committed, want %d", len(rows), n)
	}
}

// waitCommitted waits until the file sink at out committed at least n rows.
func waitCommitted(t *testing.T, out string, n int) {
	t.Helper()
	poll.Until(t, 60*time.Second, fmt.Sprintf("%d committed rows in %s", n, out), func() error {
		if got := len(committedRows[countRow](t, out)); got < n {
			return fmt.Errorf("%d rows", got)
		}
		return nil
	})
}

// TestSavepointStopResumeRescale runs one keyed count through every way a job's state moves:
// a savepoint while it runs, stop-with-savepoint, a resume at another parallelism into the
// other state backend, and rescales down and up in place. The committed output of all of it
// equals a failure-free run.
func TestSavepointStopResumeRescale(t *testing.T) {
	for _, backends := range [][2]string{{"hashmap", "bbolt"}, {"bbolt", "hashmap"}} {
		t.Run(backends[0]+"-to-"+backends[1], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 2, Slots: 2})
			dir := t.TempDir()
			out, spDir := filepath.Join(dir, "out"), filepath.Join(dir, "savepoints")
			const n, keys = 6000, 7
			cfg := fmt.Sprintf("  execution.checkpointing.dir: %s\n  state.backend.type: %s", filepath.Join(dir, "checkpoints"), backends[0])
			id, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(countSpec(n, 1500, keys, out, cfg)), Parallelism: 2})
			if err != nil {
				t.Fatal(err)
			}
			waitCommitted(t, out, 300)

			// A savepoint while it runs: listed, self-contained, the job goes on.
			sp, err := cl.TriggerSavepoint(ctx, &pb.TriggerSavepointRequest{JobId: id, TargetDirectory: spDir})
			if err != nil {
				t.Fatalf("TriggerSavepoint = %v", err)
			}
			if _, err := storage.OpenSnapshot(sp.GetSavepointPath()); err != nil {
				t.Fatalf("savepoint %s does not verify: %v", sp.GetSavepointPath(), err)
			}
			cps, err := cl.Checkpoints(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(cps, func(c *pb.CheckpointInfo) bool { return c.GetSavepoint() && c.GetPath() == sp.GetSavepointPath() }) {
				t.Errorf("flinkctl checkpoints does not list savepoint %s", sp.GetSavepointPath())
			}

			// Stop with a savepoint: FINISHED, with its output committed.
			stop, err := cl.TriggerSavepoint(ctx, &pb.TriggerSavepointRequest{JobId: id, TargetDirectory: spDir, Stop: true})
			if err != nil {
				t.Fatalf("stop with savepoint = %v", err)
			}
			// The stop returns once the job ended: its details say FINISHED, every task's too.
			d, err := cl.Job(ctx, id)
			if err != nil || d.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
				t.Fatalf("job after stop is %v (%v), want FINISHED", d.GetStatus(), err)
			}
			for _, task := range d.GetTasks() {
				if task.GetStatus() != pb.ExecutionState_EXECUTION_STATE_FINISHED {
					t.Fatalf("task %v after stop is %v, want FINISHED", task, task.GetStatus())
				}
			}
			stopped := len(committedRows[countRow](t, out))
			if stopped >= n {
				t.Fatalf("the job finished its input (%d rows) before the stop; slow it down", stopped)
			}

			// Moved elsewhere, it still restores: resume at p=3 into the other backend.
			moved := filepath.Join(dir, "moved", filepath.Base(stop.GetSavepointPath()))
			if err := os.MkdirAll(filepath.Dir(moved), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(stop.GetSavepointPath(), moved); err != nil {
				t.Fatal(err)
			}
			cfg2 := fmt.Sprintf("  execution.checkpointing.dir: %s\n  state.backend.type: %s", filepath.Join(dir, "checkpoints"), backends[1])
			id2, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(countSpec(n, 1500, keys, out, cfg2)), Parallelism: 3, RestorePath: moved})
			if err != nil {
				t.Fatalf("resume from %s = %v", moved, err)
			}
			clienttest.WaitRunningAt(t, ctx, cl, id2, 3)
			waitCommitted(t, out, stopped+300)

			for _, p := range []int32{1, 4} {
				if _, err := cl.Rescale(ctx, id2, int(p)); err != nil {
					t.Fatalf("rescale to %d = %v", p, err)
				}
				clienttest.WaitRunningAt(t, ctx, cl, id2, p)
				if p == 1 {
					waitCommitted(t, out, len(committedRows[countRow](t, out))+200)
				}
			}
			watchFinished(t, ctx, cl, id2, -1)
			checkCounts(t, out, n, keys)
			if _, err := os.Stat(filepath.Join(moved, storage.MetadataFile)); err != nil {
				t.Errorf("no-claim resume deleted the savepoint: %v", err)
			}
		})
	}
}

// TestRestoreRefusals checks the bad inputs of a resume: each a clear error at submit, and
// nothing recorded.
func TestRestoreRefusals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 1, Slots: 2})
	dir := t.TempDir()
	out, spDir := filepath.Join(dir, "out"), filepath.Join(dir, "savepoints")
	cfg := "  execution.checkpointing.dir: " + filepath.Join(dir, "checkpoints")
	spec := countSpec(1_000_000, 500, 5, out, cfg)
	id, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(spec), Parallelism: 2})
	if err != nil {
		t.Fatal(err)
	}
	waitCommitted(t, out, 50)
	sp, err := cl.TriggerSavepoint(ctx, &pb.TriggerSavepointRequest{JobId: id, TargetDirectory: spDir})
	if err != nil {
		t.Fatal(err)
	}
	path := sp.GetSavepointPath()
	// A rescale above the max parallelism is refused, and the job runs on unchanged.
	if _, err := cl.Rescale(ctx, id, 129); err == nil || !strings.Contains(err.Error(), "max parallelism 128") {
		t.Errorf("Rescale(129) = %v, want a refusal naming the max parallelism", err)
	}
	clienttest.WaitRunningAt(t, ctx, cl, id, 2)
	if err := cl.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	watchEnd(t, ctx, cl, id)
	if _, err := cl.Rescale(ctx, id, 3); err == nil || !strings.Contains(err.Error(), "ended") {
		t.Errorf("Rescale of a cancelled job = %v, want a refusal", err)
	}
	if _, err := cl.TriggerSavepoint(ctx, &pb.TriggerSavepointRequest{JobId: id, TargetDirectory: spDir}); err == nil {
		t.Errorf("TriggerSavepoint of a cancelled job = nil error")
	}
	before, _ := cl.List(ctx)

	renamed := strings.Replace(spec, "name: counts,", "name: counted,", 1)
	changedMaxP := strings.Replace(spec, "  execution.checkpointing.interval: 100ms", "  execution.checkpointing.interval: 100ms\n  pipeline.max-parallelism: 64", 1)
	cases := []struct {
		name string
		req  *pb.SubmitJobRequest
		want string
	}{
		{"no such path", &pb.SubmitJobRequest{Spec: []byte(spec), RestorePath: filepath.Join(dir, "nope")}, "does not exist"},
		{"not a snapshot", &pb.SubmitJobRequest{Spec: []byte(spec), RestorePath: dir}, "has no _metadata"},
		{"missing operator", &pb.SubmitJobRequest{Spec: []byte(renamed), RestorePath: path}, `"counts"`},
		{"max parallelism changed", &pb.SubmitJobRequest{Spec: []byte(changedMaxP), RestorePath: path}, "pipeline.max-parallelism changed"},
		{"parallelism above max", &pb.SubmitJobRequest{Spec: []byte(spec), RestorePath: path, Parallelism: 129}, "max parallelism"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := cl.Submit(ctx, c.req)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Submit = %v, want an error containing %q", err, c.want)
			}
		})
	}
	// -n skips the state of the operator that is gone.
	id2, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(renamed), RestorePath: path, AllowNonRestoredState: true, Parallelism: 2})
	if err != nil {
		t.Fatalf("Submit with -n = %v", err)
	}
	clienttest.WaitRunningAt(t, ctx, cl, id2, 2)
	if err := cl.Cancel(ctx, id2); err != nil {
		t.Fatal(err)
	}
	watchEnd(t, ctx, cl, id2)

	// A flipped byte in a state file is refused at submit.
	files, _ := filepath.Glob(filepath.Join(path, "keyed-*"))
	if len(files) == 0 {
		t.Fatalf("savepoint %s has no keyed state files", path)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40
	if err := os.WriteFile(files[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(spec), RestorePath: path}); err == nil || !strings.Contains(err.Error(), "crc32c") {
		t.Fatalf("Submit from a corrupt savepoint = %v, want a checksum error", err)
	}
	after, _ := cl.List(ctx)
	if len(after) != len(before)+1 {
		t.Errorf("%d jobs after the refusals, want %d (only the -n one)", len(after), len(before)+1)
	}
	// Dispose refuses a checkpoint and deletes the savepoint.
	if err := cl.DisposeSavepoint(ctx, dir); err == nil {
		t.Errorf("DisposeSavepoint(%s) succeeded on a directory that is not a savepoint", dir)
	}
	if err := cl.DisposeSavepoint(ctx, path); err != nil {
		t.Fatalf("DisposeSavepoint = %v", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("savepoint %s still exists after dispose: %v", path, err)
	}
}

// TestLeaderKillDuringSavepoint stops the JobManager leader while a savepoint is being taken:
// the savepoint ends cleanly (completed and intact, or reported failed), and the job keeps
// running under the new leader with its output exactly once.
func TestLeaderKillDuringSavepoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, cl := miniclustertest.StartT(t, minicluster.Options{JobManagers: 3, TaskManagers: 2, Slots: 2})
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	const n, keys = 4000, 50
	cfg := fmt.Sprintf("  execution.checkpointing.dir: %s\n  restart-strategy.type: fixed-delay\n  restart-strategy.fixed-delay.attempts: 100\n  restart-strategy.fixed-delay.delay: 10ms",
		filepath.Join(dir, "checkpoints"))
	id, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(countSpec(n, 800, keys, out, cfg)), Parallelism: 2})
	if err != nil {
		t.Fatal(err)
	}
	waitCommitted(t, out, 200)
	old := waitLeader(t, c, 10*time.Second)
	type result struct {
		resp *pb.TriggerSavepointResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := cl.TriggerSavepoint(ctx, &pb.TriggerSavepointRequest{JobId: id, TargetDirectory: filepath.Join(dir, "savepoints")})
		done <- result{resp, err}
	}()
	// The savepoint is triggered once the leader shows it in progress (or it is over).
	poll.Until(t, 10*time.Second, "the savepoint to start", func() error {
		select {
		case r := <-done:
			done <- r
			return nil
		default:
		}
		cps, err := cl.Checkpoints(ctx, id)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(cps, func(c *pb.CheckpointInfo) bool { return c.GetSavepoint() }) {
			return nil
		}
		return fmt.Errorf("no savepoint yet")
	})
	if err := c.StopJobManager(old); err != nil {
		t.Fatalf("stop leader: %v", err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the savepoint neither completed nor failed within 60 s of the leader's loss")
	}
	if r.err == nil {
		if _, err := storage.OpenSnapshot(r.resp.GetSavepointPath()); err != nil {
			t.Errorf("savepoint %s reported completed does not verify: %v", r.resp.GetSavepointPath(), err)
		}
	}
	t.Logf("savepoint across the leader's loss: %v, %v", r.resp.GetSavepointPath(), r.err)
	waitLeader(t, c, 10*time.Second)
	watchFinished(t, ctx, cl, id, -1)
	checkCounts(t, out, n, keys)
	if err := c.StartJobManager(old); err != nil {
		t.Fatalf("restart the old leader: %v", err)
	}
}

// TestStopWithDrainFiresWindows: stop --drain ends event time before the savepoint, so every
// window fires and is committed with it; without --drain the open windows stay in the
// savepoint and fire in the job resumed from it, each exactly once across both jobs.
func TestStopWithDrainFiresWindows(t *testing.T) {
	for _, drain := range []bool{true, false} {
		t.Run(fmt.Sprintf("drain=%v", drain), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 1, Slots: 2})
			dir := t.TempDir()
			out := filepath.Join(dir, "out")
			spec := func(to int) string {
				return fmt.Sprintf(`name: windows
config:
  execution.checkpointing.interval: 100ms
  execution.checkpointing.dir: %s
operators:
  - {name: numbers, type: sequence, from: 0, to: %d, rate: 2000,
     watermark: {timestamp: "value * 10", max-out-of-orderness: 0ms}}
  - {name: keyed, type: map, fields: {key: "value %% 3", value: "value"}}
  - {name: by-key, type: key-by, key: key}
  - {name: win, type: window, size: 1s, aggregates: {n: "count()", total: "sum(value)"}}
  - {name: out, type: file, path: %q}
`, filepath.Join(dir, "checkpoints"), to, out)
			}
			const to = 1_000_000
			id, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(spec(to)), Parallelism: 2})
			if err != nil {
				t.Fatal(err)
			}
			waitAtLeast(t, out, 6)
			stop, err := cl.TriggerSavepoint(ctx, &pb.TriggerSavepointRequest{JobId: id, TargetDirectory: filepath.Join(dir, "sp"), Stop: true, Drain: drain})
			if err != nil {
				t.Fatalf("stop = %v", err)
			}
			type win struct {
				Key         int64
				WindowStart string `json:"window_start"`
				N, Total    int64
			}
			rows := committedRows[win](t, out)
			last := map[int64]string{}
			for _, r := range rows {
				last[r.Key] = max(last[r.Key], r.WindowStart)
			}
			// Sources stopped somewhere in a window: only a drain fires it (partly filled).
			cps, _ := cl.Checkpoints(ctx, id)
			t.Logf("stopped with %s after %d windows (%d checkpoints listed)", stop.GetSavepointPath(), len(rows), len(cps))
			if !drain {
				// Resume with an end: the open windows fire there, each window exactly once overall.
				id2, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(spec(to)), Parallelism: 2, RestorePath: stop.GetSavepointPath()})
				if err != nil {
					t.Fatal(err)
				}
				waitAtLeast(t, out, len(rows)+6)
				if err := cl.Cancel(ctx, id2); err != nil {
					t.Fatal(err)
				}
				watchEnd(t, ctx, cl, id2)
			}
			all := committedRows[win](t, out)
			seen := map[string]int{}
			for _, r := range all {
				k := fmt.Sprintf("%d@%s", r.Key, r.WindowStart)
				seen[k]++
				if seen[k] > 1 {
					t.Errorf("window %s committed twice", k)
				}
			}
			// Every window is complete (100 values of 10 ms each per second, a third per key),
			// except, with a drain, each key's last ones, fired by the maximum watermark: the
			// source subtasks stop at their own positions, so a key's windows after the slower
			// one's position hold part of their records. Partial windows are a suffix of each
			// key's windows; none is followed by a full one.
			byKey := map[int64][]win{}
			for _, r := range all {
				byKey[r.Key] = append(byKey[r.Key], r)
			}
			for k, ws := range byKey {
				slices.SortFunc(ws, func(a, b win) int { return strings.Compare(a.WindowStart, b.WindowStart) })
				partialSeen := false
				for _, r := range ws {
					full := r.N >= 33 && r.N <= 34
					switch {
					case !full && !drain:
						t.Errorf("window %+v has %d records, want a full window", r, r.N)
					case !full:
						partialSeen = true
					case partialSeen:
						t.Errorf("key %d: full window %+v after a partial one: a drain fired a window before its end", k, r)
					}
				}
				if drain && !partialSeen && last[k] != "" {
					t.Logf("key %d: the drain fired no partial window (the stop fell on a window boundary)", k)
				}
			}
			if drain {
				partial := 0
				for _, r := range rows {
					if r.N < 33 {
						partial++
					}
				}
				t.Logf("drain fired %d partial windows", partial)
			}
		})
	}
}

// waitAtLeast waits until the file sink at out committed at least n rows of any shape.
func waitAtLeast(t *testing.T, out string, n int) {
	t.Helper()
	poll.Until(t, 60*time.Second, fmt.Sprintf("%d committed rows in %s", n, out), func() error {
		if got := len(committedRows[map[string]any](t, out)); got < n {
			return fmt.Errorf("%d rows", got)
		}
		return nil
	})
}

// TestRestoreMatrix stops a keyed count with a savepoint and resumes it at another parallelism
// into the other state backend (and the same one at the same parallelism): the committed
// output of both jobs together equals a failure-free run.
func TestRestoreMatrix(t *testing.T) {
	type step struct {
		p       int32
		backend string
	}
	for _, c := range [][2]step{
		{{2, "hashmap"}, {4, "bbolt"}}, {{2, "bbolt"}, {4, "hashmap"}},
		{{4, "hashmap"}, {2, "bbolt"}}, {{4, "bbolt"}, {2, "hashmap"}},
		{{3, "hashmap"}, {3, "bbolt"}}, {{3, "bbolt"}, {3, "hashmap"}},
	} {
		t.Run(fmt.Sprintf("p%d-%s-to-p%d-%s", c[0].p, c[0].backend, c[1].p, c[1].backend), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 2, Slots: 2})
			dir := t.TempDir()
			out := filepath.Join(dir, "out")
			const n, keys = 3000, 11
			cfg := func(backend string) string {
				return fmt.Sprintf("  execution.checkpointing.dir: %s\n  state.backend.type: %s", filepath.Join(dir, "checkpoints"), backend)
			}
			id, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(countSpec(n, 1000, keys, out, cfg(c[0].backend))), Parallelism: c[0].p})
			if err != nil {
				t.Fatal(err)
			}
			waitCommitted(t, out, 400)
			stop, err := cl.TriggerSavepoint(ctx, &pb.TriggerSavepointRequest{JobId: id, TargetDirectory: filepath.Join(dir, "sp"), Stop: true})
			if err != nil {
				t.Fatalf("stop = %v", err)
			}
			if got := len(committedRows[countRow](t, out)); got >= n {
				t.Fatalf("the first job committed all %d rows before the stop", got)
			}
			id2, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(countSpec(n, 1000, keys, out, cfg(c[1].backend))), Parallelism: c[1].p,
				RestorePath: stop.GetSavepointPath()})
			if err != nil {
				t.Fatalf("resume = %v", err)
			}
			last := watchFinished(t, ctx, cl, id2, 0)
			if last.GetParallelism() != c[1].p {
				t.Errorf("resumed job ran at parallelism %d, want %d", last.GetParallelism(), c[1].p)
			}
			checkCounts(t, out, n, keys)
		})
	}
}

// TestSavepointThenCancelResumes: the upgrade of Flink users who do not stop with a
// savepoint — take one, cancel the job, run the new one from it. The savepoint's
// transactions of the exactly-once file sink are pending at the cancel (no checkpoint follows
// it: the interval is an hour); the cancel commits them, as the savepoint's restore needs, so
// the resumed job finishes with every row exactly once.
func TestSavepointThenCancelResumes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 2, Slots: 2})
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	const n, keys = 6000, 7
	cfg := fmt.Sprintf("  execution.checkpointing.dir: %s", filepath.Join(dir, "checkpoints"))
	slow := strings.Replace(countSpec(n, 1000, keys, out, cfg), "interval: 100ms", "interval: 1h", 1)
	id, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(slow), Parallelism: 2})
	if err != nil {
		t.Fatal(err)
	}
	waitRunning(t, ctx, cl, id, 4) // two subtasks of the source chain and of the count chain
	sp, err := cl.TriggerSavepoint(ctx, &pb.TriggerSavepointRequest{JobId: id, TargetDirectory: filepath.Join(dir, "sp")})
	if err != nil {
		t.Fatalf("savepoint = %v", err)
	}
	if err := cl.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	if last := watchEnd(t, ctx, cl, id); last.GetStatus() != pb.JobStatus_JOB_STATUS_CANCELED {
		t.Fatalf("job ended %v, want CANCELED", last.GetStatus())
	}
	if got := len(committedRows[countRow](t, out)); got == 0 || got >= n {
		t.Fatalf("%d rows committed after the cancel, want the savepoint's (some, not all %d)", got, n)
	}
	id2, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(countSpec(n, 1000, keys, out, cfg)), Parallelism: 2, RestorePath: sp.GetSavepointPath()})
	if err != nil {
		t.Fatalf("resume = %v", err)
	}
	watchFinished(t, ctx, cl, id2, 0)
	checkCounts(t, out, n, keys)
}

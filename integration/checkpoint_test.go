package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// The founding example (reference/seeds): numbers keyed by parity, a running sum per key, and
// a failure while the odd sum processes a given number on the first attempt. Exactly-once must
// end with the failure-free sums and output; at-least-once must lose nothing; without
// checkpoints (at-most-once) the failure loses what the job had done.

// foundingSpec builds the job: 1..n at rate records per second, failing on the first attempt
// when the odd sum includes failAt (an odd number).
func foundingSpec(n, rate, failAt int, out, config string) string {
	oddSum := ((failAt + 1) / 2) * ((failAt + 1) / 2) // 1+3+…+failAt
	return fmt.Sprintf(`name: odd-even
parallelism: 2
config:
%s
operators:
  - {name: numbers, type: sequence, from: 1, to: %d, rate: %d}
  - {name: parity, type: map, fields: {parity: "value %% 2 == 0 ? 'even' : 'odd'", value: "value"}}
  - {name: by-parity, type: key-by, key: "parity"}
  - {name: sum_odd_even, type: sum, field: value}
  - {name: fail_at, type: fail, when: "parity == 'odd' && value == %d", attempt: 0}
  - {name: out, type: file, path: %q}
`, config, n, rate, oddSum, out)
}

// checkExactlyOnce checks committed output (by committedOutput) of the founding example over
// n numbers: every running sum of the failure-free output exactly once, and nothing else.
func checkExactlyOnce(t *testing.T, got map[string]map[int64]int, records, n int) {
	t.Helper()
	total := 0
	for key, sums := range failureFreeOutput(n) {
		total += len(sums)
		for _, s := range sums {
			if c := got[key][s]; c != 1 {
				t.Errorf("%s running sum %d committed %d times, want exactly once", key, s, c)
			}
		}
	}
	if records != total {
		t.Errorf("committed %d records, want %d (the failure-free output)", records, total)
	}
}

// failureFreeOutput is what the job writes without failures: per key, the running sums.
func failureFreeOutput(n int) map[string][]int64 {
	want := map[string][]int64{}
	var odd, even int64
	for v := int64(1); v <= int64(n); v++ {
		if v%2 == 0 {
			even += v
			want["even"] = append(want["even"], even)
		} else {
			odd += v
			want["odd"] = append(want["odd"], odd)
		}
	}
	return want
}

// committedOutput reads the visible (committed) part files of a file sink, per key.
func committedOutput(t *testing.T, dir string) (map[string]map[int64]int, int) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatalf("read %s: %v", dir, err)
	}
	got := map[string]map[int64]int{}
	n := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || e.IsDir() {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var row struct {
				Parity string `json:"parity"`
				Value  int64  `json:"value"`
			}
			if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
				t.Fatalf("%s: bad line %q: %v", e.Name(), sc.Text(), err)
			}
			if got[row.Parity] == nil {
				got[row.Parity] = map[int64]int{}
			}
			got[row.Parity][row.Value]++
			n++
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return got, n
}

func runFounding(t *testing.T, config string) (*pb.JobDetails, string, []*pb.CheckpointInfo) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 2, Slots: 1})
	out := filepath.Join(t.TempDir(), "out")
	spec := foundingSpec(120, 40, 31, out, config+"\n  execution.checkpointing.dir: "+filepath.Join(t.TempDir(), "checkpoints"))
	id := submit(t, ctx, cl, spec)
	last := watchEnd(t, ctx, cl, id)
	cps, err := cl.Checkpoints(ctx, id)
	if err != nil {
		t.Fatalf("Checkpoints(%s) = %v", id, err)
	}
	return last, out, cps
}

func TestFoundingExampleExactlyOnce(t *testing.T) {
	last, out, cps := runFounding(t, `  execution.checkpointing.interval: 50ms
  execution.checkpointing.mode: EXACTLY_ONCE
  restart-strategy.fixed-delay.delay: 50ms
  restart-strategy.type: fixed-delay`)
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("job ended %v (%s), want FINISHED", last.GetStatus(), last.GetFailureCause())
	}
	if last.GetRestarts() != 1 {
		t.Errorf("restarts = %d, want 1 (the injected failure)", last.GetRestarts())
	}
	if last.GetRestoredCheckpointId() <= 0 {
		t.Errorf("the restarted run restored no checkpoint (restored_checkpoint_id = %d)", last.GetRestoredCheckpointId())
	}
	completed := 0
	for _, c := range cps {
		if c.GetStatus() == pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED {
			completed++
		}
	}
	if completed == 0 {
		t.Errorf("no completed checkpoint in the history %v", cps)
	}
	got, n := committedOutput(t, out)
	t.Logf("restarts %d, restored from checkpoint %d, %d completed checkpoints, %d committed records",
		last.GetRestarts(), last.GetRestoredCheckpointId(), completed, n)
	checkExactlyOnce(t, got, n, 120)
	checkFoundingSums(t, got)
}

// checkFoundingSums checks the founding example's final running sums per key.
func checkFoundingSums(t *testing.T, got map[string]map[int64]int) {
	t.Helper()
	if odd, even := maxOf(got["odd"]), maxOf(got["even"]); odd != 3600 || even != 3660 {
		t.Errorf("final sums odd=%d even=%d, want 3600 and 3660", odd, even)
	}
}

// The founding example with unaligned checkpoints (every barrier overtakes the buffers in
// flight) holds exactly-once through the injected failure too.
func TestFoundingExampleExactlyOnceUnaligned(t *testing.T) {
	last, out, cps := runFounding(t, `  execution.checkpointing.interval: 50ms
  execution.checkpointing.unaligned: true
  restart-strategy.fixed-delay.delay: 50ms
  restart-strategy.type: fixed-delay`)
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED || last.GetRestarts() != 1 || last.GetRestoredCheckpointId() <= 0 {
		t.Fatalf("job ended %v (%s) after %d restarts from checkpoint %d, want FINISHED after 1 from a checkpoint",
			last.GetStatus(), last.GetFailureCause(), last.GetRestarts(), last.GetRestoredCheckpointId())
	}
	unaligned := 0
	for _, c := range cps {
		if c.GetStatus() == pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED && c.GetUnaligned() {
			unaligned++
		}
	}
	if unaligned == 0 {
		t.Errorf("no completed unaligned checkpoint in the history %v", cps)
	}
	got, n := committedOutput(t, out)
	checkExactlyOnce(t, got, n, 120)
	checkFoundingSums(t, got)
}

func TestFoundingExampleAtLeastOnce(t *testing.T) {
	last, out, _ := runFounding(t, `  execution.checkpointing.interval: 50ms
  execution.checkpointing.mode: AT_LEAST_ONCE
  restart-strategy.fixed-delay.delay: 50ms
  restart-strategy.type: fixed-delay`)
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("job ended %v (%s), want FINISHED", last.GetStatus(), last.GetFailureCause())
	}
	if last.GetRestarts() != 1 || last.GetRestoredCheckpointId() <= 0 {
		t.Errorf("restarts = %d, restored checkpoint %d; want 1 restart from a checkpoint", last.GetRestarts(), last.GetRestoredCheckpointId())
	}
	// Nothing is lost: every input reached the sums at least once, so the final sums are at
	// least the failure-free ones (duplicates may raise them).
	got, n := committedOutput(t, out)
	t.Logf("at-least-once: %d committed records, final sums odd=%d even=%d (failure-free: 3600, 3660)", n, maxOf(got["odd"]), maxOf(got["even"]))
	if odd, even := maxOf(got["odd"]), maxOf(got["even"]); odd < 3600 || even < 3660 {
		t.Errorf("final sums odd=%d even=%d, want at least 3600 and 3660", odd, even)
	}
}

func TestFoundingExampleAtMostOnce(t *testing.T) {
	// Checkpointing off: no checkpoint to return to, so the default restart strategy is none
	// and the failure fails the job. The two-phase-commit file sink never committed: what the
	// job computed before the failure is lost.
	last, out, cps := runFounding(t, `  parallelism.default: 2`)
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FAILED {
		t.Fatalf("job ended %v, want FAILED", last.GetStatus())
	}
	if !strings.Contains(last.GetFailureCause(), "Recovery is suppressed by NoRestartBackoffTimeStrategy") {
		t.Errorf("failure cause %q does not say recovery was suppressed", last.GetFailureCause())
	}
	if len(cps) != 0 {
		t.Errorf("checkpoint history %v, want none with checkpointing off", cps)
	}
	if _, n := committedOutput(t, out); n != 0 {
		t.Errorf("committed %d records; at-most-once with a failure before the end commits nothing", n)
	}
}

func maxOf(m map[int64]int) int64 {
	var best int64
	for v := range m {
		best = max(best, v)
	}
	return best
}

// TestCorruptCheckpointFallsBack corrupts the newest retained checkpoint's state file; the
// restart after a TaskManager loss detects it and restores the one before, loudly.
func TestCorruptCheckpointFallsBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 1, Slots: 1})
	spec := fmt.Sprintf(`name: corrupt
parallelism: 1
config:
  execution.checkpointing.interval: 1 h
  execution.checkpointing.num-retained: 2
  execution.checkpointing.dir: %s
  restart-strategy.type: fixed-delay
  restart-strategy.fixed-delay.delay: 10ms
operators:
  - {name: numbers, type: sequence, from: 1, rate: 500}
  - {name: by-key, type: key-by, key: "value %% 10"}
  - {name: total, type: sum, field: value}
  - {name: out, type: discard}
`, filepath.Join(t.TempDir(), "checkpoints"))
	id := submit(t, ctx, cl, spec)
	waitRunning(t, ctx, cl, id, 2)
	var taken []*pb.CheckpointInfo
	for len(taken) < 2 {
		info, err := cl.TriggerCheckpoint(ctx, id)
		if err != nil {
			t.Fatalf("TriggerCheckpoint() = %v", err)
		}
		if info.GetStatus() != pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED {
			t.Fatalf("manual checkpoint %v did not complete", info)
		}
		taken = append(taken, info)
	}
	older, newer := taken[0], taken[1]

	// Flip one byte of the newer checkpoint's keyed state file.
	files, err := filepath.Glob(filepath.Join(newer.GetPath(), "keyed-*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no keyed state file in %s (%v)", newer.GetPath(), err)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(files[0], data, 0o644); err != nil {
		t.Fatal(err)
	}

	// Lose the TaskManager (a spare takes over): the job restarts from a checkpoint.
	if _, err := c.AddTaskManager(); err != nil {
		t.Fatal(err)
	}
	if err := c.TMs[0].Close(); err != nil {
		t.Fatal(err)
	}
	var d *pb.JobDetails
	poll.Until(t, 30*time.Second, "the job to restart", func() error {
		if d, err = cl.Job(ctx, id); err != nil {
			return err
		}
		if d.GetRestarts() < 1 || d.GetStatus() != pb.JobStatus_JOB_STATUS_RUNNING {
			return fmt.Errorf("job %v after %d restarts", d.GetStatus(), d.GetRestarts())
		}
		return nil
	})
	if d.GetRestoredCheckpointId() != older.GetId() {
		t.Errorf("restored checkpoint %d, want %d (the newer %d is corrupt)", d.GetRestoredCheckpointId(), older.GetId(), newer.GetId())
	}
	loud := false
	for _, e := range d.GetExceptions() {
		if strings.Contains(e.GetCause(), fmt.Sprintf("checkpoint %d cannot be restored", newer.GetId())) &&
			strings.Contains(e.GetCause(), fmt.Sprintf("falling back to checkpoint %d", older.GetId())) {
			loud = true
		}
	}
	if !loud {
		t.Errorf("exception history %v does not report the corrupt checkpoint and the fallback", d.GetExceptions())
	}
}

// TestFinishedPipelineNotReplayed runs two independent pipelines in one job: the short one
// finishes (and commits) long before the other fails at its very end. The restart restores
// the finished pipeline as finished: its output is not written again.
func TestFinishedPipelineNotReplayed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 1, Slots: 1})
	short, long := filepath.Join(t.TempDir(), "short"), filepath.Join(t.TempDir(), "long")
	spec := fmt.Sprintf(`name: two-pipelines
parallelism: 1
config:
  execution.checkpointing.interval: 50ms
  execution.checkpointing.dir: %s
  restart-strategy.type: fixed-delay
  restart-strategy.fixed-delay.delay: 10ms
operators:
  - {name: short-src, type: sequence, from: 1, to: 50, rate: 200}
  - {name: short-out, type: file, path: %q}
  - {name: long-src, type: sequence, from: 1, to: 60, rate: 40}
  - {name: fail_at_end, type: fail, when: "value == 60", attempt: 0}
  - {name: long-out, type: file, path: %q}
`, filepath.Join(t.TempDir(), "checkpoints"), short, long)
	id := submit(t, ctx, cl, spec)
	watchFinished(t, ctx, cl, id, 1)
	checkEachValueOnce(t, short, 50)
	checkEachValueOnce(t, long, 60)
}

// committedRows decodes every committed JSON line of a file sink's part files.
func committedRows[T any](t *testing.T, dir string) []T {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "part-*"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []T
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(data)) {
			var row T
			if err := json.Unmarshal([]byte(line), &row); err != nil {
				t.Fatalf("%s: %q: %v", f, line, err)
			}
			rows = append(rows, row)
		}
	}
	return rows
}

// committedValues counts the "value" of every committed row of a file sink.
func committedValues(t *testing.T, dir string) map[int64]int {
	t.Helper()
	got := map[int64]int{}
	for _, row := range committedRows[struct{ Value int64 }](t, dir) {
		got[row.Value]++
	}
	return got
}

func TestBadRestartStrategyRejectedAtSubmit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, cl := miniclustertest.StartT(t, minicluster.Options{})
	spec := `name: bad-restart
config:
  restart-strategy.type: exponential-delay
  restart-strategy.exponential-delay.initial-backoff: 10 s
  restart-strategy.exponential-delay.max-backoff: 1 s
operators:
  - {name: numbers, type: sequence, from: 1, to: 10}
  - {name: out, type: discard}
`
	_, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(spec)})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "initial-backoff") {
		t.Fatalf("Submit() = %v, want INVALID_ARGUMENT naming initial-backoff", err)
	}
	if jobs, err := cl.List(ctx); err != nil || len(jobs) != 0 {
		t.Errorf("List() = %v, %v; want no job recorded", jobs, err)
	}
}

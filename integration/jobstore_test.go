package integration

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goflink/goflink/client"
	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/storage"
)

// settings returns a cluster configuration with the given keys.
func settings(t *testing.T, kv map[string]string) *config.Config {
	t.Helper()
	c := config.New()
	if err := c.SetAll(kv); err != nil {
		t.Fatal(err)
	}
	return c
}

// A job's exception history grew with every failure for as long as the job lived; it keeps
// the newest web.exception-history-size entries, as in Flink.
func TestExceptionHistoryKeepsTheNewest(t *testing.T) {
	_, cl := miniclustertest.StartT(t, minicluster.Options{Settings: settings(t, map[string]string{config.ExceptionHistorySize: "2"})})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	id := submit(t, ctx, cl, fmt.Sprintf(`name: failing
config:
  execution.checkpointing.interval: 100ms
  execution.checkpointing.dir: %q
  restart-strategy.type: fixed-delay
  restart-strategy.fixed-delay.attempts: 4
  restart-strategy.fixed-delay.delay: 0ms
operators:
  - {name: numbers, type: sequence, from: 1, to: 10}
  - {name: boom, type: fail, when: "value == 1"}
  - {name: out, type: discard}
`, filepath.Join(t.TempDir(), "cp")))
	last := watchEnd(t, ctx, cl, id)
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FAILED || last.GetRestarts() != 4 {
		t.Fatalf("job ended %v after %d restarts (%s), want FAILED after 4", last.GetStatus(), last.GetRestarts(), last.GetFailureCause())
	}
	ex := last.GetExceptions()
	if len(ex) != 2 {
		t.Fatalf("exception history has %d entries, want the newest 2: %v", len(ex), ex)
	}
	if ex[0].GetRestartAttempt() != 4 || ex[1].GetHandling() != pb.FailureHandling_FAILURE_HANDLING_SUPPRESSED {
		t.Errorf("exception history = %v, want the 4th restart, then the failure that suppressed recovery", ex)
	}
}

// execution.checkpointing.num-retained has a maximum, checked at submit: every retained
// checkpoint is a record in every JobManager's replicated state.
func TestNumRetainedIsBoundedAtSubmit(t *testing.T) {
	_, cl := miniclustertest.StartT(t, minicluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	spec := func(n int) string {
		return fmt.Sprintf(`name: retained
config:
  execution.checkpointing.interval: 1s
  execution.checkpointing.dir: %q
  execution.checkpointing.num-retained: %d
operators:
  - {name: numbers, type: sequence, from: 1, to: 10}
  - {name: out, type: discard}
`, filepath.Join(t.TempDir(), "cp"), n)
	}
	_, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(spec(101))})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"execution.checkpointing.num-retained": 101 is above the maximum 100`) {
		t.Fatalf("Submit(num-retained 101) = %v, want INVALID_ARGUMENT naming the key and the maximum", err)
	}
	if jobs, err := cl.List(ctx); err != nil || len(jobs) != 0 {
		t.Fatalf("List() after the refused submit = %v, %v; want no job", jobs, err)
	}
	id := submit(t, ctx, cl, spec(100))
	watchFinished(t, ctx, cl, id, 0)
}

// endlessSpec is a job checkpointed every interval that runs until it is cancelled.
func endlessSpec(cpDir, interval string) string {
	return fmt.Sprintf(`name: endless
config:
  execution.checkpointing.interval: %s
  execution.checkpointing.dir: %q
operators:
  - {name: numbers, type: sequence, from: 1, rate: 500}
  - {name: out, type: discard}
`, interval, cpDir)
}

// waitGone waits until the cluster no longer knows a job.
func waitGone(t *testing.T, ctx context.Context, cl *client.Client, id string) {
	t.Helper()
	poll.Until(t, 20*time.Second, "job "+id+" to be forgotten", func() error {
		_, err := cl.Job(ctx, id)
		if status.Code(err) == codes.NotFound {
			return nil
		}
		if err != nil {
			return fmt.Errorf("job %s: %w", id, err)
		}
		return fmt.Errorf("job %s is still known", id)
	})
}

// Ended jobs stayed in the Raft state for ever. They are forgotten jobstore.expiration-time
// after they ended, with their checkpoint directories; running jobs stay.
func TestEndedJobsExpire(t *testing.T) {
	cpDir := filepath.Join(t.TempDir(), "cp") // before the cluster: removed after it stopped
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 2, Settings: settings(t, map[string]string{config.JobStoreExpiration: "1"})})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	live := submit(t, ctx, cl, endlessSpec(cpDir, "100ms"))
	done := submit(t, ctx, cl, fmt.Sprintf(`name: bounded
config:
  execution.checkpointing.interval: 50ms
  execution.checkpointing.dir: %q
operators:
  - {name: numbers, type: sequence, from: 1, to: 200, rate: 1000}
  - {name: out, type: discard}
`, cpDir))
	watchFinished(t, ctx, cl, done, 0)
	waitGone(t, ctx, cl, done)
	// The leader deletes the files after the removal committed, off its loop.
	poll.Until(t, 20*time.Second, "the forgotten job's checkpoint directory to be deleted", func() error {
		if _, err := os.Stat(filepath.Join(cpDir, done)); !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("stat: %w", err)
		}
		return nil
	})
	jobs, err := cl.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].GetId() != live || jobs[0].GetStatus() != pb.JobStatus_JOB_STATUS_RUNNING {
		t.Errorf("jobs = %v, want only the running job %s", jobs, live)
	}
}

// Beyond jobstore.max-capacity ended jobs the oldest ended is forgotten. Its checkpoint
// directory goes, except the snapshots still in use or owned by the user: the retained
// checkpoint another job was started from (without claim) stays, and so do its savepoints.
func TestJobStoreCapacityKeepsSnapshotsInUse(t *testing.T) {
	dir := t.TempDir() // before the cluster: removed after it stopped
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 2, Settings: settings(t, map[string]string{config.JobStoreCapacity: "1"})})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cpDir, spDir := filepath.Join(dir, "cp"), filepath.Join(dir, "sp")
	a := submit(t, ctx, cl, endlessSpec(cpDir, "100ms"))
	poll.Until(t, 20*time.Second, "a completed checkpoint of "+a, func() error {
		cps, err := cl.Checkpoints(ctx, a)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(cps, func(c *pb.CheckpointInfo) bool {
			return c.GetStatus() == pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED && !c.GetSavepoint()
		}) {
			return errors.New("none yet")
		}
		return nil
	})
	sp, err := cl.TriggerSavepoint(ctx, &pb.TriggerSavepointRequest{JobId: a, TargetDirectory: spDir})
	if err != nil {
		t.Fatalf("TriggerSavepoint = %v", err)
	}
	if err := cl.Cancel(ctx, a); err != nil {
		t.Fatal(err)
	}
	if last := watchEnd(t, ctx, cl, a); last.GetStatus() != pb.JobStatus_JOB_STATUS_CANCELED {
		t.Fatalf("job %s ended %v, want CANCELED", a, last.GetStatus())
	}
	// Its retained checkpoint: the one chk-<n> of its directory that is a snapshot.
	var retained string
	entries, err := os.ReadDir(filepath.Join(cpDir, a))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if p := filepath.Join(cpDir, a, e.Name()); strings.HasPrefix(e.Name(), "chk-") {
			if _, err := storage.OpenSnapshot(p); err == nil {
				retained = p
			}
		}
	}
	if retained == "" {
		t.Fatalf("no retained checkpoint in %s: %v", filepath.Join(cpDir, a), entries)
	}
	// Started from it without claim and no checkpoint of its own yet, so it still needs it.
	b, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(endlessSpec(cpDir, "1h")), RestorePath: retained})
	if err != nil {
		t.Fatalf("start from %s: %v", retained, err)
	}
	waitRunning(t, ctx, cl, b, 1)
	if _, err := cl.Job(ctx, a); err != nil {
		t.Fatalf("the only ended job was forgotten within the capacity: %v", err)
	}
	c := submit(t, ctx, cl, `name: tiny
operators:
  - {name: numbers, type: sequence, from: 1, to: 10}
  - {name: out, type: discard}
`)
	watchFinished(t, ctx, cl, c, 0)
	waitGone(t, ctx, cl, a) // two ended jobs, capacity 1: the older goes
	// The leader deletes the files after the removal committed, off its loop.
	poll.Until(t, 20*time.Second, "the forgotten job's files other than the retained checkpoint to be deleted", func() error {
		left, err := os.ReadDir(filepath.Join(cpDir, a))
		if err != nil || len(left) != 1 || left[0].Name() != filepath.Base(retained) {
			return fmt.Errorf("the forgotten job's directory holds %v (%w), want only %s, which job %s was started from", left, err, filepath.Base(retained), b)
		}
		return nil
	})
	if _, err := storage.OpenSnapshot(retained); err != nil {
		t.Errorf("the checkpoint job %s was started from: %v", b, err)
	}
	if _, err := storage.OpenSnapshot(sp.GetSavepointPath()); err != nil {
		t.Errorf("the forgotten job's savepoint: %v", err)
	}
	if d, err := cl.Job(ctx, c); err != nil || d.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("the newest ended job: %v, %v; want it kept", d, err)
	}
	if d, err := cl.Job(ctx, b); err != nil || d.GetStatus() != pb.JobStatus_JOB_STATUS_RUNNING {
		t.Errorf("the job started from the checkpoint: %v, %v; want it running", d, err)
	}
}

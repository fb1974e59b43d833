package integration

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
)

// TestDefaultCheckpointDirIsTheJobManagersOwn: a job that sets no execution.checkpointing.dir
// checkpoints into <JobManager data dir>/checkpoints, created 0700, not into a directory under
// the world-writable /tmp that any local user could have created first.
func TestDefaultCheckpointDirIsTheJobManagersOwn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	dataDir := t.TempDir()
	_, cl := miniclustertest.StartT(t, minicluster.Options{DataDir: dataDir})
	id := submit(t, ctx, cl, `name: default-checkpoint-dir
config:
  execution.checkpointing.interval: 1 h
operators:
  - {name: numbers, type: sequence, from: 1, rate: 100}
  - {name: out, type: discard}
`)
	waitRunning(t, ctx, cl, id, 1)
	cp, err := cl.TriggerCheckpoint(ctx, id)
	if err != nil {
		t.Fatalf("TriggerCheckpoint() = %v", err)
	}
	root := filepath.Join(dataDir, "jobmanager", "checkpoints")
	if _, err := os.Stat(filepath.Join(root, id, "chk-"+strconv.FormatInt(cp.GetId(), 10), "_metadata")); err != nil {
		t.Errorf("checkpoint %d is not in the JobManager's data dir: %v", cp.GetId(), err)
	}
	fi, err := os.Stat(root)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Errorf("%s has mode %v, want 0700 (only the JobManager's user may read or change checkpoints)", root, perm)
	}
	if _, err := os.Stat(filepath.Join(os.TempDir(), "goflink-checkpoints", id)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the job's checkpoints are (also) under %s: %v", os.TempDir(), err)
	}
	if err := cl.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	watchEnd(t, ctx, cl, id)
}

package storage

import (
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/goflink/goflink/internal/dirsync"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// syncRecorder records the directories dirsync fsyncs while a test runs.
func syncRecorder(t *testing.T) func() []string {
	var mu sync.Mutex
	var dirs []string
	t.Cleanup(dirsync.SetSyncHook(func(dir string) {
		mu.Lock()
		dirs = append(dirs, dir)
		mu.Unlock()
	}))
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(dirs)
	}
}

// TestCheckpointDirectoriesAreDurable: a completed checkpoint survives a crash of the machine
// only if every directory entry on its path does: the job directory's entry in the base
// directory (created with the first checkpoint), the checkpoint directory's in the job
// directory, the state files' and _metadata's in the checkpoint directory. A savepoint's
// directory's entry in its target directory too.
func TestCheckpointDirectoriesAreDurable(t *testing.T) {
	synced := syncRecorder(t)
	base := filepath.Join(t.TempDir(), "checkpoints")
	jobDir := JobDir(base, "job")
	h := writeState(t, jobDir, 1, "op-0", []byte("state"))
	md := &pb.CheckpointMetadata{CheckpointId: 1, States: []*pb.OperatorSubtaskState{{Operator: "op", Keyed: &pb.KeyedStateHandle{File: h}}}}
	if _, err := WriteMetadata(jobDir, md); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Dir(base), base, jobDir, filepath.Join(jobDir, "chk-1")} {
		if !slices.Contains(synced(), dir) {
			t.Errorf("%s was not fsynced after an entry was created in it; fsynced: %q", dir, synced())
		}
	}

	target := filepath.Join(t.TempDir(), "savepoints")
	sp, err := NewSavepointDir(target, "job")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CreateSavepointFile(sp, "op-0"); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Dir(target), target} {
		if !slices.Contains(synced(), dir) {
			t.Errorf("savepoint: %s was not fsynced after an entry was created in it; fsynced: %q", dir, synced())
		}
	}
}

// TestLocalObjectsAreDurable: once Close returns, a local object's file and every directory
// entry on its path survive a crash: the directory holding it and each directory Create made.
func TestLocalObjectsAreDurable(t *testing.T) {
	synced := syncRecorder(t)
	root := filepath.Join(t.TempDir(), "root")
	f := NewLocal(root)
	w, err := f.Create(t.Context(), "a/b/obj")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("data")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Dir(root), root, filepath.Join(root, "a"), filepath.Join(root, "a", "b")} {
		if !slices.Contains(synced(), dir) {
			t.Errorf("%s was not fsynced after an entry was created in it; fsynced: %q", dir, synced())
		}
	}
}

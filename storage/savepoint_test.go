package storage

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// writeSavepoint writes a savepoint with one keyed state file into dir.
func writeSavepoint(t *testing.T, dir string) {
	t.Helper()
	f, err := CreateSavepointFile(dir, "keyed-v0-s0-a0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("some keyed state")); err != nil {
		t.Fatal(err)
	}
	h, err := f.Commit()
	if err != nil {
		t.Fatal(err)
	}
	if h.GetPath() != "keyed-v0-s0-a0" {
		t.Fatalf("savepoint file handle path %q, want the file name alone", h.GetPath())
	}
	md := &pb.CheckpointMetadata{JobId: "j", CheckpointId: 7, States: []*pb.OperatorSubtaskState{
		{Operator: "op", Keyed: &pb.KeyedStateHandle{File: h, Offsets: []int64{0}}},
	}}
	if err := WriteSavepointMetadata(dir, md); err != nil {
		t.Fatal(err)
	}
}

func TestSavepointMovesAndVerifies(t *testing.T) {
	base := t.TempDir()
	dir, err := NewSavepointDir(base, "0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(dir), "savepoint-012345-") {
		t.Errorf("savepoint directory %q, want savepoint-<job prefix>-<random>", dir)
	}
	writeSavepoint(t, dir)
	moved := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{moved, filepath.Join(moved, MetadataFile)} {
		s, err := OpenSnapshot(p)
		if err != nil {
			t.Fatalf("OpenSnapshot(%s) = %v", p, err)
		}
		if s.Root != moved || s.Path != "." || !s.Metadata.GetSavepoint() || s.Metadata.GetCheckpointId() != 7 {
			t.Errorf("OpenSnapshot(%s) = root %s path %s savepoint %v id %d", p, s.Root, s.Path, s.Metadata.GetSavepoint(), s.Metadata.GetCheckpointId())
		}
	}
	// A flipped byte is found by checksum.
	f := filepath.Join(moved, "keyed-v0-s0-a0")
	b, _ := os.ReadFile(f)
	b[3] ^= 1
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenSnapshot(moved); !errors.Is(err, ErrCorrupt) {
		t.Errorf("OpenSnapshot of a corrupt savepoint = %v, want ErrCorrupt", err)
	}
}

func TestOpenSnapshotOfCheckpoint(t *testing.T) {
	jobDir := filepath.Join(t.TempDir(), "job")
	f, err := CreateFile(jobDir, 3, "keyed")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	h, _ := f.Commit()
	if _, err := WriteMetadata(jobDir, &pb.CheckpointMetadata{CheckpointId: 3, States: []*pb.OperatorSubtaskState{{Keyed: &pb.KeyedStateHandle{File: h}}}}); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSnapshot(filepath.Join(jobDir, "chk-3"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Root != jobDir || s.Path != "chk-3" || s.Metadata.GetSavepoint() {
		t.Errorf("OpenSnapshot(chk-3) = root %s path %s savepoint %v", s.Root, s.Path, s.Metadata.GetSavepoint())
	}
	if _, err := DisposeSavepoint(filepath.Join(jobDir, "chk-3")); err == nil || !strings.Contains(err.Error(), "not a savepoint") {
		t.Errorf("DisposeSavepoint(checkpoint) = %v, want a refusal", err)
	}
	if _, err := os.Stat(filepath.Join(jobDir, "chk-3", MetadataFile)); err != nil {
		t.Errorf("the refused dispose deleted the checkpoint: %v", err)
	}
}

func TestOpenSnapshotRefusals(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"", filepath.Join(dir, "missing"), dir, file} {
		if _, err := OpenSnapshot(p); !errors.Is(err, ErrNotSnapshot) {
			t.Errorf("OpenSnapshot(%q) = %v, want ErrNotSnapshot", p, err)
		}
	}
	if _, err := DisposeSavepoint(dir); !errors.Is(err, ErrNotSnapshot) {
		t.Errorf("DisposeSavepoint(not a savepoint) = %v", err)
	}
	if _, err := os.Stat(file); err != nil {
		t.Errorf("a refused dispose deleted files: %v", err)
	}
	sp := filepath.Join(dir, "savepoint-x-1")
	writeSavepoint(t, sp)
	if got, err := DisposeSavepoint(filepath.Join(sp, MetadataFile)); err != nil || got != sp {
		t.Fatalf("DisposeSavepoint = %q, %v", got, err)
	}
	if _, err := os.Stat(sp); !os.IsNotExist(err) {
		t.Errorf("savepoint still there after dispose: %v", err)
	}
	if _, err := NewSavepointDir("relative", "j"); err == nil {
		t.Errorf("NewSavepointDir(relative) = nil error")
	}
}

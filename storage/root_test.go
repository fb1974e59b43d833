package storage

import (
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"testing"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// TestRootCheckpointLifecycle runs a checkpoint's life in a local directory and on S3: state
// files, then _metadata; a checkpoint without _metadata does not exist; Verify checks the
// files; a missing file is corruption; Discard removes the checkpoint and nothing else.
func TestRootCheckpointLifecycle(t *testing.T) {
	for _, impl := range implementations() {
		t.Run(impl.name, func(t *testing.T) {
			ctx := t.Context()
			r := NewRoot(impl.open(t))
			write := func(id int64, name, data string) *pb.FileHandle {
				t.Helper()
				w, err := r.CreateFile(ctx, id, name)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := w.Write([]byte(data)); err != nil {
					t.Fatal(err)
				}
				h, err := w.Commit()
				if err != nil {
					t.Fatal(err)
				}
				return h
			}
			h := write(3, "op-0", "state of op 0")
			if _, err := r.CreateFile(ctx, 3, "op-0"); !errors.Is(err, fs.ErrExist) {
				t.Errorf("second CreateFile of op-0: %v, want fs.ErrExist", err)
			}
			if _, err := r.ReadMetadata(ctx, "chk-3"); !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("checkpoint without _metadata: ReadMetadata = %v, want missing", err)
			}
			md := &pb.CheckpointMetadata{JobId: "job", CheckpointId: 3, States: []*pb.OperatorSubtaskState{{Operator: "op", Keyed: &pb.KeyedStateHandle{File: h}}}}
			chk, err := r.WriteMetadata(ctx, md)
			if err != nil || chk != "chk-3" {
				t.Fatalf("WriteMetadata = %q, %v", chk, err)
			}
			got, err := r.Verify(ctx, chk)
			if err != nil || got.GetCheckpointId() != 3 || got.GetVersion() != MetadataVersion {
				t.Fatalf("Verify = %v, %v", got, err)
			}
			b, err := r.ReadFile(ctx, h)
			if err != nil || string(b) != "state of op 0" {
				t.Fatalf("ReadFile = %q, %v", b, err)
			}
			// Another checkpoint whose state file is gone: Verify says which.
			h4 := write(4, "op-0", "newer")
			if _, err := r.WriteMetadata(ctx, &pb.CheckpointMetadata{CheckpointId: 4, States: []*pb.OperatorSubtaskState{{Operator: "op", Keyed: &pb.KeyedStateHandle{File: h4}}}}); err != nil {
				t.Fatal(err)
			}
			if err := r.fs.Delete(ctx, h4.GetPath()); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Verify(ctx, "chk-4"); !errors.Is(err, ErrCorrupt) || !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("Verify of a checkpoint missing a file = %v, want ErrCorrupt and fs.ErrNotExist", err)
			}
			if _, err := r.ReadFile(ctx, &pb.FileHandle{Path: "../x"}); err == nil {
				t.Fatal("ReadFile of a path outside the directory succeeded")
			}
			if err := r.Discard(ctx, "chk-4"); err != nil {
				t.Fatal(err)
			}
			if got := names(t, r.fs, ""); len(got) != 2 || got[0] != "chk-3/_metadata" || got[1] != "chk-3/op-0" {
				t.Fatalf("after Discard(chk-4): %v, want chk-3's two objects", got)
			}
		})
	}
}

func TestJoinPath(t *testing.T) {
	for _, c := range []struct{ base, rel, want string }{
		{"/data/cp", "job", "/data/cp/job"},
		{"/data/cp", "chk-1/x", "/data/cp/chk-1/x"},
		{"s3://b/p", "job", "s3://b/p/job"},
		{"s3://b/p/", "chk-1/x", "s3://b/p/chk-1/x"},
		{"s3://b", ".", "s3://b"},
	} {
		if got := JoinPath(c.base, c.rel); got != c.want {
			t.Errorf("JoinPath(%q, %q) = %q, want %q", c.base, c.rel, got, c.want)
		}
	}
}

// TestRootCheckpointIDs lists the checkpoint directories holding any file, complete or not,
// in ID order, and nothing else of the job directory; an empty or missing one holds none.
func TestRootCheckpointIDs(t *testing.T) {
	for _, impl := range implementations() {
		t.Run(impl.name, func(t *testing.T) {
			ctx := t.Context()
			fsys := impl.open(t)
			r := NewRoot(fsys)
			if ids, err := r.CheckpointIDs(ctx); err != nil || len(ids) != 0 {
				t.Fatalf("empty: CheckpointIDs = %v, %v", ids, err)
			}
			for _, name := range []string{"chk-12/op-0", "chk-3/op-0", "chk-3/op-1", "chk-03/x", "chk-x/y", "chk-7", "savepoint-1/_metadata", "chk-40/a/b"} {
				w, err := fsys.Create(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
			}
			want := []int64{3, 12, 40}
			s3, onS3 := fsys.(*S3)
			if onS3 {
				// An upload in progress (a large state file's writer died) names its directory too.
				if _, err := s3.NewUpload(ctx, "chk-55/keyed-v1-s0-a0"); err != nil {
					t.Fatal(err)
				}
				want = []int64{3, 12, 40, 55}
			}
			ids, err := r.CheckpointIDs(ctx)
			if err != nil || !slices.Equal(ids, want) {
				t.Fatalf("CheckpointIDs = %v, %v; want %v", ids, err, want)
			}
			if onS3 {
				// Discarding the directory aborts its upload.
				if err := r.Discard(ctx, "chk-55"); err != nil {
					t.Fatal(err)
				}
				if ups, err := s3.ListUploads(ctx, "chk-55/"); err != nil || len(ups) != 0 {
					t.Fatalf("uploads under chk-55/ after Discard: %v, %v", ups, err)
				}
			}
		})
	}
	if ids, err := NewRoot(NewLocal(filepath.Join(t.TempDir(), "missing"))).CheckpointIDs(t.Context()); err != nil || len(ids) != 0 {
		t.Fatalf("missing directory: CheckpointIDs = %v, %v", ids, err)
	}
}

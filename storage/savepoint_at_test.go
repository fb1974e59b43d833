package storage

import (
	"errors"
	"io"
	"io/fs"
	"strings"
	"testing"

	"github.com/goflink/goflink/internal/s3test"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// snapshotLocations are the two kinds of location savepoints and checkpoints live in: a
// fresh base location and the settings that reach it.
func snapshotLocations() []struct {
	name string
	base func(t *testing.T) (string, S3Settings)
} {
	return []struct {
		name string
		base func(t *testing.T) (string, S3Settings)
	}{
		{"local", func(t *testing.T) (string, S3Settings) { return t.TempDir(), S3Settings{} }},
		{"s3", func(t *testing.T) (string, S3Settings) {
			srv := s3test.Start(t)
			return "s3://" + srv.Bucket + "/savepoints", s3Settings(srv)
		}},
	}
}

// TestSavepointAt writes a savepoint as the TaskManagers and the JobManager do (Root), finds
// and verifies it by its directory and its _metadata, finds a corrupt and a missing state file
// by checksum, and disposes of it, locally and on S3 through the same code.
func TestSavepointAt(t *testing.T) {
	for _, loc := range snapshotLocations() {
		t.Run(loc.name, func(t *testing.T) {
			ctx := t.Context()
			base, s := loc.base(t)
			dir, err := NewSavepointDir(base, "0123456789abcdef")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(dir, JoinPath(base, "savepoint-012345-")) {
				t.Errorf("savepoint directory %q, want %s/savepoint-<job prefix>-<random>", dir, base)
			}
			root, err := OpenRoot(dir, s)
			if err != nil {
				t.Fatal(err)
			}
			f, err := root.CreateSavepointFile(ctx, "keyed-v0-s0-a0")
			if err != nil {
				t.Fatal(err)
			}
			const data = "some keyed state"
			if _, err := f.Write([]byte(data)); err != nil {
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
			if err := root.WriteSavepointMetadata(ctx, md); err != nil {
				t.Fatal(err)
			}
			// A sibling that no dispose may touch.
			sibling, err := OpenRoot(JoinPath(base, "savepoint-012345-other"), s)
			if err != nil {
				t.Fatal(err)
			}
			if err := sibling.WriteSavepointMetadata(ctx, md); err != nil {
				t.Fatal(err)
			}

			for _, p := range []string{dir, dir + "/", JoinPath(dir, MetadataFile)} {
				snap, err := OpenSnapshotAt(ctx, p, s)
				if err != nil {
					t.Fatalf("OpenSnapshotAt(%s) = %v", p, err)
				}
				if snap.Root != dir || snap.Path != "." || snap.Dir != dir || !snap.Metadata.GetSavepoint() || snap.Metadata.GetCheckpointId() != 7 {
					t.Errorf("OpenSnapshotAt(%s) = root %s path %s dir %s savepoint %v id %d", p, snap.Root, snap.Path, snap.Dir, snap.Metadata.GetSavepoint(), snap.Metadata.GetCheckpointId())
				}
				r, err := snap.Files.OpenFile(ctx, snap.Metadata.GetStates()[0].GetKeyed().GetFile())
				if err != nil {
					t.Fatal(err)
				}
				b, err := io.ReadAll(r)
				r.Close()
				if err != nil || string(b) != data {
					t.Errorf("state file through Files = %q, %v; want %q", b, err, data)
				}
			}

			for _, p := range []string{JoinPath(base, "nothing-here"), JoinPath(dir, "keyed-v0-s0-a0")} {
				if _, err := OpenSnapshotAt(ctx, p, s); !errors.Is(err, ErrNotSnapshot) {
					t.Errorf("OpenSnapshotAt(%s) = %v, want ErrNotSnapshot", p, err)
				}
				if _, err := DisposeSavepointAt(ctx, p, s); !errors.Is(err, ErrNotSnapshot) {
					t.Errorf("DisposeSavepointAt(%s) = %v, want ErrNotSnapshot", p, err)
				}
			}

			// A flipped byte, then a missing file: ErrCorrupt naming the file.
			fsys, err := Open(dir, s)
			if err != nil {
				t.Fatal(err)
			}
			flipped := []byte(data)
			flipped[3] ^= 1
			put(t, fsys, "keyed-v0-s0-a0", string(flipped))
			if _, err := OpenSnapshotAt(ctx, dir, s); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "keyed-v0-s0-a0") {
				t.Errorf("OpenSnapshotAt of a corrupt savepoint = %v, want ErrCorrupt naming keyed-v0-s0-a0", err)
			}
			if err := fsys.Delete(ctx, "keyed-v0-s0-a0"); err != nil {
				t.Fatal(err)
			}
			_, err = OpenSnapshotAt(ctx, dir, s)
			if !errors.Is(err, ErrCorrupt) || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "keyed-v0-s0-a0") {
				t.Errorf("OpenSnapshotAt with a missing state file = %v, want ErrCorrupt naming keyed-v0-s0-a0", err)
			}
			put(t, fsys, "keyed-v0-s0-a0", data)

			got, err := DisposeSavepointAt(ctx, JoinPath(dir, MetadataFile), s)
			if err != nil || got != dir {
				t.Fatalf("DisposeSavepointAt = %q, %v; want %q", got, err, dir)
			}
			if left, err := fsys.List(ctx, ""); err != nil || len(left) != 0 {
				t.Errorf("after dispose the savepoint holds %v (%v), want nothing", left, err)
			}
			if _, err := OpenSnapshotAt(ctx, dir, s); !errors.Is(err, ErrNotSnapshot) {
				t.Errorf("OpenSnapshotAt after dispose = %v, want ErrNotSnapshot", err)
			}
			if _, err := sibling.ReadMetadata(ctx, "."); err != nil {
				t.Errorf("the dispose touched a sibling savepoint: %v", err)
			}
		})
	}
}

// TestCheckpointSnapshotAt: a retained checkpoint (<job dir>/chk-<n>) is found with its job
// directory as root, and refused by dispose, locally and on S3.
func TestCheckpointSnapshotAt(t *testing.T) {
	for _, loc := range snapshotLocations() {
		t.Run(loc.name, func(t *testing.T) {
			ctx := t.Context()
			base, s := loc.base(t)
			jobDir := JobDir(base, "job")
			root, err := OpenRoot(jobDir, s)
			if err != nil {
				t.Fatal(err)
			}
			f, err := root.CreateFile(ctx, 3, "keyed")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			h, err := f.Commit()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := root.WriteMetadata(ctx, &pb.CheckpointMetadata{CheckpointId: 3, States: []*pb.OperatorSubtaskState{{Keyed: &pb.KeyedStateHandle{File: h}}}}); err != nil {
				t.Fatal(err)
			}
			chk := JoinPath(jobDir, "chk-3")
			for _, p := range []string{chk, JoinPath(chk, MetadataFile)} {
				snap, err := OpenSnapshotAt(ctx, p, s)
				if err != nil {
					t.Fatalf("OpenSnapshotAt(%s) = %v", p, err)
				}
				if snap.Root != jobDir || snap.Path != "chk-3" || snap.Dir != chk || snap.Metadata.GetSavepoint() {
					t.Errorf("OpenSnapshotAt(%s) = root %s path %s dir %s savepoint %v", p, snap.Root, snap.Path, snap.Dir, snap.Metadata.GetSavepoint())
				}
			}
			if _, err := DisposeSavepointAt(ctx, chk, s); err == nil || !strings.Contains(err.Error(), "not a savepoint") {
				t.Errorf("DisposeSavepointAt(checkpoint) = %v, want a refusal", err)
			}
			if _, err := OpenSnapshotAt(ctx, chk, s); err != nil {
				t.Errorf("the refused dispose deleted the checkpoint: %v", err)
			}
			if err := DiscardSnapshotDir(ctx, chk, s); err != nil {
				t.Fatal(err)
			}
			if _, err := OpenSnapshotAt(ctx, chk, s); !errors.Is(err, ErrNotSnapshot) {
				t.Errorf("OpenSnapshotAt after DiscardSnapshotDir = %v, want ErrNotSnapshot", err)
			}
		})
	}
}

// TestSnapshotAtS3Errors: a missing bucket and malformed locations are errors that say so,
// never a panic, and a dispose of them deletes nothing.
func TestSnapshotAtS3Errors(t *testing.T) {
	srv := s3test.Start(t)
	s := s3Settings(srv)
	ctx := t.Context()
	if _, err := OpenSnapshotAt(ctx, "s3://no-such-bucket/sp/savepoint-x", s); !errors.Is(err, ErrNoSuchBucket) || !strings.Contains(err.Error(), "no-such-bucket") {
		t.Errorf("OpenSnapshotAt(missing bucket) = %v, want ErrNoSuchBucket naming it", err)
	}
	if _, err := DisposeSavepointAt(ctx, "s3://no-such-bucket/sp/savepoint-x", s); !errors.Is(err, ErrNoSuchBucket) {
		t.Errorf("DisposeSavepointAt(missing bucket) = %v, want ErrNoSuchBucket", err)
	}
	for _, p := range []string{"s3://", "s3:///x", "s3://b/a//b", "gs://b/x", "s3://" + srv.Bucket} {
		if _, err := OpenSnapshotAt(ctx, p, s); err == nil {
			t.Errorf("OpenSnapshotAt(%q) = nil error", p)
		}
		if _, err := DisposeSavepointAt(ctx, p, s); err == nil {
			t.Errorf("DisposeSavepointAt(%q) = nil error", p)
		}
		if _, err := NewSavepointDir(p, "j"); err == nil && p != "s3://"+srv.Bucket {
			t.Errorf("NewSavepointDir(%q) = nil error", p)
		}
	}
	if err := DiscardSnapshotDir(ctx, "s3://"+srv.Bucket, s); err == nil {
		t.Error("DiscardSnapshotDir(bucket root) = nil error")
	}
}

// TestSnapshotAtOddLocations: malformed locations are errors, never a panic, and nothing is
// deleted.
func TestSnapshotAtOddLocations(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	ctx := t.Context()
	for _, p := range []string{"", "://", "s3:", "s3://", "s3:///", "s3://b/", "s3://b/_metadata", "s3://b/x/_metadata/",
		"file://", "file://host/x", "gs://b/x", "/", "/_metadata", "s3://b/a/../c", "s3://b/\x00", "relative"} {
		if _, err := OpenSnapshotAt(ctx, p, S3Settings{}); err == nil {
			t.Errorf("OpenSnapshotAt(%q) = nil error", p)
		}
		if _, err := DisposeSavepointAt(ctx, p, S3Settings{}); err == nil {
			t.Errorf("DisposeSavepointAt(%q) = nil error", p)
		}
		if p != "/_metadata" { // an absolute directory like any other; no such one here
			if err := DiscardSnapshotDir(ctx, p, S3Settings{}); err == nil {
				t.Errorf("DiscardSnapshotDir(%q) = nil error", p)
			}
		}
		_, _ = NewSavepointDir(p, "j")
	}
}

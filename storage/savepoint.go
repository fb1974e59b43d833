package storage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// Savepoints follow Flink's layout: a directory of their own under the target directory,
//
//	<target>/savepoint-<job-id prefix>-<random>/_metadata
//	<target>/savepoint-<job-id prefix>-<random>/<state files>
//
// with every path in _metadata relative to that directory, so it can be moved or copied
// elsewhere (another cluster, another bucket) and still restores. Its _metadata says it is a
// savepoint. The target is an absolute local path or an S3 location (s3://bucket/prefix); the
// functions taking S3Settings reach both, the others read and write local paths (or reach S3
// with the AWS environment variables).

// NewSavepointDir returns a fresh savepoint directory under target for a job (it does not
// create it). target must be an absolute path, every process resolving it the same way, or a
// URI (s3://bucket/prefix, see CheckLocation).
func NewSavepointDir(target, jobID string) (string, error) {
	if IsURI(target) {
		if err := CheckLocation(target); err != nil {
			return "", err
		}
	} else if !filepath.IsAbs(target) {
		return "", fmt.Errorf("storage: savepoint directory %q is not an absolute path", target)
	}
	short := jobID
	if len(short) > 6 {
		short = short[:6]
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("storage: %w", err)
	}
	return JoinPath(target, "savepoint-"+short+"-"+hex.EncodeToString(b[:])), nil
}

// Snapshot is a completed checkpoint or savepoint found by its path.
type Snapshot struct {
	// Root is the directory its state file paths are relative to: a checkpoint's job
	// directory, or a savepoint's own directory (a local path or a URI).
	Root string
	// Path is its directory relative to Root: "chk-<n>", or "." for a savepoint.
	Path string
	// Dir is its directory (Root/Path), the one holding _metadata.
	Dir      string
	Metadata *pb.CheckpointMetadata
	// Files is Root opened: its state files' handles resolve in it (Root.OpenFile).
	Files Root
}

// ErrNotSnapshot is wrapped by the error of OpenSnapshot for a path that is neither a
// savepoint nor a completed checkpoint.
var ErrNotSnapshot = errors.New("not a savepoint or completed checkpoint")

// OpenSnapshot finds the savepoint or completed checkpoint at p (its directory or its
// _metadata file) and verifies it: the metadata's checksum and the size and CRC-32C of every
// state file it names. A corrupt one is an error wrapping ErrCorrupt that names the file.
// It is OpenSnapshotAt without S3 settings.
func OpenSnapshot(p string) (*Snapshot, error) {
	return OpenSnapshotAt(context.Background(), p, S3Settings{})
}

// OpenSnapshotAt is OpenSnapshot of a local path or a URI (s3://bucket/prefix/savepoint-…,
// s3://…/<job-id>/chk-<n>, or either's _metadata), reached with s. A location without
// _metadata is an error wrapping ErrNotSnapshot; a missing bucket, refused credentials or an
// unreachable endpoint are the FS's errors (ErrNoSuchBucket, ErrAccessDenied,
// ErrUnreachable), naming the location.
func OpenSnapshotAt(ctx context.Context, p string, s S3Settings) (*Snapshot, error) {
	dir, err := snapshotDirOf(p)
	if err != nil {
		return nil, err
	}
	if err := checkLocalDir(p, dir, ""); err != nil {
		return nil, err
	}
	own, err := OpenRoot(dir, s)
	if err != nil {
		return nil, err
	}
	// A checkpoint's paths are relative to its job directory; read the metadata first to
	// know which kind it is.
	md, err := readSnapshotMetadata(ctx, own, p, "")
	if err != nil {
		return nil, err
	}
	snap := &Snapshot{Root: dir, Path: ".", Dir: dir, Files: own}
	if !md.GetSavepoint() {
		parent, base, ok := splitLocation(dir)
		if !ok || !strings.HasPrefix(base, "chk-") {
			return nil, fmt.Errorf("storage: %w: %s holds a checkpoint's metadata but is not a chk-<n> directory", ErrCorrupt, p)
		}
		if snap.Files, err = OpenRoot(parent, s); err != nil {
			return nil, err
		}
		snap.Root, snap.Path = parent, base
	}
	if snap.Metadata, err = snap.Files.Verify(ctx, snap.Path); err != nil {
		return nil, err
	}
	return snap, nil
}

// checkLocalDir checks that a local snapshot directory dir (of the location p) is one;
// there are no directories on S3, where the missing _metadata tells (suffix ends the message).
func checkLocalDir(p, dir, suffix string) error {
	if IsURI(dir) {
		return nil
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("storage: %w: %s does not exist%s", ErrNotSnapshot, p, suffix)
	case err != nil:
		return fmt.Errorf("storage: %w", err)
	case !fi.IsDir():
		return fmt.Errorf("storage: %w: %s is a file, not a snapshot directory or its %s%s", ErrNotSnapshot, p, MetadataFile, suffix)
	}
	return nil
}

// readSnapshotMetadata reads the _metadata of the snapshot directory r (the location p
// names); a missing one wraps ErrNotSnapshot (suffix ends the message).
func readSnapshotMetadata(ctx context.Context, r Root, p, suffix string) (*pb.CheckpointMetadata, error) {
	md, err := r.ReadMetadata(ctx, ".")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("storage: %w: %s has no %s%s", ErrNotSnapshot, p, MetadataFile, suffix)
	}
	return md, err
}

// snapshotDirOf is the directory of the snapshot at p (its directory or its _metadata): a
// local path made absolute, or a URI without a trailing slash.
func snapshotDirOf(p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("storage: %w: empty path", ErrNotSnapshot)
	}
	if IsURI(p) {
		if err := CheckLocation(p); err != nil {
			return "", err
		}
		dir := strings.TrimRight(p, "/")
		if parent, base, ok := splitLocation(dir); ok && base == MetadataFile {
			dir = parent
		}
		return dir, nil
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("storage: %w", err)
	}
	if filepath.Base(abs) == MetadataFile {
		return filepath.Dir(abs), nil
	}
	return abs, nil
}

// splitLocation splits a snapshot directory (a clean absolute path, or a URI without a
// trailing slash) into the location it is in and its name; ok is false for a root (/, or a
// bucket's root).
func splitLocation(dir string) (parent, base string, ok bool) {
	if IsURI(dir) {
		scheme, rest, _ := strings.Cut(dir, "://")
		i := strings.LastIndex(rest, "/")
		if i <= 0 || i == len(rest)-1 {
			return "", "", false
		}
		return scheme + "://" + rest[:i], rest[i+1:], true
	}
	parent, base = filepath.Dir(dir), filepath.Base(dir)
	if parent == dir || base == "." || base == string(filepath.Separator) {
		return "", "", false
	}
	return parent, base, true
}

// DisposeSavepoint deletes the savepoint at p (its directory or its _metadata file). It
// refuses a path that is not a savepoint — a checkpoint, a directory without _metadata — and
// deletes nothing then. A savepoint whose files fail verification is still deleted. It is
// DisposeSavepointAt without S3 settings.
func DisposeSavepoint(p string) (string, error) {
	return DisposeSavepointAt(context.Background(), p, S3Settings{})
}

// DisposeSavepointAt is DisposeSavepoint of a local path or a URI (s3://…/savepoint-…, or its
// _metadata), reached with s: on S3 it deletes every object of the savepoint. It returns the
// savepoint's directory.
func DisposeSavepointAt(ctx context.Context, p string, s S3Settings) (string, error) {
	dir, err := snapshotDirOf(p)
	if err != nil {
		return "", err
	}
	if err := checkLocalDir(p, dir, "; nothing deleted"); err != nil {
		return "", err
	}
	own, err := OpenRoot(dir, s)
	if err != nil {
		return "", err
	}
	md, err := readSnapshotMetadata(ctx, own, p, "; nothing deleted")
	if err != nil && (errors.Is(err, ErrNotSnapshot) || !errors.Is(err, ErrCorrupt)) {
		return "", err
	}
	if err == nil && !md.GetSavepoint() {
		return "", fmt.Errorf("storage: %s is checkpoint %d, not a savepoint: its job's retention deletes it; nothing deleted", p, md.GetCheckpointId())
	}
	parent, base, ok := splitLocation(dir)
	if err != nil && (!ok || !strings.HasPrefix(base, "savepoint-")) {
		return "", fmt.Errorf("storage: %s is not a readable savepoint (%w); nothing deleted", p, err)
	}
	if !ok {
		return "", fmt.Errorf("storage: %s is a savepoint at the root of its location; it is not deleted (move it into a directory of its own to dispose of it)", p)
	}
	if err := discardLocation(ctx, parent, base, s); err != nil {
		return "", fmt.Errorf("storage: dispose savepoint %s: %w", dir, err)
	}
	return dir, nil
}

// discardLocation deletes the directory name (every object under it) in the location parent
// (a local path or a URI reached with s); a missing one is fine.
func discardLocation(ctx context.Context, parent, name string, s S3Settings) error {
	fsys, err := Open(parent, s)
	if err != nil {
		return err
	}
	return fsys.DeleteAll(ctx, name)
}

// DiscardSnapshotDir deletes the snapshot directory dir (a savepoint's own, or a
// checkpoint's chk-<n>; a local path or a URI reached with s), every object under it; a
// missing one is fine. A root (/, a bucket's root), a relative path and a malformed URI are
// refused.
func DiscardSnapshotDir(ctx context.Context, dir string, s S3Settings) error {
	switch {
	case IsURI(dir):
		if err := CheckLocation(dir); err != nil {
			return fmt.Errorf("storage: discard: %w", err)
		}
		dir = strings.TrimRight(dir, "/")
	case !filepath.IsAbs(dir):
		return fmt.Errorf("storage: discard %q: not an absolute path", dir)
	default:
		dir = filepath.Clean(dir)
	}
	parent, base, ok := splitLocation(dir)
	if !ok {
		return fmt.Errorf("storage: discard %s: a root is no snapshot directory", dir)
	}
	if err := discardLocation(ctx, parent, base, s); err != nil {
		return fmt.Errorf("storage: discard %s: %w", dir, err)
	}
	return nil
}

// OperatorUID is the name an operator's state has in snapshots (OperatorSubtaskState.operator):
// its uid, or its name in graphs built before operators had uids.
func OperatorUID(op *pb.Operator) string {
	if u := op.GetUid(); u != "" {
		return u
	}
	return op.GetName()
}

package storage

import (
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
// elsewhere (another cluster) and still restores. Its _metadata says it is a savepoint.

// NewSavepointDir returns a fresh savepoint directory name under target for a job (it does
// not create it). target must be absolute: every process resolves it the same way.
func NewSavepointDir(target, jobID string) (string, error) {
	if !filepath.IsAbs(target) {
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
	return filepath.Join(target, "savepoint-"+short+"-"+hex.EncodeToString(b[:])), nil
}

// Snapshot is a completed checkpoint or savepoint found by its path.
type Snapshot struct {
	// Root is the directory its state file paths are relative to: a checkpoint's job
	// directory, or a savepoint's own directory.
	Root string
	// Path is its directory relative to Root: "chk-<n>", or "." for a savepoint.
	Path string
	// Dir is its directory (Root/Path), the one holding _metadata.
	Dir      string
	Metadata *pb.CheckpointMetadata
}

// ErrNotSnapshot is wrapped by the error of OpenSnapshot for a path that is neither a
// savepoint nor a completed checkpoint.
var ErrNotSnapshot = errors.New("not a savepoint or completed checkpoint")

// OpenSnapshot finds the savepoint or completed checkpoint at p (its directory or its
// _metadata file) and verifies it: the metadata's checksum and the size and CRC-32C of every
// state file it names. A corrupt one is an error wrapping ErrCorrupt that names the file.
func OpenSnapshot(p string) (*Snapshot, error) {
	if p == "" {
		return nil, fmt.Errorf("storage: %w: empty path", ErrNotSnapshot)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	dir := abs
	if filepath.Base(abs) == MetadataFile {
		dir = filepath.Dir(abs)
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("storage: %w: %s does not exist", ErrNotSnapshot, p)
	case err != nil:
		return nil, fmt.Errorf("storage: %w", err)
	case !fi.IsDir():
		return nil, fmt.Errorf("storage: %w: %s is a file, not a snapshot directory or its %s", ErrNotSnapshot, p, MetadataFile)
	}
	if _, err := os.Stat(filepath.Join(dir, MetadataFile)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("storage: %w: %s has no %s", ErrNotSnapshot, p, MetadataFile)
		}
		return nil, fmt.Errorf("storage: %w", err)
	}
	s := &Snapshot{Root: dir, Path: ".", Dir: dir}
	// A checkpoint's paths are relative to its job directory; read the metadata first to
	// know which kind it is.
	md, err := ReadMetadata(dir, ".")
	if err != nil {
		return nil, err
	}
	if !md.GetSavepoint() {
		s.Root, s.Path = filepath.Dir(dir), filepath.Base(dir)
		if !strings.HasPrefix(s.Path, "chk-") {
			return nil, fmt.Errorf("storage: %w: %s holds a checkpoint's metadata but is not a chk-<n> directory", ErrCorrupt, p)
		}
	}
	if s.Metadata, err = Verify(s.Root, s.Path); err != nil {
		return nil, err
	}
	return s, nil
}

// DisposeSavepoint deletes the savepoint at p (its directory or its _metadata file). It
// refuses a path that is not a savepoint — a checkpoint, a directory without _metadata — and
// deletes nothing then. A savepoint whose files fail verification is still deleted.
func DisposeSavepoint(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("storage: %w", err)
	}
	dir := abs
	if filepath.Base(abs) == MetadataFile {
		dir = filepath.Dir(abs)
	}
	if _, err := os.Stat(filepath.Join(dir, MetadataFile)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("storage: %w: %s has no %s; nothing deleted", ErrNotSnapshot, p, MetadataFile)
		}
		return "", fmt.Errorf("storage: %w", err)
	}
	md, err := ReadMetadata(dir, ".")
	if err != nil && !errors.Is(err, ErrCorrupt) {
		return "", err
	}
	if err == nil && !md.GetSavepoint() {
		return "", fmt.Errorf("storage: %s is checkpoint %d, not a savepoint: its job's retention deletes it; nothing deleted", p, md.GetCheckpointId())
	}
	if err != nil && !strings.HasPrefix(filepath.Base(dir), "savepoint-") {
		return "", fmt.Errorf("storage: %s is not a readable savepoint (%w); nothing deleted", p, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("storage: dispose savepoint %s: %w", dir, err)
	}
	return dir, nil
}

// OperatorUID is the name an operator's state has in snapshots (OperatorSubtaskState.operator):
// its uid, or its name in graphs built before operators had uids.
func OperatorUID(op *pb.Operator) string {
	if u := op.GetUid(); u != "" {
		return u
	}
	return op.GetName()
}

// Package storage keeps checkpoints in a directory, local or shared (a mount every
// JobManager and TaskManager sees under the same path). The layout follows Flink's
// filesystem checkpoint storage:
//
//	<base>/<job-id>/chk-<n>/<state files>   written by tasks (CreateFile)
//	<base>/<job-id>/chk-<n>/_metadata       written last by the JobManager (WriteMetadata)
//
// A checkpoint directory without _metadata is not a completed checkpoint. Every file is
// protected by a CRC-32C (Castagnoli): state files through the size and checksum in their
// pb.FileHandle, the metadata file through a 4-byte big-endian trailer. Reads verify them and
// report a mismatch as an error wrapping ErrCorrupt that names the file.
//
// Paths in handles and metadata are relative to the job directory and use forward slashes, so
// a job directory can be moved or mounted elsewhere.
//
// # Storage locations
//
// FS is a storage location by URI (Open): a local directory (Local: temporary file, fsync,
// rename, directory fsync) or s3://bucket/prefix on any S3-compatible server (S3, with
// github.com/minio/minio-go/v7). Objects appear whole when their writer's Close commits
// them, stream in and out (multipart uploads above one part), and are listed by name prefix.
// The checkpoint functions above still take local paths; issue 18 moves them, savepoints and
// the file sink onto FS. S3 locations are configured by Flink's keys, cluster settings that
// a job cannot set (S3SettingsFrom):
//
//	s3.endpoint           host[:port] (HTTPS) or http(s)://host[:port]; unset: AWS
//	s3.access-key         unset with s3.secret-key: AWS_ACCESS_KEY_ID
//	s3.secret-key         unset with s3.access-key: AWS_SECRET_ACCESS_KEY; never logged or in an error
//	s3.path.style.access  true: http://endpoint/bucket (most S3-compatible servers); false: http://bucket.endpoint
//	s3.region             unset: AWS_REGION, else asked of the server
//
// A missing object is an error wrapping fs.ErrNotExist; a missing bucket, refused
// credentials and an endpoint that does not answer wrap ErrNoSuchBucket, ErrAccessDenied and
// ErrUnreachable, naming the location and the setting to check.
package storage

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/goflink/goflink/internal/dirsync"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// MetadataFile is the name of a completed checkpoint's metadata file.
const MetadataFile = "_metadata"

// MetadataVersion is the version WriteMetadata stamps on metadata without one; ReadMetadata
// rejects newer versions.
const MetadataVersion = 1

// ErrCorrupt is wrapped by every error about checkpoint data that fails verification: a
// wrong size or checksum, a truncated metadata file, a referenced file that is missing.
var ErrCorrupt = errors.New("corrupt checkpoint data")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC-32C (Castagnoli) of b, as stored in pb.FileHandle.Crc32C.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// JobDir is the checkpoint directory of a job: <base>/<job-id>.
func JobDir(base, jobID string) string { return filepath.Join(base, jobID) }

// CheckpointDirName is the name of checkpoint id's directory in the job directory: "chk-<id>".
// It is also the path ReadMetadata and Verify take.
func CheckpointDirName(id int64) string { return "chk-" + strconv.FormatInt(id, 10) }

// FileWriter writes one state file of a checkpoint, computing its size and CRC-32C as it
// goes. Finish it with Commit, or Abort it; it is not safe for concurrent use.
type FileWriter struct {
	f    *os.File
	w    *bufio.Writer
	crc  hash.Hash32
	size int64
	rel  string // path relative to the job directory, slash-separated
	done bool
}

// CreateFile creates chk-<id>/<name> in the job directory (creating the directories) for
// writing. name must be a plain file name, not starting with "." or "_" (reserved for the
// metadata and temporary files). The file must not exist: every writer of a checkpoint must
// use its own name (e.g. operator and subtask).
func CreateFile(jobDir string, id int64, name string) (*FileWriter, error) {
	return createFile(jobDir, CheckpointDirName(id), name)
}

// CreateSavepointFile creates <dir>/<name> in a savepoint's directory, as CreateFile does in a
// checkpoint's; its handle's path is name alone (relative to the savepoint's directory).
func CreateSavepointFile(dir, name string) (*FileWriter, error) {
	return createFile(dir, ".", name)
}

// createFile creates <root>/<sub>/<name>; the handle's path is <sub>/<name>, relative to root.
func createFile(root, sub, name string) (*FileWriter, error) {
	if name == "" || name != filepath.Base(name) || strings.ContainsAny(name, `/\`) ||
		strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
		return nil, fmt.Errorf("storage: invalid state file name %q", name)
	}
	dir := filepath.Join(root, sub)
	// The job's and the checkpoint's directories are durable before anything is written in
	// them; the state files' own entries are made durable with _metadata (writeMetadata).
	if err := dirsync.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	return &FileWriter{
		f:   f,
		w:   bufio.NewWriterSize(f, 256<<10),
		crc: crc32.New(castagnoli),
		rel: path.Join(sub, name),
	}, nil
}

// Write appends p to the file.
func (w *FileWriter) Write(p []byte) (int, error) {
	if w.done {
		return 0, fmt.Errorf("storage: write to %s after Commit or Abort", w.rel)
	}
	n, err := w.w.Write(p)
	w.crc.Write(p[:n])
	w.size += int64(n)
	if err != nil {
		return n, fmt.Errorf("storage: %s: %w", w.rel, err)
	}
	return n, nil
}

// Commit flushes, fsyncs and closes the file and returns its handle. On error the file is
// removed.
func (w *FileWriter) Commit() (*pb.FileHandle, error) {
	if w.done {
		return nil, fmt.Errorf("storage: %s already committed or aborted", w.rel)
	}
	w.done = true
	err := w.w.Flush()
	if err == nil {
		err = w.f.Sync()
	}
	if err = errors.Join(err, w.f.Close()); err != nil {
		os.Remove(w.f.Name())
		return nil, fmt.Errorf("storage: writing %s: %w", w.rel, err)
	}
	return &pb.FileHandle{Path: w.rel, Size: w.size, Crc32C: w.crc.Sum32()}, nil
}

// Abort closes and removes the file. It is a no-op after Commit or Abort.
func (w *FileWriter) Abort() error {
	if w.done {
		return nil
	}
	w.done = true
	w.f.Close()
	if err := os.Remove(w.f.Name()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("storage: %w", err)
	}
	return nil
}

// localPath resolves a slash-separated path relative to the job directory, refusing paths
// that leave it.
func localPath(jobDir, rel string) (string, error) {
	p := filepath.FromSlash(rel)
	if !filepath.IsLocal(p) {
		return "", fmt.Errorf("storage: path %q is not inside the job directory", rel)
	}
	return filepath.Join(jobDir, p), nil
}

// ReadFile reads the file of h and verifies its size and CRC-32C. A mismatch or a missing file
// is an error wrapping ErrCorrupt (a missing file also wraps fs.ErrNotExist).
func ReadFile(jobDir string, h *pb.FileHandle) ([]byte, error) {
	p, err := localPath(jobDir, h.GetPath())
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, openError(h.GetPath(), err)
	}
	if err := check(h, int64(len(b)), Checksum(b)); err != nil {
		return nil, err
	}
	return b, nil
}

// verifyFile checks h's file without holding it in memory.
func verifyFile(jobDir string, h *pb.FileHandle) error {
	p, err := localPath(jobDir, h.GetPath())
	if err != nil {
		return err
	}
	f, err := os.Open(p)
	if err != nil {
		return openError(h.GetPath(), err)
	}
	defer f.Close()
	crc := crc32.New(castagnoli)
	n, err := io.Copy(crc, f)
	if err != nil {
		return fmt.Errorf("storage: reading %s: %w", h.GetPath(), err)
	}
	return check(h, n, crc.Sum32())
}

func openError(rel string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("storage: %w: %s is missing: %w", ErrCorrupt, rel, err)
	}
	return fmt.Errorf("storage: %w", err)
}

func check(h *pb.FileHandle, size int64, crc uint32) error {
	if size != h.GetSize() {
		return fmt.Errorf("storage: %w: %s has %d bytes, expected %d", ErrCorrupt, h.GetPath(), size, h.GetSize())
	}
	if crc != h.GetCrc32C() {
		return fmt.Errorf("storage: %w: %s crc32c %08x, expected %08x", ErrCorrupt, h.GetPath(), crc, h.GetCrc32C())
	}
	return nil
}

// WriteMetadata publishes md as chk-<id>/_metadata atomically: the marshalled message and its
// CRC-32C trailer go to a temporary file, which is fsynced and renamed; then the checkpoint
// and job directories are fsynced. It returns the checkpoint's path relative to the job
// directory ("chk-<id>"), the path ReadMetadata takes. md.Version is set to MetadataVersion
// when zero.
func WriteMetadata(jobDir string, md *pb.CheckpointMetadata) (string, error) {
	if md.GetCheckpointId() <= 0 {
		return "", fmt.Errorf("storage: metadata of invalid checkpoint id %d", md.GetCheckpointId())
	}
	chk := CheckpointDirName(md.GetCheckpointId())
	if err := writeMetadata(filepath.Join(jobDir, chk), md); err != nil {
		return "", fmt.Errorf("storage: writing %s/%s: %w", chk, MetadataFile, err)
	}
	return chk, nil
}

// WriteSavepointMetadata publishes md as <dir>/_metadata, as WriteMetadata does for a
// checkpoint; md.Savepoint is set. The savepoint is complete once it returns.
func WriteSavepointMetadata(dir string, md *pb.CheckpointMetadata) error {
	md = proto.CloneOf(md)
	md.Savepoint = true
	if err := writeMetadata(dir, md); err != nil {
		return fmt.Errorf("storage: writing savepoint metadata %s: %w", filepath.Join(dir, MetadataFile), err)
	}
	return nil
}

// writeMetadata writes dir/_metadata atomically and fsyncs dir and its parent.
func writeMetadata(dir string, md *pb.CheckpointMetadata) error {
	if md.GetVersion() == 0 {
		md = proto.CloneOf(md)
		md.Version = MetadataVersion
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(md)
	if err != nil {
		return fmt.Errorf("marshal metadata: %w", err)
	}
	b = binary.BigEndian.AppendUint32(b, Checksum(b))
	if err := dirsync.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+MetadataFile+"-*.tmp")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if err = errors.Join(err, tmp.Close()); err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, MetadataFile))
	}
	if err != nil {
		os.Remove(tmp.Name())
		return err
	}
	// The directory holds the state files and _metadata; its parent holds its entry.
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := syncDir(d); err != nil {
			return err
		}
	}
	return nil
}

// ReadMetadata reads and verifies the metadata of the checkpoint at chkPath (relative to the
// job directory, as WriteMetadata returned it).
func ReadMetadata(jobDir, chkPath string) (*pb.CheckpointMetadata, error) {
	rel := path.Join(filepath.ToSlash(chkPath), MetadataFile)
	p, err := localPath(jobDir, rel)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, openError(rel, err)
	}
	if len(b) < 4 {
		return nil, fmt.Errorf("storage: %w: %s is truncated (%d bytes)", ErrCorrupt, rel, len(b))
	}
	body, trailer := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc := Checksum(body); crc != trailer {
		return nil, fmt.Errorf("storage: %w: %s crc32c %08x, trailer says %08x (truncated or modified)", ErrCorrupt, rel, crc, trailer)
	}
	md := &pb.CheckpointMetadata{}
	if err := proto.Unmarshal(body, md); err != nil {
		return nil, fmt.Errorf("storage: %w: %s: %w", ErrCorrupt, rel, err)
	}
	if md.GetVersion() > MetadataVersion {
		return nil, fmt.Errorf("storage: %s has metadata version %d, this build reads up to %d", rel, md.GetVersion(), MetadataVersion)
	}
	// A checkpoint directory ("chk-<id>") holds the metadata of its own checkpoint.
	if s, ok := strings.CutPrefix(path.Base(filepath.ToSlash(chkPath)), "chk-"); ok {
		if id, err := strconv.ParseInt(s, 10, 64); err == nil && id != md.GetCheckpointId() {
			return nil, fmt.Errorf("storage: %w: %s holds checkpoint %d", ErrCorrupt, rel, md.GetCheckpointId())
		}
	}
	return md, nil
}

// Verify reads the metadata of the checkpoint at chkPath and checks the size and CRC-32C of
// every state file it references.
func Verify(jobDir, chkPath string) (*pb.CheckpointMetadata, error) {
	md, err := ReadMetadata(jobDir, chkPath)
	if err != nil {
		return nil, err
	}
	seen := map[string]*pb.FileHandle{} // verified files by path
	for _, st := range md.GetStates() {
		k := st.GetKeyed()
		h := k.GetFile()
		if h == nil {
			continue
		}
		for i, off := range k.GetOffsets() {
			if off < 0 || off > h.GetSize() || (i > 0 && off < k.GetOffsets()[i-1]) {
				return nil, fmt.Errorf("storage: %w: keyed state of %s subtask %d: key group offset %d out of order or beyond %s (%d bytes)",
					ErrCorrupt, st.GetOperator(), st.GetSubtask(), off, h.GetPath(), h.GetSize())
			}
		}
		// Subtasks of a chain share their file; every handle of it must say the same.
		if prev := seen[h.GetPath()]; prev != nil {
			if prev.GetSize() != h.GetSize() || prev.GetCrc32C() != h.GetCrc32C() {
				return nil, fmt.Errorf("storage: %w: keyed state of %s subtask %d names %s with %d bytes and crc32c %08x, an earlier handle with %d bytes and crc32c %08x",
					ErrCorrupt, st.GetOperator(), st.GetSubtask(), h.GetPath(), h.GetSize(), h.GetCrc32C(), prev.GetSize(), prev.GetCrc32C())
			}
			continue
		}
		seen[h.GetPath()] = h
		if err := verifyFile(jobDir, h); err != nil {
			return nil, err
		}
	}
	return md, nil
}

// DiscardAt removes the snapshot at path relative to root (a checkpoint's "chk-<n>" in its job
// directory, or "." for a savepoint's own directory); a missing one is fine.
func DiscardAt(root, rel string) error {
	p, err := localPath(root, rel)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(p); err != nil {
		return fmt.Errorf("storage: discard %s: %w", p, err)
	}
	return nil
}

// Discard removes checkpoint id's directory; a missing one is fine.
func Discard(jobDir string, id int64) error {
	if err := os.RemoveAll(filepath.Join(jobDir, CheckpointDirName(id))); err != nil {
		return fmt.Errorf("storage: discard checkpoint %d: %w", id, err)
	}
	return nil
}

// syncDir fsyncs a directory so the entries created or renamed in it are durable.
func syncDir(dir string) error {
	if err := dirsync.Sync(dir); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	return nil
}

// Package storage keeps checkpoints in a directory, local or shared (a mount every
// JobManager and TaskManager sees under the same path), or under an S3 prefix. The layout
// follows Flink's filesystem checkpoint storage:
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
// Root is a checkpoint (or savepoint) directory in an FS; the functions that take a local
// directory are a local Root's. Checkpoints, savepoints (OpenSnapshotAt,
// DisposeSavepointAt) and the file sink's output may be on S3. The file sink writes its part
// files with S3's multipart operations directly (multipart.go: NewUpload, UploadPart,
// CompleteUpload, AbortUpload, ListUploads), keeping an upload in its checkpoint state until
// it commits.
// S3 locations are configured by Flink's keys, cluster settings that
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
	"context"
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
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/goflink/goflink/internal/faultinject"
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

// JobDir is the checkpoint directory of a job: <base>/<job-id>; base may be a URI
// (s3://bucket/prefix).
func JobDir(base, jobID string) string { return JoinPath(base, jobID) }

// JoinPath is the location of rel (slash-separated) in the directory or URI base.
func JoinPath(base, rel string) string {
	if IsURI(base) {
		if rel = path.Clean(rel); rel == "." {
			return base
		}
		return strings.TrimSuffix(base, "/") + "/" + rel
	}
	return filepath.Join(base, filepath.FromSlash(rel))
}

// IsURI reports whether location is a URI (s3://…, file://…) rather than a local path.
func IsURI(location string) bool { return strings.Contains(location, "://") }

// Root is a directory of snapshots in an FS: a job's checkpoint directory, holding
// chk-<n>/<state files> and chk-<n>/_metadata, or a savepoint's directory. Handles and
// checkpoint paths are relative to it.
type Root struct {
	fs FS
}

// NewRoot is the snapshot directory at the root of fsys.
func NewRoot(fsys FS) Root { return Root{fs: fsys} }

// OpenRoot is the snapshot directory at location (a local path or a URI, see Open).
func OpenRoot(location string, s S3Settings) (Root, error) {
	fsys, err := Open(location, s)
	if err != nil {
		return Root{}, err
	}
	return Root{fs: fsys}, nil
}

// String is the directory's location.
func (r Root) String() string { return r.fs.String() }

// CheckpointDirName is the name of checkpoint id's directory in the job directory: "chk-<id>".
// It is also the path ReadMetadata and Verify take.
func CheckpointDirName(id int64) string { return "chk-" + strconv.FormatInt(id, 10) }

// FileWriter writes one state file of a checkpoint, computing its size and CRC-32C as it
// goes. Finish it with Commit, or Abort it; it is not safe for concurrent use.
type FileWriter struct {
	w    ObjectWriter
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
	return NewRoot(NewLocal(jobDir)).CreateFile(context.Background(), id, name)
}

// CreateFile creates chk-<id>/<name> in r, as the function CreateFile does in a local job
// directory. ctx governs the write up to Commit.
func (r Root) CreateFile(ctx context.Context, id int64, name string) (*FileWriter, error) {
	return r.createFile(ctx, CheckpointDirName(id), name)
}

// CreateSavepointFile creates <dir>/<name> in a savepoint's directory, as CreateFile does in a
// checkpoint's; its handle's path is name alone (relative to the savepoint's directory).
func CreateSavepointFile(dir, name string) (*FileWriter, error) {
	return NewRoot(NewLocal(dir)).CreateSavepointFile(context.Background(), name)
}

// CreateSavepointFile creates the state file name in r, a savepoint's directory (local or
// s3://, see OpenRoot), as the function CreateSavepointFile does in a local one.
func (r Root) CreateSavepointFile(ctx context.Context, name string) (*FileWriter, error) {
	return r.createFile(ctx, ".", name)
}

// createFile creates <sub>/<name> in r; the handle's path is <sub>/<name>.
func (r Root) createFile(ctx context.Context, sub, name string) (*FileWriter, error) {
	if name == "" || name != filepath.Base(name) || strings.ContainsAny(name, `/\`) ||
		strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
		return nil, fmt.Errorf("storage: invalid state file name %q", name)
	}
	rel := path.Join(sub, name)
	// A guard against two writers of one name (an FS replaces objects): not atomic, but the
	// names are unique by construction (operator, subtask, attempt).
	if _, err := r.fs.Stat(ctx, rel); err == nil {
		return nil, fmt.Errorf("storage: state file %s: %w", rel, fs.ErrExist)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	// A local FS makes the directories durable as it creates them, and the file's entry when
	// Commit closes it.
	w, err := r.fs.Create(ctx, rel)
	if err != nil {
		return nil, err
	}
	return &FileWriter{w: w, crc: crc32.New(castagnoli), rel: rel}, nil
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

// Commit commits the file (durably: see FS) and returns its handle. On error nothing is
// left.
func (w *FileWriter) Commit() (*pb.FileHandle, error) {
	if w.done {
		return nil, fmt.Errorf("storage: %s already committed or aborted", w.rel)
	}
	w.done = true
	faultinject.Hit(faultinject.StateUpload)
	if err := w.w.Close(); err != nil {
		return nil, err // names the file's location
	}
	return &pb.FileHandle{Path: w.rel, Size: w.size, Crc32C: w.crc.Sum32()}, nil
}

// Abort discards the file. It is a no-op after Commit or Abort.
func (w *FileWriter) Abort() error {
	if w.done {
		return nil
	}
	w.done = true
	return w.w.Abort()
}

// objectName resolves a slash-separated path relative to r, refusing paths that leave it.
func objectName(rel string) (string, error) {
	p := path.Clean(rel)
	if rel == "" || !filepath.IsLocal(filepath.FromSlash(p)) || !fs.ValidPath(p) || p == "." {
		return "", fmt.Errorf("storage: path %q is not inside the job directory", rel)
	}
	return p, nil
}

// ReadFile reads the file of h and verifies its size and CRC-32C. A mismatch or a missing file
// is an error wrapping ErrCorrupt (a missing file also wraps fs.ErrNotExist).
func ReadFile(jobDir string, h *pb.FileHandle) ([]byte, error) {
	return NewRoot(NewLocal(jobDir)).ReadFile(context.Background(), h)
}

// ReadFile reads the file of h in r whole, as the function ReadFile does in a local directory.
// State files can be large: a restore streams them with OpenFile.
func (r Root) ReadFile(ctx context.Context, h *pb.FileHandle) ([]byte, error) {
	f, err := r.OpenFile(ctx, h)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(f) // at most the handle's size: OpenFile reads no further
	if err != nil {
		return nil, err
	}
	return b, nil
}

// OpenFile opens the file of h in r for reading from its start. The reader counts the bytes
// and computes the CRC-32C as they are read. At the end of the file its Read returns io.EOF
// only when size and checksum match h; otherwise it returns an error wrapping ErrCorrupt that
// names the file, as do a Read beyond h's size (found without reading the file further) and a
// Close after every byte of h was read but not the end of the file. A missing file is an
// error wrapping ErrCorrupt and fs.ErrNotExist. What a Read returned before the end is not
// verified yet: a consumer must read to io.EOF before it trusts the contents.
func (r Root) OpenFile(ctx context.Context, h *pb.FileHandle) (io.ReadCloser, error) {
	name, err := objectName(h.GetPath())
	if err != nil {
		return nil, err
	}
	f, err := r.fs.Open(ctx, name)
	if err != nil {
		return nil, openError(h.GetPath(), err)
	}
	return &verifyingReader{r: f, h: h, crc: crc32.New(castagnoli)}, nil
}

// verifyingReader reads one state file, verifying it against its handle at the end.
type verifyingReader struct {
	r   io.ReadCloser
	h   *pb.FileHandle
	crc hash.Hash32
	n   int64 // bytes read
	err error // sticky: io.EOF once verified, or the error that ended the reading
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	// Ask for at most one byte beyond the handle's size: a longer file is corrupt, and is
	// not read on.
	if rest := max(v.h.GetSize(), 0) - v.n + 1; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := v.r.Read(p)
	if v.n+int64(n) > v.h.GetSize() {
		n = int(v.h.GetSize() - v.n)
		v.crc.Write(p[:n])
		v.n += int64(n)
		v.err = fmt.Errorf("storage: %w: %s has more than %d bytes, expected %d", ErrCorrupt, v.h.GetPath(), v.h.GetSize(), v.h.GetSize())
		return n, v.err
	}
	v.crc.Write(p[:n])
	v.n += int64(n)
	switch {
	case err == io.EOF:
		if v.err = check(v.h, v.n, v.crc.Sum32()); v.err == nil {
			v.err = io.EOF
		}
	case err != nil:
		v.err = fmt.Errorf("storage: reading %s: %w", v.h.GetPath(), err)
	}
	return n, v.err
}

// Close closes the file. After every byte of the handle was read it verifies the file if
// Read has not yet: it checks that the file ends there and that the checksum matches.
func (v *verifyingReader) Close() error {
	if v.err == nil && v.n == v.h.GetSize() {
		var b [1]byte
		for range 100 { // a Read may return neither bytes nor an error, but not forever
			if _, _ = v.Read(b[:]); v.err != nil {
				break
			}
		}
	}
	cerr := v.r.Close()
	if v.err != nil && !errors.Is(v.err, io.EOF) && errors.Is(v.err, ErrCorrupt) {
		return v.err
	}
	return cerr
}

// verifyFile checks h's file without holding it in memory.
func (r Root) verifyFile(ctx context.Context, h *pb.FileHandle) error {
	f, err := r.OpenFile(ctx, h)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(io.Discard, f)
	return err
}

func openError(rel string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("storage: %w: %s is missing: %w", ErrCorrupt, rel, err)
	}
	return err
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
// directory is fsynced (its entry in the job directory was made durable when it was
// created). It returns the checkpoint's path relative to the job directory ("chk-<id>"), the
// path ReadMetadata takes. md.Version is set to MetadataVersion when zero.
func WriteMetadata(jobDir string, md *pb.CheckpointMetadata) (string, error) {
	return NewRoot(NewLocal(jobDir)).WriteMetadata(context.Background(), md)
}

// WriteMetadata publishes md as chk-<id>/_metadata in r, as the function WriteMetadata does
// in a local job directory: one object that appears whole, written after the state files, so
// a checkpoint without it does not exist.
func (r Root) WriteMetadata(ctx context.Context, md *pb.CheckpointMetadata) (string, error) {
	if md.GetCheckpointId() <= 0 {
		return "", fmt.Errorf("storage: metadata of invalid checkpoint id %d", md.GetCheckpointId())
	}
	chk := CheckpointDirName(md.GetCheckpointId())
	if err := r.writeMetadata(ctx, chk, md); err != nil {
		return "", fmt.Errorf("storage: writing %s/%s: %w", chk, MetadataFile, err)
	}
	return chk, nil
}

// WriteSavepointMetadata publishes md as <dir>/_metadata, as WriteMetadata does for a
// checkpoint; md.Savepoint is set. The savepoint is complete once it returns.
func WriteSavepointMetadata(dir string, md *pb.CheckpointMetadata) error {
	return NewRoot(NewLocal(dir)).WriteSavepointMetadata(context.Background(), md)
}

// WriteSavepointMetadata publishes md as _metadata in r, a savepoint's directory, as the
// function WriteSavepointMetadata does in a local one: one object that appears whole, after
// the state files.
func (r Root) WriteSavepointMetadata(ctx context.Context, md *pb.CheckpointMetadata) error {
	md = proto.CloneOf(md)
	md.Savepoint = true
	if err := r.writeMetadata(ctx, ".", md); err != nil {
		return fmt.Errorf("storage: writing savepoint metadata %s: %w", JoinPath(r.String(), MetadataFile), err)
	}
	return nil
}

// writeMetadata writes <sub>/_metadata in r, whole or not at all.
func (r Root) writeMetadata(ctx context.Context, sub string, md *pb.CheckpointMetadata) error {
	if md.GetVersion() == 0 {
		md = proto.CloneOf(md)
		md.Version = MetadataVersion
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(md)
	if err != nil {
		return fmt.Errorf("marshal metadata: %w", err)
	}
	b = binary.BigEndian.AppendUint32(b, Checksum(b))
	w, err := r.fs.Create(ctx, path.Join(sub, MetadataFile))
	if err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		return errors.Join(err, w.Abort())
	}
	return w.Close()
}

// ReadMetadata reads and verifies the metadata of the checkpoint at chkPath (relative to the
// job directory, as WriteMetadata returned it).
func ReadMetadata(jobDir, chkPath string) (*pb.CheckpointMetadata, error) {
	return NewRoot(NewLocal(jobDir)).ReadMetadata(context.Background(), chkPath)
}

// maxMetadataSize bounds the metadata ReadMetadata reads: it holds handles, not state.
const maxMetadataSize = 256 << 20

// ReadMetadata reads and verifies the metadata of the checkpoint at chkPath in r, as the
// function ReadMetadata does in a local job directory.
func (r Root) ReadMetadata(ctx context.Context, chkPath string) (*pb.CheckpointMetadata, error) {
	rel := path.Join(filepath.ToSlash(chkPath), MetadataFile)
	name, err := objectName(rel)
	if err != nil {
		return nil, err
	}
	f, err := r.fs.Open(ctx, name)
	if err != nil {
		return nil, openError(rel, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxMetadataSize+1))
	if err != nil {
		return nil, fmt.Errorf("storage: reading %s: %w", rel, err)
	}
	if len(b) > maxMetadataSize {
		return nil, fmt.Errorf("storage: %w: %s is larger than %d bytes", ErrCorrupt, rel, maxMetadataSize)
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
	return NewRoot(NewLocal(jobDir)).Verify(context.Background(), chkPath)
}

// Verify checks the checkpoint at chkPath in r, as the function Verify does in a local job
// directory.
func (r Root) Verify(ctx context.Context, chkPath string) (*pb.CheckpointMetadata, error) {
	md, err := r.ReadMetadata(ctx, chkPath)
	if err != nil {
		return nil, err
	}
	seen := map[string]*pb.FileHandle{} // verified files by path
	for _, st := range md.GetStates() {
		if err := r.verifyChannelState(ctx, st); err != nil {
			return nil, err
		}
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
		if err := r.verifyFile(ctx, h); err != nil {
			return nil, err
		}
	}
	return md, nil
}

// verifyChannelState checks the channel state file of st, if any: its size and CRC-32C, and
// that every channel's buffers lie inside it.
func (r Root) verifyChannelState(ctx context.Context, st *pb.OperatorSubtaskState) error {
	cs := st.GetChannelState()
	if cs == nil {
		return nil
	}
	h := cs.GetFile()
	if h == nil {
		return fmt.Errorf("storage: %w: channel state of %s subtask %d names no file", ErrCorrupt, st.GetOperator(), st.GetSubtask())
	}
	for _, loc := range append(slices.Clone(cs.GetInput()), cs.GetOutput()...) {
		if off, n := loc.GetOffset(), loc.GetSize(); off < 0 || n < 0 || off > h.GetSize() || n > h.GetSize()-off {
			return fmt.Errorf("storage: %w: channel state of %s subtask %d: buffers at %d+%d beyond %s (%d bytes)",
				ErrCorrupt, st.GetOperator(), st.GetSubtask(), off, n, h.GetPath(), h.GetSize())
		}
	}
	return r.verifyFile(ctx, h)
}

// CheckpointIDs lists the checkpoint directories (chk-<id>/) of r that hold any file, complete
// or not (on S3: or an upload in progress), by ID in ascending order. A job directory that
// does not exist holds none.
func (r Root) CheckpointIDs(ctx context.Context) ([]int64, error) {
	objs, err := r.fs.List(ctx, "chk-")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(objs))
	for _, o := range objs {
		names = append(names, o.Name)
	}
	// On S3 also the directories of uploads in progress: a large state file's, whose writer
	// died before it completed.
	if s3, ok := r.fs.(*S3); ok {
		ups, err := s3.ListUploads(ctx, "chk-")
		if err != nil {
			return nil, err
		}
		for _, u := range ups {
			names = append(names, u.Name)
		}
	}
	var ids []int64
	for _, name := range names {
		dir, _, ok := strings.Cut(name, "/")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimPrefix(dir, "chk-"), 10, 64)
		if err != nil || CheckpointDirName(n) != dir {
			continue // not one of ours
		}
		if len(ids) == 0 || ids[len(ids)-1] != n {
			ids = append(ids, n)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// DiscardAt removes the snapshot at path relative to root (a checkpoint's "chk-<n>" in its job
// directory, or "." for a savepoint's own directory); a missing one is fine.
func DiscardAt(root, rel string) error {
	p := filepath.FromSlash(rel)
	if !filepath.IsLocal(p) {
		return fmt.Errorf("storage: path %q is not inside the job directory", rel)
	}
	if err := os.RemoveAll(filepath.Join(root, p)); err != nil {
		return fmt.Errorf("storage: discard %s: %w", filepath.Join(root, p), err)
	}
	return nil
}

// Discard removes checkpoint id's directory; a missing one is fine.
func Discard(jobDir string, id int64) error {
	return NewRoot(NewLocal(jobDir)).Discard(context.Background(), CheckpointDirName(id))
}

// Discard removes the snapshot at rel in r (a checkpoint's "chk-<n>"), every object under it;
// a missing one is fine.
func (r Root) Discard(ctx context.Context, rel string) error {
	name, err := objectName(rel)
	if err != nil {
		return err
	}
	if err := r.fs.DeleteAll(ctx, name); err != nil {
		return fmt.Errorf("storage: discard %s: %w", rel, err)
	}
	return nil
}

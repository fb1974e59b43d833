package operator

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/goflink/goflink/internal/dirowner"
	"github.com/goflink/goflink/internal/dirsync"
	"github.com/goflink/goflink/record"
	"github.com/goflink/goflink/storage"
)

// Print writes each record as a JSON line to the TaskManager's standard output.
var Print = Define(Type{Name: "print", Role: RoleSink},
	func(*Planner) (struct{}, *Shape) { return struct{}{}, nil },
	func(_ struct{}, in, _ *record.Schema) (any, error) { return &printSink{schema: in}, nil })

// printSink writes one JSON object per record to the TaskManager's stdout, prefixed with
// "<subtask>> " when the sink runs in parallel (as Flink's print sink does). Lines are written
// in whole chunks so parallel sinks never interleave within a line. It is at-least-once at
// best: a restarted job prints again.
type printSink struct {
	Base
	schema *record.Schema
	prefix []byte
	buf    []byte
}

func (p *printSink) Open(ctx *Context, out Output) error {
	if ctx.Parallelism > 1 {
		p.prefix = strconv.AppendInt(nil, int64(ctx.Subtask+1), 10)
		p.prefix = append(p.prefix, "> "...)
	}
	return p.Base.Open(ctx, out)
}

func (p *printSink) Process(row record.Row) error {
	p.buf = append(p.buf, p.prefix...)
	p.buf = record.AppendJSON(p.buf, p.schema, row)
	p.buf = append(p.buf, '\n')
	if len(p.buf) >= 32<<10 {
		return p.Flush()
	}
	return nil
}

func (p *printSink) Flush() error {
	if len(p.buf) == 0 {
		return nil
	}
	_, err := p.ctx.Stdout.Write(p.buf)
	p.buf = p.buf[:0]
	return err
}

func (p *printSink) EndInput() error { return p.Flush() }
func (p *printSink) Close() error    { return p.Flush() }

// File writes records as JSON lines into part files under a directory or an S3 location
// (spec field path: DIR or s3://bucket/prefix; format json, the only one), exactly-once: see
// fileSink.
var File = Define(Type{Name: "file", Role: RoleSink, Fields: []string{"path", "format"}}, planFile,
	func(c fileConfig, in, _ *record.Schema) (any, error) {
		s := &fileSink{schema: in}
		if isS3Path(c.Path) {
			s.parts = &s3Parts{uri: c.Path, timeout: s3SinkTimeout, partSize: storage.PartSize}
		} else {
			s.parts = &localParts{dir: c.Path}
		}
		s.Bind("file sink", s)
		return s, nil
	})

type fileConfig struct {
	Path string `json:"path"`
}

// isS3Path reports whether a file sink's path is an S3 location rather than a directory.
func isS3Path(p string) bool {
	scheme, _, ok := strings.Cut(p, "://")
	return ok && strings.EqualFold(scheme, "s3")
}

// LocalPaths is the sink's directory, which it owns (PathNamer); none for an S3 location.
func (c fileConfig) LocalPaths() []LocalPath {
	if isS3Path(c.Path) {
		return nil
	}
	return []LocalPath{{Field: "path", Path: c.Path, Output: true}}
}

// Locations is the sink's S3 location, which it owns (LocationNamer); none for a directory.
func (c fileConfig) Locations() []Location {
	if !isS3Path(c.Path) {
		return nil
	}
	return []Location{{Field: "path", URI: c.Path, Output: true}}
}

func planFile(p *Planner) (fileConfig, *Shape) {
	var c fileConfig
	if e, ok := p.Require("path"); ok {
		c.Path, _ = e.NonEmpty()
		if isS3Path(c.Path) {
			if err := storage.CheckLocation(c.Path); err != nil {
				e.Problemf("%v", err)
			}
		}
	}
	if e, ok := p.Field("format"); ok {
		if f, ok := e.String(); ok && f != "json" {
			e.Problemf("unknown format %q (the file sink writes json)", f)
		}
	}
	return c, nil
}

// fileSink is an exactly-once file sink (spec {type: file, path: DIR} or
// {type: file, path: s3://bucket/prefix}) on the two-phase-commit framework (twoPhaseSink):
// it writes JSON lines, one part file per transaction, and a part file becomes visible only
// when its checkpoint completes (or, for a bounded job, at the end of input). The sink keeps
// the rules (naming, checkpoint state, which transactions linger); its partFiles keep the
// part files: in a directory (localParts) or as S3 multipart uploads (s3Parts).
//
// In a directory:
//
//	<dir>/.part-<subtask>-<attempt>-<n>.inprogress   open transaction (hidden)
//	<dir>/.part-<subtask>-<attempt>-<n>.pending      pre-committed at a barrier (hidden)
//	<dir>/part-<subtask>-<attempt>-<n>.jsonl         committed
//
// Readers must ignore hidden files (names starting with "."); the committed files hold each
// record exactly once. Within a subtask of one job, committed files sort by name in commit
// order (<attempt> and <n> are zero-padded to 4 and 8 digits; <n> counts this attempt's
// transactions). A name is never reused: one whose file exists in any of the three forms is
// skipped, so a job rerun into the same directory adds files instead of overwriting them.
// A transaction without records creates no file. A file is created with its first record;
// pre-committing fsyncs it and its directory.
//
// On S3 (as Flink's S3 file sink does it), a transaction is a multipart upload of the object
// <prefix>/part-<subtask>-<attempt>-<n>.jsonl, which readers of the bucket do not see until
// it is completed: the upload starts with the transaction's first record, a part is uploaded
// whenever a part's worth of records is buffered, pre-committing uploads the rest as the last
// part and keeps the upload ID and the parts' ETags in the checkpoint state, committing
// completes the upload, and aborting aborts it. A name is skipped when its object exists or
// an upload of it is in progress.
//
// The location belongs to one file sink of one job: on start and on restore, a subtask
// deletes the hidden files (aborts the uploads) of its subtask index (modulo the parallelism)
// that the restored state does not reference. So each subtask holds a directory (dirowner)
// from Open to Close, and one of another sink, or of another job while an instance of this
// one runs anywhere, is refused before it deletes anything; a job restored from this one's
// savepoint takes the directory over once this one has ended. S3 has no exclusive create to
// build such a claim on, so an S3 location is not claimed: the JobManager refuses a job
// whose sinks name one twice, or one a job that has not ended writes into, and beyond one
// JobManager's jobs it is the user's to give each sink a location of its own. Without
// checkpointing, output appears only when a bounded job finishes.
type fileSink struct {
	TwoPhaseSink[*fileTxn]
	schema *record.Schema
	parts  partFiles
	seq    int // next transaction number to try
	buf    []byte
}

// partFiles keeps a fileSink's part files. The sink names a transaction (fileTxn.Name) and
// calls create before its first write; commit and abort get transactions that may come from
// checkpoint state (decoded, checked by check), abort only ones that have a name.
type partFiles interface {
	// open prepares the location for the sink's subtask; close gives it up.
	open(ctx *Context) error
	close() error
	// inUse reports whether a part file of the name exists (committed or not); create may
	// still find the name taken.
	inUse(name string) (bool, error)
	// create starts the transaction's part file; errNameTaken if another took the name.
	create(t *fileTxn) error
	write(t *fileTxn, p []byte) error
	// preCommit makes the part file durable: a commit by another process can complete it.
	preCommit(t *fileTxn) error
	// commit makes a pre-committed part file visible; one that is visible already is a
	// success, one of which nothing is left is data loss.
	commit(t *fileTxn) error
	abort(t *fileTxn) error
	// uncommitted lists the part files that are neither committed nor aborted.
	uncommitted() ([]uncommittedPart, error)
	remove(u uncommittedPart) error
	// check validates a transaction decoded from checkpoint state.
	check(t *fileTxn) error
	// String is the location, for logs.
	String() string
}

// uncommittedPart is a part file that is open or pre-committed.
type uncommittedPart struct {
	txn   string // the transaction's name
	label string // for logs: the hidden file, or the upload
	id    string // the backend's handle: the file name, the upload ID
}

// errNameTaken says create lost the race for a name.
var errNameTaken = errors.New("part file name taken")

// fileTxn is one transaction of the file sink. Its exported fields are its checkpoint state.
type fileTxn struct {
	// Name is "part-<subtask>-<attempt>-<n>"; empty until the first record.
	Name string `json:"name,omitempty"`
	// Size is the bytes written; final once Prepared.
	Size     int64 `json:"size,omitempty"`
	Prepared bool  `json:"prepared,omitempty"`
	// Upload is the S3 multipart upload of the object; Parts are its uploaded parts (on
	// S3 only).
	Upload string         `json:"upload,omitempty"`
	Parts  []storage.Part `json:"parts,omitempty"`

	created bool // create succeeded

	// local
	f *os.File
	w *bufio.Writer
	// S3: the bytes not uploaded yet; the part uploading in the background, if any (see
	// s3Parts.upload), and the buffer it will give back; the failure of an upload, which
	// ends the transaction.
	pending  []byte
	inflight chan partUpload
	spare    []byte
	upErr    error
}

func (s *fileSink) Open(ctx *Context, out Output) error {
	if err := s.parts.open(ctx); err != nil {
		return fmt.Errorf("file sink: %w", err)
	}
	return s.TwoPhaseSink.Open(ctx, out)
}

// Close aborts the open transaction and gives up the location.
func (s *fileSink) Close() error {
	err := s.TwoPhaseSink.Close()
	if rerr := s.parts.close(); err == nil && rerr != nil {
		err = fmt.Errorf("file sink: %w", rerr)
	}
	return err
}

// BeginTransaction starts a transaction; its file is created with the first record.
func (s *fileSink) BeginTransaction() (*fileTxn, error) { return &fileTxn{}, nil }

func (s *fileSink) Write(t *fileTxn, row record.Row) error {
	if t.Prepared {
		return fmt.Errorf("write to pre-committed transaction %s", t.Name)
	}
	if !t.created {
		if err := s.create(t); err != nil {
			return err
		}
	}
	s.buf = record.AppendJSON(s.buf[:0], s.schema, row)
	s.buf = append(s.buf, '\n')
	return s.parts.write(t, s.buf)
}

// create names the transaction and creates its part file, skipping names in use.
func (s *fileSink) create(t *fileTxn) error {
	for ; ; s.seq++ {
		t.Name = fmt.Sprintf("part-%d-%04d-%08d", s.ctx.Subtask, s.ctx.Attempt, s.seq)
		used, err := s.parts.inUse(t.Name)
		if err != nil {
			return err
		}
		if used {
			continue
		}
		err = s.parts.create(t)
		if errors.Is(err, errNameTaken) {
			continue
		}
		if err != nil {
			return err
		}
		s.seq++
		t.created = true
		return nil
	}
}

// PreCommit makes the transaction's part file durable (see partFiles.preCommit).
func (s *fileSink) PreCommit(t *fileTxn) error {
	if t.created {
		if err := s.parts.preCommit(t); err != nil {
			return err
		}
	}
	t.Prepared = true
	return nil
}

// Commit makes the part file visible. A transaction that is already committed is a success.
func (s *fileSink) Commit(t *fileTxn) error {
	if !t.Prepared {
		return fmt.Errorf("commit %s: %w", t.Name, ErrNotCommittable)
	}
	if t.Name == "" {
		return nil // no records
	}
	return s.parts.commit(t)
}

// Abort discards the transaction's part file, if any.
func (s *fileSink) Abort(t *fileTxn) error {
	if t.Name == "" {
		return nil
	}
	return s.parts.abort(t)
}

func (s *fileSink) Encode(t *fileTxn) []byte {
	b, _ := json.Marshal(t) // strings, ints and bools cannot fail
	return b
}

func (s *fileSink) Decode(b []byte) (*fileTxn, error) {
	t := &fileTxn{}
	if err := json.Unmarshal(b, t); err != nil {
		return nil, fmt.Errorf("file sink transaction: %w", err)
	}
	if t.Name != "" && !validPartName(t.Name) {
		return nil, fmt.Errorf("file sink transaction: invalid name %q", t.Name)
	}
	if err := s.parts.check(t); err != nil {
		return nil, fmt.Errorf("file sink transaction %q: %w", t.Name, err)
	}
	return t, nil
}

// validPartName reports whether name is "part-<subtask>-..." without path separators.
func validPartName(name string) bool {
	_, ok := partSubtask(name)
	return ok && !strings.ContainsAny(name, `/\`) && name != "." && name != ".."
}

// partSubtask parses the subtask index of "part-<subtask>-...".
func partSubtask(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "part-")
	if !ok {
		return 0, false
	}
	digits, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	return n, err == nil && n >= 0
}

// AbortLingering removes the uncommitted part files of subtasks i with
// i % parallelism == subtask that no restored transaction references: transactions of
// earlier attempts begun or pre-committed after the restored checkpoint (or, on a fresh
// start, all of them).
func (s *fileSink) AbortLingering(referenced []*fileTxn) error {
	keep := make(map[string]bool, len(referenced))
	for _, t := range referenced {
		keep[t.Name] = true
	}
	parts, err := s.parts.uncommitted()
	if err != nil {
		return err
	}
	par := max(s.ctx.Parallelism, 1)
	var removed []string
	for _, u := range parts {
		i, ok := partSubtask(u.txn)
		if !ok || i%par != s.ctx.Subtask || keep[u.txn] {
			continue
		}
		if err := s.parts.remove(u); err != nil {
			return err
		}
		removed = append(removed, u.label)
	}
	if len(removed) > 0 {
		s.ctx.Log().Info("file sink removed lingering transactions", "dir", s.parts.String(), "files", removed)
	}
	return nil
}

// localParts keeps part files in a directory: a transaction's file is created hidden
// (.inprogress), renamed to its pending name at pre-commit and to its visible name at commit.
type localParts struct {
	dir   string
	claim *dirowner.Claim // the directory, held from open to close
}

const (
	inProgressSuffix = ".inprogress"
	pendingSuffix    = ".pending"
	committedSuffix  = ".jsonl"
)

func (l *localParts) inProgress(t *fileTxn) string {
	return filepath.Join(l.dir, "."+t.Name+inProgressSuffix)
}
func (l *localParts) pending(t *fileTxn) string {
	return filepath.Join(l.dir, "."+t.Name+pendingSuffix)
}
func (l *localParts) final(t *fileTxn) string { return filepath.Join(l.dir, t.Name+committedSuffix) }
func (l *localParts) String() string          { return l.dir }

func (l *localParts) open(ctx *Context) error {
	// Durably: a committed file is durable only if the directory holding it is.
	if err := dirsync.MkdirAll(l.dir, 0o755); err != nil {
		return err
	}
	// Before recovery, which deletes the hidden files it does not know as lingering ones:
	// they may be another running sink's pending transactions.
	claim, err := dirowner.Acquire(l.dir, dirowner.Owner{Job: ctx.JobID, Operator: cmp.Or(ctx.OperatorUID, ctx.OperatorName)})
	if err != nil {
		return err
	}
	l.claim = claim
	return nil
}

func (l *localParts) close() error {
	err := l.claim.Release()
	l.claim = nil
	return err
}

func (l *localParts) inUse(name string) (bool, error) {
	t := &fileTxn{Name: name}
	for _, p := range []string{l.final(t), l.pending(t)} {
		if _, err := os.Lstat(p); err == nil {
			return true, nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return false, err
		}
	}
	return false, nil
}

func (l *localParts) create(t *fileTxn) error {
	f, err := os.OpenFile(l.inProgress(t), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return errNameTaken
	}
	if err != nil {
		return err
	}
	t.f, t.w = f, bufio.NewWriterSize(f, 64<<10)
	return nil
}

func (l *localParts) write(t *fileTxn, p []byte) error {
	n, err := t.w.Write(p)
	t.Size += int64(n)
	return err
}

// preCommit flushes, fsyncs and closes the file and renames it to its pending name.
func (l *localParts) preCommit(t *fileTxn) error {
	if t.f == nil {
		return nil
	}
	err := t.w.Flush()
	if err == nil {
		err = t.f.Sync()
	}
	if cerr := t.f.Close(); err == nil {
		err = cerr
	}
	t.f, t.w = nil, nil
	if err != nil {
		return err
	}
	if err := os.Rename(l.inProgress(t), l.pending(t)); err != nil {
		return err
	}
	return syncDir(l.dir)
}

// commit renames the pending file to its visible name. A transaction whose visible file
// exists and pending file does not is already committed.
func (l *localParts) commit(t *fileTxn) error {
	st, err := os.Lstat(l.pending(t))
	switch {
	case err == nil:
		if st.Size() != t.Size {
			return fmt.Errorf("commit %s: pending file has %d bytes, %d were pre-committed", t.Name, st.Size(), t.Size)
		}
		if err := os.Rename(l.pending(t), l.final(t)); err != nil {
			return err
		}
		return syncDir(l.dir)
	case errors.Is(err, fs.ErrNotExist):
		if _, ferr := os.Lstat(l.final(t)); ferr == nil {
			return nil // already committed
		} else if !errors.Is(ferr, fs.ErrNotExist) {
			return ferr
		}
		return fmt.Errorf("data loss: committed file missing: neither %s nor %s exists", l.pending(t), l.final(t))
	default:
		return err
	}
}

// abort closes and removes the transaction's hidden file, if any.
func (l *localParts) abort(t *fileTxn) error {
	if t.f != nil {
		t.f.Close()
		t.f, t.w = nil, nil
	}
	for _, p := range []string{l.inProgress(t), l.pending(t)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// uncommitted lists the hidden part files.
func (l *localParts) uncommitted() ([]uncommittedPart, error) {
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return nil, err
	}
	var out []uncommittedPart
	for _, e := range entries {
		hidden, ok := strings.CutPrefix(e.Name(), ".")
		if !ok || e.IsDir() {
			continue
		}
		name, ok := strings.CutSuffix(hidden, inProgressSuffix)
		if !ok {
			if name, ok = strings.CutSuffix(hidden, pendingSuffix); !ok {
				continue
			}
		}
		out = append(out, uncommittedPart{txn: name, label: e.Name(), id: e.Name()})
	}
	return out, nil
}

func (l *localParts) remove(u uncommittedPart) error {
	if err := os.Remove(filepath.Join(l.dir, u.id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// check refuses the S3 fields: the state is not a local sink's.
func (l *localParts) check(t *fileTxn) error {
	if t.Upload != "" || len(t.Parts) > 0 {
		return errors.New("an S3 multipart upload in the state of a file sink writing into a directory")
	}
	return nil
}

// syncDir fsyncs a directory so renames in it are durable.
func syncDir(dir string) error { return dirsync.Sync(dir) }

var (
	_ TwoPhaseCommitter[*fileTxn] = (*fileSink)(nil)
	_ LingeringAborter[*fileTxn]  = (*fileSink)(nil)
	_ Stateful                    = (*fileSink)(nil)
	_ PreBarrier                  = (*fileSink)(nil)
	_ Snapshotter                 = (*fileSink)(nil)
	_ CheckpointListener          = (*fileSink)(nil)
	_ partFiles                   = (*localParts)(nil)
	_ partFiles                   = (*s3Parts)(nil)
)

// Discard drops every record (for benchmarks).
var Discard = Define(Type{Name: "discard", Role: RoleSink},
	func(*Planner) (struct{}, *Shape) { return struct{}{}, nil },
	func(struct{}, *record.Schema, *record.Schema) (any, error) { return &discardSink{}, nil })

type discardSink struct{ Base }

func (*discardSink) Process(record.Row) error { return nil }

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

// File writes records as JSON lines into part files under a directory (spec field path;
// format json, the only one), exactly-once: see fileSink.
var File = Define(Type{Name: "file", Role: RoleSink, Fields: []string{"path", "format"}}, planFile,
	func(c fileConfig, in, _ *record.Schema) (any, error) {
		s := &fileSink{schema: in, dir: c.Path}
		s.Bind("file sink", s)
		return s, nil
	})

type fileConfig struct {
	Path string `json:"path"`
}

// LocalPaths is the sink's directory, which it owns (PathNamer).
func (c fileConfig) LocalPaths() []LocalPath {
	return []LocalPath{{Field: "path", Path: c.Path, Output: true}}
}

func planFile(p *Planner) (fileConfig, *Shape) {
	var c fileConfig
	if e, ok := p.Require("path"); ok {
		c.Path, _ = e.NonEmpty()
	}
	if e, ok := p.Field("format"); ok {
		if f, ok := e.String(); ok && f != "json" {
			e.Problemf("unknown format %q (the file sink writes json)", f)
		}
	}
	return c, nil
}

// fileSink is an exactly-once file sink (spec {type: file, path: DIR}) on the two-phase-commit
// framework (twoPhaseSink): it writes JSON lines, one file per transaction, and a file becomes
// visible only when its checkpoint completes (or, for a bounded job, at the end of input).
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
// The directory belongs to one file sink of one job: on start and on restore, a subtask
// deletes the hidden files of its subtask index (modulo the parallelism) that the restored
// state does not reference. So each subtask holds the directory (dirowner) from Open to
// Close, and one of another sink, or of another job while an instance of this one runs
// anywhere, is refused before it deletes anything; a job restored from this one's savepoint
// takes the directory over once this one has ended. Without checkpointing, output appears
// only when a bounded job finishes.
type fileSink struct {
	TwoPhaseSink[*fileTxn]
	schema *record.Schema
	dir    string
	claim  *dirowner.Claim // the directory, held from Open to Close
	seq    int             // next transaction number to try
	buf    []byte
}

// fileTxn is one transaction of the file sink. Its exported fields are its checkpoint state.
type fileTxn struct {
	// Name is "part-<subtask>-<attempt>-<n>"; empty until the first record.
	Name string `json:"name,omitempty"`
	// Size is the bytes written; final once Prepared.
	Size     int64 `json:"size,omitempty"`
	Prepared bool  `json:"prepared,omitempty"`

	f *os.File
	w *bufio.Writer
}

const (
	inProgressSuffix = ".inprogress"
	pendingSuffix    = ".pending"
	committedSuffix  = ".jsonl"
)

func (s *fileSink) inProgress(t *fileTxn) string {
	return filepath.Join(s.dir, "."+t.Name+inProgressSuffix)
}
func (s *fileSink) pending(t *fileTxn) string { return filepath.Join(s.dir, "."+t.Name+pendingSuffix) }
func (s *fileSink) final(t *fileTxn) string   { return filepath.Join(s.dir, t.Name+committedSuffix) }

func (s *fileSink) Open(ctx *Context, out Output) error {
	// Durably: a committed file is durable only if the directory holding it is.
	if err := dirsync.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("file sink: %w", err)
	}
	// Before recovery, which deletes the hidden files it does not know as lingering ones:
	// they may be another running sink's pending transactions.
	claim, err := dirowner.Acquire(s.dir, dirowner.Owner{Job: ctx.JobID, Operator: cmp.Or(ctx.OperatorUID, ctx.OperatorName)})
	if err != nil {
		return fmt.Errorf("file sink: %w", err)
	}
	s.claim = claim
	return s.TwoPhaseSink.Open(ctx, out)
}

// Close aborts the open transaction and gives up the directory.
func (s *fileSink) Close() error {
	err := s.TwoPhaseSink.Close()
	if rerr := s.claim.Release(); err == nil && rerr != nil {
		err = fmt.Errorf("file sink: %w", rerr)
	}
	s.claim = nil
	return err
}

// BeginTransaction starts a transaction; its file is created with the first record.
func (s *fileSink) BeginTransaction() (*fileTxn, error) { return &fileTxn{}, nil }

func (s *fileSink) Write(t *fileTxn, row record.Row) error {
	if t.Prepared {
		return fmt.Errorf("write to pre-committed transaction %s", t.Name)
	}
	if t.f == nil {
		if err := s.create(t); err != nil {
			return err
		}
	}
	s.buf = record.AppendJSON(s.buf[:0], s.schema, row)
	s.buf = append(s.buf, '\n')
	n, err := t.w.Write(s.buf)
	t.Size += int64(n)
	return err
}

// create names the transaction and creates its in-progress file, skipping names in use.
func (s *fileSink) create(t *fileTxn) error {
	for ; ; s.seq++ {
		t.Name = fmt.Sprintf("part-%d-%04d-%08d", s.ctx.Subtask, s.ctx.Attempt, s.seq)
		used := false
		for _, p := range []string{s.final(t), s.pending(t)} {
			if _, err := os.Lstat(p); err == nil {
				used = true
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		if used {
			continue
		}
		f, err := os.OpenFile(s.inProgress(t), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return err
		}
		s.seq++
		t.f, t.w = f, bufio.NewWriterSize(f, 64<<10)
		return nil
	}
}

// PreCommit flushes, fsyncs and closes the file and renames it to its pending name.
func (s *fileSink) PreCommit(t *fileTxn) error {
	if t.f != nil {
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
		if err := os.Rename(s.inProgress(t), s.pending(t)); err != nil {
			return err
		}
		if err := syncDir(s.dir); err != nil {
			return err
		}
	}
	t.Prepared = true
	return nil
}

// Commit renames the pending file to its visible name. A transaction whose visible file
// exists and pending file does not is already committed.
func (s *fileSink) Commit(t *fileTxn) error {
	if !t.Prepared {
		return fmt.Errorf("commit %s: %w", t.Name, ErrNotCommittable)
	}
	if t.Name == "" {
		return nil // no records
	}
	st, err := os.Lstat(s.pending(t))
	switch {
	case err == nil:
		if st.Size() != t.Size {
			return fmt.Errorf("commit %s: pending file has %d bytes, %d were pre-committed", t.Name, st.Size(), t.Size)
		}
		if err := os.Rename(s.pending(t), s.final(t)); err != nil {
			return err
		}
		return syncDir(s.dir)
	case errors.Is(err, fs.ErrNotExist):
		if _, ferr := os.Lstat(s.final(t)); ferr == nil {
			return nil // already committed
		} else if !errors.Is(ferr, fs.ErrNotExist) {
			return ferr
		}
		return fmt.Errorf("data loss: committed file missing: neither %s nor %s exists", s.pending(t), s.final(t))
	default:
		return err
	}
}

// Abort closes and removes the transaction's hidden file, if any.
func (s *fileSink) Abort(t *fileTxn) error {
	if t.f != nil {
		t.f.Close()
		t.f, t.w = nil, nil
	}
	if t.Name == "" {
		return nil
	}
	for _, p := range []string{s.inProgress(t), s.pending(t)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
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

// AbortLingering removes the hidden files of subtasks i with i % parallelism == subtask that
// no restored transaction references: transactions of earlier attempts begun or pre-committed
// after the restored checkpoint (or, on a fresh start, all of them).
func (s *fileSink) AbortLingering(referenced []*fileTxn) error {
	keep := make(map[string]bool, len(referenced))
	for _, t := range referenced {
		keep[t.Name] = true
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	par := max(s.ctx.Parallelism, 1)
	var removed []string
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
		i, ok := partSubtask(name)
		if !ok || i%par != s.ctx.Subtask || keep[name] {
			continue
		}
		if err := os.Remove(filepath.Join(s.dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		removed = append(removed, e.Name())
	}
	if len(removed) > 0 {
		s.ctx.Log().Info("file sink removed lingering transactions", "dir", s.dir, "files", removed)
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
)

// Discard drops every record (for benchmarks).
var Discard = Define(Type{Name: "discard", Role: RoleSink},
	func(*Planner) (struct{}, *Shape) { return struct{}{}, nil },
	func(struct{}, *record.Schema, *record.Schema) (any, error) { return &discardSink{}, nil })

type discardSink struct{ Base }

func (*discardSink) Process(record.Row) error { return nil }

package storage

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/goflink/goflink/internal/dirsync"
)

// Local is an FS in a local (or mounted) directory. An object is a file at its name under
// the root. Create writes a temporary file next to it (named ".<base>.tmp-<random>", which
// List never shows), and Close fsyncs it, renames it into place and fsyncs the directory, so
// the object survives a crash of the machine once Close returns. Directories are created as
// needed, durably (internal/dirsync).
type Local struct {
	root string
}

// NewLocal is the FS in directory root; the directory is created by the first Create.
func NewLocal(root string) *Local { return &Local{root: filepath.Clean(root)} }

var _ FS = (*Local)(nil)

// String is the location's URI.
func (l *Local) String() string { return l.root }

// tmpMarker is in the name of every temporary file of a Create.
const tmpMarker = ".tmp-"

func isTemp(base string) bool {
	return strings.HasPrefix(base, ".") && strings.Contains(base, tmpMarker)
}

func (l *Local) path(name string) (string, error) {
	if err := checkName(name); err != nil {
		return "", err
	}
	return filepath.Join(l.root, filepath.FromSlash(name)), nil
}

// Create starts writing the object name; see FS.
func (l *Local) Create(ctx context.Context, name string) (ObjectWriter, error) {
	p, err := l.path(name)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("storage: create %s: %w", p, err)
	}
	dir := filepath.Dir(p)
	if err := dirsync.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("storage: create %s: %w", p, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(p)+tmpMarker+"*")
	if err != nil {
		return nil, fmt.Errorf("storage: create %s: %w", p, err)
	}
	w := writerBuffers.Get().(*bufio.Writer)
	w.Reset(f)
	return &localWriter{ctx: ctx, f: f, w: w, path: p}, nil
}

// writerBuffers holds the write buffers of local objects between uses: a checkpoint writes a
// few files per task every interval, most of them small, and a fresh 256 KiB buffer for each
// made garbage at the rate of the checkpoints.
var writerBuffers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 256<<10) }}

// release returns the write buffer to writerBuffers; w.done is set.
func (w *localWriter) release() {
	w.w.Reset(nil)
	writerBuffers.Put(w.w)
	w.w = nil
}

type localWriter struct {
	ctx  context.Context
	f    *os.File
	w    *bufio.Writer
	path string
	done bool
}

func (w *localWriter) Write(p []byte) (int, error) {
	if w.done {
		return 0, fmt.Errorf("storage: write to %s after Close or Abort", w.path)
	}
	n, err := w.w.Write(p)
	if err != nil {
		return n, fmt.Errorf("storage: write %s: %w", w.path, err)
	}
	return n, nil
}

func (w *localWriter) Close() error {
	if w.done {
		return nil
	}
	w.done = true
	err := w.ctx.Err()
	if err == nil {
		err = w.w.Flush()
	}
	w.release()
	if err == nil {
		err = w.f.Sync()
	}
	err = errors.Join(err, w.f.Close())
	if err == nil {
		err = os.Rename(w.f.Name(), w.path)
	}
	if err != nil {
		os.Remove(w.f.Name())
		return fmt.Errorf("storage: commit %s: %w", w.path, err)
	}
	if err := dirsync.Sync(filepath.Dir(w.path)); err != nil {
		return fmt.Errorf("storage: commit %s: %w", w.path, err)
	}
	return nil
}

func (w *localWriter) Abort() error {
	if w.done {
		return nil
	}
	w.done = true
	w.release()
	w.f.Close()
	if err := os.Remove(w.f.Name()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("storage: abort %s: %w", w.path, err)
	}
	return nil
}

// Open streams the object name; see FS.
func (l *Local) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	p, err := l.path(name)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("storage: open %s: %w", p, err)
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("storage: open %s: %w", p, err)
	}
	if fi, err := f.Stat(); err != nil || fi.IsDir() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("a directory, not an object: %w", fs.ErrNotExist)
		}
		return nil, fmt.Errorf("storage: open %s: %w", p, err)
	}
	return f, nil
}

// Stat describes the object name; see FS.
func (l *Local) Stat(ctx context.Context, name string) (ObjectInfo, error) {
	p, err := l.path(name)
	if err != nil {
		return ObjectInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		return ObjectInfo{}, fmt.Errorf("storage: stat %s: %w", p, err)
	}
	fi, err := os.Stat(p)
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("not a regular file: %w", fs.ErrNotExist)
	}
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("storage: stat %s: %w", p, err)
	}
	return ObjectInfo{Name: name, Size: fi.Size()}, nil
}

// List returns the objects whose names start with prefix; see FS.
func (l *Local) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	if err := checkPrefix(prefix); err != nil {
		return nil, err
	}
	// Walk the deepest directory the prefix names in full.
	dir := ""
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		dir = prefix[:i]
	}
	start := filepath.Join(l.root, filepath.FromSlash(dir))
	var out []ObjectInfo
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == start && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !d.Type().IsRegular() || isTemp(d.Name()) {
			return nil
		}
		rel, err := filepath.Rel(l.root, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if !strings.HasPrefix(name, prefix) {
			return nil
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) { // deleted while listing
			return nil
		} else if err != nil {
			return err
		}
		out = append(out, ObjectInfo{Name: name, Size: fi.Size()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("storage: list %s prefix %q: %w", l.root, prefix, err)
	}
	slices.SortFunc(out, func(a, b ObjectInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Delete removes the object name; see FS.
func (l *Local) Delete(ctx context.Context, name string) error {
	p, err := l.path(name)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("storage: delete %s: %w", p, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("storage: delete %s: %w", p, err)
	}
	return nil
}

// DeleteAll removes every object under dir; see FS.
func (l *Local) DeleteAll(ctx context.Context, dir string) error {
	p, err := l.path(dir)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("storage: delete %s: %w", p, err)
	}
	if err := os.RemoveAll(p); err != nil {
		return fmt.Errorf("storage: delete %s: %w", p, err)
	}
	return nil
}

// Package confine keeps the local paths a job names inside the directories its process
// allows (io.allowed-paths), and reads the files a job names with a bound.
//
// A job runs with the privileges of the processes that run it, so a path in a job spec is
// untrusted input: without confinement a file sink could write anywhere the TaskManager
// can, and a connector could read any file (its keys, /dev/zero). Paths are resolved the
// way the kernel will resolve them when they are opened — relative ones against the working
// directory, every symlink and ".." of the part that exists followed — and must then lie in
// an allowed directory, resolved the same way.
package confine

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/goflink/goflink/config"
)

// MaxCredentialFileBytes bounds a certificate, CA bundle or key file a job names. A system's
// whole CA bundle is about 220 KiB (Debian's ca-certificates.crt); 1 MiB leaves room for any
// real bundle or key, and keeps a hostile file from exhausting a TaskManager's memory.
const MaxCredentialFileBytes = 1 << 20

// ErrOutside is wrapped by the error of a path outside every allowed directory.
var ErrOutside = errors.New("outside the allowed paths")

// Dirs is a set of allowed directories. The zero value allows nothing. It is immutable and
// safe for concurrent use; Check resolves the directories each time, so one created (or
// replaced) after the process started is judged as it is then.
type Dirs struct {
	dirs []string // as configured: absolute, or relative to the working directory
}

// New returns the set of dirs. Relative ones are relative to the working directory.
func New(dirs ...string) *Dirs {
	return &Dirs{dirs: slices.Clone(dirs)}
}

// FromSettings returns a process's allowed directories: its io.allowed-paths, or when that is
// unset the working directory and the process's checkpoint and savepoint directories
// (execution.checkpointing.dir, or defaultCheckpointDir when that is unset, and
// execution.checkpointing.savepoint-dir).
func FromSettings(settings *config.Config, defaultCheckpointDir string) *Dirs {
	if settings.IsSet(config.AllowedPaths) {
		return New(settings.List(config.AllowedPaths)...)
	}
	dirs := []string{"."}
	// An s3:// checkpoint directory is no local path.
	if d := cmp.Or(settings.String(config.CheckpointDir), defaultCheckpointDir); d != "" && !strings.Contains(d, "://") {
		dirs = append(dirs, d)
	}
	if d := settings.String(config.SavepointDir); d != "" {
		dirs = append(dirs, d)
	}
	return New(dirs...)
}

// Dirs returns the configured directories, for messages.
func (d *Dirs) Dirs() []string { return slices.Clone(d.dirs) }

// String lists the directories for messages: "[/srv/out /srv/certs]".
func (d *Dirs) String() string {
	if d == nil || len(d.dirs) == 0 {
		return "[] (nothing is allowed)"
	}
	return "[" + strings.Join(d.dirs, " ") + "]"
}

// Check resolves path (see Resolve) and returns it if it lies in one of the directories (or is
// one). Otherwise the error wraps ErrOutside and names the path, what it resolves to and the
// allowed directories, under config.AllowedPaths.
func (d *Dirs) Check(path string) (string, error) {
	resolved, err := Resolve(path)
	if err != nil {
		return "", err
	}
	if d != nil {
		for _, dir := range d.dirs {
			root, err := Resolve(dir)
			if err != nil {
				continue // an allowed directory that cannot be resolved allows nothing
			}
			if within(root, resolved) {
				return resolved, nil
			}
		}
	}
	if resolved != filepath.Clean(path) {
		return "", fmt.Errorf("%q (resolved: %s) is %w: %s %s", path, resolved, ErrOutside, config.AllowedPaths, d)
	}
	return "", fmt.Errorf("%q is %w: %s %s", path, ErrOutside, config.AllowedPaths, d)
}

// within reports whether path is root or lies under it; both are resolved and absolute.
func within(root, path string) bool {
	if path == root {
		return true
	}
	if !strings.HasSuffix(root, string(filepath.Separator)) {
		root += string(filepath.Separator)
	}
	return strings.HasPrefix(path, root)
}

// Resolve returns the absolute path that path names once it is opened: a relative path is
// taken relative to the working directory, and the longest prefix of it that exists is
// resolved with filepath.EvalSymlinks, which follows every symlink and applies each ".." to
// what it follows (not to the text before it, as filepath.Clean would). The part that does not
// exist yet is appended lexically: it holds no symlink, and whoever creates it (the file
// sink) creates plain directories.
func Resolve(path string) (string, error) {
	if path == "" {
		return "", errors.New("empty path")
	}
	if strings.ContainsRune(path, 0) {
		return "", fmt.Errorf("path %q contains a NUL byte", path)
	}
	if !filepath.IsAbs(path) {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("resolve %q: working directory: %w", path, err)
		}
		// Not filepath.Join, which would clean "link/.." away before the link is followed.
		path = wd + string(filepath.Separator) + path
	}
	vol := filepath.VolumeName(path)
	parts := strings.Split(path[len(vol):], string(filepath.Separator))
	for n := len(parts); n > 0; n-- {
		prefix := vol + strings.Join(parts[:n], string(filepath.Separator))
		if prefix == vol {
			prefix += string(filepath.Separator)
		}
		resolved, err := filepath.EvalSymlinks(prefix)
		if err != nil {
			continue // does not exist (or cannot be looked at): a shorter prefix
		}
		return filepath.Join(append([]string{resolved}, parts[n:]...)...), nil
	}
	return filepath.Clean(path), nil
}

// ReadFile reads a file a job names: it must be a regular file (not a directory, device,
// FIFO or socket — /dev/zero never ends, a FIFO blocks) of at most limit bytes. The path is
// not checked against allowed directories; Check it first.
func ReadFile(path string, limit int64) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (it is %s)", path, kind(fi.Mode()))
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%s has %d bytes, more than the limit of %d", path, fi.Size(), limit)
	}
	// O_NONBLOCK: should the path have become a FIFO since the Stat, opening it returns at
	// once instead of waiting for a writer; the Stat of the open file then refuses it.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (it is %s)", path, kind(fi.Mode()))
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s has more than the limit of %d bytes", path, limit)
	}
	return b, nil
}

// kind names a file mode that is not a regular file's.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "not a regular file: " + m.String()
}

// Package dirsync makes directory entries durable. A file created in a directory, a directory
// created in its parent, or a rename survive a crash of the machine only once the directory
// holding the entry is fsynced, as etcd's fileutil does after creating its directories and
// renaming its files.
package dirsync

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
)

// onSync, when set, is called with each directory Sync fsyncs (SetSyncHook).
var onSync atomic.Pointer[func(dir string)]

// SetSyncHook makes Sync call f with each directory it fsyncs, until the returned function
// is called; a test sees so which directory entries were made durable. f must be safe for
// concurrent use.
func SetSyncHook(f func(dir string)) (restore func()) {
	onSync.Store(&f)
	return func() { onSync.Store(nil) }
}

// Sync fsyncs the directory dir, so the entries created or renamed in it are durable.
func Sync(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("fsync directory: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	if f := onSync.Load(); f != nil {
		(*f)(dir)
	}
	return nil
}

// MkdirAll creates dir with its missing parents, as os.MkdirAll does, and fsyncs the parent
// of each directory it created, so that the whole path survives a crash.
func MkdirAll(dir string, perm os.FileMode) error {
	var missing []string // dir and its missing parents, deepest first
	for p := filepath.Clean(dir); ; {
		if _, err := os.Lstat(p); err == nil || !errors.Is(err, fs.ErrNotExist) {
			break
		}
		missing = append(missing, p)
		parent := filepath.Dir(p)
		if parent == p {
			break
		}
		p = parent
	}
	if err := os.MkdirAll(dir, perm); err != nil {
		return err
	}
	for _, p := range slices.Backward(missing) {
		if err := Sync(filepath.Dir(p)); err != nil {
			return err
		}
	}
	return nil
}

package security

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"
)

// reloadCheck is how often a handshake looks at the files again: a certificate renewed on disk
// is in use within a second, and a busy server does not stat its files on every connection.
const reloadCheck = time.Second

// maxFileBytes bounds a certificate, key, CA bundle or token file: real ones are a few KiB.
const maxFileBytes = 1 << 20

// watched is a value parsed from files, parsed again when one of them changes (size or
// modification time). A reload that fails keeps the last good value, so that a certificate
// half-written by a renewal does not take the cluster down; the failure is returned to the
// caller that sees it first and to onError.
type watched[T any] struct {
	paths   []string
	parse   func(data [][]byte) (T, error)
	onError func(error)
	now     func() time.Time

	mu      sync.Mutex
	value   T
	stamps  []stamp
	checked time.Time
}

type stamp struct {
	size int64
	mod  time.Time
}

// newWatched parses the files once: an error here (a missing or bad file) is the caller's to
// report at start.
func newWatched[T any](parse func([][]byte) (T, error), onError func(error), paths ...string) (*watched[T], error) {
	w := &watched[T]{paths: paths, parse: parse, onError: onError, now: time.Now}
	stamps, data, err := readAll(paths)
	if err != nil {
		return nil, err
	}
	if w.value, err = parse(data); err != nil {
		return nil, err
	}
	w.stamps, w.checked = stamps, w.now()
	return w, nil
}

// get returns the current value, parsing the files again if they changed.
func (w *watched[T]) get() T {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	if now.Sub(w.checked) < reloadCheck {
		return w.value
	}
	w.checked = now
	stamps, err := statAll(w.paths)
	if err == nil && slices.Equal(stamps, w.stamps) {
		return w.value
	}
	var data [][]byte
	if err == nil {
		stamps, data, err = readAll(w.paths)
	}
	var v T
	if err == nil {
		v, err = w.parse(data)
	}
	if err != nil {
		if w.onError != nil {
			w.onError(fmt.Errorf("reload %v (keeping the previous one): %w", w.paths, err))
		}
		return w.value
	}
	w.value, w.stamps = v, stamps
	return v
}

func statAll(paths []string) ([]stamp, error) {
	out := make([]stamp, len(paths))
	for i, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		out[i] = stamp{fi.Size(), fi.ModTime()}
	}
	return out, nil
}

func readAll(paths []string) ([]stamp, [][]byte, error) {
	stamps := make([]stamp, len(paths))
	data := make([][]byte, len(paths))
	for i, p := range paths {
		b, fi, err := readFile(p)
		if err != nil {
			return nil, nil, err
		}
		stamps[i], data[i] = stamp{fi.Size(), fi.ModTime()}, b
	}
	return stamps, data, nil
}

// readFile reads a regular file of at most maxFileBytes.
func readFile(path string) ([]byte, os.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxFileBytes {
		return nil, nil, fmt.Errorf("%s is larger than %d bytes", path, maxFileBytes)
	}
	if len(b) == 0 {
		return nil, nil, errors.New(path + " is empty")
	}
	return b, fi, nil
}

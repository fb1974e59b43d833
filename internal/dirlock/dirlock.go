// Package dirlock gives a data directory to one process at a time: an exclusive, non-blocking
// flock on <dir>/LOCK, which holds the owner's process ID. The kernel releases the lock when
// the process ends, however it ends, so a crashed owner never leaves the directory locked.
package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrInUse means another process (or another part of this one) holds the directory.
var ErrInUse = errors.New("data dir in use")

// FileName is the lock file in a locked directory.
const FileName = "LOCK"

// Lock is a held directory lock.
type Lock struct {
	f *os.File
}

// Acquire creates dir if needed and locks it for this process, or fails at once with an error
// that wraps ErrInUse and names the holder's process ID. who names the kind of process in the
// message ("jobmanager").
func Acquire(dir, who string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("data dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("data dir %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := readHolder(f)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data dir %s is in use by another %s (%s): %w", dir, who, holder, ErrInUse)
		}
		return nil, fmt.Errorf("lock data dir %s: %w", dir, err)
	}
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt(pid, 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("data dir %s: write %s: %w", dir, FileName, err)
	}
	return &Lock{f: f}, nil
}

// readHolder describes the process that holds the lock, from the PID it wrote.
func readHolder(f *os.File) string {
	buf := make([]byte, 32)
	n, _ := f.ReadAt(buf, 0)
	pid := strings.TrimSpace(string(buf[:n]))
	if _, err := strconv.Atoi(pid); err != nil {
		return "pid unknown"
	}
	return "pid " + pid
}

// Release unlocks the directory. The lock file stays (with a stale PID that no one holds).
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	return err
}

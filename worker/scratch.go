package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/goflink/goflink/internal/dirlock"
)

// scratchDirName is the directory in a TaskManager's data dir that holds the local working
// files of its tasks (the bbolt state backend's database files): scratch/<instance>/task-*/.
const scratchDirName = "scratch"

// scratch is one TaskManager process's directory of working files, <data dir>/scratch/
// <instance>, locked (dirlock) for as long as the process runs: TaskManagers may share a data
// dir (two started by hand with the default --data-dir), and each removes at start the
// directories of the others that are not locked — left by a process that died — but never a
// live one's.
type scratch struct {
	dir  string
	lock *dirlock.Lock
	// temp is the data dir the TaskManager made for itself (Config.DataDir empty), removed at
	// close; "" when the data dir is the user's.
	temp string
}

// openScratch creates this process's scratch directory under dataDir (a temporary data dir
// when it is empty) and removes the ones that processes that ended left behind.
func openScratch(dataDir, instance string, log *slog.Logger) (*scratch, error) {
	s := &scratch{}
	if dataDir == "" {
		d, err := os.MkdirTemp("", "goflink-taskmanager-")
		if err != nil {
			return nil, fmt.Errorf("taskmanager data dir: %w", err)
		}
		dataDir, s.temp = d, d
	}
	root := filepath.Join(dataDir, scratchDirName)
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, errors.Join(fmt.Errorf("taskmanager data dir: %w", err), s.close())
	}
	s.dir = filepath.Join(root, instance)
	lock, err := dirlock.Acquire(s.dir, "taskmanager")
	if err != nil {
		return nil, errors.Join(fmt.Errorf("taskmanager scratch dir: %w", err), s.close())
	}
	s.lock = lock
	removeLeftovers(root, instance, log)
	return s, nil
}

// removeLeftovers removes the scratch directories under root that no live process holds.
// Failures are logged: leftovers waste disk space, they do not stop the TaskManager.
func removeLeftovers(root, self string, log *slog.Logger) {
	entries, err := os.ReadDir(root)
	if err != nil {
		log.Warn("cannot list scratch files left by earlier taskmanagers", "dir", root, "err", err)
		return
	}
	for _, e := range entries {
		if e.Name() == self {
			continue
		}
		p := filepath.Join(root, e.Name())
		if e.IsDir() {
			l, err := dirlock.Acquire(p, "taskmanager")
			if errors.Is(err, dirlock.ErrInUse) {
				continue // a live TaskManager sharing the data dir
			}
			if err != nil {
				log.Warn("cannot remove scratch files left by an earlier taskmanager", "dir", p, "err", err)
				continue
			}
			_ = l.Release() // nobody else takes a dead process's random name
		}
		if err := os.RemoveAll(p); err != nil {
			log.Warn("cannot remove scratch files left by an earlier taskmanager", "dir", p, "err", err)
			continue
		}
		log.Info("removed scratch files left by an earlier taskmanager", "dir", p)
	}
}

// taskDir creates a task's own scratch directory; it is removed when the task ends.
func (s *scratch) taskDir() (taskScratch, error) {
	if s == nil {
		return "", errors.New("task scratch dir: the task has no TaskManager data dir")
	}
	d, err := os.MkdirTemp(s.dir, "task-")
	if err != nil {
		return "", fmt.Errorf("task scratch dir: %w", err)
	}
	return taskScratch(d), nil
}

// close removes the process's scratch directory (and its temporary data dir) and unlocks it.
func (s *scratch) close() error {
	var errs []error
	if s.dir != "" && s.lock != nil {
		errs = append(errs, os.RemoveAll(s.dir), s.lock.Release())
	}
	if s.temp != "" {
		errs = append(errs, os.RemoveAll(s.temp))
	}
	return errors.Join(errs...)
}

// taskScratch is a task's scratch directory; Close removes it (a task closes it after its
// state backend, whose files are in it).
type taskScratch string

func (d taskScratch) Close() error { return os.RemoveAll(string(d)) }

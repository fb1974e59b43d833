// Package dirowner gives an output directory to one owner — one sink of one job — at a time,
// across the processes of every cluster that reaches it. The owner is recorded in
// <dir>/.goflink-owner (JSON, replaced atomically); every live instance of the owner (each
// subtask, in any process) holds a shared flock on <dir>/.goflink-owner.lock while it writes
// there. Another owner takes the directory over only with an exclusive lock, that is when no
// instance of the recorded owner runs: its tasks ended, or its processes died (the kernel
// releases their locks), so a job restored from a stopped job's savepoint goes on writing into
// its directory, while a second job pointed at a running job's directory is refused instead of
// deleting that job's pending files.
//
// flock works between the processes of one machine, and on NFS v4 across machines; on a
// shared file system without working locks only the JobManager's check at submit protects a
// directory.
package dirowner

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/goflink/goflink/internal/confine"
	"github.com/goflink/goflink/internal/dirsync"
)

// The files of an owned directory; hidden, so readers of the output skip them.
const (
	OwnerFile = ".goflink-owner"
	LockFile  = ".goflink-owner.lock"
)

// maxOwnerFileBytes bounds the owner file read back: its JSON holds two IDs, and a larger one
// was not written by dirowner.
const maxOwnerFileBytes = 64 << 10

// ClaimWait is how long Acquire keeps trying while the lock is held by others and the owner
// file names someone else. An instance that claims holds the exclusive lock only while it
// writes and fsyncs a few hundred bytes, and one that finds itself recorded takes the shared
// lock at once; a live other owner holds the shared lock for as long as it runs, so a
// directory still held after this long is in use.
const ClaimWait = 2 * time.Second

// ErrInUse is wrapped by the error of Acquire for a directory that another owner holds.
var ErrInUse = errors.New("directory in use")

// Owner identifies who writes into a directory: a job and one of its operators (its uid).
type Owner struct {
	Job      string `json:"job_id"`
	Operator string `json:"operator_uid"`
}

// Claim is a held shared lock on an owned directory.
type Claim struct {
	f *os.File
}

// Acquire records me as the owner of dir (which must exist) unless another owner holds it,
// and holds it for me until Release. Instances of the same owner share the directory. An
// operator of the same job with another uid is refused at once; an owner of another job that
// is running is refused after ClaimWait. Errors wrap ErrInUse and name the holder.
func Acquire(dir string, me Owner) (*Claim, error) {
	f, err := os.OpenFile(filepath.Join(dir, LockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("directory owner: %w", err)
	}
	c, err := acquire(dir, f, me, time.Now().Add(ClaimWait))
	if err != nil {
		f.Close()
		return nil, err
	}
	return c, nil
}

func acquire(dir string, f *os.File, me Owner, deadline time.Time) (*Claim, error) {
	fd := int(f.Fd())
	backoff := time.Millisecond
	retry := func() bool {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(backoff) // waiting for another process's lock: there is no event to wait on
		backoff = min(2*backoff, 100*time.Millisecond)
		return true
	}
	for {
		owner, err := readOwner(dir)
		if err != nil {
			return nil, err
		}
		switch {
		case owner == me:
			if err := syscall.Flock(fd, syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
				if !errors.Is(err, syscall.EWOULDBLOCK) {
					return nil, fmt.Errorf("directory owner: lock %s: %w", dir, err)
				}
				if !retry() {
					return nil, fmt.Errorf("directory owner: %s stays locked exclusively: %w", dir, ErrInUse)
				}
				continue
			}
			// Under the shared lock nobody rewrites the owner: is it still me?
			if again, err := readOwner(dir); err != nil || again != me {
				_ = syscall.Flock(fd, syscall.LOCK_UN)
				if err != nil {
					return nil, err
				}
				continue
			}
			return &Claim{f: f}, nil
		case owner.Job == me.Job && owner.Job != "":
			return nil, fmt.Errorf("%s is the output of operator %q of this job (%s names its owner): %w",
				dir, owner.Operator, OwnerFile, ErrInUse)
		}
		if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			if !errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, fmt.Errorf("directory owner: lock %s: %w", dir, err)
			}
			if !retry() {
				return nil, fmt.Errorf("%s is the output of operator %q of job %s, which is running (it holds %s): %w",
					dir, owner.Operator, owner.Job, LockFile, ErrInUse)
			}
			continue
		}
		// No instance of anyone holds the directory: it is mine.
		err = writeOwner(dir, me)
		if uerr := syscall.Flock(fd, syscall.LOCK_UN); err == nil && uerr != nil {
			err = fmt.Errorf("directory owner: unlock %s: %w", dir, uerr)
		}
		if err != nil {
			return nil, err
		}
	}
}

// Release gives up this instance's hold on the directory (the owner file stays: the next
// instance of the same owner finds it). It is idempotent.
func (c *Claim) Release() error {
	if c == nil || c.f == nil {
		return nil
	}
	err := syscall.Flock(int(c.f.Fd()), syscall.LOCK_UN)
	if cerr := c.f.Close(); err == nil {
		err = cerr
	}
	c.f = nil
	return err
}

// readOwner reads the recorded owner; the zero Owner when there is none.
func readOwner(dir string) (Owner, error) {
	p := filepath.Join(dir, OwnerFile)
	b, err := confine.ReadFile(p, maxOwnerFileBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return Owner{}, nil
	}
	if err != nil {
		return Owner{}, fmt.Errorf("directory owner: %w", err)
	}
	var o Owner
	if err := json.Unmarshal(b, &o); err != nil {
		return Owner{}, fmt.Errorf("directory owner: %s: %w (delete it if no job writes into %s)", p, err, dir)
	}
	return o, nil
}

// writeOwner replaces the owner file atomically and durably.
func writeOwner(dir string, o Owner) error {
	b, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("directory owner: %w", err)
	}
	tmp, err := os.CreateTemp(dir, OwnerFile+"-*.tmp")
	if err != nil {
		return fmt.Errorf("directory owner: %w", err)
	}
	_, err = tmp.Write(append(b, '\n'))
	if err == nil {
		err = tmp.Sync()
	}
	if err = errors.Join(err, tmp.Close()); err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, OwnerFile))
	}
	if err == nil {
		err = dirsync.Sync(dir)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("directory owner: write %s: %w", filepath.Join(dir, OwnerFile), err)
	}
	return nil
}

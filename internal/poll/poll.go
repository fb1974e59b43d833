// Package poll waits, with a deadline, until a condition holds: how the tests and the bench
// synchronise with a cluster they do not control, instead of sleeping (nats checkFor, Nomad
// WaitForResult).
package poll

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// minInterval is the shortest wait between two calls of a condition.
const minInterval = 5 * time.Millisecond

// T is the part of testing.TB that Until uses.
type T interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Until calls cond until it returns nil and returns how long that took. If timeout passes
// first, it fails t with what is awaited and cond's last error. cond may itself fail t to
// stop early (a job that ended while the test waits for it to run). Until must be called
// from the test's goroutine, as t.Fatalf must.
func Until(t T, timeout time.Duration, what string, cond func() error) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	if last, err := wait(ctx, cond); err != nil {
		if last == nil { // cond stopped the wait
			t.Fatalf("waiting for %s: %v", what, err)
		} else {
			t.Fatalf("waiting for %s: not within %v: %v", what, timeout, last)
		}
	}
	return time.Since(start)
}

// Wait calls cond until it returns nil or ctx is done. Between calls it waits minInterval,
// or as long as the last call took when that was longer, so a slow condition (one that runs
// a process) keeps at most half the time. When ctx ends first the error holds ctx's error and
// cond's last one; an error cond wrapped with Stop is returned at once, unwrapped.
func Wait(ctx context.Context, cond func() error) error {
	last, err := wait(ctx, cond)
	if last != nil {
		return fmt.Errorf("%w (last error: %w)", err, last)
	}
	return err
}

// wait calls cond as Wait says. It returns nil, nil once cond holds; nil and the error cond
// stopped with; or cond's last error and ctx's.
func wait(ctx context.Context, cond func() error) (last, err error) {
	for {
		began := time.Now()
		err := cond()
		if err == nil {
			return nil, nil
		}
		if s, ok := errors.AsType[stopped](err); ok {
			return nil, s.err
		}
		pause := time.NewTimer(max(minInterval, time.Since(began)))
		select {
		case <-pause.C:
		case <-ctx.Done():
			pause.Stop()
			return err, ctx.Err()
		}
	}
}

// Stop wraps err so that Wait returns it at once rather than calling cond again: the
// condition can no longer come true.
func Stop(err error) error { return stopped{err: err} }

type stopped struct{ err error }

func (s stopped) Error() string { return s.err.Error() }
func (s stopped) Unwrap() error { return s.err }

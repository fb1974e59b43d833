package poll

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// fakeT records Fatalf instead of ending the test.
type fakeT struct{ fatal string }

func (f *fakeT) Helper()                           {}
func (f *fakeT) Fatalf(format string, args ...any) { f.fatal = fmt.Sprintf(format, args...) }

func TestUntilReturnsOnceCondHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		var ft fakeT
		d := Until(&ft, time.Second, "the third call", func() error {
			if calls++; calls < 3 {
				return fmt.Errorf("call %d", calls)
			}
			return nil
		})
		if ft.fatal != "" || calls != 3 || d != 2*minInterval {
			t.Errorf("Until = %v after %d calls, fatal %q; want %v after 3 calls, no failure", d, calls, ft.fatal, 2*minInterval)
		}
	})
}

func TestUntilReportsTheLastError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		var ft fakeT
		Until(&ft, 100*time.Millisecond, "a leader", func() error { calls++; return fmt.Errorf("%d leaders", calls) })
		want := fmt.Sprintf("waiting for a leader: not within 100ms: %d leaders", calls)
		if ft.fatal != want || calls < 2 {
			t.Errorf("Until failed with %q after %d calls, want %q", ft.fatal, calls, want)
		}
	})
}

// A slow condition is called again only after as long as it took.
func TestWaitBacksOffForSlowConditions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var at []time.Duration
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err := Wait(ctx, func() error {
			at = append(at, time.Since(start))
			time.Sleep(100 * time.Millisecond) // the condition's own cost, in fake time
			return errors.New("not yet")
		})
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "not yet") {
			t.Fatalf("Wait = %v, want the deadline with the last error", err)
		}
		for i := 1; i < len(at); i++ {
			if gap := at[i] - at[i-1]; gap != 200*time.Millisecond {
				t.Errorf("calls at %v: gap %v, want 200ms (the call, then as long again)", at, gap)
			}
		}
	})
}

func TestWaitStopsAtStopAndAtContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ended := errors.New("job ended")
		calls := 0
		err := Wait(context.Background(), func() error { calls++; return Stop(ended) })
		if !errors.Is(err, ended) || calls != 1 {
			t.Errorf("Wait = %v after %d calls, want %v after 1", err, calls, ended)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		err = Wait(ctx, func() error { return errors.New("no leader") })
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no leader") {
			t.Errorf("Wait = %v, want the context's error with the last one", err)
		}
	})
}

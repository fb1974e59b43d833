// Package miniclustertest starts embedded clusters for tests: StartT starts one, waits until
// it is ready and closes it when the test ends, failing the test on error (as
// net/http/httptest does for servers).
package miniclustertest

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/goflink/goflink/client"
	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/internal/syncbuf"
	"github.com/goflink/goflink/minicluster"
)

// readyTimeout bounds the wait until a started cluster is ready.
const readyTimeout = 30 * time.Second

// StartT starts a mini cluster, waits until its JobManager leads and every TaskManager
// registered, and returns it with a client of it. Both are closed when the test ends; the
// test may close the cluster earlier (Close is idempotent), for instance to start another on
// the same DataDir.
func StartT(t testing.TB, opts minicluster.Options) (*minicluster.Cluster, *client.Client) {
	t.Helper()
	opts.Settings = WithAllowedPaths(opts.Settings)
	if opts.Logger == nil {
		opts.Logger = logOnFailure(t)
	}
	c, err := minicluster.Start(opts)
	if err != nil {
		t.Fatalf("start mini cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close mini cluster: %v", err)
		}
	})
	cl, err := c.Client()
	if err != nil {
		t.Fatalf("client of the mini cluster at %s: %v", c.Addr(), err)
	}
	t.Cleanup(func() { cl.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return c, cl
}

// logTail is how much of a failed test's cluster log logOnFailure prints: its end.
const logTail = 256 << 10

// logOnFailure returns a logger that keeps the cluster's records (Info and above) and prints
// the last logTail bytes of them when the test has failed by its end: a failure that shows
// once in CI comes with what the cluster did.
func logOnFailure(t testing.TB) *slog.Logger {
	buf := &syncbuf.Buffer{}
	t.Cleanup(func() { // registered first: runs last, after the cluster closed
		if !t.Failed() {
			return
		}
		out := buf.String()
		if len(out) > logTail {
			out = "…" + out[len(out)-logTail:]
		}
		t.Logf("the cluster's log:\n%s", out)
	})
	return slog.New(slog.NewTextHandler(buf, nil))
}

// WithAllowedPaths returns a copy of settings (nil: none) in which io.allowed-paths is set:
// as in settings if it sets it, else to the temporary directory, where t.TempDir() puts the
// tests' sink, checkpoint and savepoint directories, and the working directory. StartT
// applies it; tests that start a cluster otherwise use it for theirs.
func WithAllowedPaths(settings *config.Config) *config.Config {
	s := config.New()
	if settings != nil {
		s = settings.Clone()
	}
	if !s.IsSet(config.AllowedPaths) {
		if err := s.Set(config.AllowedPaths, os.TempDir()+config.ListSeparator+"."); err != nil {
			panic(err) // two non-empty paths are a valid list
		}
	}
	return s
}

// Buffer is a bytes.Buffer safe for concurrent use: a cluster's print sinks (Options.Stdout)
// or a command write it while the test reads it.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Reset empties the buffer.
func (b *Buffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Reset()
}

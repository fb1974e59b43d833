package s3test

import (
	"os"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestCIInstallsTheSameVersion: .ci/run installs the release Version names.
func TestCIInstallsTheSameVersion(t *testing.T) {
	b, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), InstallCommand+"\n") {
		t.Fatalf(".ci/run does not run %q", InstallCommand)
	}
}

// TestStart: the server answers with the root credentials, holds the bucket, and is down
// once stopped; its process has exited (goleak checks the waiting goroutine ended).
func TestStart(t *testing.T) {
	s := Start(t)
	if !strings.HasPrefix(s.Endpoint, "http://127.0.0.1:") {
		t.Fatalf("endpoint %q", s.Endpoint)
	}
	c := s.Client(t)
	ok, err := c.BucketExists(t.Context(), s.Bucket)
	if err != nil || !ok {
		t.Fatalf("bucket %s exists: %v, %v", s.Bucket, ok, err)
	}
	s.Stop()
	if !s.exited() {
		t.Fatal("process still running after Stop")
	}
	if _, err := c.ListBuckets(t.Context()); err == nil {
		t.Fatal("server answers after Stop")
	}
	s.Stop() // idempotent
}

// TestRestart: a restarted server answers on the same endpoint with the objects it had.
func TestRestart(t *testing.T) {
	s := Start(t)
	c := s.Client(t)
	if _, err := c.PutObject(t.Context(), s.Bucket, "a/b", strings.NewReader("kept"), 4, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	endpoint := s.Endpoint
	s.Stop()
	if _, err := c.ListBuckets(t.Context()); err == nil {
		t.Fatal("server answers after Stop")
	}
	s.Restart(t)
	if s.Endpoint != endpoint {
		t.Fatalf("endpoint %s after restart, was %s", s.Endpoint, endpoint)
	}
	st, err := c.StatObject(t.Context(), s.Bucket, "a/b", minio.StatObjectOptions{})
	if err != nil || st.Size != 4 {
		t.Fatalf("object after restart: %+v, %v", st, err)
	}
}

// TestBinaryMissing: without the binary the error says how to install it.
func TestBinaryMissing(t *testing.T) {
	t.Setenv("VERSITYGW", "/nonexistent/versitygw")
	if _, err := Binary(); err == nil || !strings.Contains(err.Error(), "/nonexistent/versitygw") {
		t.Fatalf("Binary() with a missing $VERSITYGW: %v", err)
	}
	t.Setenv("VERSITYGW", "")
	t.Setenv("PATH", t.TempDir())
	t.Setenv("GOPATH", t.TempDir())
	if _, err := Binary(); err == nil || !strings.Contains(err.Error(), InstallCommand) {
		t.Fatalf("Binary() without versitygw: %v, want the install command", err)
	}
}

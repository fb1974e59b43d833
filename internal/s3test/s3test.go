// Package s3test runs a real S3 server for tests: versitygw (github.com/versity/versitygw,
// an S3 gateway over a local directory) on loopback, with a bucket made for the test, killed
// when the test ends.
//
// The server binds port 0 of 127.0.0.1 itself, and Start reads the port it got from the
// listening socket the process holds (Linux /proc), so no port is picked here and freed for
// another process to take in between.
//
// The binary is $VERSITYGW, else versitygw on PATH, else $(go env GOPATH)/bin/versitygw. A
// test that needs it fails when it is missing; install it with InstallCommand (.ci/run
// does).
package s3test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/internal/syncbuf"
)

// Version is the versitygw release the tests run; .ci/run installs the same.
const Version = "v1.8.0"

// InstallCommand installs the versitygw binary into $(go env GOPATH)/bin.
const InstallCommand = "go install github.com/versity/versitygw/cmd/versitygw@" + Version

// Root credentials of every server Start runs.
const (
	AccessKey = "goflink-test"
	SecretKey = "goflink-test-secret"
)

// startTimeout bounds how long Start waits for the server to listen and answer.
const startTimeout = 30 * time.Second

// Server is a running versitygw.
type Server struct {
	// Endpoint is the server's URL, http://127.0.0.1:<port>.
	Endpoint string
	// Bucket exists, empty, when Start returns (Run makes none).
	Bucket string
	// Dir is the directory the server keeps its buckets in (a bucket is a subdirectory).
	Dir string

	mu   sync.Mutex      // guards the fields below, which Restart replaces
	cmd  *exec.Cmd       // the latest process
	done chan struct{}   // closed when it has exited
	out  *syncbuf.Buffer // its stdout and stderr
	once *sync.Once      // its Stop
}

// Start runs versitygw for t, creates bucket "test", and stops the server when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := Run(t.TempDir())
	if s != nil {
		t.Cleanup(s.Stop)
	}
	if err != nil {
		t.Fatal(err)
	}
	s.Bucket = "test"
	if err := s.MakeBucket(t.Context(), s.Bucket); err != nil {
		t.Fatal(err)
	}
	return s
}

// Run starts versitygw on a port of 127.0.0.1 serving dir, with the root credentials
// AccessKey and SecretKey and no bucket, and waits until it answers. The caller stops it;
// on error it is stopped already (and Run may return it, for its Stop).
func Run(dir string) (*Server, error) {
	s := &Server{Dir: dir}
	port, err := s.run("127.0.0.1:0")
	if err != nil {
		return s, err
	}
	s.Endpoint = "http://127.0.0.1:" + strconv.Itoa(port)
	if err := s.waitAnswering(); err != nil {
		s.Stop()
		return s, err
	}
	return s, nil
}

// MakeBucket creates a bucket.
func (s *Server) MakeBucket(ctx context.Context, name string) error {
	c, tr, err := s.client()
	if err != nil {
		return err
	}
	defer tr.CloseIdleConnections()
	if err := c.MakeBucket(ctx, name, minio.MakeBucketOptions{}); err != nil {
		return fmt.Errorf("s3test: make bucket %s: %w", name, err)
	}
	return nil
}

// Restart starts the stopped server again on its port and directory: the same endpoint,
// with every bucket and object it had. The port was free while it was down, so another
// process may have taken it; that fails the test rather than serving someone else's port.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if !s.exited() {
		t.Fatal("s3test: Restart of a server that runs")
	}
	addr := strings.TrimPrefix(s.Endpoint, "http://")
	_, want, _ := strings.Cut(addr, ":")
	port, err := s.run(addr)
	if err == nil && strconv.Itoa(port) != want {
		err = fmt.Errorf("s3test: restarted server listens on %d, not %s", port, want)
	}
	if err == nil {
		err = s.waitAnswering()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// run starts versitygw on addr and returns the port it listens on.
func (s *Server) run(addr string) (int, error) {
	bin, err := Binary()
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	s.cmd = exec.Command(bin, "--port", addr, "--quiet", "posix", s.Dir)
	s.cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+AccessKey, "ROOT_SECRET_ACCESS_KEY="+SecretKey)
	s.out = &syncbuf.Buffer{}
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.done, s.once = make(chan struct{}), &sync.Once{}
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if err := cmd.Start(); err != nil {
		close(done)
		return 0, fmt.Errorf("s3test: start %s: %w", bin, err)
	}
	go func() {
		// The exit status is in cmd.ProcessState; Stop's kill makes it an error anyway.
		_ = cmd.Wait()
		close(done)
	}()
	var port int
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	err = poll.Wait(ctx, func() error {
		if s.exited() {
			return poll.Stop(fmt.Errorf("versitygw exited: %v; output:\n%s", cmd.ProcessState, s.out))
		}
		var err error
		port, err = listeningPort(cmd.Process.Pid)
		return err
	})
	if err != nil {
		s.Stop()
		return 0, fmt.Errorf("s3test: versitygw did not listen on %s: %w", addr, err)
	}
	return port, nil
}

// waitAnswering waits until the server answers requests.
func (s *Server) waitAnswering() error {
	c, tr, err := s.client()
	if err != nil {
		return err
	}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	err = poll.Wait(ctx, func() error {
		if s.exited() {
			return poll.Stop(fmt.Errorf("versitygw exited; output:\n%s", s.out))
		}
		_, err := c.ListBuckets(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("s3test: versitygw at %s does not answer: %w", s.Endpoint, err)
	}
	return nil
}

// Stop kills the server and waits for it to exit; the endpoint is then down. It is
// idempotent (until Restart), and the test's cleanup calls it.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done, once := s.cmd, s.done, s.once
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	once.Do(func() {
		// Kill fails only when the process has exited already, which done tells.
		_ = cmd.Process.Kill()
		<-done
	})
}

func (s *Server) exited() bool {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// Client is a minio-go client of the server with the root credentials, path-style. Its
// idle connections are closed when t ends.
func (s *Server) Client(t testing.TB) *minio.Client {
	t.Helper()
	c, tr, err := s.client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.CloseIdleConnections)
	return c
}

// client is a client of the server and its transport, whose idle connections the caller
// closes.
func (s *Server) client() (*minio.Client, *http.Transport, error) {
	tr, err := minio.DefaultTransport(false)
	if err != nil {
		return nil, nil, err
	}
	c, err := minio.New(strings.TrimPrefix(s.Endpoint, "http://"), &minio.Options{
		Creds:        credentials.NewStaticV4(AccessKey, SecretKey, ""),
		BucketLookup: minio.BucketLookupPath,
		Transport:    tr,
		Region:       "us-east-1",
		MaxRetries:   2,
	})
	if err != nil {
		return nil, nil, err
	}
	return c, tr, nil
}

// Binary finds the versitygw binary, or says how to install it.
func Binary() (string, error) {
	if p := os.Getenv("VERSITYGW"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("s3test: $VERSITYGW: %w", err)
		}
		return p, nil
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	out, err := exec.Command("go", "env", "GOPATH").Output()
	if err == nil {
		for _, dir := range filepath.SplitList(strings.TrimSpace(string(out))) {
			p := filepath.Join(dir, "bin", "versitygw")
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
		}
	}
	return "", errors.New("s3test: versitygw not found ($VERSITYGW, PATH, $(go env GOPATH)/bin); the S3 tests need it: " + InstallCommand)
}

// listeningPort is the port of the TCP socket pid listens on: the inodes of the sockets
// among its file descriptors, looked up in /proc/<pid>/net/tcp.
func listeningPort(pid int) (int, error) {
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		return 0, fmt.Errorf("s3test: finding the server's port needs Linux /proc: %w", err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if ino, ok := strings.CutPrefix(link, "socket:["); ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		return 0, fmt.Errorf("s3test: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Scan() // the header
	for sc.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] { // 0A: LISTEN
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		port, err := strconv.ParseUint(hexPort, 16, 16)
		if err != nil {
			return 0, fmt.Errorf("s3test: /proc/net/tcp local address %q: %w", f[1], err)
		}
		return int(port), nil
	}
	return 0, errors.New("s3test: the server listens on no TCP port yet")
}

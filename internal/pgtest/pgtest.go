// Package pgtest runs a real PostgreSQL server for tests: a private cluster made by initdb in
// a temporary directory, listening on 127.0.0.1 and on a Unix socket in that directory, with
// logical WAL and prepared transactions enabled, killed (immediate shutdown) when the test
// ends.
//
// PostgreSQL cannot bind port 0, so Run chooses a random port and lets the server bind it: a
// port another process holds makes the server fail to start ("could not bind"), and Run tries
// another. Nothing is picked here and freed for another process to take in between.
//
// initdb and postgres refuse to run as root. When the test runs as root, both run as the
// Debian "postgres" system user (created by the package), else as nobody; the cluster's
// directory is made under os.TempDir (a test's t.TempDir is inside a directory only root may
// enter) and owned by that user. As any other user they run as the test's user.
//
// The binaries are $PG_BIN/{initdb,postgres}, else those of the newest
// /usr/lib/postgresql/<version>/bin, else initdb and postgres on PATH. A test that needs them
// fails when they are missing; install them with InstallCommand (.ci/run does).
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/internal/syncbuf"
)

// InstallCommand installs the PostgreSQL server binaries (Debian).
const InstallCommand = "apt-get install -y postgresql"

// The superuser of every cluster Run makes. Connections over TCP authenticate it with its
// password (scram-sha-256); connections over the Unix socket are trusted.
const (
	User     = "goflink"
	Password = "goflink-test-password"
)

// MaxPreparedTransactions is the server's max_prepared_transactions.
const MaxPreparedTransactions = 64

const (
	// startTimeout bounds how long Run waits for initdb and for the server to answer.
	startTimeout = 60 * time.Second
	// stopTimeout bounds how long Stop waits for an immediate shutdown before killing.
	stopTimeout = 10 * time.Second
	// portAttempts is how many random ports Run tries.
	portAttempts = 10
)

// Server is a running PostgreSQL.
type Server struct {
	// Host is 127.0.0.1 and Port the TCP port the server listens on.
	Host string
	Port int
	// Database exists, empty, when Start returns (Run makes none; "postgres" always exists).
	Database string
	// Dir is the directory of the cluster (its data directory is Dir/data, its Unix socket
	// is in Dir). Stop removes it.
	Dir string

	cred     *syscall.Credential // whom the processes run as (nil: the test's user)
	settings []string            // name=value, after the defaults
	cmd      *exec.Cmd
	done     chan struct{}   // closed when the server has exited
	out      *syncbuf.Buffer // its log
	once     sync.Once       // Stop
}

// Start runs a server for t, creates database "test", and stops the server when t ends.
// settings ("name=value") override the server's configuration: wal_level=replica,
// max_prepared_transactions=0.
func Start(t testing.TB, settings ...string) *Server {
	t.Helper()
	s, err := Run(settings...)
	if s != nil {
		t.Cleanup(s.Stop)
	}
	if err != nil {
		t.Fatal(err)
	}
	s.Database = "test"
	if err := s.CreateDatabase(t.Context(), s.Database); err != nil {
		t.Fatal(err)
	}
	return s
}

// Run makes a cluster in a new temporary directory and starts a server on it, with the
// superuser User (password Password) and no database of its own, and waits until it answers.
// The caller stops it, which removes the directory; on error it is stopped already (and Run
// may return it, for its Stop).
func Run(settings ...string) (*Server, error) {
	bin, err := Binaries()
	if err != nil {
		return nil, err
	}
	s := &Server{Host: "127.0.0.1", done: make(chan struct{}), settings: settings}
	close(s.done) // nothing runs yet
	if s.cred, err = credential(); err != nil {
		return nil, err
	}
	if s.Dir, err = os.MkdirTemp("", "pgtest-"); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	if err := s.chown(s.Dir); err != nil {
		s.Stop()
		return s, err
	}
	if err := s.initdb(bin); err != nil {
		s.Stop()
		return s, err
	}
	var errs []error
	for range portAttempts {
		err := s.start(bin, 20000+rand.IntN(30000))
		if err == nil {
			return s, nil
		}
		errs = append(errs, err)
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	s.Stop()
	return s, errors.Join(errs...)
}

// errPortTaken is the server failing to start because its port is in use.
var errPortTaken = errors.New("port in use")

// initdb makes the cluster in Dir/data.
func (s *Server) initdb(bin string) error {
	pwfile := filepath.Join(s.Dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(Password+"\n"), 0o600); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	if err := s.chown(pwfile); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "--pgdata", filepath.Join(s.Dir, "data"),
		"--username", User, "--pwfile", pwfile, "--auth-host", "scram-sha-256", "--auth-local", "trust",
		"--encoding", "UTF8", "--locale", "C", "--no-sync", "--no-instructions")
	cmd.Dir = s.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgtest: initdb: %w; output:\n%s", err, out)
	}
	return nil
}

// start runs the server on port and waits until it answers.
func (s *Server) start(bin string, port int) error {
	args := []string{"-D", filepath.Join(s.Dir, "data"),
		"-c", "listen_addresses=" + s.Host,
		"-c", "port=" + strconv.Itoa(port),
		"-c", "unix_socket_directories=" + s.Dir,
		"-c", "wal_level=logical",
		"-c", "max_prepared_transactions=" + strconv.Itoa(MaxPreparedTransactions),
		"-c", "max_connections=200",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "logging_collector=off", "-c", "log_min_messages=warning"}
	for _, kv := range s.settings {
		args = append(args, "-c", kv)
	}
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), args...)
	s.cmd.Dir = s.Dir
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	s.out = &syncbuf.Buffer{}
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.done = make(chan struct{})
	cmd, done := s.cmd, s.done
	if err := cmd.Start(); err != nil {
		close(done)
		return fmt.Errorf("pgtest: start %s: %w", cmd.Path, err)
	}
	go func() {
		// The exit status is in cmd.ProcessState; Stop's signal makes it an error anyway.
		_ = cmd.Wait()
		close(done)
	}()
	s.Port = port
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	err := poll.Wait(ctx, func() error {
		if s.exited() {
			err := fmt.Errorf("postgres exited: %v; output:\n%s", cmd.ProcessState, s.out)
			if strings.Contains(s.out.String(), "could not bind") || strings.Contains(s.out.String(), "already in use") {
				err = fmt.Errorf("%w: %w", errPortTaken, err)
			}
			return poll.Stop(err)
		}
		conn, err := pgx.Connect(ctx, s.DSN("postgres"))
		if err != nil {
			return err
		}
		return conn.Close(ctx)
	})
	if err != nil {
		s.kill()
		return fmt.Errorf("pgtest: postgres on port %d: %w", port, err)
	}
	return nil
}

// DSN is the URL of database db on the server, over TCP as User with Password.
func (s *Server) DSN(db string) string {
	return s.DSNFor(User, Password, db)
}

// DSNFor is the URL of database db on the server as user with password (over TCP).
func (s *Server) DSNFor(user, password, db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(user, password),
		Host: net.JoinHostPort(s.Host, strconv.Itoa(s.Port)), Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

// Connect opens a connection to the test's Database as User; it is closed when t ends.
func (s *Server) Connect(t testing.TB) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), s.DSN(s.Database))
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// CreateDatabase creates an empty database.
func (s *Server) CreateDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("pgtest: create database %s: %w", name, err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("pgtest: create database %s: %w", name, err)
	}
	return nil
}

// Log is what the server logged so far.
func (s *Server) Log() string {
	if s.out == nil {
		return ""
	}
	return s.out.String()
}

// Stop shuts the server down at once (SIGQUIT: immediate shutdown, which ends its backends
// too; SIGKILL if it does not exit within stopTimeout), waits for it to exit and removes its
// directory. It is idempotent, and Start's cleanup calls it.
func (s *Server) Stop() {
	s.once.Do(func() {
		s.kill()
		if s.Dir != "" {
			_ = os.RemoveAll(s.Dir)
		}
	})
}

// kill shuts the server down, if it runs, and waits for it to exit.
func (s *Server) kill() {
	if s.cmd == nil || s.cmd.Process == nil || s.exited() {
		return
	}
	// Signal fails only when the process has exited already, which done tells.
	_ = s.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-s.done:
	case <-time.After(stopTimeout):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

func (s *Server) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// chown gives path to the user the processes run as.
func (s *Server) chown(path string) error {
	if s.cred == nil {
		return nil
	}
	if err := os.Chown(path, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	return nil
}

// credential is whom initdb and postgres run as: nil (the test's user) unless that is root,
// then the "postgres" user, else nobody.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("pgtest: running as root, and there is no user postgres or nobody to run PostgreSQL as (initdb refuses root)")
}

// Binaries is the directory holding initdb and postgres, or an error saying how to install
// them.
func Binaries() (string, error) {
	has := func(dir string) bool {
		for _, b := range []string{"initdb", "postgres"} {
			if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.IsDir() {
				return false
			}
		}
		return true
	}
	if d := os.Getenv("PG_BIN"); d != "" {
		if !has(d) {
			return "", fmt.Errorf("pgtest: $PG_BIN=%s has no initdb and postgres; the PostgreSQL tests need them: %s", d, InstallCommand)
		}
		return d, nil
	}
	if vs, err := os.ReadDir("/usr/lib/postgresql"); err == nil {
		var versions []int
		for _, v := range vs {
			if n, err := strconv.Atoi(v.Name()); err == nil {
				versions = append(versions, n)
			}
		}
		slices.Sort(versions)
		for _, v := range slices.Backward(versions) {
			if d := filepath.Join("/usr/lib/postgresql", strconv.Itoa(v), "bin"); has(d) {
				return d, nil
			}
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	return "", errors.New("pgtest: PostgreSQL's initdb and postgres not found ($PG_BIN, /usr/lib/postgresql/<version>/bin, PATH); the PostgreSQL tests need them: " + InstallCommand)
}

// Package proccluster starts goflink clusters of real processes (JobManagers and TaskManagers
// run from built binaries, flinkctl run against them) for the system tests and the bench.
// Every JobManager's sockets are bound before any process starts and passed on by socket
// activation (process.PassListeners): the members of a Raft group know each other's
// addresses from the start, and no address handed out was only free a moment ago. Each process
// writes its output to <Dir>/<name>.log, its data and temporary files under Dir.
package proccluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goflink/goflink/client"
	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/internal/process"
	"github.com/goflink/goflink/internal/security"
)

// Timeouts of starting and stopping.
const (
	readyTimeout = 30 * time.Second // Start: until every TaskManager registered
	stopGrace    = 10 * time.Second // Stop: SIGTERM, then SIGKILL
)

// Options configure a cluster.
type Options struct {
	// Bin is the directory of the jobmanager, taskmanager and flinkctl binaries.
	Bin string
	// Dir holds every process's log, data and temporary files; the caller removes it.
	Dir string
	// JobManagers is the number of JobManagers (default 1), jm1 … jm<n>; more than one form
	// a Raft group (--peers).
	JobManagers int
	// TaskManagers is the number of TaskManagers, tm-0 … tm-<n-1>.
	TaskManagers int
	// Slots is each TaskManager's number of slots (default 1).
	Slots int
	// JobManagerArgs and TaskManagerArgs are appended to every JobManager's and TaskManager's
	// arguments (-D settings, --log-level).
	JobManagerArgs, TaskManagerArgs []string
	// Debug has each TaskManager and JobManager serve pprof on a socket of its own
	// (Proc.DebugAddr).
	Debug bool
	// Isolated runs each process in a directory of its own, <Dir>/<name>: its working
	// directory, TMPDIR, log and data directory (<Dir>/<name>/data), as on machines that
	// share no disk. Otherwise they all run in Dir, with data directories <Dir>/<name>.
	Isolated bool
	// Secure generates certificates and a token (Cluster.Certs) and runs every process with
	// internal mutual TLS, the JobManagers with the token and client certificates of the
	// clients' CA; flinkctl and Client use the CA and the token.
	Secure bool
}

// Cluster is a running cluster. Its methods may be called from one goroutine at a time,
// except Stop, which may also be called from another (an interrupt handler).
type Cluster struct {
	// Addr is the JobManagers' RPC addresses, comma-separated.
	Addr string
	// JMs are the JobManagers' latest processes by index (node ID jm<i+1>): StartJobManager
	// replaces an entry.
	JMs []*Proc
	// TMs are the TaskManagers Start started, tm-0 first.
	TMs []*Proc
	// Certs are the certificates and token of a Secure cluster.
	Certs security.Generated

	opts Options
	jms  []jobManager

	mu      sync.Mutex
	procs   []*Proc // every process started, in order
	stopped bool
	stop    sync.Once
}

// jobManager is how a JobManager is started, again after a kill.
type jobManager struct {
	addr, metricsAddr, restAddr string
	args                        []string
	sockets                     map[string]net.Listener // bound by Start for the first start; nil after it
}

// Start starts the JobManagers, then the TaskManagers, and waits until every TaskManager
// registered with the leader. On error it stops what it started and returns the stopped
// cluster too: its processes' logs tell what went wrong.
func Start(opts Options) (c *Cluster, err error) {
	opts.JobManagers, opts.Slots = max(opts.JobManagers, 1), max(opts.Slots, 1)
	c = &Cluster{opts: opts, JMs: make([]*Proc, opts.JobManagers)}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if opts.Secure {
		if c.Certs, err = security.Generate(filepath.Join(opts.Dir, "certs"), []string{"localhost", "127.0.0.1"}, 24*time.Hour); err != nil {
			return c, err
		}
		tls := []string{"-D", config.SSLInternalEnabled + "=true", "-D", config.SSLInternalCert + "=" + c.Certs.Cluster,
			"-D", config.SSLInternalKey + "=" + c.Certs.ClusterKey, "-D", config.SSLInternalCA + "=" + c.Certs.CA}
		// Clients authenticate with the token or a client certificate: on the JobManagers' RPC
		// port, and on every process's metrics port.
		auth := append(tls, "-D", config.AuthTokenFile+"="+c.Certs.Token,
			"-D", config.SSLRestClientAuth+"=true", "-D", config.SSLRestCA+"="+c.Certs.ClientCA)
		opts.JobManagerArgs = append(slices.Clone(auth), opts.JobManagerArgs...)
		opts.TaskManagerArgs = append(slices.Clone(auth), opts.TaskManagerArgs...)
		c.opts = opts
	}
	var addrs, peers []string
	for i := range opts.JobManagers {
		id := fmt.Sprintf("jm%d", i+1)
		sockets, args, err := JobManagerSockets()
		if err != nil {
			return c, err
		}
		c.jms = append(c.jms, jobManager{addr: sockets["rpc"].Addr().String(), metricsAddr: sockets["metrics"].Addr().String(), restAddr: sockets["rest"].Addr().String(), sockets: sockets,
			args: append([]string{"--node-id", id, "--data-dir", c.dataDir(id)}, args...)})
		addrs = append(addrs, sockets["rpc"].Addr().String())
		peers = append(peers, id+"="+sockets["raft"].Addr().String())
	}
	c.Addr = strings.Join(addrs, ",")
	for i := range c.jms {
		if len(c.jms) > 1 {
			c.jms[i].args = append(c.jms[i].args, "--peers", strings.Join(peers, ","))
		}
		c.jms[i].args = append(c.jms[i].args, opts.JobManagerArgs...)
		if _, err := c.StartJobManager(i); err != nil {
			return c, err
		}
	}
	var ids []string
	for i := range opts.TaskManagers {
		ids = append(ids, fmt.Sprintf("tm-%d", i))
		p, err := c.StartTaskManager(ids[i])
		if err != nil {
			return c, err
		}
		c.TMs = append(c.TMs, p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := c.WaitTaskManagers(ctx, ids); err != nil {
		return c, err
	}
	return c, nil
}

// JobManagerSockets binds a JobManager's RPC, Raft, metrics and dashboard sockets on loopback
// and returns them by the names the jobmanager binary takes them under, with the arguments
// that name their addresses (--rpc-addr, --raft-addr, metrics.reporter.prom.port, rest.port: a
// restarted JobManager binds them again), for Exec.
func JobManagerSockets() (sockets map[string]net.Listener, args []string, err error) {
	sockets = map[string]net.Listener{}
	for _, name := range []string{"rpc", "raft", "metrics", "rest"} {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			closeAll(sockets)
			return nil, nil, err
		}
		sockets[name] = lis
	}
	_, metricsPort, _ := net.SplitHostPort(sockets["metrics"].Addr().String())
	_, restPort, _ := net.SplitHostPort(sockets["rest"].Addr().String())
	return sockets, []string{"--rpc-addr", sockets["rpc"].Addr().String(), "--raft-addr", sockets["raft"].Addr().String(),
		"-D", config.MetricsPort + "=" + metricsPort, "-D", config.RestPort + "=" + restPort}, nil
}

// JobManagerAddr returns JobManager i's RPC address.
func (c *Cluster) JobManagerAddr(i int) string { return c.jms[i].addr }

// StartJobManager starts JobManager i on its data directory: the first time on the sockets
// Start bound, again (after a kill) on the same addresses, which the process then binds.
func (c *Cluster) StartJobManager(i int) (*Proc, error) {
	jm := &c.jms[i]
	sockets := jm.sockets
	jm.sockets = nil
	var debugAddr string
	if c.opts.Debug {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			closeAll(sockets)
			return nil, err
		}
		if sockets == nil {
			sockets = map[string]net.Listener{} // a restart: the others are bound by the process
		}
		sockets["debug"], debugAddr = lis, lis.Addr().String()
	}
	p, err := c.startProc(fmt.Sprintf("jm%d", i+1), "jobmanager", sockets, nil, jm.args...)
	if err != nil {
		return nil, err
	}
	p.MetricsAddr, p.RESTAddr, p.DebugAddr = jm.metricsAddr, jm.restAddr, debugAddr
	c.JMs[i] = p
	return p, nil
}

// StartTaskManager starts a TaskManager with the ID id (its data directory <Dir>/<id>, or
// <Dir>/<id>/data when Isolated) and the cluster's slots, given every JobManager's address.
func (c *Cluster) StartTaskManager(id string) (*Proc, error) { return c.StartTaskManagerEnv(id) }

// StartTaskManagerEnv starts a TaskManager as StartTaskManager does, with env ("KEY=value")
// added to its environment.
func (c *Cluster) StartTaskManagerEnv(id string, env ...string) (*Proc, error) {
	args := append([]string{"--jobmanager", c.Addr, "--addr", "127.0.0.1:0", "--slots", strconv.Itoa(c.opts.Slots),
		"--id", id, "--data-dir", c.dataDir(id)}, c.opts.TaskManagerArgs...)
	names := []string{"metrics"}
	if c.opts.Debug {
		names = append(names, "debug")
	}
	sockets := map[string]net.Listener{}
	for _, name := range names {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			closeAll(sockets)
			return nil, err
		}
		sockets[name] = lis
	}
	metricsAddr := sockets["metrics"].Addr().String()
	p, err := c.startProc(id, "taskmanager", sockets, env, args...)
	if err != nil {
		return nil, err
	}
	p.MetricsAddr = metricsAddr
	if c.opts.Debug {
		p.DebugAddr = sockets["debug"].Addr().String()
	}
	return p, nil
}

// procDir is the directory process name runs in.
func (c *Cluster) procDir(name string) string {
	if c.opts.Isolated {
		return filepath.Join(c.opts.Dir, name)
	}
	return c.opts.Dir
}

// dataDir is process name's data directory.
func (c *Cluster) dataDir(name string) string {
	if c.opts.Isolated {
		return filepath.Join(c.opts.Dir, name, "data")
	}
	return filepath.Join(c.opts.Dir, name)
}

// startProc starts a process of the cluster (see Exec) with env added to its environment.
func (c *Cluster) startProc(name, binary string, sockets map[string]net.Listener, env []string, args ...string) (*Proc, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		closeAll(sockets)
		return nil, errors.New("the cluster is stopped")
	}
	dir := c.procDir(name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		closeAll(sockets)
		return nil, err
	}
	p, err := execEnv(c.opts.Bin, dir, name, binary, sockets, env, args...)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	return p, nil
}

// Procs returns every process the cluster started, in order.
func (c *Cluster) Procs() []*Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.procs)
}

// Proc returns the latest process named name (a JobManager's node ID, a TaskManager's ID), or
// nil.
func (c *Cluster) Proc(name string) *Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range slices.Backward(c.procs) {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// WaitTaskManagers waits until the leader lists exactly the TaskManagers ids.
func (c *Cluster) WaitTaskManagers(ctx context.Context, ids []string) error {
	cl, err := c.Client()
	if err != nil {
		return err
	}
	defer cl.Close()
	want := slices.Sorted(slices.Values(ids))
	err = poll.Wait(ctx, func() error {
		info, err := cl.Cluster(ctx)
		if err != nil {
			return err
		}
		var have []string
		for _, tm := range info.GetTaskmanagers() {
			have = append(have, tm.GetId())
		}
		if slices.Sort(have); !slices.Equal(have, want) {
			return fmt.Errorf("taskmanagers %v registered, want %v", have, want)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cluster not ready: %w", err)
	}
	return nil
}

// Stop stops every process (SIGTERM, SIGKILL after a grace period) and waits until they are
// gone. It is idempotent; the cluster starts no process afterwards. Dir stays.
func (c *Cluster) Stop() {
	c.stop.Do(func() {
		c.mu.Lock()
		c.stopped = true
		procs := slices.Clone(c.procs)
		for i := range c.jms {
			closeAll(c.jms[i].sockets)
		}
		c.mu.Unlock()
		var wg sync.WaitGroup
		for _, p := range procs {
			wg.Go(p.Stop)
		}
		wg.Wait()
	})
}

// Proc is one started process.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	// Log is the file its stdout and stderr go to.
	Log string
	// DebugAddr is where it serves pprof (a process of a cluster with Options.Debug).
	DebugAddr string
	// MetricsAddr is where it serves its Prometheus metrics (host:port), RESTAddr its
	// dashboard (a JobManager's).
	MetricsAddr, RESTAddr string

	done chan struct{} // closed once it was reaped
}

// Exec starts <bin>/<binary> with args as a process called name: its working directory dir,
// its TMPDIR and output under dir (<name>.log; <name>.<n>.log for the n-th restart). It passes
// the sockets by socket activation under their names and closes this process's copies (on
// error too). On Linux the process is SIGKILLed when this one dies.
func Exec(bin, dir, name, binary string, sockets map[string]net.Listener, args ...string) (*Proc, error) {
	return execEnv(bin, dir, name, binary, sockets, nil, args...)
}

// execEnv is Exec with env added to the process's environment.
func execEnv(bin, dir, name, binary string, sockets map[string]net.Listener, env []string, args ...string) (*Proc, error) {
	defer closeAll(sockets)
	logName, f, err := createLog(dir, name)
	if err != nil {
		return nil, err
	}
	tmp := filepath.Join(dir, "tmp-"+logName)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		f.Close()
		return nil, err
	}
	cmd := exec.Command(filepath.Join(bin, binary), args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, f, f
	cmd.Env = append(append(os.Environ(), "TMPDIR="+tmp), env...)
	cmd.SysProcAttr = childAttr()
	closeCopies, err := process.PassListeners(cmd, sockets)
	if err == nil {
		err = cmd.Start()
		closeCopies()
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, Cmd: cmd, Log: f.Name(), done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// createLog creates the log file of a process called name: <name>.log in dir, or when that
// exists (a restart) <name>.<n>.log. It returns the file's name without ".log".
func createLog(dir, name string) (string, *os.File, error) {
	for n := 0; ; n++ {
		logName := name
		if n > 0 {
			logName = fmt.Sprintf("%s.%d", name, n)
		}
		f, err := os.OpenFile(filepath.Join(dir, logName+".log"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if !errors.Is(err, fs.ErrExist) {
			return logName, f, err
		}
	}
}

// Done is closed once the process exited and was reaped (Cmd.ProcessState is then set).
func (p *Proc) Done() <-chan struct{} { return p.done }

// Kill sends SIGKILL, unless the process exited, waits until it is gone, and returns when the
// signal was sent.
func (p *Proc) Kill() time.Time {
	at := time.Now()
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	return at
}

// Stop sends SIGTERM and waits until the process is gone, killing it after a grace period.
func (p *Proc) Stop() {
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		p.Kill()
	}
}

// Output returns what the process wrote so far.
func (p *Proc) Output() (string, error) {
	data, err := os.ReadFile(p.Log)
	return string(data), err
}

// Tail returns the last n lines of the process's output.
func (p *Proc) Tail(n int) string {
	out, _ := p.Output()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func closeAll(ls map[string]net.Listener) {
	for _, l := range ls {
		l.Close()
	}
}

// ClientOptions are what a client of the cluster brings: nothing, or for a Secure cluster its
// CA and token.
func (c *Cluster) ClientOptions() security.ClientOptions {
	if !c.opts.Secure {
		return security.ClientOptions{}
	}
	tok, _ := os.ReadFile(c.Certs.Token)
	return security.ClientOptions{CA: c.Certs.CA, Token: strings.TrimSpace(string(tok))}
}

// Client returns a client of the cluster (with the CA and token of a Secure one); close it
// after use.
func (c *Cluster) Client() (*client.Client, error) {
	opts, err := c.ClientOptions().DialOptions()
	if err != nil {
		return nil, err
	}
	return client.NewWithOptions(opts, c.Addr)
}

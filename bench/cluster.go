package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/goflink/goflink/internal/proccluster"
)

// cluster is JobManagers and TaskManagers started from bin/ as real processes (proccluster).
// Everything they write — Raft data, TaskManager data, their TMPDIR (bbolt working files),
// checkpoints, file sink output, the logs — is under dir, which stop removes. Every
// TaskManager serves pprof (Proc.DebugAddr).
type cluster struct {
	*proccluster.Cluster
	dir      string
	stopOnce sync.Once
}

// Every cluster and temporary directory is registered until it is cleaned up, so that an
// interrupt (Ctrl-C, SIGTERM) cleans up too.
var cleanups = struct {
	sync.Mutex
	next int
	fns  map[int]func()
}{fns: map[int]func(){}}

// onInterrupt registers f to run if the bench is interrupted; the returned func unregisters it.
func onInterrupt(f func()) (unregister func()) {
	cleanups.Lock()
	defer cleanups.Unlock()
	id := cleanups.next
	cleanups.next++
	cleanups.fns[id] = f
	return func() {
		cleanups.Lock()
		delete(cleanups.fns, id)
		cleanups.Unlock()
	}
}

// handleInterrupts stops every registered cluster and removes the temporary directories on
// SIGINT, SIGTERM or SIGHUP, then exits.
func handleInterrupts() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-ch
		fmt.Fprintf(os.Stderr, "\nbench: %v: stopping the processes and removing the temporary files\n", s)
		cleanups.Lock()
		fns := slices.Collect(maps.Values(cleanups.fns))
		cleanups.Unlock()
		for _, f := range fns {
			f()
		}
		os.Exit(130)
	}()
}

// startCluster starts jms JobManagers jm1 … jm<jms> (more than one form a Raft group; the
// TaskManagers are given every address) and TaskManagers tm-0 … tm-<tms-1> with slots slots
// each, and waits until all TaskManagers registered with the leader. A secure cluster runs
// mutual TLS on every connection between its processes and asks clients for its token
// (proccluster.Options.Secure: certificates and token generated under its directory); the
// cluster's flinkctl calls bring its CA and token. On error it prints the end of the logs and
// leaves nothing behind.
func startCluster(bin string, jms, tms, slots int, secure bool) (*cluster, error) {
	return startClusterWith(bin, jms, tms, slots, secure, nil)
}

// startClusterWith is startCluster with args added to every process's arguments.
func startClusterWith(bin string, jms, tms, slots int, secure bool, args []string) (*cluster, error) {
	abs, err := filepath.Abs(bin)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "goflink-bench-")
	if err != nil {
		return nil, err
	}
	// Until the cluster is up only its directory needs removing: its processes die with the
	// bench (proccluster's children are SIGKILLed when their parent dies).
	unregister := onInterrupt(func() { os.RemoveAll(dir) })
	defer unregister()
	quiet := append([]string{"--log-level", "warn"}, args...)
	pc, err := proccluster.Start(proccluster.Options{Bin: abs, Dir: dir, JobManagers: jms, TaskManagers: tms, Slots: slots,
		JobManagerArgs: quiet, TaskManagerArgs: quiet, Debug: true, Secure: secure})
	c := &cluster{Cluster: pc, dir: dir}
	if err != nil {
		c.dumpLog()
		c.stop()
		return nil, err
	}
	onInterrupt(c.stop)
	return c, nil
}

// kill sends SIGKILL to the running process named name (a TaskManager ID or a JobManager's
// node ID) and returns the time just before the signal.
func (c *cluster) kill(name string) (time.Time, error) {
	p := c.Proc(name)
	if p == nil {
		return time.Time{}, fmt.Errorf("no process %s", name)
	}
	select {
	case <-p.Done():
		return time.Time{}, fmt.Errorf("%s is not running", name)
	default:
	}
	return p.Kill(), nil
}

// waitTaskManagers waits until the JobManager lists exactly the TaskManagers ids.
func (c *cluster) waitTaskManagers(ids []string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return c.WaitTaskManagers(ctx, ids)
}

// dumpLog prints the end of each process's log (after an error).
func (c *cluster) dumpLog() {
	for _, p := range c.Procs() {
		fmt.Fprintf(os.Stderr, "--- last lines of %s's log ---\n%s\n", p.Name, p.Tail(30))
	}
}

// finish stops the cluster at the end of a section, showing the end of its logs first when
// the section failed (*err is set).
func (c *cluster) finish(err *error) {
	if *err != nil {
		c.dumpLog()
	}
	c.stop()
}

// stop ends every process and removes the directory. It is idempotent and safe to call from
// the interrupt handler.
func (c *cluster) stop() {
	c.stopOnce.Do(func() {
		c.Stop()
		os.RemoveAll(c.dir)
	})
}

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// cluster is a JobManager and TaskManagers started from bin/ as real processes. Everything
// they write — Raft data, TaskManager data, their TMPDIR (bbolt working files), checkpoints,
// file sink output, the log — is under dir, which stop removes.
type cluster struct {
	dir       string
	bin       string // absolute
	jm        string // the JobManagers' RPC addresses, comma-separated
	jms       []jobManager
	debugAddr string // tm-0's pprof address
	slots     int    // per TaskManager
	logf      *os.File

	mu       sync.Mutex
	procs    []*proc
	stopOnce sync.Once
}

// jobManager is one JobManager of a cluster, with the arguments to start it (again).
type jobManager struct {
	id   string // Raft node ID, also the process name
	addr string // RPC address
	args []string
}

// proc is one started process; done is closed once it was reaped.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
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
		fns := make([]func(), 0, len(cleanups.fns))
		for _, f := range cleanups.fns {
			fns = append(fns, f)
		}
		cleanups.Unlock()
		for _, f := range fns {
			f()
		}
		os.Exit(130)
	}()
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startCluster starts a JobManager and TaskManagers tm-0 … tm-<tms-1> with slots slots each
// and waits until all registered. On error nothing is left behind.
func startCluster(bin string, tms, slots int) (*cluster, error) {
	return startClusterOf(bin, 1, tms, slots)
}

// startClusterOf starts jms JobManagers jm1 … jm<jms> (more than one form a Raft group with
// --peers; the TaskManagers are given every address) and TaskManagers tm-0 … tm-<tms-1> with
// slots slots each, and waits until all TaskManagers registered with the leader. On error
// nothing is left behind.
func startClusterOf(bin string, jms, tms, slots int) (c *cluster, err error) {
	abs, err := filepath.Abs(bin)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "goflink-bench-")
	if err != nil {
		return nil, err
	}
	c = &cluster{dir: dir, bin: abs, slots: slots}
	unregister := onInterrupt(c.stop)
	defer func() {
		if err != nil {
			c.dumpLog(os.Stderr)
			c.stop()
			unregister()
			c = nil
		}
	}()
	if c.debugAddr, err = freeAddr(); err != nil {
		return c, err
	}
	rpc, raft, peers := make([]string, jms), make([]string, jms), make([]string, jms)
	for i := range jms {
		var err1, err2 error
		rpc[i], err1 = freeAddr()
		raft[i], err2 = freeAddr()
		if err := errors.Join(err1, err2); err != nil {
			return c, err
		}
		peers[i] = fmt.Sprintf("jm%d=%s", i+1, raft[i])
	}
	c.jm = strings.Join(rpc, ",")
	if c.logf, err = os.Create(filepath.Join(dir, "cluster.log")); err != nil {
		return c, err
	}
	for i := range jms {
		id := fmt.Sprintf("jm%d", i+1)
		args := []string{"--node-id", id, "--rpc-addr", rpc[i], "--raft-addr", raft[i], "--data-dir", filepath.Join(dir, id), "--log-level", "warn"}
		if jms > 1 {
			args = append(args, "--peers", strings.Join(peers, ","))
		}
		c.jms = append(c.jms, jobManager{id: id, addr: rpc[i], args: args})
		if err := c.startJM(i); err != nil {
			return c, err
		}
	}
	ids := make([]string, tms)
	for i := range tms {
		ids[i] = fmt.Sprintf("tm-%d", i)
		if err := c.startTM(ids[i]); err != nil {
			return c, err
		}
	}
	return c, c.waitTaskManagers(ids, 30*time.Second)
}

// startJM starts JobManager i (again, on its data directory and ports).
func (c *cluster) startJM(i int) error {
	return c.start(c.jms[i].id, "jobmanager", c.jms[i].args...)
}

// start starts a process with its working directory and TMPDIR in the cluster's directory.
func (c *cluster) start(name, binary string, args ...string) error {
	tmp := filepath.Join(c.dir, "tmp-"+name)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(c.bin, binary), args...)
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.Stdout, cmd.Stderr = c.logf, c.logf
	cmd.SysProcAttr = childAttr()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	c.procs = append(c.procs, p)
	return nil
}

// startTM starts a TaskManager with the cluster's slots; tm-0 serves pprof on debugAddr.
func (c *cluster) startTM(id string) error {
	args := []string{"--jobmanager", c.jm, "--addr", "127.0.0.1:0", "--slots", strconv.Itoa(c.slots), "--id", id,
		"--data-dir", filepath.Join(c.dir, id), "--log-level", "warn"}
	if id == "tm-0" {
		args = append(args, "--debug-addr", c.debugAddr)
	}
	return c.start(id, "taskmanager", args...)
}

// kill sends SIGKILL to the running process named name (a TaskManager ID or a JobManager's
// node ID) and returns the time just before the signal. The process is reaped in the
// background.
func (c *cluster) kill(name string) (time.Time, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range slices.Backward(c.procs) { // a restarted process: the newest one
		if p.name != name {
			continue
		}
		select {
		case <-p.done:
			return time.Time{}, fmt.Errorf("%s is not running", name)
		default:
		}
		t := time.Now()
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			return time.Time{}, fmt.Errorf("kill %s: %w", name, err)
		}
		return t, nil
	}
	return time.Time{}, fmt.Errorf("no process %s", name)
}

// waitTaskManagers waits until the JobManager lists exactly the TaskManagers ids.
func (c *cluster) waitTaskManagers(ids []string, timeout time.Duration) error {
	want := strings.Join(sortedCopy(ids), ",")
	deadline := time.Now().Add(timeout)
	for {
		out, err := c.flinkctl("cluster", "-o", "json")
		var info struct {
			TaskManagers []struct {
				ID string `json:"id"`
			} `json:"taskmanagers"`
		}
		var have []string
		if err == nil {
			if err = json.Unmarshal(out, &info); err == nil {
				for _, tm := range info.TaskManagers {
					have = append(have, tm.ID)
				}
				if strings.Join(sortedCopy(have), ",") == want {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not ready after %v: want taskmanagers %s, have %v (%v)", timeout, want, have, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *cluster) flinkctl(args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(c.bin, "flinkctl"), append([]string{"-m", c.jm}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("flinkctl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), nil
}

// dumpLog prints the end of the cluster's log (after an error).
func (c *cluster) dumpLog(w *os.File) {
	data, err := os.ReadFile(filepath.Join(c.dir, "cluster.log"))
	if err != nil || len(data) == 0 {
		return
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	lines = lines[max(0, len(lines)-30):]
	fmt.Fprintf(w, "--- last %d lines of the cluster log ---\n%s\n---\n", len(lines), strings.Join(lines, "\n"))
}

// stop ends every process (SIGTERM, SIGKILL after 10 s) and removes the directory. It is
// idempotent and safe to call from the interrupt handler.
func (c *cluster) stop() {
	c.stopOnce.Do(func() {
		c.mu.Lock()
		procs := append([]*proc(nil), c.procs...)
		c.mu.Unlock()
		for _, p := range procs {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range procs {
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		}
		if c.logf != nil {
			c.logf.Close()
		}
		os.RemoveAll(c.dir)
	})
}

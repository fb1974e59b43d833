package systemtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/internal/proccluster"
)

// exitWithin waits for p to exit, failing the test after d.
func exitWithin(t *testing.T, p *proccluster.Proc, d time.Duration) {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(d):
		t.Fatalf("%s still runs %v later", p.Name, d)
	}
}

// logOf returns what p wrote so far.
func logOf(t *testing.T, p *proccluster.Proc) string {
	t.Helper()
	out, err := p.Output()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// startJobManager starts a JobManager process outside any cluster on sockets of its own.
func startJobManager(t *testing.T, name, id, dataDir string) *proccluster.Proc {
	t.Helper()
	sockets, args, err := proccluster.JobManagerSockets()
	if err != nil {
		t.Fatal(err)
	}
	return startProc(t, name, "jobmanager", sockets, append([]string{"--node-id", id, "--data-dir", dataDir}, args...)...)
}

// A second JobManager on a data dir in use fails at once and names the first one's process,
// as a port in use does, instead of waiting for the Raft store's file lock for ever.
func TestSecondJobManagerOnADataDirInUseFails(t *testing.T) {
	skipShort(t)
	c := startCluster(t, 0, 1)
	first := c.JMs[0]
	dir := first.Cmd.Args[slices.Index(first.Cmd.Args, "--data-dir")+1]
	second := startJobManager(t, "jobmanager-second", "jm1", dir)
	exitWithin(t, second, 10*time.Second)
	if code := second.Cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	want := fmt.Sprintf("data dir %s is in use by another jobmanager (pid %d)", dir, first.Cmd.Process.Pid)
	if out := logOf(t, second); !strings.Contains(out, want) {
		t.Errorf("output %q, want it to say %q", out, want)
	}
	if _, errOut, code := c.flinkctl("list"); code != 0 {
		t.Errorf("the first JobManager stopped answering: exit %d: %s", code, errOut)
	}
}

// A TaskManager started with the ID of a running one is refused while the first lives; the
// first stays registered (no registration storm) and the newcomer says why it waits.
func TestDuplicateTaskManagerIDIsRefused(t *testing.T) {
	skipShort(t)
	c := startCluster(t, 1, 1)
	dup := c.startTM("tm-0")
	poll.Until(t, 20*time.Second, "the duplicate to report the refusal", func() error {
		if !strings.Contains(logOf(t, dup), "refused this taskmanager's ID") {
			return fmt.Errorf("the duplicate has not reported the refusal yet")
		}
		return nil
	})
	out := logOf(t, dup)
	if !strings.Contains(out, "taskmanager ID in use") || !strings.Contains(out, "give each TaskManager its own --id") {
		t.Errorf("duplicate's log does not explain the refusal:\n%s", dup.Tail(10))
	}
	var info struct {
		TaskManagers []struct{ ID, Address string } `json:"taskmanagers"`
	}
	if err := c.FlinkctlJSON(context.Background(), &info, "cluster"); err != nil {
		t.Fatal(err)
	}
	if len(info.TaskManagers) != 1 || strings.Count(logOf(t, c.TMs[0]), "registered with jobmanager") != 1 {
		t.Errorf("cluster %+v; the first TaskManager registered %d times: want it registered once, alone",
			info.TaskManagers, strings.Count(logOf(t, c.TMs[0]), "registered with jobmanager"))
	}
	if n := strings.Count(logOf(t, c.JMs[0]), "taskmanager registered"); n != 1 {
		t.Errorf("the jobmanager accepted %d registrations, want 1", n)
	}
}

// Every process stops on SIGTERM at any point of its start-up, within seconds.
func TestSIGTERMStopsProcessesDuringStartup(t *testing.T) {
	skipShort(t)
	// No JobManager listens here: the port was free a moment ago and nothing in the test binds
	// it (a dead address, not one handed to a server).
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := dead.Addr().String()
	dead.Close()
	busy := filepath.Join(t.TempDir(), "jm")
	startJobManager(t, "jobmanager-holding-its-data-dir", "jm1", busy)
	cases := map[string]func(name string) *proccluster.Proc{
		"jobmanager on a data dir in use": func(name string) *proccluster.Proc { return startJobManager(t, name, "jm2", busy) },
		"jobmanager": func(name string) *proccluster.Proc {
			return startJobManager(t, name, "jm1", filepath.Join(t.TempDir(), "jm"))
		},
		"taskmanager": func(name string) *proccluster.Proc {
			return startProc(t, name, "taskmanager", nil, "--jobmanager", nobody, "--addr", "127.0.0.1:0")
		},
		"flinkctl": func(name string) *proccluster.Proc { return startProc(t, name, "flinkctl", nil, "-m", nobody, "list") },
	}
	for name, start := range cases {
		signalled := 0 // runs that were still starting when SIGTERM came
		for _, delay := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond, 100 * time.Millisecond, 500 * time.Millisecond} {
			p := start(fmt.Sprintf("%s-%v", strings.ReplaceAll(name, " ", "-"), delay))
			time.Sleep(delay) // the fault's timing: how far start-up got
			switch err := p.Cmd.Process.Signal(syscall.SIGTERM); {
			case err == nil:
				signalled++
			case !errors.Is(err, os.ErrProcessDone): // done: it ended by itself first
				t.Fatalf("%s: SIGTERM: %v", p.Name, err)
			}
			exitWithin(t, p, 5*time.Second)
		}
		if signalled == 0 {
			t.Errorf("%s: every run ended before its SIGTERM; no start-up was interrupted", name)
		}
	}
}

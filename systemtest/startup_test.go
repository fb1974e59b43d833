package systemtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goflink/goflink/internal/poll"
)

// exitWithin waits for p to exit, failing the test after d.
func exitWithin(t *testing.T, p *proc, d time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("%s still runs %v later", p.name, d)
	}
}

// logOf returns what p wrote so far.
func logOf(t *testing.T, p *proc) string {
	t.Helper()
	data, err := os.ReadFile(p.log)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// A second JobManager on a data dir in use fails at once and names the first one's process,
// as a port in use does, instead of waiting for the Raft store's file lock for ever.
func TestSecondJobManagerOnADataDirInUseFails(t *testing.T) {
	skipShort(t)
	c := startCluster(t, 0, 1)
	dir := c.JM.cmd.Args[slicesIndex(c.JM.cmd.Args, "--data-dir")+1]
	second := startProc(t, "jobmanager second", "--node-id", "jm1", "--rpc-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"--raft-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--data-dir", dir)
	exitWithin(t, second, 10*time.Second)
	if code := second.cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	want := fmt.Sprintf("data dir %s is in use by another jobmanager (pid %d)", dir, c.JM.cmd.Process.Pid)
	if out := logOf(t, second); !strings.Contains(out, want) {
		t.Errorf("output %q, want it to say %q", out, want)
	}
	if _, errOut, code := c.flinkctl("list"); code != 0 {
		t.Errorf("the first JobManager stopped answering: exit %d: %s", code, errOut)
	}
}

func slicesIndex(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// A TaskManager started with the ID of a running one is refused while the first lives; the
// first stays registered (no registration storm) and the newcomer says why it waits.
func TestDuplicateTaskManagerIDIsRefused(t *testing.T) {
	skipShort(t)
	c := startCluster(t, 1, 1)
	dup := startProc(t, "taskmanager duplicate", "--jobmanager", c.jm, "--addr", "127.0.0.1:0", "--slots", "1", "--id", "tm-0")
	poll.Until(t, 20*time.Second, "the duplicate to report the refusal", func() error {
		if !strings.Contains(logOf(t, dup), "refused this taskmanager's ID") {
			return fmt.Errorf("the duplicate has not reported the refusal yet")
		}
		return nil
	})
	out := logOf(t, dup)
	if !strings.Contains(out, "taskmanager ID in use") || !strings.Contains(out, "give each TaskManager its own --id") {
		t.Errorf("duplicate's log does not explain the refusal:\n%s", tail(out, 10))
	}
	var info struct {
		TaskManagers []struct{ ID, Address string } `json:"taskmanagers"`
	}
	if err := c.flinkctlJSON(&info, "cluster"); err != nil {
		t.Fatal(err)
	}
	if len(info.TaskManagers) != 1 || strings.Count(logOf(t, c.TMs[0]), "registered with jobmanager") != 1 {
		t.Errorf("cluster %+v; the first TaskManager registered %d times: want it registered once, alone",
			info.TaskManagers, strings.Count(logOf(t, c.TMs[0]), "registered with jobmanager"))
	}
	if n := strings.Count(logOf(t, c.JM), "taskmanager registered"); n != 1 {
		t.Errorf("the jobmanager accepted %d registrations, want 1", n)
	}
}

// Every process stops on SIGTERM at any point of its start-up, within seconds.
func TestSIGTERMStopsProcessesDuringStartup(t *testing.T) {
	skipShort(t)
	nobody := fmt.Sprintf("127.0.0.1:%d", freePort(t)) // no JobManager listens here
	busy := filepath.Join(t.TempDir(), "jm")
	startProc(t, "jobmanager holding its data dir", "--node-id", "jm1", "--rpc-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"--raft-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--data-dir", busy)
	cases := map[string]func() []string{
		"jobmanager on a data dir in use": func() []string {
			return []string{"--node-id", "jm2", "--rpc-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
				"--raft-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--data-dir", busy}
		},
		"jobmanager": func() []string {
			return []string{"--node-id", "jm1", "--rpc-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
				"--raft-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--data-dir", filepath.Join(t.TempDir(), "jm")}
		},
		"taskmanager": func() []string { return []string{"--jobmanager", nobody, "--addr", "127.0.0.1:0"} },
		"flinkctl":    func() []string { return []string{"-m", nobody, "list"} },
	}
	for name, args := range cases {
		for _, delay := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond, 100 * time.Millisecond, 500 * time.Millisecond} {
			p := startProc(t, fmt.Sprintf("%s %v", strings.Fields(name)[0], delay), args()...)
			time.Sleep(delay) // the fault's timing: how far start-up got
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			exitWithin(t, p, 5*time.Second)
		}
	}
}

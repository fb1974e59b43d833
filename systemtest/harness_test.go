package systemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goflink/goflink/internal/poll"
)

// binDir holds the binaries built once for the whole package (with -race).
var binDir string

func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Short() && os.Getenv("GOFLINK_SKIP_BUILD") == "" {
		dir, err := os.MkdirTemp("", "goflink-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		cmd := exec.Command("go", "build", "-race", "-o", dir+"/", "../cmd/...")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build binaries:", err)
			os.Exit(1)
		}
		binDir = dir
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-process system test; run without -short")
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// proc is one running binary whose output goes to a log file.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	bin := strings.Fields(name)[0]
	logPath := filepath.Join(t.TempDir(), strings.ReplaceAll(name, " ", "_")+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, bin), args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		data, _ := os.ReadFile(logPath)
		// The binaries are built with -race: a race in a process fails the test that ran it.
		if i := strings.Index(string(data), "WARNING: DATA RACE"); i >= 0 {
			t.Errorf("%s: data race:\n%s", name, string(data)[i:min(len(data), i+6000)])
		}
		if t.Failed() {
			t.Logf("--- %s log ---\n%s", name, tail(string(data), 60))
		}
	})
	return p
}

// kill sends SIGKILL and waits for the process to die.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop asks the process to stop (SIGTERM), killing it after a grace period.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.kill()
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// cluster is a JobManager and some TaskManagers, each in its own process.
type cluster struct {
	t   *testing.T
	jm  string // RPC address
	JM  *proc
	TMs []*proc
}

func startCluster(t *testing.T, tms, slots int, jmArgs ...string) *cluster {
	t.Helper()
	c := &cluster{t: t, jm: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	args := append([]string{"--node-id", "jm1", "--rpc-addr", c.jm, "--raft-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"--data-dir", filepath.Join(t.TempDir(), "jm"), "-D", "heartbeat.interval=200ms", "-D", "heartbeat.timeout=2s"}, jmArgs...)
	c.JM = startProc(t, "jobmanager", args...)
	for i := range tms {
		c.TMs = append(c.TMs, startProc(t, fmt.Sprintf("taskmanager %d", i), "--jobmanager", c.jm, "--addr", "127.0.0.1:0",
			"--slots", fmt.Sprint(slots), "--id", fmt.Sprintf("tm-%d", i)))
	}
	poll.Until(t, 30*time.Second, "the TaskManagers to register", func() error {
		var info struct {
			TaskManagers []struct{ ID string } `json:"taskmanagers"`
		}
		if err := c.flinkctlJSON(&info, "cluster"); err != nil {
			return err
		}
		if len(info.TaskManagers) != tms {
			return fmt.Errorf("%d of %d taskmanagers registered", len(info.TaskManagers), tms)
		}
		return nil
	})
	return c
}

// flinkctl runs flinkctl against the cluster.
func (c *cluster) flinkctl(args ...string) (stdout, stderr string, code int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "flinkctl"), append([]string{"-m", c.jm}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		c.t.Fatalf("flinkctl %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

func (c *cluster) flinkctlJSON(v any, args ...string) error {
	out, errOut, code := c.flinkctl(append(args, "-o", "json")...)
	if code != 0 {
		return fmt.Errorf("flinkctl %v: exit %d: %s", args, code, errOut)
	}
	return json.Unmarshal([]byte(out), v)
}

// jobStatus is the part of `flinkctl status -o json` the tests read.
type jobStatus struct {
	ID           string `json:"id"`
	Status       string `json:"status"`
	FailureCause string `json:"failure_cause"`
	Tasks        []struct {
		Operator    string `json:"operator"`
		Subtask     int    `json:"subtask"`
		Status      string `json:"status"`
		TaskManager string `json:"taskmanager"`
	} `json:"tasks"`
	Exceptions []struct {
		Task        string `json:"task"`
		TaskManager string `json:"taskmanager"`
		Cause       string `json:"cause"`
	} `json:"exceptions"`
}

func writeSpec(t *testing.T, spec string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(p, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

package systemtest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/internal/proccluster"

	"go.uber.org/goleak"
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
		// grpcurl, a client a user would have, from the tools module.
		cmd = exec.Command("go", "build", "-modfile=../tools/go.mod", "-o", dir+"/", "github.com/fullstorydev/grpcurl/cmd/grpcurl")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build grpcurl:", err)
			os.Exit(1)
		}
		binDir = dir
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(leakCheck(code))
	}
	os.Exit(leakCheck(m.Run()))
}

// leakCheck turns a passing run's exit code into a failure when goroutines leaked: the
// harness stops every process it started, and the tests close their clients and Kafka.
func leakCheck(code int) int {
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-process system test; run without -short")
	}
}

// cluster is a cluster of processes (proccluster) for one test.
type cluster struct {
	*proccluster.Cluster
	t *testing.T
}

// startCluster starts a JobManager and TaskManagers tm-0 … tm-<tms-1> with slots slots each.
func startCluster(t *testing.T, tms, slots int, jmArgs ...string) *cluster {
	t.Helper()
	return startClusterOf(t, proccluster.Options{TaskManagers: tms, Slots: slots, JobManagerArgs: jmArgs})
}

// startClusterOf starts a cluster with the harness's heartbeats (200 ms, lost after 2 s) and
// waits until every TaskManager registered. When the test ends the processes are stopped, a
// data race one of them reported fails the test, and a failed test shows their logs.
func startClusterOf(t *testing.T, opts proccluster.Options) *cluster {
	t.Helper()
	opts.Bin, opts.Dir = binDir, t.TempDir()
	// The tests' sink and checkpoint directories are other t.TempDir()s than the processes'
	// working directory (Dir): allow the temporary directory they are all in.
	allowed := []string{"-D", config.AllowedPaths + "=" + os.TempDir()}
	opts.JobManagerArgs = append(append([]string{"-D", "heartbeat.interval=200ms", "-D", "heartbeat.timeout=2s"}, allowed...), opts.JobManagerArgs...)
	opts.TaskManagerArgs = append(slices.Clone(allowed), opts.TaskManagerArgs...)
	c, err := proccluster.Start(opts)
	t.Cleanup(func() {
		c.Stop()
		for _, p := range c.Procs() {
			checkProc(t, p)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{Cluster: c, t: t}
}

// startTM starts one more TaskManager (see proccluster.StartTaskManager).
func (c *cluster) startTM(id string) *proccluster.Proc {
	c.t.Helper()
	p, err := c.StartTaskManager(id)
	if err != nil {
		c.t.Fatal(err)
	}
	return p
}

// startJM starts JobManager i again on its data directory and addresses.
func (c *cluster) startJM(i int) {
	c.t.Helper()
	if _, err := c.StartJobManager(i); err != nil {
		c.t.Fatal(err)
	}
}

// startProc starts a process outside any cluster (see proccluster.Exec); it is stopped and
// checked as a cluster's are when the test ends.
func startProc(t *testing.T, name, binary string, sockets map[string]net.Listener, args ...string) *proccluster.Proc {
	t.Helper()
	p, err := proccluster.Exec(binDir, t.TempDir(), name, binary, sockets, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop()
		checkProc(t, p)
	})
	return p
}

// checkProc fails the test if the process (built with -race) reported a data race, and shows
// the end of its log when the test failed.
func checkProc(t *testing.T, p *proccluster.Proc) {
	out, _ := p.Output()
	if i := strings.Index(out, "WARNING: DATA RACE"); i >= 0 {
		t.Errorf("%s: data race:\n%s", p.Name, out[i:min(len(out), i+6000)])
	}
	if t.Failed() {
		t.Logf("--- %s log ---\n%s", p.Name, p.Tail(60))
	}
}

// flinkctl runs flinkctl against the cluster.
func (c *cluster) flinkctl(args ...string) (stdout, stderr string, code int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stdout, stderr, err := c.Flinkctl(ctx, args...)
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		c.t.Fatalf("flinkctl %v: %v", args, err)
	}
	return stdout, stderr, code
}

func writeSpec(t *testing.T, spec string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(p, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

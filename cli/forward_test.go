package cli

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// A whole view (every JobManager asked, the leader's TaskManagers) exits 0 with nothing on
// stderr.
func TestClusterWholeViewExitsZero(t *testing.T) {
	lis := listen(t)
	serveOn(t, lis, nil, &fakeClusterService{resp: &pb.GetClusterResponse{AnsweredBy: "jm1", Taskmanagers: taskManagers(),
		Jobmanagers: []*pb.JobManagerInfo{{Id: "jm1", Address: lis.Addr().String(), Role: "Leader", Term: 3, LastIndex: 9, Leader: true}}}})
	code, stdout, stderr := execute(t, "-m", lis.Addr().String(), "cluster")
	if code != ExitOK || stderr != "" || !strings.Contains(stdout, "tm-1") {
		t.Errorf("cluster of a whole view = exit %d, stdout:\n%s\nstderr %q; want exit 0, the TaskManagers, nothing on stderr", code, stdout, stderr)
	}
}

// When only a follower answers (the leader it names cannot be reached), the view lacks the
// TaskManagers: flinkctl shows it, says so and exits 1.
func TestClusterWithoutTheLeadersAnswer(t *testing.T) {
	down := listen(t)
	downAddr := down.Addr().String()
	down.Close()
	fl := listen(t)
	serveOn(t, fl, nil, &fakeClusterService{resp: &pb.GetClusterResponse{AnsweredBy: "jm2", Jobmanagers: []*pb.JobManagerInfo{
		{Id: "jm1", Address: downAddr, Role: "Leader", Term: 3, LastIndex: 9, Leader: true},
		{Id: "jm2", Address: fl.Addr().String(), Role: "Follower", Term: 3, LastIndex: 9},
	}}})
	code, stdout, stderr := execute(t, "-m", fl.Addr().String(), "-o", "json", "cluster")
	want := "flinkctl: incomplete cluster view: the leader jm1 could not be asked, so no TaskManagers are listed (only the leader tracks them)\n"
	var out clusterJSON
	if err := json.Unmarshal([]byte(stdout), &out); err != nil || len(out.JobManagers) != 2 || code != ExitFailure || stderr != want {
		t.Errorf("cluster with the leader unreachable = exit %d, stdout %s (%v), stderr %q; want exit 1, the 2 JobManagers, stderr %q", code, stdout, err, stderr, want)
	}
}

// Every flinkctl command works given the address of one follower of a Raft group of three
// JobManagers, which forwards to the leader, also after the leader stopped.
func TestEveryCommandThroughOneFollower(t *testing.T) {
	c, _ := miniclustertest.StartT(t, minicluster.Options{JobManagers: 3, TaskManagers: 2, Slots: 2})
	leader := -1
	poll.Until(t, time.Minute, "a leader", func() error {
		if leader = c.Leader(); leader < 0 {
			return fmt.Errorf("no leader")
		}
		return nil
	})
	follower := (leader + 1) % 3
	m := c.JMs[follower].Addr()
	flinkctl := func(args ...string) (int, string, string) {
		t.Helper()
		return execute(t, append([]string{"-m", m}, args...)...)
	}
	ok := func(what string, code int, stderr string) {
		t.Helper()
		if code != ExitOK {
			t.Fatalf("flinkctl -m %s %s = exit %d; stderr:\n%s", m, what, code, stderr)
		}
	}

	code, stdout, stderr := flinkctl("run", "-o", "json", writeSpec(t, "short.yaml", okSpec))
	ok("run", code, stderr)
	if st := decodeObject(t, stdout); st["status"] != "FINISHED" {
		t.Errorf("run followed the job to %v, want FINISHED", st["status"])
	}

	spec := writeSpec(t, "endless.yaml", fmt.Sprintf(`name: endless
parallelism: 2
config:
  execution.checkpointing.interval: 100ms
  execution.checkpointing.dir: %s
operators:
  - {name: numbers, type: sequence, from: 1, rate: 200}
  - {name: out, type: discard}
`, filepath.Join(t.TempDir(), "cp")))
	code, stdout, stderr = flinkctl("run", "-d", "-o", "json", spec)
	ok("run -d", code, stderr)
	id, _ := decodeObject(t, stdout)["job_id"].(string)

	code, stdout, stderr = flinkctl("list")
	ok("list", code, stderr)
	if !strings.Contains(stdout, id) {
		t.Errorf("list does not show job %s:\n%s", id, stdout)
	}
	poll.Until(t, time.Minute, "job "+id+" running with a checkpoint", func() error {
		code, stdout, stderr := flinkctl("status", "-o", "json", id)
		if code != ExitOK {
			return fmt.Errorf("status = exit %d: %s", code, stderr)
		}
		st := decodeObject(t, stdout)
		if st["status"] != "RUNNING" || st["last_checkpoint"] == nil {
			return fmt.Errorf("job %v, last checkpoint %v", st["status"], st["last_checkpoint"])
		}
		return nil
	})
	code, stdout, stderr = flinkctl("checkpoint", id)
	ok("checkpoint", code, stderr)
	if !strings.Contains(stdout, " completed in ") {
		t.Errorf("checkpoint printed %q, want a completed checkpoint", stdout)
	}
	code, stdout, stderr = flinkctl("checkpoints", id)
	ok("checkpoints", code, stderr)
	if !strings.Contains(stdout, "COMPLETED") {
		t.Errorf("checkpoints lists no completed checkpoint:\n%s", stdout)
	}
	// Whole once every member recorded its RPC address (each does within a second of starting).
	poll.Until(t, time.Minute, "a whole cluster view", func() error {
		code, stdout, stderr := flinkctl("-o", "json", "cluster")
		if code != ExitOK {
			return fmt.Errorf("cluster = exit %d: %s", code, stderr)
		}
		var view clusterJSON
		if err := json.Unmarshal([]byte(stdout), &view); err != nil || len(view.JobManagers) != 3 || len(view.TaskManagers) != 2 {
			t.Fatalf("cluster exited 0 with %s (%v), want 3 JobManagers and 2 TaskManagers", stdout, err)
		}
		return nil
	})

	// The leader stops: the follower forwards to the new one (or leads itself).
	if err := c.StopJobManager(leader); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, "job "+id+" running again under a new leader", func() error {
		code, stdout, stderr := flinkctl("status", "-o", "json", id)
		if code != ExitOK {
			return fmt.Errorf("status = exit %d: %s", code, stderr)
		}
		if st := decodeObject(t, stdout); st["status"] != "RUNNING" {
			return fmt.Errorf("job %v", st["status"])
		}
		return nil
	})
	code, stdout, stderr = flinkctl("cluster")
	if want := fmt.Sprintf("jobmanager jm-%d could not be asked", leader+1); code != ExitFailure || !strings.Contains(stderr, want) {
		t.Errorf("cluster with jm-%d stopped = exit %d, stdout:\n%s\nstderr %q; want exit 1 saying %q", leader+1, code, stdout, stderr, want)
	}
	code, _, stderr = flinkctl("cancel", id)
	ok("cancel", code, stderr)
	poll.Until(t, time.Minute, "job "+id+" cancelled", func() error {
		code, stdout, stderr := flinkctl("list", "-o", "json")
		if code != ExitOK {
			return fmt.Errorf("list = exit %d: %s", code, stderr)
		}
		if !strings.Contains(stdout, `"CANCELED"`) {
			return fmt.Errorf("list: %s", stdout)
		}
		return nil
	})
}

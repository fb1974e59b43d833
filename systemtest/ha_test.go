package systemtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goflink/goflink/client"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/internal/proccluster"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// JobManager high availability with real processes: three JobManagers in a Raft group
// (--peers), three TaskManagers given all three addresses, and the exactly-once chaos job
// while the leader JobManager is SIGKILLed again and again (and a TaskManager now and then).
// GOFLINK_HA_CHAOS_SEEDS sets the seeds like GOFLINK_CHAOS_SEEDS; CI runs 3.

// startHACluster starts a Raft group of jms JobManager processes and tms TaskManagers.
func startHACluster(t *testing.T, jms, tms, slots int) *cluster {
	t.Helper()
	return startClusterOf(t, proccluster.Options{JobManagers: jms, TaskManagers: tms, Slots: slots})
}

// leader returns the index of the leading JobManager, as the group reports it.
func (c *cluster) leader(ctx context.Context, cl *client.Client) (int, error) {
	info, err := cl.Cluster(ctx)
	if err != nil {
		return -1, err
	}
	for _, jm := range info.GetJobmanagers() {
		if jm.GetLeader() {
			for i := range c.JMs {
				if c.JobManagerAddr(i) == jm.GetAddress() {
					return i, nil
				}
			}
		}
	}
	return -1, fmt.Errorf("no leader among %v", info.GetJobmanagers())
}

func TestHAChaosExactlyOnce(t *testing.T) {
	skipShort(t)
	seeds := seedsFrom(t, "GOFLINK_HA_CHAOS_SEEDS", "3")
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { haChaosRun(t, seed) })
	}
}

func haChaosRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	h := startHACluster(t, 3, 3, 1)
	out := filepath.Join(t.TempDir(), "out")
	backend, spec := chaosSpec(t, seed, out)
	id := h.submit(spec)
	cl, err := client.New(h.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cl.Wait = 30 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var seen []int64 // completed checkpoint IDs, in the order observed
	observe := func(d *pb.JobDetails) {
		if cp := d.GetLastCheckpoint().GetId(); cp > 0 && (len(seen) == 0 || seen[len(seen)-1] != cp) {
			seen = append(seen, cp)
		}
	}
	kills := 0 // those that restarted the job
	var log []string
	var failovers []time.Duration
	for range 2 + rng.IntN(3) {
		if waitJobRunning(t, ctx, cl, id) == nil {
			log = append(log, "the job ended before the next kill")
			break
		}
		d := jobAfter(t, ctx, cl, id, time.Duration(300+rng.IntN(3000))*time.Millisecond)
		if d == nil {
			log = append(log, "the job ended before the next kill")
			break
		}
		observe(d)
		var kill string
		if rng.IntN(4) == 0 { // now and then a TaskManager
			live := map[string]*proccluster.Proc{}
			for i, p := range h.TMs {
				live[fmt.Sprintf("tm-%d", i)] = p
			}
			if victim := pickVictim(d, live, rng); victim != "" {
				i := slices.Index(h.TMs, live[victim])
				live[victim].Kill()
				h.TMs[i] = h.startTM(victim)
				kill = "kill " + victim
			}
		}
		if kill == "" {
			leader, err := h.leader(ctx, cl)
			if err != nil {
				t.Fatal(err)
			}
			killed := h.JMs[leader].Kill()
			next := -1
			poll.Until(t, 30*time.Second, fmt.Sprintf("a new leader after killing jm%d", leader+1), func() error {
				i, err := h.leader(ctx, cl)
				if err == nil && i == leader {
					err = fmt.Errorf("the killed jm%d is still reported leader", leader+1)
				}
				next = i
				return err
			})
			failovers = append(failovers, time.Since(killed))
			h.startJM(leader) // back as a follower
			kill = fmt.Sprintf("kill leader jm%d → jm%d leads after %v", leader+1, next+1, time.Since(killed).Round(time.Millisecond))
		}
		restarts, ok := waitRestart(t, ctx, cl, id, d.GetRestarts())
		if !ok {
			log = append(log, kill+": the job had ended, no fault")
			break
		}
		kills++
		log = append(log, fmt.Sprintf("%s → restart %d", kill, restarts))
	}
	last, err := cl.Watch(ctx, id, func(d *pb.JobDetails) error { observe(d); return nil })
	if err != nil {
		t.Fatalf("watch job: %v", err)
	}
	observe(last)
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("seed %d: job ended %v: %s\nfaults: %v", seed, last.GetStatus(), last.GetFailureCause(), log)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] <= seen[i-1] {
			t.Errorf("seed %d: completed checkpoint IDs %v repeat or go back", seed, seen)
		}
	}
	faults := checkFaults(t, seed, kills, last.GetRestarts(), log)
	rows := checkExactlyOnce(t, out)
	t.Logf("seed %d (%s backend): %s; new leader after %v; checkpoints observed %v; %d committed rows, each (key, seq) exactly once with count = seq+1",
		seed, backend, faults, failovers, seen, rows)
}

// flinkctl given all three addresses works while any one JobManager is down, and right after
// the leader is killed it waits through the election instead of failing.
func TestHAFlinkctlWithAJobManagerDown(t *testing.T) {
	skipShort(t)
	h := startHACluster(t, 3, 1, 2)
	id := h.submit(writeSpec(t, "name: endless\nparallelism: 2\noperators:\n  - {name: n, type: sequence, from: 0, rate: 100}\n  - {name: o, type: discard}\n"))
	cl := h.newClient()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range h.JMs {
		leader, err := h.leader(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		h.JMs[i].Kill()
		// At once, whether an election runs (i was the leader) or not.
		start := time.Now()
		var st proccluster.JobStatus
		if err := h.FlinkctlJSON(context.Background(), &st, "status", id); err != nil {
			t.Fatalf("jm%d down (leader: %v): flinkctl status: %v", i+1, i == leader, err)
		}
		if st.Status != "RUNNING" && st.Status != "RESTARTING" {
			t.Errorf("jm%d down: job is %s, want it running or restarting", i+1, st.Status)
		}
		var info struct {
			JobManagers []struct {
				ID     string `json:"id"`
				Leader bool   `json:"leader"`
				Error  string `json:"error"`
			} `json:"jobmanagers"`
		}
		// The view lacks the JobManager that is down: flinkctl shows it and exits 1.
		out, errOut, err := h.Flinkctl(context.Background(), "cluster", "-o", "json")
		var exit *exec.ExitError
		if jerr := json.Unmarshal([]byte(out), &info); jerr != nil || !errors.As(err, &exit) || exit.ExitCode() != 1 ||
			!strings.Contains(errOut, fmt.Sprintf("jobmanager jm%d could not be asked", i+1)) {
			t.Fatalf("jm%d down: flinkctl cluster = %v, %v, stderr %q; want exit 1 saying jm%d could not be asked", i+1, err, jerr, errOut, i+1)
		}
		down := false
		for _, jm := range info.JobManagers {
			if jm.ID == fmt.Sprintf("jm%d", i+1) {
				down = jm.Error != "" && !jm.Leader
			}
		}
		if !down {
			t.Errorf("jm%d down: flinkctl cluster %+v does not show it unreachable", i+1, info.JobManagers)
		}
		t.Logf("jm%d down (was leader: %v): flinkctl status answered after %v", i+1, i == leader, time.Since(start).Round(time.Millisecond))
		h.startJM(i)
		poll.Until(t, 30*time.Second, "every JobManager reachable", func() error {
			info, err := cl.Cluster(ctx)
			if err != nil {
				return err
			}
			for _, jm := range info.GetJobmanagers() {
				if jm.GetError() != "" {
					return fmt.Errorf("%s: %s", jm.GetId(), jm.GetError())
				}
			}
			return nil
		})
	}
}

// A SIGKILLed leader is visible to the user: `flinkctl run`, following the job across the
// failover, prints the leader change as the cause of the restart, and `flinkctl status` lists
// it in the exception history of the job, which restarts from its latest checkpoint.
func TestHALeaderKillShownByFlinkctl(t *testing.T) {
	skipShort(t)
	h := startHACluster(t, 3, 1, 2)
	spec := writeSpec(t, fmt.Sprintf("name: shown\nparallelism: 2\nconfig:\n  execution.checkpointing.interval: 100ms\n"+
		"  execution.checkpointing.dir: %s\noperators:\n  - {name: numbers, type: sequence, from: 1, to: 4000, rate: 500}\n"+
		"  - {name: out, type: discard}\n", filepath.Join(t.TempDir(), "cp")))
	run := startProc(t, "flinkctl run", "flinkctl", nil, "-m", h.Addr, "run", spec)
	output := func() string {
		out, _ := run.Output()
		return out
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var id string
	poll.Until(t, 30*time.Second, "flinkctl run to print the job ID", func() error {
		if m := regexp.MustCompile(`JobID ([0-9a-f]+)`).FindStringSubmatch(output()); m != nil {
			id = m[1]
			return nil
		}
		return fmt.Errorf("flinkctl run printed no job ID: %q", output())
	})
	poll.Until(t, 30*time.Second, "the job running with a completed checkpoint", func() error {
		var st struct {
			Status         string              `json:"status"`
			LastCheckpoint *struct{ ID int64 } `json:"last_checkpoint"`
		}
		if err := h.FlinkctlJSON(ctx, &st, "status", id); err != nil {
			return err
		}
		if st.Status != "RUNNING" || st.LastCheckpoint == nil {
			return fmt.Errorf("job is %s, last checkpoint %v", st.Status, st.LastCheckpoint)
		}
		return nil
	})
	cl := h.newClient()
	old, err := h.leader(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	h.JMs[old].Kill()
	select {
	case <-run.Done():
	case <-ctx.Done():
		t.Fatalf("flinkctl run did not end with the job; it printed:\n%s", output())
	}
	printed := output()
	if code := run.Cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("flinkctl run exited %d (want 0 for a FINISHED job); it printed:\n%s", code, printed)
	}
	st, err := h.Status(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// The history is the last leader's: one leader change, from the killed leader to the one
	// the survivors elected (or, had they elected again, from the first to the second).
	var entries []proccluster.Exception
	for _, e := range st.Exceptions {
		if e.Task == "jobmanager leader change" {
			entries = append(entries, e)
		}
	}
	if st.Status != "FINISHED" || st.Restarts < 1 || len(entries) != 1 {
		t.Fatalf("flinkctl status: job %s with %d restarts and exceptions %+v; want FINISHED, restarted, and one leader change",
			st.Status, st.Restarts, st.Exceptions)
	}
	e := entries[0]
	m := regexp.MustCompile(`^the JobManager leader changed \((jm\d+) → (jm\d+), term \d+\)(?: while the job was restarting)?: the job restarts from checkpoint \d+$`).FindStringSubmatch(e.Cause)
	killed := fmt.Sprintf("jm%d", old+1)
	if m == nil || m[2] == killed || m[1] == m[2] || e.Handling != "restart" || e.Failover != "global" || e.RestartAttempt < 1 ||
		!slices.Equal(e.RestartedTasks, []string{"numbers -> out (1/2)", "numbers -> out (2/2)"}) {
		t.Errorf("flinkctl status: leader change entry %+v; want the job taken over from %s, restarted globally with both tasks", e, killed)
	} else if m[1] != killed {
		t.Logf("the survivors elected again: the job came from %s to %s", m[1], m[2])
	}
	// flinkctl run printed it while following the job, with how it was handled.
	want := fmt.Sprintf("failure: jobmanager leader change: %s\n", e.Cause)
	handling := fmt.Sprintf("→ restart %d immediately (global failover: 2 tasks: numbers -> out (1/2), numbers -> out (2/2))\n", e.RestartAttempt)
	if !strings.Contains(printed, want) || !strings.Contains(printed, handling) {
		t.Errorf("flinkctl run output does not show %q and %q:\n%s", want, handling, printed)
	}
	t.Logf("flinkctl run printed:\n%s", printed)
}

//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/goflink/goflink/internal/poll"
)

const (
	project      = "goflink" // compose project: network goflink_default, volumes goflink_<service>
	network      = project + "_default"
	composeFile  = "deploy/docker-compose.yml"
	projectLabel = "label=com.docker.compose.project=" + project
	jobManagers  = "localhost:6123,localhost:6133,localhost:6143" // the published RPC ports

	// The exactly-once job: per-key sequence numbers, a keyed count, a 2PC file sink. The
	// source's rate starts afresh after each restore, so faults make the job longer, not
	// shorter; without faults it runs e2eRecords/e2eRate = 60 s, and the faults take about 30 s
	// of it.
	e2eKeys    = 8
	e2eRecords = 12000     // 1500 per key
	e2eRate    = 200       // records per second over the whole job
	e2eOut     = "out/e2e" // the sink's prefix in the bucket

	// The compose cluster's S3 server (docker-compose.yml): its published port, bucket and
	// access key.
	s3Addr      = "127.0.0.1:9000"
	s3Bucket    = "goflink"
	s3AccessKey = "goflink"

	// heartbeatTimeout is heartbeat.timeout in deploy/conf/config.yaml.
	heartbeatTimeout = 5 * time.Second
	// outage is how long a JobManager stays disconnected and a TaskManager paused, at least.
	outage = heartbeatTimeout + 3*time.Second
	// recoverTimeout bounds each wait for the job or the cluster to come back.
	recoverTimeout = 2 * time.Minute
)

var (
	jmServices = []string{"jm1", "jm2", "jm3"}
	tmServices = []string{"tm1", "tm2", "tm3"}
)

// clusterView is `flinkctl cluster -o json`.
type clusterView struct {
	JobManagers []struct {
		ID        string `json:"id"`
		Role      string `json:"role"`
		Term      uint64 `json:"term"`
		LastIndex uint64 `json:"last_index"`
		Leader    bool   `json:"leader"`
		Error     string `json:"error"`
	} `json:"jobmanagers"`
	TaskManagers []struct {
		ID            string    `json:"id"`
		Slots         int       `json:"slots"`
		FreeSlots     int       `json:"free_slots"`
		LastHeartbeat time.Time `json:"last_heartbeat"`
	} `json:"taskmanagers"`
}

// leader is the leader JobManager's ID, term and last log index; "" when there is none.
func (v clusterView) leader() (id string, term, lastIndex uint64) {
	for _, jm := range v.JobManagers {
		if jm.Leader {
			return jm.ID, jm.Term, jm.LastIndex
		}
	}
	return "", 0, 0
}

// following reports why the JobManager id is not a follower of the current leader with its
// log at least at minIndex. A JobManager that restarted or reconnected answers as a Follower
// before it hears from the leader (and may then stand for election, which pre-vote rejects);
// one that replicated the entries the leader had when it came back is a member again.
func (v clusterView) following(id string, minIndex uint64) error {
	leader, term, _ := v.leader()
	for _, jm := range v.JobManagers {
		if jm.ID != id {
			continue
		}
		if jm.Role != "Follower" || jm.Term != term || jm.LastIndex < minIndex {
			return fmt.Errorf("jobmanager %s is %s in term %d at index %d; leader %s in term %d, want index %d",
				id, jm.Role, jm.Term, jm.LastIndex, leader, term, minIndex)
		}
		return nil
	}
	return fmt.Errorf("no jobmanager %s", id)
}

// complete reports why the view is not the whole cluster: 3 JobManagers that answer, one of
// them the leader, and TaskManagers tm1–tm3 with 2 slots each whose last heartbeat came after
// since[id] (a TaskManager that came back, not the entry of the one that went away).
func (v clusterView) complete(since map[string]time.Time) error {
	var leaders []string
	for _, jm := range v.JobManagers {
		if jm.Error != "" {
			return fmt.Errorf("jobmanager %s: %s", jm.ID, jm.Error)
		}
		if jm.Role != "Leader" && jm.Role != "Follower" {
			return fmt.Errorf("jobmanager %s is %q", jm.ID, jm.Role)
		}
		if jm.Leader {
			leaders = append(leaders, jm.ID)
		}
	}
	if len(v.JobManagers) != len(jmServices) || len(leaders) != 1 {
		return fmt.Errorf("%d jobmanagers, leaders %v", len(v.JobManagers), leaders)
	}
	slots := 0
	var ids []string
	for _, tm := range v.TaskManagers {
		if !tm.LastHeartbeat.After(since[tm.ID]) {
			return fmt.Errorf("taskmanager %s: last heartbeat %v, not after %v", tm.ID, tm.LastHeartbeat, since[tm.ID])
		}
		ids = append(ids, tm.ID)
		slots += tm.Slots
	}
	slices.Sort(ids)
	if !slices.Equal(ids, tmServices) || slots != 2*len(tmServices) {
		return fmt.Errorf("taskmanagers %v with %d slots, want %v with %d", ids, slots, tmServices, 2*len(tmServices))
	}
	return nil
}

// jobStatus is `flinkctl status ID -o json`.
type jobStatus struct {
	Status       string `json:"status"`
	Restarts     int    `json:"restarts"`
	FailureCause string `json:"failure_cause"`
	Tasks        []struct {
		Operator    string `json:"operator"`
		Subtask     int    `json:"subtask"`
		Attempt     int    `json:"attempt"`
		Status      string `json:"status"`
		TaskManager string `json:"taskmanager"`
	} `json:"tasks"`
}

// running reports why the job is not running with every task RUNNING and none of them on the
// TaskManager avoid ("" for any).
func (s jobStatus) running(avoid string) error {
	if s.Status != "RUNNING" || len(s.Tasks) == 0 {
		return fmt.Errorf("job is %s with %d tasks", s.Status, len(s.Tasks))
	}
	for _, task := range s.Tasks {
		if task.Status != "RUNNING" {
			return fmt.Errorf("task %s/%d is %s", task.Operator, task.Subtask, task.Status)
		}
		if avoid != "" && task.TaskManager == avoid {
			return fmt.Errorf("task %s/%d still on %s", task.Operator, task.Subtask, avoid)
		}
	}
	return nil
}

// busiestTaskManager is the TaskManager with the most of the job's tasks.
func (s jobStatus) busiestTaskManager() string {
	n := map[string]int{}
	for _, task := range s.Tasks {
		n[task.TaskManager]++
	}
	best := ""
	for _, tm := range slices.Sorted(maps.Keys(n)) {
		if best == "" || n[tm] > n[best] {
			best = tm
		}
	}
	return best
}

// checkpoint is one entry of `flinkctl checkpoints ID -o json`.
type checkpoint struct {
	ID          int64     `json:"id"`
	Status      string    `json:"status"`
	TriggerTime time.Time `json:"trigger_time"`
}

// faultReport is one line of the summary.
type faultReport struct {
	fault, victim string
	at            time.Duration // since the test started
	running       time.Duration // job running again (without the victim's tasks), after at
	checkpoint    int64         // the first checkpoint triggered after the fault that completed
	checkpointed  time.Duration // after at
	back          time.Duration // the victim is back in the cluster, after at
	restarts      int           // job restarts the fault caused
	note          string
}

// e2e drives the compose cluster from the host: the Compose command, docker and bin/flinkctl.
type e2e struct {
	t        *testing.T
	start    time.Time
	root     string   // the repository
	compose  []string // the Compose command with -p and -f
	flinkctl string
	jobID    string
	caFile   string // the cluster's CA, copied out of the certs volume by secure
	token    string // the cluster's token, likewise

	mu      sync.Mutex
	paused  map[string]bool // containers paused and not yet unpaused
	cleanup sync.Once
}

// TestComposeClusterExactlyOnceThroughFaults starts the compose cluster, submits the
// exactly-once job, and puts it through four faults one after the other, each once the job runs
// and checkpoints again after the one before: a killed TaskManager, a killed leader
// JobManager, the leader JobManager cut from the network, a paused TaskManager. After each it
// waits until the job runs again and completes a checkpoint triggered after the fault; at the
// end it checks the committed output in the volume.
func TestComposeClusterExactlyOnceThroughFaults(t *testing.T) {
	e := newE2E(t)
	e.up()
	e.waitCluster("cluster up", nil, nil)
	e.checkMetrics()

	spec := filepath.Join(t.TempDir(), "e2e.yaml")
	if err := os.WriteFile(spec, fmt.Appendf(nil, `name: e2e-exactly-once
parallelism: 2
config:
  execution.checkpointing.interval: 200ms
  restart-strategy.type: fixed-delay
  restart-strategy.fixed-delay.attempts: 1000
  restart-strategy.fixed-delay.delay: 200ms
operators:
  - {name: numbers, type: sequence, from: 0, to: %d, rate: %d}
  - {name: keyed, type: map, fields: {key: "value %% %d", seq: "int(value / %d)"}}
  - {name: by-key, type: key-by, key: key}
  - {name: counts, type: count}
  - {name: out, type: file, path: %s}
`, e2eRecords-1, e2eRate, e2eKeys, e2eKeys, "s3://"+s3Bucket+"/"+e2eOut), 0o644); err != nil {
		t.Fatal(err)
	}
	var sub struct {
		JobID string `json:"job_id"`
	}
	if err := e.flinkctlJSON(&sub, "run", "-d", spec, "-o", "json"); err != nil {
		t.Fatalf("submit: %v", err)
	}
	e.jobID = sub.JobID
	e.logf("submitted job %s: %d records (%d keys × %d seqs) at %d/s, parallelism 2, checkpoints every 200 ms, 2PC file sink at s3://%s/%s, checkpoints on S3",
		e.jobID, e2eRecords, e2eKeys, e2eRecords/e2eKeys, e2eRate, s3Bucket, e2eOut)
	first, _ := e.recovered(time.Now(), 0, "")
	e.logf("job running with every task, checkpoint %d completed", first)
	e.checkDashboard(e.jobID)

	reports := []faultReport{e.killTaskManager(), e.killLeaderJobManager()}
	// Every flinkctl command with jm1's address alone, after the leader kill; if jm1 leads then,
	// once more after the next fault, which cuts jm1 off and brings it back as a follower.
	viaFollower := e.singleAddress("after the leader kill")
	reports = append(reports, e.disconnectLeaderJobManager())
	if !viaFollower && !e.singleAddress("after the cut-off leader came back") {
		t.Errorf("jm1 led at both single-address steps: no command went through a follower")
	}
	reports = append(reports, e.pauseTaskManager(), e.killS3())

	final := e.waitFinished()
	e.logf("job FINISHED after %d restarts", final.Restarts)
	e.logf("faults (times since the test started; the others after the fault):")
	for i, r := range reports {
		e.logf("  %d. %-48s %-4s at +%5.1fs: running again %5.1fs, checkpoint %d %5.1fs, back in the cluster %5.1fs, %d restart(s)%s",
			i+1, r.fault, r.victim, r.at.Seconds(), r.running.Seconds(), r.checkpoint, r.checkpointed.Seconds(), r.back.Seconds(), r.restarts, r.note)
	}
	cps := e.checkpoints()
	completed := 0
	for _, cp := range cps {
		if cp.Status == "COMPLETED" {
			completed++
		}
	}
	e.logf("flinkctl checkpoints: %d of the %d listed (the newest) completed, the last %d", completed, len(cps), maxCompleted(cps))
	e.checkExactlyOnce(e.output())
	e.waitCluster("cluster whole after the faults", nil, nil)
}

// newE2E checks the environment, refuses to touch a goflink cluster that is already running,
// and registers the cleanup (also on SIGINT/SIGTERM).
func newE2E(t *testing.T) *e2e {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	compose := strings.Fields(os.Getenv("COMPOSE"))
	if len(compose) == 0 {
		compose = []string{"docker-compose"}
		if exec.Command("docker", "compose", "version").Run() == nil {
			compose = []string{"docker", "compose"}
		}
	}
	flinkctl := os.Getenv("FLINKCTL")
	if flinkctl == "" {
		flinkctl = filepath.Join(root, "bin", "flinkctl")
	}
	if _, err := os.Stat(flinkctl); err != nil {
		t.Fatalf("flinkctl: %v (make build, or FLINKCTL=path)", err)
	}
	e := &e2e{
		t: t, start: time.Now(), root: root, flinkctl: flinkctl, paused: map[string]bool{},
		compose: append(compose, "-p", project, "-f", composeFile),
	}
	e.logf("compose: %s; flinkctl: %s", strings.Join(e.compose, " "), flinkctl)
	if out, err := e.run(time.Minute, "docker", "ps", "-aq", "--filter", projectLabel); err != nil {
		t.Fatal(err)
	} else if out != "" {
		t.Fatalf("a %s compose project has containers already (make down first):\n%s", project, out)
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		if s, ok := <-sig; ok {
			fmt.Fprintf(os.Stderr, "e2e: %v: removing the compose project\n", s)
			e.down()
			os.Exit(1)
		}
	}()
	t.Cleanup(func() {
		signal.Stop(sig)
		close(sig)
		if t.Failed() {
			e.dumpLogs()
		}
		e.down()
		e.checkNothingLeft()
	})
	return e
}

// up removes what an earlier run may have left (a volume or network without containers) and
// starts the cluster.
func (e *e2e) up() {
	if _, err := e.composeRun(2*time.Minute, "down", "-v", "--remove-orphans"); err != nil {
		e.t.Fatal(err)
	}
	at := time.Now()
	if _, err := e.composeRun(3*time.Minute, "up", "-d"); err != nil {
		e.t.Fatal(err)
	}
	e.logf("compose up -d: %.1fs (health-gated: TaskManagers start once every JobManager is healthy)", time.Since(at).Seconds())
	e.secure()
}

// secure copies the CA and the token the compose service certs made out of its volume (as
// make up does) and has every later flinkctl use them; first it checks that the published
// port refuses flinkctl in plaintext and over TLS without the token.
func (e *e2e) secure() {
	id := e.docker("ps", "-aq", "--filter", projectLabel, "--filter", "label=com.docker.compose.service=certs")
	dir := e.t.TempDir()
	for _, f := range []string{"ca.pem", "token"} {
		e.docker("cp", "-q", id+":/certs/"+f, filepath.Join(dir, f))
	}
	token, err := os.ReadFile(filepath.Join(dir, "token"))
	if err != nil {
		e.t.Fatal(err)
	}
	if out, err := e.run(30*time.Second, e.flinkctl, "-m", singleAddr, "list"); err == nil {
		e.t.Errorf("flinkctl in plaintext against the compose cluster succeeded: %s", out)
	}
	if out, err := e.run(30*time.Second, e.flinkctl, "-m", singleAddr, "--ca", filepath.Join(dir, "ca.pem"), "list"); err == nil || !strings.Contains(err.Error(), "Unauthenticated") && !strings.Contains(err.Error(), "needs a token") {
		e.t.Errorf("flinkctl without the token = %v (%s), want refused for want of the token", err, out)
	}
	e.checkLoopbackPorts()
	e.checkNothingShared()
	e.caFile, e.token = filepath.Join(dir, "ca.pem"), strings.TrimSpace(string(token))
	e.t.Setenv("FLINKCTL_CA", e.caFile)
	e.t.Setenv("FLINKCTL_TOKEN", e.token)
	e.logf("secured: mutual TLS between the containers; flinkctl with the CA and token of the certs volume (plaintext and token-less refused; ports on 127.0.0.1 only)")
}

// down removes the compose project's containers, network and volume; once.
func (e *e2e) down() {
	e.cleanup.Do(func() {
		e.mu.Lock()
		paused := slices.Collect(maps.Keys(e.paused))
		e.mu.Unlock()
		for _, c := range paused {
			if out, err := e.run(time.Minute, "docker", "unpause", c); err != nil { // a paused container would not stop
				e.logf("unpause %s: %v: %s", c, err, out)
			}
		}
		at := time.Now()
		if out, err := e.composeRun(3*time.Minute, "down", "-v", "--remove-orphans"); err != nil {
			e.t.Errorf("compose down: %v\n%s", err, out)
			return
		}
		e.logf("compose down -v --remove-orphans: %.1fs", time.Since(at).Seconds())
	})
}

// checkNothingLeft fails the test if a container, network or volume of the project remains.
func (e *e2e) checkNothingLeft() {
	for _, ls := range [][]string{{"container", "ls", "-a"}, {"network", "ls"}, {"volume", "ls"}} {
		kind := ls[0]
		out, err := e.run(time.Minute, "docker", append(ls, "-q", "--filter", projectLabel)...)
		if err != nil {
			e.t.Errorf("docker %s ls: %v", kind, err)
			return
		}
		if out != "" {
			e.t.Errorf("left behind: %ss %s", kind, strings.Join(strings.Fields(out), " "))
			return
		}
	}
	e.logf("nothing left: no %s containers, networks or volumes", project)
}

// dumpLogs prints the job's status and the tail of every container's log.
func (e *e2e) dumpLogs() {
	if e.jobID != "" {
		out, err := e.run(30*time.Second, e.flinkctl, "-m", jobManagers, "status", e.jobID)
		e.logf("flinkctl status %s (%v):\n%s", e.jobID, err, out)
	}
	out, _ := e.composeRun(time.Minute, "ps")
	e.logf("compose ps:\n%s", out)
	for _, svc := range append(slices.Clone(jmServices), tmServices...) {
		out, err := e.composeRun(time.Minute, "logs", "--no-color", svc)
		e.logf("compose logs %s (%v), without hashicorp/raft's records, the last %d lines:\n%s", svc, err, dumpLines, goflinkRecords(out, dumpLines))
	}
}

// dumpLines is how many lines of a container's log dumpLogs prints.
const dumpLines = 300

// goflinkRecords returns the last n lines of a container's log that are not hashicorp/raft's
// own records (module=raft: its retries while a peer is cut off would fill the tail).
func goflinkRecords(log string, n int) string {
	var keep []string
	for line := range strings.Lines(log) {
		if !strings.Contains(line, " module=raft ") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep[max(len(keep)-n, 0):], "")
}

// killTaskManager kills a TaskManager that runs tasks of the job, waits until the job runs
// without it and completes a checkpoint, and then brings it back: Docker does not restart a
// container stopped with docker kill (a manual stop for restart: unless-stopped), so unless it
// did, the test starts it again as an operator would.
func (e *e2e) killTaskManager() faultReport {
	st := e.settled()
	r := faultReport{fault: "docker kill a TaskManager running tasks", victim: st.busiestTaskManager()}
	c := e.container(r.victim)
	before := maxCompleted(e.checkpoints())
	at := time.Now()
	e.docker("kill", c)
	r.at = at.Sub(e.start)
	e.logf("FAULT 1: docker kill %s (running tasks of the job; last completed checkpoint %d)", r.victim, before)
	r.checkpoint, r.running = e.recovered(at, before, r.victim)
	r.checkpointed = time.Since(at)
	e.logf("  job running on the other TaskManagers after %.1fs, checkpoint %d completed after %.1fs",
		r.running.Seconds(), r.checkpoint, r.checkpointed.Seconds())
	r.note = e.startIfStopped(r.victim, c)
	e.waitCluster(r.victim+" back", map[string]time.Time{r.victim: time.Now()}, nil)
	r.back = time.Since(at)
	r.restarts = e.status().Restarts - st.Restarts
	return r
}

// killLeaderJobManager kills the leader JobManager; the other two elect a leader that runs the
// job on. Then it brings the killed one back (it rejoins the Raft group as a follower).
func (e *e2e) killLeaderJobManager() faultReport {
	st := e.settled()
	leader, _, _ := e.leaderView().leader()
	r := faultReport{fault: "docker kill the leader JobManager", victim: leader}
	c := e.container(leader)
	before := maxCompleted(e.checkpoints())
	at := time.Now()
	e.docker("kill", c)
	r.at = at.Sub(e.start)
	e.logf("FAULT 2: docker kill %s (the leader; last completed checkpoint %d)", leader, before)
	e.logf("  new leader %s after %.1fs", e.newLeader(leader), time.Since(at).Seconds())
	r.checkpoint, r.running = e.recovered(at, before, "")
	r.checkpointed = time.Since(at)
	e.logf("  job running after %.1fs, checkpoint %d completed after %.1fs", r.running.Seconds(), r.checkpoint, r.checkpointed.Seconds())
	_, _, index := e.leaderView().leader()
	r.note = e.startIfStopped(leader, c)
	e.waitCluster(leader+" back", nil, func(v clusterView) error { return v.following(leader, index) })
	r.back = time.Since(at)
	r.restarts = e.status().Restarts - st.Restarts
	return r
}

// disconnectLeaderJobManager cuts the leader JobManager from the compose network for at least
// outage: the other two elect a leader and the job runs on; then it reconnects it (with its
// aliases, so jm<N> resolves again) and waits until it is back as a member of the group.
func (e *e2e) disconnectLeaderJobManager() faultReport {
	st := e.settled()
	leader, _, _ := e.leaderView().leader()
	r := faultReport{fault: "docker network disconnect the leader JobManager", victim: leader}
	c := e.container(leader)
	var networks map[string]struct{ Aliases []string }
	if err := json.Unmarshal([]byte(e.docker("inspect", "-f", "{{json .NetworkSettings.Networks}}", c)), &networks); err != nil {
		e.t.Fatalf("inspect %s: %v", leader, err)
	}
	before := maxCompleted(e.checkpoints())
	at := time.Now()
	e.docker("network", "disconnect", network, c)
	r.at = at.Sub(e.start)
	e.logf("FAULT 3: docker network disconnect %s %s (the leader; last completed checkpoint %d)", network, leader, before)
	e.logf("  new leader %s after %.1fs", e.newLeader(leader), time.Since(at).Seconds())
	r.checkpoint, r.running = e.recovered(at, before, "")
	r.checkpointed = time.Since(at)
	e.logf("  job running after %.1fs, checkpoint %d completed after %.1fs (while %s is cut off)",
		r.running.Seconds(), r.checkpoint, r.checkpointed.Seconds(), leader)
	e.sleepUntil(at.Add(outage))
	_, _, index := e.leaderView().leader()
	args := []string{"network", "connect"}
	for _, a := range networks[network].Aliases {
		args = append(args, "--alias", a)
	}
	e.docker(append(args, network, c)...)
	reconnected := time.Now()
	e.logf("  docker network connect %s %s after %.1fs (aliases %v)", network, leader, reconnected.Sub(at).Seconds(), networks[network].Aliases)
	e.waitCluster(leader+" back in the group", nil, func(v clusterView) error { return v.following(leader, index) })
	r.back = time.Since(at)
	cp, _ := e.recovered(reconnected, r.checkpoint, "")
	r.note = fmt.Sprintf("; after the reconnect: checkpoint %d", cp)
	r.restarts = e.status().Restarts - st.Restarts
	return r
}

// pauseTaskManager freezes a TaskManager running tasks for at least outage (past the heartbeat
// timeout): the JobManager declares it lost and runs its tasks elsewhere. Unpaused, it comes
// back as a new TaskManager; its old tasks are not resumed.
func (e *e2e) pauseTaskManager() faultReport {
	st := e.settled()
	r := faultReport{fault: "docker pause a TaskManager running tasks", victim: st.busiestTaskManager()}
	c := e.container(r.victim)
	before := maxCompleted(e.checkpoints())
	at := time.Now()
	e.mu.Lock()
	e.paused[c] = true
	e.mu.Unlock()
	e.docker("pause", c)
	r.at = at.Sub(e.start)
	e.logf("FAULT 4: docker pause %s (running tasks of the job; last completed checkpoint %d; heartbeat timeout %v)", r.victim, before, heartbeatTimeout)
	r.checkpoint, r.running = e.recovered(at, before, r.victim)
	r.checkpointed = time.Since(at)
	e.logf("  job running on the other TaskManagers after %.1fs, checkpoint %d completed after %.1fs (while %s is paused)",
		r.running.Seconds(), r.checkpoint, r.checkpointed.Seconds(), r.victim)
	e.sleepUntil(at.Add(outage))
	e.docker("unpause", c)
	unpaused := time.Now()
	e.mu.Lock()
	delete(e.paused, c)
	e.mu.Unlock()
	e.logf("  docker unpause %s after %.1fs", r.victim, unpaused.Sub(at).Seconds())
	e.waitCluster(r.victim+" back", map[string]time.Time{r.victim: unpaused}, nil)
	r.back = time.Since(at)
	cp, _ := e.recovered(unpaused, r.checkpoint, "")
	r.note = fmt.Sprintf("; after the unpause: checkpoint %d", cp)
	r.restarts = e.status().Restarts - st.Restarts
	return r
}

// killS3 kills the S3 server, which holds the checkpoints and the sink's output: checkpoints
// fail (and the sink's uploads, which restarts the job) while it is down. Once a checkpoint
// triggered after the kill failed or the job restarted, it starts the server again on its
// volume, and waits until the job runs and completes a checkpoint.
func (e *e2e) killS3() faultReport {
	st := e.settled()
	r := faultReport{fault: "docker kill the S3 server", victim: "s3"}
	c := e.container("s3")
	before := maxCompleted(e.checkpoints())
	at := time.Now()
	e.docker("kill", c)
	r.at = at.Sub(e.start)
	e.logf("FAULT 5: docker kill %s (the S3 server; last completed checkpoint %d)", r.victim, before)
	var seen string
	e.waitFor("a checkpoint to fail or the job to fail over with S3 down", recoverTimeout, func() error {
		cur, err := e.statusErr()
		if err != nil {
			return err
		}
		if cur.Restarts > st.Restarts || cur.Status == "RESTARTING" {
			// A restart waits for the storage to verify its checkpoint: it cannot finish now.
			seen = fmt.Sprintf("the job failed over (%s, %d restarts)", cur.Status, cur.Restarts)
			return nil
		}
		cps, err := e.checkpointsErr()
		if err != nil {
			return err
		}
		for _, cp := range cps {
			if cp.Status == "FAILED" && cp.TriggerTime.After(at) {
				seen = fmt.Sprintf("checkpoint %d failed", cp.ID)
				return nil
			}
		}
		return fmt.Errorf("job %s, no failed checkpoint since the kill", cur.Status)
	})
	e.logf("  after %.1fs %s", time.Since(at).Seconds(), seen)
	r.note = e.startIfStopped(r.victim, c)
	started := time.Now()
	r.checkpoint, _ = e.recovered(started, before, "")
	r.running = time.Since(at)
	r.checkpointed = time.Since(at)
	r.back = started.Sub(at)
	e.logf("  S3 back after %.1fs; job running and checkpoint %d completed after %.1fs", r.back.Seconds(), r.checkpoint, r.checkpointed.Seconds())
	r.note = "; " + seen + r.note
	r.restarts = e.status().Restarts - st.Restarts
	return r
}

// newLeader waits until flinkctl cluster shows a leader other than old, and returns it.
func (e *e2e) newLeader(old string) string {
	var leader string
	e.waitFor("a new leader", recoverTimeout, func() error {
		v, err := e.clusterShown()
		if err != nil {
			return err
		}
		if leader, _, _ = v.leader(); leader == "" || leader == old {
			return fmt.Errorf("leader %q", leader)
		}
		return nil
	})
	return leader
}

// startIfStopped starts a killed container again unless Docker restarted it (restart policy),
// and says which happened.
func (e *e2e) startIfStopped(service, c string) string {
	if e.docker("inspect", "-f", "{{.State.Running}}", c) == "true" {
		e.logf("  Docker restarted %s (restart policy)", service)
		return "; Docker restarted it"
	}
	e.docker("start", c)
	e.logf("  Docker did not restart %s (docker kill is a manual stop for restart: unless-stopped): docker start", service)
	return "; docker start"
}

// recovered waits until the job runs with every task RUNNING (none on avoid) and a checkpoint
// triggered after since with an ID above before completed. It returns that checkpoint and when
// the job ran, after since. It fails the test if the job ended unless it FINISHED (then 0, 0).
func (e *e2e) recovered(since time.Time, before int64, avoid string) (int64, time.Duration) {
	var ran time.Duration
	finished := false
	e.waitFor("the job running again", recoverTimeout, func() error {
		st, err := e.statusErr()
		if err != nil {
			return err
		}
		if st.Status == "FINISHED" {
			finished = true
			return nil
		}
		if st.Status == "FAILED" || st.Status == "CANCELED" {
			e.t.Fatalf("job %s: %s", st.Status, st.FailureCause)
		}
		return st.running(avoid)
	})
	ran = time.Since(since)
	if finished {
		e.logf("  the job FINISHED")
		return 0, 0
	}
	var id int64
	e.waitFor(fmt.Sprintf("a checkpoint above %d triggered after the fault", before), recoverTimeout, func() error {
		cps, err := e.checkpointsErr()
		if err != nil {
			return err
		}
		for _, cp := range cps {
			if cp.Status == "COMPLETED" && cp.ID > before && cp.TriggerTime.After(since) {
				id = max(id, cp.ID)
			}
		}
		if id == 0 {
			return fmt.Errorf("last completed %d", maxCompleted(cps))
		}
		return nil
	})
	return id, ran
}

// settled waits before a fault until the job runs with every task and completed a checkpoint
// triggered from now on, and returns the job's status. A job that ended
// already fails the test: it must run through every fault.
func (e *e2e) settled() jobStatus {
	if id, _ := e.recovered(time.Now(), 0, ""); id == 0 {
		e.t.Fatalf("the job finished before all faults ran: make it longer (e2eRecords)")
	}
	return e.status()
}

// waitFinished waits until the job FINISHED.
func (e *e2e) waitFinished() jobStatus {
	var st jobStatus
	e.waitFor("the job to finish", 5*time.Minute, func() error {
		var err error
		if st, err = e.statusErr(); err != nil {
			return err
		}
		switch st.Status {
		case "FINISHED":
			return nil
		case "FAILED", "CANCELED":
			e.t.Fatalf("job %s: %s", st.Status, st.FailureCause)
		}
		return fmt.Errorf("job is %s", st.Status)
	})
	return st
}

// waitCluster waits until flinkctl cluster shows the whole cluster (see complete) and passes
// check (nil: none), and logs it.
func (e *e2e) waitCluster(what string, since map[string]time.Time, check func(clusterView) error) time.Duration {
	var v clusterView
	d := e.waitFor(what, recoverTimeout, func() error {
		var err error
		if v, err = e.clusterErr(); err != nil {
			return err
		}
		if err := v.complete(since); err != nil {
			return err
		}
		if check != nil {
			return check(v)
		}
		return nil
	})
	leader, _, _ := v.leader()
	slots := 0
	for _, tm := range v.TaskManagers {
		slots += tm.Slots
	}
	e.logf("%s after %.1fs: %d JobManagers (leader %s), %d TaskManagers, %d slots", what, d.Seconds(), len(v.JobManagers), leader, len(v.TaskManagers), slots)
	return d
}

// output returns a host directory holding the job's committed sink output, downloaded from
// the bucket through the S3 server's published port (HTTPS, verified with the cluster's CA).
// It checks first that no multipart upload is left under the sink's prefix (the job ended:
// every pre-committed part file is committed, every other one aborted), and that the
// job's checkpoints are in the bucket too.
func (e *e2e) output() string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := e.s3Client()
	prefix := e2eOut + "/"
	for u := range c.ListIncompleteUploads(ctx, s3Bucket, prefix, true) {
		if u.Err != nil {
			e.t.Fatalf("list multipart uploads under s3://%s/%s: %v", s3Bucket, prefix, u.Err)
		}
		e.t.Errorf("multipart upload left under s3://%s/%s after the job finished: %s", s3Bucket, prefix, u.Key)
	}
	chk := 0
	for o := range c.ListObjects(ctx, s3Bucket, minio.ListObjectsOptions{Prefix: "checkpoints/" + e.jobID + "/", Recursive: true}) {
		if o.Err != nil {
			e.t.Fatalf("list the job's checkpoints: %v", o.Err)
		}
		chk++
	}
	if chk == 0 {
		e.t.Errorf("no object under s3://%s/checkpoints/%s/: the job's checkpoints are not in the bucket", s3Bucket, e.jobID)
	}
	dir := e.t.TempDir()
	n := 0
	for o := range c.ListObjects(ctx, s3Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			e.t.Fatalf("list s3://%s/%s: %v", s3Bucket, prefix, o.Err)
		}
		name := strings.TrimPrefix(o.Key, prefix)
		if strings.Contains(name, "/") {
			e.t.Errorf("object %s is below the sink's prefix", o.Key)
			continue
		}
		if err := c.FGetObject(ctx, s3Bucket, o.Key, filepath.Join(dir, name), minio.GetObjectOptions{}); err != nil {
			e.t.Fatalf("download %s: %v", o.Key, err)
		}
		n++
	}
	e.logf("downloaded %d objects from s3://%s/%s (the bucket also holds %d objects of the job's retained checkpoints)", n, s3Bucket, prefix, chk)
	return dir
}

// s3Client is a client of the compose cluster's S3 server on its published port, with the
// credentials the processes use (GOFLINK_S3_SECRET_KEY, as make e2e passes it) and the
// cluster's CA.
func (e *e2e) s3Client() *minio.Client {
	pem, err := os.ReadFile(e.caFile)
	if err != nil {
		e.t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		e.t.Fatalf("%s holds no certificate", e.caFile)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}
	e.t.Cleanup(tr.CloseIdleConnections)
	secret := cmp.Or(os.Getenv("GOFLINK_S3_SECRET_KEY"), "goflink-development-only")
	c, err := minio.New(s3Addr, &minio.Options{
		Creds: credentials.NewStaticV4(s3AccessKey, secret, ""), Secure: true, Transport: tr,
		BucketLookup: minio.BucketLookupPath, Region: "us-east-1",
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// checkExactlyOnce checks the committed part files: every (key, seq) exactly once, with count
// = seq+1 (the keyed state saw every record once through the faults too).
func (e *e2e) checkExactlyOnce(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		e.t.Fatal(err)
	}
	perKey := e2eRecords / e2eKeys
	seen := make([][]int, e2eKeys)
	for k := range seen {
		seen[k] = make([]int, perKey)
	}
	var files, hidden, rows, errs int
	attempts := map[string]map[string]bool{} // subtask → attempts with committed files
	report := func(format string, args ...any) {
		if errs++; errs <= 20 {
			e.t.Errorf(format, args...)
		}
	}
	for _, ent := range entries {
		name := ent.Name()
		if strings.HasPrefix(name, ".") {
			hidden++
			continue
		}
		if !strings.HasPrefix(name, "part-") {
			report("unexpected file %s in the output", name)
			continue
		}
		files++
		if f := strings.Split(strings.TrimSuffix(name, ".jsonl"), "-"); len(f) == 4 {
			if attempts[f[1]] == nil {
				attempts[f[1]] = map[string]bool{}
			}
			attempts[f[1]][f[2]] = true
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			e.t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			var r struct{ Key, Seq, Count int64 }
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				e.t.Fatalf("%s: %q: %v", name, sc.Text(), err)
			}
			rows++
			if r.Key < 0 || r.Key >= e2eKeys || r.Seq < 0 || r.Seq >= int64(perKey) {
				report("%s: row %+v out of range", name, r)
				continue
			}
			seen[r.Key][r.Seq]++
			if r.Count != r.Seq+1 {
				report("%s: key %d seq %d has count %d, want %d", name, r.Key, r.Seq, r.Count, r.Seq+1)
			}
		}
	}
	var perKeyOnce []string
	for k, seqs := range seen {
		once := 0
		for s, n := range seqs {
			if n == 1 {
				once++
			} else {
				report("key %d seq %d committed %d times, want exactly once", k, s, n)
			}
		}
		perKeyOnce = append(perKeyOnce, fmt.Sprintf("%d:%d", k, once))
	}
	var subtasks []string
	for _, sub := range slices.Sorted(maps.Keys(attempts)) {
		var as []string
		for _, a := range slices.Sorted(maps.Keys(attempts[sub])) {
			n, _ := strconv.Atoi(a)
			as = append(as, strconv.Itoa(n))
		}
		subtasks = append(subtasks, fmt.Sprintf("subtask %s from attempts %s", sub, strings.Join(as, ",")))
	}
	e.logf("exactly-once check: %d committed part files (%s; %d hidden files ignored), %d rows, want %d",
		files, strings.Join(subtasks, ", "), hidden, rows, e2eRecords)
	e.logf("  (key, seq) committed exactly once, per key [key:seqs]: %s (want %d each)", strings.Join(perKeyOnce, " "), perKey)
	if rows != e2eRecords {
		e.t.Errorf("committed %d rows, want %d", rows, e2eRecords)
	}
	if errs == 0 && rows == e2eRecords {
		e.logf("  every (key, seq) exactly once and every count = seq+1: PASS")
	} else {
		e.logf("  %d problems (the first 20 reported above): FAIL", errs)
	}
}

// status is flinkctl status, retried while it fails (no leader for a moment).
func (e *e2e) status() jobStatus {
	var st jobStatus
	e.waitFor("flinkctl status", recoverTimeout, func() (err error) {
		st, err = e.statusErr()
		return err
	})
	return st
}

func (e *e2e) statusErr() (jobStatus, error) {
	var st jobStatus
	err := e.flinkctlJSON(&st, "status", e.jobID, "-o", "json")
	return st, err
}

// checkpoints is flinkctl checkpoints, retried while it fails.
func (e *e2e) checkpoints() []checkpoint {
	var cps []checkpoint
	e.waitFor("flinkctl checkpoints", recoverTimeout, func() (err error) {
		cps, err = e.checkpointsErr()
		return err
	})
	return cps
}

func (e *e2e) checkpointsErr() ([]checkpoint, error) {
	var cps []checkpoint
	err := e.flinkctlJSON(&cps, "checkpoints", e.jobID, "-o", "json")
	return cps, err
}

// maxCompleted is the highest completed checkpoint ID (0: none).
func maxCompleted(cps []checkpoint) int64 {
	var id int64
	for _, cp := range cps {
		if cp.Status == "COMPLETED" {
			id = max(id, cp.ID)
		}
	}
	return id
}

// leaderView waits until flinkctl cluster names a leader, and returns that view, whole or not.
// (flinkctl shows the view of the JobManager that answered when that one knows no leader.)
func (e *e2e) leaderView() clusterView {
	var v clusterView
	e.waitFor("a leader", recoverTimeout, func() error {
		var err error
		if v, err = e.clusterShown(); err != nil {
			return err
		}
		if id, _, _ := v.leader(); id == "" {
			return errors.New("no leader")
		}
		return nil
	})
	return v
}

// clusterShown is flinkctl cluster's view, also when flinkctl exits 1 because the view is
// incomplete (a JobManager is down): it shows what it got all the same.
func (e *e2e) clusterShown() (clusterView, error) {
	var v clusterView
	out, err := e.run(30*time.Second, e.flinkctl, "-m", jobManagers, "cluster", "-o", "json")
	if jerr := json.Unmarshal([]byte(out), &v); jerr != nil {
		return v, errors.Join(err, jerr)
	}
	return v, nil
}

// clusterErr is flinkctl cluster's view; an error when flinkctl fails, also for an incomplete
// view.
func (e *e2e) clusterErr() (clusterView, error) {
	var v clusterView
	err := e.flinkctlJSON(&v, "cluster", "-o", "json")
	return v, err
}

// flinkctlJSON runs flinkctl against the published JobManager ports and decodes its output.
func (e *e2e) flinkctlJSON(v any, args ...string) error {
	out, err := e.run(30*time.Second, e.flinkctl, append([]string{"-m", jobManagers}, args...)...)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		return fmt.Errorf("flinkctl %s: %q: %w", strings.Join(args, " "), out, err)
	}
	return nil
}

// container is a service's container ID (compose v1 and v2 name containers differently).
func (e *e2e) container(service string) string {
	out, err := e.composeRun(time.Minute, "ps", "-q", service)
	if err != nil || out == "" {
		e.t.Fatalf("container of %s: %q %v", service, out, err)
	}
	return out
}

// checkLoopbackPorts checks that the cluster publishes its ports on the host's loopback
// only: every mapping of every running container of the project is on 127.0.0.1, and the
// three JobManagers' client ports and every process's metrics port are among them.
func (e *e2e) checkLoopbackPorts() {
	var published []string
	for _, id := range strings.Fields(e.docker("ps", "-q", "--filter", projectLabel)) {
		for _, line := range strings.Split(e.docker("port", id), "\n") {
			if line = strings.TrimSpace(line); line == "" {
				continue
			}
			_, host, _ := strings.Cut(line, " -> ")
			if !strings.HasPrefix(host, "127.0.0.1:") {
				e.t.Errorf("container %s publishes %q: want 127.0.0.1 only", id, line)
			}
			published = append(published, host)
		}
	}
	wanted := append(append([]string{"127.0.0.1:6123", "127.0.0.1:6133", "127.0.0.1:6143", s3Addr}, jmMetricsAddrs...), jmRESTAddrs...)
	for _, want := range append(wanted, tmMetricsAddrs...) {
		if !slices.Contains(published, want) {
			e.t.Errorf("published ports %v, want %s among them", published, want)
		}
	}
}

// checkNothingShared checks that no two running containers of the project share a writable
// volume or host directory: each process has its own disk, as on machines of their own, and
// what they share goes through S3 (the certificates are mounted read-only).
func (e *e2e) checkNothingShared() {
	writers := map[string][]string{} // volume name or host path → containers mounting it writable
	for _, id := range strings.Fields(e.docker("ps", "-q", "--filter", projectLabel)) {
		out := e.docker("inspect", "-f", "{{.Name}}{{range .Mounts}} {{if .Name}}{{.Name}}{{else}}{{.Source}}{{end}}={{.RW}}{{end}}", id)
		f := strings.Fields(out)
		for _, m := range f[1:] {
			if src, rw, _ := strings.Cut(m, "="); rw == "true" {
				writers[src] = append(writers[src], strings.TrimPrefix(f[0], "/"))
			}
		}
	}
	for src, cs := range writers {
		if len(cs) > 1 {
			e.t.Errorf("containers %v share the writable mount %s", cs, src)
		}
	}
	e.logf("nothing shared: %d writable mounts, each in one container", len(writers))
}

// docker runs docker and returns its trimmed output; it fails the test on an error.
func (e *e2e) docker(args ...string) string {
	out, err := e.run(time.Minute, "docker", args...)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

func (e *e2e) composeRun(timeout time.Duration, args ...string) (string, error) {
	return e.run(timeout, e.compose[0], append(slices.Clone(e.compose[1:]), args...)...)
}

// run runs a command in the repository and returns its trimmed stdout; the error holds its
// stderr.
func (e *e2e) run(timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = e.root
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return strings.TrimSpace(stdout.String()), fmt.Errorf("%s %s: %w: %s", filepath.Base(name), strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// waitFor polls cond until it returns nil and returns how long that took; after timeout it
// fails the test with cond's last error.
func (e *e2e) waitFor(what string, timeout time.Duration, cond func() error) time.Duration {
	e.t.Helper()
	return poll.Until(e.t, timeout, what, cond)
}

// sleepUntil waits until t: an outage lasts at least its planned length.
func (e *e2e) sleepUntil(t time.Time) {
	if d := time.Until(t); d > 0 {
		time.Sleep(d)
	}
}

// logf logs with the time since the test started.
func (e *e2e) logf(format string, args ...any) {
	e.t.Helper()
	e.t.Logf("[+%5.1fs] %s", time.Since(e.start).Seconds(), fmt.Sprintf(format, args...))
}

package systemtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/goflink/goflink/client"
	"github.com/goflink/goflink/client/clienttest"
	"github.com/goflink/goflink/connector/kafka/kafkatest"
	"github.com/goflink/goflink/internal/poll"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// A job's life through flinkctl with real processes: run at p=2, stop with a savepoint,
// resume from it at p=3, a savepoint while it runs, a TaskManager SIGKILLed, rescale to 1 and
// then to 4, and the end of its input. The committed output of all of it together equals a
// failure-free run: each (key, seq) exactly once, counts continuous across every step.

const (
	lifeKeys    = 4
	lifePerKey  = 4000
	lifeRecords = lifeKeys * lifePerKey
	lifeRate    = 1200 // records per second: about 13 s of input
)

func TestSavepointLifecycleFileSink(t *testing.T) {
	skipShort(t)
	out := filepath.Join(t.TempDir(), "out")
	spec := keyedSpec(t, "lifecycle", out, lifeRecords, lifeRate, lifeKeys, "hashmap", 100*time.Millisecond, 100, 100*time.Millisecond)
	c := startCluster(t, 4, 2)
	jobLifecycle(t, c, spec, true)
	rows := checkCountsSet(t, out, lifeKeys, lifeRecords)
	t.Logf("%d committed rows", rows)
}

// checkCountsSet checks keyed counts whose records reached the count in any order (at p=3 a
// key's records come from several source subtasks): every (key, seq) committed exactly once,
// and per key the counts 1..records/keys each exactly once. It returns the number of rows.
func checkCountsSet(t *testing.T, dir string, keys, records int) int {
	t.Helper()
	perKey := records / keys
	seqs, counts := map[[2]int64]int{}, map[[2]int64]int{}
	rows := 0
	readRows(t, dir, func(file string, r struct{ Key, Seq, Count int64 }) {
		rows++
		seqs[[2]int64{r.Key, r.Seq}]++
		counts[[2]int64{r.Key, r.Count}]++
	})
	bad := 0
	for k := range int64(keys) {
		for i := range int64(perKey) {
			if n := seqs[[2]int64{k, i}]; n != 1 && bad < 20 {
				t.Errorf("key %d seq %d committed %d times, want exactly once", k, i, n)
				bad++
			}
			if n := counts[[2]int64{k, i + 1}]; n != 1 && bad < 20 {
				t.Errorf("key %d count %d committed %d times, want exactly once: the keyed state saw a record twice or missed one", k, i+1, n)
				bad++
			}
		}
	}
	return rows
}

func TestSavepointLifecycleKafka(t *testing.T) {
	skipShort(t)
	kc := kafkatest.Start(t, 2, "in", "out")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kafkatest.ProduceKeyedSeqs(t, ctx, kc.ListenAddrs(), "in", lifeKeys, lifePerKey)
	brokers := strings.Join(kc.ListenAddrs(), ",")
	spec := writeSpec(t, fmt.Sprintf(`name: lifecycle-kafka
config:
  execution.checkpointing.interval: 100ms
  execution.checkpointing.dir: %s
  state.backend.type: bbolt
  restart-strategy.type: fixed-delay
  restart-strategy.fixed-delay.attempts: 100
  restart-strategy.fixed-delay.delay: 100ms
operators:
  - {name: in, type: kafka, brokers: %q, topic: in, format: json, schema: {key: int64, seq: int64}, rate: %d}
  - {name: by-key, type: key-by, key: key}
  - {name: counts, type: count}
  - {name: out, type: kafka, brokers: %q, topic: out, delivery-guarantee: exactly-once, key: "string(key)"}
`, filepath.Join(t.TempDir(), "checkpoints"), brokers, lifeRate, brokers))
	c := startCluster(t, 4, 2)
	id := jobLifecycle(t, c, spec, false)
	seen, rows := kafkatest.ReadKeyedCounts(t, ctx, kc.ListenAddrs(), "out", lifeKeys, lifePerKey, func(_ *kgo.Record, row kafkatest.KeyedCount) {
		if row.Count != row.Seq+1 {
			t.Errorf("key %d seq %d has count %d, want %d", row.Key, row.Seq, row.Count, row.Seq+1)
		}
	})
	for k := range int64(lifeKeys) {
		for s := range int64(lifePerKey) {
			if n := seen[[2]int64{k, s}]; n != 1 {
				t.Errorf("key %d seq %d committed %d times, want once", k, s, n)
			}
		}
	}
	if out, errOut, code := c.flinkctl("cancel", id); code != 0 { // the Kafka source never ends
		t.Fatalf("flinkctl cancel = %d: %s%s", code, out, errOut)
	}
	kafkatest.WaitNoOngoingTransactions(t, ctx, kc.ListenAddrs())
	t.Logf("%d committed rows", rows)
}

// jobLifecycle takes the job of spec through every step with flinkctl and, for a bounded job,
// waits until it finished. It returns the ID of the job resumed from the stop's savepoint.
func jobLifecycle(t *testing.T, c *cluster, spec string, bounded bool) string {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cl := c.newClient()
	spDir := filepath.Join(t.TempDir(), "savepoints")
	var sub struct {
		JobID string `json:"job_id"`
	}
	if err := c.FlinkctlJSON(ctx, &sub, "run", "-d", "-p", "2", spec); err != nil {
		t.Fatal(err)
	}
	id := sub.JobID
	waitCompletedCheckpoints(t, ctx, cl, id, 3)

	// Stop with a savepoint: the job ends FINISHED.
	var sp struct {
		SavepointPath string `json:"savepoint_path"`
	}
	start := time.Now()
	if err := c.FlinkctlJSON(ctx, &sp, "stop", "--savepoint-path", spDir, id); err != nil {
		t.Fatal(err)
	}
	t.Logf("stop-with-savepoint took %v: %s", time.Since(start).Round(time.Millisecond), sp.SavepointPath)
	if d, err := cl.Job(ctx, id); err != nil || d.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("job %s after stop: %v, %v; want FINISHED", id, d.GetStatus(), err)
	}
	if _, err := os.Stat(filepath.Join(sp.SavepointPath, "_metadata")); err != nil {
		t.Fatalf("savepoint %q: %v", sp.SavepointPath, err)
	}

	// Resume at p=3.
	if err := c.FlinkctlJSON(ctx, &sub, "run", "-d", "-s", sp.SavepointPath, "-p", "3", spec); err != nil {
		t.Fatal(err)
	}
	id2 := sub.JobID
	clienttest.WaitRunningAt(t, ctx, cl, id2, 3)
	waitCompletedCheckpoints(t, ctx, cl, id2, 2)

	// A savepoint while it runs, listed as one.
	var sp2 struct {
		SavepointPath string `json:"savepoint_path"`
	}
	if err := c.FlinkctlJSON(ctx, &sp2, "savepoint", id2, spDir); err != nil {
		t.Fatal(err)
	}
	var cps []struct {
		Savepoint bool   `json:"savepoint"`
		Path      string `json:"path"`
	}
	if err := c.FlinkctlJSON(ctx, &cps, "checkpoints", id2); err != nil {
		t.Fatal(err)
	}
	listed := false
	for _, cp := range cps {
		listed = listed || (cp.Savepoint && cp.Path == sp2.SavepointPath)
	}
	if !listed {
		t.Errorf("flinkctl checkpoints %s does not list savepoint %s", id2, sp2.SavepointPath)
	}

	// A TaskManager SIGKILLed: the job restarts from its latest checkpoint.
	d, err := cl.Job(ctx, id2)
	if err != nil {
		t.Fatal(err)
	}
	victim := d.GetTasks()[0].GetTaskmanager()
	p := c.Proc(victim)
	if p == nil {
		t.Fatalf("no process for TaskManager %q", victim)
	}
	p.Kill()
	pollJob(t, cl, id2, time.Minute, func(d *pb.JobDetails) bool { return d.GetRestarts() > 0 })
	clienttest.WaitRunningAt(t, ctx, cl, id2, 3)

	for _, p := range []int32{1, 4} {
		start := time.Now()
		n := fmt.Sprint(p)
		if out, errOut, code := c.flinkctl("rescale", id2, "-p", n); code != 0 {
			t.Fatalf("flinkctl rescale %s -p %s = exit %d: %s%s", id2, n, code, out, errOut)
		}
		clienttest.WaitRunningAt(t, ctx, cl, id2, p)
		t.Logf("rescale to %s: all tasks RUNNING %v after the command", n, time.Since(start).Round(time.Millisecond))
		waitCompletedCheckpoints(t, ctx, cl, id2, 1)
	}
	if !bounded {
		return id2
	}
	last, err := cl.Watch(ctx, id2, func(*pb.JobDetails) error { return nil })
	if err != nil || last.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("job %s ended %v (%s), %v; want FINISHED", id2, last.GetStatus(), last.GetFailureCause(), err)
	}
	return id2
}

// waitCompletedCheckpoints waits until n more checkpoints of job id completed.
func waitCompletedCheckpoints(t *testing.T, ctx context.Context, cl *client.Client, id string, n int) {
	t.Helper()
	count := func() int {
		cps, err := cl.Checkpoints(ctx, id)
		if err != nil {
			return -1
		}
		done := 0
		for _, cp := range cps {
			if cp.GetStatus() == pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED && !cp.GetSavepoint() {
				done = max(done, int(cp.GetId()))
			}
		}
		return done
	}
	first := count()
	poll.Until(t, time.Minute, fmt.Sprintf("%d more checkpoints of job %s", n, id), func() error {
		if got := count(); got < first+n {
			return fmt.Errorf("newest completed checkpoint %d", got)
		}
		return nil
	})
}

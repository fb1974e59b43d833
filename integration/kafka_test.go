package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/goflink/goflink/connector/kafka/kafkatest"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/worker"
)

// Kafka → keyed count → Kafka, exactly-once, on an in-process Kafka (kfake, the real
// protocol) while TaskManagers are lost at seeded moments: a read_committed consumer of the
// output sees every (key, seq) exactly once with count = seq+1, and no transaction lingers
// (the last stable offset reaches the high watermark).
func TestKafkaExactlyOnceThroughTaskManagerLoss(t *testing.T) {
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { kafkaExactlyOnce(t, seed) })
	}
}

func kafkaExactlyOnce(t *testing.T, seed uint64) {
	const keys, perKey = 4, 150
	rng := rand.New(rand.NewPCG(seed, seed*7919))
	kc := kafkatest.Start(t, 2, "in", "out")
	brokers := strings.Join(kc.ListenAddrs(), ",")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	kafkatest.ProduceKeyedSeqs(t, ctx, kc.ListenAddrs(), "in", keys, perKey)

	c, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 3, Slots: 1})
	spec := fmt.Sprintf(`name: kafka-eo-%d
parallelism: 2
config:
  execution.checkpointing.interval: 100ms
  execution.checkpointing.dir: %s
  restart-strategy.type: fixed-delay
  restart-strategy.fixed-delay.attempts: 100
  restart-strategy.fixed-delay.delay: 20ms
operators:
  - {name: in, type: kafka, brokers: %q, topic: in, format: json, schema: {key: int64, seq: int64}, rate: 400}
  - {name: by-key, type: key-by, key: key}
  - {name: counts, type: count}
  - {name: out, type: kafka, brokers: %q, topic: out, delivery-guarantee: exactly-once, transaction-timeout: 1 min, key: "string(key)", headers: headers}
`, seed, filepath.Join(t.TempDir(), "cp"), brokers, brokers)
	id := submit(t, ctx, cl, spec)
	waitRunning(t, ctx, cl, id, 4)

	// Lose TaskManagers running tasks at seeded moments; a new one replaces each.
	kills := 1 + rng.IntN(2)
	for range kills {
		select {
		case <-time.After(time.Duration(200+rng.IntN(800)) * time.Millisecond):
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		d := waitRunning(t, ctx, cl, id, 4)
		victim := d.GetTasks()[rng.IntN(len(d.GetTasks()))].GetTaskmanager()
		i := slices.IndexFunc(c.TMs, func(tm *worker.TaskManager) bool { return tm.ID() == victim })
		if i < 0 {
			t.Fatalf("no TaskManager of the cluster is %q, which runs a task of the job", victim)
		}
		if err := c.TMs[i].Close(); err != nil {
			t.Fatal(err)
		}
		c.TMs = slices.Delete(c.TMs, i, i+1)
		if _, err := c.AddTaskManager(); err != nil {
			t.Fatal(err)
		}
		// The loss must restart the job, or this seed tested no fault.
		before := d.GetRestarts()
		poll.Until(t, 30*time.Second, "the job to restart after the loss of "+victim, func() error {
			d, err := cl.Job(ctx, id)
			if err != nil {
				return err
			}
			if d.GetRestarts() <= before {
				return fmt.Errorf("job has %d restarts, want more than %d", d.GetRestarts(), before)
			}
			return nil
		})
	}

	// Read the output with read_committed until every (key, seq) arrived.
	seen, rows := kafkatest.ReadKeyedCounts(t, ctx, kc.ListenAddrs(), "out", keys, perKey, func(r *kgo.Record, row kafkatest.KeyedCount) {
		// The input's headers pass through the job (a map field) to the output record.
		if want := fmt.Sprintf("%d/%d", row.Key, row.Seq); len(r.Headers) != 1 || r.Headers[0].Key != "origin" || string(r.Headers[0].Value) != want {
			t.Errorf("output record %s has headers %v, want origin=%s", r.Value, r.Headers, want)
		}
		if row.Count != row.Seq+1 {
			t.Errorf("key %d seq %d has count %d, want %d", row.Key, row.Seq, row.Count, row.Seq+1)
		}
	})
	d, err := cl.Job(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if d.GetRestarts() < int32(kills) {
		t.Errorf("%d TaskManager losses but %d restarts, want at least one per loss", kills, d.GetRestarts())
	}
	if err := cl.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	watchEnd(t, ctx, cl, id)
	// No transaction lingers: the cancelled sinks aborted their open ones, so read_committed
	// consumers are not held back.
	kafkatest.WaitNoOngoingTransactions(t, ctx, kc.ListenAddrs())
	for k := range int64(keys) {
		for s := range int64(perKey) {
			if n := seen[[2]int64{k, s}]; n != 1 {
				t.Errorf("key %d seq %d seen %d times by read_committed, want exactly once", k, s, n)
			}
		}
	}
	if rows != keys*perKey {
		t.Errorf("read %d committed rows, want %d", rows, keys*perKey)
	}
	t.Logf("seed %d: %d TaskManager losses, %d restarts; %d committed rows, each (key, seq) exactly once with count = seq+1",
		seed, kills, d.GetRestarts(), rows)
}

// A checkpoint's transaction that times out before its commit fails the job loudly. The
// broker holds the first commit request (an injected network delay) past the transaction
// timeout, so it aborts the pre-committed transaction on its timer; the commit then fails and
// the job fails without restarts, with an unrecoverable data-loss error naming the checkpoint.
func TestKafkaTimedOutTransactionFailsJob(t *testing.T) {
	const txnTimeout = 500 * time.Millisecond
	kc := kafkatest.Start(t, 1, "in", "out")
	brokers := strings.Join(kc.ListenAddrs(), ",")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	var held atomic.Bool
	var heldTxn atomic.Value // the transactional ID whose commit was held
	kc.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if r := req.(*kmsg.EndTxnRequest); r.Commit && held.CompareAndSwap(false, true) {
			heldTxn.Store(r.TransactionalID)
			kc.SleepControl(func() {
				select {
				case <-time.After(4 * txnTimeout):
				case <-ctx.Done():
				}
			})
		}
		return nil, nil, false // the broker then handles the request as usual
	})

	prod, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.DefaultProduceTopic("in"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i := range 500 {
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "v%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 1, Slots: 2})
	spec := fmt.Sprintf(`name: kafka-timeout
config:
  execution.checkpointing.interval: 100ms
  execution.checkpointing.dir: %s
  restart-strategy.type: fixed-delay
  restart-strategy.fixed-delay.attempts: 1000
  restart-strategy.fixed-delay.delay: 10ms
operators:
  - {name: in, type: kafka, brokers: %q, topic: in, rate: 200}
  - {name: out, type: kafka, brokers: %q, topic: out, format: raw, value: value, delivery-guarantee: exactly-once, transaction-timeout: %dms}
`, filepath.Join(t.TempDir(), "cp"), brokers, brokers, txnTimeout.Milliseconds())
	id := submit(t, ctx, cl, spec)
	last := watchEnd(t, ctx, cl, id)
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FAILED || last.GetRestarts() != 0 {
		t.Fatalf("job ended %v after %d restarts (cause %q), want FAILED without restarts",
			last.GetStatus(), last.GetRestarts(), last.GetFailureCause())
	}
	if !held.Load() {
		t.Fatal("no commit request reached the broker")
	}
	cause := last.GetFailureCause()
	for _, want := range []string{"data loss", `operator "out"`, "the transaction " + heldTxn.Load().(string) + " of checkpoint ", "timed out", "are lost"} {
		if !strings.Contains(cause, want) {
			t.Errorf("failure cause %q does not say %q", cause, want)
		}
	}
	ex := last.GetExceptions()
	if len(ex) == 0 || ex[len(ex)-1].GetHandling() != pb.FailureHandling_FAILURE_HANDLING_UNRECOVERABLE {
		t.Errorf("exception history %v, want the failure marked unrecoverable", ex)
	}
	t.Logf("failure cause: %s", cause)
}

package systemtest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/goflink/goflink/client"
	"github.com/goflink/goflink/internal/poll"
)

// Kafka → keyed count → Kafka with real TaskManager processes SIGKILLed at seeded moments
// (at a random time, while a checkpoint is in progress, right after a task acknowledged, and
// right after a checkpoint completed — between the sinks' pre-commit and their commit). Kafka
// is kfake in the test process (the real protocol on loopback). Exactly-once: a read_committed
// consumer sees every (key, seq) exactly once with count = seq+1 and no transaction lingers.
// At-least-once: nothing is lost; duplicates are counted. GOFLINK_KAFKA_CHAOS_SEEDS sets the
// seeds (default 5).

const (
	kafkaKeys   = 4
	kafkaPerKey = 300
	kafkaRate   = 300 // records per second: about 4 s of input
)

func TestKafkaChaosExactlyOnce(t *testing.T) {
	skipShort(t)
	for _, seed := range seedsFrom(t, "GOFLINK_KAFKA_CHAOS_SEEDS", "5") {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { kafkaChaosRun(t, seed, "exactly-once") })
	}
}

func TestKafkaChaosAtLeastOnce(t *testing.T) {
	skipShort(t)
	for _, seed := range seedsFrom(t, "GOFLINK_KAFKA_CHAOS_SEEDS", "2") {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { kafkaChaosRun(t, seed, "at-least-once") })
	}
}

func kafkaChaosRun(t *testing.T, seed uint64, guarantee string) {
	rng := rand.New(rand.NewPCG(seed, seed^0x2545f4914f6cdd1d))
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in", "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	produceKeyedSeqs(t, ctx, kc.ListenAddrs())

	c := startCluster(t, 3, 1)
	brokers := strings.Join(kc.ListenAddrs(), ",")
	id := c.submit(writeSpec(t, fmt.Sprintf(`name: kafka-chaos-%d
parallelism: 2
config:
  execution.checkpointing.interval: 200ms
  execution.checkpointing.dir: %s
  restart-strategy.type: fixed-delay
  restart-strategy.fixed-delay.attempts: 100
  restart-strategy.fixed-delay.delay: 100ms
operators:
  - {name: in, type: kafka, brokers: %q, topic: in, format: json, schema: {key: int64, seq: int64}, rate: %d}
  - {name: by-key, type: key-by, key: key}
  - {name: counts, type: count}
  - {name: out, type: kafka, brokers: %q, topic: out, delivery-guarantee: %s, key: "string(key)"}
`, seed, filepath.Join(t.TempDir(), "checkpoints"), brokers, kafkaRate, brokers, guarantee)))
	cl, err := client.New(c.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	// The input lasts a few seconds: a kill "at a random time" could come after it.
	kills, log := killTaskManagers(t, ctx, c, cl, id, rng, func(f fault) fault {
		if f == faultRandomTime {
			return faultDuringCheckpoint
		}
		return f
	})

	seen, rows := readKeyedCounts(t, ctx, kc.ListenAddrs(), guarantee == "exactly-once")
	d, err := cl.Job(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	missing, dups := 0, 0
	for k := range int64(kafkaKeys) {
		for s := range int64(kafkaPerKey) {
			switch n := seen[[2]int64{k, s}]; {
			case n == 0:
				missing++
			case n > 1:
				dups += n - 1
			}
		}
	}
	if missing > 0 {
		t.Errorf("seed %d (%s): %d (key, seq) never committed; faults %v", seed, guarantee, missing, log)
	}
	if guarantee == "exactly-once" {
		if dups > 0 {
			t.Errorf("seed %d: %d duplicates under exactly-once; faults %v", seed, dups, log)
		}
		checkNoOngoingTransactions(t, ctx, kc.ListenAddrs())
	}
	t.Logf("seed %d (%s): %s; %d committed rows, %d missing, %d duplicates",
		seed, guarantee, checkFaults(t, seed, kills, d.GetRestarts(), log), rows, missing, dups)
}

// produceKeyedSeqs writes (key, seq) JSON records to topic "in", each key in order.
func produceKeyedSeqs(t *testing.T, ctx context.Context, brokers []string) {
	t.Helper()
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("in"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var recs []*kgo.Record
	for seq := range kafkaPerKey {
		for k := range kafkaKeys {
			v, _ := json.Marshal(map[string]int64{"key": int64(k), "seq": int64(seq)})
			recs = append(recs, &kgo.Record{Key: []byte(fmt.Sprint(k)), Value: v})
		}
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// readKeyedCounts reads topic "out" (read_committed) until every (key, seq) arrived or a
// deadline passed, checking count = seq+1 under exactly-once (at-least-once may count a
// replayed record twice). It returns how often each (key, seq) was seen and the rows read.
func readKeyedCounts(t *testing.T, ctx context.Context, brokers []string, exactlyOnce bool) (map[[2]int64]int, int) {
	t.Helper()
	cons, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("out"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	seen := map[[2]int64]int{}
	rows := 0
	deadline := time.Now().Add(90 * time.Second)
	quiet := time.Time{} // once complete, read on briefly for late duplicates
	for time.Now().Before(deadline) {
		if len(seen) == kafkaKeys*kafkaPerKey {
			if quiet.IsZero() {
				quiet = time.Now().Add(time.Second)
			} else if time.Now().After(quiet) {
				break
			}
		}
		pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cons.PollFetches(pctx)
		pcancel()
		fs.EachRecord(func(r *kgo.Record) {
			var row struct{ Key, Seq, Count int64 }
			if err := json.Unmarshal(r.Value, &row); err != nil {
				t.Fatalf("output record %q: %v", r.Value, err)
			}
			rows++
			seen[[2]int64{row.Key, row.Seq}]++
			if exactlyOnce && row.Count != row.Seq+1 {
				t.Errorf("key %d seq %d has count %d, want %d: the keyed state saw a record twice or missed one", row.Key, row.Seq, row.Count, row.Seq+1)
			}
		})
	}
	return seen, rows
}

// checkNoOngoingTransactions waits until no transaction is open on the cluster: the sinks
// aborted theirs when the job was cancelled, and restored ones aborted the lingering ones.
func checkNoOngoingTransactions(t *testing.T, ctx context.Context, brokers []string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	poll.Until(t, 30*time.Second, "no ongoing transaction", func() error {
		txns, err := adm.ListTransactions(ctx, nil, []string{"Ongoing"})
		if err != nil {
			return err
		}
		if len(txns) > 0 {
			return fmt.Errorf("%d ongoing transactions: %v", len(txns), txns.TransactionalIDs())
		}
		return nil
	})
}

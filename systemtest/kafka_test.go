package systemtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/goflink/goflink/client"
	"github.com/goflink/goflink/connector/kafka/kafkatest"
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
	kc := kafkatest.Start(t, 2, "in", "out")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kafkatest.ProduceKeyedSeqs(t, ctx, kc.ListenAddrs(), "in", kafkaKeys, kafkaPerKey)

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

	seen, rows := kafkatest.ReadKeyedCounts(t, ctx, kc.ListenAddrs(), "out", kafkaKeys, kafkaPerKey, func(_ *kgo.Record, row kafkatest.KeyedCount) {
		if guarantee == "exactly-once" && row.Count != row.Seq+1 { // at-least-once may count a replayed record twice
			t.Errorf("key %d seq %d has count %d, want %d: the keyed state saw a record twice or missed one", row.Key, row.Seq, row.Count, row.Seq+1)
		}
	})
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
		kafkatest.WaitNoOngoingTransactions(t, ctx, kc.ListenAddrs())
	}
	t.Logf("seed %d (%s): %s; %d committed rows, %d missing, %d duplicates",
		seed, guarantee, checkFaults(t, seed, kills, d.GetRestarts(), log), rows, missing, dups)
}

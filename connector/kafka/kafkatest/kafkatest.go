// Package kafkatest holds what tests of Kafka jobs share: an in-process Kafka (kfake, the
// real protocol on loopback) and the (key, seq) records of the exactly-once jobs, written,
// read back and checked.
package kafkatest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/goflink/goflink/internal/poll"
)

// Start starts a one-broker Kafka with the topics, each of partitions partitions, closed when
// the test ends.
func Start(t testing.TB, partitions int32, topics ...string) *kfake.Cluster {
	t.Helper()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topics...))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(kc.Close)
	return kc
}

// ProduceKeyedSeqs writes the records {"key": k, "seq": s} of keys keys with seq 0 …
// perKey-1 each to topic, keyed by k (so each key's records stay in order) and with the
// header origin=k/s.
func ProduceKeyedSeqs(t testing.TB, ctx context.Context, brokers []string, topic string, keys, perKey int) {
	t.Helper()
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var recs []*kgo.Record
	for seq := range perKey {
		for k := range keys {
			v, _ := json.Marshal(map[string]int64{"key": int64(k), "seq": int64(seq)})
			recs = append(recs, &kgo.Record{Key: []byte(fmt.Sprint(k)), Value: v,
				Headers: []kgo.RecordHeader{{Key: "origin", Value: fmt.Appendf(nil, "%d/%d", k, seq)}}})
		}
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// KeyedCount is an output record of a keyed count of (key, seq) records.
type KeyedCount struct{ Key, Seq, Count int64 }

// ReadKeyedCounts reads topic with read_committed until every (key, seq) of keys × perKey
// arrived, then a second more for late duplicates, for at most 90 s. It calls each for every
// record and returns how often each (key, seq) was seen and the number of records.
func ReadKeyedCounts(t testing.TB, ctx context.Context, brokers []string, topic string, keys, perKey int,
	each func(*kgo.Record, KeyedCount)) (map[[2]int64]int, int) {
	t.Helper()
	cons, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	seen := map[[2]int64]int{}
	rows := 0
	deadline := time.Now().Add(90 * time.Second)
	quiet := time.Time{} // once complete, read on briefly for late duplicates
	for time.Now().Before(deadline) && (quiet.IsZero() || time.Now().Before(quiet)) {
		if quiet.IsZero() && len(seen) == keys*perKey {
			quiet = time.Now().Add(time.Second)
		}
		pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cons.PollFetches(pctx)
		pcancel()
		fs.EachRecord(func(r *kgo.Record) {
			var row KeyedCount
			if err := json.Unmarshal(r.Value, &row); err != nil {
				t.Fatalf("output record %q: %v", r.Value, err)
			}
			rows++
			seen[[2]int64{row.Key, row.Seq}]++
			each(r, row)
		})
	}
	return seen, rows
}

// WaitNoOngoingTransactions waits until no transaction is open on the cluster: sinks abort
// theirs when their job is cancelled, and restored ones abort those left behind.
func WaitNoOngoingTransactions(t testing.TB, ctx context.Context, brokers []string) {
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

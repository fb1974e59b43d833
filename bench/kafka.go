package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaVariant is one delivery guarantee of the Kafka sink in the Kafka → Kafka comparison.
type kafkaVariant struct {
	guarantee string // the sink's delivery-guarantee
	short     string
	rates     []float64
}

// kafkaThroughput runs Kafka → key-by → count → Kafka on an in-process Kafka (kfake, the
// real protocol on a loopback port the TaskManager processes connect to) with the sink's
// delivery-guarantee at-least-once and exactly-once, rounds interleaved with a rotating
// order. The input topic is filled once with n JSON records; each run reads it from the
// start into its own output topic, and its time is from all tasks RUNNING to a
// read_committed consumer having seen n output records. The job is unbounded, so each run
// is cancelled after it.
func kafkaThroughput(c *cluster, o options) error {
	const partitions = 2
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, "in"))
	if err != nil {
		return fmt.Errorf("kfake: %w", err)
	}
	unregister := onInterrupt(kc.Close)
	defer func() { kc.Close(); unregister() }()
	addrs := kc.ListenAddrs()
	brokers := strings.Join(addrs, ",")
	cpDir := filepath.Join(c.dir, "kafka-checkpoints")
	variants := []*kafkaVariant{
		{guarantee: "at-least-once", short: "ALO"},
		{guarantee: "exactly-once", short: "EO"},
	}
	fmt.Printf("\n== kafka ==\n")
	fmt.Printf("kafka (format json) -> key-by key (%d keys) -> count -> kafka (format json), parallelism 2 over 2 TaskManager processes (1 slot each),\n", o.keys)
	fmt.Printf("on an in-process kfake cluster (1 broker at %s, %d partitions per topic); source without rate limit, checkpoints every %s (EXACTLY_ONCE)\n",
		brokers, partitions, durText(o.kafkaInterval))
	fmt.Printf("%d input records; each run: all tasks RUNNING -> %d records read by a read_committed consumer of its own output topic, then cancel\n", o.kafkaN, o.kafkaN)
	fmt.Printf("sink delivery-guarantee at-least-once / exactly-once (transaction-timeout 10 min), %d runs each, interleaved with rotating order\n\n", o.kafkaRuns)

	ctx := context.Background()
	fillStart := time.Now()
	if err := fillKafka(ctx, addrs, "in", o.kafkaN, o.keys); err != nil {
		return err
	}
	fmt.Printf("  filled topic in with %d records in %v\n", o.kafkaN, time.Since(fillStart).Round(time.Millisecond))

	admCl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return err
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	for r := range o.kafkaRuns {
		var parts []string
		for j := range variants {
			vr := variants[(r+j)%len(variants)]
			topic := fmt.Sprintf("out-%s-%d", vr.short, r+1)
			if _, err := adm.CreateTopic(ctx, partitions, 1, nil, topic); err != nil {
				return fmt.Errorf("create topic %s: %w", topic, err)
			}
			secs, restarts, err := kafkaRun(c, o, addrs, vr, topic, cpDir)
			if err != nil {
				return fmt.Errorf("kafka, %s: %w", vr.guarantee, err)
			}
			rate := float64(o.kafkaN) / secs
			vr.rates = append(vr.rates, rate)
			part := fmt.Sprintf("%s %.2fs, %.0f k records/s", vr.guarantee, secs, rate/1e3)
			if restarts > 0 {
				part += fmt.Sprintf(" (%d %s)", restarts, plural(restarts, "restart"))
			}
			parts = append(parts, part)
		}
		fmt.Printf("  round %d: %s\n", r+1, strings.Join(parts, " | "))
	}
	alo, eo := median(variants[0].rates), median(variants[1].rates)
	fmt.Printf("\n%-46s %10.0f k records/s (median of %d)\n", "at-least-once:", alo/1e3, o.kafkaRuns)
	fmt.Printf("%-46s %10.0f k records/s (median of %d)\n", "exactly-once:", eo/1e3, o.kafkaRuns)
	fmt.Printf("%-46s %10.3f\n", "ratio exactly-once/at-least-once (medians):", eo/alo)
	// Paired view: each round's ratio, which cancels drift in the machine's speed between rounds.
	var ratios []float64
	var each []string
	for r := range variants[1].rates {
		ratios = append(ratios, variants[1].rates[r]/variants[0].rates[r])
		each = append(each, fmt.Sprintf("%.3f", ratios[r]))
	}
	fmt.Printf("%-46s %10.3f (each: %s)\n", "same-round ratio, median:", median(ratios), strings.Join(each, ", "))
	fmt.Printf("exactly-once / at-least-once throughput ratio %.3f (informational, no target)\n", eo/alo)
	return nil
}

// fillKafka produces n JSON records {"key": i % keys, "seq": i} to topic, keyed by key.
func fillKafka(ctx context.Context, addrs []string, topic string, n int64, keys int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(topic),
		kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(100_000))
	if err != nil {
		return err
	}
	defer cl.Close()
	errc := make(chan error, 1)
	for i := range n {
		k := i % int64(keys)
		v, _ := json.Marshal(map[string]int64{"key": k, "seq": i})
		cl.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprint(k)), Value: v}, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errc <- err:
				default:
				}
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	select {
	case err := <-errc:
		return fmt.Errorf("fill topic %s: %w", topic, err)
	default:
		return nil
	}
}

// kafkaRun runs the job once into topic and returns the seconds from all tasks RUNNING to
// the last of n records committed, and the job's restarts.
func kafkaRun(c *cluster, o options, addrs []string, vr *kafkaVariant, topic, cpDir string) (secs float64, restarts int, err error) {
	brokers := strings.Join(addrs, ",")
	name := fmt.Sprintf("bench-kafka-%s", topic)
	sink := fmt.Sprintf("{name: out, type: kafka, brokers: %q, topic: %s, format: json, key: \"string(key)\", delivery-guarantee: %s", brokers, topic, vr.guarantee)
	if vr.guarantee == "exactly-once" {
		sink += ", transaction-timeout: 10 min"
	}
	sink += "}"
	spec := fmt.Sprintf(`name: %s
parallelism: 2
%soperators:
  - {name: in, type: kafka, brokers: %q, topic: in, start: earliest, format: json, schema: {key: int64, seq: int64}}
  - {name: by-key, type: key-by, key: key}
  - {name: counts, type: count}
  - %s
`, name, checkpointConfig(o.kafkaInterval.String(), cpDir), brokers, sink)

	// The consumer runs from before the submission, so that the poll adds no delay.
	cons, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return 0, 0, err
	}
	defer cons.Close()
	ctx, cancel := context.WithTimeout(context.Background(), o.kafkaTimeout+30*time.Second)
	defer cancel()
	type result struct {
		at   time.Time
		seen int64
	}
	done := make(chan result, 1)
	go func() {
		var seen int64
		for seen < o.kafkaN && ctx.Err() == nil {
			fs := cons.PollFetches(ctx)
			seen += int64(fs.NumRecords())
		}
		done <- result{time.Now(), seen}
	}()

	id, err := c.startJob(name, spec, 10*time.Millisecond)
	defer c.cancelAtReturn(id, &err)
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	var res result
	select {
	case res = <-done:
	case <-time.After(o.kafkaTimeout):
		cancel()
		res = <-done
		st, _ := c.Status(context.Background(), id)
		return 0, 0, fmt.Errorf("%d of %d records committed to %s after %v (job %s, %d restarts)", res.seen, o.kafkaN, topic, o.kafkaTimeout, st.Status, st.Restarts)
	}
	st, err := c.Status(context.Background(), id)
	if err != nil {
		return 0, 0, err
	}
	if res.seen < o.kafkaN {
		return 0, 0, fmt.Errorf("%d of %d records committed to %s", res.seen, o.kafkaN, topic)
	}
	return res.at.Sub(start).Seconds(), st.Restarts, nil
}

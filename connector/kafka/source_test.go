package kafka

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/goflink/goflink/connector/kafka/kafkaspec"
	"github.com/goflink/goflink/connector/kafka/kafkatest"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/operator"
	"github.com/goflink/goflink/operator/operatortest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

func newSourceCluster(t *testing.T, partitions int32, topics ...string) []string {
	return kafkatest.Start(t, partitions, topics...).ListenAddrs()
}

func sourceTestClient(t *testing.T, addrs []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produceForSource writes n records "p<partition>-<i>" (key "k<i>") to each partition of topic.
func produceForSource(t *testing.T, addrs []string, topic string, partitions int32, from, n int) {
	t.Helper()
	cl := sourceTestClient(t, addrs)
	var recs []*kgo.Record
	for p := range partitions {
		for i := from; i < from+n; i++ {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "p%d-%d", p, i)})
		}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

type kafkaRun struct {
	*kafkaSource
	out *operatortest.Capture
	sc  *operatortest.StateContext
}

func openKafkaRun(t *testing.T, spec *kafkaspec.SourceConfig, sub, par int, restoredID int64, restored [][]byte) *kafkaRun {
	t.Helper()
	k, err := newKafkaSource(spec)
	if err != nil {
		t.Fatal(err)
	}
	sc := operatortest.NewStateContext(restoredID, map[string][][]byte{kafkaOffsetsState: restored})
	if err := k.InitializeState(sc); err != nil {
		t.Fatalf("InitializeState: %v", err)
	}
	out := &operatortest.Capture{}
	if err := k.Open(&operator.Context{OperatorName: "in", Subtask: sub, Parallelism: par, Now: time.Now, Metrics: &operator.Metrics{}}, out); err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = k.Close() })
	return &kafkaRun{k, out, sc}
}

// read emits until the run captured want rows in total, failing after a timeout.
func (r *kafkaRun) read(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(r.out.Rows) < want {
		if time.Now().After(deadline) {
			t.Fatalf("read %d rows, want %d", len(r.out.Rows), want)
		}
		_, wait, done, err := r.Emit(min(want-len(r.out.Rows), 7))
		if err != nil {
			t.Fatalf("Emit: %v", err)
		}
		if done {
			t.Fatal("an unbounded kafka source reported done")
		}
		time.Sleep(wait)
	}
}

// quiet checks that nothing more arrives for a while.
func (r *kafkaRun) quiet(t *testing.T) {
	t.Helper()
	n := len(r.out.Rows)
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
		_, wait, _, err := r.Emit(100)
		if err != nil {
			t.Fatalf("Emit: %v", err)
		}
		time.Sleep(max(wait, time.Millisecond))
	}
	if len(r.out.Rows) != n {
		t.Errorf("read %d more rows, want none: %v", len(r.out.Rows)-n, r.out.Rows[n:])
	}
}

func (r *kafkaRun) snapshot(t *testing.T, id int64) [][]byte {
	t.Helper()
	if err := r.SnapshotState(id); err != nil {
		t.Fatalf("SnapshotState(%d): %v", id, err)
	}
	return operatortest.Checkpoint(t, kafkaOffsetsState, pb.ListDistribution_LIST_DISTRIBUTION_UNION, r.sc)
}

// rawValues returns the raw rows' values.
func rawValues(rows []record.Row) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r[1].Str()
	}
	return out
}

func TestKafkaSourceReadsFromEarliest(t *testing.T) {
	addrs := newSourceCluster(t, 3, "events")
	produceForSource(t, addrs, "events", 3, 0, 10)
	r := openKafkaRun(t, &kafkaspec.SourceConfig{Brokers: addrs, Topics: []string{"events"}, Start: "earliest"}, 0, 1, 0, nil)
	r.read(t, 30)
	r.quiet(t)
	next := map[int64]int64{}
	for _, row := range r.out.Rows {
		p, off := row[3].Int(), row[4].Int()
		if off != next[p] {
			t.Fatalf("partition %d: offset %d, want %d", p, off, next[p])
		}
		next[p]++
		if want := fmt.Sprintf("p%d-%d", p, off); row[1].Str() != want || row[0].Str() != fmt.Sprintf("k%d", off) || row[2].Str() != "events" {
			t.Errorf("row %v, want value %s", row, want)
		}
		if row[5].Time().IsZero() || time.Since(row[5].Time()) > time.Minute {
			t.Errorf("timestamp %v", row[5].Time())
		}
	}
}

// The source reports its lag (Flink's pendingRecords) per partition and in all: records
// between the next offset it reads and the partition's end.
func TestKafkaSourcePendingRecords(t *testing.T) {
	addrs := newSourceCluster(t, 3, "lagged")
	produceForSource(t, addrs, "lagged", 3, 0, 10)
	r := openKafkaRun(t, &kafkaspec.SourceConfig{Brokers: addrs, Topics: []string{"lagged"}, Start: "earliest"}, 0, 1, 0, nil)
	metric := func(labels ...string) (float64, bool) {
		var v float64
		found := false
		r.ctx.Metrics.Each(func(m *operator.Metric) {
			if m.Name() == "pendingRecords" && slices.Equal(m.Labels(), labels) {
				v, found = m.Value(), true
			}
		})
		return v, found
	}
	r.read(t, 5)
	if total, ok := metric(); !ok || total < 1 || total > 25 {
		t.Fatalf("pendingRecords after 5 of 30 records = %v (reported %v), want 1..25", total, ok)
	}
	r.read(t, 30)
	r.quiet(t)
	if total, ok := metric(); !ok || total != 0 {
		t.Errorf("pendingRecords after every record = %v (reported %v), want 0", total, ok)
	}
	for p := range 3 {
		if v, ok := metric("topic", "lagged", "partition", strconv.Itoa(p)); !ok || v != 0 {
			t.Errorf("partition %d: pendingRecords = %v (reported %v), want 0", p, v, ok)
		}
	}
	produceForSource(t, addrs, "lagged", 3, 10, 4)
	r.read(t, 31) // one more poll sees the new end offsets
	if total, ok := metric(); !ok || total < 1 || total > 11 {
		t.Errorf("pendingRecords with 12 new records, 1 read = %v, want 1..11", total)
	}
}

func TestKafkaSourceStartLatestAndTimestamp(t *testing.T) {
	addrs := newSourceCluster(t, 1, "events")
	produceForSource(t, addrs, "events", 1, 0, 5)
	latest := openKafkaRun(t, &kafkaspec.SourceConfig{Brokers: addrs, Topics: []string{"events"}, Start: "latest"}, 0, 1, 0, nil)
	// A checkpoint before any record still pins the resolved position.
	chk := latest.snapshot(t, 1)
	time.Sleep(5 * time.Millisecond)
	cut := time.Now()
	produceForSource(t, addrs, "events", 1, 5, 3)
	latest.read(t, 3)
	if got := rawValues(latest.out.Rows); !slices.Equal(got, []string{"p0-5", "p0-6", "p0-7"}) {
		t.Errorf("latest read %v", got)
	}
	restored := openKafkaRun(t, &kafkaspec.SourceConfig{Brokers: addrs, Topics: []string{"events"}, Start: "latest"}, 0, 1, 1, chk)
	restored.read(t, 3)
	if got := rawValues(restored.out.Rows); !slices.Equal(got, []string{"p0-5", "p0-6", "p0-7"}) {
		t.Errorf("restored from a checkpoint taken at latest read %v", got)
	}
	ts := openKafkaRun(t, &kafkaspec.SourceConfig{Brokers: addrs, Topics: []string{"events"}, Start: "timestamp", StartTimestampMs: cut.UnixMilli()}, 0, 1, 0, nil)
	ts.read(t, 3)
	ts.quiet(t)
	if got := rawValues(ts.out.Rows); !slices.Equal(got, []string{"p0-5", "p0-6", "p0-7"}) {
		t.Errorf("timestamp start read %v", got)
	}
}

func TestKafkaSourceAssignmentIsDeterministic(t *testing.T) {
	addrs := newSourceCluster(t, 3, "b", "a")
	spec := &kafkaspec.SourceConfig{Brokers: addrs, Topics: []string{"b", "a"}}
	const par = 4
	var all []topicPartition
	for sub := range par {
		r1 := openKafkaRun(t, spec, sub, par, 0, nil)
		r2 := openKafkaRun(t, spec, sub, par, 0, nil)
		if !slices.Equal(r1.mine, r2.mine) {
			t.Errorf("subtask %d: assignment %v then %v", sub, r1.mine, r2.mine)
		}
		all = append(all, r1.mine...)
	}
	// Flink's rule: the topic starts at ((javaHash(topic) * 31) & 0x7FFFFFFF) % par, its
	// partitions follow round-robin. "a" (hash 97) starts at 3007 % 4 = 3 and "b" (98) at
	// 3038 % 4 = 2: subtask 0 gets a1 b2, 1 gets a2, 2 gets b0, 3 gets a0 b1.
	want := []topicPartition{{"a", 1}, {"b", 2}, {"a", 2}, {"b", 0}, {"a", 0}, {"b", 1}}
	if !slices.Equal(all, want) {
		t.Errorf("assignment by subtask = %v, want %v", all, want)
	}
	// Adding partitions never moves an existing one.
	for p := range int32(50) {
		for _, topic := range []string{"a", "orders", "ü-topic"} {
			if got, want := kafkaPartitionOwner(topicPartition{topic, p}, 7), (kafkaPartitionOwner(topicPartition{topic, 0}, 7)+int(p))%7; got != want {
				t.Fatalf("owner of %s[%d] = %d, want %d", topic, p, got, want)
			}
		}
	}
}

// Partitions added to a topic and topics created that match the pattern while the source runs
// are read from their start by exactly one subtask, and their offsets enter the checkpoint.
func TestKafkaSourceDiscoversNewPartitionsAndTopics(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "ev-a"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addrs := c.ListenAddrs()
	spec := &kafkaspec.SourceConfig{Brokers: addrs, TopicPattern: "^ev-", Start: "latest",
		Properties: map[string]string{"partition.discovery.interval.ms": "20"}}
	const par = 2
	runs := []*kafkaRun{openKafkaRun(t, spec, 0, par, 0, nil), openKafkaRun(t, spec, 1, par, 0, nil)}

	adm := kadm.NewClient(sourceTestClient(t, addrs))
	ctx := context.Background()
	if _, err := adm.CreatePartitions(ctx, 2, "ev-a"); err != nil { // ev-a[1], ev-a[2]
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "ev-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "other"); err != nil {
		t.Fatal(err)
	}
	// Written before the source may have noticed the partitions: read from their start anyway.
	produceForSource(t, addrs, "ev-a", 3, 0, 4)
	produceForSource(t, addrs, "ev-b", 2, 0, 4)
	produceForSource(t, addrs, "other", 1, 0, 4)

	seen := map[string]int{}
	deadline := time.Now().Add(10 * time.Second)
	for total := 0; total < 5*4 && time.Now().Before(deadline); {
		for _, r := range runs {
			n, wait, _, err := r.Emit(100)
			if err != nil {
				t.Fatal(err)
			}
			total += n
			if n == 0 {
				time.Sleep(wait)
			}
		}
	}
	for sub, r := range runs {
		for _, row := range r.out.Rows {
			seen[fmt.Sprintf("%s/%s", row[2].Str(), row[1].Str())]++
			if owner := kafkaPartitionOwner(topicPartition{row[2].Str(), int32(row[3].Int())}, par); owner != sub {
				t.Errorf("subtask %d read %s[%d], owned by %d", sub, row[2].Str(), row[3].Int(), owner)
			}
		}
	}
	// ev-a[0] existed at the start with start: latest, so its 4 records (written after Open)
	// are read too; ev-a[1], ev-a[2], ev-b[0], ev-b[1] are new. "other" does not match.
	if len(seen) != 20 {
		t.Errorf("read %d distinct records, want 20: %v", len(seen), seen)
	}
	for k, n := range seen {
		if n != 1 || strings.HasPrefix(k, "other/") {
			t.Errorf("record %s read %d times", k, n)
		}
	}
	var offsets []string
	for i, r := range runs {
		for _, b := range r.snapshot(t, int64(i+1)) {
			offsets = append(offsets, string(b))
		}
	}
	slices.Sort(offsets)
	if len(offsets) != 5 || !strings.Contains(strings.Join(offsets, " "), `{"topic":"ev-b","partition":1,"offset":4}`) {
		t.Errorf("checkpointed offsets %v, want all 5 partitions at offset 4", offsets)
	}
}

func TestKafkaSourceRestoreRescaledWithoutDuplicatesOrGaps(t *testing.T) {
	const parts, n = 5, 8
	addrs := newSourceCluster(t, parts, "events")
	produceForSource(t, addrs, "events", parts, 0, n)
	spec := &kafkaspec.SourceConfig{Brokers: addrs, Topics: []string{"events"}}
	seen := map[string]int{}
	var chk [][]byte
	for sub := range 2 {
		r := openKafkaRun(t, spec, sub, 2, 0, nil)
		r.read(t, 3+sub*4)
		for _, v := range rawValues(r.out.Rows) {
			seen[v]++
		}
		chk = append(chk, r.snapshot(t, 4)...)
		r.read(t, 3+sub*4+2) // emitted after the checkpoint: lost with the failure, replayed
	}
	produceForSource(t, addrs, "events", parts, n, 2)
	total := 0
	for _, v := range seen {
		total += v
	}
	want := parts*(n+2) - total
	var got int
	for sub := range 3 { // rescaled from 2 to 3 subtasks
		r := openKafkaRun(t, spec, sub, 3, 4, chk)
		var mine int
		for _, tp := range r.mine {
			mine += n + 2
			for v := range seen {
				var p, i int
				if _, err := fmt.Sscanf(v, "p%d-%d", &p, &i); err != nil {
					t.Fatalf("record %q: %v", v, err)
				}
				if int32(p) == tp.partition {
					mine--
				}
			}
		}
		r.read(t, mine)
		r.quiet(t)
		for _, v := range rawValues(r.out.Rows) {
			seen[v]++
		}
		got += len(r.out.Rows)
	}
	if got != want {
		t.Errorf("read %d after the restore, want %d", got, want)
	}
	for p := range parts {
		for i := range n + 2 {
			if c := seen[fmt.Sprintf("p%d-%d", p, i)]; c != 1 {
				t.Errorf("p%d-%d read %d times, want once", p, i, c)
			}
		}
	}
}

func TestKafkaSourceReadCommittedSkipsAborted(t *testing.T) {
	addrs := newSourceCluster(t, 1, "tx")
	ctx := context.Background()
	p := sourceTestClient(t, addrs, kgo.TransactionalID("writer"))
	txn := func(commit kgo.TransactionEndTry, vals ...string) {
		t.Helper()
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, v := range vals {
			if err := p.ProduceSync(ctx, &kgo.Record{Topic: "tx", Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	txn(kgo.TryCommit, "a1", "a2")
	txn(kgo.TryAbort, "b1", "b2")
	txn(kgo.TryCommit, "c1")

	committed := openKafkaRun(t, &kafkaspec.SourceConfig{Brokers: addrs, Topics: []string{"tx"}}, 0, 1, 0, nil)
	committed.read(t, 3)
	committed.quiet(t)
	if got := rawValues(committed.out.Rows); !slices.Equal(got, []string{"a1", "a2", "c1"}) {
		t.Errorf("read_committed read %v", got)
	}
	all := openKafkaRun(t, &kafkaspec.SourceConfig{Brokers: addrs, Topics: []string{"tx"}, Isolation: "read_uncommitted"}, 0, 1, 0, nil)
	all.read(t, 5)
	if got := rawValues(all.out.Rows); !slices.Equal(got, []string{"a1", "a2", "b1", "b2", "c1"}) {
		t.Errorf("read_uncommitted read %v", got)
	}
}

func TestKafkaSourceJSON(t *testing.T) {
	addrs := newSourceCluster(t, 1, "j")
	cl := sourceTestClient(t, addrs)
	for _, v := range []string{
		`{"id": 7, "name": "x", "amount": 1.5, "ok": true, "at": "2026-01-02T03:04:05Z", "extra": [1], "tags": {"env": "prod", "n": 1, "l": [true]}}`,
		`{"id": 8, "at": 1000}`,
		`not json`,
	} {
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "j", Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	schema := []record.Field{
		{Name: "id", Type: record.Int64}, {Name: "name", Type: record.String},
		{Name: "amount", Type: record.Float64}, {Name: "ok", Type: record.Bool},
		{Name: "at", Type: record.Timestamp}, {Name: "tags", Type: record.Map},
	}
	r := openKafkaRun(t, &kafkaspec.SourceConfig{Brokers: addrs, Topics: []string{"j"}, Format: "json", Schema: schema}, 0, 1, 0, nil)
	r.read(t, 2)
	a, b := r.out.Rows[0], r.out.Rows[1]
	if a[0].Int() != 7 || a[1].Str() != "x" || a[2].Float() != 1.5 || !a[3].Bool() || a[4].Time().Format(time.RFC3339) != "2026-01-02T03:04:05Z" ||
		a[5].Format(record.Map) != `{"env":"prod","l":"[true]","n":"1"}` || a[6].Str() != "j" || a[7].Int() != 0 || a[8].Int() != 0 {
		t.Errorf("row 0 = %v", a)
	}
	if b[0].Int() != 8 || b[1].Str() != "" || b[4].Time().UnixMilli() != 1000 || b[5].MapLen() != 0 || b[8].Int() != 1 {
		t.Errorf("row 1 = %v", b)
	}
	var err error
	for end := time.Now().Add(5 * time.Second); err == nil && time.Now().Before(end); {
		var wait time.Duration
		_, wait, _, err = r.Emit(10)
		time.Sleep(wait)
	}
	if err == nil || !operator.IsUnrecoverable(err) {
		t.Errorf("a value that is not JSON: err = %v, want an unrecoverable error", err)
	}
}

func TestKafkaSourceCommitsOffsetsAfterCheckpoint(t *testing.T) {
	addrs := newSourceCluster(t, 2, "events")
	produceForSource(t, addrs, "events", 2, 0, 4)
	// start: committed without a group reads from the start.
	r := openKafkaRun(t, &kafkaspec.SourceConfig{Brokers: addrs, Topics: []string{"events"}, GroupID: "g", Start: "committed"}, 0, 1, 0, nil)
	r.read(t, 5)
	r.snapshot(t, 1)
	r.read(t, 6)
	r.snapshot(t, 2)
	if err := r.NotifyCheckpointAborted(2); err != nil {
		t.Fatal(err)
	}
	if err := r.NotifyCheckpointComplete(2); err != nil { // completes 1 (2 was aborted)
		t.Fatal(err)
	}
	adm := kadm.NewClient(sourceTestClient(t, addrs))
	poll.Until(t, 5*time.Second, "the offsets of checkpoint 1 to be committed", func() error {
		offs, err := adm.FetchOffsets(context.Background(), "g")
		if err != nil {
			return err // the group does not exist before the first commit
		}
		var sum int64
		offs.Each(func(o kadm.OffsetResponse) { sum += o.At })
		if sum != 5 {
			return fmt.Errorf("committed offsets sum to %d, want the 5 records of checkpoint 1", sum)
		}
		return nil
	})
	// start: committed continues from the group's offsets.
	c := openKafkaRun(t, &kafkaspec.SourceConfig{Brokers: addrs, Topics: []string{"events"}, GroupID: "g", Start: "committed"}, 0, 1, 0, nil)
	c.read(t, 3)
	c.quiet(t)
}

// Record headers reach expressions as the map field "headers" (of a repeated key, the last
// value), and a sink's headers expression writes them back out.
func TestKafkaHeadersThroughSourceAndSink(t *testing.T) {
	addrs := newSourceCluster(t, 1, "in", "out")
	cl := sourceTestClient(t, addrs)
	in := []*kgo.Record{
		{Topic: "in", Value: []byte("a"), Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t-1")}, {Key: "dup", Value: []byte("first")}, {Key: "dup", Value: []byte("last")}}},
		{Topic: "in", Value: []byte("b")},
	}
	if err := cl.ProduceSync(context.Background(), in...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r := openKafkaRun(t, &kafkaspec.SourceConfig{Brokers: addrs, Topics: []string{"in"}, Start: "earliest"}, 0, 1, 0, nil)
	r.read(t, 2)
	h := kafkaspec.RawSchema.Index("headers")
	if got := r.out.Rows[0][h].Format(record.Map); got != `{"dup":"last","trace":"t-1"}` {
		t.Errorf("headers of record a = %s", got)
	}
	if got := r.out.Rows[1][h].MapLen(); got != 0 {
		t.Errorf("record b without headers has %d", got)
	}

	spec := &kafkaspec.SinkConfig{Brokers: addrs, Topic: "out", Format: "raw", Value: "value", Headers: "headers", DeliveryGuarantee: kafkaNone}
	o := newOperator(t, spec, kafkaspec.RawSchema)
	s := o.(*kafkaSink)
	if err := s.Open(&operator.Context{OperatorName: "sink", Parallelism: 1}, &operatortest.Capture{}); err != nil {
		t.Fatal(err)
	}
	for _, row := range r.out.Rows {
		if err := s.Process(row); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.EndInput(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	cons := sourceTestClient(t, addrs, kgo.ConsumeTopics("out"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var got []string
	for len(got) < 2 && ctx.Err() == nil {
		cons.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			s := string(r.Value)
			for _, h := range r.Headers {
				s += " " + h.Key + "=" + string(h.Value)
			}
			got = append(got, s)
		})
	}
	if want := []string{"a dup=last trace=t-1", "b"}; !slices.Equal(got, want) {
		t.Errorf("written records %q, want %q", got, want)
	}

	if _, err := newKafkaSink(&kafkaspec.SinkConfig{Brokers: addrs, Topic: "out", Headers: "value"}, kafkaspec.RawSchema); err == nil ||
		!strings.Contains(err.Error(), "headers") || !strings.Contains(err.Error(), "want map") {
		t.Errorf("a headers expression that is not a map: %v", err)
	}
}

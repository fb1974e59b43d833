package kafka

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/goflink/goflink/connector/kafka/kafkaspec"
	"github.com/goflink/goflink/connector/kafka/kafkatest"
	"github.com/goflink/goflink/operator"
	"github.com/goflink/goflink/operator/operatortest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

var sinkTestSchema = record.MustSchema(record.Field{Name: "n", Type: record.Int64})

// newSinkCluster starts an in-process kfake cluster with topic "out" (one partition).
func newSinkCluster(t *testing.T) []string { return kafkatest.Start(t, 1, "out").ListenAddrs() }

func sinkSpec(seeds []string, guarantee string, timeout time.Duration) *kafkaspec.SinkConfig {
	return &kafkaspec.SinkConfig{Brokers: seeds, Topic: "out", DeliveryGuarantee: guarantee,
		TransactionTimeoutMs: timeout.Milliseconds()}
}

// kafkaTestSink is one subtask's exactly-once kafka sink driven through the operator hooks.
type kafkaTestSink struct {
	*kafkaTxnSink
	sc  *operatortest.StateContext
	log *bytes.Buffer
}

// openKafkaTxnSink opens an exactly-once sink as subtask 0 of 1, restored from state (nil: a
// fresh start) of checkpoint restoredID.
func openKafkaTxnSink(t *testing.T, seeds []string, timeout time.Duration, restoredID int64, state [][]byte) (*kafkaTestSink, error) {
	t.Helper()
	return openKafkaTxnSubtask(t, seeds, timeout, 0, 1, restoredID, state)
}

// openKafkaTxnSubtask opens an exactly-once sink as subtask sub of par.
func openKafkaTxnSubtask(t *testing.T, seeds []string, timeout time.Duration, sub, par int, restoredID int64, state [][]byte) (*kafkaTestSink, error) {
	t.Helper()
	o, err := newKafkaSink(sinkSpec(seeds, kafkaExactlyOnce, timeout), sinkTestSchema)
	if err != nil {
		t.Fatal(err)
	}
	s := o.(*kafkaTxnSink)
	sc := operatortest.NewStateContext(restoredID, map[string][][]byte{operator.TwoPhaseStateName: state})
	if err := s.InitializeState(sc); err != nil {
		t.Fatalf("InitializeState: %v", err)
	}
	log := &bytes.Buffer{}
	ctx := &operator.Context{JobID: "job1", OperatorName: "sink", Subtask: sub, Parallelism: par, Checkpointing: true,
		Logger: slog.New(slog.NewTextHandler(log, nil))}
	return &kafkaTestSink{s, sc, log}, s.Open(ctx, &operatortest.Capture{})
}

func mustOpenKafkaTxnSink(t *testing.T, seeds []string, restoredID int64, state [][]byte) *kafkaTestSink {
	t.Helper()
	s, err := openKafkaTxnSink(t, seeds, time.Minute, restoredID, state)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// crash abandons the sink without Close (its open and pre-committed transactions stay open in
// the broker); its clients are only closed when the test ends. The records written so far
// reach the broker first (call it after the writes), so the open transactions are known to
// the broker when a restore lists them.
func (s *kafkaTestSink) crash(t *testing.T) {
	t.Helper()
	for _, sl := range s.slots {
		if sl.cl != nil {
			if err := sl.cl.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() {
		for _, sl := range s.slots {
			if sl.cl != nil {
				sl.cl.Close()
			}
		}
		s.admin.Close()
	})
}

func (s *kafkaTestSink) write(t *testing.T, vs ...int64) {
	t.Helper()
	for _, v := range vs {
		if err := s.Process(record.Row{record.IntValue(v)}); err != nil {
			t.Fatalf("Process(%d): %v", v, err)
		}
	}
}

// checkpoint runs the synchronous part of checkpoint id and returns the sink's state in it.
func (s *kafkaTestSink) checkpoint(t *testing.T, id int64) [][]byte {
	t.Helper()
	if err := s.PrepareSnapshotPreBarrier(id); err != nil {
		t.Fatalf("PrepareSnapshotPreBarrier(%d): %v", id, err)
	}
	if err := s.SnapshotState(id); err != nil {
		t.Fatalf("SnapshotState(%d): %v", id, err)
	}
	return operatortest.Checkpoint(t, operator.TwoPhaseStateName, pb.ListDistribution_LIST_DISTRIBUTION_UNION, s.sc)
}

func (s *kafkaTestSink) complete(t *testing.T, id int64) {
	t.Helper()
	if err := s.NotifyCheckpointComplete(id); err != nil {
		t.Fatalf("NotifyCheckpointComplete(%d): %v", id, err)
	}
}

// readSinkTopic returns the values of topic "out" a consumer with the given isolation sees.
func readSinkTopic(t *testing.T, seeds []string, committed bool) []int64 {
	t.Helper()
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics("out"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(iso))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []int64
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			var v struct{ N int64 }
			if err := json.Unmarshal(r.Value, &v); err != nil {
				t.Errorf("record %q: %v", r.Value, err)
			}
			out = append(out, v.N)
			n++
		})
		if n == 0 {
			return out
		}
	}
}

func wantSinkCommitted(t *testing.T, step string, seeds []string, want ...int64) {
	t.Helper()
	if got := readSinkTopic(t, seeds, true); !slices.Equal(got, want) {
		t.Errorf("%s: read_committed sees %v, want %v", step, got, want)
	}
}

// wantSinkStable checks that no transaction is open on "out": the last stable offset is the high
// watermark, so read_committed consumers are not stuck.
func wantSinkStable(t *testing.T, step string, seeds []string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	end, err := adm.ListEndOffsets(ctx, "out")
	if err != nil {
		t.Fatal(err)
	}
	stable, err := adm.ListCommittedOffsets(ctx, "out")
	if err != nil {
		t.Fatal(err)
	}
	e, _ := end.Lookup("out", 0)
	s, _ := stable.Lookup("out", 0)
	if e.Offset != s.Offset {
		t.Errorf("%s: last stable offset %d, high watermark %d: a transaction is still open", step, s.Offset, e.Offset)
	}
}

// Records become visible to read_committed only when their checkpoint completes; the records
// of an aborted checkpoint go with the next completed one; Close aborts the open transaction.
// Slots return to the pool only after a later checkpoint no longer references them.
func TestKafkaSinkExactlyOnceCommitsOnCheckpointComplete(t *testing.T) {
	seeds := newSinkCluster(t)
	s := mustOpenKafkaTxnSink(t, seeds, 0, nil)
	if cur, _ := s.Current(); cur.TxnID != "goflink-job1-sink-0-0" {
		t.Errorf("first transactional ID %q, want goflink-job1-sink-0-0", cur.TxnID)
	}
	s.write(t, 1, 2)
	s.checkpoint(t, 1)
	s.write(t, 3) // after barrier 1
	wantSinkCommitted(t, "before complete(1)", seeds)
	if got := readSinkTopic(t, seeds, false); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Errorf("read_uncommitted sees %v, want [1 2 3] (flushed, not committed)", got)
	}
	s.complete(t, 1)
	wantSinkCommitted(t, "after complete(1)", seeds, 1, 2)

	s.checkpoint(t, 2) // slot 1 pre-committed, slot 2 open; slot 0 still referenced by 1
	if got := s.inUseSlots(); !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("slots in use after checkpoint 2: %v, want [0 1 2]", got)
	}
	s.write(t, 4)
	if err := s.NotifyCheckpointAborted(2); err != nil {
		t.Fatal(err)
	}
	s.checkpoint(t, 3)
	s.write(t, 5)
	wantSinkCommitted(t, "checkpoint 2 aborted", seeds, 1, 2)
	s.complete(t, 3)
	wantSinkCommitted(t, "after complete(3)", seeds, 1, 2, 3, 4)
	// Slot 0 (committed, last referenced by checkpoint 1) is free again; slot 1 (committed,
	// but still pending in checkpoint 3's snapshot), slot 2 (committed, referenced by 3) and
	// slot 3 (open) are not.
	if got := s.inUseSlots(); !slices.Equal(got, []int{1, 2, 3}) {
		t.Errorf("slots in use after complete(3): %v, want [1 2 3]", got)
	}
	s.checkpoint(t, 4)
	if cur, _ := s.Current(); cur.Slot != 0 {
		t.Errorf("transaction after checkpoint 4 in slot %d, want the freed slot 0", cur.Slot)
	}
	s.write(t, 6)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// Checkpoint 4 (record 5) stays pre-committed for a restore; record 6 was aborted.
	if got := readSinkTopic(t, seeds, false); !slices.Contains(got, 5) {
		t.Errorf("read_uncommitted sees %v, want the pre-committed 5", got)
	}
	wantSinkCommitted(t, "after Close", seeds, 1, 2, 3, 4)
}

// A crash after pre-commit: a new sink restored from the checkpoint commits its transaction
// with a raw EndTxn (exactly once, also when restored twice), aborts the restored open
// transaction and the lingering one begun after the checkpoint, so the last stable offset
// advances.
func TestKafkaSinkRestoreCommitsAndAbortsLingering(t *testing.T) {
	seeds := newSinkCluster(t)
	a := mustOpenKafkaTxnSink(t, seeds, 0, nil)
	a.write(t, 1, 2)
	cp1 := a.checkpoint(t, 1)
	a.write(t, 3)      // open in checkpoint 1
	a.checkpoint(t, 2) // never completes
	a.write(t, 4)      // lingering: no state references it
	a.crash(t)
	wantSinkCommitted(t, "before the crash", seeds)

	b := mustOpenKafkaTxnSink(t, seeds, 1, cp1)
	wantSinkCommitted(t, "after restore", seeds, 1, 2)
	wantSinkStable(t, "after restore", seeds)
	if !strings.Contains(b.log.String(), "aborted lingering transactions") ||
		!strings.Contains(b.log.String(), "goflink-job1-sink-0-2") {
		t.Errorf("restore did not abort the lingering transaction of slot 2; log:\n%s", b.log)
	}
	if got := b.inUseSlots(); !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("slots in use after restore: %v, want [0 1 2] (0 and 1 reserved by checkpoint 1)", got)
	}

	// b fails too; a second restore from the same checkpoint commits again: an idempotent
	// success, nothing twice.
	b.write(t, 10)
	b.crash(t)
	c := mustOpenKafkaTxnSink(t, seeds, 1, cp1)
	wantSinkCommitted(t, "after a second restore", seeds, 1, 2)
	wantSinkStable(t, "after a second restore", seeds)

	c.write(t, 5)
	c.checkpoint(t, 2)
	c.complete(t, 2)
	wantSinkCommitted(t, "after complete(2) of the restored sink", seeds, 1, 2, 5)
	if got := c.inUseSlots(); slices.Contains(got, 0) || slices.Contains(got, 1) {
		t.Errorf("restored slots still reserved after checkpoint 2 completed: %v", got)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	wantSinkStable(t, "after Close", seeds)
}

// A pre-committed transaction that the broker aborted on its timeout before the commit fails
// the restore loudly with an unrecoverable data-loss error.
func TestKafkaSinkTimedOutTransactionIsDataLoss(t *testing.T) {
	seeds := newSinkCluster(t)
	const timeout = 500 * time.Millisecond
	a, err := openKafkaTxnSink(t, seeds, timeout, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.write(t, 1, 2)
	cp1 := a.checkpoint(t, 1)
	a.crash(t)
	time.Sleep(4 * timeout)

	b, err := openKafkaTxnSink(t, seeds, timeout, 1, cp1)
	if err := b.Close(); err != nil { // the task closes an operator whose Open failed
		t.Errorf("Close after the failed Open: %v", err)
	}
	if err == nil {
		t.Fatal("restore committed a timed-out transaction")
	}
	if !errors.Is(err, ErrKafkaDataLoss) || !operator.IsUnrecoverable(err) {
		t.Errorf("restore error %v: want an unrecoverable ErrKafkaDataLoss", err)
	}
	for _, want := range []string{"goflink-job1-sink-0-0", "checkpoint 1", "timed out", "lost"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("restore error %q does not say %q", err, want)
		}
	}
	t.Log(err)
	wantSinkCommitted(t, "after the failed restore", seeds)
}

// At-least-once flushes at the barrier: everything before it is written, and a restore
// writes the rest again (duplicates, no loss).
func TestKafkaSinkAtLeastOnce(t *testing.T) {
	seeds := newSinkCluster(t)
	open := func() *kafkaSink {
		o, err := newKafkaSink(sinkSpec(seeds, kafkaAtLeastOnce, 0), sinkTestSchema)
		if err != nil {
			t.Fatal(err)
		}
		s := o.(*kafkaSink)
		if err := s.Open(&operator.Context{OperatorName: "sink", Parallelism: 1}, &operatortest.Capture{}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	write := func(s *kafkaSink, from, to int64) {
		for v := from; v <= to; v++ {
			if err := s.Process(record.Row{record.IntValue(v)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	a := open()
	write(a, 1, 100)
	if err := a.PrepareSnapshotPreBarrier(1); err != nil {
		t.Fatal(err)
	}
	if got := readSinkTopic(t, seeds, true); len(got) != 100 {
		t.Fatalf("after the barrier %d records visible, want 100", len(got))
	}
	write(a, 101, 150)
	a.Close() // a failure: the records after the barrier may or may not be written

	b := open() // restored from checkpoint 1: the source replays 101..150
	write(b, 101, 150)
	if err := b.EndInput(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	got := readSinkTopic(t, seeds, true)
	seen := map[int64]int{}
	for _, v := range got {
		seen[v]++
	}
	for v := int64(1); v <= 150; v++ {
		if seen[v] == 0 {
			t.Errorf("record %d lost", v)
		}
	}
	t.Logf("%d records read, %d duplicates", len(got), len(got)-len(seen))
}

// newOperator builds a kafka operator of the job graph from its configuration, as a
// TaskManager does: a sink when it has an input.
func newOperator(t *testing.T, config any, in *record.Schema) any {
	t.Helper()
	b, err := json.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	op := &pb.Operator{Name: "sink", Type: "kafka", Config: b}
	if in != nil {
		op.InputSchema = in.Proto()
	}
	o, err := operator.MustRegistry(Type).New(op)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// Format raw writes the value expression's string, with the key expression as key; the type
// builds a sink for an operator with inputs; bad specs are rejected.
func TestKafkaSinkRawFormatAndSpecs(t *testing.T) {
	seeds := newSinkCluster(t)
	spec := sinkSpec(seeds, kafkaNone, 0)
	spec.Format, spec.Key, spec.Value = "raw", `"k" + string(n % 2)`, `n * 10`
	o := newOperator(t, spec, sinkTestSchema)
	s := o.(*kafkaSink)
	if err := s.Open(&operator.Context{OperatorName: "sink", Parallelism: 1}, &operatortest.Capture{}); err != nil {
		t.Fatal(err)
	}
	for v := int64(1); v <= 2; v++ {
		if err := s.Process(record.Row{record.IntValue(v)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.EndInput(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics("out"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var got []string
	for len(got) < 2 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Key)+"="+string(r.Value)) })
	}
	if want := []string{"k1=10", "k0=20"}; !slices.Equal(got, want) {
		t.Errorf("records %q, want %q", got, want)
	}

	for _, bad := range []*kafkaspec.SinkConfig{
		{Brokers: seeds, Topic: "out", Format: "raw"},
		{Brokers: seeds, Topic: "out", Value: "n"},
		{Brokers: seeds, Topic: "out", Format: "avro"},
		{Brokers: seeds, Topic: "out", DeliveryGuarantee: "twice"},
		{Brokers: seeds},
		{Topic: "out"},
		{Brokers: seeds, Topic: "out", Properties: map[string]string{"acks": "0"}},
	} {
		if _, err := newKafkaSink(bad, sinkTestSchema); err == nil {
			t.Errorf("spec %v accepted", bad)
		}
	}
}

// A transaction that times out while its sink still runs fails the commit on checkpoint
// completion with the same data-loss error.
func TestKafkaSinkTimedOutLiveCommitIsDataLoss(t *testing.T) {
	seeds := newSinkCluster(t)
	const timeout = 500 * time.Millisecond
	s, err := openKafkaTxnSink(t, seeds, timeout, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.write(t, 1)
	s.checkpoint(t, 1)
	time.Sleep(4 * timeout)
	err = s.NotifyCheckpointComplete(1)
	if !errors.Is(err, ErrKafkaDataLoss) || !operator.IsUnrecoverable(err) || !strings.Contains(err.Error(), "checkpoint 1") {
		t.Errorf("commit of a timed-out transaction: %v, want an unrecoverable ErrKafkaDataLoss of checkpoint 1", err)
	}
	wantSinkCommitted(t, "after the failed commit", seeds)
}

// Without checkpointing a bounded job's output is committed at the end of input.
func TestKafkaSinkWithoutCheckpointingCommitsAtEndOfInput(t *testing.T) {
	seeds := newSinkCluster(t)
	s := mustOpenKafkaTxnSink(t, seeds, 0, nil)
	s.Context().Checkpointing = false
	s.write(t, 1, 2)
	wantSinkCommitted(t, "before EndInput", seeds)
	if err := s.EndInput(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wantSinkCommitted(t, "after EndInput", seeds, 1, 2)
	wantSinkStable(t, "after Close", seeds)
}

// Rescaled from 2 subtasks to 1: the remaining subtask commits both subtasks' pre-committed
// transactions and aborts both subtasks' lingering ones.
func TestKafkaSinkRestoreRescaled(t *testing.T) {
	seeds := newSinkCluster(t)
	var state [][]byte
	for sub := range 2 {
		s, err := openKafkaTxnSubtask(t, seeds, time.Minute, sub, 2, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		s.write(t, int64(10*sub+1))
		state = append(state, s.checkpoint(t, 1)...)
		s.write(t, int64(10*sub+2)) // open, aborted on restore
		s.checkpoint(t, 2)
		s.write(t, int64(10*sub+3)) // lingering
		s.crash(t)
	}
	r, err := openKafkaTxnSubtask(t, seeds, time.Minute, 0, 1, 1, state)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := readSinkTopic(t, seeds, true)
	slices.Sort(got)
	if !slices.Equal(got, []int64{1, 11}) {
		t.Errorf("after the rescaled restore read_committed sees %v, want [1 11]", got)
	}
	wantSinkStable(t, "after the rescaled restore", seeds)
	if log := r.log.String(); !strings.Contains(log, "goflink-job1-sink-0-2") || !strings.Contains(log, "goflink-job1-sink-1-2") {
		t.Errorf("lingering transactions of both subtasks not aborted; log:\n%s", log)
	}
}

// inUseSlots lists the slots holding or reserving a transaction (for tests and logs).
func (s *kafkaTxnSink) inUseSlots() []int {
	var out []int
	for _, sl := range s.slots {
		if sl.inUse {
			out = append(out, sl.n)
		}
	}
	return out
}

package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/goflink/goflink/connector/kafka/kafkaspec"
	"github.com/goflink/goflink/expression"
	"github.com/goflink/goflink/operator"
	"github.com/goflink/goflink/record"
)

// Delivery guarantees of the kafka sink (spec delivery-guarantee).
const (
	kafkaExactlyOnce = "exactly-once"
	kafkaAtLeastOnce = "at-least-once"
	kafkaNone        = "none"
)

const (
	// kafkaDefaultTxnTimeout is transaction.timeout.ms when the spec sets none (Kafka's
	// producer default).
	kafkaDefaultTxnTimeout = time.Minute
	// kafkaOpTimeout bounds one flush, commit, abort or listing against the brokers.
	kafkaOpTimeout = 2 * time.Minute
)

// ErrKafkaDataLoss is wrapped by the error of a kafka sink commit that failed because the
// broker had already aborted the transaction (it timed out, or its producer was fenced): the
// records of that checkpoint are lost. The error is unrecoverable: a restart fails the same
// way, so the job fails instead of silently continuing without them.
var ErrKafkaDataLoss = errors.New("kafka transaction aborted before its commit: data loss")

// kafkaEncoder turns rows into Kafka records: the row as a JSON object (format json) or the
// value expression's result (format raw), an optional key expression and an optional
// headers expression (a map).
type kafkaEncoder struct {
	topic   string
	schema  *record.Schema
	raw     bool
	key     *expression.Evaluator
	keyT    record.Type
	value   *expression.Evaluator
	valueT  record.Type
	headers *expression.Evaluator
}

func newKafkaEncoder(spec *kafkaspec.SinkConfig, in *record.Schema) (*kafkaEncoder, error) {
	e := &kafkaEncoder{topic: spec.Topic, schema: in}
	if e.topic == "" {
		return nil, errors.New("kafka sink: no topic")
	}
	if len(spec.Brokers) == 0 {
		return nil, errors.New("kafka sink: no brokers")
	}
	switch spec.Format {
	case "", "json":
		if spec.Value != "" {
			return nil, errors.New("kafka sink: value is only for format raw (format json writes the row)")
		}
	case "raw":
		if spec.Value == "" {
			return nil, errors.New("kafka sink: format raw needs a value expression")
		}
		p, err := expression.Compile(spec.Value, in, expression.Options{})
		if err != nil {
			return nil, fmt.Errorf("kafka sink: value: %w", err)
		}
		e.raw, e.value, e.valueT = true, p.NewEvaluator(), p.Type()
	default:
		return nil, fmt.Errorf("kafka sink: unknown format %q (want json or raw)", spec.Format)
	}
	if spec.Key != "" {
		p, err := expression.Compile(spec.Key, in, expression.Options{})
		if err != nil {
			return nil, fmt.Errorf("kafka sink: key: %w", err)
		}
		e.key, e.keyT = p.NewEvaluator(), p.Type()
	}
	if spec.Headers != "" {
		p, err := expression.Compile(spec.Headers, in, expression.Options{Want: record.Map})
		if err != nil {
			return nil, fmt.Errorf("kafka sink: headers: %w", err)
		}
		e.headers = p.NewEvaluator()
	}
	return e, nil
}

// kafkaBytes renders an expression result: strings and bytes as they are, other types as text.
func kafkaBytes(v record.Value, t record.Type) []byte {
	switch t {
	case record.String, record.Bytes:
		return []byte(v.Str())
	default:
		return []byte(v.Format(t))
	}
}

// record encodes row into a new Kafka record (the client keeps it until it is acknowledged,
// so nothing is shared with the row or between records). An error is the key or value
// expression failing at run time.
func (e *kafkaEncoder) record(row record.Row) (*kgo.Record, error) {
	r := &kgo.Record{Topic: e.topic}
	if e.raw {
		v, err := e.value.Eval(row, nil)
		if err != nil {
			return nil, fmt.Errorf("value: %w", err)
		}
		r.Value = kafkaBytes(v, e.valueT)
	} else {
		r.Value = record.AppendJSON(nil, e.schema, row)
	}
	if e.key != nil {
		k, err := e.key.Eval(row, nil)
		if err != nil {
			return nil, fmt.Errorf("key: %w", err)
		}
		r.Key = kafkaBytes(k, e.keyT)
	}
	if e.headers != nil {
		h, err := e.headers.Eval(row, nil)
		if err != nil {
			return nil, fmt.Errorf("headers: %w", err)
		}
		if n := h.MapLen(); n > 0 {
			r.Headers = make([]kgo.RecordHeader, 0, n)
			for k, v := range h.MapAll() {
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
			}
		}
	}
	return r, nil
}

// newKafkaSink builds the sink of spec {type: kafka}: the exactly-once one (kafkaTxnSink) or
// the plain producer of at-least-once and none (kafkaSink). Without a delivery guarantee it
// is at-least-once.
func newKafkaSink(spec *kafkaspec.SinkConfig, in *record.Schema) (operator.Operator, error) {
	enc, err := newKafkaEncoder(spec, in)
	if err != nil {
		return nil, err
	}
	opts, _, err := clientOpts("sink", spec.Brokers, spec.Properties, true)
	if err != nil {
		return nil, err
	}
	opts = append(opts, kgo.DefaultProduceTopic(spec.Topic))
	switch g := spec.DeliveryGuarantee; g {
	case kafkaExactlyOnce:
		timeout := kafkaDefaultTxnTimeout
		if ms := spec.TransactionTimeoutMs; ms > 0 {
			timeout = time.Duration(ms) * time.Millisecond
		}
		s := &kafkaTxnSink{enc: enc, opts: opts, prefix: spec.TransactionalIDPrefix, txnTimeout: timeout}
		s.Bind("kafka sink", s)
		return s, nil
	case "", kafkaAtLeastOnce, kafkaNone:
		return &kafkaSink{enc: enc, opts: opts, atLeastOnce: g != kafkaNone}, nil
	default:
		return nil, fmt.Errorf("kafka sink: unknown delivery guarantee %q (want exactly-once, at-least-once or none)", g)
	}
}

// kafkaSink is the kafka sink without transactions.
//
//   - at-least-once: an idempotent producer (acks=all). PrepareSnapshotPreBarrier flushes, so
//     every record before a checkpoint's barrier is acknowledged before the checkpoint can
//     complete; a produce error fails the task at the next Process, flush or barrier. After a
//     restore the records since the checkpoint are written again (duplicates, never loss).
//   - none: fire and forget. Produce errors are logged and counted, never fail the task, and
//     records buffered at a failure are lost.
//
// EndInput flushes in both modes, so a bounded job's output is complete when it finishes.
type kafkaSink struct {
	operator.Base
	enc         *kafkaEncoder
	opts        []kgo.Opt
	atLeastOnce bool

	cl      *kgo.Client
	errMu   sync.Mutex
	err     error        // first produce error (at-least-once)
	dropped atomic.Int64 // records that failed (none)
	done    func(*kgo.Record, error)
}

func (s *kafkaSink) Open(ctx *operator.Context, out operator.Output) error {
	if err := s.Base.Open(ctx, out); err != nil {
		return err
	}
	cl, err := kgo.NewClient(s.opts...)
	if err != nil {
		return fmt.Errorf("kafka sink: %w", err)
	}
	s.cl = cl
	log := ctx.Log()
	s.done = func(r *kgo.Record, err error) {
		if err == nil {
			return
		}
		if !s.atLeastOnce {
			if n := s.dropped.Add(1); n == 1 || n%1000 == 0 {
				log.Warn("kafka sink dropped records (delivery guarantee none)", "topic", r.Topic, "dropped", n, "err", err)
			}
			return
		}
		s.errMu.Lock()
		if s.err == nil {
			s.err = err
		}
		s.errMu.Unlock()
	}
	return nil
}

// failure is the first produce error of at-least-once mode.
func (s *kafkaSink) failure() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	if s.err != nil {
		return fmt.Errorf("kafka sink: produce to %s: %w", s.enc.topic, s.err)
	}
	return nil
}

func (s *kafkaSink) Process(row record.Row) error {
	if err := s.failure(); err != nil {
		return err
	}
	r, err := s.enc.record(row)
	if err != nil {
		return s.EvalError(err)
	}
	s.cl.Produce(context.Background(), r, s.done)
	return nil
}

// flush waits until every buffered record is acknowledged (or failed).
func (s *kafkaSink) flush(what string) error {
	ctx, cancel := context.WithTimeout(context.Background(), kafkaOpTimeout)
	defer cancel()
	if err := s.cl.Flush(ctx); err != nil {
		return fmt.Errorf("kafka sink: flush at %s: %w", what, err)
	}
	if s.atLeastOnce {
		return s.failure()
	}
	return nil
}

// PrepareSnapshotPreBarrier flushes (at-least-once): the checkpoint covers only acknowledged
// records.
func (s *kafkaSink) PrepareSnapshotPreBarrier(id int64) error {
	if !s.atLeastOnce {
		return nil
	}
	return s.flush(fmt.Sprintf("checkpoint %d", id))
}

func (s *kafkaSink) EndInput() error { return s.flush("end of input") }

func (s *kafkaSink) Close() error {
	if s.cl == nil {
		return nil
	}
	s.cl.Close() // unacknowledged records fail: a restore writes them again
	s.cl = nil
	if n := s.dropped.Load(); n > 0 {
		s.Context().Log().Warn("kafka sink closed", "topic", s.enc.topic, "dropped", n)
	}
	return nil
}

var (
	_ operator.Operator   = (*kafkaSink)(nil)
	_ operator.PreBarrier = (*kafkaSink)(nil)
)

// kafkaTxnSink is the exactly-once kafka sink on the two-phase-commit framework
// (TwoPhaseSink), with Kafka transactions.
//
// Transactional IDs. Subtask s writes with a pool of transactional IDs
// "<prefix>-<s>-<slot>" (slot = 0, 1, …; prefix defaults to "goflink-<job>-<operator>"), one
// kgo client per slot. Each transaction takes a free slot: one open transaction per client,
// and the pre-committed ones of checkpoints not yet completed keep theirs.
//
// Pre-commit (at the barrier) flushes and records {transactional ID, producer ID, epoch,
// checkpoint} in the checkpoint state. Commit ends the transaction with the slot's client
// when this process still has it in that transaction, and otherwise (after a restore, in a
// new process) with a raw EndTxn carrying the saved producer ID and epoch; the broker accepts
// a retried commit, so Commit is idempotent. A commit refused with INVALID_TXN_STATE,
// PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING or INVALID_PRODUCER_EPOCH means the broker
// aborted the transaction (it timed out or was fenced): the records of its checkpoint are
// lost, and the task fails with an unrecoverable error wrapping ErrKafkaDataLoss.
//
// Slot reuse. A slot returns to the pool only after a checkpoint completed whose snapshot no
// longer references it: each slot remembers the highest checkpoint whose snapshot held its
// transaction (open or pre-committed), and NotifyCheckpointComplete(N) frees the slots whose
// transaction has ended and whose last reference is < N. Restored transactions of this
// subtask keep their slots until a checkpoint after the restored one completes. So no
// InitProducerID ever runs on an ID that a checkpoint one may restore from (the latest
// completed one) still references, and a refused recovery commit has one meaning: the
// transaction was aborted. In steady state a subtask uses three slots (one committed but not
// yet released, one pre-committed, one open); the pool grows while checkpoints are aborted or
// overlap.
//
// Restore (twoPhaseSink order): commit the restored pre-committed transactions, abort the
// restored open ones (InitProducerID on their IDs, which fences the old producer and aborts),
// then abort lingering ones: every Ongoing transaction the brokers list (ListTransactions;
// the principal needs DESCRIBE on the transactional IDs) whose ID is "<prefix>-<i>-<slot>"
// with i % parallelism == s and that no restored state references.
//
// The transaction timeout must exceed the checkpoint interval plus the longest outage
// (validated at submit); a transaction that outlives it is aborted by the broker.
type kafkaTxnSink struct {
	operator.TwoPhaseSink[*kafkaTxn]
	enc        *kafkaEncoder
	opts       []kgo.Opt
	prefix     string
	txnTimeout time.Duration

	admin     *kgo.Client // no transactional ID: raw EndTxn, InitProducerID, listings
	slots     []*kafkaSlot
	preparing int64 // the checkpoint PreCommit runs for (0: end of input)
}

// kafkaSlot is one transactional ID of the pool.
type kafkaSlot struct {
	n   int
	id  string
	cl  *kgo.Client // nil until used, or after a failure
	txn *kafkaTxn   // the transaction the client is in (nil: none)
	// inUse: the slot holds a transaction, or held one not yet released (see kafkaTxnSink).
	inUse   bool
	lastRef int64 // highest checkpoint whose snapshot referenced the slot's transaction
	errMu   sync.Mutex
	err     error // first produce error of the current transaction
}

// kafkaTxn is one transaction of the exactly-once kafka sink. Its exported fields are its
// checkpoint state.
type kafkaTxn struct {
	TxnID      string `json:"txn_id"`
	Slot       int    `json:"slot"`
	ProducerID int64  `json:"producer_id,omitempty"`
	Epoch      int16  `json:"epoch,omitempty"`
	Checkpoint int64  `json:"checkpoint,omitempty"` // 0: end of input
	Records    int64  `json:"records,omitempty"`
	Prepared   bool   `json:"prepared,omitempty"`

	slot  *kafkaSlot // this process's slot (nil: restored)
	ended bool       // committed or aborted by this process
}

func (s *kafkaTxnSink) Open(ctx *operator.Context, out operator.Output) error {
	if s.prefix == "" {
		s.prefix = fmt.Sprintf("goflink-%s-%s", ctx.JobID, ctx.OperatorName)
	}
	cl, err := kgo.NewClient(s.opts...)
	if err != nil {
		return fmt.Errorf("kafka sink: %w", err)
	}
	s.admin = cl
	return s.TwoPhaseSink.Open(ctx, out)
}

// parseTxnID returns the subtask and slot of one of this sink's transactional IDs.
func (s *kafkaTxnSink) parseTxnID(id string) (subtask, slot int, ok bool) {
	rest, ok1 := strings.CutPrefix(id, s.prefix+"-")
	a, b, ok2 := strings.Cut(rest, "-")
	i, err1 := strconv.Atoi(a)
	j, err2 := strconv.Atoi(b)
	if !ok1 || !ok2 || err1 != nil || err2 != nil || i < 0 || j < 0 || strconv.Itoa(i) != a || strconv.Itoa(j) != b {
		return 0, 0, false
	}
	return i, j, true
}

// slot returns slot n, extending the pool.
func (s *kafkaTxnSink) slot(n int) *kafkaSlot {
	for len(s.slots) <= n {
		i := len(s.slots)
		id := fmt.Sprintf("%s-%d-%d", s.prefix, s.Context().Subtask, i) // "<prefix>-<subtask>-<slot>"
		s.slots = append(s.slots, &kafkaSlot{n: i, id: id})
	}
	return s.slots[n]
}

// BeginTransaction takes the lowest free slot and begins a transaction in its client.
func (s *kafkaTxnSink) BeginTransaction() (*kafkaTxn, error) {
	n := slices.IndexFunc(s.slots, func(sl *kafkaSlot) bool { return !sl.inUse })
	if n < 0 {
		n = len(s.slots)
	}
	sl := s.slot(n)
	if sl.cl == nil {
		opts := append(slices.Clone(s.opts), kgo.TransactionalID(sl.id), kgo.TransactionTimeout(s.txnTimeout))
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return nil, err
		}
		sl.cl = cl
	}
	if err := sl.cl.BeginTransaction(); err != nil {
		sl.cl.Close()
		sl.cl = nil
		return nil, fmt.Errorf("transactional ID %s: %w", sl.id, err)
	}
	sl.errMu.Lock()
	sl.err = nil
	sl.errMu.Unlock()
	t := &kafkaTxn{TxnID: sl.id, Slot: n, slot: sl}
	sl.inUse, sl.txn = true, t
	return t, nil
}

func (sl *kafkaSlot) failure() error {
	sl.errMu.Lock()
	defer sl.errMu.Unlock()
	return sl.err
}

func (sl *kafkaSlot) promise(_ *kgo.Record, err error) {
	if err == nil {
		return
	}
	sl.errMu.Lock()
	if sl.err == nil {
		sl.err = err
	}
	sl.errMu.Unlock()
}

func (s *kafkaTxnSink) Write(t *kafkaTxn, row record.Row) error {
	if t.Prepared || t.slot == nil || t.slot.txn != t {
		return fmt.Errorf("write to transaction %s that is not open", t.TxnID)
	}
	if err := t.slot.failure(); err != nil {
		return fmt.Errorf("produce in transaction %s: %w", t.TxnID, err)
	}
	r, err := s.enc.record(row)
	if err != nil {
		return s.EvalError(err)
	}
	t.Records++
	t.slot.cl.Produce(context.Background(), r, t.slot.promise)
	return nil
}

// PrepareSnapshotPreBarrier tells PreCommit which checkpoint it runs for.
func (s *kafkaTxnSink) PrepareSnapshotPreBarrier(id int64) error {
	s.preparing = id
	defer func() { s.preparing = 0 }()
	return s.TwoPhaseSink.PrepareSnapshotPreBarrier(id)
}

// PreCommit flushes the transaction and records its producer ID and epoch.
func (s *kafkaTxnSink) PreCommit(t *kafkaTxn) error {
	if t.slot == nil || t.slot.txn != t {
		return fmt.Errorf("pre-commit of transaction %s that is not open", t.TxnID)
	}
	t.Checkpoint = s.preparing
	if t.Records > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), kafkaOpTimeout)
		defer cancel()
		if err := t.slot.cl.Flush(ctx); err != nil {
			return fmt.Errorf("flush transaction %s: %w", t.TxnID, err)
		}
		if err := t.slot.failure(); err != nil {
			return fmt.Errorf("produce in transaction %s: %w", t.TxnID, err)
		}
		pid, epoch, err := t.slot.cl.ProducerID(ctx)
		if err != nil {
			return fmt.Errorf("producer ID of transaction %s: %w", t.TxnID, err)
		}
		t.ProducerID, t.Epoch = pid, epoch
	}
	t.Prepared = true
	return nil
}

// abortedByBroker reports whether a commit error means the broker had aborted the
// transaction.
func abortedByBroker(err error) bool {
	return errors.Is(err, kerr.InvalidTxnState) || errors.Is(err, kerr.ProducerFenced) ||
		errors.Is(err, kerr.InvalidProducerIDMapping) || errors.Is(err, kerr.InvalidProducerEpoch)
}

func (s *kafkaTxnSink) dataLoss(t *kafkaTxn, err error) error {
	cp := "written before the end of input"
	if t.Checkpoint > 0 {
		cp = fmt.Sprintf("of checkpoint %d", t.Checkpoint)
	}
	return &operator.UserError{Operator: s.Context().OperatorName, Unrecoverable: true, Err: fmt.Errorf(
		"%w: the transaction %s %s (producer ID %d, epoch %d, %d records) was aborted by the broker before its commit: it timed out (transaction timeout %v) or its producer was fenced; the records %s are lost: %w",
		ErrKafkaDataLoss, t.TxnID, cp, t.ProducerID, t.Epoch, t.Records, s.txnTimeout, cp, err)}
}

// Commit commits a pre-committed transaction; one already committed is a success.
func (s *kafkaTxnSink) Commit(t *kafkaTxn) error {
	if !t.Prepared {
		return fmt.Errorf("commit %s: %w", t.TxnID, operator.ErrNotCommittable)
	}
	if t.ended {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), kafkaOpTimeout)
	defer cancel()
	var err error
	switch {
	case t.slot != nil && t.slot.txn == t:
		// Ends the client's transaction also when it has no records (no request then).
		err = t.slot.cl.EndTransaction(ctx, kgo.TryCommit)
		if err != nil {
			t.slot.cl.Close() // its producer state is unknown: a new client re-initializes
			t.slot.cl = nil
		}
		t.slot.txn = nil
	case t.Records == 0:
		// Nothing was added to the transaction: there is nothing to commit.
	default:
		err = s.endTxn(ctx, t, true)
	}
	if err != nil {
		if abortedByBroker(err) {
			return s.dataLoss(t, err)
		}
		return fmt.Errorf("commit transaction %s: %w", t.TxnID, err)
	}
	t.ended = true
	return nil
}

// Abort aborts an open or pre-committed transaction: with its client when this process has
// it, otherwise by fencing its transactional ID.
func (s *kafkaTxnSink) Abort(t *kafkaTxn) error {
	if t.ended {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), kafkaOpTimeout)
	defer cancel()
	if sl := t.slot; sl != nil && sl.txn == t {
		sl.txn = nil
		err := sl.cl.AbortBufferedRecords(ctx)
		if err == nil {
			err = sl.cl.EndTransaction(ctx, kgo.TryAbort)
		}
		if err == nil {
			t.ended = true
			return nil
		}
		sl.cl.Close()
		sl.cl = nil
	}
	if err := s.fence(ctx, t.TxnID); err != nil {
		return fmt.Errorf("abort transaction %s: %w", t.TxnID, err)
	}
	t.ended = true
	return nil
}

// retriable are the error codes of transaction-coordinator requests worth retrying.
func kafkaRetriable(err error) bool {
	return errors.Is(err, kerr.ConcurrentTransactions) || errors.Is(err, kerr.CoordinatorLoadInProgress) ||
		errors.Is(err, kerr.NotCoordinator) || errors.Is(err, kerr.CoordinatorNotAvailable)
}

// retry runs req until it succeeds, fails with a non-retriable error or ctx ends.
func kafkaRetry(ctx context.Context, req func() error) error {
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		err := req()
		if err == nil || !kafkaRetriable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-time.After(wait):
		}
	}
}

// endTxn ends a transaction this process has no client in, with a raw EndTxn carrying the
// saved producer ID and epoch (as Flink's FlinkKafkaInternalProducer resumes a transaction).
// A retried commit returns success.
func (s *kafkaTxnSink) endTxn(ctx context.Context, t *kafkaTxn, commit bool) error {
	return kafkaRetry(ctx, func() error {
		req := kmsg.NewPtrEndTxnRequest()
		req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = t.TxnID, t.ProducerID, t.Epoch, commit
		resp, err := req.RequestWith(ctx, s.admin)
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(resp.ErrorCode)
	})
}

// fence initializes a producer on a transactional ID: the broker bumps its epoch, fencing any
// earlier producer, and aborts its ongoing transaction.
func (s *kafkaTxnSink) fence(ctx context.Context, txnID string) error {
	return kafkaRetry(ctx, func() error {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID = &txnID
		req.TransactionTimeoutMillis = int32(s.txnTimeout.Milliseconds())
		req.ProducerID, req.ProducerEpoch = -1, -1
		resp, err := req.RequestWith(ctx, s.admin)
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(resp.ErrorCode)
	})
}

func (s *kafkaTxnSink) Encode(t *kafkaTxn) []byte {
	b, _ := json.Marshal(t) // strings and integers cannot fail
	return b
}

func (s *kafkaTxnSink) Decode(b []byte) (*kafkaTxn, error) {
	t := &kafkaTxn{}
	if err := json.Unmarshal(b, t); err != nil {
		return nil, fmt.Errorf("kafka sink transaction: %w", err)
	}
	if t.TxnID == "" {
		return nil, errors.New("kafka sink transaction: no transactional ID")
	}
	return t, nil
}

// AbortLingering reserves the slots of this subtask's restored transactions and aborts the
// ongoing transactions of this sink's ID pattern, of subtasks i with
// i % parallelism == subtask, that no restored state references.
func (s *kafkaTxnSink) AbortLingering(referenced []*kafkaTxn) error {
	keep := make(map[string]bool, len(referenced))
	for _, t := range referenced {
		keep[t.TxnID] = true
		if i, n, ok := s.parseTxnID(t.TxnID); ok && i == s.Context().Subtask {
			sl := s.slot(n)
			sl.inUse, sl.lastRef = true, max(sl.lastRef, s.RestoredID())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), kafkaOpTimeout)
	defer cancel()
	pattern := "^" + regexp.QuoteMeta(s.prefix) + "-[0-9]+-[0-9]+$"
	// The pattern filter needs Kafka 4.1+; older brokers ignore it, so filter here too.
	listed, err := kadm.NewClient(s.admin).ListTransactionsByTxPattern(ctx, nil, []string{"Ongoing"}, pattern)
	if err != nil {
		return fmt.Errorf("listing transactions: %w", err)
	}
	par := max(s.Context().Parallelism, 1)
	var aborted []string
	for _, l := range listed.Sorted() {
		i, _, ok := s.parseTxnID(l.TxnID)
		if !ok || i%par != s.Context().Subtask || keep[l.TxnID] || l.State != "Ongoing" {
			continue
		}
		if err := s.fence(ctx, l.TxnID); err != nil {
			return fmt.Errorf("aborting lingering transaction %s: %w", l.TxnID, err)
		}
		aborted = append(aborted, l.TxnID)
	}
	if len(aborted) > 0 {
		s.Context().Log().Info("kafka sink aborted lingering transactions", "transactional_ids", aborted)
	}
	return nil
}

// SnapshotState stores the transactions and marks their slots as referenced by checkpoint id.
func (s *kafkaTxnSink) SnapshotState(id int64) error {
	if err := s.TwoPhaseSink.SnapshotState(id); err != nil {
		return err
	}
	for _, sl := range s.slots {
		if sl.txn != nil || s.isPending(sl) { // the open and every pre-committed transaction
			sl.lastRef = id
		}
	}
	return nil
}

// NotifyCheckpointComplete commits the transactions ≤ id and releases the slots that no
// snapshot from id on references.
func (s *kafkaTxnSink) NotifyCheckpointComplete(id int64) error {
	err := s.TwoPhaseSink.NotifyCheckpointComplete(id)
	for _, sl := range s.slots {
		if sl.inUse && sl.txn == nil && sl.lastRef < id && !s.isPending(sl) {
			sl.inUse = false
		}
	}
	return err
}

// isPending reports whether a pending (not yet committed) transaction holds slot sl.
func (s *kafkaTxnSink) isPending(sl *kafkaSlot) bool {
	return slices.ContainsFunc(s.Pending(), func(t *kafkaTxn) bool { return t.slot == sl })
}

// Close aborts the open transaction and closes the clients; pre-committed transactions stay
// open in the brokers for a restore to commit.
func (s *kafkaTxnSink) Close() error {
	err := s.TwoPhaseSink.Close()
	for _, sl := range s.slots {
		if sl.cl != nil {
			sl.cl.Close()
			sl.cl = nil
		}
	}
	if s.admin != nil {
		s.admin.Close()
		s.admin = nil
	}
	return err
}

var (
	_ operator.TwoPhaseCommitter[*kafkaTxn] = (*kafkaTxnSink)(nil)
	_ operator.LingeringAborter[*kafkaTxn]  = (*kafkaTxnSink)(nil)
	_ operator.Stateful                     = (*kafkaTxnSink)(nil)
	_ operator.PreBarrier                   = (*kafkaTxnSink)(nil)
	_ operator.Snapshotter                  = (*kafkaTxnSink)(nil)
	_ operator.CheckpointListener           = (*kafkaTxnSink)(nil)
)

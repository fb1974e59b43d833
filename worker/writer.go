package worker

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/goflink/goflink/expression"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
	"github.com/goflink/goflink/state"
)

// maxRecordBytes bounds one encoded record (it must fit a gRPC message).
const maxRecordBytes = 8 << 20

// recordWriter partitions and serializes a task's output records for one output edge into
// per-channel buffers, and queues full buffers on the edge's result partition. It is owned by
// the task goroutine. A full subpartition queue blocks Emit until the consumer catches up or
// the task is cancelled: this is how backpressure reaches the source.
type recordWriter struct {
	ctx       context.Context
	schema    *record.Schema
	partition *resultPartition
	part      pb.Partitioner
	key       *expression.Selector
	keyType   record.Type
	keyOwner  string // the consumer's head operator, named in key evaluation errors
	maxPar    int
	n         int // channels (consumer parallelism)
	// grouper computes the key groups of a hash edge, and channelOf[kg] is the channel of key
	// group kg (state.OperatorIndexForKeyGroup).
	grouper   state.KeyGrouper
	channelOf []uint16

	bufs   [][]byte
	counts []int
	next   int // rebalance position
	out    *int64
	// stamp is the task's current event timestamp, written before each record when the edge
	// carries timestamps (nil otherwise).
	stamp *int64
	// meter, when set, counts the bytes written and the time spent waiting for room.
	meter *taskMeter
}

// subpartitions is how many subpartitions a producer writes for edge e: one per consumer
// subtask, but one for a forward edge, which connects only the subtasks of equal index.
func subpartitions(e *pb.JobEdge, consumers int) int {
	if e.GetPartitioner() == pb.Partitioner_PARTITIONER_FORWARD {
		return 1
	}
	return consumers
}

// subpartitionOf is the subpartition that consumer subtask reads of each of its producers on
// edge e.
func subpartitionOf(e *pb.JobEdge, consumer int32) int32 {
	if e.GetPartitioner() == pb.Partitioner_PARTITIONER_FORWARD {
		return 0
	}
	return consumer
}

func newRecordWriter(ctx context.Context, e *pb.JobEdge, consumer *pb.JobVertex, subtask int, p *resultPartition, out, stamp *int64) (*recordWriter, error) {
	schema, err := record.SchemaFromProto(e.GetSchema())
	if err != nil {
		return nil, fmt.Errorf("edge schema: %w", err)
	}
	n := subpartitions(e, int(consumer.GetParallelism()))
	w := &recordWriter{
		ctx: ctx, schema: schema, partition: p, part: e.GetPartitioner(),
		maxPar: int(consumer.GetMaxParallelism()), n: n,
		bufs: make([][]byte, n), counts: make([]int, n), next: subtask % n, out: out,
	}
	if e.GetTimestamps() {
		w.stamp = stamp
	}
	switch w.part {
	case pb.Partitioner_PARTITIONER_HASH:
		prog, err := expression.Compile(e.GetKey(), schema, expression.Options{})
		if err != nil {
			return nil, fmt.Errorf("key %s: %w", expression.Quote(e.GetKey()), err)
		}
		w.key, w.keyType = prog.NewSelector(), prog.Type()
		if err := state.ValidateMaxParallelism(w.maxPar, n); err != nil {
			return nil, fmt.Errorf("hash edge: %w", err)
		}
		w.grouper = state.NewKeyGrouper(w.keyType, w.maxPar)
		w.channelOf = make([]uint16, w.maxPar)
		for kg := range w.channelOf {
			w.channelOf[kg] = uint16(state.OperatorIndexForKeyGroup(kg, w.maxPar, n))
		}
		if ops := consumer.GetOperators(); len(ops) > 0 {
			w.keyOwner = ops[0].GetName()
		}
	case pb.Partitioner_PARTITIONER_FORWARD:
		if subtask >= int(consumer.GetParallelism()) {
			return nil, fmt.Errorf("forward edge from subtask %d to %d consumers", subtask, consumer.GetParallelism())
		}
	case pb.Partitioner_PARTITIONER_REBALANCE:
	default:
		return nil, fmt.Errorf("unknown partitioner %v", w.part)
	}
	return w, nil
}

func (w *recordWriter) channel(row record.Row) (int, error) {
	switch w.part {
	case pb.Partitioner_PARTITIONER_FORWARD:
		return 0, nil
	case pb.Partitioner_PARTITIONER_REBALANCE:
		c := w.next
		w.next = (w.next + 1) % w.n
		return c, nil
	}
	k, err := w.key.Eval(row)
	if err != nil {
		return 0, operator.EvalError(w.keyOwner, fmt.Errorf("key: %w", err))
	}
	return int(w.channelOf[w.grouper.KeyGroup(k)]), nil
}

// Emit serializes row into its channel's buffer.
func (w *recordWriter) Emit(row record.Row) error {
	c, err := w.channel(row)
	if err != nil {
		return err
	}
	size := record.EncodedSize(w.schema, row)
	if w.stamp != nil {
		size += 8
	}
	if size > maxRecordBytes {
		return fmt.Errorf("record of %d bytes exceeds the %d byte limit", size, maxRecordBytes)
	}
	if len(w.bufs[c])+size > maxBufferBytes && len(w.bufs[c]) > 0 {
		// It does not fit: send what came before, start anew with it.
		if err := w.flushChannel(c); err != nil {
			return err
		}
	}
	buf := w.bufs[c]
	if buf == nil {
		buf = make([]byte, 0, max(maxBufferBytes, size))
	}
	if w.stamp != nil {
		buf = binary.LittleEndian.AppendUint64(buf, uint64(*w.stamp))
	}
	buf = record.AppendRow(buf, w.schema, row)
	w.bufs[c] = buf
	w.counts[c]++
	*w.out++
	if len(buf) >= maxBufferBytes || w.counts[c] >= maxBufferRecords {
		return w.flushChannel(c)
	}
	return nil
}

func (w *recordWriter) flushChannel(c int) error {
	if w.counts[c] == 0 {
		return nil
	}
	b := &buffer{data: w.bufs[c], records: w.counts[c]}
	w.bufs[c], w.counts[c] = nil, 0
	if w.meter != nil {
		w.meter.bytesOut.Add(int64(len(b.data)))
	}
	return w.enqueue(c, b)
}

// maxOverdraftBuffers is how many buffers a subpartition may queue beyond its capacity while
// the task finishes the input buffer it started (Flink's max-overdraft-buffers-per-gate): a
// task waits for room before it takes on more input (available), so that it can take
// checkpoints while backpressured, and rarely blocks in the middle of a buffer.
const maxOverdraftBuffers = 5

func (w *recordWriter) enqueue(c int, b *buffer) error {
	s := w.partition.subs[c]
	limit := w.partition.capacity + maxOverdraftBuffers
	if s.add(b, limit) {
		return nil
	}
	// The queue is full: the task is backpressured until the consumer takes a buffer.
	if w.meter != nil {
		w.meter.backPressured.begin(meterNow())
		defer func() { w.meter.backPressured.end(meterNow()) }()
	}
	for !s.add(b, limit) {
		select {
		case <-s.space:
		case <-w.ctx.Done():
			return w.ctx.Err()
		}
	}
	return nil
}

// available reports whether every subpartition has room for another buffer.
func (w *recordWriter) available() bool {
	for _, s := range w.partition.subs {
		if s.size() >= w.partition.capacity {
			return false
		}
	}
	return true
}

// Flush queues every partly filled buffer.
func (w *recordWriter) Flush() error {
	for c := range w.bufs {
		if err := w.flushChannel(c); err != nil {
			return err
		}
	}
	return nil
}

// BroadcastEvent flushes and queues an event (a barrier, a cancellation marker) on every
// channel, after the records before it. An unaligned checkpoint's barrier goes through
// BroadcastPriority instead.
func (w *recordWriter) BroadcastEvent(ev *pb.Event) error {
	if err := w.Flush(); err != nil {
		return err
	}
	for c := range w.bufs {
		if err := w.enqueue(c, &buffer{event: ev}); err != nil {
			return err
		}
	}
	return nil
}

// BroadcastTimed flushes and queues barrier ev, which goes unaligned at its deadline, on every
// channel after the records before it, and returns its handle per channel. It never waits.
func (w *recordWriter) BroadcastTimed(ev *pb.Event) ([]*timedBarrier, error) {
	if err := w.Flush(); err != nil {
		return nil, err
	}
	tbs := make([]*timedBarrier, len(w.bufs))
	for c := range w.bufs {
		tbs[c] = w.partition.subs[c].addTimed(&buffer{event: ev})
	}
	return tbs, nil
}

// BroadcastPriority sends a priority event (an unaligned checkpoint's barrier) on every
// channel ahead of the queued buffers, and returns per channel the data buffers it overtook,
// partly filled ones included: the output channel state. It never waits.
func (w *recordWriter) BroadcastPriority(ev *pb.Event) [][]*buffer {
	overtaken := make([][]*buffer, len(w.bufs))
	for c := range w.bufs {
		if w.counts[c] > 0 {
			b := &buffer{data: w.bufs[c], records: w.counts[c]}
			w.bufs[c], w.counts[c] = nil, 0
			if w.meter != nil {
				w.meter.bytesOut.Add(int64(len(b.data)))
			}
			w.partition.subs[c].add(b, 0)
		}
		overtaken[c] = w.partition.subs[c].addPriority(&buffer{event: ev})
	}
	return overtaken
}

// recordReader decodes the records of a data buffer as recordWriter wrote them: b.records
// records, each its event timestamp (8 bytes, little endian) when the edge carries
// timestamps, then the row (record.AppendRow), and nothing after the last. It allocates
// nothing; decoded strings point into the buffer. A buffer comes from the network, so any of
// it may be wrong: the count, a record, bytes left over.
type recordReader struct {
	data       []byte
	records    int
	left       int
	timestamps bool
}

func newRecordReader(b *buffer, timestamps bool) (recordReader, error) {
	if b.records < 0 || b.records > maxBufferRecords {
		return recordReader{}, fmt.Errorf("%w: buffer of %d records (at most %d)", record.ErrCorrupt, b.records, maxBufferRecords)
	}
	return recordReader{data: b.data, records: b.records, left: b.records, timestamps: timestamps}, nil
}

// next decodes the next record into row and returns its timestamp (0 without timestamps);
// ok is false after the last one. It fails when the buffer holds bytes after its last record.
func (r *recordReader) next(s *record.Schema, row record.Row) (stamp int64, ok bool, err error) {
	if r.left == 0 {
		if len(r.data) > 0 {
			return 0, false, fmt.Errorf("%w: %d bytes after the last of %d records", record.ErrCorrupt, len(r.data), r.records)
		}
		return 0, false, nil
	}
	r.left--
	if r.timestamps {
		if len(r.data) < 8 {
			return 0, false, fmt.Errorf("%w: timestamp truncated", record.ErrCorrupt)
		}
		stamp = int64(binary.LittleEndian.Uint64(r.data))
		r.data = r.data[8:]
	}
	n, err := record.DecodeRow(r.data, s, row)
	if err != nil {
		return 0, false, err
	}
	r.data = r.data[n:]
	return stamp, true, nil
}

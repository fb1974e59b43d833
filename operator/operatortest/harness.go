package operatortest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goflink/goflink/expression"
	"github.com/goflink/goflink/job"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
	"github.com/goflink/goflink/state"
	"github.com/goflink/goflink/storage"
)

// Harness runs one operator of a job spec the way a task runs the head of its chain, in the
// spirit of Flink's KeyedOneInputStreamOperatorTestHarness: without a cluster, a network or
// goroutines, driven step by step by the test.
//
// The operator is planned by job.Build from the spec and built by the operator registry's New
// from the job graph, so it runs the configuration a JobManager produces. It gets what the
// worker gives the head operator of a task: a real keyed state backend (hashmap or bbolt) for
// a keyed input, its key set on the backend and the Context per record from the input edge's
// key expression, the record's timestamp, a real TimerService bound through Context.BindTime
// when it is keyed and a TimerListener, and an injected processing-time clock. It captures
// what the operator emits with the timestamp each record carries, its watermarks and
// watermark statuses, and every side output its type declares.
//
// Watermarks are handed over in the worker's order (worker/time.go advanceWatermark): the
// input watermark is set, the due event-time timers fire, then OnWatermark; what passes goes
// to the output unless the operator generates its own watermarks. Snapshot takes a checkpoint
// in the worker's order (Checkpoint takes its synchronous part and lets the test go on before
// the keyed state is written, as a task does), and a new Harness restores it (on either
// backend, into any parallelism).
//
// A record's key is what the key-by before the operator computes from it (its input edge's key
// expression), as in a task: to test a key, write a row that has it. For example:
//
//	h := operatortest.New(t, spec, "per-second", operatortest.Options{Backend: state.BackendBBolt})
//	err := h.Process(1_000, h.Row(0, "k1", int64(5))) // a record {k: "k1", v: 5} at 1000 ms
//	err = h.AdvanceWatermark(1_999)                  // fires the window [1000, 2000)
//	out := h.Output()                                // its result, timestamped 1999
//
// A Harness belongs to one goroutine, like a task. Its methods return the operator's errors;
// setting it up fails the test. It is closed at the end of the test.
type Harness struct {
	t      testing.TB
	opts   Options
	name   string
	pbOp   *pb.Operator
	vertex *pb.JobVertex
	impl   any
	op     operator.Operator
	two    operator.TwoInput
	gen    bool
	ctx    *operator.Context

	inputs []*input
	keyed  state.KeyedBackend
	store  *state.OperatorStateStore
	timers *operator.TimerService
	onTime operator.TimerListener

	stamp   int64 // the timestamp of the record being processed (the worker's eventTime.stamp)
	now     int64 // processing time, epoch ms
	inWMs   []int64
	outWM   int64
	outIdle bool
	events  []Event
	sides   map[string]*capture
	stdout  bytes.Buffer
	buf     []byte
	dir     string // the bbolt backend's directory
	opened  bool   // Open was called: Close is due, as for a task's closers
	closed  bool
	pending map[*PendingSnapshot]bool // checkpoints not written yet
}

// Options configures a Harness. The zero value runs subtask 0 of 1 (every key group) on the
// hashmap backend, with the built-in operator types and the clock at 0.
type Options struct {
	// Backend is the keyed state backend: state.BackendHashMap (default) or
	// state.BackendBBolt (a file in a temporary directory of the test).
	Backend string
	// Registry holds the operator types the spec uses (nil: the built-in ones). Register a
	// custom operator or a connector's runtime in it to test them.
	Registry *operator.Registry
	// Overrides are job configuration keys, as flinkctl run -D sets them (e.g.
	// pipeline.max-parallelism).
	Overrides map[string]string
	// Subtask and Parallelism are the subtask the harness runs and how many there are (0: 1),
	// whatever the spec's parallelism: its backend owns the key groups of that subtask
	// (state.RangeForOperator), of the max parallelism of the operator's vertex.
	Subtask, Parallelism int
	// Attempt is the Context's attempt number.
	Attempt int
	// ProcessingTime is the clock at the start, in epoch milliseconds.
	ProcessingTime int64
	// Restore holds the snapshots to start from (of one or more subtasks of an earlier run,
	// from any backend); empty for a fresh start.
	Restore []*Snapshot
	// DropSideOutputs says no operator reads the side outputs: the operator's Context has
	// none, as in a job where nothing reads "<operator>.late".
	DropSideOutputs bool
	// Checkpointing sets Context.Checkpointing (two-phase-commit sinks commit on completion).
	Checkpointing bool
	// Logger receives the operator's log (nil: discarded).
	Logger *slog.Logger
	// S3 sets Context.S3: the S3 settings of a TaskManager (the file sink on s3://).
	S3 storage.S3Settings
}

// input is one input of the operator: an edge of the job graph that feeds it.
type input struct {
	schema     *record.Schema
	key        *expression.Evaluator // nil for a non-keyed input
	keyType    record.Type
	timestamps bool // records carry event timestamps
	row        record.Row
}

// Record is an emitted record and the event timestamp it carries (operator.NoTimestamp for
// none). Row is the harness's copy.
type Record struct {
	Row       record.Row
	Timestamp int64
}

// EventKind says what an Event is.
type EventKind int

// The kinds of output events.
const (
	// RecordEvent is an emitted record.
	RecordEvent EventKind = iota
	// WatermarkEvent is a watermark sent downstream.
	WatermarkEvent
	// StatusEvent is a watermark status sent downstream: idle or active again.
	StatusEvent
)

// Event is one thing the operator sent on its main output, in order.
type Event struct {
	Kind EventKind
	// Record is set for a RecordEvent.
	Record Record
	// Watermark is set for a WatermarkEvent.
	Watermark int64
	// Idle is set for a StatusEvent.
	Idle bool
}

// capture is an Output that keeps copies with the current timestamp.
type capture struct {
	h    *Harness
	recs []Record
	main bool
}

func (c *capture) Emit(row record.Row) error {
	r := Record{Row: row.Clone(), Timestamp: c.h.stamp}
	if c.main {
		c.h.events = append(c.h.events, Event{Kind: RecordEvent, Record: r})
		return nil
	}
	c.recs = append(c.recs, r)
	return nil
}

// timeOutput is the operator's TimeOutput: the end of the chain.
type timeOutput struct{ h *Harness }

func (o timeOutput) EmitWatermark(wm int64) error        { return o.h.emitWatermark(wm) }
func (o timeOutput) EmitWatermarkStatus(idle bool) error { return o.h.emitStatus(idle) }

// snapshotFiles numbers snapshot files, so that the snapshots of several harnesses have
// distinct paths when one restore reads them together.
var snapshotFiles atomic.Int64

// New builds the operator named name of the job spec (YAML) and opens it, as Open does; it
// fails the test on an error.
func New(t testing.TB, spec, name string, opts Options) *Harness {
	t.Helper()
	h, err := Open(t, spec, name, opts)
	if err != nil {
		t.Fatalf("operatortest: %v", err)
	}
	return h
}

// Open plans the job spec with job.Build, builds the runtime of its operator named name with
// the registry, gives it its state (restored from opts.Restore), binds its event time and
// opens it, in the worker's order. The operator must not be a source. It is closed at the end
// of the test, if the test did not close it.
func Open(t testing.TB, spec, name string, opts Options) (*Harness, error) {
	t.Helper()
	if opts.Parallelism == 0 {
		opts.Parallelism = 1
	}
	if opts.Subtask < 0 || opts.Subtask >= opts.Parallelism {
		return nil, fmt.Errorf("subtask %d of parallelism %d", opts.Subtask, opts.Parallelism)
	}
	reg := opts.Registry
	if reg == nil {
		reg = operator.MustRegistry()
	}
	g, err := job.Build(job.Request{Spec: []byte(spec), SpecName: "harness.yaml", Overrides: opts.Overrides}, job.Env{Operators: reg})
	if err != nil {
		return nil, err
	}
	h := &Harness{t: t, opts: opts, name: name, stamp: operator.NoTimestamp, now: opts.ProcessingTime,
		outWM: operator.MinWatermark, sides: map[string]*capture{}}
	if opts.Backend == state.BackendBBolt {
		h.dir = t.TempDir() // before the Cleanup below, which closes the backend first
	}
	pos := -1
	for _, v := range g.GetVertices() {
		for i, o := range v.GetOperators() {
			if o.GetName() == name {
				h.vertex, h.pbOp, pos = v, o, i
			}
		}
	}
	if h.pbOp == nil {
		return nil, fmt.Errorf("the spec has no operator %q", name)
	}
	if err := h.parseInputs(g, pos); err != nil {
		return nil, err
	}
	if h.impl, err = reg.New(h.pbOp); err != nil {
		return nil, err
	}
	var ok bool
	if h.op, ok = h.impl.(operator.Operator); !ok {
		return nil, fmt.Errorf("operator %q is a %T, not an operator (a source cannot run in a harness)", name, h.impl)
	}
	h.two, _ = h.impl.(operator.TwoInput)
	_, h.gen = h.impl.(operator.WatermarkGenerator)
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("operatortest: close %s: %v", name, err)
		}
	})
	if err := h.setup(reg); err != nil {
		return nil, err
	}
	return h, nil
}

// parseInputs finds the operator's inputs: the edges that feed its vertex when it heads it
// (by the input they feed), else the operator before it in the chain.
func (h *Harness) parseInputs(g *pb.JobGraph, pos int) error {
	if pos > 0 {
		s, err := record.SchemaFromProto(h.pbOp.GetInputSchema())
		if err != nil {
			return fmt.Errorf("input schema: %w", err)
		}
		h.inputs = []*input{{schema: s, timestamps: true, row: make(record.Row, s.Len())}}
		return nil
	}
	byInput := map[int32]*pb.JobEdge{}
	for _, e := range g.GetEdges() {
		if e.GetTarget() == h.vertex.GetId() {
			if _, ok := byInput[e.GetInput()]; !ok {
				byInput[e.GetInput()] = e
			}
		}
	}
	for i := range int32(len(byInput)) {
		e, ok := byInput[i]
		if !ok {
			return fmt.Errorf("operator %q has no edge for input %d", h.name, i)
		}
		s, err := record.SchemaFromProto(e.GetSchema())
		if err != nil {
			return fmt.Errorf("input %d schema: %w", i, err)
		}
		in := &input{schema: s, timestamps: e.GetTimestamps(), row: make(record.Row, s.Len())}
		if e.GetPartitioner() == pb.Partitioner_PARTITIONER_HASH {
			prog, err := expression.Compile(e.GetKey(), s, expression.Options{})
			if err != nil {
				return fmt.Errorf("input %d key %q: %w", i, e.GetKey(), err)
			}
			in.key, in.keyType = prog.NewEvaluator(), prog.Type()
		}
		h.inputs = append(h.inputs, in)
	}
	h.inWMs = slices.Repeat([]int64{operator.MinWatermark}, len(h.inputs))
	return nil
}

// setup creates and restores the state, initializes the operator's state, binds its side
// outputs and event time and opens it: worker/task.go setup and worker/checkpoint.go initState.
func (h *Harness) setup(reg *operator.Registry) error {
	var keyed []*pb.KeyedStateHandle
	var lists []*pb.OperatorSubtaskState
	files := map[string][]byte{}
	var restored int64
	for _, s := range h.opts.Restore {
		restored = max(restored, s.CheckpointID)
		if s.Keyed != nil {
			keyed = append(keyed, s.Keyed)
		}
		if s.Operator != nil {
			lists = append(lists, s.Operator)
		}
		maps.Copy(files, s.files)
	}
	h.store = state.NewOperatorStateStore()
	if err := h.store.Restore(lists, h.opts.Subtask, h.opts.Parallelism); err != nil {
		return fmt.Errorf("restore operator state: %w", err)
	}
	var keyType record.Type
	for _, in := range h.inputs {
		if in.key != nil {
			keyType = in.keyType
			break
		}
	}
	if keyType != record.Invalid {
		maxP := int(h.vertex.GetMaxParallelism())
		opts := state.KeyedBackendOptions{
			Kind: h.opts.Backend, KeyType: keyType, MaxParallelism: maxP,
			Range: state.RangeForOperator(h.opts.Subtask, maxP, h.opts.Parallelism),
		}
		opts.Dir = h.dir
		kb, err := state.NewKeyedBackend(opts)
		if err != nil {
			return err
		}
		h.keyed = kb
		if len(keyed) > 0 {
			open := func(f *pb.FileHandle) (io.ReadCloser, error) {
				data, ok := files[f.GetPath()]
				if !ok {
					return nil, fmt.Errorf("no snapshot file %q", f.GetPath())
				}
				return io.NopCloser(bytes.NewReader(data)), nil
			}
			if err := kb.Restore(keyed, open); err != nil {
				return fmt.Errorf("restore keyed state: %w", err)
			}
		}
	} else if len(keyed) > 0 {
		return errors.New("the snapshot has keyed state but the operator does not read a keyed stream")
	}
	h.ctx = &operator.Context{
		JobID: "harness", OperatorName: h.name, Subtask: h.opts.Subtask, Parallelism: h.opts.Parallelism, MaxParallelism: int(h.vertex.GetMaxParallelism()),
		Attempt: h.opts.Attempt, Stdout: &h.stdout, Logger: h.opts.Logger,
		Now: func() time.Time { return time.UnixMilli(h.now) }, Checkpointing: h.opts.Checkpointing,
		Metrics: &operator.Metrics{}, S3: h.opts.S3,
	}
	sides := map[string]operator.Output{}
	if typ, ok := reg.Lookup(h.pbOp.GetType()); ok && !h.opts.DropSideOutputs {
		for _, name := range typ.SideOutputs {
			c := &capture{h: h}
			h.sides[name], sides[name] = c, c
		}
	}
	h.ctx.BindSideOutputs(sides)
	if st, ok := h.impl.(operator.Stateful); ok {
		sc := &StateContext{RestoredID: restored, Keyed: h.keyed, store: h.store}
		if err := st.InitializeState(sc); err != nil {
			return fmt.Errorf("initialize state: %w", err)
		}
	}
	if l, ok := h.impl.(operator.TimerListener); ok && h.keyed != nil {
		ts, err := operator.NewTimerService(h.keyed, h.ctx)
		if err != nil {
			return fmt.Errorf("timers: %w", err)
		}
		h.timers, h.onTime = ts, l
	}
	h.ctx.BindTime(&h.stamp, timeOutput{h}, h.timers)
	h.opened = true
	return h.op.Open(h.ctx, &capture{h: h, main: true})
}

// Process hands the operator a record of its (only) input with event timestamp ts
// (operator.NoTimestamp when the input carries none).
func (h *Harness) Process(ts int64, row record.Row) error { return h.ProcessInput(0, ts, row) }

// ProcessInput hands the operator a record of input i (a join's left is 0, its right 1) with
// event timestamp ts, as the worker does: the row goes through the wire encoding into a buffer
// that is overwritten once the operator returned (so an operator that keeps a row or string
// without cloning it is caught), the key is computed with the input edge's key expression and
// set on the keyed backend and the Context, and the timestamp is the one records emitted
// meanwhile carry. A key outside the harness's key groups fails in the state backend, as it
// would in a task (see Owns).
func (h *Harness) ProcessInput(i int, ts int64, row record.Row) error {
	if i < 0 || i >= len(h.inputs) {
		return fmt.Errorf("input %d: the operator has %d inputs", i, len(h.inputs))
	}
	in := h.inputs[i]
	if err := h.decode(in, row); err != nil {
		return err
	}
	defer h.scribble()
	switch {
	case in.timestamps:
		h.stamp = ts
	case ts != operator.NoTimestamp:
		return fmt.Errorf("input %d carries no event timestamps (nothing upstream assigns them); pass operator.NoTimestamp", i)
	default:
		h.stamp = operator.NoTimestamp
	}
	if in.key != nil {
		k, err := in.key.Eval(in.row, nil)
		if err != nil {
			return operator.EvalError(h.name, fmt.Errorf("key: %w", err))
		}
		h.ctx.SetKey(k)
		h.keyed.SetCurrentKey(k)
	}
	if h.two != nil {
		return h.two.ProcessInput(i, in.row)
	}
	return h.op.Process(in.row)
}

// decode puts row, encoded with the input's schema, into the input's row as the worker
// decodes a buffer.
func (h *Harness) decode(in *input, row record.Row) error {
	if len(row) != in.schema.Len() {
		return fmt.Errorf("row has %d values, the input %v has %d fields", len(row), in.schema, in.schema.Len())
	}
	h.buf = record.AppendRow(make([]byte, 0, len(h.buf)), in.schema, row)
	if _, err := record.DecodeRow(h.buf, in.schema, in.row); err != nil {
		return fmt.Errorf("decode record: %w", err)
	}
	return nil
}

// scribble overwrites the buffer of the last record, as a network buffer is reused.
func (h *Harness) scribble() {
	for i := range h.buf {
		h.buf[i] = '#'
	}
}

// AdvanceWatermark advances the operator's input watermark to wm, as worker/time.go
// advanceWatermark does for the head of a chain: nothing happens unless wm is above the
// current watermark; else the Context's watermark is set, the event-time timers due at wm
// fire (in time order), the operator's OnWatermark runs, and the watermark goes to the output
// unless the operator generates watermarks (only MaxWatermark passes a generator). For an
// operator of several inputs wm is the combined watermark (see AdvanceInputWatermark).
func (h *Harness) AdvanceWatermark(wm int64) error {
	if wm <= h.ctx.CurrentWatermark() {
		return nil
	}
	h.ctx.AdvanceWatermark(wm)
	if h.timers != nil {
		if err := h.timers.Fire(operator.EventTime, wm, h.onTime); err != nil {
			return err
		}
	}
	if l, ok := h.impl.(operator.WatermarkListener); ok {
		if err := l.OnWatermark(wm); err != nil {
			return err
		}
	}
	if h.gen && wm != operator.MaxWatermark {
		return nil
	}
	return h.emitWatermark(wm)
}

// AdvanceInputWatermark advances the watermark of input i to wm (it never goes back) and the
// operator's watermark to the minimum over its inputs, as a task combines its channels.
func (h *Harness) AdvanceInputWatermark(i int, wm int64) error {
	if i < 0 || i >= len(h.inWMs) {
		return fmt.Errorf("input %d: the operator has %d inputs", i, len(h.inWMs))
	}
	h.inWMs[i] = max(h.inWMs[i], wm)
	return h.AdvanceWatermark(slices.Min(h.inWMs))
}

// Watermark is the operator's input watermark (operator.MinWatermark before the first).
func (h *Harness) Watermark() int64 { return h.ctx.CurrentWatermark() }

// emitWatermark sends a watermark downstream if it advanced the output's, marking an idle
// output active first (worker/time.go).
func (h *Harness) emitWatermark(wm int64) error {
	if wm <= h.outWM {
		return nil
	}
	h.outWM = wm
	if h.outIdle {
		if err := h.emitStatus(false); err != nil {
			return err
		}
	}
	h.events = append(h.events, Event{Kind: WatermarkEvent, Watermark: wm})
	return nil
}

// emitStatus marks the output idle or active, if that changes it.
func (h *Harness) emitStatus(idle bool) error {
	if idle == h.outIdle {
		return nil
	}
	h.outIdle = idle
	h.events = append(h.events, Event{Kind: StatusEvent, Idle: idle})
	return nil
}

// SetProcessingTime moves the clock to now (epoch milliseconds; it never goes back) and fires
// the processing-time timers at or before now, in time order. (A task fires a timer at t once
// its clock reads t+1, after every record of millisecond t; the harness, like Flink's, fires it
// at t, so a test can also put a record into the millisecond of a timer that fired.)
func (h *Harness) SetProcessingTime(now int64) error {
	if now < h.now {
		return fmt.Errorf("processing time goes back from %d to %d", h.now, now)
	}
	h.now = now
	if h.timers == nil {
		return nil
	}
	return h.timers.Fire(operator.ProcessingTime, now, h.onTime)
}

// ProcessingTime is the clock, in epoch milliseconds.
func (h *Harness) ProcessingTime() int64 { return h.now }

// PeriodicEmit lets a watermark generator emit its watermark, as a task does every
// pipeline.auto-watermark-interval; it does nothing for other operators.
func (h *Harness) PeriodicEmit() error {
	if g, ok := h.impl.(operator.WatermarkGenerator); ok {
		return g.OnPeriodicEmit()
	}
	return nil
}

// Flush calls the operator's Flush, as a task does at its buffer timeout.
func (h *Harness) Flush() error { return h.op.Flush() }

// EndInput ends the operator's input. A task whose bounded input ends first gets
// MaxWatermark from upstream: call AdvanceWatermark(operator.MaxWatermark) before, to fire
// every window and event-time timer.
func (h *Harness) EndInput() error { return h.op.EndInput() }

// Close closes the operator (if its Open was called, also when it failed, as a task does),
// then its keyed state backend; later calls do nothing.
func (h *Harness) Close() error {
	if h.closed {
		return nil
	}
	h.closed = true
	for p := range h.pending { // as a task waits for its snapshots (bbolt's Close waits for them)
		p.Release()
	}
	var errs []error
	if h.opened {
		errs = append(errs, h.op.Close())
	}
	if h.keyed != nil {
		errs = append(errs, h.keyed.Close())
	}
	return errors.Join(errs...)
}

// Snapshot is a checkpoint of one harness's operator: its operator list state and its keyed
// state, written out. Restore it with Options.Restore.
type Snapshot struct {
	CheckpointID int64
	// Operator is the operator's list state, as a task acknowledges it.
	Operator *pb.OperatorSubtaskState
	// Keyed is the handle of the keyed state (nil when the operator is not keyed); its file is
	// kept in memory with the snapshot.
	Keyed *pb.KeyedStateHandle
	files map[string][]byte
}

// Snapshot takes checkpoint id and writes it at once: Checkpoint, then PendingSnapshot.Write.
func (h *Harness) Snapshot(id int64) (*Snapshot, error) {
	p, err := h.Checkpoint(id)
	if err != nil {
		return nil, err
	}
	return p.Write()
}

// PendingSnapshot is a checkpoint whose synchronous part was taken and whose keyed state is
// not written yet: as in a task, the harness may go on processing meanwhile, and the snapshot
// still holds the state as of the checkpoint (the backends' copy-on-write and read
// transactions). Write or Release it before the harness is closed; Close releases it.
type PendingSnapshot struct {
	h     *Harness
	s     *Snapshot
	keyed state.Snapshot
	kr    state.KeyGroupRange
	path  string
}

// Checkpoint takes the synchronous part of checkpoint id in the worker's order
// (worker/checkpoint.go triggerCheckpoint): the operator's PrepareSnapshotPreBarrier, its
// SnapshotState, its list state, then the keyed state backend's Snapshot. The keyed state is
// written by the PendingSnapshot's Write, which the test may call after more records, as a
// task writes it while it goes on.
func (h *Harness) Checkpoint(id int64) (*PendingSnapshot, error) {
	if p, ok := h.impl.(operator.PreBarrier); ok {
		if err := p.PrepareSnapshotPreBarrier(id); err != nil {
			return nil, fmt.Errorf("checkpoint %d: pre-barrier: %w", id, err)
		}
	}
	if s, ok := h.impl.(operator.Snapshotter); ok {
		if err := s.SnapshotState(id); err != nil {
			return nil, fmt.Errorf("checkpoint %d: snapshot: %w", id, err)
		}
	}
	if h.closed {
		return nil, fmt.Errorf("checkpoint %d: the harness is closed", id)
	}
	p := &PendingSnapshot{h: h, s: &Snapshot{CheckpointID: id, files: map[string][]byte{}, Operator: &pb.OperatorSubtaskState{
		Operator: h.name, Subtask: int32(h.opts.Subtask), Parallelism: int32(h.opts.Parallelism),
		MaxParallelism: h.vertex.GetMaxParallelism(), Lists: h.store.Snapshot(),
	}}}
	if h.keyed != nil {
		snap, err := h.keyed.Snapshot()
		if err != nil {
			return nil, fmt.Errorf("checkpoint %d: keyed state snapshot: %w", id, err)
		}
		p.keyed, p.kr = snap, h.keyed.KeyGroupRange()
		p.path = fmt.Sprintf("keyed-%d-s%d-%d", id, h.opts.Subtask, snapshotFiles.Add(1))
		if h.pending == nil {
			h.pending = map[*PendingSnapshot]bool{}
		}
		h.pending[p] = true
	}
	return p, nil
}

// Write writes the keyed state of the checkpoint and returns the snapshot; it may be called
// once, before the harness is closed.
func (p *PendingSnapshot) Write() (*Snapshot, error) {
	switch {
	case p.s.Keyed != nil:
		return p.s, nil
	case p.keyed == nil && p.h.keyed != nil:
		return nil, fmt.Errorf("checkpoint %d was released", p.s.CheckpointID)
	case p.keyed == nil:
		return p.s, nil
	}
	delete(p.h.pending, p)
	k, err := writeKeyed(p.keyed, p.kr, p.path, p.s.files)
	p.keyed = nil
	if err != nil {
		return nil, fmt.Errorf("checkpoint %d: %w", p.s.CheckpointID, err)
	}
	p.s.Keyed = k
	return p.s, nil
}

// Release drops a pending snapshot without writing it (a checkpoint that is aborted).
func (p *PendingSnapshot) Release() {
	delete(p.h.pending, p)
	if p.keyed != nil {
		p.keyed.Release()
		p.keyed = nil
	}
}

// writeKeyed writes the keyed state snapshot snap of range kr into files[path] and releases
// it.
func writeKeyed(snap state.Snapshot, kr state.KeyGroupRange, path string, files map[string][]byte) (*pb.KeyedStateHandle, error) {
	defer snap.Release()
	var b bytes.Buffer
	offsets, err := snap.WriteSnapshot(&b)
	if err != nil {
		return nil, fmt.Errorf("write keyed state: %w", err)
	}
	files[path] = b.Bytes()
	return &pb.KeyedStateHandle{File: &pb.FileHandle{Path: path, Size: int64(b.Len())},
		KeyGroupStart: int32(kr.Start), KeyGroupEnd: int32(kr.End), Offsets: offsets}, nil
}

// StateEntries returns how many entries each keyed state of the operator holds (state
// CountEntries over a snapshot of the backend), leaving out empty states: a window that
// cleaned up everything, timers included, has none. It does not call the operator's
// checkpoint hooks.
func (h *Harness) StateEntries() (map[string]int, error) {
	if h.keyed == nil {
		return nil, nil
	}
	snap, err := h.keyed.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("keyed state snapshot: %w", err)
	}
	files := map[string][]byte{}
	k, err := writeKeyed(snap, h.keyed.KeyGroupRange(), "entries", files)
	if err != nil {
		return nil, err
	}
	return state.CountEntries(k, func(*pb.FileHandle) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(files["entries"])), nil
	})
}

// Owns reports whether the key of row (of input i) is in the harness's key groups: route
// records of several subtasks' harnesses with it. Non-keyed inputs own every record.
func (h *Harness) Owns(i int, row record.Row) (bool, error) {
	if i < 0 || i >= len(h.inputs) {
		return false, fmt.Errorf("input %d: the operator has %d inputs", i, len(h.inputs))
	}
	in := h.inputs[i]
	if in.key == nil || h.keyed == nil {
		return true, nil
	}
	k, err := in.key.Eval(row, nil)
	if err != nil {
		return false, err
	}
	kg := state.KeyGroup(k, in.keyType, int(h.vertex.GetMaxParallelism()))
	return h.keyed.KeyGroupRange().Contains(kg), nil
}

// KeyGroupRange is the key groups the harness's backend owns (empty when not keyed).
func (h *Harness) KeyGroupRange() state.KeyGroupRange {
	if h.keyed == nil {
		return state.KeyGroupRange{Start: 0, End: -1}
	}
	return h.keyed.KeyGroupRange()
}

// Events returns what the operator sent on its main output so far, in order.
func (h *Harness) Events() []Event { return slices.Clone(h.events) }

// Output returns the records the operator emitted on its main output so far.
func (h *Harness) Output() []Record {
	var out []Record
	for _, e := range h.events {
		if e.Kind == RecordEvent {
			out = append(out, e.Record)
		}
	}
	return out
}

// Watermarks returns the watermarks the operator sent downstream so far.
func (h *Harness) Watermarks() []int64 {
	var out []int64
	for _, e := range h.events {
		if e.Kind == WatermarkEvent {
			out = append(out, e.Watermark)
		}
	}
	return out
}

// Statuses returns the watermark statuses the operator sent downstream so far (true: idle).
func (h *Harness) Statuses() []bool {
	var out []bool
	for _, e := range h.events {
		if e.Kind == StatusEvent {
			out = append(out, e.Idle)
		}
	}
	return out
}

// SideOutput returns the records emitted on side output name (a window's "late") so far.
func (h *Harness) SideOutput(name string) []Record {
	if c := h.sides[name]; c != nil {
		return slices.Clone(c.recs)
	}
	return nil
}

// ClearOutput forgets what was captured on the main output so far (records, watermarks and
// statuses); the side outputs keep theirs.
func (h *Harness) ClearOutput() { h.events = nil }

// ClearSideOutputs forgets what was captured on the side outputs so far.
func (h *Harness) ClearSideOutputs() {
	for _, c := range h.sides {
		c.recs = nil
	}
}

// Stdout returns what the operator wrote to Context.Stdout (the print sink).
func (h *Harness) Stdout() string { return h.stdout.String() }

// Dropped returns how many late records the operator dropped (operator.LateDropper), 0 for
// an operator that does not count them.
func (h *Harness) Dropped() int64 {
	if d, ok := h.impl.(operator.LateDropper); ok {
		return d.NumLateRecordsDropped()
	}
	return 0
}

// Operator returns the operator's runtime, for tests that look into it.
func (h *Harness) Operator() any { return h.impl }

// Context returns the operator's Context.
func (h *Harness) Context() *operator.Context { return h.ctx }

// Metric returns the value of the operator's metric name with the label pairs labels, and
// whether the operator created it.
func (h *Harness) Metric(name string, labels ...string) (float64, bool) {
	var v float64
	found := false
	h.ctx.Metrics.Each(func(m *operator.Metric) {
		if m.Name() == name && slices.Equal(m.Labels(), labels) {
			v, found = m.Value(), true
		}
	})
	return v, found
}

// Timers returns the operator's timer service (nil when it has none).
func (h *Harness) Timers() *operator.TimerService { return h.timers }

// InputSchema returns the schema of input i.
func (h *Harness) InputSchema(i int) *record.Schema { return h.inputs[i].schema }

// OutputSchema returns the schema of what the operator emits (nil for a sink).
func (h *Harness) OutputSchema() *record.Schema {
	if h.pbOp.GetOutputSchema() == nil {
		return nil
	}
	s, err := record.SchemaFromProto(h.pbOp.GetOutputSchema())
	if err != nil {
		return nil
	}
	return s
}

// Row builds a row of input i from Go values in field order: int, int64 (int64 fields, and
// timestamp fields in epoch milliseconds), float64, string, bool, []byte, time.Time or a
// record.Value. A value that does not fit its field fails the test.
func (h *Harness) Row(i int, values ...any) record.Row {
	h.t.Helper()
	s := h.inputs[i].schema
	if len(values) != s.Len() {
		h.t.Fatalf("operatortest: Row: %d values for input %v", len(values), s)
	}
	row := make(record.Row, len(values))
	for j, v := range values {
		f := s.Field(j)
		val, ok := toValue(v, f.Type)
		if !ok {
			h.t.Fatalf("operatortest: Row: %T %v does not fit field %q (%v)", v, v, f.Name, f.Type)
		}
		row[j] = val
	}
	return row
}

func toValue(v any, t record.Type) (record.Value, bool) {
	switch v := v.(type) {
	case record.Value:
		return v, true
	case int:
		return toValue(int64(v), t)
	case int64:
		switch t {
		case record.Int64:
			return record.IntValue(v), true
		case record.Timestamp:
			return record.TimeValue(time.UnixMilli(v)), true
		}
	case float64:
		return record.FloatValue(v), t == record.Float64
	case string:
		return record.StringValue(v), t == record.String
	case bool:
		return record.BoolValue(v), t == record.Bool
	case []byte:
		return record.BytesValue(v), t == record.Bytes
	case time.Time:
		return record.TimeValue(v), t == record.Timestamp
	}
	return record.Value{}, false
}

// Format renders a record emitted on the main output as "{field=value ...}@ts", timestamps
// in epoch milliseconds, for failure messages and comparisons.
func (h *Harness) Format(r Record) string { return FormatRecord(h.OutputSchema(), r) }

// FormatRecord renders r of schema s as Harness.Format does; s nil renders the values only.
func FormatRecord(s *record.Schema, r Record) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, v := range r.Row {
		if i > 0 {
			b.WriteByte(' ')
		}
		t := record.Invalid
		if s != nil && i < s.Len() {
			b.WriteString(s.Field(i).Name)
			b.WriteByte('=')
			t = s.Field(i).Type
		}
		switch t {
		case record.Timestamp:
			b.WriteString(strconv.FormatInt(v.Time().UnixMilli(), 10))
		case record.Invalid:
			fmt.Fprintf(&b, "%v", v)
		default:
			b.WriteString(v.Format(t))
		}
	}
	b.WriteString("}@")
	if r.Timestamp == operator.NoTimestamp {
		b.WriteString("none")
	} else {
		b.WriteString(strconv.FormatInt(r.Timestamp, 10))
	}
	return b.String()
}

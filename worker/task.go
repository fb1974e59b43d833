package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/expression"
	"github.com/goflink/goflink/internal/confine"
	"github.com/goflink/goflink/internal/execid"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
	"github.com/goflink/goflink/state"
	"github.com/goflink/goflink/storage"
)

// sourceBatch is how many records a source emits between looks at the mailbox and clock.
const sourceBatch = 1024

// errTaskCanceled is the cancellation cause when the JobManager cancels a task.
var errTaskCanceled = errors.New("task canceled")

// taskEnv is what tasks need from their TaskManager.
type taskEnv struct {
	selfAddr      string
	partitions    *partitionRegistry
	dataClient    func(addr string) (pb.DataExchangeServiceClient, error)
	report        func(*pb.UpdateTaskExecutionStateRequest)
	ack           func(*pb.AcknowledgeCheckpointRequest)
	decline       func(*pb.DeclineCheckpointRequest)
	operators     *operator.Registry
	allowed       *confine.Dirs      // io.allowed-paths
	s3            storage.S3Settings // s3:// checkpoint locations (the TaskManager's s3.* keys)
	scratch       *scratch           // the TaskManager's working files
	stdout        *lockedWriter
	log           *slog.Logger
	credits       int
	queueCapacity int
	partTimeout   time.Duration
	now           func() time.Time
}

// task runs one execution attempt of one subtask: its operator chain, fed by a source or by
// its input channels, in one goroutine (the mailbox model: records, control actions and timers
// are serialized through the loop, so operators need no locks).
type task struct {
	env          *taskEnv
	req          *pb.SubmitTaskRequest
	id           *pb.ExecutionAttemptID
	vertex       *pb.JobVertex
	name         string
	registration string
	log          *slog.Logger
	jobCfg       *config.Config

	// parent is the TaskManager's context, done when it stops: that cancels the task too.
	parent        context.Context
	ctx           context.Context
	cancel        context.CancelCauseFunc
	done          chan struct{}
	bufferTimeout time.Duration

	partitions []*resultPartition // one per output edge, registered at submit
	outEdges   []*pb.JobEdge
	space      chan struct{} // the partitions' consumers took a buffer (see subpartition)

	cancelRequested atomic.Bool
	finished        atomic.Bool // the task ended successfully (its FINISHED report follows)
	meter           *taskMeter
	in, out         int64 // owned by the task goroutine; published to the meter
	droppers        []lateDropper
	// jobEnded is set (before the cancellation) when the JobManager cancels the task because
	// the job ends for good; it holds the snapshot its sinks commit up to (see endJob).
	jobEnded atomic.Pointer[int64]
	// chainIn counts, per chained operator, the records the one before it passed it;
	// opRecords are each operator's numRecordsIn and numRecordsOut metrics.
	chainIn      []int64
	opRecords    [][2]*operator.Metric
	opWatermarks []*operator.Metric // per t.ops: its currentInputWatermark, once it has one

	// set up by invoke, owned by the task goroutine
	ops      []operator.Operator
	source   operator.Source
	closers  []closer // in open order; closed in reverse
	ctxs     []*operator.Context
	writers  []*recordWriter
	inputs   []*taskInput
	channels []*inputChannel
	gate     *inputGate
	open     int            // input channels that have not ended yet
	wg       sync.WaitGroup // input channel goroutines

	// checkpointing, owned by the task goroutine
	mail     chan func() error // actions from RPCs, run by the task goroutine
	chain    []chainMember
	keyed    state.KeyedBackend
	barriers barrierHandler // nil when checkpointing is off
	blocked  []bool         // per input channel: blocked by alignment
	// capture is the unaligned checkpoint collecting its input channel state, if any;
	// alignTimer fires at the pending checkpoint's aligned-checkpoint timeout.
	capture    *inputCapture
	alignTimer *time.Timer
	alignAt    time.Time
	// cur is the input buffer the task is in the middle of, if any.
	cur partialBuffer
	// recovered is the channel state the task restored, until it is queued.
	recovered      *recoveredChannels
	lastCheckpoint int64
	lastCompleted  int64
	// inAtCheckpoint and outAtCheckpoint are the record counters at the last checkpoint: a
	// task whose counters moved since has output no checkpoint covers yet.
	inAtCheckpoint, outAtCheckpoint int64
	// restoredID is the checkpoint the task restored from (0: a fresh start); rescaled: that
	// checkpoint was taken at another parallelism. A rescaled task ends only after a checkpoint
	// of its own: the JobManager hands a finished task's last state, by subtask index, to later
	// checkpoints, and its restored state belongs to the old parallelism's subtasks.
	restoredID int64
	rescaled   bool
	// ending: the input ended and the operators' EndInput ran; the task waits for its final
	// checkpoint, which the JobManager triggers directly.
	ending bool
	// deferred holds the barriers of checkpoints triggered by RPC before the input ended (the
	// JobManager triggers a task once its producers finished; their end of partition may
	// still be on the way). They are taken when it has ended, oldest first.
	deferred []*pb.CheckpointBarrier
	aborted  map[int64]bool
	async    sync.WaitGroup // asynchronous checkpoint parts

	// Stop-with-savepoint. stopID is the stop savepoint whose barrier the task took (0: none):
	// a source emits nothing after it, and the task ends once it completed (stopped), without
	// ending its operators' input, or goes on when it is aborted. inputEnded: the operators'
	// EndInput ran (a drain, or the end of the input); dataEnded counts the input channels
	// that sent EndOfData (or ended), per channel in dataEndedCh.
	stopID      int64
	stopped     bool
	inputEnded  bool
	dataEnded   int
	dataEndedCh []bool

	time eventTime // owned by the task goroutine
}

// taskInput is one input edge of a task.
type taskInput struct {
	edge   *pb.JobEdge
	schema *record.Schema
	key    *expression.Selector // non-nil for keyed (hash) edges
	row    record.Row
	// timestamps: each record is preceded by its event timestamp (8 bytes)
	timestamps bool
}

func newTask(parent context.Context, env *taskEnv, req *pb.SubmitTaskRequest) (*task, error) {
	g := req.GetJobGraph()
	id := req.GetExecution()
	if id == nil || g == nil || int(id.GetVertexId()) >= len(g.GetVertices()) || id.GetVertexId() < 0 {
		return nil, errors.New("submit task: missing execution or job graph, or vertex out of range")
	}
	v := g.GetVertices()[id.GetVertexId()]
	if id.GetSubtask() < 0 || id.GetSubtask() >= v.GetParallelism() {
		return nil, fmt.Errorf("submit task: subtask %d out of range for parallelism %d", id.GetSubtask(), v.GetParallelism())
	}
	jobCfg := config.New()
	if err := jobCfg.SetAll(g.GetConfig()); err != nil {
		return nil, fmt.Errorf("submit task: job config: %w", err)
	}
	ctx, cancel := context.WithCancelCause(parent)
	t := &task{
		jobCfg: jobCfg, mail: make(chan func() error, 16), aborted: map[int64]bool{},
		bufferTimeout: jobCfg.Duration(config.BufferTimeout),
		env:           env, req: req, id: id, vertex: v, registration: req.GetRegistrationId(),
		name:   fmt.Sprintf("%s (%d/%d)#%d", v.GetName(), id.GetSubtask()+1, v.GetParallelism(), id.GetAttempt()),
		parent: parent, ctx: ctx, cancel: cancel, done: make(chan struct{}),
		time: eventTime{stamp: operator.NoTimestamp, outWM: operator.MinWatermark}, meter: newTaskMeter(),
	}
	t.log = env.log.With("job_id", id.GetJobId(), "vertex_id", id.GetVertexId(), "subtask", id.GetSubtask(), "attempt", id.GetAttempt())
	for i, e := range g.GetEdges() {
		if e.GetSource() != v.GetId() {
			continue
		}
		if int(e.GetTarget()) >= len(g.GetVertices()) {
			cancel(nil)
			return nil, fmt.Errorf("submit task: edge %d targets unknown vertex %d", i, e.GetTarget())
		}
		consumer := g.GetVertices()[e.GetTarget()]
		if t.space == nil {
			t.space = make(chan struct{}, 1)
		}
		p := newResultPartition(partitionKey(id, int32(i)), subpartitions(e, int(consumer.GetParallelism())), env.queueCapacity, t.space)
		t.partitions = append(t.partitions, p)
		t.outEdges = append(t.outEdges, e)
	}
	return t, nil
}

// start registers the task's partitions (so consumers can find them) and runs it.
func (t *task) start() {
	for _, p := range t.partitions {
		t.env.partitions.register(p)
	}
	go t.run()
}

func (t *task) report(s pb.ExecutionState, failure error) {
	r := &pb.UpdateTaskExecutionStateRequest{
		RegistrationId: t.registration, Execution: t.id, State: s,
		RecordsIn: t.meter.recordsIn.Load(), RecordsOut: t.meter.recordsOut.Load(),
		EndOfData: s == pb.ExecutionState_EXECUTION_STATE_RUNNING && t.ending,
	}
	if failure != nil {
		r.Failure = failure.Error() // the JobManager names the task
		r.Unrecoverable = operator.IsUnrecoverable(failure)
		var pe *producerError
		if errors.As(failure, &pe) {
			r.FailedProducer = pe.producer
		}
	}
	t.env.report(r)
}

func (t *task) run() {
	defer close(t.done)
	t.report(pb.ExecutionState_EXECUTION_STATE_INITIALIZING, nil)
	err := t.invokeSafely()
	t.finished.Store(err == nil)
	t.cancel(errTaskCanceled) // stops input goroutines
	t.wg.Wait()
	t.publish()
	var pe *producerError
	switch {
	case err == nil:
		t.log.Info("task finished", "task", t.name, "records_in", t.in, "records_out", t.out)
		t.report(pb.ExecutionState_EXECUTION_STATE_FINISHED, nil)
	case t.cancelRequested.Load() || t.parent.Err() != nil:
		// Canceled by the JobManager, or because the TaskManager stops (its context ends
		// before it cancels each task), whatever error the cancellation made the task return.
		t.env.partitions.releaseExecution(t.id, t.canceledErr())
		t.log.Info("task canceled", "task", t.name)
		t.report(pb.ExecutionState_EXECUTION_STATE_CANCELED, nil)
	case errors.As(err, &pe) && pe.canceled:
		// Its producer was canceled: by the restart or cancellation that cancels this task
		// too, whose CancelTask may arrive later. It is canceled, as in Flink; the report says
		// why, for a JobManager that did not cancel it.
		t.env.partitions.releaseExecution(t.id, t.canceledErr())
		t.log.Info("task canceled: its producer was canceled", "task", t.name, "producer", execid.Key(pe.producer))
		t.report(pb.ExecutionState_EXECUTION_STATE_CANCELED, err)
	default:
		t.env.partitions.releaseExecution(t.id, err)
		t.log.Warn("task failed", "task", t.name, "err", err)
		t.report(pb.ExecutionState_EXECUTION_STATE_FAILED, err)
	}
}

// requestCancel cancels the task on behalf of the JobManager (or a lost JobManager).
func (t *task) requestCancel() {
	t.cancelRequested.Store(true)
	t.cancel(errTaskCanceled)
}

// requestEndOfJob cancels the task because its job ends for good (cancelled, or failed);
// lastCompleted is the job's newest completed checkpoint or savepoint. Its operators end what
// a restore would otherwise end (endJob) before they are closed.
func (t *task) requestEndOfJob(lastCompleted int64) {
	t.jobEnded.Store(&lastCompleted)
	t.requestCancel()
}

// canceledErr is the cause the partitions of a canceled task are released with: a
// jobEndedError when its job ends for good, else errTaskCanceled.
func (t *task) canceledErr() error {
	if last := t.jobEnded.Load(); last != nil {
		return &jobEndedError{lastCompleted: *last}
	}
	return errTaskCanceled
}

// endJob calls EndJob on the opened operators that implement operator.JobEnder, last first
// (the order of Close), if the task did not finish (err, the outcome of its loop, is not nil)
// and is cancelled because its job ends for good: by its CancelTask, or by a producer that was
// (whose release reached the task first). Their errors are logged: the task reports its
// cancellation either way.
func (t *task) endJob(err error) {
	if err == nil {
		return
	}
	var pe *producerError
	if t.jobEnded.Load() == nil && errors.As(err, &pe) && pe.canceled && pe.jobEnded != nil {
		t.jobEnded.CompareAndSwap(nil, pe.jobEnded)
	}
	last := t.jobEnded.Load()
	if last == nil {
		return
	}
	for i := len(t.closers) - 1; i >= 0; i-- {
		if je, ok := t.closers[i].c.(operator.JobEnder); ok {
			if err := je.EndJob(*last); err != nil {
				t.log.Warn("ending the job's work at its end failed", "task", t.name, "operator", t.closers[i].name,
					"last_completed_checkpoint", *last, "err", err)
			}
		}
	}
}

func (t *task) publish() {
	t.meter.recordsIn.Store(t.in)
	t.meter.recordsOut.Store(t.out)
	t.meter.outputWM.Store(t.time.outWM)
	for i, m := range t.opRecords {
		in, out := t.chainIn[i], t.out
		if i == 0 {
			in = t.in // read from the input channels, or by a source
		}
		if i+1 < len(t.chainIn) {
			out = t.chainIn[i+1]
		}
		m[0].Set(float64(in))
		m[1].Set(float64(out))
	}
	for i := range t.opWatermarks {
		wm := t.opContext(i).CurrentWatermark()
		if i == 0 {
			t.meter.inputWM.Store(wm)
		}
		if wm == operator.MinWatermark {
			continue
		}
		if t.opWatermarks[i] == nil {
			t.opWatermarks[i] = t.opContext(i).Metrics.Metric("currentInputWatermark")
		}
		t.opWatermarks[i].Set(float64(wm))
	}
	if len(t.droppers) > 0 {
		var n int64
		for _, d := range t.droppers {
			k := d.NumLateRecordsDropped()
			d.metric.Set(float64(k))
			n += k
		}
		t.meter.lateDropped.Store(n)
	}
}

// invokeSafely runs invoke and turns a panic in an operator into a task failure, so one bad
// operator cannot take the TaskManager down.
func (t *task) invokeSafely() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	return t.invoke()
}

// closer is an operator or source whose Open was called; Close is always called on it.
type closer struct {
	name string
	c    interface{ Close() error }
}

// invoke sets the task up, runs its loop and tears it down.
func (t *task) invoke() (err error) {
	defer func() {
		t.dropCapture(math.MaxInt64) // its asynchronous part waits for it
		if err != nil {
			// A failed task's checkpoints are abandoned: their asynchronous parts may wait
			// for consumers that are gone (see outputState.wait).
			t.cancel(errTaskCanceled)
		}
		t.async.Wait() // snapshots read the state backend until they are written
		t.endJob(err)
		for i := len(t.closers) - 1; i >= 0; i-- {
			if cerr := t.closers[i].c.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("close %s: %w", t.closers[i].name, cerr)
			}
		}
	}()
	defer t.stopTime()
	if err := t.setup(); err != nil {
		return err
	}
	t.report(pb.ExecutionState_EXECUTION_STATE_RUNNING, nil)
	if t.source != nil {
		err = t.runSource()
	} else {
		err = t.runInputs()
	}
	if err != nil {
		return err
	}
	return t.finish()
}

// chainOutput passes records to the next chained operator by function call, counting them
// (the next operator's numRecordsIn).
type chainOutput struct {
	next operator.Operator
	n    *int64
}

func (c chainOutput) Emit(row record.Row) error {
	*c.n++
	return c.next.Process(row)
}

// fanOut writes records to every output edge.
type fanOut []*recordWriter

func (f fanOut) Emit(row record.Row) error {
	for _, w := range f {
		if err := w.Emit(row); err != nil {
			return err
		}
	}
	return nil
}

// noOutput is the output of a sink, which never emits.
type noOutput struct{ name string }

func (n noOutput) Emit(record.Row) error { return fmt.Errorf("sink %q cannot emit records", n.name) }

func (t *task) setup() error {
	if err := t.checkPaths(); err != nil {
		return err
	}
	g := t.req.GetJobGraph()
	for i, e := range t.outEdges {
		w, err := newRecordWriter(t.ctx, e, g.GetVertices()[e.GetTarget()], int(t.id.GetSubtask()), t.partitions[i], &t.out, &t.time.stamp)
		if err != nil {
			return fmt.Errorf("output %d: %w", i, err)
		}
		w.meter = t.meter
		t.writers = append(t.writers, w)
	}
	// The chain's last operator writes its main output to the edges without a side output,
	// and each side output to its own edges.
	var main fanOut
	sides := map[string]operator.Output{}
	for i, w := range t.writers {
		if name := t.outEdges[i].GetSideOutput(); name != "" {
			prev, _ := sides[name].(fanOut)
			sides[name] = append(prev, w)
			continue
		}
		main = append(main, w)
	}
	var out operator.Output = main
	if len(main) == 1 {
		out = main[0] // one call less per record
	}
	opSpecs := t.vertex.GetOperators()
	built := make([]any, len(opSpecs))
	for i, spec := range opSpecs {
		o, err := t.env.operators.New(spec)
		if err != nil {
			return err
		}
		built[i] = o
		t.chain = append(t.chain, chainMember{name: spec.GetName(), uid: storage.OperatorUID(spec), impl: o})
	}
	metered := make([]operatorMetrics, len(opSpecs))
	t.chainIn = make([]int64, len(opSpecs))
	t.opRecords = make([][2]*operator.Metric, len(opSpecs))
	ki, err := t.parseInputs()
	if err != nil {
		return err
	}
	if err := t.initState(ki); err != nil {
		return err
	}
	if err := t.recovered.queueOutput(t.outEdges, t.partitions); err != nil {
		return err
	}
	// Chain positions count the operators after the source, if any (t.ops).
	first := 0
	if _, ok := built[0].(operator.Source); ok {
		first = 1
	}
	// Open from the tail to the head so every operator's output is ready before it runs.
	for i := len(built) - 1; i >= 0; i-- {
		spec := opSpecs[i]
		octx := &operator.Context{
			JobID: t.id.GetJobId(), OperatorName: spec.GetName(), OperatorUID: t.chain[i].uid, Subtask: int(t.id.GetSubtask()),
			Parallelism: int(t.vertex.GetParallelism()), MaxParallelism: int(t.vertex.GetMaxParallelism()), Attempt: int(t.id.GetAttempt()),
			Stdout: t.env.stdout, Logger: t.log.With("operator", spec.GetName()), Now: t.env.now,
			Checkpointing: t.checkpointing(), Metrics: &operator.Metrics{}, S3: t.env.s3,
		}
		metered[i] = operatorMetrics{name: spec.GetName(), metrics: octx.Metrics}
		t.opRecords[i] = [2]*operator.Metric{octx.Metrics.Metric("numRecordsIn"), octx.Metrics.Metric("numRecordsOut")}
		if d, ok := built[i].(operator.LateDropper); ok {
			t.droppers = append(t.droppers, lateDropper{d, octx.Metrics.Metric("numLateRecordsDropped")})
		}
		if i == len(built)-1 {
			octx.BindSideOutputs(sides)
			if len(t.writers) == 0 {
				out = noOutput{name: spec.GetName()}
			}
		}
		if st, ok := built[i].(operator.Stateful); ok {
			sc := &stateContext{store: t.chain[i].store, keyed: t.keyed, restored: t.req.GetRestore().GetCheckpointId()}
			if err := st.InitializeState(sc); err != nil {
				return fmt.Errorf("initialize state of %s: %w", spec.GetName(), err)
			}
		}
		if err := t.bindTime(octx, i-first, built[i]); err != nil {
			return fmt.Errorf("timers of %s: %w", spec.GetName(), err)
		}
		switch o := built[i].(type) {
		case operator.Source:
			if i != 0 {
				return fmt.Errorf("source %q is not the head of its chain", spec.GetName())
			}
			t.closers = append(t.closers, closer{spec.GetName(), o})
			if err := o.Open(octx, out); err != nil {
				return fmt.Errorf("open %s: %w", spec.GetName(), err)
			}
			t.source = o
		case operator.Operator:
			t.closers = append(t.closers, closer{spec.GetName(), o})
			if err := o.Open(octx, out); err != nil {
				return fmt.Errorf("open %s: %w", spec.GetName(), err)
			}
			t.ops = append([]operator.Operator{o}, t.ops...)
			out = chainOutput{next: o, n: &t.chainIn[i]}
		default:
			return fmt.Errorf("operator %q has unexpected kind %T", spec.GetName(), o)
		}
		t.ctxs = append([]*operator.Context{octx}, t.ctxs...)
	}
	for _, c := range t.ctxs[1:] {
		c.ShareSplits(t.ctxs[0]) // a source's splits reach the watermark field after it
	}
	t.meter.operators.Store(&metered)
	t.opWatermarks = make([]*operator.Metric, len(t.ops))
	t.startTime()
	if t.source == nil {
		return t.connectInputs()
	}
	return t.recovered.checkInputsUsed()
}

// keyInfo says whether the task runs on a keyed stream and the key's type.
type keyInfo struct {
	keyed bool
	typ   record.Type
}

// parseInputs builds the task's inputs and returns the key of the first keyed one, if any.
func (t *task) parseInputs() (keyInfo, error) {
	g := t.req.GetJobGraph()
	var ki keyInfo
	for idx, in := range t.req.GetInputs() {
		if in.GetEdge() < 0 || int(in.GetEdge()) >= len(g.GetEdges()) {
			return keyInfo{}, fmt.Errorf("input %d: edge %d out of range", idx, in.GetEdge())
		}
		e := g.GetEdges()[in.GetEdge()]
		schema, err := record.SchemaFromProto(e.GetSchema())
		if err != nil {
			return keyInfo{}, fmt.Errorf("input %d schema: %w", idx, err)
		}
		ti := &taskInput{edge: e, schema: schema, row: make(record.Row, schema.Len()), timestamps: e.GetTimestamps()}
		if e.GetPartitioner() == pb.Partitioner_PARTITIONER_HASH {
			prog, err := expression.Compile(e.GetKey(), schema, expression.Options{})
			if err != nil {
				return keyInfo{}, fmt.Errorf("input %d key %s: %w", idx, expression.Quote(e.GetKey()), err)
			}
			ti.key = prog.NewSelector()
			if !ki.keyed {
				ki = keyInfo{keyed: true, typ: prog.Type()}
			}
		}
		t.inputs = append(t.inputs, ti)
	}
	return ki, nil
}

// connectInputs starts one input channel per producer subtask of every input edge.
func (t *task) connectInputs() error {
	total := 0
	for _, in := range t.req.GetInputs() {
		total += len(in.GetProducers())
	}
	if total == 0 {
		return fmt.Errorf("task %s has neither a source nor inputs", t.name)
	}
	t.gate = newInputGate(total)
	t.time.valve = newValve(total)
	t.blocked = make([]bool, total)
	switch t.req.GetCheckpointingMode() {
	case pb.CheckpointingMode_CHECKPOINTING_MODE_EXACTLY_ONCE:
		t.barriers = newAlignedHandler(total, t, time.Now)
	case pb.CheckpointingMode_CHECKPOINTING_MODE_AT_LEAST_ONCE:
		t.barriers = newTrackerHandler(total, t, time.Now)
	}
	if t.recovered != nil {
		defer func() { t.recovered = nil }()
	}
	for idx, in := range t.req.GetInputs() {
		e := t.inputs[idx].edge
		for _, p := range in.GetProducers() {
			ch := &inputChannel{idx: len(t.channels), edge: idx, producer: p.GetExecution(), credits: make(chan struct{}, t.env.credits), gate: t.gate}
			t.channels = append(t.channels, ch)
			for _, b := range t.recovered.input(e, p.GetExecution().GetSubtask()) {
				t.gate.pushRecovered(ch, b) // before anything the producer sends
			}
			sub := subpartitionOf(e, t.id.GetSubtask())
			open := &pb.OpenSubpartition{Producer: p.GetExecution(), Edge: in.GetEdge(), Subpartition: sub, Consumer: t.id, InitialCredit: int32(t.env.credits)}
			if p.GetTaskmanagerAddress() == t.env.selfAddr {
				for range t.env.credits {
					ch.credits <- struct{}{}
				}
				t.wg.Go(func() {
					runLocal(t.ctx, ch, t.env.partitions, partitionKey(p.GetExecution(), in.GetEdge()), int(sub), t.env.partTimeout)
				})
				continue
			}
			client, err := t.env.dataClient(p.GetTaskmanagerAddress())
			if err != nil {
				return fmt.Errorf("connect to %s: %w", p.GetTaskmanagerAddress(), err)
			}
			t.wg.Go(func() { runRemote(t.ctx, ch, client, p.GetTaskmanagerAddress(), open, t.env.partTimeout) })
		}
	}
	return t.recovered.checkInputsUsed()
}

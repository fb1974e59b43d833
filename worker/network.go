package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/goflink/goflink/internal/execid"
	"github.com/goflink/goflink/internal/leaderrpc"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// maxBufferBytes bounds the records payload of one network buffer so that the encoded gRPC
// message stays at or under 32 KiB (grpc-go's buffer pool has a cliff just above it).
const maxBufferBytes = 32<<10 - 64

// maxBufferRecords bounds the records of one buffer. A record takes at least a byte unless
// its schema has no fields, so a full buffer holds no more; the writer also flushes rows of an
// empty schema at this count. A reader refuses a larger count from the network, which would
// otherwise have it process up to 2^31 empty rows of one small message.
const maxBufferRecords = maxBufferBytes

// buffer is one unit of the data plane: a batch of encoded records, or one event.
type buffer struct {
	data    []byte
	records int
	event   *pb.Event
}

func (b *buffer) isEndOfPartition() bool { return b.event.GetEndOfPartition() != nil }

var endOfPartition = &pb.Event{Kind: &pb.Event_EndOfPartition{EndOfPartition: &pb.EndOfPartition{}}}

// endOfData is a draining stop-with-savepoint's end of records on a channel.
var endOfData = &pb.Event{Kind: &pb.Event_EndOfData{EndOfData: &pb.EndOfData{}}}

// producerError says a task lost the input of one producer attempt.
type producerError struct {
	producer *pb.ExecutionAttemptID
	addr     string
	err      error
	// canceled: the producer released its partition because it was canceled. Its consumer is
	// canceled with it, not failed (Flink's CancelTaskException): the same restart or job
	// cancellation cancels both, and the consumer's own CancelTask may simply be later.
	canceled bool
	// jobEnded is set when the producer was canceled because the job ends for good: the job's
	// newest completed checkpoint (see task.requestEndOfJob). The consumer ends likewise.
	jobEnded *int64
}

func (e *producerError) Error() string {
	return fmt.Sprintf("lost input from %s at %s: %v", execid.Key(e.producer), e.addr, e.err)
}

func (e *producerError) Unwrap() error { return e.err }

// errPartitionReleased is the cause seen by consumers of a partition whose producer stopped
// before finishing.
var errPartitionReleased = errors.New("producer released its result partition")

// reasonProducerCanceled is the ErrorInfo reason of the ABORTED status that ends a remote
// consumer's stream when the producer was canceled.
const reasonProducerCanceled = "PRODUCER_CANCELED"

// infoJobEnded is the ErrorInfo metadata key of a PRODUCER_CANCELED status whose producer was
// canceled because the job ends for good: the job's newest completed checkpoint.
const infoJobEnded = "job_ended_last_completed_checkpoint"

// jobEndedError is the cancellation cause of a task canceled because its job ends for good
// (cancelled, or failed): its partitions are released with it, so that a consumer that sees
// the release before its own CancelTask ends the same way. It is an errTaskCanceled.
type jobEndedError struct {
	lastCompleted int64 // the job's newest completed checkpoint
}

func (e *jobEndedError) Error() string {
	return fmt.Sprintf("%v: the job ended (last completed checkpoint %d)", errTaskCanceled, e.lastCompleted)
}

func (e *jobEndedError) Is(target error) bool { return target == errTaskCanceled }

// jobEndedOf returns the newest completed checkpoint of a job that err says ended for good: a
// jobEndedError in err's chain, or a PRODUCER_CANCELED status saying so.
func jobEndedOf(err error) (*int64, bool) {
	var je *jobEndedError
	if errors.As(err, &je) {
		last := je.lastCompleted
		return &last, true
	}
	st, ok := status.FromError(err)
	if !ok {
		return nil, false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == reasonProducerCanceled {
			if v, has := info.GetMetadata()[infoJobEnded]; has {
				if last, err := strconv.ParseInt(v, 10, 64); err == nil {
					return &last, true
				}
			}
		}
	}
	return nil, false
}

// releasedStatus is the status that ends a remote consumer's stream when the partition was
// released for relErr, with reason PRODUCER_CANCELED when its producer was canceled (and the
// job's newest completed checkpoint when the job ended for good).
func releasedStatus(relErr error) error {
	st := status.Newf(codes.Aborted, "%v: %v", errPartitionReleased, relErr)
	if errors.Is(relErr, errTaskCanceled) {
		info := &errdetails.ErrorInfo{Reason: reasonProducerCanceled, Domain: "goflink"}
		if last, ok := jobEndedOf(relErr); ok {
			info.Metadata = map[string]string{infoJobEnded: strconv.FormatInt(*last, 10)}
		}
		if d, err := st.WithDetails(info); err == nil {
			st = d
		}
	}
	return st.Err()
}

// subpartition is the queue of buffers for one consumer subtask. The producer's task bounds
// it (see recordWriter.enqueue): when it is full the task blocks (backpressure). Priority
// events (unaligned checkpoint barriers) go ahead of the queue and need no credit.
type subpartition struct {
	mu    sync.Mutex
	queue []*buffer
	prio  []*buffer
	taken bool // a consumer has subscribed
	// notify wakes the consumer (capacity 1): a buffer or a priority event was added.
	notify chan struct{}
	// space wakes the producing task (capacity 1, shared by the task's partitions): the
	// consumer took a buffer.
	space chan struct{}
	// timed are the queued barriers of checkpoints that switch to unaligned after their
	// aligned-checkpoint timeout, oldest first: the consumer's reader converts one still
	// queued at its deadline into a priority event (convertTimedOut).
	timed []*timedBarrier
}

// timedBarrier is an aligned barrier queued in a subpartition that goes unaligned at its
// deadline. It is resolved once the consumer took it in order, or it was converted at its
// deadline and overtook the data buffers in overtaken (the producer's output channel state).
type timedBarrier struct {
	id        int64
	buf       *buffer
	deadline  time.Time
	resolved  chan struct{} // closed when resolved
	converted bool
	overtaken []*buffer
}

// resolve settles the barrier; s.mu is held.
func (tb *timedBarrier) resolve(overtaken []*buffer) {
	tb.overtaken = overtaken
	close(tb.resolved)
}

// isTimeoutable reports whether ev is the barrier of a checkpoint that starts aligned and
// goes unaligned after its aligned-checkpoint timeout.
func isTimeoutable(ev *pb.Event) bool {
	b := ev.GetBarrier()
	return b.GetUnaligned() && b.GetAlignedTimeoutMs() > 0
}

// addTimed queues barrier b, which goes unaligned at its deadline, and returns its handle.
// It never waits: an event may exceed the queue's capacity.
func (s *subpartition) addTimed(b *buffer) *timedBarrier {
	bar := b.event.GetBarrier()
	tb := &timedBarrier{
		id: bar.GetCheckpointId(), buf: b, resolved: make(chan struct{}),
		deadline: time.UnixMilli(bar.GetTimestampMs() + bar.GetAlignedTimeoutMs()),
	}
	s.mu.Lock()
	s.queue = append(s.queue, b)
	s.timed = append(s.timed, tb)
	s.mu.Unlock()
	signal(s.notify)
	return tb
}

// nextDeadline is the earliest deadline of a queued timed barrier.
func (s *subpartition) nextDeadline() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.timed) == 0 {
		return time.Time{}, false
	}
	return s.timed[0].deadline, true
}

// convertTimedOut turns every queued timed barrier whose deadline passed into a priority
// event (an unaligned barrier) ahead of the data buffers before it, which it overtakes.
func (s *subpartition) convertTimedOut(now time.Time) {
	s.mu.Lock()
	converted := false
	for len(s.timed) > 0 && !now.Before(s.timed[0].deadline) {
		tb := s.timed[0]
		s.timed = s.timed[1:]
		i := slices.Index(s.queue, tb.buf)
		var overtaken []*buffer
		for _, q := range s.queue[:i] {
			if q.event == nil {
				overtaken = append(overtaken, q)
			}
		}
		s.queue = slices.Delete(s.queue, i, i+1)
		ub := proto.Clone(tb.buf.event.GetBarrier()).(*pb.CheckpointBarrier)
		ub.AlignedTimeoutMs = 0
		s.prio = append(s.prio, &buffer{event: &pb.Event{Kind: &pb.Event_Barrier{Barrier: ub}}})
		tb.converted = true
		tb.resolve(overtaken)
		converted = true
	}
	s.mu.Unlock()
	if converted {
		signal(s.notify)
	}
}

// resolveAll settles every timed barrier (the partition is released).
func (s *subpartition) resolveAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, tb := range s.timed {
		tb.resolve(nil)
	}
	s.timed = nil
}

// add appends b unless the queue already holds limit buffers (no limit when limit <= 0).
func (s *subpartition) add(b *buffer, limit int) bool {
	s.mu.Lock()
	if limit > 0 && len(s.queue) >= limit {
		s.mu.Unlock()
		return false
	}
	s.queue = append(s.queue, b)
	s.mu.Unlock()
	signal(s.notify)
	return true
}

// addPriority puts event b ahead of the queued buffers and returns the data buffers it
// overtook, oldest first. They stay queued and are sent after it.
func (s *subpartition) addPriority(b *buffer) []*buffer {
	s.mu.Lock()
	var overtaken []*buffer
	for _, q := range s.queue {
		if q.event == nil {
			overtaken = append(overtaken, q)
		}
	}
	s.prio = append(s.prio, b)
	s.mu.Unlock()
	signal(s.notify)
	return overtaken
}

// size is the number of queued buffers (priority events not counted).
func (s *subpartition) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// poll takes the next priority event, or with credit the next queued buffer; used says a
// queued buffer (which spends the credit) was taken.
func (s *subpartition) poll(credit bool) (b *buffer, used bool) {
	s.mu.Lock()
	if len(s.prio) > 0 {
		b = s.prio[0]
		s.prio[0] = nil
		s.prio = s.prio[1:]
		s.mu.Unlock()
		return b, false
	}
	if !credit || len(s.queue) == 0 {
		s.mu.Unlock()
		return nil, false
	}
	b = s.queue[0]
	s.queue[0] = nil
	s.queue = s.queue[1:]
	if len(s.timed) > 0 && s.timed[0].buf == b {
		s.timed[0].resolve(nil) // taken in order
		s.timed = s.timed[1:]
	}
	s.mu.Unlock()
	signal(s.space)
	return b, true
}

// signal wakes the one waiter of c (a channel of capacity 1) without blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// resultPartition is what one producer task writes for one output edge: one subpartition per
// consumer subtask.
type resultPartition struct {
	key      string
	subs     []*subpartition
	capacity int           // buffers a subpartition queues before its producer waits
	released chan struct{} // closed when the producer gives up the partition
	relErr   error         // why (set before released is closed)
	relOnce  sync.Once

	mu       sync.Mutex
	finished int // subpartitions whose end-of-partition was consumed
}

// newResultPartition returns a partition of n subpartitions of capacity buffers whose
// consumers wake the producing task through space (nil: a channel of its own).
func newResultPartition(key string, n, capacity int, space chan struct{}) *resultPartition {
	if space == nil {
		space = make(chan struct{}, 1)
	}
	p := &resultPartition{key: key, subs: make([]*subpartition, n), capacity: capacity, released: make(chan struct{})}
	for i := range p.subs {
		p.subs[i] = &subpartition{notify: make(chan struct{}, 1), space: space}
	}
	return p
}

func (p *resultPartition) release(err error) {
	p.relOnce.Do(func() {
		p.relErr = err
		close(p.released)
		for _, s := range p.subs {
			s.resolveAll()
		}
	})
}

// take hands subpartition i to its one consumer.
func (p *resultPartition) take(i int) (*subpartition, error) {
	if i < 0 || i >= len(p.subs) {
		return nil, fmt.Errorf("subpartition %d out of range (partition has %d)", i, len(p.subs))
	}
	s := p.subs[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.taken {
		return nil, fmt.Errorf("subpartition %d of %s is already being consumed", i, p.key)
	}
	s.taken = true
	return s, nil
}

// next waits for the subpartition's next priority event, or for its next buffer while the
// consumer holds a credit (credit) or gets one (from credits); it returns the event or buffer
// and whether the consumer holds a credit afterwards. Once the partition is released what is
// still pollable is delivered, then relErr.
func (p *resultPartition) next(ctx context.Context, s *subpartition, credit bool, credits <-chan struct{}) (*buffer, bool, error) {
	var conv deadlineTimer
	defer conv.stop()
	for {
		if b, used := s.poll(credit); b != nil {
			return b, credit && !used, nil
		}
		wait := credits
		if credit {
			wait = nil
		}
		select {
		case <-conv.arm(s):
			conv.fired()
			s.convertTimedOut(time.Now())
		case <-s.notify:
		case <-wait:
			credit = true
		case <-p.released:
			if b, used := s.poll(credit); b != nil {
				return b, credit && !used, nil
			}
			return nil, credit, p.relErr
		case <-ctx.Done():
			return nil, credit, ctx.Err()
		}
	}
}

// deadlineTimer is a subpartition reader's timer for the deadline of its next timed barrier.
type deadlineTimer struct {
	t  *time.Timer
	at time.Time
}

// arm returns the timer's channel armed for s's next deadline; nil without one.
func (d *deadlineTimer) arm(s *subpartition) <-chan time.Time {
	at, ok := s.nextDeadline()
	if !ok {
		return nil
	}
	if d.t == nil {
		d.t = time.NewTimer(time.Until(at))
	} else if !at.Equal(d.at) {
		d.t.Reset(time.Until(at))
	}
	d.at = at
	return d.t.C
}

// fired notes that the timer's value was taken: the next arm sets it again.
func (d *deadlineTimer) fired() { d.at = time.Time{} }

func (d *deadlineTimer) stop() {
	if d.t != nil {
		d.t.Stop()
	}
}

// partitionKey names the result partition of one producer attempt on one edge.
func partitionKey(producer *pb.ExecutionAttemptID, edge int32) string {
	return fmt.Sprintf("%s/%d/%d/%d/e%d", producer.GetJobId(), producer.GetVertexId(), producer.GetSubtask(), producer.GetAttempt(), edge)
}

// partitionRegistry holds the result partitions of this TaskManager's tasks, and lets readers
// wait for a partition that is not registered yet (its producer is still being deployed).
type partitionRegistry struct {
	mu      sync.Mutex
	parts   map[string]*resultPartition
	changed chan struct{} // closed and replaced on every registration
}

func newPartitionRegistry() *partitionRegistry {
	return &partitionRegistry{parts: map[string]*resultPartition{}, changed: make(chan struct{})}
}

func (r *partitionRegistry) register(p *resultPartition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.parts[p.key] = p
	close(r.changed)
	r.changed = make(chan struct{})
}

// wait returns the partition once it is registered, or fails at the deadline.
func (r *partitionRegistry) wait(ctx context.Context, key string, timeout time.Duration) (*resultPartition, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		r.mu.Lock()
		p, ok := r.parts[key]
		changed := r.changed
		r.mu.Unlock()
		if ok {
			return p, nil
		}
		select {
		case <-changed:
		case <-timer.C:
			return nil, status.Errorf(codes.NotFound, "result partition %s not found within %v", key, timeout)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// consumed notes that a subpartition delivered its end-of-partition; the partition leaves the
// registry once every subpartition has.
func (r *partitionRegistry) consumed(p *resultPartition) {
	p.mu.Lock()
	p.finished++
	done := p.finished == len(p.subs)
	p.mu.Unlock()
	if done {
		r.mu.Lock()
		delete(r.parts, p.key)
		r.mu.Unlock()
	}
}

// dataServer serves DataExchangeService: one Subscribe stream per remote input channel.
type dataServer struct {
	pb.UnimplementedDataExchangeServiceServer
	partitions *partitionRegistry
	timeout    time.Duration
}

// Subscribe streams one subpartition to a remote consumer, one buffer per credit.
func (s *dataServer) Subscribe(stream pb.DataExchangeService_SubscribeServer) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	open := first.GetOpen()
	if open == nil || open.GetProducer() == nil || open.GetInitialCredit() < 1 {
		return status.Error(codes.InvalidArgument, "first message must open a subpartition with a producer and initial_credit >= 1")
	}
	p, err := s.partitions.wait(ctx, partitionKey(open.GetProducer(), open.GetEdge()), s.timeout)
	if err != nil {
		return err
	}
	sub, err := p.take(int(open.GetSubpartition()))
	if err != nil {
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	credits := make(chan int32, 64)
	go func() { // ends when the stream does
		defer close(credits)
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			if c := m.GetCredit(); c > 0 {
				select {
				case credits <- c:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	credit := open.GetInitialCredit()
	var conv deadlineTimer
	defer conv.stop()
	for released := false; ; {
		b, used := sub.poll(credit > 0)
		if b == nil {
			if released {
				return releasedStatus(p.relErr)
			}
			select {
			case <-conv.arm(sub):
				conv.fired()
				sub.convertTimedOut(time.Now())
			case c, ok := <-credits:
				if !ok {
					return status.Error(codes.Canceled, "consumer closed the stream")
				}
				credit += c
			case <-sub.notify:
			case <-p.released:
				released = true // deliver what is still pollable first
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		msg := &pb.SubscribeResponse{Records: b.data, RecordCount: int32(b.records), Event: b.event}
		if err := stream.Send(msg); err != nil {
			return err
		}
		if used {
			credit--
		}
		if b.isEndOfPartition() {
			s.partitions.consumed(p)
			return nil
		}
	}
}

// inputChannel reads one subpartition of one producer, locally or over the network. Its
// credits bound the buffers in flight towards the task: a credit is spent per buffer (and per
// event, but for priority events and the end of partition) and given back when the task has
// processed it.
type inputChannel struct {
	idx      int // index into the task's channels
	edge     int // index into the task's inputs
	producer *pb.ExecutionAttemptID
	credits  chan struct{} // local: tokens; remote: returned credits to announce
	gate     *inputGate
}

// deliver hands a buffer to the task's gate: a priority event ahead of the queued buffers.
func (c *inputChannel) deliver(b *buffer) {
	if isPriority(b.event) {
		c.gate.pushPriority(c, b)
		return
	}
	c.gate.push(c, b)
}

// fail hands the channel's failure to the task's gate.
func (c *inputChannel) fail(err error) { c.gate.fail(c, err) }

// release returns one credit after the task processed a buffer of this channel.
func (c *inputChannel) release() {
	select {
	case c.credits <- struct{}{}:
	default: // cannot happen: at most `credit` buffers are outstanding
	}
}

// runLocal moves buffers from a subpartition of this TaskManager into the gate.
func runLocal(ctx context.Context, c *inputChannel, reg *partitionRegistry, key string, subIdx int, timeout time.Duration) {
	fail := func(err error) {
		last, _ := jobEndedOf(err)
		c.fail(&producerError{producer: c.producer, addr: "this TaskManager", err: err, canceled: errors.Is(err, errTaskCanceled), jobEnded: last})
	}
	p, err := reg.wait(ctx, key, timeout)
	if err != nil {
		fail(err)
		return
	}
	sub, err := p.take(subIdx)
	if err != nil {
		fail(err)
		return
	}
	credit := false
	for {
		var b *buffer
		b, credit, err = p.next(ctx, sub, credit, c.credits)
		if err != nil {
			if ctx.Err() == nil {
				fail(fmt.Errorf("%w: %w", errPartitionReleased, err))
			}
			return
		}
		c.deliver(b)
		if b.isEndOfPartition() {
			reg.consumed(p)
			return
		}
	}
}

// runRemote subscribes to a subpartition on another TaskManager and moves its buffers into the
// gate, announcing credit as the task returns it.
func runRemote(ctx context.Context, c *inputChannel, client pb.DataExchangeServiceClient, addr string, open *pb.OpenSubpartition, timeout time.Duration) {
	fail := func(err error) {
		last, _ := jobEndedOf(err)
		c.fail(&producerError{producer: c.producer, addr: addr, err: err, canceled: leaderrpc.Reason(err) == reasonProducerCanceled, jobEnded: last})
	}
	stream, err := subscribe(ctx, client, open, timeout)
	if err != nil {
		if ctx.Err() == nil {
			fail(err)
		}
		return
	}
	sendCtx, stopSend := context.WithCancel(ctx)
	var sender sync.WaitGroup
	defer sender.Wait()
	defer stopSend()
	sender.Go(func() { // announces returned credits; ends with the channel
		for {
			select {
			case <-c.credits:
			case <-sendCtx.Done():
				return
			}
			n := int32(1)
			for more := true; more; {
				select {
				case <-c.credits:
					n++
				default:
					more = false
				}
			}
			if err := stream.Send(&pb.SubscribeRequest{Kind: &pb.SubscribeRequest_Credit{Credit: n}}); err != nil {
				return
			}
		}
	})
	for {
		m, err := stream.Recv()
		if err != nil {
			if ctx.Err() == nil {
				if errors.Is(err, io.EOF) {
					err = errors.New("stream ended before end-of-partition")
				}
				fail(err)
			}
			return
		}
		b := &buffer{data: m.GetRecords(), records: int(m.GetRecordCount()), event: m.GetEvent()}
		c.deliver(b)
		if b.isEndOfPartition() {
			return // the server ended the stream; the task's context releases it
		}
	}
}

// subscribe opens the stream, retrying while the producer's TaskManager is unreachable.
func subscribe(ctx context.Context, client pb.DataExchangeServiceClient, open *pb.OpenSubpartition, timeout time.Duration) (pb.DataExchangeService_SubscribeClient, error) {
	deadline := time.Now().Add(timeout)
	backoff := 10 * time.Millisecond
	for {
		stream, err := client.Subscribe(ctx)
		if err == nil {
			err = stream.Send(&pb.SubscribeRequest{Kind: &pb.SubscribeRequest_Open{Open: open}})
			if err == nil {
				return stream, nil
			}
		}
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			return nil, fmt.Errorf("subscribe to producer %s: %w", partitionKey(open.GetProducer(), open.GetEdge()), err)
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		backoff = min(backoff*2, 500*time.Millisecond)
	}
}

// releaseAll releases and forgets every partition (the JobManager that scheduled their
// consumers is gone).
func (r *partitionRegistry) releaseAll(err error) {
	r.mu.Lock()
	parts := r.parts
	r.parts = map[string]*resultPartition{}
	r.mu.Unlock()
	for _, p := range parts {
		p.release(err)
	}
}

// releaseExecution releases and forgets every partition of one producer attempt (its consumers
// will not come, e.g. because the job was cancelled).
func (r *partitionRegistry) releaseExecution(producer *pb.ExecutionAttemptID, err error) {
	prefix := partitionKey(producer, 0)
	prefix = prefix[:len(prefix)-1] // ".../e"
	r.mu.Lock()
	var rel []*resultPartition
	for k, p := range r.parts {
		if len(k) > len(prefix) && k[:len(prefix)] == prefix {
			rel = append(rel, p)
			delete(r.parts, k)
		}
	}
	r.mu.Unlock()
	for _, p := range rel {
		p.release(err)
	}
}

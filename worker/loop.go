package worker

import (
	"fmt"
	"time"

	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// flushTicker returns the buffer-timeout ticks and the function that stops them; the ticks are
// nil when every batch is flushed at once.
func (t *task) flushTicker() (<-chan time.Time, func()) {
	if t.bufferTimeout <= 0 {
		return nil, func() {}
	}
	tk := time.NewTicker(t.bufferTimeout)
	return tk.C, tk.Stop
}

// runSource drives a source: emit a batch, look at the clock and the cancellation, repeat.
func (t *task) runSource() error {
	t.meter.start()
	tick, stop := t.flushTicker()
	defer stop()
	wait := time.NewTimer(time.Hour)
	wait.Stop()
	defer wait.Stop()
	for {
		if t.stopID != 0 || t.inputEnded {
			// A stop savepoint was taken (or a drain ended the input): nothing more is
			// emitted. The task ends once it completed; an aborted one resumes the source
			// unless the drain ended its input.
			if err := t.awaitStop(); err != nil {
				return err
			}
			if t.stopped || t.inputEnded {
				return nil
			}
			continue
		}
		if !t.outputAvailable() {
			// Backpressured: wait for room, taking checkpoints and mail meanwhile.
			if _, err := t.step(false, tick, nil); err != nil {
				return err
			}
			continue
		}
		n, delay, done, err := t.source.Emit(sourceBatch)
		if err != nil {
			return err
		}
		t.in += int64(n)
		t.publish()
		if done {
			return nil
		}
		if tick == nil {
			if err := t.flush(); err != nil {
				return err
			}
		}
		if delay > 0 {
			wait.Reset(delay)
			for woke := false; !woke; {
				if woke, err = t.step(false, tick, wait.C); err != nil {
					return err
				}
			}
			continue
		}
		select {
		case f := <-t.mail:
			if err := f(); err != nil {
				return err
			}
		case <-tick:
			if err := t.flush(); err != nil {
				return err
			}
		case <-t.wmTicks():
			if err := t.periodicEmit(); err != nil {
				return err
			}
		case <-t.ctx.Done():
			return t.ctx.Err()
		default:
		}
	}
}

// awaitFinalCheckpoint keeps a task whose input ended running until a checkpoint that covers
// everything it read and emitted has completed (Flink's final checkpoint): only then may it
// end its partitions. Otherwise a sink would commit output at the end that a restore from an
// earlier checkpoint replays. A task restored at another parallelism waits for a checkpoint of
// its own even with nothing new (see task.rescaled). The JobManager triggers such tasks
// directly (their inputs carry no more barriers). Without checkpointing it returns at once.
func (t *task) awaitFinalCheckpoint() error {
	if !t.checkpointing() {
		return nil
	}
	t.ending = true
	if err := t.takeDeferred(); err != nil {
		return err
	}
	tick, stop := t.flushTicker()
	defer stop()
	logged := false
	for t.in != t.inAtCheckpoint || t.out != t.outAtCheckpoint || t.lastCompleted < t.lastCheckpoint ||
		t.rescaled && t.lastCompleted <= t.restoredID {
		if !logged {
			t.log.Info("input ended; waiting for a final checkpoint", "task", t.name, "last_checkpoint", t.lastCheckpoint)
			t.publish()
			t.report(pb.ExecutionState_EXECUTION_STATE_RUNNING, nil) // asks for the final checkpoint now
			logged = true
		}
		if err := t.flush(); err != nil {
			return err
		}
		// A tick only wakes the loop, which flushes at its top.
		if _, err := t.step(false, nil, tick); err != nil {
			return err
		}
	}
	return nil
}

// runInputs processes buffers from the input channels until all of them ended.
func (t *task) runInputs() error {
	t.meter.start()
	tick, stop := t.flushTicker()
	defer stop()
	t.open = len(t.channels)
	for t.open > 0 {
		if _, err := t.step(true, tick, nil); err != nil {
			return err
		}
	}
	return nil
}

// outputAvailable reports whether every output channel has room for another buffer: a task
// takes on input (or a source emits) only then, so that it waits for room where it can take
// checkpoints and mail.
func (t *task) outputAvailable() bool {
	for _, w := range t.writers {
		if !w.available() {
			return false
		}
	}
	return true
}

// step takes the next item of the input gate when input is set (priority events always;
// buffers only while the output has room), processes it, and flushes at once when tick is
// nil. Without one it arms the wake-ups for the earliest processing-time timer and the
// pending checkpoint's aligned-checkpoint timeout, then waits for one of: an input item or
// room in the output (it returns to take it), mail (run), a buffer-timeout tick (flush), a
// watermark tick, a timer, wake (woke is true) or cancellation. A nil channel never fires.
// The wait is the task's idle time, or its backpressured time while the output has no room.
func (t *task) step(input bool, tick, wake <-chan time.Time) (woke bool, err error) {
	if t.cur.active {
		// In the middle of a buffer: cancellation, priority events, a due timeout, then the
		// rest of it.
		if err := t.ctx.Err(); err != nil {
			return false, err
		}
		it, ok := t.gate.poll(t.blocked, false)
		switch {
		case ok:
			err = t.dispatch(it)
		case t.alignmentDue():
			err = t.alignmentTimeout()
		default:
			err = t.resume()
		}
		if err == nil && tick == nil {
			err = t.flush()
		}
		return false, err
	}
	room := t.outputAvailable()
	if input {
		if it, ok := t.gate.poll(t.blocked, room); ok {
			if err := t.dispatch(it); err != nil {
				return false, err
			}
			if tick == nil {
				return false, t.flush()
			}
			return false, nil
		}
	}
	var notify, space <-chan struct{}
	if input {
		notify = t.gate.notify
	}
	if !room {
		space = t.space
	}
	t.armProcessingTimer()
	// Waiting for room in the output is backpressure (Flink's backPressuredTimeMsPerSecond),
	// any other wait is idle time.
	wait := &t.meter.idle
	if !room {
		wait = &t.meter.backPressured
	}
	wait.begin(meterNow())
	select {
	case <-notify:
		wait.end(meterNow())
		return false, nil
	case <-space:
		wait.end(meterNow())
		return false, nil
	case <-t.alignmentTimer():
		wait.end(meterNow())
		return false, t.alignmentTimeout()
	case f := <-t.mail:
		wait.end(meterNow())
		return false, f()
	case <-tick:
		wait.end(meterNow())
		return false, t.flush()
	case <-wake:
		wait.end(meterNow())
		return true, nil
	case <-t.wmTicks():
		wait.end(meterNow())
		return false, t.periodicEmit()
	case <-t.procTimerC():
		wait.end(meterNow())
		return false, t.fireProcessingTimers()
	case <-t.ctx.Done():
		wait.end(meterNow())
		return false, t.ctx.Err()
	}
}

// dispatch processes an item of the input gate.
func (t *task) dispatch(it gateItem) error {
	if it.err != nil {
		return it.err
	}
	return t.process(it)
}

// process handles one buffer from an input channel.
func (t *task) process(it gateItem) error {
	b := it.buf
	if b.event != nil {
		if b.isEndOfPartition() {
			t.open--
			t.markDataEnded(it.ch.idx)
			if t.barriers != nil {
				return t.barriers.processEndOfPartition(it.ch.idx)
			}
			return nil
		}
		if (!it.prio || it.spent) && !it.recovered {
			it.ch.release() // every other event spent a credit like a buffer
		}
		if b.event.GetEndOfData() != nil {
			return t.onEndOfData(it.ch.idx)
		}
		if ok, err := t.processWatermarkEvent(b.event, it.ch.idx); ok || err != nil {
			return err
		}
		if t.barriers == nil {
			return nil // checkpointing is off
		}
		switch ev := b.event.GetKind().(type) {
		case *pb.Event_Barrier:
			return t.barriers.processBarrier(ev.Barrier, it.ch.idx)
		case *pb.Event_CancelCheckpoint:
			return t.barriers.processCancellation(ev.CancelCheckpoint.GetCheckpointId(), it.ch.idx)
		}
		return nil
	}
	in := t.inputs[it.ch.edge]
	if t.inputEnded {
		return fmt.Errorf("records on input channel %d after its end of data", it.ch.idx)
	}
	rr, err := newRecordReader(b, in.timestamps)
	if err != nil {
		return fmt.Errorf("decode records of input channel %d: %w", it.ch.idx, err)
	}
	t.cur = partialBuffer{active: true, it: it, in: in, rr: rr}
	return t.resume()
}

// partialBuffer is the data buffer a task is in the middle of. The task stops between two of
// its records for a priority event (an unaligned checkpoint's barrier), an aligned-checkpoint
// timeout or its cancellation, as Flink's mailbox does between records, so that neither waits
// for a buffer of slow records; then it resumes.
type partialBuffer struct {
	active bool
	it     gateItem
	in     *taskInput
	rr     recordReader
}

// rest is what is left of the buffer, as a buffer.
func (c *partialBuffer) rest() *buffer { return &buffer{data: c.rr.data, records: c.rr.left} }

// interruptEvery is how many records a task processes between looks at the clock for an
// aligned-checkpoint timeout and at its cancellation (a priority event it sees after every
// record).
const interruptEvery = 128

// resume processes the records of the current buffer until its end, or until a priority
// event or a due aligned-checkpoint timeout interrupts it.
func (t *task) resume() error {
	c := &t.cur
	in := c.in
	head := t.ops[0]
	hctx := t.ctxs[0]
	two, _ := head.(operator.TwoInput) // a join: records go to ProcessInput with their input
	input := int(in.edge.GetInput())
	if !in.timestamps {
		t.time.stamp = operator.NoTimestamp
	}
	n := 0
	for {
		if n > 0 && c.rr.left > 0 && (t.gate.urgent.Load() || n%interruptEvery == 0 && (t.alignmentDue() || t.ctx.Err() != nil)) {
			t.in += int64(n)
			t.publish()
			return nil
		}
		stamp, ok, err := c.rr.next(in.schema, in.row)
		if err != nil {
			return fmt.Errorf("decode record: %w", err)
		}
		if !ok {
			break
		}
		n++
		if in.timestamps {
			t.time.stamp = stamp
		}
		if in.key != nil {
			k, err := in.key.Eval(in.row)
			if err != nil {
				return operator.EvalError(hctx.OperatorName, fmt.Errorf("key: %w", err))
			}
			hctx.SetKey(k)
			if t.keyed != nil {
				t.keyed.SetCurrentKey(k)
			}
		}
		if two != nil {
			err = two.ProcessInput(input, in.row)
		} else {
			err = head.Process(in.row)
		}
		if err != nil {
			return err
		}
	}
	it := c.it
	t.cur = partialBuffer{}
	t.in += int64(n)
	t.meter.bytesIn.Add(int64(len(it.buf.data)))
	if !it.recovered {
		it.ch.release()
	}
	t.publish()
	return nil
}

// flush pushes partly filled output buffers and lets sinks flush.
func (t *task) flush() error {
	for _, op := range t.ops {
		if err := op.Flush(); err != nil {
			return err
		}
	}
	for _, w := range t.writers {
		if err := w.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// finish ends the input of every operator, waits for the final checkpoint, then closes the
// outputs with end-of-partition. A task stopped with a savepoint ends without ending its
// operators' input: their state is in the savepoint, and a job resumed from it goes on.
func (t *task) finish() error {
	if t.stopID != 0 {
		if err := t.awaitStop(); err != nil {
			return err
		}
		if t.stopped {
			return t.broadcastEvent(endOfPartition)
		}
	}
	if err := t.endInput(); err != nil {
		return err
	}
	if err := t.awaitFinalCheckpoint(); err != nil {
		return err
	}
	return t.broadcastEvent(endOfPartition)
}

// endInput ends the input of every operator once: a source first ends event time, so that
// every window and timer fires.
func (t *task) endInput() error {
	if t.inputEnded {
		return nil
	}
	t.inputEnded = true
	if t.source != nil {
		if err := t.advanceWatermark(0, operator.MaxWatermark); err != nil {
			return err
		}
	}
	for i, op := range t.ops {
		if err := op.EndInput(); err != nil {
			return fmt.Errorf("end input of %s: %w", t.ctxs[len(t.ctxs)-len(t.ops)+i].OperatorName, err)
		}
	}
	return nil
}

// markDataEnded records that input channel ch sends no more records (EndOfData or its end of
// partition).
func (t *task) markDataEnded(ch int) {
	if t.dataEndedCh == nil {
		t.dataEndedCh = make([]bool, len(t.channels))
	}
	if ch >= 0 && ch < len(t.dataEndedCh) && !t.dataEndedCh[ch] {
		t.dataEndedCh[ch] = true
		t.dataEnded++
	}
}

// onEndOfData handles a draining stop's EndOfData on channel ch: once every channel sent it,
// the operators' input ends (their last output goes out before the savepoint's barrier) and
// the task sends it on.
func (t *task) onEndOfData(ch int) error {
	t.markDataEnded(ch)
	if t.dataEnded < len(t.channels) || t.inputEnded {
		return nil
	}
	if err := t.endInput(); err != nil {
		return err
	}
	return t.broadcastEvent(endOfData)
}

// awaitStop waits, handling mail and timers, until the stop savepoint the task took completed
// (stopped) or was aborted (stopID is 0 again); without one it returns at once.
func (t *task) awaitStop() error {
	if t.stopID == 0 || t.stopped {
		return nil
	}
	tick, stop := t.flushTicker()
	defer stop()
	t.log.Info("stopping with a savepoint; waiting for it to complete", "task", t.name, "savepoint_id", t.stopID)
	for t.stopID != 0 && !t.stopped {
		if err := t.flush(); err != nil {
			return err
		}
		if _, err := t.step(false, nil, tick); err != nil {
			return err
		}
	}
	return nil
}

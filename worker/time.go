package worker

import (
	"math"
	"slices"
	"time"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// This file holds a task's event time: the timestamp of the record being processed (one cell
// shared by the chain and the writers), watermarks through the chain, the output's watermark
// and idleness, periodic watermark generation and the timers of its keyed operator.

// eventTime is a task's event-time state, owned by the task goroutine.
type eventTime struct {
	stamp   int64  // timestamp of the record being processed, or operator.NoTimestamp
	valve   *valve // input channels' watermarks; nil for a source task
	outWM   int64  // last watermark sent downstream
	outIdle bool   // the output is marked idle
	gens    []int  // chain positions (in t.ops) of watermark generators
	wmTick  *time.Ticker
	timers  *operator.TimerService // of the head operator, when it is keyed and has timers
	onTimer operator.TimerListener
	// procTimer wakes the task for its earliest processing-time timer (armed at procAt).
	procTimer *time.Timer
	procAt    int64
}

// chainTime is the TimeOutput of the operator at chain position pos (-1: the source).
type chainTime struct {
	t   *task
	pos int
}

func (c chainTime) EmitWatermark(wm int64) error        { return c.t.advanceWatermark(c.pos+1, wm) }
func (c chainTime) EmitWatermarkStatus(idle bool) error { return c.t.emitStatus(idle) }

// opContext is the context of chain position i of t.ops.
func (t *task) opContext(i int) *operator.Context { return t.ctxs[len(t.ctxs)-len(t.ops)+i] }

// advanceWatermark hands watermark wm to the operators from chain position from on: each
// fires its due event-time timers and sees OnWatermark, in chain order; a watermark generator
// stops it (it makes its own), except MaxWatermark. What passes the chain goes downstream.
func (t *task) advanceWatermark(from int, wm int64) error {
	for i := from; i < len(t.ops); i++ {
		ctx := t.opContext(i)
		if wm <= ctx.CurrentWatermark() {
			return nil
		}
		ctx.AdvanceWatermark(wm)
		if i == 0 && t.time.timers != nil {
			if err := t.time.timers.Fire(operator.EventTime, wm, t.time.onTimer); err != nil {
				return err
			}
		}
		if l, ok := t.ops[i].(operator.WatermarkListener); ok {
			if err := l.OnWatermark(wm); err != nil {
				return err
			}
		}
		if _, gen := t.ops[i].(operator.WatermarkGenerator); gen && wm != operator.MaxWatermark {
			return nil
		}
	}
	if wm <= t.time.outWM {
		return nil
	}
	t.time.outWM = wm
	if t.time.outIdle {
		if err := t.emitStatus(false); err != nil {
			return err
		}
	}
	return t.broadcastEvent(&pb.Event{Kind: &pb.Event_Watermark{Watermark: &pb.Watermark{Timestamp: wm}}})
}

// emitStatus marks the task's output idle or active.
func (t *task) emitStatus(idle bool) error {
	if idle == t.time.outIdle {
		return nil
	}
	t.time.outIdle = idle
	return t.broadcastEvent(&pb.Event{Kind: &pb.Event_WatermarkStatus{WatermarkStatus: &pb.WatermarkStatus{Idle: idle}}})
}

// processWatermarkEvent takes a watermark or watermark status from input channel ch; false
// when ev is neither.
func (t *task) processWatermarkEvent(ev *pb.Event, ch int) (bool, error) {
	switch k := ev.GetKind().(type) {
	case *pb.Event_Watermark:
		if wm, ok := t.time.valve.watermark(ch, k.Watermark.GetTimestamp()); ok {
			return true, t.advanceWatermark(0, wm)
		}
		return true, nil
	case *pb.Event_WatermarkStatus:
		wm, advanced, changed := t.time.valve.status(ch, k.WatermarkStatus.GetIdle())
		if advanced {
			if err := t.advanceWatermark(0, wm); err != nil {
				return true, err
			}
		}
		if changed && len(t.time.gens) == 0 {
			return true, t.emitStatus(t.time.valve.idle)
		}
		return true, nil
	}
	return false, nil
}

// bindTime binds the context of the operator at chain position pos (-1: the source) to the
// task's event time, notes a watermark generator, and gives a keyed head operator with timers
// its timer service. It runs after the operator's state was initialized and before it opens.
func (t *task) bindTime(octx *operator.Context, pos int, op any) error {
	var timers *operator.TimerService
	if l, ok := op.(operator.TimerListener); ok && pos == 0 && t.keyed != nil {
		ts, err := operator.NewTimerService(t.keyed, octx)
		if err != nil {
			return err
		}
		timers, t.time.timers, t.time.onTimer = ts, ts, l
	}
	octx.BindTime(&t.time.stamp, chainTime{t: t, pos: pos}, timers)
	if _, ok := op.(operator.WatermarkGenerator); ok && pos >= 0 {
		t.time.gens = append(t.time.gens, pos)
	}
	return nil
}

// startTime starts the periodic watermark generation when the chain has generators.
func (t *task) startTime() {
	slices.Reverse(t.time.gens) // bound from the tail to the head
	if len(t.time.gens) > 0 {
		t.time.wmTick = time.NewTicker(t.jobCfg.Duration(config.AutoWatermarkInterval))
	}
	t.time.procTimer = time.NewTimer(time.Hour)
	t.time.procTimer.Stop()
}

// stopTime stops the task's time tickers.
func (t *task) stopTime() {
	if t.time.wmTick != nil {
		t.time.wmTick.Stop()
	}
	if t.time.procTimer != nil {
		t.time.procTimer.Stop()
	}
}

// wmTicks is the channel of periodic watermark ticks (nil when there are none).
func (t *task) wmTicks() <-chan time.Time {
	if t.time.wmTick == nil {
		return nil
	}
	return t.time.wmTick.C
}

// periodicEmit lets every watermark generator emit its watermark, in chain order.
func (t *task) periodicEmit() error {
	for _, i := range t.time.gens {
		if err := t.ops[i].(operator.WatermarkGenerator).OnPeriodicEmit(); err != nil {
			return err
		}
	}
	return nil
}

// fireProcessingTimers fires the processing-time timers that are due: those before the
// clock's current millisecond. A timer at t fires only once the clock reads t+1 or later, as in
// Flink (its timer service schedules a timer 1 ms after its time): a record the task
// processes in millisecond t is assigned to t, so a window ending at t+1 fires after the last
// of its records, not before some of them (which would open the window again and fire it twice).
func (t *task) fireProcessingTimers() error {
	t.time.procAt = 0
	now := t.env.now().UnixMilli()
	return t.time.timers.Fire(operator.ProcessingTime, now-1, t.time.onTimer)
}

// armProcessingTimer sets the wake-up for the earliest processing-time timer, at the
// millisecond after its time (see fireProcessingTimers).
func (t *task) armProcessingTimer() {
	if t.time.timers == nil {
		return
	}
	next, ok := t.time.timers.Next(operator.ProcessingTime)
	if !ok || next == t.time.procAt {
		return
	}
	t.time.procAt = next
	at := next
	if at < math.MaxInt64 {
		at++
	}
	t.time.procTimer.Reset(time.Until(time.UnixMilli(at)))
}

// procTimerC is the channel of the processing-time wake-up (nil when there are no timers).
func (t *task) procTimerC() <-chan time.Time {
	if t.time.timers == nil {
		return nil
	}
	return t.time.procTimer.C
}

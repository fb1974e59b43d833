package worker

import (
	"sync/atomic"
	"time"

	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// This file holds a task's meter: the cumulative counters and times behind Flink's task
// metrics (numRecordsIn, busyTimeMsPerSecond, …). The task goroutine writes them with atomic
// stores and adds, without locks or allocations; heartbeats and metric scrapes read them and
// turn them into rates over the interval since their own previous reading.

// meterEpoch starts the meters' clock.
var meterEpoch = time.Now()

// meterNow is the meters' clock: monotonic nanoseconds since meterEpoch, plus one, so that a
// reading is above every total of time measured before it.
func meterNow() int64 { return int64(time.Since(meterEpoch)) + 1 }

// spell accumulates the time a task spends in one state (waiting for input; waiting for room
// in its output), readable by other goroutines while the task is in it. One atomic: outside a
// spell it holds the total; inside one, the total minus the spell's start, which is negative
// because a start is above every total (meterNow).
type spell struct{ v atomic.Int64 }

func (s *spell) begin(now int64) { s.v.Add(-now) }
func (s *spell) end(now int64)   { s.v.Add(now) }

// total is the time spent in the state so far, the current spell included.
func (s *spell) total() int64 {
	v := s.v.Load()
	if v < 0 {
		v += meterNow()
	}
	return max(v, 0)
}

// taskMeter is what a task measures about itself.
type taskMeter struct {
	recordsIn, recordsOut atomic.Int64
	bytesIn, bytesOut     atomic.Int64
	// running is the meter clock when the task's processing loop started (0 before); the time
	// since, less idle and backPressured, is busy.
	running       atomic.Int64
	idle          spell
	backPressured spell
	// inputWM and outputWM are the task's input and output watermarks (operator.MinWatermark:
	// none yet).
	inputWM, outputWM atomic.Int64
	// alignment and startDelay are the last checkpoint's barrier alignment and the delay from
	// its trigger to the task taking it (Flink's checkpointAlignmentTime and
	// checkpointStartDelayNanos), in nanoseconds.
	alignment, startDelay atomic.Int64
	lateDropped           atomic.Int64
	// operators are the chain's operators' metrics, in chain order, once the task set them up.
	operators atomic.Pointer[[]operatorMetrics]
}

// operatorMetrics are one chained operator's metrics.
type operatorMetrics struct {
	name    string
	metrics *operator.Metrics
}

// lateDropper is an operator that counts late records, and the metric it is exported as.
type lateDropper struct {
	operator.LateDropper
	metric *operator.Metric
}

func newTaskMeter() *taskMeter {
	m := &taskMeter{}
	m.inputWM.Store(operator.MinWatermark)
	m.outputWM.Store(operator.MinWatermark)
	return m
}

// start marks the start of the task's processing loop; a restarted loop keeps the first mark.
func (m *taskMeter) start() { m.running.CompareAndSwap(0, meterNow()) }

// isBackPressured reports whether the task waits for room in its output now.
func (m *taskMeter) isBackPressured() bool { return m.backPressured.v.Load() < 0 }

// meterReading is a taskMeter read at one moment.
type meterReading struct {
	at                    int64 // meter clock
	running, idle, bp     int64 // nanoseconds
	recordsIn, recordsOut int64
	bytesIn, bytesOut     int64
}

func (m *taskMeter) read() meterReading {
	r := meterReading{
		recordsIn: m.recordsIn.Load(), recordsOut: m.recordsOut.Load(),
		bytesIn: m.bytesIn.Load(), bytesOut: m.bytesOut.Load(),
		idle: m.idle.total(), bp: m.backPressured.total(),
	}
	r.at = meterNow()
	if s := m.running.Load(); s > 0 {
		r.running = max(r.at-s, r.idle+r.bp)
	}
	return r
}

// load is the task's load between two readings (prev zero: since the task started).
func (m *taskMeter) load(prev, cur meterReading) *pb.TaskLoad {
	l := &pb.TaskLoad{BytesIn: cur.bytesIn, BytesOut: cur.bytesOut}
	if in, out := m.inputWM.Load(), m.outputWM.Load(); in != operator.MinWatermark || out != operator.MinWatermark {
		l.HasWatermarks, l.InputWatermark, l.OutputWatermark = true, in, out
	}
	if prev.at == 0 {
		prev.at = m.running.Load()
	}
	secs := float64(cur.at-prev.at) / float64(time.Second)
	if prev.at <= 0 || secs <= 0 {
		return l
	}
	l.RecordsInPerSecond = float64(cur.recordsIn-prev.recordsIn) / secs
	l.RecordsOutPerSecond = float64(cur.recordsOut-prev.recordsOut) / secs
	perSecond := func(ns int64) float64 { return min(max(float64(ns)/float64(time.Millisecond)/secs, 0), 1000) }
	idle, bp := perSecond(cur.idle-prev.idle), perSecond(cur.bp-prev.bp)
	l.IdleTimeMsPerSecond, l.BackPressuredTimeMsPerSecond = idle, bp
	l.BusyTimeMsPerSecond = min(max(perSecond(cur.running-prev.running)-idle-bp, 0), 1000)
	return l
}

// loadSampler turns task meters into loads over the interval since its previous reading of
// the same task. It is not safe for concurrent use.
type loadSampler struct {
	prev map[*taskMeter]meterReading
	seen map[*taskMeter]bool
}

func newLoadSampler() *loadSampler {
	return &loadSampler{prev: map[*taskMeter]meterReading{}, seen: map[*taskMeter]bool{}}
}

// sample returns m's load since the previous sample of m.
func (s *loadSampler) sample(m *taskMeter) *pb.TaskLoad {
	cur := m.read()
	l := m.load(s.prev[m], cur)
	s.prev[m], s.seen[m] = cur, true
	return l
}

// forgetUnseen drops the readings of meters not sampled since the last call (ended tasks).
func (s *loadSampler) forgetUnseen() {
	for m := range s.prev {
		if !s.seen[m] {
			delete(s.prev, m)
		}
	}
	clear(s.seen)
}

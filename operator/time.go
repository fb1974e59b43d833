package operator

import (
	"errors"
	"math"
	"slices"
)

// Event time, after Flink's: a record may carry an event timestamp (epoch milliseconds), and
// watermarks travel in-band with the records. A watermark W says that no more records with a
// timestamp at or below W will come (those that still do are late). A task's input watermark
// is the minimum over its active input channels; it never goes backwards. Watermarks are not
// checkpointed: after a restore they start again from MinWatermark and are re-generated.

const (
	// NoTimestamp is the timestamp of a record that carries none.
	NoTimestamp int64 = math.MinInt64
	// MinWatermark is the watermark before the first: no timestamp is at or below it.
	MinWatermark int64 = math.MinInt64
	// MaxWatermark ends event time: a bounded input sends it after its last record, so that
	// every window and event-time timer fires.
	MaxWatermark int64 = math.MaxInt64
)

// errNoEventTime is returned when an operator emits a watermark from a context that has no
// way to send it (a bare Context in a test).
var errNoEventTime = errors.New("this context has no watermark output")

// TimeOutput is where an operator's watermarks and watermark statuses go: the operators after
// it in the chain, then the task's outputs. The task sets it.
type TimeOutput interface {
	EmitWatermark(wm int64) error
	EmitWatermarkStatus(idle bool) error
}

// WatermarkListener operators see their input watermark advance. OnWatermark(wm) comes after
// every record before the watermark and after the event-time timers due at wm fired; records
// it emits go downstream before the watermark.
type WatermarkListener interface {
	OnWatermark(wm int64) error
}

// WatermarkGenerator operators make the watermarks of the stream after them (the watermark
// operator): watermarks from upstream stop at them, except the final MaxWatermark. The task
// calls OnPeriodicEmit every pipeline.auto-watermark-interval; the generator emits through
// Context.EmitWatermark and Context.MarkIdle.
type WatermarkGenerator interface {
	OnPeriodicEmit() error
}

// LateDropper operators drop records that come too late for event time (windows beyond their
// allowed lateness, joins) and count them, as Flink's numLateRecordsDropped metric.
// NumLateRecordsDropped is the count since the operator was built (it is not checkpointed); call
// it on the task's goroutine.
type LateDropper interface {
	NumLateRecordsDropped() int64
}

// Timestamp returns the event timestamp of the record being processed, NoTimestamp when it has
// none. Records the operator emits carry it unless it calls SetTimestamp.
func (c *Context) Timestamp() int64 {
	if c.stamp == nil {
		return NoTimestamp
	}
	return *c.stamp
}

// SetTimestamp sets the event timestamp of the records the operator emits next (a window sets
// its end − 1 before it emits its result, as Flink does).
func (c *Context) SetTimestamp(ts int64) {
	if c.stamp != nil {
		*c.stamp = ts
	}
}

// CurrentWatermark returns the operator's input watermark (MinWatermark before the first).
func (c *Context) CurrentWatermark() int64 {
	if !c.hasWatermark {
		return MinWatermark
	}
	return c.watermark
}

// EmitWatermark sends a watermark to the operators after this one (for watermark generators;
// other operators' input watermarks are forwarded by the task).
func (c *Context) EmitWatermark(wm int64) error {
	if c.timeOut == nil {
		return errNoEventTime
	}
	return c.timeOut.EmitWatermark(wm)
}

// MarkIdle says whether the stream after this generator is idle: an idle stream does not hold
// back its consumers' watermarks until it is marked active again.
func (c *Context) MarkIdle(idle bool) error {
	if c.timeOut == nil {
		return errNoEventTime
	}
	return c.timeOut.EmitWatermarkStatus(idle)
}

// Timers returns the operator's timer service, nil when it does not run on a keyed stream.
func (c *Context) Timers() *TimerService { return c.timers }

// BindTime connects the context to its task's event time (the task calls it before Open):
// stamp holds the timestamp of the record being processed, shared by the chain; out takes the
// operator's watermarks; timers is its timer service (nil when not keyed).
func (c *Context) BindTime(stamp *int64, out TimeOutput, timers *TimerService) {
	c.stamp, c.timeOut, c.timers = stamp, out, timers
}

// ShareSplits makes c use the split information of the context of the operator before it in
// the chain (the task calls it, so that a source's splits reach its watermark field).
func (c *Context) ShareSplits(prev *Context) { c.splits = prev.splitState() }

// AdvanceWatermark sets the operator's input watermark (the task calls it).
func (c *Context) AdvanceWatermark(wm int64) {
	c.watermark, c.hasWatermark = wm, true
}

// SideOutput returns the output of the operator's side output name (a window's "late"), nil
// when nothing reads it.
func (c *Context) SideOutput(name string) Output { return c.sides[name] }

// BindSideOutputs gives the context the outputs of its operator's side outputs that are read
// (the task calls it before Open).
func (c *Context) BindSideOutputs(sides map[string]Output) { c.sides = sides }

// splitInfo is what a source tells the watermark generator after it about its splits (Kafka
// partitions): which it reads, and which the record being emitted comes from. A task's chain
// shares one.
type splitInfo struct {
	current  int
	declared []int
}

// DeclareSplit says the source reads split id from now on (a Kafka partition assigned to it):
// a watermark field applies per split, and a split without records holds the watermark back
// until it has some or is idle, as in Flink.
func (c *Context) DeclareSplit(id int) {
	s := c.splitState()
	if !slices.Contains(s.declared, id) {
		s.declared = append(s.declared, id)
	}
}

// SetSplit says which split the records the source emits next come from.
func (c *Context) SetSplit(id int) { c.splitState().current = id }

// splitState returns the chain's split information, creating it.
func (c *Context) splitState() *splitInfo {
	if c.splits == nil {
		c.splits = &splitInfo{}
	}
	return c.splits
}

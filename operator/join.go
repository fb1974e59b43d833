package operator

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/internal/window"
	"github.com/goflink/goflink/job/spec"
	"github.com/goflink/goflink/record"
	"github.com/goflink/goflink/state"
)

// WindowJoin joins two keyed streams (inputs: [left, right], both key-by operators with keys
// of one type) in tumbling (size) or sliding (size, slide) windows, as Flink's
// DataStream.join(...).window(...): when a window fires it emits every pair of a left and a
// right record with equal keys whose timestamps are in the window. An output row holds the
// left record's fields, then the right's (a right field whose name the left has is renamed
// right_<name>), then window_start and window_end; its timestamp is the window's end − 1.
// A record whose windows have all fired is late and dropped.
var WindowJoin = Define(Type{Name: "window-join", Keyed: true, Inputs: 2,
	Fields: []string{"size", "slide", "offset", "time"}}, planWindowJoin, newWindowJoin)

// IntervalJoin joins two keyed streams (inputs: [left, right]) on equal keys where the right
// record's timestamp is within between: [lower, upper] of the left's (Flink's
// KeyedStream.intervalJoin): a pair is emitted as soon as both records are there, with the
// later of the two timestamps. The output row holds the left's fields, then the right's
// (renamed as for window-join). A record is kept until the watermark shows that no partner can
// come any more, and a record behind the watermark is late and dropped.
var IntervalJoin = Define(Type{Name: "interval-join", Keyed: true, Inputs: 2,
	Fields: []string{"between"}}, planIntervalJoin, newIntervalJoin)

// joinConfig is the configuration of both joins; durations in milliseconds.
type joinConfig struct {
	Left       []record.Field `json:"left"`
	Right      []record.Field `json:"right"`
	Size       int64          `json:"size_ms,omitempty"`
	Slide      int64          `json:"slide_ms,omitempty"`
	Offset     int64          `json:"offset_ms,omitempty"`
	Processing bool           `json:"processing_time,omitempty"`
	Lower      int64          `json:"lower_ms,omitempty"`
	Upper      int64          `json:"upper_ms,omitempty"`
}

// planJoinInputs checks both inputs and returns the output fields of the pair: the left's,
// then the right's renamed where they clash.
func planJoinInputs(p *Planner, c *joinConfig) ([]record.Field, bool) {
	if len(p.Ins) != 2 {
		return nil, true
	}
	l, r := p.Ins[0], p.Ins[1]
	c.Left, c.Right = l.Fields, r.Fields
	fields := append([]record.Field(nil), l.Fields...)
	taken := map[string]bool{}
	for _, f := range l.Fields {
		taken[f.Name] = true
	}
	for _, f := range r.Fields {
		if taken[f.Name] {
			f.Name = "right_" + f.Name
		}
		if taken[f.Name] {
			p.Problemf("the right input's field %q clashes with the left's fields even when renamed; rename it with a map first", f.Name)
			continue
		}
		taken[f.Name] = true
		fields = append(fields, f)
	}
	return fields, l.Open || r.Open
}

func planWindowJoin(p *Planner) (joinConfig, *Shape) {
	var c joinConfig
	size, hasSize := windowDuration(p, "size", true)
	slide, hasSlide := windowDuration(p, "slide", true)
	c.Offset, _ = windowDuration(p, "offset", false)
	c.Size, c.Slide = size, size
	switch {
	case !hasSize:
		p.Require("size")
	case hasSlide:
		c.Slide = slide
		if slide > size && size > 0 {
			p.At("slide").Problemf("slide (%v) is larger than the size (%v)", ms(slide), ms(size))
		}
	}
	if t, ok := p.Choice("time", "event", "event", "processing"); ok {
		c.Processing = t == "processing"
	}
	if !c.Processing && !p.Timed {
		p.Problemf("an event-time join needs a watermark upstream of both inputs, or time: processing")
	}
	fields, open := planJoinInputs(p, &c)
	for _, name := range []string{"window_start", "window_end"} {
		if slices.ContainsFunc(fields, func(f record.Field) bool { return f.Name == name }) {
			// A window's output read as it is: the join's own bounds would clash with its.
			side := "right"
			if slices.ContainsFunc(c.Left, func(f record.Field) bool { return f.Name == name }) {
				side = "left"
			}
			p.Problemf("the %s input has a field %q, which the join adds itself: rename or drop it with a map before the key-by", side, name)
			continue
		}
		fields = append(fields, record.Field{Name: name, Type: record.Timestamp})
	}
	return c, NewShape(fields, open)
}

func planIntervalJoin(p *Planner) (joinConfig, *Shape) {
	var c joinConfig
	if e, ok := p.Require("between"); ok {
		if list, ok := e.List(); ok {
			if len(list) != 2 {
				e.Problemf("want [lower, upper], e.g. [-5s, 5s], got %d values", len(list))
			} else {
				lower, okL := signedMillis(list[0].At(e.Path() + "[0]"))
				upper, okU := signedMillis(list[1].At(e.Path() + "[1]"))
				if okL && okU && lower > upper {
					e.Problemf("the lower bound (%v) is above the upper bound (%v)", ms(lower), ms(upper))
				}
				c.Lower, c.Upper = lower, upper
			}
		}
	}
	if !p.Timed {
		p.Problemf("an interval join runs in event time: it needs a watermark upstream of both inputs")
	}
	fields, open := planJoinInputs(p, &c)
	return c, NewShape(fields, open)
}

// signedMillis reads a duration that may be negative ("-5s"), in whole milliseconds.
func signedMillis(v spec.Value) (int64, bool) {
	s, neg := v.Text(), false
	if len(s) > 0 && s[0] == '-' {
		s, neg = s[1:], true
	}
	d, err := config.ParseDuration(s)
	if err != nil {
		v.Problemf("%v", err)
		return 0, false
	}
	if d%time.Millisecond != 0 {
		v.Problemf("must be a whole number of milliseconds, got %v", d)
		return 0, false
	}
	if neg {
		d = -d
	}
	return d.Milliseconds(), true
}

// joinSide is one input's buffered records of the current key, with their timestamps.
type joinSide struct {
	schema *record.Schema
	list   *state.ListState[timedRow]
}

// timedRow is a buffered record and its timestamp.
type timedRow struct {
	ts  int64
	row record.Row
}

// joinBase is what both joins share: the two sides, the output row and the timers.
type joinBase struct {
	Base
	c       joinConfig
	sides   [2]joinSide
	timers  *TimerService
	domain  TimeDomain
	row     record.Row
	dropped int64
}

func newJoinBase(c joinConfig, extra int) (joinBase, error) {
	var j joinBase
	j.c = c
	for i, fields := range [][]record.Field{c.Left, c.Right} {
		s, err := record.NewSchema(fields...)
		if err != nil {
			return j, fmt.Errorf("input %d: %w", i, err)
		}
		j.sides[i].schema = s
	}
	j.row = make(record.Row, len(c.Left)+len(c.Right)+extra)
	if c.Processing {
		j.domain = ProcessingTime
	}
	return j, nil
}

func (j *joinBase) InitializeState(sc StateContext) error {
	kb := sc.KeyedBackend()
	if kb == nil {
		return errNotKeyed
	}
	for i, name := range []string{"join/left", "join/right"} {
		l, err := state.NewListState(kb, name, state.Codec[timedRow](timedRowCodec{state.RowCodec(j.sides[i].schema)}))
		if err != nil {
			return err
		}
		j.sides[i].list = l
	}
	return nil
}

func (j *joinBase) Open(ctx *Context, out Output) error {
	if ctx.Timers() == nil {
		return errors.New("join: no timer service (its inputs must be keyed)")
	}
	j.timers = ctx.Timers()
	return j.Base.Open(ctx, out)
}

func (j *joinBase) Close() error {
	if j.dropped > 0 && j.ctx != nil {
		j.ctx.Log().Info("join dropped late records", "dropped", j.dropped)
	}
	return nil
}

// Process is not used: the task calls ProcessInput.
func (j *joinBase) Process(record.Row) error {
	return errors.New("a join reads two inputs: the task must call ProcessInput")
}

// now returns the record's time and the watermark it is judged against.
func (j *joinBase) now() (ts, wm int64, err error) {
	if j.domain == ProcessingTime {
		t := j.timers.CurrentProcessingTime()
		return t, t, nil
	}
	if ts = j.ctx.Timestamp(); ts == NoTimestamp {
		return 0, 0, j.UserError(errors.New("an event-time join got a record without a timestamp"))
	}
	return ts, j.ctx.CurrentWatermark(), nil
}

// emitPair emits the pair (l, r) followed by extra values, with timestamp ts.
func (j *joinBase) emitPair(l, r record.Row, ts int64, extra ...record.Value) error {
	n := copy(j.row, l)
	n += copy(j.row[n:], r)
	copy(j.row[n:], extra)
	j.ctx.SetTimestamp(ts)
	return j.out.Emit(j.row)
}

// prune keeps the records of side i for which keep holds.
func (j *joinBase) prune(i int, keep func(timedRow) bool) error {
	all, err := j.sides[i].list.Get()
	if err != nil {
		return err
	}
	kept := all[:0]
	for _, e := range all {
		if keep(e) {
			kept = append(kept, e)
		}
	}
	if len(kept) == len(all) {
		return nil
	}
	return j.sides[i].list.Update(kept)
}

// windowJoin is the runtime of WindowJoin.
type windowJoin struct {
	joinBase
	sliding window.Sliding
}

func newWindowJoin(c joinConfig, _, _ *record.Schema) (any, error) {
	base, err := newJoinBase(c, 2)
	if err != nil {
		return nil, err
	}
	j := &windowJoin{joinBase: base, sliding: window.Sliding{Size: c.Size, Slide: c.Slide, Offset: c.Offset}}
	return j, j.sliding.Validate()
}

func (j *windowJoin) ProcessInput(input int, row record.Row) error {
	ts, wm, err := j.now()
	if err != nil {
		return err
	}
	p := j.sliding.PaneOf(ts)
	last := j.sliding.LastWindow(p)
	if j.domain == EventTime && last.MaxTimestamp() <= wm {
		j.dropped++
		return nil
	}
	if err := j.sides[input].list.Add(timedRow{ts, row.Clone()}); err != nil {
		return err
	}
	// One timer per window the record is in (those that have not fired).
	for end := j.sliding.FirstWindow(p).End; end <= last.End; end += j.sliding.Slide {
		if end-1 > wm || j.domain == ProcessingTime {
			if err := j.timers.Register(j.domain, end-1); err != nil {
				return err
			}
		}
	}
	return nil
}

// OnTimer joins the window that ends at the timer and drops the records no later window
// needs.
func (j *windowJoin) OnTimer(t Timer) error {
	w := j.sliding.WindowEnding(t.Time + 1)
	in := func(e timedRow) bool { return e.ts >= w.Start && e.ts < w.End }
	lefts, err := j.sides[0].list.Get()
	if err != nil {
		return err
	}
	rights, err := j.sides[1].list.Get()
	if err != nil {
		return err
	}
	start, end := record.TimeValue(time.UnixMilli(w.Start)), record.TimeValue(time.UnixMilli(w.End))
	for _, l := range lefts {
		if !in(l) {
			continue
		}
		for _, r := range rights {
			if in(r) {
				if err := j.emitPair(l.row, r.row, w.MaxTimestamp(), start, end); err != nil {
					return err
				}
			}
		}
	}
	live := func(e timedRow) bool { return j.sliding.LastWindow(j.sliding.PaneOf(e.ts)).MaxTimestamp() > t.Time }
	if err := j.prune(0, live); err != nil {
		return err
	}
	return j.prune(1, live)
}

// intervalJoin is the runtime of IntervalJoin.
type intervalJoin struct{ joinBase }

func newIntervalJoin(c joinConfig, _, _ *record.Schema) (any, error) {
	base, err := newJoinBase(c, 0)
	if err != nil {
		return nil, err
	}
	return &intervalJoin{base}, nil
}

// keepFor is how long after its timestamp a record of side i may still meet a partner.
func (j *intervalJoin) keepFor(i int) int64 {
	if i == 0 {
		return max(j.c.Upper, 0)
	}
	return max(-j.c.Lower, 0)
}

func (j *intervalJoin) ProcessInput(input int, row record.Row) error {
	ts, wm, err := j.now()
	if err != nil {
		return err
	}
	if wm != MinWatermark && ts < wm {
		j.dropped++
		return nil
	}
	others, err := j.sides[1-input].list.Get()
	if err != nil {
		return err
	}
	for _, o := range others {
		l, r := timedRow{ts, row}, o
		if input == 1 {
			l, r = o, timedRow{ts, row}
		}
		if r.ts >= l.ts+j.c.Lower && r.ts <= l.ts+j.c.Upper {
			if err := j.emitPair(l.row, r.row, max(l.ts, r.ts)); err != nil {
				return err
			}
		}
	}
	if err := j.sides[input].list.Add(timedRow{ts, row.Clone()}); err != nil {
		return err
	}
	return j.timers.Register(EventTime, satAdd(ts, j.keepFor(input)))
}

// OnTimer drops the records that can no longer meet a partner.
func (j *intervalJoin) OnTimer(t Timer) error {
	for i := range j.sides {
		if err := j.prune(i, func(e timedRow) bool { return satAdd(e.ts, j.keepFor(i)) > t.Time }); err != nil {
			return err
		}
	}
	return nil
}

// timedRowCodec encodes a buffered record: its timestamp (8 bytes) and the row. Decoded rows
// own their memory.
type timedRowCodec struct{ row state.Codec[record.Row] }

func (c timedRowCodec) Append(b []byte, v timedRow) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(v.ts))
	return c.row.Append(b, v.row)
}

func (c timedRowCodec) Decode(b []byte) (timedRow, error) {
	if len(b) < 8 {
		return timedRow{}, fmt.Errorf("%w: buffered record truncated", state.ErrCorrupt)
	}
	row, err := c.row.Decode(b[8:])
	if err != nil {
		return timedRow{}, err
	}
	return timedRow{ts: int64(binary.LittleEndian.Uint64(b)), row: row}, nil
}

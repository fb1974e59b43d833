package operator

import (
	"encoding/binary"
	"errors"
	"fmt"
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
// right_<name>), then window_start and window_end (inputs' fields of these names, say of
// two window results, are renamed left_<name> and right_<name>); its timestamp is the
// window's end − 1.
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
// then the right's. Own are the fields the join adds after them (a window join's window_start
// and window_end): a left field of such a name is renamed left_<name>, a right field that
// clashes with them or with the left's fields right_<name>.
func planJoinInputs(p *Planner, c *joinConfig, own ...string) ([]record.Field, bool) {
	if len(p.Ins) != 2 {
		return nil, true
	}
	l, r := p.Ins[0], p.Ins[1]
	c.Left, c.Right = l.Fields, r.Fields
	taken := map[string]bool{}
	for _, name := range own {
		taken[name] = true
	}
	var fields []record.Field
	for _, f := range l.Fields {
		if taken[f.Name] {
			f.Name = "left_" + f.Name
		}
		if taken[f.Name] {
			p.Problemf("the left input's field %q clashes with the join's own fields even when renamed; rename it with a map first", f.Name)
			continue
		}
		taken[f.Name] = true
		fields = append(fields, f)
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
	c.Offset, _ = windowOffset(p)
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
	fields, open := planJoinInputs(p, &c, "window_start", "window_end")
	fields = append(fields, record.Field{Name: "window_start", Type: record.Timestamp}, record.Field{Name: "window_end", Type: record.Timestamp})
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

// joinSide is one input's buffered records of the current key. They are kept encoded, one
// after another in one byte buffer per key (a value state): a few objects for the garbage
// collector instead of a row per record, a snapshot copies bytes, and a row is decoded only
// when it may have a partner. An entry is the record's timestamp (8 bytes), the length of
// the encoded row (uvarint) and the row (record.AppendRow).
type joinSide struct {
	schema *record.Schema
	buf    *state.ValueState[[]byte]
	enc    []byte // scratch for encoding a row
}

// add appends a record to the current key's buffer. It appends in place (the state allows
// appending to a byte value: what lies beyond a value's length is not part of it).
func (s *joinSide) add(ts int64, row record.Row) error {
	b, _, err := s.buf.Value()
	if err != nil {
		return err
	}
	s.enc = record.AppendRow(s.enc[:0], s.schema, row)
	b = binary.LittleEndian.AppendUint64(b, uint64(ts))
	b = binary.AppendUvarint(b, uint64(len(s.enc)))
	return s.buf.Update(append(b, s.enc...))
}

// entries returns the current key's buffer.
func (s *joinSide) entries() ([]byte, error) {
	b, _, err := s.buf.Value()
	return b, err
}

// nextEntry splits the first entry off b: its timestamp, its encoded row, the whole entry
// and the rest of b.
func nextEntry(b []byte) (ts int64, row, entry, rest []byte, err error) {
	if len(b) < 8 {
		return 0, nil, nil, nil, fmt.Errorf("%w: buffered record truncated", state.ErrCorrupt)
	}
	l, k := binary.Uvarint(b[8:])
	if k <= 0 || uint64(len(b)-8-k) < l {
		return 0, nil, nil, nil, fmt.Errorf("%w: buffered record truncated", state.ErrCorrupt)
	}
	n := 8 + k + int(l)
	return int64(binary.LittleEndian.Uint64(b)), b[8+k : n], b[:n], b[n:], nil
}

// decode decodes an encoded row of the side into dst; its strings point into the buffer,
// which is never modified (pruning makes a new one).
func (s *joinSide) decode(enc []byte, dst record.Row) (record.Row, error) {
	if dst == nil {
		dst = make(record.Row, s.schema.Len())
	}
	if _, err := record.DecodeRow(enc, s.schema, dst); err != nil {
		return nil, err
	}
	return dst, nil
}

// prune keeps the current key's records whose timestamp keep holds.
func (s *joinSide) prune(keep func(ts int64) bool) error {
	b, err := s.entries()
	if err != nil || len(b) == 0 {
		return err
	}
	var kept []byte
	dropped := false
	for rest := b; len(rest) > 0; {
		ts, _, entry, next, err := nextEntry(rest)
		if err != nil {
			return err
		}
		if keep(ts) {
			if dropped {
				kept = append(kept, entry...)
			}
		} else if !dropped {
			dropped = true
			kept = append(make([]byte, 0, len(b)-len(entry)), b[:len(b)-len(rest)]...)
		}
		rest = next
	}
	switch {
	case !dropped:
		return nil
	case len(kept) == 0:
		return s.buf.Clear()
	}
	return s.buf.Update(kept)
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
		st, err := state.NewValueState(kb, name, state.Codec[[]byte](state.BytesCodec{}))
		if err != nil {
			return err
		}
		j.sides[i].buf = st
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

// NumLateRecordsDropped is how many records came too late to join (LateDropper).
func (j *joinBase) NumLateRecordsDropped() int64 { return j.dropped }

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
	if err := j.sides[input].add(ts, row); err != nil {
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
// needs. Rows are decoded only when both sides have records in the window.
func (j *windowJoin) OnTimer(t Timer) error {
	w := j.sliding.WindowEnding(t.Time + 1)
	in := func(ts int64) bool { return ts >= w.Start && ts < w.End }
	lefts, err := j.sides[0].entries()
	if err != nil {
		return err
	}
	rights, err := j.sides[1].entries()
	if err != nil {
		return err
	}
	if len(lefts) > 0 && len(rights) > 0 {
		if err := j.emitWindow(w, lefts, rights, in); err != nil {
			return err
		}
	}
	live := func(ts int64) bool { return j.sliding.LastWindow(j.sliding.PaneOf(ts)).MaxTimestamp() > t.Time }
	if err := j.sides[0].prune(live); err != nil {
		return err
	}
	return j.sides[1].prune(live)
}

// emitWindow emits every pair of a left and a right record in window w.
func (j *windowJoin) emitWindow(w window.Window, lefts, rights []byte, in func(int64) bool) error {
	var rs []record.Row
	for rest := rights; len(rest) > 0; {
		ts, enc, _, next, err := nextEntry(rest)
		if err != nil {
			return err
		}
		if in(ts) {
			r, err := j.sides[1].decode(enc, nil)
			if err != nil {
				return err
			}
			rs = append(rs, r)
		}
		rest = next
	}
	if len(rs) == 0 {
		return nil
	}
	start, end := record.TimeValue(time.UnixMilli(w.Start)), record.TimeValue(time.UnixMilli(w.End))
	l := make(record.Row, j.sides[0].schema.Len())
	for rest := lefts; len(rest) > 0; {
		ts, enc, _, next, err := nextEntry(rest)
		if err != nil {
			return err
		}
		rest = next
		if !in(ts) {
			continue
		}
		if _, err := j.sides[0].decode(enc, l); err != nil {
			return err
		}
		for _, r := range rs {
			if err := j.emitPair(l, r, w.MaxTimestamp(), start, end); err != nil {
				return err
			}
		}
	}
	return nil
}

// intervalJoin is the runtime of IntervalJoin.
type intervalJoin struct {
	joinBase
	scratch [2]record.Row // decoded partners of each side
}

func newIntervalJoin(c joinConfig, _, _ *record.Schema) (any, error) {
	base, err := newJoinBase(c, 0)
	if err != nil {
		return nil, err
	}
	return &intervalJoin{joinBase: base}, nil
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
	other := &j.sides[1-input]
	others, err := other.entries()
	if err != nil {
		return err
	}
	for rest := others; len(rest) > 0; {
		ots, enc, _, next, err := nextEntry(rest)
		if err != nil {
			return err
		}
		rest = next
		lts, rts := ts, ots
		if input == 1 {
			lts, rts = ots, ts
		}
		if rts < lts+j.c.Lower || rts > lts+j.c.Upper {
			continue
		}
		if j.scratch[1-input], err = other.decode(enc, j.scratch[1-input]); err != nil {
			return err
		}
		l, r := row, j.scratch[1-input]
		if input == 1 {
			l, r = r, l
		}
		if err := j.emitPair(l, r, max(lts, rts)); err != nil {
			return err
		}
	}
	if err := j.sides[input].add(ts, row); err != nil {
		return err
	}
	return j.timers.Register(EventTime, satAdd(ts, j.keepFor(input)))
}

// OnTimer drops the records that can no longer meet a partner.
func (j *intervalJoin) OnTimer(t Timer) error {
	for i := range j.sides {
		if err := j.sides[i].prune(func(ts int64) bool { return satAdd(ts, j.keepFor(i)) > t.Time }); err != nil {
			return err
		}
	}
	return nil
}

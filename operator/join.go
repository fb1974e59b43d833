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
	for i, in := range []*Shape{l, r} {
		side := [...]string{"left", "right"}[i]
		for _, f := range in.Fields {
			if taken[f.Name] {
				f.Name = side + "_" + f.Name
			}
			if taken[f.Name] {
				p.Problemf("the %s input's field %q clashes with the other fields of the pair even when renamed; rename it with a map first", side, f.Name)
				continue
			}
			taken[f.Name] = true
			fields = append(fields, f)
		}
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
		checkPanes(p, size, slide)
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

// joinSide is one input's buffered records of the current key, in buckets of time (map
// state: a window join's pane start, an interval join's timestamp → the bucket's records), so
// that the records a window or a bound needs are found, and those that expired dropped, by
// bucket rather than by scanning them all. A bucket's records are kept encoded, one after
// another in one byte value: few objects for the garbage collector, a snapshot copies bytes,
// and a row is decoded only when it may have a partner. An entry is the record's timestamp
// (8 bytes), the length of the encoded row (uvarint) and the row (record.AppendRow).
type joinSide struct {
	schema  *record.Schema
	buckets *state.MapState[int64, []byte]
	enc     []byte // scratch for encoding a row
}

// add appends a record at ts to the current key's bucket b. It appends in place (a state
// allows appending to a byte value: what lies beyond a value's length is not part of it).
// It reports whether the bucket is new.
func (s *joinSide) add(bucket, ts int64, row record.Row) (bool, error) {
	b, had, err := s.buckets.Get(bucket)
	if err != nil {
		return false, err
	}
	s.enc = record.AppendRow(s.enc[:0], s.schema, row)
	b = slices.Grow(b, 8+record.UvarintLen(uint64(len(s.enc)))+len(s.enc))
	b = binary.LittleEndian.AppendUint64(b, uint64(ts))
	b = binary.AppendUvarint(b, uint64(len(s.enc)))
	return !had, s.buckets.Put(bucket, append(b, s.enc...))
}

// forEach calls fn with the timestamp and the encoded row of every record in b, a bucket's
// value, until fn returns an error.
func forEach(b []byte, fn func(ts int64, enc []byte) error) error {
	for len(b) > 0 {
		if len(b) < 8 {
			return fmt.Errorf("%w: buffered record truncated", state.ErrCorrupt)
		}
		l, k := binary.Uvarint(b[8:])
		if k <= 0 || uint64(len(b)-8-k) < l {
			return fmt.Errorf("%w: buffered record truncated", state.ErrCorrupt)
		}
		n := 8 + k + int(l)
		if err := fn(int64(binary.LittleEndian.Uint64(b)), b[8+k:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// decode decodes an encoded row of the side into dst (allocated when nil); its strings point
// into the bucket's value, whose bytes are never modified.
func (s *joinSide) decode(enc []byte, dst record.Row) (record.Row, error) {
	if dst == nil {
		dst = make(record.Row, s.schema.Len())
	}
	if _, err := record.DecodeRow(enc, s.schema, dst); err != nil {
		return nil, err
	}
	return dst, nil
}

// joinBase is what both joins share: the two sides, the output row and the timers.
type joinBase struct {
	Base
	kb      state.KeyedBackend
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
	j.kb = kb
	for i, name := range []string{"join/left", "join/right"} {
		st, err := state.NewMapState(kb, name, state.Codec[int64](state.Int64Codec{}), state.Codec[[]byte](state.BytesCodec{}))
		if err != nil {
			return err
		}
		j.sides[i].buckets = st
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
	if err := j.sliding.Validate(); err != nil {
		return nil, err
	}
	return j, j.sliding.CheckPanes()
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
	if _, err := j.sides[input].add(p.Start, ts, row); err != nil {
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

// OnTimer joins the window that ends at the timer, from its panes, and drops the panes no
// later window needs: those in its first slide. Rows are decoded only when both sides have
// records in the window.
func (j *windowJoin) OnTimer(t Timer) error {
	sl := j.sliding
	w := sl.WindowEnding(t.Time + 1)
	var rights []record.Row
	for ps := w.Start; ps < w.End; ps += sl.Pane() {
		b, _, err := j.sides[1].buckets.Get(ps)
		if err != nil {
			return err
		}
		if err := forEach(b, func(_ int64, enc []byte) error {
			r, err := j.sides[1].decode(enc, nil)
			rights = append(rights, r)
			return err
		}); err != nil {
			return err
		}
	}
	if len(rights) > 0 {
		start, end := record.TimeValue(time.UnixMilli(w.Start)), record.TimeValue(time.UnixMilli(w.End))
		l := make(record.Row, j.sides[0].schema.Len())
		for ps := w.Start; ps < w.End; ps += sl.Pane() {
			b, _, err := j.sides[0].buckets.Get(ps)
			if err != nil {
				return err
			}
			if err := forEach(b, func(_ int64, enc []byte) error {
				if _, err := j.sides[0].decode(enc, l); err != nil {
					return err
				}
				for _, r := range rights {
					if err := j.emitPair(l, r, w.MaxTimestamp(), start, end); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				return err
			}
		}
	}
	for ps := w.Start; ps < w.Start+sl.Slide; ps += sl.Pane() {
		for i := range j.sides {
			if err := j.sides[i].buckets.Remove(ps); err != nil {
				return err
			}
		}
	}
	return nil
}

// intervalJoin is the runtime of IntervalJoin.
type intervalJoin struct {
	joinBase
	partner [2]record.Row // a decoded record of each side
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
	// The other side's records at timestamps a partner of ts may have: lts + lower <= rts <=
	// lts + upper.
	lo, hi := satAdd(ts, j.c.Lower), satAdd(ts, j.c.Upper)
	if input == 1 {
		lo, hi = satAdd(ts, -j.c.Upper), satAdd(ts, -j.c.Lower)
	}
	other := &j.sides[1-input]
	var failed error
	if err := other.buckets.Range(func(bts int64, b []byte) bool {
		if bts < lo || bts > hi {
			return true
		}
		failed = forEach(b, func(ots int64, enc []byte) error {
			if j.partner[1-input], err = other.decode(enc, j.partner[1-input]); err != nil {
				return err
			}
			l, r := row, j.partner[1-input]
			if input == 1 {
				l, r = r, l
			}
			return j.emitPair(l, r, max(ts, ots))
		})
		return failed == nil
	}); err != nil {
		return err
	}
	if failed != nil {
		return failed
	}
	created, err := j.sides[input].add(ts, ts, row)
	if err != nil {
		return err
	}
	if created {
		j.timers.Schedule(EventTime, satAdd(ts, j.keepFor(input)))
	}
	return nil
}

// Open schedules the cleanup timers of the buckets a restore brought back: the buckets are
// the state, their timers are derived from them (one per bucket, at its expiry).
func (j *intervalJoin) Open(ctx *Context, out Output) error {
	if err := j.joinBase.Open(ctx, out); err != nil {
		return err
	}
	for i := range j.sides {
		keys, err := j.sides[i].buckets.Keys()
		if err != nil {
			return err
		}
		for _, k := range keys {
			j.kb.SetCurrentKey(k)
			var times []int64
			if err := j.sides[i].buckets.Range(func(bts int64, _ []byte) bool { times = append(times, bts); return true }); err != nil {
				return err
			}
			for _, bts := range times {
				j.timers.Schedule(EventTime, satAdd(bts, j.keepFor(i)))
			}
		}
	}
	return nil
}

// OnTimer drops the records that can no longer meet a partner: each side's bucket whose
// timestamp plus the side's keepFor is the timer's (at the ends of the int64 range, where
// that sum saturates, every bucket at or past it).
func (j *intervalJoin) OnTimer(t Timer) error {
	for i := range j.sides {
		keep := j.keepFor(i)
		if t.Time != MaxWatermark {
			if err := j.sides[i].buckets.Remove(t.Time - keep); err != nil {
				return err
			}
			continue
		}
		var expired []int64
		if err := j.sides[i].buckets.Range(func(bts int64, _ []byte) bool {
			if satAdd(bts, keep) <= t.Time {
				expired = append(expired, bts)
			}
			return true
		}); err != nil {
			return err
		}
		for _, bts := range expired {
			if err := j.sides[i].buckets.Remove(bts); err != nil {
				return err
			}
		}
	}
	return nil
}

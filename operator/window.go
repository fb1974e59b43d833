package operator

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/goflink/goflink/internal/window"
	"github.com/goflink/goflink/job/spec"
	"github.com/goflink/goflink/record"
	"github.com/goflink/goflink/state"
)

// Window aggregates a keyed stream per key and window, with Flink's semantics: size alone is
// a tumbling window, size and slide a sliding one, gap a session window; in event time
// (default: windows fire when the watermark passes their end) or processing time. Its output
// rows hold the key, window_start, window_end and the aggregates in declared order, with the
// window's end − 1 as their timestamp. A record later than allowed-lateness is dropped (and
// counted); within it, the record updates its window, which fires again.
//
// Sliding windows are computed from panes (slices of gcd(size, slide)): a record updates one
// pane, a window's result merges its panes when it fires, so a record costs the same whatever
// size/slide is. Panes, sessions and timers live in keyed state.
var Window = Define(Type{Name: "window", Keyed: true, Fields: windowFields, SideOutputs: []string{"late"},
	KeyedHint: "for a non-keyed stream use window-all"}, planWindow(false), newWindowOp)

// WindowAll is Window over a whole non-keyed stream, in one subtask.
var WindowAll = Define(Type{Name: "window-all", Global: true, Fields: windowFields, SideOutputs: []string{"late"}}, planWindow(true), newWindowOp)

var windowFields = []string{"size", "slide", "gap", "time", "offset", "allowed-lateness", "aggregates"}

// windowConfig is the configuration of window and window-all; durations in milliseconds.
type windowConfig struct {
	Size       int64       `json:"size_ms,omitempty"`
	Slide      int64       `json:"slide_ms,omitempty"`
	Gap        int64       `json:"gap_ms,omitempty"`
	Offset     int64       `json:"offset_ms,omitempty"`
	Lateness   int64       `json:"allowed_lateness_ms,omitempty"`
	Processing bool        `json:"processing_time,omitempty"`
	Aggregates []namedExpr `json:"aggregates"`
	// KeyField names the key in the output; "" for window-all, which has none.
	KeyField string `json:"key_field,omitempty"`
}

// planWindow checks a window's fields; all is window-all.
func planWindow(all bool) func(p *Planner) (windowConfig, *Shape) {
	return func(p *Planner) (windowConfig, *Shape) {
		var c windowConfig
		size, hasSize := windowDuration(p, "size", true)
		slide, hasSlide := windowDuration(p, "slide", true)
		gap, hasGap := windowDuration(p, "gap", true)
		offset, hasOffset := windowOffset(p)
		lateness, _ := windowDuration(p, "allowed-lateness", false)
		c.Size, c.Slide, c.Gap, c.Offset, c.Lateness = size, slide, gap, offset, lateness
		switch {
		case hasSize && hasGap:
			p.Problemf("a window has a size (tumbling or sliding) or a gap (session), not both")
		case !hasSize && !hasGap:
			p.Problemf("a window needs a size (tumbling; sliding with a slide) or a gap (session)")
		case hasGap && hasSlide:
			p.At("slide").Problemf("a session window (gap) has no slide")
		case hasGap && hasOffset:
			p.At("offset").Problemf("offset applies to tumbling and sliding windows, not to sessions")
		case hasSize && !hasSlide:
			c.Slide = size
		}
		if hasSlide && hasSize && slide > size && size > 0 {
			p.At("slide").Problemf("slide (%v) is larger than the size (%v)", ms(slide), ms(size))
		}
		checkPanes(p, size, slide)
		if lateness < 0 {
			p.At("allowed-lateness").Problemf("must not be negative, got %v", ms(lateness))
		}
		if t, ok := p.Choice("time", "event", "event", "processing"); ok {
			c.Processing = t == "processing"
		}
		if !c.Processing && !p.Timed {
			p.Problemf("an event-time window needs a watermark upstream: give the source a watermark field or add a watermark operator before it, or use time: processing")
		}
		var fields []record.Field
		if !all {
			c.KeyField = "key"
			if _, ok := p.In.Field(p.KeyExpr); ok && spec.Identifier.MatchString(p.KeyExpr) {
				c.KeyField = p.KeyExpr
			}
			if c.KeyField == "window_start" || c.KeyField == "window_end" {
				p.Problemf("the key field %q clashes with the window's own %s: key by a field of another name (rename it with a map before the key-by)", c.KeyField, c.KeyField)
			}
			fields = append(fields, record.Field{Name: c.KeyField, Type: p.KeyType})
		}
		fields = append(fields, record.Field{Name: "window_start", Type: record.Timestamp}, record.Field{Name: "window_end", Type: record.Timestamp})
		aggFields, open := planAggregates(p, &c, fields)
		return c, NewShape(append(fields, aggFields...), open)
	}
}

// windowDuration reads a duration field in whole milliseconds; positive ones must be > 0.
func windowDuration(p *Planner, key string, positive bool) (int64, bool) {
	e, ok := p.Field(key)
	if !ok {
		return 0, false
	}
	d, ok := e.Duration()
	switch {
	case !ok:
		return 0, true
	case positive && d <= 0:
		e.Problemf("must be positive, got %v", d)
	case d%time.Millisecond != 0:
		e.Problemf("must be a whole number of milliseconds, got %v", d)
	}
	return d.Milliseconds(), true
}

// checkPanes reports a sliding window of more than window.MaxPanes panes at its slide.
func checkPanes(p *Planner, size, slide int64) {
	sl := window.Sliding{Size: size, Slide: slide}
	if sl.Validate() != nil || sl.CheckPanes() == nil {
		return
	}
	p.At("slide").Problemf("cuts each window of %v into %d panes of %v (size / gcd(size, slide)); the limit is %d", ms(size), size/sl.Pane(), ms(sl.Pane()), window.MaxPanes)
}

// windowOffset reads the offset of tumbling and sliding windows in whole milliseconds. It may
// be negative, as in Flink (a day's windows in UTC+8 have the offset -8h).
func windowOffset(p *Planner) (int64, bool) {
	e, ok := p.Field("offset")
	if !ok {
		return 0, false
	}
	v, _ := signedMillis(e.Value)
	return v, true
}

func ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

// planAggregates reads the aggregates field: output name → aggregate, in order.
func planAggregates(p *Planner, c *windowConfig, before []record.Field) ([]record.Field, bool) {
	e, ok := p.Require("aggregates")
	if !ok {
		return nil, true
	}
	m, ok := e.Map()
	if !ok {
		return nil, true
	}
	if m.Len() == 0 {
		e.Problemf("needs at least one aggregate, e.g. {n: \"count()\"}")
	}
	taken := map[string]bool{}
	for _, f := range before {
		taken[f.Name] = true
	}
	var fields []record.Field
	open := false
	for _, ae := range m.Entries() {
		src, ok := ae.String()
		switch {
		case !ok:
			open = true
			continue
		case !spec.Identifier.MatchString(ae.Key):
			ae.Problemf("aggregate names must be identifiers (letters, digits, _)")
			open = true
			continue
		case taken[ae.Key]:
			ae.Problemf("the output already has a field %q", ae.Key)
			continue
		}
		taken[ae.Key] = true
		typ, err := window.Check(src, func(name string) (record.Type, bool) {
			f, ok := p.In.Field(name)
			return f.Type, ok
		}, p.In.Open)
		if err != nil {
			ae.Problemf("%v", err)
		}
		c.Aggregates = append(c.Aggregates, namedExpr{Name: ae.Key, Expr: src})
		fields = append(fields, record.Field{Name: ae.Key, Type: typ})
	}
	return fields, open
}

// windowOp is the runtime of Window and WindowAll.
type windowOp struct {
	Base
	c        windowConfig
	aggs     *window.Aggregates
	sliding  window.Sliding
	domain   TimeDomain
	keyField bool

	panes    *state.MapState[int64, record.Row] // tumbling and sliding: pane start → accumulator
	sessions *state.ValueState[[]session]       // sessions of the key, by start
	timers   *TimerService
	row      record.Row
	dropped  int64 // late records dropped

	// slides holds, per key, what the key's last window left for the next one to be computed
	// from (two stacks, see slider); only for windows of many panes (slideFrom). It is kept in
	// memory, not checkpointed: a key without one starts afresh from its panes.
	slides map[record.Value]*slider
}

// slideFrom is the panes per window from which consecutive windows are computed with a
// slider rather than by merging all their panes.
const slideFrom = 8

// slider computes a key's consecutive sliding windows from its panes with two stacks, in a
// constant number of merges per window however many panes a window has: the front holds the
// older panes of the window as suffix merges (suffix[i]: the panes from frontFrom + i panes
// on to mid), back the merge of the newer panes [mid, end). A window drops panes from the
// front and adds new ones to the back; when the front runs out, the back's panes become the
// front (re-read from state, once per a window's worth of windows).
type slider struct {
	end       int64 // the end of the window last computed
	frontFrom int64
	mid       int64
	suffix    []record.Row
	back      record.Row
}

// session is one session window of a key and its accumulator.
type session struct {
	w   window.Window
	acc record.Row
}

func newWindowOp(c windowConfig, in, _ *record.Schema) (any, error) {
	exprs := make([]string, len(c.Aggregates))
	for i, a := range c.Aggregates {
		exprs[i] = a.Expr
	}
	aggs, err := window.New(exprs, in)
	if err != nil {
		return nil, err
	}
	w := &windowOp{c: c, aggs: aggs, keyField: c.KeyField != ""}
	if c.Processing {
		w.domain = ProcessingTime
	}
	if c.Gap == 0 {
		w.sliding = window.Sliding{Size: c.Size, Slide: c.Slide, Offset: c.Offset}
		if err := w.sliding.Validate(); err != nil {
			return nil, err
		}
		if err := w.sliding.CheckPanes(); err != nil {
			return nil, err
		}
	} else if c.Gap < 0 {
		return nil, fmt.Errorf("gap %v is not positive", ms(c.Gap))
	}
	n := 2 + len(exprs)
	if w.keyField {
		n++
	}
	w.row = make(record.Row, n)
	return w, nil
}

func (w *windowOp) isSession() bool { return w.c.Gap > 0 }

func (w *windowOp) InitializeState(sc StateContext) error {
	kb := sc.KeyedBackend()
	if kb == nil {
		return errNotKeyed
	}
	acc := state.RowCodec(w.aggs.AccSchema())
	var err error
	if w.isSession() {
		w.sessions, err = state.NewValueState(kb, "window/sessions", state.Codec[[]session](sessionsCodec{acc}))
	} else {
		w.panes, err = state.NewMapState(kb, "window/panes", state.Codec[int64](state.Int64Codec{}), acc)
	}
	return err
}

func (w *windowOp) Open(ctx *Context, out Output) error {
	if ctx.Timers() == nil {
		return errors.New("window: no timer service (it must read a keyed stream)")
	}
	w.timers = ctx.Timers()
	return w.Base.Open(ctx, out)
}

func (w *windowOp) Close() error {
	if w.dropped > 0 && w.ctx != nil {
		w.ctx.Log().Info("window dropped late records", "dropped", w.dropped)
	}
	return nil
}

// NumLateRecordsDropped is how many records came beyond the allowed lateness (LateDropper).
func (w *windowOp) NumLateRecordsDropped() int64 { return w.dropped }

// now is the time a record is assigned at and the watermark it is judged against.
func (w *windowOp) now() (ts, wm int64, err error) {
	if w.domain == ProcessingTime {
		t := w.timers.CurrentProcessingTime()
		return t, t, nil
	}
	ts = w.ctx.Timestamp()
	if ts == NoTimestamp {
		return 0, 0, w.UserError(errors.New("an event-time window got a record without a timestamp"))
	}
	return ts, w.ctx.CurrentWatermark(), nil
}

// expired reports whether a window whose last timestamp is maxTS is past its allowed
// lateness at watermark wm (the time, in processing time, where there is no lateness).
func (w *windowOp) expired(maxTS, wm int64) bool {
	if w.domain == ProcessingTime {
		return maxTS <= wm
	}
	return satAdd(maxTS, w.c.Lateness) <= wm
}

func (w *windowOp) Process(row record.Row) error {
	ts, wm, err := w.now()
	if err != nil {
		return err
	}
	if w.isSession() {
		return w.addToSession(row, ts, wm)
	}
	return w.addToPane(row, ts, wm)
}

func (w *windowOp) addToPane(row record.Row, ts, wm int64) error {
	p := w.sliding.PaneOf(ts)
	last := w.sliding.LastWindow(p)
	if w.domain == EventTime && w.expired(last.MaxTimestamp(), wm) {
		return w.late(row)
	}
	acc, ok, err := w.panes.GetForUpdate(p.Start) // modified in place, then Put
	if err != nil {
		return err
	}
	if !ok {
		acc = w.aggs.NewAcc()
		if err := w.registerPane(p, last, wm); err != nil {
			return err
		}
	}
	w.aggs.Add(acc, row, ts)
	if err := w.panes.Put(p.Start, acc); err != nil {
		return err
	}
	if sc := w.slides[w.ctx.Key()]; sc != nil && p.Start < sc.end {
		delete(w.slides, w.ctx.Key()) // a pane it merged changed (a late record)
	}
	if w.domain == ProcessingTime || w.sliding.FirstWindow(p).MaxTimestamp() > wm {
		return nil
	}
	// A late record within the allowed lateness: its windows that fired fire again, but for
	// those past their own lateness: Flink leaves the record out of an expired window, whose
	// first panes may be gone already.
	for end := w.sliding.FirstWindow(p).End; end <= last.End && end-1 <= wm; end += w.sliding.Slide {
		if w.expired(end-1, wm) {
			continue
		}
		if err := w.fire(w.sliding.WindowEnding(end)); err != nil {
			return err
		}
	}
	return nil
}

// late drops a record beyond the allowed lateness: it goes to the side output "late" when an
// operator reads it, and is counted.
func (w *windowOp) late(row record.Row) error {
	w.dropped++
	if out := w.ctx.SideOutput("late"); out != nil {
		return out.Emit(row)
	}
	return nil
}

// registerPane registers the timers of a new pane p: the first of its windows that has not
// fired yet fires at its end (each firing registers the next window's), and with an allowed
// lateness the pane is cleaned up after its last window expired.
func (w *windowOp) registerPane(p, last window.Window, wm int64) error {
	end := w.sliding.FirstWindow(p).End
	if w.domain == EventTime && end-1 <= wm {
		end = w.sliding.FirstEndAfter(wm + 1)
	}
	if end <= last.End {
		if err := w.timers.Register(w.domain, end-1); err != nil {
			return err
		}
	}
	if w.domain == EventTime && w.c.Lateness > 0 {
		return w.timers.Register(EventTime, satAdd(last.MaxTimestamp(), w.c.Lateness))
	}
	return nil
}

// OnTimer fires the window that ends at the timer and drops what expired by then. Expiry is
// judged at the timer's time, not at the watermark, which may be far ahead: the timers of
// later windows fire after this one, in time order, and need their panes.
func (w *windowOp) OnTimer(t Timer) error {
	if w.isSession() {
		return w.sessionTimer(t.Time, t.Time)
	}
	sl := w.sliding
	if end := t.Time + 1; sl.FirstEndAfter(t.Time) == end {
		next, err := w.fireEnding(end)
		if err != nil {
			return err
		}
		if next {
			if err := w.timers.Register(t.Domain, t.Time+sl.Slide); err != nil {
				return err
			}
		}
	}
	// The panes whose last window ended at t − lateness are no longer needed: those in the
	// first slide of that window.
	lateness := w.c.Lateness
	if t.Domain == ProcessingTime {
		lateness = 0
	}
	if end := satAdd(t.Time, -lateness) + 1; sl.FirstEndAfter(end-1) == end {
		for ps := end - sl.Size; ps < end-sl.Size+sl.Slide; ps += sl.Pane() {
			if err := w.panes.Remove(ps); err != nil {
				return err
			}
		}
	}
	return nil
}

// fire emits window win of the current key from its panes.
func (w *windowOp) fire(win window.Window) error {
	_, err := w.fireEnding(win.End)
	return err
}

// fireEnding emits the window that ends at end, merged from its panes, if it has any. next
// says whether a pane of it is in the next window too (which then fires in turn).
func (w *windowOp) fireEnding(end int64) (next bool, err error) {
	sl := w.sliding
	if sl.Size/sl.Pane() >= slideFrom {
		return w.slide(end)
	}
	acc := w.aggs.NewAcc()
	for ps := end - sl.Size; ps < end; ps += sl.Pane() {
		p, ok, err := w.panes.Get(ps)
		if err != nil {
			return false, err
		}
		if ok {
			w.aggs.Merge(acc, p)
			next = next || ps >= end+sl.Slide-sl.Size
		}
	}
	if acc[0].Int() == 0 {
		return next, nil
	}
	return next, w.emit(sl.WindowEnding(end), acc)
}

// slide is fireEnding for windows of many panes: the window that ends at end is computed
// from the key's slider when the key's last window ended one slide before, else from its
// panes (and a slider is set up for the next). The key's slider is dropped when no next
// window follows.
func (w *windowOp) slide(end int64) (next bool, err error) {
	sl, pane := w.sliding, w.sliding.Pane()
	start := end - sl.Size
	key := w.ctx.Key()
	sc := w.slides[key]
	if sc == nil || sc.end != end-sl.Slide {
		if sc, err = w.newSlider(start, end); err != nil {
			return false, err
		}
		if w.slides == nil {
			w.slides = map[record.Value]*slider{}
		}
		w.slides[key.Clone()] = sc
	} else {
		if start >= sc.mid { // the front ran out: the back's panes become the front
			if err := w.fillFront(sc, sc.mid, sc.end); err != nil {
				return false, err
			}
			sc.back = w.aggs.NewAcc()
		}
		for ps := sc.end; ps < end; ps += pane {
			p, ok, err := w.panes.Get(ps)
			if err != nil {
				return false, err
			}
			if ok {
				w.aggs.Merge(sc.back, p)
			}
		}
		sc.end = end
	}
	acc := w.aggs.NewAcc()
	if i := (start - sc.frontFrom) / pane; i < int64(len(sc.suffix)) {
		w.aggs.Merge(acc, sc.suffix[i])
	}
	w.aggs.Merge(acc, sc.back)
	// The next window holds this one's records but for those of its first slide.
	left := acc[0].Int()
	for ps := start; ps < start+sl.Slide; ps += pane {
		p, ok, err := w.panes.Get(ps)
		if err != nil {
			return false, err
		}
		if ok {
			left -= p[0].Int()
		}
	}
	if next = left > 0; !next {
		delete(w.slides, key)
	}
	if acc[0].Int() == 0 {
		return next, nil
	}
	return next, w.emit(sl.WindowEnding(end), acc)
}

// newSlider sets up a slider whose front is the panes of the window [start, end).
func (w *windowOp) newSlider(start, end int64) (*slider, error) {
	sc := &slider{end: end, back: w.aggs.NewAcc()}
	return sc, w.fillFront(sc, start, end)
}

// fillFront makes the panes [from, to) the slider's front: their suffix merges.
func (w *windowOp) fillFront(sc *slider, from, to int64) error {
	pane := w.sliding.Pane()
	n := int((to - from) / pane)
	sc.frontFrom, sc.mid = from, to
	if cap(sc.suffix) < n {
		sc.suffix = make([]record.Row, n)
	}
	sc.suffix = sc.suffix[:n]
	for i := n - 1; i >= 0; i-- {
		if sc.suffix[i] == nil {
			sc.suffix[i] = w.aggs.NewAcc()
		} else {
			clear(sc.suffix[i])
		}
		if i < n-1 {
			copy(sc.suffix[i], sc.suffix[i+1])
		}
		p, ok, err := w.panes.Get(from + int64(i)*pane)
		if err != nil {
			return err
		}
		if ok {
			w.aggs.Merge(sc.suffix[i], p)
		}
	}
	return nil
}

// emit sends the result of window win with accumulator acc, timestamped win's end − 1.
func (w *windowOp) emit(win window.Window, acc record.Row) error {
	i := 0
	if w.keyField {
		w.row[0] = w.ctx.Key()
		i = 1
	}
	w.row[i] = record.TimeValue(time.UnixMilli(win.Start))
	w.row[i+1] = record.TimeValue(time.UnixMilli(win.End))
	w.aggs.Result(acc, w.row[i+2:])
	w.ctx.SetTimestamp(win.MaxTimestamp())
	return w.out.Emit(w.row)
}

// addToSession adds a record to the session it opens or extends, merging the sessions it
// bridges.
func (w *windowOp) addToSession(row record.Row, ts, wm int64) error {
	sessions, _, err := w.sessions.Value()
	if err != nil {
		return err
	}
	merged := window.Window{Start: ts, End: satAdd(ts, w.c.Gap)}
	var keep, absorbed []session
	for _, s := range sessions {
		if s.w.Intersects(merged) {
			merged = merged.Cover(s.w)
			absorbed = append(absorbed, s)
		} else {
			keep = append(keep, s)
		}
	}
	if w.domain == EventTime && w.expired(merged.MaxTimestamp(), wm) {
		return w.late(row)
	}
	acc := w.aggs.NewAcc()
	for _, s := range absorbed {
		w.aggs.Merge(acc, s.acc)
		if err := w.unregister(s.w, keep); err != nil {
			return err
		}
	}
	w.aggs.Add(acc, row, ts)
	keep = append(keep, session{merged, acc})
	slices.SortFunc(keep, func(a, b session) int { return cmp.Compare(a.w.Start, b.w.Start) })
	if err := w.sessions.Update(keep); err != nil {
		return err
	}
	// A session the watermark passed (a late merge within the lateness) fires at once below; a
	// timer at its end would fire it a second time at the next watermark. Flink's
	// EventTimeTrigger registers none for it either.
	if w.domain == ProcessingTime || merged.MaxTimestamp() > wm {
		if err := w.timers.Register(w.domain, merged.MaxTimestamp()); err != nil {
			return err
		}
	}
	if w.domain == EventTime && w.c.Lateness > 0 {
		if err := w.timers.Register(EventTime, satAdd(merged.MaxTimestamp(), w.c.Lateness)); err != nil {
			return err
		}
	}
	if w.domain == EventTime && merged.MaxTimestamp() <= wm {
		return w.emit(merged, acc) // a late merge within the lateness fires again at once
	}
	return nil
}

// unregister deletes the timers of a session that was merged into another, except those a
// session in keep still needs: timers are per key and time, so one session's cleanup time
// (end − 1 + lateness) can be another's firing time, and deleting it would lose that firing.
func (w *windowOp) unregister(s window.Window, keep []session) error {
	needed := func(t int64) bool {
		return slices.ContainsFunc(keep, func(o session) bool {
			return o.w.MaxTimestamp() == t || w.domain == EventTime && w.c.Lateness > 0 && satAdd(o.w.MaxTimestamp(), w.c.Lateness) == t
		})
	}
	if t := s.MaxTimestamp(); !needed(t) {
		if err := w.timers.Delete(w.domain, t); err != nil {
			return err
		}
	}
	if w.domain == EventTime && w.c.Lateness > 0 {
		if t := satAdd(s.MaxTimestamp(), w.c.Lateness); !needed(t) {
			return w.timers.Delete(EventTime, t)
		}
	}
	return nil
}

// sessionTimer fires the session that ends at t and drops the expired ones.
func (w *windowOp) sessionTimer(t, wm int64) error {
	sessions, _, err := w.sessions.Value()
	if err != nil {
		return err
	}
	var keep []session
	for _, s := range sessions {
		if s.w.MaxTimestamp() == t {
			if err := w.emit(s.w, s.acc); err != nil {
				return err
			}
		}
		if !w.expired(s.w.MaxTimestamp(), wm) && !(w.domain == ProcessingTime && s.w.MaxTimestamp() <= t) {
			keep = append(keep, s)
		}
	}
	if len(keep) == 0 {
		return w.sessions.Clear()
	}
	if len(keep) == len(sessions) {
		return nil
	}
	return w.sessions.Update(keep)
}

// satAdd adds without overflowing past the int64 range.
func satAdd(a, b int64) int64 {
	s := a + b
	switch {
	case b > 0 && s < a:
		return MaxWatermark
	case b < 0 && s > a:
		return MinWatermark
	}
	return s
}

// sessionsCodec encodes a key's sessions: per session start, end and the accumulator.
type sessionsCodec struct{ acc state.Codec[record.Row] }

func (c sessionsCodec) Append(b []byte, ss []session) []byte {
	b = binary.AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = binary.LittleEndian.AppendUint64(b, uint64(s.w.Start))
		b = binary.LittleEndian.AppendUint64(b, uint64(s.w.End))
		enc := c.acc.Append(nil, s.acc)
		b = binary.AppendUvarint(b, uint64(len(enc)))
		b = append(b, enc...)
	}
	return b
}

func (c sessionsCodec) Decode(b []byte) ([]session, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, fmt.Errorf("%w: session count", state.ErrCorrupt)
	}
	b = b[k:]
	out := make([]session, 0, n)
	for range n {
		if len(b) < 16 {
			return nil, fmt.Errorf("%w: session truncated", state.ErrCorrupt)
		}
		s := session{w: window.Window{Start: int64(binary.LittleEndian.Uint64(b)), End: int64(binary.LittleEndian.Uint64(b[8:]))}}
		l, k := binary.Uvarint(b[16:])
		if k <= 0 || uint64(len(b)-16-k) < l {
			return nil, fmt.Errorf("%w: session accumulator truncated", state.ErrCorrupt)
		}
		acc, err := c.acc.Decode(b[16+k : 16+k+int(l)])
		if err != nil {
			return nil, err
		}
		s.acc = acc
		out = append(out, s)
		b = b[16+k+int(l):]
	}
	return out, nil
}

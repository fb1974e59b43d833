package window

import (
	"fmt"
	"math"
)

// Window is the half-open interval [Start, End) of event (or processing) time in
// milliseconds since the epoch. A Window is a value; it is safe to copy and compare.
type Window struct{ Start, End int64 }

// MaxTimestamp returns the largest timestamp in w, End-1 (Flink TimeWindow.maxTimestamp).
// A window whose End is math.MinInt64 returns math.MinInt64 rather than wrapping.
func (w Window) MaxTimestamp() int64 { return addSat(w.End, -1) }

// Intersects reports whether w and o overlap or touch, exactly as Flink's
// TimeWindow.intersects: w.Start <= o.End && w.End >= o.Start. Adjacent windows
// ([0,5) and [5,10)) intersect, as session-window merging wants.
func (w Window) Intersects(o Window) bool { return w.Start <= o.End && w.End >= o.Start }

// Cover returns the smallest window that contains both w and o.
func (w Window) Cover(o Window) Window {
	return Window{Start: min(w.Start, o.Start), End: max(w.End, o.End)}
}

// String renders w as "[start, end)".
func (w Window) String() string { return fmt.Sprintf("[%d, %d)", w.Start, w.End) }

// StartOf returns the start of the window of length size, aligned to the epoch plus offset,
// that contains ts: exactly Flink's TimeWindow.getWindowStartWithOffset, correct for a
// negative ts and for any offset (it is taken modulo size, so a negative offset or one
// >= size is fine). size must be positive; StartOf returns ts for size <= 0 rather than
// panicking. The arithmetic never overflows: near math.MinInt64, where the true start is
// below the int64 range, StartOf returns math.MinInt64.
func StartOf(ts, offset, size int64) int64 {
	if size <= 0 {
		return ts
	}
	// r = (ts - offset) mod size in [0, size), computed without forming ts - offset.
	r := mod(ts, size) - mod(offset, size)
	if r < 0 {
		r += size
	}
	if ts < math.MinInt64+r {
		return math.MinInt64
	}
	return ts - r
}

// Sliding describes tumbling (Slide == Size) and sliding windows of length Size, one
// starting every Slide ms, with starts aligned to the epoch plus Offset (Flink's
// SlidingEventTimeWindows.of(size, slide, offset)). All lengths are in ms. Call Validate
// before using the other methods; on an invalid Sliding they return meaningless values
// but never panic.
//
// Overflow: window bounds saturate at math.MinInt64 and math.MaxInt64, so windows near the
// ends of the int64 range are clipped, and a record at math.MaxInt64 (which no half-open
// window can contain) is put in windows ending at math.MaxInt64. Real timestamps never
// come near these bounds.
type Sliding struct{ Size, Slide, Offset int64 }

// MaxPanes bounds the panes of a window (Size / gcd(Size, Slide)) that the window operators
// accept (CheckPanes): a window is computed from its panes, so a day's window sliding by a
// millisecond would cost 86,400,000 steps for one record. A week sliding by a second is
// 604,800 panes.
const MaxPanes = 1 << 20

// CheckPanes checks that a window of s has at most MaxPanes panes (s is valid).
func (s Sliding) CheckPanes() error {
	if n := s.Size / s.Pane(); n > MaxPanes {
		return fmt.Errorf("slide %d ms cuts each window of %d ms into %d panes of %d ms; the limit is %d", s.Slide, s.Size, n, s.Pane(), MaxPanes)
	}
	return nil
}

// Validate checks that Size > 0, Slide > 0 and Slide <= Size. Errors name the field
// ("size", "slide") as written in job specs.
func (s Sliding) Validate() error {
	switch {
	case s.Size <= 0:
		return fmt.Errorf("size must be positive, got %d ms", s.Size)
	case s.Slide <= 0:
		return fmt.Errorf("slide must be positive, got %d ms", s.Slide)
	case s.Slide > s.Size:
		return fmt.Errorf("slide (%d ms) must not exceed size (%d ms)", s.Slide, s.Size)
	}
	return nil
}

// Pane returns the length of a pane (slice): gcd(Size, Slide). Every window is a whole
// number of consecutive panes, and every timestamp falls in exactly one pane.
func (s Sliding) Pane() int64 {
	a, b := s.Size, s.Slide
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// PaneOf returns the pane that contains ts.
func (s Sliding) PaneOf(ts int64) Window {
	p := s.Pane()
	start := StartOf(ts, s.Offset, p)
	return Window{Start: start, End: addSat(start, p)}
}

// Windows returns every window that contains ts, latest start first, like Flink's
// SlidingEventTimeWindows.assignWindows (for tumbling windows exactly one). It is the
// reference the pane methods are tested against; it allocates Size/Slide windows.
func (s Sliding) Windows(ts int64) []Window {
	if s.Validate() != nil {
		return nil
	}
	var out []Window
	// d = ts - start; a window holds ts while d < Size. ts >= start, and ts - start is
	// below Slide unless StartOf saturated near math.MinInt64, so d cannot overflow.
	for d := ts - StartOf(ts, s.Offset, s.Slide); d < s.Size && ts >= math.MinInt64+d; d += s.Slide {
		out = append(out, Window{Start: ts - d, End: addSat(ts-d, s.Size)})
		if d > math.MaxInt64-s.Slide {
			break
		}
	}
	return out
}

// FirstEndAfter returns the end of the earliest-ending window whose End > t. Window ends
// are aligned to Offset+Size modulo Slide. For a pane p, FirstEndAfter(p.Start) is the end
// of the first window that contains p.
func (s Sliding) FirstEndAfter(t int64) int64 {
	if s.Slide <= 0 {
		return t
	}
	// Ends are aligned to (Offset mod Slide) + (Size mod Slide), summed modulo Slide
	// without overflowing.
	o, d := mod(s.Offset, s.Slide), mod(s.Size, s.Slide)
	if o >= s.Slide-d {
		o -= s.Slide - d
	} else {
		o += d
	}
	return addSat(StartOf(t, o, s.Slide), s.Slide)
}

// FirstWindow returns the earliest-ending window that contains pane p (p from PaneOf).
func (s Sliding) FirstWindow(p Window) Window { return s.WindowEnding(s.FirstEndAfter(p.Start)) }

// LastWindow returns the latest-ending window that contains pane p (p from PaneOf): the
// one with the latest start at or before p.Start.
func (s Sliding) LastWindow(p Window) Window {
	start := StartOf(p.Start, s.Offset, s.Slide)
	return Window{Start: start, End: addSat(start, s.Size)}
}

// WindowEnding returns the window that ends at end: [end-Size, end).
func (s Sliding) WindowEnding(end int64) Window {
	return Window{Start: addSat(end, -s.Size), End: end}
}

// mod returns a modulo m in [0, m) for m > 0.
func mod(a, m int64) int64 {
	r := a % m
	if r < 0 {
		r += m
	}
	return r
}

// addSat returns a+b, saturated at math.MinInt64 and math.MaxInt64 instead of wrapping.
func addSat(a, b int64) int64 {
	switch {
	case b > 0 && a > math.MaxInt64-b:
		return math.MaxInt64
	case b < 0 && a < math.MinInt64-b:
		return math.MinInt64
	}
	return a + b
}

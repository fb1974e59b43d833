package window

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestStartOf(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		ts, offset, size, want int64
	}{
		{"zero", 0, 0, 10, 0},
		{"inside", 7, 0, 10, 0},
		{"on edge", 10, 0, 10, 10},
		{"just before edge", 9, 0, 10, 0},
		{"negative", -1, 0, 10, -10},
		{"negative on edge", -10, 0, 10, -10},
		{"negative inside", -11, 0, 10, -20},
		{"offset", 7, 3, 10, 3},
		{"offset before", 2, 3, 10, -7},
		{"offset on edge", 13, 3, 10, 13},
		{"negative offset", 7, -3, 10, 7},
		{"negative offset below", 6, -3, 10, -3},
		{"offset >= size", 7, 23, 10, 3},
		{"offset == size", 7, 10, 10, 0},
		{"negative ts and offset", -5, -3, 10, -13},
		{"large negative offset", 5, -1003, 10, -3},
		{"size one", -7, 5, 1, -7},
		{"near min int", math.MinInt64 + 3, 0, 10, math.MinInt64}, // true start is below the range
		{"min int on edge", math.MinInt64, 2, 5, math.MinInt64},
		{"near max int", math.MaxInt64, 0, 10, math.MaxInt64 - 7}, // MaxInt64 = ...807
		{"huge offset", 5, math.MinInt64, 10, 2},                  // MinInt64 mod 10 = 2
		{"huge size", -1, 0, math.MaxInt64, -math.MaxInt64},
		{"bad size", 5, 0, 0, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := StartOf(tc.ts, tc.offset, tc.size); got != tc.want {
				t.Errorf("StartOf(%d, %d, %d) = %d, want %d", tc.ts, tc.offset, tc.size, got, tc.want)
			}
		})
	}
}

// TestStartOfFlink compares StartOf with Flink's formula where that formula cannot overflow.
func TestStartOfFlink(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		size := r.Int64N(1000) + 1
		ts, offset := r.Int64N(1e6)-5e5, r.Int64N(size) // Flink wants 0 <= offset < size
		rem := (ts - offset) % size
		want := ts - rem
		if rem < 0 {
			want = ts - (rem + size)
		}
		if got := StartOf(ts, offset, size); got != want {
			t.Fatalf("StartOf(%d, %d, %d) = %d, want %d", ts, offset, size, got, want)
		}
		if got := StartOf(ts, offset-7*size, size); got != want {
			t.Fatalf("StartOf(%d, %d, %d) = %d, want %d", ts, offset-7*size, size, got, want)
		}
	}
}

func TestWindowMethods(t *testing.T) {
	w := Window{Start: -10, End: 0}
	if got := w.MaxTimestamp(); got != -1 {
		t.Errorf("MaxTimestamp() = %d, want -1", got)
	}
	if got := (Window{End: math.MinInt64}).MaxTimestamp(); got != math.MinInt64 {
		t.Errorf("MaxTimestamp() at MinInt64 = %d, want MinInt64", got)
	}
	if got := w.String(); got != "[-10, 0)" {
		t.Errorf("String() = %q", got)
	}
	for _, tc := range []struct {
		o     Window
		inter bool
		cover Window
	}{
		{Window{0, 5}, true, Window{-10, 5}}, // touching counts, as in Flink
		{Window{1, 5}, false, Window{-10, 5}},
		{Window{-20, -10}, true, Window{-20, 0}},
		{Window{-20, -11}, false, Window{-20, 0}},
		{Window{-5, -4}, true, Window{-10, 0}},
		{Window{-30, 30}, true, Window{-30, 30}},
	} {
		if got := w.Intersects(tc.o); got != tc.inter {
			t.Errorf("%v.Intersects(%v) = %v, want %v", w, tc.o, got, tc.inter)
		}
		if got := tc.o.Intersects(w); got != tc.inter {
			t.Errorf("%v.Intersects(%v) = %v, want %v", tc.o, w, got, tc.inter)
		}
		if got := w.Cover(tc.o); got != tc.cover {
			t.Errorf("%v.Cover(%v) = %v, want %v", w, tc.o, got, tc.cover)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		s    Sliding
		want string
	}{
		{Sliding{Size: 10, Slide: 10}, ""},
		{Sliding{Size: 10, Slide: 3, Offset: -4}, ""},
		{Sliding{Size: 0, Slide: 1}, "size must be positive, got 0 ms"},
		{Sliding{Size: -5, Slide: 1}, "size must be positive, got -5 ms"},
		{Sliding{Size: 5, Slide: 0}, "slide must be positive, got 0 ms"},
		{Sliding{Size: 5, Slide: 6}, "slide (6 ms) must not exceed size (5 ms)"},
	} {
		err := tc.s.Validate()
		if got := errString(err); got != tc.want {
			t.Errorf("%+v.Validate() = %q, want %q", tc.s, got, tc.want)
		}
		if err != nil && (tc.s.Windows(3) != nil) {
			t.Errorf("%+v.Windows(3) = %v, want nil for an invalid Sliding", tc.s, tc.s.Windows(3))
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestWindowsTable(t *testing.T) {
	for _, tc := range []struct {
		s    Sliding
		ts   int64
		want []Window
	}{
		{Sliding{10, 10, 0}, 5, []Window{{0, 10}}},
		{Sliding{10, 10, 0}, -1, []Window{{-10, 0}}},
		{Sliding{10, 10, 3}, 2, []Window{{-7, 3}}},
		{Sliding{10, 5, 0}, 5, []Window{{5, 15}, {0, 10}}},
		{Sliding{10, 5, 0}, -5, []Window{{-5, 5}, {-10, 0}}},
		{Sliding{10, 4, 0}, 9, []Window{{8, 18}, {4, 14}, {0, 10}}},
		{Sliding{10, 4, 1}, 0, []Window{{-3, 7}, {-7, 3}}},
	} {
		if got := tc.s.Windows(tc.ts); !slices.Equal(got, tc.want) {
			t.Errorf("%+v.Windows(%d) = %v, want %v", tc.s, tc.ts, got, tc.want)
		}
	}
}

// randomSliding returns a valid Sliding, half the time with Slide dividing Size.
func randomSliding(r *rand.Rand) Sliding {
	size := r.Int64N(60) + 1
	slide := r.Int64N(size) + 1
	if r.IntN(2) == 0 {
		divs := []int64{}
		for d := int64(1); d <= size; d++ {
			if size%d == 0 {
				divs = append(divs, d)
			}
		}
		slide = divs[r.IntN(len(divs))]
	}
	return Sliding{Size: size, Slide: slide, Offset: r.Int64N(300) - 150}
}

// bruteWindows scans every aligned start near ts.
func bruteWindows(s Sliding, ts int64) []Window {
	var out []Window
	for start := ts + s.Size; start > ts-2*s.Size-2*s.Slide; start-- {
		if mod(start-s.Offset, s.Slide) == 0 && start <= ts && ts < start+s.Size {
			out = append(out, Window{start, start + s.Size})
		}
	}
	return out
}

func TestWindowsBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		s, ts := randomSliding(r), r.Int64N(2000)-1000
		if got, want := s.Windows(ts), bruteWindows(s, ts); !slices.Equal(got, want) {
			t.Fatalf("%+v.Windows(%d) = %v, want %v", s, ts, got, want)
		}
	}
}

// TestPanes checks the pane methods against Windows: the pane of ts holds ts, is Pane long
// and aligned to Offset, lies inside every window of ts, and the windows of ts are exactly
// those from FirstWindow to LastWindow of its pane, one Slide apart, which FirstEndAfter
// and WindowEnding agree with.
func TestPanes(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 20000 {
		s, ts := randomSliding(r), r.Int64N(2000)-1000
		pane := s.Pane()
		if s.Size%pane != 0 || s.Slide%pane != 0 || (s.Slide == s.Size) != (pane == s.Size) {
			t.Fatalf("%+v.Pane() = %d, not the gcd", s, pane)
		}
		p := s.PaneOf(ts)
		if p.End-p.Start != pane || ts < p.Start || ts >= p.End || mod(p.Start-s.Offset, pane) != 0 {
			t.Fatalf("%+v.PaneOf(%d) = %v", s, ts, p)
		}
		ws := s.Windows(ts)
		for _, w := range ws {
			if w.Start > p.Start || w.End < p.End {
				t.Fatalf("%+v: window %v of %d does not hold its pane %v", s, w, ts, p)
			}
		}
		first, last := s.FirstWindow(p), s.LastWindow(p)
		if first != ws[len(ws)-1] || last != ws[0] {
			t.Fatalf("%+v pane %v: FirstWindow %v, LastWindow %v, want %v, %v", s, p, first, last, ws[len(ws)-1], ws[0])
		}
		if got := s.WindowEnding(first.End); got != first {
			t.Fatalf("%+v.WindowEnding(%d) = %v, want %v", s, first.End, got, first)
		}
		// FirstEndAfter at any t: the smallest end of an aligned window that is > t.
		tt := r.Int64N(2000) - 1000
		e := s.FirstEndAfter(tt)
		if e <= tt || e-s.Slide > tt || mod(e-s.Size-s.Offset, s.Slide) != 0 {
			t.Fatalf("%+v.FirstEndAfter(%d) = %d", s, tt, e)
		}
		// Every pane of a window's range lies in that window and in no window ending earlier.
		w := ws[r.IntN(len(ws))]
		for st := w.Start; st < w.End; st += pane {
			q := s.PaneOf(st)
			if q.Start != st || s.FirstWindow(q).End > w.End || s.LastWindow(q).Start < w.Start {
				t.Fatalf("%+v: pane %v of window %v: first %v last %v", s, q, w, s.FirstWindow(q), s.LastWindow(q))
			}
		}
	}
}

func TestOverflowNoPanic(t *testing.T) {
	for _, s := range []Sliding{{10, 3, 0}, {math.MaxInt64, 1 << 62, -5}, {math.MaxInt64, math.MaxInt64, math.MinInt64}} {
		for _, ts := range []int64{math.MinInt64, math.MinInt64 + 1, -1, 0, math.MaxInt64 - 1, math.MaxInt64} {
			ws := s.Windows(ts)
			if len(ws) == 0 || int64(len(ws)) > s.Size/s.Slide+1 {
				t.Errorf("%+v.Windows(%d) = %v", s, ts, ws)
			}
			for _, w := range ws {
				if w.Start > ts || w.End < ts || w.End < w.Start {
					t.Errorf("%+v.Windows(%d) holds %v", s, ts, w)
				}
			}
			p := s.PaneOf(ts)
			_ = s.FirstWindow(p)
			_ = s.LastWindow(p)
			if e := s.FirstEndAfter(ts); e < ts {
				t.Errorf("%+v.FirstEndAfter(%d) = %d", s, ts, e)
			}
		}
	}
}

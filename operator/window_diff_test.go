package operator_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/goflink/goflink/operator"
	"github.com/goflink/goflink/operator/operatortest"
	"github.com/goflink/goflink/record"
)

var (
	diffSeeds = flag.Int("window.seeds", 150, "number of random streams TestWindowDifferential runs")
	diffSeed  = flag.Uint64("window.seed", 1, "first seed of TestWindowDifferential")
)

// The differential test runs random out-of-order streams through every kind of window and
// every aggregate and checks each step's output against refWindows, a plain model of Flink's
// semantics, with failures restored from checkpoints (on either backend). A failure names
// the seed: go test -run 'TestWindowDifferential/seed=N' ./operator reruns it.

// diffAggs are the aggregates of the differential test, over the input {k, v, f, s, ts}: f is
// v/2 (exact in float64, so sums do not depend on their order) and s a short random string.
const diffAggs = `aggregates: {n: "count()", si: "sum(v)", sf: "sum(f)", ai: "avg(v)", af: "avg(f)", lo: "min(v)", hi: "max(v)", lf: "min(f)", hf: "max(f)", ls: "min(s)", hs: "max(s)", fst: "first(v)", lst: "last(v)", fs: "first(s)", lss: "last(s)"}`

// refRec is a record of the model: its timestamp, values and arrival order.
type refRec struct {
	ts, v int64
	s     string
	seq   int
}

// refWin is a window of one key and the records in it.
type refWin struct {
	start, end int64
	recs       []refRec
}

func (w *refWin) maxTS() int64 { return w.end - 1 }

// refWindows is the model: per key, the windows that hold records (tumbling and sliding) or
// the sessions, with Flink's WindowOperator semantics and an EventTimeTrigger:
//   - a record goes into each window it belongs to whose end − 1 + lateness is after the
//     watermark; a record that goes into none is late (side output, counted);
//   - a window fires when the watermark reaches its end − 1, and again at once with its full
//     contents when a record comes into it after that (within the lateness);
//   - sessions: a record's window [ts, ts + gap) merges with every session it intersects
//     (touching counts), transitively; the merged session is late if it ends too early, else
//     it takes the record and fires at once when the watermark passed its end − 1;
//   - a window's contents are dropped once the watermark reaches end − 1 + lateness.
type refWindows struct {
	size, slide, offset, gap, lateness int64
	wm                                 int64
	wins                               map[int64][]*refWin // per key, by start
	seq                                int
	schema                             *record.Schema
}

func (m *refWindows) session() bool { return m.gap > 0 }

// assign returns the windows of ts: [s, s + size) for the starts s ≡ offset (mod slide) with
// s <= ts < s + size.
func (m *refWindows) assign(ts int64) [][2]int64 {
	r := (ts - m.offset) % m.slide
	if r < 0 {
		r += m.slide
	}
	var out [][2]int64
	for s := ts - r; s > ts-m.size; s -= m.slide {
		out = append(out, [2]int64{s, s + m.size})
	}
	return out
}

// add takes a record of key k; it returns the results it fires and whether it is late.
func (m *refWindows) add(k int64, r refRec) (fired []string, late bool) {
	m.seq++
	r.seq = m.seq
	if m.session() {
		return m.addSession(k, r)
	}
	late = true
	for _, b := range m.assign(r.ts) {
		if b[1]-1+m.lateness <= m.wm {
			continue // this window expired: the record is not in it
		}
		late = false
		i := slices.IndexFunc(m.wins[k], func(w *refWin) bool { return w.start == b[0] })
		if i < 0 {
			m.wins[k] = append(m.wins[k], &refWin{start: b[0], end: b[1]})
			i = len(m.wins[k]) - 1
		}
		w := m.wins[k][i]
		w.recs = append(w.recs, r)
		if w.maxTS() <= m.wm {
			fired = append(fired, m.result(k, w))
		}
	}
	return fired, late
}

func (m *refWindows) addSession(k int64, r refRec) ([]string, bool) {
	merged := &refWin{start: r.ts, end: r.ts + m.gap, recs: []refRec{r}}
	rest := m.wins[k]
	for changed := true; changed; {
		changed = false
		var keep []*refWin
		for _, s := range rest {
			if s.start <= merged.end && s.end >= merged.start {
				merged.start, merged.end = min(merged.start, s.start), max(merged.end, s.end)
				merged.recs = append(merged.recs, s.recs...)
				changed = true
				continue
			}
			keep = append(keep, s)
		}
		rest = keep
	}
	if merged.maxTS()+m.lateness <= m.wm {
		return nil, true
	}
	m.wins[k] = append(rest, merged)
	if merged.maxTS() <= m.wm {
		return []string{m.result(k, merged)}, false
	}
	return nil, false
}

// advance moves the watermark to wm (if it is ahead) and returns the results that fire.
func (m *refWindows) advance(wm int64) []string {
	if wm <= m.wm {
		return nil
	}
	var fired []string
	for k, ws := range m.wins {
		var keep []*refWin
		for _, w := range ws {
			if w.maxTS() > m.wm && w.maxTS() <= wm {
				fired = append(fired, m.result(k, w))
			}
			if w.maxTS() > wm || w.maxTS()+m.lateness > wm {
				keep = append(keep, w)
			}
		}
		m.wins[k] = keep
	}
	m.wm = wm
	return fired
}

// result formats window w's output row as the harness does: the key, the window, and the
// aggregates of diffAggs. first and last are the values of the records with the smallest and
// the largest timestamp, ties going to the first and the last to arrive.
func (m *refWindows) result(k int64, w *refWin) string {
	recs := w.recs
	n := int64(len(recs))
	var si int64
	var sf float64
	lo, hi := recs[0].v, recs[0].v
	ls, hs := recs[0].s, recs[0].s
	first, last := recs[0], recs[0]
	for _, r := range recs {
		si += r.v
		sf += float64(r.v) / 2
		lo, hi = min(lo, r.v), max(hi, r.v)
		ls, hs = min(ls, r.s), max(hs, r.s)
		if r.ts < first.ts || r.ts == first.ts && r.seq < first.seq {
			first = r
		}
		if r.ts > last.ts || r.ts == last.ts && r.seq > last.seq {
			last = r
		}
	}
	row := record.Row{
		record.IntValue(k), record.TimeValue(time.UnixMilli(w.start)), record.TimeValue(time.UnixMilli(w.end)),
		record.IntValue(n), record.IntValue(si), record.FloatValue(sf),
		record.FloatValue(float64(si) / float64(n)), record.FloatValue(sf / float64(n)),
		record.IntValue(lo), record.IntValue(hi), record.FloatValue(float64(lo) / 2), record.FloatValue(float64(hi) / 2),
		record.StringValue(ls), record.StringValue(hs),
		record.IntValue(first.v), record.IntValue(last.v), record.StringValue(first.s), record.StringValue(last.s),
	}
	return operatortest.FormatRecord(m.schema, operatortest.Record{Row: row, Timestamp: w.maxTS()})
}

// diffCase is one random configuration.
type diffCase struct {
	fields string // the window's spec fields
	model  refWindows
}

func randomCase(rng *rand.Rand) diffCase {
	var c diffCase
	c.model.lateness = []int64{0, 0, 1, 2, 3, 5, 17, 40}[rng.IntN(8)]
	late := fmt.Sprintf("allowed-lateness: %dms", c.model.lateness)
	switch rng.IntN(4) { // sessions twice as often: their merging has more cases
	case 0: // tumbling
		size := []int64{1, 7, 10, 25}[rng.IntN(4)]
		c.model.size, c.model.slide = size, size
		c.fields = fmt.Sprintf("size: %dms", size)
	case 1: // sliding: size/slide 1, 3, 10 and non-multiples
		ss := [][2]int64{{10, 10}, {9, 3}, {30, 3}, {10, 3}, {7, 2}, {12, 5}, {25, 10}, {6, 4}, {20, 1}}[rng.IntN(9)]
		c.model.size, c.model.slide = ss[0], ss[1]
		c.fields = fmt.Sprintf("size: %dms, slide: %dms", ss[0], ss[1])
	default:
		c.model.gap = []int64{1, 2, 3, 10, 25}[rng.IntN(5)]
		if rng.IntN(2) == 0 {
			// A lateness near the gap: one session's cleanup time is often another's firing
			// time, which its timers share.
			c.model.lateness = 1 + rng.Int64N(2*c.model.gap)
			late = fmt.Sprintf("allowed-lateness: %dms", c.model.lateness)
		}
		c.fields = fmt.Sprintf("gap: %dms, %s", c.model.gap, late)
		return c
	}
	if rng.IntN(2) == 0 {
		c.model.offset = rng.Int64N(2*c.model.size+1) - c.model.size
		c.fields += fmt.Sprintf(", offset: %dms", c.model.offset)
	}
	c.fields += ", " + late
	return c
}

// diffStep is one step of a differential run: a record (k, r) or a watermark, and what the
// model says it emits and whether the record is late.
type diffStep struct {
	record bool
	k      int64
	r      refRec
	wm     int64
	want   []string
	late   bool
}

func (s diffStep) String() string {
	if s.record {
		return fmt.Sprintf("record k=%d ts=%d v=%d s=%q", s.k, s.r.ts, s.r.v, s.r.s)
	}
	return fmt.Sprintf("watermark %d", s.wm)
}

// diffStream draws a random stream for case c and runs it through the model.
func diffStream(rng *rand.Rand, m *refWindows) []diffStep {
	letters := []string{"a", "b", "c", "ab", "ba", "x", "", "zz"}
	keys := int64([]int{1, 2, 3, 5}[rng.IntN(4)])
	disorder := []int64{0, 3, 20, 60}[rng.IntN(4)]
	wmBound := []int64{0, 5, 30}[rng.IntN(3)]
	clockAt := rng.Int64N(400) - 300
	maxTS := operator.MinWatermark
	var steps []diffStep
	for range 50 + rng.IntN(350) {
		clockAt += rng.Int64N(5)
		s := diffStep{record: true, k: rng.Int64N(keys), r: refRec{ts: clockAt - rng.Int64N(disorder+1), v: rng.Int64N(101) - 50, s: letters[rng.IntN(len(letters))]}}
		maxTS = max(maxTS, s.r.ts)
		s.want, s.late = m.add(s.k, s.r)
		steps = append(steps, s)
		w := operator.MinWatermark
		switch x := rng.IntN(100); {
		case x < 25:
			w = maxTS - rng.Int64N(wmBound+1) - 1
		case x < 27: // a jump ahead: what comes next is mostly late
			w = maxTS + rng.Int64N(50)
		}
		if w != operator.MinWatermark {
			steps = append(steps, diffStep{wm: w, want: m.advance(w)})
		}
	}
	return append(steps, diffStep{wm: operator.MaxWatermark, want: m.advance(operator.MaxWatermark)})
}

// TestWindowDifferential runs each random stream once, with failures: at up to three random
// points a checkpoint is taken (its keyed state written only later, while records go on, as a
// task does), and some steps later the harness "fails" and a new one, on a random backend, is
// restored from it and replays the stream from the checkpoint, the watermark of the
// checkpoint first (as the regenerated watermarks would). Every step's output must be the
// model's, also in the replay, and at the end the state must be empty.
func TestWindowDifferential(t *testing.T) {
	for seed := *diffSeed; seed < *diffSeed+uint64(*diffSeeds); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x5eed))
			c := randomCase(rng)
			spec := keyedSpec(`type: window, ` + c.fields + `, ` + diffAggs)
			backend := backends[rng.IntN(2)]
			h := operatortest.New(t, spec, "op", operatortest.Options{Backend: backend})
			m := &c.model
			m.wm, m.wins, m.schema = operator.MinWatermark, map[int64][]*refWin{}, h.OutputSchema()
			steps := diffStream(rng, m)
			// Failures: checkpoint before step cp, fail before step at, cp < at <= the next cp.
			type failure struct{ cp, at int }
			var failures []failure
			for from, n := 0, rng.IntN(4); len(failures) < n && from < len(steps)-2; {
				cp := from + rng.IntN(len(steps)-1-from)
				at := cp + 1 + rng.IntN(min(20, len(steps)-1-cp))
				failures = append(failures, failure{cp, at})
				from = at
			}
			planned := slices.Clone(failures)
			fail := func(format string, args ...any) {
				t.Helper()
				t.Fatalf("seed %d, window %s on %s, failures (checkpoint, fail) %v: %s", seed, c.fields, backend, planned, fmt.Sprintf(format, args...))
			}
			var pending *operatortest.PendingSnapshot
			var cpWM int64
			restoredAt := 0 // the side output and the dropped count start there
			for i := 0; i < len(steps); {
				if len(failures) > 0 && i == failures[0].cp && pending == nil {
					var err error
					if pending, err = h.Checkpoint(int64(i + 1)); err != nil {
						fail("checkpoint before step %d: %v", i, err)
					}
					cpWM = h.Watermark()
				}
				if pending != nil && i == failures[0].at {
					snap, err := pending.Write()
					if err != nil {
						fail("write the checkpoint before step %d: %v", failures[0].cp, err)
					}
					if err := h.Close(); err != nil {
						fail("close: %v", err)
					}
					backend = backends[rng.IntN(2)]
					h = operatortest.New(t, spec, "op", operatortest.Options{Backend: backend, Restore: []*operatortest.Snapshot{snap}})
					if cpWM != operator.MinWatermark {
						watermark(t, h, cpWM)
					}
					if got := take(h); len(got) != 0 {
						fail("restored before step %d, the checkpoint's watermark %d emits %q", failures[0].cp, cpWM, got)
					}
					i, restoredAt, pending = failures[0].cp, failures[0].cp, nil
					failures = failures[1:]
					continue
				}
				s := steps[i]
				if s.record {
					if err := h.Process(s.r.ts, h.Row(0, s.k, s.r.v, float64(s.r.v)/2, s.r.s, s.r.ts)); err != nil {
						fail("step %d (%v): %v", i, s, err)
					}
				} else {
					watermark(t, h, s.wm)
				}
				got, want := take(h), slices.Clone(s.want)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					fail("step %d (%v): output\n  %q\nwant\n  %q", i, s, got, want)
				}
				i++
			}
			var late []string
			for _, s := range steps[restoredAt:] {
				if s.late {
					late = append(late, fmt.Sprintf("%d@%d", s.r.v, s.r.ts))
				}
			}
			if got := lateRecords(h); !slices.Equal(got, late) {
				fail("late side output since the last restore %q, want %q", got, late)
			}
			if got := h.Dropped(); got != int64(len(late)) {
				fail("Dropped() since the last restore = %d, want %d", got, len(late))
			}
			checkEmpty(t, h, fmt.Sprintf("seed %d at the max watermark", seed))
		})
	}
}

package nexmark

import (
	"bytes"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goflink/goflink/operator"
	"github.com/goflink/goflink/operator/operatortest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

func bounded(events int64) Config {
	c := DefaultConfig()
	c.Events = &events
	return c
}

// run is one attempt of one subtask.
type run struct {
	*source
	out *operatortest.Capture
	sc  *operatortest.StateContext
}

func openRun(t *testing.T, c Config, sub, par int, restoredID int64, restored [][]byte) (*run, error) {
	t.Helper()
	src := newSource(c)
	sc := operatortest.NewStateContext(restoredID, map[string][][]byte{positionState: restored})
	if err := src.InitializeState(sc); err != nil {
		t.Fatalf("InitializeState: %v", err)
	}
	out := &operatortest.Capture{}
	ctx := &operator.Context{Subtask: sub, Parallelism: par, Logger: slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))}
	err := src.Open(ctx, out)
	return &run{src, out, sc}, err
}

func mustOpenRun(t *testing.T, c Config, sub, par int, restoredID int64, restored [][]byte) *run {
	t.Helper()
	r, err := openRun(t, c, sub, par, restoredID, restored)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return r
}

func (r *run) emit(t *testing.T, limit int) (int, bool) {
	t.Helper()
	n, wait, done, err := r.Emit(limit)
	if err != nil || wait != 0 {
		t.Fatalf("Emit(%d) = %d, %v, %v, %v", limit, n, wait, done, err)
	}
	return n, done
}

func (r *run) snapshot(t *testing.T, id int64) [][]byte {
	t.Helper()
	if err := r.SnapshotState(id); err != nil {
		t.Fatalf("SnapshotState(%d): %v", id, err)
	}
	return operatortest.Checkpoint(t, positionState, pb.ListDistribution_LIST_DISTRIBUTION_UNION, r.sc)
}

// drain emits until done, in batches of limit, and returns the rows as lines.
func (r *run) drain(t *testing.T, limit int) []string {
	t.Helper()
	for i := 0; ; i++ {
		if _, done := r.emit(t, limit); done {
			break
		}
		if i > 1_000_000 {
			t.Fatal("the source never ends")
		}
	}
	return lines(r.out.Rows)
}

func lines(rows []record.Row) []string {
	out := make([]string, len(rows))
	for i, row := range rows {
		out[i] = formatRow(row)
	}
	return out
}

// all runs a bounded source with parallelism p to its end and returns every subtask's
// events.
func all(t *testing.T, c Config, p, limit int) [][]string {
	t.Helper()
	subs := make([][]string, p)
	for i := range p {
		subs[i] = mustOpenRun(t, c, i, p, 0, nil).drain(t, limit)
	}
	return subs
}

// TestSameEventsWhateverParallelism runs 3,001 events with parallelism 1 to 7: the union of
// the subtasks is always the same events, subtask i emitting the events n % p == i in order
// with timestamps that never decrease; another seed gives other events.
func TestSameEventsWhateverParallelism(t *testing.T) {
	const events = 3001
	c := bounded(events)
	c.FirstEventRate = 1000 // 1 ms apart
	want := all(t, c, 1, 64)[0]
	if len(want) != events {
		t.Fatalf("parallelism 1 emitted %d events, want %d", len(want), events)
	}
	if again := all(t, c, 1, 7)[0]; !slices.Equal(again, want) {
		t.Fatal("a second run emitted other events")
	}
	for p := 2; p <= 7; p++ {
		subs := all(t, c, p, 50)
		total := 0
		for i, got := range subs {
			total += len(got)
			for k, line := range got {
				if n := i + k*p; line != want[n] {
					t.Fatalf("parallelism %d subtask %d: event %d is\n%s\nwant\n%s", p, i, k, line, want[n])
				}
			}
		}
		if total != events {
			t.Errorf("parallelism %d emitted %d events, want %d", p, total, events)
		}
	}
	r := mustOpenRun(t, c, 1, 3, 0, nil)
	r.drain(t, 100)
	for k := 1; k < len(r.out.Rows); k++ {
		prev, cur := r.out.Rows[k-1][fDateTime].Time(), r.out.Rows[k][fDateTime].Time()
		if d := cur.Sub(prev); d != 3*time.Millisecond {
			t.Fatalf("subtask 1 of 3: events %d and %d are %v apart, want 3ms", k-1, k, d)
		}
	}
	other := c
	other.Seed = 1
	diff := all(t, other, 1, 1000)[0]
	same := 0
	for n := range diff {
		if diff[n] == want[n] {
			same++
		}
	}
	if same > events/100 {
		t.Errorf("seed 1 repeats %d of seed 0's %d events", same, events)
	}
}

// TestBoundedEnds checks that a bounded source ends with done after exactly its events, also
// with more subtasks than events.
func TestBoundedEnds(t *testing.T) {
	for _, tc := range []struct {
		events int64
		p      int
	}{{1, 1}, {1, 3}, {5, 8}, {100, 1}, {100, 3}, {1000, 4}} {
		total := 0
		for i := range tc.p {
			r := mustOpenRun(t, bounded(tc.events), i, tc.p, 0, nil)
			for {
				n, done := r.emit(t, 7)
				total += n
				if done {
					break
				}
			}
			if n, done := r.emit(t, 7); n != 0 || !done {
				t.Errorf("events %d, subtask %d of %d: Emit after the end = %d, %v, want 0, true", tc.events, i, tc.p, n, done)
			}
		}
		if total != int(tc.events) {
			t.Errorf("events %d, parallelism %d: %d emitted", tc.events, tc.p, total)
		}
	}
}

// TestRestoreContinues takes a checkpoint part way, runs on (the output lost with a
// failure), restores and checks that the subtasks together emit every event exactly once.
func TestRestoreContinues(t *testing.T) {
	const p, events = 3, 1000
	c := bounded(events)
	want := all(t, c, 1, 1000)[0]
	var chk [][]byte
	before := make([][]string, p)
	for sub := range p {
		r := mustOpenRun(t, c, sub, p, 0, nil)
		r.emit(t, 40+sub)
		before[sub] = lines(r.out.Rows)
		chk = append(chk, r.snapshot(t, 7)...)
		r.emit(t, 10) // lost with the failure
	}
	for sub := range p {
		r := mustOpenRun(t, c, sub, p, 7, chk)
		if r.count != int64(40+sub) {
			t.Errorf("subtask %d restored emitted = %d, want %d", sub, r.count, 40+sub)
		}
		got := append(before[sub], r.drain(t, 33)...)
		var exp []string
		for n := sub; n < events; n += p {
			exp = append(exp, want[n])
		}
		if !slices.Equal(got, exp) {
			t.Fatalf("subtask %d: %d events before and after the restore, want the %d of the subtask in order", sub, len(got), len(exp))
		}
	}
}

// TestRestoreDone restores a source that had finished: it stays done.
func TestRestoreDone(t *testing.T) {
	c := bounded(10)
	r := mustOpenRun(t, c, 0, 1, 0, nil)
	r.drain(t, 100)
	chk := r.snapshot(t, 3)
	r = mustOpenRun(t, c, 0, 1, 3, chk)
	if n, done := r.emit(t, 100); n != 0 || !done {
		t.Errorf("Emit after restoring a finished source = %d, %v, want 0, true", n, done)
	}
}

// TestRestoreRefusesRescale restores a checkpoint of parallelism 2 with parallelism 3.
func TestRestoreRefusesRescale(t *testing.T) {
	c := bounded(100)
	var chk [][]byte
	for sub := range 2 {
		r := mustOpenRun(t, c, sub, 2, 0, nil)
		r.emit(t, 5)
		chk = append(chk, r.snapshot(t, 4)...)
	}
	_, err := openRun(t, c, 0, 3, 4, chk)
	if err == nil || !strings.Contains(err.Error(), "cannot be rescaled: checkpoint 4 has parallelism 2, job has 3") {
		t.Errorf("Open with another parallelism: %v, want a rescale error", err)
	}
}

// TestRate checks that the rate limit paces the source, shared by the subtasks.
func TestRate(t *testing.T) {
	c := DefaultConfig()
	c.Rate = 100
	now := time.Unix(1000, 0)
	src := newSource(c)
	out := &operatortest.Capture{}
	if err := src.Open(&operator.Context{Subtask: 0, Parallelism: 2, Now: func() time.Time { return now }}, out); err != nil {
		t.Fatal(err)
	}
	if n, wait, _, _ := src.Emit(100); n != 0 || wait <= 0 {
		t.Fatalf("Emit at the start = %d, wait %v; want 0 and a wait", n, wait)
	}
	now = now.Add(time.Second)
	if n, _, _, _ := src.Emit(100); n != 50 {
		t.Errorf("Emit after 1 s at 100/s over 2 subtasks = %d, want 50", n)
	}
}

// TestEmitError stops at an output error without counting the event.
func TestEmitError(t *testing.T) {
	r := mustOpenRun(t, bounded(100), 0, 1, 0, nil)
	r.out.Err = errStop
	n, _, done, err := r.Emit(10)
	if n != 0 || done || !errors.Is(err, errStop) {
		t.Errorf("Emit into a failing output = %d, %v, %v; want 0, false, errStop", n, done, err)
	}
	r.out.Err = nil
	r.emit(t, 1)
	if got := r.out.Rows[0][fEventType].Int(); got != KindPerson || r.next != 1 {
		t.Errorf("after the error the source emitted kind %d, next %d; want event 0 again", got, r.next)
	}
}

type stopError struct{}

func (stopError) Error() string { return "stop" }

var errStop error = stopError{}

// BenchmarkEmit measures the events per second of one subtask into an output that drops
// them.
func BenchmarkEmit(b *testing.B) {
	src := newSource(DefaultConfig())
	if err := src.Open(&operator.Context{Subtask: 0, Parallelism: 1}, discard{}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		n, _, _, err := src.Emit(min(1024, b.N-done))
		if err != nil {
			b.Fatal(err)
		}
		done += n
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

type discard struct{}

func (discard) Emit(record.Row) error { return nil }

// TestGeneratorIsTheSource checks that Generator.Event gives the events a source emits over
// its subtasks, and rows that stay valid after the next call.
func TestGeneratorIsTheSource(t *testing.T) {
	const events = 500
	c := bounded(events)
	c.Seed, c.FirstEventRate = 7, 1000
	subs := all(t, c, 3, 64)
	g := NewGenerator(c)
	var rows []record.Row
	for n := range int64(events) {
		rows = append(rows, g.Event(n))
	}
	for n, row := range rows {
		if got, want := formatRow(row), subs[n%3][n/3]; got != want {
			t.Fatalf("Event(%d) =\n%s\nwant what the source emits:\n%s", n, got, want)
		}
	}
}

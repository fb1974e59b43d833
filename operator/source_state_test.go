package operator

import (
	"bytes"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// seqRun is one attempt of a sequence source subtask with operator state.
type seqRun struct {
	*sequence
	out *capture
	sc  *fakeStateContext
}

func openSeqRun(t *testing.T, spec sequenceConfig, ctx *Context, restoredID int64, restored [][]byte) (*seqRun, error) {
	t.Helper()
	src := newSequence(spec)
	sc := newStateContext(restoredID, map[string][][]byte{sequencePositionState: restored})
	if err := src.InitializeState(sc); err != nil {
		t.Fatalf("InitializeState: %v", err)
	}
	out := &capture{}
	err := src.Open(ctx, out)
	return &seqRun{src, out, sc}, err
}

func mustOpenSeqRun(t *testing.T, spec sequenceConfig, ctx *Context, restoredID int64, restored [][]byte) *seqRun {
	t.Helper()
	r, err := openSeqRun(t, spec, ctx, restoredID, restored)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return r
}

func (r *seqRun) emit(t *testing.T, limit int) (n int, done bool) {
	t.Helper()
	n, _, done, err := r.Emit(limit)
	if err != nil {
		t.Fatalf("Emit(%d): %v", limit, err)
	}
	return n, done
}

func (r *seqRun) snapshot(t *testing.T, id int64) [][]byte {
	t.Helper()
	if err := r.SnapshotState(id); err != nil {
		t.Fatalf("SnapshotState(%d): %v", id, err)
	}
	return checkpointOf(t, sequencePositionState, pb.ListDistribution_LIST_DISTRIBUTION_UNION, r.sc)
}

func TestSequenceRestoreRewinds(t *testing.T) {
	const p = 3
	spec := unbounded(100)
	var chk [][]byte
	var before [p][]int64
	for sub := range p {
		r := mustOpenSeqRun(t, spec, &Context{Subtask: sub, Parallelism: p}, 0, nil)
		r.emit(t, 4+sub)
		before[sub] = r.out.ints(0)
		chk = append(chk, r.snapshot(t, 7)...)
		r.emit(t, 10) // lost with the failure
	}
	for sub := range p {
		var logs bytes.Buffer
		ctx := &Context{Subtask: sub, Parallelism: p, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
		r := mustOpenSeqRun(t, spec, ctx, 7, chk)
		r.emit(t, 5)
		got := append(slices.Clone(before[sub]), r.out.ints(0)...)
		var want []int64
		for i := range len(got) {
			want = append(want, 100+int64(sub)+int64(i*p))
		}
		if !slices.Equal(got, want) {
			t.Errorf("subtask %d: before the checkpoint %v, after the restore %v, want %v together", sub, before[sub], r.out.ints(0), want)
		}
		next := 100 + int64(sub) + int64((4+sub)*p)
		if line := logs.String(); !strings.Contains(line, "level=INFO") || !strings.Contains(line, `msg="restored source position"`) ||
			!strings.Contains(line, "checkpoint=7") || !strings.Contains(line, "next="+itoa(next)) {
			t.Errorf("subtask %d logged %q, want an INFO restored source position with checkpoint=7 next=%d", sub, line, next)
		}
		// The position state counts every record, across restores.
		chk2 := r.snapshot(t, 8)
		if !strings.Contains(string(chk2[0]), `"emitted":`+itoa(int64(4+sub+5))) {
			t.Errorf("subtask %d state after the restore = %s, want emitted %d", sub, chk2[0], 4+sub+5)
		}
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func TestSequenceRestoreBounded(t *testing.T) {
	tests := []struct {
		name   string
		before int // records emitted before the checkpoint
	}{
		{"nothing emitted", 0},
		{"middle", 4},
		{"all but the last", 9},
		{"done", 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := seqSpec(1, 10)
			a := mustOpenSeqRun(t, spec, &Context{Parallelism: 1}, 0, nil)
			if tc.before > 0 {
				a.emit(t, tc.before)
			}
			chk := a.snapshot(t, 1)
			b := mustOpenSeqRun(t, spec, &Context{Parallelism: 1}, 1, chk)
			drain(t, b.sequence, b.out, 3)
			got := append(a.out.ints(0), b.out.ints(0)...)
			if want := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}; !slices.Equal(got, want) {
				t.Errorf("before the checkpoint %v, after the restore %v, want %v together", a.out.ints(0), b.out.ints(0), want)
			}
		})
	}
}

// TestSequenceRescale restores checkpoints of every subtask at other parallelisms, for bounded
// and unbounded sequences and with splits exhausted before the checkpoint: the values emitted
// before the barrier and after the restore together are the sequence, none twice, none left out.
func TestSequenceRescale(t *testing.T) {
	tests := []struct {
		from, to  int
		maxP      int
		before    []int // records each old subtask emits before the checkpoint
		newP      int
		unbounded bool
	}{
		{1, 1000, 128, []int{100, 37}, 4, false},
		{1, 1000, 128, []int{10, 200, 3, 0}, 2, false},
		{5, 500, 16, []int{40, 40, 41}, 3, false},
		{1, 300, 8, []int{300, 0}, 1, false}, // subtask 0 emitted all its values
		{1, 40, 8, []int{20, 1}, 3, false},   // splits exhausted before the checkpoint
		{1, 0, 128, []int{7}, 3, true},
		{1, 0, 128, []int{50, 2, 9}, 1, true},
	}
	for _, tc := range tests {
		name := fmt.Sprintf("%d-to-%d/max%d/%v", len(tc.before), tc.newP, tc.maxP, tc.before)
		t.Run(name, func(t *testing.T) {
			spec := seqSpec(int64(tc.from), int64(tc.to))
			if tc.unbounded {
				spec = unbounded(int64(tc.from))
			}
			seen := map[int64]int{}
			var chk [][]byte
			oldP := len(tc.before)
			for sub, n := range tc.before {
				r := mustOpenSeqRun(t, spec, &Context{Subtask: sub, Parallelism: oldP, MaxParallelism: tc.maxP}, 0, nil)
				if n > 0 {
					r.emit(t, n)
				}
				for _, v := range r.out.ints(0) {
					seen[v]++
				}
				chk = append(chk, r.snapshot(t, 3)...)
				r.emit(t, 5) // after the barrier: lost with the restore
			}
			// The unbounded case runs on to a limit: all values up to it must be seen.
			limit := int64(tc.to)
			if tc.unbounded {
				limit = int64(tc.from) + 2000
			}
			for sub := range tc.newP {
				r := mustOpenSeqRun(t, spec, &Context{Subtask: sub, Parallelism: tc.newP, MaxParallelism: 999}, 3, chk)
				for range 10_000 {
					n, done := r.emit(t, 64)
					if done || n == 0 {
						break
					}
					if ints := r.out.ints(0); ints[len(ints)-1] > limit+int64(tc.maxP)*64 {
						break
					}
				}
				for _, v := range r.out.ints(0) {
					seen[v]++
				}
			}
			for v := int64(tc.from); v <= limit; v++ {
				if seen[v] != 1 {
					t.Fatalf("value %d emitted %d times, want once", v, seen[v])
				}
			}
			if !tc.unbounded && len(seen) != tc.to-tc.from+1 {
				t.Errorf("%d distinct values, want %d", len(seen), tc.to-tc.from+1)
			}
		})
	}
}

// TestSequenceRestoreKeepsOrder: restored at the same parallelism from a snapshot taken within a
// round over the splits, a subtask goes on in increasing order.
func TestSequenceRestoreKeepsOrder(t *testing.T) {
	for _, before := range []int{0, 1, 5, 63, 64, 65, 130} {
		a := mustOpenSeqRun(t, unbounded(0), &Context{Subtask: 1, Parallelism: 2, MaxParallelism: 128}, 0, nil)
		if before > 0 {
			a.emit(t, before)
		}
		other := mustOpenSeqRun(t, unbounded(0), &Context{Subtask: 0, Parallelism: 2, MaxParallelism: 128}, 0, nil)
		chk := append(a.snapshot(t, 2), other.snapshot(t, 2)...)
		b := mustOpenSeqRun(t, unbounded(0), &Context{Subtask: 1, Parallelism: 2, MaxParallelism: 128}, 2, chk)
		b.emit(t, 200)
		got := append(a.out.ints(0), b.out.ints(0)...)
		for i, v := range got {
			if want := int64(1 + 2*i); v != want {
				t.Fatalf("%d before the snapshot: record %d = %d, want %d", before, i, v, want)
			}
		}
	}
}

// TestSequenceOrderUnchanged: unrestored, subtask i of p emits from+i, from+i+p, … (when p
// divides the number of splits).
func TestSequenceOrderUnchanged(t *testing.T) {
	for _, p := range []int{1, 2, 4} {
		for sub := range p {
			r := mustOpenSeqRun(t, unbounded(10), &Context{Subtask: sub, Parallelism: p, MaxParallelism: 128}, 0, nil)
			r.emit(t, 300)
			for i, v := range r.out.ints(0) {
				if want := int64(10 + sub + i*p); v != want {
					t.Fatalf("p=%d subtask %d: record %d = %d, want %d", p, sub, i, v, want)
				}
			}
		}
	}
}

func TestSequenceRestoreInconsistent(t *testing.T) {
	var chk [][]byte
	for sub := range 2 {
		r := mustOpenSeqRun(t, unbounded(0), &Context{Subtask: sub, Parallelism: 2}, 0, nil)
		r.emit(t, 3)
		chk = append(chk, r.snapshot(t, 4)...)
	}
	// A position of another subtask only: the checkpoint is inconsistent.
	if _, err := openSeqRun(t, unbounded(0), &Context{Subtask: 0, Parallelism: 2}, 4, chk[1:]); err == nil {
		t.Errorf("restore without this subtask's position = nil error")
	}
	if _, err := openSeqRun(t, unbounded(0), &Context{Subtask: 0, Parallelism: 2}, 4, append(chk, chk[0])); err == nil {
		t.Errorf("restore with a split twice = nil error")
	}
	old := [][]byte{[]byte(`{"subtask":0,"parallelism":2,"next":6,"emitted":3}`), []byte(`{"subtask":1,"parallelism":2,"next":7,"emitted":3}`)}
	r := mustOpenSeqRun(t, unbounded(0), &Context{Subtask: 0, Parallelism: 1}, 4, old)
	r.emit(t, 4)
	if got, want := r.out.ints(0), []int64{6, 7, 8, 9}; !slices.Equal(got, want) {
		t.Errorf("restore of an earlier version's positions at p=1 emitted %v, want %v", got, want)
	}
	// A position that is not its split's value after its count (another job's from, or a
	// damaged checkpoint): refused, naming the split, rather than emitting values twice or never.
	for _, bad := range []string{
		`{"split":0,"splits":2,"next":7,"emitted":3}`,   // 7 is on split 1
		`{"split":0,"splits":2,"next":8,"emitted":3}`,   // on split 0, but after 4 values
		`{"split":0,"splits":2,"next":-2,"emitted":-1}`, // before the start
	} {
		chk := [][]byte{[]byte(bad), []byte(`{"split":1,"splits":2,"next":7,"emitted":3}`)}
		_, err := openSeqRun(t, unbounded(0), &Context{Subtask: 0, Parallelism: 2}, 4, chk)
		if err == nil || !strings.Contains(err.Error(), "is not one of split 0 of 2") {
			t.Errorf("restore of %s = %v, want a position error", bad, err)
		}
	}
	sc := newStateContext(4, map[string][][]byte{sequencePositionState: {[]byte("{")}})
	if err := newSequence(unbounded(0)).InitializeState(sc); err == nil {
		t.Errorf("InitializeState with a corrupt position = nil error")
	}
}

func TestSequenceRestoreWithoutPosition(t *testing.T) {
	// A checkpoint without the source's state (e.g. taken before the source had any): start
	// from the beginning.
	r := mustOpenSeqRun(t, seqSpec(1, 3), &Context{Parallelism: 1}, 5, nil)
	drain(t, r.sequence, r.out, 10)
	if got, want := r.out.ints(0), []int64{1, 2, 3}; !slices.Equal(got, want) {
		t.Errorf("emitted %v, want %v", got, want)
	}
}

func TestSequenceRestoreRateNoBurst(t *testing.T) {
	spec := unbounded(0)
	spec.Rate = 100
	clock := newFakeClock()
	a := mustOpenSeqRun(t, spec, &Context{Parallelism: 1, Now: clock.Now}, 0, nil)
	total := runRated(t, a.sequence, clock, 10*time.Millisecond, 2*time.Second, func(time.Duration, int) {})
	chk := a.snapshot(t, 1)

	// The restore happens a minute later: the source continues from its position at the
	// configured rate, without bursting to catch up.
	clock.advance(time.Minute)
	b := mustOpenSeqRun(t, spec, &Context{Parallelism: 1, Now: clock.Now}, 1, chk)
	n, _, _, err := b.Emit(rateBatch)
	if err != nil || n > 1 {
		t.Fatalf("first Emit after the restore = %d, %v, want at most one record", n, err)
	}
	clock.advance(time.Second)
	m, _, _, err := b.Emit(rateBatch)
	if err != nil || m < 99 || m > 101 {
		t.Errorf("Emit one second after the restore = %d, %v, want about 100", m, err)
	}
	if got := b.out.ints(0); len(got) == 0 || got[0] != int64(total) {
		t.Errorf("first value after the restore = %v, want %d", got, total)
	}
}

func TestSequenceSnapshotWithoutInitializeState(t *testing.T) {
	src, _ := openSeq(t, unbounded(0), &Context{Parallelism: 1})
	if err := src.SnapshotState(1); err == nil {
		t.Errorf("SnapshotState without InitializeState = nil error")
	}
}

// A subtask with an empty range finishes before any checkpoint and has no position in later
// checkpoints; restoring it must not fail (it stays finished).
func TestSequenceRestoreEmptySubtaskWithoutPosition(t *testing.T) {
	spec := sequenceConfig{From: 1, To: proto.Int64(1)}
	first := mustOpenSeqRun(t, spec, &Context{Parallelism: 2, Subtask: 0}, 0, nil)
	if n, done := first.emit(t, 10); n != 1 || !done {
		t.Fatalf("subtask 0 emitted %d (done %v), want 1 and done", n, done)
	}
	if err := first.SnapshotState(3); err != nil {
		t.Fatal(err)
	}
	cp := first.sc.lists[sequencePositionState].snapshot()
	r, err := openSeqRun(t, spec, &Context{Parallelism: 2, Subtask: 1}, 3, cp)
	if err != nil {
		t.Fatalf("restoring the empty subtask 1 from checkpoint 3: %v", err)
	}
	if n, done := r.emit(t, 10); n != 0 || !done {
		t.Errorf("restored empty subtask emitted %d (done %v), want 0 and done", n, done)
	}
	// A subtask with a range but no position is still an error (its position was lost).
	if _, err := openSeqRun(t, sequenceConfig{From: 1, To: proto.Int64(10)}, &Context{Parallelism: 2, Subtask: 1}, 3, cp); err == nil {
		t.Errorf("restoring subtask 1 of 1..10 without its position succeeded")
	}
}

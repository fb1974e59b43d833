package operator

import (
	"encoding/json"
	"math"
	"slices"
	"testing"
)

// The sequence source is correct over the whole int64 range: it emits from..to exactly, split
// across subtasks, and stops at to, near math.MinInt64 and math.MaxInt64 and for ranges of 2^63
// values or more (security review F12: from -9223372036854775808 to 9223372036854775807 stopped
// after one record, for the overflow of to - next).
func TestSequenceWholeInt64Range(t *testing.T) {
	const minI, maxI = math.MinInt64, math.MaxInt64
	for _, tc := range []struct {
		name       string
		spec       sequenceConfig
		p, maxPar  int
		head, tail []int64 // the union's first values, and for a bounded end the last ones
		total      int     // all values when the range is small; 0 when it is not drained
	}{
		{"the whole range, p2", seqSpec(minI, maxI), 2, 2, []int64{minI, minI + 1, minI + 2, minI + 3}, nil, 0},
		{"the whole range, p3 of 128 splits", seqSpec(minI, maxI), 3, 128, []int64{minI, minI + 1, minI + 2}, nil, 0},
		{"2^63 values from -1", seqSpec(-1, maxI), 2, 4, []int64{-1, 0, 1, 2}, nil, 0},
		{"the top, p3", seqSpec(maxI-10, maxI), 3, 128, nil, []int64{maxI - 2, maxI - 1, maxI}, 11},
		{"the bottom, p4", seqSpec(minI, minI+5), 4, 128, []int64{minI, minI + 1}, []int64{minI + 5}, 6},
		{"one value at the top", seqSpec(maxI, maxI), 2, 2, []int64{maxI}, []int64{maxI}, 1},
		{"one value at the bottom", seqSpec(minI, minI), 3, 128, []int64{minI}, []int64{minI}, 1},
		{"unbounded near the top stops at MaxInt64", unbounded(maxI - 4), 2, 128, []int64{maxI - 4}, []int64{maxI}, 5},
		{"the top with more splits than values", seqSpec(maxI-2, maxI), 1, 32768, nil, []int64{maxI - 2, maxI - 1, maxI}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var all []int64
			for sub := range tc.p {
				src, out := openSeq(t, tc.spec, &Context{Subtask: sub, Parallelism: tc.p, MaxParallelism: tc.maxPar})
				if tc.total == 0 {
					// A range too large to drain: every subtask goes on emitting its values.
					for range 10 {
						if n, _, done, err := src.Emit(100); n != 100 || done || err != nil {
							t.Fatalf("subtask %d: Emit(100) = %d, done %v, %v; want 100 more values", sub, n, done, err)
						}
					}
				} else {
					drain(t, src, out, 7)
				}
				got := out.ints(0)
				for i := 1; i < len(got); i++ { // ascending in each subtask (no wrap-around)
					if got[i] <= got[i-1] {
						t.Fatalf("subtask %d emitted %d after %d", sub, got[i], got[i-1])
					}
				}
				all = append(all, got...)
			}
			slices.Sort(all)
			if len(all) > 0 && len(slices.Compact(slices.Clone(all))) != len(all) {
				t.Errorf("a value emitted twice: %v", all)
			}
			if tc.total > 0 && len(all) != tc.total {
				t.Errorf("%d values emitted, want %d: %v", len(all), tc.total, all)
			}
			if len(all) < len(tc.head) || !slices.Equal(all[:len(tc.head)], tc.head) {
				t.Errorf("the union starts %v, want %v", all[:min(len(all), 8)], tc.head)
			}
			if tc.tail != nil && (len(all) < len(tc.tail) || !slices.Equal(all[len(all)-len(tc.tail):], tc.tail)) {
				t.Errorf("the union ends %v, want %v", all[max(0, len(all)-8):], tc.tail)
			}
		})
	}
}

// A position restored at the end of the whole int64 range (2^63-1 values emitted by each of two
// splits) is recognised as its split's and ends the source after the last values.
func TestSequenceRestoreAtTheTopOfTheRange(t *testing.T) {
	spec := seqSpec(math.MinInt64, math.MaxInt64)
	const e = math.MaxInt64 // values emitted by each split: next = from + k + e*2
	var restored [][]byte
	for k, next := range []int64{math.MaxInt64 - 1, math.MaxInt64} {
		b, err := json.Marshal(sequencePosition{Split: int64(k), Splits: 2, Next: next, Emitted: e})
		if err != nil {
			t.Fatal(err)
		}
		restored = append(restored, b)
	}
	var all []int64
	for sub := range 2 {
		r := mustOpenSeqRun(t, spec, &Context{Subtask: sub, Parallelism: 2, MaxParallelism: 2}, 7, restored)
		n, done := r.emit(t, 10)
		if n != 1 || !done {
			t.Errorf("subtask %d: Emit = %d, done %v; want its last value and done", sub, n, done)
		}
		all = append(all, r.out.ints(0)...)
	}
	slices.Sort(all)
	if want := []int64{math.MaxInt64 - 1, math.MaxInt64}; !slices.Equal(all, want) {
		t.Errorf("emitted %v after the restore, want %v", all, want)
	}
	// A position off its split by one is refused, not emitted.
	bad, _ := json.Marshal(sequencePosition{Split: 1, Splits: 2, Next: math.MaxInt64 - 1, Emitted: e})
	if _, err := openSeqRun(t, spec, &Context{Subtask: 1, Parallelism: 2, MaxParallelism: 2}, 7, [][]byte{restored[0], bad}); err == nil {
		t.Error("Open accepted a position that is not on its split")
	}
}

package operator_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/goflink/goflink/operator"
	"github.com/goflink/goflink/operator/operatortest"
)

// watermarkSpec is a job whose watermark operator "op" (fields wmFields) reads rows {ts}.
func watermarkSpec(wmFields string) string {
	return fmt.Sprintf(`
name: harness
operators:
  - {name: src, type: sequence, from: 1, to: 10}
  - {name: m, type: map, fields: {ts: "value"}}
  - {name: op, type: watermark, timestamp: "ts", %s}
  - {name: out, type: discard}
`, wmFields)
}

// stamp hands a watermark operator a record whose timestamp field is ts.
func stamp(t *testing.T, h *operatortest.Harness, ts int64) {
	t.Helper()
	if err := h.Process(operator.NoTimestamp, h.Row(0, ts)); err != nil {
		t.Fatalf("Process(ts %d) = %v", ts, err)
	}
}

func periodic(t *testing.T, h *operatortest.Harness) {
	t.Helper()
	if err := h.PeriodicEmit(); err != nil {
		t.Fatalf("PeriodicEmit() = %v", err)
	}
}

// The watermark is max timestamp seen − max-out-of-orderness − 1 ms (Flink's
// BoundedOutOfOrdernessWatermarks), emitted at each periodic emit when it advanced: out-of-order
// records below the maximum do not move it, it never goes back, and each record carries the
// timestamp its expression gives.
func TestWatermarkBoundedOutOfOrderness(t *testing.T) {
	for _, tc := range []struct {
		bound string
		ts    []int64 // one periodic emit after each record
		want  []int64 // the watermarks emitted
	}{
		{bound: "0ms", ts: []int64{10, 5, 11, 11}, want: []int64{9, 10}},
		{bound: "200ms", ts: []int64{1000, 900, 1500, 1200}, want: []int64{799, 1299}},
		{bound: "1s", ts: []int64{-5000, -6000, 0, -1}, want: []int64{-6001, -1001}},
		{bound: "3ms", ts: []int64{2, 1}, want: []int64{-2}},
	} {
		t.Run(tc.bound, func(t *testing.T) {
			h := operatortest.New(t, watermarkSpec("max-out-of-orderness: "+tc.bound), "op", operatortest.Options{})
			periodic(t, h) // nothing seen yet: no watermark
			for _, ts := range tc.ts {
				stamp(t, h, ts)
				periodic(t, h)
			}
			if got := h.Watermarks(); !slices.Equal(got, tc.want) {
				t.Errorf("watermarks = %v, want %v", got, tc.want)
			}
			var stamps []int64
			for _, r := range h.Output() {
				stamps = append(stamps, r.Timestamp)
			}
			if !slices.Equal(stamps, tc.ts) {
				t.Errorf("record timestamps = %v, want %v", stamps, tc.ts)
			}
		})
	}
}

// The output watermark is monotonic over any order of records, and each one is the bound
// formula over the maximum seen so far.
func TestWatermarkMonotonic(t *testing.T) {
	h := operatortest.New(t, watermarkSpec("max-out-of-orderness: 7ms"), "op", operatortest.Options{})
	maxTS := operator.MinWatermark
	var want []int64
	for i, ts := range []int64{50, 3, 49, 60, 60, -100, 61, 10, 200, 199} {
		stamp(t, h, ts)
		maxTS = max(maxTS, ts)
		if i%2 == 0 {
			continue // two records per emit
		}
		periodic(t, h)
		if wm := maxTS - 8; len(want) == 0 || wm > want[len(want)-1] {
			want = append(want, wm)
		}
	}
	got := h.Watermarks()
	if !slices.Equal(got, want) {
		t.Errorf("watermarks = %v, want %v", got, want)
	}
	if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
		t.Errorf("watermarks %v do not strictly increase", got)
	}
}

// With idleness, a stream without records for that long is marked idle at the periodic emit;
// its next record marks it active again at once, and its watermarks go on from where they
// were. The clock is the harness's processing time.
func TestWatermarkIdleness(t *testing.T) {
	h := operatortest.New(t, watermarkSpec("idleness: 1s"), "op", operatortest.Options{ProcessingTime: 10_000})
	stamp(t, h, 100)
	periodic(t, h)
	clock(t, h, 10_999)
	periodic(t, h) // 999 ms without records: still active
	clock(t, h, 11_000)
	periodic(t, h) // 1 s: idle
	periodic(t, h) // idle once
	stamp(t, h, 150)
	periodic(t, h)
	clock(t, h, 11_500)
	stamp(t, h, 120) // out of order: no new watermark
	periodic(t, h)
	clock(t, h, 12_499)
	periodic(t, h)
	clock(t, h, 12_500)
	periodic(t, h)

	var got []string
	for _, e := range h.Events() {
		switch e.Kind {
		case operatortest.WatermarkEvent:
			got = append(got, fmt.Sprintf("wm %d", e.Watermark))
		case operatortest.StatusEvent:
			got = append(got, fmt.Sprintf("idle %v", e.Idle))
		case operatortest.RecordEvent:
			got = append(got, fmt.Sprintf("record %d", e.Record.Timestamp))
		}
	}
	want := []string{"record 100", "wm 99", "idle true", "idle false", "record 150", "wm 149", "record 120", "idle true"}
	if !slices.Equal(got, want) {
		t.Errorf("events\n  %q\nwant\n  %q", got, want)
	}
}

// Without idleness a stream never goes idle, however long it has no records.
func TestWatermarkNoIdleness(t *testing.T) {
	h := operatortest.New(t, watermarkSpec("max-out-of-orderness: 0ms"), "op", operatortest.Options{})
	stamp(t, h, 5)
	periodic(t, h)
	clock(t, h, 1<<40)
	periodic(t, h)
	if got := h.Statuses(); len(got) != 0 {
		t.Errorf("statuses = %v, want none", got)
	}
}

// A watermark generator makes the watermarks after it: upstream watermarks stop at it, except
// MaxWatermark (the end of a bounded input), which passes so that everything downstream fires.
func TestWatermarkMaxPassesThrough(t *testing.T) {
	h := operatortest.New(t, watermarkSpec("max-out-of-orderness: 0ms"), "op", operatortest.Options{})
	stamp(t, h, 10)
	watermark(t, h, 1_000) // an upstream watermark: stops here
	if got := h.Watermarks(); len(got) != 0 {
		t.Fatalf("watermarks after an upstream one = %v, want none", got)
	}
	periodic(t, h)
	watermark(t, h, operator.MaxWatermark)
	periodic(t, h) // the generator's own 9 is behind the output's MaxWatermark: not sent
	if got, want := h.Watermarks(), []int64{9, operator.MaxWatermark}; !slices.Equal(got, want) {
		t.Errorf("watermarks = %v, want %v", got, want)
	}
}

// A timestamp expression of type timestamp (a window's window_end here) is read in epoch
// milliseconds.
func TestWatermarkTimestampField(t *testing.T) {
	const spec = `
name: harness
operators:
  - {name: src, type: sequence, from: 1, to: 10}
  - {name: m, type: map, fields: {k: "value % 5", ts: "value"}}
  - {name: wm, type: watermark, timestamp: "ts"}
  - {name: by-k, type: key-by, key: "k"}
  - {name: w, type: window, size: 10ms, aggregates: {n: "count()"}}
  - {name: op, type: watermark, timestamp: "window_end", max-out-of-orderness: 5ms}
  - {name: out, type: discard}
`
	h := operatortest.New(t, spec, "op", operatortest.Options{})
	if err := h.Process(operator.NoTimestamp, h.Row(0, 1, -20, 30, 7)); err != nil {
		t.Fatal(err)
	}
	periodic(t, h)
	if got, want := h.Watermarks(), []int64{24}; !slices.Equal(got, want) {
		t.Errorf("watermarks = %v, want %v", got, want)
	}
	if got := h.Output(); len(got) != 1 || got[0].Timestamp != 30 {
		t.Errorf("output = %v, want one record at 30", got)
	}
}

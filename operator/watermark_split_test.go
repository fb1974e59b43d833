package operator

import (
	"slices"
	"testing"
	"time"

	"github.com/goflink/goflink/record"
)

// timeRecorder is a TimeOutput that keeps what a generator emits.
type timeRecorder struct {
	wms      []int64
	statuses []bool
}

func (r *timeRecorder) EmitWatermark(wm int64) error { r.wms = append(r.wms, wm); return nil }
func (r *timeRecorder) EmitWatermarkStatus(idle bool) error {
	r.statuses = append(r.statuses, idle)
	return nil
}

type discardOutput struct{}

func (discardOutput) Emit(record.Row) error { return nil }

// A source's splits each hold the watermark back, as Flink's per-split watermarks: the output
// is the minimum over the splits that are not idle, a declared split without records holds it
// at the start until it is idle, and the stream is idle when every split is.
func TestWatermarkPerSplit(t *testing.T) {
	schema := record.MustSchema(record.Field{Name: "ts", Type: record.Int64})
	w, err := newWatermark(watermarkConfig{Timestamp: "ts", OutOfOrderness: 10, Idleness: 1000}, schema)
	if err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(0)
	var out timeRecorder
	stamp := NoTimestamp
	ctx := &Context{OperatorName: "wm", Now: func() time.Time { return now }}
	ctx.BindTime(&stamp, &out, nil)
	src := &Context{}
	ctx.ShareSplits(src)
	if err := w.Open(ctx, discardOutput{}); err != nil {
		t.Fatal(err)
	}
	src.DeclareSplit(0)
	src.DeclareSplit(1)
	emit := func(split int, ts int64) {
		t.Helper()
		src.SetSplit(split)
		if err := w.Process(record.Row{record.IntValue(ts)}); err != nil {
			t.Fatal(err)
		}
	}
	tick := func(advance time.Duration) {
		t.Helper()
		now = now.Add(advance)
		if err := w.OnPeriodicEmit(); err != nil {
			t.Fatal(err)
		}
	}
	emit(0, 500)
	tick(200 * time.Millisecond)
	if len(out.wms) != 0 {
		t.Fatalf("split 1 has no records yet, but the watermark went to %v", out.wms)
	}
	emit(1, 300)
	emit(0, 800)
	tick(200 * time.Millisecond)
	if want := []int64{289}; !slices.Equal(out.wms, want) { // min(800, 300) − 10 − 1
		t.Fatalf("watermarks %v, want %v", out.wms, want)
	}
	for range 5 { // split 1 falls silent; split 0 goes on
		emit(0, 900)
		tick(200 * time.Millisecond)
	}
	if last := out.wms[len(out.wms)-1]; last != 889 {
		t.Fatalf("after split 1 went idle the watermark is %d, want 889 (split 0's alone); all: %v", last, out.wms)
	}
	if len(out.statuses) != 0 {
		t.Fatalf("the stream was marked idle (%v) while split 0 is active", out.statuses)
	}
	tick(2 * time.Second) // both idle
	if !slices.Equal(out.statuses, []bool{true}) {
		t.Fatalf("statuses %v, want the stream idle once both splits are", out.statuses)
	}
	emit(1, 2000) // split 1 comes back: the stream is active, split 0 still idle
	tick(200 * time.Millisecond)
	if !slices.Equal(out.statuses, []bool{true, false}) || out.wms[len(out.wms)-1] != 1989 {
		t.Fatalf("statuses %v, watermarks %v, want active again at 1989", out.statuses, out.wms)
	}
}

package worker

import (
	"testing"

	"github.com/goflink/goflink/operator"
)

// step is one input to a valve and what it must answer.
type valveStep struct {
	ch      int
	wm      int64 // a watermark, unless status is set
	status  string
	want    int64 // the input watermark afterwards
	advance bool  // whether this step advanced it
	idle    bool  // the input's idleness afterwards
}

func runValve(t *testing.T, channels int, steps []valveStep) {
	t.Helper()
	v := newValve(channels)
	for i, s := range steps {
		var got int64
		var adv bool
		switch s.status {
		case "idle", "active":
			got, adv, _ = v.status(s.ch, s.status == "idle")
		default:
			got, adv = v.watermark(s.ch, s.wm)
		}
		if got != s.want || adv != s.advance || v.idle != s.idle {
			t.Fatalf("step %d %+v: watermark %d advanced %v idle %v, want %d %v %v", i, s, got, adv, v.idle, s.want, s.advance, s.idle)
		}
	}
}

func TestValveMinimumOverChannels(t *testing.T) {
	none := operator.MinWatermark
	runValve(t, 3, []valveStep{
		{ch: 0, wm: 10, want: none},
		{ch: 1, wm: 20, want: none},
		{ch: 2, wm: 5, want: 5, advance: true},
		{ch: 2, wm: 30, want: 10, advance: true},
		{ch: 0, wm: 8, want: 10}, // backwards on its channel: ignored
		{ch: 0, wm: 15, want: 15, advance: true},
		{ch: 1, wm: 25, want: 15},
		{ch: 0, wm: 40, want: 25, advance: true},
		{ch: 0, wm: operator.MaxWatermark, want: 25},
		{ch: 1, wm: operator.MaxWatermark, want: 30, advance: true},
		{ch: 2, wm: operator.MaxWatermark, want: operator.MaxWatermark, advance: true},
	})
}

func TestValveIdleness(t *testing.T) {
	none := operator.MinWatermark
	runValve(t, 2, []valveStep{
		{ch: 0, wm: 100, want: none},
		{ch: 1, status: "idle", want: 100, advance: true}, // the idle channel stops holding it back
		{ch: 0, wm: 150, want: 150, advance: true},
		{ch: 1, wm: 500, want: 150},                                   // an idle channel's watermark is ignored
		{ch: 1, status: "active", want: 150},                          // rejoins behind: not aligned yet
		{ch: 0, wm: 200, want: 200, advance: true},                    // channel 1 does not pull it back
		{ch: 1, wm: 180, want: 200},                                   // still behind
		{ch: 1, wm: 260, want: 200},                                   // aligned now: counts again
		{ch: 0, wm: 300, want: 260, advance: true},                    // the minimum of both
		{ch: 0, status: "idle", want: 260},                            // channel 1 alone: still 260
		{ch: 1, status: "idle", want: 300, advance: true, idle: true}, // all idle: the highest
		{ch: 0, status: "active", want: 300},                          // no longer idle
		{ch: 0, wm: 310, want: 310, advance: true},
	})
}

package worker

import "github.com/goflink/goflink/operator"

// valve combines the watermarks and watermark statuses of a task's input channels into the
// task's input watermark, after Flink's StatusWatermarkValve. It is pure decision logic, fed
// by the task's goroutine in the order the events arrive.
//
// The input watermark is the minimum over the active, aligned channels, and never goes
// backwards. An idle channel does not count until it becomes active again; it then counts
// only once its own watermark has caught up with the input watermark (it is "aligned"), so a
// channel that wakes up behind cannot pull the watermark back. When every channel is idle
// the task's input is idle, and the watermark rises to the maximum over the channels (all
// that any of them promised).
type valve struct {
	chans []valveChannel
	wm    int64 // the last input watermark emitted
	idle  bool  // every channel is idle
}

type valveChannel struct {
	wm      int64
	idle    bool
	aligned bool
}

func newValve(channels int) *valve {
	v := &valve{chans: make([]valveChannel, channels), wm: operator.MinWatermark}
	for i := range v.chans {
		v.chans[i] = valveChannel{wm: operator.MinWatermark, aligned: true}
	}
	return v
}

// watermark takes watermark wm from channel ch; it returns the new input watermark and true
// when the input watermark advanced. Watermarks of an idle channel and ones that go
// backwards are ignored.
func (v *valve) watermark(ch int, wm int64) (int64, bool) {
	c := &v.chans[ch]
	if c.idle || wm <= c.wm {
		return v.wm, false
	}
	c.wm = wm
	if !c.aligned && wm >= v.wm {
		c.aligned = true
	}
	return v.advance()
}

// status takes a watermark status from channel ch. It returns the new input watermark and
// whether it advanced, and whether the input's own idleness changed (to v.idle).
func (v *valve) status(ch int, idle bool) (wm int64, advanced, statusChanged bool) {
	c := &v.chans[ch]
	if idle == c.idle {
		return v.wm, false, false
	}
	c.idle = idle
	if !idle {
		c.aligned = c.wm >= v.wm
		if v.idle {
			v.idle = false
			return v.wm, false, true
		}
		return v.wm, false, false
	}
	c.aligned = false
	for _, o := range v.chans {
		if !o.idle {
			wm, advanced = v.advance()
			return wm, advanced, false
		}
	}
	// Every channel is idle: the input is idle, at the highest watermark any channel sent.
	v.idle = true
	top := v.wm
	for _, o := range v.chans {
		top = max(top, o.wm)
	}
	advanced = top > v.wm
	v.wm = top
	return v.wm, advanced, true
}

// advance recomputes the minimum over the active, aligned channels.
func (v *valve) advance() (int64, bool) {
	lowest, active := operator.MaxWatermark, false
	for _, c := range v.chans {
		if !c.idle && c.aligned {
			lowest, active = min(lowest, c.wm), true
		}
	}
	if !active || lowest <= v.wm {
		return v.wm, false
	}
	v.wm = lowest
	return v.wm, true
}

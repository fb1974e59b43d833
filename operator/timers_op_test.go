package operator_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/goflink/goflink/operator"
	"github.com/goflink/goflink/operator/operatortest"
	"github.com/goflink/goflink/record"
	"github.com/goflink/goflink/state"
)

// timerProbe is a keyed operator that drives its TimerService from its records: s is the
// command ("e"/"p": register an event/processing-time timer at v; "de"/"dp": delete it) and
// each record counts in keyed state. A firing emits {k, v: time, f: the key's count, s: "e" or
// "p", ts: the watermark or clock}; an event-time timer at a time ending in 1 registers, while
// it fires, timers at time − 1 and time + 1 (due at once when the watermark is past them) and
// at time + 100.
type timerProbe struct {
	operator.Base
	counts *state.ValueState[int64]
	out    record.Row
}

var timerProbeType = operator.Define(operator.Type{Name: "timer-probe", Keyed: true},
	func(p *operator.Planner) (struct{}, *operator.Shape) { return struct{}{}, p.In },
	func(struct{}, *record.Schema, *record.Schema) (any, error) {
		return &timerProbe{out: make(record.Row, 5)}, nil
	})

func (p *timerProbe) InitializeState(sc operator.StateContext) error {
	var err error
	p.counts, err = state.NewValueState(sc.KeyedBackend(), "probe/count", state.Codec[int64](state.Int64Codec{}))
	return err
}

func (p *timerProbe) Process(row record.Row) error {
	n, _, err := p.counts.Value()
	if err != nil {
		return err
	}
	if err := p.counts.Update(n + 1); err != nil {
		return err
	}
	ts, at := p.Context().Timers(), row[1].Int()
	switch row[3].Str() {
	case "e":
		return ts.Register(operator.EventTime, at)
	case "p":
		return ts.Register(operator.ProcessingTime, at)
	case "de":
		return ts.Delete(operator.EventTime, at)
	case "dp":
		return ts.Delete(operator.ProcessingTime, at)
	}
	return fmt.Errorf("unknown command %q", row[3].Str())
}

func (p *timerProbe) OnTimer(t operator.Timer) error {
	ctx := p.Context()
	if t.Key != ctx.Key() {
		return fmt.Errorf("timer of key %v fires with current key %v", t.Key, ctx.Key())
	}
	n, _, err := p.counts.Value()
	if err != nil {
		return err
	}
	p.out[0], p.out[1], p.out[2] = t.Key, record.IntValue(t.Time), record.FloatValue(float64(n))
	if t.Domain == operator.EventTime {
		p.out[3], p.out[4] = record.StringValue("e"), record.IntValue(ctx.CurrentWatermark())
	} else {
		p.out[3], p.out[4] = record.StringValue("p"), record.IntValue(ctx.Timers().CurrentProcessingTime())
	}
	if err := p.Emit(p.out); err != nil {
		return err
	}
	if t.Domain == operator.EventTime && t.Time%10 == 1 {
		for _, at := range []int64{t.Time - 1, t.Time + 1, t.Time + 100} {
			if err := ctx.Timers().Register(operator.EventTime, at); err != nil {
				return err
			}
		}
	}
	return nil
}

func newTimerProbe(t *testing.T, backend string, restore ...*operatortest.Snapshot) *operatortest.Harness {
	t.Helper()
	return operatortest.New(t, keyedSpec("type: timer-probe"), "op", operatortest.Options{
		Backend: backend, Registry: operator.MustRegistry(timerProbeType), Restore: restore, ProcessingTime: 1000,
	})
}

// command hands the probe a command for key k.
func command(t *testing.T, h *operatortest.Harness, k int64, cmd string, at int64) {
	t.Helper()
	if err := h.Process(0, h.Row(0, k, at, 0.0, cmd, 0)); err != nil {
		t.Fatalf("%s %d for key %d: %v", cmd, at, k, err)
	}
}

// fired returns the firings since the last call, in order, as "k:domain:time"; an
// event-time firing whose record does not carry the timer's time as its timestamp has
// "@timestamp" added.
func fired(h *operatortest.Harness) []string {
	var out []string
	for _, r := range h.Output() {
		f := fmt.Sprintf("%d:%s:%d", r.Row[0].Int(), r.Row[3].Str(), r.Row[1].Int())
		if r.Row[3].Str() == "e" && r.Timestamp != r.Row[1].Int() {
			f += fmt.Sprintf("@%d", r.Timestamp)
		}
		out = append(out, f)
	}
	h.ClearOutput()
	return out
}

func checkFired(t *testing.T, h *operatortest.Harness, what string, want ...string) {
	t.Helper()
	if got := fired(h); !slices.Equal(got, want) {
		t.Errorf("%s: fired %q, want %q", what, got, want)
	}
}

// Registering a timer that exists does nothing; deleting one removes it (and re-registering
// brings it back once); deleting one that does not exist does nothing. Timers are per key and
// domain. Each fires with its key current (the keyed state is the key's) and its time as the
// record timestamp for event time.
func TestTimersRegisterDeleteDedupe(t *testing.T) {
	forBackends(t, func(t *testing.T, backend string) {
		h := newTimerProbe(t, backend)
		command(t, h, 1, "e", 10)
		command(t, h, 1, "e", 10)
		command(t, h, 2, "e", 10) // another key
		command(t, h, 1, "e", 5)
		command(t, h, 1, "de", 5)
		command(t, h, 1, "de", 7) // none
		command(t, h, 2, "e", 8)
		command(t, h, 2, "de", 8)
		command(t, h, 2, "e", 8)  // back
		command(t, h, 1, "p", 10) // processing time 10: a domain of its own
		command(t, h, 1, "p", 1500)
		command(t, h, 1, "dp", 1500)
		if m := entries(t, h); m["timers/event"] != 2 || m["timers/processing"] != 1 {
			t.Errorf("timer state = %v, want 2 keys with event-time timers and 1 with processing-time ones", m)
		}
		if next, ok := h.Timers().Next(operator.EventTime); !ok || next != 8 {
			t.Errorf("Next(event time) = %d, %v, want 8", next, ok)
		}
		watermark(t, h, 9)
		checkFired(t, h, "wm 9", "2:e:8")
		watermark(t, h, 10)
		got := fired(h)
		slices.Sort(got)
		if want := []string{"1:e:10", "2:e:10"}; !slices.Equal(got, want) {
			t.Errorf("wm 10: fired %q, want %q", got, want)
		}
		clock(t, h, 2000)
		checkFired(t, h, "clock 2000", "1:p:10")
		watermark(t, h, operator.MaxWatermark)
		checkFired(t, h, "max watermark")
		if m := entries(t, h); m["timers/event"]+m["timers/processing"] != 0 {
			t.Errorf("timer state after every timer fired = %v, want none", m)
		}
	})
}

// Timers fire in time order across keys and domains, each domain on its own clock; a timer
// registered while timers fire fires in the same advance when it is due (also one earlier
// than the timer registering it), else later.
func TestTimersFiringOrder(t *testing.T) {
	forBackends(t, func(t *testing.T, backend string) {
		h := newTimerProbe(t, backend)
		rng := rand.New(rand.NewPCG(1, 2))
		var want []int64
		for _, at := range rng.Perm(40) {
			k := int64(at % 4)
			command(t, h, k, "e", int64(at*2)) // even times: nothing registers more
			want = append(want, int64(at*2))
		}
		slices.Sort(want)
		watermark(t, h, 1000)
		var times []int64
		for _, r := range h.Output() {
			times = append(times, r.Row[1].Int())
			if want := r.Row[1].Int() / 2 % 4; r.Row[0].Int() != want {
				t.Errorf("timer at %d fired for key %d, want %d", r.Row[1].Int(), r.Row[0].Int(), want)
			}
		}
		h.ClearOutput()
		if !slices.Equal(times, want) {
			t.Errorf("fired at %v, want %v", times, want)
		}

		// A firing at 2021 registers 2020 and 2022 (due: they fire now, in time order) and 2121.
		command(t, h, 7, "e", 2021)
		command(t, h, 8, "e", 2023)
		watermark(t, h, 2100)
		checkFired(t, h, "wm 2100", "7:e:2021", "7:e:2020", "7:e:2022", "8:e:2023")
		// 2121 registers 2120 (due at once), 2122 and 2221.
		watermark(t, h, 2121)
		checkFired(t, h, "wm 2121", "7:e:2121", "7:e:2120")
		watermark(t, h, 2122)
		checkFired(t, h, "wm 2122", "7:e:2122")
	})
}

// Processing-time timers fire on the clock, not on watermarks, in time order, and a timer
// whose time the clock passed fires at its next move.
func TestTimersProcessingTime(t *testing.T) {
	forBackends(t, func(t *testing.T, backend string) {
		h := newTimerProbe(t, backend)
		command(t, h, 1, "p", 1200)
		command(t, h, 2, "p", 1100)
		command(t, h, 3, "p", 900) // behind the clock (1000)
		watermark(t, h, operator.MaxWatermark)
		checkFired(t, h, "max watermark")
		clock(t, h, 1000)
		checkFired(t, h, "clock 1000", "3:p:900")
		clock(t, h, 1150)
		checkFired(t, h, "clock 1150", "2:p:1100")
		clock(t, h, 5000)
		checkFired(t, h, "clock 5000", "1:p:1200")
	})
}

// Timers are keyed state: a snapshot restores them on either backend (also the other one),
// processing-time timers too; deleted timers stay deleted and fired ones do not fire again.
func TestTimersRestore(t *testing.T) {
	for _, from := range backends {
		for _, to := range backends {
			t.Run(from+"-to-"+to, func(t *testing.T) {
				h := newTimerProbe(t, from)
				for k := range int64(6) {
					command(t, h, k, "e", 200+2*k) // even times: nothing registers more
					command(t, h, k, "e", 400+2*k)
					command(t, h, k, "p", 2000+k)
				}
				command(t, h, 0, "de", 400)
				command(t, h, 1, "dp", 2001)
				watermark(t, h, 300)
				got := fired(h)
				if len(got) != 6 {
					t.Fatalf("before the snapshot fired %q, want the six at 200..210", got)
				}
				snap, err := h.Snapshot(3)
				if err != nil {
					t.Fatal(err)
				}
				if err := h.Close(); err != nil {
					t.Fatal(err)
				}
				r := newTimerProbe(t, to, snap)
				if next, ok := r.Timers().Next(operator.EventTime); !ok || next != 402 {
					t.Errorf("restored Next(event time) = %d, %v, want 402", next, ok)
				}
				watermark(t, r, 300) // the regenerated watermark: nothing is due again
				checkFired(t, r, "wm 300 again")
				watermark(t, r, 1000)
				// The keyed state came back with the timers: key 0 and 1 had 4 records, the
				// others 3.
				for _, rec := range r.Output() {
					k, n := rec.Row[0].Int(), rec.Row[2].Float()
					want := 3.0
					if k < 2 {
						want = 4
					}
					if n != want {
						t.Errorf("timer of key %d saw count %v, want %v", k, n, want)
					}
				}
				checkFired(t, r, "wm 1000", "1:e:402", "2:e:404", "3:e:406", "4:e:408", "5:e:410")
				clock(t, r, 3000)
				checkFired(t, r, "clock 3000", "0:p:2000", "2:p:2002", "3:p:2003", "4:p:2004", "5:p:2005")
				m := entries(t, r)
				if m["timers/event"]+m["timers/processing"] != 0 || m["probe/count"] != 6 {
					t.Errorf("restored state after every timer fired = %v, want only the 6 counts", m)
				}
			})
		}
	}
}

package operatortest_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/goflink/goflink/operator"
	"github.com/goflink/goflink/operator/operatortest"
	"github.com/goflink/goflink/record"
	"github.com/goflink/goflink/state"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// probeSpec runs the probe operator on a key-by of {k: string, ts: int64}.
const probeSpec = `
name: probe
operators:
  - {name: src, type: sequence, from: 1, to: 10}
  - {name: m, type: map, fields: {k: "string(value % 3)", ts: "value"}}
  - {name: wm, type: watermark, timestamp: "ts"}
  - {name: by-k, type: key-by, key: "k"}
  - {name: op, type: probe}
  - {name: out, type: discard}
`

// probe is a keyed operator that logs what the harness does to it. Process registers an
// event-time timer at the record's ts and a processing-time timer at ts + 1000, and keeps the
// key without cloning it (as an operator must not): the harness's buffer reuse shows it.
type probe struct {
	operator.Base
	log    *[]string
	kept   record.Value
	counts *state.ValueState[int64]
}

var probeLog []string

var probeType = operator.Define(operator.Type{Name: "probe", Keyed: true, SideOutputs: []string{"odd"}},
	func(p *operator.Planner) (struct{}, *operator.Shape) { return struct{}{}, p.In },
	func(struct{}, *record.Schema, *record.Schema) (any, error) { return &probe{log: &probeLog}, nil })

func (p *probe) InitializeState(sc operator.StateContext) error {
	var err error
	p.counts, err = state.NewValueState(sc.KeyedBackend(), "probe/count", state.Codec[int64](state.Int64Codec{}))
	return err
}

func (p *probe) Process(row record.Row) error {
	ctx := p.Context()
	p.kept = row[0]
	*p.log = append(*p.log, fmt.Sprintf("process %s@%d wm=%d", ctx.Key().Str(), ctx.Timestamp(), ctx.CurrentWatermark()))
	n, _, err := p.counts.Value()
	if err != nil {
		return err
	}
	if err := p.counts.Update(n + 1); err != nil {
		return err
	}
	ts := ctx.Timestamp()
	if err := ctx.Timers().Register(operator.EventTime, ts); err != nil {
		return err
	}
	if err := ctx.Timers().Register(operator.ProcessingTime, ts+1000); err != nil {
		return err
	}
	if ts%2 == 1 {
		return ctx.SideOutput("odd").Emit(row)
	}
	return p.Emit(row)
}

func (p *probe) OnTimer(t operator.Timer) error {
	n, _, err := p.counts.Value()
	if err != nil {
		return err
	}
	*p.log = append(*p.log, fmt.Sprintf("timer %v %d %s n=%d stamp=%d", t.Domain, t.Time, p.Context().Key().Str(), n, p.Context().Timestamp()))
	return nil
}

func (p *probe) OnWatermark(wm int64) error {
	*p.log = append(*p.log, fmt.Sprintf("watermark %d", wm))
	return nil
}

func newProbe(t *testing.T, opts operatortest.Options) *operatortest.Harness {
	t.Helper()
	probeLog = nil
	opts.Registry = operator.MustRegistry(probeType)
	return operatortest.New(t, probeSpec, "op", opts)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The harness drives an operator as a task does its head: per record the key on the Context
// and the backend and the timestamp; per watermark the due event-time timers (with the timer's
// key and time), then OnWatermark, then the output; per clock move the due processing-time
// timers. Emitted records carry their timestamps, side outputs are captured apart.
func TestHarnessDrivesLikeATask(t *testing.T) {
	for _, backend := range []string{state.BackendHashMap, state.BackendBBolt} {
		t.Run(backend, func(t *testing.T) {
			h := newProbe(t, operatortest.Options{Backend: backend, ProcessingTime: 500})
			must(t, h.Process(10, h.Row(0, "a", 1)))
			must(t, h.Process(11, h.Row(0, "b", 2)))
			must(t, h.Process(12, h.Row(0, "a", 3)))
			must(t, h.AdvanceWatermark(11))
			must(t, h.AdvanceWatermark(11)) // not above: nothing
			must(t, h.SetProcessingTime(1011))
			must(t, h.AdvanceWatermark(operator.MaxWatermark))
			if err := h.SetProcessingTime(1000); err == nil {
				t.Error("SetProcessingTime back in time succeeded")
			}
			want := []string{
				"process a@10 wm=-9223372036854775808", "process b@11 wm=-9223372036854775808", "process a@12 wm=-9223372036854775808",
				"timer event time 10 a n=2 stamp=10", "timer event time 11 b n=1 stamp=11", "watermark 11",
				"timer processing time 1010 a n=2 stamp=11", "timer processing time 1011 b n=1 stamp=11",
				"timer event time 12 a n=2 stamp=12", "watermark 9223372036854775807",
			}
			if !slices.Equal(probeLog, want) {
				t.Errorf("log\n  %q\nwant\n  %q", probeLog, want)
			}
			var got []string
			for _, e := range h.Events() {
				switch e.Kind {
				case operatortest.RecordEvent:
					got = append(got, h.Format(e.Record))
				case operatortest.WatermarkEvent:
					got = append(got, fmt.Sprint("wm ", e.Watermark))
				}
			}
			if want := []string{"{k=a ts=1}@10", "{k=a ts=3}@12", "wm 11", "wm 9223372036854775807"}; !slices.Equal(got, want) {
				t.Errorf("events %q, want %q", got, want)
			}
			if odd := h.SideOutput("odd"); len(odd) != 1 || odd[0].Timestamp != 11 || odd[0].Row[0].Str() != "b" {
				t.Errorf("side output odd = %v, want b at 11", odd)
			}
			// The buffer of a record is overwritten once it was processed.
			if k := h.Operator().(*probe).kept.Str(); k == "a" {
				t.Errorf("a key kept without cloning still reads %q after its record", k)
			}
		})
	}
}

// A snapshot restores on either backend, also across them and into another parallelism:
// keyed state and timers (both domains) come back; the watermark starts again from the
// minimum.
func TestHarnessSnapshotRestore(t *testing.T) {
	backends := []string{state.BackendHashMap, state.BackendBBolt}
	for _, from := range backends {
		for _, to := range backends {
			t.Run(from+"-to-"+to, func(t *testing.T) {
				h := newProbe(t, operatortest.Options{Backend: from})
				keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
				for i, k := range keys {
					must(t, h.Process(int64(100+i), h.Row(0, k, 0)))
				}
				snap, err := h.Snapshot(7)
				must(t, err)
				must(t, h.Close())
				m, err := h.StateEntries()
				if err == nil {
					t.Errorf("StateEntries of a closed harness = %v, want an error", m)
				}

				var fired []string
				for sub := range 2 {
					probeLog = nil
					r := operatortest.New(t, probeSpec, "op", operatortest.Options{Backend: to, Subtask: sub, Parallelism: 2,
						Registry: operator.MustRegistry(probeType), Restore: []*operatortest.Snapshot{snap}})
					if r.Watermark() != operator.MinWatermark {
						t.Errorf("restored watermark = %d, want the minimum", r.Watermark())
					}
					entries, err := r.StateEntries()
					must(t, err)
					must(t, r.AdvanceWatermark(operator.MaxWatermark))
					must(t, r.SetProcessingTime(2000))
					owned := 0
					for _, k := range keys {
						if ok, err := r.Owns(0, r.Row(0, k, 0)); err != nil {
							t.Fatal(err)
						} else if ok {
							owned++
						}
					}
					if entries["probe/count"] != owned || entries["timers/event"] != owned || entries["timers/processing"] != owned {
						t.Errorf("subtask %d restored %v, want %d keys in each state", sub, entries, owned)
					}
					fired = append(fired, probeLog...)
				}
				var timers []string
				for _, l := range fired {
					if strings.HasPrefix(l, "timer") {
						timers = append(timers, l)
					}
				}
				if len(timers) != 2*len(keys) {
					t.Errorf("restored timers fired %q, want one per key and domain", timers)
				}
			})
		}
	}
}

// Records of an input without timestamps must come without one; rows must fit the schema.
func TestHarnessChecksRecords(t *testing.T) {
	const spec = `
name: plain
operators:
  - {name: src, type: sequence, from: 1, to: 10}
  - {name: by-v, type: key-by, key: "value % 2"}
  - {name: op, type: count}
  - {name: out, type: discard}
`
	h := operatortest.New(t, spec, "op", operatortest.Options{})
	if err := h.Process(5, h.Row(0, 1)); err == nil {
		t.Error("a timestamp on an input without timestamps was accepted")
	}
	if err := h.Process(operator.NoTimestamp, record.Row{}); err == nil {
		t.Error("a row of the wrong width was accepted")
	}
	must(t, h.Process(operator.NoTimestamp, h.Row(0, 7)))
	if got := h.Output(); len(got) != 1 || got[0].Timestamp != operator.NoTimestamp || h.Format(got[0]) != "{value=7 count=1}@none" {
		t.Errorf("output = %v, want one count without a timestamp", got)
	}
	if _, err := operatortest.Open(t, spec, "nope", operatortest.Options{}); err == nil {
		t.Error("Open of an operator the spec lacks succeeded")
	}
	_, err := operatortest.Open(t, spec, "src", operatortest.Options{})
	if err == nil || !strings.Contains(err.Error(), "source") {
		t.Errorf("Open of a source = %v, want an error saying it is a source", err)
	}
	if _, err := operatortest.Open(t, "name: x", "op", operatortest.Options{}); err == nil {
		t.Error("Open of an invalid spec succeeded")
	}
}

// A checkpoint's keyed state is written after the harness went on, as a task writes it while
// it processes: the snapshot holds the state and timers as of the checkpoint.
func TestHarnessCheckpointWhileProcessing(t *testing.T) {
	for _, backend := range []string{state.BackendHashMap, state.BackendBBolt} {
		t.Run(backend, func(t *testing.T) {
			h := newProbe(t, operatortest.Options{Backend: backend})
			must(t, h.Process(10, h.Row(0, "a", 0)))
			p, err := h.Checkpoint(1)
			must(t, err)
			for _, ts := range []int64{11, 12, 14} {
				must(t, h.Process(ts, h.Row(0, "a", 0)))
			}
			must(t, h.Process(13, h.Row(0, "b", 0)))
			must(t, h.AdvanceWatermark(11)) // fires (and deletes) the timer at 10 after the checkpoint
			snap, err := p.Write()
			must(t, err)
			aborted, err := h.Checkpoint(2)
			must(t, err)
			aborted.Release()
			if _, err := aborted.Write(); err == nil {
				t.Error("Write of a released checkpoint succeeded")
			}
			left, err := h.Checkpoint(3)
			must(t, err)
			must(t, h.Close()) // releases the checkpoint left pending (bbolt's Close waits for it)
			if _, err := left.Write(); err == nil {
				t.Error("Write of a checkpoint the harness released at Close succeeded")
			}

			r := newProbe(t, operatortest.Options{Backend: backend, Restore: []*operatortest.Snapshot{snap}})
			must(t, r.AdvanceWatermark(operator.MaxWatermark))
			if want := []string{"timer event time 10 a n=1 stamp=10", "watermark 9223372036854775807"}; !slices.Equal(probeLog, want) {
				t.Errorf("restored log %q, want %q", probeLog, want)
			}
		})
	}
}

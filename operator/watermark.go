package operator

import (
	"fmt"
	"slices"
	"time"

	"github.com/goflink/goflink/expression"
	"github.com/goflink/goflink/record"
)

// Watermark assigns each record its event timestamp (spec field timestamp: an expression of
// type timestamp, or int64 epoch milliseconds) and generates watermarks with bounded
// out-of-orderness, as Flink's WatermarkStrategy.forBoundedOutOfOrderness(max-out-of-orderness)
// .withIdleness(idleness): every pipeline.auto-watermark-interval it emits max timestamp seen −
// max-out-of-orderness − 1 ms when that advanced; an input without records for idleness is
// marked idle (it stops holding back its consumers' watermarks) until a record comes. A
// source's watermark field is the same operator, chained after the source.
var Watermark = Define(Type{Name: "watermark", Fields: watermarkFields}, planWatermark,
	func(c watermarkConfig, in, _ *record.Schema) (any, error) { return newWatermark(c, in) })

var watermarkFields = []string{"timestamp", "max-out-of-orderness", "idleness"}

type watermarkConfig struct {
	Timestamp string `json:"timestamp"`
	// OutOfOrderness and Idleness are in milliseconds; Idleness 0 means never idle.
	OutOfOrderness int64 `json:"max_out_of_orderness_ms,omitempty"`
	Idleness       int64 `json:"idleness_ms,omitempty"`
}

func planWatermark(p *Planner) (watermarkConfig, *Shape) {
	var c watermarkConfig
	if e, ok := p.Require("timestamp"); ok {
		src, typ, _, ok := p.Expr(e.Value, expression.Options{})
		c.Timestamp = src
		if ok && typ != record.Invalid && typ != record.Int64 && typ != record.Timestamp {
			e.Problemf("expression %s is %v; a timestamp is a timestamp or int64 epoch milliseconds", expression.Quote(src), typ)
		}
	}
	ms := func(key string) int64 {
		e, ok := p.Field(key)
		if !ok {
			return 0
		}
		d, ok := e.Duration()
		switch {
		case !ok:
		case d < 0:
			e.Problemf("must not be negative, got %v", d)
		case d%time.Millisecond != 0:
			e.Problemf("must be a whole number of milliseconds, got %v", d)
		default:
			return d.Milliseconds()
		}
		return 0
	}
	c.OutOfOrderness, c.Idleness = ms("max-out-of-orderness"), ms("idleness")
	return c, p.In
}

// watermarkOp is the runtime of Watermark. It keeps a watermark per split of its input (a
// Kafka partition) when the source before it reads several, as Flink applies a strategy per
// split: the output is the minimum over the splits that are not idle, and the stream is idle
// when every split is. Without splits the input is one split.
type watermarkOp struct {
	Base
	ts       *expression.Evaluator
	millis   bool // the expression is int64 milliseconds, not a timestamp
	bound    int64
	idleness time.Duration
	emitted  int64
	idle     bool // the output is marked idle
	splits   map[int]*splitWatermark
	cur      *splitWatermark // the split of the last record
	curID    int
}

// splitWatermark is the watermark state of one split.
type splitWatermark struct {
	maxTS     int64
	lastInput time.Time
	idle      bool
}

func newWatermark(c watermarkConfig, in *record.Schema) (*watermarkOp, error) {
	p, err := expression.Compile(c.Timestamp, in, expression.Options{})
	if err != nil {
		return nil, fmt.Errorf("timestamp: %w", err)
	}
	switch p.Type() {
	case record.Int64, record.Timestamp:
	default:
		return nil, fmt.Errorf("timestamp %q is %v, want timestamp or int64", c.Timestamp, p.Type())
	}
	return &watermarkOp{
		ts: p.NewEvaluator(), millis: p.Type() == record.Int64, bound: c.OutOfOrderness,
		idleness: time.Duration(c.Idleness) * time.Millisecond, emitted: MinWatermark,
		splits: map[int]*splitWatermark{}, curID: -1,
	}, nil
}

func (w *watermarkOp) Open(ctx *Context, out Output) error {
	if err := w.Base.Open(ctx, out); err != nil {
		return err
	}
	w.split(0) // the input as one split, until a source says otherwise
	return nil
}

// split returns the state of split id, adding it.
func (w *watermarkOp) split(id int) *splitWatermark {
	s, ok := w.splits[id]
	if !ok {
		s = &splitWatermark{maxTS: MinWatermark, lastInput: w.ctx.now()}
		w.splits[id] = s
	}
	return s
}

// syncSplits follows the splits the source declared: they replace the default one.
func (w *watermarkOp) syncSplits() {
	declared := w.ctx.splitState().declared
	if len(declared) == 0 {
		return
	}
	if s, ok := w.splits[0]; ok && s.maxTS == MinWatermark && !slices.Contains(declared, 0) {
		delete(w.splits, 0) // the default split never had a record
		if w.curID == 0 {
			w.cur, w.curID = nil, -1
		}
	}
	for _, id := range declared {
		w.split(id)
	}
}

func (w *watermarkOp) Process(row record.Row) error {
	v, err := w.ts.Eval(row, nil)
	if err != nil {
		return w.EvalError(fmt.Errorf("timestamp: %w", err))
	}
	ts := v.Int()
	if !w.millis {
		ts = v.Time().UnixMilli()
	}
	if id := w.ctx.splitState().current; id != w.curID || w.cur == nil {
		w.cur, w.curID = w.split(id), id
	}
	s := w.cur
	s.maxTS = max(s.maxTS, ts)
	if w.idleness > 0 {
		s.lastInput, s.idle = w.ctx.now(), false
		if w.idle {
			w.idle = false
			if err := w.ctx.MarkIdle(false); err != nil {
				return err
			}
		}
	}
	// The record carries ts from here on; the operators before this one see the timestamp it
	// came with again.
	before := w.ctx.Timestamp()
	w.ctx.SetTimestamp(ts)
	err = w.out.Emit(row)
	w.ctx.SetTimestamp(before)
	return err
}

// OnPeriodicEmit emits the watermark if it advanced, or marks the stream idle.
func (w *watermarkOp) OnPeriodicEmit() error {
	w.syncSplits()
	now := w.ctx.now()
	wm, active := MaxWatermark, false
	for _, s := range w.splits {
		if w.idleness > 0 && !s.idle && now.Sub(s.lastInput) >= w.idleness {
			s.idle = true
		}
		if s.idle {
			continue
		}
		active = true
		swm := MinWatermark
		if s.maxTS >= MinWatermark+w.bound+1 { // else it would wrap below MinWatermark
			swm = s.maxTS - w.bound - 1
		}
		wm = min(wm, swm)
	}
	if !active {
		if !w.idle {
			w.idle = true
			return w.ctx.MarkIdle(true)
		}
		return nil
	}
	if wm <= w.emitted {
		return nil
	}
	w.emitted = wm
	return w.ctx.EmitWatermark(wm)
}

package operator

import (
	"fmt"
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
			e.Problemf("expression %q is %v; a timestamp is a timestamp or int64 epoch milliseconds", src, typ)
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

// watermarkOp is the runtime of Watermark.
type watermarkOp struct {
	Base
	ts        *expression.Evaluator
	millis    bool // the expression is int64 milliseconds, not a timestamp
	bound     int64
	idleness  time.Duration
	maxTS     int64
	emitted   int64
	idle      bool
	lastInput time.Time
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
		idleness: time.Duration(c.Idleness) * time.Millisecond, maxTS: MinWatermark, emitted: MinWatermark,
	}, nil
}

func (w *watermarkOp) Open(ctx *Context, out Output) error {
	w.lastInput = ctx.now()
	return w.Base.Open(ctx, out)
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
	w.maxTS = max(w.maxTS, ts)
	if w.idleness > 0 {
		w.lastInput = w.ctx.now()
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
	if w.idleness > 0 && !w.idle && w.ctx.now().Sub(w.lastInput) >= w.idleness {
		w.idle = true
		return w.ctx.MarkIdle(true)
	}
	if w.maxTS == MinWatermark {
		return nil
	}
	wm := MinWatermark
	if w.maxTS >= MinWatermark+w.bound+1 { // else it would wrap below MinWatermark
		wm = w.maxTS - w.bound - 1
	}
	if wm <= w.emitted {
		return nil
	}
	w.emitted = wm
	return w.ctx.EmitWatermark(wm)
}

package operator

import (
	"errors"
	"fmt"

	"github.com/goflink/goflink/expression"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// mapOp builds a new row from named expressions.
type mapOp struct {
	base
	evals []*expression.Evaluator
	row   record.Row
}

func newMap(m *pb.MapOperator, in, out *record.Schema) (*mapOp, error) {
	op := &mapOp{row: make(record.Row, out.Len())}
	for _, f := range m.GetFields() {
		p, err := expression.Compile(f.GetExpression(), in, expression.Options{Want: out.Field(out.Index(f.GetName())).Type})
		if err != nil {
			return nil, fmt.Errorf("field %q: %w", f.GetName(), err)
		}
		op.evals = append(op.evals, p.NewEvaluator())
	}
	return op, nil
}

func (m *mapOp) Process(row record.Row) error {
	for i, e := range m.evals {
		v, err := e.Eval(row, nil)
		if err != nil {
			return m.evalErr(err)
		}
		m.row[i] = v
	}
	return m.out.Emit(m.row)
}

// filterOp keeps rows for which the condition holds.
type filterOp struct {
	base
	cond *expression.Evaluator
}

func newFilter(f *pb.FilterOperator, in *record.Schema) (*filterOp, error) {
	p, err := expression.Compile(f.GetCondition(), in, expression.Options{Want: record.Bool})
	if err != nil {
		return nil, fmt.Errorf("condition: %w", err)
	}
	return &filterOp{cond: p.NewEvaluator()}, nil
}

func (f *filterOp) Process(row record.Row) error {
	v, err := f.cond.Eval(row, nil)
	if err != nil {
		return f.evalErr(err)
	}
	if !v.Bool() {
		return nil
	}
	return f.out.Emit(row)
}

// failOp fails the task when its condition holds (fault injection).
type failOp struct {
	base
	cond    *expression.Evaluator
	src     string
	attempt int32
	onlyAt  bool
}

// ErrInjected is the cause of failures raised by the fail operator.
var ErrInjected = errors.New("injected failure")

func newFail(f *pb.FailOperator, in *record.Schema) (*failOp, error) {
	p, err := expression.Compile(f.GetWhen(), in, expression.Options{Want: record.Bool})
	if err != nil {
		return nil, fmt.Errorf("when: %w", err)
	}
	return &failOp{cond: p.NewEvaluator(), src: f.GetWhen(), attempt: f.GetAttempt(), onlyAt: f.Attempt != nil}, nil
}

func (f *failOp) Open(ctx *Context, out Output) error {
	if f.onlyAt && int32(ctx.Attempt) != f.attempt {
		f.cond = nil // armed only in one attempt
	}
	return f.base.Open(ctx, out)
}

func (f *failOp) Process(row record.Row) error {
	if f.cond != nil {
		v, err := f.cond.Eval(row, nil)
		if err != nil {
			return f.evalErr(err)
		}
		if v.Bool() {
			return f.userErr(fmt.Errorf("%w: %q held (subtask %d, attempt %d)", ErrInjected, f.src, f.ctx.Subtask, f.ctx.Attempt))
		}
	}
	return f.out.Emit(row)
}

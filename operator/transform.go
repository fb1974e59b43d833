package operator

import (
	"errors"
	"fmt"
	"math"

	"github.com/goflink/goflink/expression"
	"github.com/goflink/goflink/job/spec"
	"github.com/goflink/goflink/record"
)

// Map builds a new record from named expressions over the input (spec field fields: name:
// expression, in order).
var Map = Define(Type{Name: "map", Fields: []string{"fields"}}, planMap,
	func(c exprsConfig, in, out *record.Schema) (any, error) { return newMap(c, in, out) })

// namedExpr is one field of a map or reduce and its expression.
type namedExpr struct {
	Name string `json:"name"`
	Expr string `json:"expr"`
}

// exprsConfig is the configuration of map and reduce.
type exprsConfig struct {
	Fields []namedExpr `json:"fields"`
}

// exprFields reads the fields of map and reduce: a non-empty map of field names to
// expressions; nil after a problem with it.
func exprFields(p *Planner) []spec.Entry {
	e, ok := p.Require("fields")
	if !ok {
		return nil
	}
	m, ok := e.Map()
	if !ok {
		return nil
	}
	if m.Len() == 0 {
		e.Problemf("needs at least one field")
		return nil
	}
	return m.Entries()
}

// planMap returns the fields the map names, each with its expression's type when known.
func planMap(p *Planner) (exprsConfig, *Shape) {
	entries := exprFields(p)
	if entries == nil {
		return exprsConfig{}, UnknownShape()
	}
	var c exprsConfig
	var fields []record.Field
	open := false
	for _, fe := range entries {
		if !spec.Identifier.MatchString(fe.Key) {
			fe.Problemf("field names must be identifiers (letters, digits, _)")
			open = true // the field it will be renamed to is unknown
			continue
		}
		src, t, _, ok := p.Expr(fe.Value, expression.Options{})
		if ok || src != "" {
			c.Fields = append(c.Fields, namedExpr{Name: fe.Key, Expr: src})
		}
		fields = append(fields, record.Field{Name: fe.Key, Type: t})
	}
	return c, NewShape(fields, open)
}

// mapOp builds a new row from named expressions.
type mapOp struct {
	Base
	evals []*expression.Evaluator
	row   record.Row
}

func newMap(c exprsConfig, in, out *record.Schema) (*mapOp, error) {
	op := &mapOp{row: make(record.Row, out.Len())}
	for _, f := range c.Fields {
		p, err := expression.Compile(f.Expr, in, expression.Options{Want: out.Field(out.Index(f.Name)).Type})
		if err != nil {
			return nil, fmt.Errorf("field %q: %w", f.Name, err)
		}
		op.evals = append(op.evals, p.NewEvaluator())
	}
	return op, nil
}

func (m *mapOp) Process(row record.Row) error {
	for i, e := range m.evals {
		v, err := e.Eval(row, nil)
		if err != nil {
			return m.EvalError(err)
		}
		m.row[i] = v
	}
	return m.out.Emit(m.row)
}

// Filter keeps the records for which a bool expression holds (spec field condition).
var Filter = Define(Type{Name: "filter", Fields: []string{"condition"}},
	func(p *Planner) (filterConfig, *Shape) {
		return filterConfig{Condition: predicate(p, "condition")}, p.In
	},
	func(c filterConfig, in, _ *record.Schema) (any, error) { return newFilter(c, in) })

type filterConfig struct {
	Condition string `json:"condition"`
}

// predicate reads the required bool expression of a filter or fail operator.
func predicate(p *Planner, key string) string {
	e, ok := p.Require(key)
	if !ok {
		return ""
	}
	src, _, _, _ := p.Expr(e.Value, expression.Options{Want: record.Bool})
	return src
}

// filterOp keeps rows for which the condition holds.
type filterOp struct {
	Base
	cond *expression.Evaluator
}

func newFilter(c filterConfig, in *record.Schema) (*filterOp, error) {
	p, err := expression.Compile(c.Condition, in, expression.Options{Want: record.Bool})
	if err != nil {
		return nil, fmt.Errorf("condition: %w", err)
	}
	return &filterOp{cond: p.NewEvaluator()}, nil
}

func (f *filterOp) Process(row record.Row) error {
	v, err := f.cond.Eval(row, nil)
	if err != nil {
		return f.EvalError(err)
	}
	if !v.Bool() {
		return nil
	}
	return f.out.Emit(row)
}

// Fail fails its task when a bool expression holds (spec field when), in every execution
// attempt or only in the one given by attempt: fault injection for tests and demos.
var Fail = Define(Type{Name: "fail", Fields: []string{"when", "attempt"}}, planFail,
	func(c failConfig, in, _ *record.Schema) (any, error) { return newFail(c, in) })

type failConfig struct {
	When    string `json:"when"`
	Attempt *int32 `json:"attempt,omitempty"`
}

func planFail(p *Planner) (failConfig, *Shape) {
	c := failConfig{When: predicate(p, "when")}
	if e, ok := p.Field("attempt"); ok {
		if a, ok := e.Int(); ok {
			if a < 0 || a > math.MaxInt32 {
				e.Problemf("must be between 0 and %d, got %d", math.MaxInt32, a)
			}
			a32 := int32(a)
			c.Attempt = &a32
		}
	}
	return c, p.In
}

// failOp fails the task when its condition holds (fault injection).
type failOp struct {
	Base
	cond    *expression.Evaluator
	src     string
	attempt *int32 // the one attempt it is armed in (nil: every attempt)
}

// ErrInjected is the cause of failures raised by the fail operator.
var ErrInjected = errors.New("injected failure")

func newFail(c failConfig, in *record.Schema) (*failOp, error) {
	p, err := expression.Compile(c.When, in, expression.Options{Want: record.Bool})
	if err != nil {
		return nil, fmt.Errorf("when: %w", err)
	}
	return &failOp{cond: p.NewEvaluator(), src: c.When, attempt: c.Attempt}, nil
}

func (f *failOp) Open(ctx *Context, out Output) error {
	if f.attempt != nil && int32(ctx.Attempt) != *f.attempt {
		f.cond = nil // armed only in one attempt
	}
	return f.Base.Open(ctx, out)
}

func (f *failOp) Process(row record.Row) error {
	if f.cond != nil {
		v, err := f.cond.Eval(row, nil)
		if err != nil {
			return f.EvalError(err)
		}
		if v.Bool() {
			return f.UserError(fmt.Errorf("%w: %q held (subtask %d, attempt %d)", ErrInjected, f.src, f.ctx.Subtask, f.ctx.Attempt))
		}
	}
	return f.out.Emit(row)
}

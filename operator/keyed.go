package operator

import (
	"errors"
	"fmt"

	"github.com/goflink/goflink/expression"
	"github.com/goflink/goflink/job/spec"
	"github.com/goflink/goflink/record"
	"github.com/goflink/goflink/state"
)

// The keyed aggregates keep their state in the task's keyed state backend (value state per
// key), so it is checkpointed and restored per key group.

// errNotKeyed is returned when a keyed aggregate runs without a keyed state backend.
var errNotKeyed = errors.New("needs a keyed stream (a key-by before it)")

// keyedState registers a keyed operator's value state.
func keyedState[T any](sc StateContext, name string, codec state.Codec[T]) (*state.ValueState[T], error) {
	kb := sc.KeyedBackend()
	if kb == nil {
		return nil, errNotKeyed
	}
	return state.NewValueState(kb, name, codec)
}

// Sum replaces a numeric field (spec field field) with its running sum per key, emitting one
// update per record.
var Sum = Define(Type{Name: "sum", Keyed: true, Fields: []string{"field"}}, planSum,
	func(c sumConfig, in, _ *record.Schema) (any, error) { return newSum(c, in) })

type sumConfig struct {
	Field string `json:"field"`
}

func planSum(p *Planner) (sumConfig, *Shape) {
	var c sumConfig
	e, ok := p.Require("field")
	if !ok {
		return c, p.In
	}
	if c.Field, ok = e.String(); !ok {
		return c, p.In
	}
	if f, found := p.FieldNamed(e.Value, c.Field); found && f.Type != record.Invalid && f.Type != record.Int64 && f.Type != record.Float64 {
		e.Problemf("field %q is %v; sum needs int64 or float64", c.Field, f.Type)
	}
	return c, p.In
}

// sumOp replaces one numeric field (int64 or float64) with its running sum per key.
type sumOp[T int64 | float64] struct {
	Base
	field int
	codec state.Codec[T]
	float bool // T is float64 (a branch per record is cheaper than calling a conversion func)
	sums  *state.ValueState[T]
	row   record.Row
}

// num reads a field of type T.
func (s *sumOp[T]) num(v record.Value) T {
	if s.float {
		return T(v.Float())
	}
	return T(v.Int())
}

// value makes a field of type T.
func (s *sumOp[T]) value(x T) record.Value {
	if s.float {
		return record.FloatValue(float64(x))
	}
	return record.IntValue(int64(x))
}

func newSum(c sumConfig, in *record.Schema) (Operator, error) {
	i := in.Index(c.Field)
	if i < 0 {
		return nil, fmt.Errorf("field %q not in input %v", c.Field, in)
	}
	row := make(record.Row, in.Len())
	switch in.Field(i).Type {
	case record.Int64:
		return &sumOp[int64]{field: i, codec: state.Int64Codec{}, row: row}, nil
	case record.Float64:
		return &sumOp[float64]{field: i, codec: state.Float64Codec{}, float: true, row: row}, nil
	}
	return nil, fmt.Errorf("field %q is %v, want int64 or float64", c.Field, in.Field(i).Type)
}

func (s *sumOp[T]) InitializeState(sc StateContext) error {
	var err error
	s.sums, err = keyedState(sc, "sum", s.codec)
	return err
}

func (s *sumOp[T]) Process(row record.Row) error {
	acc, _, err := s.sums.Value()
	if err != nil {
		return err
	}
	acc += s.num(row[s.field])
	if err := s.sums.Update(acc); err != nil {
		return err
	}
	copyRow(s.row, row)
	s.row[s.field] = s.value(acc)
	return s.out.Emit(s.row)
}

// copyRow copies src into dst (of the same length). A short row is copied value by value: copy
// of values, which hold pointers, calls typedslicecopy, which costs more than a few stores.
func copyRow(dst, src record.Row) {
	if len(src) > 4 {
		copy(dst, src)
		return
	}
	for i := range src { //nolint:staticcheck // S1001: copy calls typedslicecopy, slower for a few values
		dst[i] = src[i]
	}
}

// Count adds the field count with the running count per key, emitting one update per
// record.
var Count = Define(Type{Name: "count", Keyed: true},
	func(p *Planner) (struct{}, *Shape) {
		var fields []record.Field
		for _, f := range p.In.Fields {
			if f.Name == "count" {
				p.Problemf("the input already has a field \"count\"; rename it with a map first")
				continue
			}
			fields = append(fields, f)
		}
		return struct{}{}, NewShape(append(fields, record.Field{Name: "count", Type: record.Int64}), p.In.Open)
	},
	func(_ struct{}, in, _ *record.Schema) (any, error) { return &countOp{width: in.Len()}, nil })

// countOp appends the running count per key.
type countOp struct {
	Base
	width  int
	counts *state.ValueState[int64]
	row    record.Row
}

func (c *countOp) InitializeState(sc StateContext) error {
	var err error
	c.counts, err = keyedState(sc, "count", state.Codec[int64](state.Int64Codec{}))
	return err
}

func (c *countOp) Open(ctx *Context, out Output) error {
	c.row = make(record.Row, c.width+1)
	return c.Base.Open(ctx, out)
}

func (c *countOp) Process(row record.Row) error {
	n, _, err := c.counts.Value()
	if err != nil {
		return err
	}
	n++
	if err := c.counts.Update(n); err != nil {
		return err
	}
	copyRow(c.row, row)
	c.row[c.width] = record.IntValue(n)
	return c.out.Emit(c.row)
}

// Reduce combines the previous result per key (acc) with each new record: spec field fields
// gives expressions for some of the input's fields, the others take the new record's values.
var Reduce = Define(Type{Name: "reduce", Keyed: true, Fields: []string{"fields"}}, planReduce,
	func(c exprsConfig, in, _ *record.Schema) (any, error) { return newReduce(c, in) })

func planReduce(p *Planner) (exprsConfig, *Shape) {
	var c exprsConfig
	for _, fe := range exprFields(p) {
		if !spec.Identifier.MatchString(fe.Key) {
			fe.Problemf("field names must be identifiers (letters, digits, _)")
			continue
		}
		f, found := p.In.Field(fe.Key)
		if !found {
			if !p.In.Open {
				fe.Problemf("no field %q in the input %v", fe.Key, p.In)
			}
			continue
		}
		src, _, _, _ := p.Expr(fe.Value, expression.Options{Acc: true, Want: f.Type})
		c.Fields = append(c.Fields, namedExpr{Name: fe.Key, Expr: src})
	}
	return c, p.In
}

// reduceOp combines the previous result per key (acc) with each new row. Fields without an
// expression take the new row's value; the first row of a key is its first result.
type reduceOp struct {
	Base
	schema *record.Schema
	fields []int
	evals  []*expression.Evaluator
	acc    *state.ValueState[record.Row]
	row    record.Row
}

func newReduce(c exprsConfig, in *record.Schema) (*reduceOp, error) {
	op := &reduceOp{schema: in, row: make(record.Row, in.Len())}
	for _, f := range c.Fields {
		i := in.Index(f.Name)
		if i < 0 {
			return nil, fmt.Errorf("field %q not in input %v", f.Name, in)
		}
		p, err := expression.Compile(f.Expr, in, expression.Options{Acc: true, Want: in.Field(i).Type})
		if err != nil {
			return nil, fmt.Errorf("field %q: %w", f.Name, err)
		}
		op.fields = append(op.fields, i)
		op.evals = append(op.evals, p.NewEvaluator())
	}
	return op, nil
}

func (r *reduceOp) InitializeState(sc StateContext) error {
	var err error
	r.acc, err = keyedState(sc, "reduce", state.RowCodec(r.schema))
	return err
}

func (r *reduceOp) Process(row record.Row) error {
	prev, ok, err := r.acc.Value()
	if err != nil {
		return err
	}
	copy(r.row, row)
	if ok {
		for j, e := range r.evals {
			v, err := e.Eval(row, prev)
			if err != nil {
				return r.EvalError(err)
			}
			r.row[r.fields[j]] = v
		}
	}
	if err := r.acc.Update(r.row.Clone()); err != nil {
		return err
	}
	return r.out.Emit(r.row)
}

package operator

import (
	"fmt"

	"github.com/goflink/goflink/expression"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// The keyed aggregates keep their state in maps keyed by record.Value. Strings in keys are
// cloned on insert because incoming rows may point into network buffers.

// sumOp replaces one numeric field with its running sum per key.
type sumOp struct {
	base
	field  int
	float  bool
	ints   map[record.Value]*int64
	floats map[record.Value]*float64
	row    record.Row
}

func newSum(s *pb.SumOperator, in *record.Schema) (*sumOp, error) {
	i := in.Index(s.GetField())
	if i < 0 {
		return nil, fmt.Errorf("field %q not in input %v", s.GetField(), in)
	}
	op := &sumOp{field: i, row: make(record.Row, in.Len())}
	switch in.Field(i).Type {
	case record.Int64:
		op.ints = map[record.Value]*int64{}
	case record.Float64:
		op.float = true
		op.floats = map[record.Value]*float64{}
	default:
		return nil, fmt.Errorf("field %q is %v, want int64 or float64", s.GetField(), in.Field(i).Type)
	}
	return op, nil
}

func (s *sumOp) Process(row record.Row) error {
	k := s.ctx.Key()
	copy(s.row, row)
	if s.float {
		p := s.floats[k]
		if p == nil {
			p = new(float64)
			s.floats[k.Clone()] = p
		}
		*p += row[s.field].Float()
		s.row[s.field] = record.FloatValue(*p)
	} else {
		p := s.ints[k]
		if p == nil {
			p = new(int64)
			s.ints[k.Clone()] = p
		}
		*p += row[s.field].Int()
		s.row[s.field] = record.IntValue(*p)
	}
	return s.out.Emit(s.row)
}

// countOp appends the running count per key.
type countOp struct {
	base
	width  int
	counts map[record.Value]*int64
	row    record.Row
}

func (c *countOp) Open(ctx *Context, out Output) error {
	c.counts = map[record.Value]*int64{}
	c.row = make(record.Row, c.width+1)
	return c.base.Open(ctx, out)
}

func (c *countOp) Process(row record.Row) error {
	k := c.ctx.Key()
	p := c.counts[k]
	if p == nil {
		p = new(int64)
		c.counts[k.Clone()] = p
	}
	*p++
	copy(c.row, row)
	c.row[c.width] = record.IntValue(*p)
	return c.out.Emit(c.row)
}

// reduceOp combines the previous result per key (acc) with each new row. Fields without an
// expression take the new row's value; the first row of a key is its first result.
type reduceOp struct {
	base
	fields []int
	evals  []*expression.Evaluator
	acc    map[record.Value]record.Row
	row    record.Row
}

func newReduce(r *pb.ReduceOperator, in *record.Schema) (*reduceOp, error) {
	op := &reduceOp{acc: map[record.Value]record.Row{}, row: make(record.Row, in.Len())}
	for _, f := range r.GetFields() {
		i := in.Index(f.GetName())
		if i < 0 {
			return nil, fmt.Errorf("field %q not in input %v", f.GetName(), in)
		}
		p, err := expression.Compile(f.GetExpression(), in, expression.Options{Acc: true, Want: in.Field(i).Type})
		if err != nil {
			return nil, fmt.Errorf("field %q: %w", f.GetName(), err)
		}
		op.fields = append(op.fields, i)
		op.evals = append(op.evals, p.NewEvaluator())
	}
	return op, nil
}

func (r *reduceOp) Process(row record.Row) error {
	k := r.ctx.Key()
	prev, ok := r.acc[k]
	copy(r.row, row)
	if ok {
		for j, e := range r.evals {
			v, err := e.Eval(row, prev)
			if err != nil {
				return r.userErr(err)
			}
			r.row[r.fields[j]] = v
		}
		for i, v := range r.row {
			prev[i] = v.Clone()
		}
	} else {
		r.acc[k.Clone()] = r.row.Clone()
	}
	return r.out.Emit(r.row)
}

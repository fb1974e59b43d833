package expression

import (
	"github.com/expr-lang/expr/ast"

	"github.com/goflink/goflink/record"
)

// shapeKind is which of the shapes most keys have an expression is (Selector).
type shapeKind uint8

const (
	shapeOther   shapeKind = iota // anything else: the evaluator
	shapeField                    // a field of the row
	shapeMod                      // an int64 field modulo a non-zero constant
	shapeModPow2                  // the same by a power of two, without a division
)

// shape is what a Selector needs of a Program of one of those shapes.
type shape struct {
	kind  shapeKind
	field int   // the field read
	d     int64 // shapeMod: the divisor
	mask  int64 // shapeModPow2: |d| - 1 and log2 |d|
	shift uint
}

// shapeOf finds the shape of a checked expression of type typ over schema s.
func shapeOf(node ast.Node, s *record.Schema, typ record.Type, acc bool) shape {
	c := &fastCompiler{schema: s, acc: acc}
	if i, fromAcc, ok := c.field(node, typ); ok && !fromAcc {
		return shape{kind: shapeField, field: i}
	}
	n, ok := node.(*ast.BinaryNode)
	if !ok || n.Operator != "%" || typ != record.Int64 {
		return shape{}
	}
	i, fromAcc, ok := c.field(n.Left, record.Int64)
	if !ok || fromAcc {
		return shape{}
	}
	d, ok := intConst(n.Right)
	if !ok || d == 0 {
		return shape{}
	}
	if mask, shift, ok := powerOfTwo(d); ok {
		return shape{kind: shapeModPow2, field: i, mask: mask, shift: shift}
	}
	return shape{kind: shapeMod, field: i, d: d}
}

// Selector evaluates a key: an expression over a row alone (no reduce accumulator). The
// shapes most keys have — a field, or an int64 field modulo a non-zero constant — it computes
// inline, without the calls through closures and their frame an Evaluator makes: a task
// computes a key per record, on both sides of a hash edge. Any other expression goes to an
// Evaluator. Like an Evaluator, it is owned by one goroutine.
type Selector struct {
	shape
	eval *Evaluator // shapeOther only
}

// NewSelector returns a Selector of p.
func (p *Program) NewSelector() *Selector {
	s := &Selector{shape: p.shape}
	if s.kind == shapeOther {
		s.eval = p.NewEvaluator()
	}
	return s
}

// Eval evaluates the expression for row: Evaluator.Eval(row, nil).
func (s *Selector) Eval(row record.Row) (record.Value, error) {
	switch s.kind {
	case shapeField:
		return row[s.field], nil
	case shapeModPow2:
		return record.IntValue(modPow2(row[s.field].Int(), s.mask, s.shift)), nil
	case shapeMod:
		return record.IntValue(row[s.field].Int() % s.d), nil
	}
	return s.eval.Eval(row, nil)
}

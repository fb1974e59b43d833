package expression

import (
	"cmp"
	"math"
	"math/bits"
	"reflect"

	"github.com/expr-lang/expr/ast"

	"github.com/goflink/goflink/record"
)

// frame is what native closures read: the current row and the previous reduce result, and the
// evaluation's budget (a concatenation charges it).
type frame struct {
	row, acc record.Row
	budget   *budget
}

// runtimeError is panicked by native closures and recovered by Evaluator.Eval.
type runtimeError string

type (
	fastFn  = func(*frame) record.Value
	intFn   = func(*frame) int64
	floatFn = func(*frame) float64
	strFn   = func(*frame) string
	boolFn  = func(*frame) bool
)

// compileFast translates a checked expr AST into native closures with expr's semantics
// (wrapping int arithmetic, `/` always in float, an integer `%` by zero is an error, numeric
// comparisons across int and float in float). It returns nil if any node is outside the
// supported subset; the caller then uses the VM for the whole expression. fallible reports
// that the closures may panic with a runtimeError (an integer `%` by a divisor that is not a
// non-zero constant, a concatenation, which charges the budget); the others never fail.
func compileFast(node ast.Node, s *record.Schema, acc bool) (f fastFn, fallible bool) {
	c := &fastCompiler{schema: s, acc: acc}
	f = c.compile(node)
	return f, c.fallible
}

func (c *fastCompiler) compile(node ast.Node) fastFn {
	switch recordType(node.Type()) {
	case record.Int64:
		// The shapes of most keys, in one closure each: a field, and a field modulo a constant.
		if i, fromAcc, ok := c.field(node, record.Int64); ok && !fromAcc {
			return func(fr *frame) record.Value { return fr.row[i] }
		}
		if n, ok := node.(*ast.BinaryNode); ok && n.Operator == "%" {
			if i, fromAcc, ok := c.field(n.Left, record.Int64); ok && !fromAcc {
				if d, ok := intConst(n.Right); ok && d != 0 {
					if mask, shift, ok := powerOfTwo(d); ok {
						return func(fr *frame) record.Value { return record.IntValue(modPow2(fr.row[i].Int(), mask, shift)) }
					}
					return func(fr *frame) record.Value { return record.IntValue(fr.row[i].Int() % d) }
				}
			}
		}
		if f := c.int(node); f != nil {
			return func(fr *frame) record.Value { return record.IntValue(f(fr)) }
		}
	case record.Float64:
		if f := c.float(node); f != nil {
			return func(fr *frame) record.Value { return record.FloatValue(f(fr)) }
		}
	case record.String:
		if f := c.str(node); f != nil {
			return func(fr *frame) record.Value { return record.StringValue(f(fr)) }
		}
	case record.Bool:
		if f := c.bool(node); f != nil {
			return func(fr *frame) record.Value { return record.BoolValue(f(fr)) }
		}
	case record.Map, record.Timestamp, record.Bytes:
		// A field of these types as it is (Kafka headers passed through, an event time).
		return fieldFn(c, node, recordType(node.Type()), func(v record.Value) record.Value { return v })
	}
	return nil
}

type fastCompiler struct {
	schema   *record.Schema
	acc      bool
	fallible bool // a closure built may panic with a runtimeError
}

// intConst returns the value of an integer literal.
func intConst(n ast.Node) (int64, bool) {
	switch n := n.(type) {
	case *ast.IntegerNode:
		return int64(n.Value), true
	case *ast.ConstantNode:
		if v, ok := n.Value.(int); ok {
			return int64(v), true
		}
	}
	return 0, false
}

// powerOfTwo reports whether |d| is a power of two 2^shift (mask = 2^shift - 1): then x % d
// is modPow2(x, mask, shift), as x % d and x % -d are equal.
func powerOfTwo(d int64) (mask int64, shift uint, ok bool) {
	if d == math.MinInt64 {
		return 0, 0, false // |d| overflows
	}
	if d < 0 {
		d = -d
	}
	if d&(d-1) != 0 {
		return 0, 0, false
	}
	return d - 1, uint(bits.TrailingZeros64(uint64(d))), true
}

// modPow2 is x % 2^shift with Go's (and expr's) sign of the result, the dividend's, without a
// division: a negative x is biased by 2^shift - 1 so that masking truncates toward zero.
func modPow2(x, mask int64, shift uint) int64 {
	bias := int64(uint64(x>>63) >> (64 - shift)) // mask when x < 0, else 0 (0 when shift is 0)
	return (x+bias)&mask - bias
}

// intFieldConst builds `field op constant` for an int field of the row and + - * or a
// non-zero `%` in one closure; nil for other shapes.
func (c *fastCompiler) intFieldConst(n *ast.BinaryNode) intFn {
	i, fromAcc, ok := c.field(n.Left, record.Int64)
	if !ok || fromAcc {
		return nil
	}
	d, ok := intConst(n.Right)
	if !ok {
		return nil
	}
	switch n.Operator {
	case "+":
		return func(f *frame) int64 { return f.row[i].Int() + d }
	case "-":
		return func(f *frame) int64 { return f.row[i].Int() - d }
	case "*":
		return func(f *frame) int64 { return f.row[i].Int() * d }
	case "%":
		if d == 0 {
			return nil
		}
		if mask, shift, ok := powerOfTwo(d); ok {
			return func(f *frame) int64 { return modPow2(f.row[i].Int(), mask, shift) }
		}
		return func(f *frame) int64 { return f.row[i].Int() % d }
	}
	return nil
}

// ternary builds cond ? a : b; nil when a part is not native.
func ternary[T any](cond boolFn, a, b func(*frame) T) func(*frame) T {
	if cond == nil || a == nil || b == nil {
		return nil
	}
	return func(f *frame) T {
		if cond(f) {
			return a(f)
		}
		return b(f)
	}
}

// constant builds a literal.
func constant[T any](v T) func(*frame) T { return func(*frame) T { return v } }

// signed builds -x or +x; nil for another operator or when x is not native.
func signed[T int64 | float64](op string, x func(*frame) T) func(*frame) T {
	switch {
	case x == nil:
		return nil
	case op == "-":
		return func(f *frame) T { return -x(f) }
	case op == "+":
		return x
	}
	return nil
}

// arith builds l + r, l - r or l * r; nil for another operator or when a side is not native.
func arith[T int64 | float64](op string, l, r func(*frame) T) func(*frame) T {
	if l == nil || r == nil {
		return nil
	}
	switch op {
	case "+":
		return func(f *frame) T { return l(f) + r(f) }
	case "-":
		return func(f *frame) T { return l(f) - r(f) }
	case "*":
		return func(f *frame) T { return l(f) * r(f) }
	}
	return nil
}

// compare builds l <op> r for an ordered type, or returns nil for another operator.
func compare[T cmp.Ordered](op string, l, r func(*frame) T) boolFn {
	switch op {
	case "<":
		return func(f *frame) bool { return l(f) < r(f) }
	case "<=":
		return func(f *frame) bool { return l(f) <= r(f) }
	case ">":
		return func(f *frame) bool { return l(f) > r(f) }
	case ">=":
		return func(f *frame) bool { return l(f) >= r(f) }
	}
	return equality(op, l, r)
}

// equality builds l == r or l != r, or returns nil for another operator.
func equality[T comparable](op string, l, r func(*frame) T) boolFn {
	switch op {
	case "==":
		return func(f *frame) bool { return l(f) == r(f) }
	case "!=":
		return func(f *frame) bool { return l(f) != r(f) }
	}
	return nil
}

// fieldFn reads n, an identifier or `acc.name` naming a field of type t, from the row or from
// acc (zero when there is no acc); nil when n names no such field.
func fieldFn[T any](c *fastCompiler, n ast.Node, t record.Type, get func(record.Value) T) func(*frame) T {
	i, fromAcc, ok := c.field(n, t)
	switch {
	case !ok:
		return nil
	case fromAcc:
		return func(f *frame) T {
			if f.acc == nil {
				var zero T
				return zero
			}
			return get(f.acc[i])
		}
	}
	return func(f *frame) T { return get(f.row[i]) }
}

// mapIndex resolves `field["key"]` on a map field of the row to (index, key).
func (c *fastCompiler) mapIndex(n ast.Node) (idx int, key string, ok bool) {
	m, isMember := n.(*ast.MemberNode)
	if !isMember || m.Optional || m.Method {
		return 0, "", false
	}
	id, ok1 := m.Node.(*ast.IdentifierNode)
	prop, ok2 := m.Property.(*ast.StringNode)
	if !ok1 || !ok2 {
		return 0, "", false
	}
	i := c.schema.Index(id.Value)
	if i < 0 || c.schema.Field(i).Type != record.Map {
		return 0, "", false
	}
	return i, prop.Value, true
}

func kindOf(n ast.Node) reflect.Kind {
	t := n.Type()
	if t == nil {
		return reflect.Invalid
	}
	return t.Kind()
}

// field resolves an identifier or `acc.name` to (index, fromAcc) if it names a field of type t.
func (c *fastCompiler) field(n ast.Node, t record.Type) (idx int, fromAcc, ok bool) {
	var name string
	switch n := n.(type) {
	case *ast.IdentifierNode:
		name = n.Value
	case *ast.MemberNode:
		id, ok1 := n.Node.(*ast.IdentifierNode)
		prop, ok2 := n.Property.(*ast.StringNode)
		if !c.acc || !ok1 || !ok2 || id.Value != AccName || n.Optional || n.Method {
			return 0, false, false
		}
		name, fromAcc = prop.Value, true
	default:
		return 0, false, false
	}
	i := c.schema.Index(name)
	if i < 0 || c.schema.Field(i).Type != t {
		return 0, false, false
	}
	return i, fromAcc, true
}

func (c *fastCompiler) int(n ast.Node) intFn {
	if kindOf(n) != reflect.Int {
		return nil
	}
	switch n := n.(type) {
	case *ast.IntegerNode:
		return constant(int64(n.Value))
	case *ast.ConstantNode:
		if v, ok := n.Value.(int); ok {
			return constant(int64(v))
		}
	case *ast.IdentifierNode, *ast.MemberNode:
		return fieldFn(c, n, record.Int64, record.Value.Int)
	case *ast.UnaryNode:
		return signed(n.Operator, c.int(n.Node))
	case *ast.BinaryNode:
		if f := c.intFieldConst(n); f != nil {
			return f
		}
		l, r := c.int(n.Left), c.int(n.Right)
		if n.Operator == "%" && l != nil && r != nil {
			if d, ok := intConst(n.Right); ok && d != 0 {
				if mask, shift, ok := powerOfTwo(d); ok {
					return func(f *frame) int64 { return modPow2(l(f), mask, shift) }
				}
				return func(f *frame) int64 { return l(f) % d }
			}
			c.fallible = true
			return func(f *frame) int64 {
				a, b := l(f), r(f)
				if b == 0 {
					panic(runtimeError("integer divide by zero"))
				}
				return a % b
			}
		}
		return arith(n.Operator, l, r)
	case *ast.ConditionalNode:
		return ternary(c.bool(n.Cond), c.int(n.Exp1), c.int(n.Exp2))
	case *ast.BuiltinNode:
		if n.Name != "int" || len(n.Arguments) != 1 {
			return nil
		}
		if x := c.int(n.Arguments[0]); x != nil {
			return x
		}
		if x := c.float(n.Arguments[0]); x != nil {
			return func(f *frame) int64 { return int64(x(f)) } // expr's int() truncates, as Go does
		}
	}
	return nil
}

// num compiles an int or float node as float.
func (c *fastCompiler) num(n ast.Node) floatFn {
	switch kindOf(n) {
	case reflect.Int:
		if x := c.int(n); x != nil {
			return func(f *frame) float64 { return float64(x(f)) }
		}
	case reflect.Float64:
		return c.float(n)
	}
	return nil
}

func (c *fastCompiler) float(n ast.Node) floatFn {
	if kindOf(n) != reflect.Float64 {
		return nil
	}
	switch n := n.(type) {
	case *ast.FloatNode:
		return constant(n.Value)
	case *ast.ConstantNode:
		if v, ok := n.Value.(float64); ok {
			return constant(v)
		}
	case *ast.IdentifierNode, *ast.MemberNode:
		return fieldFn(c, n, record.Float64, record.Value.Float)
	case *ast.UnaryNode:
		return signed(n.Operator, c.float(n.Node))
	case *ast.BinaryNode:
		l, r := c.num(n.Left), c.num(n.Right)
		switch {
		case l == nil || r == nil:
			return nil
		case n.Operator == "/":
			return func(f *frame) float64 { return l(f) / r(f) }
		case n.Operator == "**" || n.Operator == "^":
			return func(f *frame) float64 { return math.Pow(l(f), r(f)) }
		}
		return arith(n.Operator, l, r)
	case *ast.ConditionalNode:
		return ternary(c.bool(n.Cond), c.float(n.Exp1), c.float(n.Exp2))
	}
	return nil
}

func (c *fastCompiler) str(n ast.Node) strFn {
	if kindOf(n) != reflect.String {
		return nil
	}
	switch n := n.(type) {
	case *ast.StringNode:
		return constant(n.Value)
	case *ast.ConstantNode:
		if v, ok := n.Value.(string); ok {
			return constant(v)
		}
	case *ast.IdentifierNode, *ast.MemberNode:
		if i, key, ok := c.mapIndex(n); ok {
			// A missing key reads as "", as on the VM.
			return func(f *frame) string { v, _ := f.row[i].MapGet(key); return v }
		}
		return fieldFn(c, n, record.String, record.Value.Str)
	case *ast.CallNode: // a + b, patched to charge the budget (boundPatch)
		id, ok := n.Callee.(*ast.IdentifierNode)
		if !ok || id.Value != addFunc || len(n.Arguments) != 2 {
			return nil
		}
		l, r := c.str(n.Arguments[0]), c.str(n.Arguments[1])
		if l == nil || r == nil {
			return nil
		}
		c.fallible = true
		return func(f *frame) string {
			a, b := l(f), r(f)
			if err := f.budget.build("a concatenation", len(a)+len(b)); err != nil {
				panic(runtimeError(err.Error()))
			}
			return a + b
		}
	case *ast.ConditionalNode:
		return ternary(c.bool(n.Cond), c.str(n.Exp1), c.str(n.Exp2))
	}
	return nil
}

func (c *fastCompiler) bool(n ast.Node) boolFn {
	if kindOf(n) != reflect.Bool {
		return nil
	}
	switch n := n.(type) {
	case *ast.BoolNode:
		return constant(n.Value)
	case *ast.ConstantNode:
		if v, ok := n.Value.(bool); ok {
			return constant(v)
		}
	case *ast.IdentifierNode, *ast.MemberNode:
		return fieldFn(c, n, record.Bool, record.Value.Bool)
	case *ast.UnaryNode:
		x := c.bool(n.Node)
		if x == nil || (n.Operator != "!" && n.Operator != "not") {
			return nil
		}
		return func(f *frame) bool { return !x(f) }
	case *ast.ConditionalNode:
		return ternary(c.bool(n.Cond), c.bool(n.Exp1), c.bool(n.Exp2))
	case *ast.BinaryNode:
		return c.binaryBool(n)
	}
	return nil
}

func (c *fastCompiler) binaryBool(n *ast.BinaryNode) boolFn {
	switch n.Operator {
	case "&&", "and", "||", "or":
		l, r := c.bool(n.Left), c.bool(n.Right)
		if l == nil || r == nil {
			return nil
		}
		if n.Operator == "&&" || n.Operator == "and" {
			return func(f *frame) bool { return l(f) && r(f) }
		}
		return func(f *frame) bool { return l(f) || r(f) }
	case "==", "!=", "<", "<=", ">", ">=":
	default:
		return nil
	}
	lk, rk := kindOf(n.Left), kindOf(n.Right)
	switch {
	case lk == reflect.Int && rk == reflect.Int:
		if l, r := c.int(n.Left), c.int(n.Right); l != nil && r != nil {
			return compare(n.Operator, l, r)
		}
	case isNumeric(lk) && isNumeric(rk): // mixed int and float compare as float, like expr
		if l, r := c.num(n.Left), c.num(n.Right); l != nil && r != nil {
			return compare(n.Operator, l, r)
		}
	case lk == reflect.String && rk == reflect.String:
		if l, r := c.str(n.Left), c.str(n.Right); l != nil && r != nil {
			return compare(n.Operator, l, r)
		}
	case lk == reflect.Bool && rk == reflect.Bool:
		if l, r := c.bool(n.Left), c.bool(n.Right); l != nil && r != nil {
			return equality(n.Operator, l, r)
		}
	}
	return nil
}

func isNumeric(k reflect.Kind) bool { return k == reflect.Int || k == reflect.Float64 }

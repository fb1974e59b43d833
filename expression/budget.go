package expression

import (
	"encoding/base64"
	"fmt"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/builtin"
	"github.com/expr-lang/expr/conf"
	"github.com/expr-lang/expr/vm/runtime"
)

// Budgets of one evaluation. expr's VM bounds the elements of the ranges, arrays and maps it
// builds (memoryBudget), but not the strings its functions build, nor how often a loop runs:
// repeat(repeat("a", 999999), 1000000) asked for 1 TB before expr's own check, and a
// reduce that doubles a string asks for 2^n bytes in n steps. Every builtin that allocates in
// proportion to an argument is replaced by one that charges what it will build to the
// evaluation's budget first, and so is string concatenation; every loop charges its steps.
const (
	// MaxBuiltBytes bounds the bytes the functions and the string concatenations of one
	// evaluation build together. A record travels in at most 8 MiB; twice that leaves room for
	// the intermediate strings of an expression that builds one, and bounds the copying of one
	// that grows a string piece by piece.
	MaxBuiltBytes = 16 << 20
	// MaxSteps bounds the syntax nodes the loops of one evaluation (all, filter, map, reduce,
	// …) evaluate, counted per iteration: a loop inside a loop inside a loop over a field of
	// bytes would otherwise run for years. A million is milliseconds of work; a loop over a
	// split field is a few hundred.
	MaxSteps = 1_000_000
	// memoryBudget bounds the elements of the ranges, arrays and maps one evaluation builds on
	// expr's VM (expr's default).
	memoryBudget = 1_000_000
)

// budget is what one evaluation has used of MaxBuiltBytes and MaxSteps. It belongs to one
// Evaluator, reset before each evaluation.
type budget struct {
	built, steps int
}

func (b *budget) reset() { *b = budget{} }

// build charges the n bytes what is about to build (n < 0: more than MaxBuiltBytes); the error
// names what and the limit.
func (b *budget) build(what string, n int) error {
	if n < 0 || n > MaxBuiltBytes-b.built {
		return fmt.Errorf("%s would build %s, beyond the %d bytes an evaluation may build", what, plural(n, "byte"), MaxBuiltBytes)
	}
	b.built += n
	return nil
}

// step charges n steps of a loop.
func (b *budget) step(n int) error {
	if b.steps += n; b.steps > MaxSteps {
		return fmt.Errorf("loops evaluated more than %d expression nodes", MaxSteps)
	}
	return nil
}

func plural(n int, what string) string {
	if n < 0 { // too many to count
		return fmt.Sprintf("more than %d %ss", MaxBuiltBytes, what)
	}
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// Names of the functions the bounds patch in; expr's syntax has no way to write them.
const (
	addFunc  = "\x00add"
	stepFunc = "\x00step"
)

// boundedOptions are the options that make expr charge b: the builtins that allocate replaced,
// string concatenation and loop steps patched in.
func boundedOptions(b *budget) []expr.Option {
	opts := []expr.Option{expr.MaxNodes(maxNodes), expr.Patch(boundPatch{})}
	for name, size := range builtSizes {
		opts = append(opts, bounded(b, name, size))
	}
	opts = append(opts, function(&builtin.Function{
		Name: addFunc,
		Func: func(args ...any) (any, error) {
			if a, ok := args[0].(string); ok {
				if c, ok := args[1].(string); ok {
					if err := b.build("a concatenation", len(a)+len(c)); err != nil {
						return nil, err
					}
					return a + c, nil
				}
			}
			return runtime.Add(args[0], args[1]), nil
		},
		// The type expr gives +: a string of two strings, otherwise known only at run time.
		Validate: func(args []reflect.Type) (reflect.Type, error) {
			if len(args) == 2 && args[0].Kind() == reflect.String && args[1].Kind() == reflect.String {
				return args[0], nil
			}
			return reflect.TypeFor[any](), nil
		},
	}), function(&builtin.Function{
		Name: stepFunc,
		Func: func(args ...any) (any, error) {
			if err := b.step(args[1].(int)); err != nil {
				return nil, err
			}
			return args[0], nil
		},
		Validate: func(args []reflect.Type) (reflect.Type, error) { return args[0], nil },
	}))
	return opts
}

// function adds f to the functions expressions may call (overriding a builtin of its name).
func function(f *builtin.Function) expr.Option {
	return func(c *conf.Config) { c.Functions[f.Name] = f }
}

// bounded replaces the builtin name by one that charges b with size(args) before it runs.
func bounded(b *budget, name string, size func(args []any) int) expr.Option {
	orig := builtin.Builtins[builtin.Index[name]]
	call := orig.Func
	switch {
	case orig.Safe != nil:
		call = func(args ...any) (any, error) {
			out, _, err := orig.Safe(args...)
			return out, err
		}
	case orig.Fast != nil:
		call = func(args ...any) (any, error) { return orig.Fast(args[0]), nil }
	}
	return function(&builtin.Function{
		Name: name, Types: orig.Types, Validate: orig.Validate, Deref: orig.Deref,
		Func: func(args ...any) (any, error) {
			if err := b.build(name+"()", size(args)); err != nil {
				return nil, err
			}
			return call(args...)
		},
	})
}

// Sizes of what a header of a string, an interface or a map entry costs beyond its bytes.
const (
	headerBytes   = 16
	mapEntryBytes = 48
	// fromJSONBytes is what fromJSON keeps per byte of its input at most: "[0,0,…]" is a
	// float64 in an interface per two bytes, twice that while its slice grows.
	fromJSONBytes = 24
)

// builtSizes are the builtins that allocate in proportion to an argument, with an upper bound
// of what each builds for its arguments. An argument of a type the builtin does not take counts
// nothing: the builtin reports it.
var builtSizes = map[string]func(args []any) int{
	"repeat": func(args []any) int {
		s, _ := args[0].(string)
		n, ok := intArg(args, 1)
		if !ok || n <= 0 || len(s) == 0 {
			return 0
		}
		if n > MaxBuiltBytes/len(s) {
			return -1 // beyond the budget, maybe beyond int
		}
		return len(s) * n
	},
	"replace": func(args []any) int {
		s, _ := strArg(args, 0)
		old, _ := strArg(args, 1)
		repl, _ := strArg(args, 2)
		n := strings.Count(s, old) // len(s)+1 for old == ""
		if n > 0 && len(repl) > MaxBuiltBytes/n {
			return -1
		}
		return len(s) + n*len(repl)
	},
	"join": func(args []any) int {
		glue, _ := strArg(args, 1)
		n := 0
		switch a := args[0].(type) {
		case []string:
			for _, s := range a {
				n += len(s) + len(glue)
			}
		case []any:
			for _, e := range a {
				s, _ := e.(string)
				n += len(s) + len(glue)
			}
		}
		return n
	},
	"split":      splitSize,
	"splitAfter": splitSize,
	"upper":      caseSize,
	"lower":      caseSize,
	"toBase64": func(args []any) int {
		s, _ := strArg(args, 0)
		return base64.StdEncoding.EncodedLen(len(s))
	},
	"fromBase64": func(args []any) int {
		s, _ := strArg(args, 0)
		return base64.StdEncoding.DecodedLen(len(s))
	},
	"fromJSON": func(args []any) int {
		s, _ := strArg(args, 0)
		return fromJSONBytes * len(s)
	},
	"toJSON": func(args []any) int { return formatSize(reflect.ValueOf(args[0]), 0, true) },
	"string": func(args []any) int { return formatSize(reflect.ValueOf(args[0]), 0, false) },
	"keys":   func(args []any) int { return headerBytes * lenArg(args, 0) },
	"values": func(args []any) int { return headerBytes * lenArg(args, 0) },
	"toPairs": func(args []any) int {
		return (mapEntryBytes + 2*headerBytes) * lenArg(args, 0)
	},
	"fromPairs": func(args []any) int { return mapEntryBytes * lenArg(args, 0) },
	"uniq":      func(args []any) int { return (mapEntryBytes + headerBytes) * lenArg(args, 0) },
}

// splitSize bounds split(s, sep[, n]) and splitAfter: a string header per part.
func splitSize(args []any) int {
	s, _ := strArg(args, 0)
	sep, _ := strArg(args, 1)
	parts := strings.Count(s, sep) + 1 // utf8.RuneCountInString(s)+2 for sep == ""
	if n, ok := intArg(args, 2); ok && n > 0 {
		parts = min(parts, n)
	}
	return headerBytes * parts
}

// caseSize bounds upper(s) and lower(s): a rune changes to one at most half as long again
// (U+023F to U+2C7E, two bytes to three).
func caseSize(args []any) int {
	s, _ := strArg(args, 0)
	return len(s) + len(s)/2 + utf8.UTFMax
}

func strArg(args []any, i int) (string, bool) {
	if i >= len(args) {
		return "", false
	}
	s, ok := args[i].(string)
	return s, ok
}

func intArg(args []any, i int) (int, bool) {
	if i >= len(args) {
		return 0, false
	}
	v := reflect.ValueOf(args[i])
	switch {
	case v.CanInt():
		return int(v.Int()), true
	case v.CanUint():
		return int(min(v.Uint(), uint64(MaxBuiltBytes)+1)), true
	case v.CanFloat():
		return int(min(max(v.Float(), -1), MaxBuiltBytes+1)), true
	}
	return 0, false
}

// lenArg is the length of a collection argument, 0 for another value.
func lenArg(args []any, i int) int {
	if i >= len(args) {
		return 0
	}
	switch v := reflect.ValueOf(args[i]); v.Kind() {
	case reflect.Array, reflect.Slice, reflect.Map, reflect.String:
		return v.Len()
	}
	return 0
}

// formatSize bounds the length of v formatted by toJSON (asJSON: json.MarshalIndent with two
// spaces, depth levels in) or by string (fmt's %v). It stops counting once beyond
// MaxBuiltBytes.
func formatSize(v reflect.Value, depth int, asJSON bool) int {
	indent := 0
	if asJSON {
		indent = 1 + 2*(depth+1) // a newline and the indentation of each element
	}
	switch v.Kind() {
	case reflect.Invalid:
		return 5 // null, <nil>
	case reflect.Bool:
		return 5
	case reflect.String:
		if asJSON {
			return jsonStringSize(v.String())
		}
		return v.Len()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64:
		return 32 // -1.7976931348623157e+308, a time.Duration's -2562047h47m16.854775808s
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return 5
		}
		return formatSize(v.Elem(), depth, asJSON)
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return 2 + 4*v.Len() // base64, or [255 255 …]
		}
		n := 2 + indent
		for i := 0; i < v.Len() && n <= MaxBuiltBytes; i++ {
			n += 1 + indent + formatSize(v.Index(i), depth+1, asJSON)
		}
		return n
	case reflect.Map:
		n := 2 + indent
		for it := v.MapRange(); it.Next() && n <= MaxBuiltBytes; {
			n += 3 + indent + formatSize(it.Key(), depth+1, asJSON) + formatSize(it.Value(), depth+1, asJSON)
		}
		return n
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			return 64
		}
		n := 2 + indent
		for i := 0; i < v.NumField() && n <= MaxBuiltBytes; i++ {
			f := v.Type().Field(i)
			n += 4 + indent + len(f.Name) + len(f.Tag) + formatSize(v.Field(i), depth+1, asJSON)
		}
		return n
	}
	return 64 // a function or a channel: their address
}

// jsonStringSize bounds the length of s quoted by encoding/json: \u00XX for a control
// character, <, > and &, \ufffd for a byte of invalid UTF-8, \u2028 and \u2029 for those.
func jsonStringSize(s string) int {
	n := 2
	for i := 0; i < len(s) && n <= MaxBuiltBytes; {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1, r < 0x20, r == '<', r == '>', r == '&', r == '\u2028', r == '\u2029':
			n += 6
		case r == '"', r == '\\':
			n += 2
		default:
			n += size
		}
		i += size
	}
	return n
}

// boundPatch rewrites a checked syntax tree so that it charges its budget: a + whose operands
// may both be strings calls addFunc, and the body of every loop calls stepFunc with its number
// of nodes (a loop without a body gets one that passes its element on).
type boundPatch struct{}

// loops are expr's builtins that evaluate a predicate per element.
var loops = map[string]bool{
	"all": true, "none": true, "any": true, "one": true, "filter": true, "map": true, "count": true, "sum": true,
	"find": true, "findIndex": true, "findLast": true, "findLastIndex": true, "groupBy": true, "sortBy": true, "reduce": true,
}

func (boundPatch) Visit(node *ast.Node) {
	switch n := (*node).(type) {
	case *ast.BinaryNode:
		if n.Operator != "+" || !mayBeString(n.Left) || !mayBeString(n.Right) {
			return
		}
		call := &ast.CallNode{Callee: &ast.IdentifierNode{Value: addFunc}, Arguments: []ast.Node{n.Left, n.Right}}
		call.SetLocation(n.Location())
		call.SetType(n.Type())
		ast.Patch(node, call)
	case *ast.BuiltinNode:
		if !loops[n.Name] || len(n.Arguments) == 0 {
			return
		}
		if len(n.Arguments) == 1 { // count(xs), sum(xs): the element is the body
			body := &ast.PointerNode{}
			body.SetLocation(n.Location())
			n.Arguments = append(n.Arguments, &ast.PredicateNode{Node: body})
		}
		pred, ok := n.Arguments[1].(*ast.PredicateNode)
		if !ok {
			return
		}
		var c nodeCount
		ast.Walk(&pred.Node, &c)
		call := &ast.CallNode{Callee: &ast.IdentifierNode{Value: stepFunc}, Arguments: []ast.Node{pred.Node, &ast.IntegerNode{Value: int(c)}}}
		call.SetLocation(pred.Node.Location())
		pred.Node = call
	}
}

// mayBeString reports whether n may be a string: its type is string or known only at run time.
func mayBeString(n ast.Node) bool {
	t := n.Type()
	return t == nil || t.Kind() == reflect.String || t.Kind() == reflect.Interface
}

// nodeCount counts the nodes of a tree.
type nodeCount int

func (c *nodeCount) Visit(*ast.Node) { *c++ }

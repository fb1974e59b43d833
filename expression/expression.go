package expression

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/vm"

	"github.com/goflink/goflink/internal/suggest"
	"github.com/goflink/goflink/record"
)

// AccName is the name under which reduce expressions see the previous result for the key.
const AccName = "acc"

// Options tune Compile.
type Options struct {
	// Acc exposes `acc`, a record of the same schema (the previous reduce result).
	Acc bool
	// Want, when not Invalid, is the required result type.
	Want record.Type
}

// Program is a compiled, type-checked expression. It is immutable and safe to share; use
// NewEvaluator to run it.
type Program struct {
	src    string
	typ    record.Type
	schema *record.Schema
	layout *envLayout
	prog   *vm.Program
	fast   fastFn // nil when the expression needs the VM
	// fallible: fast may panic with a runtimeError (Eval recovers it); otherwise it never
	// fails and Eval calls it bare.
	fallible bool
	// shape is which of the shapes most keys have the expression is (Selector).
	shape shape
}

// envLayout is the Go struct type that mirrors the fields of a schema an expression names for
// expr, and each one's offset. Mirroring only those makes compiling an expression cost its
// length, not its schema's width (expr looks a name up by scanning the struct's fields), and
// the VM path copies only them.
type envLayout struct {
	typ     reflect.Type // struct with one field per named schema field, plus Acc when asked
	fields  []int        // the schema index of each struct field, ascending
	offsets []uintptr    // the offset of each
	accOff  uintptr
	hasAcc  bool
}

// envName is expr's name of the whole environment; an expression that names it may read any
// field.
const envName = "$env"

// named returns the indexes of the fields of s that names holds (all when it holds envName),
// ascending. It costs the names, not the fields.
func named(s *record.Schema, names []string) []int {
	if slices.Contains(names, envName) {
		out := make([]int, s.Len())
		for i := range out {
			out[i] = i
		}
		return out
	}
	var out []int
	for _, n := range names {
		if i := s.Index(n); i >= 0 && !slices.Contains(out, i) {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out
}

// schemaNames returns a function that lists the names of the fields of s.
func schemaNames(s *record.Schema) func() []string {
	return func() []string {
		names := make([]string, s.Len())
		for i := range names {
			names[i] = s.Field(i).Name
		}
		return names
	}
}

// Fields is what Check knows of the fields of records: each by name, and the names of all
// (for messages).
type Fields interface {
	Field(name string) (record.Field, bool)
	Names() []string
}

// namedFields returns the fields of in that names holds (all when it holds envName), in the
// order named. It costs the names, not the fields.
func namedFields(in Fields, names []string) []record.Field {
	if slices.Contains(names, envName) {
		names = in.Names()
	}
	var out []record.Field
	for _, n := range names {
		if f, ok := in.Field(n); ok && !slices.ContainsFunc(out, func(g record.Field) bool { return g.Name == n }) {
			out = append(out, f)
		}
	}
	return out
}

// goTypes are the Go types expr sees for the record types.
var goTypes = map[record.Type]reflect.Type{
	record.Int64:     reflect.TypeFor[int](),
	record.Float64:   reflect.TypeFor[float64](),
	record.String:    reflect.TypeFor[string](),
	record.Bool:      reflect.TypeFor[bool](),
	record.Bytes:     reflect.TypeFor[[]byte](),
	record.Timestamp: reflect.TypeFor[time.Time](),
	record.Map:       reflect.TypeFor[map[string]string](),
}

// goAny is the Go type of a field whose type is not known (see Check).
var goAny = reflect.TypeFor[any]()

func recordType(t reflect.Type) record.Type {
	for rt, gt := range goTypes {
		if t == gt {
			return rt
		}
	}
	if t == nil {
		return record.Invalid
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return record.Int64
	case reflect.Float32, reflect.Float64:
		return record.Float64
	case reflect.String:
		return record.String
	case reflect.Bool:
		return record.Bool
	}
	return record.Invalid
}

// structFields mirrors fields for expr; a field of type record.Invalid becomes an any. With
// acc it adds the field acc, a struct of the same fields (an any when open: their names are
// not all known).
func structFields(fs []record.Field, open, acc bool) []reflect.StructField {
	fields := make([]reflect.StructField, len(fs))
	for i, f := range fs {
		typ := goAny
		if f.Type != record.Invalid {
			typ = goTypes[f.Type]
		}
		fields[i] = reflect.StructField{Name: fmt.Sprintf("F%d", i), Type: typ, Tag: reflect.StructTag(fmt.Sprintf(`expr:%q`, f.Name))}
	}
	if acc {
		typ := goAny
		if !open {
			typ = reflect.StructOf(structFields(fs, false, false))
		}
		fields = append(fields, reflect.StructField{Name: "Acc", Type: typ, Tag: reflect.StructTag(`expr:"` + AccName + `"`)})
	}
	return fields
}

// newLayout mirrors the fields of s that names holds (an expression's identifiers).
func newLayout(s *record.Schema, withAcc bool, names []string) *envLayout {
	l := &envLayout{hasAcc: withAcc, fields: named(s, names)}
	fs := make([]record.Field, len(l.fields))
	for j, i := range l.fields {
		fs[j] = s.Field(i)
	}
	l.typ = reflect.StructOf(structFields(fs, false, withAcc))
	l.offsets = make([]uintptr, len(l.fields))
	for j := range l.offsets {
		l.offsets[j] = l.typ.Field(j).Offset
	}
	if withAcc {
		l.accOff = l.typ.Field(len(l.fields)).Offset
	}
	return l
}

// Compile parses and type-checks src against schema. Errors name the problem and the column.
func Compile(src string, schema *record.Schema, opts Options) (*Program, error) {
	if strings.TrimSpace(src) == "" {
		return nil, errors.New("expression is empty")
	}
	names, err := checkSize(src)
	if err != nil {
		return nil, describe(err, schemaNames(schema), opts.Acc)
	}
	layout := newLayout(schema, opts.Acc, names)
	prog, err := compileVM(src, reflect.New(layout.typ).Interface(), new(budget))
	if err != nil {
		return nil, describe(err, schemaNames(schema), opts.Acc)
	}
	node := prog.Node()
	typ, err := resultType(node.Type(), opts)
	if err != nil {
		return nil, err
	}
	p := &Program{src: src, typ: typ, schema: schema, layout: layout, prog: prog}
	p.fast, p.fallible = compileFast(node, schema, opts.Acc)
	if p.fast != nil {
		p.shape = shapeOf(node, schema, typ, opts.Acc)
	}
	return p, nil
}

// compileVM compiles src for expr's VM against env (a pointer to its struct), charging b when
// it runs (budget.go).
func compileVM(src string, env any, b *budget, opts ...expr.Option) (*vm.Program, error) {
	opts = append(append([]expr.Option{expr.Env(env)}, opts...), boundedOptions(b)...)
	prog, err := expr.Compile(src, opts...)
	if err != nil {
		return nil, compilerError(err)
	}
	return prog, nil
}

// compilerError keeps the message of an error of expr's compiler, which turns a panic of its
// own (a predicate pointer it does not know, such as #x) into an error that carries a Go stack
// trace, without the trace.
func compilerError(err error) error {
	msg, _, traced := strings.Cut(err.Error(), "\ngoroutine ")
	if !traced {
		return err
	}
	if name, ok := strings.CutPrefix(msg, "unknown pointer "); ok {
		return fmt.Errorf("unknown pointer #%s: in a predicate # is the element, #index its index and #acc the accumulator of reduce", name)
	}
	return errors.New(msg)
}

// resultType checks an expression's result type against the record types and opts.Want.
func resultType(t reflect.Type, opts Options) (record.Type, error) {
	typ := recordType(t)
	if typ == record.Invalid {
		return record.Invalid, fmt.Errorf("result type %v is not a record type (want int64, float64, string, bool, bytes, timestamp or map)", typeName(t))
	}
	if opts.Want != record.Invalid && typ != opts.Want {
		return record.Invalid, fmt.Errorf("result is %v, want %v", typ, opts.Want)
	}
	return typ, nil
}

// Check type-checks src against records that are only partly known, as the job builder sees
// the output of an operator it could not validate: a field of type record.Invalid may have any
// type, and when open the records may have more fields, of any name. Check reports an error
// only when src is wrong whatever the unknown parts turn out to be, and then in Compile's
// words; its result type is record.Invalid when it depends on them. Against fields that are
// all known and not open it answers as Compile does. Only the fields src names count: the
// others cannot change its type (and its cost does not depend on them).
func Check(src string, fields Fields, open bool, opts Options) (record.Type, error) {
	if strings.TrimSpace(src) == "" {
		return record.Invalid, errors.New("expression is empty")
	}
	names, err := checkSize(src)
	if err != nil {
		return record.Invalid, describe(err, fields.Names, opts.Acc)
	}
	used := namedFields(fields, names)
	sf := structFields(used, open, opts.Acc)
	known := !open && !slices.ContainsFunc(used, func(f record.Field) bool { return f.Type == record.Invalid })
	var options []expr.Option
	if open {
		options = append(options, expr.AllowUndefinedVariables())
	}
	prog, err := compileVM(src, reflect.New(reflect.StructOf(sf)).Interface(), new(budget), options...)
	if err != nil {
		return record.Invalid, describe(err, fields.Names, opts.Acc)
	}
	t := prog.Node().Type()
	if dynamic := t == nil || t.Kind() == reflect.Interface; dynamic && !known {
		return record.Invalid, nil // it may depend on what is unknown
	}
	return resultType(t, opts)
}

func typeName(t reflect.Type) string {
	if t == nil || t.Kind() == reflect.Interface {
		return "unknown (dynamic)"
	}
	return t.String()
}

// maxListedFields bounds the fields an unknown-name error lists: a record may have thousands.
const maxListedFields = 20

// describe turns an expr compile error into one line naming the column, with a did-you-mean
// for unknown names among fields (called only then).
func describe(err error, fields func() []string, acc bool) error {
	var fe *file.Error
	if !errors.As(err, &fe) {
		return err
	}
	msg := fe.Message
	if name, ok := strings.CutPrefix(msg, "unknown name "); ok {
		names := fields()
		if acc {
			names = append(names, AccName)
		}
		listed := names
		if len(listed) > maxListedFields {
			listed = append(slices.Clip(listed[:maxListedFields]), fmt.Sprintf("… (%d in all)", len(names)))
		}
		msg += " (fields: " + strings.Join(listed, ", ") + ")"
		if s := suggest.Closest(name, names); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
		}
	}
	return fmt.Errorf("%s (column %d)", msg, fe.Column+1)
}

// Type returns the result type.
func (p *Program) Type() record.Type { return p.typ }

// Source returns the expression text.
func (p *Program) Source() string { return p.src }

// Native reports whether the expression runs as native closures rather than on the VM.
func (p *Program) Native() bool { return p.fast != nil }

// Evaluator runs one Program. It is owned by one goroutine (a task's event loop).
type Evaluator struct {
	p *Program
	// infallible is p.fast when it cannot fail, else nil: Eval's common case, one load away.
	infallible fastFn
	frame      frame
	budget     budget // what the current evaluation used (MaxBuiltBytes, MaxSteps)
	// VM path only: the program compiled to charge this evaluator's budget, its VM and its
	// environment, a *struct of layout.typ.
	prog *vm.Program
	vm   vm.VM
	env  reflect.Value
	base unsafe.Pointer
}

// NewEvaluator returns an evaluator with its own VM, environment and budget.
func (p *Program) NewEvaluator() *Evaluator {
	e := &Evaluator{p: p}
	if !p.fallible {
		e.infallible = p.fast
	}
	e.frame.budget = &e.budget
	if p.fast == nil {
		e.env = reflect.New(p.layout.typ)
		e.base = e.env.UnsafePointer()
		prog, err := compileVM(p.src, e.env.Interface(), &e.budget)
		if err != nil { // Compile compiled the same source against the same environment
			panic(fmt.Sprintf("expression: %s compiled once, not twice: %v", Quote(p.src), err))
		}
		e.prog = prog
		e.vm.MemoryBudget = memoryBudget
	}
	return e
}

// Eval evaluates the expression for row (and acc, the previous reduce result, when compiled
// with Options.Acc; acc may be nil then, which reads as zero values). Runtime errors such as
// an integer division by zero are returned, never panicked.
func (e *Evaluator) Eval(row, acc record.Row) (record.Value, error) {
	if f := e.infallible; f != nil {
		e.setFrame(row, acc)
		return f(&e.frame), nil
	}
	return e.eval(row, acc)
}

// setFrame points the frame at row and acc. Callers pass the same rows over and over (a task
// decodes every record into one row): storing only what changed saves the stores' write
// barriers while the GC runs.
func (e *Evaluator) setFrame(row, acc record.Row) {
	if unsafe.SliceData(e.frame.row) != unsafe.SliceData(row) || len(e.frame.row) != len(row) {
		e.frame.row = row
	}
	if unsafe.SliceData(e.frame.acc) != unsafe.SliceData(acc) || len(e.frame.acc) != len(acc) {
		e.frame.acc = acc
	}
}

// eval is Eval of an expression that may fail, natively or on the VM.
func (e *Evaluator) eval(row, acc record.Row) (v record.Value, err error) {
	e.budget.reset()
	if e.p.fast != nil {
		e.setFrame(row, acc)
		defer func() {
			if r := recover(); r != nil {
				re, ok := r.(runtimeError)
				if !ok {
					panic(r)
				}
				v, err = record.Value{}, fmt.Errorf("evaluate %s: %s", Quote(e.p.src), string(re))
			}
		}()
		return e.p.fast(&e.frame), nil
	}
	return e.evalVM(row, acc)
}

func (e *Evaluator) evalVM(row, acc record.Row) (record.Value, error) {
	l := e.p.layout
	storeRow(e.base, l, e.p.schema, row)
	if l.hasAcc {
		accBase := unsafe.Add(e.base, l.accOff)
		if acc == nil {
			clear(unsafe.Slice((*byte)(accBase), l.typ.Field(len(l.offsets)).Type.Size()))
		} else {
			storeRow(accBase, l, e.p.schema, acc)
		}
	}
	out, err := e.vm.Run(e.prog, e.env.Interface())
	if err != nil {
		var fe *file.Error
		if errors.As(err, &fe) {
			return record.Value{}, fmt.Errorf("evaluate %s: %s (column %d)", Quote(e.p.src), fe.Message, fe.Column+1)
		}
		return record.Value{}, fmt.Errorf("evaluate %s: %w", Quote(e.p.src), err)
	}
	return toValue(out, e.p.typ)
}

// storeRow writes the fields of row that l mirrors into the env struct at base. The acc struct
// has the same field offsets as the leading fields of the top-level struct, because both start
// with the same fields.
func storeRow(base unsafe.Pointer, l *envLayout, s *record.Schema, row record.Row) {
	for j, off := range l.offsets {
		i := l.fields[j]
		p := unsafe.Add(base, off)
		v := row[i]
		switch s.Field(i).Type {
		case record.Int64:
			*(*int)(p) = int(v.Int())
		case record.Float64:
			*(*float64)(p) = v.Float()
		case record.String:
			*(*string)(p) = v.Str()
		case record.Bool:
			*(*bool)(p) = v.Bool()
		case record.Bytes:
			*(*[]byte)(p) = v.BytesView()
		case record.Timestamp:
			*(*time.Time)(p) = v.Time()
		case record.Map:
			*(*map[string]string)(p) = v.Map()
		}
	}
}

func toValue(out any, t record.Type) (record.Value, error) {
	switch x := out.(type) {
	case int:
		if t == record.Float64 {
			return record.FloatValue(float64(x)), nil
		}
		return record.IntValue(int64(x)), nil
	case int64:
		return record.IntValue(x), nil
	case float64:
		return record.FloatValue(x), nil
	case string:
		return record.StringValue(x), nil
	case bool:
		return record.BoolValue(x), nil
	case []byte:
		return record.BytesValue(x), nil
	case time.Time:
		return record.TimeValue(x), nil
	case map[string]string:
		return record.MapValue(x), nil
	case nil:
		return record.Value{}, fmt.Errorf("expression returned nil, want %v", t)
	}
	rv := reflect.ValueOf(out)
	switch {
	case rv.CanInt():
		return record.IntValue(rv.Int()), nil
	case rv.CanUint():
		return record.IntValue(int64(rv.Uint())), nil
	case rv.CanFloat():
		return record.FloatValue(rv.Float()), nil
	}
	return record.Value{}, fmt.Errorf("expression returned %T, want %v", out, t)
}

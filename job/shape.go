package job

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/file"

	"github.com/goflink/goflink/expression"
	"github.com/goflink/goflink/internal/suggest"
	"github.com/goflink/goflink/record"
)

// shape is what validation knows of the records an operator emits. Behind a broken operator
// it is only partly known: the type of a field (record.Invalid), or whether there are fields
// besides those listed (open). Readers are still checked against what is known, and such a
// check reports a problem only when it holds whatever the unknown parts turn out to be, so a
// broken operator does not cascade into noise downstream.
type shape struct {
	fields []record.Field // a field of type record.Invalid has an unknown type
	open   bool           // there may be more fields, with unknown names
	schema *record.Schema // the whole schema, when nothing is unknown
}

// knownShape is the shape of records of a known schema.
func knownShape(s *record.Schema) *shape { return &shape{fields: s.Fields(), schema: s} }

// unknownShape is the shape of records nothing is known of.
func unknownShape() *shape { return &shape{open: true} }

// newShape returns the shape of records with these fields, and maybe more when open.
func newShape(fields []record.Field, open bool) *shape {
	sh := &shape{fields: fields, open: open}
	if !open {
		if s, err := record.NewSchema(fields...); err == nil {
			sh.schema = s
		}
	}
	return sh
}

// field looks a field up by name.
func (sh *shape) field(name string) (record.Field, bool) {
	for _, f := range sh.fields {
		if f.Name == name {
			return f, true
		}
	}
	return record.Field{}, false
}

// lacks reports whether the records certainly have no field called name.
func (sh *shape) lacks(name string) bool {
	_, found := sh.field(name)
	return !found && !sh.open
}

func (sh *shape) names() []string {
	out := make([]string, len(sh.fields))
	for i, f := range sh.fields {
		out[i] = f.Name
	}
	return out
}

// unite returns what is known of records of both shapes a and b, as the reader of two inputs
// sees them; false when a and b certainly differ.
func unite(a, b *shape) (*shape, bool) {
	if a.open || b.open {
		return unknownShape(), true
	}
	if len(a.fields) != len(b.fields) {
		return nil, false
	}
	fields := make([]record.Field, len(a.fields))
	for i, f := range a.fields {
		g := b.fields[i]
		switch {
		case f.Name != g.Name:
			return nil, false
		case f.Type == record.Invalid:
			f.Type = g.Type
		case g.Type != record.Invalid && g.Type != f.Type:
			return nil, false
		}
		fields[i] = f
	}
	return newShape(fields, false), true
}

// String renders the shape like record.Schema, an unknown type as "unknown".
func (sh *shape) String() string {
	if sh.schema != nil {
		return sh.schema.String()
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, f := range sh.fields {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(f.Name)
		b.WriteString(": ")
		if f.Type == record.Invalid {
			b.WriteString("unknown")
		} else {
			b.WriteString(f.Type.String())
		}
	}
	if sh.open {
		if len(sh.fields) > 0 {
			b.WriteString(", ")
		}
		b.WriteString("…")
	}
	b.WriteByte('}')
	return b.String()
}

// goType is the Go type package expression gives expr for a field of type t; any when t is
// unknown.
func goType(t record.Type) reflect.Type {
	switch t {
	case record.Int64:
		return reflect.TypeFor[int]()
	case record.Float64:
		return reflect.TypeFor[float64]()
	case record.String:
		return reflect.TypeFor[string]()
	case record.Bool:
		return reflect.TypeFor[bool]()
	case record.Bytes:
		return goBytes
	case record.Timestamp:
		return goTime
	case record.Map:
		return goMap
	}
	return reflect.TypeFor[any]()
}

var (
	goBytes = reflect.TypeFor[[]byte]()
	goTime  = reflect.TypeFor[time.Time]()
	goMap   = reflect.TypeFor[map[string]string]()
)

// checkPartial type-checks src against records of a partly known shape, as expression.Compile
// does against a schema. A field of unknown type is an expr value of unknown type, and when
// the shape is open any name is one, so expr rejects only what is wrong for every type they
// could have. The result type is record.Invalid when it depends on the unknown parts.
func checkPartial(src string, in *shape, opts expression.Options) (record.Type, error) {
	if strings.TrimSpace(src) == "" {
		return record.Invalid, errors.New("expression is empty")
	}
	fields := make([]reflect.StructField, len(in.fields))
	for i, f := range in.fields {
		fields[i] = reflect.StructField{Name: fmt.Sprintf("F%d", i), Type: goType(f.Type), Tag: reflect.StructTag(fmt.Sprintf(`expr:%q`, f.Name))}
	}
	if opts.Acc {
		acc := goType(record.Invalid)
		if !in.open {
			acc = reflect.StructOf(fields)
		}
		fields = append(fields, reflect.StructField{Name: "Acc", Type: acc, Tag: reflect.StructTag(`expr:"` + expression.AccName + `"`)})
	}
	options := []expr.Option{expr.Env(reflect.New(reflect.StructOf(fields)).Interface())}
	if in.open {
		options = append(options, expr.AllowUndefinedVariables())
	}
	prog, err := expr.Compile(src, options...)
	if err != nil {
		return record.Invalid, describePartial(err, in, opts.Acc)
	}
	t := prog.Node().Type()
	dynamic := t == nil || t.Kind() == reflect.Interface
	if dynamic && in.schema == nil {
		return record.Invalid, nil // it may depend on what is unknown
	}
	typ := record.Invalid
	if !dynamic {
		typ = recordTypeOf(t)
	}
	if typ == record.Invalid {
		name := "unknown (dynamic)"
		if !dynamic {
			name = t.String()
		}
		return record.Invalid, fmt.Errorf("result type %v is not a record type (want int64, float64, string, bool, bytes, timestamp or map)", name)
	}
	if opts.Want != record.Invalid && typ != opts.Want {
		return record.Invalid, fmt.Errorf("result is %v, want %v", typ, opts.Want)
	}
	return typ, nil
}

// recordTypeOf maps an expr result type to a record type as package expression does.
func recordTypeOf(t reflect.Type) record.Type {
	switch t {
	case goTime:
		return record.Timestamp
	case goBytes:
		return record.Bytes
	case goMap:
		return record.Map
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

// describePartial words an expr compile error as package expression does.
func describePartial(err error, in *shape, acc bool) error {
	var fe *file.Error
	if !errors.As(err, &fe) {
		return err
	}
	msg := fe.Message
	if name, ok := strings.CutPrefix(msg, "unknown name "); ok {
		names := in.names()
		if acc {
			names = append(names, expression.AccName)
		}
		msg += " (fields: " + strings.Join(names, ", ") + ")"
		if s := suggest.Closest(name, names); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
		}
	}
	return fmt.Errorf("%s (column %d)", msg, fe.Column+1)
}

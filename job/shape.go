package job

import (
	"strings"

	"github.com/goflink/goflink/expression"
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

// checkPartial type-checks src against records of a partly known shape (expression.Check).
func checkPartial(src string, in *shape, opts expression.Options) (record.Type, error) {
	return expression.Check(src, in.fields, in.open, opts)
}

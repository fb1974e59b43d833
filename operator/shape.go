package operator

import (
	"slices"
	"strings"

	"github.com/goflink/goflink/record"
)

// Shape is what the job builder knows of the records an operator emits. Behind a broken operator
// it is only partly known: the type of a field (record.Invalid), or whether there are fields
// besides those listed (open). Readers are still checked against what is known, and such a
// check reports a problem only when it holds whatever the unknown parts turn out to be, so a
// broken operator does not cascade into noise downstream.
type Shape struct {
	Fields []record.Field // a field of type record.Invalid has an unknown type
	Open   bool           // there may be more fields, with unknown names
	Schema *record.Schema // the whole schema, when nothing is unknown
	// index is the position of each field of Fields by name, when Schema is nil (the first
	// of a name given twice).
	index map[string]int
}

// KnownShape is the shape of records of a known schema.
func KnownShape(s *record.Schema) *Shape { return &Shape{Fields: s.Fields(), Schema: s} }

// UnknownShape is the shape of records nothing is known of.
func UnknownShape() *Shape { return &Shape{Open: true} }

// NewShape returns the shape of records with these fields, and maybe more when open.
func NewShape(fields []record.Field, open bool) *Shape {
	sh := &Shape{Fields: fields, Open: open}
	if !open {
		if s, err := record.NewSchema(fields...); err == nil {
			sh.Schema = s
			return sh
		}
	}
	sh.index = make(map[string]int, len(fields))
	for i, f := range fields {
		if _, dup := sh.index[f.Name]; !dup {
			sh.index[f.Name] = i
		}
	}
	return sh
}

// Field looks a field up by name. It costs the same however many fields there are.
func (sh *Shape) Field(name string) (record.Field, bool) {
	i := -1
	switch {
	case sh.Schema != nil:
		i = sh.Schema.Index(name)
	case sh.index != nil:
		if j, ok := sh.index[name]; ok {
			i = j
		}
	default: // a Shape literal
		i = slices.IndexFunc(sh.Fields, func(f record.Field) bool { return f.Name == name })
	}
	if i < 0 {
		return record.Field{}, false
	}
	return sh.Fields[i], true
}

// Lacks reports whether the records certainly have no field called name.
func (sh *Shape) Lacks(name string) bool {
	_, found := sh.Field(name)
	return !found && !sh.Open
}

// Names returns the names of the known fields.
func (sh *Shape) Names() []string {
	out := make([]string, len(sh.Fields))
	for i, f := range sh.Fields {
		out[i] = f.Name
	}
	return out
}

// Unite returns what is known of records of both shapes a and b, as the reader of two inputs
// sees them; false when a and b certainly differ.
func Unite(a, b *Shape) (*Shape, bool) {
	if a.Open || b.Open {
		return UnknownShape(), true
	}
	if len(a.Fields) != len(b.Fields) {
		return nil, false
	}
	fields := make([]record.Field, len(a.Fields))
	for i, f := range a.Fields {
		g := b.Fields[i]
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
	return NewShape(fields, false), true
}

// String renders the shape like record.Schema, an unknown type as "unknown".
func (sh *Shape) String() string {
	parts := make([]string, 0, len(sh.Fields)+1)
	for _, f := range sh.Fields {
		t := "unknown"
		if f.Type != record.Invalid {
			t = f.Type.String()
		}
		parts = append(parts, f.Name+": "+t)
	}
	if sh.Open {
		parts = append(parts, "…")
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

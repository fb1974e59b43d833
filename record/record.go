package record

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unsafe"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// Type is the type of a field.
type Type uint8

// The field types. The zero Type is invalid.
const (
	Invalid Type = iota
	Int64
	Float64
	String
	Bool
	Bytes
	Timestamp
	Map // string keys to string values
)

var typeNames = [...]string{"invalid", "int64", "float64", "string", "bool", "bytes", "timestamp", "map"}

// String returns the type's name as written in job specs.
func (t Type) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", t)
}

// ParseType parses a type name as written in job specs.
func ParseType(s string) (Type, error) {
	for i, n := range typeNames {
		if i > 0 && n == s {
			return Type(i), nil
		}
	}
	return Invalid, fmt.Errorf("unknown type %q (want one of int64, float64, string, bool, bytes, timestamp, map)", s)
}

// MarshalText writes the type's name, so configurations encode types as in job specs.
func (t Type) MarshalText() ([]byte, error) {
	if t == Invalid || int(t) >= len(typeNames) {
		return nil, fmt.Errorf("cannot encode field type %d", t)
	}
	return []byte(t.String()), nil
}

// UnmarshalText reads a type's name (ParseType).
func (t *Type) UnmarshalText(b []byte) error {
	v, err := ParseType(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// Proto returns the wire form of t.
func (t Type) Proto() pb.FieldType { return pb.FieldType(t) }

// TypeFromProto converts the wire form of a type.
func TypeFromProto(t pb.FieldType) Type {
	if t <= pb.FieldType_FIELD_TYPE_UNSPECIFIED || t > pb.FieldType_FIELD_TYPE_MAP {
		return Invalid
	}
	return Type(t)
}

// Field is one named, typed field.
type Field struct {
	Name string
	Type Type
}

// Schema is the ordered list of fields of a row. A Schema is immutable once built.
type Schema struct {
	fields []Field
	index  map[string]int
	// fixed is the encoded size of every row when no field has a variable length, else -1.
	fixed int
}

// NewSchema builds a schema; it fails on an empty or duplicate name or an invalid type.
func NewSchema(fields ...Field) (*Schema, error) {
	s := &Schema{fields: append([]Field(nil), fields...), index: make(map[string]int, len(fields))}
	for i, f := range fields {
		if f.Name == "" {
			return nil, fmt.Errorf("field %d has no name", i)
		}
		if f.Type == Invalid || int(f.Type) >= len(typeNames) {
			return nil, fmt.Errorf("field %q has an invalid type", f.Name)
		}
		if _, dup := s.index[f.Name]; dup {
			return nil, fmt.Errorf("duplicate field %q", f.Name)
		}
		s.index[f.Name] = i
	}
	s.fixed = 0
	for _, f := range fields {
		switch f.Type {
		case Int64, Float64, Timestamp:
			s.fixed += 8
		case Bool:
			s.fixed++
		default:
			s.fixed = -1
			return s, nil
		}
	}
	return s, nil
}

// MustSchema is NewSchema for fixed schemas in code; it panics on error.
func MustSchema(fields ...Field) *Schema {
	s, err := NewSchema(fields...)
	if err != nil {
		panic(err)
	}
	return s
}

// Len returns the number of fields.
func (s *Schema) Len() int { return len(s.fields) }

// Field returns field i.
func (s *Schema) Field(i int) Field { return s.fields[i] }

// Fields returns a copy of the fields.
func (s *Schema) Fields() []Field { return append([]Field(nil), s.fields...) }

// Index returns the position of the named field, or -1.
func (s *Schema) Index(name string) int {
	if i, ok := s.index[name]; ok {
		return i
	}
	return -1
}

// String renders the schema as {name: type, ...}.
func (s *Schema) String() string {
	var b strings.Builder
	b.WriteByte('{')
	for i, f := range s.fields {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(f.Name)
		b.WriteString(": ")
		b.WriteString(f.Type.String())
	}
	b.WriteByte('}')
	return b.String()
}

// Equal reports whether two schemas have the same fields in the same order.
func (s *Schema) Equal(o *Schema) bool { return slices.Equal(s.fields, o.fields) }

// Proto returns the wire form of s.
func (s *Schema) Proto() *pb.Schema {
	out := &pb.Schema{Fields: make([]*pb.Field, len(s.fields))}
	for i, f := range s.fields {
		out.Fields[i] = &pb.Field{Name: f.Name, Type: f.Type.Proto()}
	}
	return out
}

// SchemaFromProto converts and validates the wire form of a schema.
func SchemaFromProto(p *pb.Schema) (*Schema, error) {
	fields := make([]Field, len(p.GetFields()))
	for i, f := range p.GetFields() {
		fields[i] = Field{Name: f.GetName(), Type: TypeFromProto(f.GetType())}
	}
	return NewSchema(fields...)
}

// Value is one field value. Int64, Float64, Bool and Timestamp (Unix nanoseconds) live in the
// word; String and Bytes in the string, and Map in the string in its canonical encoding. Values are comparable and can key maps.
type Value struct {
	n uint64
	s string
}

// IntValue returns an int64 value.
func IntValue(v int64) Value { return Value{n: uint64(v)} }

// FloatValue returns a float64 value.
func FloatValue(v float64) Value { return Value{n: math.Float64bits(v)} }

// BoolValue returns a bool value.
func BoolValue(v bool) Value {
	if v {
		return Value{n: 1}
	}
	return Value{}
}

// StringValue returns a string value.
func StringValue(v string) Value { return Value{s: v} }

// BytesValue returns a bytes value; the bytes are copied.
func BytesValue(v []byte) Value { return Value{s: string(v)} }

// TimeValue returns a timestamp value with nanosecond precision.
func TimeValue(t time.Time) Value { return Value{n: uint64(t.UnixNano())} }

// Int returns the value as int64.
func (v Value) Int() int64 { return int64(v.n) }

// Float returns the value as float64.
func (v Value) Float() float64 { return math.Float64frombits(v.n) }

// Bool returns the value as bool.
func (v Value) Bool() bool { return v.n != 0 }

// Str returns the value of a string (or bytes) field.
func (v Value) Str() string { return v.s }

// BytesView returns the bytes of a bytes field without copying; do not modify them.
func (v Value) BytesView() []byte { return unsafe.Slice(unsafe.StringData(v.s), len(v.s)) }

// Time returns the value of a timestamp field.
func (v Value) Time() time.Time { return time.Unix(0, int64(v.n)).UTC() }

// Clone returns v with its string copied, so it no longer refers to a network buffer.
func (v Value) Clone() Value { return Value{n: v.n, s: strings.Clone(v.s)} }

// Format renders v as text for messages.
func (v Value) Format(t Type) string {
	switch t {
	case Int64:
		return fmt.Sprint(v.Int())
	case Float64:
		return fmt.Sprint(v.Float())
	case Bool:
		return fmt.Sprint(v.Bool())
	case Timestamp:
		return v.Time().Format(time.RFC3339Nano)
	case Map:
		return string(appendMapJSON(nil, v))
	default:
		return v.s
	}
}

// Row is one record: values laid out by a Schema.
type Row []Value

// Clone returns a deep copy of r.
func (r Row) Clone() Row {
	out := make(Row, len(r))
	for i, v := range r {
		out[i] = v.Clone()
	}
	return out
}

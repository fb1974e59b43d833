package expression

import (
	"testing"

	"github.com/goflink/goflink/record"
)

// TestCheckIsSound checks expressions against a field x of unknown type, or a name x
// that may not exist, the way readers of a broken operator are checked: Check must
// accept every expression that compiles for some type of x, and give its result type only
// when that is the same for every such type. Against a known schema it must agree with
// Compile, whose behaviour it mirrors.
func TestCheckIsSound(t *testing.T) {
	exprs := []string{
		"x", "y", "x + 1", "x + 1.5", "x + 'a'", "'a' + x", "x + y", "x - y", "x * 2", "x / 2", "x % 2",
		"x ** 2", "-x", "!x", "not x", "x > 1", "x < y", "x >= 'a'", "x == 'a'", "x != nil", "x == y",
		"x && true", "x || y > 1", "x ? 1 : 2", "x ? 'a' : y", "y > 1 ? x : 1", "x ?? 1", "x ?? 'a'",
		"len(x)", "upper(x)", "lower(x) == 'a'", "trim(x)", "x | upper", "x matches 'a'",
		"x contains 'a'", "x startsWith 'a'", "x endsWith 'a'", "x in ['a', 'b']", "x in y",
		"x[0]", "x['k']", "x.k", "x['k'] + 'a'", "x[1:2]", "int(x)", "float(x)", "string(x)",
		"abs(x)", "max(x, 1)", "min(x, y)", "now() - x", "x - now()", "x > now()", "now() > x",
		"x.Year()", "x.Unix()", "date(x)", "duration(x)", "x - duration('1s')", "x .. 3", "[x]",
		"{a: x}", "all([x], # > 1)", "filter([1, 2], # > x)", "map([1], x)", "toJSON(x)",
		"fromJSON(x)", "keys(x)", "type(x)", "x == nil ? 0 : 1", "len(x) > 0", "x + x", "x * x",
		"x / y", "x + y * 2", "y + 'x'", "'a' * 2", "valeu", "x +", "x > ", "y.foo", "y[0]",
		"let z = x; z + 1", "x ?? y", "string(x) + 'a'", "x == 1 && x == 'a'", "bytes(x)",
		"max(acc.x, x)", "acc.x + x", "acc.y + 1", "acc.z", "acc", "acc.x ?? x",
	}
	types := []record.Type{record.Int64, record.Float64, record.String, record.Bool, record.Bytes, record.Timestamp, record.Map}
	optionSets := []Options{
		{}, {Want: record.Bool}, {Want: record.String}, {Acc: true}, {Acc: true, Want: record.Int64},
	}
	y := record.Field{Name: "y", Type: record.Int64}
	unknownX := []record.Field{{Name: "x"}, y} // x of unknown type
	maybeX := []record.Field{y}                // and maybe more fields (open)
	for _, src := range exprs {
		for _, opts := range optionSets {
			closedType, closedErr := Check(src, fieldList(unknownX), false, opts)
			openType, openErr := Check(src, fieldList(maybeX), true, opts)
			schemas := []*record.Schema{record.MustSchema(y)} // x absent: only the open shape allows it
			for _, typ := range types {
				schemas = append(schemas, record.MustSchema(record.Field{Name: "x", Type: typ}, y))
			}
			for i, s := range schemas {
				p, err := Compile(src, s, opts)
				// Against a known schema, Check answers as Compile does.
				gotType, gotErr := Check(src, fieldList(s.Fields()), false, opts)
				if errString(gotErr) != errString(err) || (err == nil && gotType != p.Type()) {
					t.Errorf("%q %+v against %v: Check = %v, %v; Compile = %v", src, opts, s, gotType, gotErr, describeProgram(p, err))
				}
				if err != nil {
					continue
				}
				if i > 0 && (closedErr != nil || (closedType != record.Invalid && closedType != p.Type())) {
					t.Errorf("%q %+v: compiles against %v (type %v), but against %v Check = %v, %v", src, opts, s, p.Type(), unknownX, closedType, closedErr)
				}
				if openErr != nil || (openType != record.Invalid && openType != p.Type()) {
					t.Errorf("%q %+v: compiles against %v (type %v), but against %v Check = %v, %v", src, opts, s, p.Type(), maybeX, openType, openErr)
				}
			}
		}
	}
}

// fieldList is a list of fields as Check takes them.
type fieldList []record.Field

func (l fieldList) Field(name string) (record.Field, bool) {
	for _, f := range l {
		if f.Name == name {
			return f, true
		}
	}
	return record.Field{}, false
}

func (l fieldList) Names() []string {
	out := make([]string, len(l))
	for i, f := range l {
		out[i] = f.Name
	}
	return out
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func describeProgram(p *Program, err error) string {
	if err != nil {
		return err.Error()
	}
	return p.Type().String()
}

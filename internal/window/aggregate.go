package window

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/goflink/goflink/internal/suggest"
	"github.com/goflink/goflink/record"
)

// known lists the aggregate functions in the order error messages give them.
var known = []string{"count", "sum", "avg", "min", "max", "first", "last"}

const knownList = "count(), sum(x), avg(x), min(x), max(x), first(x), last(x)"

// call is one parsed aggregate expression fn(arg).
type call struct{ fn, arg string }

// parse splits "fn(arg)" (spaces allowed around each token) and checks its syntax and the
// function name; it does not look at the input.
func parse(expr string) (call, error) {
	e := strings.TrimSpace(expr)
	open := strings.IndexByte(e, '(')
	if open < 0 {
		return call{}, fmt.Errorf("aggregate %q is not a call; want one of %s", expr, knownList)
	}
	if !strings.HasSuffix(e, ")") {
		return call{}, fmt.Errorf("aggregate %q: missing closing \")\"", expr)
	}
	c := call{fn: strings.TrimSpace(e[:open]), arg: strings.TrimSpace(e[open+1 : len(e)-1])}
	if !slices.Contains(known, c.fn) {
		msg := fmt.Sprintf("unknown aggregate %q; want one of %s", c.fn, knownList)
		if s := suggest.Closest(c.fn, known); s != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", s)
		}
		return call{}, errors.New(msg)
	}
	switch {
	case c.fn == "count" && c.arg != "":
		return call{}, fmt.Errorf("aggregate %q: count() takes no argument", expr)
	case c.fn != "count" && c.arg == "":
		return call{}, fmt.Errorf("aggregate %q: %s needs a field name, as in %s(x)", expr, c.fn, c.fn)
	case c.arg != "" && !isIdent(c.arg):
		return call{}, fmt.Errorf("aggregate %q: argument %q is not a field name (letters, digits, _)", expr, c.arg)
	}
	return c, nil
}

// isIdent reports whether s is an identifier: a letter or _ followed by letters, digits, _.
func isIdent(s string) bool {
	for i, r := range s {
		if !(r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || i > 0 && '0' <= r && r <= '9') {
			return false
		}
	}
	return s != ""
}

// resultType returns fn's output type for an argument of type t (record.Invalid: not known),
// or an error if fn does not accept t.
func resultType(c call, t record.Type) (record.Type, error) {
	switch c.fn {
	case "count":
		return record.Int64, nil
	case "avg":
		if t != record.Invalid && t != record.Int64 && t != record.Float64 {
			return 0, fmt.Errorf("avg needs int64 or float64, field %q is %v", c.arg, t)
		}
		return record.Float64, nil
	case "sum":
		if t != record.Invalid && t != record.Int64 && t != record.Float64 {
			return 0, fmt.Errorf("sum needs int64 or float64, field %q is %v", c.arg, t)
		}
	case "min", "max":
		switch t {
		case record.Invalid, record.Int64, record.Float64, record.String, record.Timestamp:
		default:
			return 0, fmt.Errorf("%s needs int64, float64, string or timestamp, field %q is %v", c.fn, c.arg, t)
		}
	}
	return t, nil
}

// Check type-checks one aggregate expression against what is known of the input, for the
// job builder. field(name) returns a field's type and whether the input has it; open says
// the input may have fields that are not listed, so a missing field is not an error. It
// returns the aggregate's output type, which is record.Invalid when it depends on a field
// type that is not known (an open input's unlisted field, or a listed one of type Invalid).
// Errors describe the expression without naming where it came from; the caller adds that.
func Check(expr string, field func(name string) (record.Type, bool), open bool) (record.Type, error) {
	c, err := parse(expr)
	if err != nil {
		return record.Invalid, err
	}
	var t record.Type
	if c.arg != "" {
		var ok bool
		if t, ok = field(c.arg); !ok {
			if !open {
				return record.Invalid, fmt.Errorf("aggregate %q: no field %q in the input", expr, c.arg)
			}
			t = record.Invalid
		}
	}
	return resultType(c, t)
}

// op is one aggregate's compiled form: which kind, reading input field in, keeping its
// accumulator in acc[slot] (and acc[slot+1] for first/last: the record's timestamp).
type op struct {
	kind kind
	in   int
	slot int
}

type kind uint8

const (
	kCount kind = iota
	kSumInt
	kSumFloat
	kAvgInt // acc[slot] is a float64 sum; the record count is acc[0]
	kAvgFloat
	kMinInt // int64 and timestamp: compare Int()
	kMinFloat
	kMinString
	kMaxInt
	kMaxFloat
	kMaxString
	kFirst
	kLast
)

// Aggregates computes a fixed list of aggregates over rows of one input schema, into
// accumulator rows of AccSchema. An Aggregates is immutable after New and safe for
// concurrent use; accumulators are not: each is owned by its caller.
//
// Accumulator field 0 counts the records added; an accumulator with a zero count is empty.
// sum over int64 wraps on overflow like Go's +; float sums (and avg, which sums in float64
// even over int64 input) are plain float64 additions, so Merge may round differently from
// adding the same records one by one. min and max over float64 order NaN below every number
// (cmp.Compare), so min is NaN if any input is NaN and max ignores NaNs unless all are NaN.
type Aggregates struct {
	ops   []op
	acc   *record.Schema
	types []record.Type
}

// New compiles exprs (see Check for the syntax) against the input schema in. An error gives
// the failing expression's position, counting from 1, and Check's reason. An empty list is allowed: its accumulator only counts records.
func New(exprs []string, in *record.Schema) (*Aggregates, error) {
	a := &Aggregates{}
	accFields := []record.Field{{Name: "n", Type: record.Int64}}
	lookup := func(name string) (record.Type, bool) {
		if i := in.Index(name); i >= 0 {
			return in.Field(i).Type, true
		}
		return record.Invalid, false
	}
	for i, e := range exprs {
		t, err := Check(e, lookup, false)
		if err != nil {
			return nil, fmt.Errorf("aggregate %d: %w", i+1, err)
		}
		c, _ := parse(e) // cannot fail: Check parsed it
		o := op{in: -1, slot: len(accFields)}
		if c.arg != "" {
			o.in = in.Index(c.arg)
		}
		name := "a" + strconv.Itoa(i)
		switch c.fn {
		case "count":
			o.kind, o.slot = kCount, 0
		case "sum":
			o.kind = pick(t == record.Float64, kSumFloat, kSumInt)
			accFields = append(accFields, record.Field{Name: name, Type: t})
		case "avg":
			o.kind = pick(in.Field(o.in).Type == record.Float64, kAvgFloat, kAvgInt)
			accFields = append(accFields, record.Field{Name: name, Type: record.Float64})
		case "min", "max":
			switch t {
			case record.Float64:
				o.kind = kMinFloat
			case record.String:
				o.kind = kMinString
			default: // int64, timestamp
				o.kind = kMinInt
			}
			if c.fn == "max" {
				o.kind += kMaxInt - kMinInt
			}
			accFields = append(accFields, record.Field{Name: name, Type: t})
		case "first", "last":
			o.kind = pick(c.fn == "first", kFirst, kLast)
			accFields = append(accFields, record.Field{Name: name, Type: t},
				record.Field{Name: name + "_ts", Type: record.Int64})
		}
		a.ops = append(a.ops, o)
		a.types = append(a.types, t)
	}
	acc, err := record.NewSchema(accFields...)
	if err != nil {
		return nil, fmt.Errorf("accumulator schema: %w", err) // broken invariant: names are generated
	}
	a.acc = acc
	return a, nil
}

func pick(cond bool, yes, no kind) kind {
	if cond {
		return yes
	}
	return no
}

// AccSchema returns the schema of an accumulator row: field "n" (int64, records added)
// followed by one field "a<i>" per aggregate i that needs one (first and last add
// "a<i>_ts", the chosen record's timestamp). Store accumulators with
// state.RowCodec(AccSchema()).
func (a *Aggregates) AccSchema() *record.Schema { return a.acc }

// Types returns the output type of each aggregate, in declared order. Do not modify it.
func (a *Aggregates) Types() []record.Type { return a.types }

// NewAcc returns an empty accumulator: no record added.
func (a *Aggregates) NewAcc() record.Row { return make(record.Row, a.acc.Len()) }

// Add folds the input row in, whose event timestamp is ts, into acc in place. in is
// borrowed: strings kept in acc are copied. Add does not allocate except to copy a string
// that becomes a new min, max, first or last.
func (a *Aggregates) Add(acc, in record.Row, ts int64) {
	empty := acc[0].Int() == 0
	for _, o := range a.ops {
		if o.kind == kCount {
			continue
		}
		v, cur := in[o.in], &acc[o.slot]
		switch o.kind {
		case kSumInt:
			*cur = record.IntValue(cur.Int() + v.Int())
		case kSumFloat, kAvgFloat:
			*cur = record.FloatValue(cur.Float() + v.Float())
		case kAvgInt:
			*cur = record.FloatValue(cur.Float() + float64(v.Int()))
		case kFirst, kLast:
			if empty || takes(o.kind, ts, acc[o.slot+1].Int()) {
				*cur, acc[o.slot+1] = v.Clone(), record.IntValue(ts)
			}
		default:
			if empty || better(o.kind, v, *cur) {
				*cur = v.Clone()
			}
		}
	}
	acc[0] = record.IntValue(acc[0].Int() + 1)
}

// takes reports whether a record at ts, added after the one kept at cur, replaces it as
// first (strictly earlier) or last (not earlier: ties go to the later-added record).
func takes(k kind, ts, cur int64) bool {
	if k == kFirst {
		return ts < cur
	}
	return ts >= cur
}

// better reports whether v should replace cur as a min or max (kinds kMinInt..kMaxString).
func better(k kind, v, cur record.Value) bool {
	var c int
	switch k {
	case kMinInt, kMaxInt:
		c = cmp.Compare(v.Int(), cur.Int())
	case kMinFloat, kMaxFloat:
		c = cmp.Compare(v.Float(), cur.Float())
	default:
		c = strings.Compare(v.Str(), cur.Str())
	}
	if k >= kMaxInt {
		return c > 0
	}
	return c < 0
}

// Merge folds accumulator src into dst in place, so that dst equals an accumulator to which
// dst's records and then src's were added (up to float rounding). src is not modified; dst
// may share strings with it afterwards (Go strings are immutable).
func (a *Aggregates) Merge(dst, src record.Row) {
	if src[0].Int() == 0 {
		return
	}
	if dst[0].Int() == 0 {
		copy(dst, src)
		return
	}
	for _, o := range a.ops {
		d, s := &dst[o.slot], src[o.slot]
		switch o.kind {
		case kCount:
			continue
		case kSumInt:
			*d = record.IntValue(d.Int() + s.Int())
		case kSumFloat, kAvgInt, kAvgFloat:
			*d = record.FloatValue(d.Float() + s.Float())
		case kFirst, kLast:
			if takes(o.kind, src[o.slot+1].Int(), dst[o.slot+1].Int()) {
				*d, dst[o.slot+1] = s, src[o.slot+1]
			}
		default:
			if better(o.kind, s, *d) {
				*d = s
			}
		}
	}
	dst[0] = record.IntValue(dst[0].Int() + src[0].Int())
}

// Result writes each aggregate's value into out[0:len(exprs)], in declared order, with the
// types Types gives. acc must hold at least one record (avg of none would be NaN). Strings
// in out are shared with acc.
func (a *Aggregates) Result(acc, out record.Row) {
	n := acc[0].Int()
	for i, o := range a.ops {
		switch o.kind {
		case kCount:
			out[i] = record.IntValue(n)
		case kAvgInt, kAvgFloat:
			out[i] = record.FloatValue(acc[o.slot].Float() / float64(n))
		default:
			out[i] = acc[o.slot]
		}
	}
}

// Package spec reads the values of a job spec (YAML) for the job builder and the operator
// types that plan themselves. Every getter reports a value of the wrong kind as a Problem with
// its line and path, and returns ok=false, so a caller goes on and reports every problem of a
// spec in one go.
package spec

import (
	"cmp"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/internal/suggest"
)

// Problem is one thing wrong with a spec.
type Problem struct {
	Line int    // 1-based line in the spec; 0 when not tied to a line
	Path string // e.g. operators[2] "parity".fields.parity
	Msg  string
}

func (p Problem) String() string {
	s := p.Msg
	if p.Path != "" {
		s = p.Path + ": " + s
	}
	if p.Line > 0 {
		s = fmt.Sprintf("line %d: %s", p.Line, s)
	}
	return s
}

// MaxProblems bounds the problems recorded of one spec. A spec with that many is refused
// anyway; past it, the job builder stops looking for more, so that a spec of ten thousand
// broken operators costs no more than one of a hundred, and its error stays small.
const MaxProblems = 100

// Problems collects the problems of a spec, up to MaxProblems.
type Problems struct {
	list []Problem
}

// Add records a problem; past MaxProblems it drops it.
func (ps *Problems) Add(line int, path, format string, args ...any) {
	if ps.Full() {
		return
	}
	ps.list = append(ps.list, Problem{Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// Len is the number of problems recorded (at most MaxProblems).
func (ps *Problems) Len() int { return len(ps.list) }

// Full reports whether MaxProblems are recorded: checking for more is wasted work.
func (ps *Problems) Full() bool { return len(ps.list) >= MaxProblems }

// Sorted returns the problems in line order (problems of one line in the order found).
func (ps *Problems) Sorted() []Problem {
	out := slices.Clone(ps.list)
	slices.SortStableFunc(out, func(a, b Problem) int { return cmp.Compare(a.Line, b.Line) })
	return out
}

// Value is one value of a spec with its path, for reading it and reporting its problems.
type Value struct {
	node *yaml.Node
	path string
	ps   *Problems
}

// Parse parses a spec. An empty or invalid document is reported, and ok is false.
func Parse(src []byte, ps *Problems) (v Value, ok bool) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		ps.Add(0, "", "not valid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
		return Value{}, false
	}
	if len(doc.Content) == 0 {
		ps.Add(0, "", "the spec is empty")
		return Value{}, false
	}
	return Value{node: doc.Content[0], path: "", ps: ps}, true
}

// Line is the value's line in the spec.
func (v Value) Line() int { return v.node.Line }

// Path names the value in problems.
func (v Value) Path() string { return v.path }

// At returns v under another path (an operator named later, say).
func (v Value) At(path string) Value { v.path = path; return v }

// Problemf reports a problem of this value.
func (v Value) Problemf(format string, args ...any) { v.ps.Add(v.node.Line, v.path, format, args...) }

// Full reports whether the spec has as many problems as are recorded (Problems.Full): a caller
// may skip costly checks then.
func (v Value) Full() bool { return v.ps.Full() }

// Kind describes the value in messages: "a map", "a list", "nothing", or the text of a scalar.
func (v Value) Kind() string {
	n := v.node
	switch n.Kind {
	case yaml.MappingNode:
		return "a map"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "unknown"
}

// IsScalar reports whether the value is a single value (not a map, a list or nothing).
func (v Value) IsScalar() bool { return v.node.Kind == yaml.ScalarNode && v.node.Tag != "!!null" }

// IsInt reports whether the value is written as an integer.
func (v Value) IsInt() bool { return v.node.Kind == yaml.ScalarNode && v.node.Tag == "!!int" }

// String reads a text value (any scalar, as written).
func (v Value) String() (string, bool) {
	if !v.IsScalar() {
		v.Problemf("want a text value, got %s", v.Kind())
		return "", false
	}
	return v.node.Value, true
}

// NonEmpty reads a text value that must not be blank.
func (v Value) NonEmpty() (string, bool) {
	s, ok := v.String()
	if ok && strings.TrimSpace(s) == "" {
		v.Problemf("must not be empty")
		return s, false
	}
	return s, ok
}

// Int reads an integer.
func (v Value) Int() (int64, bool) {
	if v.IsInt() {
		if i, err := strconv.ParseInt(v.node.Value, 0, 64); err == nil {
			return i, true
		}
	}
	v.Problemf("want an integer, got %s", v.Kind())
	return 0, false
}

// Float reads a number.
func (v Value) Float() (float64, bool) {
	n := v.node
	if n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!float") {
		if f, err := strconv.ParseFloat(n.Value, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
			return f, true
		}
	}
	v.Problemf("want a number, got %s", v.Kind())
	return 0, false
}

// Bool reads true or false.
func (v Value) Bool() (bool, bool) {
	if v.node.Kind == yaml.ScalarNode && v.node.Tag == "!!bool" {
		b, err := strconv.ParseBool(v.node.Value)
		if err == nil {
			return b, true
		}
	}
	v.Problemf("want true or false, got %s", v.Kind())
	return false, false
}

// Duration reads a duration as the configuration keys take it ("500ms", "10 s", "1 min").
func (v Value) Duration() (time.Duration, bool) {
	s, ok := v.String()
	if !ok {
		return 0, false
	}
	d, err := config.ParseDuration(s)
	if err != nil {
		v.Problemf("%v", err)
		return 0, false
	}
	return d, true
}

// Text is a scalar's text as written ("" for a map, a list or nothing); it reports nothing.
func (v Value) Text() string {
	if !v.IsScalar() {
		return ""
	}
	return v.node.Value
}

// Choice reads a text value that must be one of choices; what names it in the problem
// ("unknown format \"x\" (want raw or json)").
func (v Value) Choice(what string, choices ...string) (string, bool) {
	s, ok := v.String()
	if !ok {
		return "", false
	}
	if slices.Contains(choices, s) {
		return s, true
	}
	want := choices[0]
	if len(choices) > 1 {
		want = strings.Join(choices[:len(choices)-1], ", ") + " or " + choices[len(choices)-1]
	}
	v.Problemf("unknown %s %q (want %s)", what, s, want)
	return "", false
}

// Identifier is the form of a field name: letters, digits and _, not starting with a digit.
var Identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Names reads a text value or a list of them (one value reads as a list of one). Each
// element is returned as a Value, so its problems name its line.
func (v Value) Names() ([]Value, bool) {
	if v.node.Kind == yaml.ScalarNode {
		_, ok := v.String()
		return []Value{v}, ok
	}
	if v.node.Kind != yaml.SequenceNode {
		v.Problemf("want a name or a list of names, got %s", v.Kind())
		return nil, false
	}
	out, ok := v.list(), true
	for _, e := range out {
		_, good := e.String()
		ok = ok && good
	}
	return out, ok
}

// List reads a list.
func (v Value) List() ([]Value, bool) {
	if v.node.Kind != yaml.SequenceNode {
		v.Problemf("want a list, got %s", v.Kind())
		return nil, false
	}
	return v.list(), true
}

func (v Value) list() []Value {
	out := make([]Value, len(v.node.Content))
	for i, c := range v.node.Content {
		out[i] = Value{node: c, path: fmt.Sprintf("%s[%d]", v.path, i), ps: v.ps}
	}
	return out
}

// Map reads a map. Its entries keep the spec's order; a key given twice is reported.
func (v Value) Map() (*Map, bool) {
	n := v.node
	if n.Kind != yaml.MappingNode {
		v.Problemf("want a map, got %s", v.Kind())
		return nil, false
	}
	m := &Map{Value: v}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if seen[k.Value] {
			v.ps.Add(k.Line, v.path, "duplicate key %q", k.Value)
			continue
		}
		seen[k.Value] = true
		path := k.Value
		if v.path != "" {
			path = v.path + "." + k.Value
		}
		m.entries = append(m.entries, Entry{Key: k.Value, Value: Value{node: n.Content[i+1], path: path, ps: v.ps}, keyLine: k.Line})
	}
	return m, true
}

// Decode decodes the value into out (as yaml.Node.Decode does).
func (v Value) Decode(out any) error { return v.node.Decode(out) }

// Entry is one key of a map and its value.
type Entry struct {
	Key string
	Value
	keyLine int
}

// Line is the line of the entry's key (where a problem with the whole entry is reported).
func (e Entry) Line() int { return e.keyLine }

// At returns the entry under another path (reporting at its key's line).
func (e Entry) At(path string) Entry { e.path = path; return e }

// Problemf reports a problem of the entry at its key's line.
func (e Entry) Problemf(format string, args ...any) { e.ps.Add(e.keyLine, e.path, format, args...) }

// Map is a map of a spec.
type Map struct {
	Value
	entries []Entry
}

// Entries returns the entries in the spec's order.
func (m *Map) Entries() []Entry { return m.entries }

// Len is the number of entries.
func (m *Map) Len() int { return len(m.entries) }

// Get returns the entry of a key.
func (m *Map) Get(key string) (Entry, bool) {
	for _, e := range m.entries {
		if e.Key == key {
			return e, true
		}
	}
	return Entry{}, false
}

// Has reports whether the map has a key.
func (m *Map) Has(key string) bool {
	_, ok := m.Get(key)
	return ok
}

// At returns the map under another path: its entries' paths follow (an operator named after
// its map was read, say).
func (m *Map) At(path string) *Map {
	out := &Map{Value: m.Value.At(path), entries: make([]Entry, len(m.entries))}
	for i, e := range m.entries {
		e.path = e.Key
		if path != "" {
			e.path = path + "." + e.Key
		}
		out.entries[i] = e
	}
	return out
}

// Without returns the map without the given keys.
func (m *Map) Without(keys ...string) *Map {
	out := &Map{Value: m.Value}
	for _, e := range m.entries {
		if !slices.Contains(keys, e.Key) {
			out.entries = append(out.entries, e)
		}
	}
	return out
}

// CheckKeys reports every key outside allowed ("unknown field ..." followed by what, and a
// "did you mean" when one is close), and whether all were allowed.
func (m *Map) CheckKeys(allowed []string, what string) bool {
	good := true
	for _, e := range m.entries {
		if slices.Contains(allowed, e.Key) {
			continue
		}
		good = false
		msg := fmt.Sprintf("unknown field %q %s", e.Key, what)
		if s := suggest.Closest(e.Key, allowed); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
		}
		m.ps.Add(e.keyLine, m.path, "%s", msg)
	}
	return good
}

package job

import (
	"fmt"
	"math"
	"regexp"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/goflink/goflink/internal/suggest"
)

// entry is one key of a YAML mapping, with its line.
type entry struct {
	key  string
	line int
	val  *yaml.Node
}

// mapping is a YAML mapping that remembers which keys were read, so unknown ones can be
// reported.
type mapping struct {
	line    int
	entries []entry
}

// asMapping reads a mapping node, reporting duplicate keys.
func asMapping(n *yaml.Node, path string, ps *problems) *mapping {
	if n.Kind != yaml.MappingNode {
		ps.add(n.Line, path, "want a map, got %s", kindName(n))
		return nil
	}
	m := &mapping{line: n.Line}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if seen[k.Value] {
			ps.add(k.Line, path, "duplicate key %q", k.Value)
			continue
		}
		seen[k.Value] = true
		m.entries = append(m.entries, entry{key: k.Value, line: k.Line, val: n.Content[i+1]})
	}
	return m
}

func (m *mapping) get(key string) (entry, bool) {
	for _, e := range m.entries {
		if e.key == key {
			return e, true
		}
	}
	return entry{}, false
}

// checkKeys reports keys outside allowed, suggesting the closest allowed one.
func (m *mapping) checkKeys(path string, allowed []string, what string, ps *problems) {
	for _, e := range m.entries {
		ok := false
		for _, a := range allowed {
			if e.key == a {
				ok = true
				break
			}
		}
		if ok {
			continue
		}
		msg := fmt.Sprintf("unknown field %q %s", e.key, what)
		if s := suggest.Closest(e.key, allowed); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
		}
		ps.add(e.line, path, "%s", msg)
	}
}

func kindName(n *yaml.Node) string {
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

func scalarString(n *yaml.Node, path string, ps *problems) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		ps.add(n.Line, path, "want a text value, got %s", kindName(n))
		return "", false
	}
	return n.Value, true
}

func scalarInt(n *yaml.Node, path string, ps *problems) (int64, bool) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" {
		if v, err := strconv.ParseInt(n.Value, 0, 64); err == nil {
			return v, true
		}
	}
	ps.add(n.Line, path, "want an integer, got %s", kindName(n))
	return 0, false
}

func scalarFloat(n *yaml.Node, path string, ps *problems) (float64, bool) {
	if n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!float") {
		if v, err := strconv.ParseFloat(n.Value, 64); err == nil && !math.IsNaN(v) && !math.IsInf(v, 0) {
			return v, true
		}
	}
	ps.add(n.Line, path, "want a number, got %s", kindName(n))
	return 0, false
}

// stringList reads a string or a list of strings.
func stringList(n *yaml.Node, path string, ps *problems) ([]string, []int, bool) {
	if n.Kind == yaml.ScalarNode {
		s, ok := scalarString(n, path, ps)
		return []string{s}, []int{n.Line}, ok
	}
	if n.Kind != yaml.SequenceNode {
		ps.add(n.Line, path, "want a name or a list of names, got %s", kindName(n))
		return nil, nil, false
	}
	var out []string
	var lines []int
	ok := true
	for i, c := range n.Content {
		s, good := scalarString(c, fmt.Sprintf("%s[%d]", path, i), ps)
		ok = ok && good
		out = append(out, s)
		lines = append(lines, c.Line)
	}
	return out, lines, ok
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

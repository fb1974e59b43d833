package job

import (
	"fmt"
	"sort"
	"strings"
)

// Problem is one thing wrong with a spec.
type Problem struct {
	Line int    // 1-based line in the spec; 0 when not tied to a line
	Path string // e.g. operators[2] "parity": fields.parity
	Msg  string
}

func (p Problem) String() string {
	var b strings.Builder
	if p.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", p.Line)
	}
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// SpecError lists every problem of an invalid spec.
type SpecError struct {
	Spec     string
	Problems []Problem
}

func (e *SpecError) Error() string {
	var b strings.Builder
	name := e.Spec
	if name == "" {
		name = "job spec"
	}
	fmt.Fprintf(&b, "invalid %s (%d problem", name, len(e.Problems))
	if len(e.Problems) != 1 {
		b.WriteByte('s')
	}
	b.WriteString("):")
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

type problems struct {
	list []Problem
}

func (ps *problems) add(line int, path, format string, args ...any) {
	ps.list = append(ps.list, Problem{Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (ps *problems) err(spec string) error {
	if len(ps.list) == 0 {
		return nil
	}
	sort.SliceStable(ps.list, func(i, j int) bool { return ps.list[i].Line < ps.list[j].Line })
	return &SpecError{Spec: spec, Problems: ps.list}
}

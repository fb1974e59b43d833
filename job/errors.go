package job

import (
	"fmt"
	"strings"

	"github.com/goflink/goflink/job/spec"
)

// Problem is one thing wrong with a spec.
type Problem = spec.Problem

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

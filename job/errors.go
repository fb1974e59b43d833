package job

import (
	"cmp"
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
	fmt.Fprintf(&b, "invalid %s (%d problem", cmp.Or(e.Spec, "job spec"), len(e.Problems))
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

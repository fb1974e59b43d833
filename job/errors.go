package job

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/goflink/goflink/job/spec"
)

// Problem is one thing wrong with a spec.
type Problem = spec.Problem

// SpecError lists the problems of an invalid spec: every one, or the first spec.MaxProblems.
type SpecError struct {
	Spec     string
	Problems []Problem
	// Truncated: the builder stopped looking at spec.MaxProblems problems; there may be more.
	Truncated bool
}

func (e *SpecError) Error() string {
	var b strings.Builder
	switch n := len(e.Problems); {
	case e.Truncated:
		fmt.Fprintf(&b, "invalid %s (the first %d problems; there may be more):", cmp.Or(e.Spec, "job spec"), n)
	case n == 1:
		fmt.Fprintf(&b, "invalid %s (1 problem):", cmp.Or(e.Spec, "job spec"))
	default:
		fmt.Fprintf(&b, "invalid %s (%d problems):", cmp.Or(e.Spec, "job spec"), n)
	}
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

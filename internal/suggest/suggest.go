// Package suggest finds the closest known name for a misspelt one ("did you mean").
package suggest

import "strings"

// Bounds on the work of Closest, which costs len(s) × len(c) per candidate c: a suggestion is
// for a slip of the fingers in a name someone typed, not for whatever a hostile spec holds.
const (
	// MaxLen bounds the length of s and of the candidates considered.
	MaxLen = 64
	// MaxCandidates bounds the candidates: among more, Closest suggests nothing.
	MaxCandidates = 1000
)

// Closest returns the candidate nearest to s by case-insensitive edit distance, if that
// distance is small for the length of s; otherwise "". It suggests nothing for an s longer
// than MaxLen or among more than MaxCandidates candidates, and skips candidates longer than
// MaxLen.
func Closest(s string, candidates []string) string {
	if len(s) > MaxLen || len(candidates) > MaxCandidates {
		return ""
	}
	best, bestD := "", len(s)/3+2
	ls := strings.ToLower(s)
	for _, c := range candidates {
		if len(c) > MaxLen {
			continue
		}
		lc := strings.ToLower(c)
		if abs(len(lc)-len(ls)) >= bestD { // the distance is at least that
			continue
		}
		if d := Distance(ls, lc); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// Distance returns the Levenshtein edit distance between a and b (bytes).
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

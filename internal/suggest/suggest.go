// Package suggest finds the closest known name for a misspelt one ("did you mean").
package suggest

import "strings"

// Closest returns the candidate nearest to s by case-insensitive edit distance, if that
// distance is small for the length of s; otherwise "".
func Closest(s string, candidates []string) string {
	best, bestD := "", len(s)/3+2
	for _, c := range candidates {
		if d := Distance(strings.ToLower(s), strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	return best
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

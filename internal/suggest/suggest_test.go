package suggest

import (
	"fmt"
	"strings"
	"testing"
)

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{{"", "abc", 3}, {"kitten", "sitting", 3}, {"value", "valeu", 2}, {"same", "same", 0}} {
		if got := Distance(tc.a, tc.b); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestClosest(t *testing.T) {
	names := []string{"heartbeat.interval", "heartbeat.timeout", "parallelism.default"}
	for _, tc := range []struct{ in, want string }{
		{"heartbeat.intervall", "heartbeat.interval"},
		{"Heartbeat.Timeout", "heartbeat.timeout"},
		{"something.else", ""},
	} {
		if got := Closest(tc.in, names); got != tc.want {
			t.Errorf("Closest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// Closest's work is bounded whatever a spec holds: no suggestion for a name beyond MaxLen or
// among more than MaxCandidates, and candidates beyond MaxLen are skipped (a 500 KB name
// against 500 KB candidates cost 2.5e11 steps).
func TestClosestBounded(t *testing.T) {
	long := strings.Repeat("a", 500_000)
	many := make([]string, MaxCandidates+1)
	for i := range many {
		many[i] = fmt.Sprintf("name%d", i)
	}
	for _, tc := range []struct {
		name, in   string
		candidates []string
		want       string
	}{
		{"a long name", long, []string{long + "b", "a"}, ""},
		{"long candidates", "abcd", []string{strings.Repeat("abcd", 100), "abce"}, "abce"},
		{"too many candidates", "name7", many, ""},
		{"as many as allowed", "name7x", many[:MaxCandidates], "name7"},
		{"at the length bound", strings.Repeat("x", MaxLen), []string{strings.Repeat("x", MaxLen-1) + "y"}, strings.Repeat("x", MaxLen-1) + "y"},
	} {
		if got := Closest(tc.in, tc.candidates); got != tc.want {
			t.Errorf("%s: Closest = %.40q, want %.40q", tc.name, got, tc.want)
		}
	}
}

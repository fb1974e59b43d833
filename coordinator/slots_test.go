package coordinator

import (
	"fmt"
	"testing"
)

func TestAssignSlots(t *testing.T) {
	for _, tc := range []struct {
		name string
		tms  []freeSlots
		n    int
		want string
	}{
		{"spread over two", []freeSlots{{"a", []int{0, 1}}, {"b", []int{0, 1}}}, 4, "[a/0 b/0 a/1 b/1]"},
		{"prefer the emptier", []freeSlots{{"a", []int{1}}, {"b", []int{0, 1, 2}}}, 3, "[b/0 b/1 a/1]"},
		{"too few", []freeSlots{{"a", []int{0}}, {"b", []int{0}}}, 3, "[]"},
		{"none", nil, 1, "[]"},
		{"unsorted free list", []freeSlots{{"a", []int{2, 0}}}, 2, "[a/0 a/2]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := assignSlots(tc.tms, tc.n)
			s := "["
			for i, r := range got {
				if i > 0 {
					s += " "
				}
				s += fmt.Sprintf("%s/%d", r.tm, r.slot)
			}
			s += "]"
			if s != tc.want {
				t.Errorf("assignSlots(%v, %d) = %s, want %s", tc.tms, tc.n, s, tc.want)
			}
		})
	}
}

package state

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

const (
	split = pb.ListDistribution_LIST_DISTRIBUTION_SPLIT
	union = pb.ListDistribution_LIST_DISTRIBUTION_UNION
)

func elems(ss ...string) [][]byte {
	var out [][]byte
	for _, s := range ss {
		out = append(out, []byte(s))
	}
	return out
}

func strs(bs [][]byte) []string {
	out := []string{}
	for _, b := range bs {
		out = append(out, string(b))
	}
	return out
}

// oldStates builds the checkpointed states of len(perSubtask) subtasks, each holding the
// elements of list "offsets" (SPLIT) and "txns" (UNION), listed in reverse subtask order.
func oldStates(perSubtask [][]string) []*pb.OperatorSubtaskState {
	var out []*pb.OperatorSubtaskState
	for i, es := range perSubtask {
		st := NewOperatorStateStore()
		off, _ := st.ListState("offsets", split)
		off.Update(elems(es...))
		tx, _ := st.ListState("txns", union)
		tx.Update(elems("tx-" + fmt.Sprint(i)))
		out = append(out, &pb.OperatorSubtaskState{Operator: "src", Subtask: int32(i), Parallelism: int32(len(perSubtask)), Lists: st.Snapshot()})
	}
	slices.Reverse(out)
	return out
}

func TestOperatorListStateRedistribution(t *testing.T) {
	for _, tc := range []struct {
		name      string
		old       [][]string
		p         int
		wantSplit [][]string
	}{
		{"identity with uneven counts", [][]string{{"a", "b", "c", "d"}, {"e"}}, 2,
			[][]string{{"a", "b", "c", "d"}, {"e"}}},
		{"identity with an empty subtask", [][]string{{}, {"a", "b"}, {"c"}}, 3,
			[][]string{{}, {"a", "b"}, {"c"}}},
		{"scale up 2 to 3", [][]string{{"a", "b", "c", "d"}, {"e"}}, 3,
			[][]string{{"a", "b"}, {"c", "d"}, {"e"}}},
		{"scale up 2 to 3 with remainder", [][]string{{"a", "b", "c"}, {"d", "e", "f", "g"}}, 3,
			[][]string{{"a", "b", "c"}, {"d", "e"}, {"f", "g"}}},
		{"scale down 2 to 1", [][]string{{"a", "b"}, {"c"}}, 1,
			[][]string{{"a", "b", "c"}}},
		{"scale down 3 to 2", [][]string{{"a"}, {"b", "c"}, {"d", "e"}}, 2,
			[][]string{{"a", "b", "c"}, {"d", "e"}}},
		{"more subtasks than elements", [][]string{{"a"}, {}}, 4,
			[][]string{{"a"}, {}, {}, {}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := oldStates(tc.old)
			wantUnion := []string{}
			for i := range tc.old {
				wantUnion = append(wantUnion, fmt.Sprint("tx-", i))
			}
			for i := range tc.p {
				st := NewOperatorStateStore()
				if err := st.Restore(old, i, tc.p); err != nil {
					t.Fatalf("Restore(subtask %d of %d) = %v", i, tc.p, err)
				}
				off, err := st.ListState("offsets", split)
				must(t, err)
				if got := strs(off.Get()); !slices.Equal(got, tc.wantSplit[i]) {
					t.Errorf("subtask %d: SPLIT Get() = %q, want %q", i, got, tc.wantSplit[i])
				}
				tx, err := st.ListState("txns", union)
				must(t, err)
				if got := strs(tx.Get()); !slices.Equal(got, wantUnion) {
					t.Errorf("subtask %d: UNION Get() = %q, want %q", i, got, wantUnion)
				}
			}
		})
	}
}

func TestOperatorListStateCopies(t *testing.T) {
	st := NewOperatorStateStore()
	l, err := st.ListState("l", split)
	must(t, err)
	in := elems("x", "y")
	l.Update(in)
	in[0][0] = 'z'
	snap := st.Snapshot()
	snap[0].Elements[1][0] = 'z'
	if got := strs(l.Get()); !slices.Equal(got, []string{"x", "y"}) {
		t.Errorf("Get() = %q after the caller changed its slices, want [x y]", got)
	}
	again, err := st.ListState("l", split)
	must(t, err)
	if again != l {
		t.Errorf("ListState(l) twice returned two states")
	}
}

func TestOperatorSnapshotSortedAndKeepsUnregistered(t *testing.T) {
	old := oldStates([][]string{{"a"}})
	st := NewOperatorStateStore()
	must(t, st.Restore(old, 0, 1))
	z, err := st.ListState("zeta", union)
	must(t, err)
	z.Update(elems("z"))
	var names []string
	for _, l := range st.Snapshot() {
		names = append(names, l.Name)
	}
	if want := []string{"offsets", "txns", "zeta"}; !slices.Equal(names, want) {
		t.Errorf("Snapshot() names = %q, want %q", names, want)
	}
}

func TestOperatorStateErrors(t *testing.T) {
	st := NewOperatorStateStore()
	if _, err := st.ListState("x", pb.ListDistribution_LIST_DISTRIBUTION_UNSPECIFIED); err == nil {
		t.Errorf("ListState(UNSPECIFIED) = nil error")
	}
	_, err := st.ListState("x", split)
	must(t, err)
	if _, err := st.ListState("x", union); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("ListState with another distribution = %v, want an error naming the state", err)
	}

	old := oldStates([][]string{{"a"}, {"b"}})
	restored := NewOperatorStateStore()
	must(t, restored.Restore(old, 0, 2))
	if _, err := restored.ListState("offsets", union); err == nil || !strings.Contains(err.Error(), `"offsets"`) {
		t.Errorf("ListState(SPLIT state as UNION) = %v, want an error naming the state", err)
	}
	registered := NewOperatorStateStore()
	_, err = registered.ListState("txns", split)
	must(t, err)
	if err := registered.Restore(old, 0, 2); err == nil || !strings.Contains(err.Error(), `"txns"`) {
		t.Errorf("Restore(UNION state into a SPLIT registration) = %v, want an error naming the state", err)
	}

	for _, tc := range []struct {
		name        string
		old         []*pb.OperatorSubtaskState
		subtask, p  int
		errContains string
	}{
		{"subtask out of range", old, 2, 2, "subtask 2"},
		{"zero parallelism", old, 0, 0, "parallelism 0"},
		{"duplicate old subtask", append(slices.Clone(old), old[0]), 0, 2, "twice"},
		{"inconsistent old parallelism", []*pb.OperatorSubtaskState{{Subtask: 0, Parallelism: 2}, {Subtask: 1, Parallelism: 3}}, 0, 2, "disagree"},
		{"old subtask beyond old parallelism", []*pb.OperatorSubtaskState{{Subtask: 2, Parallelism: 2}}, 0, 2, "old subtask 2"},
		{"mixed distributions", []*pb.OperatorSubtaskState{
			{Subtask: 0, Parallelism: 2, Lists: []*pb.ListStateSnapshot{{Name: "l", Distribution: split}}},
			{Subtask: 1, Parallelism: 2, Lists: []*pb.ListStateSnapshot{{Name: "l", Distribution: union}}},
		}, 0, 2, `"l"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := NewOperatorStateStore().Restore(tc.old, tc.subtask, tc.p)
			if err == nil || !strings.Contains(err.Error(), tc.errContains) {
				t.Errorf("Restore() = %v, want an error containing %q", err, tc.errContains)
			}
		})
	}
}

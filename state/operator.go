package state

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// OperatorStateStore holds the operator (non-keyed) list states of one operator of one
// subtask. Like keyed state it belongs to the task's goroutine.
type OperatorStateStore struct {
	lists map[string]*OperatorListState
}

// OperatorListState is a named list of opaque elements, redistributed on restore by its
// distribution (Flink's OperatorStateStore).
type OperatorListState struct {
	name     string
	dist     pb.ListDistribution
	elements [][]byte
}

// NewOperatorStateStore returns an empty store.
func NewOperatorStateStore() *OperatorStateStore {
	return &OperatorStateStore{lists: make(map[string]*OperatorListState)}
}

// ListState returns the list state of this name, registering it on first use. After Restore
// it holds this subtask's share of the checkpointed elements. It fails when d is neither
// SPLIT nor UNION, or differs from the distribution the state was registered or checkpointed
// with.
func (s *OperatorStateStore) ListState(name string, d pb.ListDistribution) (*OperatorListState, error) {
	if name == "" {
		return nil, fmt.Errorf("operator list state: empty name")
	}
	if err := checkDistribution(name, d); err != nil {
		return nil, err
	}
	l, ok := s.lists[name]
	if !ok {
		l = &OperatorListState{name: name, dist: d}
		s.lists[name] = l
	}
	if l.dist != d {
		return nil, fmt.Errorf("operator list state %q: requested as %s but it has distribution %s", name, d, l.dist)
	}
	return l, nil
}

func checkDistribution(name string, d pb.ListDistribution) error {
	switch d {
	case pb.ListDistribution_LIST_DISTRIBUTION_SPLIT, pb.ListDistribution_LIST_DISTRIBUTION_UNION:
		return nil
	}
	return fmt.Errorf("operator list state %q: invalid distribution %s", name, d)
}

// Get returns the elements. The slice is the caller's; the element bytes must not be modified.
func (l *OperatorListState) Get() [][]byte { return slices.Clone(l.elements) }

// Update replaces the elements with a copy of elements.
func (l *OperatorListState) Update(elements [][]byte) {
	l.elements = cloneElements(elements)
}

// Snapshot returns a copy of every list state, sorted by name. Restored states that were not
// registered again are included, so that their elements are not lost.
func (s *OperatorStateStore) Snapshot() []*pb.ListStateSnapshot {
	out := make([]*pb.ListStateSnapshot, 0, len(s.lists))
	for _, l := range s.lists {
		out = append(out, &pb.ListStateSnapshot{Name: l.name, Distribution: l.dist, Elements: cloneElements(l.elements)})
	}
	slices.SortFunc(out, func(a, b *pb.ListStateSnapshot) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Restore gives this store subtask's share of the list states in old, the states of all
// subtasks of the operator's previous run (any order). With unchanged parallelism each
// subtask gets back exactly its own elements. Otherwise, per list: SPLIT concatenates the
// elements of all old subtasks in subtask order and hands out contiguous chunks (total/p
// each, one more for the first total%p subtasks); UNION gives every subtask all elements.
func (s *OperatorStateStore) Restore(old []*pb.OperatorSubtaskState, subtask, parallelism int) error {
	if parallelism < 1 || subtask < 0 || subtask >= parallelism {
		return fmt.Errorf("restore operator state: subtask %d of parallelism %d", subtask, parallelism)
	}
	if len(old) == 0 {
		return nil
	}
	sorted := slices.Clone(old)
	for _, st := range sorted {
		if st == nil {
			return fmt.Errorf("restore operator state: nil subtask state")
		}
	}
	slices.SortFunc(sorted, func(a, b *pb.OperatorSubtaskState) int { return cmp.Compare(a.Subtask, b.Subtask) })
	oldP := sorted[0].Parallelism
	for i, st := range sorted {
		switch {
		case st.Parallelism != oldP:
			return fmt.Errorf("restore operator state: old subtasks disagree on parallelism (%d, %d)", oldP, st.Parallelism)
		case st.Subtask < 0 || st.Subtask >= oldP:
			return fmt.Errorf("restore operator state: old subtask %d of parallelism %d", st.Subtask, oldP)
		case i > 0 && st.Subtask == sorted[i-1].Subtask:
			return fmt.Errorf("restore operator state: old subtask %d appears twice", st.Subtask)
		}
	}

	type gathered struct {
		dist pb.ListDistribution
		all  [][]byte // every old subtask's elements, in subtask order
		own  [][]byte // old subtask `subtask`'s elements
	}
	lists := make(map[string]*gathered)
	for _, st := range sorted {
		for _, ls := range st.Lists {
			if err := checkDistribution(ls.Name, ls.Distribution); err != nil {
				return fmt.Errorf("restore operator state: %w", err)
			}
			g := lists[ls.Name]
			if g == nil {
				g = &gathered{dist: ls.Distribution}
				lists[ls.Name] = g
			} else if g.dist != ls.Distribution {
				return fmt.Errorf("restore operator state: list %q has distributions %s and %s", ls.Name, g.dist, ls.Distribution)
			}
			g.all = append(g.all, ls.Elements...)
			if int(st.Subtask) == subtask {
				g.own = append(g.own, ls.Elements...)
			}
		}
	}

	for name, g := range lists {
		if l, ok := s.lists[name]; ok && l.dist != g.dist {
			return fmt.Errorf("restore operator state: list %q is registered as %s but was checkpointed as %s", name, l.dist, g.dist)
		}
	}
	for name, g := range lists {
		var share [][]byte
		switch {
		case g.dist == pb.ListDistribution_LIST_DISTRIBUTION_UNION:
			share = g.all
		case int(oldP) == parallelism:
			share = g.own
		default:
			base, rem := len(g.all)/parallelism, len(g.all)%parallelism
			start := subtask*base + min(subtask, rem)
			n := base
			if subtask < rem {
				n++
			}
			share = g.all[start : start+n]
		}
		l, ok := s.lists[name]
		if !ok {
			l = &OperatorListState{name: name, dist: g.dist}
			s.lists[name] = l
		}
		l.elements = cloneElements(share)
	}
	return nil
}

func cloneElements(elements [][]byte) [][]byte {
	if len(elements) == 0 {
		return nil
	}
	out := make([][]byte, len(elements))
	for i, e := range elements {
		out[i] = bytes.Clone(e)
	}
	return out
}

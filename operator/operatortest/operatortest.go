// Package operatortest holds what tests of operators (built-in ones, connectors, custom
// operators) need to run one without a task: Harness, which runs one operator of a job spec
// with real keyed state, timers and event time as a task's head operator (see Harness); and,
// for tests that drive an operator by hand, an Output that keeps what it gets and a
// StateContext that restores and snapshots operator list state in memory.
package operatortest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
	"github.com/goflink/goflink/state"
)

// Capture is an Output that keeps a copy of every row (emitted rows are borrowed).
type Capture struct {
	Rows []record.Row
	// Err, when set, is returned by Emit.
	Err error
}

// Emit keeps a copy of row.
func (c *Capture) Emit(row record.Row) error {
	if c.Err != nil {
		return c.Err
	}
	c.Rows = append(c.Rows, row.Clone())
	return nil
}

// listState is an in-memory ListState.
type listState struct{ elems [][]byte }

func (l *listState) Get() [][]byte     { return l.elems }
func (l *listState) Update(e [][]byte) { l.elems = e }

// StateContext is the StateContext of one subtask: Restored holds what the subtask gets per
// list state name (already redistributed), Keyed its keyed backend (nil for none).
type StateContext struct {
	RestoredID int64
	Restored   map[string][][]byte
	Keyed      state.KeyedBackend
	lists      map[string]*listState
	dists      map[string]pb.ListDistribution
	// store, when set, holds the list states instead (the Harness's real store).
	store *state.OperatorStateStore
}

// NewStateContext returns the StateContext of a subtask restored from checkpoint restoredID
// (0: a fresh start) with these list states.
func NewStateContext(restoredID int64, restored map[string][][]byte) *StateContext {
	return &StateContext{RestoredID: restoredID, Restored: restored}
}

// ListState registers (or returns) a list state.
func (c *StateContext) ListState(name string, d pb.ListDistribution) (operator.ListState, error) {
	if c.store != nil {
		l, err := c.store.ListState(name, d)
		if err != nil {
			return nil, err
		}
		return l, nil
	}
	if c.lists == nil {
		c.lists, c.dists = map[string]*listState{}, map[string]pb.ListDistribution{}
	}
	if l, ok := c.lists[name]; ok {
		if c.dists[name] != d {
			return nil, fmt.Errorf("list state %q registered as %v and %v", name, c.dists[name], d)
		}
		return l, nil
	}
	l := &listState{elems: slices.Clone(c.Restored[name])}
	c.lists[name], c.dists[name] = l, d
	return l, nil
}

// KeyedBackend returns Keyed.
func (c *StateContext) KeyedBackend() state.KeyedBackend { return c.Keyed }

// RestoredCheckpointID returns RestoredID.
func (c *StateContext) RestoredCheckpointID() int64 { return c.RestoredID }

// Checkpoint collects one list state of several subtasks, as a checkpoint holds it, and
// checks that each registered it with distribution d.
func Checkpoint(t testing.TB, name string, d pb.ListDistribution, subtasks ...*StateContext) [][]byte {
	t.Helper()
	var all [][]byte
	for i, c := range subtasks {
		if got := c.dists[name]; got != d {
			t.Fatalf("subtask %d registered %q as %v, want %v", i, name, got, d)
		}
		all = append(all, slices.Clone(c.lists[name].elems)...)
	}
	return all
}

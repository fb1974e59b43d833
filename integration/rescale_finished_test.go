package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goflink/goflink/client"
	"github.com/goflink/goflink/client/clienttest"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// gate is how far the gated source may emit: values up to it.
var gate atomic.Int64

// gated emits the values 1..n, value v from subtask v % p, each only once the test opened the
// gate to it. Its position is a union list state of the values it emitted, so that a restore
// at any parallelism knows what every subtask did; a subtask whose values were all emitted
// before a rescale has nothing left to do.
var gated = operator.Define(operator.Type{Name: "gated", Role: operator.RoleSource, Fields: []string{"n"}},
	func(p *operator.Planner) (gatedConfig, *operator.Shape) {
		var c gatedConfig
		if e, ok := p.Require("n"); ok {
			c.N, _ = e.Int()
		}
		return c, operator.KnownShape(operator.SequenceSchema)
	},
	func(c gatedConfig, _, _ *record.Schema) (any, error) { return &gatedSource{n: c.N}, nil })

type gatedConfig struct {
	N int64 `json:"n"`
}

type gatedSource struct {
	n       int64
	out     operator.Output
	list    operator.ListState
	emitted map[int64]bool // every subtask's emitted values, as restored, and this one's since
	todo    []int64        // this subtask's values not emitted yet, ascending
	mine    func(v int64) bool
}

func (g *gatedSource) InitializeState(sc operator.StateContext) error {
	l, err := sc.ListState("emitted", pb.ListDistribution_LIST_DISTRIBUTION_UNION)
	if err != nil {
		return err
	}
	g.list, g.emitted = l, map[int64]bool{}
	for _, b := range l.Get() {
		var v int64
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		g.emitted[v] = true
	}
	return nil
}

func (g *gatedSource) Open(ctx *operator.Context, out operator.Output) error {
	g.out = out
	g.mine = func(v int64) bool { return v%int64(ctx.Parallelism) == int64(ctx.Subtask) }
	for v := int64(1); v <= g.n; v++ {
		if g.mine(v) && !g.emitted[v] {
			g.todo = append(g.todo, v)
		}
	}
	return nil
}

func (g *gatedSource) Emit(int) (int, time.Duration, bool, error) {
	if len(g.todo) == 0 {
		return 0, 0, true, nil
	}
	v := g.todo[0]
	if v > gate.Load() {
		return 0, 10 * time.Millisecond, false, nil
	}
	if err := g.out.Emit(record.Row{record.IntValue(v)}); err != nil {
		return 0, 0, false, err
	}
	g.todo, g.emitted[v] = g.todo[1:], true
	return 1, 0, len(g.todo) == 0, nil
}

// SnapshotState stores the values this subtask owns and emitted (the union of all subtasks'
// elements is every emitted value).
func (g *gatedSource) SnapshotState(int64) error {
	var elems [][]byte
	for v := range g.emitted {
		if g.mine(v) {
			elems = append(elems, fmt.Appendf(nil, "%d", v))
		}
	}
	g.list.Update(elems)
	return nil
}

func (g *gatedSource) Close() error { return nil }

// TestRescaleWithSubtasksThatHaveNothingLeft: after a rescale, subtasks whose input is all
// done end at once. Their state must still come from the new parallelism: a later checkpoint
// that mixed their pre-rescale state with the running subtasks' new one could never be
// restored (the next rescale, or any failure, would fail the job). Each value is committed
// exactly once through both rescales.
func TestRescaleWithSubtasksThatHaveNothingLeft(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 2, Slots: 2, Operators: []operator.Type{gated}})
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	const n = 4
	spec := fmt.Sprintf(`name: gated
config:
  execution.checkpointing.interval: 100ms
  execution.checkpointing.dir: %s
  restart-strategy.type: none
operators:
  - {name: src, type: gated, n: %d}
  - {name: out, type: file, path: %q}
`, filepath.Join(dir, "checkpoints"), n, out)
	gate.Store(2)
	id, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(spec), Parallelism: 2})
	if err != nil {
		t.Fatal(err)
	}
	waitCommitted(t, out, 2) // values 1 and 2: one from each subtask

	// At parallelism 4, subtasks 1 and 2 own only values 1 and 2, already emitted.
	if _, err := cl.Rescale(ctx, id, 4); err != nil {
		t.Fatalf("rescale to 4 = %v", err)
	}
	poll.Until(t, 60*time.Second, "subtasks 1 and 2 to finish at parallelism 4", func() error {
		d, err := cl.Job(ctx, id)
		if err != nil {
			return err
		}
		if client.IsTerminal(d.GetStatus()) {
			t.Fatalf("job ended %v (%s)", d.GetStatus(), d.GetFailureCause())
		}
		if d.GetParallelism() != 4 {
			return fmt.Errorf("parallelism %d", d.GetParallelism())
		}
		var finished []int32
		for _, task := range d.GetTasks() {
			if task.GetStatus() == pb.ExecutionState_EXECUTION_STATE_FINISHED {
				finished = append(finished, task.GetSubtask())
			}
		}
		slices.Sort(finished)
		if !slices.Equal(finished, []int32{1, 2}) {
			return fmt.Errorf("finished subtasks %v", finished)
		}
		return nil
	})

	// The rescale's checkpoint holds the finished subtasks' state: it must restore.
	if _, err := cl.Rescale(ctx, id, 2); err != nil {
		t.Fatalf("rescale to 2 = %v", err)
	}
	clienttest.WaitRunningAt(t, ctx, cl, id, 2)
	gate.Store(n)
	watchFinished(t, ctx, cl, id, -1) // a failure would fail it: restart-strategy none

	got := committedRows[struct{ Value int64 }](t, out)
	var values []int64
	for _, r := range got {
		values = append(values, r.Value)
	}
	slices.Sort(values)
	if want := []int64{1, 2, 3, 4}; !slices.Equal(values, want) {
		t.Errorf("committed values %v, want %v once each", values, want)
	}
}

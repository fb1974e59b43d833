package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// notReady declines every checkpoint until it has passed on `after` records
// (operator.CheckpointDecliner), as the postgres-cdc source does while it reads its snapshot.
var notReady = operator.Define(operator.Type{Name: "not-ready", Fields: []string{"after"}},
	func(p *operator.Planner) (notReadyConfig, *operator.Shape) {
		var c notReadyConfig
		if e, ok := p.Require("after"); ok {
			n, _ := e.Int()
			c.After = int(n)
		}
		return c, p.In
	},
	func(c notReadyConfig, _, _ *record.Schema) (any, error) { return &notReadyOp{after: c.After}, nil })

type notReadyConfig struct {
	After int `json:"after"`
}

type notReadyOp struct {
	operator.Base
	after, seen int
}

func (o *notReadyOp) Process(row record.Row) error { o.seen++; return o.Emit(row) }

func (o *notReadyOp) DeclineCheckpoint(int64) string {
	if o.seen < o.after {
		return fmt.Sprintf("%d of %d records", o.seen, o.after)
	}
	return ""
}

// TestDeclinedCheckpointsDoNotCount: an operator that declines checkpoints for a while does
// not fail a job that tolerates no checkpoint failure: the declines are "task not ready",
// which do not count (as in Flink), and the checkpoints after them complete.
func TestDeclinedCheckpointsDoNotCount(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 1, Slots: 2, Operators: []operator.Type{notReady}})
	spec := fmt.Sprintf(`name: declines
parallelism: 2
config:
  execution.checkpointing.interval: 20ms
  execution.checkpointing.tolerable-failed-checkpoints: 0
  execution.checkpointing.dir: %s
operators:
  - {name: n, type: sequence, from: 1, to: 400, rate: 1000}
  - {name: wait, type: not-ready, after: 100}
  - {name: out, type: discard}
`, filepath.Join(t.TempDir(), "checkpoints"))
	id := submit(t, ctx, cl, spec)
	watchFinished(t, ctx, cl, id, 0)
	cps, err := cl.Checkpoints(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var declined, completed int
	for _, cp := range cps {
		switch {
		case cp.GetFailureReason() == pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_DECLINED_TASK_NOT_READY:
			declined++
		case cp.GetStatus() == pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED:
			completed++
		}
	}
	if declined == 0 || completed == 0 {
		t.Errorf("%d checkpoints declined as not ready and %d completed, want some of each", declined, completed)
	}
}

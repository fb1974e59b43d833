package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// trap is a custom sink that panics on a given record or fails to open.
type trap struct {
	panicAt  int64
	failOpen bool
	closed   *atomic.Int32
}

func (t *trap) Open(*operator.Context, operator.Output) error {
	if t.failOpen {
		return errors.New("cannot open")
	}
	return nil
}
func (t *trap) Process(r record.Row) error {
	if r[0].Int() == t.panicAt {
		panic("operator bug")
	}
	return nil
}
func (t *trap) Flush() error    { return nil }
func (t *trap) EndInput() error { return nil }
func (t *trap) Close() error    { t.closed.Add(1); return nil }

// TestOperatorPanicFailsOnlyItsTask: a panicking operator fails its job with the panic as the
// cause, and an operator whose Open failed is still closed; the TaskManager keeps serving.
func TestOperatorPanicFailsOnlyItsTask(t *testing.T) {
	var closed atomic.Int32
	type trapConfig struct {
		PanicAt  int64 `json:"panic_at"`
		FailOpen bool  `json:"fail_open"`
	}
	trapType := operator.Define(operator.Type{Name: "trap", Role: operator.RoleSink, Fields: []string{"panic-at", "fail-open"}},
		func(p *operator.Planner) (trapConfig, *operator.Shape) {
			var c trapConfig
			if e, ok := p.Field("panic-at"); ok {
				c.PanicAt, _ = e.Int()
			}
			if e, ok := p.Field("fail-open"); ok {
				c.FailOpen, _ = e.Bool()
			}
			return c, nil
		},
		func(c trapConfig, _, _ *record.Schema) (any, error) {
			return &trap{panicAt: c.PanicAt, failOpen: c.FailOpen, closed: &closed}, nil
		})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 1, Slots: 1, Operators: []operator.Type{trapType}})
	run := func(spec string) *pb.JobDetails {
		t.Helper()
		id, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(spec)})
		if err != nil {
			t.Fatal(err)
		}
		last, err := cl.Watch(ctx, id, func(*pb.JobDetails) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		return last
	}
	d := run("name: p\noperators:\n  - {name: n, type: sequence, from: 1, to: 100}\n  - {name: t, type: trap, panic-at: 42}\n")
	if d.GetStatus() != pb.JobStatus_JOB_STATUS_FAILED || !strings.Contains(d.GetFailureCause(), "panic: operator bug") {
		t.Errorf("panicking job ended %v: %q; want FAILED with the panic", d.GetStatus(), d.GetFailureCause())
	}
	before := closed.Load()
	d = run("name: o\noperators:\n  - {name: n, type: sequence, from: 1, to: 100}\n  - {name: t, type: trap, fail-open: true}\n")
	if d.GetStatus() != pb.JobStatus_JOB_STATUS_FAILED || !strings.Contains(d.GetFailureCause(), "cannot open") {
		t.Errorf("job with a failing Open ended %v: %q", d.GetStatus(), d.GetFailureCause())
	}
	if closed.Load() != before+1 {
		t.Errorf("operator whose Open failed was closed %d times, want 1", closed.Load()-before)
	}
	if d := run("name: ok\noperators:\n  - {name: n, type: sequence, from: 1, to: 100}\n  - {name: t, type: trap}\n"); d.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("the TaskManager did not survive: next job ended %v: %s", d.GetStatus(), d.GetFailureCause())
	}
}

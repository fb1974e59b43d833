// Command custom-operator is a goflink build with one extra operator, `moving-average`, to show
// how custom Go operators are written and registered. The JobManager needs the operator to
// validate specs (its Plan derives the output schema); the TaskManagers need it to run them.
//
//	go run ./examples/custom-operator local examples/custom-operator/job.yaml
//	go run ./examples/custom-operator jobmanager --rpc-addr 127.0.0.1:6123 ...   (as bin/jobmanager)
//	go run ./examples/custom-operator taskmanager --jobmanager 127.0.0.1:6123 ... (as bin/taskmanager)
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/goflink/goflink/client"
	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/coordinator"
	"github.com/goflink/goflink/internal/minicluster"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
	"github.com/goflink/goflink/worker"
)

// movingAverage is a keyed operator: it appends `avg`, the mean of the last `window` values
// of `field` for the record's key.
type movingAverage struct {
	field, window int
	ctx           *operator.Context
	out           operator.Output
	recent        map[record.Value][]float64
	row           record.Row
	float         bool
}

// plan validates the spec fields and derives the output schema (it runs on the JobManager at
// submit time, so mistakes are submit errors).
func plan(fields map[string]any, in *record.Schema) (*record.Schema, error) {
	name, _ := fields["field"].(string)
	i := in.Index(name)
	if i < 0 {
		return nil, fmt.Errorf("moving-average: field %q not in the input %v", name, in)
	}
	if t := in.Field(i).Type; t != record.Int64 && t != record.Float64 {
		return nil, fmt.Errorf("moving-average: field %q is %v, want int64 or float64", name, t)
	}
	if w, ok := fields["window"].(float64); !ok || w < 1 || w != float64(int(w)) {
		return nil, fmt.Errorf("moving-average: window must be a positive integer, got %v", fields["window"])
	}
	if in.Index("avg") >= 0 {
		return nil, fmt.Errorf("moving-average: the input already has a field avg")
	}
	return record.NewSchema(append(in.Fields(), record.Field{Name: "avg", Type: record.Float64})...)
}

func newMovingAverage(fields map[string]any, in, _ *record.Schema) (operator.Operator, error) {
	i := in.Index(fields["field"].(string))
	return &movingAverage{field: i, window: int(fields["window"].(float64)), float: in.Field(i).Type == record.Float64,
		recent: map[record.Value][]float64{}, row: make(record.Row, in.Len()+1)}, nil
}

func (m *movingAverage) Open(ctx *operator.Context, out operator.Output) error {
	m.ctx, m.out = ctx, out
	return nil
}

func (m *movingAverage) Process(row record.Row) error {
	k := m.ctx.Key() // set by the task: the record's key from the key-by before us
	v := float64(row[m.field].Int())
	if m.float {
		v = row[m.field].Float()
	}
	w, ok := m.recent[k]
	if !ok {
		k = k.Clone() // rows are borrowed: keep our own copy of the key
	}
	w = append(w, v)
	if len(w) > m.window {
		w = w[1:]
	}
	m.recent[k] = w
	sum := 0.0
	for _, x := range w {
		sum += x
	}
	copy(m.row, row)
	m.row[len(row)] = record.FloatValue(sum / float64(len(w)))
	return m.out.Emit(m.row)
}

func (m *movingAverage) Flush() error    { return nil }
func (m *movingAverage) EndInput() error { return nil }
func (m *movingAverage) Close() error    { return nil }

func registry() *operator.Registry {
	reg := operator.NewRegistry()
	if err := reg.Register(operator.Custom{Type: "moving-average", Role: operator.RoleTransform, Keyed: true, Plan: plan, New: newMovingAverage}); err != nil {
		panic(err)
	}
	return reg
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "custom-operator:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: custom-operator local SPEC | jobmanager RPC RAFT DATADIR | taskmanager JOBMANAGER ADDR SLOTS")
	}
	reg := registry()
	switch args[0] {
	case "local":
		if len(args) != 2 {
			return fmt.Errorf("usage: custom-operator local SPEC")
		}
		return runLocal(ctx, reg, args[1])
	case "jobmanager":
		if len(args) != 4 {
			return fmt.Errorf("usage: custom-operator jobmanager RPC-ADDR RAFT-ADDR DATA-DIR")
		}
		cfg := coordinator.DefaultConfig()
		cfg.RPCAddr, cfg.RaftAddr, cfg.DataDir, cfg.Operators = args[1], args[2], args[3], reg
		return coordinator.Run(ctx, cfg)
	case "taskmanager":
		if len(args) != 4 {
			return fmt.Errorf("usage: custom-operator taskmanager JOBMANAGER ADDR SLOTS")
		}
		cfg := worker.DefaultConfig()
		cfg.JobManagers, cfg.Addr, cfg.Operators = strings.Split(args[1], ","), args[2], reg
		if err := cfg.Settings.Set(config.TaskSlots, args[3]); err != nil {
			return err
		}
		return worker.Run(ctx, cfg)
	}
	return fmt.Errorf("unknown command %q", args[0])
}

// runLocal runs a spec on an embedded cluster whose JobManager and TaskManagers know the
// custom operator.
func runLocal(ctx context.Context, reg *operator.Registry, path string) error {
	spec, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	c, err := minicluster.Start(minicluster.Options{TaskManagers: 2, Slots: 2, Operators: reg})
	if err != nil {
		return err
	}
	defer c.Close()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.WaitReady(wctx); err != nil {
		return err
	}
	cl, err := client.New(c.Addr())
	if err != nil {
		return err
	}
	defer cl.Close()
	id, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: spec, SpecName: path})
	if err != nil {
		return err
	}
	last, err := cl.Watch(ctx, id, func(*pb.JobDetails) error { return nil })
	if err != nil {
		return err
	}
	fmt.Printf("job %s %s %s\n", id, strings.TrimPrefix(last.GetStatus().String(), "JOB_STATUS_"), last.GetFailureCause())
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		return fmt.Errorf("job did not finish")
	}
	return nil
}

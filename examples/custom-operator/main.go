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
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/coordinator"
	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
	"github.com/goflink/goflink/worker"
)

// MovingAverage is the operator type: a keyed operator that appends avg, the mean of the last
// window values of field for the record's key. Its plan runs on the JobManager at submit time
// (mistakes are submit errors, with their lines); its runtime on the TaskManagers.
var MovingAverage = operator.Define(operator.Type{Name: "moving-average", Keyed: true, Fields: []string{"field", "window"}},
	planMovingAverage, newMovingAverage)

// movingAverageConfig is what the plan makes of the spec fields; the job graph carries it to
// the TaskManagers as JSON.
type movingAverageConfig struct {
	Field  string `json:"field"`
	Window int    `json:"window"`
}

// planMovingAverage checks the fields against what is known of the input (reporting every
// problem) and derives the output: the input and avg.
func planMovingAverage(p *operator.Planner) (movingAverageConfig, *operator.Shape) {
	var c movingAverageConfig
	if e, ok := p.Require("field"); ok {
		if c.Field, ok = e.String(); ok {
			f, found := p.FieldNamed(e.Value, c.Field) // reports a field the input lacks
			if found && f.Type != record.Invalid && f.Type != record.Int64 && f.Type != record.Float64 {
				e.Problemf("field %q is %v, want int64 or float64", c.Field, f.Type)
			}
		}
	}
	if e, ok := p.Require("window"); ok {
		if w, ok := e.Int(); ok && w < 1 {
			e.Problemf("must be at least 1, got %d", w)
		} else {
			c.Window = int(w)
		}
	}
	if _, found := p.In.Field("avg"); found {
		p.Problemf("the input already has a field avg")
	}
	return c, operator.NewShape(append(slices.Clone(p.In.Fields), record.Field{Name: "avg", Type: record.Float64}), p.In.Open)
}

// movingAverage is one subtask of the operator.
type movingAverage struct {
	operator.Base // Open keeps the context and output; no-op Flush, EndInput, Close
	field, window int
	recent        map[record.Value][]float64
	row           record.Row
	float         bool
}

func newMovingAverage(c movingAverageConfig, in, _ *record.Schema) (any, error) {
	i := in.Index(c.Field)
	return &movingAverage{field: i, window: c.Window, float: in.Field(i).Type == record.Float64,
		recent: map[record.Value][]float64{}, row: make(record.Row, in.Len()+1)}, nil
}

func (m *movingAverage) Process(row record.Row) error {
	k := m.Context().Key() // set by the task: the record's key from the key-by before us
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
	return m.Emit(m.row)
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
	types := []operator.Type{MovingAverage, Silence}
	switch args[0] {
	case "local":
		if len(args) != 2 {
			return fmt.Errorf("usage: custom-operator local SPEC")
		}
		return runLocal(ctx, types, args[1], os.Stdout)
	case "jobmanager":
		if len(args) != 4 {
			return fmt.Errorf("usage: custom-operator jobmanager RPC-ADDR RAFT-ADDR DATA-DIR")
		}
		cfg := coordinator.DefaultConfig()
		cfg.RPCAddr, cfg.RaftAddr, cfg.DataDir, cfg.Operators = args[1], args[2], args[3], types
		return coordinator.Run(ctx, cfg)
	case "taskmanager":
		if len(args) != 4 {
			return fmt.Errorf("usage: custom-operator taskmanager JOBMANAGER ADDR SLOTS")
		}
		cfg := worker.DefaultConfig()
		cfg.JobManagers, cfg.Addr, cfg.Operators = strings.Split(args[1], ","), args[2], types
		if err := cfg.Settings.Set(config.TaskSlots, args[3]); err != nil {
			return err
		}
		return worker.Run(ctx, cfg)
	}
	return fmt.Errorf("unknown command %q", args[0])
}

// runLocal runs a spec on an embedded cluster whose JobManager and TaskManagers know the
// custom operator; print sinks write to stdout.
func runLocal(ctx context.Context, types []operator.Type, path string, stdout io.Writer) error {
	spec, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := minicluster.StartReady(wctx, minicluster.Options{TaskManagers: 2, Slots: 2, Operators: types, Stdout: stdout})
	if err != nil {
		return err
	}
	defer c.Close()
	cl, err := c.Client()
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

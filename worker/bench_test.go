package worker

import (
	"encoding/json"
	"testing"

	"github.com/goflink/goflink/expression"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
	"github.com/goflink/goflink/state"
)

// BenchmarkKeyedSumPath is the per-record work of bench's throughput job (sequence -> key-by
// value % 1024 -> sum -> discard) in one goroutine, without the network: the record writer
// partitions and serializes each source row for two consumers, and the buffers of consumer 0
// go through task.process into the sum (hashmap keyed state) and a discard sink. ns/op is per
// source record, of which half reach the sum.
func BenchmarkKeyedSumPath(b *testing.B) {
	schema := record.MustSchema(record.Field{Name: "value", Type: record.Int64})
	e := &pb.JobEdge{Partitioner: pb.Partitioner_PARTITIONER_HASH, Key: "value % 1024", Schema: schema.Proto()}
	const maxP = 128
	p := newResultPartition("bench/0/0/0/e0", 2, 1024, nil)
	w, err := newRecordWriter(b.Context(), e, &pb.JobVertex{Parallelism: 2, MaxParallelism: maxP}, 0, p, new(int64), nil)
	if err != nil {
		b.Fatal(err)
	}
	kb, err := state.NewKeyedBackend(state.KeyedBackendOptions{KeyType: record.Int64, MaxParallelism: maxP, Range: state.RangeForOperator(0, maxP, 2)})
	if err != nil {
		b.Fatal(err)
	}
	reg := operator.MustRegistry()
	cfg, err := json.Marshal(map[string]string{"field": "value"})
	if err != nil {
		b.Fatal(err)
	}
	newOp := func(name, typ string, cfg []byte) operator.Operator {
		o, err := reg.New(&pb.Operator{Name: name, Type: typ, InputSchema: schema.Proto(), OutputSchema: schema.Proto(), Config: cfg})
		if err != nil {
			b.Fatal(err)
		}
		return o.(operator.Operator)
	}
	sum, sink := newOp("total", "sum", cfg), newOp("sink", "discard", []byte("{}"))
	if err := sum.(operator.Stateful).InitializeState(&stateContext{keyed: kb}); err != nil {
		b.Fatal(err)
	}
	sumCtx := &operator.Context{OperatorName: "total", Metrics: &operator.Metrics{}}
	if err := sink.Open(&operator.Context{OperatorName: "sink", Metrics: &operator.Metrics{}}, noOutput{name: "sink"}); err != nil {
		b.Fatal(err)
	}
	if err := sum.Open(sumCtx, chainOutput{next: sink, n: new(int64)}); err != nil {
		b.Fatal(err)
	}
	prog, err := expression.Compile(e.Key, schema, expression.Options{})
	if err != nil {
		b.Fatal(err)
	}
	in := &taskInput{edge: e, schema: schema, key: prog.NewSelector(), row: make(record.Row, schema.Len())}
	t := &task{
		meter: newTaskMeter(), inputs: []*taskInput{in}, ops: []operator.Operator{sum}, ctxs: []*operator.Context{sumCtx},
		keyed: kb, time: eventTime{stamp: operator.NoTimestamp, outWM: operator.MinWatermark},
		gate: newInputGate(1), ctx: b.Context(),
	}
	ch := &inputChannel{credits: make(chan struct{}, 1)}
	drain := func() {
		for buf, _ := p.subs[0].poll(true); buf != nil; buf, _ = p.subs[0].poll(true) {
			if err := t.process(gateItem{ch: ch, buf: buf}); err != nil {
				b.Fatal(err)
			}
		}
		for { // the other channel's buffers are dropped
			if buf, _ := p.subs[1].poll(true); buf == nil {
				break
			}
		}
	}
	row := make(record.Row, 1)
	v := int64(1)
	for b.Loop() {
		row[0] = record.IntValue(v)
		v++
		if err := w.Emit(row); err != nil {
			b.Fatal(err)
		}
		drain()
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	drain()
}

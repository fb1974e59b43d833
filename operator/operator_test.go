package operator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
	"github.com/goflink/goflink/state"
)

// capture is an Output that keeps a copy of every row (emitted rows are borrowed).
type capture struct {
	rows []record.Row
	err  error // returned by Emit when set
}

func (c *capture) Emit(row record.Row) error {
	if c.err != nil {
		return c.err
	}
	c.rows = append(c.rows, row.Clone())
	return nil
}

func (c *capture) ints(field int) []int64 {
	out := make([]int64, len(c.rows))
	for i, r := range c.rows {
		out[i] = r[field].Int()
	}
	return out
}

// fakeClock is an injectable Context.Now.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time          { return c.now }
func (c *fakeClock) advance(d time.Duration) { c.now = c.now.Add(d) }

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func seqSpec(from, to int64) sequenceConfig { return sequenceConfig{From: from, To: &to} }
func unbounded(from int64) sequenceConfig   { return sequenceConfig{From: from} }

func openSeq(t *testing.T, s sequenceConfig, ctx *Context) (*sequence, *capture) {
	t.Helper()
	src := newSequence(s)
	out := &capture{}
	if err := src.Open(ctx, out); err != nil {
		t.Fatalf("Open: %v", err)
	}
	return src, out
}

// drain emits from src in batches of max until it reports done, checking each call's contract.
func drain(t *testing.T, src *sequence, out *capture, limit int) {
	t.Helper()
	for calls := 0; ; calls++ {
		if calls > 1000 {
			t.Fatalf("source not done after %d Emit calls", calls)
		}
		before := len(out.rows)
		n, wait, done, err := src.Emit(limit)
		if err != nil {
			t.Fatalf("Emit(%d): %v", limit, err)
		}
		if got := len(out.rows) - before; n != got || n > limit {
			t.Fatalf("Emit(%d) = n %d, emitted %d rows", limit, n, got)
		}
		if wait != 0 {
			t.Fatalf("Emit(%d) of an unlimited source = wait %v, want 0", limit, wait)
		}
		if done {
			return
		}
	}
}

func TestSequenceBounded(t *testing.T) {
	tests := []struct {
		name     string
		from, to int64
		p        int
	}{
		{"1..10 p1", 1, 10, 1},
		{"1..10 p2", 1, 10, 2},
		{"1..10 p3", 1, 10, 3},
		{"5..5 p1", 5, 5, 1},
		{"5..5 p2", 5, 5, 2},
		{"5..5 p3", 5, 5, 3},
		{"-3..4 p1", -3, 4, 1},
		{"-3..4 p2", -3, 4, 2},
		{"-3..4 p3", -3, 4, 3},
		{"1..2 p3 idle subtask", 1, 2, 3},
		{"empty 3..2 p2", 3, 2, 2},
	}
	for _, tc := range tests {
		for _, max := range []int{1, 3, 1000} {
			t.Run(fmt.Sprintf("%s max%d", tc.name, max), func(t *testing.T) {
				var all []int64
				for i := range tc.p {
					src, out := openSeq(t, seqSpec(tc.from, tc.to), &Context{Subtask: i, Parallelism: tc.p})
					drain(t, src, out, max)
					var want []int64
					for v := tc.from + int64(i); v <= tc.to; v += int64(tc.p) {
						want = append(want, v)
					}
					if got := out.ints(0); !slices.Equal(got, want) {
						t.Errorf("subtask %d of %d emitted %v, want %v", i, tc.p, got, want)
					}
					n, _, done, err := src.Emit(max)
					if n != 0 || !done || err != nil {
						t.Errorf("Emit(%d) after done = %d, %v, %v, want 0, true, nil", max, n, done, err)
					}
					all = append(all, out.ints(0)...)
				}
				slices.Sort(all)
				var want []int64
				for v := tc.from; v <= tc.to; v++ {
					want = append(want, v)
				}
				if !slices.Equal(all, want) {
					t.Errorf("union over %d subtasks = %v, want %v", tc.p, all, want)
				}
			})
		}
	}
}

func TestSequenceDoneWithLastValue(t *testing.T) {
	// Subtask 1 of 2 over 1..6 emits 2, 4, 6: the call that emits 6 reports done.
	src, out := openSeq(t, seqSpec(1, 6), &Context{Subtask: 1, Parallelism: 2})
	tests := []struct {
		name string
		max  int
		n    int
		done bool
	}{
		{"first two", 2, 2, false},
		{"last one with room to spare", 5, 1, true},
		{"after the end", 5, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, _, done, err := src.Emit(tc.max)
			if err != nil || n != tc.n || done != tc.done {
				t.Errorf("Emit(%d) = %d, done %v, err %v, want %d, done %v, nil", tc.max, n, done, err, tc.n, tc.done)
			}
		})
	}
	if got, want := out.ints(0), []int64{2, 4, 6}; !slices.Equal(got, want) {
		t.Errorf("emitted %v, want %v", got, want)
	}
}

func TestSequenceUnboundedRespectsMax(t *testing.T) {
	tests := []struct {
		name    string
		from    int64
		subtask int
		p       int
		max     int
	}{
		{"p1 max1", 0, 0, 1, 1},
		{"p2 subtask1 max5", 0, 1, 2, 5},
		{"p3 subtask2 max7 negative start", -10, 2, 3, 7},
		{"max0", 4, 0, 1, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src, out := openSeq(t, unbounded(tc.from), &Context{Subtask: tc.subtask, Parallelism: tc.p})
			const calls = 50
			for range calls {
				n, wait, done, err := src.Emit(tc.max)
				if n != tc.max || wait != 0 || done || err != nil {
					t.Fatalf("Emit(%d) = %d, %v, %v, %v, want %d, 0, false, nil", tc.max, n, wait, done, err, tc.max)
				}
			}
			want := make([]int64, calls*tc.max)
			for i := range want {
				want[i] = tc.from + int64(tc.subtask) + int64(i*tc.p)
			}
			if got := out.ints(0); !slices.Equal(got, want) {
				t.Errorf("emitted %v, want %v", got, want)
			}
			if got, want := src.Position(), tc.from+int64(tc.subtask)+int64(calls*tc.max*tc.p); got != want {
				t.Errorf("Position() = %d, want %d", got, want)
			}
		})
	}
}

func TestSequenceOutputError(t *testing.T) {
	src, out := openSeq(t, seqSpec(1, 10), &Context{Parallelism: 1})
	boom := errors.New("task stopping")
	out.err = boom
	n, _, done, err := src.Emit(5)
	if n != 0 || done || !errors.Is(err, boom) {
		t.Errorf("Emit(5) with failing output = %d, done %v, err %v, want 0, false, %v", n, done, err, boom)
	}
}

// rateBatch is the max passed to Emit by the rate tests: far above what the rate allows.
const rateBatch = 100_000

// runRated polls src every step for d of fake time, emitting as much as allowed. It returns
// the total emitted after each step.
func runRated(t *testing.T, src *sequence, clock *fakeClock, step, d time.Duration, check func(elapsed time.Duration, total int)) int {
	t.Helper()
	total := 0
	for elapsed := time.Duration(0); elapsed <= d; elapsed += step {
		for calls := 0; ; calls++ {
			if calls > 100 {
				t.Fatalf("source still not rate limited after %d Emit calls at %v (%d records)", calls, elapsed, total)
			}
			n, wait, done, err := src.Emit(rateBatch)
			if err != nil || done {
				t.Fatalf("Emit at %v = err %v, done %v", elapsed, err, done)
			}
			total += n
			if n == 0 {
				if wait <= 0 {
					t.Fatalf("Emit at %v = 0 records, wait %v, want wait > 0", elapsed, wait)
				}
				break
			}
			if wait != 0 {
				t.Fatalf("Emit at %v = %d records, wait %v, want wait 0", elapsed, n, wait)
			}
		}
		check(elapsed, total)
		clock.advance(step)
	}
	return total
}

func TestSequenceRateTracksTarget(t *testing.T) {
	tests := []struct {
		name string
		rate float64 // for the whole source
		p    int
	}{
		{"10/s p1", 10, 1},
		{"100/s p2", 100, 2},
		{"1000/s p3", 1000, 3},
		{"7/s p3", 7, 3},
		{"below one per subtask: 1/s p2", 1, 2},
		{"below one: 0.5/s p1", 0.5, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for i := range tc.p {
				clock := newFakeClock()
				spec := unbounded(0)
				spec.Rate = tc.rate
				src, out := openSeq(t, spec, &Context{Subtask: i, Parallelism: tc.p, Now: clock.Now})
				perSubtask := tc.rate / float64(tc.p)
				var firstOff string
				const d = 20 * time.Second
				total := runRated(t, src, clock, 10*time.Millisecond, d, func(elapsed time.Duration, total int) {
					want := perSubtask * elapsed.Seconds()
					if math.Abs(float64(total)-want) > 1 && firstOff == "" {
						firstOff = fmt.Sprintf("after %v emitted %d, want %.2f±1", elapsed, total, want)
					}
				})
				if firstOff != "" {
					t.Errorf("subtask %d of %d at %v/s: after %v emitted %d, want %.1f±1 (first off track: %s)",
						i, tc.p, tc.rate, d, total, perSubtask*d.Seconds(), firstOff)
				}
				if len(out.rows) != total {
					t.Errorf("Emit reported %d records, output got %d", total, len(out.rows))
				}
			}
		})
	}
}

func TestSequenceRateWaitIsAccurate(t *testing.T) {
	tests := []struct {
		name string
		rate float64
		p    int
	}{
		{"4/s p1", 4, 1},
		{"30/s p3", 30, 3},
		{"1000/s p2", 1000, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			spec := unbounded(0)
			spec.Rate = tc.rate
			src, out := openSeq(t, spec, &Context{Parallelism: tc.p, Now: clock.Now})
			interval := time.Duration(float64(time.Second) * float64(tc.p) / tc.rate)
			for i := range 20 {
				n, wait, done, err := src.Emit(1)
				if n != 0 || done || err != nil || wait <= 0 || wait > interval {
					t.Fatalf("record %d: Emit(1) = %d, %v, %v, %v, want 0, wait in (0, %v], false, nil", i, n, wait, done, err, interval)
				}
				clock.advance(wait + time.Microsecond)
				n, wait, done, err = src.Emit(1)
				if n != 1 || wait != 0 || done || err != nil {
					t.Fatalf("record %d: Emit(1) after waiting = %d, %v, %v, %v, want 1, 0, false, nil", i, n, wait, done, err)
				}
			}
			if got := len(out.rows); got != 20 {
				t.Errorf("emitted %d rows, want 20", got)
			}
		})
	}
}

func TestSequenceRateNoBurstAfterStall(t *testing.T) {
	tests := []struct {
		name  string
		rate  float64
		p     int
		stall time.Duration
	}{
		{"100/s p1 10s", 100, 1, 10 * time.Second},
		{"300/s p3 10s", 300, 3, 10 * time.Second},
		{"50/s p1 1m", 50, 1, time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			spec := unbounded(0)
			spec.Rate = tc.rate
			src, _ := openSeq(t, spec, &Context{Parallelism: tc.p, Now: clock.Now})
			perSecond := tc.rate / float64(tc.p)
			runRated(t, src, clock, 10*time.Millisecond, time.Second, func(time.Duration, int) {})
			clock.advance(tc.stall)
			n, _, _, err := src.Emit(rateBatch)
			if err != nil {
				t.Fatal(err)
			}
			if float64(n) > perSecond+1 {
				t.Errorf("Emit after a %v stall = %d records, want at most about %.0f (one second's worth)", tc.stall, n, perSecond)
			}
			if float64(n) < perSecond-1 {
				t.Errorf("Emit after a %v stall = %d records, want about %.0f (one second's worth)", tc.stall, n, perSecond)
			}
			// Afterwards the source keeps its pace.
			clock.advance(time.Second)
			n, _, _, err = src.Emit(rateBatch)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(float64(n)-perSecond) > 1 {
				t.Errorf("Emit one second after catching up = %d records, want %.0f±1", n, perSecond)
			}
		})
	}
}

var (
	kvSchema = record.MustSchema(
		record.Field{Name: "key", Type: record.String},
		record.Field{Name: "value", Type: record.Int64},
	)
	kfSchema = record.MustSchema(
		record.Field{Name: "key", Type: record.String},
		record.Field{Name: "amount", Type: record.Float64},
	)
)

func kv(k string, v int64) record.Row {
	return record.Row{record.StringValue(k), record.IntValue(v)}
}

// build runs New for an operator and opens it with a capturing output.
func build(t *testing.T, op *pb.Operator, ctx *Context) (Operator, *capture) {
	t.Helper()
	if op.Name == "" {
		op.Name = "op"
	}
	o, err := testRegistry.New(op)
	if err != nil {
		t.Fatalf("New(%v): %v", op, err)
	}
	x, ok := o.(Operator)
	if !ok {
		t.Fatalf("New(%v) = %T, want an Operator", op, o)
	}
	if ctx == nil {
		ctx = &Context{OperatorName: op.Name, Parallelism: 1}
	}
	out := &capture{}
	if err := x.Open(ctx, out); err != nil {
		t.Fatalf("Open: %v", err)
	}
	return x, out
}

func TestNewSequenceIsSource(t *testing.T) {
	to := int64(3)
	o, err := testRegistry.New(&pb.Operator{Name: "src", Type: "sequence", Config: cfg(sequenceConfig{From: 1, To: &to})})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := o.(Source); !ok {
		t.Errorf("New(sequence) = %T, want a Source", o)
	}
}

func TestMap(t *testing.T) {
	out := record.MustSchema(
		record.Field{Name: "doubled", Type: record.Int64},
		record.Field{Name: "label", Type: record.String},
	)
	op, got := build(t, &pb.Operator{
		InputSchema: kvSchema.Proto(), OutputSchema: out.Proto(),
		Type: "map", Config: cfg(exprsConfig{Fields: []namedExpr{
			{Name: "doubled", Expr: "value * 2"},
			{Name: "label", Expr: `key + "!"`},
		}}),
	}, nil)
	tests := []struct {
		name string
		in   record.Row
		want record.Row
	}{
		{"positive", kv("a", 1), record.Row{record.IntValue(2), record.StringValue("a!")}},
		{"negative", kv("bc", -7), record.Row{record.IntValue(-14), record.StringValue("bc!")}},
		{"empty key", kv("", 0), record.Row{record.IntValue(0), record.StringValue("!")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got.rows = nil
			if err := op.Process(tc.in); err != nil {
				t.Fatalf("Process(%v): %v", tc.in, err)
			}
			if len(got.rows) != 1 || !slices.Equal(got.rows[0], tc.want) {
				t.Errorf("map(%v) = %v, want [%v]", tc.in, got.rows, tc.want)
			}
		})
	}
}

func TestMapRuntimeErrorIsUserError(t *testing.T) {
	out := record.MustSchema(record.Field{Name: "r", Type: record.Int64})
	op, got := build(t, &pb.Operator{
		Name: "modulo", InputSchema: kvSchema.Proto(), OutputSchema: out.Proto(),
		Type: "map", Config: cfg(exprsConfig{Fields: []namedExpr{{Name: "r", Expr: "10 % value"}}}),
	}, nil)
	err := op.Process(kv("a", 0))
	var ue *UserError
	if !errors.As(err, &ue) || ue.Operator != "modulo" {
		t.Errorf("Process(10 %% 0) = %v, want a *UserError of operator %q", err, "modulo")
	}
	if len(got.rows) != 0 {
		t.Errorf("Process(10 %% 0) emitted %v, want nothing", got.rows)
	}
}

// TestRuntimeExpressionErrorsAreUnrecoverable: an expression failing at run time fails the
// same way when the record is replayed, so its UserError is unrecoverable.
func TestRuntimeExpressionErrorsAreUnrecoverable(t *testing.T) {
	intOut := record.MustSchema(record.Field{Name: "r", Type: record.Int64})
	mapOf := func(expr string) *pb.Operator {
		return &pb.Operator{
			InputSchema: kvSchema.Proto(), OutputSchema: intOut.Proto(),
			Type: "map", Config: cfg(exprsConfig{Fields: []namedExpr{{Name: "r", Expr: expr}}}),
		}
	}
	tests := []struct {
		name  string
		op    *pb.Operator
		keyed bool         // a keyed operator (the first row only sets up its state)
		rows  []record.Row // the last one fails
	}{
		{"map native divide by zero", mapOf("10 % value"), false, []record.Row{kv("a", 0)}},
		{"map vm invalid conversion", mapOf("int(key)"), false, []record.Row{kv("x", 1)}},
		{"filter condition", &pb.Operator{
			InputSchema: kvSchema.Proto(), OutputSchema: kvSchema.Proto(),
			Type: "filter", Config: cfg(filterConfig{Condition: "10 % value == 0"}),
		}, false, []record.Row{kv("a", 0)}},
		{"fail condition", &pb.Operator{
			InputSchema: kvSchema.Proto(), OutputSchema: kvSchema.Proto(),
			Type: "fail", Config: cfg(failConfig{When: "10 % value == 1"}),
		}, false, []record.Row{kv("a", 0)}},
		{"reduce expression", &pb.Operator{
			InputSchema: kvSchema.Proto(), OutputSchema: kvSchema.Proto(),
			Type: "reduce", Config: cfg(exprsConfig{Fields: []namedExpr{{Name: "value", Expr: "acc.value % value"}}}),
		}, true, []record.Row{kv("a", 7), kv("a", 0)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.op.Name = "expr"
			ctx := &Context{OperatorName: "expr", Parallelism: 1}
			op, _ := build(t, tc.op, ctx)
			last := tc.rows[len(tc.rows)-1]
			if tc.keyed {
				keyed(t, op, ctx, tc.rows[:len(tc.rows)-1]...)
				kb, _ := backends.Load(op)
				ctx.SetKey(last[0])
				kb.(state.KeyedBackend).SetCurrentKey(last[0])
			}
			err := op.Process(last)
			var ue *UserError
			if !errors.As(err, &ue) || ue.Operator != "expr" || !IsUserError(err) {
				t.Fatalf("Process(%v) = %v, want a *UserError of operator %q", last, err, "expr")
			}
			if !IsUnrecoverable(err) || !IsUnrecoverable(fmt.Errorf("task: %w", err)) {
				t.Errorf("IsUnrecoverable(%v) = false, want true (also when wrapped)", err)
			}
			if errors.Is(err, ErrInjected) {
				t.Errorf("Process(%v) = %v, want no ErrInjected", last, err)
			}
		})
	}
}

func TestIsUnrecoverable(t *testing.T) {
	cause := errors.New("boom")
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"plain error", cause, false},
		{"recoverable user error", &UserError{Operator: "op", Err: cause}, false},
		{"eval error", EvalError("op", cause), true},
		{"wrapped eval error", fmt.Errorf("close op: %w", EvalError("op", cause)), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsUnrecoverable(tc.err); got != tc.want {
				t.Errorf("IsUnrecoverable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
	if err := EvalError("op", cause); !errors.Is(err, cause) {
		t.Errorf("EvalError(op, %v) = %v, does not unwrap to its cause", cause, err)
	}
}

func TestFilter(t *testing.T) {
	op, got := build(t, &pb.Operator{
		InputSchema: kvSchema.Proto(), OutputSchema: kvSchema.Proto(),
		Type: "filter", Config: cfg(filterConfig{Condition: `value % 2 == 0 && key != "skip"`}),
	}, nil)
	tests := []struct {
		name string
		in   record.Row
		keep bool
	}{
		{"even", kv("a", 2), true},
		{"odd", kv("a", 3), false},
		{"zero", kv("b", 0), true},
		{"negative even", kv("b", -4), true},
		{"even but skipped", kv("skip", 4), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got.rows = nil
			if err := op.Process(tc.in); err != nil {
				t.Fatalf("Process(%v): %v", tc.in, err)
			}
			if kept := len(got.rows) == 1 && slices.Equal(got.rows[0], tc.in); kept != tc.keep || len(got.rows) > 1 {
				t.Errorf("filter(%v) emitted %v, want kept = %v", tc.in, got.rows, tc.keep)
			}
		})
	}
}

// keyedStateContext gives a keyed operator a real in-memory keyed backend (string keys).
type keyedStateContext struct{ kb state.KeyedBackend }

func (c *keyedStateContext) ListState(string, pb.ListDistribution) (ListState, error) {
	return nil, fmt.Errorf("no list state in keyed tests")
}
func (c *keyedStateContext) KeyedBackend() state.KeyedBackend { return c.kb }
func (c *keyedStateContext) RestoredCheckpointID() int64      { return 0 }

// backends holds the keyed backend of each operator under test.
var backends sync.Map // Operator -> state.KeyedBackend

// keyed feeds rows to a keyed operator, setting the key from field 0 like the task does. The
// first call initializes the operator's keyed state.
func keyed(t *testing.T, op Operator, ctx *Context, rows ...record.Row) {
	t.Helper()
	v, ok := backends.Load(op)
	if !ok {
		kb, err := state.NewKeyedBackend(state.KeyedBackendOptions{KeyType: record.String, MaxParallelism: 128, Range: state.KeyGroupRange{Start: 0, End: 127}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { backends.Delete(op); kb.Close() })
		if err := op.(Stateful).InitializeState(&keyedStateContext{kb: kb}); err != nil {
			t.Fatalf("InitializeState: %v", err)
		}
		backends.Store(op, kb)
		v = kb
	}
	kb := v.(state.KeyedBackend)
	for _, r := range rows {
		ctx.SetKey(r[0])
		kb.SetCurrentKey(r[0])
		if err := op.Process(r); err != nil {
			t.Fatalf("Process(%v): %v", r, err)
		}
	}
}

func TestSumInt(t *testing.T) {
	ctx := &Context{OperatorName: "sum", Parallelism: 1}
	op, got := build(t, &pb.Operator{
		InputSchema: kvSchema.Proto(), OutputSchema: kvSchema.Proto(),
		Type: "sum", Config: cfg(sumConfig{Field: "value"}),
	}, ctx)
	keyed(t, op, ctx, kv("a", 1), kv("b", 10), kv("a", 2), kv("a", -5), kv("b", 1), kv("", 7))
	want := []record.Row{kv("a", 1), kv("b", 10), kv("a", 3), kv("a", -2), kv("b", 11), kv("", 7)}
	if !slices.EqualFunc(got.rows, want, slices.Equal) {
		t.Errorf("sum(value) by key = %v, want %v", got.rows, want)
	}
}

func TestSumFloat(t *testing.T) {
	ctx := &Context{OperatorName: "sum", Parallelism: 1}
	op, got := build(t, &pb.Operator{
		InputSchema: kfSchema.Proto(), OutputSchema: kfSchema.Proto(),
		Type: "sum", Config: cfg(sumConfig{Field: "amount"}),
	}, ctx)
	kf := func(k string, f float64) record.Row { return record.Row{record.StringValue(k), record.FloatValue(f)} }
	keyed(t, op, ctx, kf("x", 0.5), kf("y", 2), kf("x", 0.25), kf("y", -0.5))
	want := []record.Row{kf("x", 0.5), kf("y", 2), kf("x", 0.75), kf("y", 1.5)}
	if !slices.EqualFunc(got.rows, want, slices.Equal) {
		t.Errorf("sum(amount) by key = %v, want %v", got.rows, want)
	}
}

func TestSumRejectsBadField(t *testing.T) {
	tests := []struct {
		name  string
		field string
	}{
		{"missing", "nope"},
		{"string field", "key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := testRegistry.New(&pb.Operator{
				Name: "sum", InputSchema: kvSchema.Proto(), OutputSchema: kvSchema.Proto(),
				Type: "sum", Config: cfg(sumConfig{Field: tc.field}),
			})
			if err == nil {
				t.Errorf("New(sum %q) = nil error, want an error", tc.field)
			}
		})
	}
}

// TestKeyedStateSurvivesBufferReuse checks that keyed operators copy string keys: incoming
// keys point into network buffers that are reused for later records.
func TestKeyedStateSurvivesBufferReuse(t *testing.T) {
	countOut := record.MustSchema(
		record.Field{Name: "key", Type: record.String},
		record.Field{Name: "value", Type: record.Int64},
		record.Field{Name: "count", Type: record.Int64},
	)
	tests := []struct {
		name  string
		op    *pb.Operator
		field int // the aggregated output field
	}{
		{"sum", &pb.Operator{
			InputSchema: kvSchema.Proto(), OutputSchema: kvSchema.Proto(),
			Type: "sum", Config: cfg(sumConfig{Field: "value"}),
		}, 1},
		{"count", &pb.Operator{
			InputSchema: kvSchema.Proto(), OutputSchema: countOut.Proto(),
			Type: "count", Config: cfg(struct{}{}),
		}, 2},
		{"reduce", &pb.Operator{
			InputSchema: kvSchema.Proto(), OutputSchema: kvSchema.Proto(),
			Type: "reduce", Config: cfg(exprsConfig{Fields: []namedExpr{{Name: "value", Expr: "acc.value + value"}}}),
		}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := &Context{OperatorName: tc.name, Parallelism: 1}
			op, got := build(t, tc.op, ctx)
			// A "network buffer" holding the key, read without copying as DecodeRow does.
			buf := []byte("alpha")
			borrowed := func() record.Row {
				return record.Row{record.StringValue(unsafe.String(&buf[0], len(buf))), record.IntValue(1)}
			}
			keyed(t, op, ctx, borrowed()) // alpha: 1
			copy(buf, "omega")
			keyed(t, op, ctx, borrowed())     // omega: 1
			keyed(t, op, ctx, kv("alpha", 1)) // alpha: 2
			keyed(t, op, ctx, kv("omega", 1)) // omega: 2
			copy(buf, "zzzzz")
			want := []int64{1, 1, 2, 2}
			if got := got.ints(tc.field); !slices.Equal(got, want) {
				t.Errorf("%s over alpha, omega, alpha, omega (buffer reused) = %v, want %v", tc.name, got, want)
			}
			// The earlier output rows were cloned by capture; the keys they carry must be intact.
			var keys []string
			for _, r := range got.rows {
				keys = append(keys, r[0].Str())
			}
			if want := []string{"alpha", "omega", "alpha", "omega"}; !slices.Equal(keys, want) {
				t.Errorf("%s output keys = %q, want %q", tc.name, keys, want)
			}
		})
	}
}

func TestCount(t *testing.T) {
	out := record.MustSchema(
		record.Field{Name: "key", Type: record.String},
		record.Field{Name: "value", Type: record.Int64},
		record.Field{Name: "count", Type: record.Int64},
	)
	ctx := &Context{OperatorName: "count", Parallelism: 1}
	op, got := build(t, &pb.Operator{
		InputSchema: kvSchema.Proto(), OutputSchema: out.Proto(),
		Type: "count", Config: cfg(struct{}{}),
	}, ctx)
	keyed(t, op, ctx, kv("a", 5), kv("b", 6), kv("a", 7), kv("a", 8), kv("b", 9))
	row := func(k string, v, n int64) record.Row {
		return record.Row{record.StringValue(k), record.IntValue(v), record.IntValue(n)}
	}
	want := []record.Row{row("a", 5, 1), row("b", 6, 1), row("a", 7, 2), row("a", 8, 3), row("b", 9, 2)}
	if !slices.EqualFunc(got.rows, want, slices.Equal) {
		t.Errorf("count by key = %v, want %v", got.rows, want)
	}
}

func TestReduce(t *testing.T) {
	in := record.MustSchema(
		record.Field{Name: "key", Type: record.String},
		record.Field{Name: "value", Type: record.Int64},
		record.Field{Name: "last", Type: record.Int64},
	)
	row := func(k string, v, l int64) record.Row {
		return record.Row{record.StringValue(k), record.IntValue(v), record.IntValue(l)}
	}
	input := []record.Row{row("a", 3, 1), row("b", 1, 2), row("a", 10, 3), row("a", 4, 4), row("b", -2, 5)}
	tests := []struct {
		name string
		expr string
		want []record.Row
	}{
		{"max", "max(acc.value, value)", []record.Row{row("a", 3, 1), row("b", 1, 2), row("a", 10, 3), row("a", 10, 4), row("b", 1, 5)}},
		{"sum", "acc.value + value", []record.Row{row("a", 3, 1), row("b", 1, 2), row("a", 13, 3), row("a", 17, 4), row("b", -1, 5)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := &Context{OperatorName: "reduce", Parallelism: 1}
			op, got := build(t, &pb.Operator{
				InputSchema: in.Proto(), OutputSchema: in.Proto(),
				Type: "reduce", Config: cfg(exprsConfig{Fields: []namedExpr{{Name: "value", Expr: tc.expr}}}),
			}, ctx)
			keyed(t, op, ctx, input...)
			// Fields without an expression ("last") take the new row's value.
			if !slices.EqualFunc(got.rows, tc.want, slices.Equal) {
				t.Errorf("reduce(%s) = %v, want %v", tc.expr, got.rows, tc.want)
			}
		})
	}
}

func TestFail(t *testing.T) {
	attempt := func(a int32) *int32 { return &a }
	tests := []struct {
		name      string
		when      string
		attempt   *int32
		ctxTry    int
		in        []int64
		wantOut   []int64
		wantFails bool
	}{
		{"never holds", "value > 100", nil, 0, []int64{1, 2, 3}, []int64{1, 2, 3}, false},
		{"fires on the third record", "value == 3", nil, 0, []int64{1, 2, 3, 4}, []int64{1, 2}, true},
		{"fires in every attempt without attempt", "value == 2", nil, 5, []int64{1, 2}, []int64{1}, true},
		{"armed in its attempt", "value == 2", attempt(1), 1, []int64{1, 2}, []int64{1}, true},
		{"disarmed in another attempt", "value == 2", attempt(1), 0, []int64{1, 2, 3}, []int64{1, 2, 3}, false},
		{"disarmed in a later attempt", "value == 2", attempt(1), 2, []int64{1, 2, 3}, []int64{1, 2, 3}, false},
		{"attempt 0 armed", "value == 1", attempt(0), 0, []int64{1}, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := &Context{OperatorName: "boom", Parallelism: 1, Attempt: tc.ctxTry}
			op, got := build(t, &pb.Operator{
				Name: "boom", InputSchema: kvSchema.Proto(), OutputSchema: kvSchema.Proto(),
				Type: "fail", Config: cfg(failConfig{When: tc.when, Attempt: tc.attempt}),
			}, ctx)
			var err error
			for _, v := range tc.in {
				if err = op.Process(kv("k", v)); err != nil {
					break
				}
			}
			if failed := err != nil; failed != tc.wantFails {
				t.Fatalf("fail(%q) in attempt %d = error %v, want failure %v", tc.when, tc.ctxTry, err, tc.wantFails)
			}
			if tc.wantFails {
				var ue *UserError
				if !errors.As(err, &ue) || ue.Operator != "boom" || !errors.Is(err, ErrInjected) || !IsUserError(err) {
					t.Errorf("fail(%q) error = %#v, want a *UserError of %q wrapping ErrInjected", tc.when, err, "boom")
				}
				// The injected failure is recoverable: jobs use it to exercise restarts.
				if IsUnrecoverable(err) {
					t.Errorf("IsUnrecoverable(fail(%q) error %v) = true, want false", tc.when, err)
				}
			}
			if out := got.ints(1); !slices.Equal(out, tc.wantOut) {
				t.Errorf("fail(%q) passed through %v, want %v", tc.when, out, tc.wantOut)
			}
		})
	}
}

func TestPrintSink(t *testing.T) {
	tests := []struct {
		name    string
		subtask int
		p       int
		prefix  string
	}{
		{"parallelism 1 has no prefix", 0, 1, ""},
		{"subtask 0 of 2", 0, 2, "1> "},
		{"subtask 1 of 2", 1, 2, "2> "},
		{"subtask 11 of 12", 11, 12, "12> "},
	}
	for _, tc := range tests {
		for _, end := range []string{"Flush", "EndInput", "Close"} {
			t.Run(tc.name+" "+end, func(t *testing.T) {
				var stdout bytes.Buffer
				ctx := &Context{OperatorName: "print", Subtask: tc.subtask, Parallelism: tc.p, Stdout: &stdout}
				op, _ := build(t, &pb.Operator{
					InputSchema: kvSchema.Proto(), Type: "print", Config: cfg(struct{}{}),
				}, ctx)
				for _, r := range []record.Row{kv("a", 1), kv(`q"uote`, -2)} {
					if err := op.Process(r); err != nil {
						t.Fatal(err)
					}
				}
				var err error
				switch end {
				case "Flush":
					err = op.Flush()
				case "EndInput":
					err = op.EndInput()
				case "Close":
					err = op.Close()
				}
				if err != nil {
					t.Fatalf("%s: %v", end, err)
				}
				want := tc.prefix + `{"key":"a","value":1}` + "\n" + tc.prefix + `{"key":"q\"uote","value":-2}` + "\n"
				if got := stdout.String(); got != want {
					t.Errorf("print output after %s = %q, want %q", end, got, want)
				}
			})
		}
	}
}

func TestPrintSinkFlushesLargeOutput(t *testing.T) {
	var stdout bytes.Buffer
	ctx := &Context{OperatorName: "print", Parallelism: 1, Stdout: &stdout}
	op, _ := build(t, &pb.Operator{InputSchema: kvSchema.Proto(), Type: "print", Config: cfg(struct{}{})}, ctx)
	big := strings.Repeat("x", 40<<10)
	if err := op.Process(kv(big, 1)); err != nil {
		t.Fatal(err)
	}
	if got, want := stdout.Len(), len(`{"key":"","value":1}`)+len(big)+1; got != want {
		t.Errorf("stdout holds %d bytes after a 40 KiB record, want %d without waiting for Flush", got, want)
	}
}

// The file sink is tested in sink_test.go.

func TestRegistryRegister(t *testing.T) {
	plan := func(*Planner) (struct{}, *Shape) { return struct{}{}, nil }
	run := func(struct{}, *record.Schema, *record.Schema) (any, error) { return &discardSink{}, nil }
	mine := Define(Type{Name: "mine", Role: RoleSink}, plan, run)
	reg, err := NewRegistry(mine)
	if err != nil {
		t.Fatalf("NewRegistry(mine) = %v", err)
	}
	tests := []struct {
		name string
		t    Type
	}{
		{"duplicate", mine},
		{"empty name", Define(Type{}, plan, run)},
		{"not defined", Type{Name: "bare"}},
	}
	for _, b := range builtins {
		tests = append(tests, struct {
			name string
			t    Type
		}{"builtin " + b.Name, Define(Type{Name: b.Name}, plan, run)})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := reg.Register(tc.t); err == nil {
				t.Errorf("Register(%q) = nil, want an error", tc.t.Name)
			}
		})
	}
	if err := reg.Register(Define(Type{Name: "a"}, plan, run), Define(Type{Name: "a"}, plan, run)); err == nil {
		t.Errorf("Register of a name twice in one call = nil, want an error")
	}
	if _, ok := reg.Lookup("a"); ok {
		t.Errorf("a failed Register added a type")
	}
	want := []string{"sequence", "map", "filter", "key-by", "watermark", "window", "window-all", "window-join", "interval-join", "sum", "count", "reduce", "fail", "throttle", "print", "file", "discard", "mine"}
	if got := reg.Names(); !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
}

// A type's runtime gets the configuration its plan made, through the job graph's JSON; a type
// registered without a runtime, or not registered, is refused.
func TestRegistryNew(t *testing.T) {
	type conf struct {
		N int    `json:"n"`
		S string `json:"s"`
	}
	var got conf
	reg := MustRegistry(
		Define(Type{Name: "mine", Role: RoleSink}, func(*Planner) (conf, *Shape) { return conf{}, nil },
			func(c conf, _, _ *record.Schema) (any, error) { got = c; return &discardSink{}, nil }),
		Define(Type{Name: "planned-only", Role: RoleSink}, func(*Planner) (conf, *Shape) { return conf{}, nil }, nil))
	newOp := func(typ, config string) error {
		_, err := reg.New(&pb.Operator{Name: "c", Type: typ, InputSchema: kvSchema.Proto(), Config: []byte(config)})
		return err
	}
	if err := newOp("mine", `{"n": 3, "s": "x"}`); err != nil || got != (conf{N: 3, S: "x"}) {
		t.Errorf("New(mine) = %v with configuration %+v, want {3 x}", err, got)
	}
	for _, bad := range []struct{ typ, config, want string }{
		{"mine", `{`, "decode configuration"},
		{"other", `{}`, `type "other" is not registered`},
		{"planned-only", `{}`, "cannot run in this process"},
	} {
		if err := newOp(bad.typ, bad.config); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("New(%s, %s) = %v, want an error saying %q", bad.typ, bad.config, err, bad.want)
		}
	}
}

// testRegistry holds the built-in types.
var testRegistry = MustRegistry()

// cfg encodes a configuration as the job graph carries it.
func cfg(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// IsUserError reports whether err is (or wraps) a UserError.
func IsUserError(err error) bool {
	var ue *UserError
	return errors.As(err, &ue)
}

// Position returns the next value this subtask will emit.
func (s *sequence) Position() int64 {
	if len(s.splits) == 0 {
		return 0
	}
	return s.splits[s.cur].next
}

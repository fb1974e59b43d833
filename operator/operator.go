package operator

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// Output receives the records an operator emits; it hands them to the next chained operator
// or to the task's network writers. An error means the task is stopping.
type Output interface {
	Emit(row record.Row) error
}

// Operator is a transformation or sink.
type Operator interface {
	// Open prepares the operator before the first record.
	Open(ctx *Context, out Output) error
	// Process handles one record. For keyed operators ctx.Key() is the record's key.
	Process(row record.Row) error
	// Flush pushes buffered output (called at the task's buffer timeout).
	Flush() error
	// EndInput is called once after the last record of a bounded input.
	EndInput() error
	// Close releases resources; it is always called, also after failures.
	Close() error
}

// Source produces records.
type Source interface {
	Open(ctx *Context, out Output) error
	// Emit emits at most max records. It returns wait > 0 when it may not emit yet (rate
	// limit), and done once it is exhausted.
	Emit(max int) (n int, wait time.Duration, done bool, err error)
	Close() error
}

// Context is what a task tells its operators. It is owned by the task goroutine.
type Context struct {
	JobID        string
	OperatorName string
	Subtask      int
	Parallelism  int
	Attempt      int
	// Stdout receives the print sink's output; writes of whole lines must be atomic.
	Stdout io.Writer
	Logger *slog.Logger
	// Now is the clock (time.Now unless a test injects one).
	Now func() time.Time
	// Checkpointing says the job takes checkpoints: a task then ends only after a checkpoint
	// covering all its output completed (the final checkpoint), and two-phase-commit sinks
	// commit only on checkpoint completion.
	Checkpointing bool

	key record.Value
}

// SetKey sets the key of the record being processed (called by the task for keyed inputs).
func (c *Context) SetKey(k record.Value) { c.key = k }

// Key returns the key of the record being processed.
func (c *Context) Key() record.Value { return c.key }

// UserError is a failure caused by the job's own logic or data (an expression that fails at
// run time, a fail operator that fires), as opposed to an infrastructure failure.
type UserError struct {
	Operator string
	Err      error
	// Unrecoverable says a retry fails the same way: the failure is deterministic in the job's
	// logic and the replayed data (an expression failing at run time), so restarting the job
	// cannot help. The fail operator's injected failures are recoverable.
	Unrecoverable bool
}

func (e *UserError) Error() string { return fmt.Sprintf("operator %q: %v", e.Operator, e.Err) }
func (e *UserError) Unwrap() error { return e.Err }

// EvalError returns the UserError of an expression of operator op that failed at run time
// with err. It is unrecoverable: the expression fails again on the same record after a
// restart.
func EvalError(op string, err error) *UserError {
	return &UserError{Operator: op, Err: err, Unrecoverable: true}
}

// IsUserError reports whether err is (or wraps) a UserError.
func IsUserError(err error) bool {
	var ue *UserError
	return errors.As(err, &ue)
}

// IsUnrecoverable reports whether err is (or wraps) an unrecoverable UserError: a failure that
// no restart can fix, so the job should fail instead of restarting.
func IsUnrecoverable(err error) bool {
	var ue *UserError
	return errors.As(err, &ue) && ue.Unrecoverable
}

// base provides no-op defaults for Operator methods.
type base struct {
	ctx *Context
	out Output
}

func (b *base) Open(ctx *Context, out Output) error { b.ctx, b.out = ctx, out; return nil }
func (b *base) Flush() error                        { return nil }
func (b *base) EndInput() error                     { return nil }
func (b *base) Close() error                        { return nil }

// userErr is a recoverable UserError of this operator.
func (b *base) userErr(err error) error { return &UserError{Operator: b.ctx.OperatorName, Err: err} }

// evalErr is the unrecoverable UserError of this operator's expression failing at run time.
func (b *base) evalErr(err error) error { return EvalError(b.ctx.OperatorName, err) }

// New builds the runtime of one operator of a job graph. It returns a Source or an Operator.
func New(op *pb.Operator, reg *Registry) (any, error) {
	in, err := optionalSchema(op.GetInputSchema())
	if err != nil {
		return nil, fmt.Errorf("operator %q: input schema: %w", op.GetName(), err)
	}
	out, err := optionalSchema(op.GetOutputSchema())
	if err != nil {
		return nil, fmt.Errorf("operator %q: output schema: %w", op.GetName(), err)
	}
	var o any
	switch s := op.GetSpec().(type) {
	case *pb.Operator_Sequence:
		o = newSequence(s.Sequence)
	case *pb.Operator_KafkaSource:
		o, err = newKafkaSource(s.KafkaSource)
	case *pb.Operator_Map:
		o, err = newMap(s.Map, in, out)
	case *pb.Operator_Filter:
		o, err = newFilter(s.Filter, in)
	case *pb.Operator_Sum:
		o, err = newSum(s.Sum, in)
	case *pb.Operator_Count:
		o = &countOp{width: in.Len()}
	case *pb.Operator_Reduce:
		o, err = newReduce(s.Reduce, in)
	case *pb.Operator_Fail:
		o, err = newFail(s.Fail, in)
	case *pb.Operator_Print:
		o = &printSink{schema: in}
	case *pb.Operator_File:
		o = &fileSink{schema: in, dir: s.File.GetPath()}
	case *pb.Operator_KafkaSink:
		o, err = newKafkaSink(s.KafkaSink, in)
	case *pb.Operator_Discard:
		o = &discardSink{}
	case *pb.Operator_Custom:
		o, err = reg.newCustom(op.GetType(), s.Custom.GetFieldsJson(), in, out)
	default:
		return nil, fmt.Errorf("operator %q: unknown spec %T", op.GetName(), s)
	}
	if err != nil {
		return nil, fmt.Errorf("operator %q: %w", op.GetName(), err)
	}
	return o, nil
}

func optionalSchema(p *pb.Schema) (*record.Schema, error) {
	if p == nil {
		return nil, nil
	}
	return record.SchemaFromProto(p)
}

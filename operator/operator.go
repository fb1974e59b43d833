package operator

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/goflink/goflink/record"
	"github.com/goflink/goflink/storage"
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

// TwoInput operators tell their inputs apart (a join): the task calls ProcessInput with the
// index of the input the record came on instead of Process.
type TwoInput interface {
	ProcessInput(input int, row record.Row) error
}

// Source produces records.
type Source interface {
	Open(ctx *Context, out Output) error
	// Emit emits at most limit records. It returns wait > 0 when it may not emit yet (rate
	// limit), and done once it is exhausted.
	Emit(limit int) (n int, wait time.Duration, done bool, err error)
	Close() error
}

// Context is what a task tells its operators. It is owned by the task goroutine.
type Context struct {
	JobID        string
	OperatorName string
	// OperatorUID identifies the operator's state in snapshots: its uid, by default its name
	// ("" reads as OperatorName).
	OperatorUID string
	Subtask     int
	Parallelism int
	// MaxParallelism is the vertex's max parallelism (its number of key groups): the most
	// subtasks it can ever be rescaled to.
	MaxParallelism int
	Attempt        int
	// Stdout receives the print sink's output; writes of whole lines must be atomic.
	Stdout io.Writer
	Logger *slog.Logger
	// Now is the clock (time.Now unless a test injects one).
	Now func() time.Time
	// Checkpointing says the job takes checkpoints: a task then ends only after a checkpoint
	// covering all its output completed (the final checkpoint), and two-phase-commit sinks
	// commit only on checkpoint completion.
	Checkpointing bool
	// Metrics are the operator's metrics (nil outside a task: they go nowhere).
	Metrics *Metrics
	// S3 are the TaskManager's S3 settings (its s3.* keys), for operators that write to an
	// s3:// location (the file sink).
	S3 storage.S3Settings

	key record.Value

	// event time (time.go), bound by the task
	stamp        *int64
	timeOut      TimeOutput
	timers       *TimerService
	watermark    int64
	hasWatermark bool
	sides        map[string]Output
	splits       *splitInfo
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

// IsUnrecoverable reports whether err is (or wraps) an unrecoverable UserError: a failure that
// no restart can fix, so the job should fail instead of restarting.
func IsUnrecoverable(err error) bool {
	var ue *UserError
	return errors.As(err, &ue) && ue.Unrecoverable
}

// Base gives an operator no-op Flush, EndInput and Close, and keeps the Context and Output
// its Open received: embed it, and call Base.Open from an Open of your own.
type Base struct {
	ctx *Context
	out Output
}

// Open keeps the context and the output.
func (b *Base) Open(ctx *Context, out Output) error { b.ctx, b.out = ctx, out; return nil }

// Flush does nothing.
func (b *Base) Flush() error { return nil }

// EndInput does nothing.
func (b *Base) EndInput() error { return nil }

// Close does nothing.
func (b *Base) Close() error { return nil }

// UserError is a recoverable UserError of this operator.
func (b *Base) UserError(err error) error { return &UserError{Operator: b.ctx.OperatorName, Err: err} }

// EvalError is the unrecoverable UserError of this operator's expression failing at run time.
func (b *Base) EvalError(err error) error { return EvalError(b.ctx.OperatorName, err) }

// Context is the context Open received.
func (b *Base) Context() *Context { return b.ctx }

// Emit sends a record to the output Open received.
func (b *Base) Emit(row record.Row) error { return b.out.Emit(row) }

// Log is the operator's logger, or one that discards when the task gave none (tests).
func (c *Context) Log() *slog.Logger {
	if c != nil && c.Logger != nil {
		return c.Logger
	}
	return slog.New(slog.DiscardHandler)
}

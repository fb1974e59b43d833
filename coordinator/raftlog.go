package coordinator

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
)

// raftLogger is the hclog.Logger that hashicorp/raft logs through: it hands every record to
// the JobManager's slog.Logger, so that a process writes one log format (--log-format), with
// the record's level, message and fields and "module" set to raft's logger name.
//
// Raft is verbose at INFO (every election step and peer change), so it logs from WARN unless
// the slog handler enables DEBUG (--log-level debug): then raft's INFO and DEBUG records come
// too, and TRACE ones map to slog.LevelDebug-4 for a handler that goes lower still. SetLevel
// changes the floor of this logger and every logger derived from it.
type raftLogger struct {
	root  *slog.Logger // the JobManager's logger
	log   *slog.Logger // root with the name and the With pairs
	name  string
	args  []any // With pairs, for ImpliedArgs
	level *atomic.Int32
}

var _ hclog.Logger = (*raftLogger)(nil)

// newRaftLogger returns the hclog.Logger for hashicorp/raft named "raft" over log.
func newRaftLogger(log *slog.Logger) hclog.Logger {
	level := hclog.Warn
	switch ctx := context.Background(); {
	case log.Enabled(ctx, slogLevel(hclog.Trace)):
		level = hclog.Trace
	case log.Enabled(ctx, slog.LevelDebug):
		level = hclog.Debug
	}
	l := &raftLogger{root: log, level: new(atomic.Int32)}
	l.level.Store(int32(level))
	return l.derive("raft", nil)
}

// derive returns a logger with another name and With pairs, sharing the level.
func (l *raftLogger) derive(name string, args []any) *raftLogger {
	log := l.root
	if name != "" {
		log = log.With("module", name)
	}
	if len(args) > 0 {
		log = log.With(slogArgs(args)...)
	}
	return &raftLogger{root: l.root, log: log, name: name, args: args, level: l.level}
}

// slogLevel maps an hclog level to slog's.
func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo // Info, NoLevel, DefaultLevel
}

func (l *raftLogger) enabled(level hclog.Level) bool {
	floor := hclog.Level(l.level.Load())
	if level == hclog.Off || floor == hclog.Off || level < floor {
		return false
	}
	return l.log.Enabled(context.Background(), slogLevel(level))
}

// Log emits one record. hclog's values are passed on as slog attributes, except hclog.Fmt
// values, which are formatted first.
func (l *raftLogger) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	if !l.enabled(level) {
		return
	}
	l.log.Log(context.Background(), slogLevel(level), msg, slogArgs(args)...)
}

// slogArgs converts hclog's key/value pairs for slog: hclog.Fmt values are formatted, and
// fmt.Stringers other than errors (raft passes itself, "Node at … [Leader]") become their
// String, which the JSON handler would otherwise marshal field by field.
func slogArgs(args []any) []any {
	out := make([]any, len(args))
	for i, v := range args {
		if i%2 == 1 {
			switch x := v.(type) {
			case hclog.Format:
				if len(x) > 0 {
					if format, ok := x[0].(string); ok {
						v = fmt.Sprintf(format, x[1:]...)
					}
				}
			case error:
			case fmt.Stringer:
				v = x.String()
			}
		}
		out[i] = v
	}
	return out
}

func (l *raftLogger) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }
func (l *raftLogger) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }
func (l *raftLogger) Info(msg string, args ...any)  { l.Log(hclog.Info, msg, args...) }
func (l *raftLogger) Warn(msg string, args ...any)  { l.Log(hclog.Warn, msg, args...) }
func (l *raftLogger) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

func (l *raftLogger) IsTrace() bool { return l.enabled(hclog.Trace) }
func (l *raftLogger) IsDebug() bool { return l.enabled(hclog.Debug) }
func (l *raftLogger) IsInfo() bool  { return l.enabled(hclog.Info) }
func (l *raftLogger) IsWarn() bool  { return l.enabled(hclog.Warn) }
func (l *raftLogger) IsError() bool { return l.enabled(hclog.Error) }

func (l *raftLogger) ImpliedArgs() []any { return append([]any(nil), l.args...) }

func (l *raftLogger) With(args ...any) hclog.Logger {
	return l.derive(l.name, append(append([]any(nil), l.args...), args...))
}

func (l *raftLogger) Name() string { return l.name }

// Named appends name to the logger's name: "raft.snapshot".
func (l *raftLogger) Named(name string) hclog.Logger {
	if l.name != "" {
		name = l.name + "." + name
	}
	return l.derive(name, l.args)
}

func (l *raftLogger) ResetNamed(name string) hclog.Logger { return l.derive(name, l.args) }

func (l *raftLogger) SetLevel(level hclog.Level) { l.level.Store(int32(level)) }
func (l *raftLogger) GetLevel() hclog.Level      { return hclog.Level(l.level.Load()) }

// StandardLogger returns a log.Logger whose lines become INFO records (hashicorp/raft does
// not use it).
func (l *raftLogger) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return slog.NewLogLogger(l.log.Handler(), slog.LevelInfo)
}

func (l *raftLogger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	return l.StandardLogger(opts).Writer()
}

// Package window holds the pure decision logic of goflink's window operator: window and
// pane arithmetic for tumbling and sliding windows (Window, StartOf, Sliding) and the
// incremental aggregates a window emits (Check, Aggregates).
//
// Nothing here does I/O, starts goroutines or keeps state between calls other than in the
// values it is given, so every function is deterministic and safe for concurrent use on
// distinct values. Timestamps are int64 milliseconds since the epoch and may be negative.
//
// The operator keeps one accumulator per key and pane (Sliding.PaneOf), adds each record to
// its pane's accumulator, and when the watermark passes a window's MaxTimestamp merges the
// window's panes (from WindowEnding(end).Start up to end, one Pane apart) into a fresh
// accumulator and emits Result. Sliding.Windows is the per-record reference that the pane
// methods are tested against.
package window

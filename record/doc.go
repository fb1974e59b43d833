// Package record defines goflink's records: rows of named, typed fields, their schema, the
// hand-written binary encoding used in network buffers, and the JSON encoding used by sinks.
//
// A Row is a slice of Values laid out by its Schema. Values are small (a word and a string
// header) and comparable, so a Value can key a map directly. Rows passed between chained
// operators are borrowed: a receiver that keeps a row, or a string in it, past the call must
// copy it (Row.Clone, strings.Clone), because decoded strings may point into a network buffer.
package record

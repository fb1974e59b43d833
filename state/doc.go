// Package state holds a task's state: keyed state partitioned by key groups, and operator
// (non-keyed) list state.
//
// # Key groups
//
// KeyHash is a stable, seedless key hash, and KeyGroup, RangeForOperator and
// OperatorIndexForKeyGroup are Flink's key-group formulas. Routing (the hash partitioner) and
// state ownership both use them, so they always agree.
//
// # Keyed state
//
// NewKeyedBackend creates a KeyedBackend for the key groups of one subtask:
//
//   - "hashmap" keeps the state in Go maps (per state, per key group, key -> *T). Updating an
//     existing key does not allocate. Snapshots are copy-on-write per key group: the
//     synchronous part is O(key groups), and a key group is encoded once, either by the
//     snapshot's WriteSnapshot or by the task just before it first writes into it.
//   - "bbolt" keeps the state in a local bbolt file with a write-back cache. The synchronous
//     part of a snapshot does not flush the cache: it freezes it as a read-only layer (O(states))
//     and opens a read transaction on the file as of the last flush. WriteSnapshot merges the
//     two while the task keeps writing and flushing (bbolt MVCC); the frozen layers are flushed
//     with the cache later, on the task's writes.
//
// States (ValueState, ListState, MapState, ReducingState) are registered on a backend by
// name with a Codec for their values and refer to the backend's current key. Both backends
// write the same snapshot format (see format.go), so state moves between them, and its
// per-key-group offsets let a subtask of another parallelism read only its key groups.
//
// # Goroutines
//
// A backend, its states and an OperatorStateStore belong to the task's goroutine. Only a
// Snapshot's WriteSnapshot and Release may run on another goroutine. No goroutines are started.
// The hashmap backend's snapshot locks and their order are listed in LOCKORDER.md at the
// repository root.
//
// # Operator state
//
// OperatorStateStore holds named lists of opaque elements, redistributed on restore as SPLIT
// (contiguous chunks) or UNION (everything to everyone), with identity when the parallelism
// is unchanged.
package state

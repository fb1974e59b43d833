// Package worker is the TaskManager: it registers with the JobManager leader and heartbeats it,
// offers slots, runs deployed tasks (one goroutine event loop per subtask, driving an operator
// chain), reports their state changes, and moves records between tasks with credit-based flow
// control — in memory between tasks of this TaskManager, over gRPC streams otherwise.
//
// See DESIGN.md in this directory for the goroutines, invariants and failure modes.
// Its mutexes, and the order in which they may be taken, are listed in LOCKORDER.md at the
// repository root.
package worker

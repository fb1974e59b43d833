// Package coordinator is the JobManager: the Raft-replicated store of jobs (the FSM), the
// dispatcher that runs one job master per job on the leader, the resource manager that tracks
// TaskManagers, their slots and heartbeats, and the gRPC services for clients and
// TaskManagers.
//
// See DESIGN.md in this directory for the goroutines, invariants and failure modes.
// Its mutexes, and the order in which they may be taken, are listed in LOCKORDER.md at the
// repository root.
package coordinator

// Package coordinator is the JobManager: the Raft-replicated store of jobs (the FSM), the
// dispatcher that runs one job master per job on the leader, the resource manager that tracks
// TaskManagers, their slots and heartbeats, and the gRPC services for clients and
// TaskManagers.
//
// See DESIGN.md in this directory for the goroutines, invariants and failure modes.
package coordinator

// Package integration holds the in-process integration tests: whole clusters in the test
// process (package minicluster: real Raft and gRPC on loopback ports) running jobs through
// checkpoints, failures, JobManager failover, Kafka and custom operators.
package integration

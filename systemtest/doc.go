// Package systemtest holds tests that run goflink's real binaries as separate processes on
// loopback ports: a JobManager, TaskManagers and flinkctl, with SIGKILL for faults. They are
// skipped with -short.
package systemtest

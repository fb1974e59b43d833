// Package failover holds pure decision logic for failures: restart strategies (may a failed job
// restart, and after what delay?) and, later, failover strategies (which tasks restart?). It
// does no I/O and takes the time as an argument, so every decision is testable with a fake
// clock.
package failover

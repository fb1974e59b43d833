package proccluster

import "syscall"

// childAttr makes the kernel SIGKILL a child process when its parent dies without stopping it
// (itself SIGKILLed), so that no JobManager or TaskManager outlives a test or the bench.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }

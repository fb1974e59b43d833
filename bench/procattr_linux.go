package main

import "syscall"

// childAttr makes the kernel SIGKILL a child process when the bench dies without cleaning
// up (itself SIGKILLed), so no JobManager or TaskManager outlives it.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }

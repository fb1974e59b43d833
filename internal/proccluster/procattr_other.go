//go:build !linux

package proccluster

import "syscall"

func childAttr() *syscall.SysProcAttr { return nil }

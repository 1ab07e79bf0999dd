//go:build linux

package mxc

import "syscall"

// procAttr kills wxc-exec (and so its workload) when corral dies.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

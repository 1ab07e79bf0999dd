//go:build !linux

package mxc

import "syscall"

// procAttr: no parent-death signal here (on Windows a job object with
// kill-on-close would be the equivalent; not done yet).
func procAttr() *syscall.SysProcAttr { return nil }

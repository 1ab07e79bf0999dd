//go:build !linux && !windows

package main

import "syscall"

// detachAttr: none here (TestDetachedProcessOutlivesExec skips).
var detachAttr func() *syscall.SysProcAttr

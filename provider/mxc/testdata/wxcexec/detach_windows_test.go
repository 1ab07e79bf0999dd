package main

import (
	"syscall"

	"golang.org/x/sys/windows"
)

// detachAttr starts a process out of the stand-in's job
// (CREATE_BREAKAWAY_FROM_JOB), with no console and its own process group.
var detachAttr = func() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{CreationFlags: windows.CREATE_BREAKAWAY_FROM_JOB | windows.DETACHED_PROCESS | windows.CREATE_NEW_PROCESS_GROUP}
}

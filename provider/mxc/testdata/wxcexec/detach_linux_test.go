package main

import "syscall"

// detachAttr starts a process in a new session (setsid): no Pdeathsig, not
// in the stand-in's process group.
var detachAttr = func() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }

package mxc

import (
	"os/exec"
	"syscall"
)

// startTied starts wxc-exec so that it (and so its workload) is killed
// when corral dies: a parent-death signal (prctl PR_SET_PDEATHSIG).
func startTied(cmd *exec.Cmd, _ bool) (release func(), err error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return func() {}, cmd.Start()
}

//go:build unix

package relay

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// tree: the process group is the process's tree.
type tree struct{}

// startTree starts cmd in a process group of its own, so that signals
// and the final kill reach what it starts too.
func startTree(cmd *exec.Cmd) (tree, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return tree{}, cmd.Start()
}

// reaped: nothing to release.
func (tree) reaped() {}

// killTree kills the process's group and the process.
func killTree(p *os.Process, _ tree) {
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
	_ = p.Kill()
}

// signalTree sends the named signal to the process's group.
func signalTree(p *os.Process, _ tree, name string) error {
	sig := unix.SignalNum(sigName(name))
	if sig == 0 {
		return fmt.Errorf("unknown signal %q", name)
	}
	return syscall.Kill(-p.Pid, sig)
}

// exitSignal names the signal that ended ps, "" when none did.
func exitSignal(ps *os.ProcessState) string {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return unix.SignalName(ws.Signal())
	}
	return ""
}

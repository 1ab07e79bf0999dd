package isolation

import (
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// startDetached starts cmd in a session of its own (setsid), so that it
// outlives the exec that started it (only wxc-exec's direct child is tied
// to it) and no signal for this exec's group reaches it.
func startDetached(cmd *exec.Cmd) (int, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	pid := cmd.Process.Pid
	go cmd.Wait() //nolint:errcheck // reaped while this process lives
	return pid, nil
}

// tied is a workload that dies with its supervisor.
type tied struct{ pgid int }

// startTied starts cmd in a process group of its own with a parent-death
// signal (SIGKILL), so the workload never runs unsupervised. Pdeathsig
// belongs to the thread that started the child: the calling goroutine
// stays on its thread for the process's life.
func startTied(cmd *exec.Cmd) (*tied, error) {
	runtime.LockOSThread()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &tied{pgid: cmd.Process.Pid}, nil
}

// terminate sends SIGTERM to the workload's group, then SIGKILL after
// grace unless done closes first.
func (t *tied) terminate(grace time.Duration, done <-chan struct{}) {
	_ = syscall.Kill(-t.pgid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-t.pgid, syscall.SIGKILL)
	}
}

// close kills what is left of the workload's group.
func (t *tied) close() { _ = syscall.Kill(-t.pgid, syscall.SIGKILL) }

package isolation

import (
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/windows"

	"github.com/corral-sandbox/corral/internal/winjob"
)

// startDetached starts cmd with no console (DETACHED_PROCESS), in a
// process group of its own, and out of the exec's job where that job
// allows it (CREATE_BREAKAWAY_FROM_JOB; "Job Objects", Microsoft Learn),
// so it outlives the wxc-exec exec that started it. A job that refuses
// breakaway (ERROR_ACCESS_DENIED) gets a start without it.
func startDetached(cmd *exec.Cmd) (int, error) {
	flags := uint32(windows.DETACHED_PROCESS | windows.CREATE_NEW_PROCESS_GROUP)
	cmd.SysProcAttr = &syscall.SysProcAttr{CreationFlags: flags | windows.CREATE_BREAKAWAY_FROM_JOB}
	err := cmd.Start()
	if err == windows.ERROR_ACCESS_DENIED {
		c2 := exec.Command(cmd.Path, cmd.Args[1:]...)
		c2.Dir, c2.Env, c2.Stdout, c2.Stderr = cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr
		c2.SysProcAttr = &syscall.SysProcAttr{CreationFlags: flags}
		cmd, err = c2, c2.Start()
	}
	if err != nil {
		return 0, err
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	return pid, nil
}

// tied is a workload in a kill-on-close job of the supervisor's: it and
// everything it starts die with the supervisor.
type tied struct{ job *winjob.Job }

func startTied(cmd *exec.Cmd) (*tied, error) {
	j, err := winjob.Start(cmd)
	if err != nil {
		return nil, err
	}
	return &tied{job: j}, nil
}

// terminate ends the job at once: a detached supervisor has no console to
// send the workload CTRL_BREAK through, so there is no grace on Windows.
func (t *tied) terminate(grace time.Duration, done <-chan struct{}) { _ = t.job.Terminate() }

func (t *tied) close() { _ = t.job.Close() }

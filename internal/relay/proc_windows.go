package relay

import (
	"fmt"
	"os"
	"os/exec"
	"sync"

	"golang.org/x/sys/windows"

	"github.com/corral-sandbox/corral/internal/winjob"
)

// Windows has no process groups: a process's tree is a job object of its
// own (internal/winjob). killTree terminates the job; if the relay itself
// ends, the job's last handle closes and the kernel kills the tree.

// tree is a started process's job.
type tree struct{ job *winjob.Job }

// startTree starts cmd in a job of its own (winjob.Start: suspended until
// it is in the job).
func startTree(cmd *exec.Cmd) (tree, error) {
	j, err := winjob.Start(cmd)
	return tree{j}, err
}

// leftJobs are the jobs of reaped processes that left processes running
// in them (a server started in the background), until killOrphans: on
// Linux too such processes live until the relay ends.
var (
	leftMu   sync.Mutex
	leftJobs []*winjob.Job
)

// reaped releases t once its process was waited for: an empty job is
// closed, one with processes left in it is kept for killOrphans.
func (t tree) reaped() {
	if t.job == nil {
		return
	}
	if n, err := t.job.Active(); err == nil && n == 0 {
		t.job.Close()
		return
	}
	leftMu.Lock()
	leftJobs = append(leftJobs, t.job)
	leftMu.Unlock()
}

// killOrphans terminates the jobs kept at reaping, at the relay's end
// (closing their last handle would too: kill on close).
func killOrphans() {
	leftMu.Lock()
	defer leftMu.Unlock()
	for _, job := range leftJobs {
		_ = job.Terminate()
		job.Close()
	}
	leftJobs = nil
}

// confine gives the relay's own process a protected DACL that lets its
// user, and the process's owner (OWNER RIGHTS, S-1-3-4: so the owner's
// implicit WRITE_DAC is gone too), only wait for it, query its name and
// exit code, and terminate it (what MXC or the host may need; a workload
// that kills the relay only ends the channel, and the jobs with it);
// SYSTEM keeps full access. A workload of the same token
// can then neither duplicate the relay's handles (the channel, its jobs),
// nor read or write its memory, nor start a process with the relay as its
// parent (PROC_THREAD_ATTRIBUTE_PARENT_PROCESS needs PROCESS_CREATE_PROCESS,
// and would put that process in the relay's job, outside the exec's): the
// counterpart of the Linux relay's PR_SET_DUMPABLE 0. A token with
// SeDebugPrivilege (an elevated administrator's) opens any process all
// the same. "Process Security and Access Rights", Microsoft Learn.
func confine() error {
	u, err := windows.GetCurrentProcessToken().GetTokenUser()
	if err != nil {
		return err
	}
	const waitAndQuery = windows.SYNCHRONIZE | windows.PROCESS_QUERY_LIMITED_INFORMATION | windows.PROCESS_TERMINATE
	sd, err := windows.SecurityDescriptorFromString(fmt.Sprintf("D:P(A;;%#x;;;%s)(A;;%#x;;;OW)(A;;GA;;;SY)", waitAndQuery, u.User.Sid, waitAndQuery))
	if err != nil {
		return err
	}
	dacl, _, err := sd.DACL()
	if err != nil {
		return err
	}
	return windows.SetSecurityInfo(windows.CurrentProcess(), windows.SE_KERNEL_OBJECT,
		windows.DACL_SECURITY_INFORMATION|windows.PROTECTED_DACL_SECURITY_INFORMATION, nil, nil, dacl, nil)
}

// killTree terminates t's job: p and everything it started.
func killTree(p *os.Process, t tree) {
	if t.job != nil {
		_ = t.job.Terminate()
	}
	_ = p.Kill()
}

// signalTree: every signal is a kill of the tree on Windows.
func signalTree(p *os.Process, t tree, name string) error {
	switch sigName(name) {
	case "SIGHUP", "SIGINT", "SIGQUIT", "SIGKILL", "SIGTERM", "SIGUSR1", "SIGUSR2":
		killTree(p, t)
		return nil
	}
	return fmt.Errorf("unknown signal %q", name)
}

func exitSignal(*os.ProcessState) string { return "" }

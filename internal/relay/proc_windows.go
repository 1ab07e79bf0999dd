package relay

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/windows"
)

// Windows has no process groups: a process's tree is a job object of its
// own. isolate starts the process suspended; adopt puts it in a new job
// (JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE) and only then resumes it, so every
// process it starts is in the job (child processes inherit their parent's
// job: "Job Objects", Microsoft Learn) and none runs an instruction
// outside it. killTree terminates the job; if the relay itself ends, the
// job's last handle closes and the kernel kills the tree.

// isolate makes the process start suspended (CREATE_SUSPENDED); adopt
// resumes it once it is in its job.
func isolate(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{CreationFlags: windows.CREATE_SUSPENDED}
}

// tree is a started process's job.
type tree struct{ job windows.Handle }

// adopt puts the suspended process p in a job of its own and resumes its
// threads; on error it kills p (whose threads never ran).
func adopt(p *os.Process) (t tree, err error) {
	defer func() {
		if err != nil {
			_ = p.Kill()
			if t.job != 0 {
				windows.CloseHandle(t.job)
			}
			t, err = tree{}, fmt.Errorf("the process's job: %w", err)
		}
	}()
	if t.job, err = windows.CreateJobObject(nil, nil); err != nil {
		return t, err
	}
	info := windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION{
		BasicLimitInformation: windows.JOBOBJECT_BASIC_LIMIT_INFORMATION{LimitFlags: windows.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE},
	}
	if _, err := windows.SetInformationJobObject(t.job, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info))); err != nil {
		return t, err
	}
	// The pid is p's: its process object stays open, and the pid unused by
	// another, until p is waited for, which is after adopt.
	h, err := windows.OpenProcess(windows.PROCESS_SET_QUOTA|windows.PROCESS_TERMINATE, false, uint32(p.Pid))
	if err != nil {
		return t, err
	}
	err = windows.AssignProcessToJobObject(t.job, h)
	windows.CloseHandle(h)
	if err != nil {
		return t, err
	}
	return t, resume(uint32(p.Pid))
}

// resume resumes every thread of process pid (a process created suspended
// has one; exec.Cmd does not hand out its handle, so it is found in a
// thread snapshot).
func resume(pid uint32) error {
	snap, err := windows.CreateToolhelp32Snapshot(windows.TH32CS_SNAPTHREAD, 0)
	if err != nil {
		return err
	}
	defer windows.CloseHandle(snap)
	te := windows.ThreadEntry32{Size: uint32(unsafe.Sizeof(windows.ThreadEntry32{}))}
	resumed := 0
	for err = windows.Thread32First(snap, &te); err == nil; err = windows.Thread32Next(snap, &te) {
		if te.OwnerProcessID != pid {
			continue
		}
		th, err := windows.OpenThread(windows.THREAD_SUSPEND_RESUME, false, te.ThreadID)
		if err != nil {
			return err
		}
		_, err = windows.ResumeThread(th)
		windows.CloseHandle(th)
		if err != nil {
			return err
		}
		resumed++
	}
	if resumed == 0 {
		return fmt.Errorf("no thread of process %d to resume", pid)
	}
	return nil
}

// leftJobs are the jobs of reaped processes that left processes running
// in them (a server started in the background), until killOrphans: on
// Linux too such processes live until the relay ends.
var (
	leftMu   sync.Mutex
	leftJobs []windows.Handle
)

// reaped releases t once its process was waited for: an empty job is
// closed, one with processes left in it is kept for killOrphans.
func (t tree) reaped() {
	if t.job == 0 {
		return
	}
	var acct basicAccounting
	if windows.QueryInformationJobObject(t.job, windows.JobObjectBasicAccountingInformation,
		uintptr(unsafe.Pointer(&acct)), uint32(unsafe.Sizeof(acct)), nil) == nil && acct.ActiveProcesses == 0 {
		windows.CloseHandle(t.job)
		return
	}
	leftMu.Lock()
	leftJobs = append(leftJobs, t.job)
	leftMu.Unlock()
}

// basicAccounting is JOBOBJECT_BASIC_ACCOUNTING_INFORMATION (winnt.h),
// which x/sys/windows does not define.
type basicAccounting struct {
	TotalUserTime, TotalKernelTime, ThisPeriodTotalUserTime, ThisPeriodTotalKernelTime int64
	TotalPageFaultCount, TotalProcesses, ActiveProcesses, TotalTerminatedProcesses     uint32
}

// killOrphans terminates the jobs kept at reaping, at the relay's end
// (closing their last handle would too: kill on close).
func killOrphans() {
	leftMu.Lock()
	defer leftMu.Unlock()
	for _, job := range leftJobs {
		_ = windows.TerminateJobObject(job, 1)
		windows.CloseHandle(job)
	}
	leftJobs = nil
}

// confine gives the relay's own process a protected DACL that lets its
// user, and the process's owner (OWNER RIGHTS, S-1-3-4: so the owner's
// implicit WRITE_DAC is gone too), only wait for it and query its name
// and exit code; SYSTEM keeps full access. A workload of the same token
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
	const waitAndQuery = windows.SYNCHRONIZE | windows.PROCESS_QUERY_LIMITED_INFORMATION
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
	if t.job != 0 {
		_ = windows.TerminateJobObject(t.job, 1)
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

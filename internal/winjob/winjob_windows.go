package winjob

import (
	"fmt"
	"os/exec"
	"syscall"
	"unsafe"

	"golang.org/x/sys/windows"
)

// Job is a started process's job.
type Job struct{ h windows.Handle }

// Start starts cmd suspended (CREATE_SUSPENDED, added to
// cmd.SysProcAttr's flags), puts it in a new job, and only then resumes
// it, so that none of its instructions runs outside the job and every
// process it starts is in it too (a child inherits its parent's job). On
// an error after the start the process is killed and waited for.
func Start(cmd *exec.Cmd) (*Job, error) { return start(cmd, 0) }

// StartBreakawayOK is Start with a job that lets a process started with
// CREATE_BREAKAWAY_FROM_JOB leave it (JOB_OBJECT_LIMIT_BREAKAWAY_OK; "Job
// Objects", Microsoft Learn): for a program, such as wxc-exec for an
// isolation session, whose detached processes are another owner's to
// end. With nested jobs, breakaway also needs every job between, so a
// job inside this one still decides for its processes.
func StartBreakawayOK(cmd *exec.Cmd) (*Job, error) {
	return start(cmd, windows.JOB_OBJECT_LIMIT_BREAKAWAY_OK)
}

func start(cmd *exec.Cmd, limits uint32) (*Job, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.CreationFlags |= windows.CREATE_SUSPENDED
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	j, err := adopt(uint32(cmd.Process.Pid), limits)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("the process's job: %w", err)
	}
	return j, nil
}

// adopt puts the suspended process pid in a new job and resumes it. The
// pid is the caller's process's: its process object stays open, and the
// pid unused by another, until it is waited for, which is after Start.
func adopt(pid, limits uint32) (_ *Job, err error) {
	h, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return nil, err
	}
	j := &Job{h}
	defer func() {
		if err != nil {
			j.Close()
		}
	}()
	info := windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION{
		BasicLimitInformation: windows.JOBOBJECT_BASIC_LIMIT_INFORMATION{LimitFlags: windows.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE | limits},
	}
	if _, err := windows.SetInformationJobObject(h, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info))); err != nil {
		return nil, err
	}
	p, err := windows.OpenProcess(windows.PROCESS_SET_QUOTA|windows.PROCESS_TERMINATE, false, pid)
	if err != nil {
		return nil, err
	}
	err = windows.AssignProcessToJobObject(h, p)
	windows.CloseHandle(p)
	if err != nil {
		return nil, err
	}
	return j, resume(pid)
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

// Terminate ends every process in the job (exit code 1).
func (j *Job) Terminate() error { return windows.TerminateJobObject(j.h, 1) }

// Active is how many processes are in the job now.
func (j *Job) Active() (int, error) {
	// JOBOBJECT_BASIC_ACCOUNTING_INFORMATION (winnt.h), which x/sys/windows
	// does not define.
	var acct struct {
		TotalUserTime, TotalKernelTime, ThisPeriodTotalUserTime, ThisPeriodTotalKernelTime int64
		TotalPageFaultCount, TotalProcesses, ActiveProcesses, TotalTerminatedProcesses     uint32
	}
	err := windows.QueryInformationJobObject(j.h, windows.JobObjectBasicAccountingInformation,
		uintptr(unsafe.Pointer(&acct)), uint32(unsafe.Sizeof(acct)), nil)
	return int(acct.ActiveProcesses), err
}

// Close closes the job's handle: what is still in it is killed (kill on
// close) once no other handle to the job is open.
func (j *Job) Close() error { return windows.CloseHandle(j.h) }

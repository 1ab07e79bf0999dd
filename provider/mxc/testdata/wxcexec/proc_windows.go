package main

import (
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/windows"
)

var forwardedSignals = []os.Signal{os.Interrupt}

func sysProcAttr() *syscall.SysProcAttr { return nil }

// job holds the workload's processes: kill-on-close, so that they die with
// the stand-in (Pdeathsig's counterpart on Linux), and killTree ends them
// all. Zero if it could not be made; the stand-in's handle is never closed.
var job windows.Handle

// contain puts the started workload in a kill-on-close job object
// (CreateJobObject, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE); its descendants
// join it as they start. The job allows breakaway
// (JOB_OBJECT_LIMIT_BREAKAWAY_OK): a process started with
// CREATE_BREAKAWAY_FROM_JOB leaves it and outlives the exec, as a detached
// in-session process would; nothing ends it later (stop and deprovision
// do not). A process the workload starts before it is
// assigned escapes: it runs for milliseconds first, and the stand-in is a
// mock.
func contain(p *os.Process) {
	j, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return
	}
	info := windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION{}
	info.BasicLimitInformation.LimitFlags = windows.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE | windows.JOB_OBJECT_LIMIT_BREAKAWAY_OK
	if _, err := windows.SetInformationJobObject(j, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info))); err != nil {
		windows.CloseHandle(j)
		return
	}
	h, err := windows.OpenProcess(windows.PROCESS_SET_QUOTA|windows.PROCESS_TERMINATE, false, uint32(p.Pid))
	if err != nil {
		windows.CloseHandle(j)
		return
	}
	defer windows.CloseHandle(h)
	if err := windows.AssignProcessToJobObject(j, h); err != nil {
		windows.CloseHandle(j)
		return
	}
	job = j
}

// killTree kills p and every process of its job (a timeout must not leave
// grandchildren holding the caller's pipes open).
func killTree(p *os.Process) {
	_ = p.Kill()
	if job != 0 {
		_ = windows.TerminateJobObject(job, 1)
	}
}

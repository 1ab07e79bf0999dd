package relay

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// confine makes the relay non-dumpable, so that a workload process of its
// uid can neither open /proc/RELAY/fd (the channel: it could write frames
// and read the host's, nonces included) nor ptrace it, and a child
// subreaper (prctl(2)), so that what a workload puts in a session or
// process group of its own is reparented to the relay when its parent
// dies, and killOrphans finds it.
func confine() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return err
	}
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// killOrphans kills and reaps every child left to this process, round
// after round (a child killed orphans its own children, which come to us
// next), until none is left. It does nothing unless the process is a
// child subreaper (confine): a process that is not (a test running Serve)
// has children that are not the relay's. Call it once every process the
// relay started is reaped, as it waits for any child.
func killOrphans() {
	var on int32
	if err := unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&on)), 0, 0, 0); err != nil || on == 0 {
		return
	}
	for range 1000 { // bounded: a fork bomb racing us gives up the pid limit first
		pids := children()
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		for _, pid := range pids {
			var ws unix.WaitStatus
			_, _ = unix.Wait4(pid, &ws, 0, nil)
		}
	}
}

// children lists this process's children (/proc/self/task/*/children,
// proc(5)).
func children() []int {
	var out []int
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}

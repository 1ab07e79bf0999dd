//go:build linux

package procid

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/procstat"
)

// Start is pid's start time (/proc/PID/stat field 22, clock ticks
// after boot), ok false when no such process runs (a zombie does not).
func Start(pid int) (start uint64, ok bool) {
	st, err := procstat.Read(pid)
	if err != nil || !st.Running() {
		return 0, false
	}
	return st.StartTicks, true
}

// KillStarted kills pid only while it is the process that started at
// start (never a process that reused the pid): the pid is pinned with a
// pidfd, its start time checked, and the signal sent through the pidfd.
// killed false: no such process (gone, or the pid names another).
func KillStarted(pid int, start uint64) (killed bool, err error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if err == unix.ESRCH {
			return false, nil
		}
		return false, err
	}
	defer unix.Close(fd)
	if got, ok := Start(pid); !ok || got != start {
		return false, nil
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil {
		if err == unix.ESRCH {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// User is the real uid pid runs as, "uid:N" (/proc/PID/status Uid, first
// field, proc(5)), read from outside the process.
func User(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				return "uid:" + f[0], nil
			}
		}
	}
	return "", fmt.Errorf("/proc/%d/status: no Uid line", pid)
}

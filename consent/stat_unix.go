//go:build unix

package consent

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// fileID is fi's device and inode.
func fileID(fi os.FileInfo) (dev, ino uint64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev), st.Ino
	}
	return 0, 0
}

// alive reports whether process pid exists (signal 0, kill(2)).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}

// sessionLeader is the host pid of the leader of pid's session (proc(5):
// /proc/PID/stat field 6, shown in the reader's pid namespace), or pid
// itself when it cannot be read.
func sessionLeader(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return pid
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return pid
	}
	f := strings.Fields(s[i+1:]) // state ppid pgrp session ...
	if len(f) < 4 {
		return pid
	}
	if sid, err := strconv.Atoi(f[3]); err == nil && sid > 0 {
		return sid
	}
	return pid
}

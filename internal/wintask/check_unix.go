//go:build unix

package wintask

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Check returns warnings, plain sentences, when the task definition at
// path or the program exe, or a directory above either, could be changed
// by another user than the caller and root: a file that is missing, a
// symlink, not regular, owned by another uid, or group- or
// world-writable (mode & 022); a directory that fails dirsCheck (Linux:
// trust.Dirs, owned by the caller or root and writable by no one else
// unless root's and sticky). agentSID is a Windows SID and names no one
// here: every group or other write bit is a warning.
func Check(path, exe, agentSID string) []string {
	return append(checkPath(path, "the task definition"), checkPath(exe, "the program the task runs")...)
}

// checkPath checks p, what it is to the task (a phrase), and its
// directories.
func checkPath(p, what string) []string {
	var w []string
	subject := fmt.Sprintf("%s (%s)", p, what)
	fi, err := os.Lstat(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		w = append(w, subject+" does not exist.")
	case err != nil:
		w = append(w, fmt.Sprintf("%s cannot be checked: %v.", subject, err))
	case fi.Mode()&os.ModeSymlink != 0:
		w = append(w, subject+" is a symlink: what runs is wherever it points.")
	case !fi.Mode().IsRegular():
		w = append(w, fmt.Sprintf("%s is not a regular file (%v).", subject, fi.Mode().Type()))
	default:
		st := fi.Sys().(*syscall.Stat_t)
		if int(st.Uid) != os.Geteuid() && st.Uid != 0 {
			w = append(w, fmt.Sprintf("%s is owned by uid %d, who could change what runs at your logon.", subject, st.Uid))
		}
		if m := fi.Mode().Perm(); m&0o022 != 0 {
			w = append(w, fmt.Sprintf("%s is group- or world-writable (mode %04o): another user could change what runs at your logon.", subject, m))
		}
	}
	if err := dirsCheck(filepath.Dir(p)); err != nil {
		w = append(w, fmt.Sprintf("A directory of %s %s: %v: another user could replace it.", what, p, err))
	}
	return w
}

//go:build unix

package consent

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// openStanding opens path without following a final symlink (O_NOFOLLOW:
// ELOOP for one), so that the file checked is the file read.
func openStanding(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if pe, ok := err.(*os.PathError); ok && pe.Err == syscall.ELOOP {
			return nil, fmt.Errorf("%s is a symlink: refused (a standing grants file must be a regular file of your own)", path)
		}
		return nil, err
	}
	return f, nil
}

// checkStandingFile refuses a standing grants file that is not a regular
// file, that another user owns, or that group or others may write, and
// one in a directory another user controls (trustDir).
func checkStandingFile(path string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("standing grants file %s is not a regular file (%s): refused", path, fi.Mode().Type())
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("standing grants file %s: no owner to check", path)
	}
	if uid := os.Geteuid(); int(st.Uid) != uid {
		return fmt.Errorf("standing grants file %s belongs to uid %d, not to you (uid %d): refused (another user could plant standing grants)", path, st.Uid, uid)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("standing grants file %s is writable by group or others (mode %04o): refused; chmod go-w %s", path, fi.Mode().Perm(), path)
	}
	return trustDir(path)
}

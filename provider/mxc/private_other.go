//go:build !windows

package mxc

import (
	"fmt"
	"os"
	"syscall"
)

// makePrivate makes directory path the caller's alone: mode 0700. A
// directory that is a link, or that another uid owns, is refused: its
// owner could plant records and links in it (a lock's temporary file
// pointed at a file of ours, a record naming a session of someone else's).
func makePrivate(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("%s is a symbolic link: give the directory's real path", path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s is owned by uid %d, not %d, who could plant records and links in it: use a directory of your own", path, st.Uid, os.Geteuid())
	}
	return os.Chmod(path, 0o700)
}

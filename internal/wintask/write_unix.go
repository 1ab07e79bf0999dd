//go:build unix

package wintask

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Write stores xml (Task.XML's bytes) at path, mode 0600: opened
// O_NOFOLLOW (a symlink at path is refused, ELOOP) and O_NONBLOCK (a FIFO
// does not block the open), made when missing; an existing file must be
// a regular file with one link owned by the caller (fstat on the open
// descriptor), and is set to 0600 (fchmod) before it is truncated and
// rewritten in place, then fsynced. Symlinks in the directories above
// path are followed, as the OS does: the Windows build, the one
// autostart uses, refuses those too. Errors: xml not from Task.XML, a
// refusal above, or the open, write or fsync failing.
func Write(path string, xml []byte) error {
	if err := checkData(xml); err != nil {
		return fmt.Errorf("%s: the data %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0o600)
	if errors.Is(err, unix.ELOOP) {
		return fmt.Errorf("%s is a symlink: refusing to write a task definition through it", path)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	st := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file (%v): refusing to replace it", path, fi.Mode().Type())
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%s is owned by uid %d, not by the caller (%d): refusing to replace it", path, st.Uid, os.Geteuid())
	case uint64(st.Nlink) != 1:
		return fmt.Errorf("%s has %d hard links: refusing to replace it", path, st.Nlink)
	}
	if err := f.Chmod(0o600); err != nil {
		return err
	}
	return rewrite(f, xml)
}

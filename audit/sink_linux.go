//go:build linux

package audit

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// openLog opens path for appending (creating it 0600).
//
// The file is opened without following symlinks in any component
// (openat2 RESOLVE_NO_SYMLINKS) and must be a regular file with one link
// owned by the caller: a log kept where a sandbox can write could otherwise
// be swapped for a link to a file the (root) caller would then append to.
func openLog(path string) (*os.File, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
		// O_NONBLOCK: a FIFO planted at path must not hang the open (it
		// is refused below); cleared again for the regular file.
		Flags:   unix.O_APPEND | unix.O_CREAT | unix.O_WRONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY,
		Mode:    0o600,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		if err == unix.ELOOP {
			return nil, fmt.Errorf("audit: open %s: a path component is a symlink; give the real path", path)
		}
		return nil, fmt.Errorf("audit: open %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("audit: stat %s: %w", path, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		err = fmt.Errorf("not a regular file")
	case st.Nlink != 1:
		err = fmt.Errorf("has %d hard links", st.Nlink)
	case int(st.Uid) != os.Geteuid():
		err = fmt.Errorf("is owned by uid %d, not by the caller (uid %d)", st.Uid, os.Geteuid())
	}
	if err == nil {
		err = unix.SetNonblock(fd, false)
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("audit: %s %v; refusing to append to it", path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// lockFile takes or releases an exclusive flock(2) on f.
func lockFile(f *os.File, lock bool) error {
	how := syscall.LOCK_UN
	if lock {
		how = syscall.LOCK_EX
	}
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if err != syscall.EINTR {
			return err
		}
	}
}

func syncUnsupported(err error) bool {
	return errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP)
}

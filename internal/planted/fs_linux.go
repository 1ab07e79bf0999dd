//go:build linux

package planted

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ctime is the inode change time of fi (an Lstat result).
func ctime(fi fs.FileInfo) time.Time {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return time.Unix(st.Ctim.Unix())
	}
	return fi.ModTime()
}

// Now is the time to pass to Scan, taken before the workload starts: the
// kernel's coarse real-time clock, from which inode times are taken
// (current_time() in fs/inode.c), so any later change has a ctime at or
// after it; the fine clock can be a tick ahead and miss a change.
func Now() time.Time {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &ts); err != nil {
		return time.Now().Add(-10 * time.Millisecond)
	}
	return time.Unix(ts.Unix())
}

// beneath resolves p's directory from root without following any
// symlink or leaving root (openat2(2) RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS),
// as an O_PATH fd.
func beneath(root, p string) (int, error) {
	rel, err := filepath.Rel(root, filepath.Dir(p))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return -1, fmt.Errorf("%s is not inside %s", p, root)
	}
	return unix.Openat2(unix.AT_FDCWD, filepath.Join(root, rel), &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
}

// openBeneath opens the file at p (below root) for reading: not through
// a symlink, not blocking on a fifo.
func openBeneath(root, p string) (*os.File, error) {
	if root == "" {
		return nil, errors.New("no root")
	}
	dfd, err := beneath(root, p)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, filepath.Base(p), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil
}

// renameBeneath renames p (below root) to name in the same directory,
// never replacing anything (renameat2(2) RENAME_NOREPLACE; the entry
// itself, if a symlink, is moved, not followed).
func renameBeneath(root, p, name string) error {
	if root == "" {
		return errors.New("no root")
	}
	dfd, err := beneath(root, p)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	return unix.Renameat2(dfd, filepath.Base(p), dfd, name, unix.RENAME_NOREPLACE)
}

// btime is p's birth time, when the filesystem records one (statx(2)).
func btime(p string) (time.Time, bool) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BTIME, &st); err != nil || st.Mask&unix.STATX_BTIME == 0 {
		return time.Time{}, false
	}
	return time.Unix(st.Btime.Sec, int64(st.Btime.Nsec)), true
}

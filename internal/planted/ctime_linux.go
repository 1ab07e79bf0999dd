//go:build linux

package planted

import (
	"io/fs"
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

func renameNoReplace(from, to string) error {
	return unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
}

// btime is p's birth time, when the filesystem records one (statx(2)).
func btime(p string) (time.Time, bool) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BTIME, &st); err != nil || st.Mask&unix.STATX_BTIME == 0 {
		return time.Time{}, false
	}
	return time.Unix(st.Btime.Sec, int64(st.Btime.Nsec)), true
}

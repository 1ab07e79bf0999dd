//go:build linux

package setid

import (
	"errors"
	"strconv"

	"golang.org/x/sys/unix"
)

// capXattr holds a file's capability sets (capabilities(7), "File
// capabilities"); its presence alone marks the file.
const capXattr = "security.capability"

// Mode reports whether st_mode (stat(2)) is a regular file's with
// S_ISUID or S_ISGID, whatever its permission bits.
func Mode(mode uint32) bool {
	return mode&unix.S_IFMT == unix.S_IFREG && mode&(unix.S_ISUID|unix.S_ISGID) != 0
}

// Path reports whether the file at p (a final symlink is not followed) is
// a set-id regular file: Mode of its lstat(2), or a security.capability
// attribute. An error is one of lstat or lgetxattr other than "no such
// attribute" or "attributes not supported" (the file cannot have one);
// callers fail closed on it.
func Path(p string) (bool, error) {
	var st unix.Stat_t
	err := unix.Lstat(p, &st)
	return of(&st, err, func() error { _, err := unix.Lgetxattr(p, capXattr, nil); return err })
}

// FD is Path for an open file descriptor, O_PATH ones (open_tree(2)'s
// detached mounts) included: the inode fd refers to is examined, so a
// path swapped after the fd was opened does not matter. The attribute is
// read through /proc/self/fd/FD (older kernels refuse fgetxattr(2) on
// an O_PATH fd with EBADF); that magic link names the same inode.
func FD(fd int) (bool, error) {
	var st unix.Stat_t
	err := unix.Fstat(fd, &st)
	return of(&st, err, func() error {
		_, err := unix.Getxattr("/proc/self/fd/"+strconv.Itoa(fd), capXattr, nil)
		return err
	})
}

// of decides from st (statErr is the stat's error) and, for a regular
// file without set-id bits, getCap, which gets security.capability with
// an empty buffer (getxattr(2)) and returns its error.
func of(st *unix.Stat_t, statErr error, getCap func() error) (bool, error) {
	if statErr != nil {
		return false, statErr
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false, nil
	}
	if Mode(st.Mode) {
		return true, nil
	}
	return hasCap(getCap())
}

// hasCap reads getCap's error: none (getxattr(2) returned the size)
// means the attribute is there.
func hasCap(err error) (bool, error) {
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENODATA), errors.Is(err, unix.EOPNOTSUPP):
		return false, nil
	}
	return false, err
}

//go:build unix

package policy

import (
	"io/fs"
	"syscall"
)

// ownerOf returns the owner uid and permission bits of fi (an Lstat or
// Stat result).
func ownerOf(fi fs.FileInfo) (uid uint32, perm fs.FileMode, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return st.Uid, fi.Mode().Perm(), true
}

// FileIDOf is fi's device and inode (an Lstat or Stat result).
func FileIDOf(fi fs.FileInfo) FileID {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return FileID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}
	}
	return FileID{}
}

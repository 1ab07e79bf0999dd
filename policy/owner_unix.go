//go:build unix

package policy

import (
	"io/fs"
	"os"
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

// PlaceholderMark is the extended attribute internal/placeholder sets on
// the placeholders it creates.
const PlaceholderMark = "user.corral.placeholder"

// leftoverPlaceholder reports whether path is a placeholder (empty and
// marked) that another run holds or a killed one left: Resolve treats it
// as absent, so this run holds it too and the last holder removes it.
func leftoverPlaceholder(path string) bool {
	buf := make([]byte, 8)
	n, err := syscall.Getxattr(path, PlaceholderMark, buf)
	if err != nil || n != 1 || buf[0] != '1' {
		return false
	}
	fi, err := os.Lstat(path)
	switch {
	case err != nil:
		return false
	case fi.Mode().IsRegular():
		return fi.Size() == 0
	case fi.IsDir():
		f, err := os.Open(path)
		if err != nil {
			return false
		}
		defer f.Close()
		names, _ := f.Readdirnames(1)
		return len(names) == 0
	}
	return false
}

package policy

import (
	"os"
	"syscall"
)

// IsPlaceholder reports whether path is a placeholder (empty and marked
// with PlaceholderMark; not followed if a symlink): Resolve treats one that
// another run holds or a killed one left as absent, so this run holds it
// too and the last holder removes it; the scan after a run does not report
// one.
func IsPlaceholder(path string) bool {
	fi, err := os.Lstat(path)
	if err != nil || !(fi.Mode().IsRegular() && fi.Size() == 0 || fi.IsDir()) {
		return false // a symlink is never one, and Getxattr would follow it
	}
	buf := make([]byte, 8)
	if n, err := syscall.Getxattr(path, PlaceholderMark, buf); err != nil || n != 1 || buf[0] != '1' {
		return false
	}
	if fi.IsDir() {
		f, err := os.Open(path)
		if err != nil {
			return false
		}
		defer f.Close()
		names, _ := f.Readdirnames(1)
		return len(names) == 0
	}
	return true
}

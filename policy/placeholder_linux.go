package policy

import (
	"os"
	"syscall"
)

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

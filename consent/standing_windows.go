package consent

import (
	"fmt"
	"io/fs"
	"os"
)

// openStanding opens path, refusing a symlink (Lstat first: Windows has
// no O_NOFOLLOW).
func openStanding(path string) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return nil, fmt.Errorf("%s is a symlink: refused (a standing grants file must be a regular file of your own)", path)
	}
	return os.Open(path)
}

// checkStandingFile refuses anything but a regular file (Windows has no
// owner and mode bits to check here).
func checkStandingFile(path string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("standing grants file %s is not a regular file: refused", path)
	}
	return nil
}

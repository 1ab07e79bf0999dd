//go:build !linux

package planted

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// ctime is the modification time here (Windows has no inode change time
// that a workload cannot set: Scan's premise), so this is weaker.
func ctime(fi fs.FileInfo) time.Time { return fi.ModTime() }

// Now is the time to pass to Scan, taken before the workload starts.
func Now() time.Time { return time.Now().Add(-time.Second) }

// openBeneath opens the file at p for reading (not through a final
// symlink).
func openBeneath(root, p string) (*os.File, error) {
	if fi, err := os.Lstat(p); err != nil || fi.Mode()&fs.ModeSymlink != 0 {
		return nil, errors.New("not a file")
	}
	return os.Open(p)
}

// renameBeneath renames p to name in the same directory, never replacing
// anything.
func renameBeneath(root, p, name string) error {
	to := filepath.Join(filepath.Dir(p), name)
	if _, err := os.Lstat(to); err == nil {
		return os.ErrExist
	}
	return os.Rename(p, to)
}

// btime is unknown here: born falls back to the change time.
func btime(p string) (time.Time, bool) { return time.Time{}, false }

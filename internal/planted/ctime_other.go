//go:build !linux

package planted

import (
	"io/fs"
	"os"
	"time"
)

// ctime is the modification time here (Windows has no inode change time
// that a workload cannot set: Scan's premise), so this is weaker.
func ctime(fi fs.FileInfo) time.Time { return fi.ModTime() }

// Now is the time to pass to Scan, taken before the workload starts.
func Now() time.Time { return time.Now().Add(-time.Second) }

func renameNoReplace(from, to string) error {
	if _, err := os.Lstat(to); err == nil {
		return os.ErrExist
	}
	return os.Rename(from, to)
}

// btime is unknown here: born falls back to the change time.
func btime(p string) (time.Time, bool) { return time.Time{}, false }

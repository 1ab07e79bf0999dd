//go:build !linux && !windows

package audit

import (
	"fmt"
	"os"
)

// openLog opens path for appending (creating it 0600). On systems without
// openat2 the path itself must not be a symlink and must be a regular file.
func openLog(path string) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("audit: %s is not a regular file; refusing to append to it", path)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit: open %s: %w", path, err)
	}
	return f, nil
}

// lockFile is a no-op here: each event is one append write.
func lockFile(*os.File, bool) error { return nil }

func syncUnsupported(error) bool { return false }

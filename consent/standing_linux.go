package consent

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/corral-sandbox/corral/internal/trust"
)

// trustDir refuses path when a directory on the way to it is controlled
// by another user (trust.Dirs): the file could be swapped.
func trustDir(path string) error {
	if err := trust.Dirs(filepath.Dir(path), uint32(os.Geteuid()), nil); err != nil {
		return fmt.Errorf("standing grants file %s: %w: refused", path, err)
	}
	return nil
}

// mkdirStanding makes the file's directory (0700) under directories no
// other user controls.
func mkdirStanding(dir string) error {
	return trust.MkdirAll(dir, 0o700, uint32(os.Geteuid()), nil)
}

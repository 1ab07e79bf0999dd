//go:build !windows

package policy

import "path/filepath"

// canonical is the real path of p: symlinks resolved (filepath.EvalSymlinks).
func canonical(p string) (string, error) { return filepath.EvalSymlinks(p) }

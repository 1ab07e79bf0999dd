//go:build !windows

package policy

import "path/filepath"

// canonical is the real path of p: symlinks resolved (filepath.EvalSymlinks).
func canonical(p string) (string, error) { return filepath.EvalSymlinks(p) }

// Canonical is the real path of p as Resolve makes grants' paths:
// filepath.EvalSymlinks, or on Windows GetFinalPathNameByHandleW (junctions,
// mount points, 8.3 names and case resolved too).
func Canonical(p string) (string, error) { return canonical(p) }

// hostWinFolders: off Windows the host has no Windows folders to name.
func hostWinFolders() winLayout { return winLayout{} }

// linkOwnerUntrusted: only a Windows host has Windows links to inspect.
func linkOwnerUntrusted(string) string { return "" }

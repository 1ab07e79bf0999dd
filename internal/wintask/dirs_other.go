//go:build unix && !linux

package wintask

// dirsCheck checks nothing on Unix systems other than Linux, which
// internal/trust does not cover; only the files are checked there.
func dirsCheck(dir string) error { return nil }

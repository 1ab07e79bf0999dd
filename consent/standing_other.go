//go:build !linux

package consent

import "os"

// trustDir: the directory chain is checked on Linux only.
func trustDir(string) error { return nil }

// mkdirStanding makes the file's directory (0700).
func mkdirStanding(dir string) error { return os.MkdirAll(dir, 0o700) }

//go:build !windows

package mxc

import "os"

// makePrivate makes directory path the caller's alone: mode 0700.
func makePrivate(path string) error { return os.Chmod(path, 0o700) }

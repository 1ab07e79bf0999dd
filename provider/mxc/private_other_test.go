//go:build !windows

package mxc

import (
	"os"
	"testing"
)

// checkPrivate fails t unless path is the caller's alone: a directory
// 0700, a file 0600.
func checkPrivate(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	want := os.FileMode(0o600)
	if fi.IsDir() {
		want = 0o700
	}
	if fi.Mode().Perm() != want {
		t.Errorf("%s: mode %04o, want %04o", path, fi.Mode().Perm(), want)
	}
}

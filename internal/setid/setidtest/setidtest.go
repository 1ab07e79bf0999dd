//go:build linux

// Package setidtest makes the set-id files the tests of setid and its
// callers (provider/linux, e2e) check against. It needs root: only root
// may set security.capability.
package setidtest

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// CapSetuid is a security.capability value: VFS_CAP_REVISION_2 with the
// effective flag and CAP_SETUID (7) permitted (linux/capability.h, struct
// vfs_cap_data, little-endian).
var CapSetuid = []byte{1, 0, 0, 2, 1 << 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}

// Files writes data to two new files in dir, owned by the caller: suid
// (mode 4755) and capNoExec (mode 0644 with CapSetuid: chmod keeps the
// attribute, so its owner can make it executable). It skips t when the
// attribute cannot be set (not root, a filesystem without it). They go
// with dir.
func Files(t *testing.T, dir string, data []byte) (suid, capNoExec string) {
	t.Helper()
	suid, capNoExec = filepath.Join(dir, "suid"), filepath.Join(dir, "capfile")
	for _, p := range []string{suid, capNoExec} {
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(suid, 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(capNoExec, "security.capability", CapSetuid, 0); err != nil {
		t.Skipf("cannot set security.capability here: %v", err)
	}
	return suid, capNoExec
}

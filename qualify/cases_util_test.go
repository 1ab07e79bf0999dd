//go:build linux

package qualify

import (
	"os"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestNewHostMounts: P09's check sees a mount made after its snapshot
// and still there after the grace, and not one that went within it.
func TestNewHostMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts a tmpfs in the host's namespace")
	}
	dir := t.TempDir()
	before := hostMounts()
	if err := unix.Mount("corral-test", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) }) // EINVAL once unmounted
	if left := newHostMounts(before, 0); !slices.Equal(left, []string{dir}) {
		t.Fatalf("a tmpfs left on %s: newHostMounts says %q", dir, left)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = unix.Unmount(dir, 0)
	}()
	if left := newHostMounts(before, 5*time.Second); len(left) != 0 {
		t.Fatalf("a tmpfs unmounted within the grace: newHostMounts says %q", left)
	}
}

//go:build linux

package setid

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/setid/setidtest"
)

// Every regular file with a set-id bit or a capability attribute is
// set-id, whatever its exec bits (the owner can chmod it executable);
// other files and directories are not.
func TestPathAndFD(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("security.capability can only be set by root")
	}
	dir := t.TempDir()
	mk := func(name string, mode os.FileMode, cap bool) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if cap {
			if err := unix.Setxattr(p, capXattr, setidtest.CapSetuid, 0); err != nil {
				t.Skipf("cannot set %s here: %v", capXattr, err)
			}
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		p    string
		want bool
	}{
		{mk("plain", 0o755, false), false},
		{mk("suid", 0o755|os.ModeSetuid, false), true},
		{mk("suid-noexec", 0o644|os.ModeSetuid, false), true},
		{mk("sgid-noexec", 0o644|os.ModeSetgid, false), true},
		{mk("cap", 0o755, true), true},
		{mk("cap-noexec", 0o644, true), true},
		{mk("cap-000", 0, true), true},
	}
	sgidDir := filepath.Join(dir, "sgid-dir")
	if err := os.Mkdir(sgidDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sgidDir, 0o755|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	cases = append(cases, struct {
		p    string
		want bool
	}{sgidDir, false})
	for _, c := range cases {
		got, err := Path(c.p)
		if err != nil || got != c.want {
			t.Errorf("Path(%s) = %v, %v; want %v", filepath.Base(c.p), got, err, c.want)
		}
		// FD of an O_PATH fd, as open_tree(2)'s are.
		fd, err := unix.Open(c.p, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err = FD(fd)
		unix.Close(fd)
		if err != nil || got != c.want {
			t.Errorf("FD(%s) = %v, %v; want %v", filepath.Base(c.p), got, err, c.want)
		}
	}
}

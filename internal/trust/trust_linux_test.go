package trust

import (
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// mkdir makes path with the raw mode bits (sticky is 0o1000), past the
// umask.
func mkdir(t *testing.T, path string, mode uint32) string {
	t.Helper()
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

// Each directory on the way must be the caller's or root's and writable
// by no one else, but for root's sticky directories.
func TestDirs(t *testing.T) {
	uid := uint32(os.Geteuid())
	base := t.TempDir()
	good := mkdir(t, filepath.Join(base, "good"), 0o755)
	if err := Dirs(good, uid, nil); err != nil {
		t.Fatalf("own 0755 directory: %v", err)
	}
	open := mkdir(t, filepath.Join(base, "open"), 0o777)
	var u *Untrusted
	if err := Dirs(mkdir(t, filepath.Join(open, "mine"), 0o700), uid, nil); !errors.As(err, &u) || u.Dir != open || u.Mode != 0o777 {
		t.Errorf("under a 0777 directory: %v, want %s untrusted with mode 0777", err, open)
	}
	group := mkdir(t, filepath.Join(base, "group"), 0o770)
	if err := Dirs(group, uid, nil); !errors.As(err, &u) || u.Dir != group {
		t.Errorf("group-writable: %v", err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	if err := Dirs(link, uid, nil); !errors.As(err, &u) || !u.NotDir || u.Dir != link {
		t.Errorf("symlink: %v, want %s not a directory", err, link)
	}
	if uid == 0 {
		sticky := mkdir(t, filepath.Join(base, "sticky"), 0o1777)
		if err := Dirs(mkdir(t, filepath.Join(sticky, "mine"), 0o700), uid, nil); err != nil {
			t.Errorf("under root's sticky directory: %v", err)
		}
	}
	called := 0
	stop := errors.New("stop")
	if err := Dirs(good, uid, func(d string, st *syscall.Stat_t) error { called++; return stop }); err != stop || called != 1 {
		t.Errorf("check: %v after %d calls, want its error after 1", err, called)
	}
}

// Another user's directory, or their sticky one, is not trusted.
func TestDirsOtherOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory to another user")
	}
	usr, err := user.Lookup("corral-test")
	if err != nil {
		t.Skipf("no user corral-test: %v", err)
	}
	other, _ := strconv.Atoi(usr.Uid)
	base := t.TempDir()
	for _, mode := range []uint32{0o755, 0o1777} {
		d := mkdir(t, filepath.Join(base, strconv.FormatUint(uint64(mode), 8)), mode)
		if err := os.Chown(d, other, other); err != nil {
			t.Fatal(err)
		}
		var u *Untrusted
		if err := Dirs(d, 0, nil); !errors.As(err, &u) || u.UID != uint32(other) || u.Dir != d {
			t.Errorf("mode %o owned by %d: %v", mode, other, err)
		}
	}
}

// MkdirAll makes nothing under a directory it does not trust.
func TestMkdirAll(t *testing.T) {
	uid := uint32(os.Geteuid())
	base := t.TempDir()
	if err := MkdirAll(filepath.Join(base, "a", "b"), 0o700, uid, nil); err != nil {
		t.Fatalf("fresh: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(base, "a", "b")); err != nil || !fi.IsDir() {
		t.Fatalf("not made: %v", err)
	}
	open := mkdir(t, filepath.Join(base, "open"), 0o777)
	if err := MkdirAll(filepath.Join(open, "x", "y"), 0o700, uid, nil); err == nil {
		t.Error("accepted a directory under a 0777 one")
	}
	if _, err := os.Lstat(filepath.Join(open, "x")); err == nil {
		t.Error("made a directory under the 0777 one")
	}
}

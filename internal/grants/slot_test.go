//go:build linux

package grants

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/mountinfo"
)

// slotWithView mounts a slot in a fresh directory and a recursive bind of
// it made a slave (what a container's /grants is), detached at the end.
func slotWithView(t *testing.T) (*Slot, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounts need root")
	}
	base := t.TempDir()
	dir, view := filepath.Join(base, "slot"), filepath.Join(base, "view")
	for _, d := range []string{dir, view} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	s, err := MountSlot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		if err := Detach(base); err != nil {
			t.Errorf("Detach: %v", err)
		}
		if Mounted(base) {
			t.Errorf("mounts left below %s", base)
		}
	})
	if err := unix.Mount(dir, view, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("", view, "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		t.Fatal(err)
	}
	return s, view
}

func tree(t *testing.T) (string, Request) {
	t.Helper()
	src := t.TempDir()
	for _, d := range []string{"keep", "secret", "proto"} {
		if err := os.Mkdir(filepath.Join(src, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, text := range map[string]string{"a.txt": "hello", "secret/s.txt": "S", "key": "K", "proto/p.txt": "P"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(src, &st); err != nil {
		t.Fatal(err)
	}
	return src, Request{Source: src, Dev: st.Dev, Ino: st.Ino}
}

// A read-only grant reaches the slave whole: readable, EROFS on write,
// its masked directory and file empty; a read-write grant is writable
// but for its read-only path; revoke takes it out of the slave and a
// process holding a file in it is found by the mount ids read back.
func TestGrantThroughSlot(t *testing.T) {
	s, view := slotWithView(t)
	src, r := tree(t)
	r.Label, r.ReadOnly = "docs", true
	r.Masks = []string{filepath.Join(src, "secret"), filepath.Join(src, "key"), filepath.Join(src, "absent")}
	absent, err := s.Grant(r)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(absent, []string{filepath.Join(src, "absent")}) {
		t.Errorf("absent = %v", absent)
	}
	g := filepath.Join(view, "ro", "docs")
	if b, err := os.ReadFile(filepath.Join(g, "a.txt")); err != nil || string(b) != "hello" {
		t.Errorf("read through the slave: %q %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(g, "a.txt"), []byte("x"), 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("write to a read-only grant: %v, want EROFS", err)
	}
	if ents, err := os.ReadDir(filepath.Join(g, "secret")); err != nil || len(ents) != 0 {
		t.Errorf("masked directory lists %v (%v), want nothing", ents, err)
	}
	if b, err := os.ReadFile(filepath.Join(g, "key")); err != nil || len(b) != 0 {
		t.Errorf("masked file reads %q (%v), want nothing", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(src, "secret", "s.txt")); string(b) != "S" {
		t.Errorf("the host's file changed: %q", b)
	}

	rw := r
	rw.Label, rw.ReadOnly, rw.Masks = "proj", false, nil
	rw.ReadOnlyWithin = []string{filepath.Join(src, "proto")}
	if _, err := s.Grant(rw); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(view, "rw", "proj")
	if err := os.WriteFile(filepath.Join(p, "new.txt"), []byte("w"), 0o644); err != nil {
		t.Errorf("write to a read-write grant: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(src, "new.txt")); string(b) != "w" {
		t.Errorf("the write did not reach the host: %q", b)
	}
	if err := os.WriteFile(filepath.Join(p, "proto", "p.txt"), []byte("x"), 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("write to a read-only path in a read-write grant: %v, want EROFS", err)
	}

	if _, err := s.Grant(rw); !isRefused(err) {
		t.Errorf("a label in use: %v, want refused", err)
	}
	bad := rw
	bad.Label, bad.Ino = "swap", rw.Ino+1
	if _, err := s.Grant(bad); !isRefused(err) {
		t.Errorf("another inode: %v, want refused", err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(src, link); err != nil {
		t.Fatal(err)
	}
	bad = rw
	bad.Label, bad.Source = "link", link
	if _, err := s.Grant(bad); !isRefused(err) {
		t.Errorf("a symlink: %v, want refused", err)
	}

	es, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	top, ok := Top(es, p)
	if !ok || top.Master() == 0 {
		t.Fatalf("the slave shows no propagated mount at %s: %+v", p, top)
	}
	ids := mountinfo.Subtree(es, top.ID)
	f, err := os.Open(filepath.Join(p, "a.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := s.Revoke("proj", false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(p, "a.txt")); err == nil {
		t.Error("the revoked grant is still reachable in the slave")
	}
	hs := Holders(os.Getpid(), ids)
	if !slices.ContainsFunc(hs, func(h Holder) bool { return h.PID == os.Getpid() && h.FD == int(f.Fd()) }) {
		t.Errorf("holders %+v do not name this process's fd %d", hs, f.Fd())
	}
}

func isRefused(err error) bool {
	var r *RefusedError
	return errors.As(err, &r)
}

// Detach refuses nothing and leaves no mount; a directory that held a
// slot with a read-write grant can then be removed without reaching the
// granted folder.
func TestDetachProtectsGrantedFolder(t *testing.T) {
	s, _ := slotWithView(t)
	src, r := tree(t)
	r.Label = "proj"
	if _, err := s.Grant(r); err != nil {
		t.Fatal(err)
	}
	if err := Detach(s.Dir); err != nil {
		t.Fatal(err)
	}
	if Mounted(s.Dir) {
		t.Fatal("still mounted")
	}
	if err := os.RemoveAll(s.Dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(src, "a.txt")); err != nil {
		t.Errorf("removing the slot's directory reached the granted folder: %v", err)
	}
}

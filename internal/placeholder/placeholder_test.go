//go:build linux

package placeholder

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/policy"
)

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

func acquireAll(phs ...policy.Placeholder) (*Set, error) {
	return Acquire(&policy.Resolved{Placeholders: phs})
}

// A run that took another's placeholder for a real protected file (it
// existed when that run resolved its policy) and bound it holds it too:
// the maker must not remove it under that run's mount.
func TestBoundAsProtected(t *testing.T) {
	w, _ := filepath.EvalSymlinks(t.TempDir())
	ph := policy.Placeholder{Path: filepath.Join(w, ".vscode"), Dir: true}
	a, err := acquireAll(ph)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Acquire(&policy.Resolved{Grants: []policy.PathGrant{{Path: ph.Path, Access: policy.AccessReadOnly, Dir: true, Field: "filesystem.protected[21]"}}})
	if err != nil {
		t.Fatal(err)
	}
	a.Release()
	if !exists(ph.Path) {
		t.Fatal("removed while another run has it bound as a protected path")
	}
	b.Release()
	if !exists(ph.Path) {
		t.Fatal("a run that only bound it removed it")
	}
	c, err := acquireAll(ph) // marked and empty: adopted, and removed by the last holder
	if err != nil {
		t.Fatal(err)
	}
	c.Release()
	if exists(ph.Path) {
		t.Error("left behind")
	}
}

func TestAcquireRelease(t *testing.T) {
	w, _ := filepath.EvalSymlinks(t.TempDir())
	phs := []policy.Placeholder{{Path: filepath.Join(w, ".bashrc")}, {Path: filepath.Join(w, ".vscode"), Dir: true}}
	a, err := acquireAll(phs...)
	if err != nil {
		t.Fatal(err)
	}
	for _, ph := range phs {
		fi, err := os.Lstat(ph.Path)
		if err != nil || fi.IsDir() != ph.Dir || !policy.IsPlaceholder(ph.Path) {
			t.Fatalf("%s: %v %v", ph.Path, fi, err)
		}
	}
	// A second run over the same tree adopts them; the first to end
	// leaves them to the other (removing one the other has mounted would
	// lift its protection there).
	b, err := acquireAll(phs...)
	if err != nil {
		t.Fatal(err)
	}
	a.Release()
	for _, ph := range phs {
		if !exists(ph.Path) {
			t.Errorf("%s removed while another run holds it", ph.Path)
		}
	}
	b.Release()
	for _, ph := range phs {
		if exists(ph.Path) {
			t.Errorf("%s left behind", ph.Path)
		}
	}
	b.Release() // idempotent
	var nilSet *Set
	nilSet.Release()
}

// What a person put in a placeholder meanwhile, or a real file that
// appeared before it was made, is never removed.
func TestReleaseKeepsOthers(t *testing.T) {
	w, _ := filepath.EvalSymlinks(t.TempDir())
	dir := policy.Placeholder{Path: filepath.Join(w, ".idea"), Dir: true}
	s, err := acquireAll(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir.Path, "workspace.xml"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.Release()
	if !exists(filepath.Join(dir.Path, "workspace.xml")) {
		t.Error("a placeholder someone filled was removed")
	}
	real := filepath.Join(w, ".envrc")
	if err := os.WriteFile(real, nil, 0o644); err != nil { // empty, unmarked: a real file
		t.Fatal(err)
	}
	s, err = acquireAll(policy.Placeholder{Path: real})
	if err != nil {
		t.Fatal(err)
	}
	s.Release()
	if !exists(real) {
		t.Error("a real (unmarked) file was removed")
	}
	// A placeholder a killed run left behind (empty, marked, unlocked)
	// is adopted and removed.
	left := policy.Placeholder{Path: filepath.Join(w, ".npmrc")}
	if err := os.WriteFile(left.Path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(left.Path, Mark, []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	s, err = acquireAll(left)
	if err != nil {
		t.Fatal(err)
	}
	s.Release()
	if exists(left.Path) {
		t.Error("a placeholder left by a killed run was not removed")
	}
}

// A symlink where a placeholder would go is not followed.
func TestAcquireNoFollow(t *testing.T) {
	w, _ := filepath.EvalSymlinks(t.TempDir())
	target := filepath.Join(t.TempDir(), "outside")
	if err := os.Symlink(target, filepath.Join(w, ".bashrc")); err != nil {
		t.Fatal(err)
	}
	if _, err := acquireAll(policy.Placeholder{Path: filepath.Join(w, ".bashrc")}); err == nil {
		t.Error("a symlink was taken for a placeholder")
	}
	if exists(target) {
		t.Error("the symlink was followed")
	}
}

// BenchmarkAcquireRelease takes and releases the placeholders of the
// default policy's protected names in an empty workdir: what every
// `corral run` in a fresh directory pays.
func BenchmarkAcquireRelease(b *testing.B) {
	w, _ := filepath.EvalSymlinks(b.TempDir())
	r, err := policy.Default().Resolve(policy.Context{Home: "/root", Workdir: w})
	if err != nil {
		b.Fatal(err)
	}
	if len(r.Placeholders) < 10 {
		b.Fatalf("%d placeholders", len(r.Placeholders))
	}
	for b.Loop() {
		s, err := Acquire(r)
		if err != nil {
			b.Fatal(err)
		}
		s.Release()
	}
}

//go:build linux

package policy

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// A placeholder another run holds (or a killed one left) counts as absent,
// so this run holds it too; the same name, filled, is a real file.
func TestLeftoverPlaceholder(t *testing.T) {
	e := newEnv(t)
	p := filepath.Join(e.work, ".bashrc")
	touch(t, p)
	if err := syscall.Setxattr(p, PlaceholderMark, []byte("1"), 0); err != nil {
		t.Skipf("no user xattrs here: %v", err)
	}
	r, err := Default().Resolve(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := grantOf(r, p); ok || !slices.ContainsFunc(r.Placeholders, func(ph Placeholder) bool { return ph.Path == p }) {
		t.Errorf("a marked empty .bashrc is not taken as a placeholder: %+v", r.Placeholders)
	}
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err = Default().Resolve(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := grantOf(r, p); !ok || g.Access != AccessReadOnly {
		t.Errorf("a filled .bashrc is not protected: %+v %v", g, ok)
	}
}

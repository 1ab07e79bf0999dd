//go:build !windows

package mxc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// The state directory must be the caller's: one another uid owns (which
// could plant a link where the lock's temporary file goes, or records) is
// refused. In one of its own, a link planted at the temporary file's name
// is replaced, never written through.
func TestStateDirTrusted(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give the directory to another uid")
	}
	other := t.TempDir()
	if err := os.Chown(other, 54321, 54321); err != nil {
		t.Fatal(err)
	}
	if _, err := (store{dir: other}).lock(context.Background(), "corral-aaaaaaaaaaaa"); err == nil || !strings.Contains(err.Error(), "owned by uid 54321") {
		t.Fatalf("lock in a directory uid 54321 owns: %v", err)
	}
	own := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	st := store{dir: own}
	if err := os.Symlink(victim, fmt.Sprintf("%s.%d.tmp", st.lockPath("corral-aaaaaaaaaaaa"), os.Getpid())); err != nil {
		t.Fatal(err)
	}
	lk, err := st.lock(context.Background(), "corral-aaaaaaaaaaaa")
	if err != nil {
		t.Fatal(err)
	}
	lk.unlock()
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Fatalf("the lock wrote through a planted link: the victim holds %q", b)
	}
}

//go:build unix

package wintask

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// trustedFiles writes a task definition (Write) and an executable (0755)
// in a directory of the test's and returns their paths.
func trustedFiles(t *testing.T) (def, exe string) {
	t.Helper()
	dir := t.TempDir()
	def = Path(dir, "gw")
	if err := Write(def, testXML(t)); err != nil {
		t.Fatal(err)
	}
	exe = filepath.Join(dir, "corral")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(exe, 0o755); err != nil {
		t.Fatal(err)
	}
	return def, exe
}

// Check is quiet about files only the caller can write, and warns for a
// group-writable (or world-writable) executable or definition.
func TestCheckModes(t *testing.T) {
	def, exe := trustedFiles(t)
	if w := Check(def, exe, testSID); len(w) != 0 {
		t.Fatalf("Check of private files = %q, want no warning", w)
	}
	for _, c := range []struct {
		path string
		mode os.FileMode
	}{{exe, 0o775}, {exe, 0o757}, {def, 0o620}} {
		if err := os.Chmod(c.path, c.mode); err != nil {
			t.Fatal(err)
		}
		w := Check(def, exe, testSID)
		if len(w) != 1 || !strings.Contains(w[0], c.path) || !strings.Contains(w[0], "writable") {
			t.Errorf("Check with %s mode %04o = %q, want one warning that it is writable", c.path, c.mode, w)
		}
		if err := os.Chmod(c.path, 0o700); err != nil {
			t.Fatal(err)
		}
	}
}

// Check warns for a missing file, a symlink, and a directory others can
// write.
func TestCheckWarns(t *testing.T) {
	def, exe := trustedFiles(t)
	missing := filepath.Join(filepath.Dir(exe), "missing")
	if w := Check(def, missing, ""); len(w) != 1 || !strings.Contains(w[0], "does not exist") {
		t.Errorf("Check of a missing exe = %q", w)
	}
	link := filepath.Join(filepath.Dir(exe), "link")
	if err := os.Symlink(exe, link); err != nil {
		t.Fatal(err)
	}
	if w := Check(def, link, ""); len(w) != 1 || !strings.Contains(w[0], "symlink") {
		t.Errorf("Check of a symlinked exe = %q", w)
	}
	if err := os.Chmod(filepath.Dir(exe), 0o777); err != nil {
		t.Fatal(err)
	}
	if w := Check(def, exe, ""); len(w) != 2 || !strings.Contains(w[0], "A directory of the task definition") || !strings.Contains(w[1], "A directory of the program") {
		t.Errorf("Check in a world-writable directory = %q, want a warning for each file", w)
	}
}

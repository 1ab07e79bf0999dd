//go:build unix

package wintask

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Write makes the file 0600 whatever the umask, and makes a 0644 file it
// replaces 0600 with the new content only.
func TestWriteMode(t *testing.T) {
	path := Path(t.TempDir(), "gw")
	b := testXML(t)
	if err := Write(path, b); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("after Write: %v, %v; want mode 0600", fi.Mode(), err)
	}
	if err := os.WriteFile(path, bytes.Repeat([]byte("x"), 2*len(b)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, b); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if fi, _ := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 || !bytes.Equal(got, b) {
		t.Errorf("after Write over a 0644 file: mode %v, %d bytes (want 0600, %d bytes: the old tail cut), %v", fi.Mode(), len(got), len(b), err)
	}
}

// Write refuses a symlink at the path and writes nothing through it.
func TestWriteRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := Path(dir, "gw")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	err := Write(path, testXML(t))
	if err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("Write through a symlink = %v, want it refused", err)
	}
	if got, _ := os.ReadFile(target); string(got) != "mine" {
		t.Errorf("the symlink's target now holds %q", got)
	}
}

// Write refuses a file with a second link and one another user owns.
func TestWriteRefusesForeignFiles(t *testing.T) {
	dir := t.TempDir()
	b := testXML(t)
	linked := filepath.Join(dir, "linked.xml")
	if err := os.WriteFile(linked, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(linked, filepath.Join(dir, "other")); err != nil {
		t.Fatal(err)
	}
	if err := Write(linked, b); err == nil || !strings.Contains(err.Error(), "2 hard links") {
		t.Errorf("Write of a file with 2 links = %v, want it refused", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("giving a file another owner needs root")
	}
	foreign := filepath.Join(dir, "foreign.xml")
	if err := os.WriteFile(foreign, []byte("old"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(foreign, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := Write(foreign, b); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("Write of another user's file = %v, want it refused", err)
	}
	if got, _ := os.ReadFile(foreign); string(got) != "old" {
		t.Errorf("the refused file now holds %q", got)
	}
}

// Write refuses data that is not XML's.
func TestWriteRefusesOtherData(t *testing.T) {
	path := Path(t.TempDir(), "gw")
	if err := Write(path, []byte("<Task/>")); err == nil {
		t.Error("Write of UTF-8 text accepted")
	}
	if _, err := os.Lstat(path); err == nil {
		t.Error("a refused Write left a file")
	}
}

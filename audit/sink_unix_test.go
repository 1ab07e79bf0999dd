//go:build !windows

package audit

import (
	"os"
	"path/filepath"
	"testing"
)

// A new log is 0600 (on Windows: an owner-only DACL, TestFileACL).
func TestFileMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode = %v, want 0600", fi.Mode().Perm())
	}
}

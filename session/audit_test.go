package session

import (
	"path/filepath"
	"testing"
)

func TestWithin(t *testing.T) {
	root := filepath.FromSlash("/work/proj")
	for path, want := range map[string]bool{
		"/work/proj":          true,
		"/work/proj/a/b.log":  true,
		"/work/project/x.log": false, // a sibling sharing the prefix
		"/work/..proj":        false,
		"/work":               false,
		"/tmp/x.log":          false,
	} {
		if got := within(filepath.FromSlash(path), root); got != want {
			t.Errorf("within(%q, %q) = %v, want %v", path, root, got, want)
		}
	}
}

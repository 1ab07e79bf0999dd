package policy

import (
	"path/filepath"
	"strings"
)

// Within reports whether path is dir or lies beneath it. It is the one
// containment rule every package uses, lexical (no file-system access, so
// symlinks are the caller's to resolve first), decided by filepath.Rel:
// both are cleaned, so "/a/" is "/a" and "/a/b/.." is "/a"; every absolute
// path is within "/"; "/ab" is not within "/a" (whole components only),
// and "/a/..b" is (a name, not a parent); an empty path or dir, or one
// relative and the other absolute, is never within. On Windows names
// compare case-insensitively and a path on another volume is not within
// (filepath.Rel's rules there).
func Within(path, dir string) bool {
	if path == "" || dir == "" {
		return false
	}
	rel, err := filepath.Rel(dir, path)
	if err != nil {
		return false
	}
	return rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

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
	if filepath.Separator == '/' && cleanAbs(path) && cleanAbs(dir) {
		// What filepath.Rel decides for clean absolute paths, without
		// its cleaning and allocation: mapping a policy compares every
		// mount with every other (a tenth of a run's start-up by Rel).
		return dir == "/" || strings.HasPrefix(path, dir) && (len(path) == len(dir) || path[len(dir)] == '/')
	}
	rel, err := filepath.Rel(dir, path)
	if err != nil {
		return false
	}
	return rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// cleanAbs reports whether p is absolute and unchanged by filepath.Clean
// on a '/'-separated system: no empty, "." or ".." name, no trailing
// slash.
func cleanAbs(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] != '/' {
			continue
		}
		switch rest := p[i+1:]; {
		case rest == "":
			return i == 0 // "/" itself, or a trailing slash
		case rest[0] == '/', rest == "." || strings.HasPrefix(rest, "./"), rest == ".." || strings.HasPrefix(rest, "../"):
			return false
		}
	}
	return true
}

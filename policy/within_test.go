package policy

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// native is an absolute slash path as this platform writes it (on
// Windows on drive C:); others unchanged.
func native(p string) string {
	if runtime.GOOS == "windows" && len(p) > 0 && p[0] == '/' {
		return "C:" + filepath.FromSlash(p)
	}
	return filepath.FromSlash(p)
}

func TestWithin(t *testing.T) {
	for _, c := range []struct {
		path, dir string
		want      bool
	}{
		{"/a", "/a", true},
		{"/a/b/c", "/a", true},
		{"/a/b", "/a/", true},    // a trailing slash on dir
		{"/a/", "/a", true},      // and on path
		{"/a", "/", true},        // everything is within /
		{"/", "/", true},         //
		{"/ab", "/a", false},     // a sibling sharing the prefix
		{"/a/..b", "/a", true},   // a name starting with "..", not a parent
		{"/a/../b", "/a", false}, // cleaned first
		{"/", "/a", false},
		{"/b", "/a", false},
		{"", "/a", false},
		{"/a", "", false},
		{"a/b", "/a", false}, // relative and absolute never compare
		{"/a/b", "a", false},
	} {
		path, dir := native(c.path), native(c.dir)
		if got := Within(path, dir); got != c.want {
			t.Errorf("Within(%q, %q) = %v, want %v", path, dir, got, c.want)
		}
	}
	if runtime.GOOS == "windows" {
		for _, c := range []struct {
			path, dir string
			want      bool
		}{
			{`C:\Users\A\src`, `c:\users\a`, true}, // names compare without case
			{`D:\Users\A`, `C:\Users\A`, false},    // another volume
			{`C:\Users\AB`, `C:\Users\A`, false},
		} {
			if got := Within(c.path, c.dir); got != c.want {
				t.Errorf("Within(%q, %q) = %v, want %v", c.path, c.dir, got, c.want)
			}
		}
	}
}

// A grant of / covers every path (it once covered only "/" itself, so a
// policy granting / read-only was told /usr was not granted).
func TestCoveringRoot(t *testing.T) {
	r := &Resolved{Grants: []PathGrant{{Path: native("/"), Access: AccessReadOnly, Dir: true}, {Path: native("/home/u"), Access: AccessDeny, Dir: true}}}
	if g := r.Covering(native("/usr/bin")); g.Path != native("/") || !r.Visible(native("/usr/bin")) {
		t.Errorf("Covering(/usr/bin) = %+v, want the grant of /", g)
	}
	if r.Visible(native("/home/u/.ssh")) || !r.Visible(native("/home/uv")) {
		t.Error("the deny of /home/u must cover /home/u/.ssh and only that tree")
	}
}

// withinByRel is Within's rule as filepath.Rel decides it, for every
// path: the fast path for clean absolute ones must agree.
func withinByRel(path, dir string) bool {
	if path == "" || dir == "" {
		return false
	}
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

func FuzzWithin(f *testing.F) {
	for _, s := range [][2]string{{"/a/b", "/a"}, {"/ab", "/a"}, {"/a/..b", "/a"}, {"/a", "/"}, {"/", "/a"}, {"/a/./b", "/a"}, {"/a/../b", "/a"}, {"//a", "/a"}, {"/a/", "/a"}, {"a", "/"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, path, dir string) {
		if got, want := Within(path, dir), withinByRel(path, dir); got != want {
			t.Fatalf("Within(%q, %q) = %v, filepath.Rel says %v", path, dir, got, want)
		}
	})
}

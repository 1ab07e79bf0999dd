//go:build !windows

// Linux policies: their paths resolve on a Linux host only (a Windows host
// refuses them). The Windows policy tests are winpath_test.go and
// winresolve_windows_test.go.

package policy

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// findingOf is the message of r's Lint finding about field with the given
// severity, or "".
func findingOf(r *Resolved, sev, field string) string {
	for _, f := range Lint(r) {
		if f.Severity == sev && f.Field == field {
			return f.Message
		}
	}
	return ""
}

// Granting a tree that holds the real home's credentials warns, naming
// them; denying them, or granting one by name, does not.
func TestLintExposedCredentials(t *testing.T) {
	home := t.TempDir()
	for _, d := range []string{".ssh", ".aws"} {
		if err := os.Mkdir(filepath.Join(home, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	r := &Resolved{Home: home, Grants: []PathGrant{{Path: "/usr", Access: AccessReadOnly, Dir: true}}}
	warning := func() string { return findingOf(r, FindingWarning, "filesystem") }
	if w := warning(); w != "" {
		t.Errorf("private home: unexpected warning %q", w)
	}
	r.Grants = append(r.Grants, PathGrant{Path: filepath.Dir(home), Access: AccessReadOnly, Dir: true})
	if w := warning(); w != "" {
		t.Errorf("a tree above the home (the private home covers it): unexpected warning %q", w)
	}
	r.Grants = append(r.Grants, PathGrant{Path: home, Access: AccessReadOnly, Dir: true})
	if w := warning(); !strings.Contains(w, "~/.ssh") || !strings.Contains(w, "~/.aws") {
		t.Errorf("home granted: warning %q, want ~/.ssh and ~/.aws named", w)
	}
	r.Grants = append(r.Grants,
		PathGrant{Path: filepath.Join(home, ".ssh"), Access: AccessDeny, Dir: true},
		PathGrant{Path: filepath.Join(home, ".aws"), Access: AccessReadOnly, Dir: true, Field: "filesystem.read_only[3]"})
	if w := warning(); w != "" {
		t.Errorf(".ssh denied and .aws granted by name: unexpected warning %q", w)
	}
	// $HOME a link to the real home: grants are canonical, the check too.
	link := filepath.Join(t.TempDir(), "home-link")
	if err := os.Symlink(home, link); err != nil {
		t.Fatal(err)
	}
	r.Home = link
	r.Grants = r.Grants[:3] // /usr, the home's parent, the home
	if w := warning(); !strings.Contains(w, "~/.ssh") {
		t.Errorf("home through a link: warning %q, want ~/.ssh named", w)
	}
}

// Without /usr most commands are not found; a grant of / covers it.
func TestLintUsr(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no /usr on Windows")
	}
	r := &Resolved{Home: "/nonexistent", Grants: []PathGrant{{Path: "/etc", Access: AccessReadOnly, Dir: true}}}
	if w := findingOf(r, FindingWarning, "filesystem.read_only"); !strings.Contains(w, "/usr is not granted") {
		t.Errorf("no /usr: warning %q", w)
	}
	for _, g := range []string{"/usr", "/"} {
		r.Grants = []PathGrant{{Path: g, Access: AccessReadOnly, Dir: true}}
		if w := findingOf(r, FindingWarning, "filesystem.read_only"); w != "" {
			t.Errorf("%s granted: unexpected warning %q", g, w)
		}
	}
}

// A protected path absent with its directory (no placeholder) is named;
// a symlinked one is the provider's to report.
func TestLintAbsentProtected(t *testing.T) {
	dir := t.TempDir()
	absent := filepath.Join(dir, "no", ".bashrc")
	link := filepath.Join(dir, ".profile")
	if err := os.Symlink("/etc/hostname", link); err != nil {
		t.Fatal(err)
	}
	r := &Resolved{Home: "/nonexistent", Grants: []PathGrant{{Path: "/usr", Access: AccessReadOnly, Dir: true}}, Skipped: []string{absent, link}}
	if i := findingOf(r, FindingInfo, "filesystem.protected"); !strings.Contains(i, "1 protected paths are absent") || !strings.Contains(i, absent) || strings.Contains(i, link) {
		t.Errorf("info %q, want %s named and not %s", i, absent, link)
	}
}

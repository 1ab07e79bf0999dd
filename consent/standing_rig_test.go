package consent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/policy"
)

// standingAt writes content to the rig's standing file (0600) and
// returns its path.
func (f *rig) standingAt(t *testing.T, content string) string {
	t.Helper()
	p := f.r.Consent.Persist
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

var rigApproved = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func TestStandingAddKeepsCommentsAndDiffs(t *testing.T) {
	f := newRig(t, "")
	a, b := filepath.Join(f.src, "a"), filepath.Join(f.src, "b")
	p := f.standingAt(t, `# my standing grants
grants:
  # the docs, for the build
  - kind: folder
    target: `+a+`
    access: ro # read-only is enough
    approved: 2026-01-01T00:00:00Z
    by: uid 1000
`)
	s, warn, err := OpenStanding(f.r)
	if err != nil {
		t.Fatal(err)
	}
	if warn != "corral: consent: 1 standing grant from "+p {
		t.Errorf("warn %q", warn)
	}
	diff, err := s.Add(KindFolder, b, policy.AccessReadWrite, "uid 1000", rigApproved)
	if err != nil {
		t.Fatal(err)
	}
	want := `--- ` + p + `
+++ ` + p + `
@@ -6,3 +6,8 @@
     access: ro # read-only is enough
     approved: 2026-01-01T00:00:00Z
     by: uid 1000
+  - kind: folder
+    target: ` + b + `
+    access: rw
+    approved: 2026-12-01T10:00:00Z
+    by: uid 1000
`
	if diff != want {
		t.Errorf("diff:\n%s\nwant:\n%s", diff, want)
	}
	data, _ := os.ReadFile(p)
	for _, c := range []string{"# my standing grants", "# the docs, for the build", "# read-only is enough"} {
		if !strings.Contains(string(data), c) {
			t.Errorf("comment %q lost:\n%s", c, data)
		}
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode())
	}
	again, err := LoadStanding(p, f.r)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		target string
		access policy.Access
		want   bool
	}{{a, policy.AccessReadOnly, true}, {a, policy.AccessReadWrite, false}, {b, policy.AccessReadWrite, true}, {b, policy.AccessReadOnly, true}} {
		if got := again.Covers(KindFolder, c.target, c.access); got != c.want {
			t.Errorf("Covers(%s, %s) = %v", c.target, c.access, got)
		}
	}
	if d, err := again.Add(KindFolder, b, policy.AccessReadWrite, "uid 1000", rigApproved); err != nil || d != "" {
		t.Errorf("adding an existing grant: %q %v, want no change", d, err)
	}
}

func TestStandingNewFile(t *testing.T) {
	f := newRig(t, "")
	p := f.r.Consent.Persist
	s, warn, err := OpenStanding(f.r)
	if err != nil || warn != "" || len(s.Entries()) != 0 {
		t.Fatalf("missing file: %v %q %v", s.Entries(), warn, err)
	}
	diff, err := s.Add(KindHost, "api.example.com:443", "", "tty", rigApproved)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(diff, "--- /dev/null\n+++ "+p+"\n") || !strings.Contains(diff, "+grants:\n+  - kind: host\n+    target: api.example.com:443\n") {
		t.Errorf("diff:\n%s", diff)
	}
	if fi, err := os.Stat(filepath.Dir(p)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("directory made: %v %v", fi, err)
	}
	if !s.Covers(KindHost, "api.example.com:443", "") {
		t.Error("the new grant is not read back")
	}
}

func TestStandingIgnoresOutsideCeiling(t *testing.T) {
	f := newRig(t, "")
	p := f.standingAt(t, `grants:
  - {kind: folder, target: `+filepath.Join(f.src, "a")+`}
  - {kind: folder, target: /etc, access: ro}
  - {kind: host, target: "evil.org:443"}
`)
	s, warn, err := OpenStanding(f.r)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Entries()) != 1 || len(s.Ignored()) != 2 {
		t.Fatalf("entries %v ignored %v", s.Entries(), s.Ignored())
	}
	for _, w := range []string{"corral: consent: 3 standing grants from " + p + ", 2 ignored: ", "/etc (ro): ", "(consent.folders.ask)", "evil.org:443: ", "(consent.hosts.ask)"} {
		if !strings.Contains(warn, w) {
			t.Errorf("warn %q lacks %q", warn, w)
		}
	}
	if s.Covers(KindFolder, "/etc", policy.AccessReadOnly) {
		t.Error("an entry outside the ceiling covers a request")
	}
}

func TestStandingHostileFileRefused(t *testing.T) {
	f := newRig(t, "")
	p := f.standingAt(t, "grants: []\n")
	check := func(what, want string) {
		t.Helper()
		_, _, err := OpenStanding(f.r)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error with %q", what, err, want)
		}
	}
	if err := os.Chmod(p, 0o666); err != nil {
		t.Fatal(err)
	}
	check("world-writable", "writable by group or others")
	if err := os.Chmod(p, 0o620); err != nil {
		t.Fatal(err)
	}
	check("group-writable", "writable by group or others")
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(p, 1001, 1001); err != nil {
			t.Fatal(err)
		}
		check("another user's", "belongs to uid 1001")
		if err := os.Chown(p, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	real := p + ".real"
	if err := os.Rename(p, real); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, p); err != nil {
		t.Fatal(err)
	}
	check("symlink", "is a symlink")
	if _, err := (&Standing{Path: p, pol: f.r}).Add(KindFolder, filepath.Join(f.src, "a"), "", "me", rigApproved); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("Add through a symlink: %v", err)
	}
	if data, _ := os.ReadFile(real); string(data) != "grants: []\n" {
		t.Errorf("the symlink's target was written: %q", data)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(real, p); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(p)
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	check("in a world-writable directory", "controlled by another user")
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	f.standingAt(t, "grants:\n  - {kind: folder, taget: /x}\n")
	check("an unknown key", "taget")
}

func TestAlwaysWritesStandingAndAnswersNextSession(t *testing.T) {
	f := newRig(t, "")
	s, _, err := OpenStanding(f.r)
	if err != nil {
		t.Fatal(err)
	}
	b := f.broker(t, Config{Standing: s})
	rigWatch(t, b)
	target := filepath.Join(f.src, "a")
	r, _ := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: target}, Requester{})
	d := rigApprove(r)
	d.Scope = ScopeAlways
	got, err := b.Decide(rigCtx, r.ID, d)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Effective || !strings.Contains(got.Diff, "+    target: "+target+"\n") {
		t.Fatalf("always: %+v", got)
	}
	// The next session, no approver connected: the standing grant answers.
	s2, warn, err := OpenStanding(f.r)
	if err != nil || !strings.Contains(warn, "1 standing grant from") {
		t.Fatalf("%q %v", warn, err)
	}
	b2 := f.broker(t, Config{Standing: s2})
	again, err := b2.Ask(rigCtx, Ask{Kind: KindFolder, Target: target}, Requester{})
	if err != nil {
		t.Fatal(err)
	}
	if again.State != StateApproved || !again.Effective || again.Decision.Scope != ScopeAlways {
		t.Fatalf("next session: %+v", again)
	}
}

func TestAlwaysNeedsStandingFile(t *testing.T) {
	f := newRig(t, "")
	b := f.broker(t, Config{})
	rigWatch(t, b)
	r, _ := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: filepath.Join(f.src, "a")}, Requester{})
	d := rigApprove(r)
	d.Scope = ScopeAlways
	if _, err := b.Decide(rigCtx, r.ID, d); err == nil {
		t.Fatal("always without a standing file accepted")
	}
	if q, _ := b.Get(r.ID); q.State != StatePending {
		t.Fatalf("a refused decision decided: %s", q.State)
	}
}

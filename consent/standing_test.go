package consent

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/corral-sandbox/corral/policy"
)

func TestStandingNone(t *testing.T) {
	for _, r := range []*policy.Resolved{nil, {}, {Consent: &policy.ResolvedConsent{}}} {
		s, warn, err := OpenStanding(r)
		if s != nil || warn != "" || err != nil {
			t.Errorf("OpenStanding(%+v) = %v, %q, %v; want none", r, s, warn, err)
		}
	}
	var s *Standing
	if s.Covers(KindHost, "a.example.com:443", "") || s.Entries() != nil || s.Summary() != "" {
		t.Error("a nil Standing has grants")
	}
	if _, err := s.Add(KindHost, "a.example.com:443", "", "me", rigApproved); err == nil {
		t.Error("Add on a nil Standing")
	}
}

// TestStandingDecodeErrors: a file that is not the grants shape is
// refused with the file, line and column.
func TestStandingDecodeErrors(t *testing.T) {
	f := newRig(t, "")
	for _, c := range []struct{ content, want string }{
		{"grants:\n  - kind: folder\n    taget: /x\n", ":3:5: unknown key \"taget\" in a grant"},
		{"grants:\n  - kind: folder\n    target: /x: y\n", ":3: mapping values are not allowed in this context (not YAML)"},
		{"- kind: folder\n", ":1:1: the top is not a mapping"},
		{"grants: {kind: folder}\n", ":1:9: grants is not a list"},
		{"grants: []\nextra: 1\n", ":2:1: unknown key \"extra\""},
		{"grants:\n  - /x\n", ":2:5: a grant is not a mapping"},
		{"grants:\n  - kind: folder\n    target: [/x]\n", ":3:13: target is not a single value"},
		{"x: &a /x\ngrants:\n  - {kind: folder, target: *a}\n", ":1:1: unknown key \"x\""},
		{"grants:\n  - {kind: folder, target: /x, approved: soon}\n", ":2:5: "},
		{"grants: []\n---\ngrants: []\n", ":2: a second YAML document"},
	} {
		p := f.standingAt(t, c.content)
		_, _, err := OpenStanding(f.r)
		if err == nil || !strings.Contains(err.Error(), p+c.want) {
			t.Errorf("%q: %v, want an error with %q", c.content, err, p+c.want)
		}
	}
	// An alias where a value should be.
	p := f.standingAt(t, "grants:\n  - &e {kind: host, target: \"a.example.com:443\"}\n  - *e\n")
	if _, _, err := OpenStanding(f.r); err == nil || !strings.Contains(err.Error(), p+":3:5: a grant is not a mapping") {
		t.Errorf("alias: %v", err)
	}
}

func TestStandingTooLarge(t *testing.T) {
	f := newRig(t, "")
	head := "grants: []\n"
	f.standingAt(t, head+"#"+strings.Repeat("x", 1<<20-len(head)-2)+"\n")
	if _, _, err := OpenStanding(f.r); err != nil {
		t.Fatalf("a file of exactly 1 MiB: %v", err)
	}
	p := f.standingAt(t, head+"#"+strings.Repeat("x", 1<<20-len(head)-1)+"\n")
	if _, _, err := OpenStanding(f.r); err == nil || !strings.Contains(err.Error(), p+" is larger than 1 MiB") {
		t.Errorf("1 MiB + 1: %v", err)
	}
}

// TestStandingGoneAndMalformedIgnored: entries are ignored, each said,
// and the file is not refused.
func TestStandingGoneAndMalformedIgnored(t *testing.T) {
	f := newRig(t, "")
	gone := filepath.Join(f.src, "gone")
	if err := os.Mkdir(gone, 0o755); err != nil {
		t.Fatal(err)
	}
	a := filepath.Join(f.src, "a")
	p := f.standingAt(t, `grants:
  - {kind: folder, target: `+gone+`, access: rw}
  - {kind: folder, target: `+a+`/../a}
  - {kind: host, target: "a.example.com:443", access: ro}
  - {kind: host, target: "b.example.com"}
  - {kind: command, target: ls}
  - {kind: host, target: "c.example.com:443"}
`)
	s, _, err := OpenStanding(f.r)
	if err != nil || !s.Covers(KindFolder, gone, policy.AccessReadWrite) {
		t.Fatalf("before: %v %v", s.Ignored(), err)
	}
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	s, warn, err := OpenStanding(f.r)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"folder " + gone + " (rw): gone",
		"folder " + a + "/../a (ro): ",
		`host a.example.com:443 (ro): not "host:port" without access`,
		`host b.example.com: not "host:port" without access`,
		`command ls: kind "command" is not folder or host`,
	}
	if ig := s.Ignored(); len(ig) != len(want) {
		t.Fatalf("ignored %q", ig)
	} else {
		for i, w := range want {
			if !strings.HasPrefix(ig[i], w) {
				t.Errorf("ignored[%d] = %q, want %q...", i, ig[i], w)
			}
		}
	}
	if !strings.HasPrefix(warn, fmt.Sprintf("corral: consent: 6 standing grants from %s, 5 ignored: folder %s (rw): gone", p, gone)) {
		t.Errorf("warn %q", warn)
	}
	if s.Covers(KindFolder, gone, policy.AccessReadWrite) || s.Covers(KindFolder, gone, policy.AccessReadOnly) || !s.Covers(KindHost, "c.example.com:443", "") {
		t.Errorf("entries %v", s.Entries())
	}
}

func TestStandingCovers(t *testing.T) {
	f := newRig(t, "")
	a, b := filepath.Join(f.src, "a"), filepath.Join(f.src, "b")
	f.standingAt(t, `grants:
  - {kind: folder, target: `+a+`, access: rw}
  - {kind: folder, target: `+b+`}
  - {kind: host, target: "a.example.com:443"}
`)
	s, _, err := OpenStanding(f.r)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		k      Kind
		target string
		access policy.Access
		want   bool
	}{
		{KindFolder, a, policy.AccessReadWrite, true},
		{KindFolder, a, policy.AccessReadOnly, true}, // rw covers ro
		{KindFolder, b, policy.AccessReadOnly, true}, // access ro when not written
		{KindFolder, b, policy.AccessReadWrite, false},
		{KindFolder, filepath.Join(a, "sub"), policy.AccessReadOnly, false}, // the same target, not one inside
		{KindHost, a, policy.AccessReadOnly, false},                         // the same kind
		{KindHost, "a.example.com:443", "", true},
		{KindHost, "a.example.com:80", "", false},
		{KindFolder, "a.example.com:443", policy.AccessReadOnly, false},
	} {
		if got := s.Covers(c.k, c.target, c.access); got != c.want {
			t.Errorf("Covers(%s, %s, %s) = %v, want %v", c.k, c.target, c.access, got, c.want)
		}
	}
}

// TestStandingAddCovered: an entry valid now that covers the grant means
// no write; one the ceiling no longer allows does not count.
func TestStandingAddCovered(t *testing.T) {
	f := newRig(t, "")
	a := filepath.Join(f.src, "a")
	content := "grants:\n  - {kind: folder, target: " + a + ", access: rw}\n"
	p := f.standingAt(t, content)
	s, _, err := OpenStanding(f.r)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := s.Add(KindFolder, a, policy.AccessReadOnly, "me", rigApproved); d != "" || err != nil {
		t.Errorf("ro under a standing rw: %q %v, want no change", d, err)
	}
	if data, _ := os.ReadFile(p); string(data) != content {
		t.Errorf("written:\n%s", data)
	}

	// The same file under a read-only ceiling: the rw entry is ignored,
	// so ro is written.
	ro := newRig(t, strings.Replace(rigPolicy, "    access: rw\n", "", 1))
	a = filepath.Join(ro.src, "a")
	ro.standingAt(t, "grants:\n  - {kind: folder, target: "+a+", access: rw}\n")
	s, warn, err := OpenStanding(ro.r)
	if err != nil || !strings.Contains(warn, "1 ignored: folder "+a+" (rw): read-write is above the ceiling") {
		t.Fatalf("%q %v", warn, err)
	}
	d, err := s.Add(KindFolder, a, policy.AccessReadOnly, "me", rigApproved)
	if err != nil || !strings.Contains(d, "+  - kind: folder\n+    target: "+a+"\n+    access: ro\n") {
		t.Fatalf("ro beside an ignored rw: %v\n%s", err, d)
	}
	if !s.Covers(KindFolder, a, policy.AccessReadOnly) || s.Covers(KindFolder, a, policy.AccessReadWrite) {
		t.Errorf("after: %v", s.Entries())
	}
	if _, err := s.Add(KindFolder, a, policy.AccessReadWrite, "me", rigApproved); err == nil || !strings.Contains(err.Error(), "consent.folders.access") {
		t.Errorf("Add above the ceiling: %v", err)
	}
}

// TestStandingNewFileHeader: a file Add makes says what it is, that
// corral wrote it, and reads back.
func TestStandingNewFileHeader(t *testing.T) {
	f := newRig(t, "")
	p := f.r.Consent.Persist
	s, _, err := OpenStanding(f.r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Add(KindHost, "a.example.com:443", "", "tty", rigApproved); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitN(string(data), "\n", 5)
	if !strings.HasPrefix(lines[0], "# Corral's standing consent grants") || !strings.HasPrefix(lines[1], "# Written by corral") || lines[2] != "" || lines[3] != "grants:" {
		t.Errorf("new file:\n%s", data)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode: %v %v", fi, err)
	}
	// A grants: with no value, and a flow [], grow as block lists.
	for _, c := range []string{"# mine\ngrants:\n", "grants: [] # none yet\n"} {
		if err := os.WriteFile(p, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Add(KindHost, "b.example.com:443", "", "tty", rigApproved); err != nil {
			t.Fatalf("%q: %v", c, err)
		}
		data, _ := os.ReadFile(p)
		if !bytes.Contains(data, []byte("\n  - kind: host\n    target: b.example.com:443\n")) || bytes.Contains(data, []byte("Written by corral")) {
			t.Errorf("%q became:\n%s", c, data)
		}
		if first := strings.SplitN(c, "\n", 2)[0]; !bytes.Contains(data, []byte(strings.TrimPrefix(strings.TrimPrefix(first, "grants: [] "), "grants:"))) {
			t.Errorf("%q: comment lost:\n%s", c, data)
		}
	}
}

// TestStandingConcurrentAdd: Adds from several goroutines all land (the
// read-modify-write is under the Standing's lock).
func TestStandingConcurrentAdd(t *testing.T) {
	f := newRig(t, "")
	s, _, err := OpenStanding(f.r)
	if err != nil {
		t.Fatal(err)
	}
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Add(KindHost, fmt.Sprintf("h%d.example.com:443", i), "", "tty", rigApproved); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	back, err := LoadStanding(f.r.Consent.Persist, f.r)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(back.Entries()); got != n {
		t.Errorf("%d entries read back, want %d", got, n)
	}
	for i := range n {
		if !back.Covers(KindHost, fmt.Sprintf("h%d.example.com:443", i), "") {
			t.Errorf("h%d lost", i)
		}
	}
}

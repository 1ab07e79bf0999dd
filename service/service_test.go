//go:build linux

package service

import (
	"archive/tar"
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestStartSpecValidate(t *testing.T) {
	ok := StartSpec{Command: []string{"gw"}, Restart: "always", ReadyHTTP: "http://127.0.0.1:8/readyz",
		Publish: []Publish{{Host: "127.0.0.1:18789", Port: 18789}, {Host: "[::1]:1", Port: 2}}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid spec: %v", err)
	}
	for name, mut := range map[string]func(*StartSpec){
		"no command":        func(s *StartSpec) { s.Command = nil },
		"restart":           func(s *StartSpec) { s.Restart = "sometimes" },
		"publish 0.0.0.0":   func(s *StartSpec) { s.Publish = []Publish{{Host: "0.0.0.0:80", Port: 80}} },
		"publish host name": func(s *StartSpec) { s.Publish = []Publish{{Host: "localhost:80", Port: 80}} },
		"inner port":        func(s *StartSpec) { s.Publish = []Publish{{Host: "127.0.0.1:80", Port: 70000}} },
		"ready URL remote":  func(s *StartSpec) { s.ReadyHTTP = "http://10.0.0.1/readyz" },
		"ready URL https":   func(s *StartSpec) { s.ReadyHTTP = "https://127.0.0.1/readyz" },
		"ready URL port":    func(s *StartSpec) { s.ReadyHTTP = "http://127.0.0.1:99999/readyz" },
		"ready URL garbage": func(s *StartSpec) { s.ReadyHTTP = "http://[::1" },
		"published twice":   func(s *StartSpec) { s.Publish = append(s.Publish, s.Publish[0]) },
		"ready port":        func(s *StartSpec) { s.ReadyPort = -1 },
		"negative grace":    func(s *StartSpec) { s.StopGrace = -1 },
	} {
		s := ok
		s.Publish = append([]Publish(nil), ok.Publish...)
		mut(&s)
		if err := s.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// The host-side readiness probe never follows the workload's redirects.
func TestCheckDoesNotFollowRedirects(t *testing.T) {
	var elsewhere int
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere++ }))
	defer target.Close()
	wl := httptest.NewServer(http.RedirectHandler(target.URL+"/?k=secret", http.StatusFound))
	defer wl.Close()
	r := Check(&StartSpec{ReadyHTTP: wl.URL + "/readyz"}, nil)
	if r.OK || elsewhere != 0 {
		t.Fatalf("probe: ok=%v (%s), the redirect target was reached %d times", r.OK, r.Detail, elsewhere)
	}
}

// An import writes only inside the home, whatever the entries say, and
// gives implied parent directories to the agent.
func TestExtractHomeStaysInside(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body string) {
		h.Size = int64(len(body))
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(tw, body)
	}
	add(&tar.Header{Name: "home/../escaped-dotdot"}, "x")
	add(&tar.Header{Name: "home//etc/../../escaped2"}, "x")
	add(&tar.Header{Name: "home/link", Typeflag: tar.TypeSymlink, Linkname: dir}, "")
	add(&tar.Header{Name: "home/link/escaped-link"}, "x")
	add(&tar.Header{Name: "home/a/b/deep"}, "kept")
	add(&tar.Header{Name: "home/ww", Mode: 0o777}, "w")
	tw.Close()
	err := extractHome(tar.NewReader(&buf), home, os.Getuid(), os.Getgid())
	if err == nil || !strings.Contains(err.Error(), "link/escaped-link") {
		t.Errorf("writing through a symlink out of the home: %v", err)
	}
	for _, f := range []string{"escaped-dotdot", "escaped2", "escaped-link"} {
		if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
			t.Errorf("%s was written outside the home", f)
		}
	}
	// The entries before the refused one landed inside.
	if _, err := os.Stat(filepath.Join(home, "escaped-dotdot")); err != nil {
		t.Errorf("home/../escaped-dotdot is not kept inside the home: %v", err)
	}
}

func TestExtractHomeModes(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range []struct {
		name string
		mode int64
	}{{"home/a/b/deep", 0o644}, {"home/ww", 0o777}} {
		_ = tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: tar.TypeReg, Mode: e.mode, Size: 1})
		tw.Write([]byte("x"))
	}
	tw.Close()
	if err := extractHome(tar.NewReader(&buf), home, os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{"a": 0o700, "a/b": 0o700, "a/b/deep": 0o644, "ww": 0o755} {
		fi, err := os.Stat(filepath.Join(home, p))
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, mode %v, want %v", p, err, fi.Mode().Perm(), want)
		}
	}
}

// No directory on the way to the base may be another user's or a symlink.
func TestEnsureBase(t *testing.T) {
	dir := t.TempDir()
	closed := filepath.Join(dir, "closed")
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, filepath.Dir(dir)} { // testing makes them 0700
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := ensureBase(filepath.Join(dir, "svc")); err != nil {
		t.Fatalf("a fresh base: %v", err)
	}
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o777)
	if err := ensureBase(filepath.Join(open, "svc")); err == nil {
		t.Error("accepted a base under a world-writable directory")
	}
	if _, err := os.Lstat(filepath.Join(open, "svc")); err == nil {
		t.Error("a refused base was created anyway")
	}
	if err := ensureBase(filepath.Join(closed, "svc")); (err == nil) != (os.Getuid() != 0) {
		t.Errorf("a base under a 0700 directory (agent users cannot get through as root): %v", err)
	}
	if err := os.Symlink(filepath.Join(dir, "svc"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := ensureBase(filepath.Join(dir, "link")); err == nil {
		t.Error("accepted a base that is a symlink")
	}
}

func TestUnitTextQuotesAndExecPath(t *testing.T) {
	rec := &Record{Name: "gw", Dir: "/var/lib/corral/services/gw"}
	for _, exe := range []string{"/usr/local/bin/corral", `/opt/my tools/corral "x"`} {
		text := UnitText(rec, exe, "multi-user.target")
		var got string
		for _, line := range strings.Split(text, "\n") {
			if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
				got = execPath(v)
			}
		}
		if got != exe {
			t.Errorf("ExecStart program %q, want %q\n%s", got, exe, text)
		}
	}
}

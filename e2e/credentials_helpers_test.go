//go:build linux

package e2e

// Fixtures for the credential tests (credentials_test.go): real values
// that exist only in corral's environment (a credential's source) and in
// the origins' checks, never in the sandbox; a record of what credentials
// the origins received; one run that asserts no form of a real value
// reached the sandbox's output, its workdir, corral's stderr or the audit
// log; and the audit's Detection Findings.

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// secretFile writes v to a fresh file of id's (0600), outside every
// grant: a credential's file source.
func secretFile(t *testing.T, id *ident, v string) string {
	t.Helper()
	f := filepath.Join(mkdir(t, id, "secret"), "value")
	writeFile(t, id, f, v+"\n", 0o600)
	return f
}

// realValue is a fresh secret: prefix and 32 hex digits.
func realValue(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// valueForms are the encodings of v a leak could take, raw first:
// base64 (both alphabets, padded or not), percent-encoded (query and
// path) and JSON-escaped (Go's encoder, with and without HTML escaping).
// Forms equal to an earlier one are left out.
func valueForms(v string) [][2]string {
	j, _ := json.Marshal(v)
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	all := [][2]string{
		{"raw", v},
		{"base64", base64.StdEncoding.EncodeToString([]byte(v))},
		{"base64-raw", base64.RawStdEncoding.EncodeToString([]byte(v))},
		{"base64url", base64.RawURLEncoding.EncodeToString([]byte(v))},
		{"percent", url.QueryEscape(v)},
		{"path", url.PathEscape(v)},
		{"json", string(j[1 : len(j)-1])},
		{"json-nohtml", strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(b.String()), `"`), `"`)},
	}
	var out [][2]string
	for _, f := range all {
		if !slices.ContainsFunc(out, func(o [2]string) bool { return o[1] == f[1] }) {
			out = append(out, f)
		}
	}
	return out
}

// leakIn returns the name of the first form of a secret in s ("" none).
func leakIn(s string, secrets ...string) string {
	for i, v := range secrets {
		for _, f := range valueForms(v) {
			if f[1] != "" && strings.Contains(s, f[1]) {
				return fmt.Sprintf("secret %d (%s)", i, f[0])
			}
		}
	}
	return ""
}

// assertNoLeak fails when a form of a secret is in what, a text from where.
func assertNoLeak(t *testing.T, where, what string, secrets ...string) {
	t.Helper()
	if l := leakIn(what, secrets...); l != "" {
		t.Errorf("%s holds %s", where, l)
	}
}

// assertTreeNoLeak walks dir (the sandbox's workdir) for a form of a
// secret in any file.
func assertTreeNoLeak(t *testing.T, dir string, secrets ...string) {
	t.Helper()
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || !fi.Mode().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err == nil {
			assertNoLeak(t, "the sandbox's file "+p, string(b), secrets...)
		}
		return nil
	})
}

// seenLog records credentials as an origin received them, by label.
type seenLog struct {
	mu   sync.Mutex
	seen []string // "label value"
}

func (s *seenLog) add(label, v string) {
	s.mu.Lock()
	s.seen = append(s.seen, label+" "+v)
	s.mu.Unlock()
}

func (s *seenLog) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

// get is what the origin received under label (the first), and whether
// it received anything.
func (s *seenLog) get(label string) (string, bool) {
	for _, l := range s.all() {
		if v, ok := strings.CutPrefix(l, label+" "); ok {
			return v, true
		}
	}
	return "", false
}

// credRun is one corral run of a credential test.
type credRun struct {
	id      *ident
	net     string   // the network lines (qualify.InspectNet)
	creds   string   // the credentials section's lines
	env     []string // corral's environment: the sources' variables
	ro      []string
	envPass []string // process.env.pass (nil: the default)
	flags   []string
	script  string
	// secrets are the real values: no form of one may reach the
	// sandbox's output or workdir, corral's stderr or the audit log.
	secrets []string
	timeout time.Duration
	wd      string // the workdir ("": a fresh one)
}

// credResult is a credRun's outcome: the run, its workdir and its audit
// file.
type credResult struct {
	result
	wd, audit string
}

// runCred runs c with --audit and checks no secret escaped: the script
// first dumps its environment and that of every process it can see
// (corral's init inside the sandbox among them) into the workdir, so a
// value passed in an environment is caught too.
func runCred(t *testing.T, c credRun) credResult {
	t.Helper()
	wd := c.wd
	if wd == "" {
		wd = mkdir(t, c.id, "cred")
		if slices.Contains(c.flags, "docker") {
			handOver(t, c.id, wd)
		}
	}
	logf := filepath.Join(mkdir(t, c.id, "cred-audit"), "audit.jsonl")
	pol := writePolicy(t, c.id, policy{RO: c.ro, Network: "proxy", NetRules: c.net, Credentials: c.creds, EnvPass: c.envPass})
	if c.timeout == 0 {
		c.timeout = 120 * time.Second
	}
	res := corral(t, run{id: c.id, policy: pol, workdir: wd, env: c.env, flags: append([]string{"--audit", logf}, c.flags...),
		args: sh("env > .env.dump; for e in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $e; done > .environ.dump 2>/dev/null; " + c.script), timeout: c.timeout})
	if !exists(filepath.Join(wd, ".env.dump")) && res.code == 0 {
		t.Errorf("the sandbox's environment was not dumped: the leak checks saw nothing\n%s", res)
	}
	assertNoLeak(t, "the sandbox's output", res.stdout, c.secrets...)
	assertNoLeak(t, "corral's stderr", res.stderr, c.secrets...)
	if b, err := os.ReadFile(logf); err == nil {
		assertNoLeak(t, "the audit log", string(b), c.secrets...)
	}
	assertTreeNoLeak(t, wd, c.secrets...)
	return credResult{res, wd, logf}
}

// finding is a Detection Finding (class 2004) of an audit file: its
// line, parsed and raw.
type finding struct {
	m   map[string]any
	raw string
}

// credFindings reads the Detection Findings of an audit file that are
// about credentials (their raw JSON mentions "credential").
func credFindings(t *testing.T, path string) []finding {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}
	defer f.Close()
	var out []finding
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("audit line is not JSON: %v: %s", err, sc.Text())
		}
		if c, _ := m["class_uid"].(float64); c == 2004 && strings.Contains(sc.Text(), "credential") {
			out = append(out, finding{m, sc.Text()})
		}
	}
	return out
}

// wantFinding checks that a credential finding names the credential,
// the kind (egress.FindingKind's text) and host, and holds neither the
// value nor the placeholder; it returns the number that do.
func wantFinding(t *testing.T, fs []finding, name, kind, host string, secret, placeholder string) int {
	t.Helper()
	n := 0
	for _, f := range fs {
		if strings.Contains(f.raw, secret) || placeholder != "" && strings.Contains(f.raw, placeholder) {
			t.Errorf("a finding holds the credential's value or placeholder: %s", f.raw)
		}
		if strings.Contains(f.raw, `"`+name+`"`) && strings.Contains(f.raw, kind) && strings.Contains(f.raw, host) {
			n++
		}
	}
	if n == 0 {
		var all []string
		for _, f := range fs {
			all = append(all, f.raw)
		}
		t.Errorf("no %s finding naming credential %q and %s in the audit log; credential findings:\n%s", kind, name, host, strings.Join(all, "\n"))
	}
	return n
}

// who says what a received credential was, without printing a value:
// "real", "placeholder", "none" or "other (N bytes)".
func who(got, real, placeholder string) string {
	switch {
	case got == real:
		return "real"
	case placeholder != "" && got == placeholder:
		return "placeholder"
	case got == "":
		return "none"
	}
	return fmt.Sprintf("other (%d bytes)", len(got))
}

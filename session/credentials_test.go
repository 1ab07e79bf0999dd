package session

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/audit"
	"github.com/corral-sandbox/corral/egress"
	"github.com/corral-sandbox/corral/internal/testworkload"
	"github.com/corral-sandbox/corral/internal/wine"
	"github.com/corral-sandbox/corral/policy"
)

// credPolicy resolves a policy with one credential whose source is src
// (YAML flow mapping), written to a file in dir.
func credPolicy(t *testing.T, dir, src string) *policy.Resolved {
	t.Helper()
	y := `version: 1
filesystem: {include_workdir: false}
network:
  mode: proxy
  allow: [{host: api.a.test, tls: inspect}]
credentials:
  - name: tok
    source: ` + src + `
    expose: {env: TOKEN}
    endpoints: [{host: api.a.test}]
`
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	wd := t.TempDir()
	r, err := p.Resolve(policy.Context{Home: t.TempDir(), Workdir: wd})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// command is a source {command: [...]} running testworkload's steps (this
// test binary: no shell, so alike on Windows).
func command(steps ...string) string {
	var q []string
	for _, a := range testworkload.Args(steps...) {
		q = append(q, "'"+strings.ReplaceAll(a, "'", "''")+"'")
	}
	return "{command: [" + strings.Join(q, ", ") + "]}"
}

func TestCredentialSources(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "key")
	os.WriteFile(file, []byte("  file-value-123456\n"), 0o600)
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("abc"), 0o600)
	for _, c := range []struct{ src, want, err string }{
		{src: `{env: TOK_SRC}`, want: "env-value-123456"},
		{src: `{env: TOK_UNSET}`, err: "credentials[0] (tok): source env TOK_UNSET is not set"},
		{src: `{file: ` + file + `}`, want: "file-value-123456"},
		{src: `{file: ` + short + `}`, err: "shorter than 8 bytes"},
		{src: command("outln=cmd-value-123456"), want: "cmd-value-123456"},
		{src: command("errln=oops", "exit=3"), err: "source command " + testworkload.Args()[0] + " failed: exit status 3: oops"},
		{src: command("outln=echoed-value-123", "errln=bad echoed-value-123", "exit=1"), err: "exit status 1: bad [REDACTED]"},
		{src: strings.TrimSuffix(command("sleep=5s"), "}") + ", timeout: 200ms}", err: "did not finish within 200ms"},
		{src: command("outln=a-long-value", "out=second-line"), err: "line break"},
		{src: `{stored: true}`, err: "no value was given"},
	} {
		r := credPolicy(t, t.TempDir(), c.src)
		start := time.Now()
		cs, values, err := loadCredentials(context.Background(), r, []string{"TOK_SRC=env-value-123456"}, nil, nil)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want %q", c.src, err, c.err)
			}
			if time.Since(start) > 3*time.Second {
				t.Errorf("%s: the timeout did not hold", c.src)
			}
			continue
		}
		if err != nil || len(values) == 0 || values[0] != c.want || cs.list[0].Placeholder != r.Credentials[0].Placeholder {
			t.Errorf("%s: %v %q", c.src, err, values)
		}
	}
}

// TestCredentialFileSwappedForSymlink: a source file replaced by a
// symlink after the policy was resolved is not followed.
func TestCredentialFileSwappedForSymlink(t *testing.T) {
	wine.SkipArtifact(t, wine.NoSymlinks)
	dir := t.TempDir()
	file := filepath.Join(dir, "key")
	os.WriteFile(file, []byte("file-value-123456"), 0o600)
	r := credPolicy(t, t.TempDir(), `{file: `+file+`}`)
	other := filepath.Join(dir, "other")
	os.WriteFile(other, []byte("someone-elses-secret"), 0o600)
	os.Remove(file)
	os.Symlink(other, file)
	if _, _, err := loadCredentials(context.Background(), r, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("symlink followed: %v", err)
	}
}

// TestCredentialPolicyInWritableGrant: the workload could rewrite a
// policy inside a read-write grant, and with it the commands corral runs.
func TestCredentialPolicyInWritableGrant(t *testing.T) {
	dir := t.TempDir()
	r := credPolicy(t, dir, `{env: TOK_SRC}`)
	real, _ := filepath.EvalSymlinks(dir)
	r.Grants = append(r.Grants, policy.PathGrant{Path: real, Access: policy.AccessReadWrite, Dir: true, Field: "filesystem.read_write[0]"})
	if _, _, err := loadCredentials(context.Background(), r, []string{"TOK_SRC=env-value-123456"}, nil, nil); err == nil || !strings.Contains(err.Error(), "could change the sources") {
		t.Fatalf("policy in a read-write grant: %v", err)
	}
}

// TestCredentialValuesNeverLogged: the audit log redacts a session's
// values, also after a rotation, and caps the findings it writes.
func TestCredentialValuesNeverLogged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	log, err := audit.OpenLog(path, audit.LogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := &Session{cfg: Config{Log: log}, stats: &egressStats{}, creds: &credentials{list: []*egress.Credential{{Name: "tok"}}, expires: map[string]time.Time{}, revoked: map[string]bool{}}}
	log.Redact("first-value-123")
	if err := s.SetCredential("tok", "second/value<456>", time.Time{}); err != nil {
		t.Fatal(err)
	}
	log.Emit(audit.NotLaunched(audit.RunInfo{}, audit.Proc{CmdLine: []string{"curl", "-H", "X: first-value-123", "second/value<456>"}}, "x"))
	for i := 0; i < maxFindings+5; i++ {
		s.recordFinding(egress.CredentialFinding{Kind: egress.FindingMismatch, Credential: "tok", Host: "h.test", Port: 443, Where: "body", Action: "forwarded"})
	}
	log.Close()
	b, _ := os.ReadFile(path)
	if strings.Contains(string(b), "first-value-123") || strings.Contains(string(b), "second/value") || !strings.Contains(string(b), audit.Redacted) {
		t.Fatalf("a value was written:\n%s", b)
	}
	if n := strings.Count(string(b), `"class_uid":2004`); n != maxFindings {
		t.Fatalf("%d findings written, want %d", n, maxFindings)
	}
	if !strings.Contains(string(b), "the rest are counted") {
		t.Fatal("the cap was not noted")
	}
	if err := s.SetCredential("tok", "short", time.Time{}); err == nil {
		t.Fatal("a short value was taken")
	}
	if err := s.SetCredential("nope", "long-enough-value", time.Time{}); err == nil {
		t.Fatal("an unknown credential was taken")
	}
}

// TestCredentialStatesBeforeTheProxy: a stored revocation is in force
// from the start (its source is not even read), an expiry too.
func TestCredentialStatesBeforeTheProxy(t *testing.T) {
	r := credPolicy(t, t.TempDir(), `{env: TOK_UNSET}`)
	cs, _, err := loadCredentials(context.Background(), r, nil, nil, map[string]CredentialState{"tok": {Revoked: true}})
	if err != nil || !cs.revoked["tok"] {
		t.Fatalf("revoked: %v %+v", err, cs)
	}
	r = credPolicy(t, t.TempDir(), `{env: TOK_SRC}`)
	past := time.Now().Add(-time.Minute)
	cs, _, err = loadCredentials(context.Background(), r, []string{"TOK_SRC=env-value-123456"}, nil, map[string]CredentialState{"tok": {Expires: past}})
	if err != nil || !cs.expires["tok"].Equal(past) {
		t.Fatalf("expired: %v %+v", err, cs)
	}
	s := &Session{creds: cs}
	if st := s.Credentials(); len(st) != 1 || st[0].State != "expired" {
		t.Fatalf("status %+v", st)
	}
}

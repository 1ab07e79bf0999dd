package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/audit"
	"github.com/corral-sandbox/corral/egress"
	"github.com/corral-sandbox/corral/internal/headbuf"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// A session's credentials: the values are read from their sources here,
// outside the sandbox, when the session opens (a service's workload gets
// a new session, so a restart reads them again), and live only in this
// process's memory, in the proxy's egress.Credential. The sandbox has
// the placeholders (policy.Resolve put them in its environment, the
// provider in its files). The audit log is told the values, so that no
// event ever carries one.

// MaxCredentialBytes bounds a credential's value (bytes).
const MaxCredentialBytes = 64 << 10

// minCredentialBytes is the shortest value taken: the reflection guard
// looks for the value and its encodings in responses, and a shorter one
// would be found in ordinary text.
const minCredentialBytes = 8

// CredentialStatus is one credential's state, for status output: never
// its value.
type CredentialStatus struct {
	Name    string    `json:"name"`
	Source  string    `json:"source"` // env, file, command, stored
	State   string    `json:"state"`  // active, revoked, expired
	Expires time.Time `json:"expires,omitzero"`
}

// CredentialState is a credential's revocation and expiry (Config).
type CredentialState struct {
	Revoked bool
	Expires time.Time // zero: none
}

// credentials are a session's egress credentials with their state.
type credentials struct {
	mu      sync.Mutex
	list    []*egress.Credential
	res     []policy.ResolvedCredential
	expires map[string]time.Time
	revoked map[string]bool
}

// loadCredentials reads the value of each of r's credentials from its
// source (environ for env, secrets for stored) and returns the forms of
// the values the audit log must redact, refusing, with an error
// naming the credential, one that is missing, empty, too long, not one
// line, or shorter than minCredentialBytes, and every credential of a
// policy the workload could rewrite (its file inside a read-write grant:
// a source is a command corral runs, or a file it reads, on the host).
func loadCredentials(ctx context.Context, r *policy.Resolved, environ []string, secrets map[string]string, states map[string]CredentialState) (*credentials, []string, error) {
	if len(r.Credentials) == 0 {
		return nil, nil, nil
	}
	if src := r.Policy.Source(); src != "" {
		p := src
		if real, err := filepath.EvalSymlinks(src); err == nil {
			p = real
		}
		if g := r.Covering(p); g.Access == policy.AccessReadWrite {
			return nil, nil, provider.Errorf(provider.CodePolicyRejected, "credentials: the policy file %s is inside the read-write grant %s (%s), so the workload could change the sources corral reads and the commands it runs on the host: keep the policy outside every read-write grant", src, g.Path, g.Field)
		}
	}
	cs := &credentials{res: r.Credentials, expires: map[string]time.Time{}, revoked: map[string]bool{}}
	var values []string
	for _, rc := range r.Credentials {
		c := &egress.Credential{Name: rc.Name, Placeholder: rc.Placeholder, Deny: rc.OnMismatch != policy.MismatchForward}
		for _, ep := range rc.Endpoints {
			c.Bindings = append(c.Bindings, binding(ep))
		}
		cs.list = append(cs.list, c)
		st := states[rc.Name]
		if st.Revoked {
			c.Revoke()
			cs.revoked[rc.Name] = true
			continue
		}
		v, err := readSource(ctx, rc, environ, secrets)
		if err == nil {
			err = CheckCredentialValue(v)
		}
		if err != nil {
			return nil, nil, provider.Errorf(provider.CodePolicyRejected, "%s (%s): %v", rc.Field, rc.Name, err)
		}
		c.SetValue(v, st.Expires)
		cs.expires[rc.Name] = st.Expires
		values = append(values, egress.ValueForms(v)...)
	}
	return cs, values, nil
}

// binding is a resolved endpoint (its defaults written out) as the
// proxy takes it.
func binding(ep policy.CredentialEndpoint) egress.Binding {
	b := egress.Binding{Host: ep.Host, Ports: ep.Ports, Path: ep.Path, Basic: ep.Basic, Query: ep.Query}
	if name, tmpl, ok := strings.Cut(ep.Header, ":"); ok {
		b.Header, b.Template = strings.TrimSpace(name), strings.TrimSpace(tmpl)
	}
	if ep.Body != nil {
		b.BodyMax = int64(ep.Body.Max)
	}
	return b
}

// readSource reads rc's value from its source.
func readSource(ctx context.Context, rc policy.ResolvedCredential, environ []string, secrets map[string]string) (string, error) {
	s := rc.Source
	switch {
	case s.Env != "":
		for _, kv := range environ {
			if k, v, ok := strings.Cut(kv, "="); ok && k == s.Env {
				if strings.TrimSpace(v) == "" {
					return "", fmt.Errorf("source env %s is set but empty", s.Env)
				}
				return strings.TrimSpace(v), nil
			}
		}
		return "", fmt.Errorf("source env %s is not set in corral's environment: export it before corral starts", s.Env)
	case s.File != "":
		path := rc.SourceFile
		if path == "" {
			path = s.File
		}
		b, err := readFileNoFollow(path)
		if err != nil {
			return "", fmt.Errorf("source file: %v", err)
		}
		return strings.TrimSpace(string(b)), nil
	case len(s.Command) > 0:
		return runSource(ctx, s)
	case s.Stored:
		v, ok := secrets[rc.Name]
		if !ok {
			return "", fmt.Errorf("source stored: no value was given (corral sandbox create --credential %s=env:VAR|file:PATH|-); only corral gateway stores credentials", rc.Name)
		}
		return v, nil
	}
	return "", errors.New("no source")
}

// readFileNoFollow reads at most MaxCredentialBytes of a regular file
// that is path itself, not a symlink's target (the path was made
// canonical when the policy was resolved: one that is a symlink now was
// changed since).
func readFileNoFollow(path string) ([]byte, error) {
	if li, err := os.Lstat(path); err != nil {
		return nil, err
	} else if li.Mode()&os.ModeSymlink != 0 {
		return nil, fmt.Errorf("%s is a symlink now", path)
	} else if !li.Mode().IsRegular() { // a FIFO would block the open
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if li, err := os.Lstat(path); err != nil || !os.SameFile(fi, li) {
		return nil, fmt.Errorf("%s changed while it was opened (a symlink?)", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxCredentialBytes+1))
	if err == nil && len(b) > MaxCredentialBytes {
		err = fmt.Errorf("%s is longer than %d bytes", path, MaxCredentialBytes)
	}
	return b, err
}

// runSource runs a source command (no shell, corral's environment, no
// input) within its timeout; its trimmed output is the value. A failure
// quotes its standard error (clipped), never its output.
func runSource(ctx context.Context, s policy.CredentialSource) (string, error) {
	timeout := time.Duration(s.Timeout) // Resolve wrote the default in
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.Command[0], s.Command[1:]...)
	out, errb := headbuf.New(MaxCredentialBytes+1), headbuf.New(512)
	cmd.Stdout, cmd.Stderr = out, errb
	cmd.WaitDelay = time.Second // a child that keeps the pipes open does not hold corral
	err := cmd.Run()
	if ctx.Err() == context.DeadlineExceeded {
		return "", fmt.Errorf("source command %s did not finish within %s (source.timeout)", s.Command[0], timeout)
	}
	if err != nil {
		msg := strings.TrimSpace(errb.String())
		if v := strings.TrimSpace(out.String()); len(v) >= minCredentialBytes {
			msg = strings.ReplaceAll(msg, v, audit.Redacted) // a script that echoed its value
		}
		if msg != "" {
			msg = ": " + msg
		}
		return "", fmt.Errorf("source command %s failed: %v%s", s.Command[0], err, msg)
	}
	if out.Total() > MaxCredentialBytes {
		return "", fmt.Errorf("source command %s printed more than %d bytes", s.Command[0], MaxCredentialBytes)
	}
	return strings.TrimSpace(out.String()), nil
}

// CheckCredentialValue refuses a value the proxy could not carry in a
// header or guard in a response; the error never quotes it.
func CheckCredentialValue(v string) error {
	if v == "" {
		return errors.New("the value is empty")
	}
	if len(v) > MaxCredentialBytes {
		return fmt.Errorf("the value is %d bytes, more than %d", len(v), MaxCredentialBytes)
	}
	if len(v) < minCredentialBytes {
		return fmt.Errorf("the value is shorter than %d bytes, too short for the reflection guard to tell it from other text", minCredentialBytes)
	}
	if strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return errors.New("the value holds a control character or a line break (one line is expected)")
	}
	return nil
}

// find is the credential named name.
func (cs *credentials) find(name string) (*egress.Credential, error) {
	if cs != nil {
		for _, c := range cs.list {
			if c.Name == name {
				return c, nil
			}
		}
	}
	return nil, provider.Errorf(provider.CodeNotFound, "no credential %q in the sandbox's policy", name)
}

// SetCredential changes the value of the credential name from the next
// request on (a rotation: the sandbox keeps its placeholder); expires,
// when not zero, ends it then. Errors: no such credential
// (CodeNotFound), a value checkValue refuses (CodePolicyRejected).
func (s *Session) SetCredential(name, value string, expires time.Time) error {
	c, err := s.creds.find(name)
	if err != nil {
		return err
	}
	if err := CheckCredentialValue(value); err != nil {
		return provider.Errorf(provider.CodePolicyRejected, "credential %s: %v", name, err)
	}
	s.cfg.Log.Redact(egress.ValueForms(value)...)
	s.creds.mu.Lock()
	defer s.creds.mu.Unlock()
	c.SetValue(value, expires)
	s.creds.expires[name], s.creds.revoked[name] = expires, false
	return nil
}

// RevokeCredential ends the credential name: its placeholder is refused
// from now on, wherever it is sent.
func (s *Session) RevokeCredential(name string) error {
	c, err := s.creds.find(name)
	if err != nil {
		return err
	}
	s.creds.mu.Lock()
	defer s.creds.mu.Unlock()
	c.Revoke()
	s.creds.revoked[name] = true
	return nil
}

// Credentials are the session's credentials and their state.
func (s *Session) Credentials() []CredentialStatus {
	cs := s.creds
	if cs == nil {
		return nil
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var out []CredentialStatus
	for _, rc := range cs.res {
		st := CredentialStatus{Name: rc.Name, Source: rc.Source.Kind(), State: "active", Expires: cs.expires[rc.Name]}
		switch {
		case cs.revoked[rc.Name]:
			st.State = "revoked"
		case !st.Expires.IsZero() && time.Now().After(st.Expires):
			st.State = "expired"
		}
		out = append(out, st)
	}
	return out
}

// maxFindings is how many credential findings a session writes one by
// one: the workload decides how many there are (every request may quote
// a placeholder), and findings, unlike decisions, are never aggregated.
const maxFindings = 1000

// recordFinding writes one of the proxy's credential findings, up to
// maxFindings, and then says once that the rest are only counted.
func (s *Session) recordFinding(f egress.CredentialFinding) {
	switch n := s.stats.finding(f); {
	case n <= maxFindings:
		s.cfg.Log.Emit(audit.CredentialFinding(s.info, audit.CredentialUseOf(f)))
	case n == maxFindings+1:
		s.cfg.Log.Emit(audit.Note(fmt.Sprintf("sandbox %s: more than %d credential findings; the rest are counted (corral run -v), not written", s.info.SandboxID, maxFindings)))
	}
}

package audit

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/consent"
	"github.com/corral-sandbox/corral/internal/ocsfcheck"
)

// validOCSF fails t for every error and warning the OCSF Server's
// validator would report for e against the official schema of the
// version Corral declares (internal/ocsfcheck).
func validOCSF(t *testing.T, name string, e Event) {
	t.Helper()
	s, err := ocsfcheck.Load()
	if err != nil {
		t.Fatal(err)
	}
	if s.Version != SchemaVersion {
		t.Fatalf("the schema checked is OCSF %s; events declare %s", s.Version, SchemaVersion)
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	r := s.Validate(b)
	for _, p := range append(r.Errors, r.Warnings...) {
		t.Errorf("%s: %s\n%s", name, p, b)
	}
}

// TestEventsValidOCSF: every kind of event Corral writes is valid OCSF
// (no error, no warning), in each of the shapes it takes.
func TestEventsValidOCSF(t *testing.T) {
	run, wl := testRun(), testWorkload()
	now := time.Now()
	events := map[string]Event{
		"launch":               Launch(run, wl),
		"not launched":         NotLaunched(run, Proc{CmdLine: []string{"nosuchcmd"}, UID: -1}, "nosuchcmd: command not found"),
		"exit 0":               Terminate(run, wl, Exit{}),
		"exit 3":               Terminate(run, wl, Exit{Code: 3}),
		"signal":               Terminate(run, wl, Exit{Code: 137, Signal: "SIGKILL"}),
		"timeout":              Terminate(run, wl, Exit{Code: 124, Signal: "SIGKILL", TimedOut: true}),
		"egress GET":           Egress(run, EgressDecision{Time: now, Allowed: true, Method: "GET", Host: "api.example.com", Port: 80, IP: "127.0.0.2", URL: "http://api.example.com/a?q=1", Status: 200, Rule: "allow[0]"}),
		"egress PATCH":         Egress(run, EgressDecision{Allowed: true, Method: "PATCH", Host: "api.example.com", Port: 443, IP: "127.0.0.2", URL: "https://api.example.com/x", Status: 204, Inspected: true, Proto: "HTTP/2.0"}),
		"egress PROPFIND":      Egress(run, EgressDecision{Method: "PROPFIND", Host: "dav.example.com", Port: 80, URL: "http://dav.example.com/", Status: 403, Reason: "not allowed"}),
		"egress bad method":    Egress(run, EgressDecision{Method: "G\x00T", Host: "dav.example.com", Port: 80, Status: 400, Reason: "malformed"}),
		"egress CONNECT":       Egress(run, EgressDecision{Allowed: true, Method: "CONNECT", Host: "api.example.com", Port: 443, IP: "127.0.0.2", Status: 200}),
		"egress CONNECT IP":    Egress(run, EgressDecision{Method: "CONNECT", Host: "127.0.0.9", Port: 443, Status: 403, Reason: "not allowed"}),
		"egress after 200":     Egress(run, EgressDecision{Allowed: true, Failed: true, Method: "CONNECT", Host: "api.example.com", Port: 443, Status: 200, Reason: "dial failed after 200"}),
		"egress denied":        Egress(run, EgressDecision{Method: "GET", Host: "evil.test", Port: 80, URL: "http://evil.test/", Status: 403, Reason: "not in network.allow", Hint: "network.allow: [evil.test]"}),
		"egress malformed":     Egress(run, EgressDecision{Status: 400, Reason: "malformed request line"}),
		"egress upstream fail": Egress(run, EgressDecision{Allowed: true, Method: "GET", Host: "api.example.com", Port: 80, URL: "http://api.example.com/", Status: 502, Reason: "upstream: refused"}),
		"forward open":         ForwardOpened(run, NewForward("127.0.0.1:5555", 8080)),
		"forward refused":      ForwardRefused(run, NewForward("", 8080), "nothing listens"),
		"forward closed":       ForwardClosed(run, NewForward("127.0.0.1:5555", 8080), 10, 20, ""),
		"note":                 Note("audit log rotated"),
		"planted":              Planted(run, "/w/.envrc", "shell-rc", "direnv runs it", nil, false),
		"credential":           CredentialFinding(run, CredentialUse{Time: now, Kind: "credential_mismatch", Credential: "gh", Host: "evil.test", Port: 443, Method: "GET", Path: "/", Where: "header", Action: "denied"}),
	}
	for _, act := range []string{consent.ActRequested, consent.ActApproved, consent.ActDenied, consent.ActApplied, consent.ActApplyFailed, consent.ActRevoked, consent.ActRefused} {
		events["consent "+act] = Consent(run, consent.Event{Activity: act, By: "uid 1000",
			Request: &consent.Request{ID: "req-1", Kind: consent.KindHost, Target: "api.example.com:443"}})
	}
	for name, e := range events {
		validOCSF(t, name, e)
	}
}

// TestDocExamplesValid: every example event in docs/audit.md is valid
// OCSF of the version Corral declares, so the catalogue shows what a SIEM
// accepts.
func TestDocExamplesValid(t *testing.T) {
	b, err := os.ReadFile("../docs/audit.md")
	if err != nil {
		t.Fatal(err)
	}
	s, err := ocsfcheck.Load()
	if err != nil {
		t.Fatal(err)
	}
	blocks := strings.Split(string(b), "```json\n")[1:]
	if len(blocks) < 12 {
		t.Fatalf("docs/audit.md has %d JSON examples, want one per event (12)", len(blocks))
	}
	for i, blk := range blocks {
		ev, _, ok := strings.Cut(blk, "```")
		if !ok {
			t.Fatalf("example %d is not closed", i+1)
		}
		r := s.Validate([]byte(ev))
		for _, p := range append(r.Errors, r.Warnings...) {
			t.Errorf("docs/audit.md example %d: %s", i+1, p)
		}
		var e struct {
			Metadata struct{ Version string } `json:"metadata"`
		}
		if json.Unmarshal([]byte(ev), &e); e.Metadata.Version != SchemaVersion {
			t.Errorf("docs/audit.md example %d declares %q, events %s", i+1, e.Metadata.Version, SchemaVersion)
		}
	}
}

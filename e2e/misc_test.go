//go:build linux

package e2e

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Exit status propagation and Corral's own codes.
func TestExitStatus(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		wd := mkdir(t, id, "exit")
		pol := writePolicy(t, id, policy{})
		for _, c := range []struct {
			args []string
			want int
		}{
			{sh("exit 7"), 7},
			{sh("exit 0"), 0},
			{sh("kill -9 $$"), 137},
			{sh("kill -TERM $$"), 143},
			{[]string{"corral-e2e-no-such-command"}, 127},
			{[]string{"/nonexistent/bin/tool"}, 127},
		} {
			res := corral(t, run{id: id, policy: pol, workdir: wd, args: c.args})
			if res.code != c.want {
				t.Errorf("%q: exit %d, want %d\n%s", c.args, res.code, c.want, res)
			}
		}
	})
}

// --audit writes OCSF process activity events: a launch and a terminate
// with the exit code and the policy hash.
func TestAuditLog(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		wd := mkdir(t, id, "audit")
		pol := writePolicy(t, id, policy{})
		logf := filepath.Join(mkdir(t, id, "audit-logs"), "audit.jsonl")
		res := corral(t, run{id: id, policy: pol, workdir: wd, flags: []string{"--audit", logf}, args: sh("exit 3")})
		assertCode(t, res, 3)
		f, err := os.Open(logf)
		if err != nil {
			t.Fatalf("audit log: %v\n%s", err, res)
		}
		defer f.Close()
		type ev struct {
			ClassUID   int  `json:"class_uid"`
			ActivityID int  `json:"activity_id"`
			ExitCode   *int `json:"exit_code"`
			Unmapped   struct {
				PolicyHash string `json:"policy_hash"`
				SandboxID  string `json:"sandbox_id"`
			} `json:"unmapped"`
		}
		var launch, term *ev
		sc := bufio.NewScanner(f)
		n := 0
		for sc.Scan() {
			n++
			var e ev
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Fatalf("line %d is not JSON: %v: %s", n, err, sc.Text())
			}
			if e.ClassUID != 1007 {
				t.Errorf("line %d: class_uid %d, want 1007", n, e.ClassUID)
			}
			switch e.ActivityID {
			case 1:
				launch = &e
			case 2:
				term = &e
			}
		}
		if launch == nil || term == nil {
			t.Fatalf("want a launch (activity_id 1) and a terminate (2) event; %d lines", n)
		}
		if term.ExitCode == nil || *term.ExitCode != 3 {
			t.Errorf("terminate exit_code %v, want 3", term.ExitCode)
		}
		for _, e := range []*ev{launch, term} {
			if !strings.HasPrefix(e.Unmapped.PolicyHash, "sha256:") {
				t.Errorf("event %d: unmapped.policy_hash %q, want sha256:...", e.ActivityID, e.Unmapped.PolicyHash)
			}
		}
	})
}

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

// The audit records what happened to the workload, not corral's own exit
// status: a workload the timeout killed has no exit_code (a signal ended
// it, named in unmapped.signal), though corral exits 124; a command that
// was never found is one Launch with status Failure, not a Terminate of
// pid 0. Both logs are valid OCSF (corral checks every --audit file).
func TestAuditKilledAndNotFound(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		wd := mkdir(t, id, "audit-ends")
		logs := mkdir(t, id, "audit-ends-logs")
		type ev struct {
			ActivityID int  `json:"activity_id"`
			StatusID   int  `json:"status_id"`
			ExitCode   *int `json:"exit_code"`
			Process    struct {
				PID int `json:"pid"`
			} `json:"process"`
			StatusDetail string `json:"status_detail"`
			Unmapped     struct {
				Signal   string `json:"signal"`
				TimedOut *bool  `json:"timed_out"`
			} `json:"unmapped"`
		}
		events := func(path string) []ev {
			var out []ev
			for _, line := range strings.Split(strings.TrimSpace(readFile(t, path)), "\n") {
				var e ev
				if err := json.Unmarshal([]byte(line), &e); err != nil {
					t.Fatalf("%s: %v: %s", path, err, line)
				}
				out = append(out, e)
			}
			return out
		}

		timeoutLog := filepath.Join(logs, "timeout.jsonl")
		pol := writePolicy(t, id, policy{Limits: "timeout: 1s"})
		res := corral(t, run{id: id, policy: pol, workdir: wd, flags: []string{"--audit", timeoutLog}, args: []string{"sleep", "30"}})
		assertCode(t, res, 124)
		evs := events(timeoutLog)
		if len(evs) != 2 || evs[0].ActivityID != 1 || evs[1].ActivityID != 2 {
			t.Fatalf("timeout: want a Launch and a Terminate, got %+v", evs)
		}
		if term := evs[1]; term.ExitCode != nil || term.Unmapped.Signal != "SIGKILL" || term.Unmapped.TimedOut == nil || !*term.Unmapped.TimedOut {
			t.Errorf("timeout's Terminate: exit_code %v, signal %q, timed_out %v; want no exit_code, SIGKILL, true", term.ExitCode, term.Unmapped.Signal, term.Unmapped.TimedOut)
		}

		missingLog := filepath.Join(logs, "missing.jsonl")
		res = corral(t, run{id: id, policy: writePolicy(t, id, policy{}), workdir: wd, flags: []string{"--audit", missingLog}, args: []string{"no-such-command-here"}})
		assertCode(t, res, 127)
		evs = events(missingLog)
		if len(evs) != 1 || evs[0].ActivityID != 1 || evs[0].StatusID != 2 || !strings.Contains(evs[0].StatusDetail, "no-such-command-here") {
			t.Errorf("a command not found: want one Launch with status Failure naming it, got %+v", evs)
		}
	})
}

//go:build linux

package qualify

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestInspectCasesCatchTheHole: with interception disabled (the same
// hosts allowed without access, rules or deny_rules, so every tunnel is
// spliced unread), P29 and P32 fail, for the reasons interception
// exists: methods the rules refuse reached the upstream, a Host and an
// :authority naming another host were served, and no CA of the sandbox
// vouches for the inspected host. On linux, linux-service, docker (when
// a daemon is there) and the gateway's linux sandboxes; with
// interception on they pass (e2e TestQualify, corral qualify).
func TestInspectCasesCatchTheHole(t *testing.T) {
	needRootLinux(t)
	bin := buildCorral(t)
	inspectOff = true
	defer func() { inspectOff = false }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rep, err := Qualify(ctx, Options{Bin: bin, Providers: []string{"linux", LinuxService, "docker", LinuxGateway}, Cases: []string{"P29", "P32"}, PerfRuns: -1})
	if err != nil {
		t.Fatalf("Qualify: %v", err)
	}
	mustFailFor(t, rep, map[string][]string{
		"P29": {"h1 POST /: status 200, want 403", "h2 DELETE /: status 200, want 403", "h2 :authority evil.test (SNI api.allowed.test): status 200, want 421",
			"h1 Host: evil.test (SNI api.allowed.test): status 200, want 421", "rules: GET /v1/private/a: status 200, want 403",
			"a connection was not intercepted by the sandbox's CA", "the upstream's log is not exactly the requests that passed"},
		"P32": {"the inspected host's leaf is not the sandbox CA's", "no trust source inside holds the CA"},
	})
}

// mustFailFor checks a self-test's report: every case failed, its reason
// holding each of want[its ID] (docker may be skipped, without a daemon,
// unless CORRAL_TEST_DOCKER=1).
func mustFailFor(t *testing.T, rep *Report, want map[string][]string) {
	t.Helper()
	for _, pr := range rep.Providers {
		for _, res := range pr.Results {
			logResult(t, res)
			if res.Status == Skipped && pr.Name == "docker" && os.Getenv("CORRAL_TEST_DOCKER") != "1" {
				continue
			}
			if res.Status != Fail {
				t.Errorf("%s: %s weakened: %s, want fail", pr.Name, res.ID, res.Status)
				continue
			}
			for _, w := range want[res.ID] {
				if !strings.Contains(res.Reason, w) {
					t.Errorf("%s: %s failed, but its reason lacks %q: %s", pr.Name, res.ID, w, res.Reason)
				}
			}
		}
	}
}

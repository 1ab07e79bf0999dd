//go:build linux

package qualify

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestP28CatchesTheHole: with network.unix_sockets: allow (the hole the
// control closes), P28 fails, on the connection itself and on what the
// host listener saw, on linux, linux-service and docker (when a daemon is
// there); with the default it passes (e2e TestQualify, corral qualify).
func TestP28CatchesTheHole(t *testing.T) {
	needRootLinux(t)
	bin := buildCorral(t)
	p28UnixSockets = "allow"
	defer func() { p28UnixSockets = "" }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := Qualify(ctx, Options{Bin: bin, Providers: []string{"linux", LinuxService, "docker"}, Cases: []string{"P28"}, PerfRuns: -1})
	if err != nil {
		t.Fatalf("Qualify: %v", err)
	}
	for _, pr := range rep.Providers {
		res := pr.Results[0]
		logResult(t, res)
		if res.Status == Skipped && pr.Name == "docker" && os.Getenv("CORRAL_TEST_DOCKER") != "1" {
			continue
		}
		if res.Status != Fail {
			t.Errorf("%s: P28 with unix_sockets: allow: %s, want fail", pr.Name, res.Status)
			continue
		}
		for _, want := range []string{"is connectable", "was reached from the sandbox"} {
			if !strings.Contains(res.Reason, want) {
				t.Errorf("%s: P28 failed, but its reason lacks %q: %s", pr.Name, want, res.Reason)
			}
		}
	}
}

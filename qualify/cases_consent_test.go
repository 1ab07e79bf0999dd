//go:build linux

package qualify

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"
)

// TestConsentCases: P33 and P34 pass for real on linux and through the
// gateway (issue 17, "Checks that must hold": strict pass), P33 on docker
// too (when a daemon is there); P34 is skipped on docker with its reason.
func TestConsentCases(t *testing.T) {
	needRootLinux(t)
	bin := buildCorral(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rep, err := Qualify(ctx, Options{Bin: bin, Providers: []string{"linux", LinuxGateway, "docker"}, Cases: []string{"P33", "P34"}, PerfRuns: -1})
	if err != nil {
		t.Fatalf("Qualify: %v", err)
	}
	for _, pr := range rep.Providers {
		for _, res := range pr.Results {
			logResult(t, res)
			if pr.Name == "docker" && res.Status == Skipped && (res.ID == "P34" && res.Reason == dockerP34 || pr.Skipped != "" && os.Getenv("CORRAL_TEST_DOCKER") != "1") {
				continue
			}
			if res.Status != Pass {
				t.Errorf("%s: %s: %s, want pass: %s", pr.Name, res.ID, res.Status, res.Reason)
			}
		}
	}
}

// TestConsentCasesCatchTheHole (linux, linux-gateway; docker for P33):
// with the ceiling widened and the
// harness approving everything (p33Weak), P33 fails because the
// requests outside the real ceiling were not refused, the approver was
// asked about them, the flood was not limited and grants were applied;
// with the folder granted read-write (p34Weak), P34 fails because the
// grant is listed and mounted writable and a write into it succeeded.
func TestConsentCasesCatchTheHole(t *testing.T) {
	needRootLinux(t)
	bin := buildCorral(t)
	p33Weak, p34Weak = true, true
	defer func() { p33Weak, p34Weak = false, false }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rep, err := Qualify(ctx, Options{Bin: bin, Providers: []string{"linux", LinuxGateway, "docker"}, Cases: []string{"P33", "P34"}, PerfRuns: -1})
	if err != nil {
		t.Fatalf("Qualify: %v", err)
	}
	for i := range rep.Providers {
		if pr := &rep.Providers[i]; pr.Name == "docker" {
			pr.Results = slices.DeleteFunc(pr.Results, func(r Result) bool { return r.ID == "P34" && r.Reason == dockerP34 })
		}
	}
	mustFailFor(t, rep, map[string][]string{
		"P33": {"outside ask: not refused at once", "inside never: not refused at once", "inside filesystem.deny: not refused at once",
			"host outside hosts.ask: not refused at once", "flood request 5: want 429 rate_limited (max_pending)", "flood request 12: want 429 rate_limited (consent.rate)",
			// Not "a grant is mounted in the sandbox": the weak harness
			// approves from its watcher asynchronously, so whether the
			// mount is in place when the case reads the mountinfo is a
			// race (seen in CI); the listed grant is the same hole.
			"the approver was asked about a request outside the ceiling", "a grant is listed: something was applied"},
		"P34": {"the grant is not listed desired and effective, read-only and locked", "the init's mountinfo does not show the grant read-only",
			"a write into the read-only grant did not fail EROFS"},
	})
}

// TestConsentGrantInjected: with the folder bound into the running
// sandbox from outside (nsenter and mount --bind in its mount namespace:
// no propagation, so nothing is locked) instead of approved, P34 fails
// because host root in the sandbox's namespaces could remount the grant
// read-write and unmount its mask, and because no grant is listed.
func TestConsentGrantInjected(t *testing.T) {
	needRootLinux(t)
	bin := buildCorral(t)
	p34Inject = true
	defer func() { p34Inject = false }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rep, err := Qualify(ctx, Options{Bin: bin, Providers: []string{"linux", LinuxGateway}, Cases: []string{"P34"}, PerfRuns: -1})
	if err != nil {
		t.Fatalf("Qualify: %v", err)
	}
	mustFailFor(t, rep, map[string][]string{
		"P34": {"mount -o remount,bind,rw /grants/ro/docs succeeded in the sandbox's namespaces: the grant is not locked",
			"umount /grants/ro/docs/secret succeeded in the sandbox's namespaces: the grant is not locked",
			"the grant is not listed desired and effective"},
	})
}

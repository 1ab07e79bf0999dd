package web

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/consent"
	browser "github.com/corral-sandbox/corral/e2e/web"
	"github.com/corral-sandbox/corral/policy"
)

// harness is e2e/web: approve.mjs and its node_modules (npm ci).
const harness = "../../e2e/web"

// screenshot is where a browser test keeps its screenshot name
// (e2e/web.Screenshot).
func screenshot(t *testing.T, name string) string { return browser.Screenshot(t, name) }

// runBrowser runs approve.mjs against url with env; when the page says it
// is ready (its watch open), ready makes the request. It fails the test
// unless the script says "done"; it skips it where node, chromium or
// playwright-core is missing, except on CI (e2e/web.Need).
func runBrowser(t *testing.T, url string, env []string, ready func()) {
	t.Helper()
	if err := browser.Need(t, harness).Run(t, url, env, ready); err != nil {
		t.Fatal(err)
	}
}

// TestBrowserApprove approves a read-write request read-only in a real
// headless chromium, for a duration: the applier is asked for exactly
// that, and the request ends approved and in force. The request's reason
// is markup, which must show as text and run nothing.
func TestBrowserApprove(t *testing.T) {
	f := serve(t, testSandboxes())
	rg, srv := f.rig, f.url
	shot := screenshot(t, "consent-web-approve.png")
	_ = os.Remove(shot)
	var q consent.Request
	runBrowser(t, srv+"/ui/?token="+testToken, []string{"CORRAL_WEB_ACTION=approve", "CORRAL_WEB_SCOPE=ttl", "CORRAL_WEB_TTL=20m",
		"CORRAL_WEB_READ_ONLY=1", "CORRAL_WEB_EXPECT_REASON=" + xssReason, "CORRAL_WEB_SCREENSHOT=" + shot}, func() {
		// The page is the only approver: without it the request would be
		// denied at once (no approver).
		if n := rg.broker.Approvers(); n != 1 {
			t.Errorf("the page said ready with %d approvers connected, want 1 (its watch)", n)
		}
		q = rg.ask(t, "proj", policy.AccessReadWrite, xssReason, consent.Requester{Exe: "/usr/bin/python3", Via: "tcp"})
	})
	got := rg.get(t, q.ID)
	if got.State != consent.StateApproved || !got.Effective {
		t.Fatalf("request %s: %s effective=%v, want approved and effective", q.ID, got.State, got.Effective)
	}
	if d := got.Decision; d == nil || d.Scope != consent.ScopeTTL || !d.ReadOnly || d.Digest != q.Digest || d.Expires.Before(time.Now().Add(19*time.Minute)) {
		t.Errorf("decision %+v: want ttl of 20m, read-only, the request's digest", got.Decision)
	}
	applied := rg.applier.appliedGrants()
	if len(applied) != 1 || applied[0].Source != q.Target || !applied[0].ReadOnly {
		t.Errorf("applied %+v: want %s read-only once", applied, q.Target)
	}
	if gs := rg.broker.Grants(context.Background()); len(gs) != 1 || !gs[0].Desired || !gs[0].Effective || gs[0].Access != policy.AccessReadOnly || gs[0].Scope != consent.ScopeTTL {
		t.Errorf("grants %+v: want one ro ttl grant, desired and effective", gs)
	}
	if fi, err := os.Stat(shot); err != nil || fi.Size() == 0 {
		t.Errorf("no screenshot at %s: %v", shot, err)
	} else {
		t.Logf("screenshot: %s", shot)
	}
}

// TestBrowserDeny denies a request for the session with a reason in the
// page: the request ends denied with that reason, nothing applied. Its
// target (a path may hold any byte but NUL and /) is markup, which must
// stay text in the live audit too.
func TestBrowserDeny(t *testing.T) {
	f := serve(t, testSandboxes())
	rg, srv := f.rig, f.url
	const reason = `not that one <b>sorry</b>`
	var q consent.Request
	runBrowser(t, srv+"/ui/?token="+testToken, []string{"CORRAL_WEB_ACTION=deny", "CORRAL_WEB_DENY_REASON=" + reason, "CORRAL_WEB_FOR_SESSION=1",
		"CORRAL_WEB_SCREENSHOT=" + screenshot(t, "consent-web-deny.png")}, func() {
		q = rg.ask(t, `secrets <img src=x onerror="window.__corral_xss=3">`, policy.AccessReadOnly, "look", consent.Requester{Exe: "/bin/sh", Via: "tcp"})
	})
	got := rg.get(t, q.ID)
	if got.State != consent.StateDenied || got.Decision == nil || got.Decision.Reason != reason || !got.Decision.ForSession {
		t.Fatalf("request %s: %s %+v, want denied for the session with %q", q.ID, got.State, got.Decision, reason)
	}
	if n := len(rg.applier.appliedGrants()); n != 0 {
		t.Errorf("%d grants applied for a denied request", n)
	}
	// For the session: the same request again is denied without a prompt.
	again, err := rg.broker.Ask(context.Background(), consent.Ask{Kind: consent.KindFolder, Target: q.Target, Access: policy.AccessReadOnly}, consent.Requester{Via: "tcp"})
	if err != nil || again.State != consent.StateDenied {
		t.Errorf("the same request after a deny for the session: %s (%s) %v, want denied", again.State, again.Detail, err)
	}
}

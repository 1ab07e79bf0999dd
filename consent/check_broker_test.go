package consent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// A request outside the ceiling is refused with the entry that refuses
// it, and nobody is asked: no prompt, the applier not even asked its mode.
func TestCheckRefusedWithoutAsking(t *testing.T) {
	e := newBkEnv(t, "")
	e.approver(t)
	for _, c := range []struct {
		kind   Kind
		target string
		field  string
	}{
		{KindFolder, e.path("other"), "consent.folders.ask"},
		{KindFolder, e.path("src/never"), "consent.folders.never[0]"},
		{KindFolder, e.path("src/secret"), "filesystem.deny[0]"},
		{KindFolder, e.home, "consent.folders.ask"},
		{KindFolder, "/proc", "consent.folders.ask"},
		{KindHost, "x.b.test:443", "consent.hosts.ask"},
		{KindHost, "api.a.test:80", "consent.hosts.ask"},
		{KindHost, "bad.a.test:443", "consent.hosts.never[0]"},
	} {
		r := e.ask(t, c.kind, c.target, "", "please")
		if r.State != StateRefused || r.Ceiling != c.field || !strings.Contains(r.Detail, "nobody was asked") {
			t.Errorf("%s: state %s ceiling %q detail %q, want refused by %s", c.target, r.State, r.Ceiling, r.Detail, c.field)
		}
		if acts := e.activities(r.ID); !slices.Equal(acts, []string{"refused"}) {
			t.Errorf("%s: events %v, want only refused", c.target, acts)
		}
		if got, ok := e.b.Get(r.ID); !ok || got.State != StateRefused {
			t.Errorf("%s: Get = %+v %v", c.target, got, ok)
		}
	}
	if e.count("prompted") != 0 || e.app.touched() || e.app.modeCalls != 0 {
		t.Fatalf("nobody should have been asked: %d prompts, applier touched %v, Mode called %d times", e.count("prompted"), e.app.touched(), e.app.modeCalls)
	}
}

// A sandbox that cannot take a grant live refuses before a prompt.
func TestCheckRefusedNotLive(t *testing.T) {
	e := newBkEnv(t, "")
	e.approver(t)
	e.app.set(func(f *bkApplier) {
		f.mode = provider.ConsentRequiresRecreate
	})
	r := e.askFolder(t, "src/a", "")
	if r.State != StateRefused || r.Ceiling != "provider" || !strings.Contains(r.Detail, string(provider.ConsentRequiresRecreate)) {
		t.Fatalf("%+v, want refused by the provider", r)
	}
	if e.count("prompted") != 0 || e.app.touched() {
		t.Fatal("asked although the sandbox cannot take it")
	}
}

func TestCheckMaxPending(t *testing.T) {
	e := newBkEnv(t, "  max_pending: 2\n  rate: {burst: 100, per: 1m}\n")
	e.approver(t)
	a := e.pending(t, "src/a", "")
	e.pending(t, "src/b", "")
	over := e.askFolder(t, "src", "")
	if over.State != StateRateLimited || !strings.Contains(over.Detail, "max_pending 2") || !strings.Contains(over.Detail, "nobody was asked") {
		t.Fatalf("third pending request: %+v, want rate_limited by max_pending", over)
	}
	if acts := e.activities(over.ID); !slices.Equal(acts, []string{"rate_limited"}) {
		t.Errorf("events %v", acts)
	}
	// A coalesced request adds nothing pending: free.
	if again := e.askFolder(t, "src/a", ""); again.ID != a.ID || again.State != StatePending || again.Asked != 2 {
		t.Fatalf("coalesced at max_pending: %+v", again)
	}
	// Deciding one makes room.
	e.decide(t, a, Decision{By: "me"})
	e.pending(t, "src", "")
}

func TestCheckTokenBucket(t *testing.T) {
	e := newBkEnv(t, "  max_pending: 100\n  rate: {burst: 2, per: 1h}\n")
	var mu sync.Mutex
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	e.b = New(Config{Sandbox: "sb-1", Policy: e.pol, Applier: e.app, Log: e.log, Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
	t.Cleanup(e.b.Close)
	e.approver(t)
	a := e.pending(t, "src/a", "")
	e.pending(t, "src/b", "")
	for range 3 { // coalesced: no token spent
		if r := e.askFolder(t, "src/a", ""); r.ID != a.ID {
			t.Fatalf("not coalesced: %+v", r)
		}
	}
	r := e.askFolder(t, "src", "")
	if r.State != StateRateLimited || !strings.Contains(r.Detail, "consent.rate") {
		t.Fatalf("over the burst: %+v", r)
	}
	mu.Lock()
	now = now.Add(29 * time.Minute) // not yet one token (2 per hour)
	mu.Unlock()
	if r := e.askFolder(t, "src", ""); r.State != StateRateLimited {
		t.Fatalf("before a token is back: %s", r.State)
	}
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	e.pending(t, "src", "")
	if n := e.count("prompted"); n != 3 {
		t.Errorf("%d prompts, want 3", n)
	}
}

func TestCheckNoApproverDenies(t *testing.T) {
	e := newBkEnv(t, "")
	r := e.askFolder(t, "src/a", "")
	if r.State != StateDenied || r.Detail != ErrNoApprover.Error() || !strings.Contains(r.Detail, "corral approvals watch") {
		t.Fatalf("%+v, want denied: no approver", r)
	}
	if e.count("prompted") != 0 || e.app.touched() {
		t.Fatal("prompted with nobody to see it")
	}
	// Once one watches, the same request is asked.
	e.approver(t)
	if e.b.Approvers() != 1 {
		t.Fatalf("Approvers %d", e.b.Approvers())
	}
	p := e.pending(t, "src/a", "")
	if acts := e.activities(p.ID); !slices.Equal(acts, []string{"requested", "prompted"}) {
		t.Errorf("events %v", acts)
	}
}

func TestCheckExpires(t *testing.T) {
	e := newBkEnv(t, "  timeout: 200ms\n")
	e.approver(t)
	r := e.pending(t, "src/a", "")
	if !r.Expires.After(r.Created) {
		t.Errorf("expires %v, created %v", r.Expires, r.Created)
	}
	bkEventually(t, "the request expires", func() bool { q, _ := e.b.Get(r.ID); return q.State == StateExpired })
	if acts := e.activities(r.ID); !slices.Equal(acts, []string{"requested", "prompted", "expired"}) {
		t.Errorf("events %v", acts)
	}
	var de *DecidedError
	if _, err := e.b.Decide(context.Background(), r.ID, Decision{Approve: true, Digest: r.Digest}); !errors.As(err, &de) || de.First.State != StateExpired {
		t.Fatalf("deciding an expired request: %v", err)
	}
	// It no longer counts as pending: the same request is asked anew.
	if again := e.pending(t, "src/a", ""); again.ID == r.ID {
		t.Fatal("an expired request was reused")
	}
	if e.app.touched() {
		t.Fatal("an expired request was applied")
	}
}

// An approval is applied with what the ceiling says (masks, read-only
// paths) and is effective only as the read-back shows it.
func TestCheckApprovedApplied(t *testing.T) {
	e := newBkEnv(t, "")
	e.approver(t)
	if err := os.WriteFile(e.path("src/.envrc"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := e.pending(t, "src", policy.AccessReadWrite)
	got := e.decide(t, r, Decision{Approve: true, By: "uid 1000"})
	fgs := e.app.folders()
	if len(fgs) != 1 {
		t.Fatalf("%d applies", len(fgs))
	}
	fg := fgs[0]
	wantMasks := []string{e.path("src/never"), e.path("src/secret")}
	if fg.Source != e.path("src") || fg.ReadOnly || fg.Label != "src" || !slices.Equal(fg.Masks, wantMasks) || !slices.Contains(fg.ReadOnlyWithin, e.path("src/.envrc")) {
		t.Fatalf("folder grant %+v, want masks %v and .envrc read-only", fg, wantMasks)
	}
	fi, _ := os.Stat(e.path("src"))
	if dev, ino := fileID(fi); fg.Dev != dev || fg.Ino != ino {
		t.Errorf("dev/ino %d/%d, want %d/%d", fg.Dev, fg.Ino, dev, ino)
	}
	if got.State != StateApproved || !got.Effective || got.Path != provider.GrantSlotRW+"/src" || got.Grant == "" || got.Decision == nil || got.Decision.Scope != ScopeOnce {
		t.Fatalf("approved: %+v", got)
	}
	if acts := e.activities(r.ID); !slices.Equal(acts, []string{"requested", "prompted", "approved", "applied"}) {
		t.Errorf("events %v", acts)
	}
	g, ok := bkGrant(e.b.Grants(context.Background()), got.Grant)
	if !ok || !g.Desired || !g.Effective || g.Folder == nil || g.Folder.MountIDs[0] != 101 || g.Access != policy.AccessReadWrite || g.Mode != provider.ConsentLive {
		t.Fatalf("grant %+v", g)
	}
	// Effective is what the sandbox shows now, not what was hoped.
	e.app.set(func(f *bkApplier) { st := f.grants["src"]; st.State = provider.GrantMissing; f.grants["src"] = st })
	g, _ = bkGrant(e.b.Grants(context.Background()), got.Grant)
	if !g.Desired || g.Effective || g.Folder.State != provider.GrantMissing {
		t.Fatalf("grant gone from the sandbox: %+v", g)
	}
	e.app.set(func(f *bkApplier) { f.readErr = errors.New("mountinfo: EACCES") })
	g, _ = bkGrant(e.b.Grants(context.Background()), got.Grant)
	if !strings.Contains(g.Detail, "cannot read back") {
		t.Fatalf("read-back failure not said: %+v", g)
	}
}

func TestCheckApplyFailed(t *testing.T) {
	t.Run("error", func(t *testing.T) {
		e := newBkEnv(t, "")
		e.approver(t)
		e.app.set(func(f *bkApplier) { f.applyErr = bkErrApply })
		r := e.pending(t, "src/a", "")
		got := e.decide(t, r, Decision{Approve: true})
		if got.State != StateFailed || got.Effective || got.Grant != "" || !strings.Contains(got.Detail, "EPERM") {
			t.Fatalf("%+v", got)
		}
		if gs := e.b.Grants(context.Background()); len(gs) != 0 {
			t.Fatalf("grants %+v", gs)
		}
		if acts := e.activities(r.ID); acts[len(acts)-1] != "apply_failed" {
			t.Fatalf("events %v", acts)
		}
	})
	t.Run("not effective", func(t *testing.T) {
		e := newBkEnv(t, "")
		e.approver(t)
		e.app.set(func(f *bkApplier) { f.state = provider.GrantMissing })
		r := e.pending(t, "src/a", "")
		got := e.decide(t, r, Decision{Approve: true})
		if got.State != StateFailed || got.Effective || !strings.Contains(got.Detail, string(provider.GrantMissing)) {
			t.Fatalf("%+v", got)
		}
		// What was mounted but not shown is taken down again: no grant
		// stays behind that nobody could revoke.
		if l := e.app.revokedLabels(); !slices.Equal(l, []string{"a"}) {
			t.Fatalf("revoked %v, want the half-made grant a", l)
		}
		if gs := e.b.Grants(context.Background()); len(gs) != 0 {
			t.Fatalf("grants %+v", gs)
		}
	})
	t.Run("host", func(t *testing.T) {
		e := newBkEnv(t, "")
		e.approver(t)
		e.app.set(func(f *bkApplier) { f.hostErr = bkErrApply })
		r := e.ask(t, KindHost, "api.a.test:443", "", "")
		got := e.decide(t, r, Decision{Approve: true})
		if got.State != StateFailed || got.Effective {
			t.Fatalf("%+v", got)
		}
	})
}

func TestCheckHostGrant(t *testing.T) {
	e := newBkEnv(t, "")
	e.approver(t)
	r := e.ask(t, KindHost, "API.a.test.", policy.AccessReadWrite, "")
	if r.State != StatePending || r.Target != "api.a.test:443" || r.Access != "" {
		t.Fatalf("%+v", r)
	}
	got := e.decide(t, r, Decision{Approve: true, Scope: ScopeSession})
	if !got.Effective || !slices.Equal(e.app.hosts, []string{"api.a.test"}) {
		t.Fatalf("%+v allowed %v", got, e.app.hosts)
	}
	g, _ := bkGrant(e.b.Grants(context.Background()), got.Grant)
	if g.Revision != 1 || !g.Effective {
		t.Fatalf("grant %+v", g)
	}
	if again := e.ask(t, KindHost, "api.a.test:443", "", ""); again.Grant != got.Grant || again.State != StateApproved {
		t.Fatalf("again: %+v", again)
	}
	rg, err := e.b.Revoke(context.Background(), got.Grant, "me", false)
	if err != nil || rg.Effective || rg.Desired || !slices.Equal(e.app.unhosts, []string{"api.a.test"}) {
		t.Fatalf("revoke: %+v %v (disallowed %v)", rg, err, e.app.unhosts)
	}
}

func TestCheckFirstAnswerWins(t *testing.T) {
	e := newBkEnv(t, "")
	e.approver(t)
	r := e.pending(t, "src/a", "")
	const n = 50
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, errs[i] = e.b.Decide(context.Background(), r.ID, Decision{Approve: true, Digest: r.Digest, By: fmt.Sprintf("approver %d", i)})
		}()
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		var de *DecidedError
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatalf("approvers %d and %d both won", winner, i)
			}
			winner = i
		case !errors.As(err, &de):
			t.Fatalf("approver %d: %v, want a DecidedError", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("nobody won")
	}
	q, _ := e.b.Get(r.ID)
	if q.Decision.By != fmt.Sprintf("approver %d", winner) || len(e.app.folders()) != 1 || e.count("approved") != 1 {
		t.Fatalf("decided by %s with %d applies, %d approvals; winner %d", q.Decision.By, len(e.app.folders()), e.count("approved"), winner)
	}
	for i, err := range errs {
		if i != winner && !strings.Contains(err.Error(), "already decided by approver "+fmt.Sprint(winner)) {
			t.Fatalf("loser %d: %q does not name the winner", i, err)
		}
	}
}

func TestCheckDigestMismatch(t *testing.T) {
	e := newBkEnv(t, "")
	e.approver(t)
	r := e.pending(t, "src/a", "")
	for _, d := range []string{"", "sha256:00", strings.Replace(r.Digest, r.Digest[len(r.Digest)-1:], "x", 1)} {
		if _, err := e.b.Decide(context.Background(), r.ID, Decision{Approve: true, Digest: d}); !errors.Is(err, ErrDigest) {
			t.Fatalf("digest %q: %v, want ErrDigest", d, err)
		}
	}
	if q, _ := e.b.Get(r.ID); q.State != StatePending || q.Decision != nil {
		t.Fatalf("after a wrong digest: %+v", q)
	}
	if e.app.touched() {
		t.Fatal("applied on a wrong digest")
	}
	if _, err := e.b.Decide(context.Background(), "req-unknown", Decision{Digest: r.Digest}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
}

func TestCheckDecideBadScope(t *testing.T) {
	e := newBkEnv(t, "")
	e.approver(t)
	r := e.pending(t, "src/a", "")
	for _, d := range []Decision{
		{Approve: true, Scope: "forever"},
		{Approve: true, Scope: ScopeTTL},
		{Approve: true, Scope: ScopeAlways}, // no standing file in this broker
	} {
		d.Digest = r.Digest
		var ae *AskError
		if _, err := e.b.Decide(context.Background(), r.ID, d); !errors.As(err, &ae) {
			t.Fatalf("%+v: %v, want an AskError", d, err)
		}
	}
	if q, _ := e.b.Get(r.ID); q.State != StatePending {
		t.Fatalf("a refused decision decided it: %s", q.State)
	}
}

func TestCheckCoalescing(t *testing.T) {
	e := newBkEnv(t, "")
	e.approver(t)
	r1 := e.ask(t, KindFolder, e.path("src/a"), "", "short")
	r2 := e.ask(t, KindFolder, e.path("src/a/"), policy.AccessReadOnly, "a longer reason")
	r3 := e.ask(t, KindFolder, e.path("src/./a"), "", "mid")
	if r1.ID != r2.ID || r2.ID != r3.ID || r3.Asked != 3 || r3.Reason != "a longer reason" || r3.Digest != r1.Digest {
		t.Fatalf("coalesced: %+v", r3)
	}
	if n := e.count("prompted"); n != 1 {
		t.Fatalf("%d prompts for one request", n)
	}
	if q, _ := e.b.Get(r1.ID); q.Asked != 3 {
		t.Fatalf("Get asked %d", q.Asked)
	}
	if rw := e.ask(t, KindFolder, e.path("src/a"), policy.AccessReadWrite, ""); rw.ID == r1.ID {
		t.Fatal("a read-write request shares a read-only one's id")
	}
}

// A folder renamed away and replaced between the request and the
// approval is not granted: what the approver saw is gone.
func TestCheckSwappedFolder(t *testing.T) {
	e := newBkEnv(t, "")
	e.approver(t)
	r := e.pending(t, "src/a", "")
	if err := os.Rename(e.path("src/a"), e.path("src/a.away")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(e.path("src/a"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := e.b.Decide(context.Background(), r.ID, Decision{Approve: true, Digest: r.Digest})
	if !errors.Is(err, ErrChanged) || got.State == StateApproved || got.Effective || got.Grant != "" || !strings.Contains(got.Detail, "changed") {
		t.Fatalf("swapped: %+v %v", got, err)
	}
	if len(e.app.folders()) != 0 {
		t.Fatal("ApplyFolder called for a swapped folder")
	}
	// Asked again, it is the new directory, with a digest of its own.
	again := e.pending(t, "src/a", "")
	if again.Digest == r.Digest {
		t.Fatal("the new directory has the old one's digest")
	}
}

func TestCheckSessionScope(t *testing.T) {
	e := newBkEnv(t, "")
	e.approver(t)
	r := e.pending(t, "src/a", "")
	got := e.decide(t, r, Decision{Approve: true, Scope: ScopeSession})
	prompts := e.count("prompted")
	again := e.askFolder(t, "src/a", "")
	if again.State != StateApproved || again.Grant != got.Grant || !again.Effective || again.ID == r.ID {
		t.Fatalf("identical request after a session approval: %+v", again)
	}
	if e.count("prompted") != prompts || len(e.app.folders()) != 1 {
		t.Fatalf("prompted again or applied twice (%d applies)", len(e.app.folders()))
	}
	if _, err := e.b.Revoke(context.Background(), got.Grant, "me", false); err != nil {
		t.Fatal(err)
	}
	if q, _ := e.b.Get(r.ID); q.State != StateRevoked || q.Effective {
		t.Fatalf("request after revoke: %+v", q)
	}
	e.pending(t, "src/a", "") // revoked: asked again
}

// An approval narrowed to read-only for the session does not approve the
// next read-write request without a prompt.
func TestCheckSessionNarrowed(t *testing.T) {
	e := newBkEnv(t, "")
	e.approver(t)
	r := e.pending(t, "src/a", policy.AccessReadWrite)
	got := e.decide(t, r, Decision{Approve: true, Scope: ScopeSession, ReadOnly: true})
	if !e.app.folders()[0].ReadOnly || got.Path != provider.GrantSlotRO+"/a" {
		t.Fatalf("narrowed: %+v", got)
	}
	rw := e.askFolder(t, "src/a", policy.AccessReadWrite)
	if rw.State != StatePending {
		t.Fatalf("read-write again after a read-only session approval: %s %q, want a prompt", rw.State, rw.Detail)
	}
	for _, f := range e.app.folders() {
		if !f.ReadOnly {
			t.Fatalf("granted read-write without a prompt: %+v", f)
		}
	}
	if ro := e.askFolder(t, "src/a", policy.AccessReadOnly); ro.State != StateApproved || ro.Grant != got.Grant {
		t.Fatalf("read-only again: %+v", ro)
	}
}

func TestCheckDenyForSession(t *testing.T) {
	e := newBkEnv(t, "")
	e.approver(t)
	r := e.pending(t, "src/a", "")
	d := e.decide(t, r, Decision{Reason: "not \x1b[2Jthat", ForSession: true, By: "uid 1000"})
	if d.State != StateDenied || d.Detail != "denied by uid 1000: not [2Jthat" {
		t.Fatalf("%+v", d)
	}
	prompts := e.count("prompted")
	again := e.askFolder(t, "src/a", "")
	if again.State != StateDenied || !strings.Contains(again.Detail, "denied for this session") || e.count("prompted") != prompts {
		t.Fatalf("after deny for the session: %+v", again)
	}
	// Only the identical request: read-write still asks.
	e.pending(t, "src/a", policy.AccessReadWrite)
	// A plain deny does not stick.
	b := e.pending(t, "src/b", "")
	e.decide(t, b, Decision{})
	e.pending(t, "src/b", "")
}

func TestCheckTTLScope(t *testing.T) {
	e := newBkEnv(t, "")
	e.approver(t)
	r := e.pending(t, "src/a", "")
	got := e.decide(t, r, Decision{Approve: true, Scope: ScopeTTL, TTL: policy.Duration(200 * time.Millisecond)})
	if got.Decision.Expires.IsZero() || !got.Decision.Expires.After(got.Decision.At) {
		t.Fatalf("decision %+v", got.Decision)
	}
	bkEventually(t, "the ttl grant is revoked", func() bool { return slices.Equal(e.app.revokedLabels(), []string{"a"}) })
	bkEventually(t, "the grant shows revoked", func() bool {
		g, _ := bkGrant(e.b.Grants(context.Background()), got.Grant)
		return !g.Desired && !g.Effective
	})
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.events {
		if ev.Activity == "revoked" && !strings.HasPrefix(ev.By, "expiry (") {
			t.Fatalf("revoked by %q", ev.By)
		}
	}
}

func TestCheckRevoke(t *testing.T) {
	e := newBkEnv(t, "")
	e.approver(t)
	e.app.set(func(f *bkApplier) {
		f.holders = []provider.Holder{{PID: 812, FD: 3, Path: "/grants/ro/a/f"}, {PID: 9, FD: -2, Path: "/"}}
	})
	r := e.pending(t, "src/a", "")
	got := e.decide(t, r, Decision{Approve: true})
	g, err := e.b.Revoke(context.Background(), got.Grant, "uid 1000", true)
	if err != nil {
		t.Fatal(err)
	}
	if g.Desired || g.Effective || !bkHasAll(g.Detail, "held: pid 812 fd 3 (/grants/ro/a/f) killed", "pid 9 root (/)") {
		t.Fatalf("revoked %+v", g)
	}
	// Twice: nothing more happens.
	if g2, err := e.b.Revoke(context.Background(), got.Grant, "uid 1000", false); err != nil || len(e.app.revokedLabels()) != 1 || g2.Desired {
		t.Fatalf("second revoke: %+v %v", g2, err)
	}
	// The holders reported at revoke stay in the grant's read-back.
	gg, _ := bkGrant(e.b.Grants(context.Background()), got.Grant)
	if gg.Folder == nil || len(gg.Folder.Holders) != 2 || gg.Folder.State != provider.GrantRevoked {
		t.Fatalf("grants after revoke: %+v", gg.Folder)
	}
	if _, err := e.b.Revoke(context.Background(), "grant-none", "me", false); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown grant: %v", err)
	}
}

// A revoked grant the sandbox no longer lists is revoked, not missing.
func TestCheckRevokedNotListed(t *testing.T) {
	e := newBkEnv(t, "")
	e.approver(t)
	r := e.pending(t, "src/a", "")
	got := e.decide(t, r, Decision{Approve: true})
	if _, err := e.b.Revoke(context.Background(), got.Grant, "me", false); err != nil {
		t.Fatal(err)
	}
	e.app.set(func(f *bkApplier) { delete(f.grants, "a") })
	g, _ := bkGrant(e.b.Grants(context.Background()), got.Grant)
	if g.Effective || g.Folder.State != provider.GrantRevoked {
		t.Fatalf("revoked, unlisted: %+v", g.Folder)
	}
}

// A revoke that fails leaves the grant desired and in force, and says so.
func TestCheckRevokeFails(t *testing.T) {
	e := newBkEnv(t, "")
	e.approver(t)
	r := e.pending(t, "src/a", "")
	got := e.decide(t, r, Decision{Approve: true, Scope: ScopeSession})
	e.app.set(func(f *bkApplier) { f.revokeErr = errors.New("umount: EBUSY") })
	g, err := e.b.Revoke(context.Background(), got.Grant, "me", false)
	if err == nil || !g.Desired || !g.Effective || !strings.Contains(g.Detail, "EBUSY") {
		t.Fatalf("failed revoke: %+v %v", g, err)
	}
	if q, _ := e.b.Get(r.ID); q.State != StateApproved || !q.Effective {
		t.Fatalf("request after a failed revoke: %s effective %v, want still approved and effective", q.State, q.Effective)
	}
	if e.count("revoked") != 0 || e.count(ActRevokeFailed) != 1 {
		t.Fatalf("events: %d revoked, %d revoke_failed", e.count("revoked"), e.count(ActRevokeFailed))
	}
	// It can be revoked once the sandbox lets go.
	e.app.set(func(f *bkApplier) { f.revokeErr = nil })
	if g, err := e.b.Revoke(context.Background(), got.Grant, "me", false); err != nil || g.Desired {
		t.Fatalf("second revoke: %+v %v", g, err)
	}
}

var bkErrApply = errors.New("mount failed: EPERM")

var labelRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

func TestCheckLabels(t *testing.T) {
	e := newBkEnv(t, "  rate: {burst: 100, per: 1m}\n")
	e.approver(t)
	hostile := []string{"src/x/docs", "src/y/docs", "src/...", "src/ünï\x01\x7f\u202e", "src/" + strings.Repeat("long", 30), "src/-rf", "src/.hidden"}
	for _, d := range hostile {
		if err := os.MkdirAll(e.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for _, d := range hostile {
		r := e.pending(t, d, "")
		got := e.decide(t, r, Decision{Approve: true})
		if got.State != StateApproved {
			t.Fatalf("%s: %+v", d, got)
		}
	}
	for _, fg := range e.app.folders() {
		l := fg.Label
		if !labelRE.MatchString(l) || l == "." || l == ".." || strings.HasPrefix(l, ".") || seen[l] {
			t.Errorf("label %q of %s: unsafe or reused", l, fg.Source)
		}
		seen[l] = true
	}
	if l := e.app.folders()[1].Label; l != "docs-2" {
		t.Errorf("second docs: label %q, want docs-2", l)
	}
	// Revoked, a label is still not reused.
	first := e.app.folders()[0]
	gs := e.b.Grants(context.Background())
	if _, err := e.b.Revoke(context.Background(), gs[0].ID, "me", false); err != nil {
		t.Fatal(err)
	}
	r := e.pending(t, "src/x/docs", "")
	e.decide(t, r, Decision{Approve: true})
	if l := e.app.folders()[len(hostile)].Label; l == first.Label || seen[l] {
		t.Errorf("after revoke: label %q reused", l)
	}
	// The base names no directory can have.
	for _, p := range []string{"/x/..", "/x/.", "/", "/x/\x00"} {
		if l := e.b.label(p); !labelRE.MatchString(l) || strings.HasPrefix(l, ".") {
			t.Errorf("label(%q) = %q", p, l)
		}
	}
}

func TestCheckReasonCleaned(t *testing.T) {
	for in, want := range map[string]string{
		"plain reason":                        "plain reason",
		"ansi \x1b[31mred\x1b[0m":             "ansi [31mred[0m",
		"bidi \u202egnp.exe\u202c tail":       "bidi gnp.exe tail",
		"isolate \u2066x\u2069 lrm\u200e":     "isolate x lrm",
		"lines\nand\r\ntabs\tand\u2028\u2029": "linesandtabsand",
		"c1 \u0085\u009b controls":            "c1  controls",
	} {
		if got := cleanReason(in); got != want {
			t.Errorf("cleanReason(%q) = %q, want %q", in, got, want)
		}
	}
	e := newBkEnv(t, "")
	e.approver(t)
	long := strings.Repeat("é", 700) // 1400 bytes
	r := e.ask(t, KindFolder, e.path("src/a"), "", long)
	if len(r.Reason) > MaxReason || len(r.Reason) < MaxReason-1 || !utf8.ValidString(r.Reason) || !strings.HasPrefix(long, r.Reason) {
		t.Fatalf("a long reason kept %d bytes (valid %v)", len(r.Reason), utf8.ValidString(r.Reason))
	}
	r = e.ask(t, KindFolder, e.path("src/b"), "", "x\u202e"+strings.Repeat("a", 2000))
	if len(r.Reason) != MaxReason || strings.ContainsRune(r.Reason, '\u202e') {
		t.Fatalf("reason %d bytes", len(r.Reason))
	}
}

func TestCheckWait(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Run("decided returns at once", func(t *testing.T) {
		e := newBkEnv(t, "")
		r := e.askFolder(t, "src/a", "") // denied: no approver
		got, err := e.b.Wait(ctx, r.ID, MaxWait)
		if err != nil || got.State != StateDenied {
			t.Fatalf("%+v %v", got, err)
		}
	})
	t.Run("wakes on a decision", func(t *testing.T) {
		e := newBkEnv(t, "")
		e.approver(t)
		r := e.pending(t, "src/a", "")
		done := e.waitAsync(t, ctx, r.ID, time.Hour) // MaxWait, longer than ctx
		e.decide(t, r, Decision{Approve: true})
		if got := <-done; got.State != StateApproved || !got.Effective {
			t.Fatalf("woke with %+v", got)
		}
	})
	t.Run("times out pending", func(t *testing.T) {
		e := newBkEnv(t, "")
		e.approver(t)
		r := e.pending(t, "src/a", "")
		got, err := e.b.Wait(ctx, r.ID, 50*time.Millisecond)
		if err != nil || got.State != StatePending {
			t.Fatalf("%+v %v", got, err)
		}
	})
	t.Run("context ends", func(t *testing.T) {
		e := newBkEnv(t, "")
		e.approver(t)
		r := e.pending(t, "src/a", "")
		c, cancel := context.WithCancel(ctx)
		cancel()
		if got, err := e.b.Wait(c, r.ID, time.Minute); !errors.Is(err, context.Canceled) || got.State != StatePending {
			t.Fatalf("%+v %v", got, err)
		}
	})
	t.Run("waits for the read-back", func(t *testing.T) {
		e := newBkEnv(t, "")
		e.approver(t)
		hold, applying := make(chan struct{}), make(chan struct{}, 1)
		e.app.set(func(f *bkApplier) { f.hold, f.applying = hold, applying })
		r := e.pending(t, "src/a", "")
		decided := e.decideAsync(r)
		<-applying
		// Approved, not yet in force: a waiter with a short timeout is
		// told it is being applied, not that it failed.
		if q, _ := e.b.Wait(ctx, r.ID, 10*time.Millisecond); q.State != StateApproved || q.Effective || !strings.Contains(q.Detail, "being put in force") {
			t.Errorf("while applying: %+v", q)
		}
		// A waiter with time to spare gets the read-back, however late it
		// comes (the release only lets the applier go on; the answer
		// does not depend on when).
		go func() { time.Sleep(50 * time.Millisecond); close(hold) }()
		waited, err := e.b.Wait(ctx, r.ID, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		for _, got := range []Request{waited, <-decided} {
			if got.State != StateApproved || !got.Effective || got.Grant == "" {
				t.Fatalf("after the read-back: %+v", got)
			}
		}
	})
	t.Run("unknown", func(t *testing.T) {
		e := newBkEnv(t, "")
		if _, err := e.b.Wait(ctx, "req-none", time.Second); !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
	})
}

// A decision is applied even when the approver's connection ends just
// after: the first answer won, and what was decided is put in force.
func TestCheckApplyOutlivesTheCaller(t *testing.T) {
	e := newBkEnv(t, "")
	e.approver(t)
	r := e.pending(t, "src/a", "")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got, err := e.b.Decide(ctx, r.ID, Decision{Approve: true, Digest: r.Digest})
	if err != nil || got.State != StateApproved || !got.Effective {
		t.Fatalf("%+v %v", got, err)
	}
}

// An approval being applied is not dropped from the requests however
// many others are decided meanwhile.
func TestCheckApplyingKept(t *testing.T) {
	e := newBkEnv(t, "")
	e.approver(t)
	hold, applying := make(chan struct{}), make(chan struct{}, 1)
	e.app.set(func(f *bkApplier) { f.hold, f.applying = hold, applying })
	r := e.pending(t, "src/a", "")
	decided := e.decideAsync(r)
	<-applying
	for range maxDecided + 10 {
		e.askFolder(t, "other", "") // refused, kept as decided
	}
	if _, ok := e.b.Get(r.ID); !ok {
		t.Fatal("the request being applied was dropped")
	}
	close(hold)
	<-decided
	if q, ok := e.b.Get(r.ID); !ok || !q.Effective {
		t.Fatalf("%+v %v", q, ok)
	}
	if n := len(e.b.Requests()); n > maxDecided+1 {
		t.Fatalf("%d requests kept", n)
	}
}

func TestCheckRequestsAndClose(t *testing.T) {
	e := newBkEnv(t, "")
	e.approver(t)
	a := e.pending(t, "src/a", "")
	b := e.pending(t, "src/b", "")
	rs := e.b.Requests()
	if len(rs) != 2 || rs[0].ID != b.ID || rs[1].ID != a.ID {
		t.Fatalf("requests %v, want newest first", rs)
	}
	e.b.Close()
	e.b.Close()
	for _, id := range []string{a.ID, b.ID} {
		if q, _ := e.b.Get(id); q.State != StateExpired || q.Detail != "the session ended" {
			t.Fatalf("after Close: %+v", q)
		}
	}
	if _, err := e.b.Ask(context.Background(), Ask{Kind: KindFolder, Target: e.path("other")}, Requester{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("ask after close: %v", err)
	}
}

func TestCheckMalformedAsks(t *testing.T) {
	e := newBkEnv(t, "")
	e.approver(t)
	if err := os.WriteFile(e.path("src/file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, a := range []Ask{
		{Kind: "", Target: e.path("src/a")},
		{Kind: "exec", Target: "/bin/sh"},
		{Kind: KindFolder, Target: "src/a"},
		{Kind: KindFolder, Target: e.path("src/missing")},
		{Kind: KindFolder, Target: e.path("src/file")},
		{Kind: KindFolder, Target: e.path("src/a") + "\x00"},
		{Kind: KindFolder, Target: e.path("src/a"), Access: "rwx"},
		{Kind: KindHost, Target: "api.a.test:0"},
		{Kind: KindHost, Target: "api.a.test:http"},
		{Kind: KindHost, Target: ":443"},
		{Kind: KindHost, Target: "a b.a.test:443"},
	} {
		r, err := e.b.Ask(context.Background(), a, Requester{})
		var ae *AskError
		if !errors.As(err, &ae) || ae.Msg == "" {
			t.Errorf("%+v: %+v %v, want an AskError", a, r, err)
		}
	}
	if e.count("prompted") != 0 || len(e.b.Requests()) != 0 {
		t.Fatal("a malformed request was kept or prompted")
	}
	// Filepath tricks resolve to the canonical target first.
	if err := os.Symlink(e.path("src/a"), e.path("src/link")); err != nil {
		t.Fatal(err)
	}
	if r := e.askFolder(t, "src/link", ""); r.Target != e.path("src/a") || r.State != StatePending {
		t.Fatalf("through a link: %+v", r)
	}
	if err := os.Symlink(e.path("other"), e.path("src/out")); err != nil {
		t.Fatal(err)
	}
	if r := e.askFolder(t, "src/out", ""); r.State != StateRefused || r.Target != e.path("other") {
		t.Fatalf("a link out of the ceiling: %+v", r)
	}
}

package consent

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

func approve(r Request) Decision {
	return Decision{Approve: true, Digest: r.Digest, By: "uid 1000"}
}

func TestAskOutsideCeilingRefusedWithoutPrompt(t *testing.T) {
	f := newRig(t, "")
	b := f.broker(t, Config{})
	ch := rigWatch(t, b)
	for _, c := range []struct {
		ask   Ask
		field string
	}{
		{Ask{Kind: KindFolder, Target: "/etc"}, "consent.folders.ask"},
		{Ask{Kind: KindFolder, Target: filepath.Join(f.src, "b")}, "filesystem.deny[0]"}, // holds a deny: masked, so allowed? see below
		{Ask{Kind: KindFolder, Target: filepath.Join(f.src, "b", "secret")}, "filesystem.deny[0]"},
		{Ask{Kind: KindFolder, Target: filepath.Join(f.src, "c", "never")}, "consent.folders.never[0]"},
		{Ask{Kind: KindHost, Target: "other.org:443"}, "consent.hosts.ask"},
		{Ask{Kind: KindHost, Target: "bad.example.com:443"}, "consent.hosts.never[0]"},
	} {
		r, err := b.Ask(rigCtx, c.ask, Requester{PID: 7, Via: "tcp"})
		if err != nil {
			t.Fatal(err)
		}
		if c.ask.Target == filepath.Join(f.src, "b") {
			// A folder holding a denied path may be asked for: the path is masked in the grant.
			if r.State != StatePending || r.Ceiling != "consent.folders.ask[0]" {
				t.Fatalf("%s: %+v, want pending by consent.folders.ask[0]", c.ask.Target, r)
			}
			continue
		}
		if r.State != StateRefused || r.Ceiling != c.field || !strings.Contains(r.Detail, "nobody was asked") {
			t.Errorf("%s: state %s ceiling %q detail %q, want refused by %s", c.ask.Target, r.State, r.Ceiling, r.Detail, c.field)
		}
	}
	var prompted []string
	for len(ch) > 0 {
		if e := <-ch; e.Activity == ActPrompted {
			prompted = append(prompted, e.Request.Target)
		}
	}
	if want := []string{filepath.Join(f.src, "b")}; !slices.Equal(prompted, want) {
		t.Errorf("prompted %v, want only %v", prompted, want)
	}
	if n := f.app.appliedN(); n != 0 {
		t.Errorf("%d grants applied", n)
	}
}

func TestAskMalformed(t *testing.T) {
	f := newRig(t, "")
	b := f.broker(t, Config{})
	for _, a := range []Ask{
		{Kind: "command", Target: "/bin/sh"},
		{Kind: KindFolder, Target: "src/a"},
		{Kind: KindFolder, Target: filepath.Join(f.src, "missing")},
		{Kind: KindFolder, Target: filepath.Join(f.src, "a"), Access: "x"},
		{Kind: KindHost, Target: "a.example.com:0"},
		{Kind: KindHost, Target: "a.example.com:65536"},
		{Kind: KindHost, Target: "*.example.com:443"},
	} {
		r, err := b.Ask(rigCtx, a, Requester{})
		var ae *AskError
		if !errors.As(err, &ae) && r.State != StateRefused {
			t.Errorf("%+v: %+v %v, want an AskError or refused", a, r, err)
		}
	}
}

func TestNoApproverDenies(t *testing.T) {
	f := newRig(t, "")
	b := f.broker(t, Config{})
	r, err := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: filepath.Join(f.src, "a")}, Requester{})
	if err != nil {
		t.Fatal(err)
	}
	if r.State != StateDenied || r.Detail != ErrNoApprover.Error() {
		t.Fatalf("%s %q, want denied: no approver", r.State, r.Detail)
	}
}

func TestApproveAppliesAndWaitWakes(t *testing.T) {
	f := newRig(t, "")
	b := f.broker(t, Config{})
	ch := rigWatch(t, b)
	target := filepath.Join(f.src, "b")
	r, err := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: target + "/./", Access: policy.AccessReadWrite, Reason: "build\x1b[31m it\n"}, Requester{PID: 42, Exe: "/usr/bin/make", Via: "tcp"})
	if err != nil {
		t.Fatal(err)
	}
	if r.State != StatePending || r.Target != target || r.Reason != "build[31m it" || !strings.HasPrefix(r.ID, "req-") || len(r.ID) != 20 {
		t.Fatalf("ask: %+v", r)
	}
	if e := rigNext(t, ch, ActPrompted); e.Request.ID != r.ID {
		t.Fatalf("prompted %+v", e)
	}
	done := make(chan Request)
	go func() {
		w, err := b.Wait(rigCtx, r.ID, time.Minute)
		if err != nil {
			t.Error(err)
		}
		done <- w
	}()
	got, err := b.Decide(rigCtx, r.ID, rigApprove(r))
	if err != nil {
		t.Fatal(err)
	}
	w := <-done
	for _, q := range []Request{got, w} {
		if q.State != StateApproved || !q.Effective || q.Grant == "" || !strings.HasPrefix(q.Path, provider.GrantSlotRW+"/b") {
			t.Fatalf("approved: %+v", q)
		}
	}
	fg := f.app.applied[0]
	if fg.Source != target || fg.ReadOnly || !slices.Equal(fg.Masks, []string{filepath.Join(target, "secret")}) || fg.Dev == 0 || fg.Ino == 0 {
		t.Errorf("folder grant %+v", fg)
	}
	e := rigNext(t, ch, ActApplied)
	if e.Grant == nil || e.Grant.Folder == nil || len(e.Grant.Folder.MountIDs) != 1 || e.By != "uid 1000" {
		t.Errorf("applied event %+v", e)
	}
	gs := b.Grants(rigCtx)
	if len(gs) != 1 || !gs[0].Desired || !gs[0].Effective || gs[0].Access != policy.AccessReadWrite {
		t.Errorf("grants %+v", gs)
	}
}

func TestReadOnlyNarrowing(t *testing.T) {
	f := newRig(t, "")
	b := f.broker(t, Config{})
	rigWatch(t, b)
	r, _ := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: filepath.Join(f.src, "a"), Access: policy.AccessReadWrite}, Requester{})
	d := rigApprove(r)
	d.ReadOnly = true
	got, err := b.Decide(rigCtx, r.ID, d)
	if err != nil {
		t.Fatal(err)
	}
	if !f.app.applied[0].ReadOnly || !strings.HasPrefix(got.Path, provider.GrantSlotRO+"/") {
		t.Errorf("narrowed grant %+v at %s, want read-only", f.app.applied[0], got.Path)
	}
}

func TestLabelsSanitizedNeverReused(t *testing.T) {
	f := newRig(t, "")
	b := f.broker(t, Config{})
	rigWatch(t, b)
	target := filepath.Join(f.src, "Weird name ünï")
	var labels []string
	for range 2 {
		r, _ := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: target}, Requester{})
		got, err := b.Decide(rigCtx, r.ID, rigApprove(r))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Revoke(rigCtx, got.Grant, "test", false); err != nil {
			t.Fatal(err)
		}
		labels = append(labels, f.app.applied[len(f.app.applied)-1].Label)
	}
	for _, l := range labels {
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._-", c)) {
				t.Errorf("label %q has %q", l, c)
			}
		}
	}
	if labels[0] == labels[1] {
		t.Errorf("label reused: %v", labels)
	}
}

func TestFirstAnswerWins(t *testing.T) {
	f := newRig(t, "")
	b := f.broker(t, Config{})
	rigWatch(t, b)
	r, _ := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: filepath.Join(f.src, "a")}, Requester{})
	const n = 64
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins, lost := 0, 0
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			d := rigApprove(r)
			if i%2 == 1 {
				d = Decision{Digest: r.Digest, By: "other"}
			}
			_, err := b.Decide(rigCtx, r.ID, d)
			mu.Lock()
			defer mu.Unlock()
			var de *DecidedError
			switch {
			case err == nil:
				wins++
			case errors.As(err, &de):
				lost++
			default:
				t.Error(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if wins != 1 || lost != n-1 {
		t.Fatalf("%d wins, %d lost, want exactly 1 winner", wins, lost)
	}
	q, _ := b.Get(r.ID)
	_, err := b.Decide(rigCtx, r.ID, rigApprove(r))
	if !strings.Contains(err.Error(), "already decided by "+q.Decision.By) {
		t.Errorf("the second answer's error %q does not name the first (%s)", err, q.Decision.By)
	}
	if q.State == StateApproved && f.app.appliedN() != 1 || q.State == StateDenied && f.app.appliedN() != 0 {
		t.Errorf("state %s with %d applies", q.State, f.app.appliedN())
	}
}

func TestDigestMismatchRefused(t *testing.T) {
	f := newRig(t, "")
	b := f.broker(t, Config{})
	rigWatch(t, b)
	r, _ := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: filepath.Join(f.src, "a")}, Requester{})
	r2, _ := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: filepath.Join(f.src, "a"), Access: policy.AccessReadWrite}, Requester{})
	if r.Digest == r2.Digest {
		t.Fatal("ro and rw requests share a digest")
	}
	if _, err := b.Decide(rigCtx, r.ID, approve(r2)); !errors.Is(err, ErrDigest) {
		t.Fatalf("decide with another request's digest: %v, want ErrDigest", err)
	}
	if q, _ := b.Get(r.ID); q.State != StatePending {
		t.Fatalf("after a digest mismatch: %s, want still pending", q.State)
	}
	if _, err := b.Decide(rigCtx, r.ID, rigApprove(r)); err != nil {
		t.Fatal(err)
	}
}

func TestSwappedFolderRefused(t *testing.T) {
	f := newRig(t, "")
	b := f.broker(t, Config{})
	rigWatch(t, b)
	target := filepath.Join(f.src, "a")
	r, _ := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: target}, Requester{})
	if err := os.Rename(target, target+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := b.Decide(rigCtx, r.ID, rigApprove(r))
	if !errors.Is(err, ErrChanged) || got.State != StateRefused || got.Effective {
		t.Fatalf("swapped folder: %s %v, want refused (ErrChanged)", got.State, err)
	}
	if n := f.app.appliedN(); n != 0 {
		t.Errorf("%d grants applied for a swapped folder", n)
	}
}

func TestCoalescing(t *testing.T) {
	f := newRig(t, "")
	b := f.broker(t, Config{})
	ch := rigWatch(t, b)
	a := Ask{Kind: KindFolder, Target: filepath.Join(f.src, "a"), Reason: "short"}
	r1, _ := b.Ask(rigCtx, a, Requester{})
	a.Reason = "a longer reason"
	r2, _ := b.Ask(rigCtx, a, Requester{})
	a.Reason = "tiny"
	r3, _ := b.Ask(rigCtx, a, Requester{})
	if r1.ID != r2.ID || r2.ID != r3.ID || r3.Asked != 3 || r3.Reason != "a longer reason" {
		t.Fatalf("coalesced: %s %s %s asked %d reason %q", r1.ID, r2.ID, r3.ID, r3.Asked, r3.Reason)
	}
	rw, _ := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: a.Target, Access: policy.AccessReadWrite}, Requester{})
	if rw.ID == r1.ID {
		t.Fatal("a read-write request coalesced with a read-only one")
	}
	prompts := 0
	for len(ch) > 0 {
		if (<-ch).Activity == ActPrompted {
			prompts++
		}
	}
	if prompts != 2 {
		t.Errorf("%d prompts, want 2 (one per distinct request)", prompts)
	}
}

func TestRateLimit(t *testing.T) {
	f := newRig(t, "")
	f.r.Consent.Burst, f.r.Consent.Per, f.r.Consent.MaxPending = 2, time.Hour, 100
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	b := f.broker(t, Config{Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
	rigWatch(t, b)
	ask := func(dir string) Request {
		r, err := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: filepath.Join(f.src, dir)}, Requester{})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if ask("a").State != StatePending || ask("b").State != StatePending {
		t.Fatal("within the burst: not pending")
	}
	if r := ask("a"); r.State != StatePending || r.Asked != 2 {
		t.Fatalf("a coalesced request is free: %s asked %d", r.State, r.Asked)
	}
	if r := ask("a/sub"); r.State != StateRateLimited {
		t.Fatalf("over the burst: %s, want rate_limited", r.State)
	}
	mu.Lock()
	now = now.Add(30 * time.Minute) // one token back (2 per hour)
	mu.Unlock()
	if r := ask("a/sub"); r.State != StatePending {
		t.Fatalf("after the refill: %s, want pending", r.State)
	}
	if !slices.Contains(f.events.activities(), ActRateLimited) {
		t.Error("no rate_limited event")
	}
}

func TestMaxPending(t *testing.T) {
	f := newRig(t, "")
	f.r.Consent.MaxPending = 2
	b := f.broker(t, Config{})
	rigWatch(t, b)
	var states []State
	for _, d := range []string{"a", "b", "a/sub"} {
		r, _ := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: filepath.Join(f.src, d)}, Requester{})
		states = append(states, r.State)
	}
	if want := []State{StatePending, StatePending, StateRateLimited}; !slices.Equal(states, want) {
		t.Fatalf("states %v, want %v", states, want)
	}
}

func TestTimeoutExpires(t *testing.T) {
	f := newRig(t, "")
	f.r.Consent.Timeout = 20 * time.Millisecond
	b := f.broker(t, Config{})
	ch := rigWatch(t, b)
	r, _ := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: filepath.Join(f.src, "a")}, Requester{})
	w, err := b.Wait(rigCtx, r.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if w.State != StateExpired {
		t.Fatalf("after the timeout: %s, want expired", w.State)
	}
	rigNext(t, ch, ActExpired)
	if _, err := b.Decide(rigCtx, r.ID, rigApprove(r)); !errors.As(err, new(*DecidedError)) {
		t.Fatalf("deciding an expired request: %v, want a DecidedError", err)
	}
}

func TestWaitTimesOutPending(t *testing.T) {
	f := newRig(t, "")
	b := f.broker(t, Config{})
	rigWatch(t, b)
	r, _ := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: filepath.Join(f.src, "a")}, Requester{})
	w, err := b.Wait(rigCtx, r.ID, time.Millisecond)
	if err != nil || w.State != StatePending {
		t.Fatalf("%s %v, want still pending", w.State, err)
	}
	if _, err := b.Wait(rigCtx, "req-nope", time.Millisecond); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
}

func TestSessionDecisions(t *testing.T) {
	f := newRig(t, "")
	b := f.broker(t, Config{})
	rigWatch(t, b)
	a := Ask{Kind: KindFolder, Target: filepath.Join(f.src, "a"), Access: policy.AccessReadWrite}
	r, _ := b.Ask(rigCtx, a, Requester{})
	d := rigApprove(r)
	d.Scope = ScopeSession
	if _, err := b.Decide(rigCtx, r.ID, d); err != nil {
		t.Fatal(err)
	}
	// The same folder read-only is covered by the read-write grant: answered at once.
	again, _ := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: a.Target}, Requester{})
	if again.State != StateApproved || !again.Effective || f.app.appliedN() != 1 {
		t.Fatalf("covered request: %+v (%d applies)", again, f.app.appliedN())
	}
	h, _ := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: filepath.Join(f.src, "b")}, Requester{})
	if _, err := b.Decide(rigCtx, h.ID, Decision{Digest: h.Digest, By: "me", Reason: "no", ForSession: true}); err != nil {
		t.Fatal(err)
	}
	again, _ = b.Ask(rigCtx, Ask{Kind: KindFolder, Target: filepath.Join(f.src, "b")}, Requester{})
	if again.State != StateDenied || again.ID == h.ID {
		t.Fatalf("after deny --for-session: %+v, want denied at once", again)
	}
}

func TestScopeTTLRevokes(t *testing.T) {
	f := newRig(t, "")
	b := f.broker(t, Config{})
	ch := rigWatch(t, b)
	r, _ := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: filepath.Join(f.src, "a")}, Requester{})
	d := rigApprove(r)
	d.Scope, d.TTL = ScopeTTL, policy.Duration(20*time.Millisecond)
	got, err := b.Decide(rigCtx, r.ID, d)
	if err != nil {
		t.Fatal(err)
	}
	e := rigNext(t, ch, ActRevoked)
	if e.Grant.ID != got.Grant || e.Grant.Desired || e.Grant.Effective {
		t.Fatalf("ttl revoke: %+v", e.Grant)
	}
	d.Expires, d.TTL = time.Now().Add(-time.Hour), 0
	r2, _ := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: filepath.Join(f.src, "b")}, Requester{})
	d.Digest = r2.Digest
	if _, err := b.Decide(rigCtx, r2.ID, d); !errors.As(err, new(*AskError)) {
		t.Fatalf("ttl in the past: %v, want refused", err)
	}
}

func TestRevokeReportsHolders(t *testing.T) {
	f := newRig(t, "")
	f.app.holders = []provider.Holder{{PID: 812, FD: 3, Path: "/held.txt"}, {PID: 813, FD: -1, Path: "/"}}
	b := f.broker(t, Config{})
	ch := rigWatch(t, b)
	r, _ := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: filepath.Join(f.src, "a")}, Requester{})
	got, _ := b.Decide(rigCtx, r.ID, rigApprove(r))
	g, err := b.Revoke(rigCtx, got.Grant, "uid 1000", false)
	if err != nil {
		t.Fatal(err)
	}
	if g.Desired || g.Effective || !strings.Contains(g.Detail, "held: pid 812 fd 3 (/held.txt)") || !strings.Contains(g.Detail, "pid 813 cwd") {
		t.Fatalf("revoked grant %+v", g)
	}
	e := rigNext(t, ch, ActRevoked)
	if len(e.Grant.Folder.Holders) != 2 || e.By != "uid 1000" {
		t.Errorf("revoked event %+v", e)
	}
	if q, _ := b.Get(r.ID); q.State != StateRevoked {
		t.Errorf("request after revoke: %s", q.State)
	}
}

func TestApplyFailed(t *testing.T) {
	f := newRig(t, "")
	f.app.applyErr = errors.New("mount: EPERM")
	b := f.broker(t, Config{})
	rigWatch(t, b)
	r, _ := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: filepath.Join(f.src, "a")}, Requester{})
	got, _ := b.Decide(rigCtx, r.ID, rigApprove(r))
	if got.State != StateFailed || got.Effective || !strings.Contains(got.Detail, "EPERM") {
		t.Fatalf("%+v", got)
	}
	if len(b.Grants(rigCtx)) != 0 {
		t.Error("a grant recorded for a failed apply")
	}
	if !slices.Contains(f.events.activities(), ActApplyFailed) {
		t.Error("no apply_failed event")
	}
}

func TestNotEffectiveUnlessReadBack(t *testing.T) {
	f := newRig(t, "")
	f.app.state = provider.GrantMissing
	b := f.broker(t, Config{})
	rigWatch(t, b)
	r, _ := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: filepath.Join(f.src, "a")}, Requester{})
	got, _ := b.Decide(rigCtx, r.ID, rigApprove(r))
	if got.Effective {
		t.Fatalf("effective although the sandbox shows the grant %s: %+v", provider.GrantMissing, got)
	}
}

func TestHostGrant(t *testing.T) {
	f := newRig(t, "")
	b := f.broker(t, Config{})
	rigWatch(t, b)
	r, err := b.Ask(rigCtx, Ask{Kind: KindHost, Target: "API.Example.com.:443"}, Requester{})
	if err != nil {
		t.Fatal(err)
	}
	if r.State != StatePending || r.Target != "api.example.com:443" || r.Access != "" {
		t.Fatalf("host ask %+v", r)
	}
	got, err := b.Decide(rigCtx, r.ID, rigApprove(r))
	if err != nil || !got.Effective || !slices.Equal(f.app.hosts, []string{"api.example.com"}) {
		t.Fatalf("%+v %v hosts %v", got, err, f.app.hosts)
	}
	g, err := b.Revoke(rigCtx, got.Grant, "me", false)
	if err != nil || g.Effective || g.Revision != 2 || !slices.Equal(f.app.unhosts, []string{"api.example.com"}) {
		t.Fatalf("revoke %+v %v", g, err)
	}
}

func TestSlowWatcherDropsAndSaysSo(t *testing.T) {
	f := newRig(t, "")
	b := f.broker(t, Config{})
	ch := rigWatch(t, b) // never read until the end
	for range watchBuffer + 5 {
		if _, err := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: "/etc"}, Requester{}); err != nil {
			t.Fatal(err)
		}
	}
	for range watchBuffer {
		<-ch
	}
	_, _ = b.Ask(rigCtx, Ask{Kind: KindFolder, Target: "/etc"}, Requester{})
	if e := <-ch; e.Dropped != 5 {
		t.Fatalf("dropped %d, want 5", e.Dropped)
	}
}

func TestCloseExpiresPending(t *testing.T) {
	f := newRig(t, "")
	b := f.broker(t, Config{})
	rigWatch(t, b)
	r, _ := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: filepath.Join(f.src, "a")}, Requester{})
	done := make(chan Request)
	go func() { w, _ := b.Wait(rigCtx, r.ID, time.Minute); done <- w }()
	b.Close()
	if w := <-done; w.State != StateExpired {
		t.Fatalf("after Close: %s", w.State)
	}
	if _, err := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: filepath.Join(f.src, "a")}, Requester{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("ask after close: %v", err)
	}
}

func TestDigestCoversIdentity(t *testing.T) {
	base := Digest(KindFolder, "/a", 1, 2, policy.AccessReadOnly, "sha256:p")
	for _, d := range []string{
		Digest(KindFolder, "/b", 1, 2, policy.AccessReadOnly, "sha256:p"),
		Digest(KindFolder, "/a", 1, 3, policy.AccessReadOnly, "sha256:p"),
		Digest(KindFolder, "/a", 9, 2, policy.AccessReadOnly, "sha256:p"),
		Digest(KindFolder, "/a", 1, 2, policy.AccessReadWrite, "sha256:p"),
		Digest(KindFolder, "/a", 1, 2, policy.AccessReadOnly, "sha256:q"),
		Digest(KindHost, "/a", 1, 2, policy.AccessReadOnly, "sha256:p"),
	} {
		if d == base {
			t.Fatalf("digest does not change with a field: %s", d)
		}
	}
	if base != Digest(KindFolder, "/a", 1, 2, policy.AccessReadOnly, "sha256:p") || !strings.HasPrefix(base, "sha256:") || len(base) != 71 {
		t.Fatalf("digest %s", base)
	}
}

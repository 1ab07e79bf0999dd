package consent

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/provider"
)

// htDo sends method path (body as JSON when not nil) to srv and decodes
// the answer into out; it returns the status.
func htDo(t *testing.T, srv *httptest.Server, method, path string, body, out any) int {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, srv.URL+path, rd)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q", method, path, ct)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, data)
		}
	}
	return resp.StatusCode
}

type htErr struct {
	Error string `json:"error"`
	Hint  string `json:"hint"`
}

func TestSandboxAPI(t *testing.T) {
	f := newRig(t, "")
	f.r.Consent.MaxPending = 2
	b := f.broker(t, Config{})
	srv := httptest.NewServer(SandboxHandler(b, func(*http.Request) Requester { return Requester{PID: 4242, Exe: "/bin/agent", Via: "tcp"} }))
	defer srv.Close()

	var denied askResponse
	if st := htDo(t, srv, "POST", "/v1/requests", Ask{Kind: KindFolder, Target: filepath.Join(f.src, "a")}, &denied); st != http.StatusForbidden || denied.State != StateDenied || denied.Detail != ErrNoApprover.Error() {
		t.Fatalf("no approver: %d %+v", st, denied)
	}
	rigWatch(t, b)
	var pend askResponse
	if st := htDo(t, srv, "POST", "/v1/requests", Ask{Kind: KindFolder, Target: filepath.Join(f.src, "a"), Reason: "docs"}, &pend); st != http.StatusAccepted || pend.State != StatePending || pend.WaitURL != "/v1/requests/"+pend.ID+"/wait?timeout=60" {
		t.Fatalf("pending: %d %+v", st, pend)
	}
	if pend.Requester.PID != 4242 || pend.Requester.Exe != "/bin/agent" {
		t.Errorf("requester %+v, want the peer's", pend.Requester)
	}
	var ref askResponse
	if st := htDo(t, srv, "POST", "/v1/requests", Ask{Kind: KindFolder, Target: "/etc"}, &ref); st != http.StatusForbidden || ref.State != StateRefused || !strings.Contains(ref.Detail, "consent.folders.ask") {
		t.Fatalf("refused: %d %+v", st, ref)
	}
	htDo(t, srv, "POST", "/v1/requests", Ask{Kind: KindFolder, Target: filepath.Join(f.src, "b")}, nil)
	var rl askResponse
	if st := htDo(t, srv, "POST", "/v1/requests", Ask{Kind: KindFolder, Target: filepath.Join(f.src, "a", "sub")}, &rl); st != http.StatusTooManyRequests || rl.State != StateRateLimited {
		t.Fatalf("max_pending: %d %+v", st, rl)
	}
	var e htErr
	if st := htDo(t, srv, "POST", "/v1/requests", []byte(`{"kind":`), &e); st != http.StatusBadRequest || e.Error == "" || e.Hint == "" {
		t.Fatalf("malformed: %d %+v", st, e)
	}
	big := append([]byte(`{"kind":"folder","target":"/x","reason":"`), bytes.Repeat([]byte("x"), MaxBody)...)
	if st := htDo(t, srv, "POST", "/v1/requests", append(big, `"}`...), &e); st != http.StatusBadRequest {
		t.Fatalf("a body over 64 KiB: %d %+v", st, e)
	}
	if st := htDo(t, srv, "GET", "/v1/requests/req-nope", nil, &e); st != http.StatusNotFound || e.Error == "" {
		t.Fatalf("unknown id: %d %+v", st, e)
	}
	var got Request
	if st := htDo(t, srv, "GET", "/v1/requests/"+pend.ID, nil, &got); st != http.StatusOK || got.ID != pend.ID || got.Reason != "docs" {
		t.Fatalf("get: %d %+v", st, got)
	}
	if st := htDo(t, srv, "GET", "/v1/requests/"+pend.ID+"/wait?timeout=x", nil, &e); st != http.StatusBadRequest {
		t.Fatalf("bad timeout: %d", st)
	}
	done := make(chan Request)
	go func() {
		var w Request
		htDo(t, srv, "GET", pend.WaitURL, nil, &w)
		done <- w
	}()
	if _, err := b.Decide(rigCtx, pend.ID, rigApprove(pend.Request)); err != nil {
		t.Fatal(err)
	}
	if w := <-done; w.State != StateApproved || !w.Effective || w.Path == "" {
		t.Fatalf("wait: %+v", w)
	}
	var gs struct {
		Grants []Grant `json:"grants"`
	}
	if st := htDo(t, srv, "GET", "/v1/grants", nil, &gs); st != http.StatusOK || len(gs.Grants) != 1 || !gs.Grants[0].Effective {
		t.Fatalf("grants: %d %+v", st, gs)
	}
	if st := htDo(t, srv, "GET", "/v1/approvals", nil, &e); st != http.StatusNotFound {
		t.Fatalf("the approvers' API on the sandbox's: %d", st)
	}
}

// htServeUnix serves h on a unix socket in a temp dir.
func htServeUnix(t *testing.T, h http.Handler) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "approvals.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// htUntil waits for cond (the broker's side of a connection that is
// asynchronous by nature), failing after 10 s.
func htUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}

func TestApproverAPIWithClient(t *testing.T) {
	f := newRig(t, "")
	f.app.holders = []provider.Holder{{PID: 812, FD: 3, Path: "/held.txt"}}
	b := f.broker(t, Config{})
	h := NewHub()
	h.Add(b)
	sock := htServeUnix(t, ApproverHandler(h, func(*http.Request) string { return "uid 1000" }))
	c, err := NewClient("unix:"+sock, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(rigCtx)
	defer cancel()
	events := make(chan Event, 64)
	watchDone := make(chan error, 1)
	go func() { watchDone <- c.Watch(ctx, func(e Event) { events <- e }) }()
	htUntil(t, "the watch registers as an approver", func() bool { return b.Approvers() == 1 })

	r, _ := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: filepath.Join(f.src, "a")}, Requester{PID: 7})
	if e := rigNext(t, events, ActPrompted); e.Request.ID != r.ID {
		t.Fatalf("watch: %+v", e)
	}
	other, _ := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: filepath.Join(f.src, "b")}, Requester{})
	list, err := c.List(rigCtx, "sb-1", StatePending)
	if err != nil || len(list) != 2 || list[0].ID != other.ID {
		t.Fatalf("list: %v %+v", err, list)
	}
	if l, _ := c.List(rigCtx, "sb-other", ""); len(l) != 0 {
		t.Fatalf("another sandbox's list: %+v", l)
	}
	if g, err := c.Get(rigCtx, r.ID); err != nil || g.Digest != r.Digest {
		t.Fatalf("get: %v %+v", err, g)
	}
	if _, err := c.Get(rigCtx, "req-nope"); provider.CodeOf(err) != provider.CodeNotFound {
		t.Fatalf("get unknown: %v", err)
	}
	if _, err := c.Approve(rigCtx, r.ID, Decision{Digest: other.Digest}); err == nil || provider.CodeOf(err) != provider.CodeStale {
		t.Fatalf("approve with another digest: %v, want a conflict", err)
	}
	got, err := c.Approve(rigCtx, r.ID, Decision{Digest: r.Digest, Scope: ScopeSession})
	if err != nil || got.State != StateApproved || !got.Effective || got.Decision.By != "uid 1000" {
		t.Fatalf("approve: %v %+v", err, got)
	}
	if _, err := c.Deny(rigCtx, r.ID, Decision{Digest: r.Digest}); err == nil || !strings.Contains(err.Error(), "already decided by uid 1000") {
		t.Fatalf("a second answer: %v", err)
	}
	d, err := c.Deny(rigCtx, other.ID, Decision{Digest: other.Digest, Reason: "not that one", ForSession: true})
	if err != nil || d.State != StateDenied || !strings.Contains(d.Detail, "not that one") {
		t.Fatalf("deny: %v %+v", err, d)
	}
	gs, err := c.Grants(rigCtx, "")
	if err != nil || len(gs) != 1 || gs[0].ID != got.Grant || !gs[0].Effective {
		t.Fatalf("grants: %v %+v", err, gs)
	}
	g, err := c.Revoke(rigCtx, got.Grant, true)
	if err != nil || g.Desired || len(g.Folder.Holders) != 1 || !g.Folder.Holders[0].Killed {
		t.Fatalf("revoke --kill: %v %+v", err, g)
	}
	if e := rigNext(t, events, ActRevoked); e.By != "uid 1000" || e.Grant.ID != got.Grant {
		t.Fatalf("revoked event %+v", e)
	}
	cancel()
	<-watchDone
	htUntil(t, "the approver leaves with the stream", func() bool { return b.Approvers() == 0 })
}

func TestClientTokenAndLoopback(t *testing.T) {
	f := newRig(t, "")
	h := NewHub()
	h.Add(f.broker(t, Config{}))
	api := ApproverHandler(h, func(*http.Request) string { return "token" })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
			return
		}
		api.ServeHTTP(w, r)
	}))
	defer srv.Close()
	good, err := NewClient(srv.URL, "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := good.List(rigCtx, "", ""); err != nil {
		t.Fatalf("with the token: %v", err)
	}
	bad, _ := NewClient(srv.URL, "wrong")
	if _, err := bad.List(rigCtx, "", ""); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("with a wrong token: %v", err)
	}
	for _, addr := range []string{"http://192.0.2.1:8080", "http://example.com", "https://127.0.0.1:1", "/run/x.sock"} {
		if _, err := NewClient(addr, "t"); err == nil {
			t.Errorf("NewClient(%q) accepted", addr)
		}
	}
}

func TestHubWatchCoversLaterBrokers(t *testing.T) {
	f := newRig(t, "")
	h := NewHub()
	b1 := f.broker(t, Config{})
	h.Add(b1)
	events, cancel := h.Watch()
	if b1.Approvers() != 1 {
		t.Fatalf("b1 approvers %d", b1.Approvers())
	}
	b2 := New(Config{Sandbox: "sb-2", Policy: f.r, Applier: f.app})
	defer b2.Close()
	h.Add(b2)
	if b2.Approvers() != 1 {
		t.Fatalf("a broker added after the watch: approvers %d", b2.Approvers())
	}
	r, _ := b2.Ask(rigCtx, Ask{Kind: KindFolder, Target: filepath.Join(f.src, "a")}, Requester{})
	if e := rigNext(t, events, ActRequested); e.Request.ID != r.ID || e.Request.Sandbox != "sb-2" {
		t.Fatalf("hub event %+v", e)
	}
	if got := h.Get("sb-2"); got != b2 || len(h.All()) != 2 {
		t.Fatalf("Get/All")
	}
	h.Remove("sb-2")
	if b2.Approvers() != 0 || h.Get("sb-2") != nil {
		t.Fatalf("after Remove: approvers %d", b2.Approvers())
	}
	cancel()
	if b1.Approvers() != 0 {
		t.Fatalf("after cancel: approvers %d", b1.Approvers())
	}
}

func TestHubSlowWatcherToldDropped(t *testing.T) {
	f := newRig(t, "")
	h := NewHub()
	b := f.broker(t, Config{})
	h.Add(b)
	events, cancel := h.Watch()
	defer cancel()
	asks := 3 * watchBuffer
	for range asks {
		if _, err := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: "/etc"}, Requester{}); err != nil {
			t.Fatal(err)
		}
	}
	// Every event is delivered or counted in a later one's Dropped: once
	// a sentinel asked after the reader caught up arrives, the two add up
	// to every ask.
	got, dropped, sawDrop := 0, 0, false
	deadline := time.After(10 * time.Second)
	for {
		if len(events) == 0 {
			asks++
			if _, err := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: "/usr"}, Requester{}); err != nil {
				t.Fatal(err)
			}
		}
		var e Event
		select {
		case e = <-events:
		case <-deadline:
			t.Fatalf("%d delivered + %d said dropped of %d", got, dropped, asks)
		}
		got, dropped, sawDrop = got+1, dropped+e.Dropped, sawDrop || e.Dropped > 0
		if e.Request.Target == "/usr" && got+dropped == asks {
			break
		}
	}
	if !sawDrop {
		t.Fatalf("a watcher that did not read for %d events was told of no drop", 3*watchBuffer)
	}
}

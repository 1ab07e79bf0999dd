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
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/provider"
)

// bkCall sends method path with body (raw when a string) to srv; it
// returns the status and the decoded JSON answer.
func bkCall(t *testing.T, srv *httptest.Server, method, path string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	data, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("%s %s: %d, not JSON: %q", method, path, resp.StatusCode, data)
	}
	return resp.StatusCode, out
}

// as decodes a bkCall answer into v.
func as[T any](t *testing.T, m map[string]any) T {
	t.Helper()
	var v T
	b, _ := json.Marshal(m)
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func (e *bkEnv) sandboxServer(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(SandboxHandler(e.b, func(*http.Request) Requester { return Requester{PID: 4321, Exe: "/usr/bin/agent", Via: "tcp"} }))
	t.Cleanup(srv.Close)
	return srv
}

func TestCheckSandboxAPIStatuses(t *testing.T) {
	e := newBkEnv(t, "  max_pending: 1\n")
	srv := e.sandboxServer(t)
	ask := func(body any) (int, askResponse) {
		st, m := bkCall(t, srv, "POST", "/v1/requests", body)
		return st, as[askResponse](t, m)
	}
	if st, r := ask(Ask{Kind: KindFolder, Target: e.path("src/a")}); st != http.StatusForbidden || r.State != StateDenied || r.Detail != ErrNoApprover.Error() {
		t.Fatalf("no approver: %d %+v", st, r)
	}
	e.approver(t)
	st, p := ask(Ask{Kind: KindFolder, Target: e.path("src/a"), Reason: "read the docs"})
	if st != http.StatusAccepted || p.State != StatePending || p.WaitURL != "/v1/requests/"+p.ID+"/wait?timeout=60" || p.Requester.PID != 4321 || p.Requester.Exe != "/usr/bin/agent" {
		t.Fatalf("pending: %d %+v", st, p)
	}
	if st, r := ask(Ask{Kind: KindFolder, Target: e.path("src/a")}); st != http.StatusAccepted || r.ID != p.ID || r.Asked != 2 {
		t.Fatalf("coalesced: %d %+v", st, r)
	}
	if st, r := ask(Ask{Kind: KindFolder, Target: e.path("src/b")}); st != http.StatusTooManyRequests || r.State != StateRateLimited {
		t.Fatalf("over max_pending: %d %+v", st, r)
	}
	if st, r := ask(Ask{Kind: KindFolder, Target: e.path("src/never")}); st != http.StatusForbidden || r.State != StateRefused || r.Ceiling != "consent.folders.never[0]" {
		t.Fatalf("refused: %d %+v", st, r)
	}
	// The wait answers pending when nobody decides in time, then the
	// decision.
	if st, m := bkCall(t, srv, "GET", "/v1/requests/"+p.ID+"/wait?timeout=1", nil); st != http.StatusOK || m["state"] != string(StatePending) {
		t.Fatalf("wait with nobody deciding: %d %v", st, m)
	}
	e.decide(t, p.Request, Decision{Approve: true, Scope: ScopeSession})
	if st, m := bkCall(t, srv, "GET", "/v1/requests/"+p.ID+"/wait", nil); st != http.StatusOK || m["state"] != string(StateApproved) || m["effective"] != true || m["path"] != provider.GrantSlotRO+"/a" {
		t.Fatalf("wait after the decision: %d %v", st, m)
	}
	// Answered at once from the grant in force.
	if st, r := ask(Ask{Kind: KindFolder, Target: e.path("src/a")}); st != http.StatusOK || r.State != StateApproved || r.Grant == "" || r.WaitURL != "" {
		t.Fatalf("in force already: %d %+v", st, r)
	}
	st, m := bkCall(t, srv, "GET", "/v1/grants", nil)
	if gs := as[struct{ Grants []Grant }](t, m).Grants; st != http.StatusOK || len(gs) != 1 || !gs[0].Effective {
		t.Fatalf("grants: %d %v", st, m)
	}
}

func TestCheckSandboxAPIErrors(t *testing.T) {
	e := newBkEnv(t, "")
	e.approver(t)
	srv := e.sandboxServer(t)
	target := e.path("src/a")
	for name, body := range map[string]string{
		"malformed":          `{"kind":"folder",`,
		"not an object":      `["folder"]`,
		"unknown field":      `{"kind":"folder","target":"` + target + `","mode":"rw"}`,
		"a forged requester": `{"kind":"folder","target":"` + target + `","requester":{"pid":1}}`,
		"two values":         `{"kind":"folder","target":"` + target + `"} {"kind":"folder","target":"/"}`,
		"trailing garbage":   `{"kind":"folder","target":"` + target + `"}x`,
		"over 64 KiB":        `{"kind":"folder","target":"` + target + `","reason":"` + strings.Repeat("r", MaxBody) + `"}`,
		"empty":              ``,
		"bad kind":           `{"kind":"process","target":"/bin/sh"}`,
		"relative":           `{"kind":"folder","target":"src/a"}`,
		"bad access":         `{"kind":"folder","target":"` + target + `","access":"all"}`,
		"bad port":           `{"kind":"host","target":"api.a.test:99999"}`,
	} {
		st, m := bkCall(t, srv, "POST", "/v1/requests", body)
		if st != http.StatusBadRequest || m["error"] == "" || m["error"] == nil {
			t.Errorf("%s: %d %v, want 400 with the error", name, st, m)
		}
	}
	if n := len(e.b.Requests()); n != 0 {
		t.Fatalf("%d requests kept from malformed bodies", n)
	}
	for _, path := range []string{"/v1/requests/req-none", "/v1/requests/req-none/wait?timeout=1"} {
		if st, m := bkCall(t, srv, "GET", path, nil); st != http.StatusNotFound || m["error"] != ErrNotFound.Error() {
			t.Errorf("%s: %d %v", path, st, m)
		}
	}
	if st, m := bkCall(t, srv, "GET", "/v1/requests/req-none/wait?timeout=-1", nil); st != http.StatusBadRequest || m["hint"] == nil {
		t.Errorf("negative timeout: %d %v", st, m)
	}
	if st, m := bkCall(t, srv, "DELETE", "/v1/grants", nil); st != http.StatusNotFound || !strings.Contains(m["hint"].(string), "POST /v1/requests") {
		t.Errorf("unknown call: %d %v", st, m)
	}
}

// bkApprovers is a hub with e's broker (sb-1) and a second one (sb-2)
// behind the approvers' API on a loopback server.
func (e *bkEnv) approverServer(t *testing.T) (*Hub, *Broker, *httptest.Server) {
	h := NewHub()
	h.Add(e.b)
	b2 := New(Config{Sandbox: "sb-2", Policy: e.pol, Applier: e.app, Log: e.log})
	t.Cleanup(b2.Close)
	h.Add(b2)
	srv := httptest.NewServer(ApproverHandler(h, func(*http.Request) string { return "uid 1000" }))
	t.Cleanup(srv.Close)
	return h, b2, srv
}

func TestCheckApproverAPI(t *testing.T) {
	e := newBkEnv(t, "")
	h, b2, srv := e.approverServer(t)
	_, cancel := h.Watch()
	defer cancel()
	r1 := e.pending(t, "src/a", "")
	r2, _ := b2.Ask(context.Background(), Ask{Kind: KindFolder, Target: e.path("src/b")}, Requester{})
	r3 := e.pending(t, "src", "")
	refused := e.askFolder(t, "other", "")

	list := func(q string) []Request {
		st, m := bkCall(t, srv, "GET", "/v1/approvals"+q, nil)
		if st != http.StatusOK {
			t.Fatalf("list %s: %d", q, st)
		}
		return as[struct{ Requests []Request }](t, m).Requests
	}
	ids := func(rs []Request) (out []string) {
		for _, r := range rs {
			out = append(out, r.ID)
		}
		return out
	}
	if got := ids(list("")); strings.Join(got, ",") != strings.Join([]string{refused.ID, r3.ID, r2.ID, r1.ID}, ",") {
		t.Fatalf("all, newest first: %v", got)
	}
	if got := ids(list("?state=pending&sandbox=sb-1")); strings.Join(got, ",") != r3.ID+","+r1.ID {
		t.Fatalf("sb-1 pending: %v", got)
	}
	if got := ids(list("?sandbox=sb-2")); strings.Join(got, ",") != r2.ID {
		t.Fatalf("sb-2: %v", got)
	}
	if got := list("?sandbox=sb-none"); len(got) != 0 {
		t.Fatalf("unknown sandbox: %v", got)
	}
	if st, m := bkCall(t, srv, "GET", "/v1/approvals/"+r2.ID, nil); st != http.StatusOK || m["digest"] != r2.Digest || m["sandbox"] != "sb-2" {
		t.Fatalf("get: %d %v", st, m)
	}

	// Decisions: the digest is required and must match; the first wins.
	for _, verb := range []string{"approve", "deny"} {
		if st, m := bkCall(t, srv, "POST", "/v1/approvals/"+r1.ID+"/"+verb, map[string]any{}); st != http.StatusBadRequest || m["error"] != "digest missing" || m["hint"] == nil {
			t.Fatalf("%s without a digest: %d %v", verb, st, m)
		}
	}
	if st, _ := bkCall(t, srv, "POST", "/v1/approvals/"+r1.ID+"/approve", `{"digest":"`+r1.Digest+`","scope":"once","admin":true}`); st != http.StatusBadRequest {
		t.Fatalf("unknown field: %d", st)
	}
	if st, m := bkCall(t, srv, "POST", "/v1/approvals/"+r1.ID+"/approve", map[string]any{"digest": r2.Digest}); st != http.StatusConflict || m["error"] != ErrDigest.Error() {
		t.Fatalf("another request's digest: %d %v", st, m)
	}
	if st, _ := bkCall(t, srv, "POST", "/v1/approvals/"+r1.ID+"/ignore", map[string]any{"digest": r1.Digest}); st != http.StatusBadRequest {
		t.Fatalf("unknown verb: %d", st)
	}
	if st, _ := bkCall(t, srv, "POST", "/v1/approvals/req-none/approve", map[string]any{"digest": r1.Digest}); st != http.StatusNotFound {
		t.Fatalf("unknown id: %d", st)
	}
	st, m := bkCall(t, srv, "POST", "/v1/approvals/"+r1.ID+"/approve", map[string]any{"digest": r1.Digest, "ttl": "2h"})
	ap := as[Request](t, m)
	if st != http.StatusOK || ap.State != StateApproved || !ap.Effective || ap.Decision.Scope != ScopeTTL || ap.Decision.By != "uid 1000" ||
		ap.Decision.Expires.Sub(ap.Decision.At) != 2*time.Hour {
		t.Fatalf("approve with a ttl: %d %+v", st, ap.Decision)
	}
	if st, m := bkCall(t, srv, "POST", "/v1/approvals/"+r1.ID+"/deny", map[string]any{"digest": r1.Digest}); st != http.StatusConflict || !strings.Contains(m["error"].(string), "already decided by uid 1000") {
		t.Fatalf("decided already: %d %v", st, m)
	}
	st, m = bkCall(t, srv, "POST", "/v1/approvals/"+r2.ID+"/deny", map[string]any{"digest": r2.Digest, "reason": "not now", "for_session": true})
	if dn := as[Request](t, m); st != http.StatusOK || dn.State != StateDenied || dn.Detail != "denied by uid 1000: not now" || !dn.Decision.ForSession {
		t.Fatalf("deny: %d %+v", st, dn)
	}
	for _, body := range []map[string]any{
		{"scope": "ttl"},                    // no ttl
		{"ttl": "-1h"},                      // not a once approval
		{"ttl": "1h", "scope": "session"},   // not silently a session one
		{"ttl": "1h", "scope": "sometimes"}, // no such scope
	} {
		body["digest"] = r3.Digest
		if st, m := bkCall(t, srv, "POST", "/v1/approvals/"+r3.ID+"/approve", body); st != http.StatusBadRequest || m["hint"] == nil {
			t.Fatalf("approve %v: %d %v, want 400", body, st, m)
		}
	}
	if q, _ := e.b.Get(r3.ID); q.State != StatePending {
		t.Fatalf("after refused approvals: %s", q.State)
	}

	// Grants, and revoke.
	st, m = bkCall(t, srv, "GET", "/v1/grants?sandbox=sb-1", nil)
	gs := as[struct{ Grants []Grant }](t, m).Grants
	if st != http.StatusOK || len(gs) != 1 || gs[0].ID != ap.Grant || gs[0].Scope != ScopeTTL || !gs[0].Effective {
		t.Fatalf("grants: %d %+v", st, gs)
	}
	if _, m := bkCall(t, srv, "GET", "/v1/grants?sandbox=sb-2", nil); len(as[struct{ Grants []Grant }](t, m).Grants) != 0 {
		t.Fatalf("sb-2's grants: %v", m)
	}
	if st, _ := bkCall(t, srv, "POST", "/v1/grants/grant-none/revoke", nil); st != http.StatusNotFound {
		t.Fatalf("revoke unknown: %d", st)
	}
	if st, _ := bkCall(t, srv, "POST", "/v1/grants/"+ap.Grant+"/revoke", `{"kill":"yes"}`); st != http.StatusBadRequest {
		t.Fatalf("revoke with a bad body: %d", st)
	}
	e.app.set(func(f *bkApplier) { f.revokeErr = errStr("umount: EBUSY") })
	if st, m := bkCall(t, srv, "POST", "/v1/grants/"+ap.Grant+"/revoke", nil); st != http.StatusInternalServerError || !strings.Contains(m["error"].(string), "EBUSY") || m["grant"].(map[string]any)["desired"] != true {
		t.Fatalf("a failing revoke: %d %v", st, m)
	}
	e.app.set(func(f *bkApplier) { f.revokeErr = nil })
	st, m = bkCall(t, srv, "POST", "/v1/grants/"+ap.Grant+"/revoke", map[string]any{"kill": true})
	if g := as[Grant](t, m); st != http.StatusOK || g.Desired || g.Effective {
		t.Fatalf("revoke: %d %+v", st, g)
	}
	if q, _ := e.b.Get(r1.ID); q.State != StateRevoked {
		t.Fatalf("request after revoke: %s", q.State)
	}
}

type errStr string

func (e errStr) Error() string { return string(e) }

// An open watch is an approver: a request made while only the SSE client
// is connected goes pending, and its events reach the client.
func TestCheckClientWatchIsApprover(t *testing.T) {
	e := newBkEnv(t, "")
	_, _, srv := e.approverServer(t)
	c, err := NewClient(srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	if r := e.askFolder(t, "src/a", ""); r.State != StateDenied {
		t.Fatalf("before the watch: %s", r.State)
	}
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan Event, 256)
	done := make(chan error, 1)
	go func() { done <- c.Watch(ctx, func(ev Event) { events <- ev }) }()
	bkEventually(t, "the watch connects", func() bool { return e.b.Approvers() == 1 })
	r := e.pending(t, "src/a", "")
	next := func(act string) Event {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case ev := <-events:
				if ev.Activity == act && ev.Request != nil && ev.Request.ID == r.ID {
					return ev
				}
			case <-deadline:
				t.Fatalf("no %s event", act)
			}
		}
	}
	if ev := next("prompted"); ev.Request.Digest != r.Digest || ev.Request.Sandbox != "sb-1" {
		t.Fatalf("prompted %+v", ev.Request)
	}
	got, err := c.Approve(ctx, r.ID, Decision{Digest: r.Digest, ReadOnly: true})
	if err != nil || !got.Effective {
		t.Fatalf("approve: %+v %v", got, err)
	}
	if ev := next("applied"); ev.Grant == nil || ev.Grant.ID != got.Grant || ev.By != "uid 1000" {
		t.Fatalf("applied %+v", ev)
	}
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("watch ended with %v", err)
	}
	bkEventually(t, "the approver leaves", func() bool { return e.b.Approvers() == 0 })
	if r := e.askFolder(t, "src/b", ""); r.State != StateDenied {
		t.Fatalf("after the watch: %s", r.State)
	}
}

// dropFirst is a listener that closes the first n connections it
// accepts before reading anything (a server starting or replacing a
// stale socket, as corral run's approvals socket was seen to in CI).
type dropFirst struct {
	net.Listener
	n int
}

func (l *dropFirst) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || l.n == 0 {
			return c, err
		}
		l.n--
		c.Close()
	}
}

// A watch whose first connections are dropped before an answer (the
// client reads EOF) connects on a retry and is an approver; one to a
// socket that does not exist fails at once.
func TestCheckClientWatchRetriesDroppedConnection(t *testing.T) {
	e := newBkEnv(t, "")
	h := NewHub()
	h.Add(e.b)
	sock := filepath.Join(t.TempDir(), "a.sock")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: ApproverHandler(h, func(*http.Request) string { return "uid 1000" })}
	go srv.Serve(&dropFirst{Listener: ul, n: 2})
	t.Cleanup(func() { srv.Close() })
	c, _ := NewClient("unix:"+sock, "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Watch(ctx, func(Event) {}) }()
	bkEventually(t, "the watch connects after two dropped connections", func() bool { return e.b.Approvers() == 1 })
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("watch ended with %v", err)
	}
	none, _ := NewClient("unix:"+filepath.Join(t.TempDir(), "none.sock"), "")
	t0 := time.Now()
	if err := none.Watch(context.Background(), func(Event) {}); provider.CodeOf(err) != provider.CodeNotFound || time.Since(t0) > watchConnectFor/2 {
		t.Fatalf("watch of a missing socket: %v after %s, want not_found at once", err, time.Since(t0))
	}
}

func TestCheckClientErrors(t *testing.T) {
	e := newBkEnv(t, "")
	h, _, srv := e.approverServer(t)
	_, cancel := h.Watch()
	defer cancel()
	c, err := NewClient(srv.URL+"/", "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := e.pending(t, "src/a", "")
	if _, err := c.Get(ctx, "req-none"); provider.CodeOf(err) != provider.CodeNotFound {
		t.Fatalf("unknown request: %v (%s)", err, provider.CodeOf(err))
	}
	if _, err := c.Revoke(ctx, "grant-none", false); provider.CodeOf(err) != provider.CodeNotFound {
		t.Fatalf("unknown grant: %v", err)
	}
	if _, err := c.Approve(ctx, r.ID, Decision{Digest: "sha256:stale"}); provider.CodeOf(err) != provider.CodeStale || !strings.Contains(err.Error(), "digest") {
		t.Fatalf("stale digest: %v (%s)", err, provider.CodeOf(err))
	}
	if _, err := c.Deny(ctx, r.ID, Decision{Digest: r.Digest, By: "ignored"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Approve(ctx, r.ID, Decision{Digest: r.Digest}); provider.CodeOf(err) != provider.CodeStale || !strings.Contains(err.Error(), "already decided by uid 1000") {
		t.Fatalf("decided: %v (%s)", err, provider.CodeOf(err))
	}
	if _, err := c.Approve(ctx, r.ID, Decision{}); err == nil || !strings.Contains(err.Error(), "digest missing") || !strings.Contains(err.Error(), "HTTP 400") || provider.CodeOf(err) != provider.CodeInternal {
		t.Fatalf("400: %v", err)
	}
	if q, err := c.List(ctx, "sb-1", StateDenied); err != nil || len(q) != 1 || q[0].Decision.By != "uid 1000" {
		t.Fatalf("list: %+v %v", q, err)
	}

	// The watch's errors too.
	noWatch := httptest.NewServer(http.NotFoundHandler())
	defer noWatch.Close()
	c2, _ := NewClient(noWatch.URL, "")
	if err := c2.Watch(ctx, func(Event) {}); provider.CodeOf(err) != provider.CodeNotFound {
		t.Fatalf("watch on a server without one: %v (%s)", err, provider.CodeOf(err))
	}
	// Nobody listening: said as not found (no run, service or gateway
	// there).
	c3, _ := NewClient("unix:"+filepath.Join(t.TempDir(), "none.sock"), "")
	if _, err := c3.List(ctx, "", ""); provider.CodeOf(err) != provider.CodeNotFound {
		t.Fatalf("no server: %v", err)
	}
}

func TestCheckClientAddress(t *testing.T) {
	// The local endpoint of this OS is taken; the other OS's is refused.
	local, foreign := "unix:/run/x.sock", "pipe:corral-x"
	if runtime.GOOS == "windows" {
		local, foreign = foreign, local
	}
	for _, addr := range []string{
		"http://127.0.0.1:8080", "http://127.0.0.1:8080/", "http://[::1]:8080", "http://localhost:1", "http://127.0.0.2:9/corral", local,
	} {
		if _, err := NewClient(addr, "t"); err != nil {
			t.Errorf("NewClient(%q): %v", addr, err)
		}
	}
	for _, addr := range []string{
		"http://127.0.0.1:80@example.com",   // the host is example.com
		"http://127.0.0.1@example.com:80",   // likewise
		"http://u:p@127.0.0.1:80",           // a user part, whatever the host
		"http://example.com:80/127.0.0.1",   // not loopback
		"http://localhost.example.com:80",   // not localhost
		"http://10.0.0.1:80",                // a private address is not loopback
		"http://[::ffff:192.0.2.1]:80",      // nor is a mapped one
		"http://127.0.0.1:80?next=evil",     // a query
		"http://127.0.0.1:80#x",             // a fragment
		"https://127.0.0.1:1",               // not http
		"127.0.0.1:80",                      // no scheme
		"unix:",                             // no path
		"pipe:",                             // no name
		foreign,                             // the other OS's endpoint
		"http://",                           // no host
		"http://127.0.0.1:80\n@example.com", // a control character
	} {
		if c, err := NewClient(addr, "t"); err == nil {
			t.Errorf("NewClient(%q) accepted (base %s)", addr, c.base)
		}
	}
}

// The client does not follow a redirect: the token stays with the
// server it was given to.
func TestCheckClientNoRedirect(t *testing.T) {
	var saw atomic.Value
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		saw.Store(r.Header.Get("Authorization") + " " + r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"requests":[]}`))
	}))
	defer elsewhere.Close()
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer redirecting.Close()
	c, err := NewClient(redirecting.URL, "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.List(context.Background(), "", ""); err == nil || !strings.Contains(err.Error(), "HTTP 307") {
		t.Fatalf("a redirect: %v", err)
	}
	if v := saw.Load(); v != nil {
		t.Fatalf("the redirect was followed: %v", v)
	}
}

func TestCheckHub(t *testing.T) {
	e := newBkEnv(t, "")
	h := NewHub()
	events, cancel := h.Watch()
	defer cancel()
	// Added after the watch: watched, and its requests are asked.
	h.Add(e.b)
	if e.b.Approvers() != 1 {
		t.Fatalf("approvers %d", e.b.Approvers())
	}
	b2 := New(Config{Sandbox: "sb-2", Policy: e.pol, Applier: e.app})
	t.Cleanup(b2.Close)
	h.Add(b2)
	r2, _ := b2.Ask(context.Background(), Ask{Kind: KindFolder, Target: e.path("src/b")}, Requester{})
	if r2.State != StatePending {
		t.Fatalf("a broker added after the watch: %s", r2.State)
	}
	until := func(id, act string) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case ev := <-events:
				if ev.Request != nil && ev.Request.ID == id && ev.Activity == act {
					return
				}
			case <-deadline:
				t.Fatalf("no %s of %s", act, id)
			}
		}
	}
	until(r2.ID, "prompted")
	if got := h.All(); len(got) != 2 || got[0] != e.b || got[1] != b2 || h.Get("sb-2") != b2 || h.Get("sb-x") != nil {
		t.Fatalf("All %v", got)
	}
	// Removed: no longer an approver of it, none of its events.
	h.Remove("sb-2")
	h.Remove("sb-2")
	if b2.Approvers() != 0 || h.Get("sb-2") != nil {
		t.Fatalf("after Remove: %d approvers", b2.Approvers())
	}
	gone, _ := b2.Ask(context.Background(), Ask{Kind: KindFolder, Target: e.path("src")}, Requester{})
	if gone.State != StateDenied {
		t.Fatalf("a removed broker's request: %s", gone.State)
	}
	r1 := e.pending(t, "src/a", "")
	deadline := time.After(10 * time.Second)
	for seen := false; !seen; {
		select {
		case ev := <-events:
			if ev.Request != nil && ev.Request.Sandbox == "sb-2" && ev.Request.ID != r2.ID {
				t.Fatalf("an event of a removed broker: %+v", ev)
			}
			seen = ev.Request != nil && ev.Request.ID == r1.ID && ev.Activity == "prompted"
		case <-deadline:
			t.Fatal("no event of the broker still on the hub")
		}
	}
	// Added again under the same id, a new broker replaces the old.
	b3 := New(Config{Sandbox: "sb-1", Policy: e.pol, Applier: e.app})
	t.Cleanup(b3.Close)
	h.Add(b3)
	if e.b.Approvers() != 0 || b3.Approvers() != 1 || h.Get("sb-1") != b3 {
		t.Fatalf("replaced: old %d approvers, new %d", e.b.Approvers(), b3.Approvers())
	}
	cancel()
	cancel()
	if b3.Approvers() != 0 {
		t.Fatalf("after cancel: %d approvers", b3.Approvers())
	}
}

// Brokers come and go under a long watch (a gateway's sandboxes under
// an open web page) without leaving a copier behind each.
func TestCheckHubRemoveEndsCopiers(t *testing.T) {
	e := newBkEnv(t, "")
	h := NewHub()
	_, cancel := h.Watch()
	defer cancel()
	base := runtime.NumGoroutine()
	for i := range 50 {
		b := New(Config{Sandbox: "sb-" + strconv.Itoa(i), Policy: e.pol, Applier: e.app})
		h.Add(b)
		h.Remove(b.Sandbox())
		b.Close()
	}
	bkEventually(t, "the removed brokers' copiers end", func() bool { return runtime.NumGoroutine() < base+10 })
}

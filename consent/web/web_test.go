package web

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/consent"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

const testToken = "t0ken-for-the-page-tests"

// xssReason is a workload's reason that would run script or break the
// markup if it were ever taken for HTML.
const xssReason = `need it </dd></dl><script>window.__corral_xss=1</script><img src=x onerror="window.__corral_xss=2"> "' & <b>bold</b>`

type fixedSource []Sandbox

func (s fixedSource) Sandboxes(context.Context) ([]Sandbox, error) { return s, nil }

// TestSourceError: a source that fails is said on the page, and the
// requests are still there to decide.
func TestSourceError(t *testing.T) {
	f := newFixture(t, SourceFunc(func(context.Context) ([]Sandbox, error) { return nil, errors.New("store is locked") }))
	f.rig.ask(t, "fetched", policy.AccessReadOnly, "fetch", consent.Requester{Via: "tcp"})
	page := f.page(t)
	for _, want := range []string{`<p class="error">sandboxes: store is locked</p>`, f.rig.src + "/fetched", "pid unknown"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

// auditSource adds audit lines to a fixedSource.
type auditSource struct {
	fixedSource
	lines []string
}

func (s auditSource) AuditTail(_ context.Context, _ string, n int) ([]string, error) {
	if len(s.lines) > n {
		return s.lines[len(s.lines)-n:], nil
	}
	return s.lines, nil
}

func testSandboxes() fixedSource {
	return fixedSource{{ID: "sb-1", Name: "agent", Provider: "linux", State: "running", Layers: []provider.LayerStatus{
		{Layer: "landlock", Required: "required", State: "active", Detail: "ABI 6"},
		{Layer: "seccomp", Required: "required", State: "active"},
	}}}
}

// client is a browser stand-in: a cookie jar, signed in by /ui/?token=.
func signIn(t *testing.T, srv *httptest.Server) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	res, err := c.Get(srv.URL + "/ui/?token=" + url.QueryEscape(testToken))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Request.URL.RawQuery != "" {
		t.Fatalf("sign-in ended at %s with %d, want /ui/ without the token and 200", res.Request.URL, res.StatusCode)
	}
	return c
}

func get(t *testing.T, c *http.Client, u string) (*http.Response, string) {
	t.Helper()
	res, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res, string(b)
}

// fixture is the page over a rig on a loopback server, with a signed-in
// client.
type fixture struct {
	rig *rig
	url string
	c   *http.Client
}

// serve is the page of src over a new rig, with no approver connected.
func serve(t *testing.T, src Source) *fixture {
	t.Helper()
	f := &fixture{rig: newRig(t)}
	srv := httptest.NewServer(Handler(src, f.rig.api, testToken))
	t.Cleanup(srv.Close)
	f.url, f.c = srv.URL, signIn(t, srv)
	return f
}

// newFixture is serve with an approver connected to the broker (a
// stand-in for a page's watch), so that requests are pending.
func newFixture(t *testing.T, src Source) *fixture {
	t.Helper()
	f := serve(t, src)
	_, cancel := f.rig.broker.Watch()
	t.Cleanup(cancel)
	return f
}

// page is the page as the signed-in client gets it.
func (f *fixture) page(t *testing.T) string {
	t.Helper()
	_, page := get(t, f.c, f.url+"/ui/")
	return page
}

var csrfMeta = regexp.MustCompile(`<meta name="corral-csrf" content="([^"]+)">`)

func TestSignIn(t *testing.T) {
	srv := httptest.NewServer(Handler(testSandboxes(), newRig(t).api, testToken))
	defer srv.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	if res, _ := get(t, noRedirect, srv.URL+"/ui/"); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("no cookie: %d, want 401", res.StatusCode)
	}
	if res, _ := get(t, noRedirect, srv.URL+"/ui/?token=wrong"); res.StatusCode != http.StatusUnauthorized || len(res.Cookies()) != 0 {
		t.Errorf("wrong token: %d with cookies %v, want 401 and none", res.StatusCode, res.Cookies())
	}
	res, _ := get(t, noRedirect, srv.URL+"/ui/?token="+testToken)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/ui/" {
		t.Fatalf("right token: %d to %q, want 303 to /ui/", res.StatusCode, res.Header.Get("Location"))
	}
	cs := res.Cookies()
	if len(cs) != 1 {
		t.Fatalf("cookies %v, want one", cs)
	}
	c := cs[0]
	if c.Name != Cookie || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" {
		t.Errorf("cookie %+v: want %s HttpOnly SameSite=Strict Path=/", c, Cookie)
	}
	if strings.Contains(c.Value, testToken) {
		t.Errorf("the cookie carries the token itself: %q", c.Value)
	}
	// The page with the cookie, and its headers.
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/ui/", nil)
	req.AddCookie(c)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("page with the cookie: %d %s", res.StatusCode, body)
	}
	csp := res.Header.Get("Content-Security-Policy")
	m := regexp.MustCompile(`script-src 'nonce-([^']+)'`).FindStringSubmatch(csp)
	if m == nil || !strings.Contains(csp, "default-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Fatalf("CSP %q: want default-src 'self', a script nonce, no unsafe-inline", csp)
	}
	if !strings.Contains(string(body), `<script nonce="`+m[1]+`">`) {
		t.Errorf("the page's script does not carry the CSP's nonce %s", m[1])
	}
	for k, want := range map[string]string{"X-Frame-Options": "DENY", "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"} {
		if got := res.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	// A forged cookie is not signed in.
	req, _ = http.NewRequest(http.MethodGet, srv.URL+"/ui/", nil)
	req.AddCookie(&http.Cookie{Name: Cookie, Value: testToken})
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != http.StatusUnauthorized {
		t.Errorf("the token as cookie: %v %v, want 401", res.StatusCode, err)
	}
	// The API is not reachable without the cookie.
	if res, _ := get(t, http.DefaultClient, srv.URL+"/ui/v1/approvals"); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("API without the cookie: %d, want 401", res.StatusCode)
	}
}

func TestNoTokenRefusesAll(t *testing.T) {
	srv := httptest.NewServer(Handler(testSandboxes(), newRig(t).api, ""))
	defer srv.Close()
	if res, _ := get(t, http.DefaultClient, srv.URL+"/ui/?token="); res.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("empty token: %d, want 503", res.StatusCode)
	}
}

func TestLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.3.4.5:1": true, "[::1]:8080": true, "localhost:8080": true, "LOCALHOST": true,
		"127.0.0.1": true, "[::1]": true, "::1": true, "[::ffff:127.0.0.1]:80": true,
		"evil.example:8080": false, "localhost.evil.example:80": false, "10.0.0.1:80": false, "0.0.0.0:80": false,
		"[fe80::1%lo]:80": false, "": false, "127.0.0.1.nip.io:80": false,
	} {
		if got := LoopbackHost(host); got != want {
			t.Errorf("LoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestRebindingRefused(t *testing.T) {
	f := newFixture(t, testSandboxes())
	for _, p := range []string{"/ui/", "/ui/?token=" + testToken, "/ui/v1/approvals"} {
		req, _ := http.NewRequest(http.MethodGet, f.url+p, nil)
		req.Host = "rebind.evil.example" + f.url[strings.LastIndex(f.url, ":"):]
		res, err := f.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("%s with Host %s: %d, want 421", p, req.Host, res.StatusCode)
		}
	}
}

// TestPostChecks: a decision from the page needs the cookie, the page's
// CSRF token and the page's own Origin; the API never sees the cookie.
func TestPostChecks(t *testing.T) {
	f := newFixture(t, testSandboxes())
	rg, c, base := f.rig, f.c, f.url
	q := rg.ask(t, "build", policy.AccessReadOnly, "build", consent.Requester{Exe: "/usr/bin/make", Via: "tcp"})
	csrf := csrfOf(t, f.page(t))
	post := func(origin, token, ctype string) int {
		req, _ := http.NewRequest(http.MethodPost, base+"/ui/v1/approvals/"+q.ID+"/approve",
			strings.NewReader(`{"scope":"session","digest":"`+q.Digest+`"}`))
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if token != "" {
			req.Header.Set(CSRFHeader, token)
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	forged := csrf[:len(csrf)-2] + "AA"
	if forged == csrf {
		forged = csrf[:len(csrf)-2] + "BB"
	}
	for _, tc := range []struct {
		name, origin, token, ctype string
		want                       int
	}{
		{"no CSRF token", base, "", "application/json", http.StatusForbidden},
		{"forged CSRF token", base, forged, "application/json", http.StatusForbidden},
		{"a token of another key", base, (&handler{key: []byte("other")}).newCSRF(), "application/json", http.StatusForbidden},
		{"no Origin", "", csrf, "application/json", http.StatusForbidden},
		{"another Origin", "http://evil.example", csrf, "application/json", http.StatusForbidden},
		{"another port", "http://127.0.0.1:1", csrf, "application/json", http.StatusForbidden},
		{"a form body", base, csrf, "application/x-www-form-urlencoded", http.StatusUnsupportedMediaType},
	} {
		if got := post(tc.origin, tc.token, tc.ctype); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
		if got := rg.get(t, q.ID); got.State != consent.StatePending {
			t.Fatalf("%s: the request was decided (%s)", tc.name, got.State)
		}
	}
	if got := post(base, csrf, "application/json"); got != http.StatusOK {
		t.Fatalf("the page's own POST: %d, want 200", got)
	}
	if got := rg.get(t, q.ID); got.State != consent.StateApproved || !got.Effective {
		t.Errorf("after the page's approval: %s effective=%v, want approved and effective", got.State, got.Effective)
	}
	if len(rg.cookies) > 0 {
		t.Errorf("the API was handed the page's cookie: %q", rg.cookies)
	}
}

// TestUntrustedAsText: what the workload wrote (reason, target, exe) is
// rendered as text: no markup of it survives, the page keeps its one
// script.
func TestUntrustedAsText(t *testing.T) {
	f := newFixture(t, auditSource{testSandboxes(), []string{`{"activity":"x","msg":"</code></li><script>alert(3)</script>"}`}})
	f.rig.ask(t, `"><script>alert(4)</script>`, policy.AccessReadWrite, xssReason, consent.Requester{PID: 42, Exe: `/tmp/<img src=x onerror=alert(5)>`, Via: "tcp"})
	page := f.page(t)
	if n := strings.Count(strings.ToLower(page), "<script"); n != 1 {
		t.Errorf("%d <script tags in the page, want 1 (its own)", n)
	}
	for _, bad := range []string{"<img", "<b>bold", "onerror=\"window", "</dd></dl><script"} {
		if strings.Contains(page, bad) {
			t.Errorf("the page has %q unescaped", bad)
		}
	}
	for _, want := range []string{
		`need it &lt;/dd&gt;&lt;/dl&gt;&lt;script&gt;window.__corral_xss=1&lt;/script&gt;&lt;img src=x onerror=&#34;window.__corral_xss=2&#34;&gt; &#34;&#39; &amp; &lt;b&gt;bold&lt;/b&gt;`,
		`/tmp/&lt;img src=x onerror=alert(5)&gt;`,
		`&lt;/code&gt;&lt;/li&gt;&lt;script&gt;alert(3)&lt;/script&gt;`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks the escaped text %s", want)
		}
	}
	// The read-only narrowing is offered for a read-write request.
	if !strings.Contains(page, `name="read_only"`) {
		t.Error("no read-only choice for a rw request")
	}
}

// TestPageShows: the sections the page promises, from the source and the
// API: layers, a pending request's facts, a grant desired against
// effective, and a revoked grant's holders.
func TestPageShows(t *testing.T) {
	f := newFixture(t, testSandboxes())
	q := f.rig.ask(t, "data", policy.AccessReadOnly, "read the data", consent.Requester{PID: 4242, Exe: "/usr/bin/python3", Via: "tcp"})
	page := f.page(t)
	for _, want := range []string{"landlock", "ABI 6", f.rig.src + "/data", "read the data", "pid 4242", "/usr/bin/python3", "consent.folders.ask[0]",
		q.Digest[len("sha256:") : len("sha256:")+12], `data-expires="` + q.Expires.UTC().Format("2006-01-02T15:04:05"), "1×", `data-state="pending"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(page, `name="read_only"`) {
		t.Error("a read-only narrowing offered for a ro request")
	}
	// Approved, then revoked: in force, then its holder.
	res := f.post(t, page, "/ui/v1/approvals/"+q.ID+"/approve", `{"scope":"session","digest":"`+q.Digest+`"}`)
	if res != http.StatusOK {
		t.Fatalf("approve: %d", res)
	}
	g := f.rig.get(t, q.ID).Grant
	if g == "" {
		t.Fatalf("approved without a grant: %+v", f.rig.get(t, q.ID))
	}
	page = f.page(t)
	if !strings.Contains(page, `class="grant" data-id="`+g+`" data-desired="true" data-effective="true"`) {
		t.Errorf("no effective grant in the page:\n%s", page)
	}
	if res := f.post(t, page, "/ui/v1/grants/"+g+"/revoke", `{"kill":true}`); res != http.StatusOK {
		t.Fatalf("revoke: %d", res)
	}
	page = f.page(t)
	if !strings.Contains(page, "pid 812 fd 3 /grants/ro/data/a.txt (/usr/bin/cat) killed") {
		t.Errorf("the revoked grant's holder is not shown:\n%s", page)
	}
	if !strings.Contains(page, `data-id="`+g+`" data-desired="false" data-effective="false"`) {
		t.Error("the revoked grant is not shown as neither desired nor effective")
	}
}

// csrfOf is the CSRF token of a page.
func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := csrfMeta.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no CSRF token in the page")
	}
	return m[1]
}

// post POSTs body to p as the page does, with the CSRF token of page.
func (f *fixture) post(t *testing.T, page, p, body string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.url+p, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", f.url)
	req.Header.Set(CSRFHeader, csrfOf(t, page))
	res, err := f.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

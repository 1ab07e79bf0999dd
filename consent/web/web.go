// Package web is the consent web page: the sandboxes (or the one session
// of `corral run` / `corral service`) with their layers, the pending
// requests to approve or deny with a scope, the grants desired against
// effective with revoke, and a live audit tail. It is plain HTML rendered
// on the server (html/template) with a little vanilla JS inline, no
// external assets, served under /ui/ on loopback behind the token of the
// API it fronts (docs/consent.md).
//
// The page talks to the approvers' API (consent.ApproverHandler) through
// this handler only, under /ui/v1/...: the handler authenticates the
// browser by a cookie it sets once from /ui/?token=..., and checks a
// per-page CSRF token (header X-Corral-CSRF) and the Origin of every POST.
// Its watch (SSE) stays open while the page is, so an open page counts as
// an approver.
package web

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"path"
	"strings"
	"time"

	"github.com/corral-sandbox/corral/provider"
)

// Source is what the front end (gateway, `corral run`, `corral service`)
// knows of its sandboxes, for the page's sandboxes section. The requests
// and grants come from the approvers' API instead.
type Source interface {
	// Sandboxes are the sandboxes to show, in the order to show them.
	// An error is shown on the page in their place.
	Sandboxes(ctx context.Context) ([]Sandbox, error)
}

// SourceFunc is a Source of one function (`corral run`, `corral
// service`: the one session).
type SourceFunc func(ctx context.Context) ([]Sandbox, error)

// Sandboxes calls f.
func (f SourceFunc) Sandboxes(ctx context.Context) ([]Sandbox, error) { return f(ctx) }

// AuditSource is a Source that also has each sandbox's audit log. The
// page shows the last lines of each sandbox's log beside the consent
// events of its watch.
type AuditSource interface {
	Source
	// AuditTail is the last n (at most) lines of sandbox id's audit log
	// (OCSF JSON lines, oldest first), without their newlines.
	AuditTail(ctx context.Context, id string, n int) ([]string, error)
}

// Sandbox is one sandbox (or session) as the page shows it.
type Sandbox struct {
	ID       string
	Name     string // "" for none
	Provider string // linux, docker, mxc
	// State is what runs now (the gateway's effective state: running,
	// gone, none; a session: running).
	State  string
	Layers []provider.LayerStatus
}

// Cookie is the name of the page's session cookie. Its value is
// HMAC-SHA256(token, cookieLabel), so the cookie is not the token itself:
// a cookie is shared by every port of a host (RFC 6265 §8.5), and another
// loopback server may see it; it opens only this page, never the API.
const Cookie = "corral_consent"

// CSRFHeader carries the page's CSRF token on every POST the page makes.
const CSRFHeader = "X-Corral-CSRF"

// maxBody bounds a POST's body (bytes): a decision is a few hundred.
const maxBody = 64 << 10

const (
	cookieLabel = "corral consent web page: cookie v1"
	csrfLabel   = "corral consent web page: csrf v1"
)

// handler serves the page and the API under /ui/.
type handler struct {
	src   Source
	api   http.Handler
	token string
	// cookie is the session cookie's value; key signs CSRF tokens.
	cookie string
	key    []byte
	now    func() time.Time
}

// Handler serves the consent page for the sandboxes of src under /ui/:
//
//   - GET /ui/?token=TOKEN: TOKEN compared with token in constant time;
//     right, it sets the session cookie (HttpOnly, SameSite=Strict,
//     Path=/) and redirects (303) to /ui/ without the token in the URL;
//     wrong, 401.
//   - GET /ui/: the page (cookie required, else 401 with how to open it).
//   - GET /ui/v1/approvals..., /ui/v1/grants... and POST below them: the
//     same path without "/ui" handed to api (the approvers' API,
//     consent.ApproverHandler), streaming included (the watch). A POST
//     needs the cookie, the page's CSRF token in X-Corral-CSRF, an Origin
//     of the host it was served on and a JSON body of at most 64 KiB.
//
// Every request must name a loopback Host (127.0.0.0/8, ::1, localhost;
// any port): another name is refused (421) whatever it carries, the
// defence against DNS rebinding (a hostile name resolved to 127.0.0.1
// would otherwise be same-origin with the page). Responses are never
// cached; the page has a Content-Security-Policy of default-src 'self'
// with its one script and style by nonce, and may not be framed.
//
// Handler does its own authentication: a front end mounts it for /ui/
// before (not behind) its bearer check, which a browser cannot pass on a
// navigation. token "" refuses everything (503). api sees the requests
// as they came, less the "/ui" prefix; its approver identity is its own
// (the front end builds it with the identity to record, e.g. "web page").
func Handler(src Source, api http.Handler, token string) http.Handler {
	mac := func(label string) []byte {
		m := hmac.New(sha256.New, []byte(token))
		m.Write([]byte(label))
		return m.Sum(nil)
	}
	return &handler{src: src, api: api, token: token,
		cookie: base64.RawURLEncoding.EncodeToString(mac(cookieLabel)),
		key:    mac(csrfLabel), now: time.Now}
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	if h.token == "" {
		http.Error(w, "the consent page has no token configured", http.StatusServiceUnavailable)
		return
	}
	if !LoopbackHost(r.Host) {
		// 421: this server is not the one for that name.
		http.Error(w, fmt.Sprintf("host %q is not a loopback address: open the page as http://127.0.0.1:PORT/ui/ (or localhost)", r.Host), http.StatusMisdirectedRequest)
		return
	}
	p := r.URL.Path
	if p != "/ui/" && path.Clean(p) != p {
		http.Error(w, "not a clean path", http.StatusBadRequest)
		return
	}
	switch {
	case p == "/ui/":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "the page is read with GET", http.StatusMethodNotAllowed)
			return
		}
		if q := r.URL.Query(); q.Has("token") {
			h.login(w, r, q.Get("token"))
			return
		}
		if !h.authed(r) {
			http.Error(w, "not signed in: open the page with the URL the front end printed, /ui/?token=TOKEN (the gateway's token file)", http.StatusUnauthorized)
			return
		}
		h.page(w, r)
	case p == "/ui":
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
	case isAPI(p):
		h.proxy(w, r)
	default:
		http.NotFound(w, r)
	}
}

// isAPI reports whether p (under /ui) is a path of the approvers' API.
func isAPI(p string) bool {
	for _, base := range []string{"/ui/v1/approvals", "/ui/v1/grants"} {
		if p == base || strings.HasPrefix(p, base+"/") {
			return true
		}
	}
	return false
}

// LoopbackHost reports whether a Host header names this machine by a
// loopback IP literal (127.0.0.0/8, ::1, in brackets with a port) or as
// localhost, with or without a port.
func LoopbackHost(host string) bool {
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		name = host[1 : len(host)-1]
	}
	if strings.EqualFold(name, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(name)
	return err == nil && ip.Zone() == "" && ip.Unmap().IsLoopback()
}

// login exchanges the token of the URL for the cookie.
func (h *handler) login(w http.ResponseWriter, r *http.Request, got string) {
	if subtle.ConstantTimeCompare([]byte(got), []byte(h.token)) != 1 {
		http.Error(w, "wrong token", http.StatusUnauthorized)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: Cookie, Value: h.cookie, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

// authed reports whether r carries the session cookie.
func (h *handler) authed(r *http.Request) bool {
	c, err := r.Cookie(Cookie)
	return err == nil && subtle.ConstantTimeCompare([]byte(c.Value), []byte(h.cookie)) == 1
}

// newCSRF is a CSRF token for one page: a random nonce and its MAC, so
// any page's token is checked without keeping state.
func (h *handler) newCSRF() string {
	n := make([]byte, 16)
	_, _ = rand.Read(n)
	return base64.RawURLEncoding.EncodeToString(n) + "." + base64.RawURLEncoding.EncodeToString(h.sign(n))
}

func (h *handler) sign(nonce []byte) []byte {
	m := hmac.New(sha256.New, h.key)
	m.Write(nonce)
	return m.Sum(nil)
}

// csrfOK checks a token from newCSRF.
func (h *handler) csrfOK(tok string) bool {
	a, b, ok := strings.Cut(tok, ".")
	if !ok {
		return false
	}
	n, err1 := base64.RawURLEncoding.DecodeString(a)
	mac, err2 := base64.RawURLEncoding.DecodeString(b)
	return err1 == nil && err2 == nil && len(n) == 16 && hmac.Equal(mac, h.sign(n))
}

// sameOrigin reports whether a POST's Origin is the page's own: the
// scheme and Host it came to (a browser sends Origin on every POST;
// RFC 6454 §7).
func sameOrigin(r *http.Request) bool {
	scheme := "http://"
	if r.TLS != nil {
		scheme = "https://"
	}
	o := r.Header.Get("Origin")
	return o != "" && o == scheme+r.Host
}

// proxy hands an API call of the page to api.
func (h *handler) proxy(w http.ResponseWriter, r *http.Request) {
	if !h.authed(r) {
		http.Error(w, "not signed in: reload the page from /ui/?token=TOKEN", http.StatusUnauthorized)
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
	case http.MethodPost:
		switch {
		case !sameOrigin(r):
			http.Error(w, "cross-origin request refused", http.StatusForbidden)
			return
		case !h.csrfOK(r.Header.Get(CSRFHeader)):
			http.Error(w, "missing or wrong "+CSRFHeader+" token: reload the page", http.StatusForbidden)
			return
		case !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json"):
			http.Error(w, "a JSON body is wanted", http.StatusUnsupportedMediaType)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	r2 := r.Clone(r.Context())
	r2.URL.Path = strings.TrimPrefix(r.URL.Path, "/ui")
	r2.URL.RawPath = ""
	r2.RequestURI = r2.URL.RequestURI()
	// The API never sees the page's cookie or CSRF token.
	r2.Header.Del("Cookie")
	r2.Header.Del(CSRFHeader)
	h.api.ServeHTTP(w, r2)
}

package web

import (
	"bytes"
	"context"
	"crypto/rand"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/consent"
	"github.com/corral-sandbox/corral/provider"
)

//go:embed assets/page.html assets/page.js assets/page.css
var assets embed.FS

// AuditLines is how many lines of each sandbox's audit log the page shows.
const AuditLines = 30

// maxDecided bounds the decided requests the page lists.
const maxDecided = 20

var (
	pageJS  = mustRead("assets/page.js")
	pageCSS = mustRead("assets/page.css")
	// Parsed on first use: package initialisation is every corral
	// process's start-up, the sandbox init's too.
	pageTpl = sync.OnceValue(func() *template.Template {
		return template.Must(template.New("page.html").Funcs(template.FuncMap{
			"short": func(d string) string {
				d = strings.TrimPrefix(d, "sha256:")
				if len(d) > 12 {
					return d[:12]
				}
				return d
			},
			"rfc": func(t time.Time) string {
				if t.IsZero() {
					return ""
				}
				return t.UTC().Format(time.RFC3339Nano)
			},
			"holder": holderText,
		}).ParseFS(assets, "assets/page.html"))
	})
)

func mustRead(name string) string {
	b, err := assets.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// holderText is one holder as the page says it: "pid 812 fd 3
// /grants/ro/src/a.txt (/usr/bin/cat)", fd -1 as cwd, -2 as root.
func holderText(h provider.Holder) string {
	what := fmt.Sprintf("fd %d", h.FD)
	switch h.FD {
	case -1:
		what = "cwd"
	case -2:
		what = "root"
	}
	s := fmt.Sprintf("pid %d %s %s", h.PID, what, h.Path)
	if h.Exe != "" {
		s += " (" + h.Exe + ")"
	}
	if h.Killed {
		s += " killed"
	}
	return s
}

// view is what the page template renders.
type view struct {
	Nonce, CSRF string
	Script      template.JS
	Style       template.CSS
	Pending     []consent.Request
	Decided     []consent.Request
	Sandboxes   []sandboxView
	Errors      []string
}

// sandboxView is one sandbox with its grants and audit tail.
type sandboxView struct {
	Sandbox
	Known  bool // from the Source (not only named by a grant)
	Grants []consent.Grant
	Audit  []string
}

// page renders the page, or with ?part=live only its #live section (what
// the script swaps in on every consent event: a whole page parsed in the
// live one would carry a style of another nonce, which its CSP refuses).
func (h *handler) page(w http.ResponseWriter, r *http.Request) {
	nonce := make([]byte, 18)
	_, _ = rand.Read(nonce)
	// URL-safe base64 (CSP 3's base64-value allows "-" and "_"): no "+",
	// which html/template writes as "&#43;" in the attribute, so the
	// header and the page carry the same bytes.
	v := view{Nonce: base64.RawURLEncoding.EncodeToString(nonce), CSRF: h.newCSRF(),
		Script: template.JS(pageJS), Style: template.CSS(pageCSS)}
	ctx := r.Context()
	fail := func(what string, err error) { v.Errors = append(v.Errors, what+": "+err.Error()) }

	sbs, err := h.src.Sandboxes(ctx)
	if err != nil {
		fail("sandboxes", err)
	}
	reqs, err := apiList[consent.Request](ctx, h.api, r, "/v1/approvals", "requests")
	if err != nil {
		fail("requests", err)
	}
	grants, err := apiList[consent.Grant](ctx, h.api, r, "/v1/grants", "grants")
	if err != nil {
		fail("grants", err)
	}
	for _, q := range reqs {
		if q.State == consent.StatePending {
			v.Pending = append(v.Pending, q)
		} else if len(v.Decided) < maxDecided {
			v.Decided = append(v.Decided, q)
		}
	}
	// The oldest pending first: it expires first.
	sort.SliceStable(v.Pending, func(i, j int) bool { return v.Pending[i].Expires.Before(v.Pending[j].Expires) })

	at := map[string]int{}
	for _, s := range sbs {
		at[s.ID] = len(v.Sandboxes)
		sv := sandboxView{Sandbox: s, Known: true}
		if as, ok := h.src.(AuditSource); ok {
			if sv.Audit, err = as.AuditTail(ctx, s.ID, AuditLines); err != nil {
				fail("audit of "+s.ID, err)
			}
		}
		v.Sandboxes = append(v.Sandboxes, sv)
	}
	for _, g := range grants {
		i, ok := at[g.Sandbox]
		if !ok { // a sandbox the source no longer lists
			i = len(v.Sandboxes)
			at[g.Sandbox] = i
			v.Sandboxes = append(v.Sandboxes, sandboxView{Sandbox: Sandbox{ID: g.Sandbox}})
		}
		v.Sandboxes[i].Grants = append(v.Sandboxes[i].Grants, g)
	}

	var buf bytes.Buffer
	tpl := "page.html"
	if r.URL.Query().Get("part") == "live" { // the script's refresh
		tpl = "live"
	}
	if err := pageTpl().ExecuteTemplate(&buf, tpl, v); err != nil {
		http.Error(w, "rendering the page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	hd := w.Header()
	hd.Set("Content-Security-Policy", fmt.Sprintf("default-src 'self'; script-src 'nonce-%[1]s'; style-src 'nonce-%[1]s'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'", v.Nonce))
	hd.Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}

// apiList GETs path of api on behalf of r (its context, host and remote
// address) and decodes the list the approvers' API answers there, the
// array member key of its object ({"requests": [...]}, {"grants":
// [...]}: consent.ApproverHandler).
func apiList[T any](ctx context.Context, api http.Handler, r *http.Request, path, key string) ([]T, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	req.Host, req.RemoteAddr = r.Host, r.RemoteAddr
	req.Header.Set("Accept", "application/json")
	rec := &recorder{header: http.Header{}}
	api.ServeHTTP(rec, req)
	if rec.code != 0 && rec.code != http.StatusOK {
		return nil, fmt.Errorf("%s: %d %s", path, rec.code, strings.TrimSpace(rec.body.String()))
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(rec.body.Bytes(), &obj); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	raw, ok := obj[key]
	if !ok {
		return nil, fmt.Errorf("%s: no %q in the answer", path, key)
	}
	var out []T
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", path, key, err)
	}
	return out, nil
}

// recorder is the ResponseWriter of apiList's in-process calls.
type recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	if r.body.Len()+len(b) > 16<<20 {
		return 0, errors.New("answer over 16 MiB")
	}
	return r.body.Write(b)
}

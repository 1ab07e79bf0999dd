//go:build linux

package qualify

// Credential cases: P30 credential binding, P31 reflection. A credential
// is bound to api.a.test's Authorization header; the sandbox sees only
// its placeholder. The upstream is one origin (h2 and http/1.1, its
// certificate from the case's own test CA; two more ports, TLS and plain)
// serving api.a.test, api.b.test and api.c.test, every one allowed and
// inspected; it records each request whole. The real value is made on the host,
// given to corral through its environment (source: {env}) or a file
// (source: {file}) outside every grant, and never enters the sandbox:
// the in-sandbox client (ClientArg) reads the placeholders from its
// environment and knows the value only by its hash (Needle); what it
// received is checked on the host.

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/websocket"

	"github.com/corral-sandbox/corral/internal/testcert"
)

func init() {
	Register(Case{ID: "P30", Title: "credential binding", Applies: linuxKernel, Run: runP30})
	Register(Case{ID: "P31", Title: "reflection", Applies: linuxKernel, Run: runP31})
}

// Self-test hooks (tests only): deliberately weakened configurations the
// cases must fail on.
var (
	// credMisbound binds P30's credential to every host and place the
	// case sends its placeholder to (header, Basic password, query and
	// body on api.a.test and api.b.test): substitution unbound.
	credMisbound bool
	// reflectOff makes P31's echoes come from api.c.test, which no
	// credential binds, so that no scan applies to them: the value the
	// origin received on api.a.test comes back unscanned.
	reflectOff bool
)

// The credential cases' host names (the origin serves them all).
const (
	credHostA = "api.a.test" // the bound host
	credHostB = "api.b.test" // allowed and inspected, not bound
	credHostC = "api.c.test" // likewise (P31's self-test)
)

// credSecret is a fresh credential value shaped like a cloud secret key,
// with "/" and "+" inside so that its percent-encoded and JSON-escaped
// spellings differ from it: "qv-" (public: the Needle's prefix), then 42
// random characters.
func credSecret() string {
	const al = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	r := func(n int) string {
		b := make([]byte, n)
		_, _ = rand.Read(b)
		for i := range b {
			b[i] = al[int(b[i])%len(al)]
		}
		return string(b)
	}
	return credPrefix + r(20) + "/" + r(12) + "+" + r(8)
}

// credPrefix is the public prefix of every credSecret.
const credPrefix = "qv-"

// form is one spelling of a secret a check looks for.
type form struct{ name, s string }

var pctHex = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`%[0-9A-F]{2}`) })

// secretForms are the spellings of v the checks look for: raw; standard
// and URL-safe base64 at each of the three alignments (the part of the
// encoding of v behind 0, 1 or 2 other bytes that does not depend on
// them, so that base64 of "git:"+v is found too); percent-encoded (query
// and path escaping and every byte, upper and lower case hex); JSON
// escapes ("\/"; \u00xx for "+" alone, as System.Text.Json writes it, for
// every character but letters and digits, and for every character; lower
// and upper case hex). find reads the escapes undone too; the spellings
// are what redact masks.
func secretForms(v string) []form {
	fs := []form{{"raw", v}}
	for _, enc := range []struct {
		name string
		e    *base64.Encoding
	}{{"base64", base64.StdEncoding}, {"base64url", base64.URLEncoding}} {
		for k := 0; k < 3; k++ {
			full := enc.e.EncodeToString([]byte(strings.Repeat("\x00", k) + v))
			start, end := 0, 4*((k+len(v))/3)
			if k > 0 {
				start = 4
			}
			fs = append(fs, form{fmt.Sprintf("%s (offset %d)", enc.name, k), full[start:end]})
		}
	}
	var every, notAlnum, every2 strings.Builder
	for i := 0; i < len(v); i++ {
		fmt.Fprintf(&every, "%%%02X", v[i])
	}
	for _, c := range v {
		fmt.Fprintf(&every2, `\u%04x`, c)
		if c < 128 && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			notAlnum.WriteRune(c)
		} else {
			fmt.Fprintf(&notAlnum, `\u%04x`, c)
		}
	}
	lower := func(s string) string { return pctHex().ReplaceAllStringFunc(s, strings.ToLower) }
	for _, p := range []form{{"percent-encoded (query)", url.QueryEscape(v)}, {"percent-encoded (path)", url.PathEscape(v)}, {"percent-encoded (every byte)", every.String()}} {
		fs = append(fs, p, form{p.name + ", lower case", lower(p.s)})
	}
	fs = append(fs, form{`json-escaped (\/)`, strings.ReplaceAll(v, "/", `\/`)},
		form{`json-escaped (\u002B)`, strings.ReplaceAll(v, "+", `\u002B`)}, form{`json-escaped (\u002b)`, strings.ReplaceAll(v, "+", `\u002b`)},
		form{`json-escaped (\u)`, notAlnum.String()}, form{`json-escaped (\u, upper case)`, upperU(notAlnum.String())},
		form{`json-escaped (\u every character)`, every2.String()}, form{`json-escaped (\u every character, upper case)`, upperU(every2.String())})
	// Distinct spellings only, longest first (redact replaces in order).
	var out []form
	for _, f := range fs {
		if f.s != "" && !slices.ContainsFunc(out, func(o form) bool { return o.s == f.s }) {
			out = append(out, f)
		}
	}
	slices.SortStableFunc(out, func(a, b form) int { return len(b.s) - len(a.s) })
	return out
}

var uEsc = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\\u[0-9a-f]{4}`) })

func upperU(s string) string {
	return uEsc().ReplaceAllStringFunc(s, func(m string) string { return `\u` + strings.ToUpper(m[2:]) })
}

// secrets are a case's credential values and their spellings.
type secrets struct{ vals, names []string }

func (s *secrets) add(name, v string) { s.vals, s.names = append(s.vals, v), append(s.names, name) }

// find names the first secret in t and how it is spelt ("the value of
// p30, json-escaped"), or "". It reads t as a client could: as it is,
// with its JSON escapes and its percent escapes undone, and each base64
// token in it decoded; and it looks for the spellings of secretForms
// (base64 of the value behind other bytes, in one token with them).
func (s *secrets) find(t string) string {
	ds := decodings(t)
	for i, v := range s.vals {
		for _, d := range ds {
			if strings.Contains(d.s, v) {
				return strings.TrimSuffix("the value of "+s.names[i]+", "+d.name, ", ")
			}
		}
		for _, f := range secretForms(v) {
			if strings.Contains(t, f.s) {
				return "the value of " + s.names[i] + ", " + f.name
			}
		}
	}
	return ""
}

var (
	jsonEsc = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\\(u[0-9a-fA-F]{4}|["\\/bfnrt])`) })
	pctEsc  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`%[0-9a-fA-F]{2}`) })
	b64Tok  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[A-Za-z0-9+/_-]{16,}`) })
)

// unJSON undoes the JSON escapes in t.
func unJSON(t string) string {
	return jsonEsc().ReplaceAllStringFunc(t, func(m string) string {
		if m[1] == 'u' {
			n, _ := strconv.ParseUint(m[2:], 16, 32)
			return string(rune(n))
		}
		if i := strings.IndexByte("bfnrt", m[1]); i >= 0 {
			return string("\b\f\n\r\t"[i])
		}
		return m[1:]
	})
}

// decodings are the readings of t a check searches: t, its JSON escapes
// undone, its percent escapes undone, both (in either order), and every
// base64 token of t and of t unescaped, decoded (standard or URL
// alphabet, padded or not).
func decodings(t string) []form {
	j := unJSON(t)
	pct := func(s string) string {
		return pctEsc().ReplaceAllStringFunc(s, func(m string) string {
			n, _ := strconv.ParseUint(m[1:], 16, 8)
			return string([]byte{byte(n)})
		})
	}
	out := []form{{"", t}, {"json-escaped", j}, {"percent-encoded", pct(t)}, {"json-escaped and percent-encoded", pct(j)}, {"percent-encoded and json-escaped", unJSON(pct(t))}}
	for _, src := range []string{t, j} {
		for _, tok := range b64Tok().FindAllString(src, -1) {
			for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
				if d, err := enc.DecodeString(tok); err == nil {
					out = append(out, form{"base64", string(d)})
				}
			}
		}
	}
	return out
}

// redact replaces every spelling of the secrets in t (evidence goes in
// the report).
func (s *secrets) redact(t string) string {
	for i, v := range s.vals {
		for _, f := range secretForms(v) {
			t = strings.ReplaceAll(t, f.s, "<VALUE of "+s.names[i]+", "+f.name+">")
		}
	}
	return t
}

// check is Env.Check with the secrets redacted from the evidence.
func (s *secrets) check(e *Env, r *Result, attempt, got string, ok bool, why string) {
	e.Check(r, attempt, s.redact(got), ok, s.redact(why))
}

// credOrigin is a credential case's origin: it records every request
// under /p30/ and /p31/ whole, answers /p30/ as the Upstream answers /,
// and answers /p31/ with the value its request carried (P31's echoes).
type credOrigin struct {
	*Upstream
	// alt is the same over TLS on another port, plain the same over
	// plain HTTP on a third (P30's port and plain-HTTP requests).
	alt, plain *Upstream
	mu         sync.Mutex
	reqs       []originReq
	primed     string // the bearer value /p31/.../prime carried
}

// originReq is one request as the origin read it.
type originReq struct {
	Host, Method, URI, Proto string
	Port                     int // the origin's port it came to
	Header                   http.Header
	Body                     string
}

func (q originReq) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s:%d %s (%s)", q.Method, q.Host, q.Port, q.URI, q.Proto)
	for _, k := range slices.Sorted(maps.Keys(q.Header)) {
		if k == "Accept-Encoding" || k == "User-Agent" || k == "Content-Length" {
			continue
		}
		for _, v := range q.Header[k] {
			fmt.Fprintf(&b, "; %s: %s", k, v)
		}
	}
	if q.Body != "" {
		fmt.Fprintf(&b, "; body %q", clip(q.Body, 200))
	}
	return b.String()
}

// newCredOrigin starts a credOrigin on ip for the three hosts, with a
// certificate of the case's test CA (whose PEM file it returns).
func (e *Env) newCredOrigin(ip string) (*credOrigin, string, error) {
	caFile := filepath.Join(e.Dir, "upstream-ca.pem")
	leaf, err := testcert.Issue(caFile, credHostA, credHostB, credHostC)
	if err != nil {
		return nil, "", err
	}
	o := &credOrigin{}
	for _, u := range []**Upstream{&o.Upstream, &o.alt, &o.plain} {
		cert := &leaf
		if u == &o.plain {
			cert = nil
		}
		if *u, err = startUpstream(ip, 0, cert, []string{"h2", "http/1.1"}); err != nil {
			o.Close()
			return nil, "", err
		}
		(*u).Mux.HandleFunc("/p30/", func(w http.ResponseWriter, r *http.Request) {
			o.record(r)
			if path.Base(r.URL.Path) == "ws" {
				wsServer(func(m string) string { return m }).ServeHTTP(w, r)
				return
			}
			fmt.Fprintf(w, "upstream-ok %s %s\n", r.Host, r.URL.Path)
		})
		(*u).Mux.HandleFunc("/p31/", o.echo)
	}
	o.Mux.HandleFunc(OriginSSE, originSSE)
	return o, caFile, nil
}

// Close stops the origin's servers.
func (o *credOrigin) Close() {
	o.Upstream.Close()
	o.alt.Close()
	o.plain.Close()
}

func (o *credOrigin) record(r *http.Request) originReq {
	b, _ := io.ReadAll(io.LimitReader(r.Body, fullMax))
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	q := originReq{Host: host, Method: r.Method, URI: r.RequestURI, Proto: r.Proto, Header: r.Header.Clone(), Body: string(b)}
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if ta, ok := a.(*net.TCPAddr); ok {
			q.Port = ta.Port
		}
	}
	o.mu.Lock()
	o.reqs = append(o.reqs, q)
	o.mu.Unlock()
	return q
}

// got is the requests the origin recorded whose path starts with prefix.
func (o *credOrigin) got(prefix string) []originReq {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []originReq
	for _, q := range o.reqs {
		if strings.HasPrefix(q.URI, prefix) {
			out = append(out, q)
		}
	}
	return out
}

// bearer is the credential of an "Authorization: Bearer X" value.
func bearer(h string) (string, bool) {
	s, v, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(s, "bearer") {
		return "", false
	}
	return strings.TrimSpace(v), true
}

// p31End ends every echo's body: its arrival shows the response came
// whole (masked, not cut off).
const p31End = "p31-end"

// echo answers /p31/NN/KIND with the bearer value the request carried
// (the credential's value, when the proxy substituted it), or with the
// one /p31/NN/prime carried when it carries none (P31's self-test),
// spelt and sent as KIND says.
func (o *credOrigin) echo(w http.ResponseWriter, r *http.Request) {
	q := o.record(r)
	v, ok := bearer(q.Header.Get("Authorization"))
	kind := path.Base(r.URL.Path)
	o.mu.Lock()
	if kind == "prime" && ok {
		o.primed = v
	}
	if !ok {
		v = o.primed
	}
	o.mu.Unlock()
	end := "\n" + p31End + "\n"
	flush := func() {
		_ = http.NewResponseController(w).Flush()
		time.Sleep(5 * time.Millisecond)
	}
	slowly := func(s string, n int) {
		for _, p := range pieces([]byte(s), n) {
			_, _ = w.Write(p)
			flush()
		}
	}
	b64 := base64.StdEncoding.EncodeToString([]byte(v))
	switch kind {
	case "prime":
		fmt.Fprint(w, "primed"+end)
	case "header":
		w.Header().Set("X-Echo", v)
		w.Header().Add("Set-Cookie", "key="+v+"; Secure")
		fmt.Fprint(w, "headers"+end)
	case "body":
		body := "your key: " + v + end
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		fmt.Fprint(w, body)
	case "chunks":
		slowly("your key: "+v+end, 2)
	case "b64":
		fmt.Fprint(w, "key="+b64+end)
	case "b64chunks":
		slowly("key="+b64+end, 3)
	case "pct":
		w.Header().Set("Location", "https://"+credHostA+"/callback?key="+url.QueryEscape(v))
		w.WriteHeader(http.StatusFound)
		fmt.Fprint(w, "next=key%3D"+url.QueryEscape(v)+end)
	case "json-slash":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"error":"invalid api key","key":"`+strings.ReplaceAll(v, "/", `\/`)+`"}`+end)
	case "json-net":
		// System.Text.Json's default encoder: "+" (and <, >, &, ') as
		// upper-case \u escapes.
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"detail":"key `+strings.ReplaceAll(v, "+", `\u002B`)+` revoked"}`+end)
	case "json-u":
		// Every character escaped: what a JSON parser inside reads is the
		// value all the same.
		w.Header().Set("Content-Type", "application/json")
		var b strings.Builder
		for _, c := range v {
			fmt.Fprintf(&b, `\u%04x`, c)
		}
		fmt.Fprint(w, `{"error":{"message":"Incorrect API key provided: `+b.String()+`"}}`+end)
	case "sse":
		// A model API's stream: the value inside one event's data, sent
		// in pieces, each flushed on its own.
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		fmt.Fprint(w, "data: {\"delta\":\"start\"}\n\n")
		flush()
		fmt.Fprint(w, `data: {"delta":"`)
		flush()
		slowly(v, 7)
		fmt.Fprint(w, "\"}\n\ndata: "+p31End+"\n\n")
	case "gzip":
		body := "your key: " + v + end
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			fmt.Fprint(w, body)
			return
		}
		var zb bytes.Buffer
		zw := gzip.NewWriter(&zb)
		_, _ = zw.Write([]byte(body))
		_ = zw.Close()
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Length", strconv.Itoa(zb.Len()))
		_, _ = w.Write(zb.Bytes())
	case "ws":
		// The value in a message on a WebSocket the bound header opened.
		wsServer(func(string) string { return "your key: " + v + end }).ServeHTTP(w, r)
	case "trailer":
		w.Header().Set("Trailer", "X-Echo")
		fmt.Fprint(w, "trailer"+end)
		flush()
		w.Header().Set("X-Echo", v)
	default:
		http.NotFound(w, r)
	}
}

// wsServer is a WebSocket server (any Origin, or none) answering each
// text message m with reply(m).
func wsServer(reply func(string) string) websocket.Server {
	return websocket.Server{
		Handshake: func(*websocket.Config, *http.Request) error { return nil },
		Handler: func(c *websocket.Conn) {
			defer c.Close()
			for {
				var m string
				if websocket.Message.Receive(c, &m) != nil || websocket.Message.Send(c, reply(m)) != nil {
					return
				}
			}
		},
	}
}

// credPolicy is the proxy-mode policy of a credential case: hosts
// allowed on the origin, and api.a.test on its other two ports, every
// one inspected (tls: inspect); and the credentials section creds (YAML
// lines, starting "credentials:").
func (e *Env) credPolicy(o *credOrigin, caFile, creds string, hosts ...string) string {
	hs := []Inspected{{credHostA, o.IP, o.alt.Port, "tls: inspect"}, {credHostA, o.IP, o.plain.Port, "tls: inspect"}}
	for _, h := range hosts {
		hs = append(hs, Inspected{h, o.IP, o.Port, "tls: inspect"})
	}
	return e.SystemPolicy(pol{Network: "proxy", NetRules: InspectNet(caFile, hs...)}.yaml() + creds)
}

// auditFindings is the Detection Findings (class 2004) of an audit log,
// one JSON line each, and the whole log.
func auditFindings(path string) ([]string, string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		var ev struct {
			ClassUID int `json:"class_uid"`
		}
		if json.Unmarshal([]byte(l), &ev) == nil && ev.ClassUID == 2004 {
			out = append(out, l)
		}
	}
	return out, string(b), nil
}

// findingFor is the first finding that names the credential cred (as a
// JSON string), the host and the request path prefix p, and whose text
// holds kind ("mismatch", "reflection"); "" when none does.
func findingFor(findings []string, cred, host, p, kind string) string {
	for _, f := range findings {
		if strings.Contains(f, `"`+cred+`"`) && strings.Contains(f, host) && strings.Contains(f, p) && strings.Contains(strings.ToLower(f), kind) {
			return f
		}
	}
	return ""
}

// hostCred is a credential whose value the case gives corral: through
// corral's environment (source: {env: Env}), or for LinuxGateway, whose
// sandboxes do not read the gateway's environment, at create
// (source: {stored: true}, `corral sandbox create --credential
// NAME=env:ENV` with the value in the create's environment only).
type hostCred struct{ name, env, value string }

// source is the credential's source in the case's policy.
func (c hostCred) source(e *Env) string {
	if e.Provider == LinuxGateway {
		return "{stored: true}"
	}
	return "{env: " + c.env + "}"
}

// credRun runs the in-sandbox client with spec under policy, the values
// of creds given to corral, and an audit log; it returns the client's
// report, the log's path and the run's outcome, and whether the client
// reported every request.
func (e *Env) credRun(ctx context.Context, r *Result, sec *secrets, policy string, creds []hostCred, spec FetchSpec) (FetchReport, string, Outcome, bool) {
	auditLog := filepath.Join(e.TempDir("audit"), "audit.jsonl")
	run := Run{Policy: policy, Flags: []string{"--audit", auditLog}, Timeout: 80 * time.Second,
		Args: e.steps(step{Label: "fetch", Shell: e.clientLine("fetch", spec)})}
	var out Outcome
	var err error
	if e.Provider == LinuxGateway {
		raw := &gwRun{policy: e.PolicyPath(policy), workdir: e.TempDir("work"), flags: run.Flags}
		for _, c := range creds {
			raw.create = append(raw.create, "--credential", c.name+"=env:"+c.env)
			raw.createEnv = append(raw.createEnv, c.env+"="+c.value)
		}
		var rn *Running
		if rn, err = e.gatewayStart(ctx, run, raw); err == nil {
			out, err = rn.Wait()
		}
	} else {
		for _, c := range creds {
			run.Env = append(run.Env, c.env+"="+c.value)
		}
		out, err = e.Corral(ctx, run)
	}
	if err != nil {
		failNow(e, r, "corral run", err)
		return FetchReport{}, auditLog, out, false
	}
	var rep FetchReport
	err = clientJSON(parseSteps(out)["fetch"], &rep)
	sec.check(e, r, "run (the credentials' values given to corral, their placeholders to the sandbox)", brief(out), err == nil && out.Code == 0 && len(rep.Results) == len(spec.Requests),
		fmt.Sprintf("the client did not report every request: %v", err))
	return rep, auditLog, out, err == nil && len(rep.Results) == len(spec.Requests)
}

// placeholderShape is a check of one exposed placeholder: it is in the
// environment, has the policy's shape (prefix and random length), and is
// none of the secrets.
func placeholderShape(e *Env, r *Result, sec *secrets, rep FetchReport, env, prefix string, n int) string {
	p := rep.Vars[env]
	rest, ok := strings.CutPrefix(p, prefix)
	ok = ok && len(rest) == n && regexp.MustCompile(`^[A-Za-z0-9]+$`).MatchString(rest)
	found := sec.find(p)
	sec.check(e, r, "inside: $"+env, fmt.Sprintf("%q", p), ok && found == "" && !slices.Contains(sec.vals, p),
		fmt.Sprintf("$%s inside is not a placeholder of the shape %q + %d letters and digits (or it is a value)", env, prefix, n))
	return p
}

// ---- P30 ----

// credReq is one of P30's requests and what must become of it.
type credReq struct {
	FetchRequest
	cred string // the credential whose placeholder it carries
	// want: "sub" (the value reaches the origin in the bound place),
	// "deny" (403 credential mismatch, the origin sees nothing),
	// "literal" (forwarded with the placeholder as it was written),
	// "sub+literal" (the bound header substituted, the body forwarded as
	// it was).
	want string
	path string // the request's path prefix ("/p30/NN/"): its findings and the origin's record
}

// P30: a credential bound to api.a.test's Authorization (Bearer), its
// placeholder sent everywhere else from inside; another, with
// on_mismatch: forward, bound to X-Api-Key under one path.
func runP30(ctx context.Context, e *Env) Result {
	r := newResult()
	o, caFile, err := e.newCredOrigin("127.0.0.30")
	if err != nil {
		failNow(e, &r, "origin", err)
		return r
	}
	defer o.Close()
	var sec secrets
	val, fwdVal := credSecret(), credSecret()
	cred := hostCred{"p30", "P30_TOKEN", val}
	sec.add("p30", val)
	sec.add("p30fwd", fwdVal)
	fwdFile := filepath.Join(e.Dir, "p30fwd.secret") // the case dir: no grant shows it
	if err := writeHostFile(fwdFile, fwdVal+"\n", 0o600); err != nil {
		failNow(e, &r, "the forward credential's source file", err)
		return r
	}
	p := strconv.Itoa(o.Port)
	// Bound on the origin's port and on its plain-HTTP one (a plain
	// request must never get the value all the same); not on alt.
	endpoints := fmt.Sprintf("      - {host: %s, ports: [%s, %d], header: \"Authorization: Bearer {}\"}\n", credHostA, p, o.plain.Port)
	if credMisbound {
		endpoints = ""
		for _, h := range []string{credHostA, credHostB} {
			endpoints += fmt.Sprintf("      - {host: %s, ports: [%s], header: \"Authorization: Bearer {}\", basic: password, query: key, body: {max: 64K}}\n", h, p)
		}
		e.Check(&r, "test hook: the credential bound to every host and place", endpoints, true, "")
	}
	creds := "credentials:\n" +
		"  - name: p30\n" +
		"    source: " + cred.source(e) + "\n" +
		"    expose: {env: P30_TOKEN, file: /run/secrets/p30}\n" +
		"    shape: \"sk-{random}\"\n" +
		"    endpoints:\n" + endpoints +
		"  - name: p30fwd\n" +
		"    source: {file: " + strconv.Quote(fwdFile) + "}\n" +
		"    expose: {env: P30_FWD}\n" +
		"    shape: \"fwd_{random:24}\"\n" +
		"    on_mismatch: forward\n" +
		"    endpoints:\n" +
		fmt.Sprintf("      - {host: %s, ports: [%s], path: /p30/fwd/, header: \"X-Api-Key: {}\"}\n", credHostA, p)
	policy := e.credPolicy(o, caFile, creds, credHostA, credHostB)

	a, b := "https://"+o.HostPort(credHostA), "https://"+o.HostPort(credHostB)
	const P, F = "{{P30_TOKEN}}", "{{P30_FWD}}"
	var reqs []credReq
	add := func(want, cred, label, base, sub, proto, kind string, chunk int, body string, headers ...string) {
		n := fmt.Sprintf("%02d", len(reqs)+1)
		pfx := "/p30/" + n + "/"
		if strings.HasPrefix(sub, "fwd/") {
			pfx, sub = "/p30/fwd/"+n+"/", strings.TrimPrefix(sub, "fwd/")
		}
		q := FetchRequest{Label: n + " " + label, URL: base + pfx + sub, Proto: proto, Kind: kind, Chunk: chunk, Body: body, Headers: headers, Conn: "p30"}
		if body != "" {
			q.Method = "POST"
		}
		reqs = append(reqs, credReq{q, cred, want, pfx})
	}
	auth := "Authorization: Bearer " + P
	// The bound header, as clients send it: controls.
	add("sub", "p30", "api.a.test: Authorization: Bearer (bound)", a, "", "h1", "", 0, "", auth)
	add("sub", "p30", "api.a.test: h2 Authorization: Bearer (bound)", a, "", "h2", "", 0, "", auth)
	add("sub", "p30", "api.a.test: Authorization: Bearer in 3-byte writes (bound)", a, "", "", "h1raw", 3, "", auth)
	add("sub", "p30", "api.a.test: h2 Authorization: Bearer split across CONTINUATION frames (bound)", a, "", "", "h2raw", 4, "", auth)
	add("sub", "p30", "api.a.test: authorization: bearer, lower case (bound)", a, "", "h1", "", 0, "", "authorization: bearer "+P)
	add("sub", "p30fwd", "api.a.test: X-Api-Key under /p30/fwd/ (bound, on_mismatch: forward)", a, "fwd/", "h1", "", 0, "", "X-Api-Key: "+F)
	add("sub", "p30", "api.a.test: a WebSocket handshake with Authorization: Bearer (bound)", a, "ws", "", "ws", 0, "", auth)
	// api.b.test: allowed and inspected, bound to nothing.
	add("deny", "p30", "api.b.test: Authorization: Bearer", b, "", "h1", "", 0, "", auth)
	add("deny", "p30", "api.b.test: h2 Authorization: Bearer", b, "", "h2", "", 0, "", auth)
	add("deny", "p30", "api.b.test: query ?key=", b, "?key="+P, "h1", "", 0, "")
	add("deny", "p30", "api.b.test: query ?key= percent-encoded", b, "?key="+"{{P30_TOKEN.pct}}", "h1", "", 0, "")
	add("deny", "p30", "api.b.test: Cookie", b, "", "h1", "", 0, "", "Cookie: session="+P)
	add("deny", "p30", "api.b.test: Authorization: Basic, the password (base64)", b, "", "h1", "", 0, "", "Authorization: Basic {{P30_TOKEN.basic-pw}}")
	add("deny", "p30", "api.b.test: h2 Authorization: Basic, the user (base64)", b, "", "h2", "", 0, "", "Authorization: Basic {{P30_TOKEN.basic-user}}")
	add("deny", "p30", "api.b.test: X-Token base64", b, "", "h1", "", 0, "", "X-Token: {{P30_TOKEN.b64}}")
	add("deny", "p30", "api.b.test: X-Meta JSON-escaped", b, "", "h2", "", 0, "", `X-Meta: {"token":"{{P30_TOKEN.json}}"}`)
	add("deny", "p30", "api.b.test: Authorization: Bearer in 3-byte writes", b, "", "", "h1raw", 3, "", auth)
	add("deny", "p30", "api.b.test: h2 Authorization: Bearer split across CONTINUATION frames", b, "", "", "h2raw", 4, "", auth)
	add("deny", "p30", "api.b.test: in the path", b, P, "h1", "", 0, "")
	add("deny", "p30", "api.b.test: a WebSocket handshake with Authorization: Bearer", b, "ws", "", "ws", 0, "", auth)
	add("literal", "p30", "api.b.test: in a JSON body (a transcript)", b, "", "h1", "", 0, `{"messages":[{"role":"user","content":"my key is `+P+`"}]}`)
	add("literal", "p30", "api.b.test: JSON-escaped in a body", b, "", "h2", "", 0, `{"content":"{{P30_TOKEN.json}}"}`)
	add("literal", "p30", "api.b.test: base64 in a body", b, "", "h1", "", 0, "k={{P30_TOKEN.b64}}")
	add("literal", "p30", "api.b.test: percent-encoded in a form body", b, "", "h2", "", 0, "key={{P30_TOKEN.pct}}&x=1", "Content-Type: application/x-www-form-urlencoded")
	add("literal", "p30", "api.b.test: in a body in 3-byte writes", b, "", "", "h1raw", 3, "key="+P+"&x=1")
	add("literal", "p30", "api.b.test: h2, in a body split across DATA frames", b, "", "", "h2raw", 4, "key="+P+"&x=1")
	add("literal", "p30fwd", "api.b.test: X-Api-Key (on_mismatch: forward)", b, "", "h1", "", 0, "", "X-Api-Key: "+F)
	add("literal", "p30fwd", "api.b.test: h2 query (on_mismatch: forward)", b, "?api_key="+F, "h2", "", 0, "")
	// api.a.test, in places the binding does not name.
	add("deny", "p30", "api.a.test: query ?access_token=", a, "?access_token="+P, "h1", "", 0, "")
	add("deny", "p30", "api.a.test: X-Api-Key", a, "", "h1", "", 0, "", "X-Api-Key: "+P)
	add("deny", "p30", "api.a.test: Cookie", a, "", "h2", "", 0, "", "Cookie: t="+P)
	add("deny", "p30", "api.a.test: Authorization: Basic, the password (base64)", a, "", "h1", "", 0, "", "Authorization: Basic {{P30_TOKEN.basic-pw}}")
	add("deny", "p30", "api.a.test: Authorization: Token (another scheme)", a, "", "h1", "", 0, "", "Authorization: Token "+P)
	add("deny", "p30", "api.a.test: h2 the bound header and ?key= at once", a, "?key="+P, "h2", "", 0, "", auth)
	add("deny", "p30", "api.a.test on a port the binding does not name: Authorization: Bearer", "https://"+o.alt.HostPort(credHostA), "", "h1", "", 0, "", auth)
	add("deny", "p30", "api.a.test in plain HTTP on a bound port: Authorization: Bearer", "http://"+o.plain.HostPort(credHostA), "", "h1", "", 0, "", auth)
	add("literal", "p30", "api.a.test: in a body, no header", a, "", "h1", "", 0, `{"content":"`+P+`"}`)
	add("literal", "p30fwd", "api.a.test: X-Api-Key outside /p30/fwd/ (on_mismatch: forward)", a, "", "h1", "", 0, "", "X-Api-Key: "+F)
	add("sub+literal", "p30", "api.a.test: the bound header and the placeholder in the body (a transcript)", a, "", "h2", "", 0, `{"content":"earlier I used `+P+`"}`, auth)

	spec := FetchSpec{Record: true, Vars: []string{"P30_TOKEN", "P30_FWD"}, Files: []string{"/run/secrets/p30"}, Hunt: ptr(NewNeedle(len(credPrefix), val, fwdVal))}
	for _, q := range reqs {
		spec.Requests = append(spec.Requests, q.FetchRequest)
	}
	rep, auditLog, out, ok := e.credRun(ctx, &r, &sec, policy, []hostCred{cred}, spec)
	if !ok {
		return r
	}
	// What the sandbox sees.
	ph := placeholderShape(e, &r, &sec, rep, "P30_TOKEN", "sk-", 32)
	placeholderShape(e, &r, &sec, rep, "P30_FWD", "fwd_", 24)
	f := rep.Files["/run/secrets/p30"]
	sec.check(e, &r, "inside: /run/secrets/p30 (expose.file)", fmt.Sprintf("%q", f), f == ph && ph != "", "the exposed file does not hold the placeholder $P30_TOKEN holds")
	if h := rep.Hunt; h != nil {
		sec.check(e, &r, "inside: search for the values (by hash)", fmt.Sprintf("%d files and %d MiB scanned (environment, /proc/*/{environ,cmdline,fd/*,mem} included; truncated: %v); processes visible: %d; memory read of: %q; found at: %q",
			h.Files, h.Bytes>>20, h.Truncated, len(h.Procs), h.MemRead, h.Secret), len(h.Secret) == 0 && h.Files > 0, "a credential's value is readable inside: "+strings.Join(h.Secret, "; "))
	} else {
		sec.check(e, &r, "inside: search for the values (by hash)", "no report", false, "the client did not search for the values")
	}
	if ph == "" {
		return r
	}
	findings, log, ferr := auditFindings(auditLog)
	sec.check(e, &r, "host: the audit log", fmt.Sprintf("%d bytes, %d Detection Findings; %v", len(log), len(findings), ferr), ferr == nil && len(findings) > 0, "no Detection Finding in the audit log")
	settle()
	for i, q := range reqs {
		x := rep.Results[i]
		checkP30(e, &r, &sec, rep.Vars, q, x, o.got(q.path), findings, val, fwdVal)
	}
	// The values anywhere else at the origin.
	var stray []string
	for _, g := range o.got("/p30/") {
		for _, w := range valueAt(&sec, g, o.Port, val, fwdVal) {
			stray = append(stray, w+" in "+g.String())
		}
	}
	sec.check(e, &r, "host: where the origin received a value", fmt.Sprintf("%d requests; the values outside their bound places: %q", len(o.got("/p30/")), stray), len(stray) == 0,
		"a credential's real value reached the origin outside its bound place: "+strings.Join(stray, "; "))
	leak := sec.find(log)
	sec.check(e, &r, "host: the values in the audit log", map[bool]string{true: "none", false: leak}[leak == ""], leak == "", "the audit log holds "+leak)
	for _, fl := range findings {
		if strings.Contains(fl, ph) || strings.Contains(fl, rep.Vars["P30_FWD"]) {
			sec.check(e, &r, "host: a finding names the placeholder", clip(fl, 600), false, "a Detection Finding carries a placeholder")
			break
		}
	}
	leak = sec.find(out.Stdout + out.Stderr)
	sec.check(e, &r, "inside: the values in what the sandbox printed", map[bool]string{true: "none", false: leak}[leak == ""], leak == "", "the sandbox's output holds "+leak)
	return r
}

func ptr[T any](v T) *T { return &v }

// valueAt lists where a secret is in what the origin received, leaving
// out the bound places: api.a.test's Authorization as "Bearer VALUE" for
// p30 and its X-Api-Key under /p30/fwd/ for p30fwd, over TLS on port.
func valueAt(sec *secrets, g originReq, port int, val, fwdVal string) []string {
	var out []string
	if w := sec.find(g.URI); w != "" {
		out = append(out, w+" (URL)")
	}
	for k, vs := range g.Header {
		for _, v := range vs {
			if g.Host == credHostA && g.Port == port {
				if b, ok := bearer(v); ok && b == val && k == "Authorization" {
					continue
				}
				if k == "X-Api-Key" && v == fwdVal && strings.HasPrefix(g.URI, "/p30/fwd/") {
					continue
				}
			}
			if w := sec.find(v); w != "" {
				out = append(out, w+" (header "+k+")")
			}
		}
	}
	if w := sec.find(g.Body); w != "" {
		out = append(out, w+" (body)")
	}
	return out
}

// checkP30 checks what became of one of P30's requests: its response
// inside, what the origin received, its finding.
func checkP30(e *Env, r *Result, sec *secrets, vars map[string]string, q credReq, x FetchResult, got []originReq, findings []string, val, fwdVal string) {
	host := credHostA
	if strings.Contains(q.URL, credHostB) {
		host = credHostB
	}
	sent := q.FetchRequest.expand(vars)
	var gs []string
	for _, g := range got {
		gs = append(gs, g.String())
	}
	ev := showFetch(x) + "; the origin received: " + map[bool]string{true: "nothing", false: strings.Join(gs, " | ")}[len(gs) == 0]
	ok, why := true, ""
	fail := func(s string) {
		if ok {
			ok, why = false, q.Label+": "+s
		}
	}
	switch {
	case x.Leaf != "" && !(x.Verified && strings.Contains(x.Issuer, sandboxCAName)):
		fail("the connection was not intercepted by the sandbox's CA (the leaf does not verify inside)")
	case q.Kind == "ws" && q.want == "deny":
		// The handshake's refusal ends the client's handshake: no 101.
		if x.Status == http.StatusSwitchingProtocols || !strings.Contains(x.Err, "handshake") {
			fail(fmt.Sprintf("status %d (%s), want the handshake refused", x.Status, x.Err))
		}
		if len(got) > 0 {
			fail("refused inside, yet the origin received it")
		}
	case q.want == "deny":
		var d struct{ Error, Reason string }
		_ = json.Unmarshal([]byte(x.Body), &d)
		if x.Status != http.StatusForbidden || !strings.Contains(strings.ToLower(d.Error+" "+d.Reason), "credential mismatch") {
			fail(fmt.Sprintf("status %d, want 403 with the proxy's JSON \"credential mismatch\"", x.Status))
		}
		if len(got) > 0 {
			fail("refused inside, yet the origin received it")
		}
	default:
		if q.Kind == "ws" && (x.Status != http.StatusSwitchingProtocols || x.Err != "") {
			fail(fmt.Sprintf("status %d (%s), want the WebSocket open and its message echoed", x.Status, x.Err))
			break
		}
		if q.Kind != "ws" && (x.Status != http.StatusOK || !strings.HasPrefix(x.Body, "upstream-ok")) {
			fail(fmt.Sprintf("status %d, want 200 from the origin", x.Status))
			break
		}
		if len(got) != 1 {
			fail(fmt.Sprintf("the origin received it %d times, want once", len(got)))
			break
		}
		g := got[0]
		if strings.HasPrefix(q.want, "sub") {
			if q.cred == "p30" {
				if b, _ := bearer(g.Header.Get("Authorization")); b != val {
					fail("the origin did not receive the value in Authorization: Bearer (not substituted)")
				}
			} else if g.Header.Get("X-Api-Key") != fwdVal {
				fail("the origin did not receive the value in X-Api-Key (not substituted)")
			}
		}
		if q.want == "literal" || q.want == "sub+literal" {
			// As written: the URL, the body, and every header but the
			// bound one of a substituted request.
			if g.URI != mustURL(sent.URL).RequestURI() {
				fail("the origin received another URL than the one sent")
			}
			if g.Body != sent.Body {
				fail("the origin received another body than the one sent")
			}
			for _, h := range sent.Headers {
				k, v, _ := strings.Cut(h, ":")
				if q.want == "sub+literal" && strings.EqualFold(k, "Authorization") {
					continue
				}
				if !slices.Contains(g.Header.Values(strings.TrimSpace(k)), strings.TrimSpace(v)) {
					fail("the origin did not receive " + strings.TrimSpace(k) + " as it was sent")
				}
			}
		}
	}
	sec.check(e, r, q.Label, ev, ok, why)
	fd := findingFor(findings, q.cred, host, q.path, "mismatch")
	if q.want == "sub" {
		sec.check(e, r, q.Label+": finding", map[bool]string{true: "none (a substitution is no mismatch)", false: clip(fd, 600)}[fd == ""], fd == "", q.Label+": a mismatch finding for a substitution at the bound place")
		return
	}
	sec.check(e, r, q.Label+": finding", map[bool]string{true: "none", false: clip(fd, 600)}[fd == ""], fd != "",
		q.Label+": no Detection Finding naming the credential "+q.cred+", "+host+" and "+q.path+" as a mismatch")
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		return &url.URL{Path: "<" + err.Error() + ">"}
	}
	return u
}

// ---- P31 ----

// P31: the bound upstream echoes the value it received back, in every
// spelling and framing the reflection guard must see through; the
// sandbox must get none of it, and each echo must be a finding.
func runP31(ctx context.Context, e *Env) Result {
	r := newResult()
	o, caFile, err := e.newCredOrigin("127.0.0.31")
	if err != nil {
		failNow(e, &r, "origin", err)
		return r
	}
	defer o.Close()
	var sec secrets
	val := credSecret()
	cred := hostCred{"p31", "P31_TOKEN", val}
	sec.add("p31", val)
	p := strconv.Itoa(o.Port)
	creds := "credentials:\n" +
		"  - name: p31\n" +
		"    source: " + cred.source(e) + "\n" +
		"    expose: {env: P31_TOKEN}\n" +
		"    shape: \"sk-{random}\"\n" +
		"    endpoints:\n" +
		fmt.Sprintf("      - {host: %s, ports: [%s]}\n", credHostA, p)
	policy := e.credPolicy(o, caFile, creds, credHostA, credHostB, credHostC)
	a := "https://" + o.HostPort(credHostA)
	echoHost, echoAuth := a, []string{"Authorization: Bearer {{P31_TOKEN}}"}
	if reflectOff {
		echoHost, echoAuth = "https://"+o.HostPort(credHostC), nil
		e.Check(&r, "test hook: the echoes from api.c.test, bound to no credential (no scan applies)", "the origin echoes the value api.a.test received", true, "")
	}
	type echo struct {
		FetchRequest
		path   string
		status int
	}
	var echoes []echo
	addEcho := func(kind, proto string, headers ...string) {
		n := fmt.Sprintf("%02d", len(echoes)+1)
		pfx := "/p31/" + n + "/"
		st := map[string]int{"pct": http.StatusFound, "ws": http.StatusSwitchingProtocols}[kind]
		if st == 0 {
			st = http.StatusOK
		}
		k := map[bool]string{true: "ws"}[kind == "ws"]
		echoes = append(echoes, echo{FetchRequest{Label: n + " " + kind + " (" + proto + ")", Kind: k, URL: echoHost + pfx + kind, Proto: proto, Full: true, Conn: "echo",
			Headers: append(slices.Clone(echoAuth), headers...)}, pfx, st})
	}
	addEcho("header", "h1")
	addEcho("header", "h2")
	addEcho("body", "h1")
	addEcho("body", "h2")
	addEcho("chunks", "h1")
	addEcho("chunks", "h2")
	addEcho("b64", "h1")
	addEcho("b64chunks", "h2")
	addEcho("pct", "h1")
	addEcho("json-slash", "h1")
	addEcho("json-net", "h1")
	addEcho("json-u", "h2")
	addEcho("sse", "h1", "Accept: text/event-stream")
	addEcho("sse", "h2", "Accept: text/event-stream")
	addEcho("gzip", "h1", "Accept-Encoding: gzip")
	addEcho("gzip", "h2", "Accept-Encoding: gzip")
	addEcho("trailer", "h1")
	addEcho("trailer", "h2")
	addEcho("ws", "h1")
	spec := FetchSpec{Record: true, Vars: []string{"P31_TOKEN"}, Requests: []FetchRequest{
		{Label: "control: api.a.test: Authorization: Bearer (bound)", URL: a + "/p31/00/prime", Headers: []string{"Authorization: Bearer {{P31_TOKEN}}"}, Full: true},
		{Label: "control: api.a.test: an event stream still streams", Kind: "sse", URL: a + OriginSSE, Headers: []string{"Authorization: Bearer {{P31_TOKEN}}"}},
	}}
	for _, x := range echoes {
		spec.Requests = append(spec.Requests, x.FetchRequest)
	}
	rep, auditLog, out, ok := e.credRun(ctx, &r, &sec, policy, []hostCred{cred}, spec)
	if !ok {
		return r
	}
	if placeholderShape(e, &r, &sec, rep, "P31_TOKEN", "sk-", 32) == "" {
		return r
	}
	settle()
	substituted := func(pfx string) (bool, string) {
		got := o.got(pfx)
		var gs []string
		for _, g := range got {
			gs = append(gs, g.String())
		}
		var b string
		if len(got) == 1 {
			b, _ = bearer(got[0].Header.Get("Authorization"))
		}
		return len(got) == 1 && b == val, map[bool]string{true: "nothing", false: strings.Join(gs, " | ")}[len(gs) == 0]
	}
	prime := rep.Results[0]
	sub, got := substituted("/p31/00/")
	sec.check(e, &r, spec.Requests[0].Label, showFetch(prime)+"; the origin received: "+got, sub && prime.Status == http.StatusOK,
		"the credential was not substituted at its endpoint (the origin did not receive the value): the reflection cannot be tested")
	sse := rep.Results[1]
	sec.check(e, &r, spec.Requests[1].Label, showFetch(sse)+"; first event: "+sse.Event, sse.Status == http.StatusOK && sse.Event == "first" && sse.Err == "",
		"an event stream from the bound host did not stream through the reflection guard (its first event did not arrive while it was open)")
	findings, log, ferr := auditFindings(auditLog)
	sec.check(e, &r, "host: the audit log", fmt.Sprintf("%d bytes, %d Detection Findings; %v", len(log), len(findings), ferr), ferr == nil && len(findings) > 0, "no Detection Finding in the audit log")
	for i, x := range echoes {
		res := rep.Results[i+2]
		ev := showFetch(res)
		ok, why := true, ""
		fail := func(s string) {
			if ok {
				ok, why = false, x.Label+": "+s
			}
		}
		if !reflectOff {
			sub, got := substituted(x.path)
			ev += "; the origin received: " + got
			if !sub {
				fail("the origin did not receive the value (not substituted): the echo tests nothing")
			}
		}
		all := res.Head + "\n" + res.Body + "\n" + res.Decoded + "\n" + res.Err + "\n" + res.Event + "\n" + res.Echo
		if leak := sec.find(all); leak != "" {
			fail("the sandbox received " + leak)
		}
		whole := res.Body
		if res.Decoded != "" {
			whole = res.Decoded
		}
		if x.Kind == "ws" {
			whole = res.Echo
		}
		if res.Status != x.status || !strings.Contains(whole, p31End) {
			fail(fmt.Sprintf("status %d, want %d and the whole body (masked, not cut off)", res.Status, x.status))
		}
		sec.check(e, &r, x.Label, ev+"; head: "+clip(res.Head, 400)+"; decoded: "+clip(res.Decoded, 200)+"; message: "+clip(res.Echo, 200), ok, why)
		fd := findingFor(findings, "p31", credHostA, x.path, "reflect")
		sec.check(e, &r, x.Label+": finding", map[bool]string{true: "none", false: clip(fd, 600)}[fd == ""], fd != "",
			x.Label+": no Detection Finding naming the credential p31, "+credHostA+" and "+x.path+" as a reflection")
	}
	leak := sec.find(out.Stdout + out.Stderr)
	sec.check(e, &r, "inside: the value in anything the client reported", map[bool]string{true: "none", false: leak}[leak == ""], leak == "", "the sandbox received "+leak)
	leak = sec.find(log)
	sec.check(e, &r, "host: the value in the audit log", map[bool]string{true: "none", false: leak}[leak == ""], leak == "", "the audit log holds "+leak)
	return r
}

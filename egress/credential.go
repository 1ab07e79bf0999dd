package egress

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"compress/zlib"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Credential is one secret the proxy holds for a sandbox that sees only
// Placeholder. The proxy substitutes the value for the placeholder only in
// a request it inspected and its rules admitted, and only in a place one
// of Bindings names for that request's host, port and path; anywhere else
// (another host, another header, the URL, a cookie, a body, encoded as
// base64, percent or JSON escapes) the placeholder is a mismatch: the
// request is refused (Deny) or forwarded with the placeholder as it is
// (a body is always forwarded: it is data), and Config.Finding hears of
// it. Responses from a bound host:port are scanned for the value (raw,
// base64, percent-encoded, JSON-escaped) and a hit is masked before it
// reaches the sandbox. The value can be changed (SetValue) or revoked
// while the proxy runs; a revoked or expired credential's placeholder is
// refused wherever it appears.
type Credential struct {
	Name        string
	Placeholder string
	Bindings    []Binding
	// Deny refuses requests with a mismatched placeholder outside a
	// body (on_mismatch: deny); false forwards them as they are.
	Deny bool

	state atomic.Pointer[secretState]
}

// Binding is one endpoint a credential's value may go to (policy
// CredentialEndpoint).
type Binding struct {
	Host  string // exact name or IP literal, as the allow rules write it
	Ports []int  // empty: 443
	Path  string // canonical path prefix ("" or "/": any; else ends in "/" or is matched whole)
	// Header and Template: the header named Header whose value is
	// Template with the placeholder for its one "{}" (literal text
	// compared without case).
	Header, Template string
	Basic            string // "user" or "password" of Authorization: Basic; "" none
	Query            string // a query parameter's name; "" none
	BodyMax          int64  // >0: substitute in bodies of at most this many bytes
}

// secretState is a credential's value and its validity, swapped whole.
type secretState struct {
	value   []byte
	expires time.Time // zero: never
	revoked bool
	// reflects are the forms the reflection guard looks for: of value,
	// and of the maxOldValues values before it (an upstream may quote a
	// rotated or revoked key later: "key ... was revoked").
	reflects [][]byte
	values   []string // value and the old ones, newest first
	ps       atomic.Pointer[patterns]
}

// patterns are st's forms as a set for the guard (cred: the
// credential's index in its credSet), built once.
func (st *secretState) patterns(cred int) *patterns {
	if ps := st.ps.Load(); ps != nil && ps.forms[0].cred == cred {
		return ps
	}
	ps := &patterns{}
	for _, b := range st.reflects {
		ps.add(form{b: b, cred: cred, how: reflectHow(st, b)})
	}
	if len(ps.forms) > 0 {
		st.ps.Store(ps)
	}
	return ps
}

// maxOldValues is how many replaced values responses are still masked for.
const maxOldValues = 4

// next is the state after c's current one with value v ("" for a
// revocation).
func (c *Credential) next(v string) *secretState {
	st := &secretState{value: []byte(v)}
	if v != "" {
		st.values = []string{v}
	}
	if old := c.state.Load(); old != nil {
		st.values = append(st.values, old.values...)
	}
	st.values = st.values[:min(len(st.values), maxOldValues+1)]
	for _, x := range st.values {
		st.reflects = append(st.reflects, valueForms(x)...)
	}
	return st
}

// SetValue puts v in force from the next request on (a rotation: the
// placeholder stays); expires zero means it does not expire.
func (c *Credential) SetValue(v string, expires time.Time) {
	st := c.next(v)
	st.expires = expires
	c.state.Store(st)
}

// Revoke ends the credential: its placeholder is refused from now on.
func (c *Credential) Revoke() {
	st := c.next("")
	st.revoked = true
	c.state.Store(st)
}

// CredentialFinding is what Config.Finding hears: a placeholder where it
// is not substituted, a revoked or expired credential used, or the value
// in a response. It never carries the value or the placeholder.
type CredentialFinding struct {
	Time       time.Time
	Kind       FindingKind
	Credential string // its Name
	Host       string
	Port       int
	Method     string
	Path       string // the request's escaped path, without the query
	// Where is the place: "header X-Api-Key", "header Authorization
	// (base64)", "query", "path", "body", "response header Location",
	// "response body (json-escaped)".
	Where string
	// Action: "denied", "forwarded" or "masked".
	Action string
}

// FindingKind names a CredentialFinding.
type FindingKind string

const (
	FindingMismatch   FindingKind = "credential_mismatch"   // placeholder outside its bound places
	FindingRevoked    FindingKind = "credential_revoked"    // revoked or expired
	FindingReflection FindingKind = "credential_reflection" // the value in a response
)

// valueForms are the byte strings the reflection guard masks for v:
// as it is, its base64 cores, percent-encoded and JSON-escaped.
func valueForms(v string) [][]byte {
	var out [][]byte
	for _, set := range [][]string{{v}, base64Cores(v), percentForms(v), jsonForms(v)} {
		for _, f := range set {
			if !slices.ContainsFunc(out, func(b []byte) bool { return string(b) == f }) {
				out = append(out, []byte(f))
			}
		}
	}
	return out
}

// ValueForms are the strings a credential's value v is recognised in
// (as it is, base64, percent-encoded, JSON-escaped): what a log that must
// never carry v redacts.
func ValueForms(v string) []string {
	var out []string
	for _, b := range valueForms(v) {
		out = append(out, string(b))
	}
	return out
}

// placeholderForms are the forms a placeholder is recognised in where it
// is not substituted (beside the decoded views of headers and URLs).
//
// Its characters are letters, digits and "._-", so an encoder leaves it
// as it is; only one that escapes every byte changes it (as percent
// escapes or JSON's \u00XX).
func placeholderForms(ph string) []form {
	out := []form{{b: []byte(ph)}}
	for _, c := range base64Cores(ph) {
		out = append(out, form{b: []byte(c), how: "base64"})
	}
	all := func(byte) bool { return true }
	for _, hex := range []string{"%02X", "%02x"} {
		out = append(out, form{b: []byte(escapeBytes(ph, all, func(c byte, hex string) string { return "%" + fmt.Sprintf(hex, c) }, hex)), how: "percent-encoded"},
			form{b: []byte(escapeBytes(ph, all, func(c byte, hex string) string { return "\\u00" + fmt.Sprintf(hex, c) }, hex)), how: "json-escaped"})
	}
	return out
}

// current is c's value and validity (nil before SetValue).
func (c *Credential) current() *secretState { return c.state.Load() }

// unusable says why the credential cannot be substituted now ("" when it
// can).
func (st *secretState) unusable(now time.Time) string {
	switch {
	case st == nil || st.revoked:
		return "was revoked"
	case !st.expires.IsZero() && now.After(st.expires):
		return "expired at " + st.expires.UTC().Format(time.RFC3339)
	}
	return ""
}

// credSet is a proxy's compiled credentials.
type credSet struct {
	creds  []*Credential
	places map[string][]place // "host:port" -> the bindings there
	detect patterns           // every placeholder's forms
	report func(CredentialFinding)
}

// place is one binding of one credential.
type place struct {
	cred int
	b    *Binding
	tmpl [2]string // Template's text before and after "{}"
}

// compileCredentials checks cfg's credentials against p's rules: each
// binding's host and port must be admitted by an inspected allow rule
// (and no deny rule), placeholders must be distinct and none inside
// another, and each credential must have a value.
func compileCredentials(p *Proxy, creds []*Credential, report func(CredentialFinding)) (*credSet, error) {
	if len(creds) == 0 {
		return nil, nil
	}
	if report == nil {
		report = func(CredentialFinding) {}
	}
	cs := &credSet{creds: creds, places: map[string][]place{}, report: report}
	for i, c := range creds {
		if len(c.Placeholder) < 16 {
			return nil, fmt.Errorf("credential %s: placeholder shorter than 16 characters", c.Name)
		}
		for _, o := range creds[:i] {
			if strings.Contains(o.Placeholder, c.Placeholder) || strings.Contains(c.Placeholder, o.Placeholder) {
				return nil, fmt.Errorf("credentials %s and %s: one placeholder contains the other", o.Name, c.Name)
			}
		}
		if st := c.current(); st == nil || len(st.value) == 0 && !st.revoked {
			return nil, fmt.Errorf("credential %s has no value", c.Name)
		}
		for _, f := range placeholderForms(c.Placeholder) {
			f.cred = i
			cs.detect.add(f)
		}
		for j := range c.Bindings {
			b := &c.Bindings[j]
			ports := b.Ports
			if len(ports) == 0 {
				ports = []int{443}
			}
			pl := place{cred: i, b: b}
			if b.Header != "" {
				before, after, ok := strings.Cut(b.Template, "{}")
				if !ok {
					return nil, fmt.Errorf("credential %s: header template %q has no {}", c.Name, b.Template)
				}
				pl.tmpl = [2]string{before, after}
			}
			for _, port := range ports {
				h, _, err := ParseAuthority(hostPort(b.Host, port), port)
				if err != nil {
					return nil, fmt.Errorf("credential %s: endpoint %s: %v", c.Name, b.Host, err)
				}
				t := newTarget(h, port)
				var d Decision
				if rules := p.checkPolicy(t, &d); !rules.inspected() {
					why := d.Reason
					if rules != nil {
						why = "its allow rule is not inspected (tls: inspect)"
					}
					return nil, fmt.Errorf("credential %s: endpoint %s: %s, so the proxy could never substitute the value there", c.Name, hostPort(h, port), why)
				}
				key := hostPort(h, port)
				cs.places[key] = append(cs.places[key], pl)
			}
		}
	}
	return cs, nil
}

// hide is s with the placeholders in it masked, without case (a header
// name comes canonicalised): a finding never carries one.
func (cs *credSet) hide(s string) string {
	b, lower := []byte(s), []byte(strings.ToLower(s))
	for i := range cs.detect.forms {
		f := cs.detect.lower[i]
		for off := 0; ; {
			j := bytes.Index(lower[off:], f)
			if j < 0 {
				break
			}
			j += off
			for k := j; k < j+len(f); k++ {
				b[k] = '*'
			}
			off = j + len(f)
		}
	}
	return string(b)
}

// pathOK reports whether canonical path cpath is under the binding's
// prefix.
func (b *Binding) pathOK(cpath string) bool {
	switch {
	case b.Path == "" || b.Path == "/":
		return true
	case strings.HasSuffix(b.Path, "/"):
		return strings.HasPrefix(cpath, b.Path) || cpath+"/" == b.Path
	}
	return cpath == b.Path || strings.HasPrefix(cpath, b.Path+"/")
}

// credRequest is what credentials did to one inspected request.
type credRequest struct {
	cs     *credSet
	key    string // host:port
	deny   *CredentialFinding
	status int   // the status of a denial (403, 413, 415)
	scan   []int // credentials whose values responses are masked for
	used   []string
	base   CredentialFinding // the request's destination, for findings
	// sent are the states of scan's credentials when the request was
	// decided: a value rotated or revoked before the response comes is
	// still the one that went up, and the one masked.
	sent []*secretState
}

func (q *credRequest) find(cred int, kind FindingKind, where, action string) {
	f := q.base
	f.Time, f.Kind, f.Credential, f.Where, f.Action = time.Now(), kind, q.cs.creds[cred].Name, where, action
	if action == "denied" && q.deny == nil {
		q.deny, q.status = &f, http.StatusForbidden
	}
	q.cs.report(f)
}

// mismatch records a placeholder found where it is not substituted:
// denied for a revoked credential or one with Deny, outside bodies.
func (q *credRequest) mismatch(cred int, where string, data bool) {
	c := q.cs.creds[cred]
	if why := c.current().unusable(time.Now()); why != "" {
		q.find(cred, FindingRevoked, where, map[bool]string{true: "forwarded", false: "denied"}[data])
		return
	}
	action := "forwarded"
	if c.Deny && !data {
		action = "denied"
	}
	q.find(cred, FindingMismatch, where, action)
}

// request substitutes the values of r's credentials where their bindings
// at t (host, port, canonical path cpath) name, and finds their
// placeholders everywhere else. r is changed only when nothing denies
// it (q.deny nil); the body is read (a substituting endpoint's) or
// wrapped (scanned on its way up).
func (cs *credSet) request(r *http.Request, t target, cpath string) *credRequest {
	key := hostPort(t.host, t.port)
	q := &credRequest{cs: cs, key: key, base: CredentialFinding{Host: t.host, Port: t.port, Method: r.Method, Path: cs.hide(r.URL.EscapedPath())}}
	var here []place
	for _, pl := range cs.places[key] {
		if !slices.Contains(q.scan, pl.cred) {
			q.scan = append(q.scan, pl.cred)
			q.sent = append(q.sent, cs.creds[pl.cred].current())
		}
		if pl.b.pathOK(cpath) {
			here = append(here, pl)
		}
	}
	if len(r.Trailer) > 0 {
		// They come after the body, when the request is already
		// upstream: too late to find a placeholder in them and refuse.
		f := q.base
		f.Where = "request trailers are not relayed while the sandbox holds credentials: they come after the body, too late to check them for placeholders"
		q.deny, q.status = &f, http.StatusBadRequest
		return q
	}
	now := time.Now()
	usable := func(cred int) *secretState {
		st := cs.creds[cred].current()
		if st.unusable(now) != "" {
			return nil
		}
		return st
	}
	type change struct {
		name string
		i    int
		v    string
	}
	var changes []change
	for name, vals := range r.Header {
		for _, h := range cs.findName(name) {
			q.mismatch(h.cred, "header name"+h.how, false)
		}
		for i, v := range vals {
			nv := v
			for _, pl := range here {
				if st := usable(pl.cred); st != nil {
					if s, ok := pl.substituteHeader(name, nv, cs.creds[pl.cred].Placeholder, string(st.value)); ok {
						nv = s
						q.use(pl.cred)
					}
				}
			}
			for _, h := range cs.findIn(nv, name == "Authorization" || name == "Proxy-Authorization") {
				q.mismatch(h.cred, "header "+cs.hide(name)+h.how, false)
			}
			if nv != v {
				changes = append(changes, change{name, i, nv})
			}
		}
	}
	newQuery := r.URL.RawQuery
	if newQuery != "" {
		newQuery = q.substituteQuery(newQuery, here, usable)
		for _, h := range cs.findIn(newQuery, false) {
			q.mismatch(h.cred, "query"+h.how, false)
		}
	}
	for _, h := range cs.findIn(r.URL.EscapedPath(), false) {
		q.mismatch(h.cred, "path"+h.how, false)
	}
	if q.deny != nil {
		return q
	}
	for _, ch := range changes {
		r.Header[ch.name][ch.i] = ch.v
	}
	r.URL.RawQuery = newQuery
	if r.Body == nil || r.Body == http.NoBody {
		return q
	}
	var bodies []place
	for _, pl := range here {
		if pl.b.BodyMax > 0 && usable(pl.cred) != nil {
			bodies = append(bodies, pl)
		}
	}
	if len(bodies) > 0 {
		q.substituteBody(r, bodies, usable)
		return q
	}
	r.Body = newScanReader(r.Body, &cs.detect, false, func(f *form) { q.mismatch(f.cred, "body"+how(f.how), true) })
	return q
}

func how(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

func (q *credRequest) use(cred int) {
	if n := q.cs.creds[cred].Name; !slices.Contains(q.used, n) {
		q.used = append(q.used, n)
	}
}

// substituteHeader is header name's value v with the placeholder ph
// replaced by value, when pl names that header in that form.
func (pl *place) substituteHeader(name, v, ph, value string) (string, bool) {
	b := pl.b
	if b.Header != "" && strings.EqualFold(name, b.Header) {
		before, after := pl.tmpl[0], pl.tmpl[1]
		if len(v) == len(before)+len(ph)+len(after) && strings.EqualFold(v[:len(before)], before) &&
			v[len(before):len(before)+len(ph)] == ph && strings.EqualFold(v[len(before)+len(ph):], after) {
			return v[:len(before)] + value + v[len(before)+len(ph):], true
		}
	}
	if b.Basic != "" && name == "Authorization" {
		user, pass, ok := basicAuth(v)
		switch {
		case !ok:
		case b.Basic == "password" && pass == ph:
			return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+value)), true
		case b.Basic == "user" && user == ph && !strings.Contains(value, ":"):
			return "Basic " + base64.StdEncoding.EncodeToString([]byte(value+":"+pass)), true
		}
	}
	return v, false
}

// basicAuth decodes an Authorization: Basic value (RFC 7617; the scheme
// without case).
func basicAuth(v string) (user, pass string, ok bool) {
	scheme, enc, found := strings.Cut(strings.TrimSpace(v), " ")
	if !found || !strings.EqualFold(scheme, "Basic") {
		return "", "", false
	}
	dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return "", "", false
	}
	return strings.Cut(string(dec), ":")
}

// substituteQuery replaces, in raw query rq, the value of each bound
// parameter that is exactly a placeholder (its order and the other
// pairs' bytes are kept).
func (q *credRequest) substituteQuery(rq string, here []place, usable func(int) *secretState) string {
	pairs := strings.Split(rq, "&")
	changed := false
	for i, pair := range pairs {
		k, v, _ := strings.Cut(pair, "=")
		key, err1 := url.QueryUnescape(k)
		val, err2 := url.QueryUnescape(v)
		if err1 != nil || err2 != nil {
			continue
		}
		for _, pl := range here {
			if pl.b.Query == "" || pl.b.Query != key || val != q.cs.creds[pl.cred].Placeholder {
				continue
			}
			if st := usable(pl.cred); st != nil {
				pairs[i] = k + "=" + url.QueryEscape(string(st.value))
				changed = true
				q.use(pl.cred)
			}
		}
	}
	if !changed {
		return rq
	}
	return strings.Join(pairs, "&")
}

// substituteBody reads r's body (at most the smallest BodyMax of the
// places, else a 413 denial) and replaces every occurrence of each
// place's placeholder by its value; what placeholders are left in it are
// data (forwarded, recorded).
func (q *credRequest) substituteBody(r *http.Request, places []place, usable func(int) *secretState) {
	limit := places[0].b.BodyMax
	for _, pl := range places {
		limit = min(limit, pl.b.BodyMax)
	}
	deny := func(status int, where string) {
		f := q.base
		f.Time, f.Kind, f.Credential, f.Where, f.Action = time.Now(), FindingMismatch, q.cs.creds[places[0].cred].Name, where, "denied"
		q.deny, q.status = &f, status
		q.cs.report(f)
	}
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		deny(http.StatusUnsupportedMediaType, "body (Content-Encoding "+clip(ce)+", which the proxy does not decode)")
		return
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	switch {
	case err != nil:
		deny(http.StatusBadRequest, "body ("+err.Error()+")")
		return
	case int64(len(b)) > limit:
		deny(http.StatusRequestEntityTooLarge, "body larger than "+strconv.FormatInt(limit, 10)+" bytes")
		return
	}
	for _, pl := range places {
		// (usable again: the credential may have been revoked while the
		// body was read; its placeholder is then left, a finding)
		if ph, st := []byte(q.cs.creds[pl.cred].Placeholder), usable(pl.cred); st != nil && bytes.Contains(b, ph) {
			b = bytes.ReplaceAll(b, ph, st.value)
			q.use(pl.cred)
		}
	}
	for i := range q.cs.detect.forms {
		if f := &q.cs.detect.forms[i]; bytes.Contains(b, f.b) {
			q.mismatch(f.cred, "body"+how(f.how), true)
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.ContentLength = int64(len(b))
	r.TransferEncoding = nil
	r.Header.Del("Content-Length")
}

// hit is one placeholder found in a text.
type hit struct {
	cred int
	how  string // " (base64)", " (percent-encoded)", ...
}

// findIn finds the placeholders in s, as written and as its decoded
// views (percent-decoded, JSON-unescaped, and for an Authorization value
// its Basic credentials); one hit per credential.
func (cs *credSet) findIn(s string, auth bool) []hit {
	var out []hit
	seen := map[int]bool{}
	look := func(view, how string) {
		for i := range cs.detect.forms {
			f := &cs.detect.forms[i]
			if !seen[f.cred] && strings.Contains(view, string(f.b)) {
				seen[f.cred] = true
				h := how
				if f.how != "" {
					h = " (" + f.how + ")"
				}
				out = append(out, hit{f.cred, h})
			}
		}
	}
	look(s, "")
	if strings.Contains(s, "%") {
		if u, err := url.PathUnescape(s); err == nil {
			look(u, " (percent-encoded)")
		} else if u, err := url.QueryUnescape(s); err == nil {
			look(u, " (percent-encoded)")
		}
	}
	if strings.Contains(s, `\`) {
		look(jsonUnescape(s), " (json-escaped)")
	}
	if auth {
		if user, pass, ok := basicAuth(s); ok {
			look(user+":"+pass, " (basic)")
		}
	}
	return out
}

// findName finds the placeholders in a header name, without case (names
// are canonicalised on the way).
func (cs *credSet) findName(name string) []hit {
	var out []hit
	if len(name) < cs.detect.minLen() {
		return nil
	}
	lname := []byte(strings.ToLower(name))
	for i := range cs.detect.forms {
		f := &cs.detect.forms[i]
		if bytes.Contains(lname, cs.detect.lower[i]) && !slices.ContainsFunc(out, func(h hit) bool { return h.cred == f.cred }) {
			out = append(out, hit{f.cred, how(f.how)})
		}
	}
	return out
}

// reflectPatterns are the forms of the values of q's bound credentials:
// those sent and those in force now.
func (q *credRequest) reflectPatterns() *patterns {
	if len(q.scan) == 1 && q.sent[0] == q.cs.creds[q.scan[0]].current() && q.sent[0] != nil {
		return q.sent[0].patterns(q.scan[0]) // the common case: one credential, not rotated since
	}
	ps := &patterns{}
	for k, i := range q.scan {
		for _, st := range []*secretState{q.sent[k], q.cs.creds[i].current()} {
			if st != nil {
				for _, b := range st.reflects {
					ps.add(form{b: b, cred: i, how: reflectHow(st, b)})
				}
			}
		}
	}
	return ps
}

// maskHeader masks q's values in h ("where" names it in findings).
// Names too, without case (HTTP/1.1 writes them canonicalised, so a
// name that is the value comes back in another case): such a name is
// masked ('*' is a token character, RFC 9110 5.6.2).
func (q *credRequest) maskHeader(ps *patterns, h http.Header, where string) {
	short := ps.minLen()
	for name, vals := range h {
		lname := []byte(strings.ToLower(name))
		var inName []int // forms found in the name
		for i := range ps.forms {
			if len(name) < short {
				break
			}
			f := ps.lower[i]
			for off := 0; ; {
				j := bytes.Index(lname[off:], f)
				if j < 0 {
					break
				}
				j += off
				copy(lname[j:j+len(f)], bytes.Repeat([]byte{'*'}, len(f)))
				off = j + len(f)
				inName = append(inName, i)
			}
		}
		shown := name // in findings: masked, since the audit log's redaction matches the value's case only
		if len(inName) > 0 {
			shown = string(lname)
			delete(h, name)
			h[shown] = vals
		}
		found := func(i int) {
			f := &ps.forms[i]
			q.find(f.cred, FindingReflection, where+" "+shown+how(f.how), "masked")
		}
		for _, i := range inName {
			found(i)
		}
		for i, v := range vals {
			if len(v) < short {
				continue
			}
			b := []byte(v)
			ps.mask(b, found)
			vals[i] = string(b)
		}
	}
}

// scrub is s with q's values masked (an upstream error quoting the
// request line, for the sandbox and the record).
func (q *credRequest) scrub(s string) string {
	b := []byte(s)
	q.reflectPatterns().mask(b, nil)
	return string(b)
}

func reflectHow(st *secretState, b []byte) string {
	switch {
	case slices.Contains(st.values, string(b)):
		return ""
	case bytes.IndexByte(b, '%') >= 0:
		return "percent-encoded"
	case bytes.IndexByte(b, '\\') >= 0:
		return "json-escaped"
	}
	return "base64"
}

// plainRequest finds placeholders in a plain-HTTP request's head (never
// substituted: a value goes only over inspected TLS) and reports whether
// it may go on; on a denial d says why. Its body is not scanned.
func (cs *credSet) plainRequest(r *request, t target, path string, d *Decision) bool {
	q := &credRequest{cs: cs, base: CredentialFinding{Host: t.host, Port: t.port, Method: r.method, Path: cs.hide(stripQuery(path))}}
	for _, h := range r.headers {
		name := http.CanonicalHeaderKey(h.name)
		for _, x := range cs.findName(name) {
			q.mismatch(x.cred, "header name"+x.how, false)
		}
		for _, x := range cs.findIn(h.value, name == "Authorization" || name == "Proxy-Authorization") {
			q.mismatch(x.cred, "header "+cs.hide(name)+x.how, false)
		}
	}
	for _, x := range cs.findIn(path, false) {
		q.mismatch(x.cred, "URL"+x.how, false)
	}
	if q.deny == nil {
		return true
	}
	d.Reason, d.Hint = q.deny.reason(), cs.hint(q.deny.Credential)
	return false
}

// reason is a denial's text for the sandbox and the record (never the
// value or the placeholder).
func (f *CredentialFinding) reason() string {
	switch {
	case f.Credential == "": // a refusal of no credential's
		return f.Where
	case f.Kind == FindingRevoked:
		return "the placeholder of credential " + f.Credential + " is in " + f.Where + ", and the credential is revoked or expired"
	}
	if strings.HasPrefix(f.Where, "body") {
		return "credential " + f.Credential + ": request " + f.Where + " cannot be substituted"
	}
	return "the placeholder of credential " + f.Credential + " is in " + f.Where + " of a request to " + hostPort(f.Host, f.Port) + ", where it is not bound (credential mismatch)"
}

// hint names where credential name is bound.
func (cs *credSet) hint(name string) string {
	for _, c := range cs.creds {
		if c.Name != name {
			continue
		}
		var eps []string
		for _, b := range c.Bindings {
			where := b.Header
			switch {
			case b.Basic != "":
				where = "Basic " + b.Basic
			case b.Query != "":
				where = "query " + b.Query
			case b.Header == "" && b.BodyMax > 0:
				where = "body"
			}
			eps = append(eps, b.Host+b.Path+" ("+where+")")
		}
		return "credential " + name + " is substituted only at " + strings.Join(eps, ", ") + ": send it there, or add an endpoint to credentials"
	}
	return ""
}

// guardRequest prepares a request to a bound host for the reflection
// guard: content codings are narrowed to the ones it can read (gzip,
// deflate), and ranges are dropped, since a value echoed across two
// partial responses would be in neither whole.
func (q *credRequest) guardRequest(out *http.Request) {
	out.Header.Del("Range")
	out.Header.Del("If-Range")
	out.Header.Del("Sec-WebSocket-Extensions") // permessage-deflate: frames the guard could not read
	if ae := out.Header.Values("Accept-Encoding"); len(ae) > 0 {
		var keep []string
		for _, v := range ae {
			for _, tok := range strings.Split(v, ",") {
				name, _, _ := strings.Cut(strings.TrimSpace(tok), ";")
				switch strings.ToLower(strings.TrimSpace(name)) {
				case "gzip", "x-gzip", "deflate", "identity":
					keep = append(keep, strings.TrimSpace(tok))
				}
			}
		}
		// None left: identity, since no Accept-Encoding at all would
		// mean any coding (RFC 9110 12.5.3).
		out.Header.Set("Accept-Encoding", cmp.Or(strings.Join(keep, ", "), "identity"))
	}
}

// guardResponse masks the values of the credentials bound to the
// response's host in its header, body and trailers (decoding a gzip or
// deflate body to do it, and passing it on decoded); a body in another
// coding is refused (the error becomes a 502). The bytes after a 101
// (a WebSocket's frames) are not read.
func (q *credRequest) guardResponse(res *http.Response) error {
	ps := q.reflectPatterns()
	if len(ps.forms) == 0 {
		return nil
	}
	q.maskHeader(ps, res.Header, "response header")
	// The trailers' names as announced: ReverseProxy writes them in a
	// Trailer header before the body (their values are masked at EOF).
	q.maskHeader(ps, res.Trailer, "response trailer")
	if res.StatusCode == http.StatusSwitchingProtocols {
		// A WebSocket's frames from the server, scanned as a body
		// (their framing kept: masks are the same length).
		if rwc, ok := res.Body.(io.ReadWriteCloser); ok {
			sr := newScanReader(rwc, ps, true, func(f *form) { q.find(f.cred, FindingReflection, "websocket"+how(f.how), "masked") })
			res.Body = struct {
				io.Reader
				io.Writer
				io.Closer
			}{sr, rwc, rwc}
		}
		return nil
	}
	if res.Body == nil || res.Body == http.NoBody {
		return nil
	}
	body := res.Body
	var codings []string // the codings the response names, identity aside
	for _, v := range res.Header.Values("Content-Encoding") {
		for _, c := range strings.Split(v, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "" && c != "identity" {
				codings = append(codings, c)
			}
		}
	}
	ce := strings.Join(codings, ", ")
	switch ce {
	case "", "identity":
	case "gzip", "x-gzip", "deflate":
		dec, err := decoder(ce, body)
		if err != nil {
			return fmt.Errorf("the %s response body from %s, bound to a credential, cannot be decoded for the reflection guard: %v", ce, q.key, err)
		}
		body = dec
		res.Header.Del("Content-Encoding")
		res.Header.Del("Content-Length")
		res.ContentLength, res.Uncompressed = -1, true
	default:
		body.Close()
		return fmt.Errorf("the response from %s, bound to a credential, is in content coding %q, which the reflection guard cannot read", q.key, clip(ce))
	}
	sr := newScanReader(body, ps, true, func(f *form) { q.find(f.cred, FindingReflection, "response body"+how(f.how), "masked") })
	sr.onEOF = func() { q.maskHeader(ps, res.Trailer, "response trailer") }
	res.Body = sr
	return nil
}

// decoder reads a gzip or deflate (zlib, RFC 9110 8.4.1.2) body; closing
// it closes body.
func decoder(ce string, body io.ReadCloser) (io.ReadCloser, error) {
	var r io.Reader
	var err error
	if ce == "deflate" {
		r, err = zlib.NewReader(body)
	} else {
		r, err = gzip.NewReader(body)
	}
	if err != nil {
		body.Close()
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{r, body}, nil
}

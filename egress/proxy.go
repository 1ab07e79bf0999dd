// Package egress is Corral's governed-egress proxy: the only route out of a
// sandbox. It serves CONNECT tunnels and absolute-form HTTP/1.1 requests,
// decides every request against a Policy, resolves names itself (only after
// they are allowed), refuses loopback/private/metadata and other blocked
// addresses unless the policy allows them explicitly, dials the checked
// address, checks the TLS SNI of CONNECT tunnels against the CONNECT host and
// explains every denial.
//
// Decision order: parse (ParseAuthority) -> the consent API (LocalName,
// Config.LocalAddr: served by Config.Local, never egress; local.go) ->
// deny rules -> allow rules -> resolve (Policy.Hosts, then the resolver)
// -> per address: deny CIDRs, Classify, AllowPrivate -> dial the first
// acceptable address.
//
// New rules are a new Proxy; one that only adds to the old one's (Adds)
// takes over from it without closing what it carries (Retire; live.go).
//
// CONNECT: after the policy allows the target and an acceptable address is
// found, the proxy answers 200 and reads the client's first bytes (at most
// 16 KiB, within HeaderTimeout). A TLS ClientHello must carry an SNI equal to
// the CONNECT host; a missing SNI is accepted only when the target is an IP
// literal. Non-TLS first bytes are accepted only for ports other than 443.
// Only then is the upstream dialed, so a refused client never causes an
// upstream connection. Protocols where the server speaks first (SMTP, FTP,
// MySQL) therefore cannot be tunnelled.
//
// Inspection (inspect.go): an allow rule with L7 rules or Inspect does not
// carry opaque tunnels. A CONNECT to it must start TLS (on any port),
// which the proxy terminates with the sandbox's CA (ca.go) and serves
// as HTTP/1.1 or HTTP/2, deciding each request by the rules (egress/l7)
// before forwarding it upstream; to offer h2 it learns, during the
// client's handshake, whether the upstream speaks it (a TLS dial of its
// own). Plain-HTTP requests to such a rule are decided by the same
// rules.
package egress

import (
	"bufio"
	"context"
	"crypto/subtle"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Decision is one egress decision, passed to Config.Log.
type Decision struct {
	Time    time.Time
	Allowed bool
	Method  string         // CONNECT, GET, ...
	Host    string         // canonical host asked for (lowercase name, or canonical IP)
	Port    int            //
	Addr    netip.AddrPort // the address dialed (zero when denied before resolving)
	Rule    string         // "allow[0] api.example.com:443", "deny[1] ...", or ""
	Reason  string         // why denied (or why an allowed request failed)
	Hint    string         // the policy line that would allow it
	URL     string         // request URL without query string and userinfo ("" for CONNECT)
	Status  int            // HTTP status returned to the client (a tunnel closed after its 200: 200)
	// Inspected: a request read inside a terminated TLS connection, or
	// the CONNECT that was terminated.
	Inspected bool
	Proto     string // HTTP/1.1, HTTP/2.0; for a terminated CONNECT the ALPN protocol
	BytesOut  int64  // request body bytes sent upstream (inspected requests)
	BytesIn   int64  // response body bytes returned to the client (inspected requests)
	// Credentials names, comma-separated, the credentials whose values
	// the request carried upstream (substituted for their placeholders).
	Credentials string
	// Local: a request to the consent API (the reserved name
	// LocalName, or Config.LocalAddr), answered by Config.Local
	// (Allowed, Reason "local consent API") or refused (CONNECT,
	// LocalName at a port other than 80, no Local). Nothing was
	// resolved or dialed: it is not egress.
	Local bool
}

// Config configures a Proxy.
type Config struct {
	Policy Policy
	// Resolve resolves allowed names; nil: net.DefaultResolver.LookupNetIP(ctx, "ip", host).
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// Credential, when non-empty, must be presented by every request as
	// Proxy-Authorization: Basic base64("corral:"+Credential); else 407.
	Credential string
	// Log is called once per decision; it must be safe for concurrent use.
	Log            func(Decision)
	DialTimeout    time.Duration // default 10s (resolution and dial)
	HeaderTimeout  time.Duration // default 10s: reading a request head, and a CONNECT client's first bytes
	IdleTimeout    time.Duration // default 2m: idle keep-alive connection, idle tunnel, slow body
	MaxHeaderBytes int           // default 32 KiB
	// MaxConns bounds concurrent client connections; accepting pauses at
	// the limit. Default 4096.
	MaxConns int
	// CA terminates the TLS of inspected allow rules; New refuses a
	// policy with inspected rules without one, or whose inspected hosts
	// lie outside its name constraints (CA.Covers).
	CA *CA
	// UpstreamRoots verify inspected upstreams' certificates; nil: the
	// host's roots (x509.SystemCertPool).
	UpstreamRoots *x509.CertPool
	// Credentials are substituted in inspected requests to their
	// bindings (credential.go); New refuses a binding whose host and
	// port no inspected allow rule admits. Each must have a value
	// (SetValue) before the proxy serves.
	Credentials []*Credential
	// Finding is called once per CredentialFinding; it must be safe for
	// concurrent use. Nil drops them.
	Finding func(CredentialFinding)
	// ConsentHint is asked, for a target that no allow rule matches
	// and no deny rule refuses (the one denial an added allow entry,
	// a host grant, can lift), how the workload may ask for it; a
	// non-empty answer is the 403 body's "consent" field
	// (HostRequestHint makes the usual text). Nil or "": no field. It
	// gets the canonical host (ParseAuthority) and port, runs on the
	// denial's path and must be safe for concurrent use.
	ConsentHint func(host string, port int) string
	// Local serves the plain-HTTP (absolute-form) requests to the
	// reserved name LocalName on port 80: the sandbox's consent API
	// through the proxy (local.go). Nil: requests to LocalName are
	// refused. Either way LocalName is never resolved or dialed.
	Local http.Handler
	// LocalAddr, when valid and Local is set, is where the same API
	// listens inside the sandbox (127.0.0.1:3129): a plain-HTTP request
	// for it that comes through the proxy (curl, Python and others
	// send even loopback URLs to HTTP_PROXY unless NO_PROXY exempts
	// them) is served by Local too, as the address means inside the
	// sandbox; for a loopback address "localhost" at its port as well.
	// It is never dialed (the proxy's own loopback is another one).
	LocalAddr netip.AddrPort
}

// Proxy is one sandbox's egress proxy.
type Proxy struct {
	cfg      Config
	pol      *compiledPolicy
	authWant string // expected base64 credential ("" when not required)

	ctx    context.Context
	cancel context.CancelFunc
	sem    chan struct{}

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	wg        sync.WaitGroup
	// Retirement (live.go): retired proxies take no connections and
	// hand the ones they carry to next at a request boundary; clients
	// counts the client connections served, idle those waiting for a
	// request head.
	retired bool
	next    func(net.Conn) bool
	clients int
	idle    map[*session]struct{}

	insp  *inspector // nil when nothing is inspected
	creds *credSet   // nil without credentials
}

// New validates cfg.Policy and returns a Proxy.
func New(cfg Config) (*Proxy, error) {
	pol, err := compilePolicy(cfg.Policy)
	if err != nil {
		return nil, fmt.Errorf("egress policy: %w", err)
	}
	if pol.inspects() {
		// The CA the sandbox trusts was minted at its start, for the
		// hosts inspected then.
		hosts := strings.Join(InspectedHosts(cfg.Policy), ", ")
		if cfg.CA == nil {
			return nil, fmt.Errorf("egress policy: the rules inspect %s, but the sandbox was started without inspection, so it trusts no CA of corral's: recreate the sandbox with these rules", hosts)
		}
		if !cfg.CA.covers(pol) {
			return nil, fmt.Errorf("egress policy: the rules inspect %s, not all within the hosts the sandbox's CA was minted for (%s): recreate the sandbox with these rules", hosts, strings.Join(cfg.CA.hosts, ", "))
		}
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = 10 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 2 * time.Minute
	}
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = 32 << 10
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 4096
	}
	if cfg.Resolve == nil {
		cfg.Resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	p := &Proxy{
		cfg:       cfg,
		pol:       pol,
		sem:       make(chan struct{}, cfg.MaxConns),
		listeners: map[net.Listener]struct{}{},
		conns:     map[net.Conn]struct{}{},
		idle:      map[*session]struct{}{},
	}
	if cfg.Credential != "" {
		p.authWant = base64.StdEncoding.EncodeToString([]byte("corral:" + cfg.Credential))
	}
	creds, err := compileCredentials(p, cfg.Credentials, cfg.Finding)
	if err != nil {
		return nil, fmt.Errorf("egress credentials: %w", err)
	}
	p.creds = creds
	p.ctx, p.cancel = context.WithCancel(context.Background())
	if cfg.CA != nil && pol.inspects() {
		p.insp = newInspector(p)
	}
	return p, nil
}

// Serve accepts connections on l until Close; it returns nil after Close
// and the accept error otherwise. Serve may be called for several listeners.
func (p *Proxy) Serve(l net.Listener) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.Close()
		return nil
	}
	p.listeners[l] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.listeners, l)
		p.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		select {
		case p.sem <- struct{}{}:
		case <-p.ctx.Done():
			return nil
		}
		c, err := l.Accept()
		if err != nil {
			<-p.sem
			if p.stopped() {
				return nil
			}
			if te, ok := err.(interface{ Temporary() bool }); ok && te.Temporary() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(backoff):
				case <-p.ctx.Done():
					return nil
				}
				continue
			}
			return err
		}
		backoff = 0
		if !p.track(c) {
			// Closed since: a retired proxy's successor takes what
			// it accepted last.
			<-p.sem
			if !p.handOn(c) {
				c.Close()
			}
			return nil
		}
		go func() {
			defer p.wg.Done()
			defer func() { <-p.sem }()
			defer p.clientDone(c)
			setNoDelay(c)
			s := &session{p: p, raw: c}
			if !s.serve() {
				c.Close()
			}
		}()
	}
}

// stopped reports whether the proxy takes no more connections (closed
// or retired).
func (p *Proxy) stopped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed || p.retired
}

// track registers client connection c (and one goroutine in wg) unless
// the proxy is closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	p.clients++
	p.wg.Add(1)
	return true
}

// trackUp registers an upstream connection (no goroutine).
func (p *Proxy) trackUp(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// Close closes every listener and connection and waits for all goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return nil
	}
	p.closed = true
	p.cancel()
	for l := range p.listeners {
		l.Close()
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	if p.insp != nil {
		p.insp.close()
	}
	p.wg.Wait()
	return nil
}

func setNoDelay(c net.Conn) {
	if tc, ok := c.(interface{ SetNoDelay(bool) error }); ok {
		tc.SetNoDelay(true)
	}
}

func (p *Proxy) log(d *Decision) {
	if p.cfg.Log != nil {
		e := *d
		// Reasons and URLs may quote what the client sent: bounded, so
		// a workload cannot grow the log or its consumers at will.
		e.Reason, e.URL, e.Host, e.Method, e.Hint = clip(e.Reason), clip(e.URL), clip(e.Host), clip(e.Method), clip(e.Hint)
		p.cfg.Log(e)
	}
}

// clip bounds a logged string to 256 bytes.
func clip(s string) string {
	const max = 256
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}

// checkAuth verifies Proxy-Authorization in constant time.
func (p *Proxy) checkAuth(r *request) bool {
	if p.authWant == "" {
		return true
	}
	scheme, tok, ok := strings.Cut(r.proxyAuth, " ")
	if !ok || !strings.EqualFold(scheme, "basic") {
		return false
	}
	tok = strings.TrimLeft(tok, " ")
	return subtle.ConstantTimeCompare([]byte(tok), []byte(p.authWant)) == 1
}

// target is a parsed, policy-checked destination.
type target struct {
	host string
	port int
	ip   netip.Addr // valid when host is an IP literal
}

func newTarget(host string, port int) target {
	t := target{host: host, port: port}
	if a, err := netip.ParseAddr(host); err == nil {
		t.ip = a
	}
	return t
}

// checkPolicy applies deny and allow rules to the target. It fills d and
// returns the allow rules that match (nil when the target is denied), the
// inspected ones first: when several match, the request must satisfy the
// L7 rules of every inspected one (an entry without rules, such as a
// wildcard written before it, never widens one with rules).
func (p *Proxy) checkPolicy(t target, d *Decision) admitted {
	for i := range p.pol.deny {
		r := &p.pol.deny[i]
		if r.portOK(t.port, true) && r.matchTarget(t.host, t.ip) {
			d.Rule = r.describe("deny", i, t.port)
			d.Reason = "denied by deny[" + strconv.Itoa(i) + "]"
			d.Hint = "remove deny[" + strconv.Itoa(i) + "] (" + r.text + ") from network.deny"
			return nil
		}
	}
	var inspected, plain admitted
	for i := range p.pol.allow {
		r := &p.pol.allow[i]
		if r.portOK(t.port, false) && r.matchTarget(t.host, t.ip) {
			if r.inspect {
				inspected = append(inspected, r)
			} else {
				plain = append(plain, r)
			}
		}
	}
	if m := append(inspected, plain...); len(m) > 0 {
		d.Rule = m[0].describe("allow", m[0].index, t.port)
		return m
	}
	d.Reason = "no allow rule matches"
	d.Hint = allowHint(t.host, t.port)
	// Name both rules when the address is known and internal, so one
	// denial says all a loopback or private target needs.
	a, known := t.ip, t.ip.IsValid()
	if !known {
		a, known = p.pol.hosts[t.host]
	}
	if known {
		if _, hint := p.addrRefused(a, t.port); hint != "" {
			d.Hint += " and " + hint
		}
	}
	return nil
}

// resolve returns the acceptable addresses of an allowed target, or fills
// d.Reason/d.Hint and returns the HTTP status of the failure.
func (p *Proxy) resolve(t target, d *Decision) ([]netip.Addr, int) {
	var addrs []netip.Addr
	if t.ip.IsValid() {
		addrs = []netip.Addr{t.ip}
	} else if a, ok := p.pol.hosts[t.host]; ok {
		addrs = []netip.Addr{a}
	} else {
		ctx, cancel := context.WithTimeout(p.ctx, p.cfg.DialTimeout)
		var err error
		addrs, err = p.cfg.Resolve(ctx, t.host)
		cancel()
		if err != nil || len(addrs) == 0 {
			if err == nil {
				err = errors.New("no addresses")
			}
			d.Reason = "cannot resolve " + t.host + ": " + err.Error()
			return nil, 502
		}
	}
	ok := addrs[:0:0]
	for _, a := range addrs {
		a = a.WithZone("")
		if reason, hint := p.addrRefused(a, t.port); reason != "" {
			if d.Reason == "" {
				d.Reason, d.Hint = reason, hint
			}
			continue
		}
		ok = append(ok, a)
	}
	if len(ok) == 0 {
		return nil, 403
	}
	d.Reason, d.Hint = "", ""
	return ok, 0
}

// addrRefused checks one resolved (or literal) address.
func (p *Proxy) addrRefused(a netip.Addr, port int) (reason, hint string) {
	for i := range p.pol.deny {
		r := &p.pol.deny[i]
		if r.portOK(port, true) && r.matchAddr(a) {
			return "resolved address " + a.String() + " denied by deny[" + strconv.Itoa(i) + "]", ""
		}
	}
	blocked, class := Classify(a)
	if !blocked {
		return "", ""
	}
	for i := range p.pol.private {
		r := &p.pol.private[i]
		if r.portOK(port, true) && r.matchAddr(a) {
			return "", ""
		}
	}
	return "resolved to a blocked address " + a.String() + " (" + class + ")", privateHint(a, port)
}

// dial connects to the first reachable acceptable address.
func (p *Proxy) dial(addrs []netip.Addr, port int) (net.Conn, netip.AddrPort, error) {
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.DialTimeout)
	defer cancel()
	var d net.Dialer
	var firstErr error
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a, uint16(port))
		c, err := d.DialContext(ctx, "tcp", ap.String())
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			if ctx.Err() != nil {
				break
			}
			continue
		}
		if !p.trackUp(c) {
			c.Close()
			return nil, ap, errors.New("proxy closed")
		}
		setNoDelay(c)
		return c, ap, nil
	}
	return nil, netip.AddrPort{}, firstErr
}

type denialBody struct {
	Error  string `json:"error"`
	Reason string `json:"reason"`
	Host   string `json:"host"`
	Port   int    `json:"port"`
	Rule   string `json:"rule"`
	Hint   string `json:"hint"`
	// Consent is how to ask a person for the target (Config.ConsentHint);
	// absent when asking could not help.
	Consent string `json:"consent,omitempty"`
}

var statusText = map[int]string{
	400: "Bad Request",
	403: "Forbidden",
	407: "Proxy Authentication Required",
	417: "Expectation Failed",
	431: "Request Header Fields Too Large",
	500: "Internal Server Error",
	501: "Not Implemented",
	502: "Bad Gateway",
	505: "HTTP Version Not Supported",
}

var errorText = map[int]string{
	400: "bad request",
	403: "egress denied",
	407: "proxy authentication required",
	417: "expectation failed",
	431: "request header too large",
	500: "internal error",
	501: "not implemented",
	502: "upstream unreachable",
	505: "HTTP version not supported",
}

// denialResponse renders a JSON error response that closes the
// connection; consent, when set, is its "consent" field.
func denialResponse(d *Decision, consent string) []byte {
	body, _ := json.Marshal(denialBody{
		Error: errorText[d.Status], Reason: d.Reason, Host: d.Host, Port: d.Port, Rule: d.Rule, Hint: d.Hint, Consent: consent,
	})
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", d.Status, statusText[d.Status])
	b.WriteString("Content-Type: application/json\r\n")
	if d.Status == 407 {
		b.WriteString("Proxy-Authenticate: Basic realm=\"corral\"\r\n")
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\nConnection: close\r\n\r\n", len(body)+1)
	b.Write(body)
	b.WriteByte('\n')
	return []byte(b.String())
}

// session is one client connection.
type session struct {
	p   *Proxy
	raw net.Conn
	cc  *deadlineConn
	br  *bufio.Reader
	up  *upstream
}

var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}
var writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4096) }}

// serve serves the connection until it ends, or until a retired proxy
// hands it on at a request boundary (true: the connection is no longer
// the caller's).
func (s *session) serve() (handedOn bool) {
	p := s.p
	s.cc = &deadlineConn{Conn: s.raw}
	s.br = readerPool.Get().(*bufio.Reader)
	s.br.Reset(s.cc)
	defer func() {
		if s.br != nil {
			s.br.Reset(nil)
			readerPool.Put(s.br)
		}
		s.closeUp()
	}()
	for {
		s.cc.refresh = 0
		idleUntil := time.Now().Add(p.cfg.IdleTimeout)
		s.raw.SetReadDeadline(idleUntil)
		if !p.idleEnter(s) {
			return s.handOn()
		}
		_, err := s.br.Peek(1)
		if p.idleLeave(s) && (err == nil || isTimeout(err) && time.Now().Before(idleUntil)) {
			// Retired while waiting (Retire cut the wait short), or a
			// request began after: the successor decides it.
			return s.handOn()
		}
		if err != nil {
			return
		}
		s.raw.SetReadDeadline(time.Now().Add(p.cfg.HeaderTimeout))
		req, err := readRequest(s.br, p.cfg.MaxHeaderBytes)
		if err != nil {
			var he *httpError
			if errors.As(err, &he) {
				s.deny(&Decision{Time: time.Now(), Reason: he.reason}, he.status)
			}
			return
		}
		s.cc.refresh = p.cfg.IdleTimeout
		s.raw.SetReadDeadline(time.Time{})
		if !s.handle(req) {
			return
		}
	}
}

// deny writes a denial and logs the decision.
func (s *session) deny(d *Decision, status int) { s.denyWith(d, status, "") }

// denyWith is deny whose body carries consent, how to ask for the
// target ("": no such field).
func (s *session) denyWith(d *Decision, status int, consent string) {
	if status != 502 {
		d.Allowed = false
	}
	d.Status = status
	s.raw.SetWriteDeadline(time.Now().Add(s.p.cfg.HeaderTimeout))
	s.raw.Write(denialResponse(d, consent))
	s.p.log(d)
}

// handle serves one request; it reports whether to read another.
func (s *session) handle(r *request) bool {
	d := &Decision{Time: time.Now(), Method: r.method}
	var authority string
	var path string
	var perr error
	defPort := 80
	if r.method == "CONNECT" {
		authority, defPort = r.target, 0
	} else {
		authority, path, perr = parseTarget(r.target)
	}
	var t target
	if perr == nil {
		h, port, err := ParseAuthority(authority, defPort)
		if err != nil {
			perr = badRequest(err.Error())
		} else {
			t = newTarget(h, port)
			d.Host, d.Port = t.host, t.port
			d.Local = s.p.isLocal(t)
			if r.method != "CONNECT" {
				d.URL = "http://" + hostHeader(t.host, t.port, 80) + stripQuery(path)
			}
		}
	}
	if !s.p.checkAuth(r) {
		d.Reason = "missing or wrong proxy credential"
		s.deny(d, 407)
		return false
	}
	if perr != nil {
		var he *httpError
		if !errors.As(perr, &he) {
			he = &httpError{400, perr.Error()}
		}
		d.Reason = he.reason
		s.deny(d, he.status)
		return false
	}
	if r.hasHost {
		hh, hp, err := ParseAuthority(r.host, defPortFor(r.method, t.port))
		if err != nil || hh != t.host || hp != t.port {
			d.Reason = "Host header does not match the request target"
			s.deny(d, 400)
			return false
		}
	}
	if r.expect != "" && r.expect != "100-continue" {
		d.Reason = "unsupported Expect"
		s.deny(d, 417)
		return false
	}
	if d.Local {
		return s.local(r, t, path, d)
	}
	rules := s.p.checkPolicy(t, d)
	if rules == nil {
		consent := ""
		if d.Rule == "" && s.p.cfg.ConsentHint != nil {
			consent = s.p.cfg.ConsentHint(t.host, t.port) // no deny rule refused it
		}
		s.denyWith(d, 403, consent)
		return false
	}
	if r.method == "CONNECT" {
		s.connect(r, t, rules, d)
		return false
	}
	if rules.inspected() {
		// Plain HTTP to a host with L7 rules: decided like an
		// inspected request, on the path the upstream will read.
		escaped, rawQuery, _ := strings.Cut(path, "?")
		dec, hint, status := rules.check(r.method, escaped, rawQuery, r.values)
		if dec.Rule != "" {
			d.Rule += "; " + dec.Rule
		}
		if status != 0 {
			d.Reason, d.Hint = dec.Reason, hint
			s.deny(d, status)
			return false
		}
	}
	if s.p.creds != nil && !s.p.creds.plainRequest(r, t, path, d) {
		s.deny(d, 403)
		return false
	}
	return s.forward(r, t, path, d)
}

// defPortFor is the port a Host header without port means: the target's
// port for CONNECT (clients send "Host: h:443" or just "h"), else 80.
func defPortFor(method string, port int) int {
	if method == "CONNECT" {
		return port
	}
	return 80
}

func stripQuery(path string) string {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		return path[:i]
	}
	return path
}

// connect serves an allowed CONNECT request.
func (s *session) connect(r *request, t target, rules admitted, d *Decision) {
	p := s.p
	addrs, status := p.resolve(t, d)
	if status != 0 {
		d.Allowed = status == 502
		s.deny(d, status)
		return
	}
	d.Allowed = true
	s.raw.SetWriteDeadline(time.Now().Add(p.cfg.HeaderTimeout))
	if _, err := io.WriteString(s.raw, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// Read the client's first bytes before dialing anything.
	s.cc.refresh = 0
	s.raw.SetReadDeadline(time.Now().Add(p.cfg.HeaderTimeout))
	res, err := sniff(s.br)
	closeTunnel := func(reason, hint string) {
		d.Allowed, d.Status, d.Reason, d.Hint = false, 200, reason, hint
		p.log(d)
	}
	if err != nil {
		if res.isTLS {
			closeTunnel("no valid TLS ClientHello: "+err.Error(), "")
		} else {
			closeTunnel("client sent nothing: "+err.Error(), "")
		}
		return
	}
	switch {
	case res.isTLS && res.hasSNI:
		sni, serr := canonicalName(strings.TrimSuffix(res.sni, "."))
		if serr != nil || sni != t.host {
			shown := sni
			hint := allowHint(sni, t.port)
			if serr != nil {
				shown, hint = strconv.Quote(res.sni), ""
			}
			closeTunnel("SNI "+shown+" does not match CONNECT host "+t.host, hint)
			return
		}
	case res.isTLS:
		if !t.ip.IsValid() {
			closeTunnel("TLS ClientHello without SNI for CONNECT host "+t.host, "")
			return
		}
	default:
		if t.port == 443 {
			closeTunnel("non-TLS traffic to port 443", "")
			return
		}
		if rules.inspected() {
			closeTunnel("non-TLS traffic in a tunnel to an inspected host: its requests could not be decided by its L7 rules", "send plain HTTP to the proxy as absolute-form requests (http_proxy), or use TLS")
			return
		}
	}
	// What the client sent so far goes on first; the reader is done.
	pending := res.data
	if n := s.br.Buffered(); n > 0 {
		b, _ := s.br.Peek(n)
		pending = append(pending, b...)
	}
	s.br.Reset(nil)
	readerPool.Put(s.br)
	s.br = nil
	s.raw.SetReadDeadline(time.Time{})
	if rules.inspected() {
		s.intercept(t, rules, d, pending)
		return
	}

	up, ap, err := p.dial(addrs, t.port)
	if err != nil {
		d.Status, d.Reason = 200, "dial failed after 200: "+err.Error()
		p.log(d)
		return
	}
	defer func() { up.Close(); p.untrack(up) }()
	d.Addr, d.Status = ap, 200
	p.log(d)
	p.splice(s.raw, pending, up, nil)
}

// deadlineConn pushes the deadline forward on every Read/Write when refresh
// is set (slow bodies are fine, stalled ones are not).
type deadlineConn struct {
	net.Conn
	refresh time.Duration
}

func (c *deadlineConn) Read(b []byte) (int, error) {
	if c.refresh > 0 {
		c.Conn.SetReadDeadline(time.Now().Add(c.refresh))
	}
	return c.Conn.Read(b)
}

func (c *deadlineConn) Write(b []byte) (int, error) {
	if c.refresh > 0 {
		c.Conn.SetWriteDeadline(time.Now().Add(c.refresh))
	}
	return c.Conn.Write(b)
}

package egress

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corral-sandbox/corral/egress/l7"
)

// Interception. A CONNECT to an inspected allow rule, once its
// ClientHello passed the SNI check, is not spliced: the proxy completes
// the client's handshake itself with a leaf from Config.CA, serves the
// connection with one net/http server per proxy (HTTP/1.1 and HTTP/2,
// offering h2 only when the upstream negotiates it too, so gRPC reaches
// an h2 upstream and nothing is translated to a protocol the upstream
// lacks), and decides every request (each HTTP/2 stream) on its own:
// Host or :authority must name the CONNECT host and port (else 421), the
// path must be canonical (l7.CanonicalPath, else 400), and the rule's L7
// set must allow it (else 403 with the JSON denial). Allowed requests go
// through httputil.ReverseProxy over one http.Transport per proxy: the
// upstream connections of a sandbox are reused per host, dialled through
// the same resolve, classify and dial as tunnels, verified against the
// host's roots (plus Config.UpstreamRoots); bodies stream both ways,
// text/event-stream and responses of unknown length are flushed as they
// come, trailers pass (gRPC), WebSocket upgrades are relayed once the
// rules allowed the GET, and nothing is decompressed.

// inspector is a proxy's interception half.
type inspector struct {
	p     *Proxy
	srv   *http.Server
	ln    *Handoff
	tr    *http.Transport
	rp    *httputil.ReverseProxy
	roots *x509.CertPool

	conns sync.Map // *tls.Conn -> *intercepted
	// upSem bounds the upstream connections of all hosts together
	// (Config.MaxConns): each client connection may carry many HTTP/2
	// streams, and a wildcard rule many hosts.
	upSem chan struct{}
	// ticketKey encrypts the session tickets clients resume with
	// (in memory only, like the CA's key): every connection's config is
	// its own, so without a shared key none could be resumed.
	ticketKey [32]byte

	mu   sync.Mutex
	alpn map[string]probed // host:port -> what the upstream negotiated
}

// intercepted is one terminated CONNECT tunnel.
type intercepted struct {
	t     target
	rules admitted
	rtext string // the allow rule, as Decision.Rule names it
}

type ctxKey struct{}

// maxALPNCache bounds the upstream protocols remembered.
const maxALPNCache = 1024

// newInspector makes the interception half of a proxy whose policy
// inspects a host (New, before the proxy serves anything).
func newInspector(p *Proxy) *inspector {
	in := &inspector{p: p, alpn: map[string]probed{}, roots: p.cfg.UpstreamRoots, upSem: make(chan struct{}, p.cfg.MaxConns)}
	rand.Read(in.ticketKey[:])
	if in.roots == nil {
		in.roots, _ = x509.SystemCertPool()
	}
	in.tr = &http.Transport{
		DialContext:        in.dialUpstream,
		TLSClientConfig:    &tls.Config{RootCAs: in.roots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:  true,
		DisableCompression: true,
		MaxIdleConns:       256,
		// An h2 upstream's stream limit is honoured (requests wait),
		// not worked around with more connections (upSem bounds those).
		HTTP2:               &http.HTTP2Config{StrictMaxConcurrentRequests: true},
		MaxIdleConnsPerHost: 64,
		// Response heads are bounded like the plain path's (headLimit).
		MaxResponseHeaderBytes: int64(p.cfg.MaxHeaderBytes),
		IdleConnTimeout:        p.cfg.IdleTimeout,
		TLSHandshakeTimeout:    p.cfg.DialTimeout,
		ExpectContinueTimeout:  time.Second,
		ResponseHeaderTimeout:  0, // long polls and slow model calls are fine; the client's side bounds them
	}
	in.rp = &httputil.ReverseProxy{
		Rewrite:        in.rewrite,
		Transport:      in.tr,
		ErrorHandler:   in.upstreamError,
		BufferPool:     copyBuffers{},
		ErrorLog:       log.New(io.Discard, "", 0),
		ModifyResponse: in.modifyResponse,
	}
	in.ln = NewHandoff(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	protos := new(http.Protocols)
	protos.SetHTTP1(true)
	protos.SetHTTP2(true)
	in.srv = &http.Server{
		Handler:           in,
		Protocols:         protos,
		ReadHeaderTimeout: p.cfg.HeaderTimeout,
		IdleTimeout:       p.cfg.IdleTimeout,
		MaxHeaderBytes:    p.cfg.MaxHeaderBytes,
		ErrorLog:          log.New(io.Discard, "", 0),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if ic, ok := in.conns.Load(c); ok {
				return context.WithValue(ctx, ctxKey{}, ic)
			}
			return ctx
		},
	}
	go in.srv.Serve(in.ln)
	return in
}

// close stops the server and the upstream connections.
func (in *inspector) close() {
	in.ln.Close()
	in.srv.Close()
	in.tr.CloseIdleConnections()
}

// intercept terminates an allowed, SNI-checked CONNECT tunnel to an
// inspected rule and serves its requests until the connection ends.
// pending is what the client sent after the CONNECT (its ClientHello).
func (s *session) intercept(t target, rules admitted, d *Decision, pending []byte) {
	p := s.p
	in := p.insp
	pc := &prefixConn{Conn: s.raw, pending: pending, done: make(chan struct{})}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			leaf, err := p.cfg.CA.leaf(t.host)
			if err != nil {
				return nil, err
			}
			protos := []string{"http/1.1"}
			if slices.Contains(hello.SupportedProtos, "h2") && in.upstreamProto(t) == "h2" {
				protos = []string{"h2", "http/1.1"}
			}
			c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*leaf}, NextProtos: protos}
			c.SetSessionTicketKeys([][32]byte{in.ticketKey})
			return c, nil
		},
	}
	tc := tls.Server(pc, cfg)
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.HeaderTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		// A client that does not trust the sandbox's CA ends here
		// ("remote error: tls: unknown certificate authority").
		d.Allowed, d.Status, d.Reason = false, 0, "TLS handshake with the client failed: "+err.Error()
		p.log(d)
		return
	}
	d.Status, d.Inspected, d.Proto = 200, true, tc.ConnectionState().NegotiatedProtocol
	p.log(d)
	ic := &intercepted{t: t, rules: rules, rtext: d.Rule}
	in.conns.Store(tc, ic)
	defer in.conns.Delete(tc)
	if !in.ln.Give(tc) {
		return
	}
	select {
	case <-pc.done:
	case <-p.ctx.Done():
	}
}

// ServeHTTP decides and forwards one request of an intercepted
// connection.
func (in *inspector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := in.p
	ic, _ := r.Context().Value(ctxKey{}).(*intercepted)
	if ic == nil || !p.enter() {
		http.Error(w, "proxy closing", http.StatusServiceUnavailable)
		return
	}
	defer p.wg.Done()
	t := ic.t
	d := &Decision{Time: time.Now(), Method: r.Method, Host: t.host, Port: t.port, Rule: ic.rtext, Inspected: true, Proto: r.Proto,
		URL: "https://" + hostHeader(t.host, t.port, 443) + r.URL.EscapedPath()}
	deny := func(status int, reason, rule, hint string) {
		d.Allowed, d.Status, d.Reason, d.Hint = false, status, reason, hint
		if rule != "" {
			d.Rule += "; " + rule
		}
		drainBody(w, r)
		writeDenial(w, d)
		p.log(d)
	}
	if h, port, err := ParseAuthority(r.Host, 443); err != nil || h != t.host || port != t.port {
		deny(http.StatusMisdirectedRequest, "Host or :authority "+strconv.Quote(clip(r.Host))+" does not name the CONNECT host "+hostPort(t.host, t.port), "", "")
		return
	}
	if r.Method == http.MethodConnect {
		deny(http.StatusMethodNotAllowed, "CONNECT inside an inspected connection is not relayed", "", "")
		return
	}
	dec, hint, status := ic.rules.check(r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Values)
	if status != 0 {
		deny(status, dec.Reason, dec.Rule, hint)
		return
	}
	d.Rule += "; " + dec.Rule
	var body *countReader
	if r.Body != nil && r.Body != http.NoBody {
		body = &countReader{ReadCloser: r.Body, rc: http.NewResponseController(w), idle: p.cfg.IdleTimeout}
		r.Body = body
	}
	var cq *credRequest
	if p.creds != nil {
		// (a substituting endpoint's body is read here, under the
		// countReader's idle timeout)
		cpath, _ := l7.CanonicalPath(r.URL.EscapedPath()) // check refused the others
		if cq = p.creds.request(r, t, cpath); cq.deny != nil {
			deny(cq.status, cq.deny.reason(), "", p.creds.hint(cq.deny.Credential))
			return
		}
		d.Credentials = strings.Join(cq.used, ",")
	}
	d.Allowed = true
	cw := &countWriter{ResponseWriter: w}
	ctx := context.WithValue(r.Context(), decisionKey{}, d)
	if cq != nil && len(cq.scan) > 0 {
		ctx = context.WithValue(ctx, credKey{}, cq)
		// ReverseProxy relays 1xx heads (103 Early Hints) straight to
		// the client, before ModifyResponse: they are masked here.
		cw.informational = func(h http.Header) { cq.maskHeader(cq.reflectPatterns(), h, "response header (1xx)") }
	}
	// The address this request went to, on the handler's goroutine
	// (a reused upstream connection is dialled by no one).
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(gi httptrace.GotConnInfo) {
		if a, err := netip.ParseAddrPort(gi.Conn.RemoteAddr().String()); err == nil {
			d.Addr = a
		}
	}})
	in.rp.ServeHTTP(cw, r.WithContext(ctx))
	if cw.status == http.StatusSwitchingProtocols {
		return // recorded when the upgrade was relayed (modifyResponse)
	}
	if d.Status == 0 {
		d.Status = cw.status
	}
	d.BytesIn = cw.n
	if body != nil {
		d.BytesOut = body.n.Load()
	}
	p.log(d)
}

type decisionKey struct{}

// credKey carries a request's *credRequest when its host is bound to a
// credential (its response is guarded).
type credKey struct{}

func (in *inspector) rewrite(pr *httputil.ProxyRequest) {
	ic := pr.In.Context().Value(ctxKey{}).(*intercepted)
	pr.Out.URL.Scheme = "https"
	pr.Out.URL.Host = hostPort(ic.t.host, ic.t.port)
	pr.Out.Host = pr.In.Host
	if cq, ok := pr.In.Context().Value(credKey{}).(*credRequest); ok {
		cq.guardRequest(pr.Out)
	}
}

// modifyResponse records an allowed upgrade (a WebSocket) when its 101 is
// relayed: the connection may stay open for the session's life, and the
// record must not wait for its end.
// A response from a host a credential is bound to goes through the
// reflection guard first (guardResponse).
func (in *inspector) modifyResponse(res *http.Response) error {
	if cq, ok := res.Request.Context().Value(credKey{}).(*credRequest); ok {
		if err := cq.guardResponse(res); err != nil {
			return err
		}
	}
	if d, ok := res.Request.Context().Value(decisionKey{}).(*Decision); ok && res.StatusCode == http.StatusSwitchingProtocols {
		d.Status = http.StatusSwitchingProtocols
		in.p.log(d)
	}
	return nil
}

// upstreamError answers 502 with the reason (an invalid upstream
// certificate among them: never a downgrade to anything unverified).
func (in *inspector) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	d, _ := r.Context().Value(decisionKey{}).(*Decision)
	if d == nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		d.Reason, d.Status = "client broke off the request", 499
		return
	}
	d.Reason, d.Status = "upstream: "+err.Error(), http.StatusBadGateway
	if cq, ok := r.Context().Value(credKey{}).(*credRequest); ok {
		d.Reason = cq.scrub(d.Reason) // the error may quote a request line with a substituted query
	}
	writeDenial(w, d)
}

// drainBody reads (and drops) up to 64 KiB of a refused request's body,
// for at most a second, before the denial is written: a response that
// comes before the body makes Go's HTTP/2 server reset the stream, which
// curl 7.88 reports as a framing error instead of showing the denial. A
// request waiting for 100-continue has sent nothing and is not read.
func drainBody(w http.ResponseWriter, r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody || r.Header.Get("Expect") != "" {
		return
	}
	http.NewResponseController(w).SetReadDeadline(time.Now().Add(time.Second))
	io.CopyN(io.Discard, r.Body, 64<<10)
}

// writeDenial writes the JSON body of a refused or failed inspected
// request (the same shape as the proxy's own denials).
func writeDenial(w http.ResponseWriter, d *Decision) {
	body, _ := json.Marshal(denialBody{Error: errorTextFor(d.Status), Reason: d.Reason, Host: d.Host, Port: d.Port, Rule: d.Rule, Hint: d.Hint})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(d.Status)
	w.Write(append(body, '\n'))
}

func errorTextFor(status int) string {
	switch status {
	case http.StatusMisdirectedRequest:
		return "misdirected request"
	case http.StatusMethodNotAllowed:
		return "method not allowed"
	}
	if t, ok := errorText[status]; ok {
		return t
	}
	return http.StatusText(status)
}

// dialUpstream dials an inspected host (addr is host:port from rewrite)
// through the policy's resolution and address checks, again for every
// new upstream connection.
func (in *inspector) dialUpstream(ctx context.Context, network, addr string) (net.Conn, error) {
	h, port, err := ParseAuthority(addr, 443)
	if err != nil {
		return nil, err
	}
	t := newTarget(h, port)
	var d Decision
	addrs, status := in.p.resolve(t, &d)
	if status != 0 {
		return nil, errors.New(d.Reason)
	}
	select {
	case in.upSem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	c, _, err := in.p.dial(addrs, port)
	if err != nil {
		<-in.upSem
		return nil, err
	}
	return &upConn{Conn: c, p: in.p, sem: in.upSem}, nil
}

// upstreamProto is the protocol the upstream of t negotiates when offered
// h2 and http/1.1, learned once per host:port (a TLS handshake through
// dialUpstream, which also verifies its certificate); "" when that
// failed (the client is then offered http/1.1 only and its requests get
// the upstream's error as a 502). It runs inside the client's handshake,
// so it has half the handshake's time, and a failure is remembered for
// probeRetry (a dead upstream does not make every handshake wait).
func (in *inspector) upstreamProto(t target) string {
	key := hostPort(t.host, t.port)
	in.mu.Lock()
	known, ok := in.alpn[key]
	in.mu.Unlock()
	if ok && (known.proto != "" || time.Since(known.at) < probeRetry) {
		return known.proto
	}
	ctx, cancel := context.WithTimeout(in.p.ctx, min(in.p.cfg.DialTimeout, in.p.cfg.HeaderTimeout/2))
	defer cancel()
	proto := ""
	if c, err := in.dialUpstream(ctx, "tcp", key); err == nil {
		tc := tls.Client(c, &tls.Config{RootCAs: in.roots, ServerName: t.host, NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12})
		if tc.HandshakeContext(ctx) == nil {
			proto = cmp.Or(tc.ConnectionState().NegotiatedProtocol, "http/1.1") // no ALPN: HTTP/1.1
		}
		c.Close()
	}
	in.mu.Lock()
	if len(in.alpn) >= maxALPNCache { // a wildcard rule lets the workload name many hosts
		clear(in.alpn)
	}
	in.alpn[key] = probed{proto, time.Now()}
	in.mu.Unlock()
	return proto
}

// probed is what upstreamProto learned of an upstream, and when.
type probed struct {
	proto string // "" when the probe failed
	at    time.Time
}

// probeRetry is how long a failed probe is remembered.
const probeRetry = 5 * time.Second

// admitted are the allow rules matching a target, inspected ones first
// (checkPolicy).
type admitted []*compiledRule

// inspected reports whether the target's TLS is terminated.
func (a admitted) inspected() bool { return len(a) > 0 && a[0].inspect }

// check decides one request to a host with L7 rules, inspected or plain
// HTTP alike, from its method, escaped path, raw query and header values
// (by name). It refuses, with the status to answer (0: allowed):
//   - an Upgrade other than websocket (403): after the 101 the bytes are
//     opaque, and h2c would carry requests no rule ever sees;
//   - X-Original-URL or X-Rewrite-URL (403): servers that honour them
//     (IIS's URL rewrite, Laminas) serve that path instead of the one
//     decided;
//   - a path that is not canonical, a query not validly encoded or with
//     two parameter names that differ only in case (400);
//   - a method the rules refuse (403), and so for every method that
//     X-HTTP-Method-Override, X-HTTP-Method or X-Method-Override names
//     (Google APIs, Express, Symfony and ASP.NET turn a POST into it).
func (a admitted) check(method, escapedPath, rawQuery string, header func(string) []string) (l7.Decision, string, int) {
	for _, up := range header("Upgrade") {
		if !strings.EqualFold(strings.TrimSpace(up), "websocket") {
			return l7.Decision{Reason: "Upgrade " + strconv.Quote(clip(up)) + " is not relayed to a host with L7 rules (only websocket is)"}, "", http.StatusForbidden
		}
	}
	for _, h := range []string{"X-Original-URL", "X-Rewrite-URL"} {
		if len(header(h)) > 0 {
			return l7.Decision{Reason: h + " would make a server serve another path than the one decided"}, "", http.StatusForbidden
		}
	}
	cpath, err := l7.CanonicalPath(escapedPath)
	if err != nil {
		return l7.Decision{Reason: err.Error()}, "", http.StatusBadRequest
	}
	query, err := url.ParseQuery(rawQuery)
	if err != nil {
		return l7.Decision{Reason: "query is not validly encoded: " + err.Error()}, "", http.StatusBadRequest
	}
	names := map[string]string{}
	for k := range query {
		if other, dup := names[strings.ToLower(k)]; dup {
			// ASP.NET and others read them as one parameter, the
			// rules as two.
			return l7.Decision{Reason: "query parameters " + strconv.Quote(clip(other)) + " and " + strconv.Quote(clip(k)) + " differ only in case"}, "", http.StatusBadRequest
		}
		names[strings.ToLower(k)] = k
	}
	dec, hint := a.decide(method, cpath, query)
	for _, h := range []string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"} {
		for _, m := range header(h) {
			if dec.Allowed {
				dec, hint = a.decide(strings.ToUpper(strings.TrimSpace(m)), cpath, query)
			}
		}
	}
	if !dec.Allowed {
		return dec, hint, http.StatusForbidden
	}
	return dec, "", 0
}

// decide applies the L7 rules of every inspected rule in a: the first
// refusal wins; hint is the policy change that would allow the request.
func (a admitted) decide(method, path string, query url.Values) (dec l7.Decision, hint string) {
	var allowed []string
	for _, r := range a {
		if !r.inspect {
			break
		}
		dec = r.l7.Decide(method, path, query)
		if !dec.Allowed {
			return dec, "network.allow[" + strconv.Itoa(r.index) + "]: " + dec.Hint
		}
		allowed = append(allowed, dec.Rule)
	}
	dec.Rule = strings.Join(allowed, ", ")
	return dec, ""
}

// enter registers a request handler in wg unless the proxy is closed.
func (p *Proxy) enter() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.wg.Add(1)
	return true
}

// upConn untracks an upstream connection when it is closed.
type upConn struct {
	net.Conn
	p    *Proxy
	sem  chan struct{} // released on Close
	once sync.Once
}

func (c *upConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.p.untrack(c.Conn)
		<-c.sem
	})
	return err
}

// prefixConn replays the bytes sniffed from a client before reading on,
// and says when it was closed.
type prefixConn struct {
	net.Conn
	pending []byte
	done    chan struct{}
	once    sync.Once
}

func (c *prefixConn) Read(b []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(b, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

func (c *prefixConn) Close() error {
	c.once.Do(func() { close(c.done) })
	return c.Conn.Close()
}

// countWriter counts a response's bytes and keeps its status; Unwrap
// lets http.ResponseController (ReverseProxy's flushes and upgrades)
// reach the server's writer.
type countWriter struct {
	http.ResponseWriter
	status        int
	n             int64
	informational func(http.Header) // masks a 1xx head before it goes
}

func (w *countWriter) WriteHeader(code int) {
	if code < 200 && w.informational != nil {
		w.informational(w.Header())
	}
	if w.status == 0 || w.status < 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *countWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.n += int64(n)
	return n, err
}

func (w *countWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// countReader counts a request body's bytes and gives each read the
// proxy's idle timeout (a stalled body would hold its connection
// forever), lifted again at the end so that a long response after the
// body (a streamed model answer) is not cut.
type countReader struct {
	io.ReadCloser
	n    atomic.Int64
	rc   *http.ResponseController
	idle time.Duration
}

func (r *countReader) Read(b []byte) (int, error) {
	r.rc.SetReadDeadline(time.Now().Add(r.idle))
	n, err := r.ReadCloser.Read(b)
	r.n.Add(int64(n))
	if err == io.EOF {
		r.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// copyBuffers lends ReverseProxy the tunnels' 32 KiB buffers.
type copyBuffers struct{}

func (copyBuffers) Get() []byte  { return *bufPool.Get().(*[]byte) }
func (copyBuffers) Put(b []byte) { bufPool.Put(&b) }

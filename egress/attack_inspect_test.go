package egress

// Attacks on inspected egress, from the workload's side: every test is a
// client in the sandbox's position (it reaches only the proxy) trying to
// get a request past the L7 decision, to make the proxy mint or serve a
// leaf it should not, to exhaust it, or to put into the audit record what
// must not be there. Real sockets, real TLS (the sandbox's CA), real
// origins; the requests that reached an origin are its own log.
//
// A test with a "Was a hole" comment reproduces a hole the attack review
// found, describing the code as it was; each fails without its fix
// (887b518 and the commits after). The others are attacks that were
// already defeated. All are regression tests now.

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/corral-sandbox/corral/egress/l7"
)

// atkOrigin is a loopback HTTPS (or, with plain, HTTP) origin that logs
// every request that reaches it as "METHOD REQUEST-URI PROTO" (and, in
// hosts and headers, what Host and headers it saw).
type atkOrigin struct {
	srv     *httptest.Server
	port    int
	roots   *x509.CertPool
	accepts atomic.Int64
	open    atomic.Int64 // connections open now
	maxOpen atomic.Int64 // the most open at once
	mu      sync.Mutex
	reqs    []string
	hosts   []string
	headers []http.Header
}

type atkOriginOpts struct {
	plain      bool // HTTP, not HTTPS
	h2         bool // offer h2 (HTTPS only)
	maxStreams int  // the origin's SETTINGS_MAX_CONCURRENT_STREAMS (h2)
}

func startAtkOrigin(t testing.TB, name string, o atkOriginOpts, h http.HandlerFunc) *atkOrigin {
	t.Helper()
	a := &atkOrigin{}
	if h == nil {
		h = func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "origin-ok %s %s", r.Method, r.URL.Path)
		}
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.reqs = append(a.reqs, r.Method+" "+r.URL.RequestURI()+" "+r.Proto)
		a.hosts = append(a.hosts, r.Host)
		a.headers = append(a.headers, r.Header.Clone())
		a.mu.Unlock()
		h(w, r)
	}))
	srv.Listener = countingListener{srv.Listener, &a.accepts}
	srv.Config.ConnState = func(c net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			n := a.open.Add(1)
			for m := a.maxOpen.Load(); n > m && !a.maxOpen.CompareAndSwap(m, n); m = a.maxOpen.Load() {
			}
		case http.StateClosed, http.StateHijacked:
			a.open.Add(-1)
		}
	}
	if o.maxStreams > 0 {
		srv.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: o.maxStreams}
	}
	if o.plain {
		srv.Start()
	} else {
		cert := selfSigned(t, name)
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
		srv.EnableHTTP2 = o.h2
		srv.StartTLS()
		a.roots = certPool(cert)
	}
	t.Cleanup(srv.Close)
	a.srv = srv
	a.port = srv.Listener.Addr().(*net.TCPAddr).Port
	return a
}

func (a *atkOrigin) requests() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.reqs...)
}

// sawAny reports the first request that reached a whose
// "METHOD REQUEST-URI" contains one of subs (case-insensitively).
func (a *atkOrigin) sawAny(subs ...string) string {
	for _, r := range a.requests() {
		for _, s := range subs {
			if strings.Contains(strings.ToLower(r), strings.ToLower(s)) {
				return r
			}
		}
	}
	return ""
}

// atkProxy serves pol (its CA minted for it) with roots as the upstream
// roots; cfg's other fields are taken as given.
func atkProxy(t testing.TB, pol Policy, roots *x509.CertPool, cfg Config) (*testProxy, *x509.CertPool) {
	t.Helper()
	ca, err := NewCA(pol)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Policy, cfg.CA, cfg.UpstreamRoots = pol, ca, roots
	tp := startProxy(t, cfg)
	sandboxRoots := x509.NewCertPool()
	sandboxRoots.AddCert(ca.Certificate())
	return tp, sandboxRoots
}

// onePolicy allows and inspects one entry r for the origin's port,
// mapping its host to 127.0.0.1.
func onePolicy(r Rule, port int) Policy {
	r.Ports = []int{port}
	return Policy{Allow: []Rule{r}, AllowPrivate: []Rule{{Host: "127.0.0.1/32"}}, Hosts: map[string]string{r.Host: "127.0.0.1"}}
}

// tlsThroughALPN is tlsThrough offering protos; it returns the
// connection and the protocol negotiated.
func tlsThroughALPN(t testing.TB, proxyAddr, host string, port int, roots *x509.CertPool, protos ...string) (*tls.Conn, string) {
	t.Helper()
	c := dialProxy(t, proxyAddr)
	hp := host + ":" + itoa(port)
	resp, _ := c.roundTrip(t, "CONNECT "+hp+" HTTP/1.1\r\nHost: "+hp+"\r\n\r\n", "CONNECT")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %d", hp, resp.StatusCode)
	}
	tc := tls.Client(c.Conn, &tls.Config{ServerName: host, RootCAs: roots, NextProtos: protos})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS through the proxy to %s: %v", hp, err)
	}
	return tc, tc.ConnectionState().NegotiatedProtocol
}

// rawH1 writes raw on a fresh intercepted HTTP/1.1 connection and returns
// the status codes of the responses read until the proxy closes it or
// goes quiet (a second of silence).
func rawH1(t testing.TB, tp *testProxy, roots *x509.CertPool, host string, port int, raw string) []int {
	t.Helper()
	return rawH1N(t, tp, roots, host, port, raw, 0)
}

// rawH1N is rawH1 that returns once it has n responses (n > 0).
func rawH1N(t testing.TB, tp *testProxy, roots *x509.CertPool, host string, port int, raw string, n int) []int {
	t.Helper()
	tc, _ := tlsThroughALPN(t, tp.addr, host, port, roots, "http/1.1")
	defer tc.Close()
	if _, err := io.WriteString(tc, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(tc)
	var codes []int
	for {
		tc.SetReadDeadline(time.Now().Add(time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return codes
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		if len(codes) == n {
			return codes
		}
	}
}

// h2Raw speaks HTTP/2 frame by frame, so that a test can send what no
// well-behaved client would: pseudo-headers out of order or twice,
// connection-specific fields, CONNECT, any :path or :authority.
type h2Raw struct {
	fr   *http2.Framer
	hb   bytes.Buffer
	enc  *hpack.Encoder
	next uint32
}

// newH2Raw sends the client preface and SETTINGS on w; frames are read
// from r.
func newH2Raw(t testing.TB, w io.Writer, r io.Reader) *h2Raw {
	t.Helper()
	h := &h2Raw{next: 1}
	h.fr = http2.NewFramer(w, r)
	h.fr.ReadMetaHeaders = hpack.NewDecoder(65536, nil)
	h.fr.MaxHeaderListSize = 1 << 20
	h.enc = hpack.NewEncoder(&h.hb)
	if _, err := io.WriteString(w, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := h.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return h
}

// send opens the next stream with fields, in order and unvalidated
// (name, value pairs), ending it unless body is given.
func (h *h2Raw) send(t testing.TB, fields []string, body []byte) uint32 {
	t.Helper()
	id := h.next
	h.next += 2
	h.hb.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		h.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hb.Bytes(), EndStream: body == nil, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if body != nil {
		if err := h.fr.WriteData(id, true, body); err != nil {
			t.Fatal(err)
		}
	}
	return id
}

// result reads frames until stream id has a response head (its
// :status), is reset ("RST_STREAM code") or the connection ends
// ("GOAWAY code", "closed: error").
func (h *h2Raw) result(id uint32) string {
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return "closed: " + err.Error()
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				h.fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				h.fr.WritePing(true, f.Data)
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == id {
				return f.PseudoValue("status")
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return "RST_STREAM " + f.ErrCode.String()
			}
		case *http2.GoAwayFrame:
			return "GOAWAY " + f.ErrCode.String()
		}
	}
}

// h2Through opens an intercepted connection that negotiated h2.
func h2Through(t testing.TB, tp *testProxy, roots *x509.CertPool, host string, port int) (*tls.Conn, *h2Raw) {
	t.Helper()
	tc, proto := tlsThroughALPN(t, tp.addr, host, port, roots, "h2", "http/1.1")
	if proto != "h2" {
		t.Fatalf("the proxy negotiated %q with an h2 origin, want h2", proto)
	}
	tc.SetDeadline(time.Now().Add(20 * time.Second))
	return tc, newH2Raw(t, tc, tc)
}

// Was a hole: the plain-HTTP path (absolute-form requests to a host with L7
// rules, egress/proxy.go handle -> forward) relays any Upgrade once the
// first request is allowed, and after the 101 splices the connections:
// an h2c upgrade of an allowed GET then carries, as HTTP/2 streams,
// requests no rule ever sees. The inspected path refuses every upgrade
// but websocket for exactly this reason (inspect.go ServeHTTP); the plain
// path of the same host must too. The origin here accepts h2c by its
// Upgrade and HTTP2-Settings headers, which the client sends without
// naming HTTP2-Settings in Connection (the proxy drops a header named
// there and rewrites Connection to "Upgrade": a server that insists on
// the HTTP2-Settings token refuses, which is luck, not the rule).
func TestAttackPlainHTTPUpgradeCarriesUndecidedRequests(t *testing.T) {
	h2s := &http2.Server{}
	var o *atkOrigin
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.reqs = append(o.reqs, r.Method+" "+r.URL.RequestURI()+" "+r.Proto)
		o.mu.Unlock()
		fmt.Fprintf(w, "origin-ok %s %s", r.Method, r.URL.Path)
	})
	o = startAtkOrigin(t, "", atkOriginOpts{plain: true}, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "h2c" || r.Header.Get("HTTP2-Settings") == "" {
			inner.ServeHTTP(w, r)
			return
		}
		settings, err := base64.RawURLEncoding.DecodeString(r.Header.Get("HTTP2-Settings"))
		if err != nil {
			http.Error(w, "bad settings", 400)
			return
		}
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
		rw.Flush()
		h2s.ServeConn(&readerConn{Conn: conn, r: rw.Reader}, &http2.ServeConnOpts{Handler: inner, UpgradeRequest: r, Settings: settings})
	})
	pol := onePolicy(Rule{Host: "api.allowed.test", Rules: []l7.Rule{{Method: "GET", Path: "/public"}}}, o.port)
	tp, _ := atkProxy(t, pol, nil, Config{})
	c := dialProxy(t, tp.addr)
	hp := "api.allowed.test:" + itoa(o.port)
	io.WriteString(c, "GET http://"+hp+"/public HTTP/1.1\r\nHost: "+hp+"\r\nConnection: Upgrade\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAA\r\n\r\n")
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		h := newH2Raw(t, c.Conn, c.br)
		h.next = 3 // stream 1 is the upgraded GET
		id := h.send(t, []string{":method", "DELETE", ":scheme", "http", ":authority", hp, ":path", "/private"}, nil)
		h.result(id)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols || o.sawAny("DELETE") != "" {
		t.Errorf("plain-HTTP Upgrade: h2c to a host with rules [GET /public]: %d, and the origin received %q: an upgrade other than websocket must be refused (403) on the plain path as on the inspected one", resp.StatusCode, o.requests())
	}
}

// acted returns what an origin's handler reported on ch, if anything
// (it reports before it answers, so a test that has the answer has the
// report).
func acted(ch chan string) (string, bool) {
	select {
	case s := <-ch:
		return s, true
	default:
		return "", false
	}
}

// readerConn reads through r (what a bufio.Reader already buffered).
type readerConn struct {
	net.Conn
	r io.Reader
}

func (c *readerConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// Was a hole: a deny rule's query matcher is applied like an allow rule's
// (egress/l7/l7.go compiled.match: every value of the parameter must
// match a glob), so a repeated parameter takes the request out of it:
// deny {query: {force: [true]}} does not match ?force=true&force=no, and
// the origin (Go's Query().Get, Express, Rails: the first value; PHP: the
// last) reads force=true. A deny rule must match when any value matches
// (and, like its method and path, compare the parameter's name without
// case: ASP.NET's query is case-insensitive).
func TestAttackDenyRuleQueryRepeated(t *testing.T) {
	forced := make(chan string, 16)
	o := startAtkOrigin(t, "api.allowed.test", atkOriginOpts{}, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("force") == "true" || r.URL.Query().Get("Force") == "true" {
			forced <- r.URL.RawQuery
		}
		fmt.Fprint(w, "ok")
	})
	pol := onePolicy(Rule{Host: "api.allowed.test", Access: l7.Full, DenyRules: []l7.Rule{{Method: "DELETE", Path: "/repos/**", Query: map[string][]string{"force": {"true"}}}}}, o.port)
	tp, roots := atkProxy(t, pol, o.roots, Config{})
	hp := "api.allowed.test:" + itoa(o.port)
	for _, q := range []string{"force=true", "force=true&force=no", "force=no&force=true", "Force=true"} {
		t.Run(q, func(t *testing.T) {
			codes := rawH1N(t, tp, roots, "api.allowed.test", o.port, "DELETE /repos/a?"+q+" HTTP/1.1\r\nHost: "+hp+"\r\n\r\n", 1)
			if got, ok := acted(forced); ok {
				t.Errorf("DELETE /repos/a?%s: %v, and the origin deleted with force (?%s): deny_rules[0] {DELETE /repos/**, query force: true} must refuse it", q, codes, got)
			} else if len(codes) != 1 || codes[0] != 403 {
				t.Errorf("DELETE /repos/a?%s: %v, want 403", q, codes)
			}
		})
	}
}

// Was a hole: the L7 decision is made on the request's method, but servers
// take the method from X-HTTP-Method-Override (Google APIs, Express's
// method-override, Symfony/Laravel, ASP.NET), X-HTTP-Method (OData,
// Microsoft) and X-Method-Override on a POST: with access: read-write
// (GET, HEAD, OPTIONS, POST, PUT, PATCH) a POST that says DELETE deletes
// (egress/inspect.go ServeHTTP decides r.Method alone). The proxy should
// decide such a request by every method it names (or refuse it).
func TestAttackMethodOverrideHeaders(t *testing.T) {
	deleted := make(chan string, 16)
	o := startAtkOrigin(t, "api.allowed.test", atkOriginOpts{}, func(w http.ResponseWriter, r *http.Request) {
		m := r.Method
		if m == "POST" { // as a method-override middleware does
			for _, h := range []string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"} {
				if v := r.Header.Get(h); v != "" {
					m = strings.ToUpper(v)
				}
			}
		}
		if m == "DELETE" {
			deleted <- r.URL.Path
		}
		fmt.Fprint(w, "ok")
	})
	pol := onePolicy(Rule{Host: "api.allowed.test", Access: l7.ReadWrite}, o.port)
	tp, roots := atkProxy(t, pol, o.roots, Config{})
	hp := "api.allowed.test:" + itoa(o.port)
	if codes := rawH1N(t, tp, roots, "api.allowed.test", o.port, "DELETE /repos/a HTTP/1.1\r\nHost: "+hp+"\r\n\r\n", 1); len(codes) != 1 || codes[0] != 403 {
		t.Fatalf("plain DELETE under access: read-write: %v, want 403", codes)
	}
	for _, h := range []string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"} {
		t.Run(h, func(t *testing.T) {
			codes := rawH1N(t, tp, roots, "api.allowed.test", o.port, "POST /repos/a HTTP/1.1\r\nHost: "+hp+"\r\n"+h+": DELETE\r\nContent-Length: 0\r\n\r\n", 1)
			if p, ok := acted(deleted); ok {
				t.Errorf("POST with %s: DELETE under access: read-write: %v, and the origin deleted %s", h, codes, p)
			}
		})
	}
}

// Was a hole: a policy that inspects only IP rules gets a CA whose name
// constraints permit those IP ranges and say nothing of DNS names
// (egress/ca.go NewCA: PermittedDNSDomains is empty, and an empty list
// puts no constraint on that name form, RFC 5280 §4.2.1.10), so its key
// can vouch for every DNS name: a leaf for github.com verifies under the
// root the sandbox trusts. With no name rule inspected, every DNS name
// must be excluded (as every IP is when no IP rule is).
func TestAttackCAWithOnlyIPRulesConstrainsNames(t *testing.T) {
	ca, err := NewCA(Policy{Allow: []Rule{{Host: "10.1.2.0/24", Inspect: true}, {Host: "passthrough.test"}}})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	ok, err := ca.mint("10.1.2.3", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ok.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "10.1.2.3"}); err != nil {
		t.Fatalf("a leaf for the inspected 10.1.2.3: %v, want valid", err)
	}
	for _, h := range []string{"github.com", "passthrough.test", "10.9.9.9"} {
		leaf, err := ca.mint(h, time.Now()) // as someone holding the key would
		if err != nil {
			t.Fatal(err)
		}
		if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: h}); err == nil {
			t.Errorf("a leaf for %s verified under the CA of a policy that inspects only 10.1.2.0/24: its name constraints must refuse it", h)
		}
	}
}

// atkStrings returns every string field of d with its name.
func atkStrings(d Decision) map[string]string {
	out := map[string]string{}
	v := reflect.ValueOf(d)
	for i := 0; i < v.NumField(); i++ {
		if v.Field(i).Kind() == reflect.String {
			out[v.Type().Field(i).Name] = v.Field(i).String()
		}
	}
	return out
}

// Was a hole: the proxy bounds what a logged decision quotes of the client
// (Proxy.log clips Reason, URL and Host to 256 bytes, "so a workload
// cannot grow the log"), but not Method nor Hint, and a refused
// inspected request's hint quotes its method and decoded path ("add
// {method: M, path: P} to rules", l7.Decide): one request of 30 KiB
// makes a record of twice that, and every audit reader (the OCSF file,
// corral run -v) carries it. Clip Method and Hint too.
func TestAttackAuditFieldsBounded(t *testing.T) {
	o := startAtkOrigin(t, "api.allowed.test", atkOriginOpts{}, nil)
	pol := onePolicy(Rule{Host: "api.allowed.test", Rules: []l7.Rule{{Method: "GET", Path: "/ok"}}}, o.port)
	tp, roots := atkProxy(t, pol, o.roots, Config{})
	hp := "api.allowed.test:" + itoa(o.port)
	long := strings.Repeat("a", 12<<10)
	rawH1(t, tp, roots, "api.allowed.test", o.port, "GET /"+long+" HTTP/1.1\r\nHost: "+hp+"\r\n\r\n")
	rawH1(t, tp, roots, "api.allowed.test", o.port, "M"+long+" /ok HTTP/1.1\r\nHost: "+hp+"\r\n\r\n")
	// The plain path quotes the method too.
	c := dialProxy(t, tp.addr)
	c.roundTrip(t, "M"+long+" http://"+hp+"/ok HTTP/1.1\r\nHost: "+hp+"\r\n\r\n", "GET")
	ds := tp.log.waitN(t, 5)
	for _, d := range ds {
		for name, s := range atkStrings(d) {
			if len(s) > 300 {
				t.Errorf("a logged decision's %s is %d bytes (%.40q...): every field quoting the client must be bounded", name, len(s), s)
			}
		}
	}
}

// Was a hole: the host a request was sent to (Decision.Addr) is written by
// the upstream dial through the request's context (inspect.go
// dialUpstream: dd.Addr = ap), so a request served on a reused upstream
// connection is logged with no address (and a dial that outlives its
// request, which http.Transport lets finish for the pool, writes into
// a decision already logged: a data race). Take the address from the
// connection the request got (httptrace GotConn, in the request's own
// goroutine).
func TestAttackAuditAddrOfReusedUpstream(t *testing.T) {
	o := startAtkOrigin(t, "api.allowed.test", atkOriginOpts{}, nil)
	pol := onePolicy(Rule{Host: "api.allowed.test", Access: l7.ReadOnly}, o.port)
	tp, roots := atkProxy(t, pol, o.roots, Config{})
	hp := "api.allowed.test:" + itoa(o.port)
	codes := rawH1(t, tp, roots, "api.allowed.test", o.port, "GET /one HTTP/1.1\r\nHost: "+hp+"\r\n\r\nGET /two HTTP/1.1\r\nHost: "+hp+"\r\n\r\n")
	if len(codes) != 2 || codes[0] != 200 || codes[1] != 200 {
		t.Fatalf("two GETs: %v", codes)
	}
	if n := o.accepts.Load(); n != 1 {
		t.Logf("the origin accepted %d connections (want 1: the second GET reuses the first's)", n)
	}
	want := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(o.port))
	for _, d := range tp.log.waitN(t, 3) {
		if d.Method == "GET" && d.Addr != want {
			t.Errorf("GET %s logged with address %v, want %v (the upstream it was sent to)", d.URL, d.Addr, want)
		}
	}
}

// Was a hole: one intercepted HTTP/2 connection carries up to the proxy's
// stream limit (net/http's default, 250) of concurrent requests, and the
// upstream transport opens another upstream connection whenever the
// upstream's own limit is reached (inspect.go newInspector: no
// MaxConnsPerHost, HTTP2.StrictMaxConcurrentRequests false): with
// Config.MaxConns 4, a single client connection makes the proxy hold as
// many upstream sockets as it has requests in flight (the plain path
// holds at most one per client connection). Bound the inspector's
// upstream connections (for example by MaxConns, counted in
// dialUpstream) and let requests beyond the bound wait for one.
func TestAttackUpstreamConnectionsBounded(t *testing.T) {
	release := make(chan struct{})
	var inflight atomic.Int64
	o := startAtkOrigin(t, "api.allowed.test", atkOriginOpts{h2: true, maxStreams: 1}, func(w http.ResponseWriter, r *http.Request) {
		inflight.Add(1)
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-release
	})
	defer close(release)
	const maxConns, streams = 4, 40
	pol := onePolicy(Rule{Host: "api.allowed.test", Access: l7.ReadOnly}, o.port)
	tp, roots := atkProxy(t, pol, o.roots, Config{MaxConns: maxConns})
	tc, h := h2Through(t, tp, roots, "api.allowed.test", o.port)
	defer tc.Close()
	hp := "api.allowed.test:" + itoa(o.port)
	for i := 0; i < streams; i++ {
		h.send(t, []string{":method", "GET", ":scheme", "https", ":authority", hp, ":path", "/s" + itoa(i)}, nil)
	}
	go func() { // answer the connection's settings and pings
		for {
			f, err := h.fr.ReadFrame()
			if err != nil {
				return
			}
			if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
				h.fr.WriteSettingsAck()
			}
		}
	}()
	// Wait until every stream reached the origin, or the upstream
	// sockets exceeded any bound MaxConns could mean.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && o.maxOpen.Load() <= 2*maxConns && inflight.Load() < streams {
		time.Sleep(10 * time.Millisecond)
	}
	if n := o.maxOpen.Load(); n > 2*maxConns {
		t.Errorf("one client connection (MaxConns %d) made the proxy hold %d upstream connections at once (%d accepted, %d requests in flight): upstream sockets must be bounded", maxConns, n, o.accepts.Load(), inflight.Load())
	}
}

// Was a hole: Config.IdleTimeout bounds "idle keep-alive connection, idle
// tunnel, slow body", but an intercepted connection's request body is
// read with no deadline at all (the inspector's http.Server has no
// ReadTimeout, and intercept hands it the raw connection with its
// deadline cleared): a body that stalls holds the client connection,
// a handler and an upstream connection forever.
func TestAttackStalledBodyHeld(t *testing.T) {
	o := startAtkOrigin(t, "api.allowed.test", atkOriginOpts{}, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	})
	pol := onePolicy(Rule{Host: "api.allowed.test", Access: l7.ReadWrite}, o.port)
	tp, roots := atkProxy(t, pol, o.roots, Config{IdleTimeout: 300 * time.Millisecond})
	tc, _ := tlsThroughALPN(t, tp.addr, "api.allowed.test", o.port, roots, "http/1.1")
	defer tc.Close()
	io.WriteString(tc, "POST /upload HTTP/1.1\r\nHost: api.allowed.test:"+itoa(o.port)+"\r\nContent-Length: 100\r\n\r\n0123456789")
	tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := tc.Read(make([]byte, 1024))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Errorf("a request body stalled for 5 s under IdleTimeout 300 ms: the connection is still held (want it ended)")
	}
}

// The attacks below are defeated; they stay as regression tests.

// TestAttackSmugglingInsideTLS: HTTP/1.1 framing tricks inside an
// intercepted connection (rules allow GET /ok only): whatever the
// parser makes of them, no request but GET /ok reaches the origin.
func TestAttackSmugglingInsideTLS(t *testing.T) {
	o := startAtkOrigin(t, "api.allowed.test", atkOriginOpts{}, nil)
	pol := onePolicy(Rule{Host: "api.allowed.test", Rules: []l7.Rule{{Method: "GET", Path: "/ok"}}}, o.port)
	tp, roots := atkProxy(t, pol, o.roots, Config{})
	hp := "api.allowed.test:" + itoa(o.port)
	H := "Host: " + hp + "\r\n"
	smuggled := "DELETE /secret HTTP/1.1\r\n" + H + "\r\n"
	for _, tc := range []struct{ name, raw string }{
		{"pipelined", "GET /ok HTTP/1.1\r\n" + H + "\r\n" + smuggled},
		{"CL.TE", "GET /ok HTTP/1.1\r\n" + H + "Content-Length: " + itoa(5+len(smuggled)) + "\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled},
		{"TE.CL", "GET /ok HTTP/1.1\r\n" + H + "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n" + fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(smuggled), smuggled)},
		{"TE obfuscated", "GET /ok HTTP/1.1\r\n" + H + "Transfer-Encoding: xchunked\r\nContent-Length: " + itoa(len(smuggled)) + "\r\n\r\n" + smuggled},
		{"TE twice", "GET /ok HTTP/1.1\r\n" + H + "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n" + smuggled},
		{"TE space before colon", "GET /ok HTTP/1.1\r\n" + H + "Transfer-Encoding : chunked\r\nContent-Length: " + itoa(len(smuggled)) + "\r\n\r\n" + smuggled},
		{"CL twice", "GET /ok HTTP/1.1\r\n" + H + "Content-Length: 0\r\nContent-Length: " + itoa(len(smuggled)) + "\r\n\r\n" + smuggled},
		{"chunk extension", "GET /ok HTTP/1.1\r\n" + H + "Transfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x;x=\"\r\n\"\r\n%s\r\n0\r\n\r\n", len(smuggled), smuggled)},
		{"bare LF chunk", "GET /ok HTTP/1.1\r\n" + H + "Transfer-Encoding: chunked\r\n\r\n0\n\n" + smuggled},
		{"obs-fold Host", "GET /ok HTTP/1.1\r\nHost: evil.test\r\n " + hp + "\r\n\r\n" + smuggled},
		{"Host twice", "GET /ok HTTP/1.1\r\n" + H + "Host: evil.test\r\n\r\n" + smuggled},
		{"HTTP/1.0 keep-alive", "GET /ok HTTP/1.0\r\n" + H + "Connection: keep-alive\r\n\r\n" + smuggled},
		{"Expect body is a request", "POST /ok HTTP/1.1\r\n" + H + "Expect: 100-continue\r\nContent-Length: " + itoa(len(smuggled)) + "\r\n\r\n" + smuggled},
		{"trailer", "GET /ok HTTP/1.1\r\n" + H + "Transfer-Encoding: chunked\r\nTrailer: X-HTTP-Method-Override\r\n\r\n0\r\nX-HTTP-Method-Override: DELETE\r\nHost: evil.test\r\n\r\n" + smuggled},
		{"PRI preface on http/1.1", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + smuggled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			codes := rawH1(t, tp, roots, "api.allowed.test", o.port, tc.raw)
			if r := o.sawAny("secret", "evil", "PRI", "DELETE"); r != "" {
				t.Errorf("%s: %v, and the origin received %q", tc.name, codes, r)
			}
		})
	}
	for i, h := range o.hosts {
		if h != hp {
			t.Errorf("request %d reached the origin with Host %q, want %q", i, h, hp)
		}
	}
	for _, hs := range o.headers {
		if v := hs.Get("X-Http-Method-Override"); v != "" {
			t.Errorf("a trailer became a header at the origin: X-HTTP-Method-Override: %s", v)
		}
	}
}

// TestAttackRequestLineTricks: request targets, hosts and methods that a
// server might read otherwise than the rules, inside an intercepted
// HTTP/1.1 connection; each gets the status shown and nothing refused
// reaches the origin.
func TestAttackRequestLineTricks(t *testing.T) {
	o := startAtkOrigin(t, "api.allowed.test", atkOriginOpts{}, nil)
	pol := onePolicy(Rule{Host: "api.allowed.test",
		Rules:     []l7.Rule{{Method: "GET", Path: "/repos/*/issues"}, {Method: "GET", Path: "/admin/**"}, {Method: "GET", Path: "/q", Query: map[string][]string{"state": {"open"}}}},
		DenyRules: []l7.Rule{{Path: "/admin/**"}}}, o.port)
	tp, roots := atkProxy(t, pol, o.roots, Config{})
	hp := "api.allowed.test:" + itoa(o.port)
	H := "Host: " + hp + "\r\n"
	for _, tc := range []struct {
		line, host string
		want       int
	}{
		{"GET /repos/a/issues", H, 200},
		{"GET /repos/a/../../admin/x", H, 400},
		{"GET /repos/a/%2e%2e/%2e%2e/admin/x", H, 400},
		{"GET /repos/a/.%2E/b/issues", H, 400},
		{"GET /repos/a%2fb/issues", H, 400},
		{"GET /repos/a%5cb/issues", H, 400},
		{"GET /repos/a\\..\\b/issues", H, 400},
		{"GET /repos//admin/issues", H, 400},
		{"GET /repos/a/issues;/../../admin", H, 400},
		{"GET /repos/a;x/issues", H, 400},
		{"GET /repos/a%00/issues", H, 400},
		{"GET /repos/a%0d%0aX:/issues", H, 400},
		{"GET /repos/a%zz/issues", H, 400},
		{"GET /ADMIN/x", H, 403},
		{"GET /Admin/", H, 403},
		{"GET /admin", H, 403},
		{"GET /%61dmin/x", H, 403},
		{"GET /admin%2f", H, 400},
		{"get /repos/a/issues", H, 403},
		{"DELETE /repos/a/issues", H, 403},
		{"GET https://evil.test/repos/a/issues", H, 421},
		{"GET https://" + hp + "/admin/x", "Host: evil.test\r\n", 403},
		{"GET //evil.test/repos/a/issues", H, 400},
		{"GET https:/repos/a/issues", H, 200}, // no authority: the path is /repos/a/issues
		{"GET repos/a/issues", H, 400},
		{"OPTIONS *", H, 200}, // answered by net/http itself, never forwarded
		{"CONNECT evil.test:443", H, 0},
		{"CONNECT " + hp, H, 405},
		{"GET /repos/a/issues", "Host: evil.test\r\n", 421},
		{"GET /repos/a/issues", "Host: api.allowed.test:1\r\n", 421},
		{"GET /repos/a/issues", "Host: api.allowed.test\r\n", 421}, // the CONNECT port is not 443
		{"GET /repos/a/issues", "Host: API.Allowed.Test.:" + itoa(o.port) + "\r\n", 200},
		{"GET /repos/a/issues", "Host: user@" + hp + "\r\n", 400}, // net/http refuses it
		{"GET /repos/a/issues", "", 400},
		{"GET /q?state=open", H, 200},
		{"GET /q?state=open&state=closed", H, 403},
		{"GET /q?state=open;state=closed", H, 400},
		{"GET /q?st%61te=closed", H, 403},
		{"GET /q?state=%6fpen", H, 200},
		{"GET /q?state=op%zzen", H, 400},
		{"GET /q", H, 403},
	} {
		codes := rawH1N(t, tp, roots, "api.allowed.test", o.port, tc.line+" HTTP/1.1\r\n"+tc.host+"\r\n", 1)
		got := 0
		if len(codes) > 0 {
			got = codes[0]
		}
		if got != tc.want && !(tc.want == 0 && got >= 400) {
			t.Errorf("%q with %q: %v, want %d", tc.line, tc.host, codes, tc.want)
		}
	}
	for _, r := range o.requests() {
		switch r {
		case "GET /repos/a/issues HTTP/1.1", "GET /q?state=open HTTP/1.1", "GET /q?state=%6fpen HTTP/1.1":
		default:
			t.Errorf("the origin received %q", r)
		}
	}
}

// TestAttackH2PseudoHeaders: HTTP/2 requests built frame by frame: an
// :authority or Host other than the CONNECT host, pseudo-headers twice,
// out of order or missing, connection-specific fields, CONNECT
// (plain and extended), odd :path forms and methods. Rules allow GET
// /ok; only that ever reaches the origin, and always for the CONNECT
// host.
func TestAttackH2PseudoHeaders(t *testing.T) {
	o := startAtkOrigin(t, "api.allowed.test", atkOriginOpts{h2: true}, nil)
	pol := onePolicy(Rule{Host: "api.allowed.test", Rules: []l7.Rule{{Method: "GET", Path: "/ok"}}, DenyRules: []l7.Rule{{Method: "DELETE"}}}, o.port)
	tp, roots := atkProxy(t, pol, o.roots, Config{})
	hp := "api.allowed.test:" + itoa(o.port)
	base := func(method, path string, extra ...string) []string {
		return append([]string{":method", method, ":scheme", "https", ":authority", hp, ":path", path}, extra...)
	}
	for _, tc := range []struct {
		name   string
		fields []string
		want   string // "" means: anything but 200
	}{
		{"allowed", base("GET", "/ok"), "200"},
		{"authority other", []string{":method", "GET", ":scheme", "https", ":authority", "evil.test", ":path", "/ok"}, "421"},
		{"authority with userinfo", []string{":method", "GET", ":scheme", "https", ":authority", "user:pw@" + hp, ":path", "/ok"}, ""},
		{"no authority, Host other", []string{":method", "GET", ":scheme", "https", ":path", "/ok", "host", "evil.test"}, "421"},
		{"authority ok, Host other", base("GET", "/ok", "host", "evil.test"), "200"}, // :authority wins; evil.test is dropped
		{"path twice", []string{":method", "GET", ":scheme", "https", ":authority", hp, ":path", "/ok", ":path", "/secret"}, ""},
		{"method twice", []string{":method", "GET", ":method", "DELETE", ":scheme", "https", ":authority", hp, ":path", "/ok"}, ""},
		{"pseudo after regular", []string{":method", "GET", ":scheme", "https", ":authority", hp, "x-a", "b", ":path", "/secret"}, ""},
		{"no path", []string{":method", "GET", ":scheme", "https", ":authority", hp}, ""},
		{"absolute path", base("GET", "https://evil.test/ok"), "200"}, // goes to the CONNECT host as /ok
		{"relative path", base("GET", "secret"), ""},
		{"asterisk", base("OPTIONS", "*"), "200"}, // answered by net/http itself, never forwarded
		{"dot segments", base("GET", "/x/../ok"), ""},
		{"upgrade field", base("GET", "/ok", "upgrade", "h2c"), ""},
		{"connection field", base("GET", "/ok", "connection", "keep-alive"), ""},
		{"transfer-encoding", base("GET", "/ok", "transfer-encoding", "chunked"), ""},
		{"te not trailers", base("GET", "/ok", "te", "gzip"), ""},
		{"CONNECT", []string{":method", "CONNECT", ":authority", "evil.test:443"}, ""},
		{"CONNECT own host", []string{":method", "CONNECT", ":authority", hp}, ""},
		{"extended CONNECT", []string{":method", "CONNECT", ":protocol", "websocket", ":scheme", "https", ":authority", hp, ":path", "/ok"}, ""},
		{"lowercase delete", base("delete", "/ok"), ""},
		{"method with space", base("DELETE /secret", "/ok"), ""},
		{"method with tab", base("DELETE\t", "/ok"), ""},
		{"header value CRLF", base("GET", "/ok", "x-a", "b\r\nDELETE /secret HTTP/1.1"), ""},
		{"uppercase header name", base("GET", "/ok", "X-A", "b"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tlsc, h := h2Through(t, tp, roots, "api.allowed.test", o.port)
			defer tlsc.Close()
			got := h.result(h.send(t, tc.fields, nil))
			if tc.want != "" && got != tc.want || tc.want == "" && got == "200" {
				t.Errorf("%s: %s, want %s", tc.name, got, cmp.Or(tc.want, "a refusal"))
			}
		})
	}
	for _, r := range o.requests() {
		if r != "GET /ok HTTP/2.0" {
			t.Errorf("the origin received %q", r)
		}
	}
	for _, h := range o.hosts {
		if h != hp {
			t.Errorf("a request reached the origin for %q, want %q", h, hp)
		}
	}
	for _, hs := range o.headers {
		if hs.Get("Host") != "" || hs.Get("X-A") != "" {
			t.Errorf("the origin got headers %v", hs)
		}
	}
}

// TestAttackUpgradeVariants: an inspected host relays websocket only,
// however the Upgrade is spelt; the origin never sees another protocol.
func TestAttackUpgradeVariants(t *testing.T) {
	o := startAtkOrigin(t, "api.allowed.test", atkOriginOpts{}, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "" {
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: " + r.Header.Get("Upgrade") + "\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
	})
	pol := onePolicy(Rule{Host: "api.allowed.test", Rules: []l7.Rule{{Method: "GET", Path: "/ws"}}}, o.port)
	tp, roots := atkProxy(t, pol, o.roots, Config{})
	H := "Host: api.allowed.test:" + itoa(o.port) + "\r\n"
	for _, up := range []string{
		"Upgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAAQCAAAA\r\n",
		"Upgrade: websocket, h2c\r\nConnection: Upgrade\r\n",
		"Upgrade: h2c, websocket\r\nConnection: Upgrade\r\n",
		"Upgrade: websocket\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n",
		"Upgrade: h2c\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n",
		"Upgrade: TLS/1.0\r\nConnection: Upgrade\r\n",
		"Upgrade: websocket\x00h2c\r\nConnection: Upgrade\r\n",
		"Upgrade: h2c\r\nConnection: keep-alive\r\n",
	} {
		rawH1(t, tp, roots, "api.allowed.test", o.port, "GET /ws HTTP/1.1\r\n"+H+up+"\r\n")
	}
	for _, hs := range o.headers {
		if u := strings.ToLower(strings.Join(hs.Values("Upgrade"), ",")); u != "" && u != "websocket" {
			t.Errorf("the origin was asked to upgrade to %q", u)
		}
	}
}

// TestAttackLeavesForOtherHosts: the proxy mints and serves a leaf only
// for the CONNECT host of an inspected rule: not for an SNI naming
// another host, not for a passthrough host, not for the inspected name's
// address, not without SNI.
func TestAttackLeavesForOtherHosts(t *testing.T) {
	o := startAtkOrigin(t, "api.allowed.test", atkOriginOpts{}, nil)
	pass := startAtkOrigin(t, "pass.allowed.test", atkOriginOpts{}, nil)
	pol := Policy{
		Allow: []Rule{{Host: "api.allowed.test", Ports: []int{o.port}, Access: l7.ReadOnly},
			{Host: "pass.allowed.test", Ports: []int{pass.port}}, {Host: "127.0.0.1", Ports: []int{pass.port, o.port}}},
		AllowPrivate: []Rule{{Host: "127.0.0.1/32"}},
		Hosts:        map[string]string{"api.allowed.test": "127.0.0.1", "pass.allowed.test": "127.0.0.1"},
	}
	tp, roots := atkProxy(t, pol, o.roots, Config{})
	for _, tc := range []struct{ connect, sni string }{
		{"api.allowed.test:" + itoa(o.port), "pass.allowed.test"},
		{"api.allowed.test:" + itoa(o.port), "github.com"},
		{"api.allowed.test:" + itoa(o.port), "sub.api.allowed.test"},
		{"pass.allowed.test:" + itoa(pass.port), "pass.allowed.test"},
		{"127.0.0.1:" + itoa(o.port), "api.allowed.test"},
		{"127.0.0.1:" + itoa(o.port), ""},
	} {
		if err := atkHandshake(t, tp.addr, tc.connect, tc.sni, roots); err == nil {
			t.Errorf("CONNECT %s with SNI %q: a handshake the sandbox's CA vouches for", tc.connect, tc.sni)
		}
	}
	ca := tp.cfg.CA // (the IP rule's tunnel is passthrough: the origin's own certificate, which the sandbox does not trust)
	ca.mu.Lock()
	defer ca.mu.Unlock()
	for h := range ca.leaves {
		t.Errorf("the proxy minted a leaf for %s", h)
	}
}

// atkHandshake opens a CONNECT tunnel to connect and completes a TLS
// handshake with SNI sni (none when empty) trusting roots.
func atkHandshake(t testing.TB, proxyAddr, connect, sni string, roots *x509.CertPool) error {
	c := dialProxy(t, proxyAddr)
	resp, _ := c.roundTrip(t, "CONNECT "+connect+" HTTP/1.1\r\nHost: "+connect+"\r\n\r\n", "CONNECT")
	if resp.StatusCode != 200 {
		return fmt.Errorf("CONNECT %d", resp.StatusCode)
	}
	cfg := &tls.Config{ServerName: sni, RootCAs: roots, NextProtos: []string{"http/1.1"}}
	if sni == "" {
		host, _, _ := net.SplitHostPort(connect)
		cfg.ServerName, cfg.InsecureSkipVerify = "", true
		cfg.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			leaf, err := x509.ParseCertificate(raw[0])
			if err != nil {
				return err
			}
			_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: host})
			return err
		}
	}
	tc := tls.Client(c.Conn, cfg)
	defer tc.Close()
	return tc.Handshake()
}

// TestAttackInspectedWildcard: the proxy of an inspected wildcard rule
// serves the names the wildcard matches and no other (wild.test itself,
// two labels under "*."). (Until cba8406 such a proxy could not be made
// at all: CA.Covers refused the rule's own subtree.)
func TestAttackInspectedWildcard(t *testing.T) {
	o := startAtkOrigin(t, "*.wild.test", atkOriginOpts{}, nil)
	resolve := func(ctx context.Context, host string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	for _, host := range []string{"*.wild.test", "**.wild.test"} {
		t.Run(host, func(t *testing.T) {
			pol := Policy{Allow: []Rule{{Host: host, Ports: []int{o.port}, Access: l7.ReadOnly}}, AllowPrivate: []Rule{{Host: "127.0.0.1/32"}}}
			ca, err := NewCA(pol)
			if err != nil {
				t.Fatal(err)
			}
			if !ca.Covers(pol) {
				t.Errorf("the CA minted for %s does not cover its own policy", host)
			}
			p, err := New(Config{Policy: pol, CA: ca, UpstreamRoots: o.roots, Resolve: resolve})
			if err != nil {
				t.Fatalf("New with its own CA: %v", err)
			}
			p.Close()
			tp, roots := atkProxy(t, pol, o.roots, Config{Resolve: resolve})
			if err := atkHandshake(t, tp.addr, "a.wild.test:"+itoa(o.port), "a.wild.test", roots); err != nil {
				t.Errorf("a.wild.test under %s: %v", host, err)
			}
			if err := atkHandshake(t, tp.addr, "wild.test:"+itoa(o.port), "wild.test", roots); err == nil {
				t.Errorf("wild.test itself under %s: served", host)
			}
			if host == "*.wild.test" {
				if err := atkHandshake(t, tp.addr, "a.b.wild.test:"+itoa(o.port), "a.b.wild.test", roots); err == nil {
					t.Errorf("a.b.wild.test (two labels) under *.wild.test: served")
				}
			}
		})
	}
}

// TestAttackManyHostsBounded: a wildcard rule lets the workload name as
// many hosts as it likes; the leaf cache and the upstream protocols
// remembered stay bounded.
func TestAttackManyHostsBounded(t *testing.T) {
	o := startAtkOrigin(t, "*.wild.test", atkOriginOpts{h2: true}, nil)
	resolve := func(ctx context.Context, host string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	pol := Policy{Allow: []Rule{{Host: "*.wild.test", Ports: []int{o.port}, Inspect: true}}, AllowPrivate: []Rule{{Host: "127.0.0.1/32"}}}
	tp, _ := atkProxy(t, pol, o.roots, Config{Resolve: resolve})
	ca, in := tp.cfg.CA, tp.insp
	for i := 0; i < leafCacheSize+50; i++ {
		h := "h" + itoa(i) + ".wild.test"
		if _, err := ca.leaf(h); err != nil {
			t.Fatal(err)
		}
		if p := in.upstreamProto(newTarget(h, o.port)); p != "h2" {
			t.Fatalf("ALPN of %s: %q", h, p)
		}
	}
	// And through the proxy, as the workload would.
	tc, proto := tlsThroughALPN(t, tp.addr, "last.wild.test", o.port, x509PoolOf(ca), "h2", "http/1.1")
	tc.Close()
	if proto != "h2" {
		t.Errorf("last.wild.test: %q, want h2", proto)
	}
	ca.mu.Lock()
	n, l := len(ca.leaves), ca.lru.Len()
	ca.mu.Unlock()
	in.mu.Lock()
	a := len(in.alpn)
	in.mu.Unlock()
	if n > leafCacheSize || l != n || a > maxALPNCache {
		t.Errorf("after %d hosts: %d leaves (list %d), %d ALPN entries; want at most %d and %d", leafCacheSize+50, n, l, a, leafCacheSize, maxALPNCache)
	}
}

func x509PoolOf(ca *CA) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Certificate())
	return p
}

// TestAttackAuditHoldsNoSecrets: query values and userinfo never reach a
// logged decision, whether the request was allowed or refused, over
// HTTP/1.1 (absolute-form inside the tunnel, a Host with userinfo) or
// HTTP/2, on the inspected or the plain path.
func TestAttackAuditHoldsNoSecrets(t *testing.T) {
	o := startAtkOrigin(t, "api.allowed.test", atkOriginOpts{h2: true}, nil)
	pol := onePolicy(Rule{Host: "api.allowed.test", Rules: []l7.Rule{{Method: "GET", Path: "/ok"}}}, o.port)
	tp, roots := atkProxy(t, pol, o.roots, Config{})
	hp := "api.allowed.test:" + itoa(o.port)
	const secret = "s3cr3tVALUE"
	rawH1(t, tp, roots, "api.allowed.test", o.port,
		"GET /ok?token="+secret+" HTTP/1.1\r\nHost: "+hp+"\r\n\r\n"+
			"GET /no?token="+secret+" HTTP/1.1\r\nHost: "+hp+"\r\n\r\n"+
			"GET https://user:"+secret+"@"+hp+"/ok?a="+secret+" HTTP/1.1\r\nHost: "+hp+"\r\n\r\n"+
			"GET /ok?x=%zz"+secret+" HTTP/1.1\r\nHost: "+hp+"\r\n\r\n")
	rawH1(t, tp, roots, "api.allowed.test", o.port, "GET /ok HTTP/1.1\r\nHost: user:"+secret+"@"+hp+"\r\n\r\n")
	tlsc, h := h2Through(t, tp, roots, "api.allowed.test", o.port)
	h.result(h.send(t, []string{":method", "GET", ":scheme", "https", ":authority", "user:" + secret + "@" + hp, ":path", "/ok"}, nil))
	h.result(h.send(t, []string{":method", "GET", ":scheme", "https", ":authority", hp, ":path", "/no?k=" + secret}, nil))
	h.result(h.send(t, []string{":method", "POST", ":scheme", "https", ":authority", hp, ":path", "/ok?k=" + secret}, []byte("x")))
	tlsc.Close()
	c := dialProxy(t, tp.addr)
	c.roundTrip(t, "GET http://"+hp+"/no?k="+secret+" HTTP/1.1\r\nHost: "+hp+"\r\n\r\n", "GET")
	ds := tp.log.waitN(t, 9)
	for _, d := range ds {
		for name, s := range atkStrings(d) {
			if strings.Contains(s, secret) {
				t.Errorf("a logged decision's %s holds the query value or userinfo: %q", name, s)
			}
		}
	}
}

// TestAttackExpectContinueRefused: a refused request that waits for
// 100-continue is answered with the denial and its body never becomes
// a request, nor reaches the origin.
func TestAttackExpectContinueRefused(t *testing.T) {
	o := startAtkOrigin(t, "api.allowed.test", atkOriginOpts{}, nil)
	pol := onePolicy(Rule{Host: "api.allowed.test", Access: l7.ReadOnly}, o.port)
	tp, roots := atkProxy(t, pol, o.roots, Config{})
	hp := "api.allowed.test:" + itoa(o.port)
	body := "GET /smuggled HTTP/1.1\r\nHost: " + hp + "\r\n\r\n"
	codes := rawH1(t, tp, roots, "api.allowed.test", o.port, "POST /x HTTP/1.1\r\nHost: "+hp+"\r\nExpect: 100-continue\r\nContent-Length: "+itoa(len(body))+"\r\n\r\n"+body)
	if len(codes) != 1 || codes[0] != 403 || len(o.requests()) != 0 {
		t.Errorf("POST with Expect: 100-continue under read-only: %v, origin %q; want one 403 and nothing at the origin", codes, o.requests())
	}
	codes = rawH1N(t, tp, roots, "api.allowed.test", o.port, "GET /x HTTP/1.1\r\nHost: "+hp+"\r\nExpect: something-else\r\n\r\n", 1)
	if len(codes) == 0 || codes[0] != 417 {
		t.Errorf("Expect: something-else: %v, want 417", codes)
	}
}

// TestAttackCAPEMIsACopy: what the sandbox is given of the CA is its
// certificate alone, and a caller cannot change the CA through it.
func TestAttackCAPEMIsACopy(t *testing.T) {
	ca, err := NewCA(Policy{Allow: []Rule{{Host: "api.allowed.test", Inspect: true}}})
	if err != nil {
		t.Fatal(err)
	}
	p := ca.CertPEM()
	if bytes.Contains(p, []byte("PRIVATE")) || strings.Count(string(p), "BEGIN") != 1 {
		t.Fatalf("CertPEM holds more than one certificate:\n%s", p)
	}
	for i := range p {
		p[i] = 'x'
	}
	if q := ca.CertPEM(); bytes.Equal(p, q) {
		t.Error("CertPEM returned the CA's own buffer")
	}
	if !ca.Certificate().IsCA || ca.Certificate().MaxPathLen != 0 || !ca.Certificate().MaxPathLenZero {
		t.Error("the root may sign intermediate CAs: a leaked leaf key path could extend it")
	}
	leaf, err := ca.leaf("api.allowed.test")
	if err != nil {
		t.Fatal(err)
	}
	if leaf.Leaf.IsCA || leaf.Leaf.BasicConstraintsValid && leaf.Leaf.IsCA {
		t.Error("a leaf is a CA")
	}
}

// Was a hole: deny rules compare paths without case (l7.Decide lowercases
// both), so that a server that routes case-insensitively is no way
// around one; but Unicode has letters that only fold one way:
// strings.ToLower leaves "ſ" (U+017F, LATIN SMALL LETTER LONG S) as it
// is, while Java's equalsIgnoreCase and String.toUpperCase (Spring,
// Tomcat with case-insensitive matching) and .NET's invariant upper
// case read it as "S": deny {path: /secret/**} does not refuse
// /%C5%BFecret/x. Fold both sides the way such servers do
// (strings.ToLower(strings.ToUpper(s)), or unicode.SimpleFold), or
// refuse non-ASCII paths on an entry with deny rules.
func TestAttackDenyRuleUnicodeCase(t *testing.T) {
	served := make(chan string, 4)
	o := startAtkOrigin(t, "api.allowed.test", atkOriginOpts{}, func(w http.ResponseWriter, r *http.Request) {
		// A case-insensitive router, as Java's equalsIgnoreCase compares.
		if strings.HasPrefix(strings.ToUpper(r.URL.Path), "/SECRET/") {
			served <- r.URL.Path
		}
		fmt.Fprint(w, "ok")
	})
	pol := onePolicy(Rule{Host: "api.allowed.test", Access: l7.Full, DenyRules: []l7.Rule{{Path: "/secret/**"}}}, o.port)
	tp, roots := atkProxy(t, pol, o.roots, Config{})
	hp := "api.allowed.test:" + itoa(o.port)
	for _, p := range []string{"/SECRET/x", "/Secret/x", "/%C5%BFecret/x", "/%C5%BFECRET/x"} {
		codes := rawH1N(t, tp, roots, "api.allowed.test", o.port, "GET "+p+" HTTP/1.1\r\nHost: "+hp+"\r\n\r\n", 1)
		if got, ok := acted(served); ok {
			t.Errorf("GET %s: %v, and the origin served %q: deny_rules[0] /secret/** must refuse it", p, codes, got)
		}
	}
}

// Was a hole: headers that tell the origin to route the request elsewhere:
// X-Original-URL and X-Rewrite-URL, which IIS's URL Rewrite sets and
// frameworks read back from the client (Laminas/Zend
// detectRequestUri; Symfony did until CVE-2018-14773), name a path the
// rules never saw. With rules allowing only GET /public, GET /public
// with X-Original-URL: /admin reaches the origin's /admin. Refuse
// requests carrying them (no client has a reason to send them), or
// decide their path too.
func TestAttackPathOverrideHeaders(t *testing.T) {
	routed := make(chan string, 4)
	o := startAtkOrigin(t, "api.allowed.test", atkOriginOpts{}, func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		for _, h := range []string{"X-Original-URL", "X-Rewrite-URL"} {
			if v := r.Header.Get(h); v != "" {
				p = v
			}
		}
		if p != "/public" {
			routed <- p
		}
		fmt.Fprint(w, "ok")
	})
	pol := onePolicy(Rule{Host: "api.allowed.test", Rules: []l7.Rule{{Method: "GET", Path: "/public"}}}, o.port)
	tp, roots := atkProxy(t, pol, o.roots, Config{})
	hp := "api.allowed.test:" + itoa(o.port)
	for _, h := range []string{"X-Original-URL", "X-Rewrite-URL"} {
		codes := rawH1N(t, tp, roots, "api.allowed.test", o.port, "GET /public HTTP/1.1\r\nHost: "+hp+"\r\n"+h+": /admin\r\n\r\n", 1)
		if p, ok := acted(routed); ok {
			t.Errorf("GET /public with %s: /admin: %v, and the origin served %s", h, codes, p)
		}
	}
}

// Was a hole (audit): an allowed inspected request is logged when it ends
// (ServeHTTP logs after ReverseProxy returns), so a WebSocket or a long
// stream has no record while it is open, and none at all if the
// session dies first (the plain path logs a 101 before splicing, and
// every other response once its head is relayed). Log the decision
// when the response head (or the 101) is relayed, and the byte counts
// as a second record or not at all.
func TestAttackWebSocketLoggedWhileOpen(t *testing.T) {
	o := startAtkOrigin(t, "api.allowed.test", atkOriginOpts{}, func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		io.Copy(conn, brw)
	})
	pol := onePolicy(Rule{Host: "api.allowed.test", Rules: []l7.Rule{{Method: "GET", Path: "/ws"}}}, o.port)
	tp, roots := atkProxy(t, pol, o.roots, Config{})
	tc, _ := tlsThroughALPN(t, tp.addr, "api.allowed.test", o.port, roots, "http/1.1")
	defer tc.Close()
	br := bufio.NewReader(tc)
	io.WriteString(tc, "GET /ws HTTP/1.1\r\nHost: api.allowed.test:"+itoa(o.port)+"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	io.WriteString(tc, "ping")
	b := make([]byte, 4)
	if _, err := io.ReadFull(br, b); err != nil {
		t.Fatal(err)
	}
	// The WebSocket is open and has carried data: its GET is in the log.
	for _, d := range tp.log.all() {
		if d.Method == "GET" && d.Allowed {
			return
		}
	}
	t.Errorf("an open WebSocket has no record: %+v", tp.log.all())
}

// TestAttackHugeHeaders: request heads beyond MaxHeaderBytes are
// refused on both protocols, and nothing reaches the origin.
func TestAttackHugeHeaders(t *testing.T) {
	o := startAtkOrigin(t, "api.allowed.test", atkOriginOpts{h2: true}, nil)
	pol := onePolicy(Rule{Host: "api.allowed.test", Access: l7.Full}, o.port)
	tp, roots := atkProxy(t, pol, o.roots, Config{MaxHeaderBytes: 8 << 10})
	hp := "api.allowed.test:" + itoa(o.port)
	big := strings.Repeat("x", 64<<10)
	if codes := rawH1N(t, tp, roots, "api.allowed.test", o.port, "GET /ok HTTP/1.1\r\nHost: "+hp+"\r\nX-Big: "+big+"\r\n\r\n", 1); len(codes) > 0 && codes[0] != 431 {
		t.Errorf("a 64 KiB header over HTTP/1.1: %v, want 431 or a close", codes)
	}
	tc, h := h2Through(t, tp, roots, "api.allowed.test", o.port)
	defer tc.Close()
	var fields []string
	for i := 0; i < 16; i++ { // 16 distinct fields of 4 KiB: past the header list limit
		fields = append(fields, "x-big-"+itoa(i), big[:4<<10])
	}
	if got := h.result(h.send(t, append([]string{":method", "GET", ":scheme", "https", ":authority", hp, ":path", "/ok"}, fields...), nil)); got == "200" {
		t.Errorf("a 64 KiB header list over HTTP/2: %s, want a refusal", got)
	}
	if r := o.requests(); len(r) > 0 {
		t.Errorf("the origin received %q", r)
	}
}

// TestAttackALPNProbeOnce: the upstream's protocol is learned once per
// host and port: many intercepted connections that offer h2 (and send
// nothing else) cost the origin one probe connection, not one each.
func TestAttackALPNProbeOnce(t *testing.T) {
	o := startAtkOrigin(t, "api.allowed.test", atkOriginOpts{h2: true}, nil)
	pol := onePolicy(Rule{Host: "api.allowed.test", Access: l7.ReadOnly}, o.port)
	tp, roots := atkProxy(t, pol, o.roots, Config{})
	for i := 0; i < 20; i++ {
		tc, proto := tlsThroughALPN(t, tp.addr, "api.allowed.test", o.port, roots, "h2", "http/1.1")
		tc.Close()
		if proto != "h2" {
			t.Fatalf("connection %d: %q", i, proto)
		}
	}
	if n := o.accepts.Load(); n != 1 {
		t.Errorf("20 intercepted connections that sent no request made %d upstream connections, want the one probe", n)
	}
}

// anyHostCache is a client session cache that offers the last session
// it was given to every server, whatever its name: a client that
// resumes, on a tunnel to one host, the TLS session it had with another.
type anyHostCache struct {
	mu sync.Mutex
	cs *tls.ClientSessionState
}

func (c *anyHostCache) Get(string) (*tls.ClientSessionState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cs, c.cs != nil
}

func (c *anyHostCache) Put(_ string, cs *tls.ClientSessionState) {
	if cs != nil {
		c.mu.Lock()
		c.cs = cs
		c.mu.Unlock()
	}
}

// TestAttackResumedSessionAcrossHosts: the proxy lets clients resume
// TLS sessions (one ticket key per proxy); a session from a tunnel to
// one inspected host, resumed on a tunnel to another, changes nothing:
// the second tunnel's requests are still decided by, and sent to, its
// CONNECT host only, and one for the first host is misdirected.
func TestAttackResumedSessionAcrossHosts(t *testing.T) {
	a := startAtkOrigin(t, "a.allowed.test", atkOriginOpts{}, nil)
	b := startAtkOrigin(t, "b.allowed.test", atkOriginOpts{}, nil)
	roots := x509.NewCertPool()
	roots.AddCert(selfSigned(t, "a.allowed.test").Leaf)
	roots.AddCert(selfSigned(t, "b.allowed.test").Leaf)
	pol := Policy{
		Allow:        []Rule{{Host: "a.allowed.test", Ports: []int{a.port}, Access: l7.Full}, {Host: "b.allowed.test", Ports: []int{b.port}, Rules: []l7.Rule{{Method: "GET", Path: "/b-only"}}}},
		AllowPrivate: []Rule{{Host: "127.0.0.1/32"}},
		Hosts:        map[string]string{"a.allowed.test": "127.0.0.1", "b.allowed.test": "127.0.0.1"},
	}
	tp, sandboxRoots := atkProxy(t, pol, roots, Config{})
	cache := &anyHostCache{}
	get := func(host string, port int, raw string) (int, bool) {
		c := dialProxy(t, tp.addr)
		hp := host + ":" + itoa(port)
		if resp, _ := c.roundTrip(t, "CONNECT "+hp+" HTTP/1.1\r\nHost: "+hp+"\r\n\r\n", "CONNECT"); resp.StatusCode != 200 {
			t.Fatal(resp.Status)
		}
		tc := tls.Client(c.Conn, &tls.Config{ServerName: host, RootCAs: sandboxRoots, ClientSessionCache: cache, NextProtos: []string{"http/1.1"}})
		defer tc.Close()
		io.WriteString(tc, raw)
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			t.Fatalf("through %s: %v", hp, err)
		}
		resp.Body.Close()
		return resp.StatusCode, tc.ConnectionState().DidResume
	}
	ha, hb := "a.allowed.test:"+itoa(a.port), "b.allowed.test:"+itoa(b.port)
	if code, _ := get("a.allowed.test", a.port, "GET /x HTTP/1.1\r\nHost: "+ha+"\r\n\r\n"); code != 200 {
		t.Fatalf("GET /x on a: %d", code)
	}
	code, resumed := get("b.allowed.test", b.port, "DELETE /x HTTP/1.1\r\nHost: "+ha+"\r\n\r\n")
	if code != 421 {
		t.Errorf("a's session resumed on b's tunnel (resumed %v), a request for a: %d, want 421", resumed, code)
	}
	code, resumed = get("b.allowed.test", b.port, "DELETE /x HTTP/1.1\r\nHost: "+hb+"\r\n\r\n")
	if code != 403 {
		t.Errorf("a's session resumed on b's tunnel (resumed %v), DELETE under b's rules: %d, want 403", resumed, code)
	}
	t.Logf("b's tunnel resumed a's session: %v", resumed)
	if r := a.requests(); len(r) != 1 {
		t.Errorf("a received %q, want its one GET", r)
	}
	if r := b.requests(); len(r) != 0 {
		t.Errorf("b received %q", r)
	}
}

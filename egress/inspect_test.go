package egress

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/egress/l7"
)

// origin is a loopback HTTPS server with a certificate for name.
type origin struct {
	*httptest.Server
	port  int
	roots *x509.CertPool
	hits  atomic.Int64
	paths chan string
}

func startOrigin(t testing.TB, name string, h2 bool, h http.Handler) *origin {
	t.Helper()
	o := &origin{paths: make(chan string, 100)}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.hits.Add(1)
		select {
		case o.paths <- r.Method + " " + r.URL.RequestURI() + " " + r.Proto:
		default:
		}
		h.ServeHTTP(w, r)
	}))
	cert := selfSigned(t, name)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.EnableHTTP2 = h2
	srv.StartTLS()
	t.Cleanup(srv.Close)
	o.Server = srv
	o.port = srv.Listener.Addr().(*net.TCPAddr).Port
	o.roots = certPool(cert)
	return o
}

// inspectingProxy starts a proxy inspecting host (mapped to 127.0.0.1)
// with rule r, its CA and the origin's roots; it returns the proxy and a
// client that trusts the sandbox CA and goes through it.
func inspectingProxy(t testing.TB, o *origin, r Rule, h2 bool) (*testProxy, *http.Client) {
	t.Helper()
	if r.Ports == nil {
		r.Ports = []int{o.port}
	}
	pol := Policy{Allow: []Rule{r}, AllowPrivate: []Rule{{Host: "127.0.0.1/32"}}, Hosts: map[string]string{r.Host: "127.0.0.1"}}
	ca, err := NewCA(pol)
	if err != nil {
		t.Fatal(err)
	}
	tp := startProxy(t, Config{Policy: pol, CA: ca, UpstreamRoots: o.roots})
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	pu, _ := url.Parse("http://" + tp.addr)
	tr := &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: h2}
	t.Cleanup(tr.CloseIdleConnections)
	return tp, &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func TestInspectReadOnly(t *testing.T) {
	o := startOrigin(t, "api.allowed.test", true, http.HandlerFunc(hello))
	tp, c := inspectingProxy(t, o, Rule{Host: "api.allowed.test", Access: l7.ReadOnly}, true)
	base := "https://api.allowed.test:" + itoa(o.port)
	resp, err := c.Get(base + "/repos/a?x=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
		t.Fatalf("GET: %d %s %q, want 200 over HTTP/2", resp.StatusCode, resp.Proto, body)
	}
	for _, m := range []string{"POST", "PUT", "DELETE", "PATCH"} {
		req, _ := http.NewRequest(m, base+"/repos/a", strings.NewReader("x"))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		den := decodeDenial(t, string(b))
		if resp.StatusCode != 403 || !strings.Contains(den.Reason, "read-only does not allow "+m) || !strings.Contains(den.Hint, "network.allow[0]: access:") {
			t.Errorf("%s: %d %+v, want 403 naming the access preset", m, resp.StatusCode, den)
		}
	}
	if n := o.hits.Load(); n != 1 {
		t.Errorf("the origin saw %d requests, want only the GET", n)
	}
	var sawGet bool
	for _, d := range tp.log.all() {
		if d.Method == "GET" {
			sawGet = d.Allowed && d.Inspected && d.Status == 200 && d.URL == base+"/repos/a" && d.Proto == "HTTP/2.0" && d.BytesIn > 0
		}
	}
	if !sawGet {
		t.Errorf("no inspected GET decision (no query in the URL): %+v", tp.log.all())
	}
}

func TestInspectRulesAndDenyRules(t *testing.T) {
	o := startOrigin(t, "api.allowed.test", false, http.HandlerFunc(hello))
	_, c := inspectingProxy(t, o, Rule{Host: "api.allowed.test",
		Rules:     []l7.Rule{{Method: "GET", Path: "/repos/*/issues"}, {Method: "POST", Path: "/repos/**", Query: map[string][]string{"draft": {"true"}}}},
		DenyRules: []l7.Rule{{Path: "/repos/secret/**"}}}, false)
	base := "https://api.allowed.test:" + itoa(o.port)
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/repos/a/issues", 200},
		{"GET", "/repos/a/pulls", 403},
		{"GET", "/repos/secret/issues", 403},
		{"POST", "/repos/a/b/c?draft=true", 200},
		{"POST", "/repos/a/b/c?draft=false", 403},
		{"POST", "/repos/a/b/c", 403},
		{"GET", "/repos/a/../secret/issues", 400},
		{"GET", "/repos/a%2fb/issues", 400},
		{"GET", "/repos//a/issues", 400},
		{"POST", "/repos/a/b/c?draft=true&Draft=false", 400},
	} {
		req, _ := http.NewRequest(tc.method, base+tc.path, nil)
		req.URL.Opaque = "" // keep the path as written
		req.URL, _ = url.Parse(base + tc.path)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, resp.StatusCode, b, tc.want)
		}
	}
}

func TestInspectAuthorityMismatch(t *testing.T) {
	o := startOrigin(t, "api.allowed.test", true, http.HandlerFunc(hello))
	_, c := inspectingProxy(t, o, Rule{Host: "api.allowed.test", Access: l7.Full}, true)
	req, _ := http.NewRequest("GET", "https://api.allowed.test:"+itoa(o.port)+"/", nil)
	req.Host = "other.test"
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest || o.hits.Load() != 0 {
		t.Fatalf("Host other than the CONNECT host: %d, origin hits %d; want 421 and none", resp.StatusCode, o.hits.Load())
	}
}

func TestInspectUpstreamCertInvalid(t *testing.T) {
	o := startOrigin(t, "wrong.name.test", true, http.HandlerFunc(hello))
	_, c := inspectingProxy(t, o, Rule{Host: "api.allowed.test", Inspect: true}, true)
	resp, err := c.Get("https://api.allowed.test:" + itoa(o.port) + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 502 || !strings.Contains(string(b), "certificate") || o.hits.Load() != 0 {
		t.Fatalf("upstream with a certificate for another name: %d %s, hits %d; want 502 naming the certificate", resp.StatusCode, b, o.hits.Load())
	}
}

func TestInspectStreamsSSE(t *testing.T) {
	release := make(chan struct{})
	o := startOrigin(t, "api.allowed.test", true, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "data: last\n\n")
	}))
	defer close(release)
	for _, h2 := range []bool{false, true} {
		_, c := inspectingProxy(t, o, Rule{Host: "api.allowed.test", Access: l7.ReadOnly}, h2)
		resp, err := c.Get("https://api.allowed.test:" + itoa(o.port) + "/events")
		if err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || line != "data: first\n" {
			t.Fatalf("h2=%v: first event %q %v before the upstream finished", h2, line, err)
		}
		resp.Body.Close()
	}
}

func TestInspectRefusesPlainTunnel(t *testing.T) {
	o := startOrigin(t, "api.allowed.test", false, http.HandlerFunc(hello))
	tp, _ := inspectingProxy(t, o, Rule{Host: "api.allowed.test", Access: l7.ReadOnly}, false)
	c := dialProxy(t, tp.addr)
	resp, _ := c.roundTrip(t, "CONNECT api.allowed.test:"+itoa(o.port)+" HTTP/1.1\r\nHost: api.allowed.test:"+itoa(o.port)+"\r\n\r\n", "CONNECT")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	io.WriteString(c, "DELETE /repos/a HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n")
	expectClosed(t, c.Conn, c.br)
	if o.hits.Load() != 0 {
		t.Fatal("plain HTTP inside a tunnel to an inspected host reached the origin")
	}
}

func TestPlainHTTPRulesApply(t *testing.T) {
	up := startUpstream(t, "127.0.0.1", http.HandlerFunc(hello))
	pol := Policy{Allow: []Rule{{Host: "api.allowed.test", Ports: []int{up.port}, Access: l7.ReadOnly}}, AllowPrivate: []Rule{{Host: "127.0.0.1/32"}}, Hosts: map[string]string{"api.allowed.test": "127.0.0.1"}}
	ca, err := NewCA(pol)
	if err != nil {
		t.Fatal(err)
	}
	tp := startProxy(t, Config{Policy: pol, CA: ca})
	c := dialProxy(t, tp.addr)
	target := "http://api.allowed.test:" + itoa(up.port) + "/x"
	resp, _ := c.roundTrip(t, "DELETE "+target+" HTTP/1.1\r\nHost: api.allowed.test:"+itoa(up.port)+"\r\n\r\n", "DELETE")
	if resp.StatusCode != 403 || up.hits.Load() != 0 {
		t.Fatalf("plain DELETE to a read-only host: %d, hits %d", resp.StatusCode, up.hits.Load())
	}
}

func TestCANameConstraints(t *testing.T) {
	pol := Policy{Allow: []Rule{{Host: "api.allowed.test", Inspect: true}, {Host: "*.wild.test", Access: l7.ReadOnly}, {Host: "passthrough.test"}}}
	ca, err := NewCA(pol)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	verify := func(host string) error {
		leaf, err := ca.mint(host, time.Now()) // as someone holding the key would
		if err != nil {
			return err
		}
		_, err = leaf.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: host})
		if a, perr := netip.ParseAddr(host); perr == nil {
			_, err = leaf.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: a.String()})
		}
		return err
	}
	for _, h := range []string{"api.allowed.test", "a.wild.test"} {
		if err := verify(h); err != nil {
			t.Errorf("%s: %v, want a valid leaf", h, err)
		}
	}
	for _, h := range []string{"passthrough.test", "evil.test", "wild.test", "127.0.0.1", "sub.api.allowed.test"} {
		if err := verify(h); err == nil {
			t.Errorf("a leaf for %s verified under the sandbox CA: its name constraints must refuse it", h)
		}
	}
	if ca.Covers(Policy{Allow: []Rule{{Host: "other.test", Inspect: true}}}) {
		t.Error("Covers accepted a host outside the constraints")
	}
	if _, err := New(Config{Policy: pol, CA: ca}); err != nil {
		t.Errorf("a proxy for the policy its CA was minted for: %v", err)
	}
	if !ca.Covers(Policy{Allow: []Rule{{Host: "b.wild.test", Inspect: true}}}) {
		t.Error("Covers refused a host inside *.wild.test")
	}
	if ca.Covers(Policy{Allow: []Rule{{Host: "sub.api.allowed.test", Inspect: true}}}) {
		t.Error("Covers accepted a name below an exact inspected host")
	}
	// A name below an exact host stays valid where a wildcard covers it.
	deep, err := NewCA(Policy{Allow: []Rule{{Host: "api.x.test", Inspect: true}, {Host: "**.x.test", Inspect: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if ex := deep.Certificate().ExcludedDNSDomains; len(ex) != 0 {
		t.Errorf("excluded %v although **.x.test covers them", ex)
	}
}

// tlsThrough opens a CONNECT tunnel to host:port through the proxy and
// completes a TLS handshake (http/1.1) trusting roots.
func tlsThrough(t testing.TB, proxyAddr, host string, port int, roots *x509.CertPool) (*tls.Conn, *bufio.Reader) {
	t.Helper()
	c := dialProxy(t, proxyAddr)
	hp := host + ":" + itoa(port)
	resp, _ := c.roundTrip(t, "CONNECT "+hp+" HTTP/1.1\r\nHost: "+hp+"\r\n\r\n", "CONNECT")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	tc := tls.Client(c.Conn, &tls.Config{ServerName: host, RootCAs: roots, NextProtos: []string{"http/1.1"}})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	return tc, bufio.NewReader(tc)
}

func TestInspectUpgrades(t *testing.T) {
	o := startOrigin(t, "api.allowed.test", false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: " + r.Header.Get("Upgrade") + "\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		io.Copy(conn, brw) // echo
	}))
	tp, _ := inspectingProxy(t, o, Rule{Host: "api.allowed.test", Rules: []l7.Rule{{Method: "GET", Path: "/ws"}}}, false)
	roots := x509.NewCertPool()
	roots.AddCert(tp.cfg.CA.Certificate())
	for _, tc := range []struct {
		path, upgrade string
		want          int
	}{{"/ws", "websocket", 101}, {"/ws", "h2c", 403}, {"/other", "websocket", 403}} {
		conn, br := tlsThrough(t, tp.addr, "api.allowed.test", o.port, roots)
		io.WriteString(conn, "GET "+tc.path+" HTTP/1.1\r\nHost: api.allowed.test:"+itoa(o.port)+"\r\nConnection: Upgrade\r\nUpgrade: "+tc.upgrade+"\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != tc.want {
			t.Errorf("%s Upgrade: %s: %d, want %d", tc.path, tc.upgrade, resp.StatusCode, tc.want)
		}
		if resp.StatusCode == 101 {
			io.WriteString(conn, "ping")
			b := make([]byte, 4)
			if _, err := io.ReadFull(br, b); err != nil || string(b) != "ping" {
				t.Errorf("echo through the upgraded connection: %q %v", b, err)
			}
		}
		conn.Close()
	}
	if n := o.hits.Load(); n != 1 {
		t.Errorf("origin saw %d requests, want only the allowed websocket upgrade", n)
	}
}

// TestInspectWhenAnyMatchIsInspected: a passthrough wildcard written
// before an entry with L7 rules does not open its host.
func TestInspectWhenAnyMatchIsInspected(t *testing.T) {
	o := startOrigin(t, "api.allowed.test", false, http.HandlerFunc(hello))
	pol := Policy{Allow: []Rule{{Host: "*.allowed.test", Ports: []int{o.port}}, {Host: "api.allowed.test", Ports: []int{o.port}, Access: l7.ReadOnly}},
		AllowPrivate: []Rule{{Host: "127.0.0.1/32"}}, Hosts: map[string]string{"api.allowed.test": "127.0.0.1"}}
	ca, err := NewCA(pol)
	if err != nil {
		t.Fatal(err)
	}
	tp := startProxy(t, Config{Policy: pol, CA: ca, UpstreamRoots: o.roots})
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	conn, br := tlsThrough(t, tp.addr, "api.allowed.test", o.port, roots)
	defer conn.Close()
	io.WriteString(conn, "DELETE /x HTTP/1.1\r\nHost: api.allowed.test:"+itoa(o.port)+"\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 403 || o.hits.Load() != 0 {
		t.Fatalf("DELETE with a passthrough wildcard first: %d, origin hits %d; want 403 and none", resp.StatusCode, o.hits.Load())
	}
}

// TestInspectResumes: a client's second connection resumes its TLS
// session with the proxy (one ticket key per proxy).
func TestInspectResumes(t *testing.T) {
	o := startOrigin(t, "api.allowed.test", false, http.HandlerFunc(hello))
	tp, _ := inspectingProxy(t, o, Rule{Host: "api.allowed.test", Inspect: true}, false)
	roots := x509.NewCertPool()
	roots.AddCert(tp.cfg.CA.Certificate())
	cache := tls.NewLRUClientSessionCache(4)
	var resumed []bool
	for range 2 {
		c := dialProxy(t, tp.addr)
		hp := "api.allowed.test:" + itoa(o.port)
		if resp, _ := c.roundTrip(t, "CONNECT "+hp+" HTTP/1.1\r\nHost: "+hp+"\r\n\r\n", "CONNECT"); resp.StatusCode != 200 {
			t.Fatal(resp.Status)
		}
		tc := tls.Client(c.Conn, &tls.Config{ServerName: "api.allowed.test", RootCAs: roots, ClientSessionCache: cache})
		io.WriteString(tc, "GET / HTTP/1.1\r\nHost: "+hp+"\r\n\r\n") // TLS 1.3 tickets come after the handshake
		if _, err := http.ReadResponse(bufio.NewReader(tc), nil); err != nil {
			t.Fatal(err)
		}
		resumed = append(resumed, tc.ConnectionState().DidResume)
		tc.Close()
	}
	if resumed[0] || !resumed[1] {
		t.Errorf("resumed = %v, want the second connection resumed", resumed)
	}
}

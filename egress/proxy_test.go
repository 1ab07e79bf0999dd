package egress

import (
	"bufio"
	"crypto/tls"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// basicPolicy allows api.allowed.test (and b.allowed.test) on the upstream
// ports, mapped to 127.0.0.2 which AllowPrivate covers; evil.test is mapped
// too (to an upstream that must never see traffic).
func basicPolicy(ports ...int) Policy {
	return Policy{
		Allow: []Rule{
			{Host: "api.allowed.test", Ports: ports},
			{Host: "*.allowed.test", Ports: ports},
		},
		AllowPrivate: []Rule{{Host: "127.0.0.2/32"}},
		Hosts: map[string]string{
			"api.allowed.test": "127.0.0.2",
			"b.allowed.test":   "127.0.0.2",
			"evil.test":        "127.0.0.3",
		},
	}
}

func TestAbsoluteFormAllowedAndDecision(t *testing.T) {
	up := startUpstream(t, "127.0.0.2", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Proxy-Authorization") != "" || r.Header.Get("Proxy-Connection") != "" || r.Header.Get("X-Hop") != "" {
			t.Errorf("hop-by-hop header forwarded: %v", r.Header)
		}
		if r.RequestURI != "/v1/x?q=secret" {
			t.Errorf("upstream request URI %q", r.RequestURI)
		}
		hello(w, r)
	}))
	tp := startProxy(t, Config{Policy: basicPolicy(up.port)})
	c := dialProxy(t, tp.addr)
	url := "http://api.allowed.test:" + itoa(up.port) + "/v1/x?q=secret"
	resp, body := c.roundTrip(t, "GET "+url+" HTTP/1.1\r\nHost: API.allowed.test.:"+itoa(up.port)+
		"\r\nProxy-Connection: keep-alive\r\nConnection: X-Hop\r\nX-Hop: 1\r\n\r\n", "GET")
	if resp.StatusCode != 200 || !strings.Contains(body, "hello from api.allowed.test:") {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	d := tp.log.waitN(t, 1)[0]
	want := Decision{Allowed: true, Method: "GET", Host: "api.allowed.test", Port: up.port,
		Addr: netip.MustParseAddrPort("127.0.0.2:" + itoa(up.port)), Rule: "allow[0] api.allowed.test:" + itoa(up.port),
		URL: "http://api.allowed.test:" + itoa(up.port) + "/v1/x", Status: 200}
	d.Time = time.Time{}
	if d != want {
		t.Fatalf("decision\n got %+v\nwant %+v", d, want)
	}
	if len(tp.res.seen()) != 0 {
		t.Fatalf("resolver called for a Hosts name: %v", tp.res.seen())
	}
}

// P19: the resolver is asked only about allowed names.
func TestP19ResolverOnlyForAllowedNames(t *testing.T) {
	up := startUpstream(t, "127.0.0.2", http.HandlerFunc(hello))
	pol := basicPolicy(up.port)
	pol.Allow = append(pol.Allow, Rule{Host: "dns.allowed.test", Ports: []int{up.port}}, Rule{Host: "**.allowed.test", Ports: []int{up.port, 443}})
	pol.Deny = []Rule{{Host: "*.blocked.allowed.test"}}
	delete(pol.Hosts, "b.allowed.test")
	tp := startProxy(t, Config{Policy: pol})
	tp.res.m["dns.allowed.test"] = []netip.Addr{netip.MustParseAddr("127.0.0.2")}
	for _, target := range []string{"secretdata.exfil.test", "b.exfil.test", "x.blocked.allowed.test", "evil.test"} {
		c := dialProxy(t, tp.addr)
		resp, _ := c.get(t, "http://"+target+":"+itoa(up.port)+"/", "")
		if resp.StatusCode != 403 {
			t.Fatalf("%s: status %d", target, resp.StatusCode)
		}
		c = dialProxy(t, tp.addr)
		resp, _ = c.roundTrip(t, "CONNECT "+target+":443 HTTP/1.1\r\n\r\n", "CONNECT")
		if resp.StatusCode != 403 {
			t.Fatalf("CONNECT %s: status %d", target, resp.StatusCode)
		}
	}
	if got := tp.res.seen(); len(got) != 0 {
		t.Fatalf("resolver was asked about denied names: %v", got)
	}
	c := dialProxy(t, tp.addr)
	resp, _ := c.get(t, "http://dns.allowed.test:"+itoa(up.port)+"/", "")
	if resp.StatusCode != 200 {
		t.Fatalf("allowed resolved name: %d", resp.StatusCode)
	}
	if got := tp.res.seen(); len(got) != 1 || got[0] != "dns.allowed.test" {
		t.Fatalf("lookups %v", got)
	}
	// An allowed name the resolver cannot resolve: 502, still no other lookup.
	c = dialProxy(t, tp.addr)
	tp.Proxy.pol.allow = append(tp.Proxy.pol.allow, compiledRule{kind: kindName, name: "nx.allowed2.test", text: "nx.allowed2.test"})
	resp, body := c.get(t, "http://nx.allowed2.test/", "")
	if resp.StatusCode != 502 || !strings.Contains(body, "cannot resolve") {
		t.Fatalf("unresolvable: %d %s", resp.StatusCode, body)
	}
}

// P20: request forms.
func TestP20RequestForms(t *testing.T) {
	up := startUpstream(t, "127.0.0.2", http.HandlerFunc(hello))
	evil := startUpstream(t, "127.0.0.3", http.HandlerFunc(hello))
	pol := basicPolicy(up.port)
	pol.AllowPrivate = append(pol.AllowPrivate, Rule{Host: "127.0.0.3/32"}) // only policy keeps evil out
	tp := startProxy(t, Config{Policy: pol})
	p := itoa(up.port)
	ep := itoa(evil.port)
	cases := []struct {
		name, raw string
		status    int
		reason    string
	}{
		{"denied absolute-form", "GET http://evil.test:" + ep + "/ HTTP/1.1\r\nHost: evil.test:" + ep + "\r\n\r\n", 403, "no allow rule matches"},
		{"denied absolute-form by IP", "GET http://127.0.0.3:" + ep + "/ HTTP/1.1\r\n\r\n", 403, "no allow rule matches"},
		{"Host differs from target", "GET http://api.allowed.test:" + p + "/ HTTP/1.1\r\nHost: evil.test:" + ep + "\r\n\r\n", 400, "Host header does not match"},
		{"Host differs in port", "GET http://api.allowed.test:" + p + "/ HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n", 400, "Host header does not match"},
		{"Host differs on CONNECT", "CONNECT api.allowed.test:" + p + " HTTP/1.1\r\nHost: evil.test:" + ep + "\r\n\r\n", 400, "Host header does not match"},
		{"userinfo trick", "GET http://api.allowed.test@evil.test:" + ep + "/ HTTP/1.1\r\n\r\n", 400, "userinfo"},
		{"userinfo with port trick", "GET http://api.allowed.test:" + p + "@evil.test:" + ep + "/ HTTP/1.1\r\n\r\n", 400, "userinfo"},
		{"origin-form", "GET / HTTP/1.1\r\nHost: api.allowed.test:" + p + "\r\n\r\n", 400, "origin-form"},
		{"https absolute-form", "GET https://api.allowed.test/ HTTP/1.1\r\n\r\n", 400, "use CONNECT"},
		{"HTTP/1.0 without Host to evil", "GET http://evil.test:" + ep + "/ HTTP/1.0\r\n\r\n", 403, "no allow rule matches"},
		{"two Host headers", "GET http://api.allowed.test:" + p + "/ HTTP/1.1\r\nHost: api.allowed.test:" + p + "\r\nHost: evil.test\r\n\r\n", 400, "multiple Host"},
		{"CL and TE", "POST http://api.allowed.test:" + p + "/ HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400, "both Transfer-Encoding"},
		{"obs-fold", "GET http://api.allowed.test:" + p + "/ HTTP/1.1\r\nX: a\r\n b\r\n\r\n", 400, "folding"},
		{"backslash", "GET http://evil.test\\@api.allowed.test:" + p + "/ HTTP/1.1\r\n\r\n", 400, ""},
		{"percent host", "GET http://%65vil.test/ HTTP/1.1\r\n\r\n", 400, "percent"},
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\n", 505, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dialProxy(t, tp.addr)
			resp, body := c.roundTrip(t, tc.raw, "GET")
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if resp.Header.Get("Content-Type") != "application/json" || !resp.Close {
				t.Fatalf("denial headers %v close=%v", resp.Header, resp.Close)
			}
			db := decodeDenial(t, body)
			if !strings.Contains(db.Reason, tc.reason) {
				t.Fatalf("reason %q, want %q", db.Reason, tc.reason)
			}
			expectClosed(t, c, c.br)
		})
	}
	if evil.accepts.Load() != 0 {
		t.Fatalf("evil upstream accepted %d connections", evil.accepts.Load())
	}
	// HTTP/1.0 without Host is decided on the target and served.
	c := dialProxy(t, tp.addr)
	resp, body := c.roundTrip(t, "GET http://api.allowed.test:"+p+"/old HTTP/1.0\r\n\r\n", "GET")
	if resp.StatusCode != 200 || !strings.Contains(body, "/old") {
		t.Fatalf("HTTP/1.0: %d %q", resp.StatusCode, body)
	}
	// The denial body explains itself.
	c = dialProxy(t, tp.addr)
	_, body = c.get(t, "http://evil.test:"+ep+"/", "")
	db := decodeDenial(t, body)
	want := denialBody{Error: "egress denied", Reason: "no allow rule matches", Host: "evil.test", Port: evil.port,
		Hint: "network.allow: [{host: evil.test, ports: [" + ep + "]}]"}
	if db != want {
		t.Fatalf("denial\n got %+v\nwant %+v", db, want)
	}
}

// P22: allowed names that resolve to internal addresses.
func TestP22RebindingAndInternalTargets(t *testing.T) {
	local := startUpstream(t, "127.0.0.1", http.HandlerFunc(hello))
	lp := itoa(local.port)
	targets := map[string]string{
		"loop.allowed.test":   "127.0.0.1",
		"meta.allowed.test":   "169.254.169.254",
		"ten.allowed.test":    "10.0.0.1",
		"v6loop.allowed.test": "::1",
		"mapped.allowed.test": "::ffff:127.0.0.1",
		"nat64.allowed.test":  "64:ff9b::7f00:1",
		"6to4.allowed.test":   "2002:a00:1::1",
	}
	pol := Policy{Allow: []Rule{{Host: "*.allowed.test", Ports: []int{local.port, 80, 443}}}, Hosts: targets}
	tp := startProxy(t, Config{Policy: pol})
	for name, ip := range targets {
		for _, mode := range []string{"GET", "CONNECT"} {
			c := dialProxy(t, tp.addr)
			var resp *http.Response
			var body string
			if mode == "GET" {
				resp, body = c.get(t, "http://"+name+":"+lp+"/", "")
			} else {
				resp, body = c.roundTrip(t, "CONNECT "+name+":"+lp+" HTTP/1.1\r\n\r\n", "CONNECT")
			}
			if resp.StatusCode != 403 {
				t.Fatalf("%s %s (%s): status %d", mode, name, ip, resp.StatusCode)
			}
			db := decodeDenial(t, body)
			if !strings.Contains(db.Reason, "resolved to a blocked address") || !strings.HasPrefix(db.Hint, "network.allow_private:") {
				t.Fatalf("%s %s: %+v", mode, name, db)
			}
		}
	}
	if local.accepts.Load() != 0 {
		t.Fatal("internal upstream was reached")
	}
	// The explicit AllowPrivate entry lets exactly that address:port through.
	pol.AllowPrivate = []Rule{{Host: "127.0.0.1/32", Ports: []int{local.port}}}
	tp2 := startProxy(t, Config{Policy: pol})
	c := dialProxy(t, tp2.addr)
	resp, body := c.get(t, "http://loop.allowed.test:"+lp+"/", "")
	if resp.StatusCode != 200 {
		t.Fatalf("allow_private: %d %s", resp.StatusCode, body)
	}
	c = dialProxy(t, tp2.addr) // ... and not the other port
	resp, _ = c.get(t, "http://loop.allowed.test/", "")
	if resp.StatusCode != 403 {
		t.Fatalf("allow_private other port: %d", resp.StatusCode)
	}
	c = dialProxy(t, tp2.addr)
	resp, _ = c.get(t, "http://mapped.allowed.test:"+lp+"/", "")
	if resp.StatusCode != 200 {
		t.Fatalf("allow_private via mapped address: %d", resp.StatusCode)
	}
}

// P23: IP literal spellings as targets.
func TestP23IPLiteralSpellings(t *testing.T) {
	pol := Policy{Allow: []Rule{{Host: "0.0.0.0/0", Ports: []int{80, 443}}, {Host: "::/0", Ports: []int{80, 443}}}}
	tp := startProxy(t, Config{Policy: pol})
	for _, h := range []string{"127.1", "2130706433", "0x7f000001", "0177.0.0.1", "127.000.0.1", "[::ffff:7f00:1]",
		"0.0.0.0", "[::]", "127.0.0.1", "[::1]", "[::ffff:127.0.0.1]", "169.254.169.254", "[fe80::1%25eth0]", "::1", "0", "127.0.0.1."} {
		for _, mode := range []string{"GET", "CONNECT"} {
			c := dialProxy(t, tp.addr)
			var resp *http.Response
			var body string
			if mode == "GET" {
				resp, body = c.get(t, "http://"+h+"/", "")
			} else {
				resp, body = c.roundTrip(t, "CONNECT "+h+":443 HTTP/1.1\r\n\r\n", "CONNECT")
			}
			if resp.StatusCode != 403 && resp.StatusCode != 400 {
				t.Fatalf("%s %s: status %d %s", mode, h, resp.StatusCode, body)
			}
		}
	}
	if got := tp.res.seen(); len(got) != 0 {
		t.Fatalf("resolver called: %v", got)
	}
	ds := tp.log.all()
	for _, d := range ds {
		if d.Allowed || d.Addr.IsValid() {
			t.Fatalf("decision %+v", d)
		}
	}
}

// clientHello captures the ClientHello a crypto/tls client sends for sni.
func clientHello(t *testing.T, sni string) []byte {
	t.Helper()
	a, b := net.Pipe()
	go func() {
		tls.Client(a, &tls.Config{ServerName: sni, InsecureSkipVerify: true}).Handshake()
		a.Close()
	}()
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(b, hdr); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(b, body); err != nil {
		t.Fatal(err)
	}
	b.Close()
	return append(hdr, body...)
}

// P24: the SNI must match the CONNECT host.
func TestP24SNIMustMatchConnectHost(t *testing.T) {
	up := startUpstream(t, "127.0.0.2", http.HandlerFunc(hello), "api.allowed.test")
	p := itoa(up.port)
	pol := basicPolicy(up.port, 443)
	pol.Allow = append(pol.Allow, Rule{Host: "127.0.0.2", Ports: []int{up.port}})
	tp := startProxy(t, Config{Policy: pol})
	try := func(target string, first []byte) {
		t.Helper()
		c := dialProxy(t, tp.addr)
		resp, _ := c.roundTrip(t, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n", "CONNECT")
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT %s: %d", target, resp.StatusCode)
		}
		c.Write(first)
		expectClosed(t, c, c.br)
	}
	n := len(tp.log.all())
	try("api.allowed.test:"+p, clientHello(t, "evil.test"))
	try("api.allowed.test:"+p, clientHello(t, ""))
	try("api.allowed.test:443", clientHello(t, "evil.test"))
	try("api.allowed.test:443", []byte("GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n"))
	try("127.0.0.2:"+p, clientHello(t, "evil.test"))
	if up.accepts.Load() != 0 {
		t.Fatalf("upstream accepted %d connections", up.accepts.Load())
	}
	ds := tp.log.waitN(t, n+5)[n:]
	wantReasons := []string{
		"SNI evil.test does not match CONNECT host api.allowed.test",
		"TLS ClientHello without SNI for CONNECT host api.allowed.test",
		"SNI evil.test does not match CONNECT host api.allowed.test",
		"non-TLS traffic to port 443",
		"SNI evil.test does not match CONNECT host 127.0.0.2",
	}
	for i, d := range ds {
		if d.Allowed || d.Status != 200 || d.Reason != wantReasons[i] || d.Addr.IsValid() {
			t.Errorf("decision %d: %+v", i, d)
		}
	}
	if ds[0].Hint != "network.allow: [{host: evil.test, ports: ["+p+"]}]" {
		t.Errorf("hint %q", ds[0].Hint)
	}

	// Matching SNI: a real TLS client verifies the upstream and gets a response.
	roots := certPool(selfSigned(t, "api.allowed.test"))
	for _, target := range []string{"api.allowed.test:" + p, "API.Allowed.Test.:" + p} {
		c := dialProxy(t, tp.addr)
		resp, _ := c.roundTrip(t, "CONNECT "+target+" HTTP/1.1\r\n\r\n", "CONNECT")
		if resp.StatusCode != 200 {
			t.Fatal(resp.Status)
		}
		tc := tls.Client(c, &tls.Config{ServerName: "API.allowed.test", RootCAs: roots})
		if err := tc.Handshake(); err != nil {
			t.Fatalf("handshake through the tunnel: %v", err)
		}
		io.WriteString(tc, "GET /tls HTTP/1.1\r\nHost: api.allowed.test\r\nConnection: close\r\n\r\n")
		b, _ := io.ReadAll(tc)
		if !strings.Contains(string(b), "hello from api.allowed.test /tls") {
			t.Fatalf("TLS response %q", b)
		}
	}
	// IP-literal CONNECT without SNI is allowed.
	c := dialProxy(t, tp.addr)
	resp, _ := c.roundTrip(t, "CONNECT 127.0.0.2:"+p+" HTTP/1.1\r\n\r\n", "CONNECT")
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("IP-literal handshake without SNI: %v", err)
	}
	tc.Close()
	ds = tp.log.all()
	last := ds[len(ds)-1]
	if !last.Allowed || last.Status != 200 || last.Addr.String() != "127.0.0.2:"+p || last.Rule != "allow[2] 127.0.0.2:"+p {
		t.Fatalf("allowed tunnel decision %+v", last)
	}
}

func TestKeepAliveTwoOrigins(t *testing.T) {
	a := startUpstream(t, "127.0.0.2", http.HandlerFunc(hello))
	b := startUpstream(t, "127.0.0.2", http.HandlerFunc(hello))
	tp := startProxy(t, Config{Policy: basicPolicy(a.port, b.port)})
	c := dialProxy(t, tp.addr)
	urls := []string{
		"http://api.allowed.test:" + itoa(a.port) + "/one",
		"http://b.allowed.test:" + itoa(b.port) + "/two",
		"http://b.allowed.test:" + itoa(b.port) + "/three",
		"http://evil.test/four",
	}
	for i, u := range urls {
		resp, body := c.get(t, u, "")
		if i == 3 {
			if resp.StatusCode != 403 {
				t.Fatalf("%s: %d", u, resp.StatusCode)
			}
			break
		}
		if resp.StatusCode != 200 || !strings.HasSuffix(body, u[strings.LastIndex(u, "/"):]) || resp.Close {
			t.Fatalf("%s: %d %q close=%v", u, resp.StatusCode, body, resp.Close)
		}
	}
	ds := tp.log.waitN(t, 4)
	if ds[0].Host != "api.allowed.test" || ds[1].Host != "b.allowed.test" || !ds[2].Allowed || ds[3].Allowed {
		t.Fatalf("decisions %+v", ds)
	}
	if a.accepts.Load() != 1 || b.accepts.Load() != 1 {
		t.Fatalf("upstream connections a=%d b=%d (want one each, reused)", a.accepts.Load(), b.accepts.Load())
	}
}

func TestRequestBodies(t *testing.T) {
	up := startUpstream(t, "127.0.0.2", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-TE", strings.Join(r.TransferEncoding, ","))
		w.Write([]byte("got:" + string(b)))
	}))
	tp := startProxy(t, Config{Policy: basicPolicy(up.port)})
	c := dialProxy(t, tp.addr)
	u := "http://api.allowed.test:" + itoa(up.port) + "/post"
	resp, body := c.roundTrip(t, "POST "+u+" HTTP/1.1\r\nHost: api.allowed.test:"+itoa(up.port)+
		"\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n", "POST")
	if resp.StatusCode != 200 || body != "got:hello world" || resp.Header.Get("X-TE") != "chunked" {
		t.Fatalf("chunked: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	resp, body = c.roundTrip(t, "POST "+u+" HTTP/1.1\r\nContent-Length: 4\r\n\r\nabcd", "POST")
	if resp.StatusCode != 200 || body != "got:abcd" {
		t.Fatalf("content-length: %d %q", resp.StatusCode, body)
	}
	resp, body = c.roundTrip(t, "PUT "+u+" HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n", "PUT")
	if resp.StatusCode != 100 {
		t.Fatalf("expect: %d", resp.StatusCode)
	}
	resp, body = c.roundTrip(t, "xy", "PUT")
	if resp.StatusCode != 200 || body != "got:xy" {
		t.Fatalf("after 100-continue: %d %q", resp.StatusCode, body)
	}
	// Streaming chunked response through a keep-alive connection.
	big := strings.Repeat("z", 200000)
	up2 := startUpstream(t, "127.0.0.2", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, big[:100000])
		w.(http.Flusher).Flush()
		io.WriteString(w, big[100000:])
	}))
	tp2 := startProxy(t, Config{Policy: basicPolicy(up2.port)})
	c = dialProxy(t, tp2.addr)
	for i := 0; i < 2; i++ {
		resp, body = c.get(t, "http://api.allowed.test:"+itoa(up2.port)+"/big", "")
		if resp.StatusCode != 200 || body != big || resp.Close {
			t.Fatalf("chunked response: %d len %d", resp.StatusCode, len(body))
		}
	}
}

// wsAccept computes Sec-WebSocket-Accept.
func wsAccept(key string) string {
	h := sha1Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(h[:])
}

func TestWebSocketUpgrade(t *testing.T) {
	up := startUpstream(t, "127.0.0.2", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") || !strings.Contains(strings.ToLower(r.Header.Get("Connection")), "upgrade") {
			http.Error(w, "not an upgrade", 400)
			return
		}
		conn, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " +
			wsAccept(r.Header.Get("Sec-WebSocket-Key")) + "\r\n\r\n")
		brw.Flush()
		// Echo frames: unmask client frames and send them back unmasked.
		for {
			op, payload, err := readFrame(brw.Reader)
			if err != nil {
				return
			}
			conn.Write(frame(op, payload, false))
		}
	}))
	tp := startProxy(t, Config{Policy: basicPolicy(up.port)})
	c := dialProxy(t, tp.addr)
	key := "dGhlIHNhbXBsZSBub25jZQ=="
	host := "api.allowed.test:" + itoa(up.port)
	resp, _ := c.roundTrip(t, "GET http://"+host+"/ws HTTP/1.1\r\nHost: "+host+"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: "+key+"\r\nSec-WebSocket-Version: 13\r\n\r\n", "CONNECT")
	if resp.StatusCode != 101 || resp.Header.Get("Sec-WebSocket-Accept") != wsAccept(key) {
		t.Fatalf("upgrade: %d %v", resp.StatusCode, resp.Header)
	}
	for _, msg := range []string{"ping", strings.Repeat("x", 70000)} {
		c.Write(frame(1, []byte(msg), true))
		op, payload, err := readFrame(c.br)
		if err != nil || op != 1 || string(payload) != msg {
			t.Fatalf("echo: op %d len %d err %v", op, len(payload), err)
		}
	}
	ds := tp.log.waitN(t, 1)
	if ds[0].Status != 101 || !ds[0].Allowed {
		t.Fatalf("decision %+v", ds[0])
	}
}

func TestCredential(t *testing.T) {
	up := startUpstream(t, "127.0.0.2", http.HandlerFunc(hello))
	tp := startProxy(t, Config{Policy: basicPolicy(up.port), Credential: "s3cret"})
	u := "http://api.allowed.test:" + itoa(up.port) + "/"
	good := base64.StdEncoding.EncodeToString([]byte("corral:s3cret"))
	bad := base64.StdEncoding.EncodeToString([]byte("corral:wrong"))
	for _, hdr := range []string{"", "Proxy-Authorization: Basic " + bad + "\r\n", "Proxy-Authorization: Bearer " + good + "\r\n"} {
		for _, req := range []string{"GET " + u + " HTTP/1.1\r\n", "CONNECT api.allowed.test:" + itoa(up.port) + " HTTP/1.1\r\n"} {
			c := dialProxy(t, tp.addr)
			resp, body := c.roundTrip(t, req+hdr+"\r\n", "GET")
			if resp.StatusCode != 407 || resp.Header.Get("Proxy-Authenticate") == "" {
				t.Fatalf("%q %q: %d %s", req, hdr, resp.StatusCode, body)
			}
		}
	}
	c := dialProxy(t, tp.addr)
	resp, _ := c.roundTrip(t, "GET "+u+" HTTP/1.1\r\nProxy-Authorization: basic "+good+"\r\n\r\n", "GET")
	if resp.StatusCode != 200 {
		t.Fatalf("good credential: %d", resp.StatusCode)
	}
	// The standard library client sends the credential from the proxy URL.
	tr := &http.Transport{Proxy: http.ProxyURL(mustURL("http://corral:s3cret@" + tp.addr)), DisableKeepAlives: true}
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	r2, err := hc.Get(u)
	if err != nil || r2.StatusCode != 200 {
		t.Fatalf("net/http client via proxy: %v %v", err, r2)
	}
	r2.Body.Close()
	ds := tp.log.all()
	if ds[0].Status != 407 || ds[0].Allowed || ds[0].Reason != "missing or wrong proxy credential" {
		t.Fatalf("decision %+v", ds[0])
	}
}

func TestDenyBeatsAllowAndWildcards(t *testing.T) {
	up := startUpstream(t, "127.0.0.2", http.HandlerFunc(hello))
	pol := Policy{
		Allow:        []Rule{{Host: "*.allowed.test", Ports: []int{up.port}}, {Host: "**.deep.test", Ports: []int{up.port}}},
		Deny:         []Rule{{Host: "bad.allowed.test"}, {Host: "127.0.0.0/8", Ports: []int{1}}},
		AllowPrivate: []Rule{{Host: "127.0.0.0/8"}},
		Hosts: map[string]string{"ok.allowed.test": "127.0.0.2", "bad.allowed.test": "127.0.0.2", "allowed.test": "127.0.0.2", "a.b.allowed.test": "127.0.0.2",
			"a.deep.test": "127.0.0.2", "a.b.deep.test": "127.0.0.2", "deep.test": "127.0.0.2"},
	}
	tp := startProxy(t, Config{Policy: pol})
	for host, want := range map[string]int{"ok.allowed.test": 200, "a.b.allowed.test": 403, "bad.allowed.test": 403, "allowed.test": 403, "xallowed.test": 403,
		"a.deep.test": 200, "a.b.deep.test": 200, "deep.test": 403} {
		c := dialProxy(t, tp.addr)
		resp, body := c.get(t, "http://"+host+":"+itoa(up.port)+"/", "")
		if resp.StatusCode != want {
			t.Fatalf("%s: %d, want %d: %s", host, resp.StatusCode, want, body)
		}
		if host == "bad.allowed.test" {
			db := decodeDenial(t, body)
			if db.Rule != "deny[0] bad.allowed.test:"+itoa(up.port) || db.Reason != "denied by deny[0]" {
				t.Fatalf("%+v", db)
			}
		}
	}
}

func TestLimitsAndTimeouts(t *testing.T) {
	tp := startProxy(t, Config{Policy: basicPolicy(80), HeaderTimeout: 200 * time.Millisecond, IdleTimeout: 300 * time.Millisecond, MaxHeaderBytes: 1024})
	c := dialProxy(t, tp.addr)
	resp, _ := c.roundTrip(t, "GET http://api.allowed.test/ HTTP/1.1\r\nX: "+strings.Repeat("a", 2000)+"\r\n\r\n", "GET")
	if resp.StatusCode != 431 {
		t.Fatalf("big header: %d", resp.StatusCode)
	}
	// Slowloris: a partial head is cut off after HeaderTimeout.
	c = dialProxy(t, tp.addr)
	io.WriteString(c, "GET http://api.allowed.test/ HTTP/1.1\r\n")
	start := time.Now()
	expectClosed(t, c, nil)
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("header timeout took %v", el)
	}
	// An idle connection is closed after IdleTimeout.
	c = dialProxy(t, tp.addr)
	expectClosed(t, c, nil)
}

func TestIdleTunnelClosed(t *testing.T) {
	echo := startEcho(t, "127.0.0.2")
	pol := basicPolicy(echo.port)
	tp := startProxy(t, Config{Policy: pol, IdleTimeout: 300 * time.Millisecond})
	c := dialProxy(t, tp.addr)
	resp, _ := c.roundTrip(t, "CONNECT api.allowed.test:"+itoa(echo.port)+" HTTP/1.1\r\n\r\n", "CONNECT")
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	// Activity keeps it alive past the idle timeout...
	for i := 0; i < 6; i++ {
		io.WriteString(c, "ping")
		b := make([]byte, 4)
		if _, err := io.ReadFull(c.br, b); err != nil || string(b) != "ping" {
			t.Fatalf("echo %d: %q %v", i, b, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// ... and silence closes it.
	start := time.Now()
	expectClosed(t, c, c.br)
	if el := time.Since(start); el < 150*time.Millisecond || el > 2*time.Second {
		t.Fatalf("idle close after %v", el)
	}
}

func TestCloseTearsDown(t *testing.T) {
	echo := startEcho(t, "127.0.0.2")
	p, err := New(Config{Policy: basicPolicy(echo.port)})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	served := make(chan error, 1)
	go func() { served <- p.Serve(l) }()
	c := dialProxy(t, l.Addr().String())
	resp, _ := c.roundTrip(t, "CONNECT api.allowed.test:"+itoa(echo.port)+" HTTP/1.1\r\n\r\n", "CONNECT")
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	io.WriteString(c, "x")
	c.br.ReadByte()
	idle := dialProxy(t, l.Addr().String())
	time.Sleep(20 * time.Millisecond)
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung")
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	expectClosed(t, c, c.br)
	expectClosed(t, idle, nil)
	if err := p.Serve(l); err != nil {
		t.Fatalf("Serve after Close: %v", err)
	}
}

type echoSrv struct {
	port    int
	accepts *int64
}

// startEcho starts a raw TCP echo server on ip.
func startEcho(t testing.TB, ip string) echoSrv {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	conns := make(chan net.Conn, 64)
	go func() {
		defer close(done)
		var open []net.Conn
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range open {
					c.Close()
				}
				return
			}
			open = append(open, c)
			go func() {
				// Plain copy (no splice pipes) so fd accounting stays exact.
				io.CopyBuffer(struct{ io.Writer }{c}, struct{ io.Reader }{c}, make([]byte, 4096))
				c.Close()
			}()
		}
	}()
	_ = conns
	t.Cleanup(func() { ln.Close(); <-done })
	return echoSrv{port: ln.Addr().(*net.TCPAddr).Port}
}

var _ = bufio.NewReader

// A denied internal target's hint names both rules it needs: one denial
// tells the user everything.
func TestDenialHintNamesAllowPrivate(t *testing.T) {
	tp := startProxy(t, Config{Policy: basicPolicy(1)})
	c := dialProxy(t, tp.addr)
	_, body := c.get(t, "http://127.0.0.9:8766/", "")
	db := decodeDenial(t, body)
	want := "network.allow: [{host: 127.0.0.9, ports: [8766]}] and network.allow_private: [{host: 127.0.0.9/32, ports: [8766]}]"
	if db.Hint != want {
		t.Fatalf("hint\n got %q\nwant %q", db.Hint, want)
	}
}

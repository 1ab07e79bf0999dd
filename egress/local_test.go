package egress

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// A denial carries "consent" only where the hint function gives one,
// only for targets no rule matches (a deny rule's refusal is not asked
// about), for CONNECT as for plain HTTP; the rest of the body is as
// before.
func TestDenialConsentHint(t *testing.T) {
	var asked atomic.Int64
	hint := func(host string, port int) string {
		asked.Add(1)
		if host == "ask.test" || host == "bad.ask.test" {
			return HostRequestHint("http://127.0.0.1:3129", host, port)
		}
		return ""
	}
	tp := startProxy(t, Config{ConsentHint: hint, Policy: Policy{
		Allow: []Rule{{Host: "*.ask.test"}},
		Deny:  []Rule{{Host: "bad.ask.test"}},
	}})
	body := func(raw string) (string, denialBody) {
		c := dialProxy(t, tp.addr)
		resp, b := c.roundTrip(t, raw, "GET")
		if resp.StatusCode != 403 {
			t.Fatalf("%q: %d %s", raw, resp.StatusCode, b)
		}
		return b, decodeDenial(t, b)
	}

	raw, d := body("GET http://ask.test/ HTTP/1.1\r\nHost: ask.test\r\n\r\n")
	want := `POST http://127.0.0.1:3129/v1/requests {"kind":"host","target":"ask.test:80","reason":"..."}`
	if d.Consent != want {
		t.Fatalf("consent %q, want %q (body %s)", d.Consent, want, raw)
	}
	if d.Hint != "network.allow: [{host: ask.test, ports: [80]}]" || d.Reason != "no allow rule matches" {
		t.Errorf("the rest of the denial changed: %+v", d)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(raw), &m); err != nil || m["consent"] != want {
		t.Fatalf("field consent in %s: %v", raw, err)
	}

	_, d = body("CONNECT ask.test:443 HTTP/1.1\r\nHost: ask.test:443\r\n\r\n")
	if !strings.Contains(d.Consent, `"target":"ask.test:443"`) {
		t.Errorf("CONNECT denial consent %q", d.Consent)
	}

	raw, _ = body("GET http://other.test/ HTTP/1.1\r\nHost: other.test\r\n\r\n")
	if strings.Contains(raw, "consent") {
		t.Errorf("consent field where the hint gave none: %s", raw)
	}
	n := asked.Load()
	raw, d = body("GET http://bad.ask.test/ HTTP/1.1\r\nHost: bad.ask.test\r\n\r\n")
	if strings.Contains(raw, "consent") || asked.Load() != n || !strings.HasPrefix(d.Reason, "denied by deny[0]") {
		t.Errorf("a deny rule's refusal offers to ask (asked %d times): %s", asked.Load()-n, raw)
	}

	// Without ConsentHint: no field at all.
	plain := startProxy(t, Config{})
	c := dialProxy(t, plain.addr)
	if _, b := c.get(t, "http://ask.test/", "ask.test"); strings.Contains(b, "consent") {
		t.Errorf("consent without ConsentHint: %s", b)
	}
}

func TestHostRequestHintIPv6(t *testing.T) {
	got := HostRequestHint("http://corral.local/", "2001:db8::1", 443)
	want := `POST http://corral.local/v1/requests {"kind":"host","target":"[2001:db8::1]:443","reason":"..."}`
	if got != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
}

// localAPI records what Config.Local saw.
type localAPI struct {
	calls   atomic.Int64
	last    atomic.Pointer[http.Request]
	lastRaw atomic.Pointer[string]
}

func (a *localAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.calls.Add(1)
	b, _ := io.ReadAll(r.Body)
	s := string(b)
	a.last.Store(r)
	a.lastRaw.Store(&s)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	json.NewEncoder(w).Encode(map[string]string{"method": r.Method, "path": r.URL.Path, "body": s, "host": r.Host})
}

// corral.local is served by Config.Local and never resolved or dialed,
// even when the rules allow it and pin it to a listening upstream; the
// connection stays usable for egress; CONNECT to it and other ports are
// refused; without Local it is refused too.
func TestLocalName(t *testing.T) {
	up := startUpstream(t, "127.0.0.1", http.HandlerFunc(hello))
	// A listener on the address the name would dial on port 80, when
	// one can be had (root, port free).
	at80 := &atomic.Int64{}
	have80 := false
	if ln, err := net.Listen("tcp", "127.0.0.2:80"); err == nil {
		have80 = true
		at80 = countAccepts(t, ln)
	} else {
		t.Logf("no listener on 127.0.0.2:80 (%v): the port-80 dial is checked by the resolver and the other upstream only", err)
	}
	pin := "127.0.0.1"
	if have80 {
		pin = "127.0.0.2"
	}
	api := &localAPI{}
	tp := startProxy(t, Config{Local: api, Credential: "s3cret", Policy: Policy{
		Allow:        []Rule{{Host: LocalName, Ports: []int{80, up.port}}, {Host: "up.test", Ports: []int{up.port}}},
		AllowPrivate: []Rule{{Host: "127.0.0.0/8"}},
		Hosts:        map[string]string{LocalName: pin, "up.test": "127.0.0.1"},
	}})
	auth := "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("corral:s3cret")) + "\r\n"

	c := dialProxy(t, tp.addr)
	req := `{"kind":"host","target":"api.example.com:443","reason":"docs"}`
	resp, body := c.roundTrip(t, "POST http://Corral.Local./v1/requests?x=1 HTTP/1.1\r\nHost: corral.local\r\n"+auth+
		"Content-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(req))+"\r\n\r\n"+req, "POST")
	if resp.StatusCode != 202 || resp.ContentLength != int64(len(body)) {
		t.Fatalf("local POST: %d (length %d) %s", resp.StatusCode, resp.ContentLength, body)
	}
	var got map[string]string
	if err := json.Unmarshal([]byte(body), &got); err != nil || got["body"] != req || got["path"] != "/v1/requests" || got["host"] != LocalName {
		t.Fatalf("local answer %s (%v)", body, err)
	}
	r := api.last.Load()
	if r.Header.Get("Proxy-Authorization") != "" || r.URL.RawQuery != "x=1" {
		t.Errorf("the handler saw %v, query %q", r.Header, r.URL.RawQuery)
	}
	if r.RemoteAddr != c.LocalAddr().String() {
		t.Errorf("RemoteAddr %q, want the client's %q", r.RemoteAddr, c.LocalAddr())
	}
	// Keep-alive: a chunked request to the API, then egress on the
	// same connection.
	resp, body = c.roundTrip(t, "PUT http://corral.local/v1/x HTTP/1.1\r\nHost: corral.local\r\n"+auth+
		"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\n", "PUT")
	if resp.StatusCode != 202 || !strings.Contains(body, `"body":"abcde"`) {
		t.Fatalf("chunked local PUT: %d %s", resp.StatusCode, body)
	}
	resp, body = c.roundTrip(t, "GET http://up.test:"+itoa(up.port)+"/after HTTP/1.1\r\nHost: up.test:"+itoa(up.port)+"\r\n"+auth+"\r\n", "GET")
	if resp.StatusCode != 200 || !strings.Contains(body, "/after") {
		t.Fatalf("egress after the local API on one connection: %d %s", resp.StatusCode, body)
	}

	calls := api.calls.Load()
	for _, raw := range []string{
		"CONNECT corral.local:443 HTTP/1.1\r\nHost: corral.local:443\r\n" + auth + "\r\n",
		"CONNECT corral.local:80 HTTP/1.1\r\nHost: corral.local:80\r\n" + auth + "\r\n",
		"GET http://corral.local:" + itoa(up.port) + "/ HTTP/1.1\r\nHost: corral.local:" + itoa(up.port) + "\r\n" + auth + "\r\n",
	} {
		c := dialProxy(t, tp.addr)
		method, _, _ := strings.Cut(raw, " ")
		resp, body := c.roundTrip(t, raw, method)
		d := decodeDenial(t, body)
		if resp.StatusCode != 403 || !strings.Contains(d.Reason, LocalName) {
			t.Errorf("%q: %d %s", raw, resp.StatusCode, body)
		}
		if method == "CONNECT" && !strings.Contains(d.Reason, "plain HTTP") {
			t.Errorf("CONNECT refusal does not say the API is plain HTTP: %s", d.Reason)
		}
	}
	// Without the credential: 407, as for any request.
	if resp, _ := dialProxy(t, tp.addr).get(t, "http://corral.local/", ""); resp.StatusCode != 407 {
		t.Errorf("local API without the proxy credential: %d", resp.StatusCode)
	}
	if api.calls.Load() != calls {
		t.Errorf("Local served %d refused requests", api.calls.Load()-calls)
	}
	if up.accepts.Load() != 1 || up.hits.Load() != 1 {
		t.Errorf("the upstream pinned for corral.local got %d connections, %d requests (want only up.test's 1)", up.accepts.Load(), up.hits.Load())
	}
	if at80.Load() != 0 {
		t.Errorf("the address corral.local would dial on port 80 got %d connections", at80.Load())
	}
	for _, name := range tp.res.seen() {
		if name == LocalName {
			t.Errorf("%s was resolved", LocalName)
		}
	}
	var served, refused int
	for _, d := range tp.log.waitN(t, 7) { // (logged once answered) 2 served, 4 refused, 1 egress
		if d.Host != LocalName {
			continue
		}
		if !d.Local || d.Addr.IsValid() {
			t.Errorf("decision for %s not marked local, or with an address: %+v", LocalName, d)
		}
		if d.Allowed {
			served++
			if d.Reason != "local consent API" || d.Status != 202 {
				t.Errorf("served decision %+v", d)
			}
		} else {
			refused++
		}
	}
	if served != 2 || refused != 4 { // refused: two CONNECTs, a port, a 407
		t.Errorf("decisions: %d served, %d refused; want 2, 4", served, refused)
	}

	// No Local: refused, never dialed.
	bare := startProxy(t, Config{Policy: Policy{Allow: []Rule{{Host: LocalName, Ports: []int{up.port}}}, AllowPrivate: []Rule{{Host: "127.0.0.0/8"}},
		Hosts: map[string]string{LocalName: "127.0.0.1"}}})
	resp, body = dialProxy(t, bare.addr).get(t, "http://corral.local/", "")
	if resp.StatusCode != 403 || !strings.Contains(body, "reserved") {
		t.Errorf("without Local: %d %s", resp.StatusCode, body)
	}
	resp, _ = dialProxy(t, bare.addr).get(t, "http://corral.local:"+itoa(up.port)+"/", "")
	if resp.StatusCode != 403 || up.accepts.Load() != 1 {
		t.Errorf("without Local, port %d: %d, upstream connections %d", up.port, resp.StatusCode, up.accepts.Load())
	}
}

// A handler that streams (Flush) is sent chunked, and one that panics
// ends the connection with a 500 instead of the supervisor.
func TestLocalStreamsAndSurvivesPanic(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			panic("boom")
		}
		io.WriteString(w, "first ")
		w.(http.Flusher).Flush()
		io.WriteString(w, "second")
	})
	tp := startProxy(t, Config{Local: h})
	c := dialProxy(t, tp.addr)
	resp, body := c.get(t, "http://corral.local/stream", "corral.local")
	if resp.StatusCode != 200 || body != "first second" || len(resp.TransferEncoding) == 0 {
		t.Fatalf("stream: %d %v %q", resp.StatusCode, resp.TransferEncoding, body)
	}
	resp, body = c.get(t, "http://corral.local/panic", "corral.local")
	if resp.StatusCode != 500 {
		t.Fatalf("panic: %d %s", resp.StatusCode, body)
	}
	expectClosed(t, c, c.br)
	if resp, _ := dialProxy(t, tp.addr).get(t, "http://corral.local/again", ""); resp.StatusCode != 200 {
		t.Errorf("after a panic: %d", resp.StatusCode)
	}
}

// Config.LocalAddr: a request through the proxy for the consent API's
// address inside the sandbox (or localhost at its port) is served by
// Local and never dialed; CONNECT to it is refused; without LocalAddr
// the address is decided by the rules as any other.
func TestLocalAddr(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dialed := countAccepts(t, ln)
	port := ln.Addr().(*net.TCPAddr).Port
	la := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port))
	// Rules that would let the proxy dial the address, were it egress.
	pol := Policy{Allow: []Rule{{Host: "127.0.0.1", Ports: []int{port}}, {Host: "localhost", Ports: []int{port}}},
		AllowPrivate: []Rule{{Host: "127.0.0.0/8"}}, Hosts: map[string]string{"localhost": "127.0.0.1"}}
	api := &localAPI{}
	tp := startProxy(t, Config{Local: api, LocalAddr: la, Policy: pol})
	for _, host := range []string{"127.0.0.1", "localhost"} {
		hp := net.JoinHostPort(host, itoa(port))
		resp, body := dialProxy(t, tp.addr).get(t, "http://"+hp+"/v1/requests", hp)
		if resp.StatusCode != 202 || !strings.Contains(body, `"host":"`+hp+`"`) {
			t.Errorf("%s: %d %s", hp, resp.StatusCode, body)
		}
	}
	resp, body := dialProxy(t, tp.addr).roundTrip(t, "CONNECT 127.0.0.1:"+itoa(port)+" HTTP/1.1\r\n\r\n", "CONNECT")
	if resp.StatusCode != 403 || !strings.Contains(body, "plain HTTP") {
		t.Errorf("CONNECT: %d %s", resp.StatusCode, body)
	}
	if tp.Admits("127.0.0.1", port) {
		t.Error("the consent API's address reads back as admitted egress")
	}
	if api.calls.Load() != 2 || dialed.Load() != 0 {
		t.Errorf("Local served %d, the address was dialed %d times", api.calls.Load(), dialed.Load())
	}
	// Another port of the address is egress as ever (here allowed by
	// no rule).
	if resp, _ := dialProxy(t, tp.addr).get(t, "http://127.0.0.1:"+itoa(port+1)+"/", ""); resp.StatusCode != 403 {
		t.Errorf("127.0.0.1:%d: %d", port+1, resp.StatusCode)
	}
	// Without LocalAddr the rules decide, and this one dials.
	plain := startProxy(t, Config{Local: api, Policy: pol})
	dialProxy(t, plain.addr).get(t, "http://127.0.0.1:"+itoa(port)+"/", "")
	if api.calls.Load() != 2 || dialed.Load() != 1 {
		t.Errorf("without LocalAddr: Local served %d, dialed %d (want 2, 1)", api.calls.Load(), dialed.Load())
	}
}

// countAccepts accepts and closes every connection on ln, counting them,
// until the test ends.
func countAccepts(t testing.TB, ln net.Listener) *atomic.Int64 {
	n := &atomic.Int64{}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return n
}

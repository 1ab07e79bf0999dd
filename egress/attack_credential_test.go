package egress

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Attacks on credential placeholders (issue 16): a workload that knows
// its placeholder and wants the value sent where it can read it, or
// reflected back by an echoing upstream. Each test here is an attack the
// proxy defeats.

// acLeak is the first form of testValue (raw, base64, percent, JSON)
// in s, "" when none.
func acLeak(s string) string {
	for _, f := range valueForms(testValue) {
		if strings.Contains(s, string(f)) {
			return string(f)
		}
	}
	return ""
}

// acRaw sends raw on a fresh intercepted HTTP/1.1 connection to
// api.a.test and reads one response.
func (rig *credRig) acRaw(t *testing.T, raw string) (*http.Response, string) {
	t.Helper()
	conn, br := tlsThrough(t, rig.tp.addr, "api.a.test", rig.a.port, rig.roots)
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return &http.Response{StatusCode: 0}, err.Error()
	}
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestAttackCredentialAuthority: the value goes to the CONNECT host
// only, whatever the request inside the tunnel names (another host in
// :authority, Host or an absolute-form target, the same host spelt
// otherwise), and never through a tunnel to the host's IP.
func TestAttackCredentialAuthority(t *testing.T) {
	rig := newCredRig(t, true, true, bearer, nil)
	hpA, hpB := "api.a.test:"+itoa(rig.a.port), "api.b.test:"+itoa(rig.b.port)
	h2 := func(authority string, extra ...string) string {
		tc, h := h2Through(t, rig.tp, rig.roots, "api.a.test", rig.a.port)
		defer tc.Close()
		f := append([]string{":method", "GET", ":scheme", "https", ":authority", authority, ":path", "/v1/x", "authorization", "Bearer " + testPH}, extra...)
		return h.result(h.send(t, f, nil))
	}
	for _, c := range []struct{ authority, want string }{
		{hpB, "421"}, // coalescing onto another host's connection
		{"api.b.test:" + itoa(rig.a.port), "421"}, // another name, the bound port
		{"127.0.0.1:" + itoa(rig.a.port), "421"},  // the host's address
		{"api.a.test", "421"},                     // the default port is not the bound one
		{"API.A.TEST:" + itoa(rig.a.port), "200"}, // the same host, other case
	} {
		if got := h2(c.authority); got != c.want {
			t.Errorf(":authority %s: %s, want %s", c.authority, got, c.want)
		}
	}
	if got := h2(hpA, "host", hpB); got != "200" { // :authority wins, Host is dropped
		t.Errorf(":authority a, Host b: %s", got)
	}
	// h1: an absolute-form target or Host naming another host.
	for _, raw := range []string{
		"GET https://" + hpB + "/v1/x HTTP/1.1\r\nHost: " + hpA + "\r\nAuthorization: Bearer " + testPH + "\r\n\r\n",
		"GET /v1/x HTTP/1.1\r\nHost: " + hpB + "\r\nAuthorization: Bearer " + testPH + "\r\n\r\n",
		"GET /v1/x HTTP/1.1\r\nHost: " + hpA + ".\r\nAuthorization: Bearer " + testPH + "\r\n\r\n",
	} {
		if resp, body := rig.acRaw(t, raw); resp.StatusCode == 200 && strings.Contains(raw, hpB) {
			t.Errorf("%q: %d %s", raw, resp.StatusCode, body)
		}
	}
	// A tunnel to the host's IP (allowed, not inspected): spliced, so
	// the origin gets the placeholder, never the value.
	c := dialProxy(t, rig.tp.addr)
	ipPort := "127.0.0.1:" + itoa(rig.a.port)
	if resp, _ := c.roundTrip(t, "CONNECT "+ipPort+" HTTP/1.1\r\nHost: "+ipPort+"\r\n\r\n", "CONNECT"); resp.StatusCode == 200 {
		tc := tls.Client(c.Conn, &tls.Config{ServerName: "api.a.test", RootCAs: rig.a.roots})
		if tc.Handshake() == nil {
			io.WriteString(tc, "GET /v1/x HTTP/1.1\r\nHost: "+hpA+"\r\nAuthorization: Bearer "+testPH+"\r\n\r\n")
			if resp, err := http.ReadResponse(bufio.NewReader(tc), nil); err == nil {
				resp.Body.Close()
			}
		}
	}
	if got := rig.bSeen.all(); got != "" {
		t.Errorf("api.b.test got requests:\n%s", got)
	}
	got := rig.aSeen.all()
	if n := strings.Count(got, "Bearer "+testValue); n != 2 {
		t.Errorf("api.a.test got the value %d times, want 2 (the same host in other case, and :authority over Host):\n%s", n, got)
	}
	for _, req := range strings.Split(got, "\n----\n") {
		if strings.Contains(req, testValue) && !strings.Contains(req, "GET /v1/x\n") {
			t.Errorf("the value went with an unexpected request:\n%s", req)
		}
	}
}

// TestAttackCredentialPathTricks: with a path-bound endpoint, no
// spelling of a path outside it (dot segments, encoded ones, empty
// segments, ';' parameters, encoded slashes, case, a longer segment)
// gets the value: each is refused as not canonical (400) or is a
// mismatch (403).
func TestAttackCredentialPathTricks(t *testing.T) {
	rig := newCredRig(t, false, true, func(port int) Binding {
		b := bearer(port)
		b.Path = "/v1/"
		return b
	}, nil)
	for _, p := range []string{
		"/v1/../admin", "/v1/%2e%2e/admin", "/v1/%2E%2E/admin", "/v1/.%2e/admin", "/v1/./../admin",
		"/v1//../admin", "//v1/x", "/v1;x/y", "/v1/..;/admin", "/v1%2fx", "/v1%2F..%2Fadmin", "/v1%5cx", "/v1\\..\\admin",
		"/V1/x", "/v10/x", "/v1x", "/v1%00/x", "/admin?/v1/", "/admin#/v1/", "*", "v1/x",
	} {
		resp, body := rig.acRaw(t, "GET "+p+" HTTP/1.1\r\nHost: api.a.test:"+itoa(rig.a.port)+"\r\nAuthorization: Bearer "+testPH+"\r\n\r\n")
		if resp.StatusCode == 200 {
			t.Errorf("%s: %d %s", p, resp.StatusCode, body)
		}
	}
	if got := rig.aSeen.all(); strings.Contains(got, testValue) {
		t.Fatalf("the value went outside /v1/:\n%s", got)
	}
	if resp, _ := rig.acRaw(t, "GET /v1/models HTTP/1.1\r\nHost: api.a.test:"+itoa(rig.a.port)+"\r\nAuthorization: Bearer "+testPH+"\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatalf("/v1/models: %d", resp.StatusCode)
	}
}

// TestAttackCredentialHeaderTricks: the placeholder is substituted only
// when a header is exactly its template; near misses, a second header,
// folding, Basic's other half or extra colons are mismatches, and a
// request with one is refused whole (nothing reaches the origin).
func TestAttackCredentialHeaderTricks(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	cases := []struct {
		name  string
		basic bool
		hdrs  string // raw header lines
		sub   bool   // substituted (200), else refused
	}{
		{"two spaces", false, "Authorization: Bearer  " + testPH, false},
		{"glued", false, "Authorization: Bearer" + testPH, false},
		{"suffix", false, "Authorization: Bearer " + testPH + "x", false},
		{"prefix", false, "Authorization: Bearer x" + testPH, false},
		{"two tokens", false, "Authorization: Bearer " + testPH + ", Bearer " + testPH, false},
		{"other scheme", false, "Authorization: Token " + testPH, false},
		{"bound and unbound copies", false, "Authorization: Bearer " + testPH + "\r\nAuthorization: Token " + testPH, false},
		{"bound and X- header", false, "Authorization: Bearer " + testPH + "\r\nX-Debug: " + testPH, false},
		{"folded", false, "Authorization: Bearer\r\n " + testPH, true},                               // unfolded by the server: the upstream reads what was decided
		{"in a header name", false, "X-" + testPH + ": 1\r\nAuthorization: Bearer " + testPH, false}, // a name is not a bound place
		{"case of scheme", false, "Authorization: BEARER " + testPH, true},
		{"trailing space", false, "Authorization: Bearer " + testPH + " ", true}, // OWS, trimmed by the server
		{"basic extra colon", true, "Authorization: Basic " + b64("u:"+testPH+":x"), false},
		{"basic both halves", true, "Authorization: Basic " + b64(testPH+":"+testPH), false},
		{"basic unpadded", true, "Authorization: Basic " + strings.TrimRight(b64("ux:"+testPH), "="), false},
		{"basic in bearer", true, "Authorization: Bearer " + b64("u:"+testPH), false},
		{"basic lowercase", true, "Authorization: basic " + b64("u:"+testPH), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bind := bearer
			if c.basic {
				bind = func(port int) Binding { return Binding{Host: "api.a.test", Ports: []int{port}, Basic: "password"} }
			}
			rig := newCredRig(t, false, true, bind, nil)
			resp, body := rig.acRaw(t, "GET /v1/x HTTP/1.1\r\nHost: api.a.test:"+itoa(rig.a.port)+"\r\n"+c.hdrs+"\r\n\r\n")
			got := rig.aSeen.all()
			if c.sub {
				if resp.StatusCode != 200 || !strings.Contains(got, testValue) && !strings.Contains(got, b64("u:"+testValue)) {
					t.Fatalf("status %d %s; origin got:\n%s", resp.StatusCode, body, got)
				}
				return
			}
			if resp.StatusCode == 200 || got != "" {
				t.Fatalf("status %d %s; origin got:\n%s", resp.StatusCode, body, got)
			}
		})
	}
}

// TestAttackCredentialQueryTricks: a query binding substitutes only the
// named parameter's whole value; repeated keys are each substituted (at
// the bound host, as the upstream reads them), other spellings of the
// name or value are mismatches or refused as ambiguous.
func TestAttackCredentialQueryTricks(t *testing.T) {
	rig := newCredRig(t, false, true, func(port int) Binding {
		return Binding{Host: "api.a.test", Ports: []int{port}, Query: "key"}
	}, nil)
	enc := strings.ReplaceAll(testPH, "s", "%73")
	for _, c := range []struct {
		q    string
		want int
	}{
		{"key=" + testPH + "&key=" + testPH, 200},
		{"%6Bey=" + testPH, 200}, // the name as the upstream decodes it
		{"key=" + enc, 200},      // the value as the upstream decodes it
		{"Key=" + testPH, 403},
		{"KEY=x&key=" + testPH, 400},
		{"key=" + testPH + ";x=1", 400},
		{"key=" + testPH + "+", 403},
		{"key=" + testPH + "%20", 403},
		{"key%00=" + testPH, 403},
		{"key[]=" + testPH, 403},
		{"x=" + testPH + "&key=y", 403},
		{"key=" + testPH + "&x=" + testPH, 403},
		{"key=%zz&x=" + testPH, 400},
	} {
		resp, body := rig.acRaw(t, "GET /v1/x?"+c.q+" HTTP/1.1\r\nHost: api.a.test:"+itoa(rig.a.port)+"\r\n\r\n")
		if resp.StatusCode != c.want {
			t.Errorf("?%s: %d, want %d: %s", c.q, resp.StatusCode, c.want, body)
		}
	}
	// Every request that reached the origin has the value in key only.
	for _, req := range strings.Split(rig.aSeen.all(), "\n----\n") {
		line, _, _ := strings.Cut(req, "\n")
		_, uri, _ := strings.Cut(line, " ")
		u, err := url.ParseRequestURI(uri)
		if err != nil {
			t.Fatalf("origin got %q", line)
		}
		for k, vs := range u.Query() {
			for _, v := range vs {
				if k != "key" && strings.Contains(v, testValue) {
					t.Errorf("origin got the value in %q: %q", k, line)
				}
			}
		}
	}
}

// acDecoded is body decoded as the sandbox would, by the codings its
// response names (what a client that decodes them reads), "" if none.
func acDecoded(resp *http.Response, body string) string {
	var out []byte
	for _, ce := range resp.Header.Values("Content-Encoding") {
		for _, c := range strings.Split(ce, ",") {
			var r io.Reader
			switch strings.ToLower(strings.TrimSpace(c)) {
			case "gzip", "x-gzip":
				r, _ = gzip.NewReader(strings.NewReader(body))
			case "deflate":
				if zr, err := zlib.NewReader(strings.NewReader(body)); err == nil {
					r = zr
				} else {
					r = flate.NewReader(strings.NewReader(body))
				}
			}
			if r != nil {
				b, _ := io.ReadAll(r)
				out = append(out, b...)
			}
		}
	}
	return string(out)
}

// acEcho is an origin handler that reflects the Authorization value the
// way the request's path asks.
func acEcho(w http.ResponseWriter, r *http.Request) {
	v := r.Header.Get("Authorization")
	fl := w.(http.Flusher)
	q := r.URL.Query()
	at, _ := strconv.Atoi(q.Get("at"))
	switch r.URL.Path {
	case "/split": // the value split at byte at across two flushes
		s := "<<" + v + ">>"
		io.WriteString(w, s[:at])
		fl.Flush()
		time.Sleep(2 * time.Millisecond)
		io.WriteString(w, s[at:])
	case "/bytewise": // one flush per byte, base64 form
		s := base64.StdEncoding.EncodeToString([]byte("x" + v + "y"))
		for i := range len(s) {
			io.WriteString(w, s[i:i+1])
			fl.Flush()
		}
	case "/gzip-members": // two gzip members, the value across their boundary
		w.Header().Set("Content-Encoding", q.Get("ce"))
		for _, part := range []string{"a " + v[:at], v[at:] + " b"} {
			gz := gzip.NewWriter(w)
			io.WriteString(gz, part)
			gz.Close()
			fl.Flush()
		}
	case "/gzip-flushed": // a gzip stream flushed after every byte
		w.Header().Set("Content-Encoding", "gzip")
		gz := gzip.NewWriter(w)
		for i := range len(v) {
			io.WriteString(gz, v[i:i+1])
			gz.Flush()
			fl.Flush()
		}
		gz.Close()
	case "/zlib":
		w.Header().Set("Content-Encoding", "deflate")
		z := zlib.NewWriter(w)
		io.WriteString(z, "deflated "+v)
		z.Close()
	case "/raw-deflate": // what some servers send as deflate
		w.Header().Set("Content-Encoding", "deflate")
		z, _ := flate.NewWriter(w, 5)
		io.WriteString(z, "deflated "+v)
		z.Close()
	case "/ce-list":
		w.Header().Set("Content-Encoding", q.Get("ce"))
		gz := gzip.NewWriter(w)
		io.WriteString(gz, v)
		gz.Close()
	case "/headers":
		w.Header().Set("Location", "https://elsewhere.test/?k="+v)
		w.Header().Add("Set-Cookie", "s="+v+"; Path=/")
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token", token="`+v+`"`)
		w.Header().Set("ETag", `"`+v+`"`)
		w.WriteHeader(http.StatusFound)
	case "/304":
		w.Header().Set("ETag", `"`+v+`"`)
		w.WriteHeader(http.StatusNotModified)
	case "/trailer":
		w.Header().Set("Trailer", "X-Echo")
		io.WriteString(w, "body ")
		fl.Flush()
		w.Header().Set("X-Echo", v)
		w.Header().Set(http.TrailerPrefix+"X-Late", v) // undeclared
	case "/coding-name":
		w.Header().Set("Content-Encoding", v)
		io.WriteString(w, "x")
	case "/range":
		fmt.Fprintf(w, "range=%q if-range=%q ae=%q", r.Header.Get("Range"), r.Header.Get("If-Range"), r.Header.Get("Accept-Encoding"))
	default:
		io.WriteString(w, "echo "+v)
	}
}

// TestAttackCredentialReflection: an echoing upstream cannot get the
// value back to the sandbox split at any offset across flushes or h2
// frames, one byte per flush, across concatenated gzip members, in a
// gzip stream flushed per byte, in zlib, in headers, trailers (declared
// or not), a 304, or a HEAD; codings it cannot read are a 502 that does
// not carry the value; Range is not relayed, Accept-Encoding narrowed.
func TestAttackCredentialReflection(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "h1", true: "h2"}[h2], func(t *testing.T) {
			rig := newCredRig(t, h2, true, bearer, acEcho)
			rig.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
			get := func(method, path string, hdr ...string) (*http.Response, string) {
				t.Helper()
				resp, body := rig.do(t, method, rig.aURL+path, "", append([]string{"Authorization", "Bearer " + testPH}, hdr...)...)
				var h strings.Builder
				resp.Header.Write(&h)
				resp.Trailer.Write(&h)
				if f := acLeak(h.String() + body + acDecoded(resp, body)); f != "" {
					t.Errorf("%s %s: the value came back (%q): %d\n%s\n%s", method, path, f, resp.StatusCode, h.String(), body)
				}
				return resp, body
			}
			full := "Bearer " + testValue
			for at := 0; at <= len(full)+4; at++ {
				get("GET", "/split?at="+itoa(at))
			}
			get("GET", "/bytewise")
			for _, ce := range []string{"gzip", "GZIP", "x-gzip", " gzip "} {
				for _, at := range []int{1, 9, len(full) - 1} {
					if resp, body := get("GET", "/gzip-members?ce="+strings.TrimSpace(ce)+"&at="+itoa(at), "Accept-Encoding", "gzip"); resp.StatusCode != 200 || !strings.Contains(body+acDecoded(resp, body), "a ") {
						t.Errorf("gzip members: %d %q", resp.StatusCode, body)
					}
				}
			}
			get("GET", "/gzip-flushed", "Accept-Encoding", "gzip")
			if resp, body := get("GET", "/zlib", "Accept-Encoding", "deflate"); resp.StatusCode != 200 || !strings.Contains(body, "deflated Bearer ****") {
				t.Errorf("zlib: %d %q", resp.StatusCode, body)
			}
			if resp, _ := get("GET", "/raw-deflate", "Accept-Encoding", "deflate"); resp.StatusCode == 200 {
				// (if it were passed, the raw deflate would carry the value)
				t.Errorf("raw deflate labelled deflate: %d, want a 502", resp.StatusCode)
			}
			for _, ce := range []string{"gzip, identity", "identity, gzip"} { // a 502, or decoded and masked
				get("GET", "/ce-list?ce="+strings.ReplaceAll(ce, " ", "%20"), "Accept-Encoding", "gzip")
			}
			for _, ce := range []string{"gzip, gzip", "br", "zstd", "compress"} {
				if resp, _ := get("GET", "/ce-list?ce="+strings.ReplaceAll(ce, " ", "%20"), "Accept-Encoding", "gzip"); resp.StatusCode != 502 {
					t.Errorf("Content-Encoding %q: %d, want 502", ce, resp.StatusCode)
				}
			}
			get("GET", "/headers")
			get("GET", "/304")
			get("HEAD", "/headers")
			get("HEAD", "/ce-list?ce=br")
			if resp, _ := get("GET", "/trailer"); resp.StatusCode != 200 {
				t.Errorf("trailer: %d", resp.StatusCode)
			}
			get("GET", "/coding-name")
			if _, body := get("GET", "/range", "Range", "bytes=3-9", "If-Range", `"x"`, "Accept-Encoding", "br, zstd;q=1, gzip;q=0.5, *"); body != `range="" if-range="" ae="gzip;q=0.5"` {
				t.Errorf("the origin saw %s", body)
			}
			// The same upstream connection reused for other paths.
			for i := 0; i < 3; i++ {
				get("GET", "/other"+itoa(i))
			}
		})
	}
}

// TestAttackCredentialReflectionAfterRotationMidStream: a value rotated
// while a response streams is still masked in the rest of it (the
// response's patterns are those of the value that was sent).
func TestAttackCredentialReflectionAfterRotationMidStream(t *testing.T) {
	started, rotated := make(chan struct{}), make(chan struct{})
	rig := newCredRig(t, true, true, bearer, func(w http.ResponseWriter, r *http.Request) {
		v := r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: start\n\n")
		w.(http.Flusher).Flush()
		close(started)
		<-rotated
		io.WriteString(w, "data: "+v+"\n\n")
	})
	go func() {
		<-started
		time.Sleep(20 * time.Millisecond)
		rig.cred.SetValue("rotated-value-0123456789", time.Time{})
		close(rotated)
	}()
	_, body := rig.do(t, "GET", rig.aURL+"/stream", "", "Authorization", "Bearer "+testPH)
	if f := acLeak(body); f != "" || !strings.Contains(body, "data: Bearer ****") {
		t.Fatalf("after a rotation mid-stream: %q", body)
	}
}

// TestAttackCredentialPlaceholderFlood: a body quoting the placeholder
// thousands of times (in every form) is forwarded as data, with one
// finding per form, not one per occurrence; one far over a substituting
// endpoint's max is a 413 that sends nothing.
func TestAttackCredentialPlaceholderFlood(t *testing.T) {
	rig := newCredRig(t, false, true, bearer, nil)
	var b bytes.Buffer
	for i := 0; i < 5000; i++ {
		b.WriteString(testPH + " " + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("x", i%3)+testPH)) + "\n")
	}
	resp, _ := rig.do(t, "POST", rig.aURL+"/v1/chat", b.String(), "Authorization", "Bearer "+testPH)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	rig.found.wait(t, FindingMismatch, "body", "forwarded")
	rig.found.mu.Lock()
	n := len(rig.found.fs)
	rig.found.mu.Unlock()
	if max := len(placeholderForms(testPH)); n > max {
		t.Fatalf("%d findings for one request, want at most %d", n, max)
	}

	sub := newCredRig(t, false, true, func(port int) Binding {
		return Binding{Host: "api.a.test", Ports: []int{port}, BodyMax: 1 << 10}
	}, nil)
	if resp, _ := sub.do(t, "POST", sub.aURL+"/v1/x", strings.Repeat(testPH, 1<<12)); resp.StatusCode != 413 || sub.aSeen.all() != "" {
		t.Fatalf("oversized body: %d; origin got %q", resp.StatusCode, sub.aSeen.all())
	}
}

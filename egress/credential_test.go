package egress

import (
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	testValue = "real-SECRET-value/with+chars=42"
	testPH    = "sk-corralPLACEHOLDERabcdefghij0123456789"
)

// seen is what an origin received: each request's header, query and body.
type seen struct {
	mu   sync.Mutex
	reqs []string
}

func (s *seen) add(r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	var h strings.Builder
	r.Header.Write(&h)
	s.reqs = append(s.reqs, r.Method+" "+r.URL.RequestURI()+"\n"+h.String()+"\n"+string(b))
}

func (s *seen) all() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.reqs, "\n----\n")
}

// findings collects a proxy's credential findings.
type findings struct {
	mu sync.Mutex
	fs []CredentialFinding
}

func (f *findings) add(c CredentialFinding) {
	f.mu.Lock()
	f.fs = append(f.fs, c)
	f.mu.Unlock()
}

// wait returns the findings once there is one matching where (or fails).
func (f *findings) wait(t *testing.T, kind FindingKind, where, action string) CredentialFinding {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		f.mu.Lock()
		for _, c := range f.fs {
			if c.Kind == kind && c.Where == where && c.Action == action {
				f.mu.Unlock()
				return c
			}
		}
		f.mu.Unlock()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t.Fatalf("no %s finding at %q (%s); have %+v", kind, where, action, f.fs)
	return CredentialFinding{}
}

// credRig is a proxy inspecting api.a.test and api.b.test (both on
// loopback origins that record what they get) with one credential bound
// to api.a.test as b says.
type credRig struct {
	a, b     *origin
	aSeen    *seen
	bSeen    *seen
	cred     *Credential
	found    *findings
	client   *http.Client
	aURL     string
	bURL     string
	tp       *testProxy
	proxyURL *url.URL
	roots    *x509.CertPool
}

func newCredRig(t *testing.T, h2 bool, deny bool, bind func(port int) Binding, aHandler http.HandlerFunc) *credRig {
	t.Helper()
	rig := &credRig{aSeen: &seen{}, bSeen: &seen{}, found: &findings{}}
	if aHandler == nil {
		aHandler = func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok from a") }
	}
	rig.a = startOrigin(t, "api.a.test", h2, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rig.aSeen.add(r)
		r.Body = io.NopCloser(bytes.NewReader(body))
		aHandler(w, r)
	}))
	rig.b = startOrigin(t, "api.b.test", h2, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rig.bSeen.add(r)
		io.WriteString(w, "ok from b")
	}))
	roots := x509.NewCertPool()
	for _, o := range []*origin{rig.a, rig.b} {
		roots.AppendCertsFromPEM(pemOf(o.Certificate()))
	}
	pol := Policy{
		Allow:        []Rule{{Host: "api.a.test", Ports: []int{rig.a.port}, Inspect: true}, {Host: "api.b.test", Ports: []int{rig.b.port}, Inspect: true}},
		AllowPrivate: []Rule{{Host: "127.0.0.1/32"}},
		Hosts:        map[string]string{"api.a.test": "127.0.0.1", "api.b.test": "127.0.0.1"},
	}
	ca, err := NewCA(pol)
	if err != nil {
		t.Fatal(err)
	}
	rig.cred = &Credential{Name: "tok", Placeholder: testPH, Bindings: []Binding{bind(rig.a.port)}, Deny: deny}
	rig.cred.SetValue(testValue, time.Time{})
	rig.tp = startProxy(t, Config{Policy: pol, CA: ca, UpstreamRoots: roots, Credentials: []*Credential{rig.cred}, Finding: rig.found.add})
	rig.roots = x509.NewCertPool()
	rig.roots.AddCert(ca.Certificate())
	rig.proxyURL, _ = url.Parse("http://" + rig.tp.addr)
	tr := &http.Transport{Proxy: http.ProxyURL(rig.proxyURL), TLSClientConfig: &tls.Config{RootCAs: rig.roots}, ForceAttemptHTTP2: h2, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	rig.client = &http.Client{Transport: tr, Timeout: 10 * time.Second}
	rig.aURL = "https://api.a.test:" + itoa(rig.a.port)
	rig.bURL = "https://api.b.test:" + itoa(rig.b.port)
	return rig
}

func pemOf(c *x509.Certificate) []byte {
	return []byte("-----BEGIN CERTIFICATE-----\n" + base64.StdEncoding.EncodeToString(c.Raw) + "\n-----END CERTIFICATE-----\n")
}

func bearer(port int) Binding {
	return Binding{Host: "api.a.test", Ports: []int{port}, Header: "Authorization", Template: "Bearer {}"}
}

func (rig *credRig) do(t *testing.T, method, u string, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := rig.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestCredentialSubstitutedOnlyInBoundHeader(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "h1", true: "h2"}[h2], func(t *testing.T) {
			rig := newCredRig(t, h2, true, bearer, nil)
			resp, body := rig.do(t, "GET", rig.aURL+"/v1/models", "", "Authorization", "bearer "+testPH)
			if resp.StatusCode != 200 || body != "ok from a" {
				t.Fatalf("status %d %q", resp.StatusCode, body)
			}
			if got := rig.aSeen.all(); !strings.Contains(got, "Authorization: bearer "+testValue) || strings.Contains(got, testPH) {
				t.Fatalf("api.a.test got:\n%s", got)
			}
			if d := rig.tp.log.waitN(t, 2); d[len(d)-1].Credentials != "tok" {
				t.Fatalf("decision %+v", d[len(d)-1])
			}
		})
	}
}

// TestCredentialMismatches sends the placeholder everywhere it is not
// bound: the value reaches nobody, each use is denied or forwarded as
// the literal placeholder, and each is a finding.
func TestCredentialMismatches(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString([]byte("user:" + testPH))
	cases := []struct {
		name, where, host string
		hdr               []string
		body, query       string
	}{
		{name: "other host, bound header", host: "b", where: "header Authorization", hdr: []string{"Authorization", "Bearer " + testPH}},
		{name: "other header", host: "a", where: "header X-Api-Key", hdr: []string{"X-Api-Key", testPH}},
		{name: "cookie", host: "a", where: "header Cookie", hdr: []string{"Cookie", "k=" + testPH}},
		{name: "wrong scheme", host: "a", where: "header Authorization", hdr: []string{"Authorization", "token " + testPH}},
		{name: "basic", host: "a", where: "header Authorization (base64)", hdr: []string{"Authorization", "Basic " + b64}},
		{name: "base64 elsewhere", host: "b", where: "header X-Blob (base64)", hdr: []string{"X-Blob", base64.StdEncoding.EncodeToString([]byte("xx" + testPH + "yy"))}},
		{name: "json-escaped", host: "b", where: "header X-J (json-escaped)", hdr: []string{"X-J", `\u0073k-corralPLACEHOLDERabcdefghij0123456789`}},
		{name: "json-escaped in JSON", host: "b", where: "header X-Meta (json-escaped)", hdr: []string{"X-Meta", `{"token":"\u0073k-corralPLACEHOLDERabcdefghij0123456789"}`}},
		{name: "query", host: "a", where: "query", query: "key=" + testPH},
		{name: "percent-encoded query", host: "b", where: "query (percent-encoded)", query: "k=%73%6B-corralPLACEHOLDERabcdefghij0123456789"},
		{name: "path", host: "b", where: "path", query: ""},
		{name: "header name", host: "b", where: "header name", hdr: []string{"X-" + testPH, "1"}},
	}
	for _, mode := range []string{"deny", "forward"} {
		for _, c := range cases {
			t.Run(mode+"/"+c.name, func(t *testing.T) {
				rig := newCredRig(t, false, mode == "deny", bearer, nil)
				u, s := rig.aURL, rig.aSeen
				if c.host == "b" {
					u, s = rig.bURL, rig.bSeen
				}
				path := "/v1/x"
				if c.name == "path" {
					path = "/v1/" + testPH
				}
				if c.query != "" {
					path += "?" + c.query
				}
				resp, body := rig.do(t, "GET", u+path, c.body, c.hdr...)
				got := rig.aSeen.all() + rig.bSeen.all()
				if strings.Contains(got, testValue) || strings.Contains(got, base64.StdEncoding.EncodeToString([]byte("user:"+testValue))) {
					t.Fatalf("the value reached an origin:\n%s", got)
				}
				if mode == "deny" {
					if resp.StatusCode != 403 || !strings.Contains(body, "credential tok") || strings.Contains(body, testPH) {
						t.Fatalf("status %d body %s", resp.StatusCode, body)
					}
					if s.all() != "" {
						t.Fatalf("a denied request reached the origin:\n%s", s.all())
					}
					if f := rig.found.wait(t, FindingMismatch, c.where, "denied"); strings.Contains(f.Path, testPH) {
						t.Fatalf("the finding carries the placeholder: %+v", f)
					}
					return
				}
				if resp.StatusCode != 200 {
					t.Fatalf("status %d body %s", resp.StatusCode, body)
				}
				rig.found.wait(t, FindingMismatch, c.where, "forwarded")
			})
		}
	}
}

// TestCredentialBodyIsData: a placeholder in a body (a transcript that
// quotes it) is forwarded as it is, even with on_mismatch deny, and
// recorded; so is one split across writes.
func TestCredentialBodyIsData(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		rig := newCredRig(t, h2, true, bearer, nil)
		pr, pw := io.Pipe()
		go func() {
			pw.Write([]byte(`{"messages":["token is ` + testPH[:10]))
			time.Sleep(20 * time.Millisecond)
			pw.Write([]byte(testPH[10:] + `"]}`))
			pw.Close()
		}()
		req, _ := http.NewRequest("POST", rig.aURL+"/v1/chat", pr)
		req.Header.Set("Authorization", "Bearer "+testPH)
		resp, err := rig.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got := rig.aSeen.all()
		if resp.StatusCode != 200 || !strings.Contains(got, `token is `+testPH) || !strings.Contains(got, "Bearer "+testValue) {
			t.Fatalf("status %d, a got:\n%s", resp.StatusCode, got)
		}
		rig.found.wait(t, FindingMismatch, "body", "forwarded")
	}
}

func TestCredentialBasicQueryAndBody(t *testing.T) {
	t.Run("basic password", func(t *testing.T) {
		rig := newCredRig(t, false, true, func(port int) Binding {
			return Binding{Host: "api.a.test", Ports: []int{port}, Basic: "password"}
		}, nil)
		req, _ := http.NewRequest("GET", rig.aURL+"/repo.git/info/refs", nil)
		req.SetBasicAuth("x-access-token", testPH)
		resp, err := rig.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+testValue))
		if resp.StatusCode != 200 || !strings.Contains(rig.aSeen.all(), want) {
			t.Fatalf("status %d, a got:\n%s", resp.StatusCode, rig.aSeen.all())
		}
	})
	t.Run("query", func(t *testing.T) {
		rig := newCredRig(t, false, true, func(port int) Binding {
			return Binding{Host: "api.a.test", Ports: []int{port}, Query: "key"}
		}, nil)
		resp, _ := rig.do(t, "GET", rig.aURL+"/v1/x?a=1&key="+testPH+"&z=2", "")
		if want := "/v1/x?a=1&key=" + url.QueryEscape(testValue) + "&z=2"; resp.StatusCode != 200 || !strings.Contains(rig.aSeen.all(), want) {
			t.Fatalf("status %d, a got:\n%s\nwant %s", resp.StatusCode, rig.aSeen.all(), want)
		}
	})
	t.Run("body", func(t *testing.T) {
		rig := newCredRig(t, true, true, func(port int) Binding {
			return Binding{Host: "api.a.test", Ports: []int{port}, Path: "/login", BodyMax: 64}
		}, nil)
		resp, _ := rig.do(t, "POST", rig.aURL+"/login", `{"key":"`+testPH+`"}`)
		if resp.StatusCode != 200 || !strings.Contains(rig.aSeen.all(), `{"key":"`+testValue+`"}`) {
			t.Fatalf("status %d, a got:\n%s", resp.StatusCode, rig.aSeen.all())
		}
		resp, _ = rig.do(t, "POST", rig.aURL+"/login", strings.Repeat("x", 65))
		if resp.StatusCode != 413 {
			t.Fatalf("oversized body: status %d", resp.StatusCode)
		}
		// Outside the path, the body is not substituted.
		resp, _ = rig.do(t, "POST", rig.aURL+"/other", `{"key":"`+testPH+`"}`)
		if resp.StatusCode != 200 || strings.Count(rig.aSeen.all(), testValue) != 1 {
			t.Fatalf("status %d, a got:\n%s", resp.StatusCode, rig.aSeen.all())
		}
	})
	t.Run("path prefix", func(t *testing.T) {
		rig := newCredRig(t, false, true, func(port int) Binding {
			b := bearer(port)
			b.Path = "/v1/"
			return b
		}, nil)
		if resp, _ := rig.do(t, "GET", rig.aURL+"/v1", "", "Authorization", "Bearer "+testPH); resp.StatusCode != 200 {
			t.Fatalf("/v1: status %d", resp.StatusCode)
		}
		if resp, _ := rig.do(t, "GET", rig.aURL+"/v10/x", "", "Authorization", "Bearer "+testPH); resp.StatusCode != 403 {
			t.Fatalf("/v10/x: status %d", resp.StatusCode)
		}
	})
}

func TestCredentialRotateRevokeExpire(t *testing.T) {
	rig := newCredRig(t, false, false, bearer, nil)
	rig.cred.SetValue("rotated-value-0123456789", time.Time{})
	if resp, _ := rig.do(t, "GET", rig.aURL+"/", "", "Authorization", "Bearer "+testPH); resp.StatusCode != 200 || !strings.Contains(rig.aSeen.all(), "rotated-value-0123456789") {
		t.Fatalf("rotation: status %d\n%s", resp.StatusCode, rig.aSeen.all())
	}
	rig.cred.SetValue(testValue, time.Now().Add(-time.Second))
	if resp, body := rig.do(t, "GET", rig.aURL+"/", "", "Authorization", "Bearer "+testPH); resp.StatusCode != 403 || !strings.Contains(body, "revoked or expired") {
		t.Fatalf("expired: status %d %s", resp.StatusCode, body)
	}
	rig.cred.Revoke()
	if resp, _ := rig.do(t, "GET", rig.aURL+"/", "", "Authorization", "Bearer "+testPH); resp.StatusCode != 403 {
		t.Fatalf("revoked: status %d", resp.StatusCode)
	}
	rig.found.wait(t, FindingRevoked, "header Authorization", "denied")
	if strings.Contains(rig.aSeen.all(), testValue) {
		t.Fatalf("an expired value was sent:\n%s", rig.aSeen.all())
	}
}

// TestCredentialReflectionGuard: api.a.test echoes the value back in
// every way; the client never sees it and each is a finding.
func TestCredentialReflectionGuard(t *testing.T) {
	echo := func(w http.ResponseWriter, r *http.Request) {
		v := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		fl := w.(http.Flusher)
		switch r.URL.Path {
		case "/raw":
			w.Header().Set("X-Echo", v)
			io.WriteString(w, "you sent "+v)
		case "/split":
			io.WriteString(w, "start "+v[:7])
			fl.Flush()
			time.Sleep(20 * time.Millisecond)
			io.WriteString(w, v[7:]+" end")
		case "/base64":
			io.WriteString(w, base64.StdEncoding.EncodeToString([]byte("x"+v)))
		case "/json":
			b, _ := json.Marshal(map[string]string{"error": "invalid key " + v})
			io.WriteString(w, strings.ReplaceAll(string(b), "/", `\/`)) // as PHP writes it
		case "/dotnet": // System.Text.Json: "+" as \u002B, "/" as it is
			io.WriteString(w, `{"error":"bad key `+strings.ReplaceAll(v, "+", `\u002B`)+`"}`)
		case "/every":
			for i := 0; i < len(v); i++ {
				fmt.Fprintf(w, `\u%04x`, v[i])
			}
		case "/percent":
			io.WriteString(w, "next="+url.QueryEscape(v))
		case "/sse":
			w.Header().Set("Content-Type", "text/event-stream")
			for i := 0; i < 3; i++ {
				fmt.Fprintf(w, "data: {\"n\":%d,\"k\":\"%s\"}\n\n", i, v[:i*5])
				fl.Flush()
			}
			fmt.Fprintf(w, "data: %s\n\n", v)
		case "/gzip":
			w.Header().Set("Content-Encoding", "gzip")
			gz := gzip.NewWriter(w)
			io.WriteString(gz, "zipped "+v)
			gz.Close()
		case "/br":
			w.Header().Set("Content-Encoding", "br")
			io.WriteString(w, "not really brotli")
		}
	}
	for _, h2 := range []bool{false, true} {
		rig := newCredRig(t, h2, true, bearer, echo)
		for _, c := range []struct{ path, where string }{
			{"/raw", "response body"}, {"/split", "response body"}, {"/base64", "response body (base64)"},
			{"/json", "response body (json-escaped)"}, {"/percent", "response body (percent-encoded)"},
			{"/dotnet", "response body (json-escaped)"}, {"/every", "response body (json-escaped)"},
			{"/sse", "response body"}, {"/gzip", "response body"},
		} {
			resp, body := rig.do(t, "GET", rig.aURL+c.path, "", "Authorization", "Bearer "+testPH, "Accept-Encoding", "gzip, br")
			var hdr strings.Builder
			resp.Header.Write(&hdr)
			for _, f := range valueForms(testValue) {
				if strings.Contains(body, string(f)) || strings.Contains(hdr.String(), string(f)) {
					t.Fatalf("%s: the value reached the client (%q):\n%s\n%s", c.path, f, hdr.String(), body)
				}
			}
			if resp.StatusCode != 200 || !strings.Contains(body, "****") {
				t.Fatalf("%s: status %d %q", c.path, resp.StatusCode, body)
			}
			rig.found.wait(t, FindingReflection, c.where, "masked")
		}
		rig.found.wait(t, FindingReflection, "response header X-Echo", "masked")
		if resp, body := rig.do(t, "GET", rig.aURL+"/br", "", "Authorization", "Bearer "+testPH); resp.StatusCode != 502 || !strings.Contains(body, "content coding") {
			t.Fatalf("/br: status %d %s", resp.StatusCode, body)
		}
	}
}

// TestCredentialSSENotHeldBack: the guard passes each event on as it
// comes (a held-back tail would stall a streamed answer).
func TestCredentialSSENotHeldBack(t *testing.T) {
	next := make(chan struct{})
	rig := newCredRig(t, false, true, bearer, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-next
		io.WriteString(w, "data: second\n\n")
	})
	req, _ := http.NewRequest("GET", rig.aURL+"/stream", nil)
	req.Header.Set("Authorization", "Bearer "+testPH)
	resp, err := rig.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 64)
	n, _ := io.ReadAtLeast(resp.Body, buf, len("data: first\n\n"))
	close(next)
	if string(buf[:n]) != "data: first\n\n" {
		t.Fatalf("first read %q", buf[:n])
	}
}

func TestCredentialBindingMustBeInspected(t *testing.T) {
	pol := Policy{Allow: []Rule{{Host: "plain.test"}, {Host: "api.a.test", Inspect: true}}}
	ca, err := NewCA(pol)
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]string{"plain.test": "not inspected", "other.test": "no allow rule matches"} {
		c := &Credential{Name: "tok", Placeholder: testPH, Bindings: []Binding{{Host: host, Header: "Authorization", Template: "Bearer {}"}}}
		c.SetValue(testValue, time.Time{})
		_, err := New(Config{Policy: pol, CA: ca, Credentials: []*Credential{c}})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: %v", host, err)
		}
	}
}

func TestScanReaderAcrossChunks(t *testing.T) {
	ps := &patterns{}
	for _, f := range valueForms(testValue) {
		ps.add(form{b: f})
	}
	data := "aaa " + testValue + " bbb " + base64.StdEncoding.EncodeToString([]byte("zz"+testValue)) + " ccc"
	for size := 1; size <= len(data); size++ {
		var hits int
		r := newScanReader(io.NopCloser(&chunked{s: data, n: size}), ps, true, func(*form) { hits++ })
		out, _ := io.ReadAll(r)
		if len(out) != len(data) || strings.Contains(string(out), testValue) || hits != 2 {
			t.Fatalf("chunks of %d: %d hits, %q", size, hits, out)
		}
	}
}

// chunked reads s n bytes at a time.
type chunked struct {
	s string
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if c.s == "" {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.s)
	c.s = c.s[k:]
	return k, nil
}

// TestCredentialPlainHTTP: over plain HTTP a placeholder is never
// substituted, and is denied (or forwarded as it is) like any mismatch.
func TestCredentialPlainHTTP(t *testing.T) {
	for _, deny := range []bool{true, false} {
		up := startUpstream(t, "127.0.0.1", http.HandlerFunc(hello))
		pol := Policy{Allow: []Rule{{Host: "plain.test", Ports: []int{up.port}}, {Host: "api.a.test", Inspect: true}},
			AllowPrivate: []Rule{{Host: "127.0.0.1/32"}}, Hosts: map[string]string{"plain.test": "127.0.0.1"}}
		ca, err := NewCA(pol)
		if err != nil {
			t.Fatal(err)
		}
		found := &findings{}
		c := &Credential{Name: "tok", Placeholder: testPH, Bindings: []Binding{{Host: "api.a.test", Header: "Authorization", Template: "Bearer {}"}}, Deny: deny}
		c.SetValue(testValue, time.Time{})
		tp := startProxy(t, Config{Policy: pol, CA: ca, Credentials: []*Credential{c}, Finding: found.add})
		target := "http://plain.test:" + itoa(up.port) + "/x"
		resp, body := dialProxy(t, tp.addr).roundTrip(t, "GET "+target+" HTTP/1.1\r\nHost: plain.test:"+itoa(up.port)+"\r\nAuthorization: Bearer "+testPH+"\r\n\r\n", "GET")
		if deny {
			if resp.StatusCode != 403 || up.hits.Load() != 0 || !strings.Contains(body, "credential tok") {
				t.Fatalf("deny: status %d hits %d %s", resp.StatusCode, up.hits.Load(), body)
			}
			found.wait(t, FindingMismatch, "header Authorization", "denied")
			continue
		}
		if resp.StatusCode != 200 || up.hits.Load() != 1 {
			t.Fatalf("forward: status %d hits %d", resp.StatusCode, up.hits.Load())
		}
		found.wait(t, FindingMismatch, "header Authorization", "forwarded")
	}
}

// TestCredentialOldValueMasked: after a rotation and a revocation, a
// response quoting the old value is still masked.
func TestCredentialOldValueMasked(t *testing.T) {
	rig := newCredRig(t, true, true, bearer, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "key "+testValue+" was replaced")
	})
	rig.cred.SetValue("rotated-value-0123456789", time.Time{})
	if resp, body := rig.do(t, "GET", rig.aURL+"/", "", "Authorization", "Bearer "+testPH); resp.StatusCode != 200 || strings.Contains(body, testValue) {
		t.Fatalf("after a rotation: %d %q", resp.StatusCode, body)
	}
	rig.cred.Revoke()
	if resp, body := rig.do(t, "GET", rig.aURL+"/", ""); resp.StatusCode != 200 || strings.Contains(body, testValue) {
		t.Fatalf("after a revocation: %d %q", resp.StatusCode, body)
	}
}

// TestCredentialHeldTailReleased: a chunk that ends in what could begin
// the value is not held until the next one when the upstream pauses (an
// interactive stream would stall), and a value begun in it is still
// masked in what follows.
func TestCredentialHeldTailReleased(t *testing.T) {
	for _, cut := range []int{4, 12} { // under and over minHeldMask
		next := make(chan struct{})
		rig := newCredRig(t, false, true, bearer, func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "prompt> "+testValue[:cut])
			w.(http.Flusher).Flush()
			<-next
			io.WriteString(w, testValue[cut:]+" done")
		})
		req, _ := http.NewRequest("GET", rig.aURL+"/tty", nil)
		req.Header.Set("Authorization", "Bearer "+testPH)
		resp, err := rig.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		want := "prompt> " + testValue[:cut]
		if cut >= minHeldMask {
			want = "prompt> " + strings.Repeat("*", cut)
		}
		buf := make([]byte, 64)
		n, err := io.ReadAtLeast(resp.Body, buf, len(want))
		if err != nil || string(buf[:n]) != want {
			t.Fatalf("cut %d: first read %q %v", cut, buf[:n], err)
		}
		close(next)
		rest, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := string(buf[:n]) + string(rest); strings.Contains(got, testValue[cut:]) || !strings.HasSuffix(got, " done") {
			t.Fatalf("cut %d: the value's rest was not masked: %q", cut, got)
		}
		rig.found.wait(t, FindingReflection, "response body", "masked")
	}
}

// TestValueFormsOfAwkwardValues: a value with '"', '\\' and '<' is
// recognised as encoding/json (escaping all three) and JSON.stringify
// (the first two) write it, and split across an idle pause.
func TestValueFormsOfAwkwardValues(t *testing.T) {
	v := `rv/+=833f5dbcb3257764"\<x`
	goJSON, _ := json.Marshal(v)
	var js strings.Builder // JSON.stringify: only '"' and '\' escaped
	for _, c := range v {
		if c == '"' || c == '\\' {
			js.WriteByte('\\')
		}
		js.WriteRune(c)
	}
	forms := ValueForms(v)
	for _, want := range []string{string(goJSON[1 : len(goJSON)-1]), js.String()} {
		if !slices.Contains(forms, want) {
			t.Errorf("%q is not among the forms of %q", want, v)
		}
	}
}

// TestCredentialBodyDetectedAcrossPauses: a placeholder in a request body
// sent three bytes at a time, with pauses, is found (nothing is held back
// on the way up: the bytes before are carried over).
func TestCredentialBodyDetectedAcrossPauses(t *testing.T) {
	rig := newCredRig(t, false, true, bearer, nil)
	pr, pw := io.Pipe()
	go func() {
		body := `{"q":"` + testPH + `"}`
		for i := 0; i < len(body); i += 3 {
			pw.Write([]byte(body[i:min(i+3, len(body))]))
			time.Sleep(15 * time.Millisecond)
		}
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", rig.bURL+"/x", pr)
	resp, err := rig.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	rig.found.wait(t, FindingMismatch, "body", "forwarded")
}

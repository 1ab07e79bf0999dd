//go:build linux

package egress

// Benchmarks of credentials (issue 16), interleaved like bench_test.go's:
// what substitution adds to an inspected request, and what the reflection
// guard (and the gzip decoding it does) costs a 64 MiB response. Two
// loopback origins, one bound to the credential (benchHost) and one not
// (unboundHost), serve the same handler; one inspecting proxy holds the
// credential, another (for "inspection alone") holds none. Both proxies'
// rules are those of bench_inspect_test.go (read-only with a deny rule).
// The bodies are text (JSON lines), not zeros: the scanner's search
// skips far less of text, whose letters begin its patterns.

import (
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/egress/l7"
)

const unboundHost = "api.unbound.test"

// jsonLines is n bytes of JSON lines (ids, words, numbers), the same
// for a seed.
func jsonLines(n int, seed uint64) []byte {
	words := strings.Fields("the model returned a completion for your request with tokens usage prompt " +
		"stream choices delta content role assistant finish reason stop length error invalid retry later " +
		"repository branch commit push pull merge review deploy region bucket object key value cache")
	rng := rand.New(rand.NewPCG(seed, 64))
	var buf bytes.Buffer
	buf.Grow(n + 512)
	for buf.Len() < n {
		fmt.Fprintf(&buf, `{"id":"%016x","n":%d,"user":"%s","msg":"`, rng.Uint64(), rng.IntN(1e6), words[rng.IntN(len(words))])
		for k := 4 + rng.IntN(12); k > 0; k-- {
			buf.WriteString(words[rng.IntN(len(words))])
			buf.WriteByte(' ')
		}
		buf.WriteString("\"}\n")
	}
	return buf.Bytes()[:n]
}

// benchText is 64 MiB of jsonLines and its gzip encoding (level 6, as
// servers use), made once per process.
var benchText = sync.OnceValues(func() (plain, gz []byte) {
	plain = jsonLines(bulkSize, 16)
	var z bytes.Buffer
	w, _ := gzip.NewWriterLevel(&z, 6)
	w.Write(plain)
	w.Close()
	return plain, z.Bytes()
})

// credBenchHandler: /small ("ok"), /auth (the Authorization it got),
// /text (benchText, identity) and /gzip (benchText gzip-encoded).
func credBenchHandler(w http.ResponseWriter, r *http.Request) {
	write := func(b []byte) {
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		for len(b) > 0 {
			n := min(len(b), 256<<10)
			if _, err := w.Write(b[:n]); err != nil {
				return
			}
			b = b[n:]
		}
	}
	switch r.URL.Path {
	case "/auth":
		io.WriteString(w, r.Header.Get("Authorization"))
	case "/text":
		plain, _ := benchText()
		write(plain)
	case "/gzip":
		_, gz := benchText()
		w.Header().Set("Content-Encoding", "gzip")
		write(gz)
	default:
		io.WriteString(w, "ok")
	}
}

// credBench is the two origins, the two proxies and a client through
// each.
type credBench struct {
	bound, unbound   string // https://HOST:PORT
	plainC, credC    *http.Client
	reflected        atomic.Int64 // the guard's findings
	phHeader, other  string       // Authorization values: the placeholder, and a token no one binds
	plainTr, credTr  *http.Transport
	boundO, unboundO *origin
}

func newCredBench(b testing.TB, h2 bool) *credBench {
	log.SetOutput(io.Discard) // as newBenchPaths: the h2 server's probe lines
	b.Cleanup(func() { log.SetOutput(os.Stderr) })
	cb := &credBench{phHeader: "Bearer " + testPH, other: "Bearer " + strings.Repeat("x", len(testPH))}
	cb.boundO = startOrigin(b, benchHost, h2, http.HandlerFunc(credBenchHandler))
	cb.unboundO = startOrigin(b, unboundHost, h2, http.HandlerFunc(credBenchHandler))
	rule := func(host string, port int) Rule {
		return Rule{Host: host, Ports: []int{port}, Access: l7.ReadOnly, DenyRules: []l7.Rule{{Path: "/admin/**"}}}
	}
	pol := Policy{
		Allow:        []Rule{rule(benchHost, cb.boundO.port), rule(unboundHost, cb.unboundO.port)},
		AllowPrivate: []Rule{{Host: "127.0.0.1/32"}},
		Hosts:        map[string]string{benchHost: "127.0.0.1", unboundHost: "127.0.0.1"},
	}
	upRoots := x509.NewCertPool()
	for _, o := range []*origin{cb.boundO, cb.unboundO} {
		upRoots.AddCert(o.Certificate())
	}
	ca := mustCA(b, pol)
	cred := &Credential{Name: "tok", Placeholder: testPH, Deny: true,
		Bindings: []Binding{{Host: benchHost, Ports: []int{cb.boundO.port}, Header: "Authorization", Template: "Bearer {}"}}}
	cred.SetValue(testValue, time.Time{})
	plain := startProxy(b, Config{Policy: pol, CA: ca, UpstreamRoots: upRoots, Log: func(Decision) {}})
	withCred := startProxy(b, Config{Policy: pol, CA: ca, UpstreamRoots: upRoots, Log: func(Decision) {},
		Credentials: []*Credential{cred}, Finding: func(f CredentialFinding) {
			if f.Kind == FindingReflection {
				cb.reflected.Add(1)
			}
		}})
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	through := func(p *testProxy) *http.Transport {
		tr := &http.Transport{Proxy: http.ProxyURL(mustURL("http://" + p.addr)), TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: h2}
		b.Cleanup(tr.CloseIdleConnections)
		return tr
	}
	cb.plainTr, cb.credTr = through(plain), through(withCred)
	cb.plainC, cb.credC = &http.Client{Transport: cb.plainTr}, &http.Client{Transport: cb.credTr}
	cb.bound = "https://" + benchHost + ":" + itoa(cb.boundO.port)
	cb.unbound = "https://" + unboundHost + ":" + itoa(cb.unboundO.port)

	// The paths do what they are said to: the protocol asked for end to
	// end; the credential proxy substitutes at the bound host and its
	// guard masks the value the origin echoes (as many '*'); the other
	// proxy passes the placeholder; the unbound host is not guarded.
	want := map[bool]int{false: 1, true: 2}[h2]
	for _, c := range []struct {
		c       *http.Client
		u, auth string
		body    string
	}{
		{cb.credC, cb.bound, cb.phHeader, "Bearer " + strings.Repeat("*", len(testValue))},
		{cb.plainC, cb.bound, cb.phHeader, cb.phHeader},
		{cb.credC, cb.unbound, cb.other, cb.other},
	} {
		resp, body := cb.get(b, c.c, c.u+"/auth", c.auth)
		if resp.StatusCode != 200 || resp.ProtoMajor != want || body != c.body {
			b.Fatalf("GET %s/auth: %d over %s, %q; want 200 over HTTP/%d, %q", c.u, resp.StatusCode, resp.Proto, body, want, c.body)
		}
	}
	if n := cb.reflected.Load(); n != 1 {
		b.Fatalf("%d reflection findings, want 1", n)
	}
	return cb
}

// get GETs u with Authorization auth ("" none) and reads the body.
func (cb *credBench) get(b testing.TB, c *http.Client, u, auth string) (*http.Response, string) {
	req, _ := http.NewRequest("GET", u, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		b.Fatal(err)
	}
	return resp, string(body)
}

// BenchmarkCredentialRequest: a small keep-alive GET with the
// placeholder in Authorization through an inspecting proxy without
// credentials ("inspected": passed as it is), through one with the
// credential bound to that host ("substituted": the value put in, the
// response guarded), and through the latter to an inspected host the
// credential is not bound to, with another token ("unbound": the
// placeholder looked for, nothing guarded). HTTP/1.1 and HTTP/2.
// Target: substituted-added-us < 50.
func BenchmarkCredentialRequest(b *testing.B) {
	for _, h2 := range []bool{false, true} {
		b.Run(protoName(h2), func(b *testing.B) {
			cb := newCredBench(b, h2)
			do := func(c *http.Client, u, auth string) func() {
				return func() {
					if resp, body := cb.get(b, c, u+"/small", auth); resp.StatusCode != 200 || body != "ok" {
						b.Fatalf("%s: %d %q", u, resp.StatusCode, body)
					}
				}
			}
			secs, _ := interleave(b, do(cb.plainC, cb.bound, cb.phHeader), do(cb.credC, cb.bound, cb.phHeader), do(cb.credC, cb.unbound, cb.other))
			reportLatency(b, []string{"inspected", "substituted", "unbound"}, secs)
		})
	}
}

// download GETs u with Authorization auth and checks it is benchText
// whole: the client's transport decodes a gzip body itself
// (it asked for gzip); from the bound host the guard decoded it.
func (cb *credBench) download(b *testing.B, c *http.Client, u, auth string, buf []byte) func() {
	plain, _ := benchText()
	return func() {
		req, _ := http.NewRequest("GET", u, nil)
		req.Header.Set("Authorization", auth)
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.CopyBuffer(struct{ io.Writer }{io.Discard}, resp.Body, buf)
		resp.Body.Close()
		if err != nil || n != int64(len(plain)) || resp.StatusCode != 200 {
			b.Fatalf("%s: %d, %d bytes, %v", u, resp.StatusCode, n, err)
		}
	}
}

// BenchmarkCredentialDownload: 64 MiB of text on a kept-alive connection
// through the proxy holding the credential, from the unbound host and
// from the bound one (every byte through the reflection guard), and from
// the bound host through the proxy without credentials ("inspected", the
// same bytes inspected alone). HTTP/1.1 and HTTP/2. Target: bound-pct
// >= 70 (the scan costs < 30 % throughput).
func BenchmarkCredentialDownload(b *testing.B) {
	for _, h2 := range []bool{false, true} {
		b.Run(protoName(h2), func(b *testing.B) {
			cb := newCredBench(b, h2)
			buf := make([]byte, 256<<10)
			wall, cpu := interleave(b, cb.download(b, cb.credC, cb.unbound+"/text", cb.other, buf),
				cb.download(b, cb.credC, cb.bound+"/text", cb.phHeader, buf), cb.download(b, cb.plainC, cb.bound+"/text", cb.phHeader, buf))
			reportThroughput(b, []string{"unbound", "bound", "inspected"}, wall, cpu, bulkSize)
		})
	}
}

// BenchmarkCredentialGzipDownload: the same 64 MiB gzip-encoded (a
// quarter of the size on the wire), through the proxy holding the credential:
// from the unbound host the proxy passes the gzip bytes and the client
// decodes them; from the bound host the guard decodes them, scans them
// and sends them on decoded. Throughput is of the decoded bytes.
func BenchmarkCredentialGzipDownload(b *testing.B) {
	for _, h2 := range []bool{false, true} {
		b.Run(protoName(h2), func(b *testing.B) {
			cb := newCredBench(b, h2)
			buf := make([]byte, 256<<10)
			wall, cpu := interleave(b, cb.download(b, cb.credC, cb.unbound+"/gzip", cb.other, buf), cb.download(b, cb.credC, cb.bound+"/gzip", cb.phHeader, buf))
			reportThroughput(b, []string{"unbound", "bound"}, wall, cpu, bulkSize)
		})
	}
}

// BenchmarkReflectionScan: the guard's scanner alone over benchText in
// 16 KiB reads (a TLS record's worth, as the proxy gets them), masking
// the forms of testValue; MB/s.
func BenchmarkReflectionScan(b *testing.B) {
	plain, _ := benchText()
	ps := &patterns{}
	for _, f := range valueForms(testValue) {
		ps.add(form{b: f})
	}
	text, buf := string(plain), make([]byte, 32<<10)
	b.SetBytes(int64(len(plain)))
	for b.Loop() {
		r := newScanReader(io.NopCloser(&chunked{s: text, n: 16 << 10}), ps, true, func(*form) { b.Fatal("a hit in benchText") })
		if n, err := io.CopyBuffer(struct{ io.Writer }{io.Discard}, r, buf); n != int64(len(plain)) || err != nil {
			b.Fatal(n, err)
		}
	}
}

// BenchmarkGzipDecode: decoding benchText's gzip encoding alone; MB/s
// of decoded bytes.
func BenchmarkGzipDecode(b *testing.B) {
	plain, gz := benchText()
	buf := make([]byte, 32<<10)
	b.SetBytes(int64(len(plain)))
	for b.Loop() {
		zr, err := gzip.NewReader(bytes.NewReader(gz))
		if err != nil {
			b.Fatal(err)
		}
		if n, err := io.CopyBuffer(struct{ io.Writer }{io.Discard}, zr, buf); n != int64(len(plain)) || err != nil {
			b.Fatal(n, err)
		}
	}
}

// TestScanSkipIndex: the one-pass search (skipIndex) finds exactly the
// occurrences that one bytes.Index per form finds, in texts long enough
// to take it, of values with all their forms (and of a set of several
// values, and of forms that begin alike, overlap and repeat), at every
// position and overlapping each other; mask covers them all; holdBack
// holds back what trying every suffix against every form would.
func TestScanSkipIndex(t *testing.T) {
	plain := jsonLines(1<<20, 1)
	sets := map[string][]string{
		"testValue": {testValue},
		"two":       {testValue, "ghp_0123456789abcdefABCDEF0123456789abcd"},
		"alike":     {"aaaaaaaa", "aaaaaaab", "abababab", "baaaaaaa"},
		"long":      {strings.Repeat("x1y2", 80)}, // longer than skipWindow
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for name, vals := range sets {
		ps := &patterns{}
		for _, v := range vals {
			for _, f := range valueForms(v) {
				ps.add(form{b: f})
			}
		}
		for round := 0; round < 200; round++ {
			start := rng.IntN(len(plain) - 8192)
			text := append([]byte(nil), plain[start:start+skipMinText+2*ps.maxLen+rng.IntN(4096)]...)
			for k := rng.IntN(6); k > 0; k-- { // forms dropped in, overwriting, overlapping
				f := ps.forms[rng.IntN(len(ps.forms))].b
				copy(text[rng.IntN(len(text)-len(f)+1):], f)
			}
			if rng.IntN(4) == 0 {
				for i := range text {
					text[i] = "ab"[rng.IntN(2)]
				}
			}
			want := map[[2]int]bool{}
			for i := range ps.forms {
				for j := 0; j+len(ps.forms[i].b) <= len(text); j++ {
					if bytes.HasPrefix(text[j:], ps.forms[i].b) {
						want[[2]int{i, j}] = true
					}
				}
			}
			got := map[[2]int]bool{}
			ps.find(text, func(i, j int) {
				if got[[2]int{i, j}] {
					t.Fatalf("%s: form %d at %d found twice", name, i, j)
				}
				got[[2]int{i, j}] = true
			})
			if len(got) != len(want) {
				t.Fatalf("%s round %d: found %d occurrences, want %d", name, round, len(got), len(want))
			}
			for k := range want {
				if !got[k] {
					t.Fatalf("%s round %d: form %d at %d not found", name, round, k[0], k[1])
				}
			}
			for k := 0; k < 8; k++ { // holdBack: the longest suffix that is a proper prefix of a form
				cut := text[:rng.IntN(len(text)+1)]
				want := 0
				for n := min(len(cut), ps.maxLen-1); n > 0 && want == 0; n-- {
					for i := range ps.forms {
						if len(ps.forms[i].b) > n && bytes.HasPrefix(ps.forms[i].b, cut[len(cut)-n:]) {
							want = n
						}
					}
				}
				if got := ps.holdBack(cut); got != want {
					t.Fatalf("%s: holdBack of %d bytes %d, want %d", name, len(cut), got, want)
				}
			}
			masked := append([]byte(nil), text...)
			ps.mask(masked, nil)
			for k := range want {
				if f := ps.forms[k[0]].b; !bytes.Equal(masked[k[1]:k[1]+len(f)], bytes.Repeat([]byte("*"), len(f))) {
					t.Fatalf("%s: form %d at %d not masked", name, k[0], k[1])
				}
			}
		}
		if ps.skip.Load() == nil {
			t.Fatalf("%s: the one-pass search was not taken", name)
		}
	}
}

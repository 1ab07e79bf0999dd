package egress

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeResolver records every lookup; names in m resolve, others fail.
type fakeResolver struct {
	mu      sync.Mutex
	m       map[string][]netip.Addr
	lookups []string
}

func (f *fakeResolver) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookups = append(f.lookups, host)
	if a, ok := f.m[host]; ok {
		return a, nil
	}
	return nil, fmt.Errorf("no such host %s", host)
}

func (f *fakeResolver) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.lookups...)
}

// decisionLog collects Decisions.
type decisionLog struct {
	mu sync.Mutex
	ds []Decision
}

func (l *decisionLog) add(d Decision) {
	l.mu.Lock()
	l.ds = append(l.ds, d)
	l.mu.Unlock()
}

func (l *decisionLog) all() []Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Decision(nil), l.ds...)
}

// waitN waits until at least n decisions were logged.
func (l *decisionLog) waitN(t testing.TB, n int) []Decision {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ds := l.all()
		if len(ds) >= n || time.Now().After(deadline) {
			if len(ds) < n {
				t.Fatalf("want %d decisions, got %d: %+v", n, len(ds), ds)
			}
			return ds
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type testProxy struct {
	*Proxy
	addr string
	log  *decisionLog
	res  *fakeResolver
}

// startProxy serves cfg on 127.0.0.1 (with a recording resolver and log
// unless set) and closes it at cleanup.
func startProxy(t testing.TB, cfg Config) *testProxy {
	t.Helper()
	tp := &testProxy{log: &decisionLog{}, res: &fakeResolver{m: map[string][]netip.Addr{}}}
	if cfg.Resolve == nil {
		cfg.Resolve = tp.res.resolve
	}
	if cfg.Log == nil {
		cfg.Log = tp.log.add
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tp.Proxy = p
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tp.addr = l.Addr().String()
	served := make(chan error, 1)
	go func() { served <- p.Serve(l) }()
	t.Cleanup(func() {
		p.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve returned %v after Close", err)
		}
	})
	return tp
}

// countingListener counts accepted connections.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

type upstreamSrv struct {
	*httptest.Server
	port    int
	accepts *atomic.Int64
	hits    *atomic.Int64
}

// startUpstream starts an HTTP (or TLS, when certFor is set) server on ip.
func startUpstream(t testing.TB, ip string, h http.Handler, certFor ...string) *upstreamSrv {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	u := &upstreamSrv{accepts: &atomic.Int64{}, hits: &atomic.Int64{}}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		h.ServeHTTP(w, r)
	}))
	srv.Listener.Close()
	srv.Listener = countingListener{ln, u.accepts}
	if len(certFor) > 0 {
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{selfSigned(t, certFor...)}}
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	u.Server = srv
	u.port = ln.Addr().(*net.TCPAddr).Port
	return u
}

var certCache sync.Map

func selfSigned(t testing.TB, names ...string) tls.Certificate {
	key := strings.Join(names, ",")
	if c, ok := certCache.Load(key); ok {
		return c.(tls.Certificate)
	}
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: names[0]},
		DNSNames:              names,
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	c := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv, Leaf: leaf}
	certCache.Store(key, c)
	return c
}

func certPool(c tls.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.Leaf)
	return p
}

// rawClient is a client connection to the proxy speaking raw HTTP.
type rawClient struct {
	net.Conn
	br *bufio.Reader
}

func dialProxy(t testing.TB, addr string) *rawClient {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	t.Cleanup(func() { c.Close() })
	return &rawClient{Conn: c, br: bufio.NewReader(c)}
}

// roundTrip writes raw and reads one response (body fully read).
func (c *rawClient) roundTrip(t testing.TB, raw, method string) (*http.Response, string) {
	t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	return c.read(t, method)
}

func (c *rawClient) read(t testing.TB, method string) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	if method == "CONNECT" && resp.StatusCode == 200 {
		return resp, ""
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return resp, string(b)
}

// get sends a simple absolute-form GET and returns status and body.
func (c *rawClient) get(t testing.TB, url, host string) (*http.Response, string) {
	t.Helper()
	req := "GET " + url + " HTTP/1.1\r\n"
	if host != "" {
		req += "Host: " + host + "\r\n"
	}
	return c.roundTrip(t, req+"\r\n", "GET")
}

func decodeDenial(t testing.TB, body string) denialBody {
	t.Helper()
	var d denialBody
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatalf("denial body %q: %v", body, err)
	}
	return d
}

// expectClosed asserts the peer closes c without sending anything more.
func expectClosed(t testing.TB, c net.Conn, br *bufio.Reader) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var err error
	if br != nil {
		_, err = br.ReadByte()
	} else {
		var b [1]byte
		_, err = c.Read(b[:])
	}
	if err == nil {
		t.Fatal("connection still open and sending data")
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("connection not closed within 5s")
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func hello(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintf(w, "hello from %s %s", r.Host, r.URL.Path)
}

//go:build linux

package e2e

// Fixtures for the governed-egress tests (network.mode: proxy): upstream
// servers on 127.0.0.0/8 addresses that count what reaches them, a test CA
// whose certificate the sandbox's TLS clients trust, and a writer for the
// policy's network rules. No test traffic leaves 127.0.0.0/8 (and ::1).

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// proxyAddr is where the egress proxy listens inside every sandbox.
const proxyAddr = "127.0.0.1:3128"

// testNames are the names the test CA's leaf certificate is valid for.
var testNames = []string{"api.allowed.test", "tls.allowed.test", "git.allowed.test", "evil.test", "api.github.com", "example.com"}

var testCA struct {
	once    sync.Once
	caPEM   []byte
	leaf    tls.Certificate
	initErr error
}

// caCert returns the test CA (PEM) and a server certificate for testNames
// signed by it.
func caCert(t *testing.T) ([]byte, tls.Certificate) {
	t.Helper()
	testCA.once.Do(func() {
		testCA.initErr = func() error {
			caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			if err != nil {
				return err
			}
			now := time.Now()
			caTmpl := &x509.Certificate{
				SerialNumber:          big.NewInt(1),
				Subject:               pkix.Name{CommonName: "corral e2e test CA"},
				NotBefore:             now.Add(-time.Hour),
				NotAfter:              now.Add(24 * time.Hour),
				IsCA:                  true,
				BasicConstraintsValid: true,
				KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
			}
			caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
			if err != nil {
				return err
			}
			ca, err := x509.ParseCertificate(caDER)
			if err != nil {
				return err
			}
			key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			if err != nil {
				return err
			}
			leafTmpl := &x509.Certificate{
				SerialNumber: big.NewInt(2),
				Subject:      pkix.Name{CommonName: testNames[0]},
				NotBefore:    now.Add(-time.Hour),
				NotAfter:     now.Add(24 * time.Hour),
				DNSNames:     testNames,
				KeyUsage:     x509.KeyUsageDigitalSignature,
				ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			}
			leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &key.PublicKey, caKey)
			if err != nil {
				return err
			}
			testCA.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
			testCA.leaf = tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key}
			return nil
		}()
	})
	if testCA.initErr != nil {
		t.Fatalf("test CA: %v", testCA.initErr)
	}
	return testCA.caPEM, testCA.leaf
}

// writeCA writes the test CA certificate into a fresh directory readable
// by id (to be granted read-only) and returns the directory and the file.
func writeCA(t *testing.T, id *ident) (dir, file string) {
	t.Helper()
	caPEM, _ := caCert(t)
	dir = mkdir(t, id, "ca")
	file = filepath.Join(dir, "ca.pem")
	writeFile(t, id, file, string(caPEM), 0o644)
	return dir, file
}

// countingListener counts accepted connections.
type countingListener struct {
	net.Listener
	n *atomic.Int32
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// upstream is an HTTP(S) server on a loopback address standing in for an
// internet host. It counts TCP connections, TLS ClientHellos and requests.
// Its default handler answers "upstream-ok HOST PATH"; /ws is a WebSocket
// echo; more routes can be added to mux.
type upstream struct {
	srv     *httptest.Server
	mux     *http.ServeMux
	ip      string
	port    int
	accepts atomic.Int32
	hellos  atomic.Int32
	mu      sync.Mutex
	reqs    []string // "METHOD HOST REQUEST-URI"
}

// newUpstream starts an upstream on ip:0 (ip:port when port != 0), with
// TLS when tlsOn. It fails the test when the address cannot be bound.
func newUpstream(t *testing.T, ip string, port int, tlsOn bool) *upstream {
	t.Helper()
	u, err := startUpstream(ip, port, tlsOn, t)
	if err != nil {
		t.Fatalf("upstream on %s: %v", ip, err)
	}
	return u
}

func startUpstream(ip string, port int, tlsOn bool, t *testing.T) (*upstream, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	u := &upstream{mux: http.NewServeMux(), ip: ip, port: ln.Addr().(*net.TCPAddr).Port}
	u.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream-ok %s %s\n", r.Host, r.URL.Path)
	})
	u.mux.HandleFunc("/ws", wsEcho)
	u.mux.HandleFunc("/hdrs", func(w http.ResponseWriter, r *http.Request) {
		r.Header.Write(w) // the request headers as received
	})
	u.mux.HandleFunc("/len", func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "len %d %v\n", n, err)
	})
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.reqs = append(u.reqs, r.Method+" "+r.Host+" "+r.RequestURI)
		u.mu.Unlock()
		u.mux.ServeHTTP(w, r)
	}))
	u.srv.Listener.Close()
	u.srv.Listener = countingListener{ln, &u.accepts}
	u.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	if tlsOn {
		_, leaf := caCert(t)
		u.srv.TLS = &tls.Config{
			Certificates: []tls.Certificate{leaf},
			GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
				u.hellos.Add(1)
				return nil, nil
			},
		}
		u.srv.StartTLS()
	} else {
		u.srv.Start()
	}
	t.Cleanup(u.srv.Close)
	return u, nil
}

// hostPort is the upstream's authority under name.
func (u *upstream) hostPort(name string) string { return net.JoinHostPort(name, strconv.Itoa(u.port)) }

// requests returns what the upstream served so far.
func (u *upstream) requests() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.reqs...)
}

// assertUntouched fails when anything reached u.
func (u *upstream) assertUntouched(t *testing.T, what string) {
	t.Helper()
	time.Sleep(100 * time.Millisecond) // let in-flight accepts land
	if n, h, r := u.accepts.Load(), u.hellos.Load(), u.requests(); n != 0 || h != 0 || len(r) != 0 {
		t.Errorf("%s (%s:%d) was reached: %d connections, %d TLS ClientHellos, requests %q", what, u.ip, u.port, n, h, r)
	}
}

// wsEcho is a minimal RFC 6455 server: it completes the handshake and
// echoes one text frame.
func wsEcho(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Sec-WebSocket-Key")
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") || key == "" {
		http.Error(w, "not a websocket handshake", http.StatusBadRequest)
		return
	}
	c, brw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", base64.StdEncoding.EncodeToString(h[:]))
	if brw.Flush() != nil {
		return
	}
	var hdr [2]byte
	if _, err := io.ReadFull(brw, hdr[:]); err != nil {
		return
	}
	n := int(hdr[1] & 0x7f)
	if n == 126 {
		var l [2]byte
		if _, err := io.ReadFull(brw, l[:]); err != nil {
			return
		}
		n = int(binary.BigEndian.Uint16(l[:]))
	} else if n == 127 {
		return
	}
	var mask [4]byte
	if hdr[1]&0x80 != 0 {
		if _, err := io.ReadFull(brw, mask[:]); err != nil {
			return
		}
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(brw, payload); err != nil {
		return
	}
	for i := range payload {
		payload[i] ^= mask[i%4]
	}
	out := []byte{0x80 | hdr[0]&0x0f}
	if n < 126 {
		out = append(out, byte(n))
	} else {
		out = append(out, 126, byte(n>>8), byte(n))
	}
	brw.Write(append(out, payload...))
	brw.Flush()
}

// rawCounter is a plain TCP, UDP or unix listener that counts connections
// or datagrams and answers nothing.
type rawCounter struct {
	addr string
	n    atomic.Int32
}

// listenCounter starts a counting listener; network is tcp, udp or unix.
// It returns nil (and logs why) when the address cannot be bound.
func listenCounter(t *testing.T, network, addr string) *rawCounter {
	t.Helper()
	rc := &rawCounter{}
	if network == "udp" {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			t.Logf("cannot listen on udp %s: %v", addr, err)
			return nil
		}
		t.Cleanup(func() { pc.Close() })
		rc.addr = pc.LocalAddr().String()
		go func() {
			buf := make([]byte, 2048)
			for {
				if _, _, err := pc.ReadFrom(buf); err != nil {
					return
				}
				rc.n.Add(1)
			}
		}()
		return rc
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Logf("cannot listen on %s %s: %v", network, addr, err)
		return nil
	}
	t.Cleanup(func() { ln.Close() })
	rc.addr = ln.Addr().String()
	if network == "unix" {
		rc.addr = addr
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			rc.n.Add(1)
			c.Close()
		}
	}()
	return rc
}

// ep is one network endpoint rule.
type ep struct {
	host  string
	ports []int
}

// egressNet is the network section of a proxy-mode policy.
type egressNet struct {
	allow, deny, private []ep
	hosts                map[string]string
}

// yaml renders the rules as lines under "network:".
func (n egressNet) yaml() string {
	var b strings.Builder
	list := func(name string, eps []ep) {
		if len(eps) == 0 {
			return
		}
		fmt.Fprintf(&b, "  %s:\n", name)
		for _, e := range eps {
			fmt.Fprintf(&b, "    - {host: %s", strconv.Quote(e.host))
			if len(e.ports) > 0 {
				ps := make([]string, len(e.ports))
				for i, p := range e.ports {
					ps[i] = strconv.Itoa(p)
				}
				fmt.Fprintf(&b, ", ports: [%s]", strings.Join(ps, ", "))
			}
			b.WriteString("}\n")
		}
	}
	list("allow", n.allow)
	list("deny", n.deny)
	list("allow_private", n.private)
	if len(n.hosts) > 0 {
		b.WriteString("  hosts:\n")
		for k, v := range n.hosts {
			fmt.Fprintf(&b, "    %s: %s\n", strconv.Quote(k), strconv.Quote(v))
		}
	}
	return b.String()
}

// proxyRun runs script in a proxy-mode sandbox as id with the given rules;
// ro directories are granted read-only. The workdir is returned too.
func proxyRun(t *testing.T, id *ident, n egressNet, ro []string, flags []string, script string) (result, string) {
	t.Helper()
	wd := mkdir(t, id, "egress")
	pol := writePolicy(t, id, policy{RO: ro, Network: "proxy", NetRules: n.yaml()})
	res := corral(t, run{id: id, policy: pol, workdir: wd, flags: flags, args: sh(script)})
	return res, wd
}

// want asserts that the "key: value" line of out has the wanted value
// (prefix match when prefix).
func want(t *testing.T, res result, key, val string, prefix bool) {
	t.Helper()
	got, ok := lineValue(res.stdout, key)
	if !ok {
		t.Errorf("%s: no output line\n%s", key, res)
		return
	}
	if got != val && !(prefix && strings.HasPrefix(got, val)) {
		t.Errorf("%s: got %q, want %q\n%s", key, got, val, res)
	}
}

// denialBody is the proxy's JSON 403 body.
type denialBody struct {
	Error  string `json:"error"`
	Reason string `json:"reason"`
	Host   string `json:"host"`
	Port   int    `json:"port"`
	Rule   string `json:"rule"`
	Hint   string `json:"hint"`
}

// ocsfEvent is the subset of an OCSF HTTP Activity event the tests read.
type ocsfEvent struct {
	ClassUID    int    `json:"class_uid"`
	Action      string `json:"action"`
	ActionID    int    `json:"action_id"`
	HTTPRequest struct {
		Method string `json:"http_method"`
		URL    struct {
			Hostname  string `json:"hostname"`
			Path      string `json:"path"`
			URLString string `json:"url_string"`
		} `json:"url"`
	} `json:"http_request"`
	HTTPResponse struct {
		Code int `json:"code"`
	} `json:"http_response"`
	Dst struct {
		Hostname string `json:"hostname"`
		IP       string `json:"ip"`
		Port     int    `json:"port"`
	} `json:"dst_endpoint"`
	Unmapped struct {
		SandboxID string `json:"sandbox_id"`
		Rule      string `json:"rule"`
		Reason    string `json:"reason"`
		Hint      string `json:"hint"`
	} `json:"unmapped"`
	raw string
}

// egressEvents reads the class 4002 events of an audit file.
func egressEvents(t *testing.T, path string) []ocsfEvent {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}
	defer f.Close()
	var out []ocsfEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		var e ocsfEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line %d is not JSON: %v: %s", n, err, sc.Text())
		}
		if e.ClassUID == 4002 {
			e.raw = sc.Text()
			out = append(out, e)
		}
	}
	return out
}

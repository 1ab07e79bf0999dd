//go:build linux

package e2e

// Fixtures for the governed-egress tests (network.mode: proxy): qualify's
// upstream servers on 127.0.0.0/8 addresses that count what reaches them
// and its writer for the policy's network rules, and a test CA whose
// certificate the sandbox's TLS clients trust. No test traffic leaves
// 127.0.0.0/8 (and ::1).

import (
	"bufio"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/testcert"
	"github.com/corral-sandbox/corral/qualify"
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
		ca, err := testcert.New(nil)
		if err == nil {
			testCA.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Certificate[0]})
			testCA.leaf, err = testcert.New(&ca, testNames...)
		}
		testCA.initErr = err
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

// newUpstream starts a qualify.Upstream for the test on ip:port (0: any
// port), with TLS from the test CA when tlsOn. It fails the test when the
// address cannot be bound.
func newUpstream(t *testing.T, ip string, port int, tlsOn bool) *qualify.Upstream {
	t.Helper()
	u, err := startUpstream(ip, port, tlsOn, t)
	if err != nil {
		t.Fatalf("upstream on %s: %v", ip, err)
	}
	return u
}

// startUpstream is newUpstream returning the error. Besides "upstream-ok
// HOST PATH" the upstream serves /ws (a WebSocket echo), /hdrs (the
// request headers as received) and /len (the request body's length).
func startUpstream(ip string, port int, tlsOn bool, t *testing.T) (*qualify.Upstream, error) {
	var cert *tls.Certificate
	if tlsOn {
		_, leaf := caCert(t)
		cert = &leaf
	}
	u, err := qualify.NewUpstream(ip, port, cert)
	if err != nil {
		return nil, err
	}
	u.Mux.HandleFunc("/ws", wsEcho)
	u.Mux.HandleFunc("/hdrs", func(w http.ResponseWriter, r *http.Request) {
		r.Header.Write(w)
	})
	u.Mux.HandleFunc("/len", func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "len %d %v\n", n, err)
	})
	t.Cleanup(u.Close)
	return u, nil
}

// assertUntouched fails when anything reached u.
func assertUntouched(t *testing.T, u *qualify.Upstream, what string) {
	t.Helper()
	if got := u.Touched(); got != "" {
		t.Errorf("%s (%s:%d) was reached: %s", what, u.IP, u.Port, got)
	}
}

// ep is a network rule for qualify.Egress.
func ep(host string, ports ...int) qualify.Endpoint {
	return qualify.Endpoint{Host: host, Ports: ports}
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

// proxyRun runs script in a proxy-mode sandbox as id with the given rules;
// ro directories are granted read-only. The workdir is returned too.
func proxyRun(t *testing.T, id *ident, n qualify.Egress, ro []string, flags []string, script string) (result, string) {
	t.Helper()
	wd := mkdir(t, id, "egress")
	pol := writePolicy(t, id, policy{RO: ro, Network: "proxy", NetRules: n.YAML()})
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

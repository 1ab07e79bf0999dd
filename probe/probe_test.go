package probe

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/internal/wine"
)

// TestMain makes the test binary a probe binary too, so that probes that
// re-execute themselves (status, spawn, ptrace sibling, ...) work in tests.
func TestMain(m *testing.M) {
	os.Setenv(AnywhereEnv, "1") // the tests run probes on the host on purpose
	if len(os.Args) > 1 && os.Args[1] == Arg {
		os.Exit(Main(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// runProbeT runs a probe in-process and decodes its single report line.
func runProbeT(t *testing.T, args ...string) Report {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("%v: exit %d, stderr %q", args, code, errb.String())
	}
	if n := strings.Count(out.String(), "\n"); n != 1 || !strings.HasSuffix(out.String(), "\n") {
		t.Fatalf("%v: want exactly one line, got %q", args, out.String())
	}
	var rep Report
	dec := json.NewDecoder(&out)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	if rep.Probe != args[0] {
		t.Fatalf("probe = %q, want %q", rep.Probe, args[0])
	}
	for _, r := range rep.Results {
		if r.What == "" {
			t.Errorf("%v: result without What: %+v", args, r)
		}
		if len(r.Detail) > MaxDetail {
			t.Errorf("%v: Detail of %d bytes", args, len(r.Detail))
		}
		if r.OK && r.Errno != "" {
			t.Errorf("%v: OK with errno: %+v", args, r)
		}
	}
	return rep
}

func find(t *testing.T, rep Report, what string) Result {
	t.Helper()
	for _, r := range rep.Results {
		if r.What == what {
			return r
		}
	}
	t.Fatalf("no result %q in %+v", what, rep.Results)
	return Result{}
}

func TestJSONShape(t *testing.T) {
	var out bytes.Buffer
	emit(&out, "x", nil)
	if got, want := out.String(), `{"probe":"x","results":[]}`+"\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	out.Reset()
	emit(&out, "x", []Result{{What: "a <b>", Errno: "EPERM", Detail: strings.Repeat("é", 5000)}})
	var m map[string]any
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"what":"a <b>","ok":false,"errno":"EPERM","detail":"`) {
		t.Fatalf("shape: %s", out.String()[:100])
	}
	var rep Report
	json.Unmarshal(out.Bytes(), &rep)
	if len(rep.Results[0].Detail) > MaxDetail || !strings.HasSuffix(rep.Results[0].Detail, "[truncated]") {
		t.Fatalf("detail not bounded: %d", len(rep.Results[0].Detail))
	}
}

func TestUsage(t *testing.T) {
	bad := [][]string{nil, {"nosuch"}, {"read"}, {"exit"}, {"exit", "x"}, {"connect", "sctp", "x"},
		{"http", "a", "GET"}, {"http", "127.0.0.1:1", "GET", "/", "NoColon"}, {"symlink", "a"}, {"sleep", "x"}}
	if runtime.GOOS == "linux" {
		bad = append(bad, []string{"kill", "NOSUCH"}) // elsewhere kill is unsupported, whatever the signal
	}
	for _, args := range bad {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
		if out.Len() != 0 || errb.Len() == 0 {
			t.Errorf("%q: stdout %q stderr %q", args, out.String(), errb.String())
		}
	}
}

func TestExit(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"exit", "3"}, &out, &errb); code != 3 {
		t.Fatalf("exit code %d", code)
	}
	if !strings.Contains(out.String(), `"probe":"exit"`) {
		t.Fatalf("no report: %q", out.String())
	}
}

func TestFiles(t *testing.T) {
	d := t.TempDir()
	f := filepath.Join(d, "f")
	os.WriteFile(f, []byte("hello\x00world"), 0o644)
	big := filepath.Join(d, "big")
	os.WriteFile(big, bytes.Repeat([]byte("x"), 10000), 0o644)

	rep := runProbeT(t, "read", f, filepath.Join(d, "missing"), big, d)
	if r := rep.Results[0]; !r.OK || r.Detail != "hello\x00world" || r.What != "read "+f {
		t.Errorf("read: %+v", r)
	}
	if r := rep.Results[1]; r.OK || r.Errno != "ENOENT" {
		t.Errorf("read missing: %+v", r)
	}
	if r := rep.Results[2]; !r.OK || len(r.Detail) > MaxDetail {
		t.Errorf("read big: ok=%v len=%d", r.OK, len(r.Detail))
	}
	wantDir := "EISDIR"
	if runtime.GOOS == "windows" {
		wantDir = "errno1" // ReadFile on a directory: ERROR_INVALID_FUNCTION
	}
	if r := rep.Results[3]; r.OK || r.Errno != wantDir {
		t.Errorf("read dir: %+v", r)
	}

	w := filepath.Join(d, "w")
	runProbeT(t, "write", w)
	rep = runProbeT(t, "write", w, filepath.Join(d, "nodir", "x"))
	if b, _ := os.ReadFile(w); string(b) != WriteLine+WriteLine || !rep.Results[0].OK {
		t.Errorf("write: %q %+v", b, rep.Results[0])
	}
	if r := rep.Results[1]; r.OK || r.Errno != "ENOENT" {
		t.Errorf("write nodir: %+v", r)
	}

	rep = runProbeT(t, "mkdir", filepath.Join(d, "sub"), filepath.Join(d, "sub"))
	if !rep.Results[0].OK || rep.Results[1].Errno != "EEXIST" {
		t.Errorf("mkdir: %+v", rep.Results)
	}
	rep = runProbeT(t, "list", d, filepath.Join(d, "missing"))
	if r := rep.Results[0]; !r.OK || r.Detail != "big f sub w" {
		t.Errorf("list: %+v", r)
	}
	if r := rep.Results[1]; r.OK || r.Errno != "ENOENT" {
		t.Errorf("list missing: %+v", r)
	}
	t.Run("symlink", func(t *testing.T) {
		wine.SkipArtifact(t, wine.NoSymlinks)
		rep := runProbeT(t, "symlink", f, filepath.Join(d, "l"))
		if len(rep.Results) != 2 || !rep.Results[0].OK || !rep.Results[1].OK || rep.Results[1].Detail != "hello\x00world" {
			t.Errorf("symlink: %+v", rep.Results)
		}
	})
	rep = runProbeT(t, "rename", w, filepath.Join(d, "w2"))
	if !rep.Results[0].OK {
		t.Errorf("rename: %+v", rep.Results)
	}
	rep = runProbeT(t, "unlink", filepath.Join(d, "w2"), filepath.Join(d, "sub"))
	if !rep.Results[0].OK || rep.Results[1].OK {
		t.Errorf("unlink: %+v", rep.Results)
	}
}

func TestConnect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedAddr := closed.Addr().String()
	closed.Close()

	rep := runProbeT(t, "connect", "tcp", ln.Addr().String(), closedAddr)
	if r := rep.Results[0]; !r.OK || r.What != "connect tcp "+ln.Addr().String() {
		t.Errorf("open port: %+v", r)
	}
	if r := rep.Results[1]; r.OK || r.Errno != "ECONNREFUSED" {
		t.Errorf("closed port: %+v", r)
	}

	t.Run("udp", func(t *testing.T) {
		wine.SkipArtifact(t, "WSAIoctl(SIO_UDP_NETRESET) fails with WSAEOPNOTSUPP, so Go opens no UDP socket")
		u, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		rep := runProbeT(t, "connect", "udp", u.LocalAddr().String())
		if r := rep.Results[0]; !r.OK {
			t.Errorf("udp: %+v", r)
		}
		buf := make([]byte, 16)
		n, _, _ := u.ReadFrom(buf)
		if string(buf[:n]) != "probe" {
			t.Errorf("udp datagram %q", buf[:n])
		}
	})

	t.Run("unix", func(t *testing.T) {
		wine.SkipArtifact(t, "AF_UNIX sockets are not supported: socket() fails with WSAEAFNOSUPPORT")
		sock := filepath.Join(t.TempDir(), "s")
		ul, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer ul.Close()
		rep := runProbeT(t, "connect", "unix", sock, sock+"-missing")
		if !rep.Results[0].OK || rep.Results[1].Errno != "ENOENT" {
			t.Errorf("unix: %+v", rep.Results)
		}
	})
}

// proxy is a trivial forward proxy: allowed.test is allowed, all else 403.
func proxy(w http.ResponseWriter, r *http.Request) {
	if r.Host == "allowed.test" {
		fmt.Fprint(w, "hello from allowed")
		return
	}
	http.Error(w, "denied by policy", http.StatusForbidden)
}

func TestHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(proxy))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	rep := runProbeT(t, "http", addr, "GET", "http://allowed.test/", "Host:allowed.test")
	if r := rep.Results[0]; !r.OK || r.Detail != "200 hello from allowed" || r.What != "http GET http://allowed.test/" {
		t.Errorf("allowed: %+v", r)
	}
	rep = runProbeT(t, "http", addr, "GET", "http://evil.test/", "Host: evil.test", "X-A:b")
	if r := rep.Results[0]; r.OK || !strings.HasPrefix(r.Detail, "403 denied by policy") {
		t.Errorf("denied: %+v", r)
	}
	// HTTP/1.1 without Host: Go's server answers 400.
	rep = runProbeT(t, "http", addr, "GET", "/")
	if r := rep.Results[0]; r.OK || !strings.HasPrefix(r.Detail, "400 ") {
		t.Errorf("no host: %+v", r)
	}
	rep = runProbeT(t, "http", "127.0.0.1:1", "GET", "/")
	if r := rep.Results[0]; r.OK || r.Errno != "ECONNREFUSED" {
		t.Errorf("refused: %+v", r)
	}
}

// connectProxy accepts one CONNECT, answers status, then hands the
// connection to after.
func connectProxy(t *testing.T, status string, after func(net.Conn)) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		fmt.Fprintf(c, "HTTP/1.1 %s\r\nContent-Length: 0\r\n\r\n", status)
		if after != nil {
			after(c)
		}
	}()
	return ln.Addr().String()
}

func TestHTTPConnect(t *testing.T) {
	// Refused CONNECT: one result only.
	addr := connectProxy(t, "403 Forbidden", nil)
	rep := runProbeT(t, "http", addr, "CONNECT", "evil.test:443", "Host:evil.test:443")
	if len(rep.Results) != 1 || rep.Results[0].OK || !strings.HasPrefix(rep.Results[0].Detail, "403") {
		t.Errorf("refused: %+v", rep.Results)
	}

	// The proxy reads the ClientHello and closes: EOF.
	addr = connectProxy(t, "200 Connection established", func(c net.Conn) {
		h := make([]byte, 5)
		io.ReadFull(c, h)
		io.ReadFull(c, make([]byte, int(h[3])<<8|int(h[4])))
	})
	rep = runProbeT(t, "http", addr, "CONNECT", "allowed.test:443", "sni:evil.test")
	if len(rep.Results) != 2 || !rep.Results[0].OK {
		t.Fatalf("connect: %+v", rep.Results)
	}
	if r := rep.Results[1]; r.What != "tls sni evil.test" || r.OK || r.Detail != "closed (EOF)" {
		t.Errorf("closed tunnel: %+v", r)
	}

	// A real TLS server behind the tunnel sees our SNI and answers.
	for _, sni := range []string{"allowed.test", "", "127.0.0.1"} {
		got := make(chan string, 1)
		tlsSrv := httptest.NewUnstartedServer(nil)
		tlsSrv.StartTLS()
		cfg := tlsSrv.TLS.Clone()
		tlsSrv.Close()
		cfg.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			got <- h.ServerName
			return nil, nil
		}
		addr = connectProxy(t, "200 OK", func(c net.Conn) {
			tls.Server(c, cfg).Handshake()
		})
		rep = runProbeT(t, "http", addr, "CONNECT", "allowed.test:443", "sni:"+sni)
		what := "tls sni " + sni
		if sni == "" {
			what = "tls no-sni"
		}
		if r := rep.Results[1]; r.What != what || !r.OK || !strings.Contains(r.Detail, "record handshake") {
			t.Errorf("sni %q: %+v", sni, r)
		}
		if s := <-got; s != sni {
			t.Errorf("server saw SNI %q, want %q", s, sni)
		}
	}
}

package session

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/egress"
)

// loopback upstreams: a line echo (tunnels) and an HTTP server.
type testUpstreams struct {
	echoPort, httpPort int
}

func startUpstreams(t testing.TB) testUpstreams {
	t.Helper()
	el, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { el.Close() })
	go func() {
		for {
			c, err := el.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.Host)
	}))
	t.Cleanup(hs.Close)
	return testUpstreams{echoPort: el.Addr().(*net.TCPAddr).Port, httpPort: hs.Listener.Addr().(*net.TCPAddr).Port}
}

// rulesAllowing allows each name on the upstreams' ports, pinned to
// 127.0.0.1 (which allow_private lets the proxy dial).
func (u testUpstreams) rulesAllowing(names ...string) egress.Policy {
	p := egress.Policy{Hosts: map[string]string{}, AllowPrivate: []egress.Rule{{Host: "127.0.0.1/32"}}}
	for _, n := range names {
		p.Allow = append(p.Allow, egress.Rule{Host: n, Ports: []int{u.echoPort, u.httpPort}})
		p.Hosts[n] = "127.0.0.1"
	}
	return p
}

func newTestProxy(t testing.TB, pol egress.Policy) *egress.Proxy {
	t.Helper()
	p, err := egress.New(egress.Config{Policy: pol, Resolve: func(context.Context, string) ([]netip.Addr, error) {
		return nil, errors.New("no resolver in this test")
	}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// proxyConn is a client connection to the switch's listener.
type proxyConn struct {
	net.Conn
	br *bufio.Reader
}

func dialSwitch(t testing.TB, addr string) *proxyConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return &proxyConn{Conn: c, br: bufio.NewReader(c)}
}

// tunnel opens a CONNECT tunnel to host:port (the echo upstream) and
// checks one line goes through; "" or the status line it got instead.
func tunnel(t testing.TB, addr, host string, port int) (*proxyConn, string) {
	t.Helper()
	c := dialSwitch(t, addr)
	hp := net.JoinHostPort(host, strconv.Itoa(port))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", hp, hp)
	resp, err := http.ReadResponse(c.br, &http.Request{Method: "CONNECT"})
	if err != nil {
		c.Close()
		return nil, "no answer: " + err.Error()
	}
	if resp.StatusCode != 200 {
		c.Close()
		return nil, resp.Status
	}
	if err := c.echo("hello"); err != nil {
		c.Close()
		return nil, err.Error()
	}
	return c, ""
}

// echo sends a line through a tunnel and reads it back.
func (c *proxyConn) echo(line string) error {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return err
	}
	got, err := c.br.ReadString('\n')
	if err != nil {
		return err
	}
	if got != line+"\n" {
		return fmt.Errorf("echo %q, want %q", got, line)
	}
	return nil
}

// get sends one keep-alive GET for http://host:port/ and returns the
// status code and body.
func (c *proxyConn) get(host string, port int) (int, string, error) {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	hp := net.JoinHostPort(host, strconv.Itoa(port))
	if _, err := fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", hp, hp); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(c.br, &http.Request{Method: "GET"})
	if err != nil {
		return 0, "", err
	}
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func listenSwitch(t testing.TB, p *egress.Proxy) (*egressSwitch, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	sw := newEgressSwitch(l, p, "")
	t.Cleanup(sw.Close)
	return sw, l.Addr().String()
}

// A rule change that only adds (a host grant) keeps every connection:
// a tunnel open through the proxy goes on, a keep-alive connection's
// next request is decided by the new rules, and new connections get the
// new host; the revision in force moves on and reads the new host back.
func TestEgressExtendKeepsConnections(t *testing.T) {
	u := startUpstreams(t)
	before := u.rulesAllowing("old.test")
	after := u.rulesAllowing("old.test", "new.test")
	if !egress.Adds(before, after) {
		t.Fatal("adding new.test is not only an addition")
	}
	sw, addr := listenSwitch(t, newTestProxy(t, before))
	if rev := sw.revision(); rev != 1 {
		t.Fatalf("first revision %d", rev)
	}
	tun, bad := tunnel(t, addr, "old.test", u.echoPort)
	if tun == nil {
		t.Fatalf("tunnel to old.test: %s", bad)
	}
	defer tun.Close()
	keep := dialSwitch(t, addr)
	defer keep.Close()
	if code, body, err := keep.get("old.test", u.httpPort); code != 200 || err != nil {
		t.Fatalf("keep-alive GET old.test: %d %q %v", code, body, err)
	}
	if code, _, _ := dialSwitch(t, addr).get("new.test", u.httpPort); code != 403 {
		t.Fatalf("new.test before the grant: %d, want 403", code)
	}

	rev, err := sw.extend(newTestProxy(t, after))
	if err != nil || rev != 2 || sw.revision() != 2 {
		t.Fatalf("extend: revision %d (%d in force), %v", rev, sw.revision(), err)
	}
	if r, ok := sw.inForce("new.test", u.httpPort); !ok || r != 2 {
		t.Fatalf("read-back of new.test: revision %d, admitted %v", r, ok)
	}
	if err := tun.echo("still there"); err != nil {
		t.Fatalf("tunnel admitted before the grant: %v", err)
	}
	if code, body, err := keep.get("new.test", u.httpPort); code != 200 || body != "hello new.test:"+strconv.Itoa(u.httpPort) || err != nil {
		t.Fatalf("keep-alive GET new.test after the grant: %d %q %v", code, body, err)
	}
	if c, bad := tunnel(t, addr, "new.test", u.echoPort); c == nil {
		t.Fatalf("new tunnel to new.test: %s", bad)
	} else {
		c.Close()
	}
	// A second grant: the first retired proxy's tunnel still goes on.
	rev, err = sw.extend(newTestProxy(t, u.rulesAllowing("old.test", "new.test", "third.test")))
	if err != nil || rev != 3 {
		t.Fatalf("second extend: %d %v", rev, err)
	}
	if err := tun.echo("after two grants"); err != nil {
		t.Fatalf("tunnel after the second grant: %v", err)
	}
}

// A change that narrows (swap) closes what the old rules admitted, the
// connections of proxies retired by earlier grants too; Close ends the
// rest.
func TestEgressSwapClosesConnections(t *testing.T) {
	u := startUpstreams(t)
	sw, addr := listenSwitch(t, newTestProxy(t, u.rulesAllowing("old.test")))
	first, bad := tunnel(t, addr, "old.test", u.echoPort)
	if first == nil {
		t.Fatal(bad)
	}
	defer first.Close()
	if _, err := sw.extend(newTestProxy(t, u.rulesAllowing("old.test", "new.test"))); err != nil {
		t.Fatal(err)
	}
	second, bad := tunnel(t, addr, "new.test", u.echoPort)
	if second == nil {
		t.Fatal(bad)
	}
	defer second.Close()
	if err := sw.swap(newTestProxy(t, u.rulesAllowing("old.test"))); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*proxyConn{"retired proxy's": first, "replaced proxy's": second} {
		if err := c.echo("gone?"); err == nil {
			t.Errorf("the %s tunnel is still open after a narrowing change", name)
		}
	}
	if sw.revision() != 3 {
		t.Errorf("revision %d after swap, want 3", sw.revision())
	}
	if _, ok := sw.inForce("new.test", u.echoPort); ok {
		t.Error("new.test reads back as in force after it was removed")
	}

	third, bad := tunnel(t, addr, "old.test", u.echoPort)
	if third == nil {
		t.Fatal(bad)
	}
	defer third.Close()
	if _, err := sw.extend(newTestProxy(t, u.rulesAllowing("old.test", "x.test"))); err != nil {
		t.Fatal(err)
	}
	sw.Close()
	if err := third.echo("gone?"); err == nil {
		t.Error("a retired proxy's tunnel outlived the switch's Close")
	}
	if _, err := sw.extend(newTestProxy(t, u.rulesAllowing("old.test"))); err == nil {
		t.Error("extend after Close succeeded")
	}
	if sw.revision() != 0 {
		t.Errorf("revision %d after Close", sw.revision())
	}
}

// openFDs counts this process's open fds (/proc/self/fd), or is -1 off
// Linux: a Windows binary under Wine would read the Wine process's own
// (Z:\proc), its cache of handles' fds included.
func openFDs(t testing.TB) int {
	if runtime.GOOS != "linux" {
		return -1
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	return len(ents)
}

// settle waits (at most 10 s) until f holds.
func settle(f func() bool) bool {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if f() || time.Now().After(deadline) {
			return f()
		}
	}
}

// Many grants while tunnels come and go leave nothing behind: each
// retired proxy closes for good once its last connection ends (without
// the switch's Close), and after Close the goroutines and fds are back
// where they were.
func TestEgressExtendLeaksNothing(t *testing.T) {
	u := startUpstreams(t)
	runtime.GC()
	g0, fd0 := runtime.NumGoroutine(), openFDs(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	names := []string{"g0.test"}
	sw := newEgressSwitch(l, newTestProxy(t, u.rulesAllowing(names...)), "")
	var open []*proxyConn
	const rounds = 100
	for i := 1; i <= rounds; i++ {
		c, bad := tunnel(t, addr, names[len(names)-1], u.echoPort)
		if c == nil {
			t.Fatalf("round %d: %s", i, bad)
		}
		open = append(open, c)
		keep := dialSwitch(t, addr) // an idle keep-alive connection, handed on
		if code, _, err := keep.get(names[0], u.httpPort); code != 200 || err != nil {
			t.Fatalf("round %d: GET %d %v", i, code, err)
		}
		open = append(open, keep)
		names = append(names, "g"+strconv.Itoa(i)+".test")
		if _, err := sw.extend(newTestProxy(t, u.rulesAllowing(names...))); err != nil {
			t.Fatal(err)
		}
		if i%10 == 0 { // the oldest tunnels end
			for _, c := range open[:len(open)/2] {
				c.Close()
			}
			open = append([]*proxyConn(nil), open[len(open)/2:]...)
		}
	}
	for _, c := range open {
		c.Close()
	}
	retired := func() int {
		sw.mu.Lock()
		defer sw.mu.Unlock()
		return len(sw.retired)
	}
	if !settle(func() bool { return retired() == 0 }) {
		t.Errorf("%d retired proxies still open after their last connection ended", retired())
	}
	sw.Close()
	l.Close() // (the sandbox's: its accept loop ends with it)
	if !settle(func() bool { return runtime.NumGoroutine() <= g0+2 }) {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines %d, were %d:\n%s", runtime.NumGoroutine(), g0, buf[:runtime.Stack(buf, true)])
	}
	// (the runtime's splice pipes, which tunnels use, are closed when
	// their pool is collected)
	if fd0 >= 0 && !settle(func() bool { runtime.GC(); return openFDs(t) <= fd0+2 }) {
		t.Errorf("fds %d, were %d", openFDs(t), fd0)
	}
}

package egress

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/egress/l7"
)

// Adds says "only adds" for additions, and "not only adds" for every
// way a change could narrow or redirect something.
func TestAdds(t *testing.T) {
	base := func() Policy {
		return Policy{
			Allow: []Rule{
				{Host: "api.example.com", Ports: []int{443}},
				{Host: "*.pkg.dev"},
				{Host: "git.example.com", Ports: []int{443}, Rules: []l7.Rule{{Method: "GET", Path: "/a/**", Query: map[string][]string{"x": {"1"}}}}},
			},
			Deny:         []Rule{{Host: "bad.pkg.dev"}},
			AllowPrivate: []Rule{{Host: "127.0.0.1/32", Ports: []int{11434}}},
			Hosts:        map[string]string{"models.test": "127.0.0.1"},
		}
	}
	cases := []struct {
		name string
		edit func(*Policy)
		want bool
	}{
		{"unchanged", func(p *Policy) {}, true},
		{"an allow entry added", func(p *Policy) { p.Allow = append(p.Allow, Rule{Host: "new.example.com", Ports: []int{443}}) }, true},
		{"an allow entry added first", func(p *Policy) { p.Allow = append([]Rule{{Host: "new.example.com"}}, p.Allow...) }, true},
		{"an uninspected entry over an inspected host", func(p *Policy) { p.Allow = append(p.Allow, Rule{Host: "git.example.com", Ports: []int{443}}) }, true},
		{"allow_private added", func(p *Policy) { p.AllowPrivate = append(p.AllowPrivate, Rule{Host: "10.0.0.1"}) }, true},
		{"a hosts entry for a name not allowed before", func(p *Policy) {
			p.Hosts["new.test"] = "127.0.0.2"
			p.Allow = append(p.Allow, Rule{Host: "new.test", Ports: []int{80}})
		}, true},
		{"ports of [] and absent alike", func(p *Policy) { p.Allow[1].Ports = []int{} }, true},

		{"an allow entry removed", func(p *Policy) { p.Allow = p.Allow[:2] }, false},
		{"a port removed", func(p *Policy) { p.Allow[0].Ports = []int{} }, false},
		{"a port changed", func(p *Policy) { p.Allow[0].Ports = []int{8443} }, false},
		{"a host respelled", func(p *Policy) { p.Allow[0].Host = "API.example.com" }, false},
		{"a wildcard narrowed", func(p *Policy) { p.Allow[1].Host = "a.pkg.dev" }, false},
		{"inspection turned on", func(p *Policy) { p.Allow[0].Inspect = true }, false},
		{"access set", func(p *Policy) { p.Allow[2].Access, p.Allow[2].Rules = "read-only", nil }, false},
		{"an inspected entry's ports widened", func(p *Policy) { p.Allow[2].Ports = []int{443, 8443} }, false},
		{"an L7 rule changed", func(p *Policy) { p.Allow[2].Rules = []l7.Rule{{Method: "GET", Path: "/b/**"}} }, false},
		{"an L7 query changed", func(p *Policy) {
			p.Allow[2].Rules = []l7.Rule{{Method: "GET", Path: "/a/**", Query: map[string][]string{"x": {"2"}}}}
		}, false},
		{"an L7 deny rule added", func(p *Policy) { p.Allow[2].DenyRules = []l7.Rule{{Method: "GET", Path: "/a/secret"}} }, false},
		{"an inspected entry added", func(p *Policy) { p.Allow = append(p.Allow, Rule{Host: "new.example.com", Inspect: true}) }, false},
		{"an entry with L7 rules added", func(p *Policy) {
			p.Allow = append(p.Allow, Rule{Host: "api.example.com", Ports: []int{443}, Access: "read-only"})
		}, false},
		{"a deny entry added", func(p *Policy) { p.Deny = append(p.Deny, Rule{Host: "x.pkg.dev"}) }, false},
		{"a deny entry removed", func(p *Policy) { p.Deny = nil }, false},
		{"a deny entry changed", func(p *Policy) { p.Deny[0].Ports = []int{443} }, false},
		{"allow_private removed", func(p *Policy) { p.AllowPrivate = nil }, false},
		{"allow_private narrowed", func(p *Policy) { p.AllowPrivate[0].Ports = []int{11435} }, false},
		{"a hosts entry removed", func(p *Policy) { delete(p.Hosts, "models.test") }, false},
		{"a hosts entry moved", func(p *Policy) { p.Hosts["models.test"] = "127.0.0.2" }, false},
		{"an allowed name pinned", func(p *Policy) { p.Hosts["api.example.com"] = "127.0.0.1" }, false},
		{"a name under an allowed wildcard pinned", func(p *Policy) { p.Hosts["x.pkg.dev"] = "127.0.0.1" }, false},
		{"rules that do not compile", func(p *Policy) { p.Allow = append(p.Allow, Rule{Host: "*"}) }, false},
	}
	for _, c := range cases {
		b := base()
		c.edit(&b)
		if got := Adds(base(), b); got != c.want {
			t.Errorf("%s: Adds = %v, want %v", c.name, got, c.want)
		}
	}
	bad := base()
	bad.Allow = append(bad.Allow, Rule{Host: "**"})
	if Adds(bad, base()) {
		t.Error("Adds from rules that do not compile")
	}
}

// Admits reads the compiled rules back: allowed host:port yes, denied
// or unlisted no, the reserved name never.
func TestAdmits(t *testing.T) {
	p, err := New(Config{Policy: Policy{
		Allow: []Rule{{Host: "*.example.com"}, {Host: "10.0.0.0/8", Ports: []int{22}}, {Host: LocalName}},
		Deny:  []Rule{{Host: "bad.example.com"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, c := range []struct {
		host string
		port int
		want bool
	}{
		{"a.example.com", 443, true}, {"A.Example.COM.", 80, true}, {"a.example.com", 8080, false},
		{"bad.example.com", 443, false}, {"example.com", 443, false}, {"10.1.2.3", 22, true}, {"[10.1.2.3]", 22, true},
		{"10.1.2.3", 23, false}, {LocalName, 443, false}, {"a.example.com", 0, false}, {"127.1", 80, false},
	} {
		if got := p.Admits(c.host, c.port); got != c.want {
			t.Errorf("Admits(%s, %d) = %v, want %v", c.host, c.port, got, c.want)
		}
	}
}

// A retired proxy takes no new connection, keeps its tunnel, hands an
// idle keep-alive connection to next with nothing lost, and closes for
// good when its last connection ends.
func TestRetire(t *testing.T) {
	up := startUpstream(t, "127.0.0.1", http.HandlerFunc(hello))
	echo := startEcho(t, "127.0.0.1").port
	pol := Policy{
		Allow:        []Rule{{Host: "up.test", Ports: []int{up.port, echo}}},
		AllowPrivate: []Rule{{Host: "127.0.0.1/32"}},
		Hosts:        map[string]string{"up.test": "127.0.0.1"},
	}
	tp := startProxy(t, Config{Policy: pol})
	tun := dialProxy(t, tp.addr)
	if resp, _ := tun.roundTrip(t, "CONNECT up.test:"+itoa(echo)+" HTTP/1.1\r\n\r\n", "CONNECT"); resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	echoLine(t, tun, "one")
	keep := dialProxy(t, tp.addr)
	if resp, _ := keep.get(t, "http://up.test:"+itoa(up.port)+"/", ""); resp.StatusCode != 200 {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
	// The keep-alive connection waits for its next request (the
	// tunnel's session is splicing, not waiting).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		tp.mu.Lock()
		n := len(tp.idle)
		tp.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions wait for a request, want 1", n)
		}
	}
	handed := make(chan net.Conn, 1)
	tp.Retire(func(c net.Conn) bool { handed <- c; return true })
	var c net.Conn
	select {
	case c = <-handed:
	case <-time.After(10 * time.Second):
		t.Fatal("the idle keep-alive connection was not handed on")
	}
	// The handed connection is the client's: a request written now
	// arrives whole on it.
	go keep.Write([]byte("GET http://up.test:" + itoa(up.port) + "/x HTTP/1.1\r\nHost: up.test:" + itoa(up.port) + "\r\n\r\n"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4)
	if _, err := c.Read(buf); err != nil || string(buf) != "GET " {
		t.Fatalf("handed connection read %q %v", buf, err)
	}
	c.Close()
	if _, err := net.DialTimeout("tcp", tp.addr, time.Second); err == nil {
		// (the test's listener is closed by Retire)
		t.Error("a retired proxy still accepts")
	}
	echoLine(t, tun, "two")
	select {
	case <-tp.Done():
		t.Fatal("closed while a tunnel was open")
	default:
	}
	tun.Close()
	select {
	case <-tp.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a retired proxy did not close after its last connection ended")
	}
}

func echoLine(t testing.TB, c *rawClient, line string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
	got, err := c.br.ReadString('\n')
	if err != nil || strings.TrimSuffix(got, "\n") != line {
		t.Fatalf("echo %q %v, want %q", got, err, line)
	}
}

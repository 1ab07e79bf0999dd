//go:build linux

package qualify

// Host-side network fixtures of the cases: counting listeners and HTTP(S)
// upstreams on 127.0.0.0/8 standing in for internet hosts, named through
// the policy's network.hosts map. Nothing here sends traffic anywhere.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corral-sandbox/corral/internal/testcert"
)

// counter is a loopback listener (tcp, udp, unix path or abstract "@name")
// that counts connections or datagrams and answers nothing.
type counter struct {
	network, addr string
	n             atomic.Int32
	close         func()
}

// listen starts a counter; the case closes it (defer c.Close()).
func listen(network, addr string) (*counter, error) {
	c := &counter{network: network}
	if network == "udp" {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, err
		}
		c.addr = pc.LocalAddr().String()
		c.close = func() { pc.Close() }
		go func() {
			buf := make([]byte, 2048)
			for {
				if _, _, err := pc.ReadFrom(buf); err != nil {
					return
				}
				c.n.Add(1)
			}
		}()
		return c, nil
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	c.addr = ln.Addr().String()
	if network == "unix" {
		c.addr = addr
		if !strings.HasPrefix(addr, "@") {
			_ = os.Chmod(addr, 0o777) // a refusal must not be a mere permission artefact
		}
	}
	c.close = func() { ln.Close() }
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			c.n.Add(1)
			conn.Close()
		}
	}()
	return c, nil
}

func (c *counter) Count() int { return int(c.n.Load()) }
func (c *counter) Addr() string {
	return c.addr
}
func (c *counter) Close() {
	if c != nil && c.close != nil {
		c.close()
	}
}

// port is the counter's port (tcp/udp).
func (c *counter) port() string {
	_, p, _ := net.SplitHostPort(c.addr)
	return p
}

// settle lets in-flight connections land before counting.
func settle() { time.Sleep(300 * time.Millisecond) }

// Upstream is an HTTP(S) server on a loopback address standing in for an
// internet host (the e2e suite uses it too). It counts TCP connections,
// TLS ClientHellos and requests; Mux answers "upstream-ok HOST PATH" on /
// and takes more routes.
type Upstream struct {
	IP      string
	Port    int
	Mux     *http.ServeMux
	Accepts atomic.Int32 // TCP connections
	Hellos  atomic.Int32 // TLS ClientHellos
	srv     *http.Server
	mu      sync.Mutex
	reqs    []string
}

type countingLn struct {
	net.Listener
	n *atomic.Int32
}

func (l countingLn) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// NewUpstream starts an Upstream on ip:port (0: any port), with TLS when
// cert is not nil (HTTP/1.1 only: NewOrigin also offers h2). Close it
// when done.
func NewUpstream(ip string, port int, cert *tls.Certificate) (*Upstream, error) {
	return startUpstream(ip, port, cert, nil)
}

// startUpstream is NewUpstream with the ALPN protocols its TLS offers
// (nil: none, so HTTP/1.1).
func startUpstream(ip string, port int, cert *tls.Certificate, alpn []string) (*Upstream, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	u := &Upstream{IP: ip, Port: ln.Addr().(*net.TCPAddr).Port, Mux: http.NewServeMux()}
	u.Mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream-ok %s %s\n", r.Host, r.URL.Path)
	})
	var l net.Listener = countingLn{ln, &u.Accepts}
	u.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u.mu.Lock()
			u.reqs = append(u.reqs, r.Method+" "+r.Host+" "+r.RequestURI)
			u.mu.Unlock()
			u.Mux.ServeHTTP(w, r)
		}),
		ErrorLog:          log.New(io.Discard, "", 0),
		ReadHeaderTimeout: 10 * time.Second,
	}
	if cert != nil {
		u.srv.TLSConfig = &tls.Config{
			Certificates: []tls.Certificate{*cert},
			NextProtos:   alpn,
			GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
				u.Hellos.Add(1)
				return nil, nil
			},
		}
		l = tls.NewListener(l, u.srv.TLSConfig)
	}
	go func() { _ = u.srv.Serve(l) }()
	return u, nil
}

// newUpstream is NewUpstream with a self-signed certificate for tlsNames
// when there are any (the TLS cases only look at what the proxy lets
// through).
func newUpstream(ip string, port int, tlsNames ...string) (*Upstream, error) {
	if len(tlsNames) == 0 {
		return NewUpstream(ip, port, nil)
	}
	cert, err := testcert.New(nil, tlsNames...)
	if err != nil {
		return nil, err
	}
	return NewUpstream(ip, port, &cert)
}

// Close stops the server (nil-safe).
func (u *Upstream) Close() {
	if u == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = u.srv.Shutdown(ctx)
	_ = u.srv.Close()
}

// HostPort is the upstream's authority under name.
func (u *Upstream) HostPort(name string) string {
	return net.JoinHostPort(name, strconv.Itoa(u.Port))
}

// Requests is what the upstream served so far: "METHOD HOST REQUEST-URI".
func (u *Upstream) Requests() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.reqs...)
}

// Touched describes what reached u, after in-flight connections have
// landed; "" when nothing did.
func (u *Upstream) Touched() string {
	settle()
	n, h, r := u.Accepts.Load(), u.Hellos.Load(), u.Requests()
	if n == 0 && h == 0 && len(r) == 0 {
		return ""
	}
	return fmt.Sprintf("%d connections, %d TLS ClientHellos, requests %q", n, h, r)
}

// Endpoint is one host rule of a proxy-mode policy (network.allow, deny,
// allow_private): a name, pattern, address or CIDR, and its ports.
type Endpoint struct {
	Host  string
	Ports []int
}

// Egress is the rules of a proxy-mode policy.
type Egress struct {
	Allow, Deny, Private []Endpoint
	Hosts                map[string]string // network.hosts: name -> address
}

// YAML renders the rules as the lines under "network:" (indented two
// spaces; the mode is the caller's).
func (n Egress) YAML() string {
	var b strings.Builder
	for _, l := range []struct {
		key string
		eps []Endpoint
	}{{"allow", n.Allow}, {"deny", n.Deny}, {"allow_private", n.Private}} {
		if len(l.eps) == 0 {
			continue
		}
		fmt.Fprintf(&b, "  %s:\n", l.key)
		for _, e := range l.eps {
			fmt.Fprintf(&b, "    - {host: %s", strconv.Quote(e.Host))
			if len(e.Ports) > 0 {
				ports, _ := json.Marshal(e.Ports)
				fmt.Fprintf(&b, ", ports: %s", ports)
			}
			b.WriteString("}\n")
		}
	}
	if len(n.Hosts) > 0 {
		b.WriteString("  hosts:\n")
		for _, k := range slices.Sorted(maps.Keys(n.Hosts)) {
			fmt.Fprintf(&b, "    %s: %s\n", strconv.Quote(k), strconv.Quote(n.Hosts[k]))
		}
	}
	return b.String()
}

// proxyAddr is where the egress proxy listens inside every proxy-mode
// sandbox.
const proxyAddr = "127.0.0.1:3128"

// httpStep is an `http` probe through the sandbox's proxy.
func httpStep(label, method, target string, extra ...string) step {
	return step{Label: label, Args: append([]string{"http", proxyAddr, method, target}, extra...)}
}

// status is the HTTP status of an http probe step ("" when none came
// back), from the first result's Detail "CODE BODY".
func (s stepOut) status() string {
	for _, r := range s.Results {
		if strings.HasPrefix(r.What, "http ") {
			f := strings.Fields(r.Detail)
			if len(f) > 0 {
				if _, err := strconv.Atoi(f[0]); err == nil {
					return f[0]
				}
			}
			return ""
		}
	}
	return ""
}

// statusIn checks the step's HTTP status is one of want ("400|403").
func statusIn(s stepOut, want string) bool {
	st := s.status()
	return st != "" && strings.Contains("|"+want+"|", "|"+st+"|")
}

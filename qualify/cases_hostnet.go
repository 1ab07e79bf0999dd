//go:build linux

package qualify

// Host-side network fixtures of the cases: counting listeners and HTTP(S)
// upstreams on 127.0.0.0/8 standing in for internet hosts, named through
// the policy's network.hosts map. Nothing here sends traffic anywhere.

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/corral-sandbox/corral/internal/testcert"
	"github.com/corral-sandbox/corral/internal/testorigin"
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
var settle = testorigin.Settle

// Upstream is an HTTP(S) server on a loopback address standing in for an
// internet host (the e2e suite uses it too). It counts TCP connections,
// TLS ClientHellos and requests ("METHOD HOST REQUEST-URI"); Mux answers
// "upstream-ok HOST PATH" on / and takes more routes.
type Upstream = testorigin.Server

// NewUpstream starts an Upstream on ip:port (0: any port), with TLS when
// cert is not nil (HTTP/1.1 only: NewOrigin also offers h2). Close it
// when done.
func NewUpstream(ip string, port int, cert *tls.Certificate) (*Upstream, error) {
	return startUpstream(ip, port, cert, nil)
}

// startUpstream is NewUpstream with the ALPN protocols its TLS offers
// (nil: none, so HTTP/1.1).
func startUpstream(ip string, port int, cert *tls.Certificate, alpn []string) (*Upstream, error) {
	u, err := testorigin.Start(ip, port, cert, alpn, nil)
	if err != nil {
		return nil, err
	}
	u.Mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream-ok %s %s\n", r.Host, r.URL.Path)
	})
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

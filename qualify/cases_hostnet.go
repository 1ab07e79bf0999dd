//go:build linux

package qualify

// Host-side network fixtures of the cases: counting listeners and HTTP(S)
// upstreams on 127.0.0.0/8 standing in for internet hosts, named through
// the policy's network.hosts map. Nothing here sends traffic anywhere.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
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

// upstream is an HTTP(S) server on a loopback address. It counts TCP
// connections, TLS ClientHellos and requests, and answers
// "upstream-ok HOST PATH".
type upstream struct {
	srv     *http.Server
	ip      string
	port    int
	accepts atomic.Int32
	hellos  atomic.Int32
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

// newUpstream starts an upstream on ip:port (0: any port), with TLS for
// names when tlsNames is not empty. Close it when done.
func newUpstream(ip string, port int, tlsNames ...string) (*upstream, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	u := &upstream{ip: ip, port: ln.Addr().(*net.TCPAddr).Port}
	var l net.Listener = countingLn{ln, &u.accepts}
	u.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u.mu.Lock()
			u.reqs = append(u.reqs, r.Method+" "+r.Host+" "+r.RequestURI)
			u.mu.Unlock()
			fmt.Fprintf(w, "upstream-ok %s %s\n", r.Host, r.URL.Path)
		}),
		ErrorLog:          log.New(io.Discard, "", 0),
		ReadHeaderTimeout: 10 * time.Second,
	}
	if len(tlsNames) > 0 {
		cert, err := selfSigned(tlsNames)
		if err != nil {
			ln.Close()
			return nil, err
		}
		u.srv.TLSConfig = &tls.Config{
			Certificates: []tls.Certificate{cert},
			GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
				u.hellos.Add(1)
				return nil, nil
			},
		}
		l = tls.NewListener(l, u.srv.TLSConfig)
	}
	go func() { _ = u.srv.Serve(l) }()
	return u, nil
}

func (u *upstream) Close() {
	if u == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = u.srv.Shutdown(ctx)
	_ = u.srv.Close()
}

// hostPort is the upstream's authority under name.
func (u *upstream) hostPort(name string) string {
	return net.JoinHostPort(name, strconv.Itoa(u.port))
}

func (u *upstream) requests() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.reqs...)
}

// touched describes what reached u ("" when nothing did).
func (u *upstream) touched() string {
	settle()
	n, h, r := u.accepts.Load(), u.hellos.Load(), u.requests()
	if n == 0 && h == 0 && len(r) == 0 {
		return ""
	}
	return fmt.Sprintf("%d connections, %d TLS ClientHellos, requests %q", n, h, r)
}

// selfSigned makes a certificate for names (the probes do not verify it:
// the TLS cases only look at what the proxy lets through).
func selfSigned(names []string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: names[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		DNSNames:     names,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// ep is one network endpoint rule of a proxy-mode policy.
type ep struct {
	host  string
	ports []int
}

// egressNet renders the network rules of a proxy-mode policy.
type egressNet struct {
	allow, deny, private []ep
	hosts                map[string]string
}

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

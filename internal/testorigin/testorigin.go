// Package testorigin serves Corral's loopback test origins: HTTP(S)
// servers on 127.0.0.0/8 standing in for internet hosts, reached through
// the egress proxy by qualify, doctor --egress, the conformance suite
// (providertest) and e2e.
package testorigin

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Server is one origin. It counts TCP connections and TLS ClientHellos
// and logs each request; Mux holds its routes (Start adds none).
type Server struct {
	IP      string
	Port    int
	Mux     *http.ServeMux
	Accepts atomic.Int32 // TCP connections
	Hellos  atomic.Int32 // TLS ClientHellos
	srv     *http.Server
	line    func(*http.Request) string
	mu      sync.Mutex
	reqs    []string
}

// Start starts a Server on ip:port (0: any port), with TLS when cert is
// not nil, offering the ALPN protocols alpn (nil: none, so HTTP/1.1). It
// logs each request as line(r) (nil: "METHOD HOST REQUEST-URI"). Close it
// when done.
func Start(ip string, port int, cert *tls.Certificate, alpn []string, line func(*http.Request) string) (*Server, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	s := &Server{IP: ip, Port: ln.Addr().(*net.TCPAddr).Port, Mux: http.NewServeMux(), line: line}
	if s.line == nil {
		s.line = func(r *http.Request) string { return r.Method + " " + r.Host + " " + r.RequestURI }
	}
	var l net.Listener = countingLn{ln, &s.Accepts}
	s.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.mu.Lock()
			s.reqs = append(s.reqs, s.line(r))
			s.mu.Unlock()
			s.Mux.ServeHTTP(w, r)
		}),
		ErrorLog:          log.New(io.Discard, "", 0),
		ReadHeaderTimeout: 10 * time.Second,
	}
	if cert != nil {
		s.srv.TLSConfig = &tls.Config{
			Certificates: []tls.Certificate{*cert},
			NextProtos:   alpn,
			GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
				s.Hellos.Add(1)
				return nil, nil
			},
		}
		l = tls.NewListener(l, s.srv.TLSConfig)
	}
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
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

// Close stops the server, waiting up to a second for requests in flight
// (nil-safe, and safe on a Server that was never started).
func (s *Server) Close() {
	if s == nil || s.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	_ = s.srv.Close()
}

// HostPort is the server's authority under name.
func (s *Server) HostPort(name string) string {
	return net.JoinHostPort(name, strconv.Itoa(s.Port))
}

// Requests is what the server logged so far, in order.
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.reqs...)
}

// Settle lets in-flight connections land before counting (300 ms).
func Settle() { time.Sleep(300 * time.Millisecond) }

// Touched describes what reached s, after Settle; "" when nothing did.
func (s *Server) Touched() string {
	Settle()
	n, h, r := s.Accepts.Load(), s.Hellos.Load(), s.Requests()
	if n == 0 && h == 0 && len(r) == 0 {
		return ""
	}
	return fmt.Sprintf("%d connections, %d TLS ClientHellos, requests %q", n, h, r)
}

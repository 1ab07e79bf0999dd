package egress

import (
	"net"
	"sync"
)

// Handoff is a net.Listener whose connections its owner hands over one by
// one (Give), for a server that serves a listener: the proxy's HTTP
// server gets its terminated connections so, and a session's current
// proxy the connections of the sandbox's egress listener.
type Handoff struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
	addr net.Addr
}

// NewHandoff returns an open Handoff whose Addr is addr.
func NewHandoff(addr net.Addr) *Handoff {
	return &Handoff{ch: make(chan net.Conn), done: make(chan struct{}), addr: addr}
}

// Give hands c to the next Accept; false when the Handoff is closed (c
// is then the caller's).
func (h *Handoff) Give(c net.Conn) bool {
	select {
	case h.ch <- c:
		return true
	case <-h.done:
		return false
	}
}

// Accept returns a connection given, or net.ErrClosed after Close.
func (h *Handoff) Accept() (net.Conn, error) {
	select {
	case c := <-h.ch:
		return c, nil
	case <-h.done:
		return nil, net.ErrClosed
	}
}

// Close makes Accept and Give fail from now on; idempotent.
func (h *Handoff) Close() error {
	h.once.Do(func() { close(h.done) })
	return nil
}

// Addr is the address NewHandoff was given.
func (h *Handoff) Addr() net.Addr { return h.addr }

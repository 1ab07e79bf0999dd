//go:build linux

package gateway

import (
	"net"
	"sync"
)

// egressSwitch serves a sandbox's egress listener with whichever proxy is
// current: the gateway accepts, and hands each connection to the current
// proxy through a handoff listener. Swapping in a proxy with new rules
// applies them to every connection from then on; the old proxy is closed
// with the connections it carried (they were admitted under old rules).
type egressSwitch struct {
	mu    sync.Mutex
	cur   *handoff
	proxy Proxy
	l     net.Listener
}

func newEgressSwitch(l net.Listener, p Proxy) *egressSwitch {
	sw := &egressSwitch{l: l}
	sw.swap(p)
	go sw.accept()
	return sw
}

func (sw *egressSwitch) accept() {
	for {
		c, err := sw.l.Accept()
		if err != nil {
			return
		}
		sw.mu.Lock()
		h := sw.cur
		sw.mu.Unlock()
		if h == nil || !h.give(c) {
			c.Close()
		}
	}
}

// swap makes p the proxy for new connections and closes the previous one.
func (sw *egressSwitch) swap(p Proxy) {
	h := &handoff{ch: make(chan net.Conn), done: make(chan struct{}), addr: sw.l.Addr()}
	go func() { _ = p.Serve(h) }()
	sw.mu.Lock()
	old := sw.proxy
	sw.cur, sw.proxy = h, p
	sw.mu.Unlock()
	if old != nil {
		old.Close()
	}
}

// Close stops accepting and closes the current proxy (not the listener,
// which belongs to the sandbox).
func (sw *egressSwitch) Close() error {
	sw.mu.Lock()
	p := sw.proxy
	sw.cur, sw.proxy = nil, nil
	sw.mu.Unlock()
	if p != nil {
		return p.Close()
	}
	return nil
}

// handoff is a net.Listener fed connections by egressSwitch.
type handoff struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
	addr net.Addr
}

func (h *handoff) give(c net.Conn) bool {
	select {
	case h.ch <- c:
		return true
	case <-h.done:
		return false
	}
}

func (h *handoff) Accept() (net.Conn, error) {
	select {
	case c := <-h.ch:
		return c, nil
	case <-h.done:
		return nil, net.ErrClosed
	}
}

func (h *handoff) Close() error {
	h.once.Do(func() { close(h.done) })
	return nil
}

func (h *handoff) Addr() net.Addr { return h.addr }

package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
)

// hconn is the host's side of one forwarded connection.
type hconn struct {
	c      *Client
	id     string
	nonce  string
	in     *inbox
	out    *credit
	result chan dialResult // the open's outcome, once (buffered)

	// under c.mu
	state int
	closing
	local net.Conn
}

type dialResult struct {
	conn net.Conn
	err  error
}

const (
	opening   = iota
	up        // opened: frames flow
	abandoned // the dialer gave up or the open was refused; data is dropped
)

// DialPort opens a TCP connection to 127.0.0.1:port inside the sandbox
// (port 1 to 65535). The net.Conn supports deadlines; Close closes the
// connection inside too; there is no half-close. It fails with the
// relay's reason when the relay cannot connect or refuses the open, when
// the relay's opened does not echo this open's nonce (recorded in
// Faults), or when ctx or the channel ends first.
func (c *Client) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("relay: port %d is out of range", port)
	}
	var n [16]byte
	if _, err := rand.Read(n[:]); err != nil {
		return nil, err
	}
	h := &hconn{c: c, id: c.newID("c"), nonce: hex.EncodeToString(n[:]), in: newInbox(), out: newCredit(), result: make(chan dialResult, 1)}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, c.err
	}
	c.conns[h.id] = h
	c.mu.Unlock()
	if err := c.send(&frame{T: tOpen, ID: h.id, Port: port, Nonce: h.nonce}); err != nil {
		return nil, err
	}
	select {
	case r := <-h.result:
		return r.conn, r.err
	case <-ctx.Done():
		c.mu.Lock()
		state := h.state
		h.state = abandoned
		c.mu.Unlock()
		if state == up { // opened raced ctx: the caller never sees the conn
			if r := <-h.result; r.conn != nil {
				r.conn.Close()
			}
		}
		return nil, ctx.Err()
	}
}

// onConn handles a relay frame for a known connection.
func (c *Client) onConn(h *hconn, f *frame) error {
	c.mu.Lock()
	state := h.state
	c.mu.Unlock()
	switch f.T {
	case tOpened:
		if state == up {
			c.fault("a second opened for connection %s dropped", h.id)
			return nil
		}
		if f.Nonce != h.nonce {
			c.fault("connection %s refused: the relay's opened echoes nonce %q, not the one minted for it", h.id, f.Nonce)
			h.resolve(dialResult{err: fmt.Errorf("relay: connection %s refused: the opened frame's nonce is not this open's", h.id)})
			c.abandon(h)
			return nil
		}
		user, local := net.Pipe()
		c.mu.Lock()
		gone := h.state == abandoned // DialPort gave up
		if !gone {
			h.state, h.local = up, local
		}
		c.mu.Unlock()
		if gone {
			c.abandon(h)
			return nil
		}
		go func() {
			drainInbox(c.send, h.id, h.in, func(ch chunk) error { _, err := local.Write(ch.data); return err })
			local.Close()
		}()
		go func() {
			pumpFrames(c.send, h.id, tData, 0, local, h.out)
			local.Close()
			h.sendClose()
		}()
		h.resolve(dialResult{conn: user})
	case tClosed:
		c.mu.Lock()
		delete(c.conns, h.id)
		c.mu.Unlock()
		if state == up {
			c.fault("a closed frame for open connection %s", h.id)
			h.shut(errors.New("relay: closed"))
			return nil
		}
		h.resolve(dialResult{err: fmt.Errorf("relay: connecting inside the sandbox: %s", f.Error)})
	case tData:
		if state == opening {
			c.fault("a data frame for connection %s before its opened dropped", h.id)
			return nil
		}
		return h.in.put(0, f.Data) // dropped once abandoned (in is closed)
	case tClose:
		c.mu.Lock()
		h.got = true
		c.mu.Unlock()
		h.in.end()
		go h.sendClose() // the reader never blocks on writing
	}
	return nil
}

// abandon drops h's data and closes it inside.
func (c *Client) abandon(h *hconn) {
	c.mu.Lock()
	h.state = abandoned
	c.mu.Unlock()
	h.in.close()
	go h.sendClose()
}

// sendClose sends h's close frame once, and forgets h once both are done.
func (h *hconn) sendClose() {
	c := h.c
	sendClose(&c.mu, &h.closing, h.id, c.send, func() {
		if c.conns[h.id] == h {
			delete(c.conns, h.id)
			h.out.close()
		}
	})
}

// shut ends h when the channel ends.
func (h *hconn) shut(err error) {
	h.in.close()
	h.out.close()
	h.c.mu.Lock()
	local := h.local
	h.c.mu.Unlock()
	if local != nil {
		local.Close()
	}
	h.resolve(dialResult{err: err})
}

// resolve delivers the open's outcome; only the first counts.
func (h *hconn) resolve(r dialResult) {
	select {
	case h.result <- r:
	default:
		if r.conn != nil {
			r.conn.Close()
		}
	}
}

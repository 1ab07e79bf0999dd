package relay

import (
	"io"
	"sync"
)

// credit is a sender's view of one stream's window: bytes it may still
// send before the peer acks.
type credit struct {
	mu     sync.Mutex
	cond   sync.Cond
	n      int
	closed bool
}

func newCredit() *credit {
	c := &credit{n: Window}
	c.cond.L = &c.mu
	return c
}

// take waits for credit and takes up to max bytes of it; false once closed.
func (c *credit) take(max int) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.n == 0 && !c.closed {
		c.cond.Wait()
	}
	if c.closed {
		return 0, false
	}
	n := min(max, c.n)
	c.n -= n
	return n, true
}

// give returns n acked bytes; an ack past the window is a protocol error.
func (c *credit) give(n int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n <= 0 || c.n+n > Window {
		return protoErr("an ack of %d bytes with %d outstanding", n, Window-c.n)
	}
	c.n += n
	c.cond.Broadcast()
	return nil
}

func (c *credit) close() {
	c.mu.Lock()
	c.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
}

// chunk is one payload received: fd 1 or 2 for output, 0 otherwise.
type chunk struct {
	fd   int
	data []byte
}

// inbox is a receiver's buffer of one stream, at most Window bytes: the
// reader of the channel puts without blocking, one consumer gets.
type inbox struct {
	mu     sync.Mutex
	cond   sync.Cond
	chunks []chunk
	size   int
	eof    bool // no more puts: get drains, then reports the end
	closed bool // the consumer is gone: puts are dropped
}

func newInbox() *inbox {
	b := &inbox{}
	b.cond.L = &b.mu
	return b
}

// put queues data; overrunning the window is the peer's protocol error.
func (b *inbox) put(fd int, data []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.eof {
		return nil
	}
	if b.size+len(data) > Window {
		return protoErr("%d bytes past a %d-byte window", b.size+len(data)-Window, Window)
	}
	b.chunks = append(b.chunks, chunk{fd, data})
	b.size += len(data)
	b.cond.Broadcast()
	return nil
}

// get waits for the next chunk; false once ended and drained, or closed.
func (b *inbox) get() (chunk, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(b.chunks) == 0 && !b.eof && !b.closed {
		b.cond.Wait()
	}
	if b.closed || len(b.chunks) == 0 {
		return chunk{}, false
	}
	c := b.chunks[0]
	b.chunks[0] = chunk{}
	b.chunks = b.chunks[1:]
	b.size -= len(c.data)
	return c, true
}

// end marks the stream's end: what is queued is still delivered.
func (b *inbox) end() {
	b.mu.Lock()
	b.eof = true
	b.cond.Broadcast()
	b.mu.Unlock()
}

// close drops what is queued and all further puts.
func (b *inbox) close() {
	b.mu.Lock()
	b.closed = true
	b.chunks, b.size = nil, 0
	b.cond.Broadcast()
	b.mu.Unlock()
}

// pumpFrames sends what r yields as frames of type t (fd for out frames)
// within cr's window; true when r ended, false when the window closed or
// a send failed first.
func pumpFrames(send func(*frame) error, id, t string, fd int, r io.Reader, cr *credit) bool {
	buf := make([]byte, MaxChunk)
	for {
		n, err := r.Read(buf)
		for b := buf[:n]; len(b) > 0; {
			k, ok := cr.take(len(b))
			if !ok || send(&frame{T: t, ID: id, FD: fd, Data: append([]byte(nil), b[:k]...)}) != nil {
				return false
			}
			b = b[k:]
		}
		if err != nil {
			return true
		}
	}
}

// drainInbox hands each chunk of in to write and acks it, until in ends
// (true), or write fails (false: in is closed, the rest dropped), or an
// ack cannot be sent (false).
func drainInbox(send func(*frame) error, id string, in *inbox, write func(chunk) error) bool {
	for {
		c, ok := in.get()
		if !ok {
			return true
		}
		if write(c) != nil {
			in.close()
			return false
		}
		if send(&frame{T: tAck, ID: id, N: len(c.data)}) != nil {
			return false
		}
	}
}

// closing is one connection's close handshake: each side sends one close
// frame, and a connection is forgotten once a close has gone each way.
type closing struct{ sent, got bool }

// sendClose sends our close for id once; forget runs, under mu, once
// both closes have gone.
func sendClose(mu *sync.Mutex, st *closing, id string, send func(*frame) error, forget func()) {
	mu.Lock()
	first := !st.sent
	st.sent = true
	if st.got {
		forget()
	}
	mu.Unlock()
	if first {
		_ = send(&frame{T: tClose, ID: id})
	}
}

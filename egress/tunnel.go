package egress

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const copyBufSize = 32 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}

// tunnel splices two connections. It ends when both directions reached EOF,
// when either side fails, when nothing moved in either direction for the idle
// timeout, or when the proxy closes the connections.
type tunnel struct {
	a, b    net.Conn
	idle    time.Duration
	last    atomic.Int64 // unix nanoseconds of the last byte moved
	aborted atomic.Bool
}

func (t *tunnel) abort() {
	if t.aborted.CompareAndSwap(false, true) {
		t.a.Close()
		t.b.Close()
	}
}

// splice copies a<->b; aPending is written to b and bPending to a first.
// The caller closes a and b afterwards.
func (p *Proxy) splice(a net.Conn, aPending []byte, b net.Conn, bPending []byte) {
	t := &tunnel{a: a, b: b, idle: p.cfg.IdleTimeout}
	now := time.Now()
	t.last.Store(now.UnixNano())
	for _, w := range []struct {
		c net.Conn
		d []byte
	}{{b, aPending}, {a, bPending}} {
		if len(w.d) > 0 {
			w.c.SetWriteDeadline(now.Add(t.idle))
			if _, err := w.c.Write(w.d); err != nil {
				return
			}
		}
	}
	done := make(chan struct{})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(done)
		t.pipe(b, a)
	}()
	t.pipe(a, b)
	<-done
}

// pipe copies src to dst. The copy buffer is borrowed from the pool only
// while data is flowing: after a short read it goes back and the pipe waits
// for readability without holding memory, so idle tunnels cost no buffer.
func (t *tunnel) pipe(dst, src net.Conn) {
	var rc syscall.RawConn
	if sc, ok := src.(syscall.Conn); ok {
		if r, err := sc.SyscallConn(); err == nil {
			rc = r
		}
	}
	var bufp *[]byte
	defer func() {
		if bufp != nil {
			bufPool.Put(bufp)
		}
	}()
	src.SetReadDeadline(time.Now().Add(t.idle))
	var wdl time.Time
	sdst, _ := dst.(*net.TCPConn)
	ssrc, _ := src.(*net.TCPConn)
	for {
		var n int
		var err error
		if bufp == nil && rc != nil {
			err = waitReadable(rc)
		}
		if err == nil {
			if bufp == nil {
				bufp = bufPool.Get().(*[]byte)
			}
			buf := *bufp
			n, err = src.Read(buf)
			if n > 0 {
				now := time.Now()
				t.last.Store(now.UnixNano())
				if wdl.Sub(now) < t.idle/2 {
					wdl = now.Add(t.idle)
					dst.SetWriteDeadline(wdl)
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					t.abort()
					return
				}
			}
			if n < len(buf) && rc != nil {
				bufPool.Put(bufp)
				bufp = nil
			} else if n == len(buf) && err == nil && sdst != nil && ssrc != nil {
				// Bulk transfer: move data kernel-side while it keeps flowing.
				if t.spliceBulk(sdst, ssrc) {
					return
				}
			}
		}
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && !t.aborted.Load() {
			last := time.Unix(0, t.last.Load())
			if time.Since(last) < t.idle {
				src.SetReadDeadline(last.Add(t.idle))
				continue
			}
		}
		if err == io.EOF {
			if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
				return
			}
		}
		t.abort()
		return
	}
}

const (
	spliceChunk = 4 << 20
	spliceStall = 50 * time.Millisecond
)

// spliceBulk copies with splice(2) (TCPConn.ReadFrom of a LimitedReader) in
// chunks while data keeps arriving. A kernel pipe is held only during a
// chunk; when no byte arrives for spliceStall it returns false and the
// caller goes back to buffered copying (which holds nothing while idle). It
// returns true when the direction is finished (EOF or failure).
func (t *tunnel) spliceBulk(dst, src *net.TCPConn) bool {
	for {
		now := time.Now()
		src.SetReadDeadline(now.Add(spliceStall))
		dst.SetWriteDeadline(now.Add(t.idle))
		lr := &io.LimitedReader{R: src, N: spliceChunk}
		n, err := dst.ReadFrom(lr)
		if n > 0 {
			t.last.Store(time.Now().UnixNano())
		}
		switch {
		case err == nil && lr.N > 0: // EOF
			if dst.CloseWrite() != nil {
				t.abort()
			}
			return true
		case err == nil:
			continue
		case errors.Is(err, os.ErrDeadlineExceeded) && !t.aborted.Load():
			if n > 0 {
				continue
			}
			last := time.Unix(0, t.last.Load())
			src.SetReadDeadline(last.Add(t.idle))
			return false
		}
		t.abort()
		return true
	}
}

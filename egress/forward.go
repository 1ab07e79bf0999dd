package egress

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// upstream is the origin connection of an HTTP session, reused while
// requests go to the same host:port.
type upstream struct {
	key  string
	raw  net.Conn
	dc   *deadlineConn
	br   *bufio.Reader
	head *headLimit // bounds what a response head may read
	addr netip.AddrPort
	used bool
}

// errHeadTooLarge: an upstream response head (status line, headers, 1xx
// responses) exceeded the limit. Without one, an allowed upstream could
// stream headers until the supervisor runs out of memory.
var errHeadTooLarge = errors.New("response head too large")

// headLimit sits under the upstream's bufio.Reader; while active it fails
// reads once max bytes were read since it was armed.
type headLimit struct {
	r      io.Reader
	n, max int
	active bool
}

func (h *headLimit) Read(b []byte) (int, error) {
	if h.active && h.n >= h.max {
		return 0, errHeadTooLarge
	}
	k, err := h.r.Read(b)
	h.n += k
	return k, err
}

// maxInterim bounds the 1xx responses relayed before a final one.
const maxInterim = 16

func (s *session) closeUp() {
	if s.up == nil {
		return
	}
	s.up.raw.Close()
	s.p.untrack(s.up.raw)
	s.up.br.Reset(nil)
	readerPool.Put(s.up.br)
	s.up = nil
}

// forward serves an allowed absolute-form request; it reports whether the
// client connection stays open for another request.
func (s *session) forward(r *request, t target, path string, d *Decision) bool {
	p := s.p
	key := hostPort(t.host, t.port)
	if s.up != nil && s.up.key != key {
		s.closeUp()
	}
	hasBody := r.chunked || r.contentLength > 0
	sentContinue := false
	var resp *http.Response
	for attempt := 0; ; attempt++ {
		if s.up == nil {
			addrs, status := p.resolve(t, d)
			if status != 0 {
				d.Allowed = status == 502
				s.deny(d, status)
				return false
			}
			c, ap, err := p.dial(addrs, t.port)
			if err != nil {
				d.Allowed = true
				d.Reason = "dial failed: " + err.Error()
				s.deny(d, 502)
				return false
			}
			dc := &deadlineConn{Conn: c, refresh: p.cfg.IdleTimeout}
			hl := &headLimit{r: dc, max: p.cfg.MaxHeaderBytes}
			br := readerPool.Get().(*bufio.Reader)
			br.Reset(hl)
			s.up = &upstream{key: key, raw: c, dc: dc, br: br, head: hl, addr: ap}
		}
		d.Allowed, d.Addr = true, s.up.addr
		reused := s.up.used
		s.up.used = true
		if r.expect == "100-continue" && !sentContinue {
			sentContinue = true
			if _, err := io.WriteString(s.cc, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
				return false
			}
		}
		err := s.writeRequest(r, t, path)
		if err == nil {
			resp, err = s.readResponse(r, sentContinue)
		}
		if err == nil {
			break
		}
		var ce clientError
		if errors.As(err, &ce) {
			// The client broke off its own request, which may already
			// have reached the upstream: still a decision to record.
			d.Reason = "client broke off the request: " + err.Error()
			s.p.log(d)
			return false
		}
		s.closeUp()
		if reused && !hasBody && attempt == 0 && retryable(err) {
			continue // a stale keep-alive connection: dial once more
		}
		d.Reason = "upstream: " + err.Error()
		s.deny(d, 502)
		return false
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		if !r.isUpgrade() {
			d.Reason = "upstream switched protocols without an Upgrade request"
			s.deny(d, 502)
			return false
		}
		return s.upgrade(resp, d)
	}
	keep, err := s.writeResponse(r, resp, d)
	if err != nil || !keep {
		return false
	}
	return true
}

// clientError marks failures on the client side of a request.
type clientError struct{ error }

func (e clientError) Unwrap() error { return e.error }

func retryable(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// writeRequest sends the request head (origin-form) and body upstream.
func (s *session) writeRequest(r *request, t target, path string) error {
	bw := writerPool.Get().(*bufio.Writer)
	bw.Reset(s.up.dc)
	defer func() { bw.Reset(nil); writerPool.Put(bw) }()
	bw.WriteString(r.method)
	bw.WriteByte(' ')
	bw.WriteString(path)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(hostHeader(t.host, t.port, 80))
	bw.WriteString("\r\n")
	for _, h := range r.headers {
		ln := strings.ToLower(h.name)
		if hopByHop[ln] || r.hasConnToken(ln) {
			continue
		}
		bw.WriteString(h.name)
		bw.WriteString(": ")
		bw.WriteString(h.value)
		bw.WriteString("\r\n")
	}
	if r.isUpgrade() {
		bw.WriteString("Connection: Upgrade\r\nUpgrade: ")
		bw.WriteString(r.upgrade)
		bw.WriteString("\r\n")
	}
	switch {
	case r.chunked:
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	case r.contentLength >= 0:
		bw.WriteString("Content-Length: ")
		bw.WriteString(strconv.FormatInt(r.contentLength, 10))
		bw.WriteString("\r\n")
	}
	bw.WriteString("\r\n")
	switch {
	case r.chunked:
		if err := s.copyChunked(bw); err != nil {
			return err
		}
	case r.contentLength > 0:
		if err := copyBody(bw, s.br, r.contentLength); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// copyBody copies exactly n bytes from the client.
func copyBody(w io.Writer, r io.Reader, n int64) error {
	bufp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bufp)
	buf := *bufp
	for n > 0 {
		m, err := r.Read(buf[:min(int64(len(buf)), n)])
		if m > 0 {
			n -= int64(m)
			if _, werr := w.Write(buf[:m]); werr != nil {
				return werr
			}
		}
		if err != nil && n > 0 {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return clientError{err}
		}
	}
	return nil
}

// copyChunked decodes the client's chunked body and re-encodes it upstream
// (canonical framing; trailers are dropped).
func (s *session) copyChunked(w io.Writer) error {
	cr := httputil.NewChunkedReader(s.br)
	bufp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bufp)
	buf := *bufp
	for {
		m, err := cr.Read(buf)
		if m > 0 {
			if err := writeChunk(w, buf[:m]); err != nil {
				return err
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return clientError{err}
		}
	}
	budget := s.p.cfg.MaxHeaderBytes
	for {
		line, err := readLine(s.br, &budget)
		if err != nil {
			return clientError{err}
		}
		if len(line) == 0 {
			break
		}
	}
	_, err := io.WriteString(w, "0\r\n\r\n")
	return err
}

func writeChunk(w io.Writer, b []byte) error {
	var hdr [20]byte
	h := strconv.AppendInt(hdr[:0], int64(len(b)), 16)
	h = append(h, '\r', '\n')
	if _, err := w.Write(h); err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\r\n")
	return err
}

// readResponse reads the final (or 101) response, relaying interim 1xx.
func (s *session) readResponse(r *request, sentContinue bool) (*http.Response, error) {
	h := s.up.head
	h.active, h.n = true, 0 // the whole head, interim responses included
	defer func() { h.active = false }()
	for interim := 0; ; interim++ {
		if interim > maxInterim {
			return nil, fmt.Errorf("more than %d interim (1xx) responses", maxInterim)
		}
		resp, err := http.ReadResponse(s.up.br, &http.Request{Method: r.method})
		if err != nil {
			return nil, err
		}
		if resp.StatusCode >= 200 || resp.StatusCode == 101 {
			return resp, nil
		}
		if r.minor == 0 || (resp.StatusCode == 100 && sentContinue) {
			continue
		}
		bw := writerPool.Get().(*bufio.Writer)
		bw.Reset(s.cc)
		writeStatusAndHeaders(bw, resp, false)
		bw.WriteString("\r\n")
		err = bw.Flush()
		bw.Reset(nil)
		writerPool.Put(bw)
		if err != nil {
			return nil, clientError{err}
		}
	}
}

var respHopByHop = map[string]bool{
	"Connection":          true,
	"Keep-Alive":          true,
	"Proxy-Authenticate":  true,
	"Proxy-Authorization": true,
	"Proxy-Connection":    true,
	"Te":                  true,
	"Trailer":             true,
	"Transfer-Encoding":   true,
	"Upgrade":             true,
}

func writeStatusAndHeaders(bw *bufio.Writer, resp *http.Response, keepUpgrade bool) {
	bw.WriteString("HTTP/1.1 ")
	bw.WriteString(resp.Status)
	bw.WriteString("\r\n")
	var conn []string
	for _, v := range resp.Header["Connection"] {
		for _, t := range strings.Split(v, ",") {
			conn = append(conn, http.CanonicalHeaderKey(strings.TrimSpace(t)))
		}
	}
	for k, vs := range resp.Header {
		if keepUpgrade && (k == "Connection" || k == "Upgrade") {
			// passed through for the 101 handshake
		} else if respHopByHop[k] || contains(conn, k) {
			continue
		}
		for _, v := range vs {
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// writeResponse relays a final response; it reports whether the client
// connection may carry another request.
func (s *session) writeResponse(r *request, resp *http.Response, d *Decision) (bool, error) {
	defer resp.Body.Close()
	code := resp.StatusCode
	bodiless := r.method == "HEAD" || code == 204 || code == 304
	chunkedIn := len(resp.TransferEncoding) > 0 && resp.TransferEncoding[0] == "chunked"
	closeDelimited := !bodiless && !chunkedIn && resp.ContentLength < 0
	chunkOut := !bodiless && chunkedIn && r.minor == 1
	keep := r.keepAlive() && !closeDelimited && !(chunkedIn && !chunkOut)
	upKeep := !resp.Close && !closeDelimited

	bw := writerPool.Get().(*bufio.Writer)
	bw.Reset(s.cc)
	defer func() { bw.Reset(nil); writerPool.Put(bw) }()
	if !bodiless {
		resp.Header.Del("Content-Length")
	}
	writeStatusAndHeaders(bw, resp, false)
	switch {
	case bodiless:
	case chunkOut:
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	case !chunkedIn && resp.ContentLength >= 0:
		bw.WriteString("Content-Length: ")
		bw.WriteString(strconv.FormatInt(resp.ContentLength, 10))
		bw.WriteString("\r\n")
	}
	switch {
	case !keep:
		bw.WriteString("Connection: close\r\n")
	case r.minor == 0:
		bw.WriteString("Connection: keep-alive\r\n")
	}
	bw.WriteString("\r\n")
	d.Status = code
	s.p.log(d)

	var err error
	if !bodiless {
		err = s.copyResponseBody(bw, resp.Body, chunkOut)
	}
	if err == nil {
		err = bw.Flush()
	}
	if err != nil || !upKeep {
		s.closeUp()
	}
	return keep && err == nil, err
}

// copyResponseBody streams the body, flushing whenever the upstream has no
// more bytes ready (so server-sent events are not delayed).
func (s *session) copyResponseBody(bw *bufio.Writer, body io.Reader, chunk bool) error {
	bufp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bufp)
	buf := *bufp
	for {
		n, err := body.Read(buf)
		if n > 0 {
			var werr error
			if chunk {
				werr = writeChunk(bw, buf[:n])
			} else {
				_, werr = bw.Write(buf[:n])
			}
			if werr == nil && s.up.br.Buffered() == 0 {
				werr = bw.Flush()
			}
			if werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			if chunk {
				_, werr := bw.WriteString("0\r\n\r\n")
				return werr
			}
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// upgrade relays a 101 response and splices the connections.
func (s *session) upgrade(resp *http.Response, d *Decision) bool {
	bw := writerPool.Get().(*bufio.Writer)
	bw.Reset(s.cc)
	writeStatusAndHeaders(bw, resp, true)
	bw.WriteString("\r\n")
	err := bw.Flush()
	bw.Reset(nil)
	writerPool.Put(bw)
	d.Status = 101
	s.p.log(d)
	if err != nil {
		return false
	}
	take := func(br *bufio.Reader) []byte {
		n := br.Buffered()
		if n == 0 {
			return nil
		}
		b, _ := br.Peek(n)
		return append([]byte(nil), b...)
	}
	cPending, uPending := take(s.br), take(s.up.br)
	s.raw.SetDeadline(time.Time{})
	s.up.raw.SetDeadline(time.Time{})
	s.p.splice(s.raw, cPending, s.up.raw, uPending)
	return false
}

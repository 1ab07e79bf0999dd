package egress

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
)

// LocalName is the reserved name of the sandbox's consent API through
// the proxy: plain-HTTP (absolute-form) requests to http://corral.local/
// (port 80) are served by Config.Local, inside the proxy. It is never
// resolved or dialed, whatever the rules say (an allow entry or a hosts
// entry for it changes nothing), and a CONNECT to it is refused: the API
// is plain HTTP, spoken only between the sandbox and its own supervisor.
// ".local" is the mDNS domain (RFC 6762), which no public name uses.
const LocalName = "corral.local"

// maxLocalDrain bounds the unread request body the proxy reads past
// after Local answered, to keep the connection; a longer one closes it.
const maxLocalDrain = 256 << 10

// localHeld bounds the response body held back to be sent with a
// Content-Length; a handler that flushes, or writes more, streams.
const localHeld = 32 << 10

// isLocal: t names the consent API (LocalName, or Config.LocalAddr).
func (p *Proxy) isLocal(t target) bool {
	if t.host == LocalName {
		return true
	}
	la := p.cfg.LocalAddr
	if p.cfg.Local == nil || !la.IsValid() || t.port != int(la.Port()) {
		return false
	}
	return t.ip == la.Addr().Unmap() || t.host == "localhost" && la.Addr().IsLoopback()
}

// local answers a request to the consent API (isLocal).
func (s *session) local(r *request, t target, path string, d *Decision) bool {
	p := s.p
	refuse := func(reason string) bool {
		d.Reason = reason
		s.deny(d, 403)
		return false
	}
	name := hostPort(t.host, t.port)
	switch {
	case r.upgrade != "":
		return refuse(name + " does not take protocol upgrades")
	case r.method == "CONNECT":
		return refuse(name + " is the sandbox's consent API, plain HTTP inside the sandbox's own network: CONNECT (https) to it is refused; send http://" + LocalName + "/v1/... through the proxy (HTTP_PROXY)")
	case t.host != LocalName: // Config.LocalAddr: served below
	case t.port != 80:
		return refuse(LocalName + " is served on port 80 only (http://" + LocalName + "/)")
	case p.cfg.Local == nil:
		return refuse(LocalName + " is reserved for corral's consent API, which this sandbox does not have")
	}
	return s.serveLocal(r, t, path, d)
}

// serveLocal runs Config.Local for r and reports whether the connection
// can carry another request.
func (s *session) serveLocal(r *request, t target, path string, d *Decision) bool {
	p := s.p
	u, err := url.ParseRequestURI(path)
	if err != nil {
		d.Reason = "request target: " + err.Error()
		s.deny(d, 400)
		return false
	}
	hr := &http.Request{
		Method: r.method, URL: u, Proto: "HTTP/1." + strconv.Itoa(r.minor), ProtoMajor: 1, ProtoMinor: r.minor,
		Header: http.Header{}, Host: hostHeader(t.host, t.port, 80), RequestURI: path, RemoteAddr: s.raw.RemoteAddr().String(),
		Body: http.NoBody,
	}
	for _, h := range r.headers {
		ln := strings.ToLower(h.name)
		if hopByHop[ln] || r.hasConnToken(ln) {
			continue // the proxy credential among them
		}
		hr.Header.Add(h.name, h.value)
	}
	var body *localBody
	switch {
	case r.chunked:
		hr.TransferEncoding, hr.ContentLength = []string{"chunked"}, -1
		body = &localBody{s: s, rd: newChunkedBody(s)}
	case r.contentLength > 0:
		hr.ContentLength = r.contentLength
		body = &localBody{s: s, rd: &lengthBody{br: s.br, n: r.contentLength}}
	}
	if body != nil {
		body.cont = r.expect == "100-continue"
		hr.Body = body
	}
	// The handler finds the client's socket (RemoteAddr) and the
	// proxy's (LocalAddrContextKey) as under net/http; its context ends
	// with the proxy.
	hr = hr.WithContext(context.WithValue(p.ctx, http.LocalAddrContextKey, s.raw.LocalAddr()))

	w := &localWriter{s: s, h: http.Header{}, head: r.method == "HEAD", minor: r.minor, keep: r.keepAlive()}
	w.bw = writerPool.Get().(*bufio.Writer)
	w.bw.Reset(s.cc)
	defer func() { w.bw.Reset(nil); writerPool.Put(w.bw) }()
	panicked := func() (v any) {
		defer func() { v = recover() }()
		p.cfg.Local.ServeHTTP(w, hr)
		return nil
	}()
	d.Allowed, d.Reason, d.Rule = true, "local consent API", "local "+hostPort(t.host, t.port)
	if panicked != nil {
		// (net/http's answer to a handler that panics: the connection
		// ends, unanswered unless something was sent.)
		d.Allowed, d.Reason = false, "local consent API failed"
		if !w.sent {
			d.Status = 500
			s.deny(d, 500)
			return false
		}
		w.keep = false
	}
	keep := w.finish()
	d.Status = w.status
	p.log(d)
	if body != nil && !body.done {
		if body.cont && !body.contSent {
			keep = false // the client still holds its body back
		} else if n, _ := io.CopyN(io.Discard, body, maxLocalDrain+1); n > maxLocalDrain || !body.done {
			keep = false
		}
	}
	return keep
}

// localBody is a request body to LocalName: "100 Continue" goes out at
// the first read when the client waits for it.
type localBody struct {
	s              *session
	rd             io.Reader
	cont, contSent bool
	done           bool // read to its end
	err            error
}

func (b *localBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	if b.err != nil {
		return 0, b.err
	}
	if b.cont && !b.contSent {
		b.contSent = true
		if _, err := io.WriteString(b.s.cc, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
			b.err = err
			return 0, err
		}
	}
	n, err := b.rd.Read(p)
	switch {
	case err == io.EOF:
		b.done = true
	case err != nil:
		b.err = err
	}
	return n, err
}

func (b *localBody) Close() error { return nil }

// lengthBody reads exactly n bytes; an earlier end is
// io.ErrUnexpectedEOF.
type lengthBody struct {
	br *bufio.Reader
	n  int64
}

func (l *lengthBody) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.br.Read(p)
	l.n -= int64(n)
	if err == io.EOF && l.n > 0 {
		err = io.ErrUnexpectedEOF
	}
	if err == nil && l.n == 0 {
		err = io.EOF
	}
	return n, err
}

// chunkedBody decodes a chunked body and reads past its trailer (which
// is dropped, as forward drops it).
type chunkedBody struct {
	s  *session
	cr io.Reader
}

func newChunkedBody(s *session) *chunkedBody {
	return &chunkedBody{s: s, cr: httputil.NewChunkedReader(s.br)}
}

func (c *chunkedBody) Read(p []byte) (int, error) {
	n, err := c.cr.Read(p)
	if err != io.EOF {
		return n, err
	}
	budget := c.s.p.cfg.MaxHeaderBytes
	for {
		line, lerr := readLine(c.s.br, &budget)
		if lerr != nil {
			return n, lerr
		}
		if len(line) == 0 {
			return n, io.EOF
		}
	}
}

// localWriter is the http.ResponseWriter (and http.Flusher) of a request
// to LocalName, written as HTTP/1.1 on the client connection. A body
// that is neither flushed nor longer than localHeld goes with a
// Content-Length; otherwise with the handler's Content-Length, chunked
// (HTTP/1.1) or up to the connection's end (HTTP/1.0).
type localWriter struct {
	s      *session
	bw     *bufio.Writer
	h      http.Header
	status int // 0 until WriteHeader
	head   bool
	minor  int
	keep   bool // the connection may carry another request

	sent    bool // the head went out
	held    []byte
	chunked bool
	length  int64 // declared Content-Length, -1 when none
	n       int64 // body bytes sent
	err     error
}

func (w *localWriter) Header() http.Header { return w.h }

// WriteHeader keeps the first final status; 1xx are not relayed.
func (w *localWriter) WriteHeader(code int) {
	if w.status != 0 || code < 200 || code > 999 {
		return
	}
	w.status = code
}

func (w *localWriter) bodiless() bool { return w.head || w.status == 204 || w.status == 304 }

func (w *localWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	if w.err != nil {
		return 0, w.err
	}
	if w.bodiless() {
		if w.head {
			return len(b), nil
		}
		return 0, http.ErrBodyNotAllowed
	}
	if !w.sent {
		w.held = append(w.held, b...)
		if len(w.held) > localHeld {
			w.sendHead(true)
		}
		return len(b), w.err
	}
	return len(b), w.body(b)
}

// Flush sends the head and what was written, so a long poll's client
// sees it at once.
func (w *localWriter) Flush() {
	w.WriteHeader(http.StatusOK)
	if !w.sent {
		w.sendHead(true)
	}
	if w.err == nil {
		w.err = w.bw.Flush()
	}
}

func (w *localWriter) body(b []byte) error {
	if w.err != nil || len(b) == 0 {
		return w.err
	}
	if w.length >= 0 && w.n+int64(len(b)) > w.length {
		w.err = http.ErrContentLength
		return w.err
	}
	w.n += int64(len(b))
	if w.chunked {
		w.err = writeChunk(w.bw, b)
	} else {
		_, w.err = w.bw.Write(b)
	}
	return w.err
}

// sendHead writes the status line and headers, then what was held back;
// streaming: more may follow, so the held bytes' length is not the
// body's.
func (w *localWriter) sendHead(streaming bool) {
	w.sent = true
	w.length = -1
	if v := w.h.Get("Content-Length"); v != "" {
		if n, ok := parseContentLength(v); ok {
			w.length = n
		} else {
			w.err = errors.New("local handler set a malformed Content-Length")
			w.keep = false
			return
		}
	}
	if w.h.Get("Content-Type") == "" && len(w.held) > 0 && !w.bodiless() {
		w.h.Set("Content-Type", http.DetectContentType(w.held))
	}
	for _, t := range w.h.Values("Connection") {
		if strings.Contains(strings.ToLower(t), "close") {
			w.keep = false
		}
	}
	switch {
	case w.bodiless():
	case w.length >= 0:
	case !streaming:
		w.length = int64(len(w.held))
	case w.minor == 1:
		w.chunked = true
	default:
		w.keep = false // delimited by the connection's end
	}
	b := w.bw
	b.WriteString("HTTP/1.1 ")
	b.WriteString(strconv.Itoa(w.status))
	if t := http.StatusText(w.status); t != "" {
		b.WriteString(" " + t)
	}
	b.WriteString("\r\n")
	for k, vs := range w.h {
		switch http.CanonicalHeaderKey(k) {
		case "Connection", "Content-Length", "Transfer-Encoding", "Keep-Alive", "Trailer", "Upgrade", "Proxy-Connection":
			continue
		}
		for _, v := range vs {
			if strings.ContainsAny(v, "\r\n") || strings.ContainsAny(k, "\r\n: ") {
				continue // what net/http would refuse to send
			}
			b.WriteString(k + ": " + v + "\r\n")
		}
	}
	switch {
	case w.chunked:
		b.WriteString("Transfer-Encoding: chunked\r\n")
	case w.length >= 0 && (!w.bodiless() || w.head && w.h.Get("Content-Length") != ""):
		b.WriteString("Content-Length: " + strconv.FormatInt(w.length, 10) + "\r\n")
	}
	if !w.keep {
		b.WriteString("Connection: close\r\n")
	} else if w.minor == 0 {
		b.WriteString("Connection: keep-alive\r\n")
	}
	b.WriteString("\r\n")
	held := w.held
	w.held = nil
	if !w.bodiless() {
		w.body(held)
	}
}

// finish ends the response (the handler returned) and reports whether
// the connection may carry another request.
func (w *localWriter) finish() bool {
	w.WriteHeader(http.StatusOK)
	if !w.sent {
		w.sendHead(false)
	}
	if w.err == nil && w.chunked {
		_, w.err = w.bw.WriteString("0\r\n\r\n")
	}
	if w.err == nil && w.length >= 0 && !w.bodiless() && w.n != w.length {
		w.err = errors.New("local handler wrote fewer bytes than its Content-Length")
	}
	if w.err == nil {
		w.err = w.bw.Flush()
	} else {
		w.bw.Flush()
	}
	return w.keep && w.err == nil
}

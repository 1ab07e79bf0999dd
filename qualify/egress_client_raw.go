//go:build linux

package qualify

// More of `corral __egress-client fetch` (egress_client.go): requests
// written by hand (h1raw: HTTP/1.1 in small writes; h2raw: HTTP/2 frame
// by frame), so that a placeholder can be split across TLS records,
// CONTINUATION and DATA frames; the placeholder templates of the
// requests (Expand); whole responses (FetchRequest.Full); and the search
// for a secret the client knows only by its hash (HuntNeedle).

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// fullMax bounds the body a Full request keeps.
const fullMax = 1 << 20

// tunnel opens a CONNECT tunnel to u's host through proxy and TLS over
// it, offering only alpn, and verifies the leaf. A refused CONNECT's
// status and body go in r.
func tunnel(u *url.URL, proxy func(*http.Request) (*url.URL, error), tcfg *tls.Config, alpn string, r *FetchResult, verify func(*tls.ConnectionState)) (*tls.Conn, error) {
	pu, err := proxy(&http.Request{URL: u})
	if err != nil {
		return nil, err
	}
	c, err := net.DialTimeout("tcp", pu.Host, 5*time.Second)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", u.Host, u.Host)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("CONNECT: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		c.Close()
		r.Status, r.Body = resp.StatusCode, string(b)
		return nil, fmt.Errorf("CONNECT refused: %s", resp.Status)
	}
	cfg := tcfg.Clone()
	cfg.NextProtos = []string{alpn}
	tc := tls.Client(&bufConn{Conn: c, r: br}, cfg)
	if err := tc.Handshake(); err != nil {
		c.Close()
		return nil, fmt.Errorf("TLS: %w", err)
	}
	cs := tc.ConnectionState()
	verify(&cs)
	return tc, nil
}

// pieces splits b into pieces of n bytes (n <= 0: one piece).
func pieces(b []byte, n int) [][]byte {
	if n <= 0 || n >= len(b) {
		return [][]byte{b}
	}
	var out [][]byte
	for len(b) > n {
		out = append(out, b[:n])
		b = b[n:]
	}
	return append(out, b)
}

// writeSlowly writes b in pieces of n bytes, pausing between them so
// that each is read on its own (each Write is a TLS record of its own).
func writeSlowly(w io.Writer, b []byte, n int) error {
	for i, p := range pieces(b, n) {
		if i > 0 {
			time.Sleep(2 * time.Millisecond)
		}
		if _, err := w.Write(p); err != nil {
			return err
		}
	}
	return nil
}

func methodOf(q FetchRequest) string {
	if q.Method == "" {
		return http.MethodGet
	}
	return q.Method
}

// fetchH1Raw writes q as HTTP/1.1 by hand on a tunnel of its own, in
// writes of q.Chunk bytes, and reads the response.
func fetchH1Raw(q FetchRequest, u *url.URL, proxy func(*http.Request) (*url.URL, error), tcfg *tls.Config, r *FetchResult, verify func(*tls.ConnectionState)) {
	tc, err := tunnel(u, proxy, tcfg, "http/1.1", r, verify)
	if err != nil {
		r.Err = err.Error()
		return
	}
	defer tc.Close()
	m, host := methodOf(q), q.Host
	if host == "" {
		host = u.Host
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", m, u.RequestURI(), host)
	for _, h := range q.Headers {
		b.WriteString(h + "\r\n")
	}
	if q.Body != "" {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(q.Body))
	}
	b.WriteString("Connection: close\r\n\r\n" + q.Body)
	if err := writeSlowly(tc, b.Bytes(), q.Chunk); err != nil {
		r.Err = "write: " + err.Error()
		return
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), &http.Request{Method: m})
	if err != nil {
		r.Err = "response: " + err.Error()
		return
	}
	defer resp.Body.Close()
	r.Status, r.Proto = resp.StatusCode, resp.Proto
	body, err := io.ReadAll(io.LimitReader(resp.Body, fullMax))
	if err != nil {
		r.Err = "body: " + err.Error()
	}
	r.keep(q, resp.Proto+" "+resp.Status, resp.Header, resp.Trailer, body)
}

// fetchH2Raw sends q as HTTP/2 frame by frame on a tunnel of its own: the
// header block (HPACK) in a HEADERS frame and CONTINUATION frames of
// q.Chunk bytes, the body in DATA frames of q.Chunk bytes; then reads the
// response on stream 1.
func fetchH2Raw(q FetchRequest, u *url.URL, proxy func(*http.Request) (*url.URL, error), tcfg *tls.Config, r *FetchResult, verify func(*tls.ConnectionState)) {
	tc, err := tunnel(u, proxy, tcfg, "h2", r, verify)
	if err != nil {
		r.Err = err.Error()
		return
	}
	defer tc.Close()
	if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
		r.Err = fmt.Sprintf("ALPN: %q, not h2", p)
		return
	}
	fr := http2.NewFramer(tc, tc)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fail := func(what string, err error) bool {
		if err != nil {
			r.Err = what + ": " + err.Error()
		}
		return err != nil
	}
	if _, err := tc.Write([]byte(http2.ClientPreface)); fail("preface", err) || fail("SETTINGS", fr.WriteSettings()) {
		return
	}
	host := q.Host
	if host == "" {
		host = u.Host
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	fields := []hpack.HeaderField{{Name: ":method", Value: methodOf(q)}, {Name: ":scheme", Value: "https"}, {Name: ":authority", Value: host}, {Name: ":path", Value: u.RequestURI()}}
	for _, h := range q.Headers {
		k, v, _ := strings.Cut(h, ":")
		fields = append(fields, hpack.HeaderField{Name: strings.ToLower(strings.TrimSpace(k)), Value: strings.TrimSpace(v)})
	}
	if q.Body != "" {
		fields = append(fields, hpack.HeaderField{Name: "content-length", Value: strconv.Itoa(len(q.Body))})
	}
	for _, f := range fields {
		_ = enc.WriteField(f)
	}
	block := pieces(hb.Bytes(), q.Chunk)
	if fail("HEADERS", fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[0], EndStream: q.Body == "", EndHeaders: len(block) == 1})) {
		return
	}
	for i, p := range block[1:] {
		time.Sleep(2 * time.Millisecond)
		if fail("CONTINUATION", fr.WriteContinuation(1, i == len(block)-2, p)) {
			return
		}
	}
	if q.Body != "" {
		data := pieces([]byte(q.Body), q.Chunk)
		for i, p := range data {
			time.Sleep(2 * time.Millisecond)
			if fail("DATA", fr.WriteData(1, i == len(data)-1, p)) {
				return
			}
		}
	}
	var head, trailer []hpack.HeaderField
	var body bytes.Buffer
	for done := false; !done; {
		f, err := fr.ReadFrame()
		if fail("read", err) {
			break
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = fr.WritePing(true, f.Data)
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID != 1 {
				continue
			}
			if head == nil {
				head = f.Fields
			} else {
				trailer = f.Fields
			}
			done = f.StreamEnded()
		case *http2.DataFrame:
			if f.StreamID != 1 {
				continue
			}
			if body.Len() < fullMax {
				body.Write(f.Data())
			}
			done = f.StreamEnded()
			if n := uint32(len(f.Data())); n > 0 {
				_ = fr.WriteWindowUpdate(0, n)
				if !done {
					_ = fr.WriteWindowUpdate(1, n)
				}
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == 1 {
				r.Err, done = "RST_STREAM "+f.ErrCode.String(), true
			}
		case *http2.GoAwayFrame:
			r.Err, done = "GOAWAY "+f.ErrCode.String(), true
		}
	}
	toHeader := func(fs []hpack.HeaderField) http.Header {
		h := http.Header{}
		for _, f := range fs {
			if f.Name == ":status" {
				r.Status, _ = strconv.Atoi(f.Value)
			} else if !strings.HasPrefix(f.Name, ":") {
				h.Add(f.Name, f.Value)
			}
		}
		return h
	}
	h, t := toHeader(head), toHeader(trailer)
	r.Proto = "HTTP/2.0"
	r.keep(q, "HTTP/2.0 "+strconv.Itoa(r.Status), h, t, body.Bytes())
}

// keep records a response's body: the first 512 bytes, or with q.Full
// everything (fill).
func (r *FetchResult) keep(q FetchRequest, status string, h, trailer http.Header, body []byte) {
	if q.Full {
		r.fill(status, h, trailer, body)
		return
	}
	r.Body = string(body[:min(len(body), 512)])
}

// fill records a whole response: the status line, headers and trailers
// ("trailer Name: value") in Head, the body, and the body decoded per its
// Content-Encoding in Decoded.
func (r *FetchResult) fill(status string, h, trailer http.Header, body []byte) {
	var b strings.Builder
	b.WriteString(status + "\n")
	for _, k := range slices.Sorted(maps.Keys(h)) {
		for _, v := range h[k] {
			b.WriteString(k + ": " + v + "\n")
		}
	}
	for _, k := range slices.Sorted(maps.Keys(trailer)) {
		for _, v := range trailer[k] {
			b.WriteString("trailer " + k + ": " + v + "\n")
		}
	}
	r.Head, r.Body = b.String(), string(body)
	var zr io.Reader
	var err error
	switch strings.ToLower(strings.TrimSpace(h.Get("Content-Encoding"))) {
	case "":
		return
	case "gzip", "x-gzip":
		zr, err = gzip.NewReader(bytes.NewReader(body))
	case "deflate": // zlib-wrapped, or raw as some servers send it
		if zr, err = zlib.NewReader(bytes.NewReader(body)); err != nil {
			zr, err = flate.NewReader(bytes.NewReader(body)), nil
		}
	default:
		r.Decoded = "<content-encoding " + h.Get("Content-Encoding") + " not decoded>"
		return
	}
	if err == nil {
		var d []byte
		d, err = io.ReadAll(io.LimitReader(zr, fullMax))
		r.Decoded = string(d)
	}
	if err != nil {
		r.Decoded += "<" + h.Get("Content-Encoding") + ": " + err.Error() + ">"
	}
}

// tmplRe is a placeholder template: {{NAME}} or {{NAME.ENCODING}}.
var tmplRe = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`\{\{([A-Za-z_][A-Za-z0-9_]*)(?:\.([a-z0-9-]+))?\}\}`)
})

// Expand replaces each "{{NAME}}" in s with vars[NAME] and each
// "{{NAME.ENC}}" with an encoding of it: b64 (standard base64), pct
// (every byte percent-encoded), json (every character a \u escape),
// basic-user and basic-pw (an Authorization: Basic credential: base64 of
// "VALUE:x" and of "git:VALUE"). A name not in vars, or an unknown
// encoding, is left as written. The in-sandbox client expands its
// requests with the placeholders it reads; the case, with the ones the
// client reports, to know what was sent.
func Expand(s string, vars map[string]string) string {
	if len(vars) == 0 {
		return s
	}
	return tmplRe().ReplaceAllStringFunc(s, func(m string) string {
		g := tmplRe().FindStringSubmatch(m)
		v, ok := vars[g[1]]
		if !ok {
			return m
		}
		b64 := base64.StdEncoding.EncodeToString
		var b strings.Builder
		switch g[2] {
		case "":
			return v
		case "b64":
			return b64([]byte(v))
		case "pct":
			for i := 0; i < len(v); i++ {
				fmt.Fprintf(&b, "%%%02X", v[i])
			}
			return b.String()
		case "json":
			for _, c := range v {
				fmt.Fprintf(&b, `\u%04x`, c)
			}
			return b.String()
		case "basic-user":
			return b64([]byte(v + ":x"))
		case "basic-pw":
			return b64([]byte("git:" + v))
		}
		return m
	})
}

// expand is q with its templates expanded (Expand).
func (q FetchRequest) expand(vars map[string]string) FetchRequest {
	if len(vars) == 0 {
		return q
	}
	q.URL, q.Host, q.Body = Expand(q.URL, vars), Expand(q.Host, vars), Expand(q.Body, vars)
	hs := make([]string, len(q.Headers))
	for i, h := range q.Headers {
		hs[i] = Expand(h, vars)
	}
	q.Headers = hs
	return q
}

// Needle is secrets the in-sandbox client must not find anywhere, known
// to it only by a public prefix they share, their length and their
// SHA-256 (the secrets themselves never enter the sandbox): each
// occurrence of Prefix is hashed over Len bytes.
type Needle struct {
	Prefix string   `json:"prefix"`
	Len    int      `json:"len"`
	SHA256 []string `json:"sha256"`
	Roots  []string `json:"roots,omitempty"` // searched besides HuntCA's trees
}

// NewNeedle is the Needle for secrets of one length whose first n bytes
// are the same and public.
func NewNeedle(n int, secrets ...string) Needle {
	nd := Needle{Prefix: secrets[0][:n], Len: len(secrets[0])}
	for _, s := range secrets {
		sum := sha256.Sum256([]byte(s))
		nd.SHA256 = append(nd.SHA256, hex.EncodeToString(sum[:]))
	}
	return nd
}

// HuntNeedle searches everything HuntCA's key search reads (the files
// under every non-system tree, the environment, each visible process's
// environ, cmdline, open files and memory) for n; KeyHunt.Secret says
// where it was found.
func HuntNeedle(n Needle) KeyHunt {
	var rep KeyHunt
	h := &hunter{rep: &rep, seen: map[[2]uint64]bool{}, needle: &n}
	for _, x := range n.SHA256 {
		sum, err := hex.DecodeString(x)
		if err != nil || len(sum) != sha256.Size {
			continue
		}
		h.needleSums = append(h.needleSums, [sha256.Size]byte(sum))
	}
	if len(h.needleSums) == 0 || len(h.needleSums) != len(n.SHA256) || n.Prefix == "" || n.Len < len(n.Prefix) {
		rep.Unreadable = map[string]int{"a malformed needle": 1}
		return rep
	}
	h.run(n.Roots)
	return rep
}

// findNeedle records where when b holds the hunter's needle.
func (h *hunter) findNeedle(b []byte, where string) {
	n := h.needle
	p := []byte(n.Prefix)
	for off := 0; ; off++ {
		i := bytes.Index(b[off:], p)
		if i < 0 {
			return
		}
		off += i
		if off+n.Len <= len(b) && slices.Contains(h.needleSums, sha256.Sum256(b[off:off+n.Len])) && !slices.Contains(h.rep.Secret, where) {
			h.rep.Secret = append(h.rep.Secret, where)
		}
	}
}

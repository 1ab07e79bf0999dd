package egress

import (
	"bufio"
	"bytes"
	"strconv"
	"strings"
)

type header struct{ name, value string }

// request is one parsed client request head.
type request struct {
	method, target string
	minor          int // HTTP/1.minor (0 or 1)
	headers        []header

	host          string // raw Host header value
	hasHost       bool
	contentLength int64 // -1: none
	chunked       bool
	connTokens    []string // lowercased Connection/Proxy-Connection tokens
	upgrade       string
	proxyAuth     string
	hasProxyAuth  bool
	expect        string
}

// values returns the values of the header fields named name (compared
// without case), in order.
func (r *request) values(name string) []string {
	var out []string
	for _, h := range r.headers {
		if strings.EqualFold(h.name, name) {
			out = append(out, h.value)
		}
	}
	return out
}

// httpError is a malformed-request condition answered with status.
type httpError struct {
	status int
	reason string
}

func (e *httpError) Error() string { return e.reason }

func badRequest(reason string) error { return &httpError{400, reason} }

var errHeaderTooLarge = &httpError{431, "request header too large"}

// readLine reads one line terminated by LF (CRLF or bare LF), charging its
// length against *budget. The returned slice is only valid until the next
// read unless it had to be assembled.
func readLine(br *bufio.Reader, budget *int) ([]byte, error) {
	var acc []byte
	for {
		frag, err := br.ReadSlice('\n')
		*budget -= len(frag)
		if *budget < 0 {
			return nil, errHeaderTooLarge
		}
		if err == bufio.ErrBufferFull {
			acc = append(acc, frag...)
			continue
		}
		if err != nil {
			return nil, err
		}
		line := frag
		if acc != nil {
			line = append(acc, frag...)
		}
		line = line[:len(line)-1]
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		if bytes.IndexByte(line, '\r') >= 0 {
			return nil, badRequest("bare CR in request head")
		}
		return line, nil
	}
}

func isTokenChar(c byte) bool {
	if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return false
		}
	}
	return true
}

// readRequest reads and validates a request head. I/O errors are returned
// as is; protocol violations as *httpError.
func readRequest(br *bufio.Reader, maxHeader int) (*request, error) {
	budget := maxHeader
	line, err := readLine(br, &budget)
	if err != nil {
		return nil, err
	}
	r := &request{contentLength: -1}
	parts := strings.Split(string(line), " ")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return nil, badRequest("malformed request line")
	}
	r.method, r.target = parts[0], parts[1]
	if !isToken(r.method) {
		return nil, badRequest("malformed method")
	}
	switch parts[2] {
	case "HTTP/1.1":
		r.minor = 1
	case "HTTP/1.0":
		r.minor = 0
	default:
		return nil, &httpError{505, "unsupported protocol version " + strconv.Quote(parts[2])}
	}
	for i := 0; i < len(r.target); i++ {
		if c := r.target[i]; c < 0x21 || c >= 0x7f {
			return nil, badRequest("control, space or non-ASCII byte in request target")
		}
	}
	var te []string
	for {
		line, err := readLine(br, &budget)
		if err != nil {
			return nil, err
		}
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			return nil, badRequest("obsolete header line folding")
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return nil, badRequest("malformed header line")
		}
		name := string(line[:colon])
		if !isToken(name) {
			return nil, badRequest("malformed header name")
		}
		v := line[colon+1:]
		for i := 0; i < len(v); i++ {
			if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
				return nil, badRequest("control byte in header value")
			}
		}
		value := strings.Trim(string(v), " \t")
		r.headers = append(r.headers, header{name, value})
		switch strings.ToLower(name) {
		case "host":
			if r.hasHost {
				return nil, badRequest("multiple Host headers")
			}
			r.host, r.hasHost = value, true
		case "content-length":
			n, ok := parseContentLength(value)
			if !ok {
				return nil, badRequest("malformed Content-Length")
			}
			if r.contentLength >= 0 && r.contentLength != n {
				return nil, badRequest("conflicting Content-Length headers")
			}
			r.contentLength = n
		case "transfer-encoding":
			for _, t := range strings.Split(value, ",") {
				if t = strings.Trim(t, " \t"); t != "" {
					te = append(te, strings.ToLower(t))
				}
			}
		case "connection", "proxy-connection":
			for _, t := range strings.Split(value, ",") {
				if t = strings.Trim(t, " \t"); t != "" {
					r.connTokens = append(r.connTokens, strings.ToLower(t))
				}
			}
		case "upgrade":
			r.upgrade = value
		case "proxy-authorization":
			if r.hasProxyAuth {
				return nil, badRequest("multiple Proxy-Authorization headers")
			}
			r.proxyAuth, r.hasProxyAuth = value, true
		case "expect":
			r.expect = strings.ToLower(value)
		}
	}
	if len(te) > 0 {
		if r.minor == 0 {
			return nil, badRequest("Transfer-Encoding in an HTTP/1.0 request")
		}
		if len(te) != 1 || te[0] != "chunked" {
			return nil, &httpError{501, "unsupported Transfer-Encoding"}
		}
		if r.contentLength >= 0 {
			return nil, badRequest("both Transfer-Encoding and Content-Length")
		}
		r.chunked = true
	}
	return r, nil
}

func parseContentLength(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

func (r *request) hasConnToken(t string) bool {
	for _, x := range r.connTokens {
		if x == t {
			return true
		}
	}
	return false
}

// keepAlive reports whether the client wants the connection kept open.
func (r *request) keepAlive() bool {
	if r.hasConnToken("close") {
		return false
	}
	return r.minor == 1 || r.hasConnToken("keep-alive")
}

func (r *request) isUpgrade() bool {
	return r.minor == 1 && r.upgrade != "" && r.hasConnToken("upgrade")
}

// hopByHop headers are never forwarded (the Connection tokens are dropped too).
var hopByHop = map[string]bool{
	"connection":          true,
	"keep-alive":          true,
	"proxy-authenticate":  true,
	"proxy-authorization": true,
	"proxy-connection":    true,
	"te":                  true,
	"trailer":             true,
	"transfer-encoding":   true,
	"upgrade":             true,
	// Rewritten by the proxy:
	"host":           true,
	"content-length": true,
	"expect":         true,
}

// parseTarget splits an absolute-form http:// target into authority and
// origin-form path (query kept for the upstream, fragment refused).
func parseTarget(t string) (authority, path string, err error) {
	if len(t) < 7 || !strings.EqualFold(t[:7], "http://") {
		switch {
		case strings.HasPrefix(t, "/"):
			return "", "", badRequest("origin-form request: this is a forward proxy; send an absolute-form URL or use CONNECT")
		case t == "*":
			return "", "", badRequest("asterisk-form request is not supported")
		case len(t) >= 8 && strings.EqualFold(t[:8], "https://"):
			return "", "", badRequest("https:// absolute-form request: use CONNECT for TLS")
		}
		return "", "", badRequest("request target is not an absolute http:// URL")
	}
	rest := t[7:]
	if strings.IndexByte(rest, '#') >= 0 {
		return "", "", badRequest("fragment in request target")
	}
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	authority, path = rest[:end], rest[end:]
	if strings.IndexByte(authority, '\\') >= 0 {
		return "", "", badRequest("backslash in authority")
	}
	switch {
	case path == "":
		path = "/"
	case path[0] == '?':
		path = "/" + path
	}
	return authority, path, nil
}

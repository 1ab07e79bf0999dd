package egress

import (
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// ParseAuthority is the one strict parser for every authority the proxy
// sees: CONNECT targets, the authority of absolute-form request targets and
// Host headers. The decision and the dial both use its result.
//
// It accepts "name", "name:port", "a.b.c.d", "a.b.c.d:port", "[v6]" and
// "[v6]:port". When the port is absent defaultPort is used; defaultPort <= 0
// makes the port mandatory.
//
// The returned host is canonical: a lowercase DNS name without trailing dot,
// or the canonical text of an IP address (IPv4-mapped IPv6 literals are
// unmapped to IPv4; IPv6 is returned without brackets). Formatting the result
// with net.JoinHostPort and parsing it again yields the same host and port.
//
// Rejected: userinfo, empty host, non-canonical IPv4 spellings (127.1,
// 2130706433, 0x7f000001, 0177.0.0.1, 127.000.0.1; any name whose last label
// starts with a digit must be a canonical dotted quad), unbracketed IPv6,
// zone IDs, percent-encoding, bad ports (0, >65535, signs, leading zeros,
// non-digits), whitespace, control and non-ASCII bytes, trailing garbage, and
// names that are not 1–63 byte labels of [a-z0-9-] (no leading or trailing
// '-') with a total length of at most 253.
func ParseAuthority(s string, defaultPort int) (host string, port int, err error) {
	if s == "" {
		return "", 0, errors.New("empty authority")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c <= ' ' || c >= 0x7f:
			return "", 0, errors.New("whitespace, control or non-ASCII byte in authority")
		case c == '@':
			return "", 0, errors.New("userinfo in authority")
		case c == '%':
			if strings.HasPrefix(s, "[") {
				return "", 0, errors.New("zone ID or percent-encoding in IPv6 literal")
			}
			return "", 0, errors.New("percent-encoding in host")
		case c == '/' || c == '?' || c == '#' || c == '\\':
			return "", 0, errors.New("path, query or fragment in authority")
		}
	}
	var hostPart, portPart string
	hasPort := false
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", 0, errors.New("missing ']' in IPv6 literal")
		}
		hostPart = s[1:end]
		rest := s[end+1:]
		switch {
		case rest == "":
		case rest[0] == ':':
			portPart, hasPort = rest[1:], true
		default:
			return "", 0, errors.New("trailing garbage after IPv6 literal")
		}
		a, perr := netip.ParseAddr(hostPart)
		if perr != nil || !a.Is6() || a.Zone() != "" {
			return "", 0, errors.New("invalid IPv6 literal")
		}
		host = canonicalAddr(a).String()
	} else {
		switch strings.Count(s, ":") {
		case 0:
			hostPart = s
		case 1:
			i := strings.IndexByte(s, ':')
			hostPart, portPart, hasPort = s[:i], s[i+1:], true
		default:
			return "", 0, errors.New("IPv6 literal must be in brackets")
		}
		if strings.ContainsAny(hostPart, "[]") {
			return "", 0, errors.New("invalid character in host")
		}
		h, herr := canonicalHost(hostPart)
		if herr != nil {
			return "", 0, herr
		}
		host = h
	}
	if hasPort {
		port, err = parsePort(portPart)
		if err != nil {
			return "", 0, err
		}
	} else {
		if defaultPort <= 0 {
			return "", 0, errors.New("missing port")
		}
		if defaultPort > 65535 {
			return "", 0, errors.New("default port out of range")
		}
		port = defaultPort
	}
	return host, port, nil
}

// canonicalAddr unmaps IPv4-mapped IPv6 addresses and drops zones.
func canonicalAddr(a netip.Addr) netip.Addr {
	return a.Unmap().WithZone("")
}

// parsePort accepts 1..65535 written in decimal without sign or leading zero.
func parsePort(s string) (int, error) {
	if s == "" {
		return 0, errors.New("empty port")
	}
	if len(s) > 5 {
		return 0, errors.New("port out of range")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errors.New("port is not a decimal number")
		}
	}
	if s[0] == '0' {
		return 0, errors.New("port 0 or leading zero in port")
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, errors.New("port out of range")
	}
	return n, nil
}

// canonicalHost validates an unbracketed host: a canonical dotted-quad IPv4
// address or a DNS name. One trailing dot is ignored.
func canonicalHost(h string) (string, error) {
	if strings.HasSuffix(h, ".") {
		h = h[:len(h)-1]
	}
	if h == "" {
		return "", errors.New("empty host")
	}
	last := h
	if i := strings.LastIndexByte(h, '.'); i >= 0 {
		last = h[i+1:]
	}
	if last != "" && last[0] >= '0' && last[0] <= '9' {
		// Looks numeric: only a canonical dotted quad is accepted (no
		// shortened, decimal, octal, hex or zero-padded spellings).
		a, err := netip.ParseAddr(h)
		if err != nil || !a.Is4() || a.String() != h {
			return "", errors.New("non-canonical IP literal")
		}
		return h, nil
	}
	return canonicalName(h)
}

// canonicalName validates and lowercases a DNS name (no trailing dot).
func canonicalName(h string) (string, error) {
	if h == "" {
		return "", errors.New("empty host")
	}
	if len(h) > 253 {
		return "", errors.New("host name longer than 253 bytes")
	}
	var b []byte
	labelLen := 0
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case c >= 'A' && c <= 'Z':
			if b == nil {
				b = []byte(h)
			}
			b[i] = c + ('a' - 'A')
			labelLen++
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			labelLen++
		case c == '-':
			if labelLen == 0 {
				return "", errors.New("host label starts with '-'")
			}
			if i+1 == len(h) || h[i+1] == '.' {
				return "", errors.New("host label ends with '-'")
			}
			labelLen++
		case c == '.':
			if labelLen == 0 {
				return "", errors.New("empty label in host")
			}
			labelLen = 0
			continue
		default:
			return "", errors.New("invalid character in host name")
		}
		if labelLen > 63 {
			return "", errors.New("host label longer than 63 bytes")
		}
	}
	if labelLen == 0 {
		return "", errors.New("empty label in host")
	}
	if b != nil {
		return string(b), nil
	}
	return h, nil
}

// hostPort formats a canonical host and port as an authority.
func hostPort(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// hostHeader formats the Host header for an origin request.
func hostHeader(host string, port, defaultPort int) string {
	if port == defaultPort {
		if strings.IndexByte(host, ':') >= 0 {
			return "[" + host + "]"
		}
		return host
	}
	return hostPort(host, port)
}

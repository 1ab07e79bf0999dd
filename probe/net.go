package probe

import (
	"bufio"
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// DialTimeout bounds every TCP connect of the network probes.
const DialTimeout = 2 * time.Second

// probeConnect: connect tcp|udp|unix|abstract ADDR...
//
//	tcp      connect with a 2 s timeout (and send "probe")
//	udp      send one datagram "probe"; OK means the send succeeded
//	unix     connect to a socket path (stream, then datagram on EPROTOTYPE)
//	abstract connect to an abstract socket "@name" ("@" added if missing)
func probeConnect(args []string) ([]Result, error) {
	if len(args) < 2 {
		return nil, usagef("usage: connect tcp|udp|unix|abstract ADDR...")
	}
	kind := args[0]
	switch kind {
	case "tcp", "udp", "unix", "abstract":
	default:
		return nil, usagef("unknown network %q (want tcp, udp, unix or abstract)", kind)
	}
	var rs []Result
	for _, addr := range args[1:] {
		rs = append(rs, connectOne(kind, addr))
	}
	return rs, nil
}

func connectOne(kind, addr string) Result {
	what := "connect " + kind + " " + addr
	switch kind {
	case "udp":
		c, err := net.Dial("udp", addr)
		if err != nil {
			return result(what, err)
		}
		defer c.Close()
		_, err = c.Write([]byte("probe"))
		r := result(what, err)
		if err == nil {
			r.Detail = "datagram sent"
		}
		return r
	case "abstract":
		if !strings.HasPrefix(addr, "@") {
			addr = "@" + addr
		}
		kind = "unix"
	}
	c, err := net.DialTimeout(kind, addr, DialTimeout)
	if err != nil && kind == "unix" && errnoOf(err) == "EPROTOTYPE" {
		c, err = net.DialTimeout("unixgram", addr, DialTimeout)
	}
	if err != nil {
		return result(what, err)
	}
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(DialTimeout))
	_, _ = c.Write([]byte("probe"))
	r := result(what, nil)
	r.Detail = "connected " + c.LocalAddr().String() + " -> " + c.RemoteAddr().String()
	return r
}

// probeDNS: dns NAME SERVER — a raw A query for NAME to SERVER (ip:port)
// over UDP and over TCP, then the system resolver's net.LookupHost(NAME).
func probeDNS(args []string) ([]Result, error) {
	if len(args) != 2 {
		return nil, usagef("usage: dns NAME SERVER(ip:port)")
	}
	name, server := args[0], args[1]
	if _, _, err := net.SplitHostPort(server); err != nil {
		return nil, usagef("SERVER must be ip:port: %v", err)
	}
	q, id, err := dnsQuery(name)
	if err != nil {
		return nil, usagef("bad NAME: %v", err)
	}
	var rs []Result
	rs = append(rs, dnsUDP(name, server, q, id)...)
	rs = append(rs, dnsTCP(name, server, q, id)...)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupHost(ctx, name)
	r := result("lookup "+name, err)
	if err == nil {
		r.Detail = strings.Join(addrs, " ")
	}
	return append(rs, r), nil
}

func dnsUDP(name, server string, q []byte, id uint16) []Result {
	what := "dns udp " + server + " " + name
	c, err := net.Dial("udp", server)
	if err != nil {
		return []Result{result(what+" send", err)}
	}
	defer c.Close()
	if _, err := c.Write(q); err != nil {
		return []Result{result(what+" send", err)}
	}
	rs := []Result{{What: what + " send", OK: true}}
	c.SetReadDeadline(time.Now().Add(DialTimeout))
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		return append(rs, result(what+" reply", err))
	}
	return append(rs, dnsReplyResult(what+" reply", buf[:n], id))
}

func dnsTCP(name, server string, q []byte, id uint16) []Result {
	what := "dns tcp " + server + " " + name
	c, err := net.DialTimeout("tcp", server, DialTimeout)
	if err != nil {
		return []Result{result(what+" send", err)}
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * DialTimeout))
	msg := binary.BigEndian.AppendUint16(nil, uint16(len(q)))
	msg = append(msg, q...)
	if _, err := c.Write(msg); err != nil {
		return []Result{result(what+" send", err)}
	}
	rs := []Result{{What: what + " send", OK: true}}
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return append(rs, result(what+" reply", err))
	}
	buf := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, buf); err != nil {
		return append(rs, result(what+" reply", err))
	}
	return append(rs, dnsReplyResult(what+" reply", buf, id))
}

// dnsQuery builds a recursive A query for name.
func dnsQuery(name string) ([]byte, uint16, error) {
	var idb [2]byte
	_, _ = rand.Read(idb[:])
	id := binary.BigEndian.Uint16(idb[:])
	m := []byte{idb[0], idb[1], 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0}
	for _, label := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		if len(label) == 0 || len(label) > 63 {
			return nil, 0, fmt.Errorf("bad label %q", label)
		}
		m = append(m, byte(len(label)))
		m = append(m, label...)
	}
	m = append(m, 0, 0, 1, 0, 1) // root, QTYPE A, QCLASS IN
	return m, id, nil
}

// dnsReplyResult summarises a reply: rcode and the A records.
func dnsReplyResult(what string, b []byte, id uint16) Result {
	if len(b) < 12 {
		return Result{What: what, OK: true, Detail: fmt.Sprintf("short reply (%d bytes)", len(b))}
	}
	rcode := b[3] & 0x0f
	qd := int(binary.BigEndian.Uint16(b[4:]))
	an := int(binary.BigEndian.Uint16(b[6:]))
	detail := fmt.Sprintf("rcode=%d answers=%d", rcode, an)
	if binary.BigEndian.Uint16(b) != id {
		detail += " (id mismatch)"
	}
	off := 12
	var ips []string
	ok := true
	for i := 0; i < qd && ok; i++ {
		off, ok = skipName(b, off)
		off += 4
	}
	for i := 0; i < an && ok && off <= len(b); i++ {
		off, ok = skipName(b, off)
		if !ok || off+10 > len(b) {
			break
		}
		typ := binary.BigEndian.Uint16(b[off:])
		rdlen := int(binary.BigEndian.Uint16(b[off+8:]))
		off += 10
		if off+rdlen > len(b) {
			break
		}
		if typ == 1 && rdlen == 4 {
			ips = append(ips, net.IP(b[off:off+4]).String())
		}
		off += rdlen
	}
	if len(ips) > 0 {
		detail += " A=" + strings.Join(ips, ",")
	}
	return Result{What: what, OK: true, Detail: detail}
}

func skipName(b []byte, off int) (int, bool) {
	for off < len(b) {
		l := int(b[off])
		switch {
		case l == 0:
			return off + 1, true
		case l&0xc0 == 0xc0:
			return off + 2, off+2 <= len(b)
		default:
			off += 1 + l
		}
	}
	return off, false
}

// probeHTTP: http PROXYADDR METHOD TARGET [HEADER:VALUE...]
//
// It opens TCP to PROXYADDR and sends "METHOD TARGET HTTP/1.1" with exactly
// the given headers (no automatic Host), then reads the status line and up
// to 2 KiB of body: Result "http METHOD TARGET", OK when the status is 2xx,
// Detail "STATUS body" (STATUS is the numeric code).
//
// Pseudo-headers, not sent: "proto:HTTP/1.0" replaces the protocol of the
// request line; for CONNECT, "sni:NAME" sets the SNI of the TLS ClientHello
// sent through the tunnel after a 2xx ("sni:" sends none; without an sni:
// argument the SNI is the host of TARGET). That second Result, "tls sni
// NAME", is OK while the tunnel stays open (bytes came back, or nothing
// within 3 s); EOF means the tunnel was closed.
func probeHTTP(args []string) ([]Result, error) {
	if len(args) < 3 {
		return nil, usagef("usage: http PROXYADDR METHOD TARGET [HEADER:VALUE...] [proto:HTTP/1.0] [sni:NAME]")
	}
	proxy, method, target := args[0], args[1], args[2]
	connect := strings.EqualFold(method, http.MethodConnect)
	proto := "HTTP/1.1"
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		host = target
	}
	sni := host
	var req strings.Builder
	var headers []string
	for _, a := range args[3:] {
		k, v, ok := strings.Cut(a, ":")
		if !ok || k == "" {
			return nil, usagef("header %q is not NAME:VALUE", a)
		}
		v = strings.TrimLeft(v, " ")
		switch {
		case strings.EqualFold(k, "proto"):
			proto = v
			continue
		case connect && strings.EqualFold(k, "sni"):
			sni = v
			continue
		}
		headers = append(headers, k+": "+v+"\r\n")
	}
	fmt.Fprintf(&req, "%s %s %s\r\n", method, target, proto)
	for _, h := range headers {
		req.WriteString(h)
	}
	req.WriteString("\r\n")

	what := "http " + method + " " + target
	c, err := net.DialTimeout("tcp", proxy, DialTimeout)
	if err != nil {
		return []Result{result(what, err)}, nil
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req.String()); err != nil {
		return []Result{result(what, err)}, nil
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		r := result(what, err)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			r.Detail = "closed without a reply"
		}
		return []Result{r}, nil
	}
	ok2xx := resp.StatusCode/100 == 2
	var body []byte
	if !(connect && ok2xx) {
		body, _ = io.ReadAll(io.LimitReader(resp.Body, 2048))
	}
	rs := []Result{{What: what, OK: ok2xx, Detail: fmt.Sprintf("%d %s", resp.StatusCode, body)}}
	if !(connect && ok2xx) {
		return rs, nil
	}
	return append(rs, tlsThroughTunnel(c, br, sni)), nil
}

// tlsThroughTunnel sends a ClientHello with SNI sni ("" = none) and reports
// what came back.
func tlsThroughTunnel(c net.Conn, br *bufio.Reader, sni string) Result {
	what := "tls sni " + sni
	if sni == "" {
		what = "tls no-sni"
	}
	hello, err := ClientHello(sni)
	if err != nil {
		return result(what, err)
	}
	c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write(hello); err != nil {
		return result(what, err)
	}
	buf := make([]byte, 512)
	n, err := br.Read(buf)
	if n > 0 {
		return Result{What: what, OK: true, Detail: "open: received " + describeTLS(buf[:n])}
	}
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF):
		return Result{What: what, OK: false, Detail: "closed (EOF)"}
	case errors.As(err, &ne) && ne.Timeout():
		return Result{What: what, OK: true, Detail: "open: no data within 3s"}
	}
	r := result(what, err)
	if r.Errno != "" {
		r.Detail = "closed (" + r.Errno + ")"
	}
	return r
}

func describeTLS(b []byte) string {
	s := fmt.Sprintf("%d bytes", len(b))
	if len(b) >= 5 {
		kind := map[byte]string{20: "change_cipher_spec", 21: "alert", 22: "handshake", 23: "application_data"}[b[0]]
		if kind == "" {
			kind = "not TLS"
		}
		s += fmt.Sprintf(", record %s (0x%02x) version 0x%04x", kind, b[0], binary.BigEndian.Uint16(b[1:]))
	}
	return s + ", first bytes " + hex.EncodeToString(b[:min(len(b), 16)])
}

// ClientHello builds a TLS 1.2/1.3 ClientHello record with server name sni
// (no server_name extension when sni is ""). Any string is sent as is,
// including IP literals, which crypto/tls would leave out.
func ClientHello(sni string) ([]byte, error) {
	key, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	u16 := func(b []byte, v int) []byte { return binary.BigEndian.AppendUint16(b, uint16(v)) }
	ext := func(b []byte, typ int, body []byte) []byte {
		b = u16(b, typ)
		b = u16(b, len(body))
		return append(b, body...)
	}
	var exts []byte
	if sni != "" {
		var sn []byte
		sn = u16(sn, len(sni)+3)
		sn = append(sn, 0) // host_name
		sn = u16(sn, len(sni))
		sn = append(sn, sni...)
		exts = ext(exts, 0x0000, sn)
	}
	exts = ext(exts, 0x000a, []byte{0, 6, 0x00, 0x1d, 0x00, 0x17, 0x00, 0x18}) // supported_groups: x25519, P-256, P-384
	exts = ext(exts, 0x000b, []byte{1, 0})                                     // ec_point_formats: uncompressed
	exts = ext(exts, 0x000d, []byte{0, 16, 0x04, 0x03, 0x08, 0x04, 0x04, 0x01, 0x05, 0x03, 0x08, 0x05, 0x05, 0x01, 0x08, 0x06, 0x06, 0x01})
	exts = ext(exts, 0x002b, []byte{4, 0x03, 0x04, 0x03, 0x03}) // supported_versions: 1.3, 1.2
	var ks []byte
	pub := key.PublicKey().Bytes()
	ks = u16(ks, len(pub)+4)
	ks = u16(ks, 0x001d)
	ks = u16(ks, len(pub))
	ks = append(ks, pub...)
	exts = ext(exts, 0x0033, ks)           // key_share
	exts = ext(exts, 0x002d, []byte{1, 1}) // psk_key_exchange_modes: psk_dhe_ke

	var body []byte
	body = append(body, 0x03, 0x03)
	var random [32 + 32]byte
	_, _ = rand.Read(random[:])
	body = append(body, random[:32]...)
	body = append(body, 32)
	body = append(body, random[32:]...) // legacy session id
	suites := []int{0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8}
	body = u16(body, 2*len(suites))
	for _, s := range suites {
		body = u16(body, s)
	}
	body = append(body, 1, 0) // compression: null
	body = u16(body, len(exts))
	body = append(body, exts...)

	hs := []byte{1, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}
	hs = append(hs, body...)
	rec := []byte{22, 0x03, 0x01}
	rec = u16(rec, len(hs))
	return append(rec, hs...), nil
}

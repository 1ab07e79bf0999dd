package main

// Network subcommands used by the egress tests: raw requests to the proxy
// and a minimal RFC 6455 WebSocket client through it.

import (
	"bufio"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// rawHTTP sends req (Go string escapes such as \r\n are interpreted) to
// addr and prints the status line of the reply ("rawhttp: HTTP/1.1 403
// Forbidden"), "rawhttp: closed" when the connection closed without a
// reply, or the dial error. The whole reply is printed quoted on a
// "rawhttp-reply:" line.
func rawHTTP(addr, req string) {
	r, err := strconv.Unquote(`"` + req + `"`)
	if err != nil {
		fmt.Printf("rawhttp: bad request argument: %v\n", err)
		return
	}
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		fmt.Printf("rawhttp: %s\n", res(unwrap(err)))
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, r); err != nil {
		fmt.Printf("rawhttp: write: %v\n", err)
		return
	}
	// Read the reply head and a Content-Length body; a CONNECT that
	// succeeded has no body, so the tunnel is not waited on.
	method, _, _ := strings.Cut(r, " ")
	var buf strings.Builder
	br := bufio.NewReader(io.TeeReader(io.LimitReader(c, 64<<10), &buf))
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err == nil && resp.StatusCode/100 != 2 || err == nil && method != http.MethodConnect {
		io.Copy(io.Discard, resp.Body)
	}
	line, _, _ := strings.Cut(buf.String(), "\r\n")
	if line == "" {
		line = "closed"
	}
	fmt.Printf("rawhttp: %s\n", line)
	fmt.Printf("rawhttp-reply: %q\n", buf.String())
}

// wsProbe opens a WebSocket to rawURL (http://host:port/path) through the
// HTTP proxy with an absolute-form upgrade request, sends one masked text
// frame and prints "ws: echo PAYLOAD" when the same payload came back.
func wsProbe(proxy, rawURL string) {
	u, err := url.Parse(rawURL)
	if err != nil {
		fmt.Printf("ws: %v\n", err)
		return
	}
	c, err := net.DialTimeout("tcp", proxy, 3*time.Second)
	if err != nil {
		fmt.Printf("ws: %s\n", res(unwrap(err)))
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var k [16]byte
	_, _ = rand.Read(k[:])
	key := base64.StdEncoding.EncodeToString(k[:])
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", rawURL, u.Host, key)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
	if err != nil {
		fmt.Printf("ws: handshake: %v\n", err)
		return
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		fmt.Printf("ws: status %s\n", resp.Status)
		return
	}
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	if got, want := resp.Header.Get("Sec-WebSocket-Accept"), base64.StdEncoding.EncodeToString(h[:]); got != want {
		fmt.Printf("ws: bad Sec-WebSocket-Accept %q\n", got)
		return
	}
	payload := []byte("corral-ws-echo")
	var mask [4]byte
	_, _ = rand.Read(mask[:])
	frame := []byte{0x81, 0x80 | byte(len(payload))}
	frame = append(frame, mask[:]...)
	for i, b := range payload {
		frame = append(frame, b^mask[i%4])
	}
	if _, err := c.Write(frame); err != nil {
		fmt.Printf("ws: write: %v\n", err)
		return
	}
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		fmt.Printf("ws: read: %v\n", err)
		return
	}
	n := int(hdr[1] & 0x7f)
	if n == 126 {
		var l [2]byte
		if _, err := io.ReadFull(br, l[:]); err != nil {
			fmt.Printf("ws: read: %v\n", err)
			return
		}
		n = int(binary.BigEndian.Uint16(l[:]))
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(br, body); err != nil {
		fmt.Printf("ws: read: %v\n", err)
		return
	}
	fmt.Printf("ws: echo opcode=%d %s\n", hdr[0]&0x0f, body)
}

// rawHTTPAll sends req (pipelined requests, Go escapes interpreted) to addr
// and prints the status line of every reply until the connection closes:
// "rawhttp-all[0]: HTTP/1.1 200 OK", ... then "rawhttp-all: N replies".
func rawHTTPAll(addr, req string) {
	r, err := strconv.Unquote(`"` + req + `"`)
	if err != nil {
		fmt.Printf("rawhttp-all: bad request argument: %v\n", err)
		return
	}
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		fmt.Printf("rawhttp-all: %s\n", res(unwrap(err)))
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, r); err != nil {
		fmt.Printf("rawhttp-all: write: %v\n", err)
		return
	}
	br := bufio.NewReader(c)
	n := 0
	for ; ; n++ {
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
		if err != nil {
			break
		}
		body, _ := io.ReadAll(resp.Body)
		fmt.Printf("rawhttp-all[%d]: %s %s\n", n, resp.Proto, resp.Status)
		fmt.Printf("rawhttp-all-body[%d]: %q\n", n, body)
	}
	fmt.Printf("rawhttp-all: %d replies\n", n)
}

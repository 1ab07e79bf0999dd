package egress

import (
	"bufio"
	"net"
	"strings"
	"sync/atomic"
	"testing"
)

// An allowed upstream that streams response headers forever gets a 502
// once the head passes MaxHeaderBytes, instead of growing the proxy's
// memory without bound; the decision is logged.
func TestUpstreamHeadIsBounded(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.11:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var sent atomic.Int64
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for { // read the request head
			line, err := br.ReadString('\n')
			if err != nil || line == "\r\n" {
				break
			}
		}
		if _, err := c.Write([]byte("HTTP/1.1 200 OK\r\n")); err != nil {
			return
		}
		hdr := []byte("X-Fill: " + strings.Repeat("a", 1000) + "\r\n")
		for sent.Load() < 64<<20 {
			if _, err := c.Write(hdr); err != nil {
				return
			}
			sent.Add(int64(len(hdr)))
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	tp := startProxy(t, Config{Policy: Policy{
		Allow:        []Rule{{Host: "big.test", Ports: []int{port}}},
		AllowPrivate: []Rule{{Host: "127.0.0.11/32"}},
		Hosts:        map[string]string{"big.test": "127.0.0.11"},
	}, MaxHeaderBytes: 16 << 10})
	c := dialProxy(t, tp.addr)
	resp, _ := c.get(t, "http://big.test:"+itoa(port)+"/", "")
	if resp.StatusCode != 502 {
		t.Fatalf("status %d, want 502", resp.StatusCode)
	}
	if n := sent.Load(); n > 8<<20 {
		t.Errorf("the proxy read %d bytes of headers before giving up", n)
	}
	ds := tp.log.waitN(t, 1)
	if !strings.Contains(ds[0].Reason, "too large") {
		t.Errorf("decision reason %q", ds[0].Reason)
	}
}

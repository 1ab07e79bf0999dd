package egress

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

// p22p23 are the adversarial spellings used as table cases and fuzz seeds.
var p22p23 = []string{
	"127.1", "2130706433", "0x7f000001", "0177.0.0.1", "127.000.0.1", "[::ffff:7f00:1]", "0.0.0.0", "[::]",
	"127.0.0.1", "169.254.169.254", "10.0.0.1", "[::1]", "[::ffff:127.0.0.1]", "[64:ff9b::7f00:1]",
	"[2002:7f00:1::1]", "[2001:0:4136:e378:8000:63bf:80ff:fffe]", "0x7f.1", "127.0.0.1.", "017700000001",
	"api.allowed.test@evil.test", "[fe80::1%25eth0]", "::1", "1.2.3.4:+80", "a.test:0080",
}

func TestParseAuthority(t *testing.T) {
	ok := []struct {
		in, host string
		port     int
	}{
		{"api.example.com", "api.example.com", 80},
		{"API.Example.COM.:8443", "api.example.com", 8443},
		{"localhost", "localhost", 80},
		{"1.2.3.4:443", "1.2.3.4", 443},
		{"127.0.0.1", "127.0.0.1", 80},
		{"127.0.0.1.", "127.0.0.1", 80},
		{"[::1]:8080", "::1", 8080},
		{"[2001:DB8::1]", "2001:db8::1", 80},
		{"[::ffff:7f00:1]", "127.0.0.1", 80},
		{"[::ffff:127.0.0.1]:65535", "127.0.0.1", 65535},
		{"0x7f.example.com", "0x7f.example.com", 80},
		{"a-b.c-d.example", "a-b.c-d.example", 80},
		{strings.Repeat("a", 63) + ".com", strings.Repeat("a", 63) + ".com", 80},
	}
	for _, c := range ok {
		h, p, err := ParseAuthority(c.in, 80)
		if err != nil || h != c.host || p != c.port {
			t.Errorf("ParseAuthority(%q) = %q, %d, %v; want %q, %d", c.in, h, p, err, c.host, c.port)
		}
	}
	bad := []string{
		"", "user@host", "api.allowed.test@evil.test", ":80", "127.1", "2130706433", "0x7f000001", "0177.0.0.1",
		"127.000.0.1", "127.0.0.01", "0x7f.0.0.1", "1.2.3.4.5", "::1", "fe80::1", "[fe80::1%eth0]", "[fe80::1%25eth0]",
		"[127.0.0.1]", "[::1", "[::1]x", "[::1]:", "host:", "host:0", "host:65536", "host:+80", "host:-1", "host:0080",
		"host:8 0", "host :80", " host", "ho st", "host\t", "h\x00st", "hést.com", "%65vil.test", "host/path",
		"host?q", "host#f", "-a.com", "a-.com", "a..com", ".a.com", "a.com..", "a_b.com", "*.a.com",
		strings.Repeat("a", 64) + ".com", strings.Repeat("a.", 127) + "com", "host:80:80", "[::1]:80:80",
		"a\\b.com", "1.2.3.4:99999999999",
	}
	for _, in := range bad {
		if h, p, err := ParseAuthority(in, 80); err == nil {
			t.Errorf("ParseAuthority(%q) accepted: %q %d", in, h, p)
		}
	}
	if _, _, err := ParseAuthority("example.com", 0); err == nil {
		t.Error("missing port accepted with defaultPort 0")
	}
}

func TestClassify(t *testing.T) {
	cases := map[string]string{
		"127.0.0.1":          "loopback",
		"127.255.0.9":        "loopback",
		"10.1.2.3":           "private (RFC 1918)",
		"172.31.0.1":         "private (RFC 1918)",
		"192.168.1.1":        "private (RFC 1918)",
		"100.64.0.1":         "shared (RFC 6598 CGNAT)",
		"169.254.169.254":    "metadata",
		"169.254.1.1":        "link-local",
		"224.0.0.1":          "multicast",
		"0.0.0.0":            "unspecified",
		"0.1.2.3":            "unspecified",
		"255.255.255.255":    "broadcast",
		"240.0.0.1":          "reserved",
		"192.0.0.170":        "reserved (IETF protocol assignments)",
		"198.18.0.1":         "reserved (benchmarking)",
		"192.0.2.1":          "documentation",
		"::1":                "loopback",
		"::":                 "unspecified",
		"fe80::1":            "link-local",
		"fd00::1":            "unique local (RFC 4193)",
		"fd00:ec2::254":      "metadata",
		"ff02::1":            "multicast",
		"::ffff:127.0.0.1":   "IPv4-mapped loopback",
		"::ffff:10.0.0.1":    "IPv4-mapped private (RFC 1918)",
		"::127.0.0.1":        "IPv4-compatible (deprecated) loopback",
		"64:ff9b::7f00:1":    "NAT64 of loopback",
		"64:ff9b::a9fe:a9fe": "NAT64 of metadata",
		"64:ff9b:1::1":       "NAT64 local-use",
		"2002:a00:1::1":      "6to4 of private (RFC 1918)",
		"2002:7f00:1::":      "6to4 of loopback",
		// Teredo client 127.0.0.1 is stored XORed: 80ff:fffe.
		"2001:0:4136:e378:8000:63bf:80ff:fffe": "Teredo of loopback",
		"2001:0:7f00:1::":                      "Teredo server loopback",
		"2001:db8::1":                          "documentation",
		"4000::1":                              "reserved",
	}
	for in, want := range cases {
		blocked, class := Classify(netip.MustParseAddr(in))
		if !blocked || class != want {
			t.Errorf("Classify(%s) = %v %q; want blocked %q", in, blocked, class, want)
		}
	}
	for _, in := range []string{"1.1.1.1", "8.8.8.8", "2606:4700::1111", "::ffff:1.1.1.1", "64:ff9b::101:101", "2002:101:101::1"} {
		if blocked, class := Classify(netip.MustParseAddr(in)); blocked {
			t.Errorf("Classify(%s) blocked as %q", in, class)
		}
	}
	if blocked, _ := Classify(netip.Addr{}); !blocked {
		t.Error("zero Addr not blocked")
	}
}

func TestPolicyValidate(t *testing.T) {
	good := Policy{
		Allow:        []Rule{{Host: "api.example.com"}, {Host: "*.example.com", Ports: []int{8443}}, {Host: "Example.ORG."}, {Host: "10.0.0.0/8"}, {Host: "::1/128"}, {Host: "1.2.3.4"}},
		Deny:         []Rule{{Host: "bad.example.com"}},
		AllowPrivate: []Rule{{Host: "127.0.0.1/32", Ports: []int{11434}}, {Host: "fd00::1"}},
		Hosts:        map[string]string{"api.example.com": "127.0.0.1", "v6.test": "::1"},
	}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []Policy{
		{Allow: []Rule{{Host: "*"}}},
		{Allow: []Rule{{Host: "*.com"}}},
		{Allow: []Rule{{Host: "*.com."}}},
		{Allow: []Rule{{Host: "api.*.com"}}},
		{Allow: []Rule{{Host: "a*.example.com"}}},
		{Allow: []Rule{{Host: "*.*.example.com"}}},
		{Allow: []Rule{{Host: "10.0.0.0/33"}}},
		{Allow: []Rule{{Host: "10.0.0/8"}}},
		{Allow: []Rule{{Host: "127.1"}}},
		{Allow: []Rule{{Host: ""}}},
		{Allow: []Rule{{Host: "a.com", Ports: []int{0}}}},
		{Allow: []Rule{{Host: "a.com", Ports: []int{65536}}}},
		{Deny: []Rule{{Host: "*"}}},
		{AllowPrivate: []Rule{{Host: "localhost"}}},
		{AllowPrivate: []Rule{{Host: "127.0.0.1/32", Ports: []int{-1}}}},
		{Hosts: map[string]string{"a.test": "localhost"}},
		{Hosts: map[string]string{"a.test": "127.1"}},
		{Hosts: map[string]string{"bad name": "127.0.0.1"}},
		{Hosts: map[string]string{"a.test": "fe80::1%eth0"}},
	}
	for i, p := range bad {
		if err := p.Validate(); err == nil {
			t.Errorf("bad policy %d accepted: %+v", i, p)
		}
	}
	if _, err := New(Config{Policy: bad[0]}); err == nil {
		t.Error("New accepted a bad policy")
	}
}

// FuzzParseAuthority: accepted authorities are canonical and round-trip;
// numeric hosts are only ever canonical dotted quads or IPv6; no panics.
func FuzzParseAuthority(f *testing.F) {
	for _, s := range p22p23 {
		f.Add(s)
		f.Add(s + ":443")
	}
	f.Add("api.allowed.test:443")
	f.Add("[2001:db8::1]:8080")
	f.Fuzz(func(t *testing.T, s string) {
		host, port, err := ParseAuthority(s, 80)
		if err != nil {
			return
		}
		if port < 1 || port > 65535 || host == "" {
			t.Fatalf("%q -> %q %d", s, host, port)
		}
		h2, p2, err := ParseAuthority(net.JoinHostPort(host, strconv.Itoa(port)), 0)
		if err != nil || h2 != host || p2 != port {
			t.Fatalf("%q -> %q %d does not round-trip: %q %d %v", s, host, port, h2, p2, err)
		}
		if strings.ContainsAny(s, "@%\\/ \t") {
			t.Fatalf("%q accepted", s)
		}
		if a, err := netip.ParseAddr(host); err == nil {
			if a.Is4In6() || a.Zone() != "" || a.String() != host {
				t.Fatalf("%q -> non-canonical IP %q", s, host)
			}
			return
		}
		// A name: lowercase LDH labels, never numeric in the last label.
		last := host[strings.LastIndexByte(host, '.')+1:]
		if last[0] >= '0' && last[0] <= '9' {
			t.Fatalf("%q -> numeric name %q", s, host)
		}
		if host != strings.ToLower(host) || len(host) > 253 {
			t.Fatalf("%q -> %q", s, host)
		}
		if hasNonCanonicalV4(s) {
			t.Fatalf("%q accepted", s)
		}
	})
}

// hasNonCanonicalV4 reports whether the host part of s looks like an IPv4
// spelling that inet_aton would accept but that is not a dotted quad.
func hasNonCanonicalV4(s string) bool {
	h := s
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.HasPrefix(h, "[") {
		h = h[:i]
	}
	h = strings.TrimSuffix(h, ".")
	if h == "" {
		return false
	}
	for _, c := range strings.ToLower(h) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c == 'x' || c == '.') {
			return false
		}
	}
	_, err := netip.ParseAddr(h)
	return err != nil && h[0] >= '0' && h[0] <= '9' && strings.IndexFunc(h[strings.LastIndexByte(h, '.')+1:], func(r rune) bool { return r < '0' || r > '9' }) < 0
}

// FuzzClassify: never panics; IPv4 embedded in mapped, compatible, NAT64,
// 6to4 and Teredo forms is blocked whenever the IPv4 address is.
func FuzzClassify(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "169.254.169.254", "10.0.0.1", "0.0.0.0", "100.64.0.1", "1.1.1.1", "224.0.0.1", "255.255.255.255"} {
		f.Add(netip.MustParseAddr(s).AsSlice())
	}
	for _, s := range []string{"::1", "::", "::ffff:127.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::1", "fe80::1", "2606:4700::1111"} {
		f.Add(netip.MustParseAddr(s).AsSlice())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		a, ok := netip.AddrFromSlice(b)
		if !ok {
			Classify(netip.Addr{})
			return
		}
		blocked, class := Classify(a)
		if class == "" {
			t.Fatalf("%s: empty class", a)
		}
		if !a.Is4() {
			return
		}
		v4blocked, _ := Classify(a)
		x := a.As4()
		forms := []netip.Addr{
			netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff, 12: x[0], 13: x[1], 14: x[2], 15: x[3]}),
			netip.AddrFrom16([16]byte{12: x[0], 13: x[1], 14: x[2], 15: x[3]}),
			netip.AddrFrom16([16]byte{0: 0, 1: 0x64, 2: 0xff, 3: 0x9b, 12: x[0], 13: x[1], 14: x[2], 15: x[3]}),
			netip.AddrFrom16([16]byte{0: 0x20, 1: 0x02, 2: x[0], 3: x[1], 4: x[2], 5: x[3], 15: 1}),
			netip.AddrFrom16([16]byte{0: 0x20, 1: 0x01, 4: 0x41, 5: 0x36, 6: 0xe3, 7: 0x78, 12: ^x[0], 13: ^x[1], 14: ^x[2], 15: ^x[3]}),
			netip.AddrFrom16([16]byte{0: 0x20, 1: 0x01, 4: x[0], 5: x[1], 6: x[2], 7: x[3], 12: 0xfe, 13: 0xfe, 14: 0xfe, 15: 0xfe}),
		}
		for _, f := range forms {
			if fb, fc := Classify(f); v4blocked && !fb {
				t.Fatalf("%s (embedding blocked %s) allowed as %q", f, a, fc)
			}
		}
		_ = blocked
	})
}

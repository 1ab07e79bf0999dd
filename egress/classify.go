package egress

import "net/netip"

type addrClass struct {
	prefix  netip.Prefix
	blocked bool
	class   string
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// Order matters: the first matching prefix wins.
var v4Classes = []addrClass{
	{mustPrefix("0.0.0.0/8"), true, "unspecified"},
	{mustPrefix("10.0.0.0/8"), true, "private (RFC 1918)"},
	{mustPrefix("100.64.0.0/10"), true, "shared (RFC 6598 CGNAT)"},
	{mustPrefix("127.0.0.0/8"), true, "loopback"},
	{mustPrefix("169.254.169.254/32"), true, "metadata"},
	{mustPrefix("169.254.0.0/16"), true, "link-local"},
	{mustPrefix("172.16.0.0/12"), true, "private (RFC 1918)"},
	{mustPrefix("192.0.0.0/24"), true, "reserved (IETF protocol assignments)"},
	{mustPrefix("192.0.2.0/24"), true, "documentation"},
	{mustPrefix("192.88.99.0/24"), true, "reserved (6to4 relay anycast)"},
	{mustPrefix("192.168.0.0/16"), true, "private (RFC 1918)"},
	{mustPrefix("198.18.0.0/15"), true, "reserved (benchmarking)"},
	{mustPrefix("198.51.100.0/24"), true, "documentation"},
	{mustPrefix("203.0.113.0/24"), true, "documentation"},
	{mustPrefix("224.0.0.0/4"), true, "multicast"},
	{mustPrefix("255.255.255.255/32"), true, "broadcast"},
	{mustPrefix("240.0.0.0/4"), true, "reserved"},
}

var v6Classes = []addrClass{
	{mustPrefix("::/128"), true, "unspecified"},
	{mustPrefix("::1/128"), true, "loopback"},
	{mustPrefix("fd00:ec2::254/128"), true, "metadata"},
	{mustPrefix("fe80::/10"), true, "link-local"},
	{mustPrefix("fec0::/10"), true, "site-local (deprecated)"},
	{mustPrefix("fc00::/7"), true, "unique local (RFC 4193)"},
	{mustPrefix("ff00::/8"), true, "multicast"},
	{mustPrefix("64:ff9b:1::/48"), true, "NAT64 local-use"},
	{mustPrefix("100::/64"), true, "reserved (discard-only)"},
	{mustPrefix("2001:db8::/32"), true, "documentation"},
	{mustPrefix("3fff::/20"), true, "documentation"},
	{mustPrefix("2001:2::/48"), true, "reserved (benchmarking)"},
	{mustPrefix("2001:10::/28"), true, "reserved (ORCHID)"},
	{mustPrefix("2001:20::/28"), true, "reserved (ORCHIDv2)"},
	{mustPrefix("5f00::/16"), true, "reserved (SRv6 SIDs)"},
}

var (
	globalUnicast6 = mustPrefix("2000::/3")
	nat64          = mustPrefix("64:ff9b::/96")
	sixToFour      = mustPrefix("2002::/16")
	teredo         = mustPrefix("2001::/32")
	v4Compatible   = mustPrefix("::/96")
)

// Classify reports whether the proxy refuses to dial a, and names its class
// ("public" when it is not blocked). Blocked: loopback, RFC 1918, CGNAT,
// link-local and cloud metadata, multicast, unspecified, broadcast, reserved
// and documentation ranges, IPv6 unique local, link-local, site-local and
// everything outside 2000::/3; IPv4 embedded in IPv4-mapped, NAT64 and 6to4
// addresses and in both Teredo fields is classified and blocked when the
// embedded address is blocked; IPv4-compatible (::a.b.c.d, deprecated) and
// the NAT64 local-use prefix are always blocked.
func Classify(a netip.Addr) (blocked bool, class string) {
	if !a.IsValid() {
		return true, "invalid"
	}
	a = a.WithZone("")
	if a.Is4() {
		return classify4(a)
	}
	if a.Is4In6() {
		b, c := classify4(a.Unmap())
		return b, "IPv4-mapped " + c
	}
	for _, e := range v6Classes {
		if e.prefix.Contains(a) {
			return e.blocked, e.class
		}
	}
	x := a.As16()
	switch {
	case v4Compatible.Contains(a):
		_, c := classify4(netip.AddrFrom4([4]byte(x[12:16])))
		return true, "IPv4-compatible (deprecated) " + c
	case nat64.Contains(a):
		b, c := classify4(netip.AddrFrom4([4]byte(x[12:16])))
		return b, "NAT64 of " + c
	case sixToFour.Contains(a):
		b, c := classify4(netip.AddrFrom4([4]byte(x[2:6])))
		return b, "6to4 of " + c
	case teredo.Contains(a):
		// Teredo: server IPv4 in bits 32..63, client IPv4 XORed in the
		// last 32 bits. Blocked when either is blocked.
		if b, c := classify4(netip.AddrFrom4([4]byte(x[4:8]))); b {
			return true, "Teredo server " + c
		}
		cl := [4]byte{^x[12], ^x[13], ^x[14], ^x[15]}
		b, c := classify4(netip.AddrFrom4(cl))
		return b, "Teredo of " + c
	case !globalUnicast6.Contains(a):
		return true, "reserved"
	}
	return false, "public"
}

func classify4(a netip.Addr) (bool, string) {
	for _, e := range v4Classes {
		if e.prefix.Contains(a) {
			return e.blocked, e.class
		}
	}
	return false, "public"
}

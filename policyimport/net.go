package policyimport

import (
	"net/netip"
	"strings"
)

// addrRange parses an IP address ("10.1.2.3", a /32 or /128) or a CIDR
// ("10.0.0.0/8") into its prefix, masked; an IPv4-mapped IPv6 range is its
// IPv4 range.
func addrRange(s string) (netip.Prefix, bool) {
	s = strings.TrimSpace(s)
	var pfx netip.Prefix
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, false
		}
		pfx = p
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, false
		}
		pfx = netip.PrefixFrom(a, a.BitLen())
	}
	if a := pfx.Addr(); a.Is4In6() && pfx.Bits() >= 96 {
		pfx = netip.PrefixFrom(a.Unmap(), pfx.Bits()-96)
	}
	return pfx.Masked(), true
}

// proxyRefused are ranges every address of which Corral's egress proxy
// refuses to dial for a name unless network.allow_private covers it:
// the blocked classes of egress.Classify (egress/classify.go; docs/
// egress.md step 4), as whole prefixes. Ranges whose verdict depends on
// an embedded IPv4 address (NAT64, 6to4, Teredo) are left out, so a
// range is judged refused only when it is. TestProxyRefusedAgrees checks
// each against egress.Classify.
var proxyRefused = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
		"192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15",
		"198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
		"::/96", "fe80::/10", "fec0::/10", "fc00::/7", "ff00::/8", "64:ff9b:1::/48", "100::/64",
		"2001:db8::/32", "3fff::/20", "2001:2::/48", "2001:10::/28", "2001:20::/28", "5f00::/16",
		// Outside 2000::/3 (global unicast) all is refused.
		"::/3", "4000::/2", "8000::/1",
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// proxyDepends are the ranges inside proxyRefused's whose verdict
// egress.Classify takes from the IPv4 address they carry (IPv4-mapped,
// NAT64): a range overlapping one is not judged refused.
var proxyDepends = []netip.Prefix{netip.MustParsePrefix("::ffff:0:0/96"), netip.MustParsePrefix("64:ff9b::/96")}

// proxyRefuses reports whether every address of pfx is in proxyRefused
// (and none in proxyDepends): pfx is inside one of its ranges, or each
// half of it is (two adjacent ranges, such as 224.0.0.0/3).
func proxyRefuses(pfx netip.Prefix) bool {
	for _, d := range proxyDepends {
		if d.Overlaps(pfx) {
			return false
		}
	}
	overlaps := false
	for _, r := range proxyRefused {
		if r.Addr().Is4() != pfx.Addr().Is4() || !r.Overlaps(pfx) {
			continue
		}
		if r.Bits() <= pfx.Bits() {
			return true // r contains pfx
		}
		overlaps = true
	}
	if !overlaps || pfx.Bits() >= pfx.Addr().BitLen() {
		return false
	}
	lo := netip.PrefixFrom(pfx.Addr(), pfx.Bits()+1)
	hiAddr := pfx.Addr().As16()
	bit := pfx.Bits()
	if pfx.Addr().Is4() {
		a4 := pfx.Addr().As4()
		a4[bit/8] |= 0x80 >> (bit % 8)
		return proxyRefuses(lo) && proxyRefuses(netip.PrefixFrom(netip.AddrFrom4(a4), bit+1))
	}
	hiAddr[bit/8] |= 0x80 >> (bit % 8)
	return proxyRefuses(lo) && proxyRefuses(netip.PrefixFrom(netip.AddrFrom16(hiAddr), bit+1))
}

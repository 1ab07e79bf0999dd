package policy

import (
	"fmt"
	"net/netip"
	"strings"
)

// validateNetwork checks the egress rules of network.mode proxy: they are
// refused in other modes; hosts are exact names, a wildcard first label
// ("*." for exactly one label, "**." for any depth) over at least two
// labels (so not "*", "**", "*.com" or "**.com"), IP literals or CIDRs;
// an allow host that is a single label other than localhost needs
// single_label: true (deny entries never do: denying is always safe);
// ports are 1–65535; allow_private entries are IPs or CIDRs; hosts values
// are IP literals.
func (p *Policy) validateNetwork() []*Error {
	var errs []*Error
	n := &p.Network
	if n.Mode != NetworkProxy {
		for name, set := range map[string]bool{"allow": len(n.Allow) > 0, "deny": len(n.Deny) > 0, "allow_private": len(n.AllowPrivate) > 0, "hosts": len(n.Hosts) > 0} {
			if set {
				errs = append(errs, p.errAt("network."+name, fmt.Sprintf("network.%s only applies to mode proxy (mode is %q)", name, n.Mode), "set network.mode: proxy, or remove the rules"))
			}
		}
		return errs
	}
	lists := []struct {
		name    string
		eps     []Endpoint
		private bool
	}{{"allow", n.Allow, false}, {"deny", n.Deny, false}, {"allow_private", n.AllowPrivate, true}}
	for _, l := range lists {
		for i, e := range l.eps {
			field := fmt.Sprintf("network.%s[%d]", l.name, i)
			msg, hint := checkEndpointHost(e.Host, l.private)
			if msg != "" {
				errs = append(errs, p.errAt(field+".host", msg, hint))
			}
			single := msg == "" && singleLabel(e.Host)
			switch {
			case l.name == "allow" && single && !e.SingleLabel:
				name := strings.TrimSuffix(e.Host, ".")
				errs = append(errs, p.errAt(field+".host", fmt.Sprintf("%q is a single DNS label: it names no public host, and resolvers complete it with the local search domains or /etc/hosts", e.Host),
					fmt.Sprintf("write the full name (such as %s.example.com), or {host: %s, single_label: true} if the workload is meant to reach it", name, e.Host)))
			case e.SingleLabel && msg == "" && (l.name != "allow" || !single):
				errs = append(errs, p.errAt(field+".single_label", "single_label applies only to an allow entry whose host is one label (other than localhost)", "remove single_label"))
			}
			for j, port := range e.Ports {
				if port < 1 || port > 65535 {
					errs = append(errs, p.errAt(fmt.Sprintf("%s.ports[%d]", field, j), fmt.Sprintf("port %d is outside 1-65535", port), "use a TCP port number"))
				}
			}
		}
	}
	for name, addr := range n.Hosts {
		if msg, _ := checkEndpointHost(name, false); msg != "" || strings.Contains(name, "*") {
			errs = append(errs, p.errAt("network.hosts", fmt.Sprintf("hosts key %q is not a host name", name), "map exact names to IP literals"))
		}
		if _, err := netip.ParseAddr(addr); err != nil {
			errs = append(errs, p.errAt("network.hosts", fmt.Sprintf("hosts[%q] = %q is not an IP literal", name, addr), "map the name to an address such as 127.0.0.2 or ::1"))
		}
	}
	return errs
}

// checkEndpointHost returns a message and hint when host is not an
// acceptable endpoint host; ipOnly requires an IP literal or CIDR.
func checkEndpointHost(host string, ipOnly bool) (msg, hint string) {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if _, err := netip.ParseAddr(h); err == nil {
		return "", ""
	}
	if _, err := netip.ParsePrefix(h); err == nil {
		return "", ""
	}
	if ipOnly {
		return fmt.Sprintf("%q is not an IP address or CIDR", host), "allow_private takes addresses such as 127.0.0.1/32 or ::1"
	}
	switch {
	case h == "":
		return "empty host", "name a host such as api.example.com"
	case h == "*", h == "**":
		return fmt.Sprintf("a bare %s would allow every host", h), "list the hosts the workload needs"
	}
	rest := h
	if first, after, _ := strings.Cut(h, "."); strings.Contains(first, "*") {
		switch {
		case first != "*" && first != "**":
			return fmt.Sprintf("%q: a wildcard must be the whole first label", host), wildcardHint
		case strings.Contains(after, "*"):
			return fmt.Sprintf("%q has a wildcard outside the first label", host), wildcardHint
		case !strings.Contains(after, "."):
			return fmt.Sprintf("%q would allow a whole top-level domain", host), "use a wildcard under a registered domain, such as *.example.com or **.example.com"
		}
		rest = after
	}
	for _, label := range strings.Split(rest, ".") {
		if label == "" || len(label) > 63 || strings.HasPrefix(label, "-") || strings.HasSuffix(label, "-") {
			return fmt.Sprintf("%q is not a valid host name", host), "use a name such as api.example.com, *.example.com, an IP or a CIDR"
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				if c == '*' {
					return fmt.Sprintf("%q has a wildcard outside the first label", host), wildcardHint
				}
				return fmt.Sprintf("%q is not a valid host name", host), "use a name such as api.example.com, *.example.com, an IP or a CIDR"
			}
		}
	}
	return "", ""
}

// wildcardHint says which wildcards a host may have.
const wildcardHint = `only the whole first label may be a wildcard: "*.example.com" matches exactly one label below example.com (a.example.com), "**.example.com" any depth (a.b.example.com too)`

// singleLabel reports whether host (already accepted by checkEndpointHost)
// is a single DNS label other than localhost: no dot, no wildcard, not an
// IP literal or CIDR.
func singleLabel(host string) bool {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if _, err := netip.ParseAddr(h); err == nil {
		return false
	}
	if _, err := netip.ParsePrefix(h); err == nil {
		return false
	}
	return h != "" && h != "localhost" && !strings.ContainsAny(h, ".*")
}

package policy

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/corral-sandbox/corral/egress/l7"
)

// validateL7 checks an allow entry's tls mode and L7 rules
// (egress/l7 is their syntax): tls is inspect or passthrough, and
// passthrough takes no rules (its bytes are never read); access is a
// preset, not given with rules; methods, path globs and query matchers
// are l7's; tls: inspect on a port 80 the entry names is refused (plain
// HTTP has no TLS to inspect: its requests are checked without it).
func (p *Policy) validateL7(field string, e Endpoint) []*Error {
	var errs []*Error
	add := func(f, msg, hint string) { errs = append(errs, p.errAt(f, msg, hint)) }
	switch e.TLS {
	case "", TLSInspect:
	case TLSPassthrough:
		if e.HasL7() {
			add(field+".tls", "tls: passthrough splices the connection unread, so its access, rules and deny_rules could never apply", "remove tls: passthrough (L7 rules imply inspect), or remove the rules")
		}
	default:
		add(field+".tls", fmt.Sprintf("tls %q is not inspect or passthrough", e.TLS), "write tls: inspect (terminate TLS with the sandbox's CA and apply L7 rules) or tls: passthrough")
	}
	if e.TLS == TLSInspect {
		for j, port := range e.Ports {
			if port == 80 {
				add(fmt.Sprintf("%s.ports[%d]", field, j), "port 80 is plain HTTP: there is no TLS to inspect (its requests are checked against the entry's rules as they are forwarded)", "drop tls: inspect and keep the rules, or list only TLS ports")
			}
		}
	}
	if err := l7.CheckAccess(string(e.Access)); err != nil {
		add(field+".access", err.Error(), "write read-only (GET, HEAD, OPTIONS), read-write (also POST, PUT, PATCH) or full")
	} else if e.Access != "" && len(e.Rules) > 0 {
		add(field+".access", "access and rules are two ways to say what may pass: give one", "keep access for a method preset, or rules for an allow list of {method, path, query}")
	}
	for _, l := range []struct {
		name  string
		rules []HTTPRule
	}{{"rules", e.Rules}, {"deny_rules", e.DenyRules}} {
		for i, r := range l.rules {
			rf := fmt.Sprintf("%s.%s[%d]", field, l.name, i)
			if err := l7.CheckMethod(r.Method); err != nil {
				add(rf+".method", err.Error(), "write an upper-case method such as GET or DELETE, or * for any")
			}
			if err := l7.CheckPath(r.Path); err != nil {
				add(rf+".path", err.Error(), `write a glob such as /repos/*/issues or /api/** ("*" within a segment, "**" any number of segments)`)
			}
			for _, k := range sortedKeys(r.Query) {
				if err := l7.CheckQuery(k, r.Query[k]); err != nil {
					add(rf+".query."+k, err.Error(), `write query: {name: glob} or {name: [glob, ...]}`)
				}
			}
		}
	}
	return errs
}

// validateNetwork checks the egress rules of network.mode proxy: they are
// refused in other modes. The rules are the egress proxy's (egress.New
// refuses the same hosts, with no position), checked here so that `corral
// policy validate` and every front end refuse them with file:line:column
// (cmd/corral's TestPolicyValidateAgreesWithRun and
// FuzzPolicyRefusesWhatProxyRefuses keep the two in step): hosts
// are names, wildcards (checkEndpointHost), IP literals without a zone or
// CIDRs; an allow host that is a single label other than localhost needs
// single_label: true (deny entries never do: denying is always safe);
// ports are 1–65535; allow_private entries are IPs or CIDRs; hosts keys
// are names (checkName: not IPs, CIDRs or wildcards), each once when
// compared without case and trailing dot, and their values IP literals
// without a zone.
func (p *Policy) validateNetwork() []*Error {
	var errs []*Error
	n := &p.Network
	if n.Mode != NetworkProxy {
		for name, set := range map[string]bool{"allow": len(n.Allow) > 0, "deny": len(n.Deny) > 0, "allow_private": len(n.AllowPrivate) > 0, "hosts": len(n.Hosts) > 0, "upstream_ca": n.UpstreamCA != ""} {
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
				if msg, hint := PortProblem(port); msg != "" {
					errs = append(errs, p.errAt(fmt.Sprintf("%s.ports[%d]", field, j), msg, hint))
				}
			}
			if l.name == "allow" {
				errs = append(errs, p.validateL7(field, e)...)
			} else if e.HasL7() || e.TLS != "" {
				errs = append(errs, p.errAt(field, fmt.Sprintf("network.%s entries take no tls, access, rules or deny_rules: L7 rules refine what an allow entry lets through", l.name), "move the rules to the network.allow entry of the host"))
			}
		}
	}
	if ca := n.UpstreamCA; ca != "" {
		if p.OS() == OSWindows {
			if msg, hint := WindowsPathProblem(ca); msg != "" {
				errs = append(errs, p.errAt("network.upstream_ca", "upstream_ca: "+msg, hint))
			}
		} else if !strings.HasPrefix(ca, "/") {
			errs = append(errs, p.errAt("network.upstream_ca", fmt.Sprintf("upstream_ca %q is not an absolute path", ca), "name the PEM file of the private CA by its absolute path"))
		}
	}
	seen := map[string]string{}
	for _, name := range sortedKeys(n.Hosts) {
		field := "network.hosts." + name
		canon := asciiLower(strings.TrimSuffix(name, "."))
		if why, _ := checkName(canon); why != "" {
			errs = append(errs, p.errAtKey(field, fmt.Sprintf("hosts key %q is not a host name: %s", name, why), "map exact names such as db.internal to IP literals (no IPs, CIDRs or wildcards as keys)"))
		} else if other, dup := seen[canon]; dup {
			errs = append(errs, p.errAtKey(field, fmt.Sprintf("hosts keys %q and %q name the same host (names compare without case and trailing dot)", other, name), "keep one of them"))
		} else {
			seen[canon] = name
		}
		addr := n.Hosts[name]
		if a, err := netip.ParseAddr(addr); err != nil {
			errs = append(errs, p.errAt(field, fmt.Sprintf("hosts[%q] = %q is not an IP literal", name, addr), "map the name to an address such as 127.0.0.2 or ::1"))
		} else if a.Zone() != "" {
			errs = append(errs, p.errAt(field, fmt.Sprintf("hosts[%q] = %q has a zone (%%%s): the proxy dials addresses, not interfaces", name, addr, a.Zone()), "write the address without the %zone"))
		}
	}
	return errs
}

// checkEndpointHost returns a message and hint when host is not an
// acceptable endpoint host; ipOnly requires an IP literal or CIDR. The
// rules are egress's compileRule: a host with "/" is a CIDR; else an IP
// literal (no zone: a rule names addresses, not interfaces); else, with
// one trailing dot dropped, a wildcard ("*." or "**." as the whole first
// label over a checkName name of at least two labels) or a checkName name.
func checkEndpointHost(host string, ipOnly bool) (msg, hint string) {
	h := asciiLower(host)
	switch {
	case h == "":
		return "empty host", "name a host such as api.example.com"
	case strings.TrimSpace(h) != h:
		return fmt.Sprintf("%q has surrounding whitespace", host), "remove the spaces"
	case strings.Contains(h, "/"):
		if _, err := netip.ParsePrefix(h); err != nil {
			return fmt.Sprintf("%q is not a CIDR", host), "write an address and a prefix length such as 10.0.0.0/8 or fd00::/8 (no zone, no trailing dot)"
		}
		return "", ""
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return fmt.Sprintf("%q has a zone (%%%s): a rule names addresses, not interfaces", host, a.Zone()), "write the address without the %zone"
		}
		return "", ""
	}
	if ipOnly {
		return fmt.Sprintf("%q is not an IP address or CIDR", host), "allow_private takes addresses such as 127.0.0.1/32 or ::1"
	}
	h = strings.TrimSuffix(h, ".")
	switch h {
	case "*", "**":
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
	if strings.Contains(rest, "*") {
		return fmt.Sprintf("%q has a wildcard outside the first label", host), wildcardHint
	}
	if why, hint := checkName(rest); why != "" {
		return fmt.Sprintf("%q is not a valid host name: %s", host, why), hint
	}
	return "", ""
}

// checkName says why name (lowercased, without its trailing dot) is not a
// DNS name by the egress proxy's rule (canonicalName, isNumericName), and
// how to fix it: at most 253 bytes of labels of 1–63 ASCII letters,
// digits and '-' (not first or last), the last label not starting with a
// digit (that is an IP address in another spelling, such as 127.1 or
// 010.0.0.1, or a numeric top-level label). It returns "" for a name.
func checkName(name string) (why, hint string) {
	if len(name) > 253 {
		return fmt.Sprintf("it is %d bytes long, more than DNS allows (253)", len(name)), "write the host's real name"
	}
	for _, label := range strings.Split(name, ".") {
		switch {
		case label == "":
			return "it has an empty label", nameHint
		case len(label) > 63:
			return "a label is longer than 63 bytes", nameHint
		case strings.HasPrefix(label, "-") || strings.HasSuffix(label, "-"):
			return "a label starts or ends with '-'", nameHint
		}
		for i := 0; i < len(label); i++ {
			switch c := label[i]; {
			case c >= 0x80:
				return "it has a non-ASCII character", "write an internationalised name in its ASCII (xn--) form"
			case !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-'):
				return fmt.Sprintf("%q is not a letter, digit, '-' or '.'", string(rune(c))), nameHint
			}
		}
	}
	if last := name[strings.LastIndexByte(name, '.')+1:]; last[0] >= '0' && last[0] <= '9' {
		return "its last label starts with a digit, so it would be an IP address, and it is not one in canonical form",
			"write an IP address as four decimal numbers without leading zeros (10.0.0.1) and no trailing dot, or write the host's full name"
	}
	return "", ""
}

// asciiLower lowercases the ASCII letters of s only: strings.ToLower
// would turn the Kelvin sign U+212A into an ASCII 'k', accepting a name
// the proxy refuses.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// nameHint says what an endpoint host may be.
const nameHint = "use a name such as api.example.com (an IP address as 10.0.0.1 or ::1), *.example.com, or a CIDR"

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

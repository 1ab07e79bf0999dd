package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/corral-sandbox/corral/egress/l7"
)

// Rule is one endpoint pattern of a Policy.
//
// Host is an exact DNS name ("api.example.com"), a wildcard as the whole
// first label ("*.example.com": exactly one label below example.com, so
// a.example.com but not a.b.example.com; "**.example.com": one or more
// labels below it; neither matches example.com itself), an IP literal or a
// CIDR ("10.0.0.0/8", "::1/128").
// Names compare case-insensitively and a trailing dot is ignored. A name
// rule never matches an IP-literal target and an IP/CIDR rule never matches
// a name.
//
// Ports empty means 80 and 443 in Allow; in Deny and AllowPrivate it means
// every port (a deny without ports denies the host outright).
//
// Allow rules may carry L7 rules (Access, Rules, DenyRules: egress/l7)
// and Inspect. An allow rule that is inspected or has L7 rules never
// carries an opaque tunnel: a CONNECT to it must start TLS, which the
// proxy terminates with Config.CA, and each request inside is decided
// by the L7 rules; its plain-HTTP requests are decided by them too.
type Rule struct {
	Host  string
	Ports []int
	// Inspect terminates TLS (implied by L7 rules).
	Inspect   bool
	Access    string
	Rules     []l7.Rule
	DenyRules []l7.Rule
}

// inspected reports whether r's tunnels are terminated.
func (r Rule) inspected() bool {
	return r.Inspect || r.Access != "" || len(r.Rules) > 0 || len(r.DenyRules) > 0
}

// Policy is the egress policy of one sandbox.
type Policy struct {
	Allow []Rule
	// Deny beats Allow. IP/CIDR deny rules are also applied to every
	// address a name resolves to.
	Deny []Rule
	// AllowPrivate lists IPs/CIDRs (with optional ports; empty = any port)
	// the proxy may dial although Classify blocks them, e.g.
	// {Host: "127.0.0.1/32", Ports: []int{11434}}.
	AllowPrivate []Rule
	// Hosts maps names to IP literals, consulted before DNS (like
	// --add-host).
	Hosts map[string]string
}

type ruleKind int

const (
	kindName         ruleKind = iota
	kindWildcard              // "*.": exactly one label
	kindDeepWildcard          // "**.": one or more labels
	kindPrefix
)

type compiledRule struct {
	kind   ruleKind
	name   string // kindName: the name; kindWildcard, kindDeepWildcard: ".example.com"
	prefix netip.Prefix
	ports  []int // nil: default (see Rule)
	text   string
	// inspect: tunnels are terminated and l7 decides each request
	// (allow rules only; l7 is never nil then).
	inspect bool
	l7      *l7.Set
	index   int // position in its section
}

type compiledPolicy struct {
	allow, deny, private []compiledRule
	hosts                map[string]netip.Addr
}

// Validate reports the first problem in p: bare "*" or "**", "*.tld" and
// "**.tld" (a wildcard whose rest has fewer than two labels), a first label
// that holds '*' but is neither "*" nor "**" ("***", "*x", "x*"), '*' outside
// the first label ("a.*.example.com", "*.*.example.com"), bad names, bad IPs
// or CIDRs, ports outside 1..65535, Hosts values that are not IP literals and
// AllowPrivate entries that are not IPs/CIDRs. Corral's policy validation
// refuses the same first, with the file's positions (policy.Validate;
// cmd/corral's FuzzPolicyRefusesWhatProxyRefuses keeps them in step), so
// for a validated policy this is a defensive check.
func (p Policy) Validate() error {
	_, err := compilePolicy(p)
	return err
}

func compilePolicy(p Policy) (*compiledPolicy, error) {
	cp := &compiledPolicy{hosts: map[string]netip.Addr{}}
	var err error
	if cp.allow, err = compileRules("allow", p.Allow, false); err != nil {
		return nil, err
	}
	if cp.deny, err = compileRules("deny", p.Deny, false); err != nil {
		return nil, err
	}
	if cp.private, err = compileRules("allow_private", p.AllowPrivate, true); err != nil {
		return nil, err
	}
	for name, v := range p.Hosts {
		n, err := canonicalName(strings.TrimSuffix(name, "."))
		if err != nil || isNumericName(n) {
			return nil, fmt.Errorf("hosts: %q: not a host name", name)
		}
		a, err := netip.ParseAddr(v)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("hosts: %s: %q is not an IP literal", name, v)
		}
		if _, dup := cp.hosts[n]; dup {
			return nil, fmt.Errorf("hosts: %s listed twice", n)
		}
		cp.hosts[n] = a
	}
	return cp, nil
}

// inspects reports whether an allow rule is inspected.
func (cp *compiledPolicy) inspects() bool {
	for _, r := range cp.allow {
		if r.inspect {
			return true
		}
	}
	return false
}

func isNumericName(n string) bool {
	last := n[strings.LastIndexByte(n, '.')+1:]
	return last != "" && last[0] >= '0' && last[0] <= '9'
}

func compileRules(section string, rules []Rule, ipOnly bool) ([]compiledRule, error) {
	out := make([]compiledRule, 0, len(rules))
	for i, r := range rules {
		c, err := compileRule(r, ipOnly)
		c.index = i
		if err == nil && r.inspected() {
			if section != "allow" {
				err = errors.New("only allow rules take L7 rules or inspection")
			} else {
				c.inspect = true
				c.l7, err = l7.Compile(r.Access, r.Rules, r.DenyRules)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("%s[%d] %q: %w", section, i, r.Host, err)
		}
		out = append(out, c)
	}
	return out, nil
}

func compileRule(r Rule, ipOnly bool) (compiledRule, error) {
	c := compiledRule{}
	for _, port := range r.Ports {
		if port < 1 || port > 65535 {
			return c, fmt.Errorf("port %d outside 1..65535", port)
		}
	}
	if len(r.Ports) > 0 {
		c.ports = append([]int(nil), r.Ports...)
	}
	h := strings.TrimSpace(r.Host)
	if h != r.Host || h == "" {
		return c, errors.New("empty host or surrounding whitespace")
	}
	// IP literal or CIDR.
	if strings.Contains(h, "/") {
		pfx, err := netip.ParsePrefix(h)
		if err != nil || pfx.Addr().Zone() != "" {
			return c, errors.New("bad CIDR")
		}
		c.kind, c.prefix = kindPrefix, unmapPrefix(pfx)
		c.text = c.prefix.String()
		return c, nil
	}
	if a, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		if a.Zone() != "" {
			return c, errors.New("zone IDs are not allowed")
		}
		a = canonicalAddr(a)
		c.kind, c.prefix = kindPrefix, netip.PrefixFrom(a, a.BitLen())
		c.text = a.String()
		return c, nil
	}
	if ipOnly {
		return c, errors.New("must be an IP literal or CIDR")
	}
	h = strings.TrimSuffix(h, ".")
	if strings.Contains(h, "*") {
		return compileWildcard(c, h)
	}
	n, err := canonicalName(h)
	if err != nil {
		return c, err
	}
	if isNumericName(n) {
		return c, errors.New("non-canonical IP literal or numeric top-level label")
	}
	c.kind, c.name, c.text = kindName, n, n
	return c, nil
}

// compileWildcard compiles a name rule h holding a '*': "*." or "**." as
// the whole first label, over a name of at least two labels.
func compileWildcard(c compiledRule, h string) (compiledRule, error) {
	first, rest, _ := strings.Cut(h, ".")
	switch {
	case first == "*":
		c.kind = kindWildcard
	case first == "**":
		c.kind = kindDeepWildcard
	case strings.Contains(first, "*"):
		return c, errors.New("a wildcard must be the whole first label: \"*.\" (one label) or \"**.\" (any depth)")
	default:
		return c, errors.New("wildcard allowed only as the whole first label")
	}
	if rest == "" {
		return c, errors.New("a bare wildcard is not allowed; list the hosts")
	}
	if strings.Contains(rest, "*") {
		return c, errors.New("wildcard allowed only as the whole first label (write \"**.\" for any depth)")
	}
	n, err := canonicalName(rest)
	if err != nil {
		return c, err
	}
	if isNumericName(n) {
		return c, errors.New("wildcard over a numeric name")
	}
	if !strings.Contains(n, ".") {
		return c, errors.New("wildcard over a top-level domain (*.tld) is not allowed")
	}
	c.name, c.text = "."+n, first+"."+n
	return c, nil
}

// unmapPrefix turns ::ffff:a.b.c.d/n (n >= 96) into a.b.c.d/(n-96).
func unmapPrefix(p netip.Prefix) netip.Prefix {
	p = p.Masked()
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p
}

// portOK reports whether port is covered; defaultAll selects the meaning of
// an empty list (true: any port; false: 80 and 443).
func (c *compiledRule) portOK(port int, defaultAll bool) bool {
	if c.ports == nil {
		return defaultAll || port == 80 || port == 443
	}
	for _, p := range c.ports {
		if p == port {
			return true
		}
	}
	return false
}

// matchTarget matches the requested host: names against name rules, IP
// literals (ip valid) against IP/CIDR rules.
func (c *compiledRule) matchTarget(host string, ip netip.Addr) bool {
	switch c.kind {
	case kindName:
		return !ip.IsValid() && host == c.name
	case kindWildcard:
		label, ok := strings.CutSuffix(host, c.name)
		return !ip.IsValid() && ok && label != "" && !strings.Contains(label, ".")
	case kindDeepWildcard:
		return !ip.IsValid() && len(host) > len(c.name) && strings.HasSuffix(host, c.name)
	default:
		return ip.IsValid() && c.prefix.Contains(ip)
	}
}

func (c *compiledRule) matchAddr(a netip.Addr) bool {
	if c.kind != kindPrefix {
		return false
	}
	return c.prefix.Contains(a) || c.prefix.Contains(a.Unmap())
}

func (c *compiledRule) describe(section string, i, port int) string {
	return section + "[" + strconv.Itoa(i) + "] " + hostPort(c.text, port)
}

// allowHint is the policy line that would allow host:port. A single-label
// name other than localhost needs single_label: true (the policy refuses
// it otherwise).
func allowHint(host string, port int) string {
	extra := ""
	if _, err := netip.ParseAddr(host); err != nil && !strings.Contains(host, ".") && host != "localhost" {
		extra = ", single_label: true"
	}
	return "network.allow: [{host: " + host + ", ports: [" + strconv.Itoa(port) + "]" + extra + "}]"
}

func privateHint(a netip.Addr, port int) string {
	a = a.Unmap()
	return "network.allow_private: [{host: " + netip.PrefixFrom(a, a.BitLen()).String() + ", ports: [" + strconv.Itoa(port) + "]}]"
}

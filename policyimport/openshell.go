package policyimport

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/corral-sandbox/corral/egress/l7"
	"github.com/corral-sandbox/corral/policy"
)

// importOpenShell maps an NVIDIA OpenShell sandbox policy (YAML;
// crates/openshell-policy/src/lib.rs, docs/reference/policy-schema.mdx):
// filesystem_policy (literal read_only / read_write paths,
// include_workdir), landlock, process, and network_policies, each a set
// of endpoints (host, port or ports, protocol, access preset or rules,
// deny_rules, enforcement, allowed_ips) usable by a set of binaries.
//
// Corral's rules apply to every process of the sandbox: an entry that
// OpenShell scopes to named binaries is an error loss (any program in the
// sandbox reaches its hosts). The access presets are Corral's own
// (read-only: GET, HEAD, OPTIONS; read-write: also POST, PUT, PATCH;
// full), and REST rules map one to one; an endpoint's path selector
// becomes rules on that path, and narrows a rule's own path (osRulePath).
// Its allowed_ips become allow_private, which Corral applies to every
// allowed host (osCheckPrivate says when that is looser). OpenShell's enforcement defaults to audit
// (log only); Corral enforces what it imports (a warning). GraphQL,
// WebSocket, MCP, JSON-RPC and SQL rules are not imported: the endpoint
// is left out (a warning) rather than allowed unchecked.
func importOpenShell(b *builder, data []byte) error {
	root, err := parseTree(b.file, data)
	if err != nil {
		return err
	}
	if v := str(get(root, "version")); v != "" && v != "1" {
		return fmt.Errorf("%s:%d: version %s: only OpenShell policy version 1 is known", b.file, line(get(root, "version")), v)
	}
	// The baseline OpenShell adds in proxy mode (openshell-sandbox
	// lib.rs PROXY_BASELINE_READ_ONLY; docs/sandboxes/policies.mdx).
	b.containerSystem(line(root), "filesystem_policy", "its container image's (OpenShell's baseline)", []string{"/usr", "/lib", "/etc"})
	keys, vals := pairs(root)
	for i, k := range keys {
		switch k.Value {
		case "version":
		case "filesystem_policy":
			osFilesystem(b, vals[i])
		case "landlock":
			b.loss(Info, line(k), "landlock", "Corral requires Landlock (layers.landlock: required) and every other layer; OpenShell's best_effort would run without it")
		case "process":
			b.loss(Info, line(k), "process", "not imported: Corral runs the workload as the caller (as nobody when the caller is root), never as root; process.run_as_user names another user")
		case "network_policies":
			osNetwork(b, vals[i])
		case "network_middlewares":
			b.loss(Warning, line(k), k.Value, "not imported: Corral has no request middlewares")
		default:
			b.loss(Warning, line(k), k.Value, "not imported: an OpenShell policy key this importer does not know")
		}
	}
	if get(root, "filesystem_policy") == nil {
		b.loss(Info, 1, "filesystem_policy", "none: OpenShell then grants the working directory; so does Corral")
	}
	return nil
}

func osFilesystem(b *builder, fs *yaml.Node) {
	b.includeWorkdir = &entry{value: "false", from: b.at(line(fs), "filesystem_policy (include_workdir defaults to false)")}
	if on, ok := boolean(get(fs, "include_workdir")); ok {
		b.includeWorkdir = &entry{value: strconv.FormatBool(on), from: b.at(line(get(fs, "include_workdir")), "filesystem_policy.include_workdir")}
	}
	ro, rw := items(get(fs, "read_only")), items(get(fs, "read_write"))
	if len(ro) == 0 && len(rw) == 0 {
		b.loss(Warning, line(fs), "filesystem_policy", "with both lists empty OpenShell applies no filesystem restriction; Corral grants the system directories and the entries below")
	}
	for i, n := range rw {
		key, p := idx("filesystem_policy.read_write", i), str(n)
		switch {
		case p == "/dev/null" || strings.HasPrefix(p, "/dev/"):
			b.loss(Info, line(n), key, "not needed: the sandbox's /dev has null, zero, random, urandom and a tty")
		default:
			b.grantWrite(n, key, p)
		}
	}
	for i, n := range ro {
		key, p := idx("filesystem_policy.read_only", i), str(n)
		cp, ok := corralPath(p)
		switch {
		case p == "/proc" || strings.HasPrefix(p, "/proc/") || strings.HasPrefix(p, "/dev/") || p == "/dev":
			b.loss(Info, line(n), key, "not needed: the sandbox has its own /proc and a minimal /dev")
		case !ok || !strings.HasPrefix(p, "/"):
			b.loss(Warning, line(n), key, "not imported: %q is not an absolute literal path", p)
		case b.reachable(cp):
		default:
			addPath(&b.readOnly, cp, true, b.at(line(n), key))
		}
	}
	var missing []string
	for _, p := range []string{"/var/log", "/app"} {
		if !b.reachable(p) {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		b.loss(Warning, line(fs), "filesystem_policy", "OpenShell's baseline also grants its image's %s read-only; Corral does not grant the host's: add read_only entries if the workload reads them", strings.Join(missing, " and "))
	}
}

func osNetwork(b *builder, np *yaml.Node) {
	var scoped []osPrivate
	names, entries := pairs(np)
	for i, nameNode := range names {
		pol := entries[i]
		key := "network_policies." + nameNode.Value
		if bins := items(get(pol, "binaries")); len(bins) > 0 {
			var list []string
			for _, bn := range bins {
				list = append(list, str(get(bn, "path")))
			}
			b.loss(Error, line(nameNode), key+".binaries", "Corral's egress rules apply to every process in the sandbox: the hosts of %s are reachable by any program, not only %s", nameNode.Value, strings.Join(list, ", "))
		}
		for j, ep := range items(get(pol, "endpoints")) {
			osEndpoint(b, ep, idx(key+".endpoints", j), &scoped)
		}
	}
	if len(b.allowed) > 0 {
		b.loss(Warning, line(np), "network_policies", "OpenShell lets an exact host resolve to RFC 1918 addresses without allowed_ips; Corral's proxy refuses internal addresses unless network.allow_private covers them: add allow_private for an internal service an allowed name resolves to")
	}
	osCheckPrivate(b, scoped)
}

// osPrivate is an endpoint's allowed_ips, written as allow_private.
type osPrivate struct {
	host   string
	ports  []int
	ranges []netip.Prefix
	line   int
	key    string
}

// rfc1918 are the ranges OpenShell lets an exact host resolve to without
// allowed_ips (docs/reference/policy-schema.mdx, allowed_ips).
var rfc1918 = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("172.16.0.0/12"), netip.MustParsePrefix("192.168.0.0/16")}

// osCheckPrivate reports each endpoint's allowed_ips at its level.
// OpenShell scopes them to the endpoint; Corral's allow_private holds for
// every allowed host on its ports. That is looser (an error) when another
// allowed host on a shared port is a wildcard, or when a range is not
// RFC 1918 (where OpenShell lets exact hosts resolve anyway); else info.
func osCheckPrivate(b *builder, scoped []osPrivate) {
	for _, s := range scoped {
		in1918 := true
		for _, r := range s.ranges {
			if !slices.ContainsFunc(rfc1918, func(p netip.Prefix) bool { return p.Bits() <= r.Bits() && p.Overlaps(r) }) {
				in1918 = false
			}
		}
		var loose, shared []string
		for _, a := range b.allowed {
			if a.host == s.host || !portsMeet(a.ports, s.ports) {
				continue
			}
			if strings.Contains(a.host, "*") || !in1918 {
				loose = append(loose, a.host)
			} else {
				shared = append(shared, a.host)
			}
		}
		switch {
		case len(loose) > 0:
			b.loss(Error, s.line, s.key, "Corral's allow_private holds for every allowed host on its ports, not for %s alone: %s may reach these addresses too, which OpenShell refuses them", s.host, strings.Join(slices.Compact(slices.Sorted(slices.Values(loose))), ", "))
		case len(shared) > 0:
			b.loss(Info, s.line, s.key, "allow_private holds for every allowed host on its ports; the others there (%s) are exact names, which OpenShell lets resolve to RFC 1918 addresses too", strings.Join(slices.Compact(slices.Sorted(slices.Values(shared))), ", "))
		default:
			b.loss(Info, s.line, s.key, "allow_private holds for every allowed host on its ports; no other allowed host shares them")
		}
	}
}

// portsMeet reports whether two allow entries' ports share one (no ports:
// 80 and 443).
func portsMeet(a, c []int) bool {
	if len(a) == 0 {
		a = []int{80, 443}
	}
	if len(c) == 0 {
		c = []int{80, 443}
	}
	return slices.ContainsFunc(a, func(p int) bool { return slices.Contains(c, p) })
}

// osPorts are an endpoint's ports (ports, else port); ok is false, with
// a warning, when one is outside 1-65535 or there is none (OpenShell
// refuses both: MissingEndpointPort, InvalidEndpointPort).
func osPorts(b *builder, ep *yaml.Node, key string) (ports []int, ok bool) {
	list, k := items(get(ep, "ports")), key+".ports"
	if len(list) == 0 && get(ep, "port") != nil {
		list, k = []*yaml.Node{get(ep, "port")}, key+".port"
	}
	for _, n := range list {
		p, err := strconv.Atoi(str(n))
		if err == nil {
			if msg, _ := policy.PortProblem(p); msg != "" {
				err = fmt.Errorf("%s", msg)
			}
		}
		if err != nil {
			b.loss(Warning, line(n), k, "not imported: %q is not a TCP port (1-65535; OpenShell refuses it too); the endpoint is left out", str(n))
			return nil, false
		}
		ports = append(ports, p)
	}
	if len(ports) == 0 {
		b.loss(Warning, line(ep), key, "not imported: an endpoint without a port (OpenShell requires one); it is left out")
		return nil, false
	}
	return ports, true
}

// osEndpoint maps one endpoint to an allow entry (and allow_private for
// its allowed_ips, recorded in scoped to be judged once every endpoint
// is known).
func osEndpoint(b *builder, ep *yaml.Node, key string, scoped *[]osPrivate) {
	host := strings.ToLower(str(get(ep, "host")))
	if host == "" {
		if get(ep, "allowed_ips") == nil {
			b.loss(Warning, line(ep), key, "not imported: an endpoint without a host")
		} else {
			b.loss(Error, line(ep), key, "OpenShell allows any host on this port whose address is in allowed_ips; Corral allows those addresses but still needs each name in network.allow")
		}
		return
	}
	ports, ok := osPorts(b, ep, key)
	if !ok {
		return
	}
	var ranges []netip.Prefix
	for _, n := range items(get(ep, "allowed_ips")) {
		r, ok := addrRange(str(n))
		if !ok {
			b.loss(Warning, line(n), key+".allowed_ips", "not imported: %q is not an address or prefix", str(n))
			continue
		}
		ranges = append(ranges, r)
	}
	l7set, ok := osL7(b, ep, key)
	if !ok {
		return
	}
	b.setNetwork(policy.NetworkProxy, b.at(line(ep), key))
	if !b.endpoint(listAllow, host, ports, l7set, line(ep), key) {
		return
	}
	if len(ranges) > 0 {
		for _, r := range ranges {
			b.endpoint(listAllowPrivate, r.String(), ports, "", line(get(ep, "allowed_ips")), key+".allowed_ips")
		}
		*scoped = append(*scoped, osPrivate{host, ports, ranges, line(get(ep, "allowed_ips")), key + ".allowed_ips"})
	}
}

// osL7 is an endpoint's L7 settings as the flow YAML of a Corral allow
// entry (access, rules, deny_rules, tls); ok is false when the endpoint
// is to be left out (its rules cannot be written: a warning says so).
func osL7(b *builder, ep *yaml.Node, key string) (string, bool) {
	protocol := str(get(ep, "protocol"))
	enforce := str(get(ep, "enforcement")) == "enforce"
	access := str(get(ep, "access"))
	rules := items(get(ep, "rules"))
	switch protocol {
	case "", "rest":
	case "tcp":
		b.loss(Warning, line(ep), key, "a TCP endpoint: reached through Corral's proxy, so the client must tunnel with CONNECT (HTTPS_PROXY)")
		return "", true
	default:
		if enforce && (access != "" || len(rules) > 0) {
			b.loss(Warning, line(ep), key, "not imported: Corral has no %s rules; the endpoint is left out rather than allowed unchecked (add it with access or rules)", protocol)
			return "", false
		}
	}
	if err := l7.CheckAccess(access); err != nil {
		b.loss(Warning, line(get(ep, "access")), key+".access", "not imported: %v (OpenShell's presets are Corral's); the endpoint is left out rather than allowed unchecked", err)
		return "", false
	}
	var out []string
	if (access != "" || len(rules) > 0 || get(ep, "deny_rules") != nil) && !enforce {
		b.loss(Warning, line(ep), key, "OpenShell only audits this endpoint's rules (enforcement defaults to audit); Corral enforces them")
	}
	selector := str(get(ep, "path"))
	if selector == "**" || selector == "/**" {
		selector = ""
	}
	switch {
	case access != "" && len(rules) > 0:
		b.loss(Warning, line(ep), key, "OpenShell refuses access together with rules; access was used")
		fallthrough
	case access != "":
		if selector == "" {
			out = append(out, "access: "+quote(access))
			break
		}
		p, _, ok := osRulePath(selector, "")
		if !ok {
			b.loss(Warning, line(ep), key+".path", "not imported: Corral cannot write the path selector %q as a rule path; the endpoint is left out", selector)
			return "", false
		}
		var rs []string
		for _, m := range accessMethods(access) {
			rs = append(rs, fmt.Sprintf("{method: %s, path: %s}", quote(m), quote(p)))
		}
		out = append(out, "rules: ["+strings.Join(rs, ", ")+"]")
	case len(rules) > 0:
		var rs []string
		for k, r := range rules {
			rule, why := osRule(get(r, "allow"), selector)
			switch {
			case why == osNone:
				b.loss(Info, line(r), idx(key+".rules", k), "not imported: no request both matches the endpoint's path %q and this rule's path, so OpenShell never applies it either", selector)
			case why != "":
				b.loss(Warning, line(r), idx(key+".rules", k), "not imported: %s; the requests it allowed are refused", why)
			default:
				rs = append(rs, rule)
			}
		}
		if len(rs) == 0 {
			b.loss(Warning, line(ep), key, "not imported: none of its rules maps; the endpoint is left out")
			return "", false
		}
		out = append(out, "rules: ["+strings.Join(rs, ", ")+"]")
	case selector != "":
		p, _, ok := osRulePath(selector, "")
		if !ok {
			b.loss(Warning, line(ep), key+".path", "not imported: Corral cannot write the path selector %q as a rule path; the endpoint is left out", selector)
			return "", false
		}
		out = append(out, fmt.Sprintf("rules: [{method: \"*\", path: %s}]", quote(p)))
	}
	if dr := items(get(ep, "deny_rules")); len(dr) > 0 {
		var rs []string
		for k, r := range dr {
			// Within the endpoint's selector, but a deny wider than it
			// refuses only what no rule of this entry allows anyway.
			rule, why := osRule(r, "")
			if why != "" {
				b.loss(Error, line(r), idx(key+".deny_rules", k), "Corral cannot express this deny rule (%s): the requests it refused are allowed", why)
				continue
			}
			rs = append(rs, rule)
		}
		if len(rs) > 0 {
			out = append(out, "deny_rules: ["+strings.Join(rs, ", ")+"]")
		}
	}
	if str(get(ep, "tls")) == "skip" {
		if len(out) > 0 {
			b.loss(Warning, line(ep), key, "tls: skip with L7 rules: Corral inspects this host's TLS to apply them")
		} else {
			out = append(out, `tls: "passthrough"`)
		}
	}
	ek, _ := pairs(ep)
	for _, k := range ek {
		switch {
		case osEndpointKeys[k.Value]:
		case strings.Contains(k.Value, "credential") || strings.Contains(k.Value, "signing") || k.Value == "rewrite":
			b.loss(Warning, line(k), key+"."+k.Value, "not imported: a Corral credential (docs/policy.md#credentials) is bound to hosts and substituted by the proxy; declare it there")
		case k.Value == "allow_encoded_slash":
			b.loss(Warning, line(k), key+"."+k.Value, "not imported: Corral's proxy decides on the decoded path and refuses an encoded slash")
		default:
			b.loss(Warning, line(k), key+"."+k.Value, "not imported: an endpoint setting this importer does not know")
		}
	}
	return strings.Join(out, ", "), true
}

// osEndpointKeys are the endpoint keys osEndpoint maps.
var osEndpointKeys = map[string]bool{"host": true, "port": true, "ports": true, "protocol": true, "enforcement": true,
	"access": true, "rules": true, "deny_rules": true, "path": true, "allowed_ips": true, "tls": true, "name": true}

// accessMethods are the methods of an access preset (OpenShell's
// l7/mod.rs, Corral's policy.HTTPAccess: the same sets).
func accessMethods(access string) []string {
	switch access {
	case "read-only":
		return []string{"GET", "HEAD", "OPTIONS"}
	case "read-write":
		return []string{"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH"}
	default:
		return []string{"*"}
	}
}

// osSelector reports whether the endpoint path selector sel matches the
// literal request path p, as OpenShell's endpoint_path.rs does: "X/**"
// is X and everything under it, otherwise a glob whose '*' crosses '/'
// ('?' one character); ok is false for a selector with a character class
// ('['), which this does not judge.
func osSelector(sel, p string) (match, ok bool) {
	if strings.Contains(sel, "[") {
		return false, false
	}
	if x, sub := strings.CutSuffix(sel, "/**"); sub {
		return wildMatch(x, p, false) || wildMatch(x+"/*", p, false), true
	}
	return wildMatch(sel, p, false), true
}

// osPath is a path selector with no wildcard but a "/**" tail, or whose
// '*' are whole segments, as a Corral rule path: the selector's '*'
// crosses '/', so a "*" segment is "*/**" (one segment or more, as the
// selector's needs at least the '/' around it); ok is false for other
// wildcards, which Corral's segment globs cannot write.
func osPath(sel string) (string, bool) {
	parts := strings.Split(sel, "/")
	for i, p := range parts {
		switch {
		case p == "*":
			parts[i] = "*/**"
		case p == "**" && i == len(parts)-1:
		case strings.ContainsAny(p, "*?["):
			return "", false
		}
	}
	out := strings.Join(parts, "/")
	if l7.CheckPath(out) != nil {
		return "", false
	}
	return out, true
}

// osRulePath is the Corral path of the requests that both the endpoint's
// selector sel ("" for any) and a rule's path rp ("" for any; a
// segment glob, '*' within one) match: none when no request does; ok is
// false when Corral cannot write it.
func osRulePath(sel, rp string) (p string, none, ok bool) {
	if rp == "**" || rp == "/**" {
		rp = ""
	}
	switch {
	case sel == "":
		return rp, false, true
	case rp == "":
		p, ok := osPath(sel)
		return p, false, ok
	case !strings.ContainsAny(rp, "*?["):
		m, ok := osSelector(sel, rp)
		return rp, ok && !m, ok
	}
	if x, sub := strings.CutSuffix(sel, "/**"); sub && !strings.ContainsAny(x, "*?[") {
		// The rule's path is within X/** when its leading segments are X's.
		xs, rs := strings.Split(x, "/"), strings.Split(rp, "/")
		for i, seg := range xs {
			switch {
			case i >= len(rs) || strings.Contains(rs[i], "*"):
				return "", false, false
			case rs[i] != seg:
				return "", true, true
			}
		}
		return rp, false, true
	}
	if !strings.ContainsAny(sel, "*?[") {
		// An exact selector: that path, if the rule's glob matches it.
		if l7.MatchSegments(strings.Split(strings.TrimPrefix(rp, "/"), "/"), strings.Split(strings.TrimPrefix(sel, "/"), "/")) {
			return sel, false, true
		}
		return "", true, true
	}
	return "", false, false
}

// osNone is osRule's why for a rule no request within the selector
// matches.
const osNone = "none"

// osRule is a REST rule ({method, path, query}) as a Corral rule in flow
// YAML, within selector (the endpoint's path, "" for none), each part
// checked with egress/l7's rules (as the policy checks them); why says
// what cannot be written (a GraphQL, MCP, ... field, or a value Corral
// refuses), or is osNone for a rule that matches nothing in the selector.
func osRule(r *yaml.Node, selector string) (rule, why string) {
	if r == nil || r.Kind != yaml.MappingNode {
		return "", "not a rule"
	}
	var parts []string
	keys, vals := pairs(r)
	for i, k := range keys {
		switch k.Value {
		case "method":
			m := strings.ToUpper(str(vals[i])) // OpenShell compares methods without case
			if err := l7.CheckMethod(m); err != nil {
				return "", err.Error()
			}
			parts = append(parts, "method: "+quote(m))
		case "path":
		case "query":
			var qs []string
			qk, qv := pairs(vals[i])
			for j := range qk {
				var globs []string
				if any := items(get(qv[j], "any")); len(any) > 0 {
					for _, g := range any {
						globs = append(globs, str(g))
					}
				} else if s := str(qv[j]); s != "" {
					globs = append(globs, s)
				}
				if err := l7.CheckQuery(qk[j].Value, globs); err != nil {
					return "", err.Error()
				}
				for g := range globs {
					globs[g] = quote(globs[g])
				}
				qs = append(qs, quote(qk[j].Value)+": ["+strings.Join(globs, ", ")+"]")
			}
			parts = append(parts, "query: {"+strings.Join(qs, ", ")+"}")
		default:
			return "", fmt.Sprintf("a %s field (Corral's rules have only method, path and query)", k.Value)
		}
	}
	rp := str(get(r, "path"))
	if err := l7.CheckPath(rp); err != nil {
		return "", err.Error()
	}
	p, none, ok := osRulePath(selector, rp)
	switch {
	case none:
		return "", osNone
	case !ok:
		return "", fmt.Sprintf("Corral cannot write the requests both the endpoint's path %q and the rule's %q match", selector, rp)
	case p != "":
		parts = append(parts, "path: "+quote(p))
	}
	return "{" + strings.Join(parts, ", ") + "}", ""
}

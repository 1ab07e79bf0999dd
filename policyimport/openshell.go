package policyimport

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

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
// becomes rules on that path. OpenShell's enforcement defaults to audit
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
	b.loss(Info, line(fs), "filesystem_policy", "OpenShell's baseline paths (/usr, /lib, /etc read-only, /tmp read-write) are Corral's default system directories and private /tmp; its /var/log is not granted")
}

func osNetwork(b *builder, np *yaml.Node) {
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
			osEndpoint(b, ep, idx(key+".endpoints", j))
		}
	}
}

// osEndpoint maps one endpoint to an allow entry (and allow_private for
// its allowed_ips).
func osEndpoint(b *builder, ep *yaml.Node, key string) {
	from := b.at(line(ep), key)
	host := strings.ToLower(str(get(ep, "host")))
	var ports []int
	for _, n := range items(get(ep, "ports")) {
		if p, err := strconv.Atoi(str(n)); err == nil {
			ports = append(ports, p)
		}
	}
	if len(ports) == 0 {
		if p, err := strconv.Atoi(str(get(ep, "port"))); err == nil {
			ports = []int{p}
		}
	}
	for _, n := range items(get(ep, "allowed_ips")) {
		if _, err := netip.ParsePrefix(str(n)); err != nil {
			if _, err := netip.ParseAddr(str(n)); err != nil {
				b.loss(Warning, line(n), key+".allowed_ips", "not imported: %q is not an address or prefix", str(n))
				continue
			}
		}
		b.setNetwork(policy.NetworkProxy, from)
		b.addEndpoint(&b.allowPrivate, str(n), ports, "", b.at(line(n), key+".allowed_ips"))
	}
	if host == "" {
		if get(ep, "allowed_ips") == nil {
			b.loss(Warning, line(ep), key, "not imported: an endpoint without a host")
		} else {
			b.loss(Error, line(ep), key, "OpenShell allows any host on this port whose address is in allowed_ips; Corral allows those addresses but still needs each name in network.allow")
		}
		return
	}
	protocol := str(get(ep, "protocol"))
	enforce := str(get(ep, "enforcement")) == "enforce"
	access := str(get(ep, "access"))
	rules := items(get(ep, "rules"))
	switch protocol {
	case "", "rest":
	case "tcp":
		b.loss(Warning, line(ep), key, "a TCP endpoint: reached through Corral's proxy, so the client must tunnel with CONNECT (HTTPS_PROXY)")
		b.setNetwork(policy.NetworkProxy, from)
		b.addEndpoint(&b.allow, host, ports, "", from)
		return
	default:
		if enforce && (access != "" || len(rules) > 0) {
			b.loss(Warning, line(ep), key, "not imported: Corral has no %s rules; the endpoint is left out rather than allowed unchecked (add it with access or rules)", protocol)
			return
		}
	}
	var l7 []string
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
			l7 = append(l7, "access: "+quote(access))
		} else {
			var rs []string
			for _, m := range accessMethods(access) {
				rs = append(rs, fmt.Sprintf("{method: %s, path: %s}", quote(m), quote(osPath(selector))))
			}
			l7 = append(l7, "rules: ["+strings.Join(rs, ", ")+"]")
		}
	case len(rules) > 0:
		var rs []string
		for k, r := range rules {
			rule, ok := osRule(get(r, "allow"), selector)
			if !ok {
				b.loss(Warning, line(r), idx(key+".rules", k), "not imported: a rule Corral cannot express (only method, path and query); the requests it allowed are refused")
				continue
			}
			rs = append(rs, rule)
		}
		if len(rs) == 0 {
			b.loss(Warning, line(ep), key, "not imported: none of its rules maps; the endpoint is left out")
			return
		}
		l7 = append(l7, "rules: ["+strings.Join(rs, ", ")+"]")
	case selector != "":
		l7 = append(l7, fmt.Sprintf("rules: [{method: \"*\", path: %s}]", quote(osPath(selector))))
	}
	if dr := items(get(ep, "deny_rules")); len(dr) > 0 {
		var rs []string
		for k, r := range dr {
			rule, ok := osRule(r, "")
			if !ok {
				b.loss(Error, line(r), idx(key+".deny_rules", k), "Corral cannot express this deny rule: the requests it refused are allowed")
				continue
			}
			rs = append(rs, rule)
		}
		if len(rs) > 0 {
			l7 = append(l7, "deny_rules: ["+strings.Join(rs, ", ")+"]")
		}
	}
	if str(get(ep, "tls")) == "skip" {
		if len(l7) > 0 {
			b.loss(Warning, line(ep), key, "tls: skip with L7 rules: Corral inspects this host's TLS to apply them")
		} else {
			l7 = append(l7, `tls: "passthrough"`)
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
	b.setNetwork(policy.NetworkProxy, from)
	b.addEndpoint(&b.allow, host, ports, strings.Join(l7, ", "), from)
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

// osPath is an endpoint path selector as a Corral rule path: "X/**" is
// X's subtree in both; a selector's other "*" crosses "/" in OpenShell,
// so it becomes "**" (a whole segment) where it is one.
func osPath(sel string) string {
	parts := strings.Split(sel, "/")
	for i, p := range parts {
		if p == "*" {
			parts[i] = "**"
		}
	}
	return strings.Join(parts, "/")
}

// osRule is a REST rule ({method, path, query}) as a Corral rule in flow
// YAML, within selector (the endpoint's path, "" for none); ok is false
// for a rule with other fields (GraphQL, MCP, ...).
func osRule(r *yaml.Node, selector string) (string, bool) {
	if r == nil || r.Kind != yaml.MappingNode {
		return "", false
	}
	var parts []string
	keys, vals := pairs(r)
	for i, k := range keys {
		switch k.Value {
		case "method":
			parts = append(parts, "method: "+quote(str(vals[i])))
		case "path":
			parts = append(parts, "path: "+quote(str(vals[i])))
		case "query":
			var qs []string
			qk, qv := pairs(vals[i])
			for j := range qk {
				var globs []string
				if any := items(get(qv[j], "any")); len(any) > 0 {
					for _, g := range any {
						globs = append(globs, quote(str(g)))
					}
				} else if s := str(qv[j]); s != "" {
					globs = append(globs, quote(s))
				} else {
					return "", false
				}
				qs = append(qs, quote(qk[j].Value)+": ["+strings.Join(globs, ", ")+"]")
			}
			parts = append(parts, "query: {"+strings.Join(qs, ", ")+"}")
		default:
			return "", false
		}
	}
	if selector != "" && get(r, "path") == nil {
		parts = append(parts, "path: "+quote(osPath(selector)))
	}
	return "{" + strings.Join(parts, ", ") + "}", true
}

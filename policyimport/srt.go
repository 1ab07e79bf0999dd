package policyimport

import (
	"net/netip"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/corral-sandbox/corral/policy"
)

// importSRT maps Anthropic sandbox-runtime settings (~/.srt-settings.json;
// @anthropic-ai/sandbox-runtime's README "Configuration" and its zod
// schema SandboxRuntimeConfigSchema): filesystem denyRead / allowRead /
// allowWrite / denyWrite, network allowedDomains / deniedDomains and the
// unix-socket switches, credentials files and envVars.
//
// srt reads are allowed everywhere but denyRead; Corral grants only the
// system directories, the working directory and what is listed, so a
// denyRead of something Corral does not grant anyway is already in
// force, and every import warns that other reads the workload made need
// an entry. srt's `*.example.com` matches any strict subdomain: Corral's
// `**.example.com`. An srt domain without a port matches every port;
// Corral's allow entry without ports is 80 and 443.
func importSRT(b *builder, data []byte) error {
	root, err := parseTree(b.file, data)
	if err != nil {
		return err
	}
	keys, vals := pairs(root)
	for i, k := range keys {
		v := vals[i]
		switch k.Value {
		case "filesystem":
			srtFilesystem(b, v)
		case "network":
			srtNetwork(b, v)
		case "credentials":
			srtCredentials(b, v)
		case "ignoreViolations":
			b.loss(Info, line(k), k.Value, "not imported: Corral reports every violation it refuses; there is nothing to ignore")
		case "enableWeakerNestedSandbox", "enableWeakerNetworkIsolation":
			if on, _ := boolean(v); on {
				b.loss(Warning, line(k), k.Value, "not imported: Corral has no weaker mode; every layer stays required (layers: in the policy makes one optional)")
			}
		case "allowPty":
			b.loss(Info, line(k), k.Value, "not needed: `corral run -t` gives the command a terminal")
		case "ripgrep", "seccomp", "bwrapPath", "socatPath", "javaAgentJarPath", "mandatoryDenySearchDepth", "windows", "git", "allowAppleEvents":
			b.loss(Info, line(k), k.Value, "not imported: a setting of srt's own implementation or platform")
		default:
			b.loss(Warning, line(k), k.Value, "not imported: an srt setting this importer does not know")
		}
	}
	return nil
}

func srtFilesystem(b *builder, fs *yaml.Node) {
	b.loss(Warning, line(fs), "filesystem", "srt lets the command read the whole filesystem but denyRead; Corral grants only the system directories, the working directory and the entries below: add filesystem.read_only entries for anything else it reads")
	if on, _ := boolean(get(fs, "disabled")); on {
		b.loss(Warning, line(get(fs, "disabled")), "filesystem.disabled", "not imported: Corral always enforces its filesystem rules")
	}
	// Grants first, so that a deny can be judged against what is reachable.
	for i, n := range items(get(fs, "allowWrite")) {
		key, raw := idx("filesystem.allowWrite", i), str(n)
		p, ok := corralPath(strings.TrimSuffix(raw, "/**"))
		switch {
		case !ok && !hasGlob(raw):
			b.loss(Warning, line(n), key, "not imported: %q has no Corral path form (a .. above the home or the working directory, or a path the policy refuses)", raw)
		case !ok:
			b.loss(Info, line(n), key, "not imported: %q is a pattern, which srt skips on Linux too (only literal paths and a trailing /** are writable)", raw)
		case p == "{workdir}":
			b.includeWorkdir = &entry{value: "true", from: b.at(line(n), key)}
		case p == "/tmp" || under(p, "/tmp"):
			b.loss(Info, line(n), key, "not imported: the sandbox has a private /tmp, writable and discarded afterwards")
		case refusedRW(p):
			b.loss(Warning, line(n), key, "not imported: Corral refuses %s read-write (docs/policy.md); grant a directory inside it", p)
		default:
			addPath(&b.readWrite, p, true, b.at(line(n), key))
		}
	}
	for i, n := range items(get(fs, "allowRead")) {
		key, raw := idx("filesystem.allowRead", i), str(n)
		p, ok := corralPath(strings.TrimSuffix(raw, "/**"))
		switch {
		case !ok:
			b.loss(Warning, line(n), key, "not imported: %q is a pattern; Corral grants directories and files by path: add read_only entries for what it should read", raw)
		case b.reachable(p):
		default:
			addPath(&b.readOnly, p, true, b.at(line(n), key))
		}
	}
	for i, n := range items(get(fs, "denyRead")) {
		key, raw := idx("filesystem.denyRead", i), str(n)
		b.denyPath(n, key, strings.TrimSuffix(raw, "/**"), raw)
	}
	// denyWrite beats allowWrite, also at or above it (srt's README,
	// "Precedence"): a read-write grant it covers is made read-only.
	for i, n := range items(get(fs, "denyWrite")) {
		key, raw := idx("filesystem.denyWrite", i), str(n)
		p, ok := corralPath(raw)
		switch {
		case !ok:
			if root := literalRoot(raw); root == "" || b.writable(root) || !strings.HasPrefix(root, "{workdir}") {
				b.loss(Error, line(n), key, "Corral cannot protect by pattern: files matching %q stay writable where Corral grants writes; add each as filesystem.protected", raw)
			} else {
				b.loss(Info, line(n), key, "nothing to do: %q is outside every read-write directory", raw)
			}
		case p == "{workdir}":
			b.unwrite(p, line(n), key)
			codexReadOnlyWorkdir(b, b.at(line(n), key))
		case !strings.HasPrefix(p, "{workdir}"):
			b.unwrite(p, line(n), key)
			addPath(&b.protected, p, false, b.at(line(n), key)) // it may be inside the working directory
		case !b.writable(p):
			b.loss(Info, line(n), key, "already read-only: %s is not in a read-write directory", p)
		default:
			b.unwrite(p, line(n), key)
			// A path under the working directory is protected by its
			// relative name, which Corral also keeps read-only deeper
			// in the tree; others by their path.
			if rel, ok := strings.CutPrefix(p, "{workdir}/"); ok {
				p = rel
			}
			addPath(&b.protected, p, false, b.at(line(n), key))
		}
	}
	if on, _ := boolean(get(fs, "allowGitConfig")); on {
		b.loss(Warning, line(get(fs, "allowGitConfig")), "filesystem.allowGitConfig", "not imported: Corral keeps .git read-only (filesystem.git: commit lets the workload commit; .git/config stays read-only)")
	}
}

// denyPath denies raw (the source's path; p its literal form) for reading
// where Corral would otherwise let the workload read it.
func (b *builder) denyPath(n *yaml.Node, key, p, raw string) {
	cp, ok := corralPath(p)
	switch {
	case !ok && !hasGlob(p):
		b.loss(Error, line(n), key, "Corral cannot deny %q: it has no Corral path form (a .. above the home or the working directory, or a path the policy refuses); deny the path it names", raw)
	case !ok:
		// A pattern may match under the working directory, which an
		// absolute or ~ pattern can name too: only a relative pattern
		// outside every grant is known to match nothing granted.
		if root := literalRoot(raw); root == "" || b.reachable(root) || !strings.HasPrefix(root, "{workdir}") {
			b.loss(Error, line(n), key, "Corral cannot deny by pattern: files matching %q stay readable where Corral grants them; add each as filesystem.deny", raw)
		} else {
			b.loss(Info, line(n), key, "already unreadable: nothing Corral grants matches %q", raw)
		}
	case !strings.HasPrefix(cp, "{workdir}"):
		// An absolute or ~ path may be inside the working directory, known
		// only when corral runs: deny it whether or not it looks granted.
		addPath(&b.deny, cp, true, b.at(line(n), key))
	case !b.reachable(cp):
		b.loss(Info, line(n), key, "already unreadable: Corral does not grant %s", cp)
	default:
		addPath(&b.deny, cp, true, b.at(line(n), key))
	}
}

// writable reports whether Corral path p is under a read-write grant.
func (b *builder) writable(p string) bool {
	if under(p, "{workdir}") && (b.includeWorkdir == nil || b.includeWorkdir.value == "true") {
		return true
	}
	for _, e := range b.readWrite {
		if s, err := strconv.Unquote(e.value); err == nil && under(p, s) {
			return true
		}
	}
	return false
}

// unwrite makes the read-write grants at or under Corral path p
// read-only (a write deny at or above them beats them), reporting each
// at line and key.
func (b *builder) unwrite(p string, line int, key string) {
	kept := b.readWrite[:0]
	var moved []entry
	for _, e := range b.readWrite {
		if s, err := strconv.Unquote(e.value); err == nil && under(s, p) {
			moved = append(moved, e)
			continue
		}
		kept = append(kept, e)
	}
	b.readWrite = kept
	for _, e := range moved {
		s, _ := strconv.Unquote(e.value)
		if !b.reachable(s) {
			b.readOnly = append(b.readOnly, e)
		}
		b.loss(Info, line, key, "%s is read-only, not read-write: the write deny covers it", s)
	}
}

// literalRoot is the Corral path of a pattern's leading literal
// directories ("**/.env" → "{workdir}", "~/src/*.pem" → "~/src"), "" when
// it starts with a wildcard at the root.
func literalRoot(pattern string) string {
	parts := strings.Split(pattern, "/")
	var lit []string
	for _, p := range parts {
		if hasGlob(p) {
			break
		}
		lit = append(lit, p)
	}
	s := strings.Join(lit, "/")
	if s == "" {
		if strings.HasPrefix(pattern, "/") {
			return ""
		}
		s = "."
	}
	p, ok := corralPath(s)
	if !ok {
		return ""
	}
	return p
}

func srtNetwork(b *builder, net *yaml.Node) {
	var anyPort []string
	for i, n := range items(get(net, "allowedDomains")) {
		key, raw := idx("network.allowedDomains", i), str(n)
		host, port, ok := srtDomain(raw)
		if !ok || host == "*" || policy.IsSingleLabel(host) {
			// srt's isValidDomainPattern refuses a name without a dot
			// (but localhost) too.
			b.loss(Warning, line(n), key, "not imported: %q is not a domain Corral's allow list takes (nor srt's)", raw)
			continue
		}
		var ports []int
		if port > 0 {
			ports = []int{port}
		}
		b.setNetwork(policy.NetworkProxy, b.at(line(get(net, "allowedDomains")), "network.allowedDomains"))
		kind := listAllow
		if a, err := netip.ParseAddr(host); err == nil && (a.IsPrivate() || a.IsLoopback() || a.IsLinkLocalUnicast()) {
			kind = listAllowPrivate
		}
		if b.endpoint(kind, host, ports, "", line(n), key) && port == 0 && kind == listAllow {
			anyPort = append(anyPort, raw)
		}
	}
	if len(anyPort) > 0 {
		b.loss(Warning, line(get(net, "allowedDomains")), "network.allowedDomains", "srt allows %s on every port; Corral's allow entry without ports is 80 and 443: add ports: [...] for others", strings.Join(anyPort, ", "))
	}
	for i, n := range items(get(net, "deniedDomains")) {
		key, raw := idx("network.deniedDomains", i), str(n)
		host, port, ok := srtDomain(raw)
		switch {
		case ok && host == "*":
			b.loss(Info, line(n), key, "already so: Corral denies every host its allow list does not name")
		case !ok:
			b.loss(Warning, line(n), key, "not imported: %q is not a domain", raw)
		case b.netMode.value != string(policy.NetworkProxy):
			b.loss(Info, line(n), key, "already so: the network is off")
		case strings.Contains(host, "*") && !strings.HasPrefix(host, "**.") || strings.Contains(strings.TrimPrefix(host, "**."), "*"):
			// srt's matcher (domain-pattern.js matchesDomainPattern) takes
			// only a leading "*." as a wildcard: another '*' is compared
			// as itself, and no host name has one.
			b.loss(Info, line(n), key, "already so: srt compares %q literally (only a leading *. is a wildcard), so it matches no host name", raw)
		default:
			var ports []int
			if port > 0 {
				ports = []int{port}
			}
			b.endpoint(listDeny, host, ports, "", line(n), key)
		}
	}
	keys, vals := pairs(net)
	for i, k := range keys {
		v, key := vals[i], "network."+k.Value
		switch k.Value {
		case "allowedDomains", "deniedDomains":
		case "deniedDomainReasons":
			b.loss(Info, line(k), key, "not imported: Corral's denial names the host, the reason and the policy line that would allow it")
		case "strictAllowlist":
			b.loss(Info, line(k), key, "already so: Corral asks nobody about a host unless the policy's consent section lets the workload ask")
		case "deniedResolvedAddresses":
			for j, n := range items(v) {
				pfx, ok := addrRange(str(n))
				switch {
				case !ok:
					b.loss(Warning, line(n), idx(key, j), "not imported: %q is not an IP address or CIDR (srt refuses it too)", str(n))
				case proxyRefuses(pfx):
					b.loss(Info, line(n), idx(key, j), "already so: Corral's proxy refuses every address of %s for a name, unless network.allow_private lets it", pfx)
				default:
					b.loss(Error, line(n), idx(key, j), "Corral cannot refuse %s as a resolved address of an allowed name (its proxy refuses only internal ranges, and %s is not wholly one); narrow network.allow instead", pfx, pfx)
				}
			}
		case "allowUnixSockets":
			b.loss(Info, line(k), key, "not imported: srt ignores it on Linux; Corral refuses unix sockets unless network.unix_sockets is allow")
		case "allowAllUnixSockets":
			if on, _ := boolean(v); on {
				b.unixSockets = &entry{value: string(policy.UnixSocketsAllow), from: b.at(line(k), key)}
			}
		case "allowLocalBinding":
			if on, _ := boolean(v); on {
				b.loss(Warning, line(k), key, "not imported: with network none or proxy the sandbox has no interface to bind a local port on")
			}
		case "allowMachLookup":
			b.loss(Info, line(k), key, "not imported: macOS only")
		case "httpProxyPort", "socksProxyPort", "parentProxy", "mitmProxy":
			b.loss(Warning, line(k), key, "not imported: Corral's egress proxy dials allowed hosts itself; it does not chain to another proxy")
		case "tlsTerminate":
			b.loss(Warning, line(k), key, "not imported: Corral inspects TLS for a host that has L7 rules (network.allow[].rules or access), with its own CA")
		default:
			b.loss(Warning, line(k), key, "not imported: an srt network setting this importer does not know")
		}
	}
}

// srtDomain splits an srt domain pattern ("api.example.com",
// "*.example.com:8443", "[::1]:8080", "::1", "*") into a Corral host and
// port (0: any), as srt's splitDomainPatternPort does (domain-pattern.js):
// an IPv6 literal with a port is bracketed, one with two or more colons
// and no brackets is never split.
func srtDomain(s string) (host string, port int, ok bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", 0, false
	}
	host = s
	portOf := func(p string) (int, bool) {
		n, err := strconv.Atoi(p)
		return n, err == nil && n >= 1 && n <= 65535
	}
	switch i := strings.LastIndex(s, ":"); {
	case strings.HasPrefix(s, "["):
		inner, rest, closed := strings.Cut(s[1:], "]")
		if !closed {
			return "", 0, false
		}
		host = inner
		if rest != "" {
			p, pok := portOf(strings.TrimPrefix(rest, ":"))
			if !pok || !strings.HasPrefix(rest, ":") {
				return "", 0, false
			}
			port = p
		}
	case i > 0 && !strings.Contains(s[:i], ":"):
		p, pok := portOf(s[i+1:])
		if !pok {
			return "", 0, false
		}
		host, port = s[:i], p
	}
	if strings.HasPrefix(host, "*.") {
		host = "*" + host // any depth of subdomains: Corral's **.
	}
	return strings.ToLower(host), port, true
}

func srtCredentials(b *builder, cr *yaml.Node) {
	for i, n := range items(get(cr, "files")) {
		key, p, mode := idx("credentials.files", i), str(get(n, "path")), str(get(n, "mode"))
		if mode == "mask" {
			b.loss(Warning, line(n), key, "Corral cannot mask a file's secrets: %s is denied instead where it is reachable (a Corral credential keeps a value host-side; docs/policy.md#credentials)", p)
		}
		b.denyPath(n, key, strings.TrimSuffix(p, "/**"), p)
	}
	for i, n := range items(get(cr, "envVars")) {
		key, name, mode := idx("credentials.envVars", i), str(get(n, "name")), str(get(n, "mode"))
		if mode == "mask" {
			b.loss(Warning, line(n), key, "not imported: to hand the sandbox a placeholder for %s and let the proxy put the value in requests, declare it as a Corral credential (docs/policy.md#credentials); until then it is not passed at all", name)
			continue
		}
		b.excludeEnv(line(n), key, []string{name}, false)
	}
	keys, _ := pairs(cr)
	for _, k := range keys {
		switch k.Value {
		case "files", "envVars":
		default:
			b.loss(Info, line(k), "credentials."+k.Value, "not imported: Corral's credentials section has its own form (docs/policy.md#credentials)")
		}
	}
}

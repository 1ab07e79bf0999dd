package policyimport

import (
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/corral-sandbox/corral/policy"
)

// importCodex maps an OpenAI Codex CLI config.toml (codex-rs/config:
// config_toml.rs, types.rs, permissions_toml.rs, profile_toml.rs;
// developers.openai.com/codex/permissions). Two syntaxes exist and do not
// mix: the legacy sandbox_mode (read-only, workspace-write,
// danger-full-access) with [sandbox_workspace_write], chosen when
// sandbox_mode is set at the top or in the active [profiles.NAME]; else
// default_permissions naming a built-in (:read-only, :workspace,
// :danger-full-access) or a [permissions.NAME] profile (extends chains
// merged, the child's keys winning). Without either, a project with a
// trust decision is workspace-write, others read-only (config_toml.rs
// derive_permission_profile).
//
// Codex reads the whole filesystem in every mode; Corral only the system
// directories, the working directory and what is listed (a warning).
// Its read-only carve-outs in writable roots (.git, .agents, .codex) are
// in Corral's protected names already.
func importCodex(b *builder, data []byte) error {
	root, err := parseTOML(b.file, data)
	if err != nil {
		return err
	}
	active := str(get(root, "profile"))
	prof := get(get(root, "profiles"), active)
	mode, modeNode := str(get(prof, "sandbox_mode")), get(prof, "sandbox_mode")
	if mode == "" {
		mode, modeNode = str(get(root, "sandbox_mode")), get(root, "sandbox_mode")
	}
	if active != "" {
		b.comments = append(b.comments, "the active profile: "+active+" (the file's `profile`)")
	}
	dp := str(get(root, "default_permissions"))
	switch {
	case mode != "":
		codexMode(b, root, mode, modeNode)
	case dp != "":
		codexPermissions(b, root, dp, get(root, "default_permissions"))
	default:
		mode = "read-only"
		if keys, _ := pairs(get(root, "projects")); len(keys) > 0 {
			mode = "workspace-write"
			b.loss(Info, line(keys[0]), "projects", "no sandbox_mode: Codex runs a project it has a trust decision for workspace-write, so that is what was imported (others would be read-only)")
		}
		codexMode(b, root, mode, nil)
	}
	codexEnv(b, get(root, "shell_environment_policy"))
	for _, k := range []string{"approval_policy", "approvals_reviewer"} {
		if n := get(root, k); n != nil {
			b.loss(Info, line(n), k, "not imported: Corral asks no one before a command; what it may ask for while it runs (folders, hosts) is the policy's consent section")
		}
	}
	if n := get(get(root, "features"), "use_legacy_landlock"); n != nil {
		b.loss(Info, line(n), "features.use_legacy_landlock", "not needed: Corral applies Landlock (and its other layers) itself")
	}
	return nil
}

// codexMode maps a legacy sandbox_mode.
func codexMode(b *builder, root *yaml.Node, mode string, at *yaml.Node) {
	key := "sandbox_mode"
	from := b.at(line(at), key)
	b.loss(Warning, line(at), key, "Codex lets the command read the whole filesystem; Corral grants only the system directories, the working directory and the entries below: add filesystem.read_only entries for anything else it reads")
	ww := get(root, "sandbox_workspace_write")
	switch mode {
	case "read-only":
		codexReadOnlyWorkdir(b, from)
		if ww != nil {
			b.loss(Info, line(ww), "sandbox_workspace_write", "not used: Codex reads it only in workspace-write mode")
		}
	case "workspace-write":
		b.includeWorkdir = &entry{value: "true", from: from}
		for i, n := range items(get(ww, "writable_roots")) {
			b.grantWrite(n, idx("sandbox_workspace_write.writable_roots", i), str(n))
		}
		if on, _ := boolean(get(ww, "network_access")); on {
			b.setNetwork(policy.NetworkHost, b.at(line(get(ww, "network_access")), "sandbox_workspace_write.network_access"))
			b.loss(Warning, line(get(ww, "network_access")), "sandbox_workspace_write.network_access", "imported as network mode host (unfiltered, as Codex's); network mode proxy with an allow list of the hosts it needs is stricter")
		}
		if on, _ := boolean(get(ww, "exclude_slash_tmp")); !on {
			b.loss(Warning, line(ww), "sandbox_workspace_write", "Codex lets the command write the host's /tmp (and $TMPDIR); Corral gives it a private /tmp, discarded afterwards: grant a directory read-write if files must outlive the run")
		}
		b.loss(Info, line(at), key, "Codex's read-only .git, .agents and .codex in writable roots are among Corral's protected names")
	case "danger-full-access":
		b.includeWorkdir = &entry{value: "true", from: from}
		b.setNetwork(policy.NetworkHost, from)
		b.loss(Warning, line(at), key, "Codex runs the command unsandboxed; Corral has no such mode: imported as the default filesystem rules with network mode host")
	default:
		b.loss(Warning, line(at), key, "not imported: unknown sandbox_mode %q; the default (read-only working directory) was used", mode)
		codexReadOnlyWorkdir(b, from)
	}
}

// codexReadOnlyWorkdir makes the working directory read-only.
func codexReadOnlyWorkdir(b *builder, from string) {
	b.includeWorkdir = &entry{value: "false", from: from}
	addPath(&b.readOnly, "{workdir}", false, from)
}

// grantWrite adds raw (a Codex path: absolute, ~ or relative to the
// working directory) read-write.
func (b *builder) grantWrite(n *yaml.Node, key, raw string) {
	p, ok := corralPath(strings.TrimSuffix(raw, "/**"))
	switch {
	case !ok:
		b.loss(Warning, line(n), key, "not imported: %q has no Corral path form (a pattern or ..)", raw)
	case p == "{workdir}":
		b.includeWorkdir = &entry{value: "true", from: b.at(line(n), key)}
	case under(p, "/tmp"):
		b.loss(Info, line(n), key, "not imported: the sandbox has a private /tmp, writable and discarded afterwards")
	case isRefusedRW(p):
		b.loss(Warning, line(n), key, "not imported: Corral refuses %s read-write (docs/policy.md); grant a directory inside it", p)
	default:
		addPath(&b.readWrite, p, true, b.at(line(n), key))
	}
}

// codexPermissions maps default_permissions: a built-in or a named
// profile of [permissions].
func codexPermissions(b *builder, root *yaml.Node, name string, at *yaml.Node) {
	switch name {
	case ":read-only":
		codexMode(b, root, "read-only", at)
		return
	case ":workspace":
		codexMode(b, root, "workspace-write", at)
		return
	case ":danger-full-access":
		codexMode(b, root, "danger-full-access", at)
		return
	}
	fs, net, roots, base, err := codexProfile(get(root, "permissions"), name, 0)
	if err != "" {
		b.loss(Warning, line(at), "default_permissions", "not imported: %s; the default (read-only working directory) was used", err)
		codexReadOnlyWorkdir(b, b.at(line(at), "default_permissions"))
		return
	}
	b.comments = append(b.comments, "the permission profile: "+name+" (default_permissions)")
	key := "permissions." + name
	switch base {
	case ":workspace":
		b.includeWorkdir = &entry{value: "true", from: b.at(line(at), key+".extends")}
		b.loss(Warning, line(at), key, "Codex lets the command read the whole filesystem (:root = read); Corral grants only the system directories, the working directory and the entries below")
	case ":read-only":
		codexReadOnlyWorkdir(b, b.at(line(at), key+".extends"))
		b.loss(Warning, line(at), key, "Codex lets the command read the whole filesystem (:root = read); Corral grants only the system directories, the working directory and the entries below")
	default: // nothing but what it lists: the workdir only if listed
		codexReadOnlyWorkdir(b, "")
		b.readOnly = b.readOnly[:len(b.readOnly)-1]
		b.includeWorkdir = &entry{value: "false", from: b.at(line(at), key)}
	}
	minimal := base != ""
	for _, e := range fs {
		k := key + ".filesystem." + e.path
		switch {
		case e.path == "glob_scan_max_depth":
		case e.path == ":minimal":
			minimal = true
		case e.path == ":root":
			if e.access == "read" && base == "" {
				b.loss(Warning, e.line, k, "Codex lets the command read the whole filesystem; Corral grants only the system directories and the entries listed")
			} else if e.access == "write" {
				b.loss(Warning, e.line, k, "not imported: Corral refuses / read-write")
			}
		case e.path == ":tmpdir" || e.path == ":slash_tmp":
			b.loss(Info, e.line, k, "not imported: the sandbox has a private /tmp, writable and discarded afterwards")
		case e.path == ":workspace_roots" || e.path == ":project_roots":
			codexWorkspace(b, e, k, roots)
		case strings.HasPrefix(e.path, ":"):
			b.loss(Info, e.line, k, "not imported: Codex ignores an unknown special path too")
		default:
			b.codexAccess(e, k, e.path)
		}
	}
	if !minimal {
		b.loss(Error, line(at), key, "the profile lets the command read only what it lists; Corral's policy always grants the system directories (/usr, /etc, ...) read-only")
	}
	codexNetwork(b, root, net, key)
}

// codexEntry is one filesystem entry of a profile: a path or special
// name with an access (read, write, deny), or a scoped table of them.
type codexEntry struct {
	path, access string
	sub          []codexEntry
	line         int
}

// codexProfile resolves profile name of perms, following extends (at
// most 8 deep): its filesystem entries (the child's replacing the
// parent's of the same path), network table, workspace roots, and the
// built-in it extends ("" for none).
func codexProfile(perms *yaml.Node, name string, depth int) (fs []codexEntry, net *yaml.Node, roots []*yaml.Node, base, err string) {
	p := get(perms, name)
	if p == nil {
		return nil, nil, nil, "", "no [permissions." + name + "] profile"
	}
	if depth > 8 {
		return nil, nil, nil, "", "permissions." + name + ": extends goes more than 8 deep"
	}
	if parent := str(get(p, "extends")); parent != "" {
		if strings.HasPrefix(parent, ":") {
			base = parent
		} else {
			fs, net, roots, base, err = codexProfile(perms, parent, depth+1)
			if err != "" {
				return
			}
		}
	}
	keys, vals := pairs(get(p, "filesystem"))
	for i, k := range keys {
		e := codexEntry{path: k.Value, line: line(k)}
		if vals[i].Kind == yaml.MappingNode {
			sk, sv := pairs(vals[i])
			for j := range sk {
				e.sub = append(e.sub, codexEntry{path: sk[j].Value, access: str(sv[j]), line: line(sk[j])})
			}
		} else {
			e.access = str(vals[i])
		}
		replaced := false
		for j := range fs {
			if fs[j].path == e.path {
				fs[j], replaced = e, true
			}
		}
		if !replaced {
			fs = append(fs, e)
		}
	}
	if n := get(p, "network"); n != nil {
		net = n
	}
	rk, rv := pairs(get(p, "workspace_roots"))
	for i := range rk {
		if on, _ := boolean(rv[i]); on {
			roots = append(roots, rk[i])
		}
	}
	return
}

// codexAccess maps one path entry: read → read_only, write → read_write,
// deny (or "none") → deny.
func (b *builder) codexAccess(e codexEntry, key, raw string) {
	n := &yaml.Node{Line: e.line}
	switch e.access {
	case "read":
		p, ok := corralPath(strings.TrimSuffix(raw, "/**"))
		switch {
		case !ok:
			b.loss(Warning, e.line, key, "not imported: %q has no Corral path form", raw)
		case under(p, "{workdir}") && b.writable(p):
			if rel, ok := strings.CutPrefix(p, "{workdir}/"); ok {
				p = rel
			}
			addPath(&b.protected, p, false, b.at(e.line, key))
		case !b.reachable(p):
			addPath(&b.readOnly, p, true, b.at(e.line, key))
		}
	case "write":
		b.grantWrite(n, key, raw)
	case "deny", "none":
		b.denyPath(n, key, strings.TrimSuffix(raw, "/**"), raw)
	default:
		b.loss(Warning, e.line, key, "not imported: unknown access %q (read, write or deny)", e.access)
	}
}

// codexWorkspace maps the :workspace_roots entry: the working directory
// and the profile's workspace_roots, with its scoped subpaths.
func codexWorkspace(b *builder, e codexEntry, key string, roots []*yaml.Node) {
	access := e.access
	var subs []codexEntry
	for _, s := range e.sub {
		if s.path == "." {
			access = s.access
			continue
		}
		subs = append(subs, s)
	}
	rootsOf := []string{"{workdir}"}
	for _, r := range roots {
		p, ok := corralPath(r.Value)
		if !ok {
			b.loss(Warning, line(r), "workspace_roots."+r.Value, "not imported: no Corral path form")
			continue
		}
		rootsOf = append(rootsOf, p)
	}
	for _, r := range rootsOf {
		from := b.at(e.line, key)
		switch {
		case r == "{workdir}" && access == "write":
			b.includeWorkdir = &entry{value: "true", from: from}
		case r == "{workdir}" && access == "read":
			codexReadOnlyWorkdir(b, from)
		case access == "write":
			b.grantWrite(&yaml.Node{Line: e.line}, key+" ("+r+")", r)
		case access == "read":
			if !b.reachable(r) {
				addPath(&b.readOnly, r, true, from)
			}
		}
		for _, s := range subs {
			b.codexAccess(s, key+"."+s.path, path.Join(strings.Replace(r, "{workdir}", ".", 1), s.path))
		}
	}
}

// codexNetwork maps a profile's network table.
func codexNetwork(b *builder, root, net *yaml.Node, key string) {
	key += ".network"
	on, _ := boolean(get(net, "enabled"))
	if !on {
		return
	}
	proxied, _ := boolean(get(get(root, "features"), "network_proxy"))
	if !proxied && get(get(root, "features"), "network_proxy") != nil && get(get(root, "features"), "network_proxy").Kind == yaml.MappingNode {
		proxied = true
	}
	dk, dv := pairs(get(net, "domains"))
	if !proxied || len(dk) == 0 {
		b.setNetwork(policy.NetworkHost, b.at(line(get(net, "enabled")), key+".enabled"))
		b.loss(Warning, line(get(net, "enabled")), key+".enabled", "imported as network mode host: without features.network_proxy and domains Codex's network is unfiltered; network mode proxy with an allow list is stricter")
		return
	}
	b.setNetwork(policy.NetworkProxy, b.at(line(get(net, "enabled")), key+".enabled"))
	extra := ""
	if str(get(net, "mode")) == "limited" {
		extra = `access: "read-only"` // GET, HEAD, OPTIONS, as Codex's limited mode
		b.loss(Info, line(get(net, "mode")), key+".mode", "limited (GET, HEAD, OPTIONS) is each allow entry's access: read-only; the proxy inspects those hosts' TLS to decide each request")
	}
	for i, k := range dk {
		pat, act, from := k.Value, str(dv[i]), b.at(line(k), key+".domains."+k.Value)
		hostsOf := []string{pat}
		switch {
		case strings.HasPrefix(pat, "**."):
			hostsOf = []string{pat, strings.TrimPrefix(pat, "**.")} // the apex too
		case strings.HasPrefix(pat, "*."):
			hostsOf = []string{"*" + pat} // subdomains at any depth
		case pat == "*" || pat == "**":
			b.loss(Warning, line(k), key+".domains."+pat, "not imported: a bare wildcard")
			continue
		}
		for _, h := range hostsOf {
			switch act {
			case "allow":
				b.addEndpoint(&b.allow, strings.ToLower(h), nil, extra, from)
			case "deny":
				b.addEndpoint(&b.denyHosts, strings.ToLower(h), nil, "", from)
			default:
				b.loss(Warning, line(k), key+".domains."+pat, "not imported: unknown action %q", act)
			}
		}
	}
	b.loss(Info, line(get(net, "domains")), key+".domains", "Codex's domains match every port; Corral's allow entries without ports are 80 and 443")
	nk, _ := pairs(net)
	for _, k := range nk {
		switch k.Value {
		case "enabled", "mode", "domains":
		case "unix_sockets":
			b.loss(Warning, line(k), key+".unix_sockets", "not imported: Corral allows unix sockets all or none (network.unix_sockets), not by path; they stay refused")
		case "dangerously_allow_all_unix_sockets":
			if on, _ := boolean(get(net, k.Value)); on {
				b.unixSockets = &entry{value: string(policy.UnixSocketsAllow), from: b.at(line(k), key+"."+k.Value)}
			}
		case "allow_local_binding":
			b.loss(Warning, line(k), key+"."+k.Value, "not imported: with network mode proxy the sandbox has no interface to bind a local port on")
		default:
			b.loss(Warning, line(k), key+"."+k.Value, "not imported: Corral's egress proxy dials allowed hosts itself; it neither chains to another proxy nor offers SOCKS or a MITM hook")
		}
	}
}

// codexCore is the Unix variable set of inherit = "core"
// (codex-rs/protocol/src/shell_environment.rs).
var codexCore = []string{"PATH", "SHELL", "TMPDIR", "TEMP", "TMP", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "LOGNAME", "USER"}

// codexEnv maps shell_environment_policy to process.env: include_only
// (or the inherit set) as the pass list, exclude taken out of it, set as
// set. Corral sets HOME, USER, LOGNAME, SHELL and TMPDIR for the sandbox
// itself, so those are not passed.
func codexEnv(b *builder, env *yaml.Node) {
	key := "shell_environment_policy"
	if env == nil {
		b.loss(Warning, 0, key, "Codex passes the whole environment by default; Corral passes only process.env.pass (PATH, LANG, TERM, ...)")
		return
	}
	var pass []string
	src := ""
	switch inc := items(get(env, "include_only")); {
	case len(inc) > 0:
		for _, n := range inc {
			pass = append(pass, str(n))
		}
		src = key + ".include_only"
	case str(get(env, "inherit")) == "core":
		pass, src = codexCore, key+".inherit"
	case str(get(env, "inherit")) == "none":
		pass, src = []string{}, key+".inherit"
	default:
		b.loss(Warning, line(env), key, "Codex passes the whole environment (inherit = all); Corral passes only process.env.pass (PATH, LANG, TERM, ...)")
	}
	if pass != nil {
		at := line(get(env, strings.TrimPrefix(src, key+".")))
		b.envPass = nil
		for _, v := range pass {
			if slices.Contains(codexOwn, strings.ToUpper(v)) {
				continue
			}
			b.envPass = append(b.envPass, entry{value: quote(v), from: b.at(at, src)})
		}
		b.loss(Info, at, src, "HOME, USER, LOGNAME, SHELL and TMPDIR are the sandbox's own; the rest is process.env.pass (Corral matches names case-sensitively, Codex does not)")
	}
	for i, n := range items(get(env, "exclude")) {
		b.codexExclude(n, idx(key+".exclude", i), str(n))
	}
	sk, sv := pairs(get(env, "set"))
	order := make([]int, len(sk))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return sk[order[i]].Value < sk[order[j]].Value })
	for _, i := range order {
		b.envSet = append(b.envSet, entry{value: quote(sk[i].Value) + ": " + quote(str(sv[i])), from: b.at(line(sk[i]), key+".set."+sk[i].Value)})
	}
	if on, ok := boolean(get(env, "ignore_default_excludes")); ok && !on {
		b.loss(Info, line(get(env, "ignore_default_excludes")), key+".ignore_default_excludes", "already so unless passed by name: Corral passes no *KEY*, *SECRET* or *TOKEN* variable that process.env.pass does not list")
	}
}

// codexOwn are the variables Corral sets for the sandbox itself.
var codexOwn = []string{"HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "TEMP", "TMP"}

// codexExclude takes the variables pattern matches (Codex: a
// case-insensitive wildcard) out of the pass list.
func (b *builder) codexExclude(n *yaml.Node, key, pattern string) {
	kept := b.envPass[:0]
	removed := false
	for _, e := range b.envPass {
		v, _ := strconv.Unquote(e.value)
		if ok, _ := path.Match(strings.ToUpper(pattern), strings.ToUpper(v)); ok {
			removed = true
			continue
		}
		if hasGlob(v) && !hasGlob(pattern) {
			if ok, _ := path.Match(v, pattern); ok {
				b.loss(Error, line(n), key, "Corral passes %s (process.env.pass %s): narrow that pattern to keep it out", pattern, v)
			}
		}
		kept = append(kept, e)
	}
	b.envPass = kept
	if removed {
		b.loss(Info, line(n), key, "taken out of process.env.pass")
	}
}

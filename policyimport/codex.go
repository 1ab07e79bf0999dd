package policyimport

import (
	"path"
	"slices"
	"sort"
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
	case refusedRW(p):
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
	if i := slices.IndexFunc(fs, func(e codexEntry) bool { return e.path == ":minimal" }); i >= 0 && base == "" {
		// Codex's :minimal on Linux (linux-sandbox/src/bwrap.rs): /bin,
		// /sbin, /usr, /etc, /lib, /lib64 (and Nix's store), Corral's
		// system directories but /opt.
		dropPath(&b.readOnly, "/opt")
		b.loss(Info, fs[i].line, key+".filesystem.:minimal", "Codex's platform directories (/bin, /sbin, /usr, /etc, /lib, /lib64) are among Corral's system directories; /opt is not granted; Corral also grants /lib32 and /libx32, links into /usr on a merged-/usr host")
	}
	// Grants first, then read-only carve-outs, then denies, whatever the
	// file's order: each is judged against what the grants before it
	// reach (Codex decides by specificity, deny beating write beating
	// read for one path, not by order).
	for phase := phaseWrite; phase <= phaseDeny; phase++ {
		for _, e := range fs {
			k := key + ".filesystem." + e.path
			switch {
			case e.path == ":workspace_roots" || e.path == ":project_roots":
				codexWorkspace(b, e, k, roots, phase)
			case phase != phaseWrite:
				if !strings.HasPrefix(e.path, ":") && e.path != "glob_scan_max_depth" {
					b.codexAccess(e, k, e.path, phase)
				}
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
			case strings.HasPrefix(e.path, ":"):
				b.loss(Info, e.line, k, "not imported: Codex ignores an unknown special path too")
			default:
				b.codexAccess(e, k, e.path, phase)
			}
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

// The phases of a profile's filesystem entries (codexPermissions).
const (
	phaseWrite = iota
	phaseRead
	phaseDeny
)

// codexPhase is the phase an access is mapped in (an unknown access is
// reported in the first).
func codexPhase(access string) int {
	switch access {
	case "read":
		return phaseRead
	case "deny", "none":
		return phaseDeny
	}
	return phaseWrite
}

// codexAccess maps one path entry in its phase: write → read_write, read
// → read_only (protected where a read-write grant covers it: Codex's more
// specific entry wins), deny (or "none") → deny.
func (b *builder) codexAccess(e codexEntry, key, raw string, phase int) {
	if codexPhase(e.access) != phase {
		return
	}
	n := &yaml.Node{Line: e.line}
	switch e.access {
	case "read":
		p, ok := corralPath(strings.TrimSuffix(raw, "/**"))
		switch {
		case !ok:
			b.loss(Warning, e.line, key, "not imported: %q has no Corral path form", raw)
		case p == "{workdir}" && b.writable(p), slices.ContainsFunc(b.readWrite, func(e entry) bool { return e.value == quote(p) }):
			// write beats read for one path (Codex's conflict order)
		case b.writable(p):
			// Inside the working directory by its relative name (kept
			// read-only deeper in the tree too), elsewhere by its path.
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

// codexWorkspace maps, in its phase, the :workspace_roots entry: the
// working directory and the profile's workspace_roots, with its scoped
// subpaths.
func codexWorkspace(b *builder, e codexEntry, key string, roots []*yaml.Node, phase int) {
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
			if phase == phaseWrite {
				b.loss(Warning, line(r), "workspace_roots."+r.Value, "not imported: no Corral path form")
			}
			continue
		}
		rootsOf = append(rootsOf, p)
	}
	for _, r := range rootsOf {
		from := b.at(e.line, key)
		switch {
		case codexPhase(access) != phase:
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
			b.codexAccess(s, key+"."+s.path, path.Join(strings.Replace(r, "{workdir}", ".", 1), s.path), phase)
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
		pat, act, dkey := codexPattern(k.Value), str(dv[i]), key+".domains."+k.Value
		hostsOf := []string{pat}
		switch {
		case strings.HasPrefix(pat, "**."):
			hostsOf = []string{pat, strings.TrimPrefix(pat, "**.")} // the apex too
		case strings.HasPrefix(pat, "*."):
			hostsOf = []string{"*" + pat} // subdomains at any depth
		case pat == "*" || pat == "**":
			b.loss(Warning, line(k), dkey, "not imported: a bare wildcard")
			continue
		}
		for _, h := range hostsOf {
			switch act {
			case "allow":
				b.endpoint(listAllow, h, nil, extra, line(k), dkey)
			case "deny":
				b.endpoint(listDeny, h, nil, "", line(k), dkey)
			default:
				b.loss(Warning, line(k), dkey, "not imported: unknown action %q", act)
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

// codexPattern is a domains key as Codex's proxy reads it
// (network-proxy/src/policy.rs normalize_pattern): a leading "**." or
// "*." kept, the rest trimmed, lower-cased, without brackets, a trailing
// dot or a ":port" (a host with one colon: Codex matches it on every
// port).
func codexPattern(p string) string {
	p = strings.TrimSpace(p)
	prefix := ""
	for _, w := range []string{"**.", "*."} {
		if rest, ok := strings.CutPrefix(p, w); ok {
			prefix, p = w, rest
			break
		}
	}
	if strings.HasPrefix(p, "[") {
		if inner, _, ok := strings.Cut(p[1:], "]"); ok {
			p = inner
		}
	} else if strings.Count(p, ":") == 1 {
		p, _, _ = strings.Cut(p, ":")
	}
	return prefix + strings.TrimSuffix(strings.ToLower(p), ".")
}

// codexCore is the Unix variable set of inherit = "core"
// (codex-rs/protocol/src/shell_environment.rs UNIX_CORE_ENV_VARS).
var codexCore = []string{"PATH", "SHELL", "TMPDIR", "TEMP", "TMP", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "LOGNAME", "USER"}

// codexDefaultExcludes are the patterns Codex drops when
// ignore_default_excludes is false (shell_environment.rs populate_env).
var codexDefaultExcludes = []string{"*KEY*", "*SECRET*", "*TOKEN*"}

// codexEnv maps shell_environment_policy to process.env as Codex's
// populate_env (codex-rs/protocol/src/shell_environment.rs) builds the
// environment: the inherit set (all, core or none); less the default
// excludes unless ignore_default_excludes (default true); less exclude;
// plus set; then, when include_only is non-empty, only the variables it
// matches, set ones too. Patterns are wildcards ('*', '?') compared
// without case (WildMatchPattern::new_case_insensitive). Corral's pass
// list takes names and prefixes ("LC_*") and compares with case: an
// include_only pattern it cannot write is left out (Corral passes less);
// an exclude it cannot carve out of a prefix takes the prefix out too.
// Corral sets HOME, USER, LOGNAME, SHELL and TMPDIR for the sandbox
// itself, so those are not passed.
func codexEnv(b *builder, env *yaml.Node) {
	key := "shell_environment_policy"
	if env == nil {
		b.loss(Warning, 0, key, "Codex passes the whole environment by default; Corral passes only process.env.pass (PATH, LANG, TERM, ...)")
		return
	}
	inherit := str(get(env, "inherit"))
	include := items(get(env, "include_only"))
	var includes []string
	for _, n := range include {
		includes = append(includes, str(n))
	}
	matchesInclude := func(name string) bool {
		for _, pat := range includes {
			if wildMatch(pat, name, true) {
				return true
			}
		}
		return len(includes) == 0
	}
	switch {
	case inherit == "core" || inherit == "none":
		src := key + ".inherit"
		at := line(get(env, "inherit"))
		b.envPass = nil
		if inherit == "core" {
			for _, v := range codexCore {
				if !slices.Contains(codexOwn, v) && matchesInclude(v) {
					b.passEnv(v, at, src)
				}
			}
		}
		if len(include) > 0 {
			b.loss(Info, line(get(env, "include_only")), key+".include_only", "only the inherit set's variables that include_only matches are passed, as Codex's")
		}
		b.loss(Info, at, src, "HOME, USER, LOGNAME, SHELL and TMPDIR are the sandbox's own; the rest is process.env.pass")
	case len(include) > 0: // inherit all, narrowed by include_only
		at, src := line(get(env, "include_only")), key+".include_only"
		b.envPass = nil
		var unwritable []string
		for i, n := range include {
			v := str(n)
			prefix, star := strings.CutSuffix(v, "*")
			switch {
			case slices.Contains(codexOwn, strings.ToUpper(v)):
			case strings.ContainsAny(prefix, "*?"):
				unwritable = append(unwritable, v)
			case star && prefix == "":
				unwritable = append(unwritable, v) // every variable: Corral passes only what it names
			default:
				b.passEnv(v, line(n), idx(src, i))
			}
		}
		if len(unwritable) > 0 {
			b.loss(Warning, at, src, "not passed: %s (Corral's process.env.pass takes names and prefixes ending in *, and passes no whole environment); list the variables by name", strings.Join(unwritable, ", "))
		}
		b.loss(Info, at, src, "HOME, USER, LOGNAME, SHELL and TMPDIR are the sandbox's own; the rest is process.env.pass (Corral matches names with case, Codex without: a variable spelled otherwise is not passed)")
	default:
		b.loss(Warning, line(env), key, "Codex passes the whole environment (inherit = all); Corral passes only process.env.pass (PATH, LANG, TERM, ...)")
	}
	if on, ok := boolean(get(env, "ignore_default_excludes")); ok && !on {
		n := get(env, "ignore_default_excludes")
		b.excludeEnv(line(n), key+".ignore_default_excludes", codexDefaultExcludes, true)
	}
	for i, n := range items(get(env, "exclude")) {
		b.excludeEnv(line(n), idx(key+".exclude", i), []string{str(n)}, true)
	}
	sk, sv := pairs(get(env, "set"))
	order := make([]int, len(sk))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return sk[order[i]].Value < sk[order[j]].Value })
	for _, i := range order {
		k := key + ".set." + sk[i].Value
		if !matchesInclude(sk[i].Value) {
			b.loss(Info, line(sk[i]), k, "not set: include_only does not match it, and Codex applies include_only after set")
			continue
		}
		b.setEnv(sk[i].Value, str(sv[i]), line(sk[i]), k)
	}
}

// codexOwn are the variables Corral sets for the sandbox itself.
var codexOwn = []string{"HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "TEMP", "TMP"}

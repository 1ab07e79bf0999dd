package policyimport

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/corral-sandbox/corral/policy"
)

// importOpenClaw maps an OpenClaw configuration's sandbox settings
// (~/.openclaw/openclaw.json, JSON5; OpenClaw's docs/gateway/
// configuration.md and its sandbox config resolver): agents.defaults.sandbox
// with the default agent's own sandbox merged over it (agents.entries.ID,
// or the legacy agents.list[]; the default agent is the one marked
// default, else main). Corral's policy is one per sandbox, so other
// agents' overrides are reported, not merged.
//
// workspaceAccess none, ro and rw are the working directory (the agent's
// workspace, where corral runs) not granted, read-only and read-write;
// docker.binds sources are granted at their own paths (ro: read-only,
// else read-write); network none stays none, bridge or a named network
// (egress without a host list) is host; docker.env is process.env.set,
// with no host variable passed (OpenClaw passes none either); memory,
// cpus, pidsLimit and ulimits.nofile are the limits.
func importOpenClaw(b *builder, data []byte) error {
	js, err := json5ToJSON(data)
	if err != nil {
		return err
	}
	root, err := parseTree(b.file, js)
	if err != nil {
		return err
	}
	agents := get(root, "agents")
	sb := get(get(agents, "defaults"), "sandbox")
	b.containerSystem(line(sb), "agents.defaults.sandbox.docker.image", "the container image's (the container reads its whole image)", []string{"/usr", "/etc"})
	id, akey, own := openclawDefaultAgent(b, agents)
	if own != nil {
		b.comments = append(b.comments, "agent "+id+"'s sandbox merged over agents.defaults.sandbox")
	}
	val := func(path ...string) (*yaml.Node, string) {
		n, key := own, akey+".sandbox"
		for _, p := range path {
			n, key = get(n, p), key+"."+p
		}
		if n != nil {
			return n, key
		}
		n, key = sb, "agents.defaults.sandbox"
		for _, p := range path {
			n, key = get(n, p), key+"."+p
		}
		return n, key
	}
	switch n, key := val("mode"); str(n) {
	case "", "off":
		b.loss(Warning, line(n), key, "OpenClaw does not sandbox these sessions; Corral sandboxes every command it runs")
	case "non-main":
		b.loss(Warning, line(n), key, "OpenClaw runs the main session on the host, unsandboxed; Corral sandboxes every command it runs")
	}
	if n, key := val("backend"); str(n) != "" && str(n) != "docker" {
		b.loss(Info, line(n), key, "not imported: Corral's provider (linux, docker, ...) is chosen with --provider")
	}
	n, key := val("workspaceAccess")
	from := b.at(line(n), key)
	switch str(n) {
	case "rw":
		b.includeWorkdir = &entry{value: "true", from: from}
	case "ro":
		codexReadOnlyWorkdir(b, from)
	default: // none, the default: a private workspace, the agent's not mounted
		b.includeWorkdir = &entry{value: "false", from: b.at(line(n), key+" (default none)")}
		b.loss(Info, line(n), key, "none: the agent's workspace (the working directory) is not granted; the sandbox's home and /tmp are private and writable")
	}
	var binds []*yaml.Node
	bindKeys := []string{}
	for _, src := range []struct {
		n   *yaml.Node
		key string
	}{{get(get(sb, "docker"), "binds"), "agents.defaults.sandbox.docker.binds"}, {get(get(own, "docker"), "binds"), akey + ".sandbox.docker.binds"}} {
		for i, bn := range items(src.n) {
			binds, bindKeys = append(binds, bn), append(bindKeys, idx(src.key, i))
		}
	}
	for i, bn := range binds {
		openclawBind(b, bn, bindKeys[i])
	}
	switch n, key := val("docker", "network"); str(n) {
	case "", "none":
	default:
		b.setNetwork(policy.NetworkHost, b.at(line(n), key))
		b.loss(Warning, line(n), key, "imported as network mode host: OpenClaw's %s network reaches any host (it has no host list); network mode proxy with an allow list is stricter", str(n))
	}
	b.envPass = nil
	b.loss(Info, line(sb), "agents.defaults.sandbox.docker.env", "OpenClaw passes no host variable into the sandbox; nor does this policy (process.env.pass is empty; the sandbox's PATH is Corral's default)")
	type envVal struct {
		value string
		line  int
		key   string
	}
	env := map[string]envVal{}
	for _, e := range []struct {
		n   *yaml.Node
		key string
	}{{get(get(sb, "docker"), "env"), "agents.defaults.sandbox.docker.env"}, {get(get(own, "docker"), "env"), akey + ".sandbox.docker.env"}} {
		ks, vs := pairs(e.n)
		for i, k := range ks {
			env[k.Value] = envVal{str(vs[i]), line(k), e.key + "." + k.Value}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		b.setEnv(k, env[k].value, env[k].line, env[k].key)
	}
	if n, key := val("docker", "memory"); str(n) != "" {
		if m, ok := dockerBytes(str(n)); ok {
			b.limits["memory"] = entry{value: quote(m), from: b.at(line(n), key)}
		} else if m != "" {
			b.loss(Warning, line(n), key, "not imported: %s; Corral's default memory limit applies", m)
		} else {
			b.loss(Warning, line(n), key, "not imported: %q is not a size", str(n))
		}
	}
	if n, key := val("docker", "cpus"); str(n) != "" {
		// policy: a cpu limit is at least 0.01 cores (0: none, Docker's too).
		if v, err := strconv.ParseFloat(str(n), 64); err == nil && (v == 0 || v >= 0.01 && v <= 1e6) {
			b.limits["cpu"] = entry{value: strconv.FormatFloat(v, 'g', -1, 64), from: b.at(line(n), key)}
		} else {
			b.loss(Warning, line(n), key, "not imported: %q is not a number of cores Corral takes (0, or 0.01 and more); Corral's default cpu limit applies", str(n))
		}
	}
	if n, key := val("docker", "pidsLimit"); str(n) != "" {
		if v, err := strconv.Atoi(str(n)); err == nil && v > 0 {
			b.limits["pids"] = entry{value: strconv.Itoa(v), from: b.at(line(n), key)}
		}
	}
	if n, key := val("docker", "ulimits", "nofile"); n != nil {
		v := str(n)
		if h := get(n, "hard"); h != nil {
			v = str(h)
		}
		if x, err := strconv.Atoi(v); err == nil && x > 0 {
			b.limits["nofile"] = entry{value: strconv.Itoa(x), from: b.at(line(n), key)}
		}
	}
	for _, d := range []*yaml.Node{get(sb, "docker"), get(own, "docker")} {
		ks, _ := pairs(d)
		for _, k := range ks {
			switch k.Value {
			case "binds", "network", "env", "memory", "cpus", "pidsLimit":
			case "readOnlyRoot", "tmpfs", "capDrop":
				b.loss(Info, line(k), "docker."+k.Value, "already so: the sandbox's root is read-only but for its grants, /tmp is private, and it has no capabilities")
			case "ulimits":
				b.loss(Info, line(k), "docker.ulimits", "nofile is process.limits.nofile; Corral has no other rlimit setting (pids is its task limit)")
			case "dangerouslyAllowExternalBindSources":
			default:
				b.loss(Info, line(k), "docker."+k.Value, "not imported: a container setting Corral has no equivalent for (its image, user and filters are its own)")
			}
		}
	}
	openclawTools(b, get(root, "tools"))
	return nil
}

// openclawDefaultAgent is the default agent's id, key path and sandbox
// block; other agents with a sandbox of their own are reported.
func openclawDefaultAgent(b *builder, agents *yaml.Node) (string, string, *yaml.Node) {
	type agent struct {
		id  string
		n   *yaml.Node
		key string
	}
	var all []agent
	ks, vs := pairs(get(agents, "entries"))
	for i, k := range ks {
		all = append(all, agent{k.Value, vs[i], "agents.entries." + k.Value})
	}
	for i, n := range items(get(agents, "list")) {
		all = append(all, agent{str(get(n, "id")), n, idx("agents.list", i)})
	}
	def := -1
	for i, a := range all {
		if on, _ := boolean(get(a.n, "default")); on {
			def = i
		}
	}
	if def < 0 {
		for i, a := range all {
			if a.id == "main" {
				def = i
			}
		}
	}
	id, key, own := "main", "agents.entries.main", (*yaml.Node)(nil)
	if def >= 0 {
		id, key, own = all[def].id, all[def].key, get(all[def].n, "sandbox")
	}
	for i, a := range all {
		if i != def && get(a.n, "sandbox") != nil {
			b.loss(Info, line(get(a.n, "sandbox")), a.key+".sandbox", "not imported: a Corral policy is one sandbox's; import agent %s's own with its settings in agents.defaults, or write a policy for it", a.id)
		}
	}
	return id, key, own
}

// openclawBind grants a docker bind's host path ("host:container[:opts]").
func openclawBind(b *builder, n *yaml.Node, key string) {
	parts := strings.Split(str(n), ":")
	if len(parts) < 2 {
		b.loss(Warning, line(n), key, "not imported: %q is not host:container[:options]", str(n))
		return
	}
	host, ctr := parts[0], parts[1]
	ro := len(parts) > 2 && strings.Contains(","+parts[2]+",", ",ro,")
	p, ok := corralPath(host)
	if !ok || !strings.HasPrefix(host, "/") {
		b.loss(Warning, line(n), key, "not imported: %q is not an absolute host path", host)
		return
	}
	if p != ctr {
		b.loss(Info, line(n), key, "%s is seen at its own path in the sandbox, not at %s", p, ctr)
	}
	if ro {
		if !b.reachable(p) {
			addPath(&b.readOnly, p, true, b.at(line(n), key))
		}
		return
	}
	b.grantWrite(n, key, p)
}

// openclawTools reports the tool policy and elevated exec.
func openclawTools(b *builder, tools *yaml.Node) {
	if t := get(get(tools, "sandbox"), "tools"); t != nil {
		b.loss(Info, line(t), "tools.sandbox.tools", "not imported: which tools the agent may call is OpenClaw's own; Corral decides what any of them may do to files, the network and the machine")
	}
	el := get(tools, "elevated")
	if on, ok := boolean(get(el, "enabled")); ok && !on {
		return
	}
	b.loss(Warning, line(el), "tools.elevated", "OpenClaw's elevated exec (enabled unless set false) runs commands on the host, outside the sandbox; nothing run under Corral escapes its policy")
}

// dockerBytes is a docker size ("512m", "2g", "1024") in Corral's form
// ("512M", "2G"), checked with policy.ParseByteSize and more than zero;
// when ok is false, a non-empty s says why.
func dockerBytes(s string) (string, bool) {
	s = strings.TrimSpace(strings.ToUpper(s))
	s = strings.TrimSuffix(s, "B")
	if s == "" {
		return "", false
	}
	num := strings.TrimRight(s, "KMGT")
	if _, err := strconv.ParseFloat(num, 64); err != nil || len(s)-len(num) > 1 {
		return "", false
	}
	switch n, err := policy.ParseByteSize(s); {
	case err != nil:
		return err.Error(), false
	case n <= 0:
		return "a memory limit of " + s + " is no limit", false
	}
	return s, true
}

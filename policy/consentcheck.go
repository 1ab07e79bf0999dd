package policy

import (
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/corral-sandbox/corral/egress/l7"
)

// Refusal fields that name no policy entry (ConsentRefusal.Field).
const (
	// RefusedRequest: the request itself is malformed (a path that is not
	// canonical, not a directory; a wildcard host, a port out of range).
	RefusedRequest = "request"
	// RefusedBuiltIn: Corral's own rule, whatever the policy says (/,
	// the home or above it, /proc, /sys, /dev, /run, /var/run, Corral's
	// state, a read-write grant of a system tree).
	RefusedBuiltIn = "built-in"
)

// AskFolder checks one folder request against the consent ceiling: path is
// the canonical host directory asked for (absolute, clean, symlinks
// resolved, existing), access ro or rw ("" is ro). It is refused, with
// the entry that refuses it, when
//   - the policy has no consent.folders ("consent.folders");
//   - path is not such a directory, or access is neither (RefusedRequest);
//   - no folders.ask glob matches path ("consent.folders.ask"), matched
//     lexically over components (l7.MatchSegments: "*" within one, a "**"
//     component any number, none too) against the canonical glob;
//   - access is rw and folders.access is not ("consent.folders.access");
//   - path is /, the home or a directory above it, at or inside /proc,
//     /sys, /dev, /run, /var/run or Corral's own state
//     (ResolvedConsent.State: RefusedBuiltIn);
//   - path is at or inside a folders.never entry, a filesystem.deny entry
//     (as written, so one made after Resolve too) or a credential's source
//     file (that entry);
//   - access is rw and path is one DangerousForWrite refuses, or holds
//     Corral's state or a credential's source (the workload could rename
//     the masked directory away and write its own), or is inside a
//     protected path (that filesystem.protected entry).
//
// Otherwise it returns the ask entry that allows it and, inside path
// (Within, the one containment rule), the Masks (the never, deny, state and
// source paths it holds, and a real /run or /var/run) and, for rw, the
// ReadOnly paths (protected entries as Resolve finds them under a
// read-write root, and filesystem.read_only entries) and the Unprotected
// ones (absent protected paths). A mask may lie inside a read-only path:
// an applier places read-only binds before masks.
func (r *Resolved) AskFolder(path string, access Access) (FolderCeiling, *ConsentRefusal) {
	refuse := func(field, format string, args ...any) (FolderCeiling, *ConsentRefusal) {
		return FolderCeiling{}, &ConsentRefusal{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	c := r.Consent
	if c == nil || len(c.Folders) == 0 {
		return refuse("consent.folders", "the policy lets the workload ask for no folder")
	}
	if access == "" {
		access = AccessReadOnly
	}
	if access != AccessReadOnly && access != AccessReadWrite {
		return refuse(RefusedRequest, "access %q is not ro or rw", access)
	}
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return refuse(RefusedRequest, "%q is not a clean absolute path", path)
	}
	if real, err := filepath.EvalSymlinks(path); err != nil {
		return refuse(RefusedRequest, "%s: %v", path, unwrapPath(err))
	} else if real != path {
		return refuse(RefusedRequest, "%s is not canonical: it resolves to %s (ask for that)", path, real)
	}
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		return refuse(RefusedRequest, "%s is not a directory", path)
	}
	field := ""
	segs := globSegs(path)
	for _, g := range c.Folders {
		if l7.MatchSegments(globSegs(g.Glob), segs) {
			field = g.Field
			break
		}
	}
	if field == "" {
		return refuse("consent.folders.ask", "%s matches no consent.folders.ask glob", path)
	}
	if access == AccessReadWrite && c.FolderAccess != AccessReadWrite {
		return refuse("consent.folders.access", "read-write is above the ceiling: folders may be granted read-only")
	}

	var masks []string
	// contains refuses path at or inside p, and masks p inside path.
	contains := func(p, f, what string) *ConsentRefusal {
		switch {
		case p == "":
		case Within(path, p):
			return &ConsentRefusal{Field: f, Reason: fmt.Sprintf("%s is %s", path, strings.Replace(what, "%s", p, 1))}
		case Within(p, path):
			masks = append(masks, p)
		}
		return nil
	}
	if path == "/" {
		return refuse(RefusedBuiltIn, "/ is every file of the host")
	}
	for _, h := range r.homes() {
		if Within(h, path) {
			return refuse(RefusedBuiltIn, "%s holds your home %s: the whole of it, credentials too, would be one approval away", path, h)
		}
	}
	for _, t := range forbiddenTrees {
		if Within(path, t) {
			return refuse(RefusedBuiltIn, "%s is at or inside %s, the kernel's interfaces or the host's service sockets", path, t)
		}
		if fi, err := os.Lstat(t); err == nil && fi.Mode()&fs.ModeSymlink == 0 && Within(t, path) {
			masks = append(masks, t)
		}
	}
	for _, s := range c.State {
		if e := contains(s, RefusedBuiltIn, "at or inside %s, Corral's own state (standing grants, configuration)"); e != nil {
			return FolderCeiling{}, e
		}
		if access == AccessReadWrite && Within(s, path) {
			return refuse(RefusedBuiltIn, "read-write access to %s would let the workload replace %s, Corral's own state (move the masked directory away and write its own standing grants): ask read-only, or for a folder that does not hold it", path, s)
		}
	}
	for _, n := range c.FolderNever {
		if e := contains(n.Path, n.Field, "at or inside %s, which consent.folders.never keeps from every grant"); e != nil {
			return FolderCeiling{}, e
		}
	}
	for _, d := range c.Deny {
		if e := contains(d.Path, d.Field, "at or inside %s, which filesystem.deny hides"); e != nil {
			return FolderCeiling{}, e
		}
	}
	var readOnly []string
	for _, g := range r.Grants {
		if g.Access == AccessReadOnly && access == AccessReadWrite && g.Path != path && Within(g.Path, path) {
			readOnly = append(readOnly, g.Path)
		}
	}
	for _, rc := range r.Credentials {
		if e := contains(rc.SourceFile, rc.Field+".source.file", "%s, a credential's source"); e != nil {
			return FolderCeiling{}, e
		}
		if access == AccessReadWrite && rc.SourceFile != "" && Within(rc.SourceFile, path) {
			return refuse(rc.Field+".source.file", "read-write access to %s would let the workload replace %s, a credential's source, and choose the value sent (move the masked directory away and write its own): ask read-only, or for a folder that does not hold it", path, rc.SourceFile)
		}
	}
	out := FolderCeiling{Field: field, Masks: outermost(masks)}
	if access == AccessReadWrite {
		if DangerousForWrite(path) {
			return refuse(RefusedBuiltIn, "read-write access to %s would let the workload modify the host system", path)
		}
		ro, absent, e := r.protectedInside(path)
		if e != nil {
			return FolderCeiling{}, e
		}
		out.ReadOnly = sortUnique(append(readOnly, ro...))
		out.Unprotected = absent
	}
	return out, nil
}

// protectedInside is what Resolve's protection (resolver.protect) makes
// of path granted read-write beside r's grants: the paths under it that
// become read-only, and the protected paths under it it could not hold
// (absent or symlinks: Skipped, and the placeholders, which a grant does
// not make). A read-write grant inside a protected path is refused.
func (r *Resolved) protectedInside(path string) (ro, absent []string, refusal *ConsentRefusal) {
	p := r.Policy
	if p == nil {
		p = &Policy{}
	}
	res := &resolver{p: p, ctx: Context{Home: r.Home, Workdir: r.Workdir}, home: r.Home, homeCanon: r.Home, workdir: r.Workdir, grants: map[string]*PathGrant{}}
	for _, g := range r.Grants {
		res.grants[g.Path] = &g
	}
	if hs := r.homes(); len(hs) > 0 {
		res.homeCanon = hs[len(hs)-1]
	}
	for _, e := range p.protectedEntries() {
		if inProtected(path, e.path, res) {
			return nil, nil, &ConsentRefusal{Field: fmt.Sprintf("filesystem.protected[%d]", e.index),
				Reason: fmt.Sprintf("read-write access to %s is inside the protected path %s", path, e.path)}
		}
	}
	res.grants[path] = &PathGrant{Path: path, Access: AccessReadWrite, Dir: true, Field: "consent"}
	skipped, holders := res.protect()
	if len(res.errs) > 0 {
		e := res.errs[0]
		return nil, nil, &ConsentRefusal{Field: e.Field, Reason: e.Msg}
	}
	for q, g := range res.grants {
		if g.Access == AccessReadOnly && strings.HasPrefix(g.Field, "filesystem.protected") && q != path && Within(q, path) {
			ro = append(ro, q)
		}
	}
	for _, s := range skipped {
		if Within(s, path) {
			absent = append(absent, s)
		}
	}
	for _, h := range holders {
		if Within(h.Path, path) {
			absent = append(absent, h.Path)
		}
	}
	return sortUnique(ro), sortUnique(absent), nil
}

// AskHost checks one host request (host a name or IP literal, lower case,
// without a trailing dot; an IPv6 address with or without brackets; port
// 1-65535) against the consent ceiling: refused when the policy has no
// consent.hosts or no network mode proxy, when the host is a wildcard, a
// CIDR or not a valid name (RefusedRequest), when no hosts.ask entry
// matches ("consent.hosts.ask"), or when a hosts.never or network.deny
// entry does (also through the address network.hosts maps the name to).
// It returns the ask entry that allows it. Hosts match as the egress
// proxy matches a rule (ruleMatchesHost): names exactly, "*." one label
// below, "**." one or more, IPs and CIDRs IP literals only; an entry's
// port 0 matches any port, a network.deny entry without ports any port.
func (r *Resolved) AskHost(host string, port int) (string, *ConsentRefusal) {
	refuse := func(field, format string, args ...any) (string, *ConsentRefusal) {
		return "", &ConsentRefusal{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	c := r.Consent
	if c == nil || len(c.Hosts) == 0 {
		return refuse("consent.hosts", "the policy lets the workload ask for no host")
	}
	if r.Network != NetworkProxy {
		return refuse("network.mode", "host grants are proxy rules, and network.mode is %s", r.Network)
	}
	if port < 1 || port > 65535 {
		return refuse(RefusedRequest, "port %d is outside 1-65535", port)
	}
	h := strings.TrimSuffix(asciiLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")), ".")
	if strings.ContainsAny(h, "*/") {
		return refuse(RefusedRequest, "%q is a pattern: ask for one host", host)
	}
	if msg, _ := checkEndpointHost(h, false); msg != "" {
		return refuse(RefusedRequest, "%s", msg)
	}
	if a, err := netip.ParseAddr(h); err == nil {
		h = a.Unmap().String()
	}
	target := hostPort(h, port)
	matches := func(e ConsentHost, q string) bool {
		return (e.Port == 0 || e.Port == port) && ruleMatchesHost(e.Host, q)
	}
	field := ""
	for _, e := range c.Hosts {
		if matches(e, h) {
			field = e.Field
			break
		}
	}
	if field == "" {
		return refuse("consent.hosts.ask", "%s matches no consent.hosts.ask entry", target)
	}
	names := []string{h}
	for name, v := range r.Egress.Hosts {
		if strings.TrimSuffix(asciiLower(name), ".") == h {
			if a, ok := parseAddrOK(v); ok {
				names = append(names, a.String())
			}
		}
	}
	for _, q := range names {
		via := ""
		if q != h {
			via = " (network.hosts maps it to " + q + ")"
		}
		for _, e := range c.HostNever {
			if matches(e, q) {
				return refuse(e.Field, "%s%s is refused by consent.hosts.never (%s)", target, via, e)
			}
		}
		for i, d := range r.Egress.Deny {
			if ports80443(d.Ports, port, true) && ruleMatchesHost(d.Host, q) {
				return refuse(fmt.Sprintf("network.deny[%d]", i), "%s%s is refused by network.deny (%s)", target, via, d.Host)
			}
		}
	}
	return field, nil
}

// homes are r's home as given and canonical (one when they are the
// same, none when the home is unknown).
func (r *Resolved) homes() []string {
	if r.Home == "" {
		return nil
	}
	return slices.Compact([]string{r.Home, canonicalOrNearest(r.Home)})
}

// globSegs splits a clean absolute path or glob into its components ("/"
// has none; on Windows the volume is the first).
func globSegs(p string) []string {
	if p == "/" || p == "" {
		return nil
	}
	return strings.Split(strings.TrimPrefix(filepath.ToSlash(p), "/"), "/")
}

// globAtOrInside reports whether glob segments g match t or some path
// inside t: a prefix of g matches t (the rest of g then matches some
// path below).
func globAtOrInside(g, t []string) bool {
	for k := 0; k <= len(g); k++ {
		if l7.MatchSegments(g[:k], t) {
			return true
		}
	}
	return false
}

// globAtOrAbove returns the first of / and t's ancestors, then t, that
// glob segments g match ("" for none).
func globAtOrAbove(g, t []string) string {
	for j := 0; j <= len(t); j++ {
		if l7.MatchSegments(g, t[:j]) {
			return "/" + strings.Join(t[:j], "/")
		}
	}
	return ""
}

// outermost is ps sorted and unique, without the paths inside another.
func outermost(ps []string) []string {
	ps = sortUnique(ps)
	var out []string
	for _, p := range ps {
		if !slices.ContainsFunc(ps, func(q string) bool { return q != p && Within(p, q) }) {
			out = append(out, p)
		}
	}
	return out
}

// sortUnique is ps sorted without repeats; nil when empty.
func sortUnique(ps []string) []string {
	if len(ps) == 0 {
		return nil
	}
	slices.Sort(ps)
	return slices.Compact(ps)
}

package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// Context is what Resolve needs to know about the caller.
type Context struct {
	Home    string   // the caller's home directory, absolute ("~" expands to it); may be empty if the policy does not use "~"
	Workdir string   // the working directory, absolute, existing ("{workdir}" expands to it)
	Environ []string // the caller's environment, "NAME=value" (os.Environ()); the first of duplicate names wins
}

// Access is the effective access to one path.
type Access string

const (
	AccessReadOnly  Access = "ro"
	AccessReadWrite Access = "rw"
	AccessDeny      Access = "deny"
)

// PathGrant is one canonical path with its effective access.
type PathGrant struct {
	Path   string `json:"path"`   // absolute, symlinks resolved, clean
	Access Access `json:"access"` // ro, rw or deny
	Dir    bool   `json:"dir"`    // true for a directory
	Field  string `json:"field"`  // where it came from, e.g. "filesystem.read_only[2]", "filesystem.include_workdir", "filesystem.protected[0]"
}

// Resolved is a policy made concrete for one caller: every path expanded,
// canonicalised and checked, precedence applied, environment computed. It is
// what providers map.
type Resolved struct {
	Policy  *Policy `json:"-"`
	Hash    string  `json:"policy_hash"` // sha256 of the canonical JSON of Policy, "sha256:<hex>"
	Home    string  `json:"home"`        // the caller's home; the sandbox gets an empty private home at this path
	Workdir string  `json:"workdir"`     // canonical working directory
	// Grants are sorted by depth (number of path components), then by Path,
	// so a parent always precedes its descendants: binding them in order
	// puts the most specific grant on top. Each path appears once, with the
	// access of its strongest rule (deny > ro > rw). Protected paths that
	// exist appear here as ro entries under their rw root.
	Grants []PathGrant `json:"grants"`
	// Skipped lists protected paths under read-write roots that could not be
	// protected by a bind: they did not exist, or are symlinks (whose
	// target, when inside a read-write root, is made read-only, but the
	// link itself could be replaced). A workload could create or replace
	// them. For the loss report.
	Skipped []string    `json:"skipped_protected,omitempty"`
	Env     []string    `json:"-"`       // the workload's environment, "NAME=value" sorted by name; HOME not included, PATH always present
	Network NetworkMode `json:"network"` // never empty
	Egress  Network     `json:"egress"`  // the network section as written: the proxy's rules (mode proxy)
	Limits  Limits      `json:"limits"`
	Layers  Layers      `json:"layers"`
	RunAs   string      `json:"run_as_user,omitempty"`
}

// Resolve makes p concrete for the caller described by ctx. It runs
// Validate, then the host checks:
//
//   - ctx.Workdir is canonicalised (filepath.EvalSymlinks) and must be an
//     absolute, existing directory outside /proc.
//   - Every path has "~" replaced by ctx.Home and "{workdir}" by the
//     canonical workdir, and is canonicalised; the grant applies to the real
//     target. A missing path is an error unless the rule is optional, in
//     which case it is dropped.
//   - Read-write grants (including the workdir from include_workdir) of /,
//     the home directory, /etc, /usr, /bin, /sbin, /lib, /lib32, /lib64,
//     /libx32, /boot, or of /proc, /sys, /dev or anything under them, are
//     rejected, checked on both the written and the canonical path.
//   - Read-only or read-write grants of a unix socket are rejected;
//     anything resolving into /proc/self or /proc/<pid> is rejected.
//   - Protected entries become ro grants where they exist inside a
//     read-write area (see Filesystem.Protected); missing ones go to
//     Skipped.
//
// Errors are *Error (or Errors) with Field set and, when p came from a file,
// the position of the offending value.
func (p *Policy) Resolve(ctx Context) (*Resolved, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	r := &resolver{p: p, ctx: ctx, grants: map[string]*PathGrant{}}
	out, errs := r.run()
	if err := asError(errs); err != nil {
		return nil, err
	}
	return out, nil
}

// dangerousRW are paths that may never be granted read-write themselves
// (their subdirectories may); dangerousTrees may not be granted read-write
// anywhere at or beneath them: system software and configuration, boot
// files, kernel interfaces, package and spool state (cron jobs). A root
// caller's read-write trees are written as root on disk, so a file planted
// there would run as root later. serviceTrees hold the sockets of the
// host's services and may not be granted at all, only denied.
var (
	dangerousRW    = []string{"/", "/home", "/root", "/var", "/tmp", "/var/tmp", "/srv", "/opt", "/mnt", "/media"}
	dangerousTrees = []string{"/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/proc", "/sys", "/dev", "/run", "/var/run", "/var/lib", "/var/spool", "/var/cache", "/var/log"}
	serviceTrees   = []string{"/run", "/var/run"}
)

// DangerousForWrite reports whether read-write access to canonical path p
// is refused by the rules above. Providers use it on where a path really
// lives (a bind mount's source).
func DangerousForWrite(p string) bool {
	for _, d := range dangerousRW {
		if p == d {
			return true
		}
	}
	for _, d := range dangerousTrees {
		if under(p, d) {
			return true
		}
	}
	return false
}

type resolver struct {
	p         *Policy
	ctx       Context
	home      string // clean ctx.Home
	homeCanon string // canonical home, or home if it cannot be resolved
	workdir   string // canonical workdir
	grants    map[string]*PathGrant
	errs      []*Error
}

func (r *resolver) fail(field, msg, hint string, cause error) {
	e := r.p.errAt(field, msg, hint)
	e.Err = cause
	r.errs = append(r.errs, e)
}

func (r *resolver) run() (*Resolved, []*Error) {
	p := r.p
	if r.ctx.Home != "" {
		if !filepath.IsAbs(r.ctx.Home) {
			return nil, []*Error{{Field: "home", Msg: fmt.Sprintf("home directory %q is not absolute", r.ctx.Home), Hint: "set HOME to an absolute path"}}
		}
		r.home = filepath.Clean(r.ctx.Home)
		r.homeCanon = r.home
		if c, err := filepath.EvalSymlinks(r.home); err == nil {
			r.homeCanon = c
		}
	}
	if err := r.resolveWorkdir(); err != nil {
		return nil, []*Error{err}
	}

	type list struct {
		name   string
		rules  []PathRule
		access Access
	}
	for _, l := range []list{
		{"read_write", p.Filesystem.ReadWrite, AccessReadWrite},
		{"read_only", p.Filesystem.ReadOnly, AccessReadOnly},
		{"deny", p.Filesystem.Deny, AccessDeny},
	} {
		for i, rule := range l.rules {
			field := fmt.Sprintf("filesystem.%s[%d]", l.name, i)
			r.addRule(field, rule, l.access)
		}
	}
	if p.Filesystem.IncludeWorkdir == nil || *p.Filesystem.IncludeWorkdir {
		r.addWorkdir()
	}
	if len(r.errs) > 0 {
		return nil, r.errs
	}
	skipped := r.protect()
	if len(r.errs) > 0 {
		return nil, r.errs
	}

	grants := make([]PathGrant, 0, len(r.grants))
	for _, g := range r.grants {
		grants = append(grants, *g)
	}
	sortGrants(grants)

	mode := p.Network.Mode
	if mode == "" {
		mode = NetworkNone
	}
	layers := Layers{}
	for k, v := range p.Layers {
		layers[k] = v
	}
	return &Resolved{
		Policy:  p,
		Hash:    Hash(p),
		Home:    r.home,
		Workdir: r.workdir,
		Grants:  grants,
		Skipped: skipped,
		Env:     resolveEnv(p.Process.Env, r.ctx.Environ),
		Network: mode,
		Egress:  p.Network,
		Limits:  p.Process.Limits,
		Layers:  layers,
		RunAs:   p.Process.RunAsUser,
	}, nil
}

func (r *resolver) resolveWorkdir() *Error {
	const hint = "check the -C/--workdir path, or run corral from an existing project directory"
	wd := r.ctx.Workdir
	if wd == "" || !filepath.IsAbs(wd) {
		return &Error{Field: "workdir", Msg: fmt.Sprintf("working directory %q is not an absolute path", wd), Hint: hint}
	}
	if under(filepath.Clean(wd), "/proc") {
		return &Error{Field: "workdir", Msg: fmt.Sprintf("working directory %s is under /proc", wd), Hint: hint}
	}
	canon, err := filepath.EvalSymlinks(wd)
	if err != nil {
		return &Error{Field: "workdir", Msg: fmt.Sprintf("working directory %s: %v", wd, unwrapPath(err)), Hint: hint, Err: err}
	}
	if under(canon, "/proc") {
		return &Error{Field: "workdir", Msg: fmt.Sprintf("working directory %s resolves to %s, under /proc", wd, canon), Hint: hint}
	}
	fi, err := os.Stat(canon)
	if err != nil {
		return &Error{Field: "workdir", Msg: fmt.Sprintf("working directory %s: %v", wd, unwrapPath(err)), Hint: hint, Err: err}
	}
	if !fi.IsDir() {
		return &Error{Field: "workdir", Msg: fmt.Sprintf("working directory %s is not a directory", wd), Hint: hint}
	}
	r.workdir = canon
	return nil
}

// expand replaces a leading "~" or "{workdir}" and cleans the result.
func (r *resolver) expand(field, s string) (string, bool) {
	switch {
	case s == "~" || strings.HasPrefix(s, "~/"):
		if r.home == "" {
			r.fail(field, fmt.Sprintf("%q uses ~ but the home directory is unknown", s), "set HOME, or write the absolute path", nil)
			return "", false
		}
		return filepath.Join(r.home, s[1:]), true
	case s == "{workdir}" || strings.HasPrefix(s, "{workdir}/"):
		return filepath.Join(r.workdir, strings.TrimPrefix(s, "{workdir}")), true
	}
	return filepath.Clean(s), true
}

// missing reports whether err means the path (or a parent) does not exist.
func missing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// under reports whether p is root or lies beneath it (both clean, absolute).
func under(p, root string) bool {
	if root == "/" {
		return true
	}
	return p == root || strings.HasPrefix(p, root+"/")
}

func rank(a Access) int {
	switch a {
	case AccessDeny:
		return 3
	case AccessReadOnly:
		return 2
	}
	return 1
}

// put records a grant, keeping the stronger access when the path is
// already granted (deny > ro > rw).
func (r *resolver) put(g PathGrant) {
	if old, ok := r.grants[g.Path]; ok && rank(old.Access) >= rank(g.Access) {
		return
	}
	r.grants[g.Path] = &g
}

func (r *resolver) addRule(field string, rule PathRule, access Access) {
	written, ok := r.expand(field, rule.Path)
	if !ok {
		return
	}
	canon, err := filepath.EvalSymlinks(written)
	if err != nil {
		if missing(err) {
			if !rule.Optional {
				r.fail(field, fmt.Sprintf("%s does not exist", written),
					fmt.Sprintf("create it, or mark the rule optional: {path: %q, optional: true}", rule.Path), err)
			}
			return
		}
		r.fail(field, fmt.Sprintf("cannot resolve %s: %v", written, unwrapPath(err)), "check the path and its permissions", err)
		return
	}
	fi, err := os.Stat(canon)
	if err != nil {
		r.fail(field, fmt.Sprintf("cannot stat %s: %v", canon, unwrapPath(err)), "check the path and its permissions", err)
		return
	}
	if !r.checkTarget(field, written, canon, fi, access, false) {
		return
	}
	r.put(PathGrant{Path: canon, Access: access, Dir: fi.IsDir(), Field: field})
}

func (r *resolver) addWorkdir() {
	const field = "filesystem.include_workdir"
	fi, err := os.Stat(r.workdir)
	if err != nil {
		r.fail(field, fmt.Sprintf("cannot stat working directory %s: %v", r.workdir, unwrapPath(err)), "", err)
		return
	}
	if !r.checkTarget(field, r.ctx.Workdir, r.workdir, fi, AccessReadWrite, true) {
		return
	}
	r.put(PathGrant{Path: r.workdir, Access: AccessReadWrite, Dir: true, Field: field})
}

// checkTarget applies the host checks to one grant: written is the expanded
// path as written, canon its canonical target.
func (r *resolver) checkTarget(field, written, canon string, fi fs.FileInfo, access Access, isWorkdir bool) bool {
	desc := written
	if canon != written {
		desc = fmt.Sprintf("%s (-> %s)", written, canon)
	}
	if procTrick(canon) {
		r.fail(field, fmt.Sprintf("%s resolves into a process's /proc entry", desc),
			"/proc/self and /proc/<pid> describe the launcher, not the workload; grant the real path instead", nil)
		return false
	}
	if access == AccessDeny {
		return true
	}
	if fi.Mode()&fs.ModeSocket != 0 {
		r.fail(field, fmt.Sprintf("%s is a unix socket; sockets cannot be granted as files", desc),
			"remove the grant (a later release adds explicit socket grants); to hide it, list it under deny", nil)
		return false
	}
	for _, d := range serviceTrees {
		if p := filepath.Clean(written); under(p, d) || under(canon, d) {
			r.fail(field, fmt.Sprintf("%s is under %s, where the host's services keep their sockets (a read-only grant does not stop connect())", desc, d),
				"remove the grant; a later release adds explicit socket grants", nil)
			return false
		}
	}
	if access != AccessReadWrite {
		return true
	}
	hint := "grant it read_only, or grant a narrower directory read_write"
	if isWorkdir {
		hint = "cd into a project directory before running corral, or set filesystem.include_workdir: false"
	}
	for _, p := range []string{filepath.Clean(written), canon} {
		if r.home != "" && (p == r.home || p == r.homeCanon) {
			if !isWorkdir {
				hint = "grant specific project directories instead (e.g. ~/src/myproject); the sandbox gets its own empty home"
			}
			r.fail(field, fmt.Sprintf("read-write access to your home directory %s is too broad", desc), hint, nil)
			return false
		}
		for _, d := range dangerousRW {
			if p == d {
				r.fail(field, fmt.Sprintf("read-write access to %s would let the workload modify the host system", desc), hint, nil)
				return false
			}
		}
		for _, d := range dangerousTrees {
			if under(p, d) {
				r.fail(field, fmt.Sprintf("read-write access to %s (under %s) would let the workload modify the host system", desc, d), hint, nil)
				return false
			}
		}
	}
	return true
}

// effective returns the grant that decides access to canonical path q: the
// grant of q itself or of its nearest granted ancestor (nil if none).
func (r *resolver) effective(q string) *PathGrant {
	for p := q; ; p = filepath.Dir(p) {
		if g, ok := r.grants[p]; ok {
			return g
		}
		if p == "/" {
			return nil
		}
	}
}

// protect turns the protected entries into ro grants and returns the
// protected paths that could not be bound (sorted, unique).
// inProtected reports whether canonical path p is at or inside protected
// entry e: a relative entry anywhere along p (".git" in /w/.git/objects),
// an absolute one (expanded) above it.
func inProtected(p, e string, r *resolver) bool {
	if strings.HasPrefix(e, "/") || strings.HasPrefix(e, "~") || strings.HasPrefix(e, "{workdir}") {
		abs := e
		switch {
		case strings.HasPrefix(e, "~"):
			abs = filepath.Join(r.home, strings.TrimPrefix(e, "~"))
		case strings.HasPrefix(e, "{workdir}"):
			abs = filepath.Join(r.workdir, strings.TrimPrefix(e, "{workdir}"))
		}
		return under(p, filepath.Clean(abs))
	}
	e = strings.Trim(filepath.Clean(e), "/")
	return strings.HasSuffix(p, "/"+e) || strings.Contains(p+"/", "/"+e+"/")
}

func (r *resolver) protect() []string {
	entries := r.p.Filesystem.Protected
	if entries == nil {
		entries = DefaultProtected
	}
	var roots []string
	for _, g := range r.grants {
		if g.Access != AccessReadWrite {
			continue
		}
		// A read-write grant inside a protected path (cd ~/.ssh; a
		// workdir in .git/) would make it writable: refused.
		for i, e := range entries {
			if inProtected(g.Path, e, r) {
				r.fail(g.Field, fmt.Sprintf("read-write access to %s is inside the protected path %s", g.Path, e),
					"grant a directory outside it, or remove the entry from filesystem.protected (protected["+strconv.Itoa(i)+"])", nil)
			}
		}
		if g.Dir {
			roots = append(roots, g.Path)
		}
	}
	sort.Strings(roots)
	skipped := map[string]bool{}
	var adds []PathGrant
	try := func(field, joined string) {
		if _, err := os.Lstat(joined); err != nil {
			if missing(err) {
				skipped[joined] = true
			} else {
				r.fail(field, fmt.Sprintf("cannot inspect protected path %s: %v", joined, unwrapPath(err)), "check its permissions", err)
			}
			return
		}
		canon, err := filepath.EvalSymlinks(joined)
		if err != nil {
			skipped[joined] = true // dangling symlink: nothing to bind over
			return
		}
		if procTrick(canon) {
			r.fail(field, fmt.Sprintf("protected path %s resolves into a process's /proc entry", joined), "remove the entry", nil)
			return
		}
		g := r.effective(canon)
		if g == nil {
			// Not visible in the sandbox at all: nothing to protect, but a
			// symlink in a writable root could be replaced.
			if canon != joined {
				skipped[joined] = true
			}
			return
		}
		if g.Access != AccessReadWrite {
			return // already read-only or denied
		}
		fi, err := os.Stat(canon)
		if err != nil {
			skipped[joined] = true
			return
		}
		adds = append(adds, PathGrant{Path: canon, Access: AccessReadOnly, Dir: fi.IsDir(), Field: field})
		if canon != joined {
			// The target is read-only, but the link is what tools open,
			// and a link in a writable directory can be replaced.
			skipped[joined] = true
		}
	}
	for i, e := range entries {
		field := fmt.Sprintf("filesystem.protected[%d]", i)
		if strings.HasPrefix(e, "/") || strings.HasPrefix(e, "~") || strings.HasPrefix(e, "{workdir}") {
			abs, ok := r.expand(field, e)
			if ok {
				try(field, abs)
			}
			continue
		}
		for _, root := range roots {
			try(field, filepath.Join(root, e))
		}
	}
	for _, g := range adds {
		r.put(g)
	}
	out := make([]string, 0, len(skipped))
	for s := range skipped {
		out = append(out, s)
	}
	sort.Strings(out)
	if len(out) == 0 {
		return nil
	}
	return out
}

// depth is the number of components of a clean absolute path ("/" is 0).
func depth(p string) int {
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}

// sortGrants orders grants by depth, then path, so parents come first.
func sortGrants(gs []PathGrant) {
	sort.Slice(gs, func(i, j int) bool {
		di, dj := depth(gs[i].Path), depth(gs[j].Path)
		if di != dj {
			return di < dj
		}
		return gs[i].Path < gs[j].Path
	})
}

// resolveEnv computes the workload environment: the variables of environ
// allowed by env.Pass (DefaultEnvPass when nil), then env.Set, never HOME,
// with PATH defaulting to DefaultPATH; sorted by name.
func resolveEnv(env Env, environ []string) []string {
	pass := env.Pass
	if pass == nil {
		pass = DefaultEnvPass
	}
	allowed := func(name string) bool {
		for _, pat := range pass {
			if prefix, ok := strings.CutSuffix(pat, "*"); ok {
				if strings.HasPrefix(name, prefix) {
					return true
				}
			} else if name == pat {
				return true
			}
		}
		return false
	}
	vars := map[string]string{}
	for _, kv := range environ {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || name == "" || name == "HOME" || strings.ContainsRune(kv, 0) {
			continue
		}
		if _, dup := vars[name]; dup {
			continue // the first wins, as in getenv
		}
		if allowed(name) {
			vars[name] = val
		}
	}
	for name, val := range env.Set {
		if name != "HOME" {
			vars[name] = val
		}
	}
	if _, ok := vars["PATH"]; !ok {
		vars["PATH"] = DefaultPATH
	}
	out := make([]string, 0, len(vars))
	for _, name := range sortedKeys(vars) {
		out = append(out, name+"="+vars[name])
	}
	return out
}

// ProtectedNames are the single-component protected entries (".git",
// ".bashrc"): the names a provider also keeps read-only where they appear
// deeper inside a read-write tree.
func (r *Resolved) ProtectedNames() map[string]bool {
	entries := DefaultProtected
	if r.Policy != nil && r.Policy.Filesystem.Protected != nil {
		entries = r.Policy.Filesystem.Protected
	}
	names := map[string]bool{}
	for _, e := range entries {
		if e != "" && !strings.ContainsAny(e, "/~{") {
			names[e] = true
		}
	}
	return names
}

// Covering is the most specific grant of r for path (path itself or a
// directory above it), or the zero PathGrant.
func (r *Resolved) Covering(path string) PathGrant {
	var best PathGrant
	for _, g := range r.Grants {
		if (path == g.Path || strings.HasPrefix(path, g.Path+"/")) && len(g.Path) >= len(best.Path) {
			best = g
		}
	}
	return best
}

// Visible reports whether path is inside the sandbox: its covering grant
// exists and is not a deny.
func (r *Resolved) Visible(path string) bool {
	best := r.Covering(path)
	return best.Path != "" && best.Access != AccessDeny
}

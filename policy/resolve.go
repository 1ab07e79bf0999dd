package policy

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
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
	// WritableHome grants the home itself read-write (field "service
	// home"), as a service session's state: the workload's own tree,
	// protected like any other read-write root.
	WritableHome bool
	// Placeholders are the credential placeholders to keep, by
	// credential name (a recovered or re-created sandbox's); the others
	// are drawn at random.
	Placeholders map[string]string
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
	// Inode is the file a protected grant covered when the policy was
	// resolved (device and inode; zero where the platform has none): a
	// provider that cannot pin its parent (docker) lets the workload move
	// it away and put another in its place, which the scan after the run
	// notices by this.
	Inode FileID `json:"-"`
}

// FileID is a file's device and inode number.
type FileID struct{ Dev, Ino uint64 }

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
	// protected by a bind: symlinks (whose target, when inside a
	// read-write root, is made read-only, but the link itself could be
	// replaced), and absent paths whose directory is absent too (so no
	// Placeholder holds them). A workload could create or replace them:
	// for the loss report, and the scan after the run.
	Skipped []string `json:"skipped_protected,omitempty"`
	// Placeholders are protected paths absent when the policy was
	// resolved whose directory exists and is writable (".bashrc" at the
	// top of a read-write root; not ".config/corral" without .config,
	// which goes to Skipped): providers create each empty for the run,
	// bind it read-only so that the workload cannot create the name, and
	// remove it afterwards (internal/placeholder). Sorted, unique.
	Placeholders []Placeholder `json:"placeholders,omitempty"`
	Env          []string      `json:"-"`       // the workload's environment, "NAME=value" sorted by name; HOME not included, PATH always present
	Network      NetworkMode   `json:"network"` // never empty
	Egress       Network       `json:"egress"`  // the network section as written: the proxy's rules (mode proxy)
	Limits       Limits        `json:"limits"`
	Layers       Layers        `json:"layers"`
	RunAs        string        `json:"run_as_user,omitempty"`
	// Credentials are the policy's credentials with their placeholders;
	// each exposed variable is in Env already, each exposed file is the
	// provider's to create (ResolvedCredential.File).
	Credentials []ResolvedCredential `json:"credentials,omitempty"`
	// Consent is the consent ceiling made concrete; nil: nothing may be
	// asked.
	Consent *ResolvedConsent `json:"consent,omitempty"`
	// Lexical is set (LexicalNote) when the policy was resolved without
	// the host it is written for: a Windows policy on Linux. Its paths are
	// then as written, cleaned, not canonical.
	Lexical string `json:"lexical,omitempty"`
}

// PlaceholderMark is the extended attribute internal/placeholder sets on
// the placeholders it creates (on Linux, where they are made).
const PlaceholderMark = "user.corral.placeholder"

// Placeholder is one absent protected path (see Resolved.Placeholders).
type Placeholder struct {
	Path  string `json:"path"`  // canonical parent + the missing name
	Dir   bool   `json:"dir"`   // an empty directory, else an empty file
	Field string `json:"field"` // the protected entry, e.g. "filesystem.protected[3]"
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
//   - Each credential gets its placeholder, put in Env under its exposed
//     variable; a source the sandbox would see and an exposed file inside
//     a grant are refused (credresolve.go).
//   - The consent ceiling is made concrete (consentresolve.go): its globs
//     and paths expanded and canonical, a glob that could match /, the
//     home, a kernel or service tree or Corral's state refused, a persist
//     file the workload could read or write refused, and with
//     consent.folders a grant at or under /grants refused.
//
// Errors are *Error (or Errors) with Field set and, when p came from a file,
// the position of the offending value.
func (p *Policy) Resolve(ctx Context) (*Resolved, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	r := &resolver{p: p, ctx: ctx, grants: map[string]*PathGrant{}}
	var out *Resolved
	var errs []*Error
	switch {
	case p.OS() == HostOS():
		out, errs = r.run()
	case p.OS() == OSWindows:
		out, errs = r.runLexicalWindows()
	default:
		errs = []*Error{{Field: "policy", Msg: fmt.Sprintf("a policy written for %s cannot be resolved on %s", p.OS(), HostOS()),
			Hint: "write the policy with this host's paths (corral policy default prints a starting point)"}}
	}
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
// lives (a bind mount's source); policyimport on what it would write.
func DangerousForWrite(p string) bool {
	_, _, refused := dangerousWriteRoot(p)
	return refused
}

// dangerousWriteRoot is the entry of dangerousRW that p is (tree false)
// or of dangerousTrees that p is at or under (tree true); refused is
// false when p is neither.
func dangerousWriteRoot(p string) (root string, tree, refused bool) {
	for _, d := range dangerousRW {
		if p == d {
			return d, false, true
		}
	}
	for _, d := range dangerousTrees {
		if Within(p, d) {
			return d, true, true
		}
	}
	return "", false, false
}

type resolver struct {
	p         *Policy
	ctx       Context
	written   []writtenPath // every grant's path as written (expanded), for checkLinks
	home      string        // clean ctx.Home
	homeCanon string        // canonical home, or home if it cannot be resolved
	workdir   string        // canonical workdir
	grants    map[string]*PathGrant
	errs      []*Error
	winLayout *winLayout // a Windows policy's, made once (checkTargetWindows)
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
		if c, err := canonical(r.home); err == nil {
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
	if r.ctx.WritableHome && r.home != "" {
		r.put(PathGrant{Path: r.homeCanon, Access: AccessReadWrite, Dir: true, Field: "service home"})
	}
	r.checkLinks() // also when a rule failed otherwise: the link is the first thing to fix
	if len(r.errs) > 0 {
		return nil, r.errs
	}
	skipped, placeholders := r.protect()
	if len(r.errs) > 0 {
		return nil, r.errs
	}

	grants := make([]PathGrant, 0, len(r.grants))
	for _, g := range r.grants {
		grants = append(grants, *g)
	}
	sortGrants(grants)

	mode := p.networkMode()
	layers := Layers{}
	for k, v := range p.Layers {
		layers[k] = v
	}
	out := &Resolved{
		Policy:       p,
		Hash:         Hash(p),
		Home:         r.home,
		Workdir:      r.workdir,
		Grants:       grants,
		Skipped:      skipped,
		Placeholders: placeholders,
		Network:      mode,
		Egress:       p.Network,
		Limits:       p.Process.Limits,
		Layers:       layers,
		RunAs:        p.Process.RunAsUser,
	}
	creds, exposed := r.credentials(out)
	if len(r.errs) > 0 {
		return nil, r.errs
	}
	out.Credentials = creds
	out.Env = resolveEnv(p.OS(), p.Process.Env, r.ctx.Environ, exposed)
	out.Consent = r.consent(out)
	if len(r.errs) > 0 {
		return nil, r.errs
	}
	return out, nil
}

func (r *resolver) resolveWorkdir() *Error {
	const hint = "check the -C/--workdir path, or run corral from an existing project directory"
	wd := r.ctx.Workdir
	if wd == "" || !filepath.IsAbs(wd) {
		return &Error{Field: "workdir", Msg: fmt.Sprintf("working directory %q is not an absolute path", wd), Hint: hint}
	}
	if Within(filepath.Clean(wd), "/proc") {
		return &Error{Field: "workdir", Msg: fmt.Sprintf("working directory %s is under /proc", wd), Hint: hint}
	}
	canon, err := canonical(wd)
	if err != nil {
		return &Error{Field: "workdir", Msg: fmt.Sprintf("working directory %s: %v", wd, unwrapPath(err)), Hint: hint, Err: err}
	}
	if Within(canon, "/proc") {
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
	case s == "~" || strings.HasPrefix(s, "~/") || r.p.OS() == OSWindows && strings.HasPrefix(s, `~\`):
		if r.home == "" {
			r.fail(field, fmt.Sprintf("%q uses ~ but the home directory is unknown", s), "set HOME, or write the absolute path", nil)
			return "", false
		}
		return filepath.Join(r.home, s[1:]), true
	case s == "{workdir}" || strings.HasPrefix(s, "{workdir}/") || r.p.OS() == OSWindows && strings.HasPrefix(s, `{workdir}\`):
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
	r.written = append(r.written, writtenPath{field: field, path: written, rule: rule.Path})
	canon, err := canonical(written)
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

// writtenPath is one grant's path before symlinks are resolved.
type writtenPath struct{ field, path, rule string }

// maxLinks bounds the symlinks followed in one path, as the kernel's
// MAXSYMLINKS (40, path_resolution(7)).
const maxLinks = 40

// checkLinks refuses every grant whose path as written is, or passes
// through, a symlink that someone other than the policy's author could
// have made or replaced: a grant is the author's decision, and a link
// planted by a workload (in this run's writable trees or an earlier run's)
// or by another user would silently redirect it. Trusted links are owned
// by root and live in a root-owned directory that no one else can write
// and that corral never grants read-write (DangerousForWrite: as root, a
// workload's files are root's on disk, so a root-owned link in any
// grantable directory could be an earlier run's): merged-/usr's /lib ->
// usr/lib, a symlinked /home or /home/me. The working directory as given
// is checked the same way.
func (r *resolver) checkLinks() {
	paths := r.written
	if r.ctx.Workdir != "" {
		paths = append(paths, writtenPath{field: "filesystem.include_workdir", path: filepath.Clean(r.ctx.Workdir)})
	}
	for _, w := range paths {
		planted := r.plantedLink
		if r.p.OS() == OSWindows {
			planted = r.plantedLinkWindows
		}
		link, target, why := planted(w.path)
		if link == "" {
			continue
		}
		canon, err := canonical(w.path)
		if err != nil {
			canon = target
		}
		hint := fmt.Sprintf("grant the target explicitly: write %q instead of %q, after checking that it is what you meant", canon, w.rule)
		if w.field == "filesystem.include_workdir" {
			hint = fmt.Sprintf("run corral in the real directory (-C %s), after checking that it is what you meant", canon)
		}
		r.fail(w.field, fmt.Sprintf("%s passes through the symlink %s -> %s, which %s: a grant never follows a link someone else could have planted", w.path, link, target, why), hint, nil)
	}
}

// plantedLink walks path component by component, as path resolution
// does, and returns the first symlink on the way that is not trusted (see
// checkLinks), its target and why; link is "" when there is none or the
// platform cannot tell (ownerOf).
func (r *resolver) plantedLink(path string) (link, target, why string) {
	todo := strings.Split(strings.TrimPrefix(filepath.Clean(path), "/"), "/")
	cur := "/"
	for links := 0; len(todo) > 0; {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, c)
		fi, err := os.Lstat(next)
		if err != nil {
			return "", "", "" // missing or unreadable: resolution reports it
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		t, err := os.Readlink(next)
		if err != nil {
			return "", "", ""
		}
		if why := r.untrustedLink(cur, fi); why != "" {
			return next, t, why
		}
		if links++; links > maxLinks {
			return "", "", ""
		}
		if filepath.IsAbs(t) {
			cur = "/"
		}
		todo = append(strings.Split(strings.TrimPrefix(t, "/"), "/"), todo...)
	}
	return "", "", ""
}

// untrustedLink says why the symlink described by fi, in directory dir
// (canonical), could have been planted by someone else, or "".
func (r *resolver) untrustedLink(dir string, fi fs.FileInfo) string {
	uid, _, ok := ownerOf(fi)
	if !ok {
		return ""
	}
	if uid != 0 {
		return fmt.Sprintf("is owned by uid %d, not root", uid)
	}
	di, err := os.Stat(dir)
	if err != nil {
		return fmt.Sprintf("lives in %s, which cannot be inspected (%v)", dir, unwrapPath(err))
	}
	duid, perm, _ := ownerOf(di)
	switch {
	case duid != 0:
		return fmt.Sprintf("lives in %s, a directory owned by uid %d, not root", dir, duid)
	case perm&0o022 != 0:
		return fmt.Sprintf("lives in %s, a directory others can write (mode %04o)", dir, perm)
	}
	for _, g := range r.grants {
		if g.Access == AccessReadWrite && Within(dir, g.Path) {
			return fmt.Sprintf("lives in %s, inside the read-write grant %s (%s), where the workload can make links", dir, g.Path, g.Field)
		}
	}
	if !DangerousForWrite(dir) {
		// As root a workload's files are root's on disk (idmapped
		// mounts), so an earlier run granted this directory could have
		// made the link: only the directories corral never grants
		// read-write hold links it trusts.
		return fmt.Sprintf("lives in %s, which a read-write grant (of this run or an earlier one) can open to a workload, whose links are root's on disk; corral trusts root's links only in system directories it never grants read-write (/, /usr, /etc, /home, /opt, /var, ...)", dir)
	}
	return ""
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
	if fi != nil && fi.Mode()&fs.ModeSocket != 0 {
		r.fail(field, fmt.Sprintf("%s is a unix socket; sockets cannot be granted as files", desc),
			"remove the grant (a later release adds explicit socket grants); to hide it, list it under deny", nil)
		return false
	}
	if r.p.OS() == OSWindows {
		return r.checkTargetWindows(field, desc, []string{written, canon}, access, isWorkdir)
	}
	for _, d := range serviceTrees {
		if p := filepath.Clean(written); Within(p, d) || Within(canon, d) {
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
		if d, tree, refused := dangerousWriteRoot(p); refused {
			msg := fmt.Sprintf("read-write access to %s would let the workload modify the host system", desc)
			if tree {
				msg = fmt.Sprintf("read-write access to %s (under %s) would let the workload modify the host system", desc, d)
			}
			r.fail(field, msg, hint, nil)
			return false
		}
	}
	return true
}

// effective returns the grant that decides access to canonical path q: the
// grant of q itself or of its nearest granted ancestor (nil if none).
func (r *resolver) effective(q string) *PathGrant {
	if !filepath.IsAbs(q) {
		return nil
	}
	for p := q; ; p = filepath.Dir(p) {
		if g, ok := r.grants[p]; ok {
			return g
		}
		if filepath.Dir(p) == p { // "/" or a volume root (C:\)
			return nil
		}
	}
}

// protectedEntry is one entry of the effective protected list and the
// index of the entry as written that it comes from.
type protectedEntry struct {
	path  string
	index int
}

// protectedEntries is the effective protected list: DefaultProtected
// when none is written, with ".git" replaced by GitCommitProtected in git
// commit mode.
func (p *Policy) protectedEntries() []protectedEntry {
	entries := p.Filesystem.Protected
	if entries == nil {
		entries = DefaultProtected
	}
	var out []protectedEntry
	for i, e := range entries {
		if p.Filesystem.Git == GitCommit && filepath.Clean(e) == ".git" {
			for _, c := range GitCommitProtected {
				out = append(out, protectedEntry{c, i})
			}
		} else {
			out = append(out, protectedEntry{e, i})
		}
	}
	return out
}

// inProtected reports whether canonical path p is at or inside protected
// entry e: a relative entry anywhere along p (".git" in /w/.git/objects),
// an absolute one (expanded) above it.
func inProtected(p, e string, r *resolver) bool {
	if absEntry(e) {
		abs := e
		switch {
		case strings.HasPrefix(e, "~"):
			abs = filepath.Join(r.home, strings.TrimPrefix(e, "~"))
		case strings.HasPrefix(e, "{workdir}"):
			abs = filepath.Join(r.workdir, strings.TrimPrefix(e, "{workdir}"))
		}
		return Within(p, filepath.Clean(abs))
	}
	sep := string(filepath.Separator)
	e = strings.Trim(filepath.Clean(e), sep)
	if filepath.Separator == '\\' { // Windows: names compare without case
		p, e = strings.ToLower(p), strings.ToLower(e)
	}
	return strings.HasSuffix(p, sep+e) || strings.Contains(p+sep, sep+e+sep)
}

// absEntry reports whether protected entry e names one path (absolute,
// "~"- or "{workdir}"-rooted) rather than a name under every root.
func absEntry(e string) bool {
	return strings.HasPrefix(e, "/") || filepath.IsAbs(e) || strings.HasPrefix(e, "~") || strings.HasPrefix(e, "{workdir}")
}

// protect turns the protected entries into ro grants, returning the
// protected paths that could not be bound (symlinks; sorted, unique) and
// the placeholders for the absent ones inside read-write areas.
func (r *resolver) protect() ([]string, []Placeholder) {
	entries := r.p.protectedEntries()
	var roots []string
	for _, g := range r.grants {
		if g.Access != AccessReadWrite {
			continue
		}
		// A read-write grant inside a protected path (cd ~/.ssh; a
		// workdir in .git/) would make it writable: refused.
		for _, e := range entries {
			if inProtected(g.Path, e.path, r) {
				r.fail(g.Field, fmt.Sprintf("read-write access to %s is inside the protected path %s", g.Path, e.path),
					"grant a directory outside it, or remove the entry from filesystem.protected (protected["+strconv.Itoa(e.index)+"])", nil)
			}
		}
		if g.Dir {
			roots = append(roots, g.Path)
		}
	}
	sort.Strings(roots)
	skipped := map[string]bool{}
	holders := map[string]Placeholder{}
	var adds []PathGrant
	try := func(field, joined string) {
		fi, err := os.Lstat(joined)
		leftover := err == nil && IsPlaceholder(joined)
		if leftover {
			err = fs.ErrNotExist // another run's placeholder: held by this one too
		}
		if err != nil {
			if missing(err) {
				if ph, ok := r.placeholder(field, joined); ok {
					if leftover {
						ph.Dir = fi.IsDir() // as it was made
					}
					if _, dup := holders[ph.Path]; !dup {
						holders[ph.Path] = ph
					}
				} else if g := r.effective(filepath.Dir(joined)); g != nil && g.Access == AccessReadWrite {
					skipped[joined] = true // its directory is missing too, or it takes no placeholder: reported after the run if made
				}
			} else {
				r.fail(field, fmt.Sprintf("cannot inspect protected path %s: %v", joined, unwrapPath(err)), "check its permissions", err)
			}
			return
		}
		canon, err := canonical(joined)
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
		if canon != joined {
			// The target is protected too, whatever grant it is under
			// (a ~/.bashrc linking into a granted ~/dotfiles), but the
			// link is what tools open, and a link in a writable
			// directory can be replaced.
			skipped[joined] = true
		}
		if g.Access != AccessReadWrite {
			return // already read-only or denied
		}
		target, err := os.Stat(canon)
		if err != nil {
			skipped[joined] = true
			return
		}
		adds = append(adds, PathGrant{Path: canon, Access: AccessReadOnly, Dir: target.IsDir(), Field: field, Inode: FileIDOf(target)})
	}
	for _, pe := range entries {
		e := pe.path
		field := fmt.Sprintf("filesystem.protected[%d]", pe.index)
		if absEntry(e) {
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
	adds = nil
	// What git reads for a root's repository: the configuration files it
	// includes and its configured hooks directory are as dangerous as
	// .git/config and .git/hooks (after the entries above, so that what
	// a read-only .git holds needs no grant of its own).
	if r.protectsGit(entries) {
		for _, root := range roots {
			files, hooks := GitReads(root, r.home)
			for _, f := range files {
				if _, err := os.Lstat(f); err == nil {
					try("filesystem.protected (git configuration of "+root+")", f)
				} else if g := r.effective(filepath.Dir(f)); missing(err) && g != nil && g.Access == AccessReadWrite {
					skipped[f] = true // an include that is not there yet: reported if made
				}
			}
			for _, h := range hooks {
				try("filesystem.protected (core.hooksPath of "+root+")", h)
			}
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
		out = nil
	}
	var phs []Placeholder
	for _, ph := range holders {
		if g := r.effective(ph.Path); g != nil && g.Access == AccessReadWrite {
			phs = append(phs, ph)
		}
	}
	sort.Slice(phs, func(i, j int) bool { return phs[i].Path < phs[j].Path })
	return out, phs
}

// protectsGit reports whether entries keep .git's hooks read-only.
func (r *resolver) protectsGit(entries []protectedEntry) bool {
	for _, e := range entries {
		if c := filepath.ToSlash(filepath.Clean(e.path)); c == ".git" || c == ".git/hooks" {
			return true
		}
	}
	return false
}

// placeholder returns the placeholder that keeps the absent protected
// path joined from being created, when its directory exists and the
// workload can write it. A longer entry whose directory is missing too
// (".config/corral" without .config) gets none: holding the directory
// would keep the workload out of all of it; the scan after the run
// reports the entry if it was made.
func (r *resolver) placeholder(field, joined string) (Placeholder, bool) {
	canon, err := canonical(filepath.Dir(joined))
	if err != nil {
		return Placeholder{}, false
	}
	if fi, err := os.Stat(canon); err != nil || !fi.IsDir() {
		return Placeholder{}, false
	}
	if g := r.effective(canon); g == nil || g.Access != AccessReadWrite {
		return Placeholder{}, false // invisible or read-only: nothing can be created
	}
	name := filepath.Base(joined)
	if noPlaceholder[name] {
		return Placeholder{}, false // reported if made
	}
	// An empty directory, which git status does not list and tools that
	// read a name as configuration (npm's .npmrc, a shell's .bashrc)
	// skip or report; inside .git git's own layout decides.
	dir := !(filepath.Base(canon) == ".git" && strings.HasPrefix(name, "config"))
	return Placeholder{Path: filepath.Join(canon, name), Dir: dir, Field: field}, true
}

// GitReads returns what git reads for the repository whose worktree is
// root (gitrepository-layout(5), git-config(1) FILES and INCLUDES): the
// configuration files, in git's order (system, global, the common
// directory's config, the git directory's config and config.worktree, each
// followed by what it includes through include.path and includeIf.*.path,
// whatever the condition), and every hooks directory a core.hooksPath
// there names (relative to root; "~" is home): which one wins can depend
// on an includeIf condition, so all are returned. A .git file ("gitdir:
// ...", a linked worktree or a submodule) and a commondir file are
// followed. Nothing is read when root has no .git.
func GitReads(root, home string) (files, hooks []string) {
	gitDir := filepath.Join(root, ".git")
	fi, err := os.Lstat(gitDir)
	if err != nil {
		return nil, nil
	}
	if fi.Mode().IsRegular() {
		data, err := readSmall(gitDir)
		target, ok := strings.CutPrefix(strings.TrimSpace(string(data)), "gitdir:")
		if err != nil || !ok {
			return nil, nil
		}
		gitDir = absFrom(root, strings.TrimSpace(target))
	}
	common := gitDir
	if data, err := readSmall(filepath.Join(gitDir, "commondir")); err == nil {
		common = absFrom(gitDir, strings.TrimSpace(string(data)))
	}
	ordered := []string{systemGitConfig()}
	if home != "" {
		ordered = append(ordered, filepath.Join(home, ".config", "git", "config"), filepath.Join(home, ".gitconfig"))
	}
	ordered = append(ordered, filepath.Join(common, "config"), filepath.Join(gitDir, "config.worktree"))
	seen := map[string]bool{}
	var visit func(f string, depth int)
	visit = func(f string, depth int) {
		if seen[f] || depth > 10 { // git's own include depth limit is 10
			return
		}
		seen[f] = true
		files = append(files, f)
		data, err := readSmall(f)
		if err != nil {
			return
		}
		for _, v := range ParseGitConfig(data) {
			switch {
			case v.Key == "core.hookspath":
				if h := hooksDir(root, home, v.Value); h != "" {
					hooks = append(hooks, h)
				}
			case v.Key == "include.path" || strings.HasPrefix(v.Key, "includeif.") && strings.HasSuffix(v.Key, ".path"):
				inc := v.Value
				if inc == "~" || strings.HasPrefix(inc, "~/") {
					if home == "" {
						continue
					}
					inc = filepath.Join(home, inc[1:])
				}
				visit(absFrom(filepath.Dir(f), inc), depth+1)
			}
		}
	}
	for _, f := range ordered {
		visit(filepath.Clean(f), 0)
	}
	return files, hooks
}

// systemGitConfig is git's system configuration file: /etc/gitconfig, or
// on Windows Git for Windows' %ProgramFiles%\Git\etc\gitconfig.
func systemGitConfig() string {
	if runtime.GOOS == "windows" {
		pf := os.Getenv("ProgramFiles")
		if pf == "" {
			pf = `C:\Program Files`
		}
		return filepath.Join(pf, "Git", "etc", "gitconfig")
	}
	return "/etc/gitconfig"
}

// hooksDir is the directory a core.hooksPath value names, or "".
func hooksDir(root, home, v string) string {
	switch {
	case v == "":
		return ""
	case v == "~" || strings.HasPrefix(v, "~/"):
		if home == "" {
			return ""
		}
		return filepath.Join(home, v[1:])
	}
	return absFrom(root, v)
}

// absFrom is p made absolute relative to dir, clean.
func absFrom(dir, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(dir, p)
}

// readSmall reads at most 1 MiB of the regular file at p (git
// configuration is small); a fifo (opened non-blocking) or a device is not
// read.
func readSmall(p string) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	return io.ReadAll(io.LimitReader(f, 1<<20))
}

// depth is the number of components of a clean absolute path ("/" and
// C:\ are 0).
func depth(p string) int {
	p = strings.TrimRight(strings.ReplaceAll(p, `\`, "/"), "/")
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
// allowed by env.Pass (DefaultEnvPass when nil), then env.Set, then the
// credentials' exposed placeholders (which replace a passed variable of
// their name, so its real value never enters), never HOME, with PATH
// defaulting to DefaultPATH; sorted by name.
//
// For OSWindows names compare without case (Windows' environment is
// case-insensitive: a passed "PATH" is the caller's "Path"), a set or
// exposed variable replaces a passed one whatever its case, the default
// pass list is DefaultEnvPassWindows and the default PATH
// DefaultPATHWindows.
func resolveEnv(target OS, env Env, environ []string, exposed map[string]string) []string {
	key := func(name string) string { return name }
	if target == OSWindows {
		key = strings.ToUpper
	}
	vars := map[string][2]string{} // key(name) -> name as written, value
	for _, kv := range environ {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || name == "" || key(name) == "HOME" || strings.ContainsRune(kv, 0) {
			continue
		}
		if _, dup := vars[key(name)]; dup {
			continue // the first wins, as in getenv
		}
		if passIndexFor(target, env, name) >= 0 {
			vars[key(name)] = [2]string{name, val}
		}
	}
	for _, m := range []map[string]string{env.Set, exposed} {
		for name, val := range m {
			if key(name) != "HOME" {
				vars[key(name)] = [2]string{name, val}
			}
		}
	}
	if _, ok := vars[key("PATH")]; !ok {
		vars[key("PATH")] = [2]string{"PATH", DefaultPATH}
		if target == OSWindows {
			vars[key("PATH")] = [2]string{"PATH", DefaultPATHWindows}
		}
	}
	out := make([]string, 0, len(vars))
	for _, k := range sortedKeys(vars) {
		out = append(out, vars[k][0]+"="+vars[k][1])
	}
	return out
}

// passIndexFor is the index of the first pattern of the effective
// env.Pass (DefaultEnvPass when nil) that passes the variable name (a
// trailing "*" matches a prefix), or -1.
//
// For OSWindows names compare without case and the default list is
// DefaultEnvPassWindows.
func passIndexFor(target OS, env Env, name string) int {
	pass, fold := env.Pass, func(s string) string { return s }
	if target == OSWindows {
		fold = strings.ToUpper
	}
	if pass == nil {
		pass = defaultEnvPass(target)
	}
	for i, pat := range pass {
		if prefix, ok := strings.CutSuffix(fold(pat), "*"); ok {
			if strings.HasPrefix(fold(name), prefix) {
				return i
			}
		} else if fold(name) == fold(pat) {
			return i
		}
	}
	return -1
}

// ProtectedNames are the single-component protected entries (".git",
// ".bashrc"): the names a provider also keeps read-only where they appear
// deeper inside a read-write tree.
func (r *Resolved) ProtectedNames() map[string]bool {
	p := r.Policy
	if p == nil {
		p = &Policy{}
	}
	names := map[string]bool{}
	for _, pe := range p.protectedEntries() {
		e := pe.path
		if e != "" && !strings.ContainsAny(e, "/~{") {
			names[e] = true
		}
		if strings.HasPrefix(e, ".git/") {
			names[".git"] = true // git commit mode: a nested repository stays read-only whole
		}
	}
	return names
}

// WritableRoots are the directories the workload can write: the
// read-write grants that are directories, parents before children.
func (r *Resolved) WritableRoots() []string {
	var out []string
	for _, g := range r.Grants {
		if g.Access == AccessReadWrite && g.Dir {
			out = append(out, g.Path)
		}
	}
	return out
}

// SkippedLinks splits Skipped into the protected paths that are
// symlinks (the link can be replaced) and the absent ones (no placeholder
// holds them), for the loss report.
func (r *Resolved) SkippedLinks() (links, absent []string) {
	for _, p := range r.Skipped {
		if fi, err := os.Lstat(p); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			links = append(links, p)
		} else {
			absent = append(absent, p)
		}
	}
	return links, absent
}

// Covering is the most specific grant of r for path (path itself or a
// directory above it), or the zero PathGrant.
func (r *Resolved) Covering(path string) PathGrant {
	var best PathGrant
	for _, g := range r.Grants {
		if Within(path, g.Path) && len(g.Path) >= len(best.Path) {
			best = g
		}
	}
	return best
}

// InspectsEgress reports whether the proxy terminates TLS for some host
// of r (network proxy with an inspected allow entry): the sandbox then
// needs its CA's trust files.
func (r *Resolved) InspectsEgress() bool {
	return r.Network == NetworkProxy && slices.ContainsFunc(r.Egress.Allow, Endpoint.Inspected)
}

// Visible reports whether path is inside the sandbox: its covering grant
// exists and is not a deny.
func (r *Resolved) Visible(path string) bool {
	best := r.Covering(path)
	return best.Path != "" && best.Access != AccessDeny
}

// DockerImage is the image the docker provider runs for r: the policy's
// docker.image (which `corral run --image` sets), else DefaultDockerImage.
func (r *Resolved) DockerImage() string {
	if r.Policy != nil && r.Policy.Docker != nil && r.Policy.Docker.Image != "" {
		return r.Policy.Docker.Image
	}
	return DefaultDockerImage
}

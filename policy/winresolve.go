package policy

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// winLayout is where a Windows host keeps what no grant may open. Each
// list is the union of the stock locations on C: (and on SystemDrive),
// the caller's environment (SystemRoot, windir, ProgramFiles,
// ProgramFiles(x86), ProgramW6432, ProgramFiles(Arm), ProgramData, and
// PUBLIC, whose parent is a profiles directory; each a drive path) and, on
// a Windows host, what the system says (GetSystemWindowsDirectoryW, the
// known folders: hostWinFolders). The environment can only add, so a
// caller's hostile variables never shrink what is refused.
type winLayout struct {
	system      []string // Windows, Program Files (all), ProgramData: no read-write grant at or under them
	programData []string // ProgramData (also in system): Docker's trees are under it
	profiles    []string // C:\Users: a folder in one is a profile
}

func newWinLayout(environ []string) winLayout {
	var l winLayout
	env := func(name string) string {
		for _, kv := range environ {
			if k, v, ok := strings.Cut(kv, "="); ok && strings.EqualFold(k, name) {
				if len(v) == 2 && isDriveLetter(v[0]) && v[1] == ':' {
					v += `\`
				}
				if msg, _ := WindowsPathProblem(v); msg == "" {
					return WinClean(v)
				}
				return ""
			}
		}
		return ""
	}
	drives := []string{`C:\`}
	if d := env("SystemDrive"); d != "" && len(d) == 3 && !strings.EqualFold(d, `C:\`) {
		drives = append(drives, d)
	}
	add := func(list *[]string, ps ...string) {
		for _, p := range ps {
			if p != "" && !slices.ContainsFunc(*list, func(q string) bool { return strings.EqualFold(p, q) }) {
				*list = append(*list, p)
			}
		}
	}
	for _, d := range drives {
		add(&l.system, d+`Windows`, d+`Program Files`, d+`Program Files (x86)`, d+`Program Files (Arm)`)
		add(&l.programData, d+`ProgramData`)
		add(&l.profiles, d+`Users`)
	}
	add(&l.system, env("SystemRoot"), env("windir"), env("ProgramFiles"), env("ProgramFiles(x86)"), env("ProgramW6432"), env("ProgramFiles(Arm)"))
	add(&l.programData, env("ProgramData"))
	if pub := env("PUBLIC"); pub != "" && WinDir(pub) != pub {
		add(&l.profiles, WinDir(pub))
	}
	host := hostWinFolders()
	add(&l.system, host.system...)
	add(&l.programData, host.programData...)
	add(&l.system, l.programData...)
	add(&l.profiles, host.profiles...)
	return l
}

// winUserAutoruns are the folders of a profile (relative to it) from which
// Windows or the user's shells run what is there later, outside any
// sandbox: the Startup folder and the rest of Roaming\Microsoft, Local\
// Microsoft (WindowsApps is on PATH), the user's temp folder (shared by
// every program of the user, as /tmp), the PowerShell profiles. No
// read-write grant at, under or above them.
var winUserAutoruns = []string{`AppData\Roaming\Microsoft`, `AppData\Local\Microsoft`, `AppData\Local\Temp`, `Documents\PowerShell`, `Documents\WindowsPowerShell`}

// checkTargetWindows is checkTarget's host checks for a Windows policy, on
// each of paths (the grant as written and its canonical target; clean
// Windows paths):
//
//   - no grant at all (only deny) of another user's profile (a folder of
//     a profiles directory other than the caller's and Public), or of
//     the trees where Docker and WSL keep their engines' pipes, sockets and
//     disks (ProgramData\Docker, ProgramData\DockerDesktop, the caller's
//     AppData\Local\Docker): a read-only grant of a socket still lets a
//     client connect;
//   - no read-write grant of a drive root, a profiles directory, the
//     Public profile, the caller's profile itself, anything in the
//     Windows directory, Program Files (each) or ProgramData — system
//     software and its configuration, which other users' processes (and
//     services, as SYSTEM) run and read — nor at, under or above the
//     caller's winUserAutoruns.
func (r *resolver) checkTargetWindows(field, desc string, paths []string, access Access, isWorkdir bool) bool {
	if r.winLayout == nil {
		var environ []string
		if HostOS() == OSWindows {
			environ = r.ctx.Environ
		}
		l := newWinLayout(environ)
		r.winLayout = &l
	}
	l := *r.winLayout
	hint := "grant it read_only, or grant a narrower folder read_write"
	if isWorkdir {
		hint = "cd into a project folder before running corral, or set filesystem.include_workdir: false"
	}
	within := Within
	if HostOS() != OSWindows {
		within = WinWithin // lexical resolution on another host
	}
	same := func(a, b string) bool { return a != "" && b != "" && within(a, b) && within(b, a) }
	// profileIn is the folder name (lower case) of the profile of
	// profiles directory d that p is in, or "".
	profileIn := func(d, p string) string {
		if p == "" || !within(p, d) || same(p, d) {
			return ""
		}
		name, _, _ := strings.Cut(strings.ToLower(winRel(d, p)), `\`)
		return name
	}
	var service []string
	for _, s := range l.programData {
		service = append(service, WinJoin(s, "Docker"), WinJoin(s, "DockerDesktop"))
	}
	var autoruns []string
	for _, h := range []string{r.home, r.homeCanon} {
		if h == "" {
			continue
		}
		service = append(service, WinJoin(h, `AppData\Local\Docker`))
		for _, a := range winUserAutoruns {
			autoruns = append(autoruns, WinJoin(h, a))
		}
	}
	for _, p := range paths {
		if p == "" {
			continue
		}
		for _, d := range l.profiles {
			if name := profileIn(d, p); name != "" && name != profileIn(d, r.home) && name != "public" {
				r.fail(field, fmt.Sprintf("%s is inside another user's profile (%s)", desc, WinJoin(d, name)),
					"grant folders of your own profile or outside the profiles folder; another user's files are theirs to share", nil)
				return false
			}
		}
		for _, s := range service {
			if within(p, s) {
				r.fail(field, fmt.Sprintf("%s is under %s, where Docker keeps its engine's pipes, sockets and disks (a read-only grant does not stop a client from connecting)", desc, s),
					"remove the grant; list it under deny to hide it", nil)
				return false
			}
		}
	}
	if access != AccessReadWrite {
		return true
	}
	for _, p := range paths {
		if p == "" {
			continue
		}
		if same(p, WinDir(p)) || len(p) <= 3 {
			r.fail(field, fmt.Sprintf("read-write access to the drive root %s would let the workload modify the host system", desc), hint, nil)
			return false
		}
		for _, d := range l.profiles {
			if same(p, d) {
				r.fail(field, fmt.Sprintf("read-write access to %s, the folder of every user's profile, is too broad", desc), hint, nil)
				return false
			}
			if same(p, WinJoin(d, "Public")) {
				r.fail(field, fmt.Sprintf("read-write access to %s, the profile every user's programs read (its Desktop, Documents, Start Menu), is too broad", desc), hint, nil)
				return false
			}
		}
		if r.home != "" && (same(p, r.home) || same(p, r.homeCanon)) {
			if !isWorkdir {
				hint = `grant specific project folders instead (e.g. ~\src\myproject)`
			}
			r.fail(field, fmt.Sprintf("read-write access to your profile %s is too broad", desc), hint, nil)
			return false
		}
		for _, d := range l.system {
			if within(p, d) {
				r.fail(field, fmt.Sprintf("read-write access to %s (under %s) would let the workload modify the host system", desc, d), hint, nil)
				return false
			}
		}
		for _, a := range autoruns {
			if within(p, a) || within(a, p) {
				r.fail(field, fmt.Sprintf("read-write access to %s would let the workload write %s, from which Windows or your shells run programs later, outside the sandbox", desc, a), hint, nil)
				return false
			}
		}
	}
	return true
}

// winRel is path relative to dir (path within dir, clean, any case).
func winRel(dir, path string) string {
	if len(path) <= len(dir) {
		return ""
	}
	return strings.TrimPrefix(path[len(dir):], `\`)
}

// plantedLinkWindows is plantedLink for a Windows host: it walks path from
// its volume as path resolution does, following each reparse point — a
// symbolic link, a junction or a volume mount point (os.Lstat:
// ModeSymlink or ModeIrregular since Go 1.23) — to its target, and returns
// the first such link that someone other than the policy's author could
// have made: one whose folder (canonical, so an 8.3 or linked way to it
// counts) lies inside a read-write grant of this policy, where the
// workload can make links, or one not owned by SYSTEM, TrustedInstaller or
// Administrators (linkOwnerUntrusted: the Windows counterpart of Linux's
// root-owned rule; links a user made, which an earlier run granted their
// folder could have made, are refused).
func (r *resolver) plantedLinkWindows(path string) (link, target, why string) {
	vol := filepath.VolumeName(path)
	cur := vol + `\`
	todo := strings.Split(strings.TrimPrefix(path[len(vol):], `\`), `\`)
	for links := 0; len(todo) > 0; {
		c := todo[0]
		todo = todo[1:]
		if c == "" || c == "." {
			continue
		}
		next := filepath.Join(cur, c)
		fi, err := os.Lstat(next)
		if err != nil {
			return "", "", ""
		}
		if fi.Mode()&(fs.ModeSymlink|fs.ModeIrregular) == 0 {
			cur = next
			continue
		}
		t, err := canonical(next)
		if err != nil {
			return "", "", "" // dangling or unreadable: resolution reports it
		}
		dir := cur
		if c, err := canonical(cur); err == nil {
			dir = c
		}
		if strings.EqualFold(t, filepath.Join(dir, c)) {
			// A reparse point that names no other place (a OneDrive
			// placeholder, a dedup file): not a link.
			cur = next
			continue
		}
		for _, g := range r.grants {
			if g.Access == AccessReadWrite && Within(dir, g.Path) {
				return next, t, fmt.Sprintf("lives in %s, inside the read-write grant %s (%s), where the workload can make links and junctions", dir, g.Path, g.Field)
			}
		}
		if why := linkOwnerUntrusted(next); why != "" {
			return next, t, why
		}
		if links++; links > maxLinks {
			return "", "", ""
		}
		cur = t // the target is canonical: continue from it
	}
	return "", "", ""
}

// winInProtected is inProtected for a lexical Windows resolution: names
// compared without case, "\\" separators.
func (r *resolver) winInProtected(p, e string) bool {
	if winAbsEntry(e) {
		w := strings.ReplaceAll(e, "/", `\`)
		switch {
		case strings.HasPrefix(w, "~"):
			w = WinJoin(r.home, w[1:])
		case strings.HasPrefix(w, "{workdir}"):
			w = WinJoin(r.workdir, w[len("{workdir}"):])
		}
		return WinWithin(p, WinClean(w))
	}
	lp, le := strings.ToLower(p), strings.ToLower(WinClean(e))
	return strings.HasSuffix(lp, `\`+le) || strings.Contains(lp+`\`, `\`+le+`\`)
}

// winAbsEntry is absEntry for a Windows policy on any host: a drive path
// names one path too.
func winAbsEntry(e string) bool {
	return absEntry(e) || len(e) >= 3 && isDriveLetter(e[0]) && e[1] == ':' && (e[2] == '\\' || e[2] == '/')
}

// LexicalNote is Resolved.Lexical for a Windows policy resolved on another
// host.
const LexicalNote = "resolved lexically for Windows on a non-Windows host: existence, links, junctions, 8.3 names, case and which protected paths exist were not checked (resolve on the Windows host for that)"

// runLexicalWindows resolves a Windows policy on another host (corral
// policy validate --os windows, policy explain --provider mxc), without
// any file-system access: ctx.Workdir and ctx.Home must be Windows drive
// paths (Home may be empty: "~" is then an error); every path is expanded
// and WinClean'ed; an 8.3 alias component is refused, since only the host
// knows what it names; precedence is applied with names compared without
// case; checkTargetWindows runs on the written paths. Every rule is kept,
// optional or not (existence is unknown), and the protected entries under
// the read-write roots are listed in Skipped (unknown). Resolved.Lexical
// says so.
func (r *resolver) runLexicalWindows() (*Resolved, []*Error) {
	p := r.p
	const hint = `give the Windows working directory with -C/--workdir, e.g. -C 'C:\Users\me\work'`
	wd := r.ctx.Workdir
	if msg, _ := checkWinPathSyntax(wd, false); msg != "" || len(wd) < 3 || wd[1] != ':' {
		return nil, []*Error{{Field: "workdir", Msg: fmt.Sprintf("working directory %q is not a Windows drive path", wd), Hint: hint}}
	}
	r.workdir = WinClean(wd)
	if h := r.ctx.Home; h != "" {
		if msg, _ := checkWinPathSyntax(h, false); msg != "" || len(h) < 3 || h[1] != ':' {
			return nil, []*Error{{Field: "home", Msg: fmt.Sprintf("profile %q is not a Windows drive path", h), Hint: `set USERPROFILE to a drive path such as C:\Users\me`}}
		}
		r.home = WinClean(h)
		r.homeCanon = r.home
	}
	grants := map[string]*PathGrant{} // by lower-cased path
	put := func(g PathGrant) {
		k := strings.ToLower(g.Path)
		if old, ok := grants[k]; ok && rank(old.Access) >= rank(g.Access) {
			return
		}
		grants[k] = &g
	}
	expand := func(field, s string) (string, bool) {
		w := strings.ReplaceAll(s, "/", `\`)
		switch {
		case w == "~" || strings.HasPrefix(w, `~\`):
			if r.home == "" {
				r.fail(field, fmt.Sprintf("%q uses ~ but the profile is unknown", s), "write the absolute path", nil)
				return "", false
			}
			w = WinJoin(r.home, w[1:])
		case w == "{workdir}" || strings.HasPrefix(w, `{workdir}\`):
			w = WinJoin(r.workdir, w[len("{workdir}"):])
		default:
			w = WinClean(w)
		}
		for _, c := range strings.Split(w, `\`) {
			if winShortName(c) {
				r.fail(field, fmt.Sprintf("%s has the 8.3 short name %q, which only the Windows host can expand to the folder it names", w, c), "write the long name (dir /x shows both)", nil)
				return "", false
			}
		}
		return w, true
	}
	for _, l := range []struct {
		name   string
		rules  []PathRule
		access Access
	}{
		{"read_write", p.Filesystem.ReadWrite, AccessReadWrite},
		{"read_only", p.Filesystem.ReadOnly, AccessReadOnly},
		{"deny", p.Filesystem.Deny, AccessDeny},
	} {
		for i, rule := range l.rules {
			field := fmt.Sprintf("filesystem.%s[%d]", l.name, i)
			w, ok := expand(field, rule.Path)
			if ok && r.checkTarget(field, w, w, nil, l.access, false) {
				put(PathGrant{Path: w, Access: l.access, Dir: true, Field: field})
			}
		}
	}
	if p.Filesystem.IncludeWorkdir == nil || *p.Filesystem.IncludeWorkdir {
		if r.checkTarget("filesystem.include_workdir", r.workdir, r.workdir, nil, AccessReadWrite, true) {
			put(PathGrant{Path: r.workdir, Access: AccessReadWrite, Dir: true, Field: "filesystem.include_workdir"})
		}
	}
	sorted := make([]PathGrant, 0, len(grants))
	for _, g := range grants {
		sorted = append(sorted, *g)
	}
	sortGrants(sorted)
	// A read-write grant inside a protected path is refused, as on the
	// host (protect).
	for _, g := range sorted {
		if g.Access != AccessReadWrite {
			continue
		}
		for _, e := range p.protectedEntries() {
			if r.winInProtected(g.Path, e.path) {
				r.fail(g.Field, fmt.Sprintf("read-write access to %s is inside the protected path %s", g.Path, e.path),
					"grant a directory outside it, or remove the entry from filesystem.protected (protected["+strconv.Itoa(e.index)+"])", nil)
			}
		}
	}
	if len(r.errs) > 0 {
		return nil, r.errs
	}
	out := &Resolved{
		Policy: p, Hash: Hash(p), Home: r.home, Workdir: r.workdir,
		Network: p.networkMode(), Egress: p.Network, Limits: p.Process.Limits, Layers: Layers{}, RunAs: p.Process.RunAsUser,
		Lexical: LexicalNote,
	}
	for k, v := range p.Layers {
		out.Layers[k] = v
	}
	out.Grants = sorted
	for _, e := range p.protectedEntries() {
		if winAbsEntry(e.path) {
			if w, ok := expand("filesystem.protected", e.path); ok {
				out.Skipped = append(out.Skipped, w)
			}
			continue
		}
		for _, g := range sorted {
			if g.Access == AccessReadWrite {
				out.Skipped = append(out.Skipped, WinJoin(g.Path, e.path))
			}
		}
	}
	for i, c := range p.Credentials {
		out.Credentials = append(out.Credentials, ResolvedCredential{Credential: c, Field: fmt.Sprintf("credentials[%d]", i)})
	}
	// Not ctx.Environ: this host's variables are not the Windows
	// caller's (PATH would be a Linux one).
	out.Env = resolveEnv(OSWindows, p.Process.Env, nil, nil)
	return out, nil
}

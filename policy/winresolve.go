package policy

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// winLayout is where a Windows host keeps what no grant may open: from the
// caller's environment (SystemRoot, ProgramFiles, ProgramFiles(x86),
// ProgramData, SystemDrive), each a clean drive path, else the stock
// location on C:.
type winLayout struct {
	drive        string   // C:\
	systemRoot   string   // C:\Windows
	programFiles []string // C:\Program Files, C:\Program Files (x86)
	programData  string   // C:\ProgramData
	profiles     string   // C:\Users: the parent of the home, else SystemDrive\Users
}

func newWinLayout(environ []string, home string) winLayout {
	get := func(name, def string) string {
		for _, kv := range environ {
			if k, v, ok := strings.Cut(kv, "="); ok && strings.EqualFold(k, name) {
				if msg, _ := checkWinPathSyntax(v, false); msg == "" && len(v) >= 3 && v[1] == ':' {
					return WinClean(v)
				}
				break
			}
		}
		return def
	}
	drive := get("SystemDrive", `C:`)
	if len(drive) >= 2 {
		drive = strings.ToUpper(drive[:1]) + `:\`
	}
	l := winLayout{
		drive:       drive,
		systemRoot:  get("SystemRoot", drive+`Windows`),
		programData: get("ProgramData", drive+`ProgramData`),
		profiles:    drive + `Users`,
	}
	l.programFiles = []string{get("ProgramFiles", drive+`Program Files`), get("ProgramFiles(x86)", drive+`Program Files (x86)`)}
	if home != "" && WinDir(home) != home {
		l.profiles = WinDir(home)
	}
	return l
}

// checkTargetWindows is checkTarget's host checks for a Windows policy, on
// each of paths (the grant as written and its canonical target; clean
// Windows paths):
//
//   - no grant at all (only deny) of another user's profile (a folder of
//     the profiles directory other than the caller's and Public), or of
//     the trees where Docker and WSL keep their engines' pipes, sockets and
//     disks (ProgramData\Docker, ProgramData\DockerDesktop, the caller's
//     AppData\Local\Docker): a read-only grant of a socket still lets a
//     client connect;
//   - no read-write grant of a drive root, the profiles directory, the
//     caller's profile itself, or anything in the Windows directory,
//     Program Files (both), or ProgramData: system software and its
//     configuration, which other users' processes (and services, as
//     SYSTEM) run and read.
func (r *resolver) checkTargetWindows(field, desc string, paths []string, access Access, isWorkdir bool) bool {
	var environ []string
	if HostOS() == OSWindows {
		environ = r.ctx.Environ
	}
	l := newWinLayout(environ, r.home)
	hint := "grant it read_only, or grant a narrower folder read_write"
	if isWorkdir {
		hint = "cd into a project folder before running corral, or set filesystem.include_workdir: false"
	}
	within := Within
	if HostOS() != OSWindows {
		within = WinWithin // lexical resolution on another host
	}
	same := func(a, b string) bool { return a != "" && b != "" && within(a, b) && within(b, a) }
	own := ""
	if r.home != "" && within(r.home, l.profiles) && !same(r.home, l.profiles) {
		own = strings.ToLower(winRel(l.profiles, r.home))
		own, _, _ = strings.Cut(own, `\`)
	}
	service := []string{WinJoin(l.programData, "Docker"), WinJoin(l.programData, "DockerDesktop")}
	if r.home != "" {
		service = append(service, WinJoin(r.home, `AppData\Local\Docker`))
	}
	for _, p := range paths {
		if p == "" {
			continue
		}
		if within(p, l.profiles) && !same(p, l.profiles) {
			first, _, _ := strings.Cut(strings.ToLower(winRel(l.profiles, p)), `\`)
			if first != own && first != "public" {
				r.fail(field, fmt.Sprintf("%s is inside another user's profile (%s)", desc, WinJoin(l.profiles, first)),
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
		switch {
		case p == "":
		case same(p, WinDir(p)) || len(p) <= 3:
			r.fail(field, fmt.Sprintf("read-write access to the drive root %s would let the workload modify the host system", desc), hint, nil)
			return false
		case same(p, l.profiles):
			r.fail(field, fmt.Sprintf("read-write access to %s, the folder of every user's profile, is too broad", desc), hint, nil)
			return false
		case r.home != "" && (same(p, r.home) || same(p, r.homeCanon)):
			if !isWorkdir {
				hint = `grant specific project folders instead (e.g. ~\src\myproject)`
			}
			r.fail(field, fmt.Sprintf("read-write access to your profile %s is too broad", desc), hint, nil)
			return false
		}
		for _, d := range append([]string{l.systemRoot, l.programData}, l.programFiles...) {
			if within(p, d) {
				r.fail(field, fmt.Sprintf("read-write access to %s (under %s) would let the workload modify the host system", desc, d), hint, nil)
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
// its volume and returns the first component that is a reparse point — a
// symbolic link, a junction or a volume mount point (os.Lstat: ModeSymlink
// or ModeIrregular since Go 1.23) — lying inside a read-write grant of this
// policy, where the workload (of this run, or an earlier one with the same
// grant) can make one. Owners and ACLs are not inspected: Windows has no
// root-owned-directory rule as simple as Linux's, so links elsewhere are
// trusted as the author's view of the system.
func (r *resolver) plantedLinkWindows(path string) (link, target, why string) {
	vol := filepath.VolumeName(path)
	cur := vol + `\`
	for _, c := range strings.Split(strings.TrimPrefix(path[len(vol):], `\`), `\`) {
		if c == "" {
			continue
		}
		next := filepath.Join(cur, c)
		fi, err := os.Lstat(next)
		if err != nil {
			return "", "", ""
		}
		if fi.Mode()&(fs.ModeSymlink|fs.ModeIrregular) != 0 {
			for _, g := range r.grants {
				if g.Access == AccessReadWrite && Within(cur, g.Path) {
					t, err := canonical(next)
					if err != nil {
						t = "(unresolvable)"
					}
					return next, t, fmt.Sprintf("lives in %s, inside the read-write grant %s (%s), where the workload can make links and junctions", cur, g.Path, g.Field)
				}
			}
		}
		cur = next
	}
	return "", "", ""
}

// LexicalNote is Resolved.Lexical for a Windows policy resolved on another
// host.
const LexicalNote = "resolved lexically for Windows on a non-Windows host: existence, links, junctions, 8.3 names, case and protected paths were not checked (resolve on the Windows host for that)"

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
	for _, g := range grants {
		out.Grants = append(out.Grants, *g)
		if g.Access != AccessReadWrite {
			continue
		}
		for _, e := range p.protectedEntries() {
			if !absEntry(e.path) {
				out.Skipped = append(out.Skipped, WinJoin(g.Path, e.path))
			}
		}
	}
	sortGrants(out.Grants)
	for i, c := range p.Credentials {
		out.Credentials = append(out.Credentials, ResolvedCredential{Credential: c, Field: fmt.Sprintf("credentials[%d]", i)})
	}
	// Not ctx.Environ: this host's variables are not the Windows
	// caller's (PATH would be a Linux one).
	out.Env = resolveEnv(OSWindows, p.Process.Env, nil, nil)
	return out, nil
}

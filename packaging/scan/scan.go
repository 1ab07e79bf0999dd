// Package scan lists what Corral made that is still on a machine: the
// files its Debian package installs, its state and runtime directories,
// its agent users and groups, its systemd units, processes of its binary,
// its cgroups, its /tmp names, and docker containers and volumes with its
// labels. scripts/package-cycle.sh runs it after a purge
// (packaging/scan/cmd/corral-scan); docs/install.md says what a purge
// removes.
//
// Every check reads below Options.Root (a temp dir in the tests), so each
// kind can be planted and found; docker is asked through Options.Docker.
// A Finding is Owned when it is the package's own (its files, its default
// state, what it made for that state, processes of /usr/bin/corral): a
// purge must leave none, whatever else runs on the machine. Other findings
// are Corral-made too, but may belong to another corral binary at work
// (a test suite, a build tree's corral); a caller compares them with a
// scan taken before (Diff).
package scan

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Finding is one Corral-made thing still present.
type Finding struct {
	Check  string `json:"check"`  // the Check's Name
	Name   string `json:"name"`   // a path below the root (shown as an absolute path of the scanned system), a user, a pid, a container
	Detail string `json:"detail"` // what marks it as Corral's
	Owned  bool   `json:"owned"`  // the package's own: a purge leaves none
}

// Key identifies a finding across two scans of one machine.
func (f Finding) Key() string { return f.Check + " " + f.Name }

// Check is one kind of thing the scan looks for.
type Check struct {
	Name    string    `json:"name"`
	What    string    `json:"what"`              // what it looks at, and what counts
	Skipped string    `json:"skipped,omitempty"` // why it did not run
	Found   []Finding `json:"found"`
}

// Container is a docker container, as the Engine API's GET
// /containers/json gives it (Names with their leading "/").
type Container struct {
	ID     string            `json:"Id"`
	Names  []string          `json:"Names"`
	Labels map[string]string `json:"Labels"`
	State  string            `json:"State"`
}

// Volume is a docker volume, as GET /volumes gives it.
type Volume struct {
	Name   string            `json:"Name"`
	Labels map[string]string `json:"Labels"`
}

// Docker lists every container (running or not) and volume of a daemon;
// an error means the daemon is not reachable, and the check is skipped.
type Docker func(ctx context.Context) ([]Container, []Volume, error)

// Options are Scan's inputs.
type Options struct {
	// Root is the scanned system's "/" (default "/").
	Root string
	// Files are the package's paths (absolute, as installed: from
	// `dpkg-deb -c`, or /var/lib/dpkg/info/corral.list while installed),
	// checked besides PackageFiles. Directories shared with other packages
	// (/usr, /usr/share/man/man1) count only when they are Corral's alone
	// (their path names corral).
	Files []string
	// Docker lists containers and volumes (nil: the check is skipped).
	Docker Docker
}

// PackageFiles are the paths packaging/deb/nfpm.yaml installs (globs, as
// path.Match takes them).
var PackageFiles = []string{
	"/usr/bin/corral",
	"/usr/share/man/man1/corral.1.gz",
	"/usr/share/man/man1/corral-*.1.gz",
	"/usr/share/bash-completion/completions/corral",
	"/usr/share/zsh/vendor-completions/_corral",
	"/usr/share/fish/vendor_completions.d/corral.fish",
	"/usr/share/doc/corral",
}

// Binary is the package's corral.
const Binary = "/usr/bin/corral"

// The package's default state and runtime directories, and the base of its
// service sessions (service/record.go Base, RunBase; gateway/listen_linux.go).
const (
	StateDir   = "/var/lib/corral"
	RuntimeDir = "/run/corral"
	ServiceDir = StateDir + "/services"
)

// tmpNames are the names corral itself gives what it makes in /tmp
// (os.TempDir): corral-UID (a user's docker and sandbox state,
// provider/docker/sandbox.go, provider/linux/persist_linux.go,
// service/record.go), corral-import-*, corral-default-*.yaml,
// corral-doctor-*, corral-qualify-*, corral-mxc-* and probe-mnt-*
// (MkdirTemp and CreateTemp in service, cmd/corral, qualify, provider/mxc
// and probe), corral-deb.* (packaging/deb/build.sh).
var tmpNames = regexp.MustCompile(`^(corral-[0-9]+|corral-import-.*|corral-default-.*\.yaml|corral-doctor-.*|corral-qualify-.*|corral-mxc-.*|probe-mnt-.*|corral-deb\..*)$`)

// Scan runs every check and returns them in a fixed order, each with what
// it found (sorted by name).
func Scan(ctx context.Context, o Options) []Check {
	if o.Root == "" {
		o.Root = "/"
	}
	s := scanner{o}
	users := s.users()
	checks := []Check{
		{Name: "files", What: "the package's files: " + strings.Join(PackageFiles, " ") + " and the paths given", Found: s.files()},
		{Name: "dpkg", What: "dpkg's record of the package: /var/lib/dpkg/info/corral.*", Found: s.glob("dpkg", "/var/lib/dpkg/info/corral.*", "dpkg's record of package corral", true)},
		{Name: "state", What: StateDir + " (service sessions, the gateway's database and logs, the purge's binary)", Found: s.exists("state", StateDir, "corral's state directory", true)},
		{Name: "runtime", What: RuntimeDir + " and what is in it (sockets, run and sandbox state); /run/corral-* ", Found: s.runtime()},
		{Name: "units", What: "systemd units corral-service-*.service (and their .wants links) in /etc/systemd/system, /run/systemd/system, /usr/lib/systemd/system; owned when they run " + Binary + " or a session of " + ServiceDir, Found: s.units()},
		{Name: "users", What: "users of /etc/passwd named corral-* or carrying corral's mark (GECOS \"corral service NAME\"); owned when marked for a session of " + ServiceDir, Found: users},
		{Name: "groups", What: "groups of /etc/group named corral-*; owned when an owned user's", Found: s.groups(users)},
		{Name: "processes", What: "processes whose executable is " + Binary + " (or its deleted inode after an upgrade)", Found: s.processes()},
		{Name: "cgroups", What: "cgroups named corral or corral-supervisor under /sys/fs/cgroup (the parents of sandboxes' groups), and the groups in them", Found: s.cgroups()},
		{Name: "tmp", What: "entries of /tmp, /var/tmp and /dev/shm with the names corral gives them (" + tmpNames.String() + ")", Found: s.tmp()},
		{Name: "docker", What: "docker containers and volumes with an io.corral.* label"},
	}
	for i := range checks {
		if checks[i].Name == "docker" {
			if o.Docker == nil {
				checks[i].Skipped = "no docker client"
				continue
			}
			found, err := s.docker(ctx)
			if err != nil {
				checks[i].Skipped = "docker is not reachable: " + err.Error()
			}
			checks[i].Found = found
		}
	}
	for i := range checks {
		sort.Slice(checks[i].Found, func(a, b int) bool { return checks[i].Found[a].Name < checks[i].Found[b].Name })
	}
	return checks
}

// Findings flattens checks.
func Findings(checks []Check) []Finding {
	var out []Finding
	for _, c := range checks {
		out = append(out, c.Found...)
	}
	return out
}

// Diff returns the findings of after that matter against a scan before:
// every owned one, and those not in before.
func Diff(before, after []Finding) []Finding {
	had := map[string]bool{}
	for _, f := range before {
		had[f.Key()] = true
	}
	var out []Finding
	for _, f := range after {
		if f.Owned || !had[f.Key()] {
			out = append(out, f)
		}
	}
	return out
}

type scanner struct{ o Options }

// at is the host path of p, an absolute path of the scanned system.
func (s scanner) at(p string) string { return filepath.Join(s.o.Root, filepath.FromSlash(p)) }

func (s scanner) exists(check, p, detail string, owned bool) []Finding {
	if _, err := os.Lstat(s.at(p)); err != nil {
		return nil
	}
	return []Finding{{check, p, detail, owned}}
}

// glob is the paths matching pattern (path.Match syntax in its last
// element only).
func (s scanner) glob(check, pattern, detail string, owned bool) []Finding {
	dir, pat := path.Split(pattern)
	ents, err := os.ReadDir(s.at(dir))
	if err != nil {
		return nil
	}
	var out []Finding
	for _, e := range ents {
		if ok, _ := path.Match(pat, e.Name()); ok {
			out = append(out, Finding{check, path.Join(dir, e.Name()), detail, owned})
		}
	}
	return out
}

func (s scanner) files() []Finding {
	var out []Finding
	seen := map[string]bool{}
	add := func(fs []Finding) {
		for _, f := range fs {
			if !seen[f.Name] {
				seen[f.Name] = true
				out = append(out, f)
			}
		}
	}
	for _, p := range PackageFiles {
		add(s.glob("files", p, "installed by the corral package", true))
	}
	for _, p := range s.o.Files {
		p = path.Clean("/" + strings.TrimPrefix(p, "."))
		if fi, err := os.Lstat(s.at(p)); err == nil && (!fi.IsDir() || strings.Contains(p, "corral")) {
			add([]Finding{{"files", p, "in the corral package", true}})
		}
	}
	return out
}

func (s scanner) runtime() []Finding {
	var out []Finding
	out = append(out, s.exists("runtime", RuntimeDir, "corral's runtime directory", false)...)
	_ = filepath.WalkDir(s.at(RuntimeDir), func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == s.at(RuntimeDir) {
			return nil
		}
		rel, _ := filepath.Rel(s.o.Root, p)
		out = append(out, Finding{"runtime", "/" + filepath.ToSlash(rel), "in corral's runtime directory", false})
		return nil
	})
	out = append(out, s.glob("runtime", "/run/corral-*", "a corral name in /run", false)...)
	return out
}

var unitName = regexp.MustCompile(`^corral-service-[a-z0-9-]+\.service$`)

func (s scanner) units() []Finding {
	var out []Finding
	for _, dir := range []string{"/etc/systemd/system", "/run/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"} {
		dirs := []string{dir}
		wants, _ := filepath.Glob(s.at(dir + "/*.wants"))
		for _, w := range wants {
			dirs = append(dirs, dir+"/"+filepath.Base(w))
		}
		for _, d := range dirs {
			ents, _ := os.ReadDir(s.at(d))
			for _, e := range ents {
				if !unitName.MatchString(e.Name()) {
					continue
				}
				p := d + "/" + e.Name()
				b, err := os.ReadFile(s.at(p))
				if target, lerr := os.Readlink(s.at(p)); lerr == nil && path.IsAbs(filepath.ToSlash(target)) {
					b, err = os.ReadFile(s.at(filepath.ToSlash(target))) // a .wants link: its unit, below the root
				}
				if err != nil {
					b = nil
				}
				owned := unitOwned(string(b))
				detail := "a corral service's unit"
				if d != dir {
					detail = "a corral service's unit, enabled"
				}
				out = append(out, Finding{"units", p, detail, owned})
			}
		}
	}
	return out
}

// unitOwned reports whether a unit's text (service.UnitText) runs the
// package's binary or a session of the package's base.
func unitOwned(text string) bool {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok && (strings.HasPrefix(v, Binary+" ") || strings.HasPrefix(v, `"`+Binary+`"`)) {
			return true
		}
		if v, ok := strings.CutPrefix(line, "PIDFile="); ok && strings.HasPrefix(strings.Trim(v, `"`), ServiceDir+"/") {
			return true
		}
	}
	return false
}

const userMark = "corral service " // service/provision_linux.go userComment

// colonFile reads the records of a passwd(5) or group(5) file.
func (s scanner) colonFile(p string) [][]string {
	f, err := os.Open(s.at(p))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Split(sc.Text(), ":"); len(fs) >= 4 {
			out = append(out, fs)
		}
	}
	return out
}

func (s scanner) users() []Finding {
	var out []Finding
	for _, fs := range s.colonFile("/etc/passwd") {
		if len(fs) < 7 {
			continue
		}
		name, gecos, home := fs[0], fs[4], fs[5]
		svc, marked := strings.CutPrefix(gecos, userMark)
		marked = marked && name == "corral-"+svc
		if !marked && !strings.HasPrefix(name, "corral-") {
			continue
		}
		f := Finding{"users", name, fmt.Sprintf("uid %s, home %s, GECOS %q", fs[2], home, gecos), false}
		if marked && home == ServiceDir+"/"+svc+"/home" {
			f.Owned, f.Detail = true, "agent user of service "+svc+" of "+ServiceDir+": "+f.Detail
		}
		out = append(out, f)
	}
	return out
}

// groups lists the corral-* groups; one is owned when an owned user of
// that name (useradd --user-group's) is in users.
func (s scanner) groups(users []Finding) []Finding {
	var out []Finding
	for _, fs := range s.colonFile("/etc/group") {
		if !strings.HasPrefix(fs[0], "corral-") {
			continue
		}
		owned := slices.ContainsFunc(users, func(u Finding) bool { return u.Owned && u.Name == fs[0] })
		out = append(out, Finding{"groups", fs[0], "gid " + fs[2], owned})
	}
	return out
}

func (s scanner) processes() []Finding {
	var out []Finding
	ents, _ := os.ReadDir(s.at("/proc"))
	for _, e := range ents {
		if strings.Trim(e.Name(), "0123456789") != "" {
			continue
		}
		exe, err := os.Readlink(s.at("/proc/" + e.Name() + "/exe"))
		if err != nil || (exe != Binary && exe != Binary+" (deleted)") {
			continue
		}
		cmd, _ := os.ReadFile(s.at("/proc/" + e.Name() + "/cmdline"))
		out = append(out, Finding{"processes", e.Name(), exe + ": " + strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " ")), true})
	}
	return out
}

// cgroups walks /sys/fs/cgroup to depth 8, not below a corral directory
// (whose children are its groups, listed with it).
func (s scanner) cgroups() []Finding {
	var out []Finding
	root := s.at("/sys/fs/cgroup")
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		if rel != "." && strings.Count(filepath.ToSlash(rel), "/") >= 8 {
			return fs.SkipDir
		}
		if d.Name() != "corral" && d.Name() != "corral-supervisor" {
			return nil
		}
		show := "/sys/fs/cgroup/" + filepath.ToSlash(rel)
		out = append(out, Finding{"cgroups", show, "a corral cgroup parent", false})
		kids, _ := os.ReadDir(p)
		for _, k := range kids {
			if k.IsDir() {
				out = append(out, Finding{"cgroups", show + "/" + k.Name(), "a sandbox's cgroup", false})
			}
		}
		return fs.SkipDir
	})
	return out
}

func (s scanner) tmp() []Finding {
	var out []Finding
	for _, dir := range []string{"/tmp", "/var/tmp", "/dev/shm"} {
		ents, _ := os.ReadDir(s.at(dir))
		for _, e := range ents {
			if tmpNames.MatchString(e.Name()) {
				out = append(out, Finding{"tmp", dir + "/" + e.Name(), "a name corral gives what it makes in " + dir, false})
			}
		}
	}
	return out
}

func (s scanner) docker(ctx context.Context) ([]Finding, error) {
	cs, vs, err := s.o.Docker(ctx)
	if err != nil {
		return nil, err
	}
	var out []Finding
	for _, c := range cs {
		if l := corralLabels(c.Labels); l != "" {
			name := c.ID
			if len(c.Names) > 0 {
				name = strings.TrimPrefix(c.Names[0], "/")
			}
			out = append(out, Finding{"docker", "container " + name, c.State + "; " + l, false})
		}
	}
	for _, v := range vs {
		if l := corralLabels(v.Labels); l != "" {
			out = append(out, Finding{"docker", "volume " + v.Name, l, false})
		}
	}
	return out, nil
}

// corralLabels is labels' io.corral.* ones (provider/docker/sandbox.go),
// "k=v" joined, or "".
func corralLabels(labels map[string]string) string {
	var ls []string
	for k, v := range labels {
		if strings.HasPrefix(k, "io.corral.") {
			ls = append(ls, k+"="+v)
		}
	}
	sort.Strings(ls)
	return strings.Join(ls, " ")
}

//go:build linux

// Package linux is Corral's native Linux provider: user, mount, PID, IPC,
// UTS, cgroup and network namespaces; a new root built from bind mounts;
// Landlock; seccomp; cgroups and rlimits. It works as root and as an
// unprivileged user.
package linux

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/identity"
	"github.com/corral-sandbox/corral/internal/landlock"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/provider/linux/cgroup"
)

// Name is the provider's name.
const Name = "linux"

// ProxyPort is where the egress proxy listens inside (provider.ProxyPort).
const ProxyPort = provider.ProxyPort

// Provider is the native Linux provider. The zero value is ready to use.
type Provider struct {
	once sync.Once
	host hostFacts
}

// New returns the Linux provider.
func New() *Provider { return &Provider{} }

func (p *Provider) Name() string { return Name }

// hostFacts is what the provider learned about the host, once per process.
type hostFacts struct {
	kernel      string
	userns      error // nil when user namespaces can be created
	usernsFix   string
	landlockABI int
	seccomp     bool
	cgroups     cgroup.Support
}

func (p *Provider) facts() *hostFacts {
	p.once.Do(func() {
		h := &p.host
		if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
			h.kernel = strings.TrimSpace(string(b))
		}
		h.userns, h.usernsFix = probeUserns()
		h.landlockABI = landlock.ABI()
		h.seccomp = probeSeccomp()
		h.cgroups = cgroup.Probe()
	})
	return &p.host
}

func readInt(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return n, err == nil
}

// probeUserns reads the sysctls that gate user namespaces (without creating
// one): user.max_user_namespaces, Debian's kernel.unprivileged_userns_clone
// and Ubuntu's AppArmor restriction.
func probeUserns() (error, string) {
	if n, ok := readInt("/proc/sys/user/max_user_namespaces"); ok && n == 0 {
		return fmt.Errorf("user namespaces are disabled (user.max_user_namespaces=0)"), "sysctl -w user.max_user_namespaces=15000"
	}
	if os.Geteuid() == 0 {
		return nil, ""
	}
	if n, ok := readInt("/proc/sys/kernel/unprivileged_userns_clone"); ok && n == 0 {
		return fmt.Errorf("unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone=0)"), "sysctl -w kernel.unprivileged_userns_clone=1"
	}
	if n, ok := readInt("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); ok && n == 1 {
		return fmt.Errorf("AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1)"),
			"add an AppArmor profile granting 'userns,' to the corral binary (see docs/install.md), or sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"
	}
	return nil, ""
}

func probeSeccomp() bool {
	b, err := os.ReadFile("/proc/self/status")
	return err == nil && strings.Contains(string(b), "\nSeccomp:")
}

// Probe reports what this host offers the provider.
func (p *Provider) Probe(ctx context.Context) provider.HostReport {
	go initExe() // the sandbox init's memfd, made while a run parses its policy
	h := p.facts()
	r := provider.HostReport{Provider: Name, Available: true, Facts: map[string]string{
		"kernel":       h.kernel,
		"landlock_abi": strconv.Itoa(h.landlockABI),
		"seccomp":      strconv.FormatBool(h.seccomp),
		"cgroup":       cgroupFact(h.cgroups),
		"uid":          strconv.Itoa(os.Getuid()),
	}}
	r.Facts["user_namespaces"] = "ok"
	if h.userns != nil {
		r.Available, r.Reason = false, h.userns.Error()
		r.Facts["user_namespaces"] = h.userns.Error()
		r.Fixes = append(r.Fixes, h.usernsFix)
	}
	if h.cgroups.Fix != "" && !h.cgroups.Writable {
		r.Fixes = append(r.Fixes, h.cgroups.Fix)
	}
	return r
}

func cgroupFact(s cgroup.Support) string {
	if s.Version == 0 {
		return "none: " + s.Reason
	}
	if !s.Writable {
		if strings.HasPrefix(s.Reason, "cgroup v") { // the reason names the version
			return s.Reason
		}
		return strings.TrimSpace(fmt.Sprintf("v%d: not writable %s", s.Version, s.Reason))
	}
	return fmt.Sprintf("v%d (%s) writable", s.Version, strings.Join(s.Controllers, ","))
}

// Capabilities describes the provider on this host.
func (p *Provider) Capabilities(ctx context.Context) provider.Capabilities {
	h := p.facts()
	return provider.Capabilities{
		Version:                 provider.CapabilitiesVersion,
		Provider:                Name,
		FilesystemGrants:        true,
		FilesystemDeny:          true,
		NetworkModes:            []policy.NetworkMode{policy.NetworkNone, policy.NetworkProxy, policy.NetworkHost},
		ResourceLimits:          []string{"memory", "pids", "cpu", "nofile", "timeout"},
		SessionLifetimes:        []provider.SessionLifetime{provider.LifetimePerRun, provider.LifetimePersistent},
		HostPathProjection:      true,
		ReportsRuntimeReadiness: true,
		Layers:                  h.layerAvailability(nil),
	}
}

// layerAvailability says, per layer, whether it can be applied here.
func (h *hostFacts) layerAvailability(req policy.Layers) []provider.LayerStatus {
	var out []provider.LayerStatus
	for _, l := range policy.AllLayers {
		st := provider.LayerStatus{Layer: l, Required: req.Requirement(l), State: provider.LayerActive}
		switch l {
		case policy.LayerNamespaces, policy.LayerMounts:
			if h.userns != nil {
				st.State, st.Detail = provider.LayerUnavailable, h.userns.Error()
			} else {
				st.Detail = "user, mount, pid, ipc, uts, cgroup, net namespaces"
				if l == policy.LayerMounts {
					st.Detail = "new root from bind mounts, pivot_root"
				}
			}
		case policy.LayerLandlock:
			if h.landlockABI < 1 {
				st.State, st.Detail = provider.LayerUnavailable, "kernel has no Landlock (ABI 0)"
			} else {
				st.Detail = fmt.Sprintf("landlock ABI %d", h.landlockABI)
			}
		case policy.LayerSeccomp:
			if !h.seccomp {
				st.State, st.Detail = provider.LayerUnavailable, "kernel has no seccomp"
			} else {
				st.Detail = "seccomp-bpf filter"
			}
		case policy.LayerCgroups:
			if !h.cgroups.Writable {
				st.State, st.Detail = provider.LayerUnavailable, "cgroups: "+h.cgroups.Reason
			} else {
				st.Detail = cgroupFact(h.cgroups)
			}
		}
		if st.State == provider.LayerUnavailable && st.Required == policy.Optional {
			st.State = provider.LayerSkipped
		}
		out = append(out, st)
	}
	return out
}

// Map turns a resolved policy into an InitSpec and reports every loss.
func (p *Provider) Map(ctx context.Context, r *policy.Resolved) (*provider.Plan, provider.LossReport) {
	h := p.facts()
	var loss provider.LossReport
	add := func(sev provider.Severity, area, field, format string, args ...any) {
		loss = append(loss, provider.Loss{Severity: sev, Area: area, Field: field, Message: fmt.Sprintf(format, args...)})
	}
	if img := r.DockerImage(); r.Policy != nil && r.Policy.Docker != nil && r.Policy.Docker.Image != "" {
		add(provider.SeverityWarning, "filesystem", "docker.image", "docker.image %q is not used: a linux sandbox sees the host's own files, as the policy grants them", img)
	}
	layers := h.layerAvailability(r.Layers)
	for _, st := range layers {
		field := "layers." + string(st.Layer)
		switch {
		case st.State == provider.LayerUnavailable:
			fix := ""
			switch st.Layer {
			case policy.LayerCgroups:
				fix = h.cgroups.Fix
			case policy.LayerNamespaces, policy.LayerMounts:
				fix = h.usernsFix
			}
			if fix != "" {
				fix = "fix: " + fix + "; or "
			}
			add(provider.SeverityError, "layers", field, "required layer %s cannot be applied on this host: %s (%srun without it by writing \"layers: {%s: optional}\" in the policy)", st.Layer, st.Detail, fix, st.Layer)
		case st.State == provider.LayerSkipped:
			// The policy allows it, so this is information, not a loss
			// against what was written; -v and explain show it.
			add(provider.SeverityInfo, "layers", field, "optional layer %s is not available and will not be applied: %s", st.Layer, st.Detail)
		}
		if (st.Layer == policy.LayerNamespaces || st.Layer == policy.LayerMounts) && st.Required == policy.Optional {
			add(provider.SeverityInfo, "layers", field, "the linux provider always uses %s; every other layer builds on it", st.Layer)
			if st.State == provider.LayerSkipped {
				loss[len(loss)-2].Severity = provider.SeverityError
			}
		}
	}
	spec := &InitSpec{
		Hostname: "corral",
		NewNet:   r.Network != policy.NetworkHost,
		Home:     r.Home,
		Workdir:  r.Workdir,
		Env:      r.Env,
		Seccomp:  provider.StateOf(layers, policy.LayerSeccomp) == provider.LayerActive,
		Cgroup:   provider.StateOf(layers, policy.LayerCgroups) == provider.LayerActive,
		Layers:   map[policy.Layer]policy.Requirement{},
		Nofile:   uint64(r.Limits.Nofile),
		Nproc:    uint64(r.Limits.Pids),
	}
	for _, l := range policy.AllLayers {
		spec.Layers[l] = r.Layers.Requirement(l)
	}
	// Every other layer builds on these two: they are never skipped.
	spec.Layers[policy.LayerNamespaces] = policy.Required
	spec.Layers[policy.LayerMounts] = policy.Required
	if r.Policy != nil && r.Policy.UI != nil && (r.Policy.UI.Windows || r.Policy.UI.InputInjection || (r.Policy.UI.Clipboard != "" && r.Policy.UI.Clipboard != "none")) {
		add(provider.SeverityInfo, "ui", "ui", "the linux provider grants no desktop: no display or clipboard socket is reachable inside unless a grant exposes one, so the ui section has no effect here")
	}
	if r.Network == policy.NetworkHost {
		add(provider.SeverityWarning, "network", "network.mode", "host: the sandbox shares the host's network stack, unfiltered")
	}
	if !spec.Cgroup {
		lim := r.Limits
		var unenforced []string
		if lim.Memory > 0 {
			unenforced = append(unenforced, "memory")
		}
		if lim.CPU > 0 {
			unenforced = append(unenforced, "cpu")
		}
		if len(unenforced) > 0 {
			what := unenforced[0] + " limit is"
			if len(unenforced) == 2 {
				what = "memory and cpu limits are"
			}
			add(provider.SeverityWarning, "process", "process.limits", "without cgroups the %s not enforced (set them to 0 to run without and silence this)", what)
		}
		if lim.Pids > 0 {
			add(provider.SeverityInfo, "process", "process.limits.pids", "without cgroups pids is enforced only as RLIMIT_NPROC, per uid in the sandbox's user namespace")
		}
	}
	if n := r.Limits.Nofile; n > 0 {
		if max := nofileMax(); uint64(n) > max {
			add(provider.SeverityError, "process", "process.limits.nofile", "%d is above the most this caller can set here (%d: %s)", n, max, nofileSource())
		}
	}
	uid, gid, err := identity.Workload(r)
	if err != nil {
		add(provider.SeverityError, "process", "process.run_as_user", "%v", err)
	}
	spec.UID, spec.GID = uid, gid
	if os.Getuid() == 0 && includesWorkdirRW(r) {
		if o := identity.Owner(r.Workdir); o != uid && o != 0 {
			add(provider.SeverityWarning, "filesystem", "filesystem.include_workdir", "the workload runs as uid %d but the workdir %s is owned by uid %d: writes there may fail (set process.run_as_user)", uid, r.Workdir, o)
		}
	}
	links, _ := r.SkippedLinks()
	for _, p := range links {
		add(provider.SeverityWarning, "filesystem", "filesystem.protected", "protected path %s is a symlink: a bind cannot cover the link itself, so the workload can replace it (its target stays read-only; a replaced one is reported after the run; make it a real file or directory)", p)
	}
	if n := len(r.Placeholders); n > 0 {
		add(provider.SeverityInfo, "filesystem", "filesystem.protected", "%d protected names are absent; each is held by an empty read-only placeholder for the run, so the workload cannot create it, and removed afterwards: %s", n, placeholderList(r.Placeholders))
	}
	loss = append(loss, provider.LintLoss(r)...) // credentials exposed, /usr, absent protected paths
	var hidden []string
	for _, kv := range r.Env {
		if path, ok := strings.CutPrefix(kv, "PATH="); ok {
			for _, d := range filepath.SplitList(path) {
				if d != "" && !r.Visible(d) && !r.Visible(realPath(d)) { // /bin -> usr/bin is recreated inside
					hidden = append(hidden, d)
				}
			}
		}
	}
	if len(hidden) > 0 {
		add(provider.SeverityInfo, "process", "process.env", "PATH directories not visible in the sandbox (commands there resolve to the system's, or are not found): %s", strings.Join(hidden, ", "))
	}
	if !r.Visible(r.Workdir) {
		spec.Workdir = r.Home
		add(provider.SeverityInfo, "filesystem", "filesystem.include_workdir", "the workdir %s is not granted, so the command starts in the private home %s", r.Workdir, r.Home)
	}
	mounts, ll, errs := mountPlan(r)
	idmap := func() {
		if os.Getuid() != 0 || uid == 0 {
			return
		}
		// A root caller's own trees are idmapped so the workload (never
		// root) can use them as granted: every read-write grant, and
		// read-only grants inside root's home (a module or package cache
		// is typically 0700 there). System directories are not: their
		// root-only files stay unreadable (so a home of / counts for none).
		for i := range mounts {
			m := &mounts[i]
			if m.Kind == MountBind && identity.Owner(m.Source) == 0 && (!m.ReadOnly || r.Home != "/" && policy.Within(m.Source, r.Home)) {
				m.IDMap = true
			}
		}
	}
	idmap()
	vet := vetReadWrite(mounts, r.ProtectedNames(), policy.DangerousForWrite)
	errs = append(errs, vet.errs...)
	for _, w := range vet.warnings {
		add(provider.SeverityWarning, "filesystem", "filesystem", "%s", w)
	}
	if len(vet.readOnly) > 0 {
		mounts = append(mounts, vet.readOnly...)
		mounts = append(mounts, pins(mounts)...)
		sort.SliceStable(mounts, func(i, j int) bool { return depth(mounts[i].Path) < depth(mounts[j].Path) })
		idmap()
	}
	for _, e := range errs {
		add(provider.SeverityError, "filesystem", e.field, "%s", e.msg)
	}
	spec.Mounts = mounts
	spec.Landlock = ll
	spec.Landlock.Enabled = provider.StateOf(layers, policy.LayerLandlock) == provider.LayerActive
	spec.Landlock.Required = r.Layers.Requirement(policy.LayerLandlock) == policy.Required
	spec.Landlock.DenyTCP = spec.NewNet
	if r.Network == policy.NetworkProxy {
		spec.ProxyPort = ProxyPort
		spec.Landlock.ConnectPort = ProxyPort
		spec.Env = provider.WithEnv(spec.Env, provider.ProxyEnv(ProxyPort))
	}
	// consent: the grant slots and the consent channel (consentchan_linux.go).
	loss = append(loss, planConsent(r, spec)...)
	if spec.Landlock.Enabled && spec.NewNet && h.landlockABI < 4 {
		add(provider.SeverityInfo, "network", "layers.landlock", "Landlock ABI %d cannot restrict TCP; the network namespace still isolates the network", h.landlockABI)
	}
	// network.unix_sockets deny: a socket a host process makes in a
	// granted directory during the run (Landlock does not cover it).
	spec.SeccompDenyUnix = r.UnixSockets() == policy.UnixSocketsDeny
	loss = append(loss, provider.UnixSocketsLoss(r, spec.Seccomp, h.landlockABI))
	loss = append(loss, trustLoss(r)...)
	loss = append(loss, credentialLoss(r)...)
	if spec.Landlock.Enabled && h.landlockABI < 6 {
		add(provider.SeverityInfo, "layers", "layers.landlock", "Landlock ABI %d has no signal or abstract-socket scoping; the PID and network namespaces still isolate them", h.landlockABI)
	}
	plan := &provider.Plan{Provider: Name, Policy: r, Layers: layers, Details: spec, Loss: loss}
	return plan, loss
}

// placeholderList is the placeholders' paths, comma-separated.
func placeholderList(phs []policy.Placeholder) string {
	ps := make([]string, len(phs))
	for i, ph := range phs {
		ps[i] = ph.Path
	}
	return strings.Join(ps, ", ")
}

// realPath is path with symlinks resolved on the host, or path itself.
func realPath(path string) string {
	if p, err := filepath.EvalSymlinks(path); err == nil {
		return p
	}
	return path
}

// nofileMax is the largest RLIMIT_NOFILE the caller can give the
// workload: fs.nr_open for root (setrlimit(2)), else its own hard limit.
func nofileMax() uint64 {
	if os.Getuid() == 0 {
		if n, ok := readInt("/proc/sys/fs/nr_open"); ok {
			return uint64(n)
		}
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return ^uint64(0)
	}
	return rl.Max
}

func nofileSource() string {
	if os.Getuid() == 0 {
		return "fs.nr_open"
	}
	return "the caller's hard RLIMIT_NOFILE"
}

func includesWorkdirRW(r *policy.Resolved) bool {
	for _, g := range r.Grants {
		if g.Path == r.Workdir {
			return g.Access == policy.AccessReadWrite
		}
	}
	return false
}

type planErr struct{ field, msg string }

// mountPlan orders the mount tree (tmpfs sizes are capped at the memory
// limit, which bounds them even without cgroups): root-level synthetic mounts (/proc,
// /dev, /tmp, the private home) and grants, parents before children, so
// that the most specific path wins. It also derives the Landlock rules.
func mountPlan(r *policy.Resolved) ([]MountSpec, LandlockSpec, []planErr) {
	var ms []MountSpec
	var errs []planErr
	granted := map[string]bool{}
	for _, g := range r.Grants {
		granted[g.Path] = true
	}
	ms = append(ms, MountSpec{Kind: MountProc, Path: "/proc", Dir: true, Field: "builtin"})
	ms = append(ms, MountSpec{Kind: MountDev, Path: "/dev", Dir: true, Field: "builtin"})
	if !granted["/tmp"] {
		ms = append(ms, MountSpec{Kind: MountTmpfs, Path: "/tmp", Dir: true, Mode: 0o1777, Size: int64(r.Limits.Memory), Field: "builtin (private /tmp)"})
	}
	if r.Home != "" && r.Home != "/" && !granted[r.Home] {
		ms = append(ms, MountSpec{Kind: MountTmpfs, Path: r.Home, Dir: true, Mode: 0o700, Size: int64(r.Limits.Memory), Field: "builtin (private home)"})
	}
	var ll LandlockSpec
	ll.RWDirs = append(ll.RWDirs, "/dev", "/proc", "/tmp")
	if r.Home != "" && !granted[r.Home] {
		ll.RWDirs = append(ll.RWDirs, r.Home)
	}
	var denied []string
	// parentAccess is the access of the nearest enclosing grant.
	parentAccess := func(i int) policy.Access {
		for j := i - 1; j >= 0; j-- {
			if policy.Within(r.Grants[i].Path, r.Grants[j].Path) && r.Grants[i].Path != r.Grants[j].Path {
				return r.Grants[j].Access
			}
		}
		return ""
	}
	for i, g := range r.Grants {
		if g.Access != policy.AccessDeny && parentAccess(i) == g.Access {
			continue // already covered by its parent's bind (e.g. /usr/bin under /usr)
		}
		for _, d := range denied {
			if policy.Within(g.Path, d) && g.Path != d && g.Access != policy.AccessDeny {
				errs = append(errs, planErr{g.Field, fmt.Sprintf("%s is inside denied %s; a grant cannot reopen part of a denied tree (remove one of the rules)", g.Path, d)})
			}
		}
		switch g.Access {
		case policy.AccessDeny:
			denied = append(denied, g.Path)
			ms = append(ms, MountSpec{Kind: MountMask, Path: g.Path, Dir: g.Dir, ReadOnly: true, Field: g.Field})
		case policy.AccessReadOnly, policy.AccessReadWrite:
			ro := g.Access == policy.AccessReadOnly
			ms = append(ms, MountSpec{Kind: MountBind, Path: g.Path, Source: g.Path, Dir: g.Dir, ReadOnly: ro, Field: g.Field})
			switch {
			case ro && g.Dir:
				ll.RODirs = append(ll.RODirs, g.Path)
			case ro:
				ll.ROFiles = append(ll.ROFiles, g.Path)
			case g.Dir:
				ll.RWDirs = append(ll.RWDirs, g.Path)
			default:
				ll.RWFiles = append(ll.RWFiles, g.Path)
			}
		}
	}
	// Absent protected names: the placeholders Provision creates, bound
	// read-only so the workload cannot create them.
	for _, ph := range r.Placeholders {
		ms = append(ms, MountSpec{Kind: MountBind, Path: ph.Path, Source: ph.Path, Dir: ph.Dir, ReadOnly: true, Field: ph.Field + " (absent: placeholder)"})
	}
	ms = append(ms, pins(ms)...)
	ms = append(ms, rootSymlinks(r.Grants, granted)...)
	sort.SliceStable(ms, func(i, j int) bool { return depth(ms[i].Path) < depth(ms[j].Path) })
	return ms, ll, errs
}

// pins returns read-write self-binds of every directory between a
// read-write bind and a mount nested deeper inside it. A mount point cannot
// be renamed (EBUSY), so the workload cannot move the directory that holds a
// protected path aside and create a fresh, writable one at the original
// place (mv .git .git-old; mkdir -p .git/hooks) — which the host would see.
func pins(ms []MountSpec) []MountSpec {
	have := map[string]bool{}
	for _, m := range ms {
		have[m.Path] = true
	}
	var out []MountSpec
	for _, m := range ms {
		if m.Kind != MountBind && m.Kind != MountMask {
			continue
		}
		// The nearest enclosing bind.
		var parent *MountSpec
		for i := range ms {
			p := &ms[i]
			if p.Kind == MountBind && policy.Within(m.Path, p.Path) && m.Path != p.Path && (parent == nil || len(p.Path) > len(parent.Path)) {
				parent = p
			}
		}
		if parent == nil || parent.ReadOnly {
			continue
		}
		for dir := filepath.Dir(m.Path); dir != parent.Path && policy.Within(dir, parent.Path); dir = filepath.Dir(dir) {
			if !have[dir] {
				have[dir] = true
				out = append(out, MountSpec{Kind: MountBind, Path: dir, Source: dir, Dir: true, Field: parent.Field + " (pinned: holds " + m.Path + ")"})
			}
		}
	}
	return out
}

// rootSymlinks recreates the host's top-level symlinks (merged /usr:
// /bin -> usr/bin, /lib64 -> usr/lib64, ...) whose target is granted, so
// that paths such as the ELF interpreter /lib64/ld-linux-x86-64.so.2
// resolve inside as they do on the host.
func rootSymlinks(grants []policy.PathGrant, granted map[string]bool) []MountSpec {
	ents, err := os.ReadDir("/")
	if err != nil {
		return nil
	}
	var out []MountSpec
	for _, e := range ents {
		if e.Type()&os.ModeSymlink == 0 || granted["/"+e.Name()] {
			continue
		}
		link := "/" + e.Name()
		target, err := os.Readlink(link)
		if err != nil {
			continue
		}
		real, err := filepath.EvalSymlinks(link)
		if err != nil {
			continue
		}
		for _, g := range grants {
			if g.Access != policy.AccessDeny && policy.Within(real, g.Path) {
				out = append(out, MountSpec{Kind: MountSymlink, Path: link, Source: target, Field: "builtin (host root symlink)"})
				break
			}
		}
	}
	return out
}

func depth(p string) int {
	p = filepath.Clean(p)
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}

//go:build linux

package docker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/hostscan"
	"github.com/corral-sandbox/corral/internal/identity"
	"github.com/corral-sandbox/corral/internal/landlock"
	"github.com/corral-sandbox/corral/internal/mountinfo"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// Inside paths of what Corral puts into every container.
const (
	// BinPath is corral's own static binary (init and exec shim).
	BinPath = "/.corral/corral"
	// RunDir holds the supervisor's sockets (and the mask sources).
	RunDir = "/.corral/run"
	// EgressSocket is the supervisor's egress proxy (network proxy).
	EgressSocket = RunDir + "/egress.sock"
	// ControlSocket is the supervisor's end of init's lifeline.
	ControlSocket = RunDir + "/control.sock"
	// ConsentSocket is the supervisor's consent channel (consentchan.go).
	ConsentSocket = RunDir + "/consent.sock"
)

// imageTrees are the system directories the image serves: a read-only
// grant of one of them (as written, or its merged-/usr target) is
// satisfied by the image's own copy, not the host's.
var imageTrees = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/usr/local",
	"/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libx32"}

// mergedUsr maps an image-served /usr tree to the root-level directories
// that are links to it on a merged-/usr host (where grants arrive
// canonical) but may be real directories in an image.
var mergedUsr = map[string][]string{
	"/usr":        {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"},
	"/usr/bin":    {"/bin"},
	"/usr/sbin":   {"/sbin"},
	"/usr/lib":    {"/lib"},
	"/usr/lib32":  {"/lib32"},
	"/usr/lib64":  {"/lib64"},
	"/usr/libx32": {"/libx32"},
}

// Bind is one bind mount of a host path. A mask (deny) has no host path:
// Provision points it at an empty, read-only, mode-000 file or directory
// it creates.
type Bind struct {
	Source   string `json:"source,omitempty"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"read_only"`
	Dir      bool   `json:"dir"`
	Mask     bool   `json:"mask,omitempty"`
	Field    string `json:"field"`
}

// Tmpfs is one private tmpfs.
type Tmpfs struct {
	Path string `json:"path"`
	Mode uint32 `json:"mode"`
	Size int64  `json:"size,omitempty"` // bytes; 0: Docker's default
}

// ShimSpec is what corral's init and exec shim apply inside the container,
// passed to each as a JSON argument (never read from a path a process
// outside corral could replace).
type ShimSpec struct {
	Landlock        landlock.Spec `json:"landlock"`
	Seccomp         bool          `json:"seccomp"`
	SeccompRequired bool          `json:"seccomp_required"`
	Nofile          uint64        `json:"nofile,omitempty"`
	Nproc           uint64        `json:"nproc,omitempty"`
	ProxyPort       int           `json:"proxy_port,omitempty"`  // init forwards 127.0.0.1:ProxyPort to EgressSocket
	FaultLayer      string        `json:"fault_layer,omitempty"` // provider.FaultEnv: this layer fails on apply (tests)
	// Env is the command's whole environment: what Docker adds (the
	// image's ENV, HOSTNAME) does not reach it.
	Env []string `json:"env,omitempty"`
	// Persistent: init outlives its supervisor (see Spec.Persistent).
	Persistent bool `json:"persistent,omitempty"`
	// Rows and Cols, for an exec with a terminal, size it before the
	// command starts (Docker before API 1.42 ignores the exec's own size).
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
	// DenyUnixSockets is network.unix_sockets deny: the exec shim's
	// seccomp filter refuses socket(AF_UNIX) (seccomp.Options). Init's
	// own filter does not: it reaches the supervisor's sockets.
	DenyUnixSockets bool `json:"deny_unix_sockets,omitempty"`
	// ConsentPort, when non-zero, is the loopback TCP port where init
	// listens for the consent channel (provider.ConsentChannel) and
	// forwards each connection to ConsentSocket, first telling the peer's
	// address (consentchan.go).
	ConsentPort int `json:"consent_port,omitempty"`
}

// Spec is the docker provider's plan (Plan.Details): the container Corral
// creates.
type Spec struct {
	Image    string   `json:"image"`
	ImageID  string   `json:"image_id"` // the image Map inspected; the container is created from it
	UID      int      `json:"uid"`
	GID      int      `json:"gid"`
	Hostname string   `json:"hostname"`
	Workdir  string   `json:"workdir"`
	Home     string   `json:"home"`
	Env      []string `json:"env"`
	Network  string   `json:"network"` // docker network mode: none or host
	// ImageServed lists the read-only grants the image's own directories
	// satisfy (not bound from the host).
	ImageServed []string `json:"image_served,omitempty"`
	Binds       []Bind   `json:"binds"`
	Tmpfs       []Tmpfs  `json:"tmpfs"`
	Memory      int64    `json:"memory,omitempty"`    // bytes (memory and memory+swap: no swap)
	NanoCPUs    int64    `json:"nano_cpus,omitempty"` // 1e9 per core
	Pids        int64    `json:"pids,omitempty"`
	ShmSize     int64    `json:"shm_size"`
	Cgroups     bool     `json:"cgroups"` // the cgroup limits are applied
	Shim        ShimSpec `json:"shim"`
	Timeout     int64    `json:"timeout_ns,omitempty"` // the policy's timeout per command
	PolicyHash  string   `json:"policy_hash"`
	// Persistent, ManagedBy and ID are ProvisionOptions' Persistent,
	// Owner and ID, copied here by Provision (a mapped plan never has
	// them) and saved with the plan for Recover. A persistent sandbox's
	// init does not end with the supervisor's connection, and Sweep leaves
	// it to its manager (label io.corral.managed-by).
	Persistent bool   `json:"persistent,omitempty"`
	ManagedBy  string `json:"managed_by,omitempty"`
	ID         string `json:"id,omitempty"`
	// Trust and Store are the CA bundle's and the Java trust store's
	// binds, for a policy that inspects egress (ProvisionOptions.Trust
	// and TrustStore, added by Provision).
	Trust *Trust `json:"trust,omitempty"`
	Store *Trust `json:"store,omitempty"`
	// Credentials are the binds of the credentials' placeholder files
	// (provider.CredentialFiles), in their order: each one target, where
	// Map found it can go (mapCredentials); Source added by Provision.
	Credentials []Trust `json:"credentials,omitempty"`
	// Slots: the policy has consent.folders and the daemon propagates
	// mounts, so Provision mounts a host slot that the container binds at
	// provider.GrantSlots (grants.go).
	Slots bool `json:"slots,omitempty"`
	// FolderMode is how the sandbox takes folder grants (live, or
	// requires-recreate where the daemon cannot propagate); "" without
	// consent.folders. GrantsUnavailable says why not live.
	FolderMode        provider.ConsentMode `json:"folder_mode,omitempty"`
	GrantsUnavailable string               `json:"grants_unavailable,omitempty"`
}

// WorkloadUID is the host uid the workload runs as (for audit records).
func (s *Spec) WorkloadUID() int { return s.UID }

// shmDefault is Docker's default /dev/shm size (64 MiB), which Corral
// keeps unless the memory limit is lower.
const shmDefault = 64 << 20

// Map turns a resolved policy into a container Spec and reports every loss
// (each one's severity is in docs/providers/docker.md).
func (p *Provider) Map(ctx context.Context, r *policy.Resolved) (*provider.Plan, provider.LossReport) {
	h := p.facts()
	var loss provider.LossReport
	add := func(sev provider.Severity, area, field, format string, args ...any) {
		loss = append(loss, provider.Loss{Severity: sev, Area: area, Field: field, Message: fmt.Sprintf(format, args...)})
	}
	layers := h.layerAvailability(r.Layers)
	for _, st := range layers {
		field := "layers." + string(st.Layer)
		switch st.State {
		case provider.LayerUnavailable:
			add(provider.SeverityError, "layers", field, "required layer %s cannot be applied with docker here: %s (run without it by writing \"layers: {%s: optional}\" in the policy)", st.Layer, st.Detail, st.Layer)
		case provider.LayerSkipped:
			add(provider.SeverityInfo, "layers", field, "optional layer %s is not available and will not be applied: %s", st.Layer, st.Detail)
		}
		if (st.Layer == policy.LayerNamespaces || st.Layer == policy.LayerMounts || st.Layer == policy.LayerCgroups) && st.Required == policy.Optional {
			add(provider.SeverityInfo, "layers", field, "docker always applies %s", st.Layer)
		}
	}
	if h.err == nil {
		add(provider.SeverityInfo, "layers", "layers.namespaces", "no user namespace: the workload's uid inside is the same uid on the host")
	}
	spec := &Spec{
		Image:      imageOf(r),
		Hostname:   "corral",
		Workdir:    r.Workdir,
		Home:       r.Home,
		Network:    "none",
		Memory:     int64(r.Limits.Memory),
		NanoCPUs:   int64(r.Limits.CPU * 1e9),
		Pids:       int64(r.Limits.Pids),
		ShmSize:    shmDefault,
		Cgroups:    provider.StateOf(layers, policy.LayerCgroups) == provider.LayerActive,
		Timeout:    int64(r.Limits.Timeout),
		PolicyHash: r.Hash,
	}
	if spec.Memory > 0 && spec.Memory < spec.ShmSize {
		spec.ShmSize = spec.Memory
	}
	spec.Shim = ShimSpec{
		Seccomp:         provider.StateOf(layers, policy.LayerSeccomp) == provider.LayerActive,
		SeccompRequired: r.Layers.Requirement(policy.LayerSeccomp) == policy.Required,
		Nofile:          uint64(r.Limits.Nofile),
	}
	if h.err == nil {
		img, err := h.cli.ImageInspect(ctx, spec.Image)
		if err == nil {
			spec.ImageID = img.ID
			if img.Config != nil && len(img.Config.Volumes) > 0 {
				var vols []string
				for v := range img.Config.Volumes {
					vols = append(vols, v)
				}
				slices.Sort(vols)
				add(provider.SeverityError, "docker", "docker.image", "image %s declares volumes (%s): Docker would give the container writable areas the policy does not grant; use an image without VOLUME", spec.Image, strings.Join(vols, ", "))
			}
		} else {
			field := "docker.image"
			fix := "pull or build it yourself"
			if name := spec.Image[strings.LastIndex(spec.Image, "/")+1:]; !strings.ContainsAny(name, ":@") {
				fix = "Docker reads it as " + spec.Image + ":latest; name the tag, or " + fix
			}
			if spec.Image == policy.DefaultDockerImage {
				fix = "build it with `corral image build-base`"
			}
			why := "it is not on the daemon"
			if !cerrdefs.IsNotFound(err) {
				why = err.Error()
			}
			add(provider.SeverityError, "docker", field, "image %s: %s: %s; corral never pulls", spec.Image, why, fix)
		}
	}
	switch r.Network {
	case policy.NetworkHost:
		spec.Network = "host"
		add(provider.SeverityWarning, "network", "network.mode", "host: the container shares the host's network stack, unfiltered")
	case policy.NetworkProxy:
		spec.Shim.ProxyPort = provider.ProxyPort
		add(provider.SeverityInfo, "network", "network.mode", "proxy: the container has no network (Docker's none); corral's init forwards 127.0.0.1:%d inside to corral's egress proxy through a unix socket, which decides per request (Docker itself has no per-host rules)", provider.ProxyPort)
	}
	if r.Policy != nil && r.Policy.UI != nil {
		add(provider.SeverityInfo, "ui", "ui", "the docker provider grants no desktop, so the ui section has no effect here")
	}

	uid, gid, err := identity.Workload(r)
	if err != nil {
		add(provider.SeverityError, "process", "process.run_as_user", "%v", err)
	}
	spec.UID, spec.GID = uid, gid
	if uid > 1<<31-1 || gid > 1<<31-1 {
		add(provider.SeverityError, "process", "process.run_as_user", "uid %d / gid %d: Docker's runtime takes ids up to 2147483647", uid, gid)
	}
	env := append([]string{"HOME=" + r.Home}, r.Env...)
	if spec.Shim.ProxyPort != 0 {
		env = provider.WithEnv(env, provider.ProxyEnv(spec.Shim.ProxyPort))
	}
	spec.Env = env
	spec.Shim.Env = env

	mapFilesystem(r, spec, h.dataRoot, add)
	loss = append(loss, provider.LintLoss(r)...) // credentials exposed, /usr, absent protected paths
	if !r.Visible(r.Workdir) {
		spec.Workdir = r.Home
		add(provider.SeverityInfo, "filesystem", "filesystem.include_workdir", "the workdir %s is not granted, so the command starts in the private home %s", r.Workdir, r.Home)
	}
	ll := &spec.Shim.Landlock
	ll.Enabled = provider.StateOf(layers, policy.LayerLandlock) == provider.LayerActive
	ll.Required = r.Layers.Requirement(policy.LayerLandlock) == policy.Required
	ll.DenyTCP = r.Network != policy.NetworkHost
	ll.ConnectPort = spec.Shim.ProxyPort
	if !ll.Enabled {
		add(provider.SeverityWarning, "filesystem", "layers.landlock", "without Landlock the image's directories the policy does not grant (/var, /root, /srv, ...) are readable inside; they hold the image's files, no host data")
	}
	spec.Shim.DenyUnixSockets = r.UnixSockets() == policy.UnixSocketsDeny
	loss = append(loss, provider.UnixSocketsLoss(r, spec.Shim.Seccomp, h.landlockABI))
	p.mapTrust(ctx, r, spec, add)
	p.mapCredentials(ctx, r, spec, add)
	mapConsent(r, spec, h, add)
	for _, base := range []string{stateBase(), managedBase()} {
		if l := stateExposed(r, base); l != nil {
			loss = append(loss, *l)
		}
	}

	if r.Limits.Pids > 0 {
		spec.Shim.Nproc = 0 // the pids cgroup counts the container, RLIMIT_NPROC would count the uid host-wide
	}
	if !spec.Cgroups {
		add(provider.SeverityWarning, "process", "process.limits", "without cgroups the memory, cpu and pids limits are not enforced")
	}
	if spec.ShmSize > 0 {
		add(provider.SeverityInfo, "filesystem", "filesystem", "Docker gives every container a private writable /dev/shm (%d MiB here, within the memory limit)", spec.ShmSize>>20)
	}
	plan := &provider.Plan{Provider: Name, Policy: r, Layers: layers, Details: spec, Loss: loss}
	return plan, loss
}

// imageOf is the image reference (policy.Resolved.DockerImage).
func imageOf(r *policy.Resolved) string { return r.DockerImage() }

// mapFilesystem turns the grants into image-served trees, binds, masks and
// tmpfs mounts, derives the Landlock rules, and reports what Docker cannot
// do as the policy says.
func mapFilesystem(r *policy.Resolved, spec *Spec, dataRoot string, add func(provider.Severity, string, string, string, ...any)) {
	granted := map[string]bool{}
	for _, g := range r.Grants {
		granted[g.Path] = true
	}
	ll := &spec.Shim.Landlock
	ll.RWDirs = []string{"/dev", "/proc"}
	if !granted["/tmp"] {
		spec.Tmpfs = append(spec.Tmpfs, Tmpfs{Path: "/tmp", Mode: 0o1777, Size: int64(r.Limits.Memory)})
		ll.RWDirs = append(ll.RWDirs, "/tmp")
	}
	if r.Home != "" && r.Home != "/" && !granted[r.Home] {
		spec.Tmpfs = append(spec.Tmpfs, Tmpfs{Path: r.Home, Mode: 0o700, Size: int64(r.Limits.Memory)})
		ll.RWDirs = append(ll.RWDirs, r.Home)
	}
	served := map[string]bool{}
	var denied []string
	// parent is the nearest enclosing grant of grant i.
	parent := func(i int) (policy.PathGrant, bool) {
		for j := i - 1; j >= 0; j-- {
			if policy.Within(r.Grants[i].Path, r.Grants[j].Path) && r.Grants[i].Path != r.Grants[j].Path {
				return r.Grants[j], true
			}
		}
		return policy.PathGrant{}, false
	}
	var rootOwned []string
	for i, g := range r.Grants {
		par, hasParent := parent(i)
		if g.Access != policy.AccessDeny && hasParent && par.Access == g.Access && (!served[par.Path] || g.Access == policy.AccessReadOnly) {
			if served[par.Path] {
				served[g.Path] = true
			}
			continue // covered by its parent's bind, or by the image
		}
		if slices.ContainsFunc(denied, func(d string) bool { return policy.Within(g.Path, d) && g.Path != d }) {
			if g.Access != policy.AccessDeny {
				add(provider.SeverityError, "filesystem", g.Field, "%s is inside a denied directory; a grant cannot reopen part of a denied tree (remove one of the rules)", g.Path)
			}
			continue
		}
		switch g.Access {
		case policy.AccessDeny:
			denied = append(denied, g.Path)
			if !hasParent || par.Access == policy.AccessDeny {
				continue // not visible anyway (the image's own copy is outside the grants: Landlock)
			}
			spec.Binds = append(spec.Binds, Bind{Target: g.Path, Dir: g.Dir, ReadOnly: true, Mask: true, Field: g.Field})
		case policy.AccessReadOnly:
			if g.Dir && slices.Contains(imageTrees, g.Path) {
				served[g.Path] = true
				spec.ImageServed = append(spec.ImageServed, g.Path)
				ll.RODirs = append(ll.RODirs, g.Path)
				ll.RODirs = append(ll.RODirs, mergedUsr[g.Path]...)
				continue
			}
			spec.Binds = append(spec.Binds, Bind{Source: g.Path, Target: g.Path, Dir: g.Dir, ReadOnly: true, Field: g.Field})
			if g.Dir {
				ll.RODirs = append(ll.RODirs, g.Path)
			} else {
				ll.ROFiles = append(ll.ROFiles, g.Path)
			}
		case policy.AccessReadWrite:
			spec.Binds = append(spec.Binds, Bind{Source: g.Path, Target: g.Path, Dir: g.Dir, Field: g.Field})
			if g.Dir {
				ll.RWDirs = append(ll.RWDirs, g.Path)
			} else {
				ll.RWFiles = append(ll.RWFiles, g.Path)
			}
			if os.Getuid() == 0 && spec.UID != 0 && identity.Owner(g.Path) == 0 {
				rootOwned = append(rootOwned, g.Path)
			}
		}
	}
	if len(spec.ImageServed) > 0 {
		add(provider.SeverityInfo, "filesystem", "filesystem.read_only", "served by the image %s, not the host: %s", spec.Image, strings.Join(spec.ImageServed, ", "))
	}
	if len(rootOwned) > 0 {
		add(provider.SeverityWarning, "filesystem", "filesystem.read_write", "owned by root, so the workload (uid %d) cannot write them: Docker here has no idmapped mounts (set process.run_as_user to their owner, or chown them): %s", spec.UID, strings.Join(rootOwned, ", "))
	}
	if sock := daemonSocket(); sock != "" && r.Visible(sock) {
		add(provider.SeverityError, "filesystem", r.Covering(sock).Field, "the Docker socket %s is inside this grant: it would give the workload the daemon, i.e. root on the host; deny it or grant less", sock)
	}
	for _, b := range spec.Binds {
		switch {
		case b.Mask:
		case b.Target == "/":
			add(provider.SeverityError, "filesystem", b.Field, "Docker cannot bind a host path over the container's root /: grant the directories the command needs instead")
		case dataRoot != "" && (policy.Within(b.Source, dataRoot) || policy.Within(dataRoot, b.Source)):
			add(provider.SeverityError, "filesystem", b.Field, "%s holds or is inside Docker's data root %s (every container's files; the daemon refuses such binds): grant a narrower directory", b.Source, dataRoot)
		}
	}
	budget := hostscan.Limit
	names := r.ProtectedNames()
	for _, b := range spec.Binds {
		// Read-only system trees hold no sockets worth a walk; every
		// other bound tree is searched, read-write ones for nested
		// protected names too.
		if b.Mask || !b.Dir || (b.ReadOnly && slices.ContainsFunc(imageTrees, func(t string) bool { return policy.Within(b.Source, t) })) {
			continue
		}
		var protect map[string]bool
		if !b.ReadOnly {
			protect = names
		}
		socks, nested := hostscan.Scan(b.Source, protect, &budget, nil)
		for _, sock := range socks {
			spec.Binds = append(spec.Binds, Bind{Target: sock, ReadOnly: true, Mask: true, Field: b.Field + " (unix socket hidden)"})
		}
		for _, n := range nested {
			spec.Binds = append(spec.Binds, Bind{Source: n.Path, Target: n.Path, Dir: n.Dir, ReadOnly: true, Field: b.Field + " (nested " + n.Name + ")"})
		}
	}
	if budget < 0 {
		add(provider.SeverityWarning, "filesystem", "filesystem", "the grants hold more than %d entries: unix sockets and nested protected names beyond them were not looked for", hostscan.Limit)
	}
	// Absent protected names: the placeholders Provision creates, bound
	// read-only so the workload cannot create them.
	for _, ph := range r.Placeholders {
		spec.Binds = append(spec.Binds, Bind{Source: ph.Path, Target: ph.Path, Dir: ph.Dir, ReadOnly: true, Field: ph.Field + placeholderField})
	}
	var nested []string
	mounts, _ := mountinfo.Read("/proc/self/mountinfo")
	for _, b := range spec.Binds {
		if !b.Mask && b.Dir && slices.ContainsFunc(mounts, func(m mountinfo.Entry) bool { return policy.Within(m.Point, b.Source) && m.Point != b.Source }) {
			nested = append(nested, b.Source)
		}
	}
	if len(nested) > 0 {
		add(provider.SeverityInfo, "filesystem", "filesystem", "mounts below these grants are not visible inside: Docker binds them non-recursively so that read-only stays read-only: %s", strings.Join(nested, ", "))
	}
	links, _ := r.SkippedLinks()
	if len(links) > 0 {
		add(provider.SeverityWarning, "filesystem", "filesystem.protected", "protected paths are symlinks: a bind cannot cover the link itself, so the workload can replace it (their targets stay read-only; a replaced one is reported after the run): %s", strings.Join(links, ", "))
	}
	if n := len(r.Placeholders); n > 0 {
		add(provider.SeverityInfo, "filesystem", "filesystem.protected", "%d protected names are absent; each is held by an empty read-only placeholder for the sandbox's life, so the workload cannot create it, and removed afterwards", n)
	}
}

// placeholderField ends the Field of a placeholder's bind (Recover finds
// them by it).
const placeholderField = " (absent: placeholder)"

// heldPaths is what a recovered sandbox holds again: its placeholders and
// the protected paths it binds, from the saved spec (internal/placeholder).
func heldPaths(sp *Spec) *policy.Resolved {
	r := &policy.Resolved{}
	for _, b := range sp.Binds {
		switch {
		case b.Mask || !b.ReadOnly:
		case strings.HasSuffix(b.Field, placeholderField):
			r.Placeholders = append(r.Placeholders, policy.Placeholder{Path: b.Source, Dir: b.Dir, Field: strings.TrimSuffix(b.Field, placeholderField)})
		case strings.HasPrefix(b.Field, "filesystem.protected"):
			r.Grants = append(r.Grants, policy.PathGrant{Path: b.Source, Access: policy.AccessReadOnly, Dir: b.Dir, Field: b.Field})
		}
	}
	return r
}

// daemonSocket is the host path of the Docker socket this provider uses.
func daemonSocket() string {
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		host = "unix:///var/run/docker.sock"
	}
	p, ok := strings.CutPrefix(host, "unix://")
	if !ok {
		return ""
	}
	if real, err := filepath.EvalSymlinks(p); err == nil {
		return real
	}
	return p
}

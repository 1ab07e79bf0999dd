package linux

import (
	"fmt"
	"strings"

	"github.com/corral-sandbox/corral/internal/landlock"
	"github.com/corral-sandbox/corral/internal/startup"
	"github.com/corral-sandbox/corral/policy"
)

// MountKind is one kind of entry in the sandbox's mount tree.
type MountKind string

const (
	MountBind   MountKind = "bind"   // a host path cloned (recursively) into the tree
	MountTmpfs  MountKind = "tmpfs"  // a fresh private tmpfs
	MountMask   MountKind = "mask"   // a denied path: empty, mode 000, read-only
	MountProc   MountKind = "proc"   // a fresh procfs for the sandbox's PID namespace
	MountDev    MountKind = "dev"    // the minimal /dev
	MountDevpts MountKind = "devpts" // a new devpts instance
	// MountSymlink is a symlink in the root (Source is its target), kept
	// so that merged-/usr links such as /bin -> usr/bin work inside.
	MountSymlink MountKind = "symlink"
	// MountTrust is one of the sandbox's trust files: its bundle
	// (provider.ProvisionOptions.Trust) or, Store set, its Java trust
	// store (TrustStore). Source, a file Corral wrote outside every
	// grant, is bound read-only at Path (provider.TrustBundlePath or
	// JavaTrustStorePath; empty when a grant covers it) and over each of
	// Over that resolves, in the sandbox's tree and following symlinks
	// only within it, to a readable regular file of a grant. Init
	// reports where each went (initMsg.Trust, Store); a bundle placed
	// nowhere is an error, a store not (a sandbox without Java needs
	// none).
	MountTrust MountKind = "trust"
	// MountCredential is a credential's placeholder file: Source, a file
	// Corral wrote outside every grant, bound read-only at Path, which
	// must lie in the sandbox's own tree (tree.credential).
	MountCredential MountKind = "credential"
	// MountGrants is the sandbox's grant slots (provider.GrantSlots): a
	// detached clone of the slot holder's shared slot, made a slave and
	// read-only (slots_linux.go), sent to init, which attaches it at
	// Path without making it private, so that every grant the holder
	// mounts in its slot reaches the sandbox by propagation.
	MountGrants MountKind = "grants"
)

// MountSpec is one mount of the sandbox tree. Path is where it appears
// inside; binds keep host paths at the same place (host path projection).
type MountSpec struct {
	Kind     MountKind `json:"kind"`
	Path     string    `json:"path"`
	Source   string    `json:"source,omitempty"` // host path (bind)
	ReadOnly bool      `json:"read_only"`
	Dir      bool      `json:"dir"`
	Mode     uint32    `json:"mode,omitempty"` // tmpfs root mode
	Size     int64     `json:"size,omitempty"` // tmpfs size in bytes; 0: the kernel's default (half of RAM)
	// IDMap: the supervisor (root) prepares this bind as an idmapped
	// mount where on-disk uid/gid 0 appear as the workload's, so a root
	// caller's read-write tree is writable by the unprivileged workload.
	IDMap bool `json:"idmap,omitempty"`
	// HostClone: the supervisor (root) clones Source itself and sends
	// the detached mount to init, which could not open it (a directory
	// of root's, 0700); a trust or credential file's only.
	HostClone bool     `json:"host_clone,omitempty"`
	Over      []string `json:"over,omitempty"`  // MountTrust: the distro paths to cover
	Store     bool     `json:"store,omitempty"` // MountTrust: the Java trust store
	Field     string   `json:"field,omitempty"`
}

// preCloned reports whether the supervisor sends m's detached mount to
// init (idmapped, or cloned as root), in the order of the mounts.
func (m MountSpec) preCloned() bool { return m.IDMap || m.HostClone || m.Kind == MountGrants }

// ConsentDocPath is where a sandbox with a consent channel finds how to
// ask (a read-only file Corral writes, consentDoc).
const ConsentDocPath = "/run/corral/CONSENT.md"

// LandlockSpec is the Landlock ruleset applied inside, after pivot_root.
type LandlockSpec = landlock.Spec

// InitSpec is everything the in-sandbox init needs; the supervisor sends it
// over the control socket. It is also the linux provider's Plan.Details.
type InitSpec struct {
	// Trace asks init for its start-up marks (corral run --trace-startup).
	Trace    bool   `json:"trace,omitempty"`
	UID      int    `json:"uid"` // workload uid, same inside and outside
	GID      int    `json:"gid"`
	Hostname string `json:"hostname"`
	NewNet   bool   `json:"new_network_namespace"`
	// ProxyPort, when non-zero (network proxy), is the loopback TCP port
	// inside the sandbox where init listens for the supervisor's egress
	// proxy; the only TCP connect Landlock allows.
	ProxyPort int `json:"proxy_port,omitempty"`
	// ConsentPort, when non-zero (the policy has a consent section and
	// the sandbox its own network namespace), is the loopback TCP port
	// inside where init listens for the consent channel
	// (provider.ConsentChannel), served by the supervisor.
	ConsentPort int `json:"consent_port,omitempty"`
	// ServePorts, for a service, are loopback TCP ports inside where the
	// workload may listen; the supervisor reaches them through sockets
	// init creates in the sandbox's network namespace (Sandbox.DialServed).
	ServePorts []int        `json:"serve_ports,omitempty"`
	Mounts     []MountSpec  `json:"mounts"`
	Landlock   LandlockSpec `json:"landlock"`
	Seccomp    bool         `json:"seccomp"`
	// SeccompOpenat2 lets openat2(2) through (seccomp.Options); only with
	// no idmapped mount (AllowOpenat2).
	SeccompOpenat2 bool                                `json:"seccomp_openat2,omitempty"`
	Nofile         uint64                              `json:"rlimit_nofile,omitempty"`
	Nproc          uint64                              `json:"rlimit_nproc,omitempty"`
	Home           string                              `json:"home"`
	Workdir        string                              `json:"workdir"`
	Env            []string                            `json:"-"`
	Cgroup         bool                                `json:"cgroup"`
	Layers         map[policy.Layer]policy.Requirement `json:"layers"`
	FaultLayer     string                              `json:"fault_layer,omitempty"` // testing: make this layer fail on apply
	// DropLayer is honoured only by binaries built with -tags corraltest
	// (testhook_corraltest.go): seccomp is silently not installed.
	DropLayer string `json:"drop_layer,omitempty"`
	// SeccompDenyUnix refuses socket(AF_UNIX) and datagram socketpairs
	// (seccomp.Options.DenyUnixSockets): network.unix_sockets deny.
	SeccompDenyUnix bool `json:"seccomp_deny_unix_sockets,omitempty"`
	// Persistent makes init serve any number of execs, each over a
	// socket of its own (servePersistent), until its supervisor goes.
	Persistent bool `json:"persistent,omitempty"`
}

// execRequest asks init to run one process; its stdio arrives as fds.
type execRequest struct {
	Args   []string `json:"args"`
	Dir    string   `json:"dir"`
	Env    []string `json:"env"`
	TTY    bool     `json:"tty"`
	NFiles int      `json:"nfiles"`
	Ack    bool     `json:"ack,omitempty"` // wait for the supervisor after reporting the pid
	// Rows and Cols, with TTY, are the terminal's size, set before the
	// process starts (so that its first look at it is right).
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
}

// execCtl is what the caller of a persistent sandbox's exec sends on
// the exec's socket: the ack of its pid, or a signal for it.
type execCtl struct {
	Ack    bool `json:"ack,omitempty"`
	Signal int  `json:"signal,omitempty"`
}

// initMsg is what init reports back.
type initMsg struct {
	Ready    bool     `json:"ready,omitempty"`
	Error    string   `json:"error,omitempty"`
	Layer    string   `json:"layer,omitempty"`    // the layer whose application failed
	Landlock string   `json:"landlock,omitempty"` // what Landlock enforced, e.g. "abi 7: fs, tcp, scope"
	Skipped  []string `json:"skipped,omitempty"`  // optional layers not applied, "layer: reason"
	PID      int      `json:"pid,omitempty"`      // workload pid inside the sandbox
	TTY      bool     `json:"tty,omitempty"`      // the pty master comes with this message
	Exited   bool     `json:"exited,omitempty"`
	Code     int      `json:"code"`
	Signal   int      `json:"signal,omitempty"`
	// Trust and Store list, with Ready, the paths inside where the trust
	// bundle and the Java trust store are (MountTrust), the one the
	// variables name first.
	Trust []string `json:"trust,omitempty"`
	Store []string `json:"store,omitempty"`
	// Trace is init's start-up marks (InitSpec.Trace): with Ready those
	// up to it, with Exited those after.
	Trace []startup.Mark `json:"trace,omitempty"`
	fd    int            // the first fd received with the message (the pty master, the egress listener)
	fds   []int          // every fd received with it: with Ready, the egress listener (ProxyPort) then the consent one (ConsentPort)
}

// slots reports whether the spec plans grant slots (MountGrants).
func (s *InitSpec) slots() bool {
	for _, m := range s.Mounts {
		if m.Kind == MountGrants {
			return true
		}
	}
	return false
}

// serves reports whether the workload may listen on its own loopback
// (ServePorts, or any port with Landlock.BindAny): init then brings the
// loopback up and makes sockets there for the supervisor (socketFactory).
func (s *InitSpec) serves() bool { return len(s.ServePorts) > 0 || s.Landlock.BindAny }

// Serve lets the workload listen on ports, on its own loopback, and
// connect to them; nothing else about its network changes.
func (s *InitSpec) Serve(ports []int) {
	s.ServePorts = append([]int(nil), ports...)
	s.Landlock.ServePorts = s.ServePorts
}

// AllowOpenat2 lets the workload use openat2(2), whose mode seccomp
// cannot check (so a set-id bit on a file it creates is not refused). It
// reports false, changing nothing, when a mount is idmapped: there a file
// the workload creates is root's on disk.
func (s *InitSpec) AllowOpenat2() bool {
	for _, m := range s.Mounts {
		if m.IDMap {
			return false
		}
	}
	s.SeccompOpenat2 = true
	return true
}

// WorkloadUID is the uid the workload runs as, inside and outside.
func (s *InitSpec) WorkloadUID() int { return s.UID }

// Summary describes the plan in lines of text, for `corral policy explain`.
func (s *InitSpec) Summary() []string {
	out := []string{fmt.Sprintf("workload uid %d gid %d, hostname %q, own network namespace: %v", s.UID, s.GID, s.Hostname, s.NewNet)}
	if s.ProxyPort != 0 {
		out = append(out, fmt.Sprintf("egress: only 127.0.0.1:%d inside, a listener served by corral's proxy on the host side", s.ProxyPort))
	}
	if s.ConsentPort != 0 {
		out = append(out, fmt.Sprintf("consent: the workload asks at 127.0.0.1:%d inside, a listener served by corral (%s explains how)", s.ConsentPort, ConsentDocPath))
	}
	for _, m := range s.Mounts {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		line := fmt.Sprintf("%-7s %-2s %s", m.Kind, mode, m.Path)
		switch {
		case m.Kind == MountSymlink:
			line = fmt.Sprintf("%-7s    %s -> %s", m.Kind, m.Path, m.Source)
		case m.Kind == MountTrust:
			what := "the CA bundle"
			if m.Store {
				what = "the Java trust store"
			}
			line += fmt.Sprintf("  (%s; also over those of %s the sandbox has)", what, strings.Join(m.Over, ", "))
		case m.Kind == MountGrants:
			line += "  (slots ro/ and rw/: live folder grants arrive here by propagation, kernel-locked)"
		case m.IDMap:
			line += "  (idmapped: owner root appears as the workload's uid)"
		}
		out = append(out, line)
	}
	if s.Landlock.Enabled {
		out = append(out, fmt.Sprintf("landlock: %d read-only dirs, %d read-only files, %d read-write dirs, %d read-write files, deny TCP: %v",
			len(s.Landlock.RODirs), len(s.Landlock.ROFiles), len(s.Landlock.RWDirs), len(s.Landlock.RWFiles), s.Landlock.DenyTCP))
	}
	unixSockets := "allowed"
	if s.SeccompDenyUnix {
		unixSockets = "refused (socket(AF_UNIX); socketpair stream/seqpacket allowed)"
	}
	out = append(out, fmt.Sprintf("seccomp: %v (unix sockets by name: %s); cgroup: %v; rlimit nofile %d, nproc %d; core dumps off", s.Seccomp, unixSockets, s.Cgroup, s.Nofile, s.Nproc))
	return out
}

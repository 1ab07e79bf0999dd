package provider

import (
	"context"
	"net"
)

// Where live folder grants appear inside a sandbox whose policy lets the
// workload ask for folders (policy.Consent.Folders): the slot directories
// are planned at start with Landlock rules of their own (read-only and
// read-write), and a grant is mounted at <slot>/<label> while the sandbox
// runs (docs/consent.md).
const (
	GrantSlots  = "/grants"
	GrantSlotRO = "/grants/ro"
	GrantSlotRW = "/grants/rw"
)

// ConsentPort is the loopback TCP port inside a sandbox's network
// namespace where the consent API answers (ConsentChannel): it works with
// network none and with unix sockets denied, where a unix socket could not
// be reached.
const ConsentPort = 3129

// ConsentSocketPath is where a sandbox finds the consent API's unix socket
// (usable with network.unix_sockets: allow; curl --unix-socket).
const ConsentSocketPath = "/run/corral/consent.sock"

// ConsentURLEnv is the variable that tells the workload where to ask:
// "http://127.0.0.1:<ConsentPort>".
const ConsentURLEnv = "CORRAL_CONSENT_URL"

// ConsentChannel is a sandbox that serves the consent API to its workload:
// ConsentListener is a listener inside the sandbox (its network
// namespace's 127.0.0.1:ConsentPort) that the supervisor serves; nil when
// the policy has no consent section.
type ConsentChannel interface {
	ConsentListener() net.Listener
}

// PeerResolver is a sandbox that can name the process behind a connection
// accepted on its ConsentListener, from the kernel's tables (the sandbox's
// /proc/net/tcp and its processes' fds), never from the request: the host
// pid and its executable; ok false when it is gone or not found.
type PeerResolver interface {
	ConsentPeer(c net.Conn) (pid int, exe string, ok bool)
}

// FolderGrant is one live folder grant to put in a running sandbox.
type FolderGrant struct {
	// Label names it under its slot: [A-Za-z0-9._-], 1 to 64 bytes, not
	// "." or "..", never reused in one sandbox.
	Label string `json:"label"`
	// Source is the canonical host directory.
	Source string `json:"source"`
	// Dev and Ino are what Source was when it was requested: another
	// directory found there (a swap) is refused.
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
	// ReadOnly puts it under GrantSlotRO, read-only by the mount flag
	// (locked by the kernel) and by Landlock.
	ReadOnly bool `json:"read_only"`
	// Masks are host paths inside Source hidden in the grant (the
	// policy's denies, consent.folders.never): the grant is refused when
	// one cannot be placed.
	Masks []string `json:"masks,omitempty"`
	// ReadOnlyWithin are host paths inside Source kept read-only in a
	// read-write grant (the protected entries).
	ReadOnlyWithin []string `json:"read_only_within,omitempty"`
}

// GrantState is what a sandbox shows of a folder grant, read back from the
// kernel (the sandbox's mountinfo), never assumed.
type GrantState string

const (
	GrantEffective GrantState = "effective" // mounted in the sandbox at Path
	GrantRevoked   GrantState = "revoked"   // no longer mounted, nothing holds it
	GrantHeld      GrantState = "revoked-held"
	GrantMissing   GrantState = "missing" // wanted, but the sandbox does not show it
)

// GrantStatus is one folder grant as the sandbox shows it.
type GrantStatus struct {
	Label    string     `json:"label"`
	Source   string     `json:"source"`
	Path     string     `json:"path"` // inside: <slot>/<label>
	ReadOnly bool       `json:"read_only"`
	State    GrantState `json:"state"`
	// MountIDs are the grant's mounts in the sandbox's mount namespace
	// (its top first), as its mountinfo lists them.
	MountIDs []int `json:"mount_ids,omitempty"`
	// Locked says the grant came by propagation into the sandbox's less
	// privileged mount namespace: the kernel keeps its read-only flag
	// and its masks even from a process with every capability there.
	Locked bool `json:"locked"`
	// Holders are the sandbox's processes that still hold a revoked
	// grant open (fds keep working after a detach; the kernel has no
	// revoke).
	Holders []Holder `json:"holders,omitempty"`
	Detail  string   `json:"detail,omitempty"`
}

// Holder is one process holding a revoked grant: an open fd, its cwd or
// its root.
type Holder struct {
	PID  int    `json:"pid"` // host pid
	FD   int    `json:"fd"`  // -1: cwd, -2: root
	Path string `json:"path"`
	Exe  string `json:"exe,omitempty"`
	// Killed is set when the caller asked for holders to be killed and
	// this one was sent SIGKILL.
	Killed bool `json:"killed,omitempty"`
}

// LiveGrants is a sandbox that takes folder grants while it runs (the
// linux provider; docker where the daemon propagates mounts). Every
// method reads back from the kernel what it reports.
type LiveGrants interface {
	// GrantFolder mounts g and returns its status once the sandbox's
	// mountinfo shows it. Errors: CodePolicyRejected for a grant the
	// sandbox was not planned for (no slots: the policy had no
	// consent.folders), a label in use, a source that changed; CodeInternal
	// when a mount failed (nothing of the grant is left).
	GrantFolder(ctx context.Context, g FolderGrant) (GrantStatus, error)
	// RevokeFolder detaches grant label and reports who still holds it;
	// with kill those holders are sent SIGKILL. CodeNotFound for an
	// unknown label.
	RevokeFolder(ctx context.Context, label string, kill bool) (GrantStatus, error)
	// FolderGrants are the grants made so far (revoked ones too), read
	// back now.
	FolderGrants(ctx context.Context) ([]GrantStatus, error)
}

// ConsentMode is how a provider's sandboxes take consent grants.
type ConsentMode string

const (
	ConsentLive             ConsentMode = "live"              // in the running sandbox
	ConsentNextExec         ConsentMode = "applies-next-exec" // mxc: the next command
	ConsentRequiresRecreate ConsentMode = "requires-recreate" // e.g. Docker Desktop
	ConsentUnsupported      ConsentMode = "unsupported"
)

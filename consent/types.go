// Package consent is the broker between a running sandbox's workload,
// which asks for a folder or a host, and the people who decide: requests
// checked against the policy's ceiling (policy.Resolved.AskFolder,
// AskHost) before anyone is asked, coalesced, rate-limited, bound to a
// digest of exactly what was asked, decided once (the first answer wins),
// applied through the session (Applier) and reported as effective only
// after the read-back. It serves two HTTP/JSON APIs: the sandbox's
// (SandboxHandler: ask, wait, grants) and the approvers' (ApproverHandler:
// list, show, approve, deny, revoke, watch), shared by `corral run`,
// `corral service` and `corral gateway` (docs/consent.md).
package consent

import (
	"time"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// Kind is what a request asks for.
type Kind string

const (
	KindFolder Kind = "folder" // Target: an absolute host path
	KindHost   Kind = "host"   // Target: "host:port"
)

// State is where a request is in its life.
type State string

const (
	StatePending     State = "pending"      // waiting for a person
	StateApproved    State = "approved"     // decided yes; Effective says whether it is in force
	StateDenied      State = "denied"       // decided no (or no approver)
	StateExpired     State = "expired"      // nobody answered within the timeout: a deny
	StateRefused     State = "refused"      // outside the ceiling: nobody was asked
	StateRateLimited State = "rate_limited" // over consent.rate or max_pending: nobody was asked
	StateFailed      State = "apply_failed" // approved, but could not be put in force
	StateRevoked     State = "revoked"      // its grant was revoked (or expired)
)

// Scope is how long an approval lasts.
type Scope string

const (
	ScopeOnce    Scope = "once"    // this command: revoked when the requester's session leader (the run's workload, one exec) ends
	ScopeSession Scope = "session" // until the session ends; identical requests need no prompt
	ScopeTTL     Scope = "ttl"     // until Decision.Expires
	ScopeAlways  Scope = "always"  // also written to the standing grants file (consent.persist)
)

// Requester is the process that asked, as the kernel names it.
type Requester struct {
	PID int    `json:"pid,omitempty"` // host pid; 0 when unknown
	Exe string `json:"exe,omitempty"`
	Via string `json:"via"` // "tcp", "unix", "proxy"
}

// Ask is what the workload sends (POST /v1/requests).
type Ask struct {
	Kind   Kind          `json:"kind"`
	Target string        `json:"target"`
	Access policy.Access `json:"access,omitempty"` // folders: ro (default) or rw
	Reason string        `json:"reason,omitempty"` // at most 1 KiB, shown to the approver
}

// Request is one request and what became of it.
type Request struct {
	ID      string        `json:"id"`
	Sandbox string        `json:"sandbox"`
	Kind    Kind          `json:"kind"`
	Target  string        `json:"target"` // canonical
	Access  policy.Access `json:"access,omitempty"`
	Reason  string        `json:"reason,omitempty"`
	// Asked is how many identical requests it stands for (coalesced).
	Asked     int       `json:"asked"`
	Requester Requester `json:"requester"`
	Created   time.Time `json:"created"`
	Expires   time.Time `json:"expires"` // when pending ends
	// Digest binds a decision to exactly this request: kind, canonical
	// target, its device and inode (folders), access, the policy hash.
	Digest string `json:"digest"`
	// Ceiling is the policy entry that let it be asked, or that refused
	// it.
	Ceiling   string    `json:"ceiling,omitempty"`
	State     State     `json:"state"`
	Effective bool      `json:"effective"`        // in force, read back from the kernel or the proxy
	Path      string    `json:"path,omitempty"`   // where a folder grant is inside
	Detail    string    `json:"detail,omitempty"` // why refused/denied/failed, as the agent should read it
	Decision  *Decision `json:"decision,omitempty"`
	// Diff is what an approval --always wrote to the standing grants
	// file (a unified diff).
	Diff  string `json:"diff,omitempty"`
	Grant string `json:"grant,omitempty"` // the grant's id, once approved
}

// Decision is a person's answer to one request.
type Decision struct {
	Approve bool            `json:"approve"`
	Scope   Scope           `json:"scope,omitempty"`
	Expires time.Time       `json:"expires,omitzero"` // ScopeTTL: until then (or TTL from the decision)
	TTL     policy.Duration `json:"ttl,omitempty"`
	// Digest must equal the request's: what the approver saw is what is
	// applied.
	Digest string `json:"digest"`
	// ReadOnly narrows a read-write request to read-only.
	ReadOnly bool      `json:"read_only,omitempty"`
	By       string    `json:"by"`               // "uid 1000", "token", "tty"
	Reason   string    `json:"reason,omitempty"` // returned to the agent
	At       time.Time `json:"at"`
	// ForSession, on a deny, refuses identical requests for the rest of
	// the session without a prompt.
	ForSession bool `json:"for_session,omitempty"`
}

// Grant is one approved request in force (or revoked), desired against
// effective.
type Grant struct {
	ID      string        `json:"id"`
	Sandbox string        `json:"sandbox"`
	Request string        `json:"request"`
	Kind    Kind          `json:"kind"`
	Target  string        `json:"target"`
	Access  policy.Access `json:"access,omitempty"`
	Scope   Scope         `json:"scope"`
	Expires time.Time     `json:"expires,omitzero"`
	// Desired is whether it should be in force; Effective what the
	// kernel (folders: the sandbox's mountinfo) or the proxy (hosts: the
	// rules of revision Revision) shows.
	Desired   bool                  `json:"desired"`
	Effective bool                  `json:"effective"`
	Mode      provider.ConsentMode  `json:"mode"`
	Path      string                `json:"path,omitempty"`
	Revision  int                   `json:"revision,omitempty"`
	Folder    *provider.GrantStatus `json:"folder,omitempty"`
	Detail    string                `json:"detail,omitempty"`
}

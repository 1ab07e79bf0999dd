package consent

import (
	"context"
	"errors"
	"time"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// Applier puts decisions in force in one sandbox (the session implements
// it). Each method returns only after reading back what it reports.
type Applier interface {
	// Mode is how the sandbox takes grants of kind k.
	Mode(k Kind) provider.ConsentMode
	// ApplyFolder mounts g (provider.LiveGrants).
	ApplyFolder(ctx context.Context, g provider.FolderGrant) (provider.GrantStatus, error)
	// RevokeFolder detaches grant label, reporting (with kill: killing)
	// its holders.
	RevokeFolder(ctx context.Context, label string, kill bool) (provider.GrantStatus, error)
	// FolderGrants reads back every folder grant.
	FolderGrants(ctx context.Context) ([]provider.GrantStatus, error)
	// AllowHost adds host:port to the egress rules, keeping the
	// connections open; it returns the proxy's rule revision in force
	// with it.
	AllowHost(ctx context.Context, host string, port int) (revision int, err error)
	// DisallowHost removes it again (its connections are closed).
	DisallowHost(ctx context.Context, host string, port int) (revision int, err error)
}

// Event is one transition, for the audit log and for watchers.
type Event struct {
	// Activity: requested, prompted, approved, denied, expired, applied,
	// apply_failed, revoked, rate_limited, refused.
	Activity string    `json:"activity"`
	Time     time.Time `json:"time"`
	Request  *Request  `json:"request,omitempty"`
	Grant    *Grant    `json:"grant,omitempty"`
	// By is the approver (decisions, revocations).
	By string `json:"by,omitempty"`
}

// Config is one broker's.
type Config struct {
	Sandbox string
	Policy  *policy.Resolved // its Consent is the ceiling (non-nil)
	Applier Applier
	// Log receives every Event (the session's audit); nil: none.
	Log func(Event)
	// Standing is the standing grants file (consent.persist) read at
	// start; nil: none.
	Standing *Standing
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time
}

// ErrNoApprover is a request's deny when no approver is connected (a
// terminal prompt, `corral approvals watch`, the web page).
var ErrNoApprover = errors.New("no approver is connected: a request needs a terminal prompt (corral run -t), `corral approvals watch` or the web page open")

// Broker is one sandbox's consent broker. Its methods are safe for
// concurrent use.
type Broker struct {
	cfg Config
}

// New is a broker for cfg.
func New(cfg Config) *Broker { return &Broker{cfg: cfg} }

// Ask takes one request from the workload: refused (StateRefused, with
// the ceiling entry) or rate limited without a prompt, answered at once
// from a session or standing decision, coalesced with an identical
// pending one, or made pending for the approvers. It never blocks on a
// person.
func (b *Broker) Ask(ctx context.Context, a Ask, who Requester) (Request, error) {
	return Request{}, errors.New("not implemented")
}

// Wait waits up to timeout (at most 300 s) for request id to leave
// pending, and, once approved, for its read-back.
func (b *Broker) Wait(ctx context.Context, id string, timeout time.Duration) (Request, error) {
	return Request{}, errors.New("not implemented")
}

// Get is request id as it is now.
func (b *Broker) Get(id string) (Request, bool) { return Request{}, false }

// Requests are the broker's requests, newest first (pending ones always,
// decided ones up to a bound).
func (b *Broker) Requests() []Request { return nil }

// Decide answers pending request id: the first answer wins (a later one
// gets ErrDecided), a digest other than the request's is refused, an
// approval is applied before Decide returns.
func (b *Broker) Decide(ctx context.Context, id string, d Decision) (Request, error) {
	return Request{}, errors.New("not implemented")
}

// Grants are the grants made, desired against effective (read back now).
func (b *Broker) Grants(ctx context.Context) []Grant { return nil }

// Revoke revokes grant id (by: who asked); with kill its holders are
// killed.
func (b *Broker) Revoke(ctx context.Context, id, by string, kill bool) (Grant, error) {
	return Grant{}, errors.New("not implemented")
}

// Watch registers an approver: every Event from now on goes to the
// channel until cancel; while one is registered, requests are pending
// instead of denied (ErrNoApprover).
func (b *Broker) Watch() (events <-chan Event, cancel func()) { return nil, func() {} }

// Close ends the broker with its session: pending requests expire,
// waiters are answered.
func (b *Broker) Close() {}

// Standing is the standing grants file: "always" decisions, kept outside
// the sandbox, re-validated against the ceiling when read.
type Standing struct {
	Path string
}

package consent

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
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
	// Dropped is how many events this watcher missed just before this
	// one because it read too slowly (a watcher never holds the broker
	// up; re-read the lists when it is not 0). Always 0 in cfg.Log.
	Dropped int `json:"dropped,omitempty"`
}

// The activities of Event.
const (
	ActRequested   = "requested"
	ActPrompted    = "prompted"
	ActApproved    = "approved"
	ActDenied      = "denied"
	ActExpired     = "expired"
	ActApplied     = "applied"
	ActApplyFailed = "apply_failed"
	ActRevoked     = "revoked"
	ActRateLimited = "rate_limited"
	ActRefused     = "refused"
)

// Config is one broker's.
type Config struct {
	Sandbox string
	Policy  *policy.Resolved // its Consent is the ceiling (non-nil)
	Applier Applier
	// Log receives every Event (the session's audit); nil: none. It is
	// called outside the broker's lock, one event at a time.
	Log func(Event)
	// Standing is the standing grants file (consent.persist) read at
	// start (LoadStanding); nil: none, and the "always" scope is refused.
	Standing *Standing
	// Now is the clock (tests); nil: time.Now. Timers (expiry, ttl) run
	// on the real clock.
	Now func() time.Time
}

// Errors of the broker's methods (errors.Is).
var (
	// ErrNoApprover is a request's deny when no approver is connected (a
	// terminal prompt, `corral approvals watch`, the web page).
	ErrNoApprover = errors.New("no approver is connected: a request needs a terminal prompt (corral run -t), `corral approvals watch` or the web page open")
	ErrNotFound   = errors.New("no such request or grant")
	// ErrDecided: a request already answered (the first answer wins;
	// *DecidedError names it).
	ErrDecided = errors.New("already decided")
	// ErrDigest: the decision's digest is not the request's.
	ErrDigest = errors.New("the request changed since you saw it")
	// ErrChanged: the folder at the request's path is another directory
	// now (its device/inode changed): the request is refused.
	ErrChanged = errors.New("the folder changed since it was asked for")
	ErrClosed  = errors.New("the consent broker is closed (its session ended)")
	// ErrInvalid: a decision that cannot be applied as given (a scope
	// unknown, a ttl in the past, "always" without a standing file).
	ErrInvalid = errors.New("invalid decision")
)

// DecidedError is the answer to a second decision: the first one's.
type DecidedError struct {
	ID    string
	State State
	First *Decision // nil when nobody decided (expired, refused)
}

func (e *DecidedError) Error() string {
	if e.First != nil {
		verb := "denied"
		if e.First.Approve {
			verb = "approved (" + string(e.First.Scope) + ")"
		}
		return fmt.Sprintf("request %s was already %s by %s at %s: the first answer wins", e.ID, verb, e.First.By, e.First.At.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("request %s is already %s: it can no longer be answered", e.ID, e.State)
}

func (e *DecidedError) Unwrap() error { return ErrDecided }

// Bounds of the broker.
const (
	DefaultWait = 60 * time.Second  // Wait's default timeout
	MaxWait     = 300 * time.Second // Wait's longest
	MaxReason   = 1024              // bytes of Ask.Reason kept
	// keepDecided bounds the decided requests kept for Requests and Get
	// (pending ones are always kept).
	keepDecided = 256
	watchBuffer = 64
	applyLimit  = 30 * time.Second // one apply or revoke, however the caller's context ends
)

// pidPoll is how often a once grant's requester is checked for exit.
var pidPoll = time.Second

// Broker is one sandbox's consent broker. Its methods are safe for
// concurrent use.
type Broker struct {
	cfg     Config
	now     func() time.Time
	consent *policy.ResolvedConsent

	mu         sync.Mutex
	reqs       map[string]*entry
	order      []string          // request ids, oldest first
	pending    map[string]string // key → pending request id
	grants     map[string]*grantRec
	grantOrder []string
	byKey      map[string]string // key → grant id (session, ttl, always)
	denied     map[string]string // key → a deny for the session's detail
	tokens     float64
	refilled   time.Time
	seq        int // label suffixes, never reused
	closed     bool

	wmu      sync.Mutex
	watchers map[*watcher]struct{}

	emitMu sync.Mutex
}

type entry struct {
	req      Request
	dev, ino uint64
	host     string
	port     int
	ceiling  policy.FolderCeiling
	changed  chan struct{} // closed and replaced on every change
	timer    *time.Timer
	applying bool
}

type grantRec struct {
	g        Grant
	label    string
	host     string
	port     int
	key      string
	timer    *time.Timer
	stop     chan struct{} // ends a once grant's requester watch
	revoking bool
}

type watcher struct {
	ch      chan Event
	dropped int
}

// New is a broker for cfg (cfg.Policy.Consent non-nil; a nil one refuses
// every request).
func New(cfg Config) *Broker {
	b := &Broker{cfg: cfg, now: cfg.Now, reqs: map[string]*entry{}, pending: map[string]string{},
		grants: map[string]*grantRec{}, byKey: map[string]string{}, denied: map[string]string{}, watchers: map[*watcher]struct{}{}}
	if b.now == nil {
		b.now = time.Now
	}
	if cfg.Policy != nil {
		b.consent = cfg.Policy.Consent
	}
	if b.consent == nil {
		b.consent = &policy.ResolvedConsent{}
	}
	b.tokens = float64(b.burst())
	b.refilled = b.now()
	return b
}

func (b *Broker) burst() int {
	if b.consent.Burst > 0 {
		return b.consent.Burst
	}
	return policy.DefaultConsentBurst
}

func (b *Broker) per() time.Duration {
	if b.consent.Per > 0 {
		return b.consent.Per
	}
	return policy.DefaultConsentPer
}

func (b *Broker) timeout() time.Duration {
	if b.consent.Timeout > 0 {
		return b.consent.Timeout
	}
	return policy.DefaultConsentTimeout
}

func (b *Broker) maxPending() int {
	if b.consent.MaxPending > 0 {
		return b.consent.MaxPending
	}
	return policy.DefaultConsentMaxPending
}

// key is what identical requests share: kind, canonical target, access.
func key(k Kind, target string, access policy.Access) string {
	return string(k) + "\x00" + target + "\x00" + string(access)
}

// Digest is the digest that binds a decision to a request: "sha256:" and
// the hex SHA-256 of the JSON array ["corral-consent/1", kind, target,
// dev, ino, access, policy hash] (encoding/json: a canonical, unambiguous
// encoding of those values; dev and ino 0 for a host).
func Digest(k Kind, target string, dev, ino uint64, access policy.Access, policyHash string) string {
	b, _ := json.Marshal([]any{"corral-consent/1", k, target, strconv.FormatUint(dev, 10), strconv.FormatUint(ino, 10), access, policyHash})
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func randomID(prefix string) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported systems
	}
	return prefix + hex.EncodeToString(b[:])
}

// Ask takes one request from the workload: refused (StateRefused, with
// the ceiling entry) or rate limited without a prompt, answered at once
// from a session or standing decision, coalesced with an identical
// pending one, or made pending for the approvers. It never blocks on a
// person. The error is ErrClosed or the context's; every other outcome is
// the Request's State and Detail.
func (b *Broker) Ask(ctx context.Context, a Ask, who Requester) (Request, error) {
	if err := ctx.Err(); err != nil {
		return Request{}, err
	}
	now := b.now()
	v, refusal := validateAsk(a)
	e := &entry{changed: make(chan struct{}), dev: v.dev, ino: v.ino, host: v.host, port: v.port}
	e.req = Request{ID: randomID("req-"), Sandbox: b.cfg.Sandbox, Kind: v.kind, Target: v.target, Access: v.access,
		Reason: v.reason, Asked: 1, Requester: who, Created: now}
	hash := ""
	if b.cfg.Policy != nil {
		hash = b.cfg.Policy.Hash
	}
	e.req.Digest = Digest(v.kind, v.target, v.dev, v.ino, v.access, hash)
	if refusal == nil {
		e.req.Ceiling, refusal = b.ceiling(e, v)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return Request{}, ErrClosed
	}
	if refusal != nil {
		e.req.State, e.req.Ceiling, e.req.Detail = StateRefused, refusal.Field, refusal.Reason
		e.req.Hint = "this is outside what the policy lets you ask for (" + refusal.Field + "): nobody was asked, and asking again gets the same answer; ask for something the policy allows, or tell the user what you need and why"
		return b.settle(e, ActRefused)
	}
	k := key(e.req.Kind, e.req.Target, e.req.Access)
	if detail, ok := b.denied[k]; ok {
		e.req.State, e.req.Detail = StateDenied, detail
		e.req.Hint = "a person denied this for the rest of the session: do not ask again; tell the user what you need and why"
		return b.settle(e, ActDenied)
	}
	if g := b.covering(e.req.Kind, e.req.Target, e.req.Access); g != nil {
		e.req.State, e.req.Grant, e.req.Effective, e.req.Path = StateApproved, g.g.ID, g.g.Effective, g.g.Path
		e.req.Decision = &Decision{Approve: true, Scope: g.g.Scope, Expires: g.g.Expires, Digest: e.req.Digest, By: "grant " + g.g.ID, At: now}
		e.req.Detail = "already granted (" + g.g.ID + ", scope " + string(g.g.Scope) + ")"
		e.req.Hint = grantHint(e.req)
		return b.settle(e, ActApproved)
	}
	if b.cfg.Standing != nil {
		if se, ok := b.cfg.Standing.Covers(e.req.Kind, e.req.Target, e.req.Access); ok {
			e.req.State = StateApproved
			e.req.Decision = &Decision{Approve: true, Scope: ScopeAlways, Digest: e.req.Digest, By: "standing grant (" + b.cfg.Standing.Path + ", by " + se.By + ")", At: now}
			e.applying = true
			b.record(e)
			out := e.req
			b.mu.Unlock()
			b.emit(Event{Activity: ActApproved, Time: now, Request: &out, By: out.Decision.By})
			return b.apply(ctx, e.req.ID, false), nil
		}
	}
	if id, ok := b.pending[k]; ok {
		p := b.reqs[id]
		p.req.Asked++
		if len(e.req.Reason) > len(p.req.Reason) {
			p.req.Reason = e.req.Reason
		}
		b.notify(p)
		out := p.req
		b.mu.Unlock()
		b.emit(Event{Activity: ActRequested, Time: now, Request: &out})
		return out, nil
	}
	if len(b.pending) >= b.maxPending() {
		e.req.State = StateRateLimited
		e.req.Detail = fmt.Sprintf("%d requests are already waiting for a person (consent.max_pending %d)", len(b.pending), b.maxPending())
		e.req.Hint = "wait for the pending requests to be answered (GET /v1/requests/{id}/wait), then ask again"
		return b.settle(e, ActRateLimited)
	}
	b.refill(now)
	if b.tokens < 1 {
		e.req.State = StateRateLimited
		e.req.Detail = fmt.Sprintf("more than %d new requests in %s (consent.rate)", b.burst(), b.per())
		e.req.Hint = fmt.Sprintf("ask less often: one new request may come every %s; identical requests are merged and free", b.per()/time.Duration(b.burst()))
		return b.settle(e, ActRateLimited)
	}
	b.tokens--
	if b.approvers() == 0 {
		e.req.State, e.req.Detail = StateDenied, ErrNoApprover.Error()
		e.req.Hint = "nobody can answer now: tell the user what you need and why, and that they can approve it with `corral approvals watch` or the web page open"
		b.record(e)
		out := e.req
		b.mu.Unlock()
		b.emit(Event{Activity: ActRequested, Time: now, Request: &out})
		b.emit(Event{Activity: ActDenied, Time: now, Request: &out})
		return out, nil
	}
	e.req.State = StatePending
	e.req.Expires = now.Add(b.timeout())
	e.req.Hint = fmt.Sprintf("a person is asked: wait for the answer (GET /v1/requests/%s/wait?timeout=60, again while pending); it expires (a deny) at %s", e.req.ID, e.req.Expires.UTC().Format(time.RFC3339))
	id := e.req.ID
	e.timer = time.AfterFunc(b.timeout(), func() { b.expire(id, "nobody answered within "+b.timeout().String()) })
	b.pending[k] = id
	b.record(e)
	out := e.req
	b.mu.Unlock()
	b.emit(Event{Activity: ActRequested, Time: now, Request: &out})
	return out, nil
}

// ceiling checks v against the policy's ceiling, keeping the folder
// ceiling for the grant.
func (b *Broker) ceiling(e *entry, v asked) (string, *policy.ConsentRefusal) {
	r := b.cfg.Policy
	if r == nil {
		return "", &policy.ConsentRefusal{Field: "consent", Reason: "the policy lets the workload ask for nothing"}
	}
	if v.kind == KindHost {
		return r.AskHost(v.host, v.port)
	}
	c, refusal := r.AskFolder(v.target, v.access)
	if refusal != nil {
		return "", refusal
	}
	e.ceiling = c
	return c.Field, nil
}

// settle records e, decided at once, unlocks and emits act.
func (b *Broker) settle(e *entry, act string) (Request, error) {
	b.record(e)
	out := e.req
	b.mu.Unlock()
	b.emit(Event{Activity: act, Time: out.Created, Request: &out})
	return out, nil
}

// covering is the grant in force for the session (session, ttl, always)
// that covers a request: the same kind and target, its access or more
// (rw covers ro). Called with b.mu held.
func (b *Broker) covering(k Kind, target string, access policy.Access) *grantRec {
	keys := []string{key(k, target, access)}
	if k == KindFolder && access == policy.AccessReadOnly {
		keys = append(keys, key(k, target, policy.AccessReadWrite))
	}
	for _, kk := range keys {
		if g := b.grants[b.byKey[kk]]; g != nil && g.g.Desired && !g.revoking && g.g.Access != "" == (k == KindFolder) {
			if k == KindFolder && access == policy.AccessReadOnly || g.g.Access == access || k == KindHost {
				return g
			}
		}
	}
	return nil
}

// refill adds the tokens earned since the last refill (Burst per Per).
func (b *Broker) refill(now time.Time) {
	if el := now.Sub(b.refilled); el > 0 {
		b.tokens = min(float64(b.burst()), b.tokens+float64(b.burst())*el.Seconds()/b.per().Seconds())
	}
	b.refilled = now
}

// record adds e and drops the oldest decided requests beyond
// keepDecided. Called with b.mu held.
func (b *Broker) record(e *entry) {
	b.reqs[e.req.ID] = e
	b.order = append(b.order, e.req.ID)
	decided := 0
	for _, id := range b.order {
		if b.reqs[id].req.State != StatePending {
			decided++
		}
	}
	for i := 0; decided > keepDecided && i < len(b.order); {
		id := b.order[i]
		if x := b.reqs[id]; x.req.State != StatePending && !x.applying {
			delete(b.reqs, id)
			b.order = slices.Delete(b.order, i, i+1)
			decided--
			continue
		}
		i++
	}
}

// notify wakes e's waiters. Called with b.mu held.
func (b *Broker) notify(e *entry) {
	close(e.changed)
	e.changed = make(chan struct{})
}

// expire ends pending request id as expired (a deny) with detail.
func (b *Broker) expire(id, detail string) {
	b.mu.Lock()
	e := b.reqs[id]
	if e == nil || e.req.State != StatePending {
		b.mu.Unlock()
		return
	}
	b.unpend(e)
	e.req.State, e.req.Detail = StateExpired, detail
	e.req.Hint = "nobody answered in time, which is a deny: tell the user what you need and why"
	b.notify(e)
	out := e.req
	b.mu.Unlock()
	b.emit(Event{Activity: ActExpired, Time: b.now(), Request: &out})
}

// unpend takes pending e out of the pending set. Called with b.mu held.
func (b *Broker) unpend(e *entry) {
	if e.timer != nil {
		e.timer.Stop()
	}
	k := key(e.req.Kind, e.req.Target, e.req.Access)
	if b.pending[k] == e.req.ID {
		delete(b.pending, k)
	}
}

// Wait waits up to timeout (DefaultWait when 0 or less, at most MaxWait)
// for request id to leave pending, and, once approved, for its read-back;
// it returns the request as it is then (still pending when the timeout
// passed). Errors: ErrNotFound, the context's.
func (b *Broker) Wait(ctx context.Context, id string, timeout time.Duration) (Request, error) {
	if timeout <= 0 {
		timeout = DefaultWait
	}
	timeout = min(timeout, MaxWait)
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		b.mu.Lock()
		e := b.reqs[id]
		if e == nil {
			b.mu.Unlock()
			return Request{}, fmt.Errorf("request %s: %w", id, ErrNotFound)
		}
		out, ch := e.req, e.changed
		waiting := e.req.State == StatePending || e.applying
		b.mu.Unlock()
		if !waiting {
			return out, nil
		}
		select {
		case <-ch:
		case <-t.C:
			return out, nil
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
}

// Get is request id as it is now.
func (b *Broker) Get(id string) (Request, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.reqs[id]; e != nil {
		return e.req, true
	}
	return Request{}, false
}

// Requests are the broker's requests, newest first (pending ones always,
// decided ones up to a bound).
func (b *Broker) Requests() []Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Request, 0, len(b.order))
	for i := len(b.order) - 1; i >= 0; i-- {
		out = append(out, b.reqs[b.order[i]].req)
	}
	return out
}

// Decide answers pending request id: the first answer wins (a later one
// gets a *DecidedError, ErrDecided), a digest other than the request's is
// refused (ErrDigest, the request stays pending), an approval is applied
// before Decide returns (State approved with Effective from the
// read-back, or apply_failed). d.Scope is once when empty; ScopeTTL needs
// d.Expires in the future, ScopeAlways a standing file (ErrInvalid). A
// folder that is another directory now (device/inode changed) refuses the
// request (ErrChanged, State refused).
func (b *Broker) Decide(ctx context.Context, id string, d Decision) (Request, error) {
	now := b.now()
	d.At = now
	if d.Approve {
		switch d.Scope {
		case "":
			d.Scope = ScopeOnce
		case ScopeOnce, ScopeSession:
		case ScopeTTL:
			if !d.Expires.After(now) {
				return Request{}, fmt.Errorf("%w: scope ttl needs an expiry in the future", ErrInvalid)
			}
		case ScopeAlways:
			if b.cfg.Standing == nil {
				return Request{}, fmt.Errorf("%w: scope always needs a standing grants file (consent.persist), and this session has none", ErrInvalid)
			}
		default:
			return Request{}, fmt.Errorf("%w: scope %q is not once, session, ttl or always", ErrInvalid, d.Scope)
		}
		if d.Scope != ScopeTTL {
			d.Expires = time.Time{}
		}
	} else {
		d.Scope, d.Expires, d.ReadOnly = "", time.Time{}, false
	}
	b.mu.Lock()
	e := b.reqs[id]
	switch {
	case e == nil:
		b.mu.Unlock()
		return Request{}, fmt.Errorf("request %s: %w", id, ErrNotFound)
	case e.req.State != StatePending:
		err := &DecidedError{ID: id, State: e.req.State, First: e.req.Decision}
		out := e.req
		b.mu.Unlock()
		return out, err
	case d.Digest != e.req.Digest:
		out := e.req
		b.mu.Unlock()
		return out, fmt.Errorf("%w: request %s's digest is %s, the decision's %q: show it again and decide on what it is now", ErrDigest, id, out.Digest, d.Digest)
	}
	b.unpend(e)
	e.req.Decision = &d
	if !d.Approve {
		e.req.State = StateDenied
		e.req.Detail = "denied by " + d.By
		if d.Reason != "" {
			e.req.Detail += ": " + cleanReason(d.Reason)
		}
		e.req.Hint = "a person said no: do not ask again for the same thing; the reason, if given, is in detail"
		if d.ForSession {
			b.denied[key(e.req.Kind, e.req.Target, e.req.Access)] = e.req.Detail + " (for the rest of the session)"
		}
		b.notify(e)
		out := e.req
		b.mu.Unlock()
		b.emit(Event{Activity: ActDenied, Time: now, Request: &out, By: d.By})
		return out, nil
	}
	if e.req.Kind == KindFolder {
		if dev, ino, err := fileID(e.req.Target); err != nil || dev != e.dev || ino != e.ino {
			why := "another directory is there now"
			if err != nil {
				why = err.Error()
			}
			e.req.State, e.req.Ceiling = StateRefused, policy.RefusedRequest
			e.req.Detail = fmt.Sprintf("%s changed since it was asked for (%s): nothing was granted", e.req.Target, why)
			e.req.Hint = "ask again for the folder as it is now"
			b.notify(e)
			out := e.req
			b.mu.Unlock()
			b.emit(Event{Activity: ActRefused, Time: now, Request: &out, By: d.By})
			return out, fmt.Errorf("%w: %s", ErrChanged, out.Detail)
		}
	}
	e.req.State = StateApproved
	e.applying = true
	b.notify(e)
	out := e.req
	b.mu.Unlock()
	b.emit(Event{Activity: ActApproved, Time: now, Request: &out, By: d.By})
	return b.apply(ctx, id, d.Scope == ScopeAlways), nil
}

// grantHint tells the agent where an approved request's grant is.
func grantHint(r Request) string {
	switch {
	case r.State != StateApproved:
		return ""
	case r.Kind == KindHost && r.Effective:
		return "approved: connect to " + r.Target + " through the proxy"
	case r.Effective && r.Access == policy.AccessReadWrite && r.Decision != nil && !r.Decision.ReadOnly:
		return "approved: the folder is at " + r.Path + " (read-write)"
	case r.Effective:
		return "approved: the folder is at " + r.Path + " (read-only)"
	}
	return "approved, but not in force in this sandbox yet (see detail)"
}

// label is a grant's name under its slot: the target's base name with
// every byte outside [A-Za-z0-9._-] made "_", at most 40 bytes, then
// "-N" (N never reused in this broker).
func label(target string, n int) string {
	base := []byte(filepath.Base(target))
	for i, c := range base {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			base[i] = '_'
		}
	}
	s := string(base[:min(len(base), 40)])
	if s == "" || s == "." || s == ".." || s == "/" || s == "_" {
		s = "folder"
	}
	return s + "-" + strconv.Itoa(n)
}

// apply puts approved request id in force (the request is marked
// applying) and returns it as it is then; persist writes an always grant
// to the standing file.
func (b *Broker) apply(ctx context.Context, id string, persist bool) Request {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), applyLimit)
	defer cancel()
	now := b.now()
	b.mu.Lock()
	e := b.reqs[id]
	d := *e.req.Decision
	b.seq++
	g := &grantRec{key: key(e.req.Kind, e.req.Target, e.req.Access), host: e.host, port: e.port}
	g.g = Grant{ID: randomID("grant-"), Sandbox: b.cfg.Sandbox, Request: id, Kind: e.req.Kind, Target: e.req.Target,
		Access: e.req.Access, Scope: d.Scope, Expires: d.Expires, Desired: true, By: d.By}
	if d.ReadOnly && g.g.Access == policy.AccessReadWrite {
		g.g.Access = policy.AccessReadOnly
	}
	fg := provider.FolderGrant{Label: label(e.req.Target, b.seq), Source: e.req.Target, Dev: e.dev, Ino: e.ino,
		ReadOnly: g.g.Access != policy.AccessReadWrite, Masks: e.ceiling.Masks}
	if !fg.ReadOnly {
		fg.ReadOnlyWithin = e.ceiling.ReadOnly
	}
	if e.req.Kind == KindFolder {
		g.label = fg.Label
	}
	b.mu.Unlock()

	var err error
	a := b.cfg.Applier
	switch {
	case a == nil:
		err = errors.New("this session cannot apply grants (no applier)")
	default:
		g.g.Mode = a.Mode(g.g.Kind)
		if g.g.Mode == provider.ConsentUnsupported || g.g.Mode == "" {
			err = fmt.Errorf("this sandbox does not take %s grants", g.g.Kind)
		}
	}
	if err == nil && g.g.Kind == KindFolder {
		var st provider.GrantStatus
		st, err = a.ApplyFolder(ctx, fg)
		if err == nil {
			g.g.Folder, g.g.Path = &st, st.Path
			g.g.Effective = st.State == provider.GrantEffective
			if !g.g.Effective {
				g.g.Detail = fmt.Sprintf("the sandbox shows the grant %s, not in force", st.State)
				if st.Detail != "" {
					g.g.Detail += ": " + st.Detail
				}
			}
		}
	} else if err == nil {
		g.g.Revision, err = a.AllowHost(ctx, g.host, g.port)
		g.g.Effective = err == nil && g.g.Revision > 0
		if err == nil && !g.g.Effective {
			g.g.Detail = "the proxy reported no rule revision"
		}
	}
	if err == nil && g.g.Mode != provider.ConsentLive {
		g.g.Effective = false
		g.g.Detail = "not in force in the running sandbox: " + string(g.g.Mode)
	}

	b.mu.Lock()
	e.applying = false
	if err != nil {
		e.req.State, e.req.Detail = StateFailed, "approved, but it could not be put in force: "+err.Error()
		e.req.Hint = "the grant is not in force; tell the user (the approver sees this too)"
		b.notify(e)
		out := e.req
		b.mu.Unlock()
		b.emit(Event{Activity: ActApplyFailed, Time: b.now(), Request: &out, By: d.By})
		return out
	}
	b.grants[g.g.ID] = g
	b.grantOrder = append(b.grantOrder, g.g.ID)
	e.req.Grant, e.req.Effective, e.req.Path = g.g.ID, g.g.Effective, g.g.Path
	e.req.Detail = g.g.Detail
	e.req.Hint = grantHint(e.req)
	switch g.g.Scope {
	case ScopeSession, ScopeAlways, ScopeTTL:
		b.byKey[g.key] = g.g.ID
	}
	gid := g.g.ID
	switch {
	case g.g.Scope == ScopeTTL:
		g.timer = time.AfterFunc(g.g.Expires.Sub(now), func() { _, _ = b.revoke(context.Background(), gid, "ttl expired", false) })
	case g.g.Scope == ScopeOnce && e.req.Requester.PID > 0:
		g.stop = make(chan struct{})
		go b.watchRequester(gid, e.req.Requester.PID, g.stop)
	}
	b.mu.Unlock()
	if persist {
		diff, perr := b.cfg.Standing.Add(StandingEntry{Kind: g.g.Kind, Target: g.g.Target, Access: g.g.Access, Approved: now.UTC().Truncate(time.Second), By: d.By})
		b.mu.Lock()
		if perr != nil {
			g.g.Detail = "in force for this session, but not written to the standing grants file: " + perr.Error()
		} else {
			g.g.StandingDiff = diff
		}
		b.mu.Unlock()
	}
	b.mu.Lock()
	b.notify(e)
	out, gout := e.req, g.g
	b.mu.Unlock()
	b.emit(Event{Activity: ActApplied, Time: b.now(), Request: &out, Grant: &gout, By: d.By})
	return out
}

// watchRequester revokes once grant gid when process pid exits (checked
// every pidPoll), until stop.
func (b *Broker) watchRequester(gid string, pid int, stop chan struct{}) {
	start, ok := procStart(pid)
	if !ok {
		_, _ = b.revoke(context.Background(), gid, "requester exited", false)
		return
	}
	t := time.NewTicker(pidPoll)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if s, ok := procStart(pid); !ok || s != start {
				_, _ = b.revoke(context.Background(), gid, "requester exited", false)
				return
			}
		}
	}
}

// Grants are the grants made, newest first, desired against effective:
// folder grants read back now (a failed read-back: Effective false and
// Detail say so).
func (b *Broker) Grants(ctx context.Context) []Grant {
	b.mu.Lock()
	anyFolder := false
	for _, g := range b.grants {
		anyFolder = anyFolder || g.label != ""
	}
	b.mu.Unlock()
	var sts []provider.GrantStatus
	var rerr error
	if anyFolder && b.cfg.Applier != nil {
		sts, rerr = b.cfg.Applier.FolderGrants(ctx)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Grant, 0, len(b.grantOrder))
	for i := len(b.grantOrder) - 1; i >= 0; i-- {
		g := b.grants[b.grantOrder[i]]
		if g.label != "" && b.cfg.Applier != nil {
			switch j := slices.IndexFunc(sts, func(s provider.GrantStatus) bool { return s.Label == g.label }); {
			case rerr != nil:
				g.g.Effective, g.g.Detail = false, "read-back failed: "+rerr.Error()
			case j < 0:
				g.g.Effective = false
				if g.g.Desired {
					g.g.Detail = "the sandbox does not show it"
				}
			default:
				st := sts[j]
				g.g.Folder, g.g.Effective = &st, st.State == provider.GrantEffective && g.g.Mode == provider.ConsentLive
			}
		}
		out = append(out, g.g)
	}
	return out
}

// Revoke revokes grant id (by: who asked); with kill its holders are
// killed. It returns the grant as read back (Folder.Holders: who still
// holds a folder open). Errors: ErrNotFound, one already revoked, the
// applier's (then the grant may still be in force: Effective says so).
func (b *Broker) Revoke(ctx context.Context, id, by string, kill bool) (Grant, error) {
	return b.revoke(ctx, id, by, kill)
}

func (b *Broker) revoke(ctx context.Context, id, by string, kill bool) (Grant, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), applyLimit)
	defer cancel()
	b.mu.Lock()
	g := b.grants[id]
	switch {
	case g == nil:
		b.mu.Unlock()
		return Grant{}, fmt.Errorf("grant %s: %w", id, ErrNotFound)
	case !g.g.Desired || g.revoking:
		out := g.g
		b.mu.Unlock()
		return out, fmt.Errorf("grant %s is already revoked (by %s)", id, out.RevokedBy)
	}
	g.revoking = true
	if g.timer != nil {
		g.timer.Stop()
	}
	if g.stop != nil {
		close(g.stop)
		g.stop = nil
	}
	if b.byKey[g.key] == id {
		delete(b.byKey, g.key)
	}
	b.mu.Unlock()

	var err error
	var st provider.GrantStatus
	rev := 0
	if a := b.cfg.Applier; a == nil {
		err = errors.New("no applier")
	} else if g.label != "" {
		st, err = a.RevokeFolder(ctx, g.label, kill)
	} else {
		rev, err = a.DisallowHost(ctx, g.host, g.port)
	}

	b.mu.Lock()
	g.revoking = false
	g.g.Desired, g.g.RevokedBy = false, by
	if err != nil {
		g.g.Detail = "revoke failed, it may still be in force: " + err.Error()
	} else if g.label != "" {
		g.g.Folder, g.g.Effective = &st, st.State == provider.GrantEffective
		g.g.Detail = revokedDetail(st)
	} else {
		g.g.Effective, g.g.Revision, g.g.Detail = false, rev, "revoked"
	}
	if e := b.reqs[g.g.Request]; e != nil {
		e.req.State, e.req.Effective = StateRevoked, g.g.Effective
		e.req.Detail = "revoked by " + by
		e.req.Hint = "the grant is gone: ask again if you still need it"
		b.notify(e)
	}
	out := g.g
	b.mu.Unlock()
	b.emit(Event{Activity: ActRevoked, Time: b.now(), Grant: &out, By: by})
	return out, err
}

// revokedDetail is "revoked" or "revoked, held: pid 812 fd 3 (/x)".
func revokedDetail(st provider.GrantStatus) string {
	s := "revoked"
	if st.State == provider.GrantEffective {
		s = "still in force after the revoke"
	}
	for i, h := range st.Holders {
		sep := ", "
		if i == 0 {
			sep = ", held: "
		}
		where := "fd " + strconv.Itoa(h.FD)
		switch h.FD {
		case -1:
			where = "cwd"
		case -2:
			where = "root"
		}
		s += sep + fmt.Sprintf("pid %d %s (%s)", h.PID, where, h.Path)
		if h.Killed {
			s += " killed"
		}
	}
	return s
}

// Watch registers an approver: every Event from now on goes to the
// channel (never blocking the broker: a full channel drops, and the next
// event delivered says how many in Dropped) until cancel, which closes
// it; while one is registered, requests are pending instead of denied
// (ErrNoApprover).
func (b *Broker) Watch() (events <-chan Event, cancel func()) {
	w := &watcher{ch: make(chan Event, watchBuffer)}
	b.addWatcher(w)
	var once sync.Once
	return w.ch, func() {
		once.Do(func() {
			b.removeWatcher(w)
			close(w.ch)
		})
	}
}

func (b *Broker) addWatcher(w *watcher) {
	b.wmu.Lock()
	b.watchers[w] = struct{}{}
	b.wmu.Unlock()
}

func (b *Broker) removeWatcher(w *watcher) {
	b.wmu.Lock()
	delete(b.watchers, w)
	b.wmu.Unlock()
}

// Approvers is how many approvers are connected (Watch).
func (b *Broker) Approvers() int { return b.approvers() }

func (b *Broker) approvers() int {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	return len(b.watchers)
}

// emit hands ev to the log and the watchers; a requested event that
// reached a watcher is followed by prompted.
func (b *Broker) emit(ev Event) {
	b.emitMu.Lock()
	defer b.emitMu.Unlock()
	if b.cfg.Log != nil {
		b.cfg.Log(ev)
	}
	delivered := b.fanout(ev)
	if ev.Activity == ActRequested && delivered > 0 && ev.Request != nil && ev.Request.State == StatePending {
		p := ev
		p.Activity, p.Time = ActPrompted, b.now()
		if b.cfg.Log != nil {
			b.cfg.Log(p)
		}
		b.fanout(p)
	}
}

func (b *Broker) fanout(ev Event) int {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	n := 0
	for w := range b.watchers {
		x := ev
		x.Dropped = w.dropped
		select {
		case w.ch <- x:
			w.dropped = 0
			n++
		default:
			w.dropped++
		}
	}
	return n
}

// Close ends the broker with its session: pending requests expire,
// waiters are answered, grants still in force are revoked ("session
// ended"; standing ones stay in their file). Asks after it get ErrClosed.
func (b *Broker) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	var pend, live []string
	for _, id := range b.order {
		if b.reqs[id].req.State == StatePending {
			pend = append(pend, id)
		}
	}
	for _, id := range b.grantOrder {
		if b.grants[id].g.Desired {
			live = append(live, id)
		}
	}
	b.mu.Unlock()
	for _, id := range pend {
		b.expire(id, "the session ended")
	}
	for _, id := range live {
		_, _ = b.revoke(context.Background(), id, "session ended", false)
	}
}

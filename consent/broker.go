package consent

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

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
	// apply_failed, revoked, revoke_failed, rate_limited, refused.
	Activity string    `json:"activity"`
	Time     time.Time `json:"time"`
	Request  *Request  `json:"request,omitempty"`
	Grant    *Grant    `json:"grant,omitempty"`
	// By is the approver (decisions, revocations).
	By string `json:"by,omitempty"`
	// Dropped counts the events this watcher missed before this one (it
	// read too slowly).
	Dropped int `json:"dropped,omitempty"`
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

// Errors of Decide, Revoke and the lookups.
var (
	// ErrNoApprover is a request's deny when no approver is connected.
	ErrNoApprover = errors.New("no approver is connected: a request needs a terminal prompt (corral run -t), `corral approvals watch` or the web page open")
	ErrNotFound   = errors.New("no such request or grant")
	// ErrDigest: the request an approver saw is not the one pending.
	ErrDigest = errors.New("the request changed since it was shown (its digest differs): look at it again")
	ErrClosed = errors.New("the session has ended")
	// ErrChanged: the folder at the request's path is another directory
	// now (its device and inode differ): Decide refuses the request.
	ErrChanged = errors.New("the folder changed since it was asked for")
)

// DecidedError is a decision that lost: the request was decided first.
type DecidedError struct{ First Request }

func (e *DecidedError) Error() string {
	by := ""
	if e.First.Decision != nil {
		by = " by " + e.First.Decision.By
	}
	return fmt.Sprintf("request %s was already decided%s: %s", e.First.ID, by, e.First.State)
}

// AskError is a malformed request (HTTP 400).
type AskError struct{ Msg, Hint string }

func (e *AskError) Error() string { return e.Msg }

// Bounds.
const (
	MaxReason   = 1024 // bytes of a request's reason
	MaxWait     = 300 * time.Second
	DefaultWait = 60 * time.Second
	maxDecided  = 200 // decided requests kept for listing
	watchBuffer = 64
)

type entry struct {
	r        Request
	dev, ino uint64
	ceil     policy.FolderCeiling
	key      string // the coalescing and session key of what was asked (decisionKey)
	// granted is the session key of what was granted (decisionKey with
	// the access in force: read-only when an approver narrowed it).
	granted  string
	leader   int  // the requester's session leader (host pid): a once grant ends with it
	applying bool // approved, being put in force: not answered to waiters yet
	timer    *time.Timer
}

// Broker is one sandbox's consent broker. Its methods are safe for
// concurrent use.
type Broker struct {
	cfg    Config
	now    func() time.Time
	hidden []hiddenID // the ceiling's hidden paths as they were at New

	mu       sync.Mutex
	reqs     map[string]*entry
	order    []string          // request ids, oldest first
	pending  map[string]string // coalescing key -> pending request id
	session  map[string]bool   // key -> approved (true) / denied (false) for the session
	grants   map[string]*Grant
	gorder   []string
	grantReq map[string]*entry // grant id -> its request
	labels   map[string]bool   // labels used (never reused)
	watchers map[int]*watcher
	nextW    int
	tokens   float64
	refilled time.Time
	changed  chan struct{} // closed and replaced on every change
	closed   bool
	stop     chan struct{}
}

type watcher struct {
	ch      chan Event
	dropped int
}

// New is a broker for cfg.
func New(cfg Config) *Broker {
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	b := &Broker{cfg: cfg, now: now, reqs: map[string]*entry{}, pending: map[string]string{}, session: map[string]bool{},
		grants: map[string]*Grant{}, grantReq: map[string]*entry{}, labels: map[string]bool{}, watchers: map[int]*watcher{},
		changed: make(chan struct{}), stop: make(chan struct{})}
	if c := cfg.Policy.Consent; c != nil {
		b.tokens, b.refilled = float64(c.Burst), now()
	}
	b.hidden = hiddenPaths(cfg.Policy)
	return b
}

// Sandbox is the broker's sandbox id.
func (b *Broker) Sandbox() string { return b.cfg.Sandbox }

func randID(prefix string) string {
	var x [8]byte
	_, _ = rand.Read(x[:])
	return prefix + hex.EncodeToString(x[:])
}

// decisionKey is what identical requests share (coalescing, session
// decisions): kind, canonical target, access.
func decisionKey(k Kind, target string, access policy.Access) string {
	return string(k) + "|" + target + "|" + string(access)
}

// cleanReason keeps at most MaxReason bytes of s with control characters
// dropped (it is shown to a person, in a terminal too).
func cleanReason(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Bidi_Control, r) {
			return -1
		}
		return r
	}, s)
	if len(s) > MaxReason { // a rune cut in half is dropped
		s = strings.ToValidUTF8(s[:MaxReason], "")
	}
	return s
}

// canonical is a request's target as the ceiling sees it, with the
// folder's identity: a folder's absolute path with its links resolved (a
// directory that exists), a host's "host:port" lower-cased.
func canonical(a Ask) (target string, host string, port int, dev, ino uint64, err error) {
	switch a.Kind {
	case KindFolder:
		p := a.Target
		if !filepath.IsAbs(p) || strings.ContainsRune(p, 0) {
			return "", "", 0, 0, 0, &AskError{"folder target " + strconv.Quote(p) + " is not an absolute path", "send the host path of a directory, e.g. /home/me/src/docs"}
		}
		c, err := filepath.EvalSymlinks(filepath.Clean(p))
		if err != nil {
			return "", "", 0, 0, 0, &AskError{"folder " + strconv.Quote(p) + ": " + errText(err), "ask for a directory that exists"}
		}
		fi, err := os.Stat(c)
		if err != nil || !fi.IsDir() {
			return "", "", 0, 0, 0, &AskError{"folder " + strconv.Quote(p) + " is not a directory", "ask for a directory"}
		}
		dev, ino = fileID(fi)
		return c, "", 0, dev, ino, nil
	case KindHost:
		h, ps, err := net.SplitHostPort(a.Target)
		if err != nil {
			h, ps = a.Target, "443"
		}
		n, err := strconv.Atoi(ps)
		if err != nil || n < 1 || n > 65535 {
			return "", "", 0, 0, 0, &AskError{"host target " + strconv.Quote(a.Target) + ": bad port", `send "host:port", e.g. "api.example.com:443"`}
		}
		h = strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")
		if h == "" || strings.ContainsAny(h, "/ \t*") {
			return "", "", 0, 0, 0, &AskError{"host target " + strconv.Quote(a.Target) + ": bad host", `send "host:port", e.g. "api.example.com:443"`}
		}
		return net.JoinHostPort(h, strconv.Itoa(n)), h, n, 0, 0, nil
	}
	return "", "", 0, 0, 0, &AskError{"kind " + strconv.Quote(string(a.Kind)) + ": want folder or host", `{"kind":"folder","target":"/path","access":"ro"}`}
}

func errText(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// digest binds a decision to exactly one request (Digest with the
// broker's policy hash).
func (b *Broker) digest(k Kind, target string, dev, ino uint64, access policy.Access) string {
	return Digest(k, target, dev, ino, access, b.cfg.Policy.Hash)
}

// Digest is what binds a decision to one request: "sha256:" and the hex
// SHA-256 of the length-prefixed fields ("LEN:FIELD\n" each, so no two
// field lists encode alike) "corral-consent-v1", kind, canonical target,
// device and inode in decimal (0 for a host), access and the policy hash.
func Digest(k Kind, target string, dev, ino uint64, access policy.Access, policyHash string) string {
	h := sha256.New()
	for _, f := range []string{"corral-consent-v1", string(k), target, strconv.FormatUint(dev, 10), strconv.FormatUint(ino, 10), string(access), policyHash} {
		fmt.Fprintf(h, "%d:%s\n", len(f), f)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// Ask takes one request from the workload: refused (StateRefused, with
// the ceiling entry) or rate limited without a prompt, answered at once
// from a grant in force, a session or standing decision, coalesced with
// an identical pending one, denied when no approver is connected, or made
// pending for the approvers. It never blocks on a person. The error is an
// *AskError for a malformed request, ErrClosed after Close.
func (b *Broker) Ask(ctx context.Context, a Ask, who Requester) (Request, error) {
	if a.Access == "" {
		a.Access = policy.AccessReadOnly
	}
	if a.Kind == KindHost {
		a.Access = ""
	} else if a.Access != policy.AccessReadOnly && a.Access != policy.AccessReadWrite {
		return Request{}, &AskError{"access " + strconv.Quote(string(a.Access)) + ": want ro or rw", ""}
	}
	target, host, port, dev, ino, err := canonical(a)
	if err != nil {
		return Request{}, err
	}
	now := b.now()
	e := &entry{dev: dev, ino: ino, key: decisionKey(a.Kind, target, a.Access)}
	if who.PID > 0 {
		e.leader = sessionLeader(who.PID)
	}
	e.r = Request{ID: randID("req-"), Sandbox: b.cfg.Sandbox, Kind: a.Kind, Target: target, Access: a.Access, Reason: cleanReason(a.Reason),
		Asked: 1, Requester: who, Created: now, Digest: b.digest(a.Kind, target, dev, ino, a.Access)}
	// The ceiling first: outside it, nobody is asked.
	var refusal *policy.ConsentRefusal
	if a.Kind == KindFolder {
		e.ceil, refusal = b.cfg.Policy.AskFolder(target, a.Access)
		e.r.Ceiling = e.ceil.Field
	} else {
		e.r.Ceiling, refusal = b.cfg.Policy.AskHost(host, port)
	}
	if refusal == nil {
		if m := b.cfg.Applier.Mode(a.Kind); m != provider.ConsentLive {
			refusal = &policy.ConsentRefusal{Field: "provider", Reason: fmt.Sprintf("this sandbox cannot take a %s grant while it runs (%s)", a.Kind, m)}
		}
	}

	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return Request{}, ErrClosed
	}
	if refusal != nil {
		e.r.State, e.r.Ceiling, e.r.Detail = StateRefused, refusal.Field, refusal.Reason+" ("+refusal.Field+"); nobody was asked"
		return b.settle(e, "refused"), nil
	}
	// Already in force: the existing grant.
	if g := b.covering(a.Kind, target, a.Access); g != nil {
		e.r.State, e.r.Effective, e.r.Path, e.r.Grant, e.r.Detail = StateApproved, g.Effective, g.Path, g.ID, "already granted ("+g.ID+")"
		b.keep(e)
		b.mu.Unlock()
		return e.r, nil
	}
	if ok, decided := b.session[e.key]; decided {
		if !ok {
			e.r.State, e.r.Detail = StateDenied, "denied for this session; nobody was asked"
			return b.settle(e, "denied"), nil
		}
		return b.autoApprove(ctx, e, ScopeSession, "session decision")
	}
	if b.cfg.Standing.Covers(a.Kind, target, a.Access) {
		return b.autoApprove(ctx, e, ScopeAlways, "standing grant in "+b.cfg.Standing.Path)
	}
	if id, ok := b.pending[e.key]; ok { // coalesced: the same id
		p := b.reqs[id]
		p.r.Asked++
		if len(e.r.Reason) > len(p.r.Reason) {
			p.r.Reason = e.r.Reason
		}
		r := p.r
		b.broadcast()
		b.mu.Unlock()
		return r, nil
	}
	c := b.cfg.Policy.Consent
	if n := len(b.pending); n >= c.MaxPending {
		e.r.State, e.r.Detail = StateRateLimited, fmt.Sprintf("%d requests are pending already (consent.max_pending %d); nobody was asked", n, c.MaxPending)
		return b.settle(e, "rate_limited"), nil
	}
	b.refill(now)
	if b.tokens < 1 {
		e.r.State, e.r.Detail = StateRateLimited, fmt.Sprintf("more than %d requests in %s (consent.rate); nobody was asked", c.Burst, c.Per)
		return b.settle(e, "rate_limited"), nil
	}
	b.tokens--
	if len(b.watchers) == 0 {
		e.r.State, e.r.Detail = StateDenied, ErrNoApprover.Error()
		return b.settle(e, "denied"), nil
	}
	e.r.State, e.r.Expires = StatePending, now.Add(c.Timeout)
	b.keep(e)
	b.pending[e.key] = e.r.ID
	id := e.r.ID
	e.timer = time.AfterFunc(c.Timeout, func() { b.expire(id) })
	r := e.r
	b.emit(Event{Activity: "requested", Time: now, Request: &r})
	b.emit(Event{Activity: "prompted", Time: now, Request: &r})
	b.broadcast()
	b.mu.Unlock()
	return r, nil
}

// refill tops the token bucket up: Burst tokens per Per.
func (b *Broker) refill(now time.Time) {
	c := b.cfg.Policy.Consent
	if c.Per > 0 {
		b.tokens = min(float64(c.Burst), b.tokens+float64(c.Burst)*now.Sub(b.refilled).Seconds()/c.Per.Seconds())
	}
	b.refilled = now
}

// settle records e, decided already, emits activity and unlocks.
func (b *Broker) settle(e *entry, activity string) Request {
	b.keep(e)
	r := e.r
	b.emit(Event{Activity: activity, Time: b.now(), Request: &r})
	b.broadcast()
	b.mu.Unlock()
	return r
}

// keep adds e to the requests, dropping the oldest decided ones beyond
// maxDecided (never one with a grant, nor one being applied: its waiters
// and its grant need it).
func (b *Broker) keep(e *entry) {
	b.reqs[e.r.ID] = e
	b.order = append(b.order, e.r.ID)
	decided := 0
	for _, id := range b.order {
		if b.reqs[id].r.State != StatePending {
			decided++
		}
	}
	for i := 0; decided > maxDecided && i < len(b.order); {
		id := b.order[i]
		if x := b.reqs[id]; x.r.State != StatePending && x.r.Grant == "" && !x.applying {
			delete(b.reqs, id)
			b.order = slices.Delete(b.order, i, i+1)
			decided--
			continue
		}
		i++
	}
}

// covering is the grant in force that covers kind k's target with access.
func (b *Broker) covering(k Kind, target string, access policy.Access) *Grant {
	for _, id := range b.gorder {
		g := b.grants[id]
		if g.Desired && g.Kind == k && g.Target == target && (access != policy.AccessReadWrite || g.Access == policy.AccessReadWrite) {
			return g
		}
	}
	return nil
}

// applyingDetail is an approved request's Detail until its read-back:
// what a waiter whose timeout ends first is told.
const applyingDetail = "approved, being put in force: not effective until the sandbox shows it"

// autoApprove approves e without a prompt (a decision already made);
// called locked, it unlocks.
func (b *Broker) autoApprove(ctx context.Context, e *entry, scope Scope, why string) (Request, error) {
	e.r.State, e.r.Detail = StateApproved, applyingDetail
	e.r.Decision = &Decision{Approve: true, Scope: scope, Digest: e.r.Digest, By: why, At: b.now()}
	e.applying = true
	b.keep(e)
	r := e.r
	b.emit(Event{Activity: "requested", Time: r.Created, Request: &r})
	b.mu.Unlock()
	return b.apply(ctx, e, *e.r.Decision)
}

// expire ends pending request id: a deny.
func (b *Broker) expire(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.reqs[id]
	if e == nil || e.r.State != StatePending {
		return
	}
	delete(b.pending, e.key)
	e.r.State, e.r.Detail = StateExpired, "nobody answered in time (consent.timeout): denied"
	r := e.r
	b.emit(Event{Activity: "expired", Time: b.now(), Request: &r})
	b.broadcast()
}

// emit sends e to the log and every watcher (never blocking: a full
// watcher misses it, and is told how many it missed). Called locked.
func (b *Broker) emit(e Event) {
	if b.cfg.Log != nil {
		b.cfg.Log(e)
	}
	for _, w := range b.watchers {
		e := e
		e.Dropped = w.dropped
		select {
		case w.ch <- e:
			w.dropped = 0
		default:
			w.dropped++
		}
	}
}

// broadcast wakes the waiters (called locked).
func (b *Broker) broadcast() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// Wait waits up to timeout (at most MaxWait; 0: DefaultWait) for request
// id to leave pending, and, once approved, for its read-back.
func (b *Broker) Wait(ctx context.Context, id string, timeout time.Duration) (Request, error) {
	if timeout <= 0 {
		timeout = DefaultWait
	}
	t := time.NewTimer(min(timeout, MaxWait))
	defer t.Stop()
	for {
		b.mu.Lock()
		e := b.reqs[id]
		if e == nil {
			b.mu.Unlock()
			return Request{}, ErrNotFound
		}
		r, ch := e.r, b.changed
		done := (r.State != StatePending && !e.applying) || b.closed
		b.mu.Unlock()
		if done {
			return r, nil
		}
		select {
		case <-ch:
		case <-t.C:
			return r, nil
		case <-ctx.Done():
			return r, ctx.Err()
		}
	}
}

// Get is request id as it is now.
func (b *Broker) Get(id string) (Request, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.reqs[id]
	if e == nil {
		return Request{}, false
	}
	return e.r, true
}

// Requests are the broker's requests, newest first (pending ones always,
// decided ones up to a bound).
func (b *Broker) Requests() []Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Request, 0, len(b.order))
	for i := len(b.order) - 1; i >= 0; i-- {
		out = append(out, b.reqs[b.order[i]].r)
	}
	return out
}

// Decide answers pending request id: the first answer wins (a later one
// gets a *DecidedError naming the first), a digest other than the
// request's is refused (ErrDigest), an approval is applied and read back
// before Decide returns (StateApproved with Effective, or StateFailed).
func (b *Broker) Decide(ctx context.Context, id string, d Decision) (Request, error) {
	if d.At.IsZero() {
		d.At = b.now()
	}
	b.mu.Lock()
	e := b.reqs[id]
	switch {
	case e == nil:
		b.mu.Unlock()
		return Request{}, ErrNotFound
	case e.r.State != StatePending:
		first := e.r
		b.mu.Unlock()
		return first, &DecidedError{First: first}
	case d.Digest != e.r.Digest:
		b.mu.Unlock()
		return e.r, ErrDigest
	}
	if d.Approve {
		switch d.Scope {
		case "":
			d.Scope = ScopeOnce
		case ScopeOnce, ScopeSession, ScopeAlways:
		case ScopeTTL:
			if d.Expires.IsZero() && d.TTL > 0 {
				d.Expires = d.At.Add(time.Duration(d.TTL))
			}
			if !d.Expires.After(d.At) {
				b.mu.Unlock()
				return e.r, &AskError{"scope ttl needs a duration (ttl) or an expiry in the future", "e.g. {\"scope\":\"ttl\",\"ttl\":\"2h\"}"}
			}
		default:
			b.mu.Unlock()
			return e.r, &AskError{"scope " + strconv.Quote(string(d.Scope)) + ": want once, session, ttl or always", ""}
		}
		if d.Scope == ScopeAlways && b.cfg.Standing == nil {
			b.mu.Unlock()
			return e.r, &AskError{"scope always: the policy keeps no standing grants file (consent.persist)", "approve for the session instead"}
		}
	}
	// Decided now: whatever comes next loses.
	e.timer.Stop()
	delete(b.pending, e.key)
	dc := d
	e.r.Decision = &dc
	if d.Approve && e.r.Kind == KindFolder {
		if why := b.swapped(e); why != "" {
			e.r.State, e.r.Ceiling = StateRefused, policy.RefusedRequest
			e.r.Detail = e.r.Target + " changed since it was asked for (" + why + "): nothing was granted; ask again"
			r := e.r
			b.emit(Event{Activity: ActRefused, Time: d.At, Request: &r, By: d.By})
			b.broadcast()
			b.mu.Unlock()
			return r, fmt.Errorf("%w: %s", ErrChanged, r.Detail)
		}
	}
	if !d.Approve {
		e.r.State, e.r.Detail = StateDenied, "denied by "+d.By
		if d.Reason != "" {
			e.r.Detail += ": " + cleanReason(d.Reason)
		}
		if d.ForSession {
			b.session[e.key] = false
		}
		r := e.r
		b.emit(Event{Activity: "denied", Time: d.At, Request: &r, By: d.By})
		b.broadcast()
		b.mu.Unlock()
		return r, nil
	}
	e.r.State, e.r.Detail, e.applying = StateApproved, applyingDetail, true
	r := e.r
	b.emit(Event{Activity: "approved", Time: d.At, Request: &r, By: d.By})
	b.broadcast()
	b.mu.Unlock()
	return b.apply(ctx, e, d)
}

// swapped says how folder request e's target is not the directory that
// was asked for ("" when it is): gone, or another device and inode (a
// directory renamed away and another put at its path).
func (b *Broker) swapped(e *entry) string {
	fi, err := os.Stat(e.r.Target)
	if err != nil {
		return errText(err)
	}
	if dev, ino := fileID(fi); dev != e.dev || ino != e.ino {
		return "another directory is there now"
	}
	return ""
}

// label is a fresh label for a grant of path: its base name made safe,
// then "-N" when it was used before (labels are never reused). Locked.
func (b *Broker) label(path string) string {
	base := strings.Map(func(r rune) rune {
		if r < 0x80 && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.' || r == '_' || r == '-') {
			return r
		}
		return '_'
	}, filepath.Base(path))
	base = strings.TrimLeft(base, ".")
	if len(base) > 40 {
		base = base[:40]
	}
	if base == "" {
		base = "folder"
	}
	l := base
	for n := 2; b.labels[l]; n++ {
		l = base + "-" + strconv.Itoa(n)
	}
	b.labels[l] = true
	return l
}

// apply puts approved request e in force and records the grant. The
// decision is made: it is applied whatever becomes of the caller (ctx's
// values are kept, its cancellation is not), so that an approver or a
// workload that hangs up does not leave it half done.
func (b *Broker) apply(ctx context.Context, e *entry, d Decision) (Request, error) {
	ctx = context.WithoutCancel(ctx)
	r := e.r
	g := &Grant{ID: randID("grant-"), Sandbox: b.cfg.Sandbox, Request: r.ID, Kind: r.Kind, Target: r.Target, Access: r.Access,
		Scope: d.Scope, Expires: d.Expires, Desired: true, Mode: b.cfg.Applier.Mode(r.Kind)}
	var err error
	switch r.Kind {
	case KindFolder:
		var fi os.FileInfo
		if fi, err = os.Stat(r.Target); err == nil {
			if dev, ino := fileID(fi); dev != e.dev || ino != e.ino {
				err = errors.New("the folder at " + r.Target + " is not the one requested (it was replaced since)")
			}
		}
		if err == nil {
			err = checkHidden(b.hidden)
		}
		if err == nil {
			ro := r.Access != policy.AccessReadWrite || d.ReadOnly
			if ro {
				g.Access = policy.AccessReadOnly
			}
			b.mu.Lock()
			label := b.label(r.Target)
			b.mu.Unlock()
			fg := provider.FolderGrant{Label: label, Source: r.Target, Dev: e.dev, Ino: e.ino, ReadOnly: ro, Masks: e.ceil.Masks}
			if !ro {
				fg.ReadOnlyWithin = e.ceil.ReadOnly
			}
			var st provider.GrantStatus
			st, err = b.cfg.Applier.ApplyFolder(ctx, fg)
			if err == nil {
				g.Folder, g.Path, g.Effective = &st, st.Path, st.State == provider.GrantEffective
				if !g.Effective {
					// No grant is recorded: take down what was made, or
					// nobody could revoke it.
					err = fmt.Errorf("mounted, but the sandbox shows it %s", st.State)
					if _, rerr := b.cfg.Applier.RevokeFolder(ctx, label, false); rerr != nil {
						err = fmt.Errorf("%w; taking it down again failed: %v", err, rerr)
					} else {
						err = fmt.Errorf("%w; taken down again", err)
					}
				}
			}
		}
	case KindHost:
		host, ps, _ := net.SplitHostPort(r.Target)
		port, _ := strconv.Atoi(ps)
		g.Revision, err = b.cfg.Applier.AllowHost(ctx, host, port)
		g.Effective = err == nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e.applying = false
	if err != nil {
		e.r.State, e.r.Detail = StateFailed, "approved, but not put in force: "+err.Error()
		r := e.r
		b.emit(Event{Activity: "apply_failed", Time: b.now(), Request: &r, By: d.By})
		b.broadcast()
		return r, nil
	}
	if d.Scope == ScopeAlways {
		diff, werr := b.cfg.Standing.Add(r.Kind, r.Target, g.Access, d.By, d.At)
		if werr != nil {
			g.Detail = "in force for this session; not written to " + b.cfg.Standing.Path + ": " + werr.Error()
		}
		e.r.Diff = diff
	}
	// The session remembers what was granted: a read-write request
	// narrowed to read-only answers later read-only requests, and
	// prompts for read-write again.
	e.granted = decisionKey(r.Kind, r.Target, g.Access)
	if d.Scope == ScopeSession || d.Scope == ScopeAlways {
		b.session[e.granted] = true
	}
	b.grants[g.ID] = g
	b.gorder = append(b.gorder, g.ID)
	b.grantReq[g.ID] = e
	e.r.Effective, e.r.Path, e.r.Grant, e.r.Detail = true, g.Path, g.ID, ""
	rr, gg := e.r, *g
	b.emit(Event{Activity: "applied", Time: b.now(), Request: &rr, Grant: &gg, By: d.By})
	b.broadcast()
	switch {
	case d.Scope == ScopeTTL:
		go b.revokeAt(g.ID, d.Expires)
	case d.Scope == ScopeOnce && e.leader > 0:
		go b.revokeWhenGone(g.ID, e.leader)
	}
	return rr, nil
}

// revokeAt revokes a ttl grant at its expiry, unless the broker is
// closed first (the session's end takes the sandbox and its grants).
func (b *Broker) revokeAt(id string, at time.Time) {
	t := time.NewTimer(at.Sub(b.now()))
	defer t.Stop()
	select {
	case <-b.stop:
	case <-t.C:
		_, _ = b.Revoke(context.Background(), id, "expiry ("+at.Format(time.RFC3339)+")", false)
	}
}

// revokeWhenGone revokes a once grant when the command that asked for it
// has ended: the leader of the requester's session (the workload of a
// corral run, one exec of a gateway sandbox), checked every second.
func (b *Broker) revokeWhenGone(id string, pid int) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			if !alive(pid) {
				_, _ = b.Revoke(context.Background(), id, fmt.Sprintf("scope once: pid %d exited", pid), false)
				return
			}
		}
	}
}

// Grants are the grants made, desired against effective: the folders'
// state read back from the sandbox now.
func (b *Broker) Grants(ctx context.Context) []Grant {
	b.mu.Lock()
	out := make([]Grant, 0, len(b.gorder))
	folders := false
	for _, id := range b.gorder {
		out = append(out, *b.grants[id])
		folders = folders || b.grants[id].Kind == KindFolder
	}
	b.mu.Unlock()
	if !folders {
		return out
	}
	sts, err := b.cfg.Applier.FolderGrants(ctx)
	byLabel := map[string]provider.GrantStatus{}
	for _, st := range sts {
		byLabel[st.Label] = st
	}
	for i := range out {
		g := &out[i]
		if g.Kind != KindFolder || g.Folder == nil {
			continue
		}
		if err != nil {
			g.Detail = "cannot read back: " + err.Error()
			continue
		}
		st, ok := byLabel[g.Folder.Label]
		if !ok {
			// Not listed: missing when it should be in force, as it was
			// left when revoked.
			st = *g.Folder
			if g.Desired {
				st.State = provider.GrantMissing
			}
		}
		for _, h := range g.Folder.Holders { // those reported at revoke stay
			if !slices.ContainsFunc(st.Holders, func(x provider.Holder) bool { return x.PID == h.PID && x.FD == h.FD && x.Path == h.Path }) {
				st.Holders = append(st.Holders, h)
			}
		}
		g.Folder = &st
		g.Effective = st.State == provider.GrantEffective
	}
	return out
}

// Revoke revokes grant id (by: who asked); with kill, the processes still
// holding a revoked folder are killed. The grant comes back with what the
// read-back showed.
func (b *Broker) Revoke(ctx context.Context, id, by string, kill bool) (Grant, error) {
	b.mu.Lock()
	g := b.grants[id]
	if g == nil {
		b.mu.Unlock()
		return Grant{}, ErrNotFound
	}
	if !g.Desired {
		r := *g
		b.mu.Unlock()
		return r, nil
	}
	g.Desired = false
	e := b.grantReq[id]
	session := b.session[e.granted]
	delete(b.session, e.granted) // the next identical request asks again
	cur := *g
	b.mu.Unlock()
	var err error
	switch cur.Kind {
	case KindFolder:
		var st provider.GrantStatus
		st, err = b.cfg.Applier.RevokeFolder(ctx, cur.Folder.Label, kill)
		if err == nil {
			cur.Folder, cur.Effective = &st, st.State == provider.GrantEffective
			cur.Detail = string(st.State)
			for _, h := range st.Holders {
				cur.Detail += fmt.Sprintf(", held: pid %d %s (%s)", h.PID, holderFD(h.FD), h.Path)
				if h.Killed {
					cur.Detail += " killed"
				}
			}
		}
	case KindHost:
		host, ps, _ := net.SplitHostPort(cur.Target)
		port, _ := strconv.Atoi(ps)
		var rev int
		if rev, err = b.cfg.Applier.DisallowHost(ctx, host, port); err == nil {
			cur.Revision, cur.Effective, cur.Detail = rev, false, "revoked"
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		// Still in force as far as anyone knows: desired again (a later
		// revoke retries), the request approved still, the session's
		// decision back.
		g.Desired, g.Detail = true, "revoke failed: "+err.Error()
		if session {
			b.session[e.granted] = true
		}
		gg, r := *g, e.r
		b.emit(Event{Activity: ActRevokeFailed, Time: b.now(), Request: &r, Grant: &gg, By: by})
		b.broadcast()
		return gg, err
	}
	*g = cur
	e.r.State, e.r.Effective = StateRevoked, g.Effective
	gg, r := *g, e.r
	b.emit(Event{Activity: "revoked", Time: b.now(), Request: &r, Grant: &gg, By: by})
	b.broadcast()
	return gg, err
}

// ActRevokeFailed is the Event of a revoke that did not take: the grant
// stays desired and in force (its Detail says why).
const ActRevokeFailed = "revoke_failed"

func holderFD(fd int) string {
	switch fd {
	case -1:
		return "cwd"
	case -2:
		return "root"
	}
	return "fd " + strconv.Itoa(fd)
}

// Watch registers an approver: every Event from now on goes to the
// channel until cancel; while one is registered, requests are pending
// instead of denied (ErrNoApprover).
func (b *Broker) Watch() (events <-chan Event, cancel func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := &watcher{ch: make(chan Event, watchBuffer)}
	id := b.nextW
	b.nextW++
	b.watchers[id] = w
	var once sync.Once
	return w.ch, func() {
		once.Do(func() {
			b.mu.Lock()
			delete(b.watchers, id)
			b.mu.Unlock()
		})
	}
}

// Approvers is how many approvers are connected.
func (b *Broker) Approvers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.watchers)
}

// Close ends the broker with its session: pending requests expire,
// waiters are answered, timers stop.
func (b *Broker) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	close(b.stop)
	for _, id := range b.order {
		if e := b.reqs[id]; e.r.State == StatePending {
			e.timer.Stop()
			e.r.State, e.r.Detail = StateExpired, "the session ended"
			r := e.r
			b.emit(Event{Activity: "expired", Time: b.now(), Request: &r})
		}
	}
	clear(b.pending)
	b.broadcast()
}

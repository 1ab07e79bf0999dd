// Package session owns one sandbox session, from a mapped plan to its end:
// provision and start (fail closed), the sandbox's only way out (the
// egress proxy, with rules that can be swapped live), the audit record of
// every lifecycle and egress event, execs with their signals, the scan for
// what a workload planted for later, and teardown. `corral run`, the
// service supervisor and the gateway all reach a sandbox through it, so
// each gets the same layers, egress and audit.
package session

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/audit"
	"github.com/corral-sandbox/corral/egress"
	"github.com/corral-sandbox/corral/internal/planted"
	"github.com/corral-sandbox/corral/internal/startup"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// Config is what one session needs.
type Config struct {
	Provider provider.Provider
	// Plan is Provider's mapping of the policy; one with error losses is
	// refused before anything is created.
	Plan    *provider.Plan
	Options provider.ProvisionOptions
	// Log records the session's events; nil records none.
	Log *audit.Log
	// Version is Corral's, for the events' metadata.
	Version string
	// Command is what the session is for (corral run's command, a
	// service's workload), recorded when the session cannot start.
	Command []string
	// Environ is the environment credentials' env sources are read from;
	// nil means os.Environ().
	Environ []string
	// Secrets are the values of credentials whose source is stored (the
	// gateway's), by name.
	Secrets map[string]string
	// CredentialStates are credentials' revocations and expiries to put
	// in force before the proxy serves (the gateway's, stored), by name:
	// a revoked one's source is not read.
	CredentialStates map[string]CredentialState
	// Step, when set, is called after each step of Open: "provisioned",
	// "started" (the gateway's crash tests stop there).
	Step func(step string)
	// Warn, when set, receives what the caller should show its user
	// (standing consent grants ignored, ...).
	Warn func(msg string)
}

func (c *Config) step(name string) {
	if c.Step != nil {
		c.Step(name)
	}
}

// Session is one live sandbox.
type Session struct {
	cfg     Config
	sb      provider.Sandbox
	info    audit.RunInfo
	pol     *policy.Resolved
	sw      *egressSwitch  // network proxy only
	trust   *trust         // a policy that inspects egress only
	creds   *credentials   // a policy with credentials only
	consent *consentState  // a policy with a consent section only
	emu     sync.Mutex     // serialises changes of the egress rules
	rules   policy.Network // the egress rules in force (with consent host grants)
	stats   *egressStats

	mu      sync.Mutex
	scanned time.Time // planted: what changed after this is the workload's
	closed  bool
}

// Open provisions and starts a sandbox for cfg.Plan and serves its egress.
// Nothing is left of it on failure: a plan with error losses gives
// CodePolicyRejected, rules the proxy cannot take CodePolicyRejected
// (before anything is made), a proxy that cannot start CodeStartFailed.
func Open(ctx context.Context, cfg Config) (*Session, error) {
	s, err := open(ctx, cfg)
	if err != nil {
		// A start that failed is part of the record: which policy, which
		// provider, why.
		run := audit.RunInfo{SandboxID: cfg.Options.ID, PolicyHash: cfg.Plan.Policy.Hash, Provider: cfg.Provider.Name(), Version: cfg.Version}
		cfg.Log.Emit(audit.NotLaunched(run, audit.Proc{CmdLine: cfg.Command, UID: -1}, err.Error()))
	}
	return s, err
}

func open(ctx context.Context, cfg Config) (*Session, error) {
	plan := cfg.Plan
	if plan.Loss.HasErrors() {
		return nil, provider.Rejected(plan.Loss)
	}
	s := newSession(cfg)
	if err := s.checkEgress(ctx); err != nil {
		return nil, err
	}
	opts := cfg.Options
	if s.trust != nil {
		opts.Trust, opts.TrustStore = s.trust.bundle, s.trust.store
	}
	s.scanned = planted.Now()
	startup.Add("supervisor", "session: egress checked")
	sb, err := cfg.Provider.Provision(ctx, plan, opts)
	startup.Add("supervisor", "session: provisioned")
	cfg.step("provisioned")
	if err != nil {
		return nil, err
	}
	s.sb = sb
	if err := sb.Start(ctx); err != nil {
		s.teardown()
		return nil, err
	}
	startup.Add("supervisor", "session: started")
	cfg.step("started")
	if err := s.attach(); err != nil {
		s.teardown()
		return nil, err
	}
	startup.Add("supervisor", "session: egress and consent attached")
	return s, nil
}

// Recover reattaches to a persistent sandbox from its provider state
// (provider.Provider.Recover) and serves its egress again. An error after
// the provider's Recover leaves the sandbox as it is (CodeInternal): it is
// the caller's to decide.
func Recover(ctx context.Context, cfg Config, state []byte) (*Session, error) {
	s := newSession(cfg)
	if err := s.checkEgress(ctx); err != nil {
		return nil, err
	}
	sb, err := cfg.Provider.Recover(ctx, cfg.Plan, state)
	if err != nil {
		return nil, err
	}
	s.sb = sb
	if s.trust != nil {
		// The old CA's key died with the process that held it: the
		// sandbox trusts the new one from now on.
		tu, ok := sb.(provider.TrustUpdater)
		if !ok {
			return nil, provider.Errorf(provider.CodeInternal, "recover %s: its policy inspects egress, and %s cannot give it the new CA's trust bundle (the old CA's key died with the process that held it): delete and recreate the sandbox", sb.ID(), cfg.Provider.Name())
		}
		if err := tu.SetTrust(s.trust.bundle, s.trust.store); err != nil {
			return nil, provider.Wrap(provider.CodeInternal, "recover "+sb.ID()+": trust bundle", err)
		}
	}
	s.scanned = planted.Now() // what an exec of the last gateway planted was reported then, or is lost
	if err := s.attach(); err != nil {
		// Not NotFound: the sandbox is there, and nothing may be
		// destroyed on a guess; it stays as it was.
		return nil, provider.Wrap(provider.CodeInternal, "recover "+sb.ID(), err)
	}
	if b := s.Consent(); b != nil {
		if _, ok := sb.(provider.LiveGrants); ok {
			// The folder grants outlive the process that decided them.
			if _, err := b.Adopt(ctx); err != nil {
				return nil, provider.Wrap(provider.CodeInternal, "recover "+sb.ID()+": consent grants", err)
			}
		}
	}
	return s, nil
}

func newSession(cfg Config) *Session {
	return &Session{cfg: cfg, pol: cfg.Plan.Policy, stats: &egressStats{}}
}

// checkEgress refuses, before anything is made, rules the proxy cannot
// take, and reads the credentials' values.
func (s *Session) checkEgress(ctx context.Context) error {
	if s.pol.Network != policy.NetworkProxy {
		if len(s.pol.Credentials) > 0 { // (validation refuses it: a policy built in code)
			return provider.Errorf(provider.CodePolicyRejected, "credentials need network mode proxy: only the egress proxy can substitute them")
		}
		return nil
	}
	if err := CheckResolver(); err != nil {
		return provider.Wrap(provider.CodeStartFailed, "egress proxy", err)
	}
	if err := CheckRules(s.pol.Egress); err != nil {
		return err
	}
	if err := checkUpstreamCA(s.pol, s.pol.Egress.UpstreamCA); err != nil {
		return err
	}
	t, err := newTrust(s.pol.Egress)
	s.trust = t
	if err != nil {
		return err
	}
	environ := s.cfg.Environ
	if environ == nil {
		environ = os.Environ()
	}
	creds, values, err := loadCredentials(ctx, s.pol, environ, s.cfg.Secrets, s.cfg.CredentialStates)
	if err != nil {
		return err
	}
	s.creds = creds
	s.cfg.Log.Redact(values...)
	return nil
}

// CheckRules refuses (CodePolicyRejected) egress rules the proxy cannot
// take.
func CheckRules(n policy.Network) error {
	if err := Rules(n).Validate(); err != nil {
		return provider.Wrap(provider.CodePolicyRejected, "network", err)
	}
	return nil
}

// attach fills in the run's audit identity and serves the egress listener.
func (s *Session) attach() error {
	sb := s.sb
	s.info = audit.RunInfo{SandboxID: sb.ID(), PolicyHash: s.pol.Hash, Provider: s.cfg.Provider.Name(), Version: s.cfg.Version, Layers: audit.LayersOf(sb.Layers())}
	if err := s.newConsent(); err != nil {
		return err
	}
	if s.pol.Network != policy.NetworkProxy {
		return s.serveConsent()
	}
	l := sb.EgressListener()
	if l == nil { // fail closed: a proxy policy with no proxy would be no network, or worse
		return provider.Errorf(provider.CodeStartFailed, "egress proxy: %s gave no egress listener for network proxy", s.cfg.Provider.Name())
	}
	cred := ""
	if a, ok := sb.(provider.ProxyAuthenticator); ok {
		cred = a.ProxyCredential()
	}
	var roots *x509.CertPool
	if s.trust != nil {
		roots = s.trust.roots
	}
	p, err := egress.New(s.proxyConfig(s.pol.Egress, cred, roots))
	if err != nil {
		return provider.Wrap(provider.CodeStartFailed, "egress proxy", err)
	}
	s.sw = newEgressSwitch(l, p, cred)
	s.rules = s.pol.Egress
	return s.serveConsent()
}

// proxyConfig is the proxy's configuration for rules n; roots verify
// inspected upstreams.
func (s *Session) proxyConfig(n policy.Network, cred string, roots *x509.CertPool) egress.Config {
	c := egress.Config{Policy: Rules(n), Resolve: Resolver(), Credential: cred, Log: s.recordEgress}
	if s.trust != nil {
		c.CA, c.UpstreamRoots = s.trust.ca, roots
	}
	if s.creds != nil {
		c.Credentials, c.Finding = s.creds.list, s.recordFinding
	}
	s.consentProxy(&c)
	return c
}

func (s *Session) recordEgress(d egress.Decision) {
	if d.Local { // the consent API, not egress: its events are audited as consent
		return
	}
	s.stats.record(d)
	s.cfg.Log.Egress(s.info, audit.EgressOf(d))
}

// Sandbox is the session's sandbox, for optional abilities
// (provider.PortDialer, provider.HostView, provider.Persistent).
func (s *Session) Sandbox() provider.Sandbox { return s.sb }

// ID is the sandbox's id.
func (s *Session) ID() string { return s.sb.ID() }

// Layers are the layers in force, verified from outside.
func (s *Session) Layers() []provider.LayerStatus { return s.sb.Layers() }

// SetEgress applies new egress rules (allow, deny, allow_private, hosts)
// to every connection from now on; the connections admitted under the old
// rules are closed, unless the change only adds (egress.Adds). The
// consent host grants stay in force on top. Only a network proxy session
// has rules.
func (s *Session) SetEgress(n policy.Network) error {
	apply, err := s.PrepareEgress(n)
	if err != nil {
		return err
	}
	return apply(true)
}

// PrepareEgress builds the proxy for new egress rules without applying
// them, so that a caller can store them first: apply(true) puts them in
// force (SetEgress), apply(false) discards them. Errors: rules the proxy
// cannot take, or a session without network proxy (CodePolicyRejected);
// a closed session (CodeNotFound, from apply).
func (s *Session) PrepareEgress(n policy.Network) (apply func(bool) error, err error) {
	if s.sw == nil {
		return nil, provider.Errorf(provider.CodePolicyRejected, "egress rules: the session has network %s, not proxy", s.pol.Network)
	}
	var hosts []policy.Endpoint // the consent host grants stay in force on top
	if s.consent != nil {
		s.consent.mu.Lock()
		hosts = s.consent.hosts
		s.consent.mu.Unlock()
	}
	full := withHosts(n, hosts)
	p, err := s.buildProxy(full)
	if err != nil {
		return nil, err
	}
	return func(ok bool) error {
		if !ok {
			p.Close()
			return nil
		}
		if cs := s.consent; cs != nil {
			cs.mu.Lock()
			defer cs.mu.Unlock()
			if !slices.EqualFunc(hosts, cs.hosts, endpointEqual) { // a grant came or went since
				p.Close()
				full = withHosts(n, cs.hosts)
				var err error
				if p, err = s.buildProxy(full); err != nil {
					return err
				}
			}
			cs.base = n
			rev, err := s.install(p, full)
			cs.rev = rev
			return err
		}
		_, err := s.install(p, full)
		return err
	}, nil
}

// applyEgress puts rules n in force (consent host grants): built, then
// installed as install says.
func (s *Session) applyEgress(n policy.Network) (revision uint64, err error) {
	p, err := s.buildProxy(n)
	if err != nil {
		return 0, err
	}
	return s.install(p, n)
}

// install makes p, built for rules n, the proxy of every new connection.
// When n only adds to the rules in force, the connections open now stay
// open; otherwise they are closed with the proxy that admitted them. It
// returns the rule revision now in force.
func (s *Session) install(p *egress.Proxy, n policy.Network) (uint64, error) {
	s.emu.Lock()
	defer s.emu.Unlock()
	var err error
	if egress.Adds(Rules(s.rules), Rules(n)) && s.rules.UpstreamCA == n.UpstreamCA {
		_, err = s.sw.extend(p)
	} else {
		err = s.sw.swap(p)
	}
	if err != nil {
		return 0, provider.Wrap(provider.CodeNotFound, "egress rules", err)
	}
	s.rules = n
	return s.sw.revision(), nil
}

// buildProxy is a proxy for rules n with the session's CA, credentials
// and consent hooks. Errors: rules the proxy cannot take
// (CodePolicyRejected).
func (s *Session) buildProxy(n policy.Network) (*egress.Proxy, error) {
	var roots *x509.CertPool
	if s.trust != nil && len(egress.InspectedHosts(Rules(n))) > 0 {
		// (egress.New refuses inspected hosts the sandbox's CA does
		// not cover, or a sandbox without one.)
		if err := checkUpstreamCA(s.pol, n.UpstreamCA); err != nil {
			return nil, err
		}
		var err error
		if roots, err = upstreamRoots(n.UpstreamCA); err != nil {
			return nil, provider.Wrap(provider.CodePolicyRejected, "network.upstream_ca", err)
		}
	}
	p, err := egress.New(s.proxyConfig(n, s.sw.cred, roots))
	if err != nil {
		return nil, provider.Wrap(provider.CodePolicyRejected, "egress rules", err)
	}
	return p, nil
}

func endpointEqual(a, b policy.Endpoint) bool {
	return a.Host == b.Host && slices.Equal(a.Ports, b.Ports)
}

// Exec is one process of a session, as Exec records it.
type Exec struct {
	provider.ExecSpec
	// UID is the workload's uid for the record (-1: the plan's, when
	// it knows it).
	UID int
	// Killed, when set, says why the caller ended the process (a signal
	// it received, a stop); it is asked once the process has ended.
	Killed func() string
}

// Exec runs e in the sandbox and waits for it, recording its Launch (with
// its host pid) and Terminate, or, for a process that never started (its
// command was not found), a Launch with status Failure. The policy's timeout is the provider's to
// enforce; ctx ending kills the process (CodeTimeout error).
func (s *Session) Exec(ctx context.Context, e Exec) (provider.ExitStatus, error) {
	uid := e.UID
	if uid < 0 {
		uid = -1
		if w, ok := s.cfg.Plan.Details.(provider.WorkloadIdentity); ok {
			uid = w.WorkloadUID()
		}
	}
	wl := audit.Proc{CmdLine: e.Args, UID: uid}
	started := e.Started
	spec := e.ExecSpec
	spec.Started = func(pid int) { // on Exec's goroutine, before init may reap it
		wl.PID = pid
		s.cfg.Log.Emit(audit.Launch(s.info, wl))
		if started != nil {
			started(pid)
		}
	}
	st, err := s.sb.Exec(ctx, spec)
	if err != nil && wl.PID == 0 { // never started (the command was not found): no Launch, so no Terminate
		s.cfg.Log.Emit(audit.NotLaunched(s.info, wl, err.Error()))
		s.cfg.Log.Flush()
		return st, err
	}
	ex := audit.Exit{Code: st.Code, Signal: st.Signal, TimedOut: st.TimedOut, Duration: st.Duration, Reason: st.Reason}
	if e.Killed != nil {
		if why := e.Killed(); why != "" {
			ex.Killed, ex.Reason = true, why
		}
	}
	if ex.Reason == "" && ctx.Err() != nil {
		ex.Killed, ex.Reason = true, "ended by its caller: "+ctx.Err().Error()
	}
	if ex.Reason == "" && err != nil {
		ex.Reason = err.Error()
	}
	s.cfg.Log.Emit(audit.Terminate(s.info, wl, ex))
	s.cfg.Log.Flush()
	return st, err
}

// NotLaunched records that cmd was never run in the session, and why.
func (s *Session) NotLaunched(cmd []string, reason string) {
	s.cfg.Log.Emit(audit.NotLaunched(s.info, audit.Proc{CmdLine: cmd, UID: -1}, reason))
}

// Signal forwards sig to the running workload.
func (s *Session) Signal(sig os.Signal) error { return s.sb.Signal(sig) }

// CheckPlanted scans the session's read-write trees for what was planted
// for later since the last check (internal/planted), writes each finding
// to w (with strict, moves it aside: planted.Report) and to the audit log,
// and returns them. After Close it covers the whole session.
func (s *Session) CheckPlanted(w io.Writer, strict bool) []planted.Finding {
	s.mu.Lock()
	since := s.scanned
	s.scanned = planted.Now()
	s.mu.Unlock()
	found := planted.Report(w, s.pol, since, strict)
	for _, f := range found {
		s.cfg.Log.Emit(audit.Planted(s.info, f.Path, f.Kind, f.What, f.Keys, strict))
	}
	return found
}

// EgressSummary writes the counts of the session's egress decisions and
// one line per kind of denial (corral run -v), and, when the audit log
// aggregated decisions, says how many.
func (s *Session) EgressSummary(w io.Writer) {
	s.stats.summary(w)
	s.warnAggregated(w)
}

func (s *Session) warnAggregated(w io.Writer) {
	if st := s.cfg.Log.Stats(); st.Aggregated > 0 {
		fmt.Fprintf(w, "corral: egress: %d decisions beyond %d denied or %d allowed a window were written to the audit log as aggregates (count, start_time, end_time), not one by one\n", st.Aggregated, audit.MaxDenied, audit.MaxAllowed)
	}
}

// WarnAggregated is EgressSummary's note on the audit log alone, printed
// without -v too: an audit log that summarises must not go unnoticed.
func (s *Session) WarnAggregated(w io.Writer) { s.warnAggregated(w) }

// Detach closes what this process holds of a persistent sandbox (its
// egress proxy) and leaves the sandbox running for a later Recover.
func (s *Session) Detach() {
	s.closeConsent()
	if s.sw != nil {
		s.sw.Close()
		// This process's copy of the listener too: its accept loop
		// would go on taking (and dropping) connections a later
		// Recover's proxy must serve.
		s.sb.EgressListener().Close()
	}
}

// Close stops everything in the sandbox, removes it and closes its egress
// proxy; idempotent. The audit log is the caller's to close.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	return s.teardown()
}

func (s *Session) teardown() error {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.closeConsent()
	serr := s.sb.Stop(c)
	startup.Add("supervisor", "session: stopped")
	derr := s.sb.Deprovision(c)
	startup.Add("supervisor", "session: deprovisioned")
	if s.sw != nil {
		s.sw.Close()
	}
	return errors.Join(serr, derr)
}

package session

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/audit"
	"github.com/corral-sandbox/corral/consent"
	"github.com/corral-sandbox/corral/egress"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// consentState is a session's consent broker, the workload's channel to
// it, and the host grants it added to the egress rules.
type consentState struct {
	broker *consent.Broker
	srv    *http.Server // the workload's API on the sandbox's ConsentListener

	mu    sync.Mutex
	base  policy.Network    // the egress rules without the host grants
	hosts []policy.Endpoint // the host grants, in the order approved
	rev   uint64            // the proxy's rule revision with them
}

// Consent is the session's consent broker (docs/consent.md), nil when the
// policy has no consent section.
func (s *Session) Consent() *consent.Broker {
	if s.consent == nil {
		return nil
	}
	return s.consent.broker
}

// newConsent makes the session's broker, when the policy has a consent
// section, before the egress proxy that also serves its API.
func (s *Session) newConsent() error {
	if s.pol.Consent == nil {
		return nil
	}
	cs := &consentState{base: s.pol.Egress}
	standing, warn, err := consent.OpenStanding(s.pol)
	if err != nil {
		return provider.Wrap(provider.CodeStartFailed, "consent.persist", err)
	}
	if warn != "" && s.cfg.Warn != nil {
		s.cfg.Warn(warn)
	}
	cs.broker = consent.New(consent.Config{Sandbox: s.sb.ID(), Policy: s.pol, Applier: consentApplier{s}, Log: s.recordConsent, Standing: standing})
	s.consent = cs
	return nil
}

// serveConsent serves the workload's consent API on the sandbox's
// ConsentListener. A sandbox that cannot serve the channel fails the
// start (the policy asked for it).
func (s *Session) serveConsent() error {
	cs := s.consent
	if cs == nil {
		return nil
	}
	var l net.Listener
	if ch, ok := s.sb.(provider.ConsentChannel); ok {
		l = ch.ConsentListener()
	}
	if l == nil {
		return provider.Errorf(provider.CodeStartFailed, "consent: %s gave no consent channel for a policy with a consent section", s.cfg.Provider.Name())
	}
	pr, _ := s.sb.(provider.PeerResolver)
	type connKey struct{}
	cs.srv = &http.Server{
		Handler: consent.SandboxHandler(cs.broker, func(r *http.Request) consent.Requester {
			who := consent.Requester{Via: "tcp"}
			if c, ok := r.Context().Value(connKey{}).(net.Conn); ok && pr != nil {
				if pid, exe, ok := pr.ConsentPeer(c); ok {
					who.PID, who.Exe = pid, exe
				}
			}
			return who
		}),
		ReadHeaderTimeout: 10 * time.Second,
		ConnContext:       func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) },
	}
	go func() { _ = cs.srv.Serve(l) }()
	return nil
}

// consentProxy gives the egress proxy the consent API (at corral.local and
// at its address inside, which HTTP_PROXY sends through the proxy) and
// the hint in its denials of hosts the ceiling lets the workload ask for.
func (s *Session) consentProxy(c *egress.Config) {
	cs := s.consent
	if cs == nil {
		return
	}
	c.Local = consent.SandboxHandler(cs.broker, func(*http.Request) consent.Requester { return consent.Requester{Via: "proxy"} })
	c.LocalAddr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), provider.ConsentPort)
	c.ConsentHint = func(host string, port int) string {
		if _, refused := s.pol.AskHost(host, port); refused != nil {
			return ""
		}
		return egress.HostRequestHint(consentURL, host, port)
	}
}

// consentURL is where the workload asks (provider.ConsentURLEnv's value).
var consentURL = "http://127.0.0.1:" + strconv.Itoa(provider.ConsentPort)

// closeConsent ends the broker (pending requests expire) and the
// workload's API.
func (s *Session) closeConsent() {
	if s.consent == nil {
		return
	}
	s.consent.broker.Close()
	if s.consent.srv != nil {
		_ = s.consent.srv.Close()
	}
}

func (s *Session) recordConsent(e consent.Event) {
	s.cfg.Log.Emit(audit.Consent(s.info, e))
}

// consentApplier puts the broker's decisions in force in the session's
// sandbox and its egress proxy.
type consentApplier struct{ s *Session }

func (a consentApplier) Mode(k consent.Kind) provider.ConsentMode {
	switch k {
	case consent.KindFolder:
		if _, ok := a.s.sb.(provider.LiveGrants); ok {
			return provider.ConsentLive
		}
		return provider.ConsentUnsupported
	case consent.KindHost:
		if a.s.sw != nil {
			return provider.ConsentLive
		}
	}
	return provider.ConsentUnsupported
}

func (a consentApplier) live() (provider.LiveGrants, error) {
	lg, ok := a.s.sb.(provider.LiveGrants)
	if !ok {
		return nil, provider.Errorf(provider.CodeUnavailable, "consent: %s sandboxes take no folder grants while they run", a.s.cfg.Provider.Name())
	}
	return lg, nil
}

func (a consentApplier) ApplyFolder(ctx context.Context, g provider.FolderGrant) (provider.GrantStatus, error) {
	lg, err := a.live()
	if err != nil {
		return provider.GrantStatus{}, err
	}
	return lg.GrantFolder(ctx, g)
}

func (a consentApplier) RevokeFolder(ctx context.Context, label string, kill bool) (provider.GrantStatus, error) {
	lg, err := a.live()
	if err != nil {
		return provider.GrantStatus{}, err
	}
	return lg.RevokeFolder(ctx, label, kill)
}

func (a consentApplier) FolderGrants(ctx context.Context) ([]provider.GrantStatus, error) {
	lg, err := a.live()
	if err != nil {
		return nil, err
	}
	return lg.FolderGrants(ctx)
}

// AllowHost adds host:port to the egress rules as a passthrough allow
// entry; the connections open now stay open (the change only adds).
func (a consentApplier) AllowHost(ctx context.Context, host string, port int) (int, error) {
	if a.s.sw == nil {
		return 0, provider.Errorf(provider.CodeUnavailable, "consent: host grants are egress proxy rules, and the session has network %s", a.s.pol.Network)
	}
	cs := a.s.consent
	cs.mu.Lock()
	defer cs.mu.Unlock()
	e := policy.Endpoint{Host: host, Ports: []int{port}, TLS: policy.TLSPassthrough}
	if !slices.ContainsFunc(cs.hosts, func(x policy.Endpoint) bool { return endpointEqual(x, e) }) {
		hosts := append(slices.Clip(cs.hosts), e)
		rev, err := a.s.applyEgress(withHosts(cs.base, hosts))
		if err != nil {
			return 0, err
		}
		cs.hosts, cs.rev = hosts, rev
	}
	// The read-back: the rules the proxy taking new connections compiled.
	rev, ok := a.s.sw.inForce(host, port)
	if !ok {
		return 0, provider.Errorf(provider.CodeInternal, "consent: the egress rules in force (revision %d) do not admit %s:%d", rev, host, port)
	}
	return int(rev), nil
}

// DisallowHost removes a host grant; the connections admitted while it
// was in force are closed with the proxy that carried them.
func (a consentApplier) DisallowHost(ctx context.Context, host string, port int) (int, error) {
	cs := a.s.consent
	cs.mu.Lock()
	defer cs.mu.Unlock()
	hosts := slices.DeleteFunc(slices.Clone(cs.hosts), func(x policy.Endpoint) bool { return x.Host == host && slices.Equal(x.Ports, []int{port}) })
	if len(hosts) == len(cs.hosts) {
		return int(cs.rev), provider.Errorf(provider.CodeNotFound, "consent: no host grant for %s:%d", host, port)
	}
	rev, err := a.s.applyEgress(withHosts(cs.base, hosts))
	if err != nil {
		return 0, err
	}
	cs.hosts, cs.rev = hosts, rev
	return int(rev), nil
}

// withHosts is n with the host grants appended to its allow entries.
func withHosts(n policy.Network, hosts []policy.Endpoint) policy.Network {
	n.Allow = append(slices.Clip(n.Allow), hosts...)
	return n
}

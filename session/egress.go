package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/egress"
	"github.com/corral-sandbox/corral/egress/l7"
	"github.com/corral-sandbox/corral/policy"
)

// Rules converts a policy's network section to the proxy's rules.
func Rules(n policy.Network) egress.Policy {
	conv := func(eps []policy.Endpoint) []egress.Rule {
		var out []egress.Rule
		for _, e := range eps {
			out = append(out, egress.Rule{Host: e.Host, Ports: e.Ports, Inspect: e.Inspected(), Access: string(e.Access),
				Rules: httpRules(e.Rules), DenyRules: httpRules(e.DenyRules)})
		}
		return out
	}
	return egress.Policy{Allow: conv(n.Allow), Deny: conv(n.Deny), AllowPrivate: conv(n.AllowPrivate), Hosts: n.Hosts}
}

func httpRules(rs []policy.HTTPRule) []l7.Rule {
	var out []l7.Rule
	for _, r := range rs {
		q := map[string][]string{}
		for k, v := range r.Query {
			q[k] = v
		}
		out = append(out, l7.Rule{Method: r.Method, Path: r.Path, Query: q})
	}
	return out
}

// ResolverEnv names the DNS server (ip:port) the egress proxy asks instead
// of the host's resolver configuration. It lets an operator pin the
// proxy's DNS, and lets `corral qualify` observe every name the proxy
// resolves (P19: only allowed names, never denied ones).
const ResolverEnv = "CORRAL_EGRESS_RESOLVER"

// CheckResolver reports a ResolverEnv value that is not ip:port.
func CheckResolver() error {
	if addr := os.Getenv(ResolverEnv); addr != "" {
		if _, err := netip.ParseAddrPort(addr); err != nil {
			return fmt.Errorf("%s=%q: want ip:port", ResolverEnv, addr)
		}
	}
	return nil
}

// Resolver is the proxy's resolver: nil (the host's) unless ResolverEnv
// names a valid server (CheckResolver).
func Resolver() func(ctx context.Context, host string) ([]netip.Addr, error) {
	addr := os.Getenv(ResolverEnv)
	if _, err := netip.ParseAddrPort(addr); err != nil {
		return nil
	}
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	return func(ctx context.Context, host string) ([]netip.Addr, error) {
		return r.LookupNetIP(ctx, "ip", host)
	}
}

// egressStats counts the proxy's decisions for the -v summary, bounded:
// the workload decides how many there are.
type egressStats struct {
	mu        sync.Mutex
	allowed   int
	inspected int            // requests decided inside terminated TLS, allowed or not
	findings  int            // credential findings
	denied    map[string]int // "host:port (reason)" -> count, at most maxDeniedKinds keys
	other     int            // denials beyond maxDeniedKinds kinds
}

const maxDeniedKinds = 100

func (l *egressStats) record(d egress.Decision) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d.Inspected && d.Method != "CONNECT" {
		l.inspected++
	}
	if d.Allowed {
		l.allowed++
		return
	}
	if l.denied == nil {
		l.denied = map[string]int{}
	}
	key := fmt.Sprintf("%s (%s)", net.JoinHostPort(d.Host, strconv.Itoa(d.Port)), d.Reason)
	if _, ok := l.denied[key]; ok || len(l.denied) < maxDeniedKinds {
		l.denied[key]++
	} else {
		l.other++
	}
}

// finding counts one credential finding and returns how many there were.
func (l *egressStats) finding(egress.CredentialFinding) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.findings++
	return l.findings
}

// summary writes one line of counts and one per distinct denial.
func (l *egressStats) summary(w io.Writer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.other
	for _, c := range l.denied {
		n += c
	}
	fmt.Fprintf(w, "corral: egress: %d allowed, %d denied", l.allowed, n)
	if l.inspected > 0 {
		fmt.Fprintf(w, " (%d requests inspected)", l.inspected)
	}
	if l.findings > 0 {
		fmt.Fprintf(w, "; %d credential findings (in the audit log)", l.findings)
	}
	fmt.Fprintln(w)
	if l.other > 0 {
		fmt.Fprintf(w, "corral: egress: %d denials of further kinds not listed\n", l.other)
	}
	keys := make([]string, 0, len(l.denied))
	for k := range l.denied {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "corral: egress: denied %dx %s\n", l.denied[k], strings.TrimSpace(k))
	}
}

// egressSwitch serves a sandbox's egress listener with whichever proxy is
// current: it accepts, and hands each connection to the current proxy
// through an egress.Handoff. New rules are a new proxy, which takes every
// connection from then on, in one of two ways:
//   - swap (a change that removes or narrows something): the previous
//     proxies are closed with the connections they carried (they were
//     admitted under rules no longer in force);
//   - extend (a change that only adds, egress.Adds: a host grant): the
//     previous proxy is retired (egress.Proxy.Retire) and its
//     connections go on, as the rules that admitted them are still in
//     force; an idle keep-alive connection moves to the new proxy at its
//     next request. A retired proxy closes when its last connection
//     ends, or when a swap or Close does.
//
// Each swap or extend is a new rule revision, numbered from 1 upwards in
// the switch's life; revision reads back the one in force.
type egressSwitch struct {
	mu      sync.Mutex
	cur     *egress.Handoff
	proxy   *egress.Proxy
	rev     uint64                     // the revision of proxy
	retired map[*egress.Proxy]struct{} // still carrying connections
	l       net.Listener
	cred    string
	closed  bool // no proxy ever again (Close)
}

// newEgressSwitch serves l with p (revision 1) from now on.
func newEgressSwitch(l net.Listener, p *egress.Proxy, cred string) *egressSwitch {
	sw := &egressSwitch{l: l, cred: cred, retired: map[*egress.Proxy]struct{}{}}
	_ = sw.swap(p) // a new switch is open
	go sw.accept()
	return sw
}

// accept hands every connection over until the listener is closed; on
// other errors (EMFILE) it backs off as net/http does, 5 ms doubling to
// 1 s, so that one bad moment does not end the sandbox's egress.
func (sw *egressSwitch) accept() {
	var delay time.Duration
	for {
		c, err := sw.l.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			time.Sleep(delay)
			continue
		}
		delay = 0
		if !sw.give(c) {
			c.Close()
		}
	}
}

// give hands c to the current proxy; false after Close. A proxy
// replaced while c was on its way (its Handoff closed) passes c on to
// the one that replaced it.
func (sw *egressSwitch) give(c net.Conn) bool {
	for {
		sw.mu.Lock()
		h := sw.cur
		sw.mu.Unlock()
		if h == nil {
			return false
		}
		if h.Give(c) {
			return true
		}
		sw.mu.Lock()
		same := sw.cur == h
		sw.mu.Unlock()
		if same { // closed under us, not replaced
			return false
		}
	}
}

// swap makes p the proxy for new connections and closes the previous
// ones (current and retired) with their connections; after Close it
// closes p and says so.
func (sw *egressSwitch) swap(p *egress.Proxy) error {
	_, old, err := sw.install(p, false)
	for _, o := range old {
		o.Close()
	}
	return err
}

// extend makes p the proxy for new connections and retires the previous
// one without closing what it carries: for rules that only add to the
// previous ones (egress.Adds; the caller decides, extend does not
// check). It returns p's revision; after Close it closes p and says so.
func (sw *egressSwitch) extend(p *egress.Proxy) (uint64, error) {
	rev, old, err := sw.install(p, true)
	for _, o := range old {
		o.Retire(sw.give)
		go func() {
			<-o.Done()
			sw.mu.Lock()
			delete(sw.retired, o)
			sw.mu.Unlock()
		}()
	}
	return rev, err
}

// install makes p current under a new revision, and returns that and
// the proxies to retire (retire: the one p replaces, now counted
// retired) or to close (all before p, forgotten); after Close it closes
// p and says so.
func (sw *egressSwitch) install(p *egress.Proxy, retire bool) (uint64, []*egress.Proxy, error) {
	h := egress.NewHandoff(sw.l.Addr())
	sw.mu.Lock()
	if sw.closed {
		sw.mu.Unlock()
		p.Close()
		return 0, nil, errors.New("the session's egress is closed")
	}
	var old []*egress.Proxy
	if sw.proxy != nil {
		old = append(old, sw.proxy)
	}
	if retire {
		if sw.proxy != nil {
			sw.retired[sw.proxy] = struct{}{}
		}
	} else {
		for r := range sw.retired {
			old = append(old, r)
		}
		clear(sw.retired)
	}
	sw.cur, sw.proxy = h, p
	sw.rev++
	rev := sw.rev
	sw.mu.Unlock()
	go func() { _ = p.Serve(h) }()
	return rev, old, nil
}

// revision is the rule revision of the proxy that takes new connections
// (1 for the session's first rules; 0 after Close).
func (sw *egressSwitch) revision() uint64 {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.closed {
		return 0
	}
	return sw.rev
}

// inForce reads back whether the rules in force admit host:port
// (egress.Proxy.Admits on the proxy taking new connections) and under
// which revision; (0, false) after Close.
func (sw *egressSwitch) inForce(host string, port int) (uint64, bool) {
	sw.mu.Lock()
	p, rev := sw.proxy, sw.rev
	sw.mu.Unlock()
	if p == nil {
		return 0, false
	}
	return rev, p.Admits(host, port)
}

// Close stops handing over and closes the current proxy and the retired
// ones (not the listener, which belongs to the sandbox).
func (sw *egressSwitch) Close() {
	sw.mu.Lock()
	ps := []*egress.Proxy{sw.proxy}
	for r := range sw.retired {
		ps = append(ps, r)
	}
	sw.cur, sw.proxy, sw.closed = nil, nil, true
	sw.mu.Unlock()
	for _, p := range ps {
		if p != nil {
			p.Close()
		}
	}
}

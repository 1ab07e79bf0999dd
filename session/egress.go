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
// through an egress.Handoff. Swapping in a proxy with new rules applies
// them to every connection from then on; the old proxy is closed with the
// connections it carried (they were admitted under old rules).
type egressSwitch struct {
	mu     sync.Mutex
	cur    *egress.Handoff
	proxy  *egress.Proxy
	l      net.Listener
	cred   string
	closed bool // no proxy ever again (Close)
}

// newEgressSwitch serves l with p from now on.
func newEgressSwitch(l net.Listener, p *egress.Proxy, cred string) *egressSwitch {
	sw := &egressSwitch{l: l, cred: cred}
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
		sw.mu.Lock()
		h := sw.cur
		sw.mu.Unlock()
		if h == nil || !h.Give(c) {
			c.Close()
		}
	}
}

// swap makes p the proxy for new connections and closes the previous one;
// after Close it closes p and says so.
func (sw *egressSwitch) swap(p *egress.Proxy) error {
	h := egress.NewHandoff(sw.l.Addr())
	sw.mu.Lock()
	if sw.closed {
		sw.mu.Unlock()
		p.Close()
		return errors.New("the session's egress is closed")
	}
	old := sw.proxy
	sw.cur, sw.proxy = h, p
	sw.mu.Unlock()
	go func() { _ = p.Serve(h) }()
	if old != nil {
		old.Close()
	}
	return nil
}

// Close stops handing over and closes the current proxy (not the
// listener, which belongs to the sandbox).
func (sw *egressSwitch) Close() {
	sw.mu.Lock()
	p := sw.proxy
	sw.cur, sw.proxy, sw.closed = nil, nil, true
	sw.mu.Unlock()
	if p != nil {
		p.Close()
	}
}

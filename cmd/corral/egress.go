package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/corral-sandbox/corral/audit"
	"github.com/corral-sandbox/corral/egress"
	"github.com/corral-sandbox/corral/policy"
)

// egressRules converts the policy's network section to the proxy's rules.
func egressRules(n policy.Network) egress.Policy {
	conv := func(eps []policy.Endpoint) []egress.Rule {
		var out []egress.Rule
		for _, e := range eps {
			out = append(out, egress.Rule{Host: e.Host, Ports: e.Ports})
		}
		return out
	}
	return egress.Policy{Allow: conv(n.Allow), Deny: conv(n.Deny), AllowPrivate: conv(n.AllowPrivate), Hosts: n.Hosts}
}

// ResolverEnv names the DNS server (ip:port) the egress proxy asks instead
// of the host's resolver configuration. It lets an operator pin the
// proxy's DNS, and lets `corral qualify` observe every name the proxy
// resolves (P19: only allowed names, never denied ones).
const ResolverEnv = "CORRAL_EGRESS_RESOLVER"

// egressResolver returns the resolver function for the proxy: nil (the
// host's) unless ResolverEnv is set.
func egressResolver() (func(ctx context.Context, host string) ([]netip.Addr, error), error) {
	addr := os.Getenv(ResolverEnv)
	if addr == "" {
		return nil, nil
	}
	if _, err := netip.ParseAddrPort(addr); err != nil {
		return nil, fmt.Errorf("%s=%q: want ip:port", ResolverEnv, addr)
	}
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	return func(ctx context.Context, host string) ([]netip.Addr, error) {
		return r.LookupNetIP(ctx, "ip", host)
	}, nil
}

// egressLog records the proxy's decisions: each to the audit sink as an
// OCSF HTTP Activity event, and counts for the -v summary.
type egressLog struct {
	sink    *audit.Sink
	info    func() audit.RunInfo
	mu      sync.Mutex
	allowed int
	denied  map[string]int // "host:port reason" -> count, at most maxDeniedKinds keys
	other   int            // denials beyond maxDeniedKinds kinds
	events  int            // events written to the audit log
	dropped int            // events beyond maxAuditEvents, not written
}

// A workload controls how many decisions it causes: the summary and the
// audit log are bounded so that it cannot grow corral's memory or fill the
// disk. What is cut is counted and reported.
const (
	maxDeniedKinds = 100
	maxAuditEvents = 10000
)

func (l *egressLog) record(d egress.Decision) {
	l.mu.Lock()
	write := l.events < maxAuditEvents
	if write {
		l.events++
	} else {
		l.dropped++
	}
	if d.Allowed {
		l.allowed++
	} else {
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
	l.mu.Unlock()
	if write {
		_ = l.sink.Emit(audit.Egress(l.info(), audit.EgressOf(d)))
	}
}

// warnDropped says so when the audit log was capped (printed with or
// without -v: an incomplete audit log must not go unnoticed).
func (l *egressLog) warnDropped(w io.Writer) {
	if l.dropped > 0 && l.sink != nil {
		fmt.Fprintf(w, "corral: egress: %d decisions beyond the first %d were not written to the audit log\n", l.dropped, maxAuditEvents)
	}
}

// summary writes one line of counts and one per distinct denial.
func (l *egressLog) summary(w io.Writer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.other
	for _, c := range l.denied {
		n += c
	}
	fmt.Fprintf(w, "corral: egress: %d allowed, %d denied\n", l.allowed, n)
	l.warnDropped(w)
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

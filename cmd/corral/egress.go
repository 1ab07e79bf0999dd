package main

import (
	"fmt"
	"io"
	"sort"
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

// egressLog records the proxy's decisions: each to the audit sink as an
// OCSF HTTP Activity event, and counts for the -v summary.
type egressLog struct {
	sink    *audit.Sink
	info    func() audit.RunInfo
	mu      sync.Mutex
	allowed int
	denied  map[string]int // "host:port reason" -> count
}

func (l *egressLog) record(d egress.Decision) {
	ip := ""
	if d.Addr.IsValid() {
		ip = d.Addr.Addr().String()
	}
	_ = l.sink.Emit(audit.Egress(l.info(), audit.EgressDecision{Time: d.Time, Allowed: d.Allowed, Method: d.Method,
		Host: d.Host, Port: d.Port, IP: ip, URL: d.URL, Status: d.Status, Rule: d.Rule, Reason: d.Reason, Hint: d.Hint}))
	l.mu.Lock()
	defer l.mu.Unlock()
	if d.Allowed {
		l.allowed++
		return
	}
	if l.denied == nil {
		l.denied = map[string]int{}
	}
	l.denied[fmt.Sprintf("%s:%d (%s)", d.Host, d.Port, d.Reason)]++
}

// summary writes one line of counts and one per distinct denial.
func (l *egressLog) summary(w io.Writer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.denied {
		n += c
	}
	fmt.Fprintf(w, "corral: egress: %d allowed, %d denied\n", l.allowed, n)
	keys := make([]string, 0, len(l.denied))
	for k := range l.denied {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "corral: egress: denied %dx %s\n", l.denied[k], strings.TrimSpace(k))
	}
}

package egress

import (
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/corral-sandbox/corral/egress/l7"
)

// Live rule changes. A session serves a sandbox's egress listener with one
// proxy at a time; new rules are a new Proxy. A change that removes or
// narrows something closes the old proxy and every connection it admitted
// (Close). A change that only adds (Adds) retires it instead (Retire): the
// new proxy takes every new connection, and the connections the old one
// carries go on under the rules they were admitted by, which are still in
// force.

// Retire makes p take no more connections, and hands each client
// connection it carries to next at its next request boundary: a plain
// HTTP keep-alive connection waiting for (or just beginning) its next
// request goes to next with the bytes read so far, so that its next
// request is decided by next's rules; a tunnel, an inspected connection,
// a WebSocket or a request in progress goes on until it ends. next
// reports whether it took the connection (false: p closes it). p closes
// for good (Close; Done) once its last client connection has ended, at
// once when it carries none. Retire after Close, or a second time, does
// nothing.
func (p *Proxy) Retire(next func(net.Conn) bool) {
	p.mu.Lock()
	if p.closed || p.retired {
		p.mu.Unlock()
		return
	}
	p.retired, p.next = true, next
	for l := range p.listeners {
		l.Close()
	}
	// Waits for a request head end now; idleEnter sees retired before
	// any wait begins after this.
	for s := range p.idle {
		s.raw.SetReadDeadline(time.Unix(1, 0))
	}
	done := p.clients == 0
	p.mu.Unlock()
	if done {
		p.Close()
	}
}

// Done is closed when p closes: by Close, or after Retire when its last
// connection ended.
func (p *Proxy) Done() <-chan struct{} { return p.ctx.Done() }

// idleEnter records that s waits for a request head; false when p is
// retired (s hands its connection on instead).
func (p *Proxy) idleEnter(s *session) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.retired {
		return false
	}
	p.idle[s] = struct{}{}
	return true
}

// idleLeave ends idleEnter's wait and reports whether p was retired.
func (p *Proxy) idleLeave(s *session) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.idle, s)
	return p.retired
}

// clientDone forgets an ended (or handed on) client connection; a
// retired proxy closes with its last one.
func (p *Proxy) clientDone(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.clients--
	last := p.retired && !p.closed && p.clients == 0
	p.mu.Unlock()
	if last {
		go p.Close() // (Close waits for this goroutine)
	}
}

// handOn gives c to a retired proxy's successor; false when there is
// none or it did not take c.
func (p *Proxy) handOn(c net.Conn) bool {
	p.mu.Lock()
	next := p.next
	p.mu.Unlock()
	return next != nil && next(c)
}

// handOn hands the session's connection, with what was read of its next
// request, to the successor of its retired proxy; true when it took it.
func (s *session) handOn() bool {
	var pending []byte
	if n := s.br.Buffered(); n > 0 {
		b, _ := s.br.Peek(n)
		pending = append(pending, b...)
	}
	s.raw.SetReadDeadline(time.Time{})
	// Untracked before it is given: closing p must not close what its
	// successor serves.
	s.p.mu.Lock()
	delete(s.p.conns, s.raw)
	s.p.mu.Unlock()
	var c net.Conn = s.raw
	if len(pending) > 0 {
		c = &prefixConn{Conn: s.raw, pending: pending, done: make(chan struct{})}
	}
	return s.p.handOn(c)
}

func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// Admits reports whether p's rules allow host:port: the deny and allow
// rules only (Decisions 2 of docs/egress.md), before resolution and the
// address checks. It is the read-back of a host grant: the rules the
// proxy compiled, not the ones it was asked for. host is a name or an IP
// literal as ParseAuthority takes it; anything it refuses is not
// admitted, and neither is the consent API (LocalName, Config.LocalAddr:
// never egress).
func (p *Proxy) Admits(host string, port int) bool {
	if port < 1 || port > 65535 {
		return false
	}
	h, pt, err := ParseAuthority(net.JoinHostPort(strings.Trim(host, "[]"), strconv.Itoa(port)), 0)
	if err != nil || p.isLocal(newTarget(h, pt)) {
		return false
	}
	return p.checkPolicy(newTarget(h, pt), &Decision{}) != nil
}

// Adds reports whether rules b only add to rules a, so that connections
// admitted under a may stay open under b. Conservative: true only when
//   - both compile (Validate);
//   - the deny lists are equal, entry by entry in order;
//   - every allow entry of a is in b unchanged (host, ports, inspection,
//     access and L7 rules), and every entry b adds is uninspected: a new
//     inspected entry matching an allowed host would add L7 rules that
//     host's requests must also satisfy (the inspected entries that
//     match are all applied), which narrows;
//   - every allow_private entry of a is in b unchanged;
//   - every hosts entry of a is in b with the same address, and a name b
//     adds to hosts is matched by no allow entry of a (pinning an allowed
//     name changes where its connections go).
//
// Anything else, reordering aside, is "not only adds". Adds compares the
// Policy alone: the caller must keep the rest of Config the same (CA,
// UpstreamRoots, Credentials, Credential).
func Adds(a, b Policy) bool {
	ca, err := compilePolicy(a)
	if err != nil {
		return false
	}
	cb, err := compilePolicy(b)
	if err != nil {
		return false
	}
	if !slices.EqualFunc(a.Deny, b.Deny, sameRule) {
		return false
	}
	for _, r := range a.Allow {
		if !slices.ContainsFunc(b.Allow, func(x Rule) bool { return sameRule(r, x) }) {
			return false
		}
	}
	for _, r := range b.Allow {
		if r.inspected() && !slices.ContainsFunc(a.Allow, func(x Rule) bool { return sameRule(r, x) }) {
			return false
		}
	}
	for _, r := range a.AllowPrivate {
		if !slices.ContainsFunc(b.AllowPrivate, func(x Rule) bool { return sameRule(r, x) }) {
			return false
		}
	}
	for name, addr := range ca.hosts {
		if cb.hosts[name] != addr {
			return false
		}
	}
	for name := range cb.hosts {
		if _, old := ca.hosts[name]; old {
			continue
		}
		for i := range ca.allow {
			if ca.allow[i].matchTarget(name, netip.Addr{}) {
				return false
			}
		}
	}
	return true
}

// sameRule: x and y are the same entry, written alike (empty and absent
// lists are the same; anything else differing, even a spelling, is not).
func sameRule(x, y Rule) bool {
	return x.Host == y.Host && slices.Equal(x.Ports, y.Ports) && x.Inspect == y.Inspect && x.Access == y.Access &&
		slices.EqualFunc(x.Rules, y.Rules, sameL7) && slices.EqualFunc(x.DenyRules, y.DenyRules, sameL7)
}

func sameL7(x, y l7.Rule) bool {
	if x.Method != y.Method || x.Path != y.Path || len(x.Query) != len(y.Query) {
		return false
	}
	for k, v := range x.Query {
		w, ok := y.Query[k]
		if !ok || !slices.Equal(v, w) {
			return false
		}
	}
	return true
}

// HostRequestHint is the usual text of a denial's "consent" field
// (Config.ConsentHint) for host:port: the request that asks a person for
// it through the sandbox's consent API at base (e.g.
// "http://127.0.0.1:3129", or "http://corral.local" through the proxy):
//
//	POST http://127.0.0.1:3129/v1/requests {"kind":"host","target":"api.example.com:443","reason":"..."}
func HostRequestHint(base, host string, port int) string {
	body, _ := json.Marshal(struct {
		Kind   string `json:"kind"`
		Target string `json:"target"`
		Reason string `json:"reason"`
	}{"host", net.JoinHostPort(host, strconv.Itoa(port)), "..."})
	return "POST " + strings.TrimSuffix(base, "/") + "/v1/requests " + string(body)
}

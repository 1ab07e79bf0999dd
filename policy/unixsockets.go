package policy

import (
	"fmt"
	"strconv"
)

// UnixSockets is the network.unix_sockets setting: whether the workload
// may make unix sockets that reach others by name (a path or an abstract
// name).
type UnixSockets string

const (
	// UnixSocketsDeny refuses socket(AF_UNIX), so the workload can
	// neither connect to nor listen on a named unix socket — the host's,
	// one a host process creates in a granted directory while the run is
	// under way, or its own. Connected pairs between processes
	// (socketpair(AF_UNIX) of SOCK_STREAM or SOCK_SEQPACKET) keep working.
	UnixSocketsDeny UnixSockets = "deny"
	// UnixSocketsAllow lets the workload create unix sockets; which files
	// it can connect to is then up to the filesystem layers (see
	// docs/unix-sockets.md).
	UnixSocketsAllow UnixSockets = "allow"
)

// DefaultUnixSockets is network.unix_sockets when the policy leaves it
// out (docs/unix-sockets.md has the measurement behind it).
const DefaultUnixSockets = UnixSocketsDeny

// UnixSocketsMode is n.UnixSockets with the default filled in.
func (n Network) UnixSocketsMode() UnixSockets {
	if n.UnixSockets == "" {
		return DefaultUnixSockets
	}
	return n.UnixSockets
}

// UnixSockets is the resolved network.unix_sockets (never empty).
func (r *Resolved) UnixSockets() UnixSockets { return r.Egress.UnixSocketsMode() }

// validateUnixSockets checks network.unix_sockets.
func (p *Policy) validateUnixSockets() []*Error {
	switch p.Network.UnixSockets {
	case "", UnixSocketsDeny, UnixSocketsAllow:
		return nil
	}
	hint := "use deny (no unix sockets by name; socketpair still works) or allow"
	if s := suggest(string(p.Network.UnixSockets), []string{string(UnixSocketsDeny), string(UnixSocketsAllow)}); s != "" {
		hint = "did you mean " + strconv.Quote(s) + "? " + hint
	}
	return []*Error{p.errAt("network.unix_sockets", fmt.Sprintf("unknown unix_sockets setting %q", p.Network.UnixSockets), hint)}
}

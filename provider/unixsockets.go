package provider

import (
	"fmt"

	"github.com/corral-sandbox/corral/policy"
)

// UnixSocketsLoss is the loss-report entry of the providers whose sandbox
// runs corral's Landlock ruleset and seccomp filter (linux, docker) for
// network.unix_sockets, given whether the seccomp layer will be applied
// and the host's Landlock ABI.
//
// Landlock as corral applies it (at most ABI 6's rights, whatever the
// kernel offers) does not restrict connect(2) on unix socket files; the
// providers hide the sockets they find in granted directories when the run
// starts, but a host process can make a new one there during the run.
// With deny, the seccomp filter refuses socket(AF_UNIX), which closes that:
// said as info. With deny but no seccomp the hole is open although the
// policy asked for it to be closed: a warning. With allow it is open as
// the policy permits: info.
func UnixSocketsLoss(r *policy.Resolved, seccomp bool, landlockABI int) Loss {
	l := Loss{Severity: SeverityInfo, Area: "network", Field: "network.unix_sockets"}
	const residual = "Landlock (ABI %d on this kernel; corral asks for ABI 6's rights at most) does not restrict connect() on unix socket files: the sockets found in granted directories (outside the system directories) when the run starts are hidden, but one a host process creates there during the run could be connected to"
	switch {
	case r.UnixSockets() == policy.UnixSocketsAllow:
		l.Message = fmt.Sprintf("allow: "+residual+" (unix_sockets: deny refuses that)", landlockABI)
	case seccomp:
		l.Message = "deny: the seccomp filter refuses socket(AF_UNIX) with EPERM, so no unix socket can be reached by path or abstract name, including one a host process creates in a granted directory during the run; socketpair(AF_UNIX) stream and seqpacket pairs keep working, datagram pairs are refused"
	default:
		l.Severity = SeverityWarning
		l.Message = fmt.Sprintf("deny is not enforced: the seccomp layer is not applied, and "+residual+" (apply seccomp, or write unix_sockets: allow to accept this)", landlockABI)
	}
	return l
}

//go:build linux

package linux

import (
	"context"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// network.unix_sockets reaches init's seccomp options, and the loss report
// says whether the late-socket hole is closed, open as allowed, or open
// although the policy asked to close it (a warning, never info).
func TestMapUnixSockets(t *testing.T) {
	p := New()
	h := p.facts()
	saved := h.seccomp
	defer func() { h.seccomp = saved }()
	h.seccomp = true
	for _, c := range []struct {
		setting  policy.UnixSockets
		seccomp  bool
		deny     bool
		severity provider.Severity
		says     string
	}{
		{"", true, true, provider.SeverityInfo, "refuses socket(AF_UNIX)"},
		{policy.UnixSocketsDeny, true, true, provider.SeverityInfo, "refuses socket(AF_UNIX)"},
		{policy.UnixSocketsAllow, true, false, provider.SeverityInfo, "could be connected to"},
		{policy.UnixSocketsDeny, false, true, provider.SeverityWarning, "is not enforced"},
	} {
		h.seccomp = c.seccomp
		r := resolved(policy.PathGrant{Path: "/usr", Access: policy.AccessReadOnly, Dir: true})
		r.Egress.UnixSockets = c.setting
		r.Layers = policy.Layers{policy.LayerSeccomp: policy.Optional}
		plan, loss := p.Map(context.Background(), r)
		spec := plan.Details.(*InitSpec)
		if spec.SeccompDenyUnix != c.deny || spec.Seccomp != c.seccomp {
			t.Errorf("%q, seccomp %v: spec deny=%v seccomp=%v", c.setting, c.seccomp, spec.SeccompDenyUnix, spec.Seccomp)
		}
		var got []provider.Loss
		for _, l := range loss {
			if l.Field == "network.unix_sockets" {
				got = append(got, l)
			}
		}
		if len(got) != 1 || got[0].Severity != c.severity || !strings.Contains(got[0].Message, c.says) {
			t.Errorf("%q, seccomp %v: loss %+v, want one %s saying %q", c.setting, c.seccomp, got, c.severity, c.says)
		}
	}
}

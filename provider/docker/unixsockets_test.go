//go:build linux

package docker

import (
	"testing"

	"github.com/corral-sandbox/corral/provider"
)

// network.unix_sockets reaches the exec shim's seccomp options, with the
// loss report saying which way the late-socket hole is.
func TestMapUnixSockets(t *testing.T) {
	p := needDocker(t)
	wd := userDir(t)
	sp, loss := mapPolicy(t, p, "version: 1\n", wd)
	if !sp.Shim.DenyUnixSockets || !find(loss, provider.SeverityInfo, "network.unix_sockets", "refuses socket(AF_UNIX)") {
		t.Errorf("default: deny=%v, loss %+v", sp.Shim.DenyUnixSockets, loss)
	}
	sp, loss = mapPolicy(t, p, "version: 1\nnetwork:\n  unix_sockets: allow\n", wd)
	if sp.Shim.DenyUnixSockets || !find(loss, provider.SeverityInfo, "network.unix_sockets", "could be connected to") {
		t.Errorf("allow: deny=%v, loss %+v", sp.Shim.DenyUnixSockets, loss)
	}
}

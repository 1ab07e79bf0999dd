//go:build linux

package docker

import (
	"fmt"
	"testing"
)

// The connect helper runs outside the exec shim, so it must never share
// the workload's uid (which could then open its /proc/PID/mem).
func TestConnectUserNotWorkload(t *testing.T) {
	for _, uid := range []int{1000, 1001, 65533, 65534} {
		if got := connectUser(uid); got == fmt.Sprintf("%d:%d", uid, uid) {
			t.Errorf("workload uid %d: the helper runs as %s too", uid, got)
		}
	}
}

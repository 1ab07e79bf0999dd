package mxc

import (
	"os/exec"

	"github.com/corral-sandbox/corral/internal/winjob"
)

// startTied starts wxc-exec in a kill-on-close job of its own
// (winjob.Start), so that it and what it started are killed when corral
// dies, its last handle to the job closing: the Linux parent-death
// signal's counterpart (a killed gateway left an isolation_session exec's
// wxc-exec and command running). release, after Wait, closes the job.
func startTied(cmd *exec.Cmd) (release func(), err error) {
	j, err := winjob.Start(cmd)
	if err != nil {
		return nil, err
	}
	return func() { j.Close() }, nil
}

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
//
// An isolation session's processes are the session's: MXC runs them in the
// session, never in this job, and a detached one (the service's in-session
// supervisor) outlives the exec. The stand-in runs them as wxc-exec's
// descendants, so for a session the job lets a process that asks to
// (CREATE_BREAKAWAY_FROM_JOB) leave it, as the stand-in's own job does
// (session set).
func startTied(cmd *exec.Cmd, session bool) (release func(), err error) {
	start := winjob.Start
	if session {
		start = winjob.StartBreakawayOK
	}
	j, err := start(cmd)
	if err != nil {
		return nil, err
	}
	return func() { j.Close() }, nil
}

// Package winjob runs a process in a Windows job object of its own, so
// that it and everything it starts can be ended together: the tree a
// process group is on Unix. Jobs are kill-on-close
// (JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE), so the tree also ends when the
// last handle to its job closes, which is at the latest when this process
// ends, however it ends. "Job Objects", Microsoft Learn.
package winjob

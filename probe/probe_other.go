//go:build !linux

package probe

import (
	"io"
	"runtime"
)

// linuxOnly are the probes that need Linux; elsewhere they report that.
var linuxOnly = []string{"spawn", "daemonize", "status", "status-chain", "tiocsti", "ptrace", "syscalls", "procfs", "fds", "forkbomb", "fdflood", "unixpair"}

func init() {
	for _, n := range linuxOnly {
		n := n
		probes[n] = func([]string) ([]Result, error) { return unsupported(n), nil }
	}
}

func unsupported(name string) []Result {
	return []Result{{What: name, Detail: "unsupported on " + runtime.GOOS}}
}

func cpuTime() string { return "" }

func killSelf(name string, stdout, stderr io.Writer) int {
	emit(stdout, "kill", unsupported("kill "+name))
	return 0
}

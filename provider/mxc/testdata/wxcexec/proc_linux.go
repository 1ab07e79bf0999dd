package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// sysProcAttr: the direct child dies with the stand-in (Pdeathsig), so a
// caller that kills only the stand-in does not leave the workload running.
// Its own descendants are not covered; signal the process group for those.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// contain: nothing more (Pdeathsig, and killTree's walk of /proc).
func contain(*os.Process) {}

// killTree kills p and every descendant found in /proc (a timeout must not
// leave grandchildren holding the caller's pipes open).
func killTree(p *os.Process) {
	children := map[int][]int{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, s := range stats {
		b, err := os.ReadFile(s)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		pid, err1 := strconv.Atoi(filepath.Base(filepath.Dir(s)))
		ppid, err2 := strconv.Atoi(f[1])
		if err1 == nil && err2 == nil {
			children[ppid] = append(children[ppid], pid)
		}
	}
	all := []int{p.Pid}
	for i := 0; i < len(all); i++ {
		all = append(all, children[all[i]]...)
	}
	for _, pid := range all {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

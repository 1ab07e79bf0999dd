//go:build linux

// Package identity picks the host uid and gid a sandbox's workload runs as,
// the same for every provider: the workload never runs as root.
package identity

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"

	"github.com/corral-sandbox/corral/policy"
)

// Workload picks the workload's uid and gid: unprivileged, the caller's
// own; as root, process.run_as_user, else the workdir's owner when that is
// not root, else nobody (65534). The workload never runs as root.
func Workload(r *policy.Resolved) (int, int, error) {
	if os.Getuid() != 0 {
		if r.RunAs != "" {
			if u, err := lookupUser(r.RunAs); err != nil || u != os.Getuid() {
				return os.Getuid(), os.Getgid(), fmt.Errorf("run_as_user %q needs root; an unprivileged caller's workload runs as itself (uid %d)", r.RunAs, os.Getuid())
			}
		}
		return os.Getuid(), os.Getgid(), nil
	}
	if r.RunAs != "" {
		u, err := user.Lookup(r.RunAs)
		if err != nil {
			u, err = user.LookupId(r.RunAs)
		}
		if err != nil {
			if n, aerr := strconv.Atoi(r.RunAs); aerr == nil && n > 0 {
				return n, n, nil
			}
			return 65534, 65534, fmt.Errorf("run_as_user %q: no such user", r.RunAs)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if uid == 0 {
			return 65534, 65534, fmt.Errorf("run_as_user %q is root; the workload never runs as root", r.RunAs)
		}
		return uid, nonRootGID(uid, gid), nil
	}
	if st, err := os.Stat(r.Workdir); err == nil {
		if s, ok := st.Sys().(*syscall.Stat_t); ok && s.Uid != 0 {
			return int(s.Uid), nonRootGID(int(s.Uid), int(s.Gid)), nil
		}
	}
	return 65534, 65534, nil
}

// nonRootGID is the workload's group for the workdir owner uid: the
// workdir's group unless that is root's (gid 0 reads root-group files such
// as 0640 root:root ones), then the owner's primary group from the user
// database, else nogroup (65534).
func nonRootGID(uid, gid int) int {
	if gid != 0 {
		return gid
	}
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		if g, err := strconv.Atoi(u.Gid); err == nil && g != 0 {
			return g
		}
	}
	return 65534
}

func lookupUser(name string) (int, error) {
	if n, err := strconv.Atoi(name); err == nil {
		return n, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(u.Uid)
}

// Owner returns the owner of path, or -1.
func Owner(path string) int {
	st, err := os.Stat(path)
	if err != nil {
		return -1
	}
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return int(s.Uid)
	}
	return -1
}

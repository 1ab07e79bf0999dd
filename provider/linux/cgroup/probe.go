//go:build linux

package cgroup

import (
	"os"
	"path/filepath"
	"strings"
)

// Support describes what cgroup control this host offers the calling
// process.
type Support struct {
	Version     int      // 2 or 1; 0 when no cgroup filesystem is usable at all
	Writable    bool     // New can create groups
	Controllers []string // of memory, pids, cpu: those New can set limits with
	Reason      string   // why cgroups (or some controllers) are unusable; "" when fully usable
	Fix         string   // a suggested remedy when Reason is set
}

// Names used inside the cgroup tree.
const supervisorLeaf = "corral-supervisor" // leaf we move into for the nested v2 strategy

// parentName is the directory holding every group. A variable only so
// that this package's tests use their own, out of reach of the sweeps of
// corral runs going on at the same time.
var parentName = "corral"

// v2plan is where and how New creates groups on the unified hierarchy;
// see "Placement on v2" in the package doc.
type v2plan struct {
	parent   string   // directory in which the corral directory lives
	moveTo   string   // nested strategy: leaf to move ourselves into first
	self     int      // the pid moved (the caller; a helper in tests)
	avail    []string // wanted controllers the parent can enable
	writable bool
	reason   string
}

func planV2(h *v2host, selfPid int) v2plan {
	own := h.own
	if isRootCgroup(own) {
		p := v2plan{parent: own, avail: intersect(readControllers(filepath.Join(own, "cgroup.controllers")))}
		if err := canCreateUnder(own); err != nil {
			p.reason = "cannot create cgroups in " + own + ": " + err.Error()
		} else {
			p.writable = true
		}
		return p
	}
	var why []string
	if parent := filepath.Dir(own); strings.HasPrefix(parent, h.mount) && parent != own {
		err := canCreateUnder(parent)
		if err == nil && !isRootCgroup(parent) {
			if pids, rerr := readPids(filepath.Join(parent, "cgroup.procs")); rerr != nil {
				err = rerr
			} else if len(pids) > 0 {
				err = errString("it contains processes (no internal processes rule)")
			}
		}
		if err == nil {
			return v2plan{parent: parent, writable: true,
				avail: intersect(readControllers(filepath.Join(parent, "cgroup.controllers")))}
		}
		why = append(why, "sibling of own cgroup: parent "+parent+": "+err.Error())
	}
	err := canCreateUnder(own)
	if err == nil {
		err = writable(filepath.Join(own, "cgroup.procs"))
	}
	if err == nil {
		pids, rerr := readPids(filepath.Join(own, "cgroup.procs"))
		switch {
		case rerr != nil:
			err = rerr
		case len(pids) > 1 || (len(pids) == 1 && pids[0] != selfPid):
			err = errString("it contains other processes besides this one")
		}
	}
	if err == nil {
		return v2plan{parent: own, moveTo: filepath.Join(own, supervisorLeaf), self: selfPid, writable: true,
			avail: intersect(readControllers(filepath.Join(own, "cgroup.controllers")))}
	}
	why = append(why, "inside own cgroup "+own+": "+err.Error())
	return v2plan{reason: "cgroup v2: no writable place for sandbox cgroups (" + strings.Join(why, "; ") + ")"}
}

type errString string

func (e errString) Error() string { return string(e) }

// canCreateUnder checks (without changing anything) that we may mkdir in dir
// and enable controllers there, and, if dir/corral already exists, use it.
func canCreateUnder(dir string) error {
	for _, p := range []string{dir, filepath.Join(dir, "cgroup.subtree_control")} {
		if err := writable(p); err != nil {
			return fileErr("access", p, err)
		}
	}
	c := filepath.Join(dir, parentName)
	if _, err := os.Stat(c); err == nil {
		for _, p := range []string{c, filepath.Join(c, "cgroup.subtree_control")} {
			if err := writable(p); err != nil {
				return fileErr("access", p, err)
			}
		}
	}
	return nil
}

// intersect keeps the wanted controllers present in list, in wanted order.
func intersect(list []string) []string {
	var out []string
	for _, w := range wanted {
		if contains(list, w) {
			out = append(out, w)
		}
	}
	return out
}

// v1plan lists the hierarchies New creates a directory in.
type v1plan struct {
	hiers    []v1hier // writable hierarchies holding memory, pids, cpu or freezer
	avail    []string // wanted controllers among them
	writable bool
	reason   string
}

func planV1(h *host) v1plan {
	var p v1plan
	var why []string
	for _, hi := range h.v1 {
		err := writable(hi.own)
		if c := filepath.Join(hi.own, parentName); err == nil {
			if _, serr := os.Stat(c); serr == nil {
				err = writable(c)
			}
		}
		if err != nil {
			why = append(why, strings.Join(hi.controllers, ",")+": "+hi.own+": "+errText(err))
			continue
		}
		p.hiers = append(p.hiers, hi)
		for _, w := range wanted {
			if hi.has(w) && !contains(p.avail, w) {
				p.avail = append(p.avail, w)
			}
		}
	}
	p.avail = intersect(p.avail)
	p.writable = len(p.avail) > 0
	if len(h.v1) == 0 {
		p.reason = "cgroup v1: no memory, pids or cpu hierarchy mounted"
	} else if len(why) > 0 {
		p.reason = "cgroup v1: not writable: " + strings.Join(why, "; ")
	}
	return p
}

const (
	fixV2User = "run under a delegated cgroup: systemd-run --user --scope -p Delegate=yes corral run ..."
	fixV2Root = "run from a cgroup whose parent has no processes, e.g. systemd-run --scope -p Delegate=yes corral run ..."
	fixV1     = "cgroup v1 is writable only by root: run as root (or boot with systemd.unified_cgroup_hierarchy=1 for cgroup v2 delegation)"
)

// choice is the outcome of probing: which version New uses, and how.
type choice struct {
	Support
	v2 v2plan
	v1 v1plan
	h  *host
}

func probe() choice {
	h, err := readHost()
	if err != nil {
		return choice{Support: Support{Reason: err.Error(), Fix: "mount /proc"}}
	}
	c := choice{h: h}
	v2ok := false
	if h.v2 != nil {
		c.v2 = planV2(h.v2, os.Getpid())
		v2ok = c.v2.writable
	}
	c.v1 = planV1(h)
	v2n, v1n := len(c.v2.avail), len(c.v1.avail)
	if !c.v1.writable {
		v1n = 0
	}
	switch {
	// Prefer v2 when it offers at least what v1 does (cgroup-v2.rst).
	case v2ok && v2n > 0 && v2n >= v1n:
		c.Support = Support{Version: 2, Writable: true, Controllers: c.v2.avail}
		if missing := missingOf(c.v2.avail); len(missing) > 0 {
			c.Reason = "cgroup v2: controllers not available at " + c.v2.parent + ": " + strings.Join(missing, ", ")
			c.Fix = "delegate them, e.g. systemctl edit user@.service with Delegate=" + strings.Join(wanted, " ")
		}
	case c.v1.writable:
		c.Support = Support{Version: 1, Writable: true, Controllers: c.v1.avail}
		if missing := missingOf(c.v1.avail); len(missing) > 0 {
			c.Reason = "cgroup v1: hierarchies not mounted or not writable: " + strings.Join(missing, ", ")
			c.Fix = "mount the missing cgroup v1 hierarchies"
		}
	case v2ok:
		// v2 works for tracking and killing, but enforces no limits.
		c.Support = Support{Version: 2, Writable: true,
			Reason: "cgroup v2 at " + c.v2.parent + " has none of the memory, pids, cpu controllers available (cgroup.controllers)"}
		if len(h.v1) > 0 {
			c.Reason += "; they are bound to cgroup v1 hierarchies, which are not writable"
			c.Fix = fixV1
		} else {
			c.Fix = "delegate controllers: systemd-run --user --scope -p Delegate=yes corral run ..."
		}
	case h.v2 != nil && (len(h.v1) == 0 || len(intersect(readControllers(filepath.Join(h.v2.own, "cgroup.controllers")))) > 0):
		c.Support = Support{Version: 2, Reason: c.v2.reason, Fix: fixV2Root}
		if os.Geteuid() != 0 {
			c.Fix = fixV2User
		}
		if len(h.v1) > 0 && c.v1.reason != "" {
			c.Reason += "; " + c.v1.reason
		}
	case len(h.v1) > 0:
		// Hybrid host whose controllers are all bound to v1.
		c.Support = Support{Version: 1, Reason: c.v1.reason, Fix: fixV1}
		if c.Reason == "" {
			c.Reason = "cgroup v1: no writable memory, pids or cpu hierarchy"
		}
	default:
		c.Support = Support{Reason: "no cgroup filesystem mounted (" + h.v2err + ")",
			Fix: "mount cgroup2 at /sys/fs/cgroup"}
	}
	return c
}

func missingOf(have []string) []string {
	var out []string
	for _, w := range wanted {
		if !contains(have, w) {
			out = append(out, w)
		}
	}
	return out
}

// Probe reports what cgroup control this host offers the calling process.
// It changes nothing. It prefers the unified hierarchy (v2, mounted at
// /sys/fs/cgroup or, on hybrid hosts, /sys/fs/cgroup/unified) when it offers
// at least as many of the memory, pids and cpu controllers as v1 does; v1
// hierarchies are found through /proc/self/mountinfo and are normally
// writable only by root.
func Probe() Support {
	c := probe()
	s := c.Support
	s.Controllers = append([]string(nil), s.Controllers...)
	return s
}

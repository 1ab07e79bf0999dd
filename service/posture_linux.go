//go:build linux

package service

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/provider/linux"
	"github.com/corral-sandbox/corral/provider/linux/cgroup"
)

// Verdict is one posture check's outcome.
type Verdict string

const (
	VerdictOK           Verdict = "ok"
	VerdictFail         Verdict = "fail"
	VerdictUnverifiable Verdict = "unverifiable" // no evidence outside the workload exists (Landlock)
	VerdictNotRequired  Verdict = "not-required" // the policy made the layer optional and it is not in force
)

// PostureCheck is one fact checked from outside the workload.
type PostureCheck struct {
	Check   string  `json:"check"` // a layer name, or "supervisor", "workload", "identity"
	Verdict Verdict `json:"verdict"`
	Detail  string  `json:"detail"`
}

// Posture checks a running session from outside, in /proc and the cgroup
// files, never trusting what the workload says: the supervisor and the
// workload are the recorded processes (pid and start time); the workload
// runs as the agent uid with no capabilities; its namespaces differ from
// the caller's; NoNewPrivs is 1; Seccomp is 2 (filter); its root is
// corral's tmpfs; it sits in the recorded cgroup whose limit files hold
// the recorded values. A layer the policy requires that is not in force
// fails. ok is false when any check fails.
func Posture(rec *Record, st *Status, req policy.Layers, network policy.NetworkMode) (checks []PostureCheck, ok bool) {
	ok = true
	add := func(check string, v Verdict, format string, args ...any) {
		if v == VerdictFail {
			ok = false
		}
		checks = append(checks, PostureCheck{check, v, fmt.Sprintf(format, args...)})
	}
	// layer records a layer's result: a failure of an optional layer is
	// reported as not-required, not as a failed posture.
	layer := func(l policy.Layer, good bool, okDetail, badDetail string) {
		switch {
		case good:
			add(string(l), VerdictOK, "%s", okDetail)
		case req.Requirement(l) == policy.Optional:
			add(string(l), VerdictNotRequired, "%s (the policy makes %s optional)", badDetail, l)
		default:
			add(string(l), VerdictFail, "%s", badDetail)
		}
	}
	if !st.Supervisor.Alive() {
		add("supervisor", VerdictFail, "supervisor pid %d is not running", st.Supervisor.PID)
		return checks, false
	}
	add("supervisor", VerdictOK, "pid %d running", st.Supervisor.PID)
	wl := st.Workload
	if !wl.Alive() {
		add("workload", VerdictFail, "no workload running (state %s)", st.State)
		return checks, false
	}
	pid := strconv.Itoa(wl.PID)
	add("workload", VerdictOK, "pid %d running since %s", wl.PID, st.Started.Format("2006-01-02T15:04:05Z"))
	fields, err := linux.ProcStatus(wl.PID)
	if err != nil {
		add("workload", VerdictFail, "read /proc/%s/status: %v", pid, err)
		return checks, false
	}
	uids, gids := strings.Fields(fields["Uid"]), strings.Fields(fields["Gid"])
	want := strconv.Itoa(rec.UID)
	groupsOK := rec.Mode == ModeUser || fields["Groups"] == "" // root drops every supplementary group
	if len(uids) == 4 && uids[0] == want && uids[1] == want && uids[2] == want && uids[3] == want && len(gids) > 0 && gids[0] == strconv.Itoa(rec.GID) && groupsOK {
		who := "uid " + want
		if rec.User != "" {
			who = rec.User + " (" + who + ")"
		}
		add("identity", VerdictOK, "runs as %s (/proc/%s/status Uid, Gid)", who, pid)
	} else {
		add("identity", VerdictFail, "Uid %q Gid %q Groups %q, want the agent's %d:%d and no supplementary groups", fields["Uid"], fields["Gid"], fields["Groups"], rec.UID, rec.GID)
	}
	differ, same, err := linux.Namespaces(wl.PID, network != policy.NetworkHost)
	if err != nil {
		same = append(same, err.Error())
	}
	caps := linux.HeldCapabilities(fields)
	nsOK := len(same) == 0 && len(caps) == 0 && fields["NoNewPrivs"] == "1"
	nsBad := fmt.Sprintf("namespaces shared with the host: %v; capabilities held: %v; NoNewPrivs %q", same, caps, fields["NoNewPrivs"])
	layer(policy.LayerNamespaces, nsOK, fmt.Sprintf("own %s namespaces, no capabilities, NoNewPrivs 1 (/proc/%s)", strings.Join(differ, ", "), pid), nsBad)
	layer(policy.LayerSeccomp, fields["Seccomp"] == "2", fmt.Sprintf("Seccomp 2 (filter), %s filters (/proc/%s/status)", fields["Seccomp_filters"], pid),
		fmt.Sprintf("Seccomp is %q in /proc/%s/status, want 2 (filter)", fields["Seccomp"], pid))
	mi, err := os.ReadFile("/proc/" + pid + "/mountinfo")
	rootOK := err == nil && linux.RootIsCorral(string(mi))
	layer(policy.LayerMounts, rootOK, fmt.Sprintf("root is corral's read-only tmpfs, %d mounts (/proc/%s/mountinfo)", strings.Count(string(mi), "\n"), pid),
		fmt.Sprintf("the root of /proc/%s is not corral's tmpfs (%v)", pid, err))
	cgOK, cgDetail := checkCgroup(wl.PID, st)
	layer(policy.LayerCgroups, cgOK, cgDetail, cgDetail)
	ll := "no evidence of Landlock exists outside the process; "
	if s := provider.StateOf(st.Layers, policy.LayerLandlock); s == provider.LayerActive {
		add(string(policy.LayerLandlock), VerdictUnverifiable, "%sinit reported it applied at start", ll)
	} else {
		layer(policy.LayerLandlock, false, "", fmt.Sprintf("%sthe supervisor recorded it as %s", ll, s))
	}
	return checks, ok
}

// checkCgroup checks that pid is in one of the recorded cgroup dirs
// (/proc/PID/cgroup, read from the host's cgroup namespace) and that each
// recorded limit file still holds its value.
func checkCgroup(pid int, st *Status) (bool, string) {
	if len(st.CgroupDir) == 0 {
		return false, "the supervisor recorded no cgroup"
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return false, err.Error()
	}
	var paths []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 && parts[2] != "/" {
			paths = append(paths, parts[2])
		}
	}
	// Every recorded directory (one per v1 hierarchy) must hold pid.
	for _, d := range st.CgroupDir {
		if !slices.ContainsFunc(paths, func(p string) bool { return strings.HasSuffix(d, p) }) {
			return false, fmt.Sprintf("pid %d is not in %s (/proc/%d/cgroup: %s)", pid, d, pid, strings.TrimSpace(string(b)))
		}
	}
	got, err := cgroup.VerifyLimits(st.CgroupLimits)
	if err != nil {
		return false, err.Error()
	}
	var ev []string
	for _, f := range slices.Sorted(maps.Keys(got)) {
		ev = append(ev, f+"="+got[f])
	}
	return true, fmt.Sprintf("in %s; %s (read back)", strings.Join(st.CgroupDir, ", "), strings.Join(ev, " "))
}

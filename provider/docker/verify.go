//go:build linux

package docker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/moby/moby/api/types/container"

	"github.com/corral-sandbox/corral/internal/mountinfo"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// verify checks each layer of the plan from outside the container, on
// corral's init (host pid initPID): its namespaces against this
// process's, its mount table, its /proc status (seccomp, no_new_privs,
// capabilities) and its cgroup files against the limits. A required layer
// that is not in force is a start_failed error naming it.
func verify(planned []provider.LayerStatus, sp *Spec, initPID int, hc *container.HostConfig, hello initHello) ([]provider.LayerStatus, error) {
	var out []provider.LayerStatus
	var firstErr error
	for _, l := range planned {
		st := l
		if st.State == provider.LayerActive {
			detail, err := verifyLayer(l.Layer, sp, initPID, hc, hello)
			if why, ok := hello.Skipped[string(l.Layer)]; ok {
				err = errors.New(why)
			} else if sp.Shim.FaultLayer == string(l.Layer) {
				err = fmt.Errorf("fault injected (%s=%s)", provider.FaultEnv, l.Layer)
			}
			if err != nil {
				if st.Required == policy.Required {
					if firstErr == nil {
						firstErr = provider.LayerError(provider.CodeStartFailed, string(l.Layer), err)
					}
					st.State = provider.LayerUnavailable
				} else if l.Layer == policy.LayerNamespaces || l.Layer == policy.LayerMounts {
					// Every other layer builds on them: never skipped.
					if firstErr == nil {
						firstErr = provider.LayerError(provider.CodeStartFailed, string(l.Layer), err)
					}
					st.State = provider.LayerUnavailable
				} else {
					st.State = provider.LayerSkipped
				}
				st.Detail = err.Error()
			} else {
				st.Detail = detail
			}
		}
		out = append(out, st)
	}
	return out, firstErr
}

func verifyLayer(l policy.Layer, sp *Spec, pid int, hc *container.HostConfig, hello initHello) (string, error) {
	status, err := procStatus(pid)
	if err != nil {
		return "", fmt.Errorf("cannot read /proc/%d/status to verify: %w", pid, err)
	}
	switch l {
	case policy.LayerNamespaces:
		var differ []string
		for _, ns := range []string{"mnt", "pid", "ipc", "uts", "net", "cgroup"} {
			theirs, err1 := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
			ours, err2 := os.Readlink("/proc/self/ns/" + ns)
			if err1 != nil || err2 != nil {
				return "", fmt.Errorf("cannot read namespace %s of pid %d: %w", ns, pid, firstNonNil(err1, err2))
			}
			if theirs == ours {
				if ns == "net" && sp.Network == "host" {
					continue
				}
				return "", fmt.Errorf("the container shares the host's %s namespace", ns)
			}
			differ = append(differ, ns)
		}
		if status["CapEff"] != "0000000000000000" || status["CapBnd"] != "0000000000000000" {
			return "", fmt.Errorf("init has capabilities (CapEff %s, CapBnd %s)", status["CapEff"], status["CapBnd"])
		}
		if uid := strings.Fields(status["Uid"]); len(uid) == 0 || uid[0] != strconv.Itoa(sp.UID) {
			return "", fmt.Errorf("init runs as uid %v, not %d", uid, sp.UID)
		}
		return fmt.Sprintf("%s differ from the host's; uid %d, no capabilities (verified on pid %d)", strings.Join(differ, ", "), sp.UID, pid), nil
	case policy.LayerMounts:
		mi, err := mountinfo.Read(fmt.Sprintf("/proc/%d/mountinfo", pid))
		if err != nil {
			return "", fmt.Errorf("cannot read the container's mount table: %w", err)
		}
		mounts := map[string]string{} // mount point -> per-mount options
		for _, m := range mi {
			mounts[m.Point] = m.Options
		}
		if !hasOpt(mounts["/"], "ro") || !hc.ReadonlyRootfs {
			return "", fmt.Errorf("the container's root is not read-only (%q)", mounts["/"])
		}
		for _, own := range []string{BinPath, RunDir} { // corral's own binary and sockets
			if opts, ok := mounts[own]; !ok || !hasOpt(opts, "ro") {
				return "", fmt.Errorf("%s is not mounted read-only in the container", own)
			}
		}
		for _, b := range sp.Binds {
			opts, ok := mounts[b.Target]
			if !ok {
				return "", fmt.Errorf("%s (%s) is not mounted in the container", b.Target, b.Field)
			}
			if b.ReadOnly && !hasOpt(opts, "ro") {
				return "", fmt.Errorf("%s (%s) is not read-only in the container", b.Target, b.Field)
			}
		}
		detail := fmt.Sprintf("read-only root from %s, %d binds and masks, tmpfs %s (verified in /proc/%d/mountinfo)", sp.Image, len(sp.Binds), tmpfsPaths(sp), pid)
		for _, k := range trustKinds {
			if tr := *sp.trustOf(k); tr != nil {
				if err := verifyTrust(tr, pid); err != nil {
					return "", err
				}
				detail += fmt.Sprintf("; the %s at %s (each resolved in the container's root to its inode)", k.What, strings.Join(tr.Targets, ", "))
			}
		}
		for i := range sp.Credentials {
			if err := verifyTrust(&sp.Credentials[i], pid); err != nil {
				return "", err
			}
			detail += fmt.Sprintf("; a credential's file at %s (resolved in the container's root to its inode)", sp.Credentials[i].Targets[0])
		}
		return detail, nil
	case policy.LayerSeccomp:
		if status["NoNewPrivs"] != "1" {
			return "", fmt.Errorf("no_new_privs is not set on init")
		}
		if status["Seccomp"] != "2" {
			return "", fmt.Errorf("init has no seccomp filter (Seccomp: %q)", status["Seccomp"])
		}
		n, _ := strconv.Atoi(status["Seccomp_filters"])
		if sp.Shim.Seccomp && n < 2 {
			return "", fmt.Errorf("init has %d seccomp filters; docker's profile and corral's filter make 2", n)
		}
		return fmt.Sprintf("moby's default profile + corral's filter (%d filters on pid %d, no_new_privs)", n, pid), nil
	case policy.LayerLandlock:
		if hello.Landlock < 1 {
			return "", fmt.Errorf("Landlock is not usable inside the container (ABI %d)", hello.Landlock)
		}
		return fmt.Sprintf("landlock ABI %d inside; corral's shim restricts every command to the grants before it runs", hello.Landlock), nil
	case policy.LayerCgroups:
		return verifyCgroups(sp, pid)
	}
	return "", fmt.Errorf("unknown layer %s", l)
}

// verifyCgroups reads the limits of pid's cgroups from the host's
// cgroupfs and compares them with the plan (v1: memory.limit_in_bytes,
// pids.max, cpu.cfs_quota_us / cpu.cfs_period_us; v2: memory.max,
// pids.max, cpu.max; Documentation/admin-guide/cgroup-v{1,2}).
func verifyCgroups(sp *Spec, pid int) (string, error) {
	read := func(v1ctl, v1file, v2file string) (string, error) { return cgroupFile(pid, v1ctl, v1file, v2file) }
	var parts []string
	if sp.Memory > 0 {
		v, err := read("memory", "memory.limit_in_bytes", "memory.max")
		if err != nil || v != strconv.FormatInt(sp.Memory, 10) {
			return "", fmt.Errorf("memory limit is %q, not %d (%v)", v, sp.Memory, err)
		}
		parts = append(parts, "memory "+policy.ByteSize(sp.Memory).String())
	}
	if sp.Pids > 0 {
		v, err := read("pids", "pids.max", "pids.max")
		if err != nil || v != strconv.FormatInt(sp.Pids, 10) {
			return "", fmt.Errorf("pids limit is %q, not %d (%v)", v, sp.Pids, err)
		}
		parts = append(parts, "pids "+v)
	}
	if sp.NanoCPUs > 0 {
		q, err := read("cpu", "cpu.cfs_quota_us", "cpu.max")
		if err != nil || q == "-1" || strings.HasPrefix(q, "max") {
			return "", fmt.Errorf("cpu limit is %q (%v)", q, err)
		}
		parts = append(parts, "cpu "+strconv.FormatFloat(float64(sp.NanoCPUs)/1e9, 'f', -1, 64))
	}
	if len(parts) == 0 {
		return "no limits asked", nil
	}
	return strings.Join(parts, ", ") + fmt.Sprintf(" (verified in the cgroup files of pid %d)", pid), nil
}

// cgroupFile reads a file of pid's cgroup from the host's cgroupfs: v1file
// in the v1ctl hierarchy, or v2file in the unified one.
func cgroupFile(pid int, v1ctl, v1file, v2file string) (string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", err
	}
	paths := map[string]string{} // controller ("" for v2) -> path
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			paths[c] = parts[2]
		}
	}
	var p string
	if dir, ok := paths[v1ctl]; ok && v1ctl != "" {
		p = filepath.Join("/sys/fs/cgroup", v1ctl, dir, v1file)
	} else if dir, ok := paths[""]; ok {
		p = filepath.Join("/sys/fs/cgroup", dir, v2file)
	} else {
		return "", fmt.Errorf("no %s cgroup for pid %d", v1ctl, pid)
	}
	b, err := os.ReadFile(p)
	return strings.TrimSpace(string(b)), err
}

// oomKills is the number of processes the kernel's OOM killer has killed
// in pid's memory cgroup ("oom_kill" of memory.oom_control in v1, of
// memory.events in v2); -1 when unknown.
func oomKills(pid int) int {
	text, err := cgroupFile(pid, "memory", "memory.oom_control", "memory.events")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err == nil {
				return n
			}
		}
	}
	return -1
}

// procStatus parses /proc/PID/status into name -> value.
func procStatus(pid int) (map[string]string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m, nil
}

func hasOpt(opts, o string) bool {
	for _, x := range strings.Split(opts, ",") {
		if x == o {
			return true
		}
	}
	return false
}

func tmpfsPaths(sp *Spec) string {
	var ps []string
	for _, t := range sp.Tmpfs {
		ps = append(ps, t.Path)
	}
	return strings.Join(ps, ", ")
}

func firstNonNil(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

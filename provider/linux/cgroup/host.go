//go:build linux

package cgroup

import (
	"bufio"
	"bytes"
	"fmt"
	"github.com/corral-sandbox/corral/internal/mountinfo"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Controllers corral sets limits with. On v1 the freezer hierarchy is also
// used (when mounted) so Kill can stop forks before signalling.
var wanted = []string{"memory", "pids", "cpu"}

// mount is one cgroup filesystem mount from /proc/self/mountinfo.
type mount struct {
	point       string   // mount point
	root        string   // root of the mount within the hierarchy (field 4)
	v2          bool     // fstype cgroup2
	controllers []string // v1: controllers bound to the hierarchy (super options)
}

// procCgroup is one line of /proc/<pid>/cgroup: "hier-ID:controllers:path".
type procCgroup struct {
	id          string
	controllers []string // empty for the v2 line "0::/path"
	path        string
}

// host is what the cgroup filesystems look like to this process.
type host struct {
	v2    *v2host
	v1    []v1hier // one per hierarchy that holds a controller corral uses
	v2err string   // why there is no v2host, for Reason
}

type v2host struct {
	mount string // cgroup2 mount point
	own   string // filesystem path of our own cgroup
}

type v1hier struct {
	controllers []string
	own         string // filesystem path of our own cgroup in this hierarchy
}

func (h v1hier) has(c string) bool { return contains(h.controllers, c) }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// parseMountinfo returns the cgroup and cgroup2 mounts in mountinfo (see
// proc(5): "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw").
func parseMountinfo(data []byte) []mount {
	var out []mount
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := -1
		for i, x := range f {
			if x == "-" && i >= 6 {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 > len(f) {
			continue
		}
		fstype := f[sep+1]
		if fstype != "cgroup" && fstype != "cgroup2" {
			continue
		}
		m := mount{point: mountinfo.Unescape(f[4]), root: mountinfo.Unescape(f[3]), v2: fstype == "cgroup2"}
		if !m.v2 && sep+3 < len(f) {
			for _, o := range strings.Split(f[sep+3], ",") {
				switch {
				case o == "rw" || o == "ro" || o == "noprefix" || o == "clone_children" || o == "xattr" ||
					o == "cpuset_v2_mode" || o == "favordynmods" || o == "nofavordynmods" || o == "none" ||
					strings.HasPrefix(o, "release_agent="):
				default:
					m.controllers = append(m.controllers, o) // includes name=systemd
				}
			}
		}
		out = append(out, m)
	}
	return out
}

// parseProcCgroup parses /proc/<pid>/cgroup (see cgroups(7)).
func parseProcCgroup(data []byte) []procCgroup {
	var out []procCgroup
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		pc := procCgroup{id: parts[0], path: strings.TrimSuffix(parts[2], " (deleted)")}
		if parts[1] != "" {
			pc.controllers = strings.Split(parts[1], ",")
		}
		out = append(out, pc)
	}
	return out
}

// fsPath maps a cgroup path from /proc/self/cgroup onto mount m. A mount's
// root may be a sub-cgroup (bind mounts, containers without a cgroup
// namespace); paths outside it are unreachable through m.
func fsPath(m mount, cgPath string) (string, bool) {
	root := strings.TrimSuffix(m.root, "/")
	if root != "" && cgPath != root && !strings.HasPrefix(cgPath, root+"/") {
		return "", false
	}
	return filepath.Join(m.point, strings.TrimPrefix(cgPath, root)), true
}

// readHost inspects /proc/self/mountinfo and /proc/self/cgroup.
func readHost() (*host, error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	pc, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	return buildHost(parseMountinfo(mi), parseProcCgroup(pc)), nil
}

func buildHost(mounts []mount, cgs []procCgroup) *host {
	h := &host{}
	// v2: the "0::" line; its mount is any cgroup2 mount reaching that path.
	var v2path string
	var haveV2Line bool
	for _, c := range cgs {
		if c.id == "0" && len(c.controllers) == 0 {
			v2path, haveV2Line = c.path, true
		}
	}
	switch {
	case !haveV2Line:
		h.v2err = "no cgroup v2 entry (0::) in /proc/self/cgroup"
	default:
		h.v2err = "no cgroup2 filesystem mounted that contains " + v2path
		for _, m := range mounts {
			if !m.v2 {
				continue
			}
			if p, ok := fsPath(m, v2path); ok {
				if _, err := os.Stat(p); err != nil {
					h.v2err = "own cgroup " + p + " not accessible: " + errText(err)
					continue
				}
				h.v2 = &v2host{mount: m.point, own: p}
				h.v2err = ""
				break
			}
		}
	}
	// v1: one hierarchy per controller we use (cpu and cpuacct may share one).
	seen := map[string]bool{}
	for _, c := range cgs {
		if len(c.controllers) == 0 {
			continue
		}
		use := false
		for _, w := range append(wanted, "freezer") {
			if contains(c.controllers, w) {
				use = true
			}
		}
		if !use {
			continue
		}
		for _, m := range mounts {
			if m.v2 || seen[m.point] || !sameSet(m.controllers, c.controllers) {
				continue
			}
			if p, ok := fsPath(m, c.path); ok {
				if _, err := os.Stat(p); err != nil {
					continue
				}
				seen[m.point] = true
				h.v1 = append(h.v1, v1hier{controllers: c.controllers, own: p})
				break
			}
		}
	}
	return h
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !contains(b, x) {
			return false
		}
	}
	return true
}

// isRootCgroup reports whether dir is a hierarchy's real root cgroup, which
// has no cgroup.type file and is exempt from the no-internal-process rule
// (cgroup-v2.rst, "No Internal Process Constraint"). A cgroup-namespace root
// is not a real root and does have cgroup.type.
func isRootCgroup(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "cgroup.type"))
	return os.IsNotExist(err)
}

func readControllers(file string) []string {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}

func readPids(file string) ([]int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fileErr("read", file, err)
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("cgroup: read %s: bad pid %q", file, f)
		}
		out = append(out, n)
	}
	return out, nil
}

func writable(path string) error { return unix.Access(path, unix.W_OK) }

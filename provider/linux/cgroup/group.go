//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Limits for one group. Zero means no limit for that resource.
type Limits struct {
	MemoryBytes int64   // RAM; swap is limited to 0 alongside it
	Pids        int     // tasks (processes and threads)
	CPUCores    float64 // CPU bandwidth in cores, e.g. 0.5 or 2
}

// CPU bandwidth period in microseconds (sched-bwc.rst; the kernel default).
const cpuPeriod = 100000

// Group is one sandbox cgroup: one directory on v2, one per hierarchy on v1.
type Group struct {
	name    string
	version int
	dirs    map[string]string // controller ("memory", "pids", "cpu", "freezer") -> dir; v2: "" -> dir
	order   []string          // created directories, in creation order
	want    map[string]string // file -> expected content, for Verify
	fd      int

	mu      sync.Mutex
	removed bool
}

// validName reports whether name matches [A-Za-z0-9][A-Za-z0-9._-]{0,200}
// (checked by hand: compiling a regexp costs every corral start-up).
func validName(name string) bool {
	if name == "" || len(name) > 201 {
		return false
	}
	for i, c := range name {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || (c != '.' && c != '_' && c != '-')) {
			return false
		}
	}
	return true
}

// New creates the group name (e.g. "run-<pid>-<rand>", the form Sweep
// recognises) under the corral parent next to the caller's own cgroup and
// writes l. Memory is rounded down to whole pages, as the kernel does. With
// the v2 "nested" placement (see the package doc) it first moves the calling
// process into a leaf of its own cgroup. On
// any failure what was created is removed and the error names the file and
// errno (see FileError).
func New(name string, l Limits) (*Group, error) {
	if !validName(name) {
		return nil, fmt.Errorf("cgroup: invalid group name %q", name)
	}
	if l.MemoryBytes < 0 || l.Pids < 0 || l.CPUCores < 0 || math.IsNaN(l.CPUCores) || math.IsInf(l.CPUCores, 0) {
		return nil, fmt.Errorf("cgroup: negative or invalid limits %+v", l)
	}
	c := probe()
	switch {
	case c.Version == 2 && c.Writable:
		return newV2(c.v2, name, l)
	case c.Version == 1 && c.Writable:
		return newV1(c.v1, name, l)
	}
	return nil, fmt.Errorf("cgroup: unavailable: %s (fix: %s)", c.Reason, c.Fix)
}

func needed(l Limits) []string {
	var out []string
	if l.MemoryBytes > 0 {
		out = append(out, "memory")
	}
	if l.Pids > 0 {
		out = append(out, "pids")
	}
	if l.CPUCores > 0 {
		out = append(out, "cpu")
	}
	return out
}

func pageRound(b int64) int64 {
	ps := int64(os.Getpagesize())
	return b / ps * ps
}

// cpuQuota converts cores to a quota in µs per cpuPeriod. sched-bwc.rst: the
// quota must be at least 1ms.
func cpuQuota(cores float64) (int64, error) {
	q := int64(math.Round(cores * cpuPeriod))
	if q < 1000 {
		return 0, fmt.Errorf("cgroup: CPUCores %g is below the kernel minimum quota of 1ms per %dµs period (0.01 cores)", cores, cpuPeriod)
	}
	return q, nil
}

func (g *Group) expect(dir, file, v string) {
	p := filepath.Join(dir, file)
	g.want[p] = v
}

// newV2 creates the group on the unified hierarchy following plan (see
// v2plan) and writes memory.max, memory.swap.max, pids.max and cpu.max
// (cgroup-v2.rst, "Memory Interface Files", "PID Interface Files", "CPU
// Interface Files").
func newV2(plan v2plan, name string, l Limits) (_ *Group, err error) {
	for _, c := range needed(l) {
		if !contains(plan.avail, c) {
			return nil, fmt.Errorf("cgroup: %s controller not available to enable in %s (cgroup.controllers lists %v)",
				c, plan.parent, plan.avail)
		}
	}
	if plan.moveTo != "" {
		if err := mkdirOK(plan.moveTo); err != nil {
			return nil, err
		}
		if err := writeFile(filepath.Join(plan.moveTo, "cgroup.procs"), strconv.Itoa(plan.self)); err != nil {
			return nil, err
		}
	}
	req := needed(l)
	enable := func(dir string) error {
		on := readControllers(filepath.Join(dir, "cgroup.subtree_control"))
		for _, c := range plan.avail {
			if contains(on, c) {
				continue
			}
			// Controllers nobody asked for are best effort (cpu can refuse
			// while realtime tasks exist, cgroup-v2.rst "CPU").
			if err := writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+"+c); err != nil && contains(req, c) {
				return err
			}
		}
		return nil
	}
	if err := enable(plan.parent); err != nil {
		return nil, err
	}
	top := filepath.Join(plan.parent, parentName)
	if err := mkdirOK(top); err != nil {
		return nil, err
	}
	if err := enable(top); err != nil {
		return nil, err
	}
	dir := filepath.Join(top, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fileErr("mkdir", dir, err)
	}
	g := &Group{name: name, version: 2, dirs: map[string]string{"": dir}, order: []string{dir},
		want: map[string]string{}, fd: -1}
	defer func() {
		if err != nil {
			g.Remove()
		}
	}()
	if l.MemoryBytes > 0 {
		m := pageRound(l.MemoryBytes)
		if m == 0 {
			return nil, fmt.Errorf("cgroup: MemoryBytes %d is less than a page", l.MemoryBytes)
		}
		if err := g.set(dir, "memory.max", strconv.FormatInt(m, 10)); err != nil {
			return nil, err
		}
		// No swap, so the limit means RAM+swap. Absent without swap accounting.
		if _, serr := os.Stat(filepath.Join(dir, "memory.swap.max")); serr == nil {
			if err := g.set(dir, "memory.swap.max", "0"); err != nil {
				return nil, err
			}
		}
	}
	if l.Pids > 0 {
		if err := g.set(dir, "pids.max", strconv.Itoa(l.Pids)); err != nil {
			return nil, err
		}
	}
	if l.CPUCores > 0 {
		q, err := cpuQuota(l.CPUCores)
		if err != nil {
			return nil, err
		}
		if err := g.set(dir, "cpu.max", fmt.Sprintf("%d %d", q, cpuPeriod)); err != nil {
			return nil, err
		}
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fileErr("open", dir, err)
	}
	g.fd = fd
	return g, nil
}

func (g *Group) set(dir, file, v string) error {
	if err := writeFile(filepath.Join(dir, file), v); err != nil {
		return err
	}
	g.expect(dir, file, v)
	return nil
}

func mkdirOK(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fileErr("mkdir", dir, err)
	}
	return nil
}

// newV1 creates <own>/corral/<name> in each usable hierarchy and writes
// memory.limit_in_bytes and memory.memsw.limit_in_bytes
// (cgroup-v1/memory.rst §2.5), pids.max (cgroup-v1/pids.rst) and
// cpu.cfs_period_us/cpu.cfs_quota_us (sched-bwc.rst).
func newV1(plan v1plan, name string, l Limits) (_ *Group, err error) {
	for _, c := range needed(l) {
		if !contains(plan.avail, c) {
			return nil, fmt.Errorf("cgroup: no writable cgroup v1 %s hierarchy (%s)", c, plan.reason)
		}
	}
	g := &Group{name: name, version: 1, dirs: map[string]string{}, want: map[string]string{}, fd: -1}
	defer func() {
		if err != nil {
			g.Remove()
		}
	}()
	for _, h := range plan.hiers {
		top := filepath.Join(h.own, parentName)
		if err := mkdirOK(top); err != nil {
			return nil, err
		}
		dir := filepath.Join(top, name)
		if h.has("cpuset") { // a cpuset co-mounted with a controller we use
			if err := copyCpuset(h.own, top); err != nil {
				return nil, err
			}
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, fileErr("mkdir", dir, err)
		}
		g.order = append(g.order, dir)
		if h.has("cpuset") {
			if err := copyCpuset(top, dir); err != nil {
				return nil, err
			}
		}
		for _, c := range h.controllers {
			g.dirs[c] = dir
		}
	}
	if l.MemoryBytes > 0 {
		dir := g.dirs["memory"]
		m := strconv.FormatInt(pageRound(l.MemoryBytes), 10)
		if pageRound(l.MemoryBytes) == 0 {
			return nil, fmt.Errorf("cgroup: MemoryBytes %d is less than a page", l.MemoryBytes)
		}
		// memory.limit_in_bytes first: memsw must stay >= it (memory.rst §2.5).
		if err := g.set(dir, "memory.limit_in_bytes", m); err != nil {
			return nil, err
		}
		// Absent when swap accounting is off (swapaccount=0).
		if _, serr := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes")); serr == nil {
			if err := g.set(dir, "memory.memsw.limit_in_bytes", m); err != nil {
				return nil, err
			}
		}
	}
	if l.Pids > 0 {
		if err := g.set(g.dirs["pids"], "pids.max", strconv.Itoa(l.Pids)); err != nil {
			return nil, err
		}
	}
	if l.CPUCores > 0 {
		q, err := cpuQuota(l.CPUCores)
		if err != nil {
			return nil, err
		}
		if err := g.set(g.dirs["cpu"], "cpu.cfs_period_us", strconv.Itoa(cpuPeriod)); err != nil {
			return nil, err
		}
		if err := g.set(g.dirs["cpu"], "cpu.cfs_quota_us", strconv.FormatInt(q, 10)); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// copyCpuset gives a new v1 cpuset cgroup its parent's cpus and mems; an
// empty cpuset refuses tasks (cgroup-v1/cpusets.rst).
func copyCpuset(from, to string) error {
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		dst := filepath.Join(to, f)
		if b, err := os.ReadFile(dst); err == nil && strings.TrimSpace(string(b)) != "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(from, f))
		if err != nil {
			return fileErr("read", filepath.Join(from, f), err)
		}
		if err := writeFile(dst, strings.TrimSpace(string(b))); err != nil {
			return err
		}
	}
	return nil
}

// Name returns the group's name.
func (g *Group) Name() string { return g.name }

// Version returns 1 or 2.
func (g *Group) Version() int { return g.version }

// Paths returns every directory of the group (one on v2).
func (g *Group) Paths() []string { return slices.Clone(g.order) }

// Add moves pid (the whole thread group) into the group in every hierarchy
// by writing cgroup.procs.
func (g *Group) Add(pid int) error {
	for _, d := range g.order {
		if err := writeFile(filepath.Join(d, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// FD returns a directory descriptor of the group for
// syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}, which starts the
// child directly in the group (clone3 CLONE_INTO_CGROUP, v2 only). The group
// owns it; it is closed by Remove. ok is false on v1.
func (g *Group) FD() (fd int, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.version != 2 || g.fd < 0 {
		return -1, false
	}
	return g.fd, true
}

// Verify reads the limit files back and returns them as evidence, keyed by
// file name (e.g. "memory.max": "268435456", "cpu.max": "200000 100000").
// It fails if any differs from what New wrote.
func (g *Group) Verify() (map[string]string, error) { return VerifyLimits(g.want) }

// VerifyLimits reads each limit file of want (full path -> value written,
// as Limits returns) and returns what it holds, keyed by file name; it
// fails naming every file that is unreadable or holds something else.
func VerifyLimits(want map[string]string) (map[string]string, error) {
	out := map[string]string{}
	var bad []string
	for _, p := range slices.Sorted(maps.Keys(want)) {
		b, err := os.ReadFile(p)
		if err != nil {
			return out, fileErr("read", p, err)
		}
		got := strings.TrimSpace(string(b))
		out[filepath.Base(p)] = got
		if got != want[p] {
			bad = append(bad, fmt.Sprintf("%s is %q, want %q", p, got, want[p]))
		}
	}
	if len(bad) > 0 {
		return out, fmt.Errorf("cgroup: limits not in effect: %s", strings.Join(bad, "; "))
	}
	return out, nil
}

// Limits returns the limit files New wrote and their values, keyed by
// full path, for checks by other processes (corral service status).
func (g *Group) Limits() map[string]string { return maps.Clone(g.want) }

// Procs lists the processes in the group (union over v1 hierarchies),
// sorted.
func (g *Group) Procs() ([]int, error) {
	seen := map[int]bool{}
	var out []int
	for _, d := range g.order {
		pids, err := readPids(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return nil, err
		}
		for _, p := range pids {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// PeakMemory returns the group's peak memory use in bytes: memory.peak on
// v2 (kernel 5.19+), memory.max_usage_in_bytes on v1.
func (g *Group) PeakMemory() (int64, error) {
	p, err := g.memoryFile("memory.peak", "memory.max_usage_in_bytes")
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, fileErr("read", p, err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cgroup: read %s: %v", p, err)
	}
	return n, nil
}

// memoryFile is the path of a memory controller file: v2name under the
// unified group, or v1name in the memory hierarchy.
func (g *Group) memoryFile(v2name, v1name string) (string, error) {
	if g.version == 2 {
		return filepath.Join(g.dirs[""], v2name), nil
	}
	if d, ok := g.dirs["memory"]; ok {
		return filepath.Join(d, v1name), nil
	}
	return "", fmt.Errorf("cgroup: no memory hierarchy for %s", g.name)
}

// killTimeout bounds how long Kill keeps signalling.
const killTimeout = 2 * time.Second

// Kill SIGKILLs every process in the group and waits until it is empty.
// v2: writes "1" to cgroup.kill (kernel 5.14+, cgroup-v2.rst "Core Interface
// Files"). Otherwise, and on v1, it freezes the group if a freezer is
// available (cgroup.freeze, or cgroup-v1/freezer-subsystem.rst
// freezer.state) so nothing can fork, SIGKILLs every pid in cgroup.procs,
// thaws, and repeats until the group is empty or killTimeout passes.
func (g *Group) Kill() error {
	if pids, err := g.Procs(); err == nil && len(pids) == 0 {
		return nil // nothing to freeze or signal
	}
	deadline := time.Now().Add(killTimeout)
	if g.version == 2 {
		kf := filepath.Join(g.dirs[""], "cgroup.kill")
		if _, err := os.Stat(kf); err == nil {
			if err := writeFile(kf, "1"); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			if g.waitEmpty(time.Now().Add(killTimeout / 2)) {
				return nil
			}
		}
	}
	g.freeze(true)
	if pids, err := g.Procs(); err == nil {
		signalAll(pids)
	}
	g.freeze(false)
	for {
		pids, err := g.Procs()
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup: %s still has processes %v after SIGKILL for %v", g.name, pids, killTimeout)
		}
		signalAll(pids)
		time.Sleep(10 * time.Millisecond)
	}
}

func signalAll(pids []int) {
	for _, p := range pids {
		if p > 0 && p != os.Getpid() {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	}
}

func (g *Group) waitEmpty(deadline time.Time) bool {
	for {
		pids, err := g.Procs()
		if err == nil && len(pids) == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// freeze freezes (on) or thaws the group where a freezer exists, waiting
// briefly for the freeze to complete. Best effort: Kill works without it.
func (g *Group) freeze(on bool) {
	if g.version == 2 {
		d := g.dirs[""]
		v := map[bool]string{true: "1", false: "0"}[on]
		if writeFile(filepath.Join(d, "cgroup.freeze"), v) != nil || !on {
			return
		}
		for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			b, _ := os.ReadFile(filepath.Join(d, "cgroup.events"))
			if strings.Contains(string(b), "frozen 1") {
				return
			}
		}
		return
	}
	d, ok := g.dirs["freezer"]
	if !ok {
		return
	}
	v := map[bool]string{true: "FROZEN", false: "THAWED"}[on]
	if writeFile(filepath.Join(d, "freezer.state"), v) != nil || !on {
		return
	}
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		b, _ := os.ReadFile(filepath.Join(d, "freezer.state"))
		if strings.TrimSpace(string(b)) == "FROZEN" {
			return
		}
	}
}

// Remove kills whatever is left in the group and removes every directory
// New created (retrying EBUSY briefly while exiting tasks drain). The corral
// parent directory is kept. Remove is idempotent.
func (g *Group) Remove() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.removed {
		return nil
	}
	var errs []error
	if pids, err := g.Procs(); err == nil && len(pids) > 0 {
		if err := g.Kill(); err != nil {
			errs = append(errs, err)
		}
	}
	if g.fd >= 0 {
		unix.Close(g.fd)
		g.fd = -1
	}
	for i := len(g.order) - 1; i >= 0; i-- {
		if err := rmdirRetry(g.order[i]); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		g.removed = true
	}
	return errors.Join(errs...)
}

func rmdirRetry(dir string) error {
	end := time.Now().Add(time.Second)
	for {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(end) {
			return fileErr("rmdir", dir, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// OOMKills returns how many processes the kernel's OOM killer has killed in
// the group because it reached its memory limit: the "oom_kill" line of
// memory.events (v2) or memory.oom_control (v1, Linux ≥ 4.13).
func (g *Group) OOMKills() (int, error) {
	p, err := g.memoryFile("memory.events", "memory.oom_control")
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, fileErr("read", p, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("cgroup: %s has no oom_kill count", p)
}

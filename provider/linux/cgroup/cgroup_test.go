//go:build linux

package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// requireWritable skips unless this process can create cgroups, naming why.
func requireWritable(t *testing.T) Support {
	t.Helper()
	s := Probe()
	if !s.Writable {
		t.Skipf("cgroups not writable by this process (version %d): %s; fix: %s", s.Version, s.Reason, s.Fix)
	}
	return s
}

func requireControllers(t *testing.T, s Support, cs ...string) {
	t.Helper()
	for _, c := range cs {
		if !contains(s.Controllers, c) {
			t.Skipf("cgroup v%d has no usable %s controller here: %s", s.Version, c, s.Reason)
		}
	}
}

// testName is a group name Sweep recognises, so groups leaked by a crashed
// test run are swept by the next one.
func testName(t *testing.T) string {
	return fmt.Sprintf("run-%d-test-%s-%08x", os.Getpid(), strings.ToLower(strings.ReplaceAll(t.Name(), "/", "_")), rand.Uint32())
}

// newGroup creates a group removed (and checked gone) at test end.
func newGroup(t *testing.T, name string, l Limits) *Group {
	t.Helper()
	g, err := New(name, l)
	if err != nil {
		t.Fatalf("New(%q, %+v): %v", name, l, err)
	}
	t.Cleanup(func() {
		if err := g.Remove(); err != nil {
			t.Errorf("cleanup Remove: %v", err)
		}
		assertGone(t, g.Paths())
	})
	return g
}

func assertGone(t *testing.T, dirs []string) {
	t.Helper()
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists after Remove (stat err %v)", d, err)
		}
	}
}

// gated is a child started as `sh -c 'read _; exec "$@"'`: it waits on its
// stdin until release, so it can be put into a group before running args.
type gated struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bytes.Buffer
}

func startGated(t *testing.T, g *Group, args ...string) *gated {
	t.Helper()
	cmd := exec.Command("sh", append([]string{"-c", `read _ ; exec "$@"`, "sh"}, args...)...)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait() // an error if wait already reaped it; harmless
	})
	if g != nil {
		if err := g.Add(cmd.Process.Pid); err != nil {
			t.Fatalf("Add(%d): %v", cmd.Process.Pid, err)
		}
	}
	return &gated{cmd: cmd, in: in, out: out}
}

func (c *gated) release(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(c.in, "go\n"); err != nil {
		t.Fatal(err)
	}
	c.in.Close()
}

// waitTimeout waits for the child, failing the test after d.
func (c *gated) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	ch := make(chan error, 1)
	go func() { ch <- c.cmd.Wait() }()
	select {
	case err := <-ch:
		return err
	case <-time.After(d):
		_ = c.cmd.Process.Kill()
		<-ch
		t.Fatalf("child %v did not exit within %v; output: %s", c.cmd.Args, d, c.out)
		return nil
	}
}

func TestParseMountinfo(t *testing.T) {
	mi := `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,release_agent=/x,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
50 23 0:40 /docker/abc /mnt/my\040cg rw - cgroup2 cgroup2 rw
`
	ms := parseMountinfo([]byte(mi))
	if len(ms) != 5 {
		t.Fatalf("got %d mounts: %+v", len(ms), ms)
	}
	if ms[0].point != "/sys/fs/cgroup/cpu,cpuacct" || !sameSet(ms[0].controllers, []string{"cpu", "cpuacct"}) {
		t.Errorf("cpu mount: %+v", ms[0])
	}
	if !sameSet(ms[2].controllers, []string{"name=systemd"}) {
		t.Errorf("systemd mount: %+v", ms[2])
	}
	if !ms[3].v2 || ms[3].point != "/sys/fs/cgroup/unified" {
		t.Errorf("unified mount: %+v", ms[3])
	}
	if ms[4].point != "/mnt/my cg" || ms[4].root != "/docker/abc" {
		t.Errorf("escaped mount: %+v", ms[4])
	}
	if p, ok := fsPath(ms[4], "/docker/abc/x"); !ok || p != "/mnt/my cg/x" {
		t.Errorf("fsPath under sub-root: %q %v", p, ok)
	}
	if _, ok := fsPath(ms[4], "/docker/abcd"); ok {
		t.Error("fsPath accepted a path outside the mount root")
	}
	if p, ok := fsPath(ms[3], "/"); !ok || p != "/sys/fs/cgroup/unified" {
		t.Errorf("fsPath root: %q %v", p, ok)
	}
	cgs := parseProcCgroup([]byte("4:memory:/process_api/id\n2:cpu,cpuacct:/\n0::/user.slice/a.scope (deleted)\n"))
	if len(cgs) != 3 || cgs[0].path != "/process_api/id" || !sameSet(cgs[1].controllers, []string{"cpu", "cpuacct"}) ||
		cgs[2].id != "0" || len(cgs[2].controllers) != 0 || cgs[2].path != "/user.slice/a.scope" {
		t.Errorf("parseProcCgroup: %+v", cgs)
	}
}

func TestProbe(t *testing.T) {
	s := Probe()
	t.Logf("Probe: %+v", s)
	if !s.Writable && (s.Reason == "" || s.Fix == "") {
		t.Errorf("unusable without Reason/Fix: %+v", s)
	}
	if s.Writable && len(s.Controllers) < len(wanted) && s.Reason == "" {
		t.Errorf("missing controllers without Reason: %+v", s)
	}
	if s.Version == 1 && s.Writable && os.Geteuid() != 0 {
		t.Logf("note: v1 writable without root")
	}
}

// expectedEvidence is what Verify must return for l on version v.
func expectedEvidence(g *Group, l Limits) map[string]string {
	q := strconv.Itoa(int(l.CPUCores * cpuPeriod))
	m := strconv.FormatInt(l.MemoryBytes, 10)
	if g.Version() == 2 {
		w := map[string]string{"memory.max": m, "pids.max": strconv.Itoa(l.Pids), "cpu.max": q + " 100000"}
		if _, err := os.Stat(filepath.Join(g.dirs[""], "memory.swap.max")); err == nil {
			w["memory.swap.max"] = "0"
		}
		return w
	}
	w := map[string]string{"memory.limit_in_bytes": m, "pids.max": strconv.Itoa(l.Pids),
		"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": q}
	if _, err := os.Stat(filepath.Join(g.dirs["memory"], "memory.memsw.limit_in_bytes")); err == nil {
		w["memory.memsw.limit_in_bytes"] = m
	}
	return w
}

func TestLimitsVerify(t *testing.T) {
	s := requireWritable(t)
	requireControllers(t, s, wanted...)
	l := Limits{MemoryBytes: 64 << 20, Pids: 16, CPUCores: 0.5}
	g := newGroup(t, testName(t), l)
	got, err := g.Verify()
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	want := expectedEvidence(g, l)
	t.Logf("v%d evidence: %v (dirs %v)", g.Version(), got, g.Paths())
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Verify = %v, want %v", got, want)
	}
	// Independently read each file back.
	for _, d := range g.Paths() {
		for k, v := range want {
			b, err := os.ReadFile(filepath.Join(d, k))
			if err == nil && strings.TrimSpace(string(b)) != v {
				t.Errorf("%s/%s = %q, want %q", d, k, b, v)
			}
		}
	}
	// Tampering is detected.
	for p := range g.want {
		if filepath.Base(p) == "pids.max" {
			if err := writeFile(p, "17"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := g.Verify(); err == nil || !strings.Contains(err.Error(), "pids.max") {
		t.Errorf("Verify after changing pids.max: %v", err)
	}
}

func TestNewErrorsRollBack(t *testing.T) {
	s := requireWritable(t)
	requireControllers(t, s, "pids")
	name := testName(t)
	// pids.max accepts at most PIDS_MAX (pid_max limit, 4M); larger is EINVAL.
	g, err := New(name, Limits{Pids: 1 << 30})
	if err == nil {
		g.Remove()
		t.Fatal("New with Pids 1<<30 succeeded")
	}
	t.Logf("error: %v", err)
	if !strings.Contains(err.Error(), "pids.max") || !strings.Contains(err.Error(), "EINVAL") {
		t.Errorf("error does not name the file and errno: %v", err)
	}
	if !errors.Is(err, syscall.EINVAL) {
		t.Errorf("error does not unwrap to EINVAL: %v", err)
	}
	c := probe()
	var dirs []string
	if c.Version == 2 {
		dirs = append(dirs, filepath.Join(c.v2.parent, parentName, name))
	} else {
		for _, h := range c.v1.hiers {
			dirs = append(dirs, filepath.Join(h.own, parentName, name))
		}
	}
	assertGone(t, dirs)

	if _, err := New(name, Limits{CPUCores: 0.001}); err == nil || !strings.Contains(err.Error(), "1ms") {
		t.Errorf("CPUCores 0.001: %v", err)
	}
	assertGone(t, dirs)
	for _, bad := range []string{"", "../x", "a/b", ".hidden"} {
		if _, err := New(bad, Limits{}); err == nil {
			t.Errorf("New(%q) accepted", bad)
		}
	}
}

func TestAddProcs(t *testing.T) {
	requireWritable(t)
	g := newGroup(t, testName(t), Limits{})
	c := startGated(t, g, "sleep", "30")
	pid := c.cmd.Process.Pid
	procs, err := g.Procs()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(procs, pid) {
		t.Fatalf("Procs = %v, missing %d", procs, pid)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	suffix := "/" + parentName + "/" + g.Name()
	n := 0
	for _, pc := range parseProcCgroup(b) {
		if strings.HasSuffix(pc.path, suffix) {
			n++
		}
	}
	if n != len(g.Paths()) {
		t.Errorf("/proc/%d/cgroup has %d entries ending in %s, want %d:\n%s", pid, n, suffix, len(g.Paths()), b)
	}
	c.release(t)
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := c.wait(t, 5*time.Second); err == nil {
		t.Error("sleep exited cleanly after Kill")
	}
}

func TestPidsLimit(t *testing.T) {
	s := requireWritable(t)
	requireControllers(t, s, "pids")
	g := newGroup(t, testName(t), Limits{Pids: 16})
	c := startGated(t, g, "sh", "-c", `for i in $(seq 40); do sleep 5 & done; wait`)
	c.release(t)
	// Sample while the sleeps run.
	maxSeen := 0
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		p, err := g.Procs()
		if err != nil {
			t.Fatal(err)
		}
		maxSeen = max(maxSeen, len(p))
	}
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	c.wait(t, 5*time.Second)
	out := c.out.String()
	t.Logf("max procs seen %d; output: %.300s", maxSeen, out)
	if maxSeen > 16 {
		t.Errorf("saw %d processes with pids.max 16", maxSeen)
	}
	if maxSeen < 10 {
		t.Errorf("saw only %d processes; the test did not exercise the limit", maxSeen)
	}
	if !strings.Contains(out, "fork") && !strings.Contains(out, "Resource temporarily unavailable") {
		t.Errorf("no fork failure reported by sh: %q", out)
	}
}

func TestMemoryOOM(t *testing.T) {
	s := requireWritable(t)
	requireControllers(t, s, "memory")
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not in PATH; needed to allocate memory")
	}
	g := newGroup(t, testName(t), Limits{MemoryBytes: 64 << 20})
	c := startGated(t, g, py, "-c", "b = bytearray(200*1024*1024); b[::4096] = b'x' * len(b[::4096]); print('survived')")
	c.release(t)
	err = c.wait(t, 30*time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("python exited with %v, want SIGKILL; output %q", err, c.out)
	}
	ws := ee.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("python: %v (output %q), want killed by SIGKILL (OOM)", err, c.out)
	}
	peak, err := g.PeakMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("OOM-killed as expected; peak %d bytes", peak)
	if peak > 64<<20 || peak < 32<<20 {
		t.Errorf("peak memory %d, want near the 64MiB limit", peak)
	}
	if n, err := g.OOMKills(); err != nil || n < 1 {
		t.Errorf("OOMKills = %d, %v; want at least 1 after an OOM kill", n, err)
	}
}

func TestKillRemove(t *testing.T) {
	requireWritable(t)
	g, err := New(testName(t), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Remove() })
	c := startGated(t, g, "sh", "-c", `sleep 30 & sleep 30 & (sleep 30 &) ; wait`)
	c.release(t)
	for end := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		p, _ := g.Procs()
		if len(p) >= 4 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("processes did not start: %v", p)
		}
	}
	if err := g.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if p, err := g.Procs(); err != nil || len(p) != 0 {
		t.Fatalf("after Kill Procs = %v, %v", p, err)
	}
	c.wait(t, 5*time.Second)
	paths := g.Paths()
	if err := g.Remove(); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	assertGone(t, paths)
	if err := g.Remove(); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}

// TestRemoveKills: Remove of a populated group kills its processes first.
func TestRemoveKills(t *testing.T) {
	requireWritable(t)
	g, err := New(testName(t), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Remove() })
	c := startGated(t, g, "sleep", "30")
	c.release(t)
	if err := g.Remove(); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	assertGone(t, g.Paths())
	if err := c.wait(t, 5*time.Second); err == nil {
		t.Error("sleep survived Remove")
	}
}

// deadPid returns the pid of a process that has exited and been reaped.
func deadPid(t *testing.T) int {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

func TestSweep(t *testing.T) {
	requireWritable(t)
	dp := deadPid(t)
	stale, err := New(fmt.Sprintf("run-%d-%08x", dp, rand.Uint32()), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stale.Remove() })
	live := newGroup(t, fmt.Sprintf("run-%d-%08x", os.Getpid(), rand.Uint32()), Limits{})
	// A leftover workload process in the stale group is killed by Sweep.
	c := startGated(t, stale, "sleep", "30")
	c.release(t)

	removed, err := Sweep()
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	t.Logf("Sweep removed %v", removed)
	for _, p := range stale.Paths() {
		if !slices.Contains(removed, p) {
			t.Errorf("Sweep did not report %s", p)
		}
	}
	assertGone(t, stale.Paths())
	for _, p := range live.Paths() {
		if slices.Contains(removed, p) {
			t.Errorf("Sweep removed live group %s", p)
		}
		if _, err := os.Stat(p); err != nil {
			t.Errorf("live group dir: %v", err)
		}
	}
	if err := c.wait(t, 5*time.Second); err == nil {
		t.Error("process in swept group survived")
	}
}

func TestSupervisorAlivePidReuse(t *testing.T) {
	dir, err := os.MkdirTemp("", "corral-cgroup-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(dir, old, old); err != nil {
		t.Fatal(err)
	}
	// Our process started after a directory "created" an hour ago: a reused pid.
	if supervisorAlive(os.Getpid(), dir) {
		t.Error("pid that started after the group was created counted as its supervisor")
	}
	if !supervisorAlive(os.Getpid(), t.TempDir()) {
		t.Error("live pid that predates the group counted as dead")
	}
	if supervisorAlive(deadPid(t), dir) {
		t.Error("dead pid counted as alive")
	}
}

// TestProbeUnprivileged re-runs TestProbe's check as uid 65534 (when we are
// root): an unprivileged caller must get a Reason and a Fix unless the host
// delegates cgroups to it.
func TestProbeUnprivileged(t *testing.T) {
	if os.Getenv("CORRAL_CGROUP_PROBE_CHILD") == "1" {
		s := Probe()
		fmt.Printf("PROBE %d %v %q %q\n", s.Version, s.Writable, s.Reason, s.Fix)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to drop to uid 65534")
	}
	// The go build directory is private to root: copy the binary out.
	dir, err := os.MkdirTemp("", "corral-cgroup-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "cgroup.test")
	data, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestProbeUnprivileged$")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CORRAL_CGROUP_PROBE_CHILD=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil && !strings.Contains(string(out), "PROBE") {
		t.Skipf("cannot run the test binary as uid 65534 (%v): %s", err, out)
	}
	t.Logf("%s", out)
	line := string(out)[strings.Index(string(out), "PROBE"):]
	if strings.Contains(line, " true ") {
		t.Skip("cgroups are delegated to uid 65534 here")
	}
	var v int
	var w bool
	var reason, fix string
	if _, err := fmt.Sscanf(line, "PROBE %d %t %q %q", &v, &w, &reason, &fix); err != nil {
		t.Fatalf("parse %q: %v", line, err)
	}
	if reason == "" || fix == "" {
		t.Errorf("unprivileged Probe without Reason/Fix: %s", line)
	}
}

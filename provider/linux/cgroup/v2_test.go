//go:build linux

package cgroup

import (
	"fmt"
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

// These tests drive the cgroup v2 code directly on the unified hierarchy,
// even where New would pick v1 (hybrid hosts whose controllers are all bound
// to v1): creating, CLONE_INTO_CGROUP, cgroup.kill, freezing and the
// placement strategies need no controllers.

func v2Host(t *testing.T) *v2host {
	t.Helper()
	h, err := readHost()
	if err != nil {
		t.Fatal(err)
	}
	if h.v2 == nil {
		t.Skipf("no cgroup v2 hierarchy: %s", h.v2err)
	}
	return h.v2
}

func v2Plan(t *testing.T) v2plan {
	t.Helper()
	p := planV2(v2Host(t), os.Getpid())
	if !p.writable {
		t.Skipf("cgroup v2 not writable by this process: %s", p.reason)
	}
	if p.moveTo != "" {
		t.Skipf("cgroup v2 would need to move the test process into %s; not done in tests", p.moveTo)
	}
	return p
}

func newV2Group(t *testing.T, p v2plan, l Limits) *Group {
	t.Helper()
	g, err := newV2(p, testName(t), l)
	if err != nil {
		t.Fatalf("newV2: %v", err)
	}
	t.Cleanup(func() {
		if err := g.Remove(); err != nil {
			t.Errorf("cleanup Remove: %v", err)
		}
		assertGone(t, g.Paths())
	})
	return g
}

func v2PathOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, pc := range parseProcCgroup(b) {
		if pc.id == "0" {
			return pc.path
		}
	}
	t.Fatalf("no 0:: line in /proc/%d/cgroup: %s", pid, b)
	return ""
}

func TestV2CloneIntoCgroupKillRemove(t *testing.T) {
	p := v2Plan(t)
	g := newV2Group(t, p, Limits{})
	fd, ok := g.FD()
	if !ok {
		t.Fatal("FD() not ok on v2")
	}
	cmd := exec.Command("sh", "-c", "sleep 30 & sleep 30 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start with CLONE_INTO_CGROUP: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if got := v2PathOf(t, cmd.Process.Pid); !strings.HasSuffix(got, "/"+parentName+"/"+g.Name()) {
		t.Errorf("child cgroup %q, want .../%s/%s", got, parentName, g.Name())
	}
	for end := time.Now().Add(3 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		procs, err := g.Procs()
		if err != nil {
			t.Fatal(err)
		}
		if len(procs) == 3 && slices.Contains(procs, cmd.Process.Pid) {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("Procs = %v, want sh %d and two sleeps", procs, cmd.Process.Pid)
		}
	}
	// The v2 freezer (used when cgroup.kill is missing) works.
	g.freeze(true)
	if b, _ := os.ReadFile(filepath.Join(g.dirs[""], "cgroup.events")); !strings.Contains(string(b), "frozen 1") {
		t.Errorf("after freeze cgroup.events = %q", b)
	}
	g.freeze(false)
	if _, err := os.Stat(filepath.Join(g.dirs[""], "cgroup.kill")); err != nil {
		t.Logf("no cgroup.kill (kernel < 5.14): Kill uses freeze+SIGKILL")
	}
	if err := g.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if procs, _ := g.Procs(); len(procs) != 0 {
		t.Fatalf("after Kill Procs = %v", procs)
	}
	err := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("sh: %v, want SIGKILL", err)
	}
	paths := g.Paths()
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	assertGone(t, paths)
	if _, ok := g.FD(); ok {
		t.Error("FD still ok after Remove")
	}
}

func TestV2MissingControllerIsAnError(t *testing.T) {
	p := v2Plan(t)
	if contains(p.avail, "memory") {
		t.Skip("memory controller available on cgroup v2 here")
	}
	name := testName(t)
	_, err := newV2(p, name, Limits{MemoryBytes: 64 << 20})
	if err == nil || !strings.Contains(err.Error(), "memory controller not available") {
		t.Fatalf("newV2 with memory limit and no memory controller: %v", err)
	}
	assertGone(t, []string{filepath.Join(p.parent, parentName, name)})
	// Forcing it anyway fails writing cgroup.subtree_control, naming file and errno.
	p.avail = []string{"memory"}
	_, err = newV2(p, name, Limits{MemoryBytes: 64 << 20})
	t.Logf("forced: %v", err)
	if err == nil || !strings.Contains(err.Error(), "cgroup.subtree_control") || !strings.Contains(err.Error(), "(") {
		t.Fatalf("forced memory on v2 without controller: %v", err)
	}
	assertGone(t, []string{filepath.Join(p.parent, parentName, name)})
}

func TestV2Limits(t *testing.T) {
	p := v2Plan(t)
	for _, c := range wanted {
		if !contains(p.avail, c) {
			t.Skipf("cgroup v2 at %s lacks the %s controller (cgroup.controllers offers %v); on hybrid hosts the controllers are bound to v1 hierarchies", p.parent, c, p.avail)
		}
	}
	l := Limits{MemoryBytes: 64 << 20, Pids: 16, CPUCores: 0.5}
	g := newV2Group(t, p, l)
	got, err := g.Verify()
	if err != nil {
		t.Fatal(err)
	}
	want := expectedEvidence(g, l)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Verify = %v, want %v", got, want)
	}
}

// TestV2Placement builds, on the real unified hierarchy,
//
//	T/            holds helper A  (so T is not usable as a sibling parent)
//	T/own/        holds helper B only  (B plays the supervisor)
//
// and checks the nested strategy moves B into T/own/corral-supervisor and
// creates T/own/corral/<name>, after which B's next plan is the sibling one.
func TestV2Placement(t *testing.T) {
	h := v2Host(t)
	if err := canCreateUnder(h.own); err != nil {
		t.Skipf("cannot create test cgroups under %s: %v", h.own, err)
	}
	top := filepath.Join(h.own, fmt.Sprintf("corral-test-%d-%08x", os.Getpid(), rand.Uint32()))
	own := filepath.Join(top, "own")
	var dirs []string
	var helpers []*exec.Cmd
	t.Cleanup(func() {
		for _, c := range helpers {
			c.Process.Kill()
			c.Wait()
		}
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := rmdirRetry(dirs[i]); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	mk := func(d string) {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	helper := func(dir string) int {
		c := exec.Command("sleep", "30")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		helpers = append(helpers, c)
		if err := writeFile(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(c.Process.Pid)); err != nil {
			t.Fatal(err)
		}
		return c.Process.Pid
	}
	mk(top)
	mk(own)
	helper(top)
	b := helper(own)

	p := planV2(&v2host{mount: h.mount, own: own}, b)
	if !p.writable || p.parent != own || p.moveTo != filepath.Join(own, supervisorLeaf) {
		t.Fatalf("plan = %+v, want nested under %s", p, own)
	}
	// A second process in own makes it unusable.
	c := helper(own)
	if q := planV2(&v2host{mount: h.mount, own: own}, b); q.writable || !strings.Contains(q.reason, "other processes") {
		t.Errorf("plan with two processes in own = %+v", q)
	}
	helpers[len(helpers)-1].Process.Kill()
	helpers[len(helpers)-1].Wait()
	for end := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		pids, _ := readPids(filepath.Join(own, "cgroup.procs"))
		if !slices.Contains(pids, c) {
			break
		}
		if time.Now().After(end) {
			t.Fatal("helper did not leave")
		}
	}

	name := testName(t)
	g, err := newV2(p, name, Limits{})
	dirs = append(dirs, filepath.Join(own, supervisorLeaf), filepath.Join(own, parentName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Remove() })
	if got, want := v2PathOf(t, b), strings.TrimPrefix(filepath.Join(own, supervisorLeaf), h.mount); !strings.HasSuffix(got, want) {
		t.Errorf("supervisor now in %q, want suffix %q", got, want)
	}
	if want := filepath.Join(own, parentName, name); g.Paths()[0] != want {
		t.Errorf("group at %v, want %s", g.Paths(), want)
	}
	q := planV2(&v2host{mount: h.mount, own: filepath.Join(own, supervisorLeaf)}, b)
	if !q.writable || q.parent != own || q.moveTo != "" {
		t.Errorf("plan after the move = %+v, want sibling parent %s", q, own)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
}

func TestV2Sweep(t *testing.T) {
	p := v2Plan(t)
	stale, err := newV2(p, fmt.Sprintf("run-%d-%08x", deadPid(t), rand.Uint32()), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stale.Remove() })
	live := newV2Group(t, p, Limits{})
	fd, _ := stale.FD()
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	removed, err := sweepParents([]string{filepath.Join(p.parent, parentName)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, stale.Paths()) {
		t.Errorf("removed %v, want %v", removed, stale.Paths())
	}
	assertGone(t, stale.Paths())
	if _, err := os.Stat(live.Paths()[0]); err != nil {
		t.Errorf("live group: %v", err)
	}
	if err := cmd.Wait(); err == nil {
		t.Error("process in swept v2 group survived")
	}
}

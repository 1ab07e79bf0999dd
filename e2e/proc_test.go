//go:build linux

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// P04: background, setsid, nohup and double-forked descendants carry the
// same restrictions and are all gone when the run ends.
func TestP04_ChildProcesses(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		s := uniqueSleep(3171)
		wd := mkdir(t, id, "p04")
		pol := writePolicy(t, id, policy{})
		script := fmt.Sprintf(`
sleep %[1]s & setsid sleep %[1]s & nohup sleep %[1]s >/dev/null 2>&1 &
(sh -c "sleep %[1]s &")
(sh -c "sh -c '%[2]s status | sed s/^/grandchild-/' &"; wait)
setsid sh -c '%[2]s status | sed s/^/setsid-/'
sleep 0.3
echo started`, s, probeBin)
		res := corral(t, run{id: id, policy: pol, workdir: wd, args: sh(script), timeout: 30 * time.Second})
		assertCode(t, res, 0)
		if !strings.Contains(res.stdout, "started") {
			t.Fatalf("script did not run\n%s", res)
		}
		for _, pre := range []string{"grandchild-", "setsid-"} {
			if v, _ := lineValue(res.stdout, pre+"Seccomp"); v != "2" {
				t.Errorf("%s descendant: Seccomp %q, want 2\n%s", pre, v, res)
			}
			if v, _ := lineValue(res.stdout, pre+"NoNewPrivs"); v != "1" {
				t.Errorf("%s descendant: NoNewPrivs %q, want 1\n%s", pre, v, res)
			}
			if v, _ := lineValue(res.stdout, pre+"CapEff"); strings.Trim(v, "0") != "" || v == "" {
				t.Errorf("%s descendant: CapEff %q, want none\n%s", pre, v, res)
			}
		}
		waitNoProcs(t, "sleep "+s, 5*time.Second)
	})
}

// P06: the caller's secrets (environment, the supervisor's command line)
// are invisible inside; only sandbox pids are visible.
func TestP06_Secrets(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		tok, tok2, tok3 := token(), token(), token()
		wd := mkdir(t, id, "p06")
		pol := writePolicy(t, id, policy{})
		// tok3 is only in the supervisor's argv (the audit file name).
		audit := filepath.Join(mkdir(t, id, "p06-audit"), "audit-"+tok3+".jsonl")
		script := `env; echo; cat /proc/*/environ; echo; cat /proc/*/cmdline; echo; ` +
			`if command -v ps >/dev/null; then ps eww; ps -ef; fi; echo; echo PIDS $(ls /proc | grep -E '^[0-9]+$' | tr '\n' ' '); ` +
			`echo INIT $(tr '\0' ' ' < /proc/1/cmdline)`
		res := corral(t, run{id: id, policy: pol, workdir: wd, flags: []string{"--audit", audit},
			env:  []string{"CANARY_TOKEN=" + tok, "AWS_SECRET_ACCESS_KEY=" + tok2, "LC_CANARY=visible-by-policy"},
			args: sh(script)})
		assertCode(t, res, 0)
		if !strings.Contains(res.stdout, "LC_CANARY=visible-by-policy") {
			t.Errorf("the env allowlist (LC_*) did not pass LC_CANARY: the check cannot see env\n%s", res)
		}
		assertNoToken(t, res.combined(), tok, tok2, tok3)
		pids, ok := lineValue(strings.ReplaceAll(res.stdout, "PIDS ", "PIDS: "), "PIDS")
		if !ok {
			t.Fatalf("no PIDS line\n%s", res)
		}
		var n []int
		for _, f := range strings.Fields(pids) {
			p, _ := strconv.Atoi(f)
			n = append(n, p)
			if p > 100 {
				t.Errorf("pid %d visible inside: not a sandbox pid (all: %s)", p, pids)
			}
			if p == res.pid {
				t.Errorf("the supervisor's host pid %d is visible inside", p)
			}
		}
		if len(n) == 0 || n[0] != 1 {
			t.Errorf("pid 1 not visible inside: %s", pids)
		}
		if init, _ := lineValue(strings.ReplaceAll(res.stdout, "INIT ", "INIT: "), "INIT"); strings.Contains(init, " run ") || strings.Contains(init, "--audit") {
			t.Errorf("pid 1 inside is the supervisor: %q", init)
		}
	})
}

// P13: procfs shows only the sandbox; /proc/1 leaks nothing; kernel
// tunables are not writable.
func TestP13_Procfs(t *testing.T) {
	corePattern, err := os.ReadFile("/proc/sys/kernel/core_pattern")
	if err != nil {
		t.Fatal(err)
	}
	shadow, _ := os.ReadFile("/etc/shadow")
	eachIdent(t, func(t *testing.T, id *ident) {
		tok := token()
		wd := mkdir(t, id, "p13")
		pol := writePolicy(t, id, policy{})
		script := fmt.Sprintf(`
echo PIDS: $(ls /proc | grep -E '^[0-9]+$' | tr '\n' ' ')
echo ROOT1: $(readlink /proc/1/root 2>&1)
echo ROOTSELF: $(readlink /proc/self/root)
cat /proc/1/root/etc/shadow /proc/1/root/etc/hostname
cat /proc/1/environ | tr '\0' '\n'
ls /proc/1/fd /proc/1/cwd/
head -c 64 /proc/1/mem
if printf '%%s\n' '%s' > /proc/sys/kernel/core_pattern; then echo CORE=ok; else echo CORE=fail; fi
if true > /proc/sysrq-trigger; then echo SYSRQ=ok; else echo SYSRQ=fail; fi
if echo 1 > /proc/sys/kernel/sysrq; then echo SYSCTL=ok; else echo SYSCTL=fail; fi
if true > /proc/sys/vm/drop_caches; then echo DROP=ok; else echo DROP=fail; fi
cat /proc/kcore | head -c 16 | od -c | head -2
echo done`, strings.TrimSpace(string(corePattern)))
		res := corral(t, run{id: id, policy: pol, workdir: wd, env: []string{"CANARY_TOKEN=" + tok}, args: sh(script)})
		if !strings.Contains(res.stdout, "done") {
			t.Fatalf("script did not finish\n%s", res)
		}
		assertNoToken(t, res.combined(), tok)
		pids, _ := lineValue(res.stdout, "PIDS")
		for _, f := range strings.Fields(pids) {
			if p, _ := strconv.Atoi(f); p > 100 {
				t.Errorf("pid %d visible in the sandbox's /proc: %s", p, pids)
			}
		}
		if !strings.HasPrefix(pids, "1 ") {
			t.Errorf("pid 1 not in the sandbox's /proc: %q", pids)
		}
		if v, _ := lineValue(res.stdout, "ROOT1"); v != "/" && v != "" {
			t.Errorf("readlink /proc/1/root = %q, want / (or unreadable)", v)
		}
		if v, _ := lineValue(res.stdout, "ROOTSELF"); v != "/" {
			t.Errorf("readlink /proc/self/root = %q, want /", v)
		}
		for _, want := range []string{"CORE=fail", "SYSRQ=fail", "SYSCTL=fail", "DROP=fail"} {
			if !strings.Contains(res.stdout, want) {
				t.Errorf("stdout lacks %q\n%s", want, res)
			}
		}
		if len(shadow) > 0 {
			for _, l := range strings.Split(string(shadow), "\n") {
				if f := strings.Split(l, ":"); len(f) > 2 && len(f[1]) > 4 && strings.Contains(res.stdout, f[1]) {
					t.Errorf("a host /etc/shadow hash is visible inside")
				}
			}
		}
		if now, _ := os.ReadFile("/proc/sys/kernel/core_pattern"); !bytes.Equal(now, corePattern) {
			t.Errorf("host core_pattern changed: %q -> %q", corePattern, now)
		}
	})
}

// P09: SIGINT, SIGTERM, SIGKILL of corral and timeout expiry leave no
// workload process and no cgroup behind.
func TestP09_Cleanup(t *testing.T) {
	sigs := []struct {
		name string
		sig  syscall.Signal
		want []int // acceptable exit statuses (-1: killed by the signal)
	}{
		{"SIGINT", syscall.SIGINT, []int{130}},
		{"SIGTERM", syscall.SIGTERM, []int{143}},
		{"SIGKILL", syscall.SIGKILL, []int{-1}},
	}
	eachIdent(t, func(t *testing.T, id *ident) {
		pol := writePolicy(t, id, policy{})
		for _, sg := range sigs {
			t.Run(sg.name, func(t *testing.T) {
				s := uniqueSleep(3172)
				wd := mkdir(t, id, "p09")
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				cmd := run{id: id, policy: pol, workdir: wd, args: []string{"sleep", s}}.command(ctx)
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				deadline := time.Now().Add(10 * time.Second)
				for len(hostProcsWith("sleep "+s)) == 0 {
					if time.Now().After(deadline) {
						_ = cmd.Process.Kill()
						_ = cmd.Wait()
						t.Fatalf("the workload never started\n%s", out.String())
					}
					time.Sleep(50 * time.Millisecond)
				}
				pid := cmd.Process.Pid
				if err := cmd.Process.Signal(sg.sig); err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() { done <- cmd.Wait() }()
				var err error
				select {
				case err = <-done:
				case <-time.After(10 * time.Second):
					_ = cmd.Process.Kill()
					<-done
					waitNoProcs(t, "sleep "+s, 5*time.Second)
					t.Fatalf("corral did not exit within 10s of %s (the workload %q was not stopped); killed it\n%s", sg.name, "sleep "+s, out.String())
				}
				code := 0
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					code = ee.ExitCode()
				} else if err != nil {
					t.Fatalf("wait: %v", err)
				}
				ok := false
				for _, w := range sg.want {
					ok = ok || code == w
				}
				if !ok {
					t.Errorf("after %s corral exited %d, want %v\n%s", sg.name, code, sg.want, out.String())
				}
				waitNoProcs(t, "sleep "+s, 5*time.Second)
				if id.isRoot() {
					if sg.sig == syscall.SIGKILL {
						// The next run's sweep removes what the killed run left.
						r := corral(t, run{id: id, policy: pol, workdir: wd, args: []string{"true"}})
						assertCode(t, r, 0)
					}
					if dirs := corralCgroupDirs(pid); len(dirs) > 0 {
						t.Errorf("cgroup directories of run %d left behind: %v", pid, dirs)
					}
				}
			})
		}
		t.Run("timeout", func(t *testing.T) {
			s := uniqueSleep(3173)
			wd := mkdir(t, id, "p09t")
			p := writePolicy(t, id, policy{Limits: "timeout: 1s"})
			t0 := time.Now()
			res := corral(t, run{id: id, policy: p, workdir: wd, args: sh("sleep " + s + " & sleep " + s)})
			assertCode(t, res, 124)
			if d := time.Since(t0); d > 10*time.Second {
				t.Errorf("a 1s timeout took %s", d)
			}
			waitNoProcs(t, "sleep "+s, 5*time.Second)
			if id.isRoot() {
				if dirs := corralCgroupDirs(res.pid); len(dirs) > 0 {
					t.Errorf("cgroup directories of run %d left behind: %v", res.pid, dirs)
				}
			}
		})
	})
}

// P12: with cgroups (root only here), a process flood, a memory hog and an
// fd flood stay inside the limits and everything is reaped.
func TestP12_ResourceExhaustion(t *testing.T) {
	id := rootIdent(t)
	pol := writePolicy(t, id, policy{Limits: "memory: 128M, pids: 64, nofile: 1024, timeout: 20s"})
	t.Run("pids", func(t *testing.T) {
		t.Parallel()
		s := uniqueSleep(3174)
		wd := mkdir(t, id, "p12")
		// The script spawns 500 sleeps without waiting, then execs (no
		// fork) a last one; the test counts them from the host meanwhile.
		script := fmt.Sprintf(`(i=0; while [ $i -lt 500 ]; do sleep %[1]s & i=$((i+1)); done) 2>/dev/null; echo spawned; exec sleep %[1]s`, s)
		stop := make(chan struct{})
		maxc := make(chan int)
		go func() {
			m := 0
			for {
				if n := len(hostProcsWith("sleep " + s)); n > m {
					m = n
				}
				select {
				case <-stop:
					maxc <- m
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
		p := writePolicy(t, id, policy{Limits: "memory: 128M, pids: 64, nofile: 1024, timeout: 4s"})
		res := corral(t, run{id: id, policy: p, workdir: wd, args: sh(script), timeout: 40 * time.Second})
		close(stop)
		n := <-maxc
		assertCode(t, res, 124)
		if n > 64 || n < 10 {
			t.Errorf("at most %d workload processes seen on the host, want between 10 and the limit 64\n%s", n, res)
		}
		if err := exec.Command("true").Run(); err != nil {
			t.Errorf("host cannot fork after the flood: %v", err)
		}
		waitNoProcs(t, "sleep "+s, 5*time.Second)
	})
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		wd := mkdir(t, id, "p12m")
		res := corral(t, run{id: id, policy: pol, workdir: wd, args: []string{probeBin, "alloc", "512"}, timeout: 40 * time.Second})
		assertCode(t, res, 137)
		if strings.Contains(res.stdout, "alloc: ok") {
			t.Errorf("512 MiB allocated under a 128M limit\n%s", res)
		}
	})
	t.Run("fds", func(t *testing.T) {
		t.Parallel()
		wd := mkdir(t, id, "p12f")
		res := corral(t, run{id: id, policy: pol, workdir: wd, args: []string{probeBin, "fds-forever"}})
		assertCode(t, res, 0)
		v, _ := lineValue(res.stdout, "fds-forever")
		var n int
		if _, err := fmt.Sscanf(v[strings.Index(v, "(")+1:], "%d", &n); err != nil || n > 1024 || !strings.HasPrefix(v, "EMFILE") {
			t.Errorf("fd flood: %q, want EMFILE before 1024 fds\n%s", v, res)
		}
	})
}

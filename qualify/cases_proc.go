//go:build linux

package qualify

// Process cases: P04 child processes, P06 secrets, P09 cleanup, P10
// terminal injection, P11 ptrace, P12 resource exhaustion, P13 procfs,
// P14 alternate syscall paths.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"

	"github.com/corral-sandbox/corral/probe"
)

func init() {
	Register(Case{ID: "P04", Title: "child processes", Applies: linuxKernel, Run: runP04})
	Register(Case{ID: "P06", Title: "secrets", Applies: linuxKernel, Run: runP06})
	Register(Case{ID: "P09", Title: "cleanup", Applies: linuxKernel, Run: runP09})
	Register(Case{ID: "P10", Title: "terminal injection", Applies: linuxKernel, Run: runP10})
	Register(Case{ID: "P11", Title: "debugging other processes", Applies: linuxKernel, Run: runP11})
	Register(Case{ID: "P12", Title: "resource exhaustion", Applies: appliesP12, Run: runP12})
	Register(Case{ID: "P13", Title: "procfs", Applies: linuxKernel, Run: runP13})
	Register(Case{ID: "P14", Title: "alternate syscall paths", Applies: linuxKernel, Run: runP14})
}

// statusOK checks one descendant's status fields: seccomp filtering, no
// new privileges, no effective capabilities.
func statusOK(e *Env, r *Result, who string, rs []stepOut) {
	var all []stepOutResult
	for _, s := range rs {
		for _, x := range s.Results {
			all = append(all, stepOutResult{x.What, x.Detail, x.OK})
		}
	}
	want := map[string]func(string) bool{
		"Seccomp":    func(v string) bool { return v == "2" },
		"NoNewPrivs": func(v string) bool { return v == "1" },
		"CapEff":     func(v string) bool { return v != "" && strings.Trim(v, "0") == "" },
	}
	for _, f := range []string{"Seccomp", "NoNewPrivs", "CapEff"} {
		got, found := "", false
		for _, x := range all {
			if x.what == who+" "+f {
				got, found = x.detail, true
			}
		}
		e.Check(r, who+" "+f, got, found && want[f](got), fmt.Sprintf("%s has %s %q", who, f, got))
	}
}

type stepOutResult struct {
	what, detail string
	ok           bool
}

// P04: background, setsid, nohup and double-forked descendants.
func runP04(ctx context.Context, e *Env) Result {
	r := newResult()
	m := e.uniqueName()
	e.AddMarker(m)
	sl := e.probeLine("sleep", "300", m)
	o, err := e.Corral(ctx, Run{Policy: e.policyFor(pol{}), Args: e.steps(
		step{Label: "shell", Shell: sl + " >/dev/null & setsid " + sl + " >/dev/null & nohup " + sl + " >/dev/null 2>&1 &\n" +
			"(sh -c \"" + strings.ReplaceAll(sl, `"`, `\"`) + " >/dev/null &\")\necho started"},
		step{Label: "spawn", Args: []string{"spawn", m, "5"}},
		step{Label: "status", Args: []string{"status"}},
		step{Label: "setsid status", Shell: "setsid " + e.probeLine("status") + " | sed 's/\"self /\"setsid /g; s/\"grandchild /\"setsid-grandchild /g'"},
	)})
	if err != nil {
		failNow(e, &r, "corral run", err)
		return r
	}
	s := parseSteps(o)
	e.Check(&r, "run: sleep &, setsid, nohup, sh -c \"… &\", spawn (background, setsid, double-fork daemon, signal-ignoring, own process group)", brief(o), o.Code == 0 && s["end"].Ran, "the script did not run")
	mustSucceed(e, &r, "spawn 5 descendants", s["spawn"], "the descendants did not start: nothing to check")
	statusOK(e, &r, "self", []stepOut{s["status"]})
	statusOK(e, &r, "grandchild", []stepOut{s["status"]})
	statusOK(e, &r, "setsid-grandchild", []stepOut{s["setsid status"]})
	left := e.waitNoProcs(m, 5*time.Second)
	e.Check(&r, "host: processes with the marker after the run", fmt.Sprint(left), len(left) == 0, fmt.Sprintf("%d descendants outlived the run", len(left)))
	killProcs(left)
	return r
}

// P06: CANARY_TOKEN in the caller's env; read env, /proc/*/environ,
// /proc/*/cmdline, ps eww.
func runP06(ctx context.Context, e *Env) Result {
	r := newResult()
	tok, tok2, tok3 := newToken(), newToken(), newToken()
	audit := filepath.Join(e.TempDir("p06-audit"), "audit-"+tok3+".jsonl")
	run, err := e.Start(ctx, Run{
		Policy: e.policyFor(pol{}),
		Env:    []string{"CANARY_TOKEN=" + tok, "AWS_SECRET_ACCESS_KEY=" + tok2, "LC_CANARY=visible-by-policy"},
		Flags:  []string{"--audit", audit},
		Args: e.steps(
			step{Label: "env", Args: []string{"env"}},
			step{Label: "ps", Shell: "ps eww 2>&1; ps -ef 2>&1"},
		),
	})
	if err != nil {
		failNow(e, &r, "corral run", err)
		return r
	}
	o, err := run.Wait()
	if err != nil {
		failNow(e, &r, "corral run", err)
		return r
	}
	s := parseSteps(o)
	e.Check(&r, "run env, /proc/*/environ and cmdline, ps eww (host env has CANARY_TOKEN, AWS_SECRET_ACCESS_KEY; the supervisor's argv has a token)", brief(o), o.Code == 0 && s["env"].reported(), "the probes did not run")
	ctl, ctlVar, ctlWhat := "LC_CANARY=visible-by-policy", "LC_CANARY", "control: LC_CANARY (allowed by the policy) is visible"
	if e.Provider == LinuxGateway {
		// An exec carries no environment of its caller's: the policy's
		// pass list applies to the gateway's own fixed one.
		ctl, ctlVar, ctlWhat = "PATH=/usr/local/sbin:", "PATH", "control: PATH (the gateway's fixed environment for every exec, passed by the policy; an exec carries none of its caller's) is visible"
	}
	e.Check(&r, ctlWhat, fmt.Sprint(strings.Contains(s["env"].Text, ctl)), strings.Contains(s["env"].Text, ctl), "the env allowlist did not pass "+ctlVar+": the probe cannot see the environment")
	lk := leaked(o.Stdout+o.Stderr, tok, tok2, tok3)
	e.Check(&r, "no token in the output", fmt.Sprintf("%d of 3 tokens found", len(lk)), len(lk) == 0, "secrets leaked: "+strings.Join(lk, ", "))
	pr, _ := find(s["env"].Results, "pids")
	bad := hostPids(pr.Detail, run.Pid())
	e.Check(&r, "pids visible inside", pr.Detail, pr.OK && firstPid(pr.Detail) == "1" && len(bad) == 0, "host pids (the supervisor's "+strconv.Itoa(run.Pid())+"?) visible inside: "+strings.Join(bad, " "))
	for _, x := range findAll(s["env"].Results, "read /proc/") {
		if strings.Contains(x.Detail, " run ") && strings.Contains(x.Detail, "--audit") {
			e.Check(&r, x.What, x.Detail, false, "the supervisor's command line is visible inside")
		}
	}
	return r
}

// hostPids lists the pids of a sandbox's /proc listing that cannot be its
// own: above 100 (a fresh PID namespace numbers from 1, and a case starts
// a few processes), or the supervisor's.
func hostPids(list string, supervisor int) []string {
	var bad []string
	for _, f := range strings.Fields(list) {
		if p, _ := strconv.Atoi(f); p > 100 || p == supervisor {
			bad = append(bad, f)
		}
	}
	return bad
}

// firstPid is the first pid of a listing ("1" in a PID namespace).
func firstPid(list string) string {
	if f := strings.Fields(list); len(f) > 0 {
		return f[0]
	}
	return ""
}

// netnsOf is the network namespace link of pid ("" when gone).
func netnsOf(pid int) string {
	l, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
	return l
}

// procsInNetns lists host pids in the network namespace ns.
func procsInNetns(ns string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		if netnsOf(pid) == ns {
			out = append(out, pid)
		}
	}
	return out
}

// P09: SIGINT, SIGTERM, SIGKILL of corral mid-run; timeout expiry.
func runP09(ctx context.Context, e *Env) Result {
	r := newResult()
	// Proxy mode, so that an egress proxy listener exists to be cleaned up.
	policy := e.policyFor(pol{Network: "proxy", NetRules: "  allow:\n    - {host: api.allowed.test, ports: [80]}\n"})
	mounts := hostMounts()
	for _, sg := range []struct {
		name string
		sig  syscall.Signal
		want int
	}{{"SIGINT", syscall.SIGINT, 130}, {"SIGTERM", syscall.SIGTERM, 143}, {"SIGKILL", syscall.SIGKILL, 137}} {
		m := e.uniqueName()
		e.AddMarker(m)
		run, err := e.Start(ctx, Run{Policy: policy, Args: e.steps(
			step{Label: "bg", Shell: e.probeLine("sleep", "300", m) + " >/dev/null &"},
			step{Label: "fg", Args: []string{"sleep", "300", m}},
		), Timeout: 30 * time.Second})
		if err != nil {
			failNow(e, &r, sg.name+": start corral", err)
			continue
		}
		var ps []int
		deadline := time.Now().Add(10 * time.Second)
		for len(ps) < 2 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			ps = e.ProcsWith(m)
		}
		if len(ps) == 0 {
			_ = run.Signal(syscall.SIGKILL)
			o, _ := run.Wait()
			failNow(e, &r, sg.name+": the workload never started", fmt.Errorf("%s", brief(o)))
			continue
		}
		ns := netnsOf(ps[0])
		pid := run.Pid()
		_ = run.Signal(sg.sig)
		done := make(chan Outcome, 1)
		go func() { o, _ := run.Wait(); done <- o }()
		var o Outcome
		select {
		case o = <-done:
		case <-time.After(10 * time.Second):
			_ = run.Signal(syscall.SIGKILL)
			o = <-done
			e.Check(&r, sg.name+" to corral (pid "+strconv.Itoa(pid)+")", "corral did not exit within 10s; killed", false, "corral did not stop after "+sg.name)
		}
		e.Check(&r, sg.name+" to corral mid-run: exit status", brief(o), o.Code == sg.want, fmt.Sprintf("after %s corral exited %d, want %d", sg.name, o.Code, sg.want))
		left := e.waitNoProcs(m, 5*time.Second)
		e.Check(&r, sg.name+": workload processes left", fmt.Sprint(left), len(left) == 0, fmt.Sprintf("%d workload processes outlived corral after %s", len(left), sg.name))
		killProcs(left)
		if ns != "" {
			// A container's init ends what is inside, then itself, a
			// moment after its supervisor died: give it as long as the
			// workload got.
			inNs := procsInNetns(ns)
			for end := time.Now().Add(5 * time.Second); len(inNs) > 0 && time.Now().Before(end); inNs = procsInNetns(ns) {
				time.Sleep(50 * time.Millisecond)
			}
			e.Check(&r, sg.name+": processes left in the sandbox's network namespace "+ns+" (its egress proxy listener lives there)", fmt.Sprint(inNs), len(inNs) == 0, "the sandbox's network namespace (and its proxy listener) is still held by "+fmt.Sprint(inNs))
		}
		if e.Root {
			if sg.sig == syscall.SIGKILL {
				// The next run sweeps what a SIGKILLed run left.
				o2, err := e.Corral(ctx, Run{Policy: e.policyFor(pol{}), Probe: []string{"exit", "0"}})
				if err == nil {
					e.Check(&r, "SIGKILL: the next corral run (which sweeps leftovers)", brief(o2), o2.Code == 0, "the next run failed")
				}
			}
			var dirs []string
			for i := 0; i < 30; i++ {
				if dirs = corralCgroupDirs(pid); len(dirs) == 0 {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			e.Check(&r, sg.name+": cgroup dirs of run "+strconv.Itoa(pid), fmt.Sprint(dirs), len(dirs) == 0, "cgroup directories left behind: "+strings.Join(dirs, " "))
		}
	}
	// Timeout expiry.
	m := e.uniqueName()
	e.AddMarker(m)
	run, err := e.Start(ctx, Run{Policy: e.policyFor(pol{Limits: "timeout: 1s"}), Args: e.steps(
		step{Label: "bg", Shell: e.probeLine("sleep", "300", m) + " >/dev/null &"},
		step{Label: "fg", Args: []string{"sleep", "300", m}},
	), Timeout: 30 * time.Second})
	if err != nil {
		failNow(e, &r, "timeout: start corral", err)
		return r
	}
	o, err := run.Wait()
	if err != nil {
		failNow(e, &r, "timeout run", err)
	}
	e.Check(&r, "policy timeout 1s, workload sleeps 300s: exit status", brief(o)+fmt.Sprintf(" after %s", o.Elapsed.Round(time.Millisecond)), o.Code == 124 && o.Elapsed < 10*time.Second, fmt.Sprintf("timeout: exit %d after %s, want 124 within 10s", o.Code, o.Elapsed))
	left := e.waitNoProcs(m, 5*time.Second)
	e.Check(&r, "timeout: workload processes left", fmt.Sprint(left), len(left) == 0, "workload processes outlived the timeout")
	killProcs(left)
	if e.Root {
		dirs := corralCgroupDirs(run.Pid())
		e.Check(&r, "timeout: cgroup dirs of run "+strconv.Itoa(run.Pid()), fmt.Sprint(dirs), len(dirs) == 0, "cgroup directories left behind after the timeout")
	}
	if mounts != nil {
		left := newHostMounts(mounts, 10*time.Second)
		e.Check(&r, "host: mounts in the caller's namespace that were not there before", fmt.Sprint(left), len(left) == 0, "mounts left behind in the host's namespace: "+strings.Join(left, " "))
	} else {
		e.Check(&r, "host: mounts in the caller's namespace", "/proc/self/mountinfo unreadable", false, "cannot tell whether mounts were left behind")
	}
	return r
}

// P10: TIOCSTI with and without -t; nothing reaches the user's shell.
func runP10(ctx context.Context, e *Env) Result {
	r := newResult()
	if b, err := os.ReadFile("/proc/sys/dev/tty/legacy_tiocsti"); err == nil {
		e.Check(&r, "host: dev.tty.legacy_tiocsti", strings.TrimSpace(string(b)), true, "")
	}
	policy := e.PolicyPath(e.policyFor(pol{}))
	for _, tty := range []bool{false, true} {
		name := "without -t"
		var flags []string
		if tty {
			name, flags = "with -t", []string{"-t"}
		}
		outside := e.TempDir("p10-outside")
		wd := e.TempDir("p10-wd")
		mk := filepath.Join(outside, "p10-marker")
		tok := newToken()
		// The corral command in a script, so that TEXT can hold a newline.
		scr := filepath.Join(outside, "run.sh")
		line, err := e.runLine(ctx, flags, policy, wd, fmt.Sprintf("%s __probe tiocsti 'touch %s\n'", shq(e.Bin), mk))
		if err != nil {
			failNow(e, &r, name+": the corral command", err)
			continue
		}
		_ = writeHostFile(scr, line+"\n", 0o755)
		// The user's shell is the user corral runs as, and can write the
		// marker's directory: an injected command would succeed.
		e.handOver(e.Dir)
		shell := exec.CommandContext(ctx, "/bin/sh", "-i")
		shell.Dir = outside
		shell.Env = []string{"PATH=" + hostPath, "HOME=" + e.Home, "PS1=$ ", "TERM=dumb", "ENV="}
		e.asUser(shell)
		ptmx, err := pty.Start(shell)
		if err != nil {
			failNow(e, &r, name+": start a shell on a pty", err)
			continue
		}
		var mu sync.Mutex
		var out bytes.Buffer
		go func() {
			buf := make([]byte, 4096)
			for {
				n, err := ptmx.Read(buf)
				mu.Lock()
				out.Write(buf[:n])
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
		waitFor := func(s string, d time.Duration) bool {
			deadline := time.Now().Add(d)
			for time.Now().Before(deadline) {
				mu.Lock()
				ok := strings.Contains(out.String(), s)
				mu.Unlock()
				if ok {
					return true
				}
				time.Sleep(50 * time.Millisecond)
			}
			return false
		}
		_, _ = io.WriteString(ptmx, "sh "+shq(scr)+"; echo END-$((40+2))-"+tok+"\n")
		finished := waitFor("END-42-"+tok, 20*time.Second)
		// Anything injected is queued before this line.
		_, _ = io.WriteString(ptmx, "echo FIN-$((2+2))-"+tok+"\n")
		answered := waitFor("FIN-4-"+tok, 10*time.Second)
		time.Sleep(300 * time.Millisecond)
		_ = shell.Process.Kill()
		_ = shell.Wait()
		ptmx.Close()
		mu.Lock()
		got := strings.ReplaceAll(out.String(), "\r", "")
		mu.Unlock()
		m := regexp.MustCompile(`"what":"tiocsti fd 0","ok":(true|false)(,"errno":"[A-Z0-9]+")?(,"detail":"[^"]*")?`).FindString(got)
		e.Check(&r, name+": corral runs `tiocsti 'touch MARKER\\n'` from a shell on a terminal", m, finished && answered && m != "", "the probe did not run under the pty (or the shell stopped answering): "+clip(got, 600))
		e.Check(&r, name+": host marker "+mk, fmt.Sprint("exists: ", hostExists(mk)), !hostExists(mk), "TIOCSTI injected a command into the user's shell")
		if !tty {
			e.Check(&r, name+": TIOCSTI refused", m, m != "" && strings.Contains(m, `"ok":false`), "TIOCSTI succeeded without -t")
		}
	}
	return r
}

// P11: ptrace attach/seize and process_vm_readv on PID 1 and a sibling.
func runP11(ctx context.Context, e *Env) Result {
	r := newResult()
	o, err := e.Corral(ctx, Run{Policy: e.policyFor(pol{}), Probe: []string{"ptrace", "1", "sibling"}})
	if err != nil {
		failNow(e, &r, "corral run", err)
		return r
	}
	rs := results(o)
	e.Check(&r, "run ptrace 1 sibling", brief(o), o.Code == 0 && len(rs) >= 6, "the probe did not report (want 6 results)")
	for _, x := range rs {
		e.Check(&r, x.What, show(x), !x.OK && x.Errno == "EPERM", x.What+": "+show(x)+", want EPERM")
	}
	return r
}

func appliesP12(e *Env) (bool, string) {
	if ok, why := linuxKernel(e); !ok {
		return ok, why
	}
	if !e.Root && (e.st == nil || !e.st.run.cgroupsOK[e.Provider]) {
		return false, "needs cgroups for the limits: not root, and this host does not delegate cgroups to this user (corral doctor: layer cgroups unavailable)"
	}
	return true, ""
}

// P12: pids 256, memory 256M, timeout 20s: fork bomb, allocation, fd
// flood, 64 busy loops.
func runP12(ctx context.Context, e *Env) Result {
	hostWide.Lock()
	defer hostWide.Unlock()
	r := newResult()
	limits := "memory: 256M, pids: 256, nofile: 1024, cpu: 1, timeout: 20s"
	policy := e.policyFor(pol{Limits: limits})
	fb := e.Bin + " __probe sleep 30 fb" // this run's children (argv[0] is the path run)
	// Fork bomb, with the host counting the children meanwhile.
	stop := make(chan struct{})
	maxc := make(chan int)
	go func() {
		m := 0
		for {
			if n := len(e.ProcsWith(fb)); n > m {
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
	o, err := e.Corral(ctx, Run{Policy: policy, Args: e.steps(
		step{Label: "forkbomb", Args: []string{"forkbomb", "1000"}},
		step{Label: "hold", Shell: "sleep 1"},
	)})
	close(stop)
	n := <-maxc
	if err != nil {
		failNow(e, &r, "forkbomb run", err)
	} else {
		s := parseSteps(o)
		fbr, _ := find(s["forkbomb"].Results, "forkbomb")
		e.Check(&r, "forkbomb 1000 under pids: 256", show(fbr), s["forkbomb"].reported() && !fbr.OK, "1000 processes started under a 256 limit")
		e.Check(&r, "host: most fork-bomb children seen at once", strconv.Itoa(n), n <= 256, fmt.Sprintf("%d children on the host, above the limit 256", n))
		// The count proves something only when the host saw the children.
		e.Check(&r, "host: the fork-bomb children were seen at all", strconv.Itoa(n), n >= 10, fmt.Sprintf("the host saw %d fork-bomb children: the count cannot show the limit", n))
	}
	t0 := time.Now()
	herr := exec.Command("true").Run()
	e.Check(&r, "host: fork+exec after the bomb", fmt.Sprintf("%v in %s", herr, time.Since(t0).Round(time.Millisecond)), herr == nil, "the host cannot fork")
	left := e.waitNoProcs(fb, 5*time.Second)
	e.Check(&r, "host: fork-bomb children after the run", fmt.Sprint(len(left)), len(left) == 0, "fork-bomb children outlived the run")
	killProcs(left)

	// Memory.
	o, err = e.Corral(ctx, Run{Policy: policy, Probe: []string{"alloc", "512"}})
	if err != nil {
		failNow(e, &r, "alloc run", err)
	} else {
		ok := o.Code == 137 || (o.Report != nil && len(o.Report.Results) > 0 && !o.Report.Results[0].OK)
		got := brief(o)
		if o.Report != nil && len(o.Report.Results) > 0 {
			got += "; " + show(o.Report.Results[0])
		}
		e.Check(&r, "alloc 512 MiB under memory: 256M", got, ok, "512 MiB allocated under a 256M limit")
	}
	// File descriptors.
	o, err = e.Corral(ctx, Run{Policy: policy, Probe: []string{"fdflood"}})
	if err != nil {
		failNow(e, &r, "fdflood run", err)
	} else {
		x, _ := o.Result("fdflood")
		var cnt int
		fmt.Sscanf(x.Detail, "%d", &cnt)
		e.Check(&r, "fdflood under nofile: 1024", show(x), o.Report != nil && !x.OK && x.Errno == "EMFILE" && cnt <= 1024, "the fd flood was not stopped by EMFILE before 1024 fds")
	}
	// 64 busy loops for 4 s under cpu: 1; the host stays responsive.
	m := e.uniqueName()
	e.AddMarker(m)
	run, err := e.Start(ctx, Run{Policy: policy, Args: e.steps(
		step{Label: "busy", Args: []string{"busy", "64", "4"}},
	), Timeout: 30 * time.Second})
	if err != nil {
		failNow(e, &r, "busy run", err)
		return r
	}
	var worst time.Duration
	for i := 0; i < 15; i++ {
		time.Sleep(200 * time.Millisecond)
		t := time.Now()
		_ = exec.Command("true").Run()
		if d := time.Since(t); d > worst {
			worst = d
		}
	}
	o, err = run.Wait()
	if err != nil {
		failNow(e, &r, "busy run", err)
		return r
	}
	s := parseSteps(o)
	e.Check(&r, "busy 64 4 under cpu: 1", s["busy"].String(), s["busy"].ok(), "the busy loops did not run")
	e.Check(&r, "host: slowest fork+exec of `true` during the busy loops", worst.Round(time.Millisecond).String(), worst < 2*time.Second, "the host was unresponsive while the sandbox spun")
	return r
}

// P13: list /proc; read /proc/1/root/…, /proc/1/environ; write
// core_pattern, sysrq-trigger and other kernel tunables.
func runP13(ctx context.Context, e *Env) Result {
	r := newResult()
	core, _ := os.ReadFile("/proc/sys/kernel/core_pattern")
	tok := newToken()
	tunables := []string{"/proc/sys/kernel/sysrq", "/proc/sys/vm/drop_caches"}
	// Opening for writing is the test: nothing is written (a subshell: a
	// failed redirection may end the shell).
	open := ""
	for _, f := range tunables {
		open += "if (true > " + f + ") 2>/dev/null; then echo 'opened " + f + "'; else echo 'refused " + f + "'; fi\n"
	}
	o, err := e.Corral(ctx, Run{Policy: e.policyFor(pol{}), Env: []string{"CANARY_TOKEN=" + tok}, Args: e.steps(
		step{Label: "procfs", Args: []string{"procfs"}},
		step{Label: "self root", Shell: `echo "root=$(readlink /proc/self/root)"`},
		step{Label: "tunables", Shell: open},
	)})
	if err != nil {
		failNow(e, &r, "corral run", err)
		return r
	}
	s := parseSteps(o)
	rs := s["procfs"].Results
	get := func(what string) (probe.Result, bool) {
		for _, x := range rs {
			if x.What == what {
				return x, true
			}
		}
		return probe.Result{}, false
	}
	e.Check(&r, "run procfs", brief(o), o.Code == 0 && len(rs) > 0 && s["end"].Ran, "the probe did not report")
	pids, _ := get("pids")
	bad := hostPids(pids.Detail, 0)
	e.Check(&r, "list /proc", pids.Detail, pids.OK && firstPid(pids.Detail) == "1" && len(bad) == 0, "host pids visible in the sandbox's /proc: "+strings.Join(bad, " "))
	root, _ := get("readlink /proc/1/root")
	e.Check(&r, "readlink /proc/1/root", show(root), !root.OK || root.Detail == "/", "/proc/1/root is not the sandbox root: "+root.Detail)
	self := strings.TrimSpace(s["self root"].Text)
	e.Check(&r, "readlink /proc/self/root", self, self == "root=/", "/proc/self/root is not /: "+self)
	sh, _ := get("read /proc/1/root/etc/shadow")
	e.Check(&r, "read /proc/1/root/etc/shadow", show(sh), !sh.OK, "/etc/shadow readable through /proc/1/root")
	env, _ := get("read /proc/1/environ")
	e.Check(&r, "read /proc/1/environ", show(env), !strings.Contains(env.Detail, tok), "the caller's secret is in /proc/1/environ")
	kc, _ := get("read /proc/kcore")
	e.Check(&r, "read /proc/kcore", show(kc), !kc.OK, "/proc/kcore readable")
	for _, w := range []string{"write /proc/sys/kernel/core_pattern", "write /proc/sysrq-trigger"} {
		x, found := get(w)
		e.Check(&r, w, show(x), found && !x.OK, w+" succeeded")
	}
	for _, f := range tunables {
		t := s["tunables"].Text
		e.Check(&r, "open "+f+" for writing", grepLine(t, f), strings.Contains(t, "refused "+f), f+" is writable inside")
	}
	lk := leaked(o.Stdout+o.Stderr, tok)
	e.Check(&r, "no token in the output", fmt.Sprint(len(lk), " found"), len(lk) == 0, "the caller's secret leaked")
	checkNoShadowHash(e, &r, o)
	now, _ := os.ReadFile("/proc/sys/kernel/core_pattern")
	e.Check(&r, "host: core_pattern unchanged", strings.TrimSpace(string(now)), bytes.Equal(core, now), "the host's core_pattern changed")
	return r
}

// p14Fault, when set (tests only), makes P14 run with that layer marked
// optional and CORRAL_FAULT_LAYER naming it: a deliberately broken
// sandbox, to prove the case can fail.
var p14Fault string

// P14: io_uring, exotic socket families, user namespaces, keyctl, bpf,
// mount, ...
func runP14(ctx context.Context, e *Env) Result {
	r := newResult()
	p := pol{}
	var env []string
	if p14Fault != "" {
		p.Layers = map[string]string{p14Fault: "optional"}
		env = append(env, "CORRAL_FAULT_LAYER="+p14Fault)
		e.Check(&r, "test hook: layer "+p14Fault+" broken on purpose", "CORRAL_FAULT_LAYER="+p14Fault, true, "")
	}
	policy := e.policyFor(p)
	o, err := e.Corral(ctx, Run{Policy: policy, Env: env, Probe: []string{"syscalls"}})
	if err != nil {
		failNow(e, &r, "corral run", err)
		return r
	}
	rs := results(o)
	e.Check(&r, "run syscalls", brief(o), o.Code == 0 && len(rs) >= 10, "the probe did not report")
	allowed := map[string]bool{"EPERM": true, "ENOSYS": true, "EAFNOSUPPORT": true}
	for _, x := range rs {
		e.Check(&r, x.What, show(x), !x.OK && allowed[x.Errno], x.What+": "+show(x)+", want EPERM/ENOSYS/EAFNOSUPPORT")
	}
	// util-linux unshare is single-threaded: unshare(2) itself is tried.
	if _, err := os.Stat("/usr/bin/unshare"); err == nil {
		o, err := e.Corral(ctx, Run{Policy: policy, Env: env, Args: script("unshare -U -r true && echo UNSHARED")})
		if err == nil {
			e.Check(&r, "unshare -U -r true (util-linux)", briefOut(o), o.Code != 0 && !strings.Contains(o.Stdout, "UNSHARED"), "unshare -U -r succeeded inside")
		}
	}
	return r
}

//go:build linux

package qualify

// Consent cases (docs/consent.md; issue 17): P33 the ceiling of what may
// be asked, P34 live folder grants reported honestly. The workload asks
// at $CORRAL_CONSENT_URL with `corral __probe consent` (the binary under
// test); the harness is the approver, through the CLI of the binary
// under test: `corral approvals --run PID` for a corral run,
// `--gateway ADDR` for a gateway sandbox, with `corral approvals watch
// -o json` connected (a request with no approver is denied at once).
// What is in force is read from outside: the sandbox init's
// /proc/PID/mountinfo, and nsenter into its mount and pid namespaces as
// host root.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/consent"
	"github.com/corral-sandbox/corral/provider"
)

func init() {
	Register(Case{ID: "P33", Title: "consent ceiling", Applies: consentApplies, Run: runP33})
	Register(Case{ID: "P34", Title: "live grants, honestly", Applies: consentApplies, Run: runP34})
}

// Self-test hooks (tests only). p33Weak widens the ceiling (every folder
// and host asked for inside it, no never, no deny, bounds at their
// maximum) and makes the harness an approver that approves everything:
// P33 must then fail. p34Weak asks for and grants the folder read-write
// (folders.access rw): P34 must then fail (the grant is writable).
// p34Inject binds the folder into the sandbox from outside (nsenter,
// no propagation) instead of approving it: P34 must then fail (the
// grant is not locked, nor listed).
var p33Weak, p34Weak, p34Inject bool

// consentApplies: the linux provider's runs and gateway sandboxes; P33
// on docker too (where the daemon takes live grants, the ceiling is the
// same broker's). P34 is not run on docker: a container has no user
// namespace of its own, so the kernel does not lock a grant propagated
// into it (provider/docker/grants.go says so), and host root in its
// namespaces can make the grant writable and unmount its masks (tried:
// both succeed), which this case counts as a failure; a docker variant
// (the attack made from inside, with the container's capabilities) is
// not written. It is reported skipped with that reason, never passed.
func consentApplies(e *Env) (bool, string) {
	id := ""
	if e.st != nil {
		id = e.st.caseID
	}
	switch e.Provider {
	case "linux", LinuxGateway:
	case "docker":
		if id != "P33" {
			return false, dockerP34
		}
		if !e.Root {
			return false, "not applicable: requires recreate (the docker provider's folder grants are live only when corral runs as root, mounting the host-side slot the daemon binds: provider/docker/grants.go)"
		}
	default:
		return false, "not applicable to provider " + e.Provider + " (live grants are the linux and docker providers'; mxc: applies to the next command)"
	}
	if id == "P34" && !e.st.run.hostRoot {
		return false, "needs root: P34 enters the sandbox's mount and pid namespaces (nsenter) as host root to attack the grant"
	}
	return true, ""
}

// dockerP34 is why P34 is skipped on docker.
const dockerP34 = "not run on docker: a container has no user namespace of its own, so its live grants are not kernel-locked (MNT_LOCK_READONLY, MNT_LOCKED come only with a less privileged user namespace) and host root in its namespaces can remount them read-write and unmount their masks; the docker variant of the case (the attack from inside, with the container's capabilities) is not written"

// consentSess is a sandboxed workload in progress that asks for consent,
// with the harness connected as its approver.
type consentSess struct {
	e         *Env
	run       *Running
	wd        string
	approvals []string // corral approvals --run PID | --gateway ADDR
	home      string   // HOME for the CLI (where corral run put its socket)
	watch     *exec.Cmd
	events    *lockedBuf
	sandbox   string // the gateway's sandbox id
}

// lockedBuf is a bytes.Buffer for one writer goroutine and readers.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// consentPing is the workload's first step: it asks for "/" (refused by
// the built-in ceiling, which the watcher sees as a refused event) until
// the harness, having seen one (its approver is connected), makes WD/go.
func (e *Env) consentPing(wd string) step {
	return step{Label: "ping", Shell: fmt.Sprintf(`until [ -e %s ]; do %s > /dev/null; sleep 0.1; done`,
		shq(filepath.Join(wd, "go")), e.probeLine("consent", "ask", `{"kind":"folder","target":"/"}`))}
}

// waitStep is a step that makes WD/made and waits for WD/next.
func waitStep(label, wd, made, next string) step {
	return step{Label: label, Shell: fmt.Sprintf(": > %s; until [ -e %s ]; do sleep 0.1; done", shq(filepath.Join(wd, made)), shq(filepath.Join(wd, next)))}
}

// startConsent starts the workload ss (after consentPing) in wd under
// pol, and connects the approver: `corral approvals ... watch -o json`.
func (e *Env) startConsent(ctx context.Context, pol, wd string, flags []string, ss ...step) (*consentSess, error) {
	args := e.steps(append([]step{e.consentPing(wd)}, ss...)...)
	run, err := e.Start(ctx, Run{Policy: pol, Workdir: wd, Flags: flags, Args: args, Timeout: 80 * time.Second})
	if err != nil {
		return nil, err
	}
	c := &consentSess{e: e, run: run, wd: wd, events: &lockedBuf{}, home: e.Home}
	if e.Provider == LinuxGateway {
		g := e.st.run.gw
		if g == nil {
			return nil, errors.New("the run's gateway is not running")
		}
		e.st.mu.Lock()
		if n := len(e.st.gateway.sandboxes); n > 0 {
			c.sandbox = e.st.gateway.sandboxes[n-1].id
		}
		e.st.mu.Unlock()
		if run.refused != nil {
			return nil, fmt.Errorf("corral sandbox create refused: %s", brief(*run.refused))
		}
		c.approvals, c.home = []string{"approvals", "--gateway", g.addr}, g.home
	} else {
		c.approvals = []string{"approvals", "--run", strconv.Itoa(run.Pid())}
		// The run serves its approvers' socket once its session is up.
		for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if _, _, code := c.cli(ctx, "list", "-o", "json"); code == 0 {
				break
			}
			if time.Now().After(end) {
				return nil, errors.New("corral run served no approvals socket within 30s: " + clip(run.stderr.String(), 600))
			}
		}
	}
	c.watch = c.command(ctx, "watch", "-o", "json")
	c.watch.Stdout, c.watch.Stderr = c.events, c.events
	if err := c.watch.Start(); err != nil {
		return nil, err
	}
	return c, nil
}

// openConsent starts the workload (startConsent) and lets it go once its
// approver is connected (start); on an error it fails r, stops what it
// started and returns nil.
func (e *Env) openConsent(ctx context.Context, r *Result, pol, wd string, flags []string, ss ...step) *consentSess {
	c, err := e.startConsent(ctx, pol, wd, flags, ss...)
	if err == nil {
		if err = c.start(); err != nil {
			c.close()
		}
	}
	if err != nil {
		failNow(e, r, "start the workload and connect its approver", err)
		return nil
	}
	return c
}

// close stops the watcher.
func (c *consentSess) close() {
	if c.watch != nil && c.watch.Process != nil {
		_ = c.watch.Process.Kill()
		_ = c.watch.Wait()
	}
}

func (c *consentSess) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.e.Bin, append(slices.Clone(c.approvals), args...)...)
	cmd.Env = []string{"PATH=" + hostPath, "HOME=" + c.home, "LANG=C"}
	cmd.Dir = c.e.Dir
	cmd.WaitDelay = 5 * time.Second
	c.e.asUser(cmd)
	return cmd
}

// cli runs `corral approvals ... ARGS` to completion.
func (c *consentSess) cli(ctx context.Context, args ...string) (stdout, stderr string, code int) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := c.command(ctx, args...)
	var o, eb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &eb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		code = -1
		eb.WriteString(err.Error())
	}
	return o.String(), eb.String(), code
}

// cliJSON runs cli(ARGS -o json) and decodes its output into v.
func (c *consentSess) cliJSON(ctx context.Context, v any, args ...string) (string, error) {
	out, errs, code := c.cli(ctx, append(args, "-o", "json")...)
	shown := "corral " + strings.Join(append(slices.Clone(c.approvals), args...), " ") + " -o json: "
	if code != 0 {
		return shown + fmt.Sprintf("exit %d: %s", code, clip(errs, 400)), fmt.Errorf("exit %d: %s", code, clip(errs, 400))
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		return shown + clip(out, 400), err
	}
	return shown + clip(out, 1500), nil
}

// watched is every event the watcher printed so far.
func (c *consentSess) watched() []consent.Event {
	var out []consent.Event
	dec := json.NewDecoder(strings.NewReader(c.events.String()))
	for {
		var ev consent.Event
		if dec.Decode(&ev) != nil {
			return out
		}
		out = append(out, ev)
	}
}

// waitFor polls f until it holds, the run ends or d passes.
func (c *consentSess) waitFor(d time.Duration, f func() bool) bool {
	for end := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
		if f() {
			return true
		}
		if time.Now().After(end) || c.run.ctx.Err() != nil || c.run.Cmd.ProcessState != nil {
			return f()
		}
	}
}

// start waits for the workload's ping to reach the watcher (an approver
// is connected), then lets it go on.
func (c *consentSess) start() error {
	if !c.waitFor(40*time.Second, func() bool {
		return slices.ContainsFunc(c.watched(), func(ev consent.Event) bool {
			return ev.Activity == "refused" && ev.Request != nil && ev.Request.Target == "/"
		})
	}) {
		return fmt.Errorf("the watcher saw no request from the workload within 40s: watch: %s; run: %s", clip(c.events.String(), 400), clip(c.run.stderr.String(), 600))
	}
	return c.touch("go")
}

func (c *consentSess) touch(name string) error {
	return os.WriteFile(filepath.Join(c.wd, name), nil, 0o644)
}

// waitFile waits for the workload to make WD/name.
func (c *consentSess) waitFile(name string) bool {
	return c.waitFor(40*time.Second, func() bool { return hostExists(filepath.Join(c.wd, name)) })
}

// pending polls `corral approvals list` for a pending request for target.
func (c *consentSess) pending(ctx context.Context, target string) (consent.Request, bool) {
	var got consent.Request
	ok := c.waitFor(30*time.Second, func() bool {
		var rs []consent.Request
		if _, err := c.cliJSON(ctx, &rs, "list"); err != nil {
			return false
		}
		for _, r := range rs {
			if r.Target == target && r.State == consent.StatePending {
				got = r
				return true
			}
		}
		return false
	})
	return got, ok
}

// shellPid is the host pid of the workload's shell: /bin/sh whose
// command line holds the workdir (the script names it).
func (c *consentSess) shellPid() int {
	pid := 0
	eachProc(func(p int, argv []string) {
		if pid == 0 && len(argv) >= 3 && argv[0] == "/bin/sh" && argv[1] == "-c" && strings.Contains(argv[2], filepath.Join(c.wd, "go")) {
			pid = p
		}
	})
	return pid
}

// sandboxInit is the host pid of the init of pid's sandbox, or 0: its
// topmost ancestor in the same pid namespace (the pid namespace's first
// process, which the linux provider's corral-init and a container's init
// are; /proc/PID/ns/pid compared).
func sandboxInit(pid int) int {
	ns := func(p int) string { l, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", p)); return l }
	mine := ns(pid)
	if pid <= 1 || mine == "" || mine == ns(os.Getpid()) {
		return 0
	}
	for i := 0; i < 64; i++ {
		pp := parentPid(pid)
		if pp <= 1 || ns(pp) != mine {
			return pid
		}
		pid = pp
	}
	return 0
}

// parentPid is pid's parent (/proc/PID/stat field 4), or 0.
func parentPid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	i := bytes.LastIndexByte(b, ')')
	if err != nil || i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	p, _ := strconv.Atoi(f[1])
	return p
}

// mountLine is one /proc/PID/mountinfo line (proc(5)).
type mountLine struct {
	ID    int
	Point string
	Opts  []string // per-mount options
	Raw   string
}

// grantMounts is the mounts of init's mount namespace at or below
// /grants/ro/ or /grants/rw/ (the slots themselves left out), read from
// /proc/INIT/mountinfo.
func grantMounts(init int) ([]mountLine, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", init))
	if err != nil {
		return nil, err
	}
	var out []mountLine
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 {
			continue
		}
		if strings.HasPrefix(f[4], provider.GrantSlotRO+"/") || strings.HasPrefix(f[4], provider.GrantSlotRW+"/") {
			id, _ := strconv.Atoi(f[0])
			out = append(out, mountLine{ID: id, Point: f[4], Opts: strings.Split(f[5], ","), Raw: l})
		}
	}
	return out, nil
}

func showMounts(ms []mountLine) string {
	if len(ms) == 0 {
		return "no mount under /grants/ro or /grants/rw"
	}
	var s []string
	for _, m := range ms {
		s = append(s, m.Raw)
	}
	return strings.Join(s, "\n")
}

// answer is a consent API answer a probe printed: its status and JSON.
type answer struct {
	consent.Request
	WaitURL string `json:"wait_url"`
	Status  int
	Raw     string
}

// answerOf parses the probe result what ("consent ask", "consent wait")
// of a step: Detail "CODE JSON".
func answerOf(s stepOut, what string) (answer, bool) {
	var a answer
	r, ok := find(s.Results, what)
	if !ok {
		return a, false
	}
	code, body, _ := strings.Cut(r.Detail, " ")
	a.Status, _ = strconv.Atoi(code)
	a.Raw = body
	return a, json.Unmarshal([]byte(body), &a) == nil
}

func (a answer) String() string { return fmt.Sprintf("%d %s", a.Status, clip(a.Raw, 400)) }

// consentFolders makes the case's folders under a fresh directory:
// base/in (the ceiling's ask), with docs (a.txt holding canary,
// secret/k holding secret), denied, f0..f(n-1); and base/out (outside
// it). Everything is writable by every uid, so that only the sandbox
// refuses a write.
func (e *Env) consentFolders(canary, secret string, n int) (in, out string) {
	base := e.TempDir("consent")
	in, out = filepath.Join(base, "in"), filepath.Join(base, "out")
	files := map[string]string{"docs/a.txt": canary + "\n", "docs/secret/k": secret + "\n", "denied/a.txt": "denied\n"}
	for i := range n {
		files[fmt.Sprintf("f%d/a.txt", i)] = "x\n"
	}
	for rel, body := range files {
		e.WriteFile(filepath.Join(in, rel), body, 0o666)
	}
	e.WriteFile(filepath.Join(out, "a.txt"), "out\n", 0o666)
	_ = filepath.WalkDir(base, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o777)
		}
		return nil
	})
	return in, out
}

// consentYAML is a policy's consent section.
func (e *Env) consentYAML(ask, never []string, access, hosts, bounds string) string {
	persist := filepath.Join(e.TempDir("persist"), "grants.yaml")
	var b strings.Builder
	fmt.Fprintf(&b, "consent:\n  folders:\n    ask: %s\n", yamlList(ask))
	if len(never) > 0 {
		fmt.Fprintf(&b, "    never: %s\n", yamlList(never))
	}
	if access != "" {
		fmt.Fprintf(&b, "    access: %s\n", access)
	}
	if hosts != "" {
		fmt.Fprintf(&b, "  hosts:\n    ask: %s\n", hosts)
	}
	b.WriteString(bounds)
	fmt.Fprintf(&b, "  persist: %s\n", strconv.Quote(persist))
	return b.String()
}

// askBody is a request's JSON.
func askBody(kind, target, access string) string {
	m := map[string]string{"kind": kind, "target": target, "reason": "qualify"}
	if access != "" {
		m["access"] = access
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// P33: requests outside consent.folders.ask, inside consent.folders.never
// or a filesystem.deny entry, and for a host outside consent.hosts.ask
// are refused at once (403, refused, the ceiling entry named) without
// reaching the approver; beyond max_pending and beyond the rate's burst a
// request is refused 429 rate_limited without reaching it either;
// nothing is applied (no grant listed, inside or by the CLI, no mount
// under the slots in the init's mountinfo), and the audit log records the
// refusals.
func runP33(ctx context.Context, e *Env) Result {
	r := newResult()
	upstream, err := e.Listen("tcp4", "127.0.0.33:0")
	if err != nil {
		failNow(e, &r, "loopback upstream", err)
		return r
	}
	in, out := e.consentFolders(newToken(), newToken(), 13)
	never, denied := filepath.Join(in, "docs", "secret"), filepath.Join(in, "denied")
	hostsMap := Egress{Hosts: map[string]string{"api.other.test": "127.0.0.33", "api.asked.test": "127.0.0.33"}}
	port := strconv.Itoa(upstream.Port())
	p := pol{Deny: []string{denied}, Network: "proxy", NetRules: hostsMap.YAML()}
	cons := e.consentYAML([]string{in + "/**"}, []string{never}, "", `["api.asked.test:`+port+`"]`, "  max_pending: 2\n  rate: {burst: 3, per: 1h}\n")
	if p33Weak {
		p.Deny = nil
		cons = e.consentYAML([]string{filepath.Dir(in) + "/**"}, nil, "", `["api.other.test:`+port+`", "api.asked.test:`+port+`"]`, "  max_pending: 100\n  rate: {burst: 1000, per: 1s}\n")
		e.Check(&r, "test hook: a wide ceiling and an approver approving everything", "folders.ask covers every folder asked for, no never, no deny, max_pending 100, burst 1000; the harness approves every pending request", true, "")
	}
	policy := e.SystemPolicy(p.yaml() + cons)
	wd := e.TempDir("work")
	audit := filepath.Join(e.Dir, "audit.jsonl")
	outside := []struct{ label, kind, target, ceiling string }{
		{"outside ask", "folder", out, "consent.folders.ask"},
		{"inside never", "folder", never, "consent.folders.never[0]"},
		{"inside filesystem.deny", "folder", denied, fmt.Sprintf("filesystem.deny[%d]", len(systemDeny))},
		{"host outside hosts.ask", "host", "api.other.test:" + port, "consent.hosts.ask"},
	}
	var ss []step
	for _, o := range outside {
		ss = append(ss, step{Label: o.label, Args: []string{"consent", "ask", askBody(o.kind, o.target, "")}})
	}
	const nA, nB = 6, 13 // f0..f5 against max_pending 2; f6..f12 against the rate's burst 3
	fdir := func(i int) string { return filepath.Join(in, fmt.Sprintf("f%d", i)) }
	for i := range nA {
		ss = append(ss, step{Label: "flood " + strconv.Itoa(i), Args: []string{"consent", "ask", askBody("folder", fdir(i), "")}})
	}
	ss = append(ss, waitStep("phase 1", wd, "phase1", "phase2"))
	for i := nA; i < nB; i++ {
		ss = append(ss, step{Label: "flood " + strconv.Itoa(i), Args: []string{"consent", "ask", askBody("folder", fdir(i), "")}})
	}
	ss = append(ss, waitStep("phase 2", wd, "phase2done", "finish"),
		step{Label: "grants inside", Args: []string{"consent", "get", "/v1/grants"}},
		step{Label: "slots inside", Args: []string{"list", provider.GrantSlotRO, provider.GrantSlotRW}})
	c := e.openConsent(ctx, &r, policy, wd, []string{"--audit", audit}, ss...)
	if c == nil {
		return r
	}
	defer c.close()
	approveAll := func() {
		var rs []consent.Request
		_, _ = c.cliJSON(ctx, &rs, "list")
		for _, q := range rs {
			_, _, _ = c.cli(ctx, "approve", q.ID)
		}
	}
	if !c.waitFile("phase1") {
		failNow(e, &r, "the workload's first phase", fmt.Errorf("did not end: %s", clip(c.run.stderr.String(), 600)))
		return r
	}
	var listed []consent.Request
	shown, err := c.cliJSON(ctx, &listed, "list")
	var targets []string
	for _, q := range listed {
		targets = append(targets, q.Target)
	}
	slices.Sort(targets)
	e.Check(&r, "host: pending after the refusals and f0..f5 (max_pending 2)", shown, err == nil && slices.Equal(targets, []string{fdir(0), fdir(1)}),
		"the approver's list is not exactly f0 and f1: a request outside the ceiling or beyond max_pending is pending")
	if p33Weak {
		approveAll()
	} else {
		for _, q := range listed {
			o, eo, code := c.cli(ctx, "deny", q.ID, "--reason", "qualify")
			e.Check(&r, "host: corral approvals deny "+q.ID, fmt.Sprintf("exit %d: %s %s", code, o, eo), code == 0, "the approver could not deny a pending request")
		}
	}
	_ = c.touch("phase2")
	if !c.waitFile("phase2done") {
		failNow(e, &r, "the workload's second phase", fmt.Errorf("did not end: %s", clip(c.run.stderr.String(), 600)))
		return r
	}
	if p33Weak {
		approveAll()
	}
	// Nothing applied: the grants the approver's API lists, the init's
	// mountinfo, while the sandbox still runs.
	var gs []consent.Grant
	shown, err = c.cliJSON(ctx, &gs, "grants")
	e.Check(&r, "host: corral approvals grants", shown, err == nil && len(gs) == 0, "a grant is listed: something was applied")
	if init := sandboxInit(c.shellPid()); init == 0 {
		e.Check(&r, "host: the sandbox's init", fmt.Sprintf("not found above the workload shell (host pid %d)", c.shellPid()), false, "the sandbox's init was not found: what is mounted cannot be read back")
	} else {
		ms, err := grantMounts(init)
		e.Check(&r, fmt.Sprintf("host: /proc/%d/mountinfo (the sandbox's init) under the grant slots", init), showMounts(ms), err == nil && len(ms) == 0, "a grant is mounted in the sandbox")
	}
	_ = c.touch("finish")
	res, err := c.run.Wait()
	if err != nil {
		failNow(e, &r, "the workload", err)
		return r
	}
	c.close()
	s := parseSteps(res)
	e.Check(&r, "run", brief(res), res.Code == 0 && s["end"].Ran, "the workload did not finish")
	events := c.watched()
	// The ids the approver must never have been asked about.
	quiet := map[string]string{}
	for _, o := range outside {
		a, ok := answerOf(s[o.label], "consent ask")
		good := ok && a.Status == 403 && a.State == consent.StateRefused && a.Ceiling == o.ceiling && strings.Contains(a.Detail, "nobody was asked")
		e.Check(&r, "inside: ask for "+o.kind+" "+o.target+" ("+o.label+")", a.String(), good, o.label+": not refused at once with 403, state refused and ceiling "+o.ceiling)
		if ok && a.ID != "" {
			quiet[a.ID] = o.label
		}
	}
	for i := range nB {
		a, ok := answerOf(s["flood "+strconv.Itoa(i)], "consent ask")
		want, limit := 429, "max_pending"
		switch {
		case i < 2 || i == nA:
			want, limit = 202, ""
		case i > nA:
			limit = "consent.rate"
		}
		good := ok && a.Status == want
		if limit != "" {
			good = good && a.State == consent.StateRateLimited && strings.Contains(a.Detail, limit)
			if ok && a.ID != "" {
				quiet[a.ID] = "flood " + strconv.Itoa(i)
			}
		}
		what := fmt.Sprintf("inside: flood request %d (%s)", i, fdir(i))
		whyFail := fmt.Sprintf("flood request %d: want %d", i, want)
		if limit != "" {
			whyFail += " rate_limited (" + limit + ")"
		}
		e.Check(&r, what, a.String(), good, whyFail)
	}
	var prompted []string
	for _, ev := range events {
		if ev.Request == nil {
			continue
		}
		l, ok := quiet[ev.Request.ID]
		if ok && ev.Activity != "refused" && ev.Activity != "rate_limited" {
			prompted = append(prompted, l+": "+ev.Activity)
		}
		if !ok && (ev.Activity == "requested" || ev.Activity == "prompted") && slices.ContainsFunc(outside, func(o struct{ label, kind, target, ceiling string }) bool {
			return strings.HasPrefix(ev.Request.Target, o.target) || o.kind == "host" && strings.HasPrefix(ev.Request.Target, "api.other.test")
		}) {
			prompted = append(prompted, ev.Request.Target+": "+ev.Activity)
		}
	}
	e.Check(&r, "host: the approver's watch (corral approvals watch -o json)", fmt.Sprintf("%d events; for the refused and rate-limited requests: %q", len(events), prompted), len(prompted) == 0 && len(events) > 0,
		"the approver was asked about a request outside the ceiling or beyond a bound")
	// The control: the watch does show the requests that were pending.
	var asked []string
	for _, ev := range events {
		if ev.Activity == "requested" && ev.Request != nil && ev.Request.State == consent.StatePending && !slices.Contains(asked, ev.Request.Target) {
			asked = append(asked, ev.Request.Target)
		}
	}
	slices.Sort(asked)
	e.Check(&r, "host: control: the pending requests the watch was asked about", strings.Join(asked, " "), slices.Equal(asked, []string{fdir(0), fdir(1), fdir(nA)}),
		"the watch was not asked about exactly the pending requests (f0, f1, f6): what it shows proves nothing")
	// The audit log: each refusal recorded as refused or rate_limited.
	auditText := hostRead(audit)
	seen := map[string]string{}
	for _, l := range strings.Split(auditText, "\n") {
		var ev struct {
			Unmapped struct {
				Consent struct {
					Transition string `json:"transition"`
					Request    string `json:"request_id"`
				} `json:"consent"`
			} `json:"unmapped"`
		}
		if json.Unmarshal([]byte(l), &ev) == nil && ev.Unmapped.Consent.Request != "" {
			id := ev.Unmapped.Consent.Request
			if _, ok := quiet[id]; ok && (seen[id] == "" || seen[id] == "refused" || seen[id] == "rate_limited") {
				seen[id] = ev.Unmapped.Consent.Transition
			}
		}
	}
	var bad []string
	for id, l := range quiet {
		if t := seen[id]; t != "refused" && t != "rate_limited" {
			bad = append(bad, fmt.Sprintf("%s (%s): %q", l, id, t))
		}
	}
	slices.Sort(bad)
	e.Check(&r, "host: the audit log (--audit)", fmt.Sprintf("%d bytes; %d refused or rate-limited requests recorded as such; otherwise: %q", len(auditText), len(quiet)-len(bad), bad), len(bad) == 0 && len(quiet) > 0,
		"the audit log does not record every refusal as refused or rate_limited")
	gi := s["grants inside"]
	gr, _ := find(gi.Results, "consent GET /v1/grants")
	_, body, _ := strings.Cut(gr.Detail, " ")
	var inside struct{ Grants []consent.Grant }
	e.Check(&r, "inside: GET /v1/grants", show(gr), gr.OK && json.Unmarshal([]byte(body), &inside) == nil && len(inside.Grants) == 0, "the sandbox's grants are not empty: something was applied")
	sl := s["slots inside"]
	empty := len(sl.Results) == 2
	for _, x := range sl.Results {
		empty = empty && x.OK && strings.TrimSpace(x.Detail) == ""
	}
	e.Check(&r, "inside: ls /grants/ro /grants/rw", sl.String(), empty, "a grant slot inside is not empty")
	e.Check(&r, "host: the loopback upstream of api.other.test and api.asked.test", fmt.Sprintf("%d connections", upstream.Count()), upstream.Count() == 0, "the refused host was reached")
	return r
}

// P34: a read-only folder grant approved while the workload runs: the
// same shell reads it, cannot write it; host root in the sandbox's mount
// and pid namespaces (nsenter -m -p, every capability: more than any
// process of the sandbox's user namespace has; not -U, whose setns into
// a child user namespace would only drop privilege) cannot clear its
// read-only flag nor unmount its mask (MNT_LOCK_READONLY, MNT_LOCKED:
// mount_namespaces(7)), while the same command remounts init's own bind
// (the control); revoked while the shell holds a file of it open: new
// opens fail, the revoke names the shell and its fd; corral approvals
// grants and the init's mountinfo agree at each step.
func runP34(ctx context.Context, e *Env) Result {
	r := newResult()
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return skip(r, "no nsenter (util-linux) on this host: the grant cannot be attacked from the sandbox's namespaces")
	}
	canary, secret := newToken(), newToken()
	in, _ := e.consentFolders(canary, secret, 0)
	docs := filepath.Join(in, "docs")
	ctl := e.TempDir("control")
	access := ""
	if p34Weak {
		access = "rw"
		e.Check(&r, "test hook: a read-write grant", "folders.access rw; the workload asks for docs read-write and it is approved so", true, "")
	}
	ro := []string{ctl}
	if p34Inject {
		ro = append(ro, docs) // visible in the sandbox's mount namespace, to be bound from there
	}
	policy := e.SystemPolicy(pol{RO: ro}.yaml() + e.consentYAML([]string{in + "/**"}, []string{filepath.Join(docs, "secret")}, access, "", ""))
	wd := e.TempDir("work")
	gp := provider.GrantSlotRO + "/docs"
	if p34Weak {
		gp = provider.GrantSlotRW + "/docs"
	}
	c := e.openConsent(ctx, &r, policy, wd, nil,
		step{Label: "before", Args: []string{"list", provider.GrantSlotRO}},
		step{Label: "ask", Args: []string{"consent", "ask-wait", askBody("folder", docs, access), "60"}},
		step{Label: "shell", Shell: "echo shell $$"},
		step{Label: "read", Args: []string{"read", gp + "/a.txt"}},
		step{Label: "write", Args: []string{"write", gp + "/a.txt"}},
		step{Label: "mask", Args: []string{"read", gp + "/secret/k"}},
		waitStep("granted", wd, "granted", "probed"),
		step{Label: "write after", Args: []string{"write", gp + "/a.txt"}},
		step{Label: "mask after", Args: []string{"read", gp + "/secret/k"}},
		step{Label: "hold", Shell: fmt.Sprintf("exec 5< %s && : > %s; until [ -e %s ]; do sleep 0.1; done", shq(gp+"/a.txt"), shq(filepath.Join(wd, "opened")), shq(filepath.Join(wd, "revoked")))},
		step{Label: "reopen", Args: []string{"read", gp + "/a.txt"}},
		step{Label: "held", Shell: "read -r l <&5; echo \"held: $l\""},
		step{Label: "grants inside", Args: []string{"consent", "get", "/v1/grants"}},
	)
	if c == nil {
		return r
	}
	defer c.close()
	req, ok := c.pending(ctx, docs)
	e.Check(&r, "host: the pending request (corral approvals list)", fmt.Sprintf("%+v", req), ok && req.Requester.PID > 0 && req.Ceiling == "consent.folders.ask[0]", "no pending request for the folder, with its requester named and its ceiling entry")
	if !ok {
		return r
	}
	shell := c.shellPid()
	init := sandboxInit(shell)
	if init == 0 {
		failNow(e, &r, "host: the sandbox's init", fmt.Errorf("not found above the workload shell (pid %d)", shell))
		return r
	}
	mi := fmt.Sprintf("host: /proc/%d/mountinfo (the sandbox's init)", init)
	// Step 1, pending: no grant, nothing mounted.
	var gs []consent.Grant
	shown, err := c.cliJSON(ctx, &gs, "grants")
	e.Check(&r, "host: pending: corral approvals grants", shown, err == nil && len(gs) == 0, "a grant is listed before the approval")
	ms, err := grantMounts(init)
	e.Check(&r, mi+" while pending", showMounts(ms), err == nil && len(ms) == 0, "something is mounted under the slots before the approval")
	nsIn := func(script string) (string, error) {
		out, err := exec.CommandContext(ctx, nsenter, "-t", strconv.Itoa(init), "-m", "-p", "--", "/bin/sh", "-c", script).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	// Step 2, approved: in force, read back.
	approve := []string{"approve", req.ID}
	if p34Inject {
		// The weakened run: the folder bound into the sandbox's mount
		// namespace from outside (setns, not propagation: nothing locks
		// it) on a tmpfs over the read-only slot, its mask an ordinary
		// tmpfs; the request denied.
		out, err := nsIn(fmt.Sprintf("mount -t tmpfs -o mode=755 none %[3]s && mkdir %[1]s && mount --bind %[2]s %[1]s && mount -o remount,bind,ro,nosuid,nodev %[1]s && mount -t tmpfs -o ro,mode=000,size=4k none %[1]s/secret", gp, docs, filepath.Dir(gp)))
		e.Check(&r, "test hook: the grant injected with nsenter, without propagation", fmt.Sprintf("%v: %s", err, out), err == nil, "the test hook could not inject the grant: "+out)
		approve = []string{"deny", req.ID}
	}
	o, eo, code := c.cli(ctx, approve...)
	e.Check(&r, "host: corral approvals approve "+req.ID, fmt.Sprintf("exit %d: %s %s", code, strings.TrimSpace(o), clip(eo, 300)), code == 0 && strings.Contains(o, req.ID+" approved, in force at "+gp),
		"the approval did not say it is in force at "+gp)
	shown, err = c.cliJSON(ctx, &gs, "grants")
	var g consent.Grant
	if len(gs) == 1 {
		g = gs[0]
	}
	e.Check(&r, "host: approved: corral approvals grants", shown,
		err == nil && len(gs) == 1 && g.Desired && g.Effective && g.Target == docs && string(g.Access) == "ro" && g.Folder != nil && g.Folder.State == provider.GrantEffective && g.Folder.ReadOnly && g.Folder.Locked && len(g.Folder.MountIDs) > 0,
		"the grant is not listed desired and effective, read-only and locked, with its mount ids")
	ms, _ = grantMounts(init)
	top := slices.IndexFunc(ms, func(m mountLine) bool { return m.Point == gp })
	mask := slices.IndexFunc(ms, func(m mountLine) bool { return m.Point == gp+"/secret" })
	e.Check(&r, mi+" once approved", showMounts(ms),
		top >= 0 && slices.Contains(ms[top].Opts, "ro") && mask >= 0 && g.Folder != nil && slices.Contains(g.Folder.MountIDs, ms[top].ID),
		"the init's mountinfo does not show the grant read-only with its mask, under the mount id the grants list")
	if !c.waitFile("granted") {
		failNow(e, &r, "the workload's use of the grant", fmt.Errorf("did not happen: %s", clip(c.run.stderr.String(), 600)))
		return r
	}
	// Step 3: host root in the sandbox's mount and pid namespaces.
	for _, a := range []string{"mount -o remount,rw " + gp, "mount -o remount,bind,rw " + gp, "umount " + gp + "/secret", "umount -l " + gp + "/secret"} {
		out, err := nsIn(a)
		e.Check(&r, "host root: nsenter -t "+strconv.Itoa(init)+" -m -p -- "+a, fmt.Sprintf("%v: %s", err, out), err != nil, a+" succeeded in the sandbox's namespaces: the grant is not locked")
	}
	out, err := nsIn("mount -o remount,bind,rw " + ctl)
	e.Check(&r, "host root: control: nsenter ... mount -o remount,bind,rw "+ctl+" (init's own read-only bind)", fmt.Sprintf("%v: %s", err, out), err == nil,
		"the control remount failed: the attacks above could not have succeeded, so they show nothing")
	ms, _ = grantMounts(init)
	top = slices.IndexFunc(ms, func(m mountLine) bool { return m.Point == gp })
	mask = slices.IndexFunc(ms, func(m mountLine) bool { return m.Point == gp+"/secret" })
	e.Check(&r, mi+" after the attacks", showMounts(ms), top >= 0 && slices.Contains(ms[top].Opts, "ro") && mask >= 0, "the grant is no longer read-only or its mask is gone")
	_ = c.touch("probed")
	if !c.waitFile("opened") {
		failNow(e, &r, "the workload's open of the grant", fmt.Errorf("did not happen: %s", clip(c.run.stderr.String(), 600)))
		return r
	}
	// Step 4, revoked while held on fd 5 by the shell.
	var rv consent.Grant
	shown, err = c.cliJSON(ctx, &rv, "revoke", g.ID)
	held := rv.Folder != nil && slices.ContainsFunc(rv.Folder.Holders, func(h provider.Holder) bool { return h.PID == shell && h.FD == 5 })
	e.Check(&r, "host: corral approvals revoke "+g.ID+" (the shell holds a file of it on fd 5)", shown,
		err == nil && !rv.Desired && !rv.Effective && rv.Folder != nil && rv.Folder.State == provider.GrantHeld && held && strings.Contains(rv.Detail, fmt.Sprintf("held: pid %d fd 5", shell)),
		fmt.Sprintf("the revoke does not report revoked-held with the holder (the shell, host pid %d, fd 5)", shell))
	txt, _, _ := c.cli(ctx, "grants")
	shown, err = c.cliJSON(ctx, &gs, "grants")
	g = consent.Grant{}
	if len(gs) == 1 {
		g = gs[0]
	}
	held = g.Folder != nil && slices.ContainsFunc(g.Folder.Holders, func(h provider.Holder) bool { return h.PID == shell && h.FD == 5 })
	e.Check(&r, "host: revoked: corral approvals grants", shown+"\ntext: "+clip(txt, 600),
		err == nil && len(gs) == 1 && !g.Desired && !g.Effective && held && strings.Contains(txt, fmt.Sprintf("held: pid %d fd 5", shell)),
		"after the revoke the grant is not listed desired false, effective false, with its holder")
	ms, _ = grantMounts(init)
	e.Check(&r, mi+" once revoked", showMounts(ms), len(ms) == 0, "the grant is still mounted after the revoke")
	_ = c.touch("revoked")
	res, err := c.run.Wait()
	if err != nil {
		failNow(e, &r, "the workload", err)
		return r
	}
	s := parseSteps(res)
	e.Check(&r, "run", brief(res), res.Code == 0 && s["end"].Ran, "the workload did not finish")
	b, _ := find(s["before"].Results, "list")
	e.Check(&r, "inside: ls "+provider.GrantSlotRO+" before the approval", show(b), b.OK && strings.TrimSpace(b.Detail) == "", "the slot was not empty before the approval")
	w, wok := answerOf(s["ask"], "consent wait")
	e.Check(&r, "inside: the workload's wait (same process tree, no restart)", w.String(), wok && w.State == consent.StateApproved && w.Effective && w.Path == gp,
		"the workload's wait did not report the grant approved and effective at "+gp)
	sh := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s["shell"].Text), "shell "))
	e.Check(&r, "inside: the shell that asked, read and held the grant ($$; host pid of the holder)", fmt.Sprintf("%s; host pid %d", sh, shell), sh != "" && shell > 0, "the workload shell was not found")
	rd, _ := find(s["read"].Results, "read")
	e.Check(&r, "inside: read "+gp+"/a.txt", show(rd), rd.OK && strings.Contains(rd.Detail, canary), "the workload that asked could not read the grant live")
	for _, l := range []string{"write", "write after"} {
		x, _ := find(s[l].Results, "write")
		e.Check(&r, "inside: "+l+" "+gp+"/a.txt", show(x), deniedErrno(x, "EROFS"), "a write into the read-only grant did not fail EROFS")
	}
	for _, l := range []string{"mask", "mask after"} {
		x, _ := find(s[l].Results, "read")
		e.CheckNoCanary(&r, "inside: "+l+": "+gp+"/secret/k", show(x), secret)
		e.Check(&r, "inside: "+l+" read "+gp+"/secret/k (consent.folders.never)", show(x), deniedErrno(x), "the never path inside the grant is readable")
	}
	rop, _ := find(s["reopen"].Results, "read")
	e.Check(&r, "inside: a new open after the revoke", show(rop), deniedErrno(rop, "ENOENT"), "a new open of the revoked grant did not fail")
	e.Check(&r, "inside: the fd held across the revoke (the kernel has no revoke: reported, not closed)", strings.TrimSpace(s["held"].Text), strings.Contains(s["held"].Text, canary), "the held fd did not read: the holder check above saw nothing real")
	if b, err := os.ReadFile(filepath.Join(docs, "a.txt")); err != nil || string(b) != canary+"\n" {
		e.Check(&r, "host: "+docs+"/a.txt after the run", string(b), false, "the granted file changed on the host")
	}
	return r
}

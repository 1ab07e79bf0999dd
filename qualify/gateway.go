//go:build linux

package qualify

// LinuxGateway: the cases run on persistent linux sandboxes of a real
// gateway, through the CLI of the binary under test. The runner starts
// one gateway per qualify run (`corral gateway serve --provider linux` on
// a unix socket and database in the run's temp dir), and each Run of a
// case is a sandbox of its own: `corral sandbox create --provider linux
// [--policy FILE] -C WORKDIR`, then `corral sandbox exec ID -- CMD` (whose
// status, stdout and stderr are the Run's Outcome), then `corral sandbox
// delete ID`, after which nothing of the sandbox may be left: no
// supervisor, no state directory, no cgroup.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// LinuxGateway qualifies the gateway's linux sandboxes (docs/gateway.md):
// every case runs, each Run in a sandbox of the run's gateway made for
// it. A Run's extra environment (Run.Env: "for corral itself") is the
// environment of a gateway started for it (one per environment in a
// case), since a gateway's environment is fixed for its life and an exec
// carries none.
// `corral run` flags map to the gateway's surface: -v to the layers
// `corral sandbox get` reports, --audit FILE to `corral sandbox audit`,
// -t to `sandbox exec -t`; --strict-tree has no equivalent (P25 runs
// without it there).
const LinuxGateway = "linux-gateway"

// gatewayProc is a `corral gateway serve` the runner started.
type gatewayProc struct {
	dir  string   // its directory: socket, database, log
	addr string   // unix:SOCKET
	home string   // its HOME
	env  []string // what the runner added to its environment
	uid  int      // whom it runs as
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when it has exited
	mu   sync.Mutex
	ids  []string // the sandboxes made through it
}

// gatewayCase is a LinuxGateway case's bookkeeping (caseState.gateway).
type gatewayCase struct {
	sandboxes []*gwSandbox
	gateways  map[string]*gatewayProc // a Run's own, by its environment
	evidence  []Evidence              // what gatewayCleanup found
}

// gwSandbox is one sandbox a Run made (or tried to).
type gwSandbox struct {
	g       *gatewayProc
	create  string // the create command, for evidence
	id      string // "" when nothing was made (refused before its record)
	outcome string // the create's refusal, or the sandbox's layers
	super   string // its supervisor: pid and state dir
	mu      sync.Mutex
	done    bool
	notes   []string // what happened after its exec
	problem []string // what its delete left
}

// gatewayUID is whom the gateways run as: Options.User, or the caller.
func (rs *runState) gatewayUID() int {
	if u := rs.opts.User; u != nil {
		return u.UID
	}
	return os.Geteuid()
}

// chownToUser gives path to Options.User, when set.
func (rs *runState) chownToUser(path string) error {
	if u := rs.opts.User; u != nil && u.UID != os.Geteuid() {
		return os.Lchown(path, u.UID, u.GID)
	}
	return nil
}

// startRunGateway starts the run's gateway, with its home (the cases'
// Env.Home).
func (rs *runState) startRunGateway(ctx context.Context) error {
	rs.gwHome = filepath.Join(rs.tmp, "gateway-home")
	if err := os.Mkdir(rs.gwHome, 0o755); err != nil {
		return err
	}
	if err := rs.chownToUser(rs.gwHome); err != nil {
		return err
	}
	g, err := rs.startGateway(ctx, filepath.Join(rs.tmp, "gateway"), rs.gwHome, nil)
	if err != nil {
		return err
	}
	rs.gw = g
	return nil
}

// stopRunGateway makes sure none of the run's gateway's sandboxes is
// left (`corral sandbox list`), stops it (SIGTERM) and checks that
// nothing of any sandbox made through it is left on the host. The
// evidence says what was done; problem, what was wrong.
func (rs *runState) stopRunGateway() (Evidence, string) {
	g := rs.gw
	rs.gw = nil
	var got, problems []string
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if ids, err := g.list(ctx, rs); err != nil {
		problems = append(problems, "corral sandbox list: "+err.Error())
	} else if len(ids) > 0 {
		problems = append(problems, "sandboxes still in the gateway after every case: "+strings.Join(ids, " ")+" (deleted now)")
		for _, id := range ids {
			_, _ = g.client(ctx, rs, nil, nil, "delete", id)
		}
	} else {
		got = append(got, "corral sandbox list: none left")
	}
	st, err := g.stop()
	got = append(got, "gateway: "+st)
	if err != nil {
		problems = append(problems, err.Error())
	}
	g.mu.Lock()
	ids := slices.Clone(g.ids)
	g.mu.Unlock()
	left := leftovers(ids, g.uid)
	if len(left) > 0 {
		problems = append(problems, "left after the gateway stopped: "+strings.Join(left, "; "))
	}
	got = append(got, fmt.Sprintf("%d sandboxes made through it; left on the host (supervisors, state dirs, cgroups): %d", len(ids), len(left)))
	got = append(got, problems...)
	return Evidence{Attempt: "runner: stop the run's gateway (" + g.addr + ") and look for what its sandboxes left", Got: bound(strings.Join(got, "; "), 2000)}, strings.Join(problems, "; ")
}

// startGateway starts `corral gateway serve --provider linux` in dir with
// HOME home and env added, as Options.User, and waits until it answers.
func (rs *runState) startGateway(ctx context.Context, dir, home string, env []string) (*gatewayProc, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := rs.chownToUser(dir); err != nil {
		return nil, err
	}
	g := &gatewayProc{dir: dir, addr: "unix:" + filepath.Join(dir, "gw.sock"), home: home, env: env, uid: rs.gatewayUID(), log: filepath.Join(dir, "gateway.log"), done: make(chan struct{})}
	logf, err := os.OpenFile(g.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	// Not bound to ctx: stop ends it, after its sandboxes are deleted.
	g.cmd = exec.Command(rs.bin, "gateway", "serve", "--provider", "linux", "--listen", g.addr, "--db", filepath.Join(dir, "db", "gateway.db"))
	g.cmd.Env = append(append([]string{"PATH=" + hostPath, "HOME=" + home, "LANG=C"}, providerEnv()...), env...)
	g.cmd.Dir = dir
	g.cmd.Stdout, g.cmd.Stderr = logf, logf
	rs.asUser(g.cmd)
	if g.cmd.SysProcAttr == nil {
		g.cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	g.cmd.SysProcAttr.Setpgid = true // a Ctrl-C at qualify's terminal is qualify's to handle
	if err := g.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = g.cmd.Wait(); close(g.done) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-g.done:
			return nil, fmt.Errorf("corral gateway serve exited (%v): %s", g.cmd.ProcessState, g.logTail())
		case <-time.After(100 * time.Millisecond):
		}
		if _, err := os.Stat(filepath.Join(dir, "gw.sock")); err == nil {
			if _, err := g.list(ctx, rs); err == nil {
				return g, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_, _ = g.stop()
			return nil, fmt.Errorf("corral gateway serve did not answer within 20s: %s", g.logTail())
		}
	}
}

// logTail is the end of the gateway's log, for errors.
func (g *gatewayProc) logTail() string {
	b, _ := os.ReadFile(g.log)
	s := strings.TrimSpace(string(b))
	if len(s) > 1500 {
		s = "..." + s[len(s)-1500:]
	}
	return s
}

// stop ends the gateway with SIGTERM (SIGKILL after 40 s: it lets calls
// under way finish for up to 30 s) and says how it ended; the error is
// for anything but exit 0.
func (g *gatewayProc) stop() (string, error) {
	select {
	case <-g.done:
	default:
		_ = g.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-g.done:
		case <-time.After(40 * time.Second):
			_ = g.cmd.Process.Kill()
			<-g.done
			return "did not stop within 40s of SIGTERM: killed", fmt.Errorf("the gateway did not stop within 40s of SIGTERM: %s", g.logTail())
		}
	}
	ps := g.cmd.ProcessState
	if ps == nil || !ps.Success() {
		return fmt.Sprintf("ended: %v", ps), fmt.Errorf("the gateway ended with %v: %s", ps, g.logTail())
	}
	return fmt.Sprintf("pid %d stopped by SIGTERM, exit 0", g.cmd.Process.Pid), nil
}

// client runs `corral sandbox VERB --gateway ADDR ARGS...` to completion
// as Options.User (env and extra files added) and returns its stdout; a
// non-zero exit is an error with its stderr.
func (g *gatewayProc) client(ctx context.Context, rs *runState, env []string, extra []*os.File, verb string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := g.command(ctx, rs, env, verb, args...)
	cmd.ExtraFiles = extra
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("did not finish within 60s (killed)")
		}
		return out.Bytes(), fmt.Errorf("corral sandbox %s %s: %v: %s", verb, strings.Join(args, " "), err, bound(strings.TrimSpace(errb.String()), 1000))
	}
	return out.Bytes(), nil
}

// command is `corral sandbox VERB --gateway ADDR ARGS...` (not started),
// run from the run's temp dir.
func (g *gatewayProc) command(ctx context.Context, rs *runState, env []string, verb string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, rs.bin, append([]string{"sandbox", verb, "--gateway", g.addr}, args...)...)
	cmd.Env = append(append([]string{"PATH=" + hostPath, "HOME=" + g.home, "LANG=C"}, providerEnv()...), env...)
	cmd.Dir = rs.tmp
	cmd.WaitDelay = 5 * time.Second
	rs.asUser(cmd)
	return cmd
}

// list is the ids of the gateway's sandboxes.
func (g *gatewayProc) list(ctx context.Context, rs *runState) ([]string, error) {
	out, err := g.client(ctx, rs, nil, nil, "list", "-o", "json")
	if err != nil {
		return nil, err
	}
	var l struct {
		Sandboxes []struct {
			ID string `json:"id"`
		} `json:"sandboxes"`
	}
	if err := json.Unmarshal(out, &l); err != nil {
		return nil, fmt.Errorf("corral sandbox list -o json: %v: %s", err, bound(string(out), 300))
	}
	var ids []string
	for _, s := range l.Sandboxes {
		ids = append(ids, s.ID)
	}
	return ids, nil
}

// gatewayFor is the gateway a Run with env uses: the run's, or for a Run
// that adds to corral's environment a gateway of its own with env, made
// for the case (the same env shares one) and stopped after it.
func (e *Env) gatewayFor(ctx context.Context, env []string) (*gatewayProc, error) {
	rs := e.st.run
	if len(env) == 0 {
		if rs.gw == nil {
			return nil, errors.New("the run's gateway is not running")
		}
		return rs.gw, nil
	}
	key := strings.Join(env, "\x00")
	e.st.mu.Lock()
	g := e.st.gateway.gateways[key]
	e.st.mu.Unlock()
	if g != nil {
		return g, nil
	}
	g, err := rs.startGateway(ctx, e.TempDir("gateway"), e.Home, env)
	if err != nil {
		return nil, fmt.Errorf("a gateway with %s: %w", envNames(env), err)
	}
	e.st.mu.Lock()
	if e.st.gateway.gateways == nil {
		e.st.gateway.gateways = map[string]*gatewayProc{}
	}
	e.st.gateway.gateways[key] = g
	e.st.mu.Unlock()
	return g, nil
}

// envNames is the names of env's variables (their values may be the
// case's secrets).
func envNames(env []string) string {
	var n []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		n = append(n, k)
	}
	return strings.Join(n, ", ")
}

// gwRun is how a Run reaches the gateway.
type gwRun struct {
	policy  string     // the policy file; "" for the built-in default
	workdir string     // -C; "" for none (the client's working directory)
	flags   []string   // corral run flags: -v, -t, --audit FILE, --provider P
	extra   []*os.File // open in the clients, as the caller's fds are
	// create and createEnv are more arguments and environment of the
	// create alone: --credential NAME=env:VAR, the value in VAR.
	create, createEnv []string
}

// gatewayFlags maps corral run flags to the gateway's: the create's
// provider, -v (the layers in force, as `corral sandbox get` reports
// them), -t, and --audit FILE (the sandbox's audit log, `corral sandbox
// audit`, copied there before the delete).
type gatewayFlags struct {
	provider, audit string
	verbose, tty    bool
}

func parseGatewayFlags(flags []string) (gatewayFlags, error) {
	f := gatewayFlags{provider: "linux"}
	for i := 0; i < len(flags); i++ {
		value := func() (string, error) {
			if i+1 >= len(flags) {
				return "", fmt.Errorf("flag %s needs a value", flags[i])
			}
			i++
			return flags[i], nil
		}
		var err error
		switch flags[i] {
		case "-v":
			f.verbose = true
		case "-t":
			f.tty = true
		case "--audit":
			f.audit, err = value()
		case "--provider":
			f.provider, err = value()
		default:
			err = fmt.Errorf("corral run flag %q has no equivalent through the gateway", flags[i])
		}
		if err != nil {
			return f, err
		}
	}
	return f, nil
}

// sandboxID is the shape of a sandbox id (provider.NewID); failedID
// finds it in a failed create's error ("... sandbox ID: ...").
var (
	sandboxID = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^corral-[0-9a-f]{12}$`) })
	failedID  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\bsandbox (corral-[0-9a-f]{12})\b`) })
)

// gatewayStart runs r in a sandbox of its own: created now (a refused
// create is the Run's outcome, and nothing else runs), exec'd in the
// background, deleted when the exec has ended (Running.Wait). raw, when
// set, is a rawRun's policy file, workdir, flags and fds; otherwise they
// are made from r as Command would. r.Timeout must be set.
func (e *Env) gatewayStart(ctx context.Context, r Run, raw *gwRun) (*Running, error) {
	if raw == nil {
		raw = &gwRun{flags: r.Flags}
		if r.Policy != "" {
			raw.policy = e.PolicyPath(r.Policy)
		}
		if raw.workdir = r.Workdir; raw.workdir == "" {
			raw.workdir = e.TempDir("work")
		}
	}
	f, err := parseGatewayFlags(raw.flags)
	if err != nil {
		return nil, fmt.Errorf("qualify: %w", err)
	}
	e.handOver(e.Dir) // after the workdir is made: it too
	e.handOver(e.Home)
	rctx, cancel := context.WithTimeout(ctx, r.Timeout)
	g, err := e.gatewayFor(rctx, r.Env)
	if err != nil {
		cancel()
		return nil, err
	}
	sb, create, refused, err := e.gatewayCreate(rctx, g, append(slices.Clone(r.Env), raw.createEnv...), raw.extra, append([]string{"--provider", f.provider}, raw.create...), raw.policy, raw.workdir)
	if err != nil {
		cancel()
		return nil, err
	}
	run := &Running{Cmd: create, run: r, stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, ctx: rctx, cancel: cancel}
	if refused != nil {
		run.refused = refused
		run.after = func() { e.finishSandbox(sb, "") } // the record of a create that failed
		return run, nil
	}
	if f.verbose {
		// As corral run -v prints the layers in force before the
		// workload's output: the gateway's report of them.
		run.stderr.WriteString(sb.get(rctx, e))
	}
	args := []string{}
	if r.Stdin != "" || f.tty {
		args = append(args, "-i")
	}
	if f.tty {
		args = append(args, "-t")
	}
	args = append(append(args, sb.id, "--"), e.argv(r)...)
	cmd := g.command(rctx, e.st.run, r.Env, "exec", args...)
	cmd.Dir = e.Dir
	cmd.ExtraFiles = raw.extra
	if r.Stdin != "" {
		cmd.Stdin = strings.NewReader(r.Stdin)
	}
	run.Cmd = cmd
	run.after = func() { e.finishSandbox(sb, f.audit) }
	if _, err := e.start(run); err != nil {
		e.finishSandbox(sb, "")
		return nil, err
	}
	return run, nil
}

// gatewayCreate runs `corral sandbox create ARGS [--policy F] [-C WD]`
// through g (ARGS: --provider PROV and what else the Run gives). A refusal (non-zero exit) is returned as refused,
// with the create's exit status and output (a create that failed after
// its record was stored names the sandbox: sb.id, whose record
// finishSandbox deletes); err is for a create that did not run or printed
// no sandbox id.
func (e *Env) gatewayCreate(ctx context.Context, g *gatewayProc, env []string, extra []*os.File, args []string, policy, wd string) (sb *gwSandbox, create *exec.Cmd, refused *Outcome, err error) {
	args = slices.Clone(args)
	if policy != "" {
		args = append(args, "--policy", policy)
	}
	if wd != "" {
		args = append(args, "-C", wd)
	}
	create = g.command(ctx, e.st.run, env, "create", args...)
	create.Dir = e.Dir // as corral run's: the workdir when no -C is given
	create.ExtraFiles = extra
	var out, errb bytes.Buffer
	create.Stdout, create.Stderr = &out, &errb
	t0 := time.Now()
	rerr := create.Run()
	o := Outcome{Stdout: out.String(), Stderr: errb.String(), Elapsed: time.Since(t0)}
	sb = &gwSandbox{g: g, create: "corral sandbox create " + e.shortPaths(shellJoin(args))}
	if g != e.st.run.gw {
		sb.create += " (a gateway of the run's own, with " + envNames(env) + ")"
	}
	e.st.mu.Lock()
	e.st.gateway.sandboxes = append(e.st.gateway.sandboxes, sb)
	e.st.mu.Unlock()
	var ee *exec.ExitError
	switch {
	case errors.As(rerr, &ee):
		o.Code = exitCode(ee.ProcessState)
		sb.outcome = "refused: " + brief(o)
		if m := failedID().FindStringSubmatch(o.Stderr); m != nil {
			sb.id, sb.super = m[1], "the record of a failed create"
			g.mu.Lock()
			g.ids = append(g.ids, sb.id)
			g.mu.Unlock()
		} else {
			sb.done = true // nothing was made: nothing to delete
		}
		return sb, create, &o, nil
	case rerr != nil:
		sb.outcome, sb.done = "did not run: "+rerr.Error(), true
		return nil, nil, nil, fmt.Errorf("corral sandbox create: %w", rerr)
	}
	id := strings.TrimSpace(o.Stdout)
	if !sandboxID().MatchString(id) {
		sb.outcome, sb.done = "no sandbox id: "+briefOut(o), true
		return nil, nil, nil, fmt.Errorf("corral sandbox create printed no sandbox id: %s", briefOut(o))
	}
	sb.id = id
	g.mu.Lock()
	g.ids = append(g.ids, id)
	g.mu.Unlock()
	if pid, dir := supervisorOf(id); pid > 0 {
		sb.super = fmt.Sprintf("supervisor pid %d, state dir %s", pid, dir)
	} else {
		sb.super = "no supervisor process found for it"
	}
	sb.outcome = sb.layers(ctx, e)
	return sb, create, nil, nil
}

// shortPaths shows the case dir's paths relative to it.
func (e *Env) shortPaths(s string) string {
	return strings.ReplaceAll(s, e.Dir+"/", "")
}

// get is `corral sandbox get ID`: the sandbox's phase, layers in force
// (verified from outside), losses and events.
func (sb *gwSandbox) get(ctx context.Context, e *Env) string {
	out, err := sb.g.client(ctx, e.st.run, nil, nil, "get", sb.id)
	if err != nil {
		return err.Error() + "\n"
	}
	return string(out)
}

// layers is the sandbox's layers as get reports them, on one line.
func (sb *gwSandbox) layers(ctx context.Context, e *Env) string {
	var l []string
	for name, state := range layerStates(sb.get(ctx, e)) {
		l = append(l, name+" "+state)
	}
	slices.Sort(l)
	return "layers " + strings.Join(l, ", ")
}

// finishSandbox copies the sandbox's audit log to audit (when set),
// deletes it and checks that nothing of it is left. Once per sandbox.
func (e *Env) finishSandbox(sb *gwSandbox, audit string) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.done {
		return
	}
	sb.done = true
	rs := e.st.run
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if audit != "" {
		out, err := sb.g.client(ctx, rs, nil, nil, "audit", sb.id)
		if err == nil {
			err = writeHostFile(audit, string(out), 0o644)
		}
		if err != nil {
			sb.problem = append(sb.problem, "copy its audit log: "+err.Error())
		} else {
			sb.notes = append(sb.notes, fmt.Sprintf("audit log (%d bytes) copied with corral sandbox audit", len(out)))
		}
	}
	if _, err := sb.g.client(ctx, rs, nil, nil, "delete", sb.id); err != nil {
		sb.problem = append(sb.problem, err.Error())
		return
	}
	var left []string
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if left = leftovers([]string{sb.id}, sb.g.uid); len(left) == 0 || time.Now().After(end) {
			break
		}
	}
	if len(left) > 0 {
		sb.problem = append(sb.problem, "left after corral sandbox delete: "+strings.Join(left, "; "))
		return
	}
	sb.notes = append(sb.notes, "deleted: no supervisor, state dir or cgroup left")
}

// gatewayCleanup ends what the case left running (so that each exec's
// sandbox is deleted), deletes the sandboxes no Run deleted, stops the
// case's own gateways and records each sandbox as evidence. It returns
// what was wrong.
func (e *Env) gatewayCleanup() []string {
	st := e.st
	st.mu.Lock()
	started := slices.Clone(st.started)
	st.mu.Unlock()
	for _, r := range started {
		r.abandon()
	}
	st.mu.Lock()
	sbs := slices.Clone(st.gateway.sandboxes)
	gws := st.gateway.gateways
	st.gateway.gateways = nil
	st.mu.Unlock()
	var problems []string
	for _, sb := range sbs {
		e.finishSandbox(sb, "")
		sb.mu.Lock()
		got := sb.outcome
		if sb.id != "" {
			got = sb.id + " (" + sb.super + "); " + got
		}
		for _, n := range append(slices.Clone(sb.notes), sb.problem...) {
			got += "; " + n
		}
		for _, p := range sb.problem {
			problems = append(problems, "gateway: sandbox "+sb.id+": "+p)
		}
		sb.mu.Unlock()
		st.gateway.evidence = append(st.gateway.evidence, Evidence{Attempt: "runner: through the gateway: " + sb.create, Got: bound(got, 2000)})
	}
	for _, key := range slices.Sorted(maps.Keys(gws)) {
		g := gws[key]
		s, err := g.stop()
		got := "stopped: " + s
		if err != nil {
			problems = append(problems, "gateway with "+envNames(g.env)+": "+err.Error())
		}
		if left := leftovers(g.ids, g.uid); len(left) > 0 {
			got += "; left: " + strings.Join(left, "; ")
			problems = append(problems, "gateway with "+envNames(g.env)+": left after it stopped: "+strings.Join(left, "; "))
		}
		st.gateway.evidence = append(st.gateway.evidence, Evidence{Attempt: "runner: stop the case's gateway with " + envNames(g.env), Got: got})
	}
	return problems
}

// supervisorOf is the pid and state dir of sandbox id's supervisor
// (`corral __corral_persist DIR`, DIR ending in /ID), 0 when none runs.
func supervisorOf(id string) (pid int, dir string) {
	eachProc(func(p int, argv []string) {
		if len(argv) == 3 && argv[1] == "__corral_persist" && filepath.Base(argv[2]) == id {
			pid, dir = p, argv[2]
		}
	})
	return pid, dir
}

// stateBase is where a gateway of uid keeps its linux sandboxes' state
// (linux.StateBase, for the environment the runner gives it: no
// CORRAL_LINUX_STATE_DIR, XDG_RUNTIME_DIR or TMPDIR).
func stateBase(uid int) string {
	if uid == 0 {
		return "/run/corral/sandboxes"
	}
	return filepath.Join("/tmp", fmt.Sprintf("corral-%d", uid), "sandboxes")
}

// leftovers lists what is left on the host of the sandboxes ids (of a
// gateway running as uid): supervisor processes, state dirs, cgroup
// directories named after them.
func leftovers(ids []string, uid int) []string {
	if len(ids) == 0 {
		return nil
	}
	var out []string
	for _, id := range ids {
		if pid, dir := supervisorOf(id); pid > 0 {
			out = append(out, fmt.Sprintf("supervisor %d (%s)", pid, dir))
		}
		if d := filepath.Join(stateBase(uid), id); hostExists(d) {
			out = append(out, "state dir "+d)
		}
	}
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && slices.Contains(ids, d.Name()) {
			out = append(out, "cgroup "+p)
			return filepath.SkipDir
		}
		return nil
	})
	return out
}

// runLine is a shell command line that runs cmdline (quoted for sh)
// through corral with the policy file, workdir and flags: `corral run
// ...`, or for LinuxGateway `corral sandbox exec ... ID -- ...` in a
// sandbox made now (deleted after the case; a refused create is an
// error).
func (e *Env) runLine(ctx context.Context, flags []string, policy, wd, cmdline string) (string, error) {
	if e.Provider != LinuxGateway {
		return fmt.Sprintf("%s %s %s --policy %s -C %s -- %s", shq(e.Bin), strings.Join(e.runArgs(), " "), strings.Join(flags, " "), shq(policy), shq(wd), cmdline), nil
	}
	f, err := parseGatewayFlags(flags)
	if err != nil {
		return "", err
	}
	if f.verbose || f.audit != "" {
		return "", errors.New("qualify: runLine through the gateway takes -t only")
	}
	e.handOver(e.Dir)
	e.handOver(e.Home)
	g, err := e.gatewayFor(ctx, nil)
	if err != nil {
		return "", err
	}
	sb, _, refused, err := e.gatewayCreate(ctx, g, nil, nil, []string{"--provider", f.provider}, policy, wd)
	if err != nil {
		return "", err
	}
	if refused != nil {
		return "", fmt.Errorf("corral sandbox create: %s", brief(*refused))
	}
	line := []string{shq(e.Bin), "sandbox", "exec", "--gateway", shq(g.addr)}
	if f.tty {
		line = append(line, "-t")
	}
	return strings.Join(append(line, sb.id, "--", cmdline), " "), nil
}

// Package providertest is the provider conformance suite: the same
// lifecycle tests, on real sandboxes, for every provider (linux, docker,
// mxc with its stand-in executor). A provider's tests call Run with a
// Harness. What a provider can do is read from its Capabilities (network
// modes, persistent lifetimes, layers this host lacks), from the optional
// interfaces it implements (provider.Persistent, provider.Manager) and
// from the Harness, never from its name.
package providertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// Harness is what the suite needs of one provider.
type Harness struct {
	// New returns a new value of the provider under test, as another
	// process would make it: Recover is tried from a fresh one.
	New func() provider.Provider
	// ExecOnce says a per-run sandbox runs one Exec (linux: its init
	// runs one workload); a second must fail, not hang. Otherwise Exec
	// may be called again, as it always may in a persistent sandbox.
	ExecOnce bool
	// Adjust, if set, changes the default policy before it is resolved
	// (say, for a backend that takes no filesystem grants).
	Adjust func(*policy.Policy)
	// Census lists what of this process's sandboxes exists on the host
	// now (containers, cgroups, state directories, records, sessions):
	// after Deprovision or a refused Provision it is what it was before.
	Census func(t *testing.T) []string
}

// opTimeout bounds every lifecycle call of the suite.
const opTimeout = 2 * time.Minute

type suite struct {
	h        Harness
	p        provider.Provider
	opts     provider.ProvisionOptions // of every sandbox the exec tests make
	execOnce bool
	caps     provider.Capabilities
	network  policy.NetworkMode // the mode most tests use: none if supported
	optional []policy.Layer     // layers this host cannot apply, made optional
}

// Run runs the suite against h's provider. Tests run one after another:
// the census compares the host before and after each.
func Run(t *testing.T, h Harness) {
	s := &suite{h: h, p: h.New(), execOnce: h.ExecOnce}
	s.caps = s.p.Capabilities(context.Background())
	if len(s.caps.NetworkModes) == 0 {
		t.Fatalf("%s declares no network mode", s.p.Name())
	}
	s.network = s.caps.NetworkModes[0]
	for _, m := range []policy.NetworkMode{policy.NetworkProxy, policy.NetworkNone} {
		if slices.Contains(s.caps.NetworkModes, m) {
			s.network = m
		}
	}
	for _, l := range s.caps.Layers {
		if l.State == provider.LayerUnavailable {
			s.optional = append(s.optional, l.Layer)
		}
	}
	t.Logf("%s: network %s; layers unavailable here, made optional: %v", s.p.Name(), s.network, s.optional)
	t.Run("Map", s.testMap)
	s.lifecycle(t)
	t.Run("RefusesErrorLoss", s.testRejected)
	t.Run("Persistent", s.testPersistent)
	if s.persistentLifetime() {
		// The same lifecycle and exec tests on persistent sandboxes,
		// whose execs may take another path (their own supervisor).
		t.Run("AsPersistent", func(t *testing.T) {
			ps := *s
			ps.opts, ps.execOnce = provider.ProvisionOptions{Persistent: true}, false
			if _, ok := s.p.(provider.Manager); ok {
				ps.opts.Owner = "providertest-" + token()
			}
			ps.lifecycle(t)
		})
	}
	t.Run("RecoverGarbage", s.testRecoverGarbage)
}

// lifecycle runs the tests of one sandbox's lifecycle and execs.
func (s *suite) lifecycle(t *testing.T) {
	t.Run("Lifecycle", s.testLifecycle)
	t.Run("ExitCodeAndStderr", s.testExitCode)
	t.Run("CommandNotFound", s.testNotFound)
	t.Run("ExecAgain", s.testExecAgain)
	t.Run("StopDeprovisionTwice", s.testIdempotent)
	t.Run("DeprovisionWithoutStart", s.testDeprovisionUnstarted)
	t.Run("CancelExec", s.testCancel)
	t.Run("Signal", s.testSignal)
	t.Run("Layers", s.testLayers)
	t.Run("EgressListener", s.testEgress)
}

// ctxT is a context for one lifecycle call, ended with the test.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	t.Cleanup(cancel)
	return ctx
}

// token is a fresh string for a workload to print.
func token() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "tok" + hex.EncodeToString(b)
}

// PublicDir is a fresh directory under the system's temporary directory,
// 0755 so that a workload of another uid can enter it (t.TempDir's are
// 0700), and removed after the test.
func PublicDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "providertest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// resolve is the default policy with network mode, the harness's
// changes and the host's missing layers optional, resolved for a fresh
// workdir and home. As root the workdir belongs to nobody, so that the
// workload (which runs as the workdir's owner, never root) can write it.
func (s *suite) resolve(t *testing.T, mode policy.NetworkMode) *policy.Resolved {
	t.Helper()
	pol := policy.Default()
	pol.Network.Mode = mode
	for _, l := range s.optional {
		pol.Layers[l] = policy.Optional
	}
	if s.h.Adjust != nil {
		s.h.Adjust(pol)
	}
	wd, home := PublicDir(t), PublicDir(t)
	if os.Geteuid() == 0 {
		if err := os.Chown(wd, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	r, err := pol.Resolve(policy.Context{Home: home, Workdir: wd, Environ: []string{"PATH=" + policy.DefaultPATH, "LANG=C"}})
	if err != nil {
		t.Fatalf("resolve the default policy (network %s): %v", mode, err)
	}
	return r
}

// plan maps the default policy with network mode; any error loss fails
// the test.
func (s *suite) plan(t *testing.T, mode policy.NetworkMode) *provider.Plan {
	t.Helper()
	r := s.resolve(t, mode)
	plan, loss := s.p.Map(ctxT(t), r)
	if loss.HasErrors() {
		t.Fatalf("Map (network %s) has error losses: %s", mode, provider.Rejected(loss))
	}
	return plan
}

// census is the harness's census plus the entries of the plan's workdir
// (placeholders for absent protected names must go too).
func (s *suite) census(t *testing.T, plan *provider.Plan) []string {
	t.Helper()
	var out []string
	if s.h.Census != nil {
		out = s.h.Census(t)
	}
	if plan != nil && plan.Policy != nil {
		ents, err := os.ReadDir(plan.Policy.Workdir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			out = append(out, "workdir: "+e.Name())
		}
	}
	slices.Sort(out)
	return out
}

// sameCensus fails the test unless the census (retried for a few
// seconds) is before.
func (s *suite) sameCensus(t *testing.T, plan *provider.Plan, before []string, after string) {
	t.Helper()
	var now []string
	for i := 0; i < 50; i++ {
		if now = s.census(t, plan); slices.Equal(now, before) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	var added, gone []string
	for _, x := range now {
		if !slices.Contains(before, x) {
			added = append(added, x)
		}
	}
	for _, x := range before {
		if !slices.Contains(now, x) {
			gone = append(gone, x)
		}
	}
	t.Errorf("after %s the host has %q more and %q less than before", after, added, gone)
}

// provision provisions plan and registers Stop and Deprovision as
// cleanup.
func (s *suite) provision(t *testing.T, plan *provider.Plan, opts provider.ProvisionOptions) provider.Sandbox {
	t.Helper()
	sb, err := s.p.Provision(ctxT(t), plan, opts)
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if sb == nil || sb.ID() == "" {
		t.Fatalf("Provision gave sandbox %v without an id", sb)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		_ = sb.Stop(ctx)
		_ = sb.Deprovision(ctx)
	})
	return sb
}

// fresh is a provisioned sandbox for the default policy with the
// suite's network mode, and the census from before it was.
func (s *suite) fresh(t *testing.T) (provider.Sandbox, *provider.Plan, []string) {
	t.Helper()
	plan := s.plan(t, s.network)
	before := s.census(t, plan)
	return s.provision(t, plan, s.opts), plan, before
}

// started is a started sandbox for the default policy with mode.
func (s *suite) started(t *testing.T, mode policy.NetworkMode) provider.Sandbox {
	t.Helper()
	sb := s.provision(t, s.plan(t, mode), s.opts)
	if err := sb.Start(ctxT(t)); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return sb
}

type result struct {
	st             provider.ExitStatus
	err            error
	stdout, stderr string
	pid            int // from ExecSpec.Started, 0 if not called
}

// exec runs args in sb with stdout and stderr captured in files.
func exec(t *testing.T, ctx context.Context, sb provider.Sandbox, args ...string) result {
	t.Helper()
	return <-startExec(t, ctx, sb, nil, args...)
}

// startExec runs args in sb in the background; started, if set, gets the
// workload's host pid (ExecSpec.Started).
func startExec(t *testing.T, ctx context.Context, sb provider.Sandbox, started chan<- int, args ...string) <-chan result {
	t.Helper()
	dir := t.TempDir()
	var files [2]*os.File
	for i, name := range []string{"stdout", "stderr"} {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		files[i] = f
	}
	done := make(chan result, 1)
	go func() {
		defer files[0].Close()
		defer files[1].Close()
		var r result
		spec := provider.ExecSpec{Args: args, Stdout: files[0], Stderr: files[1]}
		if started != nil {
			spec.Started = func(pid int) { r.pid = pid; started <- pid }
		}
		r.st, r.err = sb.Exec(ctx, spec)
		out, _ := os.ReadFile(files[0].Name())
		errOut, _ := os.ReadFile(files[1].Name())
		r.stdout, r.stderr = string(out), string(errOut)
		done <- r
	}()
	return done
}

// Map of the default policy has no error loss, carries its loss report
// and lists every layer once.
func (s *suite) testMap(t *testing.T) {
	r := s.resolve(t, s.network)
	plan, loss := s.p.Map(ctxT(t), r)
	if loss.HasErrors() {
		t.Fatalf("the default policy has error losses: %s", provider.Rejected(loss))
	}
	if plan == nil || plan.Provider != s.p.Name() {
		t.Fatalf("plan %+v is not %s's", plan, s.p.Name())
	}
	if !slices.Equal(plan.Loss, loss) {
		t.Errorf("plan.Loss %+v is not the loss report Map returned %+v", plan.Loss, loss)
	}
	for _, l := range policy.AllLayers {
		n := 0
		for _, ls := range plan.Layers {
			if ls.Layer == l {
				n++
			}
		}
		if n != 1 {
			t.Errorf("layer %s appears %d times in the plan's layers", l, n)
		}
	}
}

// Provision, Start, Exec (its output captured), Stop and Deprovision
// leave the host as it was.
func (s *suite) testLifecycle(t *testing.T) {
	sb, plan, before := s.fresh(t)
	ctx := ctxT(t)
	if err := sb.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	tok := token()
	r := exec(t, ctx, sb, "echo", tok)
	if r.err != nil || r.st.Code != 0 || r.st.Signal != "" {
		t.Errorf("echo: status %+v, error %v (stderr %q)", r.st, r.err, r.stderr)
	}
	if r.stdout != tok+"\n" {
		t.Errorf("echo printed %q, want %q", r.stdout, tok+"\n")
	}
	if err := sb.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if err := sb.Deprovision(ctx); err != nil {
		t.Errorf("Deprovision: %v", err)
	}
	s.sameCensus(t, plan, before, "Deprovision")
}

// A workload's exit code comes back as it is, and its stderr is captured.
func (s *suite) testExitCode(t *testing.T) {
	sb := s.started(t, s.network)
	tok := token()
	r := exec(t, ctxT(t), sb, "sh", "-c", "echo "+tok+" >&2; exit 7")
	if r.err != nil || r.st.Code != 7 || r.st.Signal != "" || r.st.TimedOut {
		t.Errorf("exit 7: status %+v, error %v", r.st, r.err)
	}
	if !strings.Contains(r.stderr, tok) {
		t.Errorf("stderr %q does not carry %s", r.stderr, tok)
	}
}

// A command that is not there fails with exec_failed, or exits 127 as
// docker run and env(1) do.
func (s *suite) testNotFound(t *testing.T) {
	sb := s.started(t, s.network)
	r := exec(t, ctxT(t), sb, "corral-providertest-no-such-command")
	switch {
	case r.err != nil && provider.CodeOf(r.err) != provider.CodeExecFailed:
		t.Errorf("error %v has code %s, want %s", r.err, provider.CodeOf(r.err), provider.CodeExecFailed)
	case r.err == nil && r.st.Code != 127:
		t.Errorf("status %+v without an error, want exit 127", r.st)
	}
}

// A second Exec works where the harness says a sandbox takes several;
// where it takes one, the second fails with an error and does not hang.
func (s *suite) testExecAgain(t *testing.T) {
	sb := s.started(t, s.network)
	ctx := ctxT(t)
	if r := exec(t, ctx, sb, "true"); r.err != nil || r.st.Code != 0 {
		t.Fatalf("first exec: status %+v, error %v", r.st, r.err)
	}
	tok := token()
	ctx2, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r := exec(t, ctx2, sb, "echo", tok)
	if s.execOnce {
		if r.err == nil {
			t.Errorf("a second Exec of a one-exec sandbox gave status %+v and no error", r.st)
		} else if errors.Is(r.err, context.DeadlineExceeded) {
			t.Errorf("a second Exec of a one-exec sandbox hung until its deadline: %v", r.err)
		}
		return
	}
	if r.err != nil || r.st.Code != 0 || r.stdout != tok+"\n" {
		t.Errorf("second exec: status %+v, error %v, stdout %q", r.st, r.err, r.stdout)
	}
}

// Stop and Deprovision may each be called again.
func (s *suite) testIdempotent(t *testing.T) {
	sb, plan, before := s.fresh(t)
	ctx := ctxT(t)
	if err := sb.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if r := exec(t, ctx, sb, "true"); r.err != nil {
		t.Fatalf("exec: %v", r.err)
	}
	for i := 1; i <= 2; i++ {
		if err := sb.Stop(ctx); err != nil {
			t.Errorf("Stop #%d: %v", i, err)
		}
	}
	for i := 1; i <= 2; i++ {
		if err := sb.Deprovision(ctx); err != nil {
			t.Errorf("Deprovision #%d: %v", i, err)
		}
	}
	s.sameCensus(t, plan, before, "Stop and Deprovision, twice each")
}

// Deprovision of a sandbox never started leaves nothing behind.
func (s *suite) testDeprovisionUnstarted(t *testing.T) {
	sb, plan, before := s.fresh(t)
	ctx := ctxT(t)
	if err := sb.Deprovision(ctx); err != nil {
		t.Errorf("Deprovision: %v", err)
	}
	s.sameCensus(t, plan, before, "Deprovision without Start")
	if err := sb.Deprovision(ctx); err != nil {
		t.Errorf("Deprovision again: %v", err)
	}
}

// A plan with an error loss is refused, policy_rejected, and nothing is
// created.
func (s *suite) testRejected(t *testing.T) {
	plan := s.plan(t, s.network)
	plan.Loss = append(plan.Loss, provider.Loss{Severity: provider.SeverityError, Area: "providertest", Field: "providertest.injected", Message: "an error loss the suite added"})
	before := s.census(t, plan)
	sb, err := s.p.Provision(ctxT(t), plan, provider.ProvisionOptions{})
	if sb != nil {
		t.Errorf("Provision of a plan with an error loss gave a sandbox %s", sb.ID())
		_ = sb.Deprovision(ctxT(t))
	}
	if provider.CodeOf(err) != provider.CodePolicyRejected || !strings.Contains(err.Error(), "providertest.injected") {
		t.Errorf("Provision of a plan with an error loss: %v, want %s naming the field", err, provider.CodePolicyRejected)
	}
	s.sameCensus(t, plan, before, "a refused Provision")
}

// waitStarted waits for the workload to be running: its Started call
// (then a moment for it to exec), or at most five seconds.
func waitStarted(ch <-chan int) {
	select {
	case <-ch:
		time.Sleep(300 * time.Millisecond)
	case <-time.After(5 * time.Second):
	}
}

// gone reports, polling for a few seconds, whether host process pid has
// ended (true where that cannot be checked).
func gone(pid int) bool {
	if pid <= 0 || runtime.GOOS == "windows" {
		return true
	}
	for i := 0; i < 100; i++ {
		p, err := os.FindProcess(pid)
		if err != nil || p.Signal(syscall.Signal(0)) != nil {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// Cancelling Exec's context kills the workload: a timeout error that
// keeps context.Canceled, well before the workload would end.
func (s *suite) testCancel(t *testing.T) {
	sb := s.started(t, s.network)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	pids := make(chan int, 1)
	done := startExec(t, ctx, sb, pids, "sleep", "60")
	waitStarted(pids)
	cancel()
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Exec did not return within 30s of its context being cancelled")
	}
	if provider.CodeOf(r.err) != provider.CodeTimeout || !errors.Is(r.err, context.Canceled) {
		t.Errorf("cancelled Exec: status %+v, error %v; want %s keeping context.Canceled", r.st, r.err, provider.CodeTimeout)
	}
	if !gone(r.pid) {
		t.Errorf("the workload (host pid %d) still runs after the cancelled Exec returned", r.pid)
	}
}

// Signal forwards SIGTERM to the workload, which ends by it.
func (s *suite) testSignal(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("only os.Kill can be delivered on Windows")
	}
	sb := s.started(t, s.network)
	pids := make(chan int, 1)
	done := startExec(t, ctxT(t), sb, pids, "sleep", "60")
	waitStarted(pids)
	if err := sb.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("Signal: %v", err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("sleep did not end within 30s of SIGTERM")
	}
	if r.err != nil || !(r.st.Code == 128+15 || r.st.Signal == "SIGTERM") {
		t.Errorf("after SIGTERM: status %+v, error %v; want exit 143 or signal SIGTERM", r.st, r.err)
	}
}

// After Start every layer is in force, or skipped where the policy made
// it optional; none a policy requires is unavailable.
func (s *suite) testLayers(t *testing.T) {
	sb := s.started(t, s.network)
	checkLayers(t, sb.Layers())
}

func checkLayers(t *testing.T, ls []provider.LayerStatus) {
	t.Helper()
	for _, l := range policy.AllLayers {
		if !slices.ContainsFunc(ls, func(x provider.LayerStatus) bool { return x.Layer == l }) {
			t.Errorf("layer %s is not reported", l)
		}
	}
	for _, l := range ls {
		ok := l.State == provider.LayerActive || l.State == provider.LayerSkipped && l.Required == policy.Optional
		if !ok {
			t.Errorf("layer %s (%s) is %s: %s", l.Layer, l.Required, l.State, l.Detail)
		}
	}
}

// EgressListener is there for network proxy and only then, in every mode
// the provider declares.
func (s *suite) testEgress(t *testing.T) {
	for _, mode := range s.caps.NetworkModes {
		t.Run(string(mode), func(t *testing.T) {
			sb := s.started(t, mode)
			if l := sb.EgressListener(); (l != nil) != (mode == policy.NetworkProxy) {
				t.Errorf("network %s: EgressListener is %v", mode, l)
			}
		})
	}
}

// persistentLifetime reports whether the provider declares persistent
// sandboxes.
func (s *suite) persistentLifetime() bool {
	return slices.Contains(s.caps.SessionLifetimes, provider.LifetimePersistent)
}

// A provider without persistent sandboxes refuses them (unavailable);
// one with them gives sandboxes that a fresh provider value recovers.
func (s *suite) testPersistent(t *testing.T) {
	if !s.persistentLifetime() {
		plan := s.plan(t, s.network)
		before := s.census(t, plan)
		sb, err := s.p.Provision(ctxT(t), plan, provider.ProvisionOptions{Persistent: true})
		if sb != nil {
			t.Errorf("a provider without persistent sandboxes provisioned one: %s", sb.ID())
			_ = sb.Deprovision(ctxT(t))
		}
		if provider.CodeOf(err) != provider.CodeUnavailable {
			t.Errorf("Provision Persistent: %v, want %s", err, provider.CodeUnavailable)
		}
		s.sameCensus(t, plan, before, "a refused persistent Provision")
		return
	}
	if _, ok := s.p.(provider.Manager); ok {
		t.Run("Owned", func(t *testing.T) { s.persistent(t, "providertest-"+token()) })
		t.Run("NoOwner", s.persistentNoOwner)
		return
	}
	s.persistent(t, "")
}

// persistent provisions a persistent sandbox for owner, recovers it from
// a fresh provider value, and removes it.
func (s *suite) persistent(t *testing.T, owner string) {
	plan := s.plan(t, s.network)
	before := s.census(t, plan)
	ctx := ctxT(t)
	sb := s.provision(t, plan, provider.ProvisionOptions{Persistent: true, Owner: owner})
	ps, ok := sb.(provider.Persistent)
	if !ok {
		t.Fatalf("a persistent sandbox (%T) does not implement provider.Persistent", sb)
	}
	state := ps.State()
	if len(state) == 0 {
		t.Fatal("State is empty")
	}
	if err := sb.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if r := exec(t, ctx, sb, "true"); r.err != nil || r.st.Code != 0 {
		t.Fatalf("exec: status %+v, error %v", r.st, r.err)
	}
	if !ps.Running(ctx) {
		t.Error("Running is false for a started persistent sandbox")
	}
	mgr, _ := s.p.(provider.Manager)
	if mgr != nil {
		ids, err := mgr.Managed(ctx, owner)
		if err != nil || !slices.Contains(ids, sb.ID()) {
			t.Errorf("Managed(%s) = %v, %v; want it to list %s", owner, ids, err, sb.ID())
		}
	}

	p2 := s.h.New()
	plan2, loss := p2.Map(ctx, plan.Policy)
	if loss.HasErrors() {
		t.Fatalf("Map by a fresh provider: %s", provider.Rejected(loss))
	}
	rec, err := p2.Recover(ctx, plan2, state)
	if err != nil {
		t.Fatalf("Recover by a fresh provider: %v", err)
	}
	if rec.ID() != sb.ID() {
		t.Errorf("recovered %s, provisioned %s", rec.ID(), sb.ID())
	}
	rps, ok := rec.(provider.Persistent)
	if !ok {
		t.Fatalf("a recovered sandbox (%T) does not implement provider.Persistent", rec)
	}
	if !rps.Running(ctx) {
		t.Error("Running is false for the recovered sandbox")
	}
	checkLayers(t, rec.Layers())
	tok := token()
	if r := exec(t, ctx, rec, "echo", tok); r.err != nil || r.st.Code != 0 || r.stdout != tok+"\n" {
		t.Errorf("exec in the recovered sandbox: status %+v, error %v, stdout %q", r.st, r.err, r.stdout)
	}

	if mgr2, ok := p2.(provider.Manager); ok {
		for i := 1; i <= 2; i++ {
			if err := mgr2.Destroy(ctx, sb.ID()); err != nil {
				t.Errorf("Destroy #%d: %v", i, err)
			}
		}
		if ids, err := mgr2.Managed(ctx, owner); err != nil || slices.Contains(ids, sb.ID()) {
			t.Errorf("Managed(%s) after Destroy = %v, %v", owner, ids, err)
		}
	} else {
		if err := rec.Stop(ctx); err != nil {
			t.Errorf("Stop of the recovered sandbox: %v", err)
		}
		if err := rec.Deprovision(ctx); err != nil {
			t.Errorf("Deprovision of the recovered sandbox: %v", err)
		}
	}
	if rps.Running(ctx) || ps.Running(ctx) {
		t.Error("Running is true after the sandbox was removed")
	}
	if _, err := s.h.New().Recover(ctx, plan2, state); provider.CodeOf(err) != provider.CodeNotFound {
		t.Errorf("Recover of a removed sandbox: %v, want %s", err, provider.CodeNotFound)
	}
	// What this process still holds for the two values (placeholders
	// they have mounted) goes with their Deprovision, as a control plane
	// closes its sandboxes before it destroys them.
	for _, v := range []provider.Sandbox{rec, sb} {
		if err := v.Deprovision(ctx); err != nil {
			t.Errorf("Deprovision of a removed sandbox: %v", err)
		}
	}
	s.sameCensus(t, plan, before, "the persistent sandbox was removed")
}

// A persistent sandbox without an owner is refused (CodeUnavailable), or
// else recoverable like any other: never one that no one can reattach to.
func (s *suite) persistentNoOwner(t *testing.T) {
	plan := s.plan(t, s.network)
	before := s.census(t, plan)
	sb, err := s.p.Provision(ctxT(t), plan, provider.ProvisionOptions{Persistent: true})
	if err != nil {
		if provider.CodeOf(err) != provider.CodeUnavailable {
			t.Errorf("Provision Persistent without an owner: %v, want success or %s", err, provider.CodeUnavailable)
		}
		s.sameCensus(t, plan, before, "a refused persistent Provision")
		return
	}
	_ = sb.Deprovision(ctxT(t))
	s.persistent(t, "")
}

// Recover of state no Persistent.State gave is CodeNotFound.
func (s *suite) testRecoverGarbage(t *testing.T) {
	plan := s.plan(t, s.network)
	// State that names no sandbox: not found. State that is not a state
	// at all (not JSON): not found, or internal for a provider that has
	// persistent sandboxes (it cannot tell, so nothing may be destroyed).
	for _, st := range []string{"", "garbage", "{}", "null", `{"id":""}`, `{"id":"../../etc/passwd"}`, `{"id":"corral-000000000000"}`, `{"id":"mxc-0000000000000000"}`} {
		sb, err := s.h.New().Recover(ctxT(t), plan, []byte(st))
		code := provider.CodeOf(err)
		undecodable := st == "" || st == "garbage"
		if sb != nil || !(code == provider.CodeNotFound || undecodable && code == provider.CodeInternal) {
			t.Errorf("Recover(%q) = %v, %v; want %s", st, sb, err, provider.CodeNotFound)
		}
	}
}

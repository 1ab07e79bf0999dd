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
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/execfile"
	"github.com/corral-sandbox/corral/internal/pemcert"
	"github.com/corral-sandbox/corral/internal/testcert"
	"github.com/corral-sandbox/corral/internal/testorigin"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/session"
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
	// Tools are the TLS clients the sandboxes have ("curl", "python3",
	// "java" on PATH: the linux provider's see the host's), which the
	// inspected-egress tests run with no CA option.
	Tools []string
	// Inspect, if set, changes the inspected-egress tests' policy after
	// Adjust: an image that has the Tools, say, or the distro Java store
	// denied, so that JAVA_TOOL_OPTIONS must name the sandbox's.
	Inspect func(*policy.Policy)
	// Probe says the test binary's TestMain calls ProbeMain for
	// ProbeArg: the inspected-egress tests then run a copy of it, granted
	// read-only, as their Go client inside (it must be static:
	// CGO_ENABLED=0).
	Probe bool
	// NoInspection says the provider cannot give a sandbox its CA
	// bundle: Map must refuse a policy that inspects egress with an
	// error loss on the inspected allow entry, and the inspected-egress
	// tests check only that.
	NoInspection bool
	// Workload, if set, is the argv running a workload of the steps of
	// internal/testworkload.Args (the mxc stand-in runs the test binary
	// itself, there being no POSIX shell on Windows); otherwise the suite
	// runs echo, sh, true and sleep in the sandbox.
	Workload func(steps ...string) []string
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
	s := newSuite(t, h)
	t.Run("Map", s.testMap)
	s.lifecycle(t)
	t.Run("RefusesErrorLoss", s.testRejected)
	t.Run("Persistent", s.testPersistent)
	if s.persistentLifetime() || s.managedLifetime() {
		// The same lifecycle and exec tests on persistent (or managed)
		// sandboxes, whose execs may take another path (their own
		// supervisor, a relay).
		t.Run("AsPersistent", func(t *testing.T) { s.asPersistent().lifecycle(t) })
		if s.persistentLifetime() && s.proxy() {
			t.Run("InspectedEgressRecovered", s.testInspectedRecovered)
		}
	}
	t.Run("RecoverGarbage", s.testRecoverGarbage)
}

// asPersistent is s for persistent sandboxes (of an owner of their own,
// for a provider.Manager).
func (s *suite) asPersistent() *suite {
	ps := *s
	ps.opts, ps.execOnce = provider.ProvisionOptions{Persistent: true}, false
	if _, ok := s.p.(provider.Manager); ok {
		ps.opts.Owner = "providertest-" + token()
	}
	return &ps
}

func newSuite(t *testing.T, h Harness) *suite {
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
	return s
}

// RunInspected runs only the suite's inspected-egress tests (Run runs
// them too): a sandbox of each lifetime whose policy inspects a loopback
// HTTPS origin, and a persistent one recovered by a fresh provider.
func RunInspected(t *testing.T, h Harness) {
	s := newSuite(t, h)
	if !s.proxy() {
		t.Fatalf("%s has no network proxy: nothing can inspect its egress", s.p.Name())
	}
	t.Run("InspectedEgress", s.testInspected)
	if s.persistentLifetime() {
		t.Run("AsPersistent", func(t *testing.T) { s.asPersistent().testInspected(t) })
		t.Run("InspectedEgressRecovered", s.testInspectedRecovered)
	}
}

// proxy reports whether the provider declares network proxy, which
// inspection needs.
func (s *suite) proxy() bool { return slices.Contains(s.caps.NetworkModes, policy.NetworkProxy) }

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
	if s.proxy() {
		t.Run("InspectedEgress", s.testInspected)
	}
}

// argv is posix, or the steps through the harness's Workload.
func (s *suite) argv(posix []string, steps ...string) []string {
	if s.h.Workload != nil {
		return s.h.Workload(steps...)
	}
	return posix
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

// ProbeBinary is a copy of the test binary in dir (a PublicDir, which
// a policy grants read-only), which a workload of another uid can run.
func ProbeBinary(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "probe")
	if err := execfile.Copy("/proc/self/exe", bin, 0o755); err != nil {
		t.Fatalf("copy the test binary for the probe: %v", err)
	}
	return bin
}

// resolve is the default policy with network mode, the harness's
// changes and the host's missing layers optional, resolved for a fresh
// workdir and home. As root the workdir belongs to nobody, so that the
// workload (which runs as the workdir's owner, never root) can write it.
func (s *suite) resolve(t *testing.T, mode policy.NetworkMode) *policy.Resolved {
	t.Helper()
	return s.resolveWith(t, mode, nil)
}

// resolveWith is resolve with the policy changed by adjust too, after
// the harness's changes.
func (s *suite) resolveWith(t *testing.T, mode policy.NetworkMode, adjust func(*policy.Policy)) *policy.Resolved {
	t.Helper()
	pol := policy.DefaultFor(policy.HostOS())
	pol.Network.Mode = mode
	for _, l := range s.optional {
		pol.Layers[l] = policy.Optional
	}
	if s.h.Adjust != nil {
		s.h.Adjust(pol)
	}
	if adjust != nil {
		adjust(pol)
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
	r := exec(t, ctx, sb, s.argv([]string{"echo", tok}, "outln="+tok)...)
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
	r := exec(t, ctxT(t), sb, s.argv([]string{"sh", "-c", "echo " + tok + " >&2; exit 7"}, "errln="+tok, "exit=7")...)
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
	if r := exec(t, ctx, sb, s.argv([]string{"true"})...); r.err != nil || r.st.Code != 0 {
		t.Fatalf("first exec: status %+v, error %v", r.st, r.err)
	}
	tok := token()
	ctx2, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r := exec(t, ctx2, sb, s.argv([]string{"echo", tok}, "outln="+tok)...)
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
	if r := exec(t, ctx, sb, s.argv([]string{"true"})...); r.err != nil {
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
	done := startExec(t, ctx, sb, pids, s.argv([]string{"sleep", "60"}, "sleep=60s")...)
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
	done := startExec(t, ctxT(t), sb, pids, s.argv([]string{"sleep", "60"}, "sleep=60s")...)
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

// managedLifetime reports whether the provider declares sandboxes that
// live as long as the process that made them (and no persistent ones).
func (s *suite) managedLifetime() bool {
	return !s.persistentLifetime() && slices.Contains(s.caps.SessionLifetimes, provider.LifetimeManaged)
}

// A provider without persistent sandboxes refuses them (unavailable);
// one with them gives sandboxes that a fresh provider value recovers.
func (s *suite) testPersistent(t *testing.T) {
	if s.managedLifetime() {
		t.Skip("managed-lifetime sandboxes end with the process that made them (provider.LifetimeManaged): no fresh provider can recover one; the provider's own tests cover Recover's CodeNotFound and Destroy")
	}
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
	if r := exec(t, ctx, sb, s.argv([]string{"true"})...); r.err != nil || r.st.Code != 0 {
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
	if r := exec(t, ctx, rec, s.argv([]string{"echo", tok}, "outln="+tok)...); r.err != nil || r.st.Code != 0 || r.stdout != tok+"\n" {
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

// Inspected egress: a sandbox whose policy inspects a loopback HTTPS
// origin (network.hosts names it, allow_private lets the proxy dial it,
// access: read-only) through the real session core, so the proxy is the
// real one with the sandbox's own CA. The origin's CA is given to the
// proxy only (network.upstream_ca): a client inside succeeds only by
// trusting the bundle the provider installed (ProvisionOptions.Trust).

// inspectedHost is the origin's name, which the policy maps to 127.0.0.1.
const inspectedHost = "api.allowed.test"

// origin is the HTTPS server the inspected tests reach: GET answers its
// token; it counts the requests of other methods (none may arrive).
type origin struct {
	url, token, caFile string
	port               int
	others             atomic.Int64
	probe              string // the test binary's copy, granted read-only (Harness.Probe)
	java               string // the Java client's source, granted read-only ("java" in Harness.Tools)
	javaOpts           string // the JAVA_TOOL_OPTIONS the policy itself gives the workload
}

// newOrigin starts an origin with a CA of its own, written to a file for
// network.upstream_ca.
func newOrigin(t *testing.T) *origin {
	t.Helper()
	o := &origin{token: token(), caFile: filepath.Join(PublicDir(t), "origin-ca.pem")}
	leaf, err := testcert.Issue(o.caFile, inspectedHost)
	if err != nil {
		t.Fatal(err)
	}
	// ALPN http/1.1 only: this suite tests trust (h2 is qualify's and e2e's).
	srv, err := testorigin.Start("127.0.0.1", 0, &leaf, []string{"http/1.1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	srv.Mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			o.others.Add(1)
		}
		_, _ = io.WriteString(w, o.token)
	})
	o.port = srv.Port
	o.url = fmt.Sprintf("https://%s:%d/", inspectedHost, o.port)
	return o
}

// inspectedPlan maps the default policy with network proxy, inspecting
// o read-only, and granting the probe (Harness.Probe) and the Java
// client read-only.
func (s *suite) inspectedPlan(t *testing.T, o *origin) *provider.Plan {
	t.Helper()
	dir := PublicDir(t)
	if s.h.Probe {
		o.probe = ProbeBinary(t, dir)
	}
	if slices.Contains(s.h.Tools, "java") {
		o.java = filepath.Join(dir, "TrustProbe.java")
		if err := os.WriteFile(o.java, []byte(JavaProbe), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := s.resolveWith(t, policy.NetworkProxy, func(p *policy.Policy) {
		p.Network.Hosts = map[string]string{inspectedHost: "127.0.0.1"}
		p.Network.AllowPrivate = []policy.Endpoint{{Host: "127.0.0.1/32"}}
		p.Network.Allow = []policy.Endpoint{{Host: inspectedHost, Ports: []int{o.port}, Access: policy.HTTPReadOnly}}
		p.Network.UpstreamCA = o.caFile
		p.Filesystem.ReadOnly = append(p.Filesystem.ReadOnly, policy.PathRule{Path: dir})
		if s.h.Inspect != nil {
			s.h.Inspect(p)
		}
	})
	for _, kv := range r.Env {
		if v, ok := strings.CutPrefix(kv, "JAVA_TOOL_OPTIONS="); ok {
			o.javaOpts = v
		}
	}
	plan, loss := s.p.Map(ctxT(t), r)
	if s.h.NoInspection {
		if !slices.ContainsFunc(loss, func(l provider.Loss) bool {
			return l.Severity == provider.SeverityError && l.Field == "network.allow[0]"
		}) {
			t.Errorf("%s cannot install a CA bundle, yet Map of a policy that inspects %s has no error loss on network.allow[0]: %v", s.p.Name(), inspectedHost, loss)
		}
		t.Skip(s.p.Name() + " cannot install a CA bundle: an inspected policy is refused (checked), so there is no sandbox to trust it")
	}
	if loss.HasErrors() {
		t.Fatalf("Map of a policy that inspects %s has error losses: %s", inspectedHost, provider.Rejected(loss))
	}
	return plan
}

// trustRecorder is a provider that keeps the trust bundle and Java
// store the session passed to its last Provision.
type trustRecorder struct {
	provider.Provider
	trust, store []byte
}

func (r *trustRecorder) Provision(ctx context.Context, plan *provider.Plan, opts provider.ProvisionOptions) (provider.Sandbox, error) {
	r.trust, r.store = opts.Trust, opts.TrustStore
	return r.Provider.Provision(ctx, plan, opts)
}

// shas are the sha256 (hex) of a sandbox's trust bundle and Java store.
type shas struct{ bundle, store string }

// shas are r's last ones.
func (r *trustRecorder) shas() shas { return shas{sha256Hex(r.trust), sha256Hex(r.store)} }

// trustScript checks, inside, where the bundle and the Java store are
// and that the workload can change none of it, that no private key is
// readable where Corral puts things, and runs the clients against o: one
// line per fact.
func (s *suite) trustScript(o *origin) string {
	var b strings.Builder
	// P, the probe (a Go binary, which holds the words), is no key. JS:
	// the Java store and the distro paths of it the sandbox has.
	fmt.Fprintf(&b, "U=%s; B=%s; D=%s; P=%s; J=%s; JD='%s'\n", o.url, provider.TrustBundlePath, provider.TrustBundlePaths[0], o.probe,
		provider.JavaTrustStorePath, strings.Join(provider.JavaTrustStorePaths, " "))
	b.WriteString(`echo "var SSL_CERT_FILE=${SSL_CERT_FILE:-}"
echo "jto ${JAVA_TOOL_OPTIONS-(unset)}"
JS="$J $(for f in $JD; do [ -e $f ] && echo $f; done)"
sha() { sha256sum < "$1" 2>&1 | cut -d' ' -f1; }
echo evil > /tmp/evil
for f in $B $D $JS $(ls /.corral/run/ca-bundle.pem /.corral/run/ca-bundle.jks 2>/dev/null); do
  echo "sha $f $(sha $f)"
  (echo x >> $f) 2>/dev/null && echo "tamper append $f"
  (: > $f) 2>/dev/null && echo "tamper truncate $f"
  chmod 0666 $f 2>/dev/null && echo "tamper chmod $f"
  rm -f $f 2>/dev/null; [ -e $f ] || echo "tamper rm $f"
  mv $f /tmp/moved 2>/dev/null && echo "tamper mv $f"
  mount --bind /tmp/evil $f 2>/dev/null && echo "tamper mount $f"
  umount $f 2>/dev/null && echo "tamper umount $f"
done
mv /run/corral /tmp/rc 2>/dev/null && echo "tamper mv /run/corral"
for f in $B $D $JS; do echo "after $f $(sha $f)"; done
echo "keys $(grep -rl 'PRIVATE KEY' /run /etc/ssl /tmp /.corral "$HOME" "$PWD" 2>/dev/null | grep -vx "$P" | tr '\n' ' ')"
`)
	if slices.Contains(s.h.Tools, "curl") {
		b.WriteString(`echo "curl-get $(curl -sS -w ' %{http_code}' $U 2>&1)"
echo "curl-post $(curl -sS -o /dev/null -w '%{http_code}' -X POST -d x $U 2>&1)"
echo "curl-noenv $(env -u SSL_CERT_FILE -u CURL_CA_BUNDLE curl -sS $U 2>&1)"
`)
	}
	if slices.Contains(s.h.Tools, "python3") {
		b.WriteString(`py='import sys, urllib.request
try: print(sys.argv[1], urllib.request.urlopen(sys.argv[2], timeout=60).read().decode())
except Exception as e: print(sys.argv[1], "ERROR", repr(e)[:400])'
python3 -c "$py" python-get $U
env -u SSL_CERT_FILE -u REQUESTS_CA_BUNDLE python3 -c "$py" python-noenv $U
`)
	}
	if o.probe != "" {
		fmt.Fprintf(&b, "%s %s go $U\nenv -u SSL_CERT_FILE %s %s go-noenv $U\n", o.probe, ProbeArg, o.probe, ProbeArg)
	}
	if o.java != "" {
		fmt.Fprintf(&b, "java %s java $U\nenv -u JAVA_TOOL_OPTIONS java %s java-noenv $U\n", o.java, o.java)
	}
	return b.String()
}

// JavaProbe is the Java client (a single-file source, run as `java
// TrustProbe.java NAME URL`, JDK 11+): with java.net.http's defaults
// (the JVM's trust store, which the sandbox's is, by a distro path or
// JAVA_TOOL_OPTIONS) and the proxy of HTTPS_PROXY (which Java does not
// read itself, so it is set as a user would), it GETs and POSTs URL and
// prints "NAME BODY GETCODE POSTCODE", or "NAME ERROR ..." for a request
// that failed.
const JavaProbe = `import java.net.*;
import java.net.http.*;
import java.time.Duration;

public class TrustProbe {
  public static void main(String[] a) {
    try {
      HttpClient.Builder b = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(30));
      String pv = System.getenv("HTTPS_PROXY");
      if (pv != null) {
        URI p = URI.create(pv);
        b.proxy(ProxySelector.of(new InetSocketAddress(p.getHost(), p.getPort())));
      }
      HttpClient c = b.build();
      URI u = URI.create(a[1]);
      HttpResponse<String> get = c.send(HttpRequest.newBuilder(u).timeout(Duration.ofSeconds(60)).build(), HttpResponse.BodyHandlers.ofString());
      HttpResponse<Void> post = c.send(HttpRequest.newBuilder(u).timeout(Duration.ofSeconds(60)).POST(HttpRequest.BodyPublishers.ofString("x")).build(), HttpResponse.BodyHandlers.discarding());
      System.out.println(a[0] + " " + get.body() + " " + get.statusCode() + " " + post.statusCode());
    } catch (Exception e) {
      System.out.println(a[0] + " ERROR " + String.valueOf(e).replaceAll("\\s+", " "));
    }
  }
}
`

// javaOptions is what provider.WithTrustEnv appends to the workload's
// JAVA_TOOL_OPTIONS when no distro path holds the Java store.
const javaOptions = "-Djavax.net.ssl.trustStore=" + provider.JavaTrustStorePath + " -Djavax.net.ssl.trustStoreType=JKS"

// runTrust runs trustScript in sess and returns its lines by their first
// word ("sha /run/corral/ca-bundle.pem" keys the first two).
func (s *suite) runTrust(t *testing.T, sess *session.Session, o *origin) map[string]string {
	t.Helper()
	dir := t.TempDir()
	out, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	st, err := sess.Exec(ctxT(t), session.Exec{ExecSpec: provider.ExecSpec{Args: []string{"sh", "-c", s.trustScript(o)}, Stdout: out, Stderr: out}, UID: -1})
	b, _ := os.ReadFile(out.Name())
	if err != nil || st.Code != 0 {
		t.Fatalf("the trust checks: status %+v, error %v\n%s", st, err, b)
	}
	t.Logf("inside:\n%s", b)
	lines := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, _ := strings.Cut(l, " ")
		if k == "sha" || k == "after" || k == "tamper" {
			p, rest, _ := strings.Cut(v, " ")
			k, v = k+" "+p, rest
		}
		lines[k] = v
	}
	return lines
}

// checkTrust checks runTrust's lines: the bundle and the Java store
// (sha256 want's, or any but notWant's) at TrustBundlePath, the distro
// path and JavaTrustStorePath, unchanged by every attempt; each distro
// Java store path the sandbox has unchanged too, the store or not;
// SSL_CERT_FILE naming the bundle, and JAVA_TOOL_OPTIONS the store (after
// the policy's own options) only when no distro path holds it; no key;
// GET through the proxy trusted by every client, with and without the
// variables (the JVM without JAVA_TOOL_OPTIONS only when a distro path
// holds the store); POST refused by the proxy (403), never reaching o.
// It returns what it found.
func (s *suite) checkTrust(t *testing.T, lines map[string]string, o *origin, want, notWant shas) shas {
	t.Helper()
	b, d, j := provider.TrustBundlePath, provider.TrustBundlePaths[0], provider.JavaTrustStorePath
	got := shas{lines["sha "+b], lines["sha "+j]}
	for _, c := range []struct{ what, got, want, notWant string }{{b, got.bundle, want.bundle, notWant.bundle}, {j, got.store, want.store, notWant.store}} {
		if c.got != c.want && c.want != "" || c.got == c.notWant || len(c.got) != 64 {
			t.Errorf("%s in the sandbox has sha256 %q, want %q (not %q)", c.what, c.got, c.want, c.notWant)
		}
	}
	for _, f := range []string{b, d} {
		if lines["sha "+f] != got.bundle || lines["after "+f] != got.bundle {
			t.Errorf("%s: sha256 %q before the attacks and %q after, want the bundle's %q", f, lines["sha "+f], lines["after "+f], got.bundle)
		}
	}
	distro := false // a distro Java store path holds the store
	for _, f := range append([]string{j}, provider.JavaTrustStorePaths...) {
		before, ok := lines["sha "+f]
		if !ok {
			continue // not in the sandbox
		}
		if lines["after "+f] != before {
			t.Errorf("%s: sha256 %q before the attacks and %q after", f, before, lines["after "+f])
		}
		distro = distro || f != j && before == got.store
	}
	wantOpts := "(unset)"
	if !distro {
		wantOpts = strings.TrimSpace(o.javaOpts + " " + javaOptions)
	}
	if v := lines["jto"]; v != wantOpts {
		t.Errorf("the workload's JAVA_TOOL_OPTIONS %q, want %q (a distro path holds the Java store: %v)", v, wantOpts, distro)
	}
	for k, v := range lines {
		if strings.HasPrefix(k, "tamper ") {
			t.Errorf("the workload could: %s %s", k, v)
		}
	}
	if v := lines["var"]; v != "SSL_CERT_FILE="+b {
		t.Errorf("the workload's %s, want SSL_CERT_FILE=%s", v, b)
	}
	if k := lines["keys"]; strings.TrimSpace(k) != "" {
		t.Errorf("private keys readable inside: %s", k)
	}
	wants := map[string]string{}
	if slices.Contains(s.h.Tools, "curl") {
		wants["curl-get"], wants["curl-post"], wants["curl-noenv"] = o.token+" 200", "403", o.token
	}
	if slices.Contains(s.h.Tools, "python3") {
		wants["python-get"], wants["python-noenv"] = o.token, o.token
	}
	if o.probe != "" {
		wants["go"], wants["go-noenv"] = o.token+" 200 403", o.token+" 200 403"
	}
	for k, w := range wants {
		if lines[k] != w {
			t.Errorf("%s: %q, want %q", k, lines[k], w)
		}
	}
	t.Run("Java", func(t *testing.T) {
		if o.java == "" {
			t.Skipf("no java in %s's sandboxes here (Harness.Tools): the JVM's trust was not tried", s.p.Name())
		}
		if w := o.token + " 200 403"; lines["java"] != w {
			t.Errorf("java: %q, want %q", lines["java"], w)
		}
		if v := lines["java-noenv"]; distro && v != lines["java"] {
			t.Errorf("java-noenv: %q, want what java got: a distro path holds the Java store", v)
		} else if !distro && (!strings.HasPrefix(v, "ERROR") || !strings.Contains(v, "SSLHandshakeException")) {
			t.Errorf("java-noenv: %q, want a TLS handshake error: no distro path holds the Java store, so without JAVA_TOOL_OPTIONS the JVM trusts only its own", v)
		}
	})
	if n := o.others.Load(); n != 0 {
		t.Errorf("%d requests other than GET reached the origin: the proxy let a read-only rule's POST through", n)
	}
	return got
}

// checkBundle checks the bundle the session gave the provider: PEM
// certificates only (never a key), the last a CA constrained to the
// inspected host.
func checkBundle(t *testing.T, b []byte) {
	t.Helper()
	certs, err := pemcert.Parse(b)
	if err != nil {
		t.Fatalf("the trust bundle: %v", err)
	}
	var last *x509.Certificate
	if len(certs) > 0 {
		last = certs[len(certs)-1]
	}
	if last == nil || !last.IsCA || !slices.Contains(last.PermittedDNSDomains, inspectedHost) {
		t.Fatalf("the trust bundle's last certificate %v is not a CA constrained to %s", last, inspectedHost)
	}
}

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// A sandbox whose policy inspects egress trusts its CA with no client
// option; the workload can change nothing of its bundle; it is gone with
// the sandbox.
func (s *suite) testInspected(t *testing.T) {
	o := newOrigin(t)
	plan := s.inspectedPlan(t, o)
	before := s.census(t, plan)
	rec := &trustRecorder{Provider: s.p}
	sess, err := session.Open(ctxT(t), session.Config{Provider: rec, Plan: plan, Options: s.opts})
	if err != nil {
		t.Fatalf("session.Open: %v", err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	checkBundle(t, rec.trust)
	s.checkTrust(t, s.runTrust(t, sess, o), o, rec.shas(), shas{})
	if err := sess.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	s.sameCensus(t, plan, before, "Close of a session that inspects egress")
}

// A persistent sandbox recovered by a fresh provider (a new session:
// a new CA, the old key gone) trusts the new CA (SetTrust).
func (s *suite) testInspectedRecovered(t *testing.T) {
	ps := s.asPersistent()
	o := newOrigin(t)
	plan := s.inspectedPlan(t, o)
	before := s.census(t, plan)
	rec := &trustRecorder{Provider: s.p}
	sess, err := session.Open(ctxT(t), session.Config{Provider: rec, Plan: plan, Options: ps.opts})
	if err != nil {
		t.Fatalf("session.Open: %v", err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	first := ps.checkTrust(t, ps.runTrust(t, sess, o), o, rec.shas(), shas{})
	state := sess.Sandbox().(provider.Persistent).State()
	// What the first process lets go of when it exits: its proxy and its
	// copy of the egress listener (Detach closes both).
	sess.Detach()

	p2 := s.h.New()
	plan2, loss := p2.Map(ctxT(t), plan.Policy)
	if loss.HasErrors() {
		t.Fatalf("Map by a fresh provider: %s", provider.Rejected(loss))
	}
	sess2, err := session.Recover(ctxT(t), session.Config{Provider: p2, Plan: plan2}, state)
	if err != nil {
		t.Fatalf("session.Recover: %v", err)
	}
	t.Cleanup(func() { _ = sess2.Close() })
	ps.checkTrust(t, ps.runTrust(t, sess2, o), o, shas{}, first)
	if err := sess2.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	// And what this process still holds of the first value (the
	// placeholders it mounted) goes with its Deprovision.
	if err := sess.Sandbox().Deprovision(ctxT(t)); err != nil {
		t.Errorf("Deprovision of the first value: %v", err)
	}
	s.sameCensus(t, plan, before, "Close of a recovered session that inspects egress")
}

// ProbeArg is argv[1] that makes a test binary the inspected-egress
// tests' Go client inside a sandbox (ProbeMain).
const ProbeArg = "__providertest_tls_probe"

// ProbeMain is the Go client: argv is ProbeArg NAME URL. With net/http's
// defaults (HTTPS_PROXY and the roots from SSL_CERT_FILE or the distro
// paths) it GETs and POSTs URL and prints "NAME BODY GETCODE POSTCODE",
// or "NAME ERROR ..." for a request that failed. It never returns.
func ProbeMain(args []string) {
	if len(args) != 2 {
		fmt.Println("usage: " + ProbeArg + " NAME URL")
		os.Exit(2)
	}
	name, url := args[0], args[1]
	c := &http.Client{Timeout: time.Minute}
	get, err := c.Get(url)
	if err != nil {
		fmt.Println(name, "ERROR", err)
		os.Exit(0)
	}
	body, _ := io.ReadAll(get.Body)
	get.Body.Close()
	post, err := c.Post(url, "text/plain", strings.NewReader("x"))
	if err != nil {
		fmt.Println(name, "ERROR", err)
		os.Exit(0)
	}
	post.Body.Close()
	fmt.Println(name, string(body), get.StatusCode, post.StatusCode)
	os.Exit(0)
}

package mxc

// End-to-end tests of the runner through the stand-in executor
// (testdata/wxcexec). The stand-in runs workloads as ordinary child
// processes: these tests prove wiring (documents, envelopes, exit codes,
// lifecycle records), never isolation. The workload is this test binary
// (internal/testworkload), so they run alike on Linux and on Windows.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/testworkload"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
	csession "github.com/corral-sandbox/corral/session"
)

var standIn string // the built stand-in, "wxc-exec"

func TestMain(m *testing.M) {
	testworkload.Main()
	containerMain() // the relay, and a loopback server, for container_test.go
	dir, err := os.MkdirTemp("", "mxc-runner-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	standIn = filepath.Join(dir, "wxc-exec")
	if prebuilt := os.Getenv("CORRAL_TEST_WXCEXEC"); prebuilt != "" {
		// Built beforehand for this GOOS (the Windows lane: no go under Wine).
		standIn = prebuilt
	} else if out, err := exec.Command("go", "build", "-o", standIn, "./testdata/wxcexec").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the wxc-exec stand-in: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// harness points the stand-in at the shipped schemas, a state directory
// and a log of its own.
type harness struct {
	t        *testing.T
	wxcState string // the stand-in's sessions (the "host")
	log      string // WXC_LOG
	state    string // Corral's records
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	schemas, err := filepath.Abs(schemaDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(schemas, "mxc-config.schema.0.9.0-dev.json")); err != nil {
		t.Fatalf("the shipped MXC schemas are missing (expected under %s, i.e. shared/reference/mxc next to the repository): %v", schemas, err)
	}
	dir := t.TempDir()
	h := &harness{t: t, wxcState: filepath.Join(dir, "wxc"), log: filepath.Join(dir, "wxc.log"), state: filepath.Join(dir, "records")}
	t.Setenv("WXC_SCHEMA_DIR", schemas)
	t.Setenv("WXC_STATE_DIR", h.wxcState)
	t.Setenv("WXC_LOG", h.log)
	t.Setenv("WXC_FAIL", "")
	t.Setenv("WXC_CRASH_AFTER", "")
	return h
}

func (h *harness) provider(b Backend) *Provider {
	return New(Config{Backend: b, WxcExec: standIn}, h.state)
}

// logLines returns the stand-in's log: "phase=<p> sandboxId=<id> exit=<code>".
func (h *harness) logLines() []string {
	b, err := os.ReadFile(h.log)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// phases returns the phase of each logged call.
func (h *harness) phases() []string {
	var out []string
	for _, l := range h.logLines() {
		f := strings.Fields(l)
		out = append(out, strings.TrimPrefix(f[0], "phase="))
	}
	return out
}

func (h *harness) count(phase string) int {
	n := 0
	for _, p := range h.phases() {
		if p == phase {
			n++
		}
	}
	return n
}

// Injected values. secretA and secretB overlap ("ef12"), so their
// concatenation "tok-abcdef12-ghij" is one span.
const (
	secretA = "tok-abcdef12"
	secretB = "ef12-ghij"
)

func testPolicy(network policy.NetworkMode) *policy.Resolved {
	return &policy.Resolved{
		Hash:    "sha256:test-" + string(network),
		Env:     []string{"API_TOKEN=" + secretA, "OTHER=" + secretB, "PATH=" + os.Getenv("PATH"), "X=abc"},
		Network: network,
		Layers: policy.Layers{
			policy.LayerNamespaces: policy.Optional, policy.LayerMounts: policy.Optional,
			policy.LayerLandlock: policy.Optional, policy.LayerSeccomp: policy.Optional, policy.LayerCgroups: policy.Optional,
		},
	}
}

func mustPlan(t *testing.T, p *Provider, r *policy.Resolved) *provider.Plan {
	t.Helper()
	plan, loss := p.Map(context.Background(), r)
	if loss.HasErrors() {
		t.Fatalf("plan rejected: %+v", loss.Errors())
	}
	return plan
}

type execResult struct {
	st             provider.ExitStatus
	stdout, stderr string
	err            error
}

func run(t *testing.T, sb provider.Sandbox, spec provider.ExecSpec) execResult {
	t.Helper()
	dir := t.TempDir()
	out, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	errf, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close()
	spec.Stdout, spec.Stderr = out, errf
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := sb.Exec(ctx, spec)
	o, _ := os.ReadFile(out.Name())
	e, _ := os.ReadFile(errf.Name())
	return execResult{st, string(o), string(e), err}
}

// work runs the steps of testworkload.Args.
func work(steps ...string) provider.ExecSpec {
	return provider.ExecSpec{Args: testworkload.Args(steps...)}
}

func wantCode(t *testing.T, what string, err error, code provider.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %s", what, code)
	}
	if got := provider.CodeOf(err); got != code {
		t.Fatalf("%s: code %s, want %s (%v)", what, got, code, err)
	}
}

func TestProbeStandIn(t *testing.T) {
	newHarness(t)
	rep := New(Config{WxcExec: standIn}, "").Probe(context.Background())
	if !rep.Available || rep.Facts["tier"] != "mock" || rep.Facts["isolation_session"] != "true" || rep.Facts["deny_paths"] != "true" || rep.Facts["ui_capabilities"] == "" || rep.Facts["warnings"] == "" {
		t.Errorf("probe: %+v", rep)
	}
	rep = New(Config{WxcExec: filepath.Join(t.TempDir(), "wxc-exec")}, "").Probe(context.Background())
	if rep.Available || rep.Reason == "" || len(rep.Fixes) != 1 || rep.Fixes[0] != installFix {
		t.Errorf("missing wxc-exec: %+v", rep)
	}
	t.Setenv("PATH", t.TempDir())
	if rep := New(Config{}, "").Probe(context.Background()); rep.Available || !strings.Contains(rep.Reason, "PATH") {
		t.Errorf("wxc-exec not in PATH: %+v", rep)
	}
}

// ---- process_container ----

func TestOneShotExitCodeAndOutput(t *testing.T) {
	h := newHarness(t)
	p := h.provider(BackendProcessContainer)
	sb, err := p.Provision(context.Background(), mustPlan(t, p, testPolicy(policy.NetworkNone)), provider.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Deprovision(context.Background())
	if err := sb.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if sb.EgressListener() != nil {
		t.Error("network none has an egress listener")
	}
	cwd := t.TempDir()
	spec := work("outln=out $X", "pwd", "errln=err", "exit=3")
	spec.Dir = cwd
	r := run(t, sb, spec)
	if r.err != nil || r.st.Code != 3 || r.st.TimedOut || r.stdout != "out abc\n"+cwd+"\n" || !strings.HasSuffix(r.stderr, "err\n") {
		t.Errorf("run: %+v", r)
	}
	// Arguments reach the workload as argv, unquoted and unexpanded.
	r = run(t, sb, provider.ExecSpec{Args: testworkload.Args("argv", "a b", `"q"`, "$X", `C:\dir\`)})
	if r.err != nil || r.st.Code != 0 || r.stdout != `[a b]["q"][$X][C:\dir\]` {
		t.Errorf("argv: %+v", r)
	}
	// A workload's exit 1 is its own, not a request error.
	if r := run(t, sb, work("exit=1")); r.err != nil || r.st.Code != 1 {
		t.Errorf("exit 1: %+v", r)
	}
	// Each Exec is a dry run then the run, both one-shot.
	if got := h.phases(); len(got) != 6 || h.count("oneshot") != 6 {
		t.Errorf("log: %q", got)
	}
}

func TestOneShotBackendError(t *testing.T) {
	h := newHarness(t)
	p := h.provider(BackendProcessContainer)
	sb, err := p.Provision(context.Background(), mustPlan(t, p, testPolicy(policy.NetworkNone)), provider.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("WXC_FAIL", "oneshot")
	r := run(t, sb, work("outln=ran"))
	wantCode(t, "WXC_FAIL=oneshot", r.err, provider.CodeExecFailed)
	if !strings.Contains(r.err.Error(), "backend_error: injected failure in oneshot") || r.stdout != "" {
		t.Errorf("backend_error: %+v", r)
	}
	if strings.Contains(r.stderr, `"error"`) {
		t.Errorf("the envelope reached the workload's stderr: %q", r.stderr)
	}
	t.Setenv("WXC_FAIL", "")
	// A command that cannot start is the executor's backend_error too.
	r = run(t, sb, provider.ExecSpec{Args: []string{"/nonexistent/tool"}})
	wantCode(t, "missing command", r.err, provider.CodeExecFailed)
	if !strings.Contains(r.err.Error(), "cannot start the workload") {
		t.Errorf("missing command: %v", r.err)
	}
}

func TestOneShotRequestErrorIsInternal(t *testing.T) {
	h := newHarness(t)
	p := h.provider(BackendProcessContainer)
	plan := mustPlan(t, p, testPolicy(policy.NetworkNone))
	plan.Details.(*Details).Request.Version = "1.0.0" // outside MXC's window
	sb, err := p.Provision(context.Background(), plan, provider.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := run(t, sb, work("outln=ran"))
	wantCode(t, "bad request", r.err, provider.CodeInternal)
	if !strings.Contains(r.err.Error(), "rejected Corral's request") || r.stdout != "" || h.count("oneshot") != 1 {
		t.Errorf("bad request: %+v, log %q", r, h.logLines())
	}
}

func TestOneShotTimeout(t *testing.T) {
	h := newHarness(t)
	p := h.provider(BackendProcessContainer)
	r0 := testPolicy(policy.NetworkNone)
	r0.Limits.Timeout = policy.Duration(300 * time.Millisecond)
	sb, err := p.Provision(context.Background(), mustPlan(t, p, r0), provider.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := run(t, sb, work("outln=started", "sleep=20s"))
	if r.err != nil || !r.st.TimedOut || r.st.Code != provider.CodeTimeout.ExitCode() || !strings.Contains(r.st.Reason, "timeout") || r.stdout != "started\n" {
		t.Errorf("timeout: %+v", r)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v", d)
	}
	// Exit 255 without a timeout in the document is the workload's.
	sb2, _ := h.provider(BackendProcessContainer).Provision(context.Background(), mustPlan(t, p, testPolicy(policy.NetworkNone)), provider.ProvisionOptions{})
	if r := run(t, sb2, work("errln=timeout", "exit=255")); r.err != nil || r.st.TimedOut || r.st.Code != 255 {
		t.Errorf("exit 255: %+v", r)
	}
}

func TestOneShotProxyListener(t *testing.T) {
	h := newHarness(t)
	p := h.provider(BackendProcessContainer)
	plan := mustPlan(t, p, testPolicy(policy.NetworkProxy))
	d := plan.Details.(*Details)
	if d.Request.RuntimeConfig.NetworkProxy != "http://127.0.0.1:0" {
		t.Errorf("plan's proxy: %q", d.Request.RuntimeConfig.NetworkProxy)
	}
	for _, l := range plan.Loss {
		if l.Field == "network.mode" && !strings.Contains(l.Message, "<ephemeral port bound at provision>") {
			t.Errorf("loss message names the placeholder: %q", l.Message)
		}
	}
	sb, err := p.Provision(context.Background(), plan, provider.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l := sb.EgressListener()
	if l == nil {
		t.Fatal("no egress listener")
	}
	addr := l.Addr().(*net.TCPAddr)
	if !addr.IP.Equal(net.IPv4(127, 0, 0, 1)) || addr.Port == 0 {
		t.Errorf("listener on %v", addr)
	}
	if d.Request.RuntimeConfig.NetworkProxy != "http://127.0.0.1:0" {
		t.Error("Provision changed the plan")
	}
	cred := sb.(interface{ ProxyCredential() string }).ProxyCredential()
	if len(cred) < 16 {
		t.Fatalf("credential %q", cred)
	}
	r := run(t, sb, work("out=$HTTPS_PROXY", "errln=$HTTPS_PROXY"))
	want := fmt.Sprintf("http://corral:%s@127.0.0.1:%d", cred, addr.Port)
	if r.err != nil || r.stdout != want {
		t.Errorf("proxy env: %+v, want stdout %q", r, want)
	}
	if strings.Contains(r.stderr, cred) || !strings.Contains(r.stderr, Redacted) {
		t.Errorf("proxy password not redacted from stderr: %q", r.stderr)
	}
	if err := sb.Deprovision(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := net.DialTimeout("tcp", addr.String(), time.Second); err == nil {
		t.Error("listener still open after Deprovision")
	}
}

// ---- redaction through the stand-in ----

func TestRedactionOneShot(t *testing.T) {
	h := newHarness(t)
	p := h.provider(BackendProcessContainer)
	sb, err := p.Provision(context.Background(), mustPlan(t, p, testPolicy(policy.NetworkNone)), provider.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// stderr: each value, and the two overlapping ones run together.
	r := run(t, sb, work("errln=a=$API_TOKEN", "errln=b=$OTHER", "errln=ab=tok-abcdef12-ghij", "errln=x=$X", "exit=2"))
	if r.err != nil || r.st.Code != 2 {
		t.Fatalf("run: %+v", r)
	}
	for _, want := range []string{"a=[REDACTED]\n", "b=[REDACTED]\n", "ab=[REDACTED]\n", "x=abc\n"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr %q lacks %q", r.stderr, want)
		}
	}
	for _, leak := range []string{"tok-", "ef12", "ghij"} {
		if strings.Contains(r.stderr, leak) {
			t.Errorf("stderr leaks %q: %q", leak, r.stderr)
		}
	}
	// A failure message carrying an injected value (an error envelope on
	// stderr is the executor's failure report).
	r = run(t, sb, work(`errln={"error":{"code":"backend_error","message":"login with $API_TOKEN failed"}}`, "exit=1"))
	wantCode(t, "envelope", r.err, provider.CodeExecFailed)
	if strings.Contains(r.err.Error(), secretA) || !strings.Contains(r.err.Error(), "login with [REDACTED] failed") {
		t.Errorf("failure message not redacted: %v", r.err)
	}
}

func TestRedactionSession(t *testing.T) {
	h := newHarness(t)
	p := h.provider(BackendIsolationSession)
	sb := provisionStarted(t, p)
	defer cleanup(t, sb)
	r := run(t, sb, work("errln=ab=tok-abcdef12-ghij $OTHER", "outln=$API_TOKEN"))
	if r.err != nil || r.stdout != secretA+"\n" {
		t.Fatalf("run: %+v", r) // stdout is the workload's data: unchanged
	}
	if !strings.Contains(r.stderr, "ab=[REDACTED] [REDACTED]\n") || strings.Contains(r.stderr, "ef12") {
		t.Errorf("stderr not redacted: %q", r.stderr)
	}
	// Output that is one error envelope with exit 1 is a dispatch
	// failure; its message is redacted.
	r = run(t, sb, work(`out={"error":{"code":"backend_error","message":"bad $API_TOKEN-ghij"}}`, "exit=1"))
	wantCode(t, "exec envelope", r.err, provider.CodeExecFailed)
	if msg := r.err.Error(); strings.Contains(msg, "tok-") || strings.Contains(msg, "ghij") || !strings.Contains(msg, "bad [REDACTED]") {
		t.Errorf("failure message not redacted: %v", msg)
	}
}

// ---- isolation_session ----

func record(t *testing.T, p *Provider, id string) Record {
	t.Helper()
	rec, err := p.store().read(id)
	if err != nil {
		t.Fatal(err)
	}
	return *rec
}

func provisionStarted(t *testing.T, p *Provider) provider.Sandbox {
	t.Helper()
	sb, err := p.Provision(context.Background(), mustPlan(t, p, testPolicy(policy.NetworkHost)), provider.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return sb
}

func cleanup(t *testing.T, sb provider.Sandbox) {
	t.Helper()
	t.Setenv("WXC_FAIL", "")
	ctx := context.Background()
	if err := sb.Stop(ctx); err != nil {
		t.Error(err)
	}
	if err := sb.Deprovision(ctx); err != nil {
		t.Error(err)
	}
}

func TestSessionLifecycle(t *testing.T) {
	h := newHarness(t)
	p := h.provider(BackendIsolationSession)
	ctx := context.Background()
	plan := mustPlan(t, p, testPolicy(policy.NetworkHost))
	sb, err := p.Provision(ctx, plan, provider.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.ID()
	rec := record(t, p, id)
	if rec.PhaseState != StateProvisioned || !strings.HasPrefix(rec.SandboxID, "iso:") || rec.Backend != BackendIsolationSession || rec.PolicyHash != plan.Policy.Hash || rec.LastError != "" {
		t.Fatalf("after provision: %+v", rec)
	}
	var md struct{ AgentUserName, EphemeralWorkspacePath string }
	if err := json.Unmarshal(rec.Metadata, &md); err != nil || md.AgentUserName == "" || md.EphemeralWorkspacePath == "" {
		t.Errorf("metadata %s: %v", rec.Metadata, err)
	}
	raw, _ := os.ReadFile(p.store().path(id))
	if strings.Contains(string(raw), secretA) {
		t.Error("the record holds an injected value")
	}
	t.Run("state dir private", func(t *testing.T) { checkPrivate(t, h.state) })
	if sb.EgressListener() != nil {
		t.Error("isolation_session has an egress listener")
	}

	// Exec before Start is refused from the record, without a call.
	if r := run(t, sb, work()); provider.CodeOf(r.err) != provider.CodeStale {
		t.Errorf("exec before start: %v", r.err)
	}
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if st := record(t, p, id).PhaseState; st != StateStarted {
		t.Errorf("after start: %s", st)
	}
	r := run(t, sb, work("outln=out", "pwd", "errln=v=$X", "exit=4"))
	if r.err != nil || r.st.Code != 4 || r.stdout != "out\n"+md.EphemeralWorkspacePath+"\n" || !strings.HasSuffix(r.stderr, "v=abc\n") {
		t.Errorf("exec: %+v", r)
	}
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if st := record(t, p, id).PhaseState; st != StateStopped {
		t.Errorf("after stop: %s", st)
	}
	if err := sb.Stop(ctx); err != nil { // idempotent, no call
		t.Errorf("second stop: %v", err)
	}
	if err := sb.Deprovision(ctx); err != nil {
		t.Fatal(err)
	}
	if st := record(t, p, id).PhaseState; st != StateDeprovisioned {
		t.Errorf("after deprovision: %s", st)
	}
	if err := sb.Deprovision(ctx); err != nil { // idempotent, no call
		t.Errorf("second deprovision: %v", err)
	}
	want := []string{"provision", "start", "exec", "stop", "deprovision"}
	if got := h.phases(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("calls %q, want %q", got, want)
	}
	if n := h.count("provision"); n != 1 {
		t.Errorf("%d provisions", n)
	}
	if _, err := os.Stat(md.EphemeralWorkspacePath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("workspace left: %v", err)
	}
	if _, err := p.Recover(ctx, nil, SessionState(id)); provider.CodeOf(err) != provider.CodeNotFound {
		t.Errorf("recover deprovisioned: %v", err)
	}
}

// A session's whole lifecycle through the session core (as corral run
// drives it) leaves the record deprovisioned.
func TestSessionRun(t *testing.T) {
	h := newHarness(t)
	p := h.provider(BackendIsolationSession)
	dir := t.TempDir()
	out, _ := os.Create(filepath.Join(dir, "out"))
	defer out.Close()
	sess, err := csession.Open(context.Background(), csession.Config{Provider: p, Plan: mustPlan(t, p, testPolicy(policy.NetworkHost))})
	if err != nil {
		t.Fatal(err)
	}
	st, err := sess.Exec(context.Background(), csession.Exec{UID: -1, ExecSpec: provider.ExecSpec{Args: testworkload.Args("outln=hi", "exit=7"), Stdout: out}})
	if cerr := sess.Close(); err == nil {
		err = cerr
	}
	b, _ := os.ReadFile(out.Name())
	if err != nil || st.Code != 7 || string(b) != "hi\n" {
		t.Errorf("run: %+v %v %q", st, err, b)
	}
	recs, _ := p.Records()
	if len(recs) != 1 || recs[0].PhaseState != StateDeprovisioned {
		t.Errorf("records: %+v", recs)
	}
}

func TestSessionRecover(t *testing.T) {
	h := newHarness(t)
	p := h.provider(BackendIsolationSession)
	ctx := context.Background()
	plan := mustPlan(t, p, testPolicy(policy.NetworkHost))
	sb := provisionStarted(t, p)
	id := sb.ID()

	// A new supervisor (another Provider on the same state) reattaches.
	p2 := h.provider(BackendIsolationSession)
	rs, err := p2.Recover(ctx, nil, SessionState(id))
	if err != nil {
		t.Fatal(err)
	}
	if r := run(t, rs, work()); provider.CodeOf(r.err) != provider.CodeStale || !strings.Contains(r.err.Error(), "Reattach") {
		t.Errorf("exec without plan: %v", r.err)
	}
	other := testPolicy(policy.NetworkHost)
	other.Hash = "sha256:other"
	if _, err := p2.Recover(ctx, mustPlan(t, p2, other), SessionState(id)); provider.CodeOf(err) != provider.CodeStale {
		t.Errorf("reattach with another policy: %v", err)
	}
	ra, err := p2.Recover(ctx, plan, SessionState(id))
	if err != nil {
		t.Fatal(err)
	}
	if r := run(t, ra, work("outln=$X")); r.err != nil || r.stdout != "abc\n" {
		t.Errorf("exec after reattach: %+v", r)
	}
	if err := rs.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// The first handle sees the record moved underneath it.
	if err := sb.Stop(ctx); err != nil {
		t.Errorf("stop of a session stopped elsewhere: %v", err)
	}
	if err := sb.Deprovision(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rs.Deprovision(ctx); err != nil {
		t.Errorf("deprovision of a session deprovisioned elsewhere: %v", err)
	}
	if n := h.count("provision"); n != 1 {
		t.Errorf("%d provisions", n)
	}
	if _, err := p2.Recover(ctx, nil, SessionState("../../etc/passwd")); provider.CodeOf(err) != provider.CodeNotFound {
		t.Errorf("bad id: %v", err)
	}
}

func TestSessionPhaseFailures(t *testing.T) {
	ctx := context.Background()
	t.Run("provision", func(t *testing.T) {
		h := newHarness(t)
		p := h.provider(BackendIsolationSession)
		t.Setenv("WXC_FAIL", "provision")
		_, err := p.Provision(ctx, mustPlan(t, p, testPolicy(policy.NetworkHost)), provider.ProvisionOptions{})
		wantCode(t, "provision", err, provider.CodeProvisionFailed)
		recs, _ := p.Records()
		if len(recs) != 1 || recs[0].PhaseState != StateFailed || !strings.Contains(recs[0].LastError, "injected failure in provision") || recs[0].SandboxID != "" {
			t.Errorf("records: %+v", recs)
		}
		if orph, _ := p.Orphans(); len(orph) != 0 {
			t.Errorf("a refused provision is an orphan: %+v", orph)
		}
		if n := h.count("provision"); n != 1 {
			t.Errorf("provision tried %d times", n)
		}
	})
	t.Run("start", func(t *testing.T) {
		h := newHarness(t)
		p := h.provider(BackendIsolationSession)
		sb, err := p.Provision(ctx, mustPlan(t, p, testPolicy(policy.NetworkHost)), provider.ProvisionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv("WXC_FAIL", "start")
		wantCode(t, "start", sb.Start(ctx), provider.CodeStartFailed)
		if rec := record(t, p, sb.ID()); rec.PhaseState != StateProvisioned || !strings.Contains(rec.LastError, "injected failure in start") {
			t.Errorf("record: %+v", rec)
		}
		cleanup(t, sb) // Stop skips a session never started
		if got := strings.Join(h.phases(), ","); got != "provision,start,deprovision" {
			t.Errorf("calls %s", got)
		}
	})
	t.Run("exec", func(t *testing.T) {
		h := newHarness(t)
		p := h.provider(BackendIsolationSession)
		sb := provisionStarted(t, p)
		t.Setenv("WXC_FAIL", "exec")
		r := run(t, sb, work("outln=should-not-run"))
		wantCode(t, "exec", r.err, provider.CodeExecFailed)
		if r.stdout != "" || record(t, p, sb.ID()).PhaseState != StateStarted {
			t.Errorf("exec failure: %+v %+v", r, record(t, p, sb.ID()))
		}
		cleanup(t, sb)
	})
	t.Run("stop", func(t *testing.T) {
		h := newHarness(t)
		p := h.provider(BackendIsolationSession)
		sb := provisionStarted(t, p)
		t.Setenv("WXC_FAIL", "stop")
		wantCode(t, "stop", sb.Stop(ctx), provider.CodeStopFailed)
		if rec := record(t, p, sb.ID()); rec.PhaseState != StateStarted || rec.LastError == "" {
			t.Errorf("record: %+v", rec)
		}
		cleanup(t, sb)
		if rec := record(t, p, sb.ID()); rec.PhaseState != StateDeprovisioned || rec.LastError != "" {
			t.Errorf("record after cleanup: %+v", rec)
		}
	})
	t.Run("deprovision", func(t *testing.T) {
		h := newHarness(t)
		p := h.provider(BackendIsolationSession)
		sb := provisionStarted(t, p)
		if err := sb.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		t.Setenv("WXC_FAIL", "deprovision")
		wantCode(t, "deprovision", sb.Deprovision(ctx), provider.CodeStopFailed)
		if rec := record(t, p, sb.ID()); rec.PhaseState != StateDeprovisioning || !strings.Contains(rec.LastError, "injected failure in deprovision") {
			t.Errorf("record: %+v", rec)
		}
		// An interrupted deprovision is resumed, from a recovered handle.
		t.Setenv("WXC_FAIL", "")
		rs, err := p.Recover(ctx, nil, SessionState(sb.ID()))
		if err != nil {
			t.Fatal(err)
		}
		if err := rs.Deprovision(ctx); err != nil {
			t.Fatal(err)
		}
		if rec := record(t, p, sb.ID()); rec.PhaseState != StateDeprovisioned {
			t.Errorf("record: %+v", rec)
		}
	})
}

func TestSessionCrashAfterProvision(t *testing.T) {
	h := newHarness(t)
	p := h.provider(BackendIsolationSession)
	ctx := context.Background()
	t.Setenv("WXC_CRASH_AFTER", "provision")
	_, err := p.Provision(ctx, mustPlan(t, p, testPolicy(policy.NetworkHost)), provider.ProvisionOptions{})
	wantCode(t, "crash", err, provider.CodeProvisionFailed)
	if !strings.Contains(err.Error(), "exited 137 without an answer") {
		t.Errorf("crash: %v", err)
	}
	recs, _ := p.Records()
	if len(recs) != 1 || recs[0].PhaseState != StateProvisioning || recs[0].SandboxID != "" || recs[0].LastError == "" {
		t.Fatalf("records: %+v", recs)
	}
	// The stand-in did create a session: the orphan is real.
	if sessions, _ := filepath.Glob(filepath.Join(h.wxcState, "sessions", "*.json")); len(sessions) != 1 {
		t.Errorf("stand-in sessions: %q", sessions)
	}
	id := recs[0].LocalID
	orph, err := p.Orphans()
	if err != nil || len(orph) != 1 || orph[0].LocalID != id {
		t.Fatalf("orphans: %+v %v", orph, err)
	}
	_, err = p.Recover(ctx, nil, SessionState(id))
	wantCode(t, "recover orphan", err, provider.CodeStale)
	if !strings.Contains(err.Error(), "orphan") {
		t.Errorf("recover orphan: %v", err)
	}
	if rec := record(t, p, id); rec.PhaseState != StateOrphaned || rec.LastError == "" {
		t.Errorf("record: %+v", rec)
	}
	if orph, _ := p.Orphans(); len(orph) != 1 || orph[0].PhaseState != StateOrphaned {
		t.Errorf("orphans after recover: %+v", orph)
	}
	if n := h.count("provision"); n != 1 {
		t.Errorf("provision tried %d times", n)
	}
}

// A provisioning record whose provisioner is alive is not an orphan.
func TestOrphansSkipsLiveProvision(t *testing.T) {
	p := New(Config{Backend: BackendIsolationSession, WxcExec: standIn}, t.TempDir())
	st := p.store()
	rec := &Record{LocalID: newLocalID(), Backend: BackendIsolationSession, PhaseState: StateProvisioning}
	if err := st.write(rec); err != nil {
		t.Fatal(err)
	}
	argv := testworkload.Args("sleep=30s")
	sleeper := exec.Command(argv[0], argv[1:]...)
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleeper.Process.Kill(); sleeper.Wait() }()
	os.WriteFile(st.lockPath(rec.LocalID), []byte(fmt.Sprintln(sleeper.Process.Pid)), 0o600)
	if orph, _ := p.Orphans(); len(orph) != 0 {
		t.Errorf("live provision reported: %+v", orph)
	}
	// And its lock holds off a lifecycle operation until ctx ends.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := st.lock(ctx, rec.LocalID); provider.CodeOf(err) != provider.CodeStale {
		t.Errorf("lock held by a live process: %v", err)
	}
	sleeper.Process.Kill()
	sleeper.Wait()
	if orph, _ := p.Orphans(); len(orph) != 1 {
		t.Errorf("dead provisioner's record not reported: %+v", orph)
	}
	lk, err := st.lock(context.Background(), rec.LocalID) // taken over
	if err != nil {
		t.Fatal(err)
	}
	lk.unlock()
}

func TestSessionStaleID(t *testing.T) {
	h := newHarness(t)
	p := h.provider(BackendIsolationSession)
	ctx := context.Background()
	sb, err := p.Provision(ctx, mustPlan(t, p, testPolicy(policy.NetworkHost)), provider.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.ID()
	// A copy of the record from before deprovision: restored, it names a
	// session MXC no longer has.
	old, _ := os.ReadFile(p.store().path(id))
	if err := sb.Deprovision(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.store().path(id), old, 0o600); err != nil {
		t.Fatal(err)
	}
	rs, err := p.Recover(ctx, nil, SessionState(id))
	if err != nil {
		t.Fatal(err)
	}
	err = rs.Deprovision(ctx)
	wantCode(t, "second deprovision", err, provider.CodeStale)
	if !strings.Contains(err.Error(), "stale_id") {
		t.Errorf("second deprovision: %v", err)
	}
	if rec := record(t, p, id); rec.PhaseState != StateStale || !strings.Contains(rec.LastError, "stale_id") {
		t.Errorf("record: %+v", rec)
	}
	if _, err := p.Recover(ctx, nil, SessionState(id)); provider.CodeOf(err) != provider.CodeNotFound {
		t.Errorf("recover stale: %v", err)
	}
	if got := strings.Join(h.phases(), ","); got != "provision,deprovision,deprovision" {
		t.Errorf("calls %s", got)
	}
}

// The lifecycle lock serialises operations on one sandbox: concurrent
// Execs and a Stop never interleave in the executor.
func TestSessionLockSerialises(t *testing.T) {
	h := newHarness(t)
	p := h.provider(BackendIsolationSession)
	sb := provisionStarted(t, p)
	done := make(chan execResult)
	go func() { done <- run(t, sb, work("sleep=500ms", "outln=slow")) }()
	time.Sleep(150 * time.Millisecond)
	if err := sb.Stop(context.Background()); err != nil { // waits for the exec
		t.Fatal(err)
	}
	if r := <-done; r.err != nil || r.stdout != "slow\n" {
		t.Errorf("exec: %+v", r)
	}
	if got := strings.Join(h.phases(), ","); got != "provision,start,exec,stop" {
		t.Errorf("calls %s", got)
	}
	cleanup(t, sb)
}

func TestSessionRejectsBeforeExecutor(t *testing.T) {
	h := newHarness(t)
	p := h.provider(BackendIsolationSession)
	plan, loss := p.Map(context.Background(), testPolicy(policy.NetworkProxy))
	if !loss.HasErrors() {
		t.Fatal("proxy accepted on isolation_session")
	}
	_, err := p.Provision(context.Background(), plan, provider.ProvisionOptions{})
	wantCode(t, "provision", err, provider.CodePolicyRejected)
	if h.logLines() != nil {
		t.Errorf("wxc-exec was called: %q", h.logLines())
	}
	if recs, _ := p.Records(); len(recs) != 0 {
		t.Errorf("records: %+v", recs)
	}
}

//go:build linux

package qualify

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeBin writes a stand-in for the corral binary: `version` and `doctor`
// print JSON like the real ones; `run` prints its arguments and a probe
// report line.
func fakeBin(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "corral")
	script := `#!/bin/sh
case "$1" in
version) echo '{"version":"test","commit":"abc","go":"go1.26","providers":["linux"]}';;
doctor) echo '{"providers":[{"provider":"linux","available":true,"facts":{"kernel":"k"},"layers":[{"layer":"cgroups","state":"available"}]}]}';;
run) shift; echo "ARGS $*"; echo "HOME=$HOME"; echo "ID=$(id -u):$(id -g):$(id -G)"; echo '{"probe":"fake","results":[{"what":"read x","ok":false,"errno":"EACCES"}]}'; exit 3;;
esac
`
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// withCases makes Qualify run cs instead of the registered cases.
func withCases(t *testing.T, cs ...Case) {
	t.Helper()
	old := caseSet
	caseSet = func() []Case { return cs }
	t.Cleanup(func() { caseSet = old })
}

func passCase(id string) Case {
	return Case{ID: id, Title: "passes", Run: func(ctx context.Context, e *Env) Result {
		var r Result
		e.Check(&r, "look", "fine", true, "")
		return r
	}}
}

func fakeCases() []Case {
	return []Case{
		passCase("T01"),
		{ID: "T02", Title: "fails <script>alert(1)</script>", Run: func(ctx context.Context, e *Env) Result {
			var r Result
			e.Check(&r, "read <script>alert(1)</script>", "got <script>alert('x')</script> & more", false, "read succeeded")
			return r
		}},
		{ID: "T03", Title: "does not apply", Applies: func(*Env) (bool, string) { return false, "needs a thing" }, Run: func(ctx context.Context, e *Env) Result {
			panic("must not run")
		}},
		{ID: "T04", Title: "panics", Run: func(ctx context.Context, e *Env) Result { panic("boom") }},
		{ID: "T05", Title: "checks nothing", Run: func(ctx context.Context, e *Env) Result { return Result{} }},
		{ID: "T06", Title: "skips itself", Run: func(ctx context.Context, e *Env) Result {
			var r Result
			e.Skip(&r, "host lacks it")
			return r
		}},
	}
}

func TestRegistryOrder(t *testing.T) {
	regMu.Lock()
	saved := registry
	registry = map[string]Case{}
	regMu.Unlock()
	t.Cleanup(func() { regMu.Lock(); registry = saved; regMu.Unlock() })

	run := func(context.Context, *Env) Result { return Result{} }
	for _, id := range []string{"P10", "P02", "P24", "P01"} {
		Register(Case{ID: id, Run: run})
	}
	var ids []string
	for _, c := range Cases() {
		ids = append(ids, c.ID)
	}
	if want := []string{"P01", "P02", "P10", "P24"}; !slices.Equal(ids, want) {
		t.Fatalf("Cases() = %v, want %v", ids, want)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("duplicate Register did not panic")
			}
		}()
		Register(Case{ID: "P02", Run: run})
	}()
}

func qualifyFake(t *testing.T, o Options) *Report {
	t.Helper()
	o.Bin = fakeBin(t)
	o.PerfRuns = -1
	rep, err := Qualify(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func byID(rs []Result) map[string]Result {
	m := map[string]Result{}
	for _, r := range rs {
		m[r.ID] = r
	}
	return m
}

func TestQualifySummaryAndExit(t *testing.T) {
	withCases(t, fakeCases()...)
	rep := qualifyFake(t, Options{Providers: []string{"linux", "docker"}})
	if len(rep.Providers) != 2 {
		t.Fatalf("providers: %+v", rep.Providers)
	}
	lx, dk := rep.Providers[0], rep.Providers[1]
	if want := (Summary{Pass: 1, Fail: 3, Skipped: 2}); lx.Summary != want {
		t.Errorf("linux summary %+v, want %+v", lx.Summary, want)
	}
	res := byID(lx.Results)
	for id, want := range map[string]Status{"T01": Pass, "T02": Fail, "T03": Skipped, "T04": Fail, "T05": Fail, "T06": Skipped} {
		if res[id].Status != want {
			t.Errorf("%s: %s (%s), want %s", id, res[id].Status, res[id].Reason, want)
		}
	}
	if !strings.Contains(res["T04"].Reason, "panic: boom") {
		t.Errorf("T04 reason %q", res["T04"].Reason)
	}
	if res["T03"].Reason != "needs a thing" {
		t.Errorf("T03 reason %q", res["T03"].Reason)
	}
	if dk.Skipped != "provider not built in" || dk.Summary != (Summary{Skipped: 6}) {
		t.Errorf("docker: %q %+v", dk.Skipped, dk.Summary)
	}
	if rep.OK() || rep.ExitCode() != 1 {
		t.Errorf("a failing suite: OK=%v exit=%d", rep.OK(), rep.ExitCode())
	}
	if rep.Binary.Version == "unknown" || !strings.HasPrefix(rep.Binary.Version, "test") {
		t.Errorf("binary version %q", rep.Binary.Version)
	}

	// Only passing and skipped cases: exit 0, skips reported, not passed.
	rep = qualifyFake(t, Options{Cases: []string{"t01", "T03"}, Providers: []string{"all"}})
	if !rep.OK() || rep.ExitCode() != 0 {
		t.Errorf("pass+skip: OK=%v exit=%d %s", rep.OK(), rep.ExitCode(), rep.Verdict())
	}
	if got := rep.Totals(); got != (Summary{Pass: 1, Skipped: 5}) {
		t.Errorf("totals %+v", got)
	}

	// Nothing ran: not a pass.
	rep = qualifyFake(t, Options{Cases: []string{"T01"}, Providers: []string{"docker", "mxc"}})
	if rep.OK() || rep.ExitCode() != 1 || !strings.Contains(rep.Verdict(), "no case ran") {
		t.Errorf("all skipped: OK=%v exit=%d %s", rep.OK(), rep.ExitCode(), rep.Verdict())
	}

	// Only a stand-in passed: reported, but not a qualification.
	mock := &Report{Providers: []ProviderReport{{Name: "mxc", Mock: true, Summary: Summary{Pass: 3}}}}
	if mock.OK() || mock.ExitCode() != 1 || !strings.Contains(mock.Verdict(), "stand-in") {
		t.Errorf("mock only: OK=%v exit=%d %s", mock.OK(), mock.ExitCode(), mock.Verdict())
	}
	mock.Providers = append(mock.Providers, ProviderReport{Name: "linux", Summary: Summary{Pass: 1}})
	if !mock.OK() {
		t.Errorf("mock plus a real pass: %s", mock.Verdict())
	}

	if _, err := Qualify(context.Background(), Options{Bin: fakeBin(t), Cases: []string{"P99"}}); err == nil {
		t.Error("unknown case accepted")
	}
	if _, err := Qualify(context.Background(), Options{Bin: fakeBin(t), Providers: []string{"vmware"}}); err == nil {
		t.Error("unknown provider accepted")
	}
}

func TestStrict(t *testing.T) {
	withCases(t, fakeCases()...)
	rep := qualifyFake(t, Options{Strict: true, Cases: []string{"T01", "T03", "T06"}, Providers: []string{"linux", "mxc"}})
	res := byID(rep.Providers[0].Results)
	for _, id := range []string{"T03", "T06"} {
		if res[id].Status != Fail || !strings.HasPrefix(res[id].Reason, "strict: ") {
			t.Errorf("strict %s: %s %q", id, res[id].Status, res[id].Reason)
		}
	}
	if res["T01"].Status != Pass {
		t.Errorf("strict T01: %s", res["T01"].Status)
	}
	if s := rep.Providers[1].Summary; s != (Summary{Fail: 3}) {
		t.Errorf("strict mxc summary %+v", s)
	}
	if rep.OK() || !rep.Strict {
		t.Error("strict run with skips passed")
	}
	rep = qualifyFake(t, Options{Strict: true, Cases: []string{"T01"}})
	if !rep.OK() {
		t.Errorf("strict all-pass: %s", rep.Verdict())
	}
}

func TestCleanupKillsLeftovers(t *testing.T) {
	var marker string
	withCases(t, Case{ID: "T10", Title: "leaves a process", Run: func(ctx context.Context, e *Env) Result {
		var r Result
		marker = e.Marker()
		cmd := exec.Command("sleep", marker)
		if err := cmd.Start(); err != nil {
			e.Check(&r, "start sleep", err.Error(), false, "cannot start")
			return r
		}
		go cmd.Wait()
		e.Check(&r, "started", "ok", true, "")
		if len(e.ProcsWith(marker)) != 1 {
			e.Check(&r, "ProcsWith", "not found", false, "ProcsWith does not see the process")
		}
		return r
	}})
	rep := qualifyFake(t, Options{})
	r := rep.Providers[0].Results[0]
	if r.Status != Fail || !strings.Contains(r.Reason, "processes left behind") {
		t.Fatalf("leftover process not reported: %s %q", r.Status, r.Reason)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(procsWith(marker, true)) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if ps := procsWith(marker, true); len(ps) > 0 {
		t.Fatalf("leftover still alive: %v", ps)
	}
}

func TestEnvCorralAndCanaries(t *testing.T) {
	var out Outcome
	var env Env
	withCases(t, Case{ID: "T20", Title: "runs corral", Run: func(ctx context.Context, e *Env) Result {
		var r Result
		env = *e
		for _, rel := range CanaryFiles {
			b, err := os.ReadFile(filepath.Join(e.Home, rel))
			if err != nil || strings.TrimSpace(string(b)) != e.Tokens[rel] || !strings.HasPrefix(e.Tokens[rel], "canary-") {
				e.Check(&r, "canary "+rel, string(b), false, "bad canary")
			}
		}
		var err error
		out, err = e.Corral(ctx, Run{Policy: e.SystemPolicy(""), Probe: []string{"read", "/x"}})
		e.Check(&r, "corral", out.String(), err == nil, "corral failed")
		return r
	}})
	rep := qualifyFake(t, Options{})
	if r := rep.Providers[0].Results[0]; r.Status != Pass {
		t.Fatalf("%s: %s", r.Status, r.Reason)
	}
	if out.Code != 3 {
		t.Errorf("exit code %d, want 3", out.Code)
	}
	if out.Report == nil || out.Report.Probe != "fake" {
		t.Fatalf("probe report not parsed from %q", out.Stdout)
	}
	if pr, ok := out.Result("read"); !ok || pr.Errno != "EACCES" {
		t.Errorf("Outcome.Result: %+v %v", pr, ok)
	}
	args := strings.SplitN(out.Stdout, "\n", 2)[0]
	for _, want := range []string{"--provider linux", "--policy " + env.Dir + "/policy-1.yaml", "-C " + env.Dir + "/work-", "-- " + env.Bin + " __probe read /x"} {
		if !strings.Contains(args, want) {
			t.Errorf("corral args %q lack %q", args, want)
		}
	}
	if !strings.Contains(out.Stdout, "HOME="+env.Home) {
		t.Errorf("HOME not the throwaway home: %q", out.Stdout)
	}
	if len(rep.Policies) != 1 {
		t.Errorf("policies recorded: %v", rep.Policies)
	}
	for k := range rep.Policies {
		if k != "linux/T20/policy-1.yaml" {
			t.Errorf("policy key %q", k)
		}
	}
	if _, err := os.Stat(env.Dir); !os.IsNotExist(err) {
		t.Errorf("case dir %s not removed: %v", env.Dir, err)
	}
}

// TestQualifyAsUser: with Options.User corral runs as that uid, gid and
// groups, the case's files are that user's, and the report says whose run
// it was.
func TestQualifyAsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs corral as another uid")
	}
	var out Outcome
	var owner string
	var root bool
	withCases(t, Case{ID: "T21", Title: "runs corral as the user", Run: func(ctx context.Context, e *Env) Result {
		var r Result
		root = e.Root
		var err error
		out, err = e.Corral(ctx, Run{Policy: e.SystemPolicy(""), Probe: []string{"read", "/x"}})
		e.Check(&r, "corral", out.String(), err == nil, "corral failed")
		if fi, err := os.Stat(filepath.Join(e.Home, ".ssh", "id_test")); err == nil {
			st := fi.Sys().(*syscall.Stat_t)
			owner = fmt.Sprintf("%d:%d", st.Uid, st.Gid)
		}
		return r
	}})
	rep := qualifyFake(t, Options{User: &Identity{UID: 65534, GID: 65534, Groups: []uint32{65533}}})
	if r := rep.Providers[0].Results[0]; r.Status != Pass {
		t.Fatalf("%s: %s", r.Status, r.Reason)
	}
	if !strings.Contains(out.Stdout, "ID=65534:65534:") || !strings.Contains(out.Stdout, "65533") {
		t.Errorf("corral did not run as 65534:65534 with group 65533: %q", out.Stdout)
	}
	if owner != "65534:65534" {
		t.Errorf("a canary is owned by %q, want the user's 65534:65534", owner)
	}
	if root || rep.Host.UID != 65534 {
		t.Errorf("Env.Root %v, report host.uid %d: want the user's", root, rep.Host.UID)
	}
}

func TestSystemPolicy(t *testing.T) {
	mk := func(root, cg bool) *Env {
		rs := &runState{cgroupsOK: map[string]bool{"linux": cg}}
		return &Env{Provider: "linux", Bin: "/tmp/q/bin/corral", Root: root, st: &caseState{run: rs}}
	}
	pol := mk(false, false).SystemPolicy(`
filesystem:
  read_only: [/data/ro]
  read_write: [/data/rw]
  deny: [/data/secret]
network: {mode: none}
process:
  limits: {pids: 64}
`)
	m, err := parseYAMLMap(pol)
	if err != nil {
		t.Fatal(err)
	}
	fs := m["filesystem"].(map[string]any)
	ro := marshalYAML(fs["read_only"])
	for _, want := range []string{"/usr", "/etc", "/tmp/q/bin", "/data/ro"} {
		if !strings.Contains(ro, want) {
			t.Errorf("read_only lacks %s:\n%s", want, ro)
		}
	}
	if d := marshalYAML(fs["deny"]); !strings.Contains(d, "/etc/shadow") || !strings.Contains(d, "/data/secret") {
		t.Errorf("deny:\n%s", d)
	}
	lim := m["process"].(map[string]any)["limits"].(map[string]any)
	if lim["pids"] != 64 || lim["timeout"] != "60s" {
		t.Errorf("limits %v", lim)
	}
	if l, _ := m["layers"].(map[string]any); l["cgroups"] != "optional" {
		t.Errorf("unprivileged without cgroups: layers %v", m["layers"])
	}
	if strings.Contains(mk(true, false).SystemPolicy(""), "cgroups") || strings.Contains(mk(false, true).SystemPolicy(""), "cgroups") {
		t.Error("cgroups made optional for root or where usable")
	}
	if strings.Contains(mk(false, false).SystemPolicy("layers: {cgroups: required}"), "optional\n") && !strings.Contains(mk(false, false).SystemPolicy("layers: {cgroups: required}"), "cgroups: required") {
		t.Error("the case's layers do not win")
	}
	if p := mk(true, true).SystemPolicy("filesystem:\nprocess:\n"); !strings.Contains(p, "/tmp/q/bin") || !strings.Contains(p, "timeout: 60s") {
		t.Errorf("empty keys dropped the defaults:\n%s", p)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("bad YAML did not panic")
			}
		}()
		mk(true, true).SystemPolicy("- a list")
	}()
}

func TestListen(t *testing.T) {
	e := &Env{Dir: t.TempDir(), st: &caseState{}}
	tl, err := e.Listen("tcp", "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", tl.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("hello"))
	c.Close()
	if n := tl.Count(); n != 1 {
		t.Errorf("tcp count %d", n)
	}
	ul, err := e.Listen("udp", "")
	if err != nil {
		t.Fatal(err)
	}
	uc, _ := net.Dial("udp", ul.Addr())
	uc.Write([]byte("q1"))
	uc.Write([]byte("q2"))
	uc.Close()
	if n := ul.Count(); n != 2 {
		t.Errorf("udp count %d", n)
	}
	if got := ul.Received(); len(got) != 2 || got[0] != "q1" {
		t.Errorf("udp received %q", got)
	}
	xl, err := e.Listen("unix", "@corral-qualify-test-"+randHex(4))
	if err != nil {
		t.Fatal(err)
	}
	if xl.Count() != 0 {
		t.Error("unix count not 0")
	}
	if _, err := e.Listen("tcp", "10.0.0.1:80"); err == nil {
		t.Error("non-loopback address accepted")
	}
	e.cleanup()
	if _, err := net.Dial("tcp", tl.Addr()); err == nil {
		t.Error("listener still open after cleanup")
	}
}

func TestCaseTimeout(t *testing.T) {
	old := CaseTimeout
	CaseTimeout = 200 * time.Millisecond
	t.Cleanup(func() { CaseTimeout = old })
	withCases(t, Case{ID: "T30", Title: "hangs", Run: func(ctx context.Context, e *Env) Result {
		<-ctx.Done()
		var r Result
		e.Check(&r, "wait", "cancelled", true, "")
		return r
	}})
	rep := qualifyFake(t, Options{})
	if r := rep.Providers[0].Results[0]; r.Status != Fail || !strings.Contains(r.Reason, "did not finish") {
		t.Errorf("hung case: %s %q", r.Status, r.Reason)
	}
}

func TestProgressPlain(t *testing.T) {
	withCases(t, fakeCases()[:2]...)
	var b strings.Builder
	qualifyFake(t, Options{Progress: &b})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "T01 pass ") || !strings.HasPrefix(lines[1], "T02 fail ") {
		t.Errorf("progress lines:\n%s", b.String())
	}
}

// TestGatewayMapping: how a Run reaches the gateway: corral run's flags
// map to the gateway's or are refused, a failed create's record is found
// by its id, and `corral sandbox get`'s layers are read as -v's.
func TestGatewayMapping(t *testing.T) {
	f, err := parseGatewayFlags([]string{"-v", "--audit", "/x/a.jsonl", "-t", "--provider", "vmware"})
	if err != nil || f != (gatewayFlags{provider: "vmware", audit: "/x/a.jsonl", verbose: true, tty: true}) {
		t.Errorf("flags: %+v %v", f, err)
	}
	if f, err := parseGatewayFlags(nil); err != nil || f.provider != "linux" {
		t.Errorf("no flags: %+v %v", f, err)
	}
	for _, bad := range [][]string{{"--strict-tree"}, {"--audit"}, {"-x"}} {
		if _, err := parseGatewayFlags(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	msg := "corral: provision_failed: gateway: sandbox corral-45d6f7369318: start_failed: layer landlock: fault injected"
	if m := failedID().FindStringSubmatch(msg); m == nil || m[1] != "corral-45d6f7369318" {
		t.Errorf("failed create's id from %q: %v", msg, m)
	}
	if m := failedID().FindStringSubmatch(`corral: policy_rejected: gateway: provider "vmware": this gateway runs sandboxes on linux`); m != nil {
		t.Errorf("an id where there is none: %v", m)
	}
	if got := layerStates("corral: layer seccomp skipped fault\nlayer landlock  active  required  abi 7\nevent 1 x\n"); got["seccomp"] != "skipped" || got["landlock"] != "active" || len(got) != 2 {
		t.Errorf("layerStates: %v", got)
	}
}

package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/testworkload"
	"github.com/corral-sandbox/corral/provider/mxc"
)

var bin string

func TestMain(m *testing.M) {
	testworkload.Main() // the workloads: this binary (no shell, so alike on Windows)
	if len(os.Args) > 2 && os.Args[1] == helperArg {
		os.Exit(helper(os.Args[2], os.Args[3:]))
	}
	dir, err := os.MkdirTemp("", "wxcexec-test")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "wxcexec")
	if prebuilt := os.Getenv("CORRAL_TEST_WXCEXEC"); prebuilt != "" {
		// Built beforehand for this GOOS (the Windows lane: no go under Wine).
		bin = prebuilt
	} else if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		os.Stderr.Write(out)
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type outcome struct {
	stdout, stderr string
	code           int
}

// call runs the stand-in with its own state dir and log; extra env entries
// are added.
func call(t *testing.T, state string, env []string, args ...string) outcome {
	t.Helper()
	cmd := exec.Command(bin, args...)
	schemas, _ := filepath.Abs("../../../../../shared/reference/mxc")
	cmd.Env = append(os.Environ(), "WXC_SCHEMA_DIR="+schemas, "WXC_STATE_DIR="+state, "WXC_LOG="+filepath.Join(state, "log"))
	cmd.Env = append(cmd.Env, env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	res := outcome{o.String(), e.String(), cmd.ProcessState.ExitCode()}
	if first, _, _ := strings.Cut(res.stderr, "\n"); first != Banner {
		t.Errorf("stderr does not start with the banner: %q", res.stderr)
	}
	return res
}

func b64(t *testing.T, r *mxc.Request) string {
	t.Helper()
	b, err := r.JSON()
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

func logLines(t *testing.T, state string) []string {
	b, err := os.ReadFile(filepath.Join(state, "log"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func TestProbe(t *testing.T) {
	res := call(t, t.TempDir(), nil, "--probe")
	var p struct {
		Tier                  string   `json:"tier"`
		NeedsDaclAugmentation *bool    `json:"needsDaclAugmentation"`
		Warnings              []string `json:"warnings"`
		Probes                struct {
			IsolationSessionAvailable      bool           `json:"isolationSessionAvailable"`
			BaseContainerSupportsDenyPaths bool           `json:"baseContainerSupportsDenyPaths"`
			UICapabilities                 map[string]any `json:"uiCapabilities"`
		} `json:"probes"`
	}
	if res.code != 0 || json.Unmarshal([]byte(res.stdout), &p) != nil {
		t.Fatalf("probe: %+v", res)
	}
	if p.Tier != "mock" || p.NeedsDaclAugmentation == nil || *p.NeedsDaclAugmentation || len(p.Warnings) != 1 ||
		!p.Probes.IsolationSessionAvailable || !p.Probes.BaseContainerSupportsDenyPaths || p.Probes.UICapabilities == nil {
		t.Errorf("probe: %s", res.stdout)
	}
}

func oneShotReq(p *mxc.Process) *mxc.Request {
	return &mxc.Request{Version: "0.8.0-alpha", Containment: "processcontainer", Process: p}
}

func TestOneShot(t *testing.T) {
	state := t.TempDir()
	cwd := t.TempDir()
	res := call(t, state, nil, append([]string{"--config-base64", b64(t, oneShotReq(&mxc.Process{})), "--"}, testworkload.Args("outln=hello")...)...)
	if res.code != 0 || res.stdout != "hello\n" {
		t.Errorf("echo: %+v", res)
	}
	// process.commandLine is run by the shell: /bin/sh, cmd.exe on Windows.
	line, nl := `echo "$FOO"; pwd; echo oops >&2; exit 3`, "\n"
	if runtime.GOOS == "windows" {
		line, nl = `echo %FOO%&cd&echo oops>&2&exit 3`, "\r\n"
	}
	res = call(t, state, nil, "--config-base64", b64(t, oneShotReq(&mxc.Process{CommandLine: line, Env: []string{"FOO=bar"}, Cwd: cwd})))
	if res.code != 3 || res.stdout != "bar"+nl+cwd+nl || !strings.HasSuffix(res.stderr, "oops"+nl) {
		t.Errorf("commandLine: %+v", res)
	}
	// A config file path works too, and the trailing command wins.
	cfg := filepath.Join(state, "c.json")
	b, _ := oneShotReq(&mxc.Process{CommandLine: "exit 9"}).JSON()
	os.WriteFile(cfg, b, 0o600)
	if res := call(t, state, nil, append([]string{cfg, "--"}, testworkload.Args()...)...); res.code != 0 {
		t.Errorf("config path: %+v", res)
	}
	if res := call(t, state, nil, "--config", cfg); res.code != 9 {
		t.Errorf("--config: %+v", res)
	}
	if got := logLines(t, state); len(got) != 4 || got[0] != "phase=oneshot sandboxId= exit=0" || got[3] != "phase=oneshot sandboxId= exit=9" {
		t.Errorf("log: %q", got)
	}
}

func TestOneShotTimeoutKillsTree(t *testing.T) {
	ms := uint32(200)
	start := time.Now()
	// The grandchild holds stdout; with a pipe the call returns only once
	// it is dead too.
	res := call(t, t.TempDir(), nil, append([]string{"--config-base64", b64(t, oneShotReq(&mxc.Process{Timeout: &ms})), "--"},
		testworkload.Args("spawn=sleep=30s", "sleep=30s")...)...)
	if res.code != 255 || !strings.Contains(res.stderr, "process.timeout (200 ms)") {
		t.Errorf("timeout: %+v", res)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v: descendants survived the timeout", d)
	}
}

func TestOneShotErrors(t *testing.T) {
	state := t.TempDir()
	for name, args := range map[string][]string{
		"bad base64": {"--config-base64", "%%%"},
		"bad json":   {"--config-base64", base64.StdEncoding.EncodeToString([]byte("{"))},
		"schema":     {"--config-base64", base64.StdEncoding.EncodeToString([]byte(`{"version":"0.8.0-alpha","process":{},"bogus":1}`)), "--", "true"},
		"field name": {"--config-base64", base64.StdEncoding.EncodeToString([]byte(`{"version":"0.8.0-alpha","process":{},"filesystem":{"readOnlyPaths":[]}}`)), "--", "true"},
		"version":    {"--config-base64", base64.StdEncoding.EncodeToString([]byte(`{"version":"1.0.0","process":{}}`)), "--", "true"},
		"no command": {"--config-base64", b64(t, oneShotReq(&mxc.Process{}))},
		"flag":       {"--nope"},
	} {
		res := call(t, state, nil, args...)
		if res.code != 1 || res.stdout != "" || strings.Count(res.stderr, "\n") < 2 {
			t.Errorf("%s: %+v", name, res)
		}
	}
	res := call(t, state, []string{"WXC_FAIL=oneshot"}, append([]string{"--config-base64", b64(t, oneShotReq(&mxc.Process{})), "--"},
		testworkload.Args("outln=ran")...)...)
	if res.code != 1 || res.stdout != "" || !strings.Contains(res.stderr, `{"error":{"code":"backend_error","message":"injected failure in oneshot"}}`) {
		t.Errorf("WXC_FAIL=oneshot: %+v", res)
	}
}

// isoBase is the document mxc.Map produces for isolation_session with
// network mode host.
func isoBase() *mxc.Request {
	t := true
	return &mxc.Request{Version: "0.9.0-alpha", Containment: "isolation_session", Process: &mxc.Process{},
		Network: &mxc.Network{DefaultPolicy: "allow", AllowLocalNetwork: &t}}
}

type envelope struct {
	Result map[string]any `json:"result"`
	Error  *struct {
		Code, Message string
	} `json:"error"`
}

func phase(t *testing.T, state string, env []string, p mxc.Phase, id string, cmd ...string) (outcome, envelope) {
	t.Helper()
	req, err := isoBase().ForPhase(p, id)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--experimental", "--config-base64", b64(t, req)}
	if len(cmd) > 0 {
		args = append(append(args, "--"), cmd...)
	}
	res := call(t, state, env, args...)
	var e envelope
	if json.Unmarshal([]byte(res.stdout), &e) != nil {
		e = envelope{}
	}
	return res, e
}

func wantErr(t *testing.T, what string, res outcome, e envelope, code string) {
	t.Helper()
	if res.code != 1 || e.Error == nil || e.Error.Code != code {
		t.Errorf("%s: want %s envelope, exit 1; got %+v", what, code, res)
	}
}

func wantOK(t *testing.T, what string, res outcome, e envelope) {
	t.Helper()
	if res.code != 0 || e.Result == nil || e.Error != nil {
		t.Errorf("%s: want a result, exit 0; got %+v", what, res)
	}
}

func TestLifecycle(t *testing.T) {
	state := t.TempDir()
	res, e := phase(t, state, nil, mxc.PhaseProvision, "")
	wantOK(t, "provision", res, e)
	id, _ := e.Result["sandboxId"].(string)
	md, _ := e.Result["metadata"].(map[string]any)
	ws, _ := md["ephemeralWorkspacePath"].(string)
	if !strings.HasPrefix(id, "iso:") || !strings.HasPrefix(md["agentUserName"].(string), "corral-agent-") ||
		!strings.HasPrefix(md["agentUserSid"].(string), "S-1-5-21-mock-") {
		t.Fatalf("provision result: %s", res.stdout)
	}
	if st, err := os.Stat(ws); err != nil || !st.IsDir() {
		t.Fatalf("workspace: %v", err)
	}
	// Not idempotent: a second provision is a second session.
	res2, e2 := phase(t, state, nil, mxc.PhaseProvision, "")
	wantOK(t, "provision 2", res2, e2)
	if e2.Result["sandboxId"] == id {
		t.Error("provision returned the same id twice")
	}

	res, e = phase(t, state, nil, mxc.PhaseExec, id, testworkload.Args()...)
	wantErr(t, "exec before start", res, e, "not_started")
	res, e = phase(t, state, nil, mxc.PhaseStop, id)
	wantErr(t, "stop before start", res, e, "not_started")
	res, e = phase(t, state, nil, mxc.PhaseStart, id)
	wantOK(t, "start", res, e)
	res, e = phase(t, state, nil, mxc.PhaseStart, id)
	wantErr(t, "start twice", res, e, "backend_error")

	res, _ = phase(t, state, nil, mxc.PhaseExec, id, testworkload.Args("pwd", "exit=5")...)
	if res.code != 5 || res.stdout != ws+"\n" {
		t.Errorf("exec: %+v", res)
	}
	res, e = phase(t, state, nil, mxc.PhaseExec, id, filepath.Join(state, "no-such-program"))
	wantErr(t, "exec dispatch failure", res, e, "backend_error")

	res, e = phase(t, state, nil, mxc.PhaseStop, id)
	wantOK(t, "stop", res, e)
	res, e = phase(t, state, nil, mxc.PhaseStop, id)
	wantErr(t, "stop twice", res, e, "backend_error")
	res, e = phase(t, state, nil, mxc.PhaseDeprovision, id)
	wantOK(t, "deprovision", res, e)
	if _, err := os.Stat(ws); !os.IsNotExist(err) {
		t.Errorf("workspace survived deprovision: %v", err)
	}
	res, e = phase(t, state, nil, mxc.PhaseDeprovision, id)
	wantErr(t, "second deprovision", res, e, "stale_id")
	res, e = phase(t, state, nil, mxc.PhaseStart, "iso:not-hex")
	wantErr(t, "malformed id", res, e, "malformed_id")
	res, e = phase(t, state, nil, mxc.PhaseStart, "sandbox-1")
	wantErr(t, "unprefixed id", res, e, "malformed_id")

	got := logLines(t, state)
	if len(got) != 14 || got[0] != "phase=provision sandboxId="+id+" exit=0" || got[11] != "phase=deprovision sandboxId="+id+" exit=1" {
		t.Errorf("log: %q", got)
	}
}

func TestStateAwareRequestErrors(t *testing.T) {
	state := t.TempDir()
	req, _ := isoBase().ForPhase(mxc.PhaseProvision, "")
	res := call(t, state, nil, "--config-base64", b64(t, req))
	var e envelope
	json.Unmarshal([]byte(res.stdout), &e)
	wantErr(t, "no --experimental", res, e, "unsupported_containment")

	for name, c := range map[string]struct{ doc, code string }{
		"phase":     {`{"version":"0.9.0-alpha","containment":"isolation_session","phase":"restart","sandboxId":"iso:00"}`, "unsupported_phase"},
		"schema":    {`{"version":"0.9.0-alpha","containment":"isolation_session","phase":"start","sandboxId":"iso:00","bogus":1}`, "malformed_request"},
		"0.8":       {`{"version":"0.8.0-alpha","containment":"isolation_session","phase":"start","sandboxId":"iso:00","process":{}}`, "malformed_request"},
		"no id":     {`{"version":"0.9.0-alpha","containment":"isolation_session","phase":"start"}`, "malformed_request"},
		"container": {`{"version":"0.9.0-alpha","containment":"processcontainer","phase":"start","sandboxId":"iso:00"}`, "unsupported_containment"},
		"grants":    {`{"version":"0.9.0-alpha","containment":"isolation_session","phase":"provision","filesystem":{"readonlyPaths":["C:\\x"]},"network":{"defaultPolicy":"allow","allowLocalNetwork":true}}`, "policy_validation"},
		"network":   {`{"version":"0.9.0-alpha","containment":"isolation_session","phase":"provision","network":{"egress":{"default":"deny"}}}`, "policy_validation"},
		"stale":     {`{"version":"0.9.0-alpha","containment":"isolation_session","phase":"stop","sandboxId":"iso:00"}`, "stale_id"},
	} {
		res := call(t, state, nil, "--experimental", "--config-base64", base64.StdEncoding.EncodeToString([]byte(c.doc)))
		var e envelope
		json.Unmarshal([]byte(res.stdout), &e)
		wantErr(t, name, res, e, c.code)
	}
}

func TestInjectedFailures(t *testing.T) {
	for _, p := range []mxc.Phase{mxc.PhaseProvision, mxc.PhaseStart, mxc.PhaseExec, mxc.PhaseStop, mxc.PhaseDeprovision} {
		state := t.TempDir()
		fail := []string{"WXC_FAIL=" + string(p)}
		id := ""
		for _, q := range []mxc.Phase{mxc.PhaseProvision, mxc.PhaseStart, mxc.PhaseExec, mxc.PhaseStop, mxc.PhaseDeprovision} {
			var env []string
			if q == p {
				env = fail
			}
			res, e := phase(t, state, env, q, id, testworkload.Args("outln=ran")...)
			if q == p {
				wantErr(t, "WXC_FAIL="+string(p), res, e, "backend_error")
				if e.Error != nil && e.Error.Message != "injected failure in "+string(p) {
					t.Errorf("message: %q", e.Error.Message)
				}
				break
			}
			if q == mxc.PhaseProvision {
				id, _ = e.Result["sandboxId"].(string)
			}
		}
	}
}

func TestCrashAfterProvision(t *testing.T) {
	state := t.TempDir()
	res, _ := phase(t, state, []string{"WXC_CRASH_AFTER=provision"}, mxc.PhaseProvision, "")
	if res.code != 137 || res.stdout != "" {
		t.Fatalf("crash: %+v", res)
	}
	// The session exists (an orphan the caller never learnt of); the log
	// has its id.
	got := logLines(t, state)
	id := strings.TrimSuffix(strings.TrimPrefix(got[0], "phase=provision sandboxId="), " exit=137")
	if len(got) != 1 || !strings.HasPrefix(id, "iso:") {
		t.Fatalf("log: %q", got)
	}
	res, e := phase(t, state, nil, mxc.PhaseDeprovision, id)
	wantOK(t, "deprovision the orphan", res, e)
}

// helperArg, as the first argument, makes this binary a workload step the
// testworkload package has not: put NAME TEXT writes $HOME/NAME; get NAME
// prints it; detach DIR starts "await DIR" detached (detachAttr), in DIR,
// without stdio, and returns; spawn DIR the same, not detached; await DIR waits up to 30 s for DIR/go, then writes
// DIR/alive.
const helperArg = "wxcexec-test-helper"

func helper(step string, args []string) int {
	var err error
	switch step {
	case "put":
		err = os.WriteFile(filepath.Join(os.Getenv("HOME"), args[0]), []byte(args[1]), 0o600)
	case "get":
		var b []byte
		if b, err = os.ReadFile(filepath.Join(os.Getenv("HOME"), args[0])); err == nil {
			os.Stdout.Write(b)
		}
	case "detach", "spawn":
		cmd := exec.Command(os.Args[0], helperArg, "await", args[0])
		if step == "detach" {
			cmd.SysProcAttr = detachAttr()
		}
		// Not in the workspace: on Windows a process's working directory
		// cannot be removed, and deprovision would fail.
		cmd.Dir = args[0]
		if err = cmd.Start(); err == nil {
			err = cmd.Process.Release()
		}
	case "await":
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if _, e := os.Stat(filepath.Join(args[0], "go")); e == nil {
				err = os.WriteFile(filepath.Join(args[0], "alive"), []byte("alive"), 0o600)
				break
			}
		}
	}
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 1
	}
	return 0
}

// started provisions and starts a session: its id and profile (from the
// workload's HOME, the only place the stand-in tells it).
func started(t *testing.T, state string) (id, profile string) {
	t.Helper()
	res, e := phase(t, state, nil, mxc.PhaseProvision, "")
	wantOK(t, "provision", res, e)
	id, _ = e.Result["sandboxId"].(string)
	if md, _ := e.Result["metadata"].(map[string]any); len(md) != 3 {
		t.Errorf("metadata has fields MXC does not document: %s", res.stdout)
	}
	res, e = phase(t, state, nil, mxc.PhaseStart, id)
	wantOK(t, "start", res, e)
	res, _ = phase(t, state, nil, mxc.PhaseExec, id, testworkload.Args("out=${HOME}")...)
	if res.code != 0 || res.stdout == "" {
		t.Fatalf("exec HOME: %+v", res)
	}
	return id, res.stdout
}

func TestProfilePersistsPerSession(t *testing.T) {
	state := t.TempDir()
	id, prof := started(t, state)
	id2, prof2 := started(t, state)
	if filepath.Dir(prof) != filepath.Join(state, "profiles") || prof == prof2 {
		t.Errorf("profiles: %q and %q, want two different dirs under %s", prof, prof2, filepath.Join(state, "profiles"))
	}
	if st, err := os.Stat(prof); err != nil || !st.IsDir() || runtime.GOOS != "windows" && st.Mode().Perm() != 0o700 {
		t.Errorf("profile %s: %v %v", prof, st, err)
	}
	me := []string{os.Args[0], helperArg}
	if res, _ := phase(t, state, nil, mxc.PhaseExec, id, append(me, "put", "note", "from exec 1")...); res.code != 0 {
		t.Fatalf("put: %+v", res)
	}
	if res, _ := phase(t, state, nil, mxc.PhaseExec, id, append(me, "get", "note")...); res.code != 0 || res.stdout != "from exec 1" {
		t.Errorf("exec 2 of the session does not see exec 1's file: %+v", res)
	}
	if res, _ := phase(t, state, nil, mxc.PhaseExec, id2, append(me, "get", "note")...); res.code == 0 {
		t.Errorf("another session sees the file: %+v", res)
	}
	for _, p := range []mxc.Phase{mxc.PhaseStop, mxc.PhaseDeprovision} {
		res, e := phase(t, state, nil, p, id)
		wantOK(t, string(p), res, e)
	}
	if _, err := os.Lstat(prof); !os.IsNotExist(err) {
		t.Errorf("profile survived deprovision: %v", err)
	}
	if _, err := os.Stat(prof2); err != nil {
		t.Errorf("the other session's profile went too: %v", err)
	}
	// Nothing of the session is left in STATE.
	h := strings.TrimPrefix(id, "iso:")
	filepath.WalkDir(state, func(p string, d os.DirEntry, err error) error {
		if strings.Contains(filepath.Base(p), h) {
			t.Errorf("left after deprovision: %s", p)
		}
		return nil
	})
}

func TestLogonEnvOverridesProcessEnv(t *testing.T) {
	state := t.TempDir()
	id, prof := started(t, state)
	steps := "outln=${HOME}|${USERPROFILE}|${USERNAME}"
	want := prof + "|" + prof + "|corral-agent-" + strings.TrimPrefix(id, "iso:")
	if runtime.GOOS == "windows" {
		steps += "|${LOCALAPPDATA}|${APPDATA}"
		want += "|" + filepath.Join(prof, "AppData", "Local") + "|" + filepath.Join(prof, "AppData", "Roaming")
		for _, d := range []string{"Local", "Roaming"} {
			if st, err := os.Stat(filepath.Join(prof, "AppData", d)); err != nil || !st.IsDir() {
				t.Errorf("AppData\\%s: %v", d, err)
			}
		}
	}
	req, err := isoBase().ForPhase(mxc.PhaseExec, id)
	if err != nil {
		t.Fatal(err)
	}
	req.Process = &mxc.Process{Env: []string{"HOME=/elsewhere", "USERPROFILE=/elsewhere", "USERNAME=someone", "FOO=kept"}}
	args := append([]string{"--experimental", "--config-base64", b64(t, req), "--"}, testworkload.Args(steps, "outln=${FOO}", "pwd")...)
	res := call(t, state, nil, args...)
	ws := filepath.Join(state, "workspaces", strings.TrimPrefix(id, "iso:"))
	if res.code != 0 || res.stdout != want+"\nkept\n"+ws+"\n" {
		t.Errorf("exec env: got %q, want %q", res.stdout, want+"\nkept\n"+ws+"\n")
	}
}

// A process the workload starts detached (new session on Linux,
// CREATE_BREAKAWAY_FROM_JOB on Windows) outlives the exec, and stop and
// deprovision do not end it either.
func TestDetachedProcessOutlivesExec(t *testing.T) {
	if detachAttr == nil {
		t.Skip("no detached start on " + runtime.GOOS)
	}
	state := t.TempDir()
	id, _ := started(t, state)
	dir := t.TempDir()
	res, _ := phase(t, state, nil, mxc.PhaseExec, id, os.Args[0], helperArg, "detach", dir)
	if res.code != 0 {
		t.Fatalf("detach: %+v", res)
	}
	for _, p := range []mxc.Phase{mxc.PhaseStop, mxc.PhaseDeprovision} {
		res, e := phase(t, state, nil, p, id)
		wantOK(t, string(p), res, e)
	}
	time.Sleep(300 * time.Millisecond) // a kill-on-close job or Pdeathsig acts at once
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(dir, "alive")); err == nil {
			return
		}
	}
	t.Error("the detached process did not outlive the exec")
}

// On Windows an ordinary descendant (no CREATE_BREAKAWAY_FROM_JOB) stays
// in the kill-on-close job and dies with the exec's wxc-exec. (Not on
// Linux: there only the direct child has Pdeathsig.)
func TestJobKillsUndetachedDescendant(t *testing.T) {
	if runtime.GOOS != "windows" {
		t.Skip("the kill-on-close job is the Windows stand-in's")
	}
	state := t.TempDir()
	id, _ := started(t, state)
	dir := t.TempDir()
	if res, _ := phase(t, state, nil, mxc.PhaseExec, id, os.Args[0], helperArg, "spawn", dir); res.code != 0 {
		t.Fatalf("spawn: %+v", res)
	}
	time.Sleep(300 * time.Millisecond)
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if _, err := os.Stat(filepath.Join(dir, "alive")); err == nil {
		t.Error("a descendant that did not break away outlived the exec")
	}
}

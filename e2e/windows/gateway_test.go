//go:build linux

package windows

// `corral gateway serve` of corral.exe under Wine, on the mxc provider
// through the stand-in (mock — never evidence of isolation): its two
// listeners (loopback TCP with the bearer token, a named pipe), a
// SIGKILLed gateway's sandboxes adopted (isolation_session) or reported
// lost (process_container) by the next gateway on the same --db, and the
// database lock.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// isoPolicy is a policy isolation_session takes (no filesystem grant,
// network host, no Linux layer required); process_container sandboxes
// take the built-in Windows default.
const isoPolicy = "version: 1\nfilesystem: {read_only: [], deny: [], include_workdir: false, protected: []}\nnetwork: {mode: host}\n" +
	"layers: {landlock: optional, seccomp: optional, cgroups: optional, namespaces: optional, mounts: optional}\n" +
	"process: {limits: {memory: 0, pids: 0, cpu: 0, nofile: 0}}\n"

// gwDir is a directory for a gateway's files (database, token, mxc
// records), as Linux and as corral.exe name it. It is on the prefix's C:
// drive, not in t.TempDir: Wine shows /tmp (mode 1777; Wine ignores the
// sticky bit) as a directory in which Everyone may delete children, and
// the gateway rightly refuses a token file there; the C: drive's
// directories are 0755, the user's own. db and token are its gateway's
// --db and --token-file.
type gwDir struct{ unix, win, db, token string }

func gatewayDir(t *testing.T) gwDir {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(os.Getenv("WINEPREFIX"), "drive_c", "users", u.Username, "Temp")
	dir, err := os.MkdirTemp(base, "corral-e2e-gw-")
	if err != nil {
		t.Fatalf("a directory on the prefix's C: drive: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	win := `C:\users\` + u.Username + `\Temp\` + filepath.Base(dir)
	return gwDir{dir, win, win + `\db\gateway.db`, win + `\token`}
}

// gwProc is a running `wine corral.exe gateway serve`.
type gwProc struct {
	cmd     *exec.Cmd
	logFile string // its stdout and stderr
	done    chan struct{}
	flags   []string // what a sandbox command needs to reach it
}

// log is what the gateway wrote so far.
func (g *gwProc) log() string {
	b, _ := os.ReadFile(g.logFile)
	return string(b)
}

var listening = regexp.MustCompile(`corral gateway: listening on (\S+) \(database `)

// startGateway starts `gateway serve --provider mxc --listen listen` on
// gd's database (and, on TCP, token) with env (the stand-in's) and waits,
// at most 90 s, for its "listening on" line. The gateway is killed at the
// test's end.
func (l *lane) startGateway(t *testing.T, env []string, gd gwDir, listen string) *gwProc {
	t.Helper()
	args := []string{l.corralExe, "gateway", "serve", "--provider", "mxc", "--listen", listen, "--db", gd.db}
	tokenFile := ""
	if !strings.HasPrefix(listen, "pipe:") {
		tokenFile = gd.token
		args = append(args, "--token-file", tokenFile)
	}
	g := &gwProc{cmd: exec.Command(filepath.Join(l.root, "scripts", "wine", "exec"), args...), logFile: filepath.Join(t.TempDir(), "gateway.log"), done: make(chan struct{})}
	g.cmd.Env = append(os.Environ(), env...)
	// A file, not a pipe: a Wine service that inherits it cannot hold
	// up Wait (see lane.corral).
	f, err := os.Create(g.logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g.cmd.Stdout, g.cmd.Stderr = f, f
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.cmd.Wait(); close(g.done) }()
	t.Cleanup(g.kill)
	for end := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if m := listening.FindStringSubmatch(g.log()); m != nil {
			addr := m[1]
			if !strings.HasPrefix(addr, "pipe:") {
				addr = "http://" + addr
			}
			g.flags = []string{"--gateway", addr}
			if tokenFile != "" {
				g.flags = append(g.flags, "--token-file", tokenFile)
			}
			return g
		}
		select {
		case <-g.done:
			t.Fatalf("gateway serve --listen %s exited before listening:\n%s", listen, g.log())
		default:
		}
		if time.Now().After(end) {
			t.Fatalf("gateway serve --listen %s: no 'listening on' in 90 s:\n%s", listen, g.log())
		}
	}
}

// kill is the crash: SIGKILL of the Wine process running corral.exe (the
// wine loader is exec'd in place, so the pid is corral.exe's), then its
// end, waited for at most 30 s.
func (g *gwProc) kill() {
	select {
	case <-g.done:
		return
	default:
	}
	_ = g.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-g.done:
	case <-time.After(30 * time.Second):
	}
}

// sandbox runs `corral.exe sandbox SUB <g's flags> ARGS...` in dir.
func (g *gwProc) sandbox(t *testing.T, l *lane, dir string, sub string, args ...string) result {
	t.Helper()
	return l.corral(t, dir, nil, append(append([]string{"sandbox", sub}, g.flags...), args...)...)
}

// sandboxGet is `sandbox get ID -o json`'s sandbox.
type sandboxGet struct {
	Sandbox struct {
		ID, Phase, Reason, Desired, Effective, Provider string
	}
}

func (g *gwProc) get(t *testing.T, l *lane, dir, id string) (sandboxGet, result) {
	t.Helper()
	var s sandboxGet
	r := g.sandbox(t, l, dir, "get", id, "-o", "json")
	if r.code == 0 {
		if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
			t.Fatalf("sandbox get %s -o json: %v\n%s", id, err, r)
		}
	}
	return s, r
}

var sandboxID = regexp.MustCompile(`^corral-[0-9a-f]{12}$`)

// create makes a sandbox with policy src (written into wd, the client's
// directory; "": the built-in Windows default) and returns its id.
func (g *gwProc) create(t *testing.T, l *lane, wd, src string) string {
	t.Helper()
	var args []string
	if src != "" {
		if err := os.WriteFile(filepath.Join(wd, "policy.yaml"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--policy", "policy.yaml")
	}
	r := g.sandbox(t, l, wd, "create", args...)
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || !sandboxID.MatchString(id) {
		t.Fatalf("sandbox create:\n%s\ngateway:\n%s", r, g.log())
	}
	return id
}

// mxcRecord is what the tests read of an mxc record (CORRAL_MXC_STATE/ID.json).
type mxcRecord struct {
	Backend    string `json:"backend"`
	PhaseState string `json:"phase_state"`
	SandboxID  string `json:"sandbox_id"`
}

func readRecord(t *testing.T, dir, id string) (mxcRecord, bool) {
	t.Helper()
	var r mxcRecord
	b, err := os.ReadFile(filepath.Join(dir, id+".json"))
	if errors.Is(err, os.ErrNotExist) {
		return r, false
	}
	if err != nil || json.Unmarshal(b, &r) != nil {
		t.Fatalf("mxc record %s: %v\n%s", id, err, b)
	}
	return r, true
}

// mxcEnv is the stand-in's environment (lane.standIn) with the backend,
// the mxc records in gd (CORRAL_MXC_STATE, later values winning) and,
// when wxc is set, that copy of the stand-in; it returns too the
// stand-in's state directory (its sessions) and log, as Linux paths.
func (l *lane) mxcEnv(t *testing.T, gd gwDir, backend, wxc string) (env []string, wxcState, log string) {
	env, log = l.standIn(t)
	env = append(env, "CORRAL_MXC_BACKEND="+backend, `CORRAL_MXC_STATE=`+gd.win+`\mxc`)
	if wxc != "" {
		env = append(env, "CORRAL_MXC_WXC_EXEC="+wxc)
	}
	return env, filepath.Join(filepath.Dir(log), "wxc"), log
}

// An isolation_session sandbox through a gateway on loopback TCP with
// its token: made, run in (output and exit code), listed ready; the
// gateway dies by SIGKILL, and the next one on the same --db adopts it
// (its session still stands, the stand-in's file), runs in it again and
// deletes it: the session is stopped and deprovisioned and the record
// removed.
func TestGatewayIsolationSessionAdopted(t *testing.T) {
	l := need(t)
	gd := gatewayDir(t)
	env, wxcState, wxcLog := l.mxcEnv(t, gd, "isolation_session", "")
	g := l.startGateway(t, env, gd, "127.0.0.1:0")
	if log := g.log(); !strings.Contains(log, "reconciled: 0 adopted") || !strings.Contains(log, mock) {
		t.Errorf("gateway serve's start does not say it reconciled nothing and serves mock sandboxes:\n%s", log)
	}
	wd := t.TempDir()
	id := g.create(t, l, wd, isoPolicy)

	if r := g.sandbox(t, l, wd, "exec", id, "--", "cmd", "/c", "echo hi-from-session& exit 3"); r.code != 3 || strings.TrimSpace(r.stdout) != "hi-from-session" {
		t.Errorf("sandbox exec: want hi-from-session and exit 3\n%s", r)
	}
	if r := g.sandbox(t, l, wd, "list"); r.code != 0 || !regexp.MustCompile(`(?m)^`+id+`\s+ready\s+running\s+mxc\s`).MatchString(r.stdout) {
		t.Errorf("sandbox list: want %s ready, running, on mxc\n%s", id, r)
	}
	if s, r := g.get(t, l, wd, id); r.code != 0 || s.Sandbox.Phase != "ready" || s.Sandbox.Effective != "running" || s.Sandbox.Provider != "mxc" {
		t.Errorf("sandbox get: %+v\n%s", s.Sandbox, r)
	}
	rec, ok := readRecord(t, filepath.Join(gd.unix, "mxc"), id)
	session := filepath.Join(wxcState, "sessions", strings.TrimPrefix(rec.SandboxID, "iso:")+".json")
	if !ok || rec.Backend != "isolation_session" || !strings.HasPrefix(rec.SandboxID, "iso:") {
		t.Fatalf("mxc record of %s: %+v (exists %v)", id, rec, ok)
	}
	if _, err := os.Stat(session); err != nil {
		t.Fatalf("the stand-in's session of %s: %v", id, err)
	}

	g.kill()
	g = l.startGateway(t, env, gd, "127.0.0.1:0")
	if !strings.Contains(g.log(), "reconciled: 1 adopted, 0 lost") {
		t.Fatalf("the gateway after the SIGKILL did not adopt the sandbox:\n%s", g.log())
	}
	if r := g.sandbox(t, l, wd, "exec", id, "--", "cmd", "/c", "echo again"); r.code != 0 || strings.TrimSpace(r.stdout) != "again" {
		t.Errorf("sandbox exec after the adoption:\n%s\ngateway:\n%s", r, g.log())
	}
	if s, r := g.get(t, l, wd, id); s.Sandbox.Phase != "ready" || s.Sandbox.Effective != "running" {
		t.Errorf("sandbox get after the adoption: %+v\n%s", s.Sandbox, r)
	}

	if r := g.sandbox(t, l, wd, "delete", id); r.code != 0 {
		t.Fatalf("sandbox delete:\n%s", r)
	}
	if _, r := g.get(t, l, wd, id); r.code != 118 {
		t.Errorf("sandbox get after the delete: want 118 (not found)\n%s", r)
	}
	if _, err := os.Stat(session); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stand-in's session %s after the delete: %v, want it deprovisioned", session, err)
	}
	if _, ok := readRecord(t, filepath.Join(gd.unix, "mxc"), id); ok {
		t.Errorf("the mxc record of %s is left after the delete", id)
	}
	b, _ := os.ReadFile(wxcLog)
	for _, phase := range []string{"stop", "deprovision"} {
		if !strings.Contains(string(b), "phase="+phase+" sandboxId="+rec.SandboxID+" exit=0") {
			t.Errorf("the stand-in's log has no %s of %s:\n%s", phase, rec.SandboxID, b)
		}
	}
}

// procsWith are the running processes whose command line (as Wine sets
// it: the Windows one) contains every one of subs.
// stillRunning waits up to 20 s for the processes pids lists (asked
// again each time) to end and returns those running then (zombies are
// ended).
func stillRunning(pids func() []int) []int {
	left := func() []int {
		var out []int
		for _, pid := range pids() {
			if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !strings.Contains(string(st), ") Z ") {
				out = append(out, pid)
			}
		}
		return out
	}
	for end := time.Now().Add(20 * time.Second); len(left()) > 0 && time.Now().Before(end); {
		time.Sleep(100 * time.Millisecond)
	}
	return left()
}

func procsWith(subs ...string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		st, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil || len(b) == 0 || bytes.Contains(st, []byte(") Z ")) {
			continue
		}
		all := true
		for _, s := range subs {
			all = all && bytes.Contains(b, []byte(s))
		}
		if all {
			pids = append(pids, pid)
		}
	}
	return pids
}

// A process_container sandbox: one wxc-exec (here a copy of the stand-in
// of the test's own, so that its processes are known) running the relay,
// which serves every exec; the gateway dies by SIGKILL, and the relay
// and wxc-exec end with it (their stdin's end); the next gateway reports
// the sandbox lost (MXC has no attach) and removes its record, and
// delete removes the sandbox.
func TestGatewayProcessContainerLost(t *testing.T) {
	l := need(t)
	gd := gatewayDir(t)
	wxc := filepath.Join(gd.unix, "wxc-exec.exe")
	if b, err := os.ReadFile(l.wxc); err != nil || os.WriteFile(wxc, b, 0o755) != nil {
		t.Fatalf("copying the stand-in: %v", err)
	}
	wxcWin := gd.win + `\wxc-exec.exe`
	// The relays are this lane's corral.exe's (its directory in the
	// match: another corral.exe's relays on the machine are not ours).
	relay := []string{filepath.Base(filepath.Dir(l.corralExe)) + `\` + filepath.Base(l.corralExe), "__relay"}
	var relays []int
	t.Cleanup(func() {
		for _, pid := range append(procsWith(wxcWin), procsWith(relay...)...) {
			if pid != 0 && (slices.Contains(relays, pid) || slices.Contains(procsWith(wxcWin), pid)) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	env, _, _ := l.mxcEnv(t, gd, "process_container", wxcWin)
	g := l.startGateway(t, env, gd, "127.0.0.1:0")
	if !strings.Contains(g.log(), "mxc sandboxes end with this gateway") {
		t.Errorf("serve does not say its process_container sandboxes end with it:\n%s", g.log())
	}
	wd := t.TempDir()
	id := g.create(t, l, wd, "") // the built-in Windows default
	for i, want := range []string{"first-exec", "second-exec"} {
		r := g.sandbox(t, l, wd, "exec", id, "--", "cmd", "/c", fmt.Sprintf("echo %s& exit %d", want, i+4))
		if r.code != i+4 || strings.TrimSpace(r.stdout) != want {
			t.Errorf("sandbox exec %d: want %s and exit %d\n%s\ngateway:\n%s", i, want, i+4, r, g.log())
		}
	}
	if s, r := g.get(t, l, wd, id); s.Sandbox.Phase != "ready" || s.Sandbox.Effective != "running" {
		t.Errorf("sandbox get: %+v\n%s", s.Sandbox, r)
	}
	if rec, ok := readRecord(t, filepath.Join(gd.unix, "mxc"), id); !ok || rec.Backend != "process_container" {
		t.Errorf("mxc record of %s: %+v (exists %v)", id, rec, ok)
	}
	wxcs := procsWith(wxcWin)
	relays = slices.DeleteFunc(procsWith(relay...), func(pid int) bool { return slices.Contains(wxcs, pid) })
	if len(wxcs) != 1 || len(relays) == 0 {
		t.Fatalf("running: wxc-exec %v (want 1, its copy), relays %v", wxcs, relays)
	}
	t.Logf("before the SIGKILL: wxc-exec %v, relays %v", wxcs, relays)

	g.kill()
	if p := stillRunning(func() []int { return append(procsWith(wxcWin), relays...) }); len(p) > 0 {
		t.Errorf("left running 20 s after the gateway's SIGKILL (wxc-exec %v, relays %v): %v", wxcs, relays, p)
	}

	g = l.startGateway(t, env, gd, "127.0.0.1:0")
	if !strings.Contains(g.log(), "reconciled: 0 adopted, 1 lost") {
		t.Errorf("the gateway after the SIGKILL does not report the sandbox lost:\n%s", g.log())
	}
	if s, r := g.get(t, l, wd, id); s.Sandbox.Phase != "error" || !strings.Contains(s.Sandbox.Reason, "lost") || !strings.Contains(s.Sandbox.Reason, "MXC has no attach") {
		t.Errorf("sandbox get after the restart: %+v, want error, lost (no attach)\n%s", s.Sandbox, r)
	}
	if _, ok := readRecord(t, filepath.Join(gd.unix, "mxc"), id); ok {
		t.Errorf("the mxc record of the lost %s is left", id)
	}
	if r := g.sandbox(t, l, wd, "delete", id); r.code != 0 {
		t.Errorf("sandbox delete of the lost sandbox:\n%s", r)
	}
	if _, r := g.get(t, l, wd, id); r.code != 118 {
		t.Errorf("sandbox get after the delete: want 118 (not found)\n%s", r)
	}
}

// A TCP gateway refuses a client with a wrong token or none (121: the
// gateway refused, docs/exit-codes.md and `corral sandbox --help`), and a
// second gateway on the same --db is refused while the first runs (the
// database lock; exit 2), leaving the first serving.
func TestGatewayTokenAndLock(t *testing.T) {
	l := need(t)
	gd := gatewayDir(t)
	env, _, _ := l.mxcEnv(t, gd, "isolation_session", "")
	g := l.startGateway(t, env, gd, "127.0.0.1:0")
	wd := t.TempDir()
	if r := g.sandbox(t, l, wd, "list"); r.code != 0 || !strings.HasPrefix(r.stdout, "ID ") {
		t.Fatalf("sandbox list with the token:\n%s", r)
	}
	// Owner-only (0600): the client refuses a token file others can read.
	if err := os.WriteFile(filepath.Join(gd.unix, "bad-token"), []byte("not-the-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := g.flags[1]
	for name, flags := range map[string][]string{
		"a wrong token": {"--gateway", addr, "--token-file", gd.win + `\bad-token`},
		"no token":      {"--gateway", addr},
	} {
		r := l.corral(t, wd, nil, append([]string{"sandbox", "list"}, flags...)...)
		if r.code != 121 || !strings.Contains(r.stderr, "missing or wrong bearer token") {
			t.Errorf("sandbox list with %s: want 121, the token refused\n%s", name, r)
		}
	}

	r := l.corral(t, wd, env, "gateway", "serve", "--provider", "mxc", "--listen", "127.0.0.1:0", "--db", gd.db, "--token-file", gd.token)
	if r.code != 2 || !strings.Contains(r.stderr, gd.db+": another gateway uses this database") {
		t.Errorf("a second gateway on the database: want exit 2, refused by the lock\n%s", r)
	}
	if r := g.sandbox(t, l, wd, "list"); r.code != 0 {
		t.Errorf("the first gateway after the second was refused:\n%s\ngateway:\n%s", r, g.log())
	}
}

// corralFor is lane.corral bounded by d: the process is killed then, and
// timedOut says so.
func (l *lane) corralFor(d time.Duration, dir string, args ...string) (r result, timedOut bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(l.root, "scripts", "wine", "exec"), append([]string{l.corralExe}, args...)...)
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if ctx.Err() != nil {
		return result{-1, o.String(), e.String()}, true, nil
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return result{}, false, err
	}
	return result{cmd.ProcessState.ExitCode(), o.String(), e.String()}, false, nil
}

// The named-pipe listener: `--listen pipe:NAME` serves `sandbox list
// --gateway pipe:NAME` (and a not-found get, 118), with no token.
func TestGatewayNamedPipe(t *testing.T) {
	l := need(t)
	gd := gatewayDir(t)
	env, _, _ := l.mxcEnv(t, gd, "isolation_session", "")
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	pipe := "pipe:corral-e2e-" + hex.EncodeToString(b)
	g := l.startGateway(t, env, gd, pipe)
	if g.flags[1] != pipe {
		t.Fatalf("gateway serve --listen %s says it listens on %s:\n%s", pipe, g.flags[1], g.log())
	}
	wd := t.TempDir()
	// Wine artifact (internal/peerhttp/serve.go): Wine 8 lets go-winio's
	// first pipe instance, which Windows keeps disconnected, take the
	// first client, which is never answered. A throwaway first client,
	// killed after 5 s, takes it; on Windows (or a Wine that does not do
	// this) it is answered like any other.
	r, hung, err := l.corralFor(5*time.Second, wd, "sandbox", "list", "--gateway", pipe)
	if err != nil {
		t.Fatal(err)
	}
	if !hung && r.code != 0 {
		t.Fatalf("the first sandbox list over %s:\n%s", pipe, r)
	}
	t.Logf("the first client over the pipe: hung %v (Wine 8's first instance)", hung)
	if r := g.sandbox(t, l, wd, "list"); r.code != 0 || !strings.HasPrefix(r.stdout, "ID ") {
		t.Errorf("sandbox list --gateway %s:\n%s\ngateway:\n%s", pipe, r, g.log())
	}
	if r := g.sandbox(t, l, wd, "get", "corral-000000000000"); r.code != 118 {
		t.Errorf("sandbox get of no sandbox over the pipe: want 118\n%s", r)
	}
}

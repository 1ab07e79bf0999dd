//go:build linux

package windows

// corral service on MXC isolation sessions (service/isolation), through
// the wxc-exec stand-in (mock — never evidence of isolation), run twice:
// by the Linux build with CORRAL_SERVICE_PROVIDER=mxc (every go test run)
// and by corral.exe under Wine (the Windows lane). The gateway is
// testdata/svcgateway, staged as the payload: it counts its starts in its
// home, the state a session keeps.

import (
	"archive/tar"
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// svcLane runs corral service one way: the binaries, how a host path is
// named to them, and how corral is run.
type svcLane struct {
	corral        func(t *testing.T, env []string, args ...string) result
	path          func(string) string
	exe           string // the executable suffix of the lane's programs
	wxc, gateway  string // the stand-in and the svcgateway binary
	schemas, base string // the MXC schemas; where the test's files go
}

var (
	nativeOnce sync.Once
	nativeBins struct {
		dir string
		err error
	}
)

// buildFor builds pkg (relative to the module root) for goos into dir.
func buildFor(root, goos, pkg, out string) error {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH=amd64", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s for %s: %v\n%s", pkg, goos, err, b)
	}
	return nil
}

func moduleRootDir(t *testing.T) string {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// nativeLane is the Linux build with the stand-in.
func nativeLane(t *testing.T) *svcLane {
	root := moduleRootDir(t)
	nativeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "corral-e2e-svc-")
		if err != nil {
			nativeBins.err = err
			return
		}
		nativeBins.dir = dir
		for _, b := range [][2]string{{"./cmd/corral", "corral"}, {"./provider/mxc/testdata/wxcexec", "wxc-exec"}, {"./e2e/windows/testdata/svcgateway", "svcgateway"}} {
			if err := buildFor(root, "linux", b[0], filepath.Join(dir, b[1])); err != nil {
				nativeBins.err = err
				return
			}
		}
	})
	if nativeBins.err != nil {
		t.Fatal(nativeBins.err)
	}
	bin := nativeBins.dir
	return &svcLane{
		corral: func(t *testing.T, env []string, args ...string) result {
			t.Helper()
			cmd := exec.Command(filepath.Join(bin, "corral"), args...)
			cmd.Env = append(os.Environ(), append(env, "CORRAL_SERVICE_PROVIDER=mxc")...)
			var o, e strings.Builder
			cmd.Stdout, cmd.Stderr = &o, &e
			cmd.WaitDelay = 10 * time.Second
			if err := cmd.Run(); err != nil {
				if _, ok := err.(*exec.ExitError); !ok {
					t.Fatalf("corral %s: %v", strings.Join(args, " "), err)
				}
			}
			return result{cmd.ProcessState.ExitCode(), o.String(), e.String()}
		},
		path: func(p string) string { return p },
		wxc:  filepath.Join(bin, "wxc-exec"), gateway: filepath.Join(bin, "svcgateway"),
		schemas: filepath.Join(filepath.Dir(root), "shared", "reference", "mxc"), base: t.TempDir(),
	}
}

// wineLane is corral.exe under Wine with the stand-in built for Windows.
// Its files are on the prefix's C: drive (gatewayDir says why).
func wineLane(t *testing.T) *svcLane {
	l := need(t)
	gw := filepath.Join(t.TempDir(), "svcgateway.exe")
	if err := buildFor(l.root, "windows", "./e2e/windows/testdata/svcgateway", gw); err != nil {
		t.Fatal(err)
	}
	return &svcLane{
		// Output to files, not pipes: the in-session supervisor outlives
		// corral.exe, and under Wine a process it starts keeps the unix
		// ends of corral.exe's stdio open (a Wine artifact; Windows gives
		// a child only the handles it is handed, here its log).
		corral: func(t *testing.T, env []string, args ...string) result {
			t.Helper()
			dir := t.TempDir()
			o, err := os.Create(filepath.Join(dir, "stdout"))
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			e, err := os.Create(filepath.Join(dir, "stderr"))
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(l.root, "scripts", "wine", "exec"), append([]string{l.corralExe}, args...)...)
			cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, append(os.Environ(), env...), o, e
			if err := cmd.Run(); err != nil {
				if _, ok := err.(*exec.ExitError); !ok {
					t.Fatalf("wine corral.exe %s: %v", strings.Join(args, " "), err)
				}
			}
			ob, _ := os.ReadFile(o.Name())
			eb, _ := os.ReadFile(e.Name())
			return result{cmd.ProcessState.ExitCode(), string(ob), string(eb)}
		},
		path: winPath, exe: ".exe", wxc: l.wxc, gateway: gw,
		schemas: filepath.Join(filepath.Dir(l.root), "shared", "reference", "mxc"), base: gatewayDir(t).unix,
	}
}

// svcEnv is one test's environment: the service directory, the stand-in
// and its state, in dir.
type svcEnv struct {
	l         *svcLane
	dir, wxcd string
	env       []string
}

func (sl *svcLane) newEnv(t *testing.T, name string) *svcEnv {
	dir := filepath.Join(sl.base, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	e := &svcEnv{l: sl, dir: dir, wxcd: filepath.Join(dir, "wxc")}
	e.env = []string{"CORRAL_SERVICE_DIR=" + sl.path(filepath.Join(dir, "svc")), "CORRAL_MXC_WXC_EXEC=" + sl.path(sl.wxc),
		"WXC_SCHEMA_DIR=" + sl.path(sl.schemas), "WXC_STATE_DIR=" + sl.path(e.wxcd)}
	// Whatever a failed test left: each session removed (its gateway
	// stopped first), so no supervisor outlives the test.
	t.Cleanup(func() {
		ents, _ := os.ReadDir(filepath.Join(dir, "svc"))
		for _, x := range ents {
			if x.IsDir() {
				e.run(t, nil, "deprovision", "--force", x.Name())
			}
		}
	})
	return e
}

func (e *svcEnv) run(t *testing.T, extra []string, args ...string) result {
	t.Helper()
	return e.l.corral(t, append(append([]string{}, e.env...), extra...), append([]string{"service"}, args...)...)
}

// policy writes a policy file and returns its path as corral names it.
func (e *svcEnv) policy(t *testing.T, name, yaml string) string {
	p := filepath.Join(e.dir, name)
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return e.l.path(p)
}

// gatewayCmd is svcgateway in the staged payload, as the start command
// names it.
func (sl *svcLane) gatewayCmd() string {
	if sl.exe != "" {
		return `{payload}\svcgateway.exe`
	}
	return "{payload}/svcgateway"
}

// payload is a directory holding svcgateway, as the payload to stage.
func (e *svcEnv) payload(t *testing.T) string {
	d := filepath.Join(e.dir, "payload")
	if err := os.MkdirAll(d, 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(e.l.gateway)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "svcgateway"+e.l.exe), b, 0o700); err != nil {
		t.Fatal(err)
	}
	return e.l.path(d)
}

// leftovers is what is left of the stand-in's sessions, workspaces
// (staging directories) and profiles, and of the service's directory.
func (e *svcEnv) leftovers(names ...string) []string {
	var out []string
	for _, sub := range []string{"sessions", "workspaces", "profiles"} {
		ents, _ := os.ReadDir(filepath.Join(e.wxcd, sub))
		for _, x := range ents {
			if !strings.HasSuffix(x.Name(), ".lock") {
				out = append(out, sub+"/"+x.Name())
			}
		}
	}
	for _, n := range names {
		if _, err := os.Lstat(filepath.Join(e.dir, "svc", n)); err == nil {
			out = append(out, "svc/"+n)
		}
	}
	return out
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// ask connects to the gateway, reads its line and sends msg.
func ask(port int, msg string) (string, error) {
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if msg != "" {
		fmt.Fprint(c, msg)
	}
	return strings.TrimSpace(line), err
}

// fields splits the gateway's answer into its KEY=VALUE fields.
func fields(line string) map[string]string {
	m := map[string]string{}
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		m[k] = v
	}
	return m
}

// awaitStarts waits until the gateway answers with starts=n.
func awaitStarts(t *testing.T, port, n int) string {
	t.Helper()
	want := "starts=" + strconv.Itoa(n) + " "
	var last string
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		line, err := ask(port, "")
		if err == nil && strings.HasPrefix(line, want) {
			return line
		}
		last = fmt.Sprint(line, err)
	}
	t.Fatalf("the gateway never answered %q: last %s", want, last)
	return ""
}

func lanes(t *testing.T, f func(t *testing.T, sl *svcLane)) {
	t.Run("linux", func(t *testing.T) { f(t, nativeLane(t)) })
	t.Run("wine", func(t *testing.T) { f(t, wineLane(t)) })
}

const proxyPolicy = "version: 1\nfilesystem: {read_only: [], deny: [], include_workdir: false, protected: []}\nnetwork: {mode: proxy}\n" +
	"layers: {landlock: optional, seccomp: optional, cgroups: optional, namespaces: optional, mounts: optional}\n" +
	"process: {limits: {memory: 0, pids: 0, cpu: 0, nofile: 0}}\n"

// The lifecycle: a policy asking for filtered egress is refused (the
// boundary cannot filter) with nothing made; provision, start with a
// staged payload that runs from the agent's profile, status (mock, the
// identity boundary said), a crashed gateway restarted by the in-session
// supervisor with its state, stop and restart, deprovision refused until
// an export, export, deprovision leaving nothing, import into a new
// session that starts with the recorded command and the exported state.
func TestServiceMXCLifecycle(t *testing.T) {
	lanes(t, func(t *testing.T, sl *svcLane) {
		e := sl.newEnv(t, "life")
		if r := e.run(t, nil, "provision", "claw", "--policy", e.policy(t, "proxy.yaml", proxyPolicy)); r.code != 122 || !strings.Contains(r.stderr, "isolation_session cannot filter the network") {
			t.Errorf("provision with network: proxy:\n%s", r)
		}
		if left := e.leftovers("claw"); len(left) > 0 {
			t.Errorf("a refused provision left %v", left)
		}
		pol := e.policy(t, "iso.yaml", isoPolicy)
		if r := e.run(t, nil, "provision", "claw", "--policy", pol); r.code != 0 || !strings.Contains(r.stdout, "agent user") || !strings.Contains(r.stdout, mock) {
			t.Fatalf("provision:\n%s", r)
		}
		if r := e.run(t, nil, "provision", "claw", "--policy", pol); r.code != 117 {
			t.Errorf("a second provision of the name:\n%s, want 117", r)
		}
		if r := e.run(t, nil, "status", "claw"); r.code != 3 {
			t.Errorf("status before a start:\n%s, want 3", r)
		}
		port := freePort(t)
		gw := sl.gatewayCmd()
		r := e.run(t, nil, "start", "claw", "--payload", e.payload(t), "--ready-port", strconv.Itoa(port), "--ready-timeout", "60s", "--settle", "300ms", "--restart", "always", "--", gw, strconv.Itoa(port))
		if r.code != 0 {
			t.Fatalf("start:\n%s", r)
		}
		line := awaitStarts(t, port, 1)
		// The gateway runs from the copy in the agent's profile, with the
		// profile's home, not from the staging directory.
		profiles := sl.path(filepath.Join(e.wxcd, "profiles"))
		if !strings.Contains(line, "home="+profiles) || !strings.Contains(line, "payload="+profiles) || strings.Contains(line, "workspaces") {
			t.Errorf("the gateway's answer %q: want its home and payload under %s", line, profiles)
		}
		if f := fields(line); sl.exe != "" && f["appdata"] != f["home"]+`\AppData\Roaming` {
			t.Errorf("the gateway's answer %q: want APPDATA in its home, where export takes it", line)
		}
		r = e.run(t, nil, "status", "claw")
		if r.code != 0 || !strings.Contains(r.stdout, mock) || !strings.Contains(r.stdout, "identity boundary") || !strings.Contains(r.stdout, "check:      mock") || !strings.Contains(r.stdout, "unverified:") {
			t.Errorf("status:\n%s", r)
		}
		// Autostart: a logon task on Windows (schtasks; Wine's registers
		// it), whose trusted base status checks: the corral it runs was
		// built in a directory anyone may delete in, which it says.
		if sl.exe == "" {
			if r := e.run(t, nil, "autostart", "enable", "claw"); r.code != 121 {
				t.Errorf("autostart off Windows:\n%s, want 121", r)
			}
		} else {
			if r := e.run(t, nil, "autostart", "enable", "claw"); r.code != 0 {
				t.Errorf("autostart enable:\n%s", r)
			}
			if r := e.run(t, nil, "status", "claw"); !strings.Contains(r.stdout, "autostart:  ") || !strings.Contains(r.stdout, "could change what runs at your logon") {
				t.Errorf("status with autostart:\n%s, want the task and the warning for its corral's directory", r)
			}
			if r := e.run(t, nil, "autostart", "disable", "claw"); r.code != 0 {
				t.Errorf("autostart disable:\n%s", r)
			}
		}
		// A crash: the supervisor starts it again, over the same home.
		if _, err := ask(port, "crash\n"); err != nil {
			t.Fatal(err)
		}
		awaitStarts(t, port, 2)
		if r := e.run(t, nil, "start", "claw"); r.code != 117 {
			t.Errorf("start while running:\n%s, want 117", r)
		}
		if r := e.run(t, nil, "restart", "claw"); r.code != 0 {
			t.Fatalf("restart:\n%s", r)
		}
		awaitStarts(t, port, 3)
		if r := e.run(t, nil, "logs", "claw"); r.code != 0 || !strings.Contains(r.stdout, "svcgateway: start 3 listening") || !strings.Contains(r.stdout, "crashing as asked") {
			t.Errorf("logs:\n%s", r)
		}
		if r := e.run(t, nil, "stop", "claw"); r.code != 0 {
			t.Fatalf("stop:\n%s", r)
		}
		if _, err := ask(port, ""); err == nil {
			t.Errorf("the gateway still answers after stop")
		}
		if r := e.run(t, nil, "status", "claw"); r.code != 3 {
			t.Errorf("status after stop:\n%s, want 3", r)
		}
		if r := e.run(t, nil, "deprovision", "claw"); r.code != 117 || !strings.Contains(r.stderr, "never exported") {
			t.Errorf("deprovision before an export:\n%s, want 117", r)
		}
		export := filepath.Join(e.dir, "claw.tar.zst")
		if r := e.run(t, nil, "export", "claw", "--out", sl.path(export)); r.code != 0 {
			t.Fatalf("export:\n%s", r)
		}
		if r := e.run(t, nil, "deprovision", "claw"); r.code != 0 {
			t.Fatalf("deprovision:\n%s", r)
		}
		if left := e.leftovers("claw"); len(left) > 0 {
			t.Errorf("deprovision left %v", left)
		}
		if r := e.run(t, nil, "import", "claw2", "-i", sl.path(export)); r.code != 0 {
			t.Fatalf("import:\n%s", r)
		}
		if r := e.run(t, nil, "start", "claw2"); r.code != 0 {
			t.Fatalf("start of the import with its recorded command:\n%s", r)
		}
		awaitStarts(t, port, 4) // the exported state came along
		if r := e.run(t, nil, "list", "-o", "json"); r.code != 0 || !strings.Contains(r.stdout, `"claw2"`) || strings.Contains(r.stdout, `"claw"`) {
			t.Errorf("list:\n%s", r)
		}
		if r := e.run(t, nil, "deprovision", "--force", "claw2"); r.code != 0 {
			t.Fatalf("deprovision --force:\n%s", r)
		}
		if left := e.leftovers("claw2"); len(left) > 0 {
			t.Errorf("deprovision left %v", left)
		}
		if _, err := ask(port, ""); err == nil {
			t.Errorf("the gateway still answers after deprovision")
		}
	})
}

// A launcher killed at each step leaves what the next one (or
// reconcile) finishes or undoes, and an executor that died before naming
// the session leaves an orphan that is listed with its remedy and never
// provisioned over.
func TestServiceMXCCrashes(t *testing.T) {
	lanes(t, func(t *testing.T, sl *svcLane) {
		for _, point := range []string{"provision-after-intent", "provision-after-session"} {
			e := sl.newEnv(t, point)
			pol := e.policy(t, "iso.yaml", isoPolicy)
			if r := e.run(t, []string{"CORRAL_SERVICE_FAULT=" + point}, "provision", "a", "--policy", pol); r.code == 0 {
				t.Fatalf("%s: the launcher was not killed:\n%s", point, r)
			}
			if r := e.run(t, nil, "list"); !strings.Contains(r.stdout, "provisioning") {
				t.Errorf("%s: list:\n%s, want a provisioning record", point, r)
			}
			if r := e.run(t, nil, "reconcile"); r.code != 0 || !strings.Contains(r.stdout, "a: undone") {
				t.Errorf("%s: reconcile:\n%s", point, r)
			}
			if left := e.leftovers("a"); len(left) > 0 {
				t.Errorf("%s: reconcile left %v", point, left)
			}
			if r := e.run(t, nil, "provision", "a", "--policy", pol); r.code != 0 {
				t.Errorf("%s: provision after reconcile:\n%s", point, r)
			}
			e.run(t, nil, "deprovision", "--force", "a")
		}

		e := sl.newEnv(t, "start-deprovision")
		pol := e.policy(t, "iso.yaml", isoPolicy)
		if r := e.run(t, nil, "provision", "b", "--policy", pol); r.code != 0 {
			t.Fatalf("provision:\n%s", r)
		}
		port := freePort(t)
		gw := sl.gatewayCmd()
		start := []string{"start", "b", "--payload", e.payload(t), "--ready-port", strconv.Itoa(port), "--ready-timeout", "60s", "--settle", "0s", "--", gw, strconv.Itoa(port)}
		if r := e.run(t, []string{"CORRAL_SERVICE_FAULT=start-after-stage"}, start...); r.code == 0 {
			t.Fatalf("start-after-stage: the launcher was not killed:\n%s", r)
		}
		if r := e.run(t, nil, "status", "b"); r.code != 3 {
			t.Errorf("status after a start killed before the in-session start:\n%s, want 3", r)
		}
		if r := e.run(t, nil, "start", "b"); r.code != 0 {
			t.Fatalf("start again (the recorded spec):\n%s", r)
		}
		awaitStarts(t, port, 1)
		if r := e.run(t, []string{"CORRAL_SERVICE_FAULT=deprovision-after-intent"}, "deprovision", "--force", "b"); r.code == 0 {
			t.Fatalf("deprovision-after-intent: the launcher was not killed:\n%s", r)
		}
		if r := e.run(t, nil, "reconcile"); r.code != 0 || !strings.Contains(r.stdout, "b: finished") {
			t.Errorf("reconcile after a killed deprovision:\n%s", r)
		}
		if left := e.leftovers("b"); len(left) > 0 {
			t.Errorf("reconcile left %v", left)
		}
		if _, err := ask(port, ""); err == nil {
			t.Errorf("the gateway still answers after the deprovision was finished")
		}

		e = sl.newEnv(t, "orphan")
		pol = e.policy(t, "iso.yaml", isoPolicy)
		if r := e.run(t, []string{"WXC_CRASH_AFTER=provision"}, "provision", "c", "--policy", pol); r.code == 0 || !strings.Contains(r.stderr, "reconcile --forget c") {
			t.Fatalf("provision with the executor dying before it answered:\n%s", r)
		}
		if r := e.run(t, nil, "provision", "c", "--policy", pol); r.code != 117 {
			t.Errorf("provision over an orphan:\n%s, want 117", r)
		}
		if r := e.run(t, nil, "reconcile"); r.code != 1 || !strings.Contains(r.stdout, "c: orphan") || !strings.Contains(r.stdout, "remedy:") {
			t.Errorf("reconcile with an orphan:\n%s, want 1 and the remedy", r)
		}
		if r := e.run(t, nil, "reconcile", "--forget", "c"); r.code != 0 {
			t.Errorf("reconcile --forget:\n%s", r)
		}
		if r := e.run(t, nil, "list", "-o", "json"); strings.Contains(r.stdout, `"c"`) {
			t.Errorf("list after --forget:\n%s", r)
		}
	})
}

// What the session hands back is the agent's to write: a link the
// workload left in its home is left out of an export (and said), and an
// archive the in-session corral wrote with a link in it (here the
// profile's corral replaced, as the agent user can) is refused: no
// export is written and none is recorded. Linux lane only (the
// replacement is a shell script).
func TestServiceMXCReadBack(t *testing.T) {
	sl := nativeLane(t)
	e := sl.newEnv(t, "readback")
	if r := e.run(t, nil, "provision", "r", "--policy", e.policy(t, "iso.yaml", isoPolicy)); r.code != 0 {
		t.Fatalf("provision:\n%s", r)
	}
	port := freePort(t)
	if r := e.run(t, nil, "start", "r", "--payload", e.payload(t), "--ready-port", strconv.Itoa(port), "--settle", "0s", "--", sl.gatewayCmd(), strconv.Itoa(port)); r.code != 0 {
		t.Fatalf("start:\n%s", r)
	}
	if r := e.run(t, nil, "stop", "r"); r.code != 0 {
		t.Fatalf("stop:\n%s", r)
	}
	profiles, _ := filepath.Glob(filepath.Join(e.wxcd, "profiles", "*", ".corral-service"))
	if len(profiles) != 1 {
		t.Fatalf("profiles: %v", profiles)
	}
	svc := profiles[0]
	if err := os.Symlink("/etc/passwd", filepath.Join(svc, "home", "passwd")); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(e.dir, "good.tar.zst")
	if r := e.run(t, nil, "export", "r", "--out", good); r.code != 0 || !strings.Contains(r.stderr, "left out") || !strings.Contains(r.stderr, "passwd") {
		t.Errorf("export of a home with a link:\n%s", r)
	}
	// The agent replaces its corral: its export writes an archive with a
	// link to the host's files.
	hostile := filepath.Join(e.dir, "hostile.tar")
	var buf strings.Builder
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "x", Typeflag: tar.TypeSymlink, Linkname: "/etc/shadow"})
	tw.Close()
	if err := os.WriteFile(hostile, []byte(buf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	real := filepath.Join(svc, "bin", "corral.real")
	if err := os.Rename(filepath.Join(svc, "bin", "corral"), real); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\nif [ \"$2\" = export ]; then cp " + hostile + " \"$4\"; exit 0; fi\nexec " + real + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(svc, "bin", "corral"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(e.dir, "bad.tar.zst")
	if r := e.run(t, nil, "export", "r", "--out", bad); r.code == 0 || !strings.Contains(r.stderr, "archive was refused") || !strings.Contains(r.stderr, "symlink") {
		t.Errorf("export of a hostile archive:\n%s", r)
	}
	if _, err := os.Lstat(bad); err == nil {
		t.Errorf("a refused export left %s", bad)
	}
	// The agent replaces the staging directory with a link to another
	// directory: the launcher writes nothing there.
	if err := os.Rename(filepath.Join(svc, "bin", "corral.real"), filepath.Join(svc, "bin", "corral")); err != nil {
		t.Fatal(err)
	}
	works, _ := filepath.Glob(filepath.Join(e.wxcd, "workspaces", "*"))
	if len(works) != 1 {
		t.Fatalf("workspaces: %v", works)
	}
	victim := filepath.Join(e.dir, "victim")
	if err := os.Mkdir(victim, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(works[0], works[0]+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, works[0]); err != nil {
		t.Fatal(err)
	}
	if r := e.run(t, nil, "start", "r"); r.code != 125 || !strings.Contains(r.stderr, "not a plain directory") {
		t.Errorf("start with the staging directory a link:\n%s", r)
	}
	if ents, _ := os.ReadDir(victim); len(ents) != 0 {
		t.Errorf("the launcher wrote through the link: %v", ents)
	}
	os.Remove(works[0])
	if err := os.Rename(works[0]+".moved", works[0]); err != nil {
		t.Fatal(err)
	}
	// The good export is the last one: deprovision takes it.
	if r := e.run(t, nil, "deprovision", "r"); r.code != 0 {
		t.Errorf("deprovision after the good export:\n%s", r)
	}
}

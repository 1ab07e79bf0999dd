//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/execfile"
	"github.com/corral-sandbox/corral/internal/procstat"
)

// svc is one identity's service state directory (CORRAL_SERVICE_DIR) and
// the corral binary its commands run.
type svc struct {
	id  *ident
	dir string
	bin string
	env []string
}

func newSvc(t *testing.T, id *ident) *svc {
	t.Helper()
	s := &svc{id: id, dir: mkdir(t, id, "svc"), bin: corralBin}
	t.Cleanup(func() { s.cleanup(t) })
	return s
}

// cleanup stops and removes every session the test left, and checks that
// reconcile finds nothing more.
func (s *svc) cleanup(t *testing.T) {
	ents, _ := os.ReadDir(s.dir)
	for _, e := range ents {
		s.run(t, "service", "stop", e.Name())
		s.run(t, "service", "deprovision", "--force", e.Name())
	}
	s.run(t, "service", "reconcile")
}

// run runs corral as s.id with CORRAL_SERVICE_DIR set.
func (s *svc) run(t *testing.T, args ...string) result {
	t.Helper()
	return corralAs(t, s.bin, s.id, append([]string{"CORRAL_SERVICE_DIR=" + s.dir}, s.env...), args...)
}

// must runs corral and fails the test unless it exits 0.
func (s *svc) must(t *testing.T, args ...string) result {
	t.Helper()
	r := s.run(t, args...)
	if r.code != 0 {
		t.Fatalf("corral %s: %s", strings.Join(args, " "), r)
	}
	return r
}

type svcRecord struct {
	UID, GID int
	User     string
	Home     string
}

func (s *svc) record(t *testing.T, name string) svcRecord {
	t.Helper()
	var r svcRecord
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(s.dir, name, "service.json"))), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

type svcStatus struct {
	State    string `json:"state"`
	Restarts int    `json:"restarts"`
	Workload struct {
		PID int `json:"pid"`
	} `json:"workload"`
	Supervisor struct {
		PID int `json:"pid"`
	} `json:"supervisor"`
	Ready   *struct{ OK bool } `json:"ready"`
	Posture []struct {
		Check, Verdict, Detail string
	} `json:"posture"`
	PostureOK bool `json:"posture_ok"`
}

func (s *svc) status(t *testing.T, name string) (svcStatus, result) {
	t.Helper()
	r := s.run(t, "service", "status", name, "-o", "json")
	var st svcStatus
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status %s: %v\n%s", name, err, r)
	}
	return st, r
}

// provisionWithServer provisions name and puts the stand-in gateway in
// its home, owned by its agent.
func (s *svc) provisionWithServer(t *testing.T, name string, p policy) svcRecord {
	t.Helper()
	s.must(t, "service", "provision", name, "--policy", writePolicy(t, s.id, p))
	rec := s.record(t, name)
	src, err := os.ReadFile(filepath.Join("testdata", "service", "srv.py"))
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(rec.Home, "srv.py")
	if err := os.WriteFile(f, src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(f, rec.UID, rec.GID); err != nil {
		t.Fatal(err)
	}
	return rec
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// ask asks the stand-in gateway through the published port.
func ask(t *testing.T, port int, path string) string {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func startArgs(name string, port int) []string {
	return []string{"service", "start", name, "--publish", fmt.Sprintf("127.0.0.1:%d:8080", port),
		"--ready-http", fmt.Sprintf("http://127.0.0.1:%d/whoami", port), "--stop-grace", "5s", "--ready-timeout", "60s",
		"--", "python3", "srv.py", "8080"}
}

// The whole life of a service session, as root (a dedicated agent user)
// and unprivileged (the caller's uid): provision, start behind a
// published port, contained (no operator home, no network), posture
// checked from outside, restarted after a crash and by hand with its
// state kept, stopped with nothing left running, export required before
// deprovision, import elsewhere, and nothing left at the end.
func TestServiceLifecycle(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		s := newSvc(t, id)
		name := "life" + id.name
		rec := s.provisionWithServer(t, name, policy{Limits: "memory: 512M, pids: 256, nofile: 1024"})
		if id.isRoot() {
			if rec.UID == 0 || rec.User != "corral-"+name {
				t.Fatalf("agent user: %+v", rec)
			}
			if u, err := user.Lookup(rec.User); err != nil || u.Uid != strconv.Itoa(rec.UID) {
				t.Fatalf("agent user %s: %v", rec.User, err)
			}
		} else if rec.UID != id.uid {
			t.Fatalf("unprivileged session uid %d, want the caller's %d", rec.UID, id.uid)
		}
		// A canary in the operator's home, and a listener on the host.
		canary := filepath.Join(mkdir(t, id, "operator-home"), "secret")
		writeFile(t, id, canary, token(), 0o600)
		hostL, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer hostL.Close()

		port := freePort(t)
		r := s.must(t, startArgs(name, port)...)
		if !strings.Contains(r.stdout, "running") {
			t.Fatalf("start: %s", r)
		}
		if got, want := ask(t, port, "/whoami"), fmt.Sprintf("ok:%d %s", rec.UID, rec.Home); got != want {
			t.Fatalf("whoami %q, want %q", got, want)
		}
		if got := ask(t, port, "/read?"+canary); !strings.HasPrefix(got, "err:") {
			t.Errorf("the gateway read the operator's file: %q", got)
		}
		if got := ask(t, port, "/connect?"+hostL.Addr().String()); !strings.HasPrefix(got, "err:") {
			t.Errorf("the gateway reached a host listener with network none: %q", got)
		}
		st, sr := s.status(t, name)
		if sr.code != 0 || !st.PostureOK || st.State != "running" {
			t.Fatalf("status: %s", sr)
		}
		verdicts := map[string]string{}
		for _, c := range st.Posture {
			verdicts[c.Check] = c.Verdict
		}
		for _, c := range []string{"identity", "namespaces", "seccomp", "mounts"} {
			if verdicts[c] != "ok" {
				t.Errorf("posture %s: %q\n%s", c, verdicts[c], sr)
			}
		}
		if id.isRoot() && verdicts["cgroups"] != "ok" {
			t.Errorf("posture cgroups: %q", verdicts["cgroups"])
		}

		// Crash: the supervisor restarts it in a fresh sandbox; the home
		// (state) is kept.
		if got := ask(t, port, "/write?kept-"+name); got != "ok:" {
			t.Fatalf("write: %q", got)
		}
		if err := syscall.Kill(st.Workload.PID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, s, name, func(st svcStatus) bool {
			return st.Restarts == 1 && st.State == "running" && st.Ready != nil && st.Ready.OK
		})
		if got := ask(t, port, "/state"); got != "ok:kept-"+name {
			t.Errorf("state after the crash: %q", got)
		}
		s.must(t, "service", "restart", name)
		if got := ask(t, port, "/state"); got != "ok:kept-"+name {
			t.Errorf("state after restart: %q", got)
		}
		st, _ = s.status(t, name)
		s.must(t, "service", "stop", name)
		// Its audit log: a Launch and a Terminate per start (three: the
		// first, after the crash, after the restart), all valid OCSF.
		if n := checkAudit(t, "the session's audit.jsonl", []byte(readFile(t, filepath.Join(s.dir, name, "log", "audit.jsonl")))); n < 6 {
			t.Errorf("the session's audit log has %d events, want a Launch and a Terminate for each of 3 starts", n)
		}
		if _, r := s.status(t, name); r.code != 3 {
			t.Errorf("status of a stopped service: exit %d, want 3\n%s", r.code, r)
		}
		for _, pid := range []int{st.Supervisor.PID, st.Workload.PID} {
			if running(pid) {
				t.Errorf("pid %d still runs after stop", pid)
			}
		}
		if logs := s.must(t, "service", "logs", name).stdout; !strings.Contains(logs, "listening") {
			t.Errorf("workload log: %q", logs)
		}

		// Deprovision wants an export first; the export names secrets.
		writeFile(t, id, filepath.Join(rec.Home, ".config", "gw", "auth-token.json"), `{"token": "x"}`, 0o600)
		if err := os.Lchown(filepath.Join(rec.Home, ".config"), rec.UID, rec.GID); err != nil {
			t.Fatal(err)
		}
		if r := s.run(t, "service", "deprovision", name); r.code != 117 {
			t.Fatalf("deprovision before an export: %s", r)
		}
		export := filepath.Join(mkdir(t, id, "export"), name+".tar.zst")
		r = s.must(t, "service", "export", name, "--out", export)
		if !strings.Contains(r.stderr, "home/.config/gw/auth-token.json") {
			t.Errorf("the export did not call out the token file: %s", r)
		}
		s.must(t, "service", "deprovision", name)
		if exists(filepath.Join(s.dir, name)) {
			t.Errorf("%s left behind", filepath.Join(s.dir, name))
		}
		if id.isRoot() {
			if _, err := user.Lookup(rec.User); err == nil {
				t.Errorf("agent user %s left behind", rec.User)
			}
		}

		// Import under another name: a new agent owns the old state.
		name2 := name + "2"
		s.must(t, "service", "import", name2, "-i", export)
		rec2 := s.record(t, name2)
		var fst syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(rec2.Home, "state.txt"), &fst); err != nil || int(fst.Uid) != rec2.UID {
			t.Fatalf("imported state.txt: %v, owner %d, want %d", err, fst.Uid, rec2.UID)
		}
		port2 := freePort(t)
		s.must(t, "service", "start", name2, "--publish", fmt.Sprintf("127.0.0.1:%d:8080", port2), "--ready-port", "8080", "--", "python3", "srv.py", "8080")
		if got := ask(t, port2, "/state"); got != "ok:kept-"+name {
			t.Errorf("state after import: %q", got)
		}
		s.must(t, "service", "stop", name2)
		s.must(t, "service", "deprovision", "--force", name2)
		if r := s.must(t, "service", "reconcile", "-o", "json"); strings.TrimSpace(r.stdout) != "[]" {
			t.Errorf("reconcile found leftovers: %s", r.stdout)
		}
	})
}

// running reports whether pid is a live process: not gone, and not a
// zombie waiting for a parent to reap it (a re-parented process whose
// new parent does not reap, as in some containers).
func running(pid int) bool {
	st, err := procstat.Read(pid)
	return err == nil && st.Running()
}

func waitStatus(t *testing.T, s *svc, name string, ok func(svcStatus) bool) svcStatus {
	t.Helper()
	var st svcStatus
	var r result
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if st, r = s.status(t, name); ok(st) {
			return st
		}
	}
	t.Fatalf("status of %s never reached the expected state:\n%s", name, r)
	return st
}

// A launcher killed (SIGKILL) at each step leaves what reconcile
// repairs: an interrupted provision is undone (no user, no directory),
// an interrupted deprovision finished, a supervisor left by a dead
// launcher keeps the service running, and a killed supervisor takes its
// workload with it and reads as dead.
func TestServiceCrashRecovery(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		s := newSvc(t, id)
		pol := writePolicy(t, id, policy{})
		gone := func(name string) {
			t.Helper()
			if exists(filepath.Join(s.dir, name)) {
				t.Errorf("%s: the session directory is left", name)
			}
			if _, err := user.Lookup("corral-" + name); err == nil {
				t.Errorf("%s: the agent user is left", name)
			}
		}
		for _, point := range []string{"provision-after-record", "provision-after-user", "provision-after-dirs"} {
			name := strings.ReplaceAll(strings.TrimPrefix(point, "provision-"), "-", "") + id.name
			s.env = []string{"CORRAL_SERVICE_FAULT=" + point}
			if r := s.run(t, "service", "provision", name, "--policy", pol); r.code != 137 {
				t.Fatalf("%s: provision was not killed: %s", point, r)
			}
			s.env = nil
			if r := s.run(t, "service", "start", name, "--", "true"); r.code == 0 {
				t.Errorf("%s: a half-provisioned session started", point)
			}
			r := s.must(t, "service", "reconcile")
			if !strings.Contains(r.stdout, "provision was interrupted") {
				t.Errorf("%s: reconcile: %s", point, r)
			}
			gone(name)
			s.must(t, "service", "provision", name, "--policy", pol) // the name is free again
		}

		// The launcher dies after starting the supervisor: the service runs.
		launch := "launch" + id.name
		s.must(t, "service", "provision", launch, "--policy", pol)
		s.env = []string{"CORRAL_SERVICE_FAULT=start-after-supervisor"}
		if r := s.run(t, "service", "start", launch, "--", "sleep", "600"); r.code != 137 {
			t.Fatalf("start was not killed: %s", r)
		}
		s.env = nil
		st := waitStatus(t, s, launch, func(st svcStatus) bool { return st.State == "running" && st.PostureOK })
		s.must(t, "service", "reconcile")
		if again, _ := s.status(t, launch); again.Supervisor.PID != st.Supervisor.PID || again.State != "running" {
			t.Errorf("reconcile disturbed a running service: %+v", again)
		}
		// Its supervisor killed: the workload dies with it (parent-death
		// signal on the sandbox's init), the status reads dead.
		if err := syscall.Kill(st.Supervisor.PID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		for end := time.Now().Add(5 * time.Second); running(st.Workload.PID) && time.Now().Before(end); {
			time.Sleep(50 * time.Millisecond)
		}
		if running(st.Workload.PID) {
			t.Errorf("the workload %d outlived its supervisor", st.Workload.PID)
		}
		if dead, r := s.status(t, launch); r.code != 3 || dead.State != "dead" {
			t.Errorf("status after the supervisor died: %s", r)
		}
		s.must(t, "service", "start", launch) // the recorded command
		s.must(t, "service", "stop", launch)

		// Deprovision killed after marking the record: reconcile finishes it.
		s.env = []string{"CORRAL_SERVICE_FAULT=deprovision-after-record"}
		if r := s.run(t, "service", "deprovision", "--force", launch); r.code != 137 {
			t.Fatalf("deprovision was not killed: %s", r)
		}
		s.env = nil
		if r := s.must(t, "service", "reconcile"); !strings.Contains(r.stdout, "deprovision was interrupted") {
			t.Errorf("reconcile: %s", r)
		}
		gone(launch)
	})
}

// corral service status checks the posture from outside and fails,
// naming the layer, when one is not in force: a binary built with the
// corraltest hooks starts the workload without seccomp while its own
// start-up check passes it, which only the outside check can catch.
func TestServicePostureFailure(t *testing.T) {
	id := rootIdent(t)
	hooked := filepath.Join(filepath.Dir(corralBin), "corral-testhooks")
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-tags", "corraltest", "-o", hooked, "./cmd/corral")
	cmd.Dir, cmd.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags corraltest: %v\n%s", err, out)
	}
	s := newSvc(t, id)
	s.bin = hooked
	pol := writePolicy(t, id, policy{})
	for _, drop := range []bool{false, true} {
		name := "posture" + strconv.FormatBool(drop)
		s.must(t, "service", "provision", name, "--policy", pol)
		if drop {
			s.env = []string{"CORRAL_TEST_DROP_LAYER=seccomp"}
		}
		s.must(t, "service", "start", name, "--", "sleep", "600")
		s.env = nil
		st, r := s.status(t, name)
		verdict := ""
		for _, c := range st.Posture {
			if c.Check == "seccomp" {
				verdict = c.Verdict
			}
		}
		switch {
		case !drop && (r.code != 0 || verdict != "ok"):
			t.Errorf("control, seccomp in force: %s", r)
		case drop && (r.code != 1 || verdict != "fail" || st.PostureOK):
			t.Errorf("seccomp dropped: status exit %d, seccomp %q, want exit 1 and fail\n%s", r.code, verdict, r)
		}
		if drop {
			text := s.run(t, "service", "status", name)
			if text.code != 1 || !strings.Contains(text.stdout, "seccomp") || !strings.Contains(text.stdout, "fail") {
				t.Errorf("text status does not name the layer: %s", text)
			}
		}
		s.must(t, "service", "stop", name)
	}
}

// autostart enable writes a root-owned 0644 unit that re-runs the
// launcher with the recorded command, enables it as systemctl enable
// does, and status warns when the agent could rewrite what runs at boot
// (here: a corral binary the agent owns). disable removes both files.
func TestServiceAutostart(t *testing.T) {
	id := rootIdent(t)
	// A copy of corral in a directory of its own, to hand to the agent
	// (made first: cleanups run last-in first-out, and newSvc's needs it).
	bin := filepath.Join(mkdir(t, id, "autostart-bin"), "corral")
	if err := execfile.Copy(corralBin, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	s := newSvc(t, id)
	s.bin = bin
	name := "autostart"
	s.must(t, "service", "provision", name, "--policy", writePolicy(t, id, policy{}))
	if r := s.run(t, "service", "autostart", "enable", name); r.code == 0 {
		t.Fatalf("enabled before any start (no command to run): %s", r)
	}
	s.must(t, "service", "start", name, "--restart", "always", "--", "sleep", "600")
	s.must(t, "service", "autostart", "enable", name)
	unit := "/etc/systemd/system/corral-service-" + name + ".service"
	link := "/etc/systemd/system/multi-user.target.wants/corral-service-" + name + ".service"
	t.Cleanup(func() { os.Remove(link); os.Remove(unit) })
	var st syscall.Stat_t
	if err := syscall.Stat(unit, &st); err != nil || st.Uid != 0 || st.Mode&0o777 != 0o644 {
		t.Fatalf("unit %s: %v, uid %d, mode %o", unit, err, st.Uid, st.Mode&0o777)
	}
	text := readFile(t, unit)
	for _, want := range []string{"Type=forking", "ExecStart=" + bin + " service start " + name, "ExecStop=" + bin + " service stop " + name,
		"PIDFile=" + filepath.Join(s.dir, name, "supervisor.pid"), "WantedBy=multi-user.target", "Environment=CORRAL_SERVICE_DIR=" + s.dir} {
		if !strings.Contains(text, want) {
			t.Errorf("unit lacks %q:\n%s", want, text)
		}
	}
	if dst, err := os.Readlink(link); err != nil || dst != unit {
		t.Errorf("enable symlink %s -> %q, %v", link, dst, err)
	}
	if r := s.must(t, "service", "status", name); strings.Contains(r.stdout, "writable by the agent") {
		t.Errorf("a warning with a root-owned binary: %s", r)
	}
	rec := s.record(t, name)
	if err := os.Chown(bin, rec.UID, rec.GID); err != nil {
		t.Fatal(err)
	}
	if r := s.run(t, "service", "status", name); !strings.Contains(r.stdout, bin+" is writable by the agent") {
		t.Errorf("no warning with a binary the agent owns: %s", r)
	}
	if err := os.Chown(bin, 0, 0); err != nil {
		t.Fatal(err)
	}
	// The unit's start, as systemd would run it at boot, after a stop.
	s.must(t, "service", "stop", name)
	if exists(filepath.Join(s.dir, name, "supervisor.pid")) {
		t.Error("the PIDFile outlived its supervisor")
	}
	cmd := exec.Command(bin, "service", "start", name)
	cmd.Env = []string{"CORRAL_SERVICE_DIR=" + s.dir, "PATH=/usr/bin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ExecStart: %v\n%s", err, out)
	}
	st2, _ := s.status(t, name)
	if got := strings.TrimSpace(readFile(t, filepath.Join(s.dir, name, "supervisor.pid"))); got != strconv.Itoa(st2.Supervisor.PID) {
		t.Errorf("PIDFile holds %q, the supervisor is %d", got, st2.Supervisor.PID)
	}
	s.must(t, "service", "stop", name)
	s.must(t, "service", "autostart", "disable", name)
	if exists(unit) || exists(link) {
		t.Errorf("disable left %s or %s", unit, link)
	}
}

// A session's policy may not see the sessions' base directory (another
// session's record, policy, logs or home), and a policy changed behind
// corral's back since provision is not run.
func TestServiceGuards(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		s := newSvc(t, id)
		s.must(t, "service", "provision", "g1", "--policy", writePolicy(t, id, policy{}))
		r := s.run(t, "service", "provision", "g2", "--policy", writePolicy(t, id, policy{RO: []string{filepath.Join(s.dir, "g1")}}))
		if r.code != 122 || !strings.Contains(r.stderr, "overlaps") {
			t.Errorf("a policy granting another session's directory: %s", r)
		}
		if exists(filepath.Join(s.dir, "g2")) {
			t.Error("the refused session was left behind")
		}
		pol := filepath.Join(s.dir, "g1", "policy.yaml")
		text := readFile(t, pol)
		if err := os.WriteFile(pol, []byte(strings.Replace(text, "pids: 512", "pids: 100", 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		r = s.run(t, "service", "start", "g1", "--", "sleep", "60")
		if r.code != 122 || !strings.Contains(r.stderr, "changed since the session was provisioned") {
			t.Errorf("start with a policy changed since provision: %s", r)
		}
	})
}

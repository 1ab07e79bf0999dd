package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/wine"
)

func testRun() RunInfo {
	return RunInfo{
		SandboxID:  "sbx-1234",
		PolicyHash: "sha256:abcd",
		Provider:   "linux",
		Version:    "0.1.0",
		Layers: []Layer{
			{Layer: "landlock", Requirement: "required", State: "active", Detail: "ABI v4"},
			{Layer: "seccomp", Requirement: "best-effort", State: "unavailable"},
		},
		Supervisor: Proc{PID: 100, UID: 1000, CmdLine: []string{"/usr/bin/corral", "run", "--audit", "x.jsonl"}, Path: "/usr/bin/corral"},
	}
}

func testWorkload() Proc {
	return Proc{PID: 4242, UID: 1000, CmdLine: []string{"/bin/sh", "-c", "echo hi"}, Path: "/bin/sh"}
}

// readLines parses every line of path as a JSON object.
func readLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Fatalf("file does not end with newline")
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %d is not JSON: %v: %.200q", len(out)+1, err, sc.Text())
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// get walks a dotted path through decoded JSON (a number indexes an array).
func get(t *testing.T, m map[string]any, path string) any {
	t.Helper()
	var cur any = m
	for _, k := range strings.Split(path, ".") {
		if arr, ok := cur.([]any); ok {
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(arr) {
				t.Fatalf("%s: no element %q", path, k)
			}
			cur = arr[i]
			continue
		}
		obj, ok := cur.(map[string]any)
		if !ok {
			t.Fatalf("%s: %q is not inside an object", path, k)
		}
		cur, ok = obj[k]
		if !ok {
			t.Fatalf("%s: missing %q", path, k)
		}
	}
	return cur
}

func wantField(t *testing.T, m map[string]any, path string, want any) {
	t.Helper()
	got := get(t, m, path)
	if w, ok := want.(int); ok {
		want = float64(w)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s = %#v, want %#v", path, got, want)
	}
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestLaunchAndTerminate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now().UnixMilli()
	if err := s.Emit(Launch(testRun(), testWorkload())); err != nil {
		t.Fatal(err)
	}
	if err := s.Emit(Terminate(testRun(), testWorkload(), Exit{Code: 3, Duration: 1500 * time.Millisecond})); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, path)
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2", len(lines))
	}
	// OCSF os.type_id per host.
	wantOS := map[string]struct {
		name   string
		typeID int
	}{"linux": {"Linux", 200}, "windows": {"Windows", 100}, "darwin": {"macOS", 300}}[runtime.GOOS]

	for i, m := range lines {
		activity := []string{"Launch", "Terminate"}[i]
		wantField(t, m, "class_uid", 1007)
		wantField(t, m, "class_name", "Process Activity")
		wantField(t, m, "category_uid", 1)
		wantField(t, m, "category_name", "System Activity")
		wantField(t, m, "activity_id", i+1)
		wantField(t, m, "activity_name", activity)
		wantField(t, m, "type_uid", 100701+i)
		wantField(t, m, "type_name", "Process Activity: "+activity)
		wantField(t, m, "severity_id", 1)
		wantField(t, m, "severity", "Informational")
		wantField(t, m, "metadata.version", SchemaVersion)
		wantField(t, m, "metadata.product.name", "Corral")
		wantField(t, m, "metadata.product.vendor_name", "Corral")
		wantField(t, m, "metadata.product.version", "0.1.0")
		wantField(t, m, "metadata.correlation_uid", "sbx-1234")
		if uid, _ := get(t, m, "metadata.uid").(string); !uuidRE.MatchString(uid) {
			t.Errorf("metadata.uid %q is not a v4 UUID", uid)
		}
		if ts := get(t, m, "time").(float64); int64(ts) < before || int64(ts) > time.Now().UnixMilli() {
			t.Errorf("time %v is not ms since epoch around now", ts)
		}
		wantField(t, m, "actor.process.pid", 100)
		wantField(t, m, "actor.process.name", "corral")
		wantField(t, m, "actor.process.cmd_line", "/usr/bin/corral run --audit x.jsonl")
		wantField(t, m, "process.pid", 4242)
		wantField(t, m, "process.name", "sh")
		wantField(t, m, "process.cmd_line", "/bin/sh -c 'echo hi'")
		wantField(t, m, "process.file.path", "/bin/sh")
		wantField(t, m, "process.user.uid", "1000")
		wantField(t, m, "device.os.name", wantOS.name)
		wantField(t, m, "device.os.type_id", wantOS.typeID)
		if h, _ := os.Hostname(); h != "" {
			wantField(t, m, "device.hostname", h)
		}
		wantField(t, m, "unmapped.policy_hash", "sha256:abcd")
		wantField(t, m, "unmapped.provider", "linux")
		wantField(t, m, "unmapped.sandbox_id", "sbx-1234")
		wantField(t, m, "unmapped.layers", []any{
			map[string]any{"layer": "landlock", "requirement": "required", "state": "active", "detail": "ABI v4"},
			map[string]any{"layer": "seccomp", "requirement": "best-effort", "state": "unavailable"},
		})
	}

	launch, term := lines[0], lines[1]
	wantField(t, launch, "status_id", 1)
	wantField(t, launch, "status", "Success")
	if _, ok := launch["exit_code"]; ok {
		t.Error("launch event has exit_code")
	}
	wantField(t, term, "exit_code", 3)
	wantField(t, term, "status_id", 2)
	wantField(t, term, "status", "Failure")
	wantField(t, term, "unmapped.killed", false)
	wantField(t, term, "unmapped.timed_out", false)
	wantField(t, term, "unmapped.duration_ms", 1500)
	if get(t, launch, "metadata.uid") == get(t, term, "metadata.uid") {
		t.Error("events share metadata.uid")
	}
}

func TestTerminateCleanExit(t *testing.T) {
	e := Terminate(testRun(), testWorkload(), Exit{})
	if e.StatusID != StatusSuccess || e.SeverityID != SeverityInformational || e.ExitCode == nil || *e.ExitCode != 0 {
		t.Fatalf("clean exit: status %d severity %d exit %v", e.StatusID, e.SeverityID, e.ExitCode)
	}
	b, _ := json.Marshal(e)
	if !bytes.Contains(b, []byte(`"exit_code":0`)) {
		t.Errorf("exit_code 0 not serialized: %s", b)
	}
}

func TestTerminateKill(t *testing.T) {
	for _, tc := range []struct {
		name       string
		exit       Exit
		wantReason string
	}{
		{"timeout", Exit{Code: 137, Signal: "SIGKILL", TimedOut: true}, "timeout"},
		{"forwarded", Exit{Code: 143, Signal: "SIGTERM", Killed: true, Reason: "SIGTERM forwarded"}, "SIGTERM forwarded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(Terminate(testRun(), testWorkload(), tc.exit))
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			wantField(t, m, "type_uid", 100702)
			wantField(t, m, "status_id", 2)
			wantField(t, m, "status", "Failure")
			wantField(t, m, "severity_id", 3)
			wantField(t, m, "severity", "Medium")
			if _, ok := m["exit_code"]; ok { // a signal ended it: no exit code of its own
				t.Errorf("exit_code %v for a process %s ended", m["exit_code"], tc.exit.Signal)
			}
			wantField(t, m, "unmapped.killed", true)
			wantField(t, m, "unmapped.timed_out", tc.exit.TimedOut)
			wantField(t, m, "unmapped.signal", tc.exit.Signal)
			wantField(t, m, "unmapped.reason", tc.wantReason)
		})
	}
}

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{[]string{"curl", "--token", "abc", "x"}, []string{"curl", "--token", Redacted, "x"}},
		{[]string{"tool", "--api-key=abc", "--verbose"}, []string{"tool", "--api-key=" + Redacted, "--verbose"}},
		{[]string{"tool", "-password", "abc"}, []string{"tool", "-password", Redacted}},
		{[]string{"tool", "--client_secret=abc"}, []string{"tool", "--client_secret=" + Redacted}},
		{[]string{"mysql", "--pass", "abc", "-u", "root"}, []string{"mysql", "--pass", Redacted, "-u", "root"}},
		{[]string{"mkdir", "-p", "build/out"}, []string{"mkdir", "-p", "build/out"}},
		{[]string{"env", "GITHUB_TOKEN=abc", "aws_secret_access_key=abc", "PATH=/bin"}, []string{"env", "GITHUB_TOKEN=" + Redacted, "aws_secret_access_key=" + Redacted, "PATH=/bin"}},
		{[]string{"x", "DB_PASSWORD=abc", "MY_CREDENTIALS=abc", "API_KEY=abc"}, []string{"x", "DB_PASSWORD=" + Redacted, "MY_CREDENTIALS=" + Redacted, "API_KEY=" + Redacted}},
		{[]string{"curl", "-H", "Authorization: Bearer abc"}, []string{"curl", "-H", "Authorization: " + Redacted}},
		{[]string{"git", "clone", "https://bob:abc@example.com/r.git"}, []string{"git", "clone", "https://bob:" + Redacted + "@example.com/r.git"}},
		{[]string{"git", "clone", "https://bob@example.com/r.git", "--depth=1", "a=b"}, []string{"git", "clone", "https://bob@example.com/r.git", "--depth=1", "a=b"}},
		{[]string{"tool", "--token"}, []string{"tool", "--token"}},
		{nil, nil},
	} {
		in := append([]string(nil), tc.in...)
		got := Redact(tc.in)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if !reflect.DeepEqual(in, tc.in) {
			t.Errorf("Redact modified its input: %q", tc.in)
		}
	}
}

func TestRedactionInFile(t *testing.T) {
	const secret = "s3cr3t-VALUE"
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	w := Proc{PID: 1, UID: 0, Path: "/usr/bin/tool", CmdLine: []string{
		"tool", "--token", secret + "1", "--api-key=" + secret + "2", "GITHUB_TOKEN=" + secret + "3",
		"--pass", secret + "4", "https://u:" + secret + "5@h/", "--secret=" + secret + "6",
	}}
	run := testRun()
	run.Supervisor.CmdLine = []string{"corral", "run", "--", "tool", "--password", secret + "7"}
	if err := s.Emit(Launch(run, w)); err != nil {
		t.Fatal(err)
	}
	if err := s.Emit(Terminate(run, w, Exit{Killed: true, Reason: "SIGINT forwarded"})); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte(secret)) {
		t.Fatalf("secret leaked into audit file:\n%s", data)
	}
	if got := bytes.Count(data, []byte(Redacted)); got != 2*7 {
		t.Errorf("found %d redactions, want 14:\n%s", got, data)
	}
}

func TestAppendsAcrossOpens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	for range 3 {
		s, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Emit(Launch(testRun(), testWorkload())); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(readLines(t, path)); n != 3 {
		t.Fatalf("got %d lines, want 3", n)
	}
}

func TestNilAndClosedSink(t *testing.T) {
	var nilSink *Sink
	if err := nilSink.Emit(Launch(testRun(), testWorkload())); err != nil {
		t.Errorf("nil Emit: %v", err)
	}
	if err := nilSink.Close(); err != nil {
		t.Errorf("nil Close: %v", err)
	}
	s, err := Open(filepath.Join(t.TempDir(), "a.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := s.Emit(Launch(testRun(), testWorkload())); err == nil {
		t.Error("Emit after Close succeeded")
	}
}

// bigRun returns a RunInfo whose events are far larger than PIPE_BUF, so
// unlocked concurrent appends would have a real chance to interleave.
func bigRun(tag string) RunInfo {
	r := testRun()
	r.SandboxID = tag
	r.Layers = append(r.Layers, Layer{Layer: "pad", Detail: strings.Repeat(tag, 16384/len(tag))})
	return r
}

func checkConcurrentFile(t *testing.T, path string, want int) {
	t.Helper()
	lines := readLines(t, path)
	if len(lines) != want {
		t.Fatalf("got %d lines, want %d", len(lines), want)
	}
	seen := map[string]bool{}
	for _, m := range lines {
		uid := get(t, m, "metadata.uid").(string)
		if seen[uid] {
			t.Fatalf("duplicate event uid %s", uid)
		}
		seen[uid] = true
		wantField(t, m, "class_uid", 1007)
		tag := get(t, m, "unmapped.sandbox_id").(string)
		layers := get(t, m, "unmapped.layers").([]any)
		pad := layers[len(layers)-1].(map[string]any)["detail"].(string)
		if pad != strings.Repeat(tag, 16384/len(tag)) {
			t.Fatalf("event %s has a corrupted payload", uid)
		}
	}
}

func TestConcurrentSinks(t *testing.T) {
	const writers, perWriter = 8, 50
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for g := range writers {
		wg.Go(func() {
			s, err := Open(path)
			if err != nil {
				errs <- err
				return
			}
			run := bigRun(fmt.Sprintf("g%d-", g))
			for i := range perWriter {
				e := Launch(run, testWorkload())
				if i%2 == 1 {
					e = Terminate(run, testWorkload(), Exit{Code: i})
				}
				if err := s.Emit(e); err != nil {
					errs <- err
					return
				}
			}
			errs <- s.Close()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	checkConcurrentFile(t, path, writers*perWriter)
}

const helperEnv = "CORRAL_AUDIT_TEST_HELPER"

// TestConcurrentProcesses appends from several processes at once, the
// situation the file lock guards against (parallel corral runs sharing
// --audit FILE). The helpers start writing together (each says it is
// ready, then waits for PATH.go), or a slow process start, Wine's, would
// leave them little overlap.
func TestConcurrentProcesses(t *testing.T) {
	if p := os.Getenv(helperEnv); p != "" {
		s, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p+".ready."+strconv.Itoa(os.Getpid()), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { _, err := os.Stat(p + ".go"); return err == nil })
		run := bigRun("p" + strconv.Itoa(os.Getpid()) + "-")
		for range 50 {
			if err := s.Emit(Launch(run, testWorkload())); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return
	}
	if testing.Short() {
		t.Skip("spawns subprocesses")
	}
	const procs = 4
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	cmds := make([]*exec.Cmd, procs)
	for i := range cmds {
		cmds[i] = exec.Command(os.Args[0], "-test.run=^TestConcurrentProcesses$")
		cmds[i].Env = append(os.Environ(), helperEnv+"="+path)
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
		defer cmds[i].Process.Kill()
	}
	waitFor(t, func() bool { m, _ := filepath.Glob(path + ".ready.*"); return len(m) == procs })
	if err := os.WriteFile(path+".go", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("helper process: %v", err)
		}
	}
	checkConcurrentFile(t, path, procs*50)
}

// waitFor polls cond for up to a minute.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}

// The audit log is never reached through a symlink or a hard link: a file
// kept where a sandbox can write could be swapped for one pointing at a
// file the caller would then append to.
func TestOpenRefusesSymlinks(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("keep\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sym := filepath.Join(dir, "audit-sym.jsonl")
	symlink(t, victim, sym)
	refused(t, sym, "symlink")
	symdir := filepath.Join(dir, "linkdir")
	symlink(t, dir, symdir)
	refused(t, filepath.Join(symdir, "a.jsonl"), "symlink")
	if b, _ := os.ReadFile(victim); string(b) != "keep\n" {
		t.Errorf("victim changed: %q", b)
	}
}

func TestOpenRefusesHardLinks(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("keep\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hard := filepath.Join(dir, "audit-hard.jsonl")
	if err := os.Link(victim, hard); err != nil {
		t.Fatal(err)
	}
	refused(t, hard, "has 2 hard links")
	if b, _ := os.ReadFile(victim); string(b) != "keep\n" {
		t.Errorf("victim changed: %q", b)
	}
}

// refused checks that Open(path) fails with an error containing why.
func refused(t *testing.T, path, why string) {
	t.Helper()
	s, err := Open(path)
	if err == nil {
		s.Close()
		t.Errorf("Open(%s) succeeded; want it refused (%s)", path, why)
	} else if !strings.Contains(err.Error(), why) {
		t.Errorf("Open(%s): %v; want it refused (%s)", path, err, why)
	}
}

// symlink makes link pointing at target, or skips t where no symlink can
// be made.
func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		if runtime.GOOS == "windows" && errors.Is(err, syscall.Errno(1314)) { // ERROR_PRIVILEGE_NOT_HELD
			t.Skip("making a symlink needs SeCreateSymbolicLinkPrivilege or Developer Mode (TestOpenRefusesJunction needs neither)")
		}
		t.Fatal(err)
	}
	if _, err := os.Lstat(link); err != nil {
		wine.SkipArtifact(t, "CreateSymbolicLinkW reports success but makes no link")
		t.Fatalf("os.Symlink succeeded but: %v", err)
	}
}

// Emit waits for another handle's lock: lines from several sinks (or
// processes) are ordered by it, not by luck.
func TestEmitWaitsForLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	a, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := lockFile(a.f, true); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.Emit(Note("waited")) }()
	select {
	case err := <-done:
		lockFile(a.f, false)
		t.Fatalf("Emit did not wait for the lock another sink held (%v)", err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := lockFile(a.f, false); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Emit still waiting after the lock was released")
	}
	if n := len(readLines(t, path)); n != 1 {
		t.Fatalf("got %d lines, want 1", n)
	}
}

func TestCmdLineQuoting(t *testing.T) {
	got := shellJoin([]string{"sh", "-c", "exit 3", "", "it's", "a=b"})
	want := `sh -c 'exit 3' '' 'it'\''s' a=b`
	if got != want {
		t.Errorf("shellJoin = %s, want %s", got, want)
	}
}

// An egress decision is an OCSF HTTP Activity event; a denial is Denied,
// Blocked, Medium; query strings and userinfo never reach the log.
func TestEgressEvent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.jsonl")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	run := RunInfo{SandboxID: "run-1-ab", PolicyHash: "sha256:00", Version: "test"}
	secret := "tok3n-" + strconv.Itoa(os.Getpid())
	if err := s.Emit(Egress(run, EgressDecision{Allowed: false, Method: "GET", Host: "evil.test", Port: 80,
		URL: "http://u:" + secret + "@evil.test/x?key=" + secret, Status: 403, Reason: "no allow rule matches", Hint: "network.allow: [{host: evil.test}]"})); err != nil {
		t.Fatal(err)
	}
	if err := s.Emit(Egress(run, EgressDecision{Allowed: true, Method: "CONNECT", Host: "api.allowed.test", Port: 443, IP: "127.0.0.2", Status: 200, Rule: "allow[0]"})); err != nil {
		t.Fatal(err)
	}
	s.Close()
	b, _ := os.ReadFile(path)
	if strings.Contains(string(b), secret) {
		t.Fatalf("secret in the log: %s", b)
	}
	var evs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, m)
	}
	if len(evs) != 2 {
		t.Fatalf("%d events", len(evs))
	}
	d, a := evs[0], evs[1]
	if d["class_uid"].(float64) != 4002 || d["type_uid"].(float64) != 400203 || d["action"] != "Denied" || d["disposition"] != "Blocked" {
		t.Errorf("denied event: %v", d)
	}
	if u := d["http_request"].(map[string]any)["url"].(map[string]any); u["url_string"] != "http://evil.test/x" || u["hostname"] != "evil.test" {
		t.Errorf("url = %v", u)
	}
	if a["type_uid"].(float64) != 400201 || a["action"] != "Allowed" || a["dst_endpoint"].(map[string]any)["ip"] != "127.0.0.2" {
		t.Errorf("allowed event: %v", a)
	}
}

func TestEgressInspectedEvent(t *testing.T) {
	e := Egress(RunInfo{SandboxID: "s"}, EgressDecision{Allowed: true, Method: "POST", Host: "api.allowed.test", Port: 443, Status: 201,
		URL: "https://api.allowed.test/repos/a?token=x", Rule: "allow[0] api.allowed.test:443; rules[1] POST /repos/*",
		Inspected: true, Proto: "HTTP/2.0", BytesOut: 12, BytesIn: 345})
	b, _ := json.Marshal(e)
	var m map[string]any
	json.Unmarshal(b, &m)
	req := m["http_request"].(map[string]any)
	if req["version"] != "HTTP/2.0" || req["url"].(map[string]any)["path"] != "/repos/a" || strings.Contains(string(b), "token=") {
		t.Errorf("http_request = %v", req)
	}
	tr, _ := m["traffic"].(map[string]any)
	if tr["bytes_out"] != 12.0 || tr["bytes_in"] != 345.0 || m["unmapped"].(map[string]any)["inspected"] != true {
		t.Errorf("traffic %v, unmapped %v", tr, m["unmapped"])
	}
	if e := Egress(RunInfo{}, EgressDecision{Allowed: true, Method: "CONNECT", Host: "h", Port: 443}); e.Traffic != nil || e.Unmapped.Inspected {
		t.Errorf("a tunnel's event says inspected or traffic: %+v", e)
	}
	if e := Egress(RunInfo{}, EgressDecision{Allowed: true, Method: "CONNECT", Host: "h", Port: 443, Inspected: true, Proto: "h2"}); e.HTTPRequest.Version != "" || e.Traffic != nil {
		t.Errorf("a terminated CONNECT's ALPN id became an HTTP version: %+v", e.HTTPRequest)
	}
}

//go:build linux

package e2e

// Fixtures for the consent tests (consent_test.go, docs/consent.md): a
// `corral run` in progress whose workload asks for folders or hosts at
// $CORRAL_CONSENT_URL, with `corral approvals watch --run PID` connected
// as its approver, and the approvals CLI run against it as the same
// identity.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The consent API's JSON as `corral approvals -o json` and the workload's
// API print it (cRequest, consent.Grant, cEvent; the e2e
// tests read the binary's output, not the package's types).
type cRequest struct {
	ID, Sandbox, Kind, Target, Access, Reason string
	Asked                                     int
	Requester                                 struct {
		PID      int
		Exe, Via string
	}
	Digest, Ceiling, State string
	Effective              bool
	Path, Detail, Grant    string
	Decision               *struct {
		Approve   bool
		Scope, By string
	}
}

type cGrant struct {
	ID, Sandbox, Request, Kind, Target, Access, Scope string
	Desired, Effective                                bool
	Mode, Path                                        string
	Revision                                          int
	Detail                                            string
	Folder                                            *struct {
		Label, Path, State string
		ReadOnly           bool `json:"read_only"`
		Locked             bool
		MountIDs           []int `json:"mount_ids"`
		Holders            []cHolder
	}
}

type cHolder struct {
	PID, FD int
	Path    string
	Killed  bool
}

type cEvent struct {
	Activity string
	Request  *cRequest
	Grant    *cGrant
	By       string
}

// Request states (consent.State).
const (
	statePending     = "pending"
	stateApproved    = "approved"
	stateRefused     = "refused"
	stateRateLimited = "rate_limited"
)

// syncBuf is a bytes.Buffer safe for a writer goroutine and a reader.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// consentSection is a policy's consent section (the policy struct's
// top-level lines): folders.ask and never, extra lines (indented two
// spaces: max_pending, rate, hosts), and a standing grants file of its
// own in a fresh directory of id's, outside every grant.
func consentSection(t *testing.T, id *ident, ask, never []string, extra string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("consent:\n")
	if len(ask) > 0 {
		fmt.Fprintf(&b, "  folders:\n    ask: [%s]\n", quoteAll(ask))
		if len(never) > 0 {
			fmt.Fprintf(&b, "    never: [%s]\n", quoteAll(never))
		}
	}
	b.WriteString(extra)
	fmt.Fprintf(&b, "  persist: %s\n", strconv.Quote(filepath.Join(mkdir(t, id, "consent-persist"), "grants.yaml")))
	return b.String()
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

// consentPrelude starts every workload script: ask NAME JSON posts a
// request (the body to NAME.json, the status to NAME.code, the id to
// $ID), await NAME long-polls $ID's decision (to NAME.wait.json). First
// it pings with a request the ceiling refuses until the test, having
// seen the ping in `corral approvals watch` (an approver is connected),
// makes the file "go" in the workdir.
const consentPrelude = `U="$CORRAL_CONSENT_URL"
ask() { curl -s --noproxy '*' -o "$1.json" -w '%{http_code}' -X POST "$U/v1/requests" -d "$2" > "$1.code"; ID=$(sed -n 's/^  "id": "\([^"]*\)".*/\1/p' "$1.json"); }
await() { curl -s --noproxy '*' -o "$1.wait.json" "$U/v1/requests/$ID/wait?timeout=120"; }
until [ -e go ]; do curl -s --noproxy '*' -o /dev/null -X POST "$U/v1/requests" -d '{"kind":"folder","target":"/"}'; sleep 0.1; done
`

// consentRun is a corral run in progress with an approver connected.
type consentRun struct {
	t      *testing.T
	id     *ident
	wd     string
	cmd    *exec.Cmd
	out    *syncBuf
	errb   *syncBuf
	done   chan struct{}
	err    error
	watch  *exec.Cmd
	events *syncBuf // watch -o json
	// approvals is how `corral approvals` reaches the broker:
	// "approvals --run PID" or "approvals --gateway unix:SOCK".
	approvals []string
}

// runSocketOf is where corral run pid, run as id, serves its approvers'
// API (cmd/corral runSocketDir: /run/corral/runs as root, else
// ~/.local/state/corral/runs without XDG_RUNTIME_DIR, which asIdent does
// not set).
func runSocketOf(id *ident, pid int) string {
	dir := "/run/corral/runs"
	if !id.isRoot() {
		dir = filepath.Join(id.home, ".local", "state", "corral", "runs")
	}
	return filepath.Join(dir, strconv.Itoa(pid)+".sock")
}

// startConsentRun starts `corral run` of script (consentPrelude first)
// as id in wd with policy pol, waits for its approvals socket, and
// connects `corral approvals watch --run PID -o json`.
func startConsentRun(t *testing.T, id *ident, pol, wd string, flags []string, script string) *consentRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	cmd := run{id: id, policy: pol, workdir: wd, flags: flags, args: sh(consentPrelude + script)}.command(ctx)
	c := startConsentProc(t, id, wd, cmd, cancel)
	c.approvals = []string{"approvals", "--run", strconv.Itoa(c.pid())}
	sock := runSocketOf(id, c.pid())
	for end := time.Now().Add(30 * time.Second); !exists(sock); time.Sleep(20 * time.Millisecond) {
		select {
		case <-c.done:
			t.Fatalf("corral run ended before serving approvals at %s: %v\n%s\n%s", sock, c.err, c.out, c.errb)
		default:
		}
		if time.Now().After(end) {
			t.Fatalf("no approvals socket %s after 30 s\n%s", sock, c.errb)
		}
	}
	c.startWatch()
	return c
}

// startConsentProc starts cmd (its context's cancel called when it
// ends), a workload asking for consent, as id in workdir wd.
func startConsentProc(t *testing.T, id *ident, wd string, cmd *exec.Cmd, cancel func()) *consentRun {
	t.Helper()
	c := &consentRun{t: t, id: id, wd: wd, cmd: cmd, out: &syncBuf{}, errb: &syncBuf{}, done: make(chan struct{}), events: &syncBuf{}}
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.errb
	if err := c.cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() { c.err = c.cmd.Wait(); cancel(); close(c.done) }()
	t.Cleanup(func() {
		if c.watch != nil && c.watch.Process != nil {
			_ = c.watch.Process.Kill()
			_ = c.watch.Wait()
		}
		select {
		case <-c.done:
		default:
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	})
	return c
}

// startWatch connects `corral approvals ... watch -o json` as the
// approver.
func (c *consentRun) startWatch() {
	c.t.Helper()
	c.watch = exec.Command(corralBin, append(append([]string{}, c.approvals...), "watch", "-o", "json")...)
	asIdent(c.watch, c.id, nil)
	c.watch.Stdout, c.watch.Stderr = c.events, c.events
	if err := c.watch.Start(); err != nil {
		c.t.Fatal(err)
	}
}

func (c *consentRun) pid() int { return c.cmd.Process.Pid }

// cli runs `corral approvals --run PID ARGS` (or --gateway) as the
// run's identity.
func (c *consentRun) cli(args ...string) result {
	c.t.Helper()
	return corralAs(c.t, corralBin, c.id, nil, append(append([]string{}, c.approvals...), args...)...)
}

// approve approves request id once with `corral approvals approve` and
// fails the test unless the command says it is in force (at where, a
// folder's path inside; "" for a host).
func (c *consentRun) approve(id, where string) {
	c.t.Helper()
	want := id + " approved, in force"
	if where != "" {
		want += " at " + where
	}
	if ap := c.cli("approve", id); ap.code != 0 || !strings.Contains(ap.stdout, want) {
		c.t.Fatalf("corral approvals approve: %s, want %q", ap, want)
	}
}

// cliJSON runs cli(ARGS -o json), fails unless it exits 0, and decodes
// its output into v.
func (c *consentRun) cliJSON(v any, args ...string) {
	c.t.Helper()
	r := c.cli(append(args, "-o", "json")...)
	if r.code != 0 {
		c.t.Fatalf("corral approvals %v: %s", args, r)
	}
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		c.t.Fatalf("corral approvals %v -o json: %v\n%s", args, err, r.stdout)
	}
}

// watched are the events `corral approvals watch -o json` printed so far.
func (c *consentRun) watched() []cEvent {
	return decodeEvents(c.events.String())
}

func decodeEvents(s string) []cEvent {
	var out []cEvent
	dec := json.NewDecoder(strings.NewReader(s))
	for {
		var e cEvent
		if err := dec.Decode(&e); err != nil {
			return out // io.EOF, or the watcher's last line (not JSON)
		}
		out = append(out, e)
	}
}

// waitEvent polls the watcher's events for one f accepts.
func (c *consentRun) waitEvent(what string, f func(cEvent) bool) cEvent {
	c.t.Helper()
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		for _, e := range c.watched() {
			if f(e) {
				return e
			}
		}
		select {
		case <-c.done:
			c.t.Fatalf("the run ended before the watcher saw %s: %v\n%s\n%s\nwatch:\n%s", what, c.err, c.out, c.errb, c.events)
		default:
		}
	}
	c.t.Fatalf("the watcher did not see %s within 60 s:\n%s\nrun stderr:\n%s", what, c.events, c.errb)
	return cEvent{}
}

// goAhead waits until the watcher saw the prelude's ping (an approver is
// connected), then lets the workload ask.
func (c *consentRun) goAhead() {
	c.t.Helper()
	c.waitEvent("the workload's ping", func(e cEvent) bool {
		return e.Request != nil && e.Request.Target == "/" && e.Activity == "refused"
	})
	c.touch("go")
}

// touch makes file name in the workdir (a signal to the workload).
func (c *consentRun) touch(name string) {
	c.t.Helper()
	if err := os.WriteFile(filepath.Join(c.wd, name), nil, 0o644); err != nil {
		c.t.Fatal(err)
	}
}

// waitFile waits for the workload to make file name in the workdir.
func (c *consentRun) waitFile(name string) {
	c.t.Helper()
	for end := time.Now().Add(60 * time.Second); !exists(filepath.Join(c.wd, name)); time.Sleep(20 * time.Millisecond) {
		select {
		case <-c.done:
			c.t.Fatalf("the run ended before making %s: %v\n%s\n%s", name, c.err, c.out, c.errb)
		default:
		}
		if time.Now().After(end) {
			c.t.Fatalf("the workload did not make %s within 60 s\n%s", name, c.errb)
		}
	}
}

// pending polls `corral approvals list -o json` for a pending request for
// target other than those in not.
func (c *consentRun) pending(target string, not ...string) cRequest {
	c.t.Helper()
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		var rs []cRequest
		c.cliJSON(&rs, "list")
		for _, r := range rs {
			if r.Target == target && r.State == statePending && !contains(not, r.ID) {
				return r
			}
		}
	}
	c.t.Fatalf("no pending request for %s within 60 s\n%s", target, c.errb)
	return cRequest{}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// end waits for the run to end and returns its result.
func (c *consentRun) end() result {
	c.t.Helper()
	select {
	case <-c.done:
	case <-time.After(2 * time.Minute):
		c.t.Fatalf("the run did not end\n%s\n%s", c.out, c.errb)
	}
	res := result{stdout: c.out.String(), stderr: c.errb.String(), err: c.err, pid: c.pid()}
	var ee *exec.ExitError
	if errors.As(c.err, &ee) {
		res.code = ee.ExitCode()
	}
	return res
}

// answer is what the workload was answered: NAME.code and NAME.json.
type answer struct {
	cRequest
	WaitURL string `json:"wait_url"`
	status  int
	raw     string
}

// answerOf reads the workload's answer NAME (ask's files) from the
// workdir.
func (c *consentRun) answerOf(name string) answer {
	c.t.Helper()
	code, err := os.ReadFile(filepath.Join(c.wd, name+".code"))
	if err != nil {
		c.t.Fatalf("answer %s: %v", name, err)
	}
	var a answer
	a.status, _ = strconv.Atoi(strings.TrimSpace(string(code)))
	b, _ := os.ReadFile(filepath.Join(c.wd, name+".json"))
	a.raw = string(b)
	if err := json.Unmarshal(b, &a); err != nil {
		c.t.Fatalf("answer %s (status %d) is not JSON: %v\n%s", name, a.status, err, b)
	}
	return a
}

// waited is the workload's NAME.wait.json.
func (c *consentRun) waited(name string) cRequest {
	c.t.Helper()
	var r cRequest
	b, err := os.ReadFile(filepath.Join(c.wd, name+".wait.json"))
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err != nil {
		c.t.Fatalf("wait %s: %v\n%s", name, err, b)
	}
	return r
}

// consentFolder makes base/name with a.txt (content body) and secret/k
// (content secret), owned by id, writable by every uid (so that only
// the mount, never the file's mode, refuses a write: the workload of a
// root run is not uid 0).
func consentFolder(t *testing.T, id *ident, base, name, body, secret string) string {
	t.Helper()
	d := filepath.Join(base, name)
	writeFile(t, id, filepath.Join(d, "a.txt"), body+"\n", 0o666)
	writeFile(t, id, filepath.Join(d, "secret", "k"), secret+"\n", 0o666)
	for _, p := range []string{d, filepath.Join(d, "secret")} {
		if err := os.Chmod(p, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// consentWorkdir is a fresh workdir of id's.
func consentWorkdir(t *testing.T, id *ident) string { return mkdir(t, id, "consent-wd") }

//go:build linux

package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"github.com/corral-sandbox/corral/qualify"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	gw "github.com/corral-sandbox/corral/gateway/gen/corral/gateway/v1"
	"github.com/corral-sandbox/corral/internal/procstat"
)

// mxcGW is the mxc provider's isolation_session backend through the
// wxc-exec stand-in, for the gateway's crash tests. The stand-in keeps
// its sessions as files (WXC_STATE_DIR/sessions): they outlive wxc-exec,
// as MXC's do, and a session runs nothing between execs, so what is "on
// the host" of a sandbox is its stand-in session.
var mxcGW = &gwProvider{name: "mxc", policy: mxcGatewayPolicy, env: mxcGatewayEnv, workloads: mxcWorkloads, instance: mxcInstance, kill: mxcKill, orphans: true}

// mxcGatewayPolicy is a policy isolation_session enforces: no grants,
// network host, no Linux layer required.
const mxcGatewayPolicy = "version: 1\nfilesystem: {read_only: [], deny: [], include_workdir: false, protected: []}\nnetwork: {mode: host}\n" +
	"layers: {landlock: optional, seccomp: optional, cgroups: optional, namespaces: optional, mounts: optional}\n" +
	"process: {limits: {memory: 0, pids: 0, cpu: 0, nofile: 0}}\n"

// mxcState and wxcState are, of the gateway whose files are in dir, the
// mxc provider's records and the stand-in's sessions.
func mxcState(dir string) string { return filepath.Join(dir, "mxc") }
func wxcState(dir string) string { return filepath.Join(dir, "wxc") }

// mxcGatewayEnv builds the stand-in into dir (once) and points the
// gateway's mxc provider at it: the isolation_session backend, records in
// mxcState, sessions in wxcState.
func mxcGatewayEnv(t *testing.T, dir string) []string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	wxc := filepath.Join(dir, "wxc-exec")
	if !exists(wxc) {
		build := exec.Command("go", "build", "-o", wxc, "./provider/mxc/testdata/wxcexec")
		build.Dir = root
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building the stand-in: %v\n%s", err, out)
		}
	}
	return []string{"CORRAL_MXC_WXC_EXEC=" + wxc, "WXC_SCHEMA_DIR=" + filepath.Join(root, "..", "shared", "reference", "mxc"),
		"CORRAL_MXC_STATE=" + mxcState(dir), "CORRAL_MXC_BACKEND=isolation_session", "WXC_STATE_DIR=" + wxcState(dir)}
}

// mxcRecord is what the tests read of an mxc record.
type mxcRecord struct {
	LocalID    string `json:"local_id"`
	PhaseState string `json:"phase_state"`
	SandboxID  string `json:"sandbox_id"`
	WxcPID     int    `json:"wxc_pid"`
	WxcStart   uint64 `json:"wxc_start"`
}

// mxcRecords are the mxc records of the gateway whose files are in dir,
// by local id (an unreadable one under its file name, state
// "unreadable").
func mxcRecords(dir string) map[string]mxcRecord {
	out := map[string]mxcRecord{}
	files, _ := filepath.Glob(filepath.Join(mxcState(dir), "*.json"))
	for _, f := range files {
		var r mxcRecord
		b, err := os.ReadFile(f)
		if err == nil {
			err = json.Unmarshal(b, &r)
		}
		if err != nil || r.LocalID == "" {
			r = mxcRecord{LocalID: strings.TrimSuffix(filepath.Base(f), ".json"), PhaseState: "unreadable"}
		}
		out[r.LocalID] = r
	}
	return out
}

// wxcSessions are the stand-in's sessions: sandboxId → its state file.
func wxcSessions(dir string) map[string]string {
	out := map[string]string{}
	files, _ := filepath.Glob(filepath.Join(wxcState(dir), "sessions", "*.json"))
	for _, f := range files {
		out["iso:"+strings.TrimSuffix(filepath.Base(f), ".json")] = f
	}
	return out
}

// mxcWorkloads are the sandboxes whose record names a session that
// exists, and, as "unnamed session iso:…", the sessions no record names
// (what an orphan leaves).
func mxcWorkloads(t *testing.T, dir string) []string {
	t.Helper()
	sessions := wxcSessions(dir)
	named := map[string]bool{}
	var ids []string
	for id, r := range mxcRecords(dir) {
		if r.SandboxID == "" {
			continue
		}
		named[r.SandboxID] = true
		if sessions[r.SandboxID] != "" {
			ids = append(ids, id)
		}
	}
	for sid := range sessions {
		if !named[sid] {
			ids = append(ids, "unnamed session "+sid)
		}
	}
	return ids
}

// mxcInstance is the session sandbox id's record names, with its state
// file's content (its creation time and metadata: a session provisioned
// again has another).
func mxcInstance(t *testing.T, dir, id string) string {
	t.Helper()
	r, ok := mxcRecords(dir)[id]
	if !ok {
		return "no mxc record"
	}
	b, err := os.ReadFile(wxcSessions(dir)[r.SandboxID])
	if err != nil {
		return fmt.Sprintf("session %q gone", r.SandboxID)
	}
	return fmt.Sprintf("session %s: %s", r.SandboxID, strings.Join(strings.Fields(string(b)), " "))
}

// mxcKill ends sandbox id's session behind the gateway's back: an
// operator's own wxc-exec deprovision of its sandboxId (an MXC session
// has no process of its own to kill between execs).
func mxcKill(t *testing.T, dir, id string) {
	t.Helper()
	r := mxcRecords(dir)[id]
	if r.SandboxID == "" {
		t.Fatalf("sandbox %s has no session: %+v", id, r)
	}
	doc := fmt.Sprintf(`{"version":"0.9.0-alpha","containment":"isolation_session","phase":"deprovision","sandboxId":%q}`, r.SandboxID)
	cmd := exec.Command(filepath.Join(dir, "wxc-exec"), "--experimental", "--config-base64", base64.StdEncoding.EncodeToString([]byte(doc)))
	cmd.Env = append(os.Environ(), mxcGatewayEnv(t, dir)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("deprovisioning %s behind the gateway's back: %v\n%s", r.SandboxID, err, out)
	}
	if wxcSessions(dir)[r.SandboxID] != "" {
		t.Fatalf("session %s still there", r.SandboxID)
	}
}

// mxcTraces are the mxc records, in the gateway whose files are in dir,
// of sandboxes ids (Destroy removes a record once nothing stands for it).
func mxcTraces(dir string, ids []string) []string {
	var out []string
	for id, r := range mxcRecords(dir) {
		if slices.Contains(ids, id) {
			out = append(out, fmt.Sprintf("mxc record %s (%s, session %q)", id, r.PhaseState, r.SandboxID))
		}
	}
	return out
}

// orphanLine is how gateway serve lists an orphan identity.
var orphanLine = regexp.MustCompile(`orphan (corral-[0-9a-f]{12}) \(mxc\): .*rm '([^']+)'`)

// mxcOrphan checks a restart after the gateway died while a provision
// that made a session never answered with its id (g, running): the
// orphan is listed with the record to remove, at this restart and the
// next, and never provisioned again (the stand-in has the sessions it had
// before, sessions, and the orphan's alone more); then the test does as
// the operator is told, removing the unnamed session (the agent user)
// and the record. It returns the gateway running now.
func mxcOrphan(t *testing.T, p *gwProvider, dir, sock string, g *gatewayProc, sessions int) *gatewayProc {
	t.Helper()
	var record string
	for i := 1; i <= 2; i++ {
		m := orphanLine.FindStringSubmatch(g.log.String())
		if m == nil {
			t.Fatalf("restart %d after the orphan: not listed for the operator:\n%s", i, g.log)
		}
		record = m[2]
		if !exists(record) {
			t.Errorf("restart %d: the record listed, %s, does not exist", i, record)
		}
		if n := len(wxcSessions(dir)); n != sessions+1 {
			t.Errorf("restart %d: the stand-in has %d sessions, had %d before the orphan's provision: want one more (the orphan), never provisioned again", i, n, sessions)
		}
		if i == 1 {
			g.kill()
			g = p.start(t, dir, sock)
		}
	}
	var unnamed []string
	for _, w := range mxcWorkloads(t, dir) {
		if sid, ok := strings.CutPrefix(w, "unnamed session "); ok {
			unnamed = append(unnamed, sid)
		}
	}
	if len(unnamed) != 1 {
		t.Fatalf("sessions no record names: %q, want the orphan's alone", unnamed)
	}
	f := wxcSessions(dir)[unnamed[0]]
	ws := filepath.Join(wxcState(dir), "workspaces", strings.TrimSuffix(filepath.Base(f), ".json"))
	for _, rm := range []string{f, ws, record} {
		if err := os.RemoveAll(rm); err != nil {
			t.Fatal(err)
		}
	}
	return g
}

// mxcContainerGW is the mxc provider's process_container backend through
// the stand-in: each sandbox is one wxc-exec running `corral __relay`,
// which ends with the gateway that made it (no attach). It is not in the
// crash harness's adoption points (a crash makes these sandboxes lost):
// TestGatewayCrashesContainer.
var mxcContainerGW = &gwProvider{name: "mxc", policy: mxcContainerPolicy, env: mxcContainerEnv, workloads: mxcContainerWorkloads}

// mxcContainerPolicy is a policy process_container enforces: no network,
// no grants, no Linux layer required.
const mxcContainerPolicy = "version: 1\nfilesystem: {read_only: [], deny: [], include_workdir: false, protected: []}\nnetwork: {mode: none}\n" +
	"layers: {landlock: optional, seccomp: optional, cgroups: optional, namespaces: optional, mounts: optional}\n" +
	"process: {limits: {memory: 0, pids: 0, cpu: 0, nofile: 0}}\n"

// mxcContainerEnv is mxcGatewayEnv with the process_container backend.
func mxcContainerEnv(t *testing.T, dir string) []string {
	return append(mxcGatewayEnv(t, dir), "CORRAL_MXC_BACKEND=process_container")
}

// wxcProcs are the running wxc-exec processes of the gateway whose files
// are in dir (its stand-in's path is dir's), by pid, each with the relays
// it runs (children whose command line has __relay).
func wxcProcs(dir string) map[int][]int {
	bin := filepath.Join(dir, "wxc-exec")
	out := map[int][]int{}
	ppid := map[int]int{}
	cmd := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := procstat.Read(pid)
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !st.Running() {
			continue
		}
		cmd[pid] = string(b)
		if s, _ := os.ReadFile("/proc/" + e.Name() + "/stat"); len(s) > 0 {
			if i := strings.LastIndexByte(string(s), ')'); i > 0 {
				if f := strings.Fields(string(s[i+1:])); len(f) > 1 {
					ppid[pid], _ = strconv.Atoi(f[1])
				}
			}
		}
	}
	for pid, c := range cmd {
		if strings.HasPrefix(c, bin+"\x00") {
			out[pid] = nil
		}
	}
	for pid, c := range cmd {
		if _, ok := out[ppid[pid]]; ok && strings.Contains(c, "\x00__relay") {
			out[ppid[pid]] = append(out[ppid[pid]], pid)
		}
	}
	return out
}

// mxcContainerWorkloads are the sandboxes whose record names a wxc-exec
// that runs (its pid, with the start time recorded).
func mxcContainerWorkloads(t *testing.T, dir string) []string {
	t.Helper()
	var ids []string
	for id, r := range mxcRecords(dir) {
		if st, err := procstat.Read(r.WxcPID); r.WxcPID > 0 && err == nil && st.Running() && st.StartTicks == r.WxcStart {
			ids = append(ids, id)
		}
	}
	return ids
}

// A gateway's process_container sandboxes run commands (each on its one
// relay), reach out through their own egress proxy (its credential), are
// stopped (their wxc-exec and relay end), started again (a
// new relay) and deleted; serve says they end with it. A gateway killed
// (SIGKILL) while an exec runs leaves nothing: the end of the channel
// ends the relay, which kills the exec's command, and so wxc-exec (no
// parent-death signal: the EOF alone does it). The restarted gateway
// marks them lost ("MXC has no attach") and removes their records; a
// new sandbox works, and once deleted nothing of any is left.
//
// Mutation-checked: wxc-exec given a parent-death signal (the relay dies
// by it and the exec's command is left running); Destroy of a
// process_container record a no-op (its record is left); the workload's
// proxy credential not the proxy's (a.test denied).
func TestGatewayCrashesContainer(t *testing.T) {
	root := gatewayIdent(t)
	t.Run("mxc-process_container", func(t *testing.T) {
		p := *mxcContainerGW
		p.id = root
		dir := p.dir(t, "gwpc")
		wd := dockerWorkdir(t, p.id, "gwpc-wd")
		sock := "unix:" + filepath.Join(dir, "gw.sock")
		ctx := context.Background()
		t.Cleanup(func() {
			for pid := range wxcProcs(dir) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		})
		g := p.start(t, dir, sock)
		if !strings.Contains(g.log.String(), "mxc sandboxes end with this gateway") {
			t.Errorf("serve does not say its process_container sandboxes end with it:\n%s", g.log)
		}
		if !strings.Contains(g.log.String(), "mxc's executor is a stand-in (tier mock): its sandboxes are "+qualify.MockNote) {
			t.Errorf("serve does not say its mxc sandboxes are mock:\n%s", g.log)
		}
		c := g.client(t, "")
		// a's egress is the per-sandbox proxy on host loopback, served by
		// the gateway's session core with the sandbox's own credential.
		port := upstream(t, "upstream-ok")
		areq := p.req(wd)
		areq.PolicyYaml = strings.Replace(mxcContainerPolicy, "network: {mode: none}", fmt.Sprintf("network: {mode: proxy, allow: [{host: a.test, ports: [%d]}], allow_private: [{host: 127.0.0.1}], hosts: {a.test: 127.0.0.1, b.test: 127.0.0.1}}", port), 1)
		a := g.create(t, ctx, c, areq).Id
		b := g.create(t, ctx, c, p.req(wd)).Id
		for host, want := range map[string]string{"a.test": "upstream-ok", "b.test": "DENIED"} {
			out, _, err := execOut(ctx, c, a, "sh", "-c", fmt.Sprintf("curl -fsS http://%s:%d/ || echo DENIED", host, port))
			if err != nil || !strings.Contains(out, want) {
				t.Errorf("%s through the sandbox's proxy: %q, %v; want %s", host, out, err, want)
			}
		}
		for i, id := range []string{a, b, a} {
			want := fmt.Sprintf("alive-%d", i)
			if out, code, err := execOut(ctx, c, id, "sh", "-c", "echo "+want+"; exit "+strconv.Itoa(i+3)); err != nil || code != i+3 || !strings.Contains(out, want) {
				t.Fatalf("exec %d in %s: %q, exit %d, %v\n%s", i, id, out, code, err, g.log)
			}
		}
		procs := wxcProcs(dir)
		if len(procs) != 2 {
			t.Fatalf("wxc-exec processes: %v, want one per sandbox", procs)
		}
		for pid, relays := range procs {
			if len(relays) != 1 {
				t.Errorf("wxc-exec %d runs relays %v, want one", pid, relays)
			}
		}
		// Stop ends b's wxc-exec and relay; start makes new ones.
		if _, err := c.StopSandbox(ctx, connect.NewRequest(&gw.StopSandboxRequest{Id: b})); err != nil {
			t.Fatal(err)
		}
		if n := len(wxcProcs(dir)); n != 1 {
			t.Errorf("%d wxc-exec processes after the stop, want 1", n)
		}
		if _, err := c.StartSandbox(ctx, connect.NewRequest(&gw.StartSandboxRequest{Id: b})); err != nil {
			t.Fatalf("start: %v\n%s", err, g.log)
		}
		if out, code, err := execOut(ctx, c, b, "echo", "again"); err != nil || code != 0 || !strings.Contains(out, "again") {
			t.Fatalf("exec after the start: %q, %d, %v", out, code, err)
		}

		// The gateway dies while an exec runs.
		sleep := uniqueSleep(1000)
		go func() { _, _, _ = execOut(ctx, c, a, "sleep", sleep) }()
		for end := time.Now().Add(10 * time.Second); len(hostProcsWith(sleep)) == 0; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatal("the exec's sleep never ran")
			}
		}
		before := wxcProcs(dir)
		var relays []int
		for _, r := range before {
			relays = append(relays, r...)
		}
		g.kill()
		left := func() []string {
			var out []string
			for pid := range wxcProcs(dir) {
				out = append(out, fmt.Sprintf("wxc-exec %d", pid))
			}
			for _, pid := range append(relays, hostProcsWith(sleep)...) {
				if st, err := procstat.Read(pid); err == nil && st.Running() {
					out = append(out, fmt.Sprintf("process %d", pid))
				}
			}
			return out
		}
		for end := time.Now().Add(10 * time.Second); len(left()) > 0 && time.Now().Before(end); {
			time.Sleep(50 * time.Millisecond)
		}
		if l := left(); len(l) > 0 {
			t.Errorf("left running after the gateway's SIGKILL (the relays were %v): %v", relays, l)
		}

		g = p.start(t, dir, sock)
		c = g.client(t, "")
		if !strings.Contains(g.log.String(), " 2 lost") {
			t.Errorf("the restarted gateway does not report two lost sandboxes:\n%s", g.log)
		}
		recs := checkConsistent(t, ctx, &p, c, dir, "after the crash", a, b)
		for _, id := range []string{a, b} {
			if r := recs[id]; r.GetPhase() != "error" || !strings.Contains(r.GetReason(), "lost") || !strings.Contains(r.GetReason(), "MXC has no attach") {
				t.Errorf("%s after the crash: %s, want lost (no attach)", id, brief(r))
			}
		}
		if left := mxcRecords(dir); len(left) != 0 {
			t.Errorf("mxc records left after the lost sandboxes were reconciled: %v", left)
		}
		n := g.create(t, ctx, c, p.req(wd)).Id
		if out, code, err := execOut(ctx, c, n, "echo", "new"); err != nil || code != 0 || !strings.Contains(out, "new") {
			t.Errorf("exec in a sandbox made after the restart: %q, %d, %v", out, code, err)
		}
		for _, id := range []string{a, b, n} {
			if _, err := c.DeleteSandbox(ctx, connect.NewRequest(&gw.DeleteSandboxRequest{Id: id})); err != nil {
				t.Errorf("delete %s: %v", id, err)
			}
		}
		if recs := checkConsistent(t, ctx, &p, c, dir, "after deleting every sandbox", a, b, n); len(recs) != 0 || len(wxcProcs(dir)) != 0 || len(mxcRecords(dir)) != 0 {
			t.Errorf("left after deleting every sandbox: records %v, wxc-exec %v, mxc records %v", recs, wxcProcs(dir), mxcRecords(dir))
		}
	})
}

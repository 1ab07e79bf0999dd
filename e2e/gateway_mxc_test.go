//go:build linux

package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
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

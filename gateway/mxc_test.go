//go:build linux

package gateway_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/corral-sandbox/corral/gateway"
	gw "github.com/corral-sandbox/corral/gateway/gen/corral/gateway/v1"
	"github.com/corral-sandbox/corral/provider/mxc"
)

// mxcPolicy is a policy isolation_session enforces: no grants, network
// host, no Linux layer required.
const mxcPolicy = "version: 1\nfilesystem: {read_only: [], deny: [], include_workdir: false, protected: []}\nnetwork: {mode: host}\n" +
	"layers: {landlock: optional, seccomp: optional, cgroups: optional, namespaces: optional, mounts: optional}\n" +
	"process: {limits: {memory: 0, pids: 0, cpu: 0, nofile: 0}}\n"

// mxcGateway is a gateway on the mxc provider's isolation_session backend
// through the wxc-exec stand-in (built into dir), whose sessions are in
// the returned directory.
func mxcGateway(t *testing.T, dir string) (*gatewayT, string) {
	t.Helper()
	wxc := filepath.Join(dir, "wxc-exec")
	if out, err := exec.Command("go", "build", "-o", wxc, "../provider/mxc/testdata/wxcexec").CombinedOutput(); err != nil {
		t.Fatalf("building the stand-in: %v\n%s", err, out)
	}
	schemas, err := filepath.Abs("../../shared/reference/mxc")
	if err != nil {
		t.Fatal(err)
	}
	sessions := filepath.Join(dir, "wxc")
	t.Setenv("WXC_SCHEMA_DIR", schemas)
	t.Setenv("WXC_STATE_DIR", sessions)
	t.Setenv("WXC_CRASH_AFTER", "")
	p := mxc.New(mxc.Config{Backend: mxc.BackendIsolationSession, WxcExec: wxc}, filepath.Join(dir, "mxc"))
	return &gatewayT{dir: dir, p: p, instance: gateway.InstancePrefix + secret("t")[:17]}, filepath.Join(sessions, "sessions")
}

// The gateway on mxc (isolation_session, through the stand-in): a
// sandbox is created, execs, refuses a policy change MXC cannot take live
// before storing it (supports_live_policy_updates false: recreate
// offered), stops and starts again (a new session, the same id), and is
// adopted after a restart; a create whose provision
// never answered with an id is an orphan: listed for the operator in
// every restart's report, with the file to remove, and never provisioned
// again.
func TestGatewayMXC(t *testing.T) {
	ctx := context.Background()
	dir := testDir(t)
	g, sessions := mxcGateway(t, dir)
	count := func() int { m, _ := filepath.Glob(filepath.Join(sessions, "*.json")); return len(m) }
	g.start(t)
	defer g.stop()
	cr, err := g.cl.CreateSandbox(ctx, connect.NewRequest(&gw.CreateSandboxRequest{Provider: "mxc", Workdir: dir, PolicyYaml: mxcPolicy}))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	sb := &sandboxT{t: t, g: g, id: cr.Msg.Sandbox.Id}
	if out := sb.exec("echo", "hello"); !strings.HasSuffix(out, "\nhello\n") || !strings.Contains(out, "mock — not evidence of OS enforcement") {
		t.Errorf("exec: %q", out)
	}
	// An isolation session has no channel to its loopback: sandbox
	// forward is refused up front (port_forwarding false).
	if get, err := g.cl.GetSandbox(ctx, connect.NewRequest(&gw.GetSandboxRequest{Id: sb.id})); err != nil || get.Msg.Sandbox.PortForwarding || get.Msg.Sandbox.Effective != "running" {
		t.Errorf("an isolation session: %+v %v, want running without port forwarding", get.Msg.GetSandbox(), err)
	}
	// A command that cannot start exits 127 with the reason, as corral
	// run's does (docs/exit-codes.md), not a broken stream.
	st, err := g.cl.ExecSandbox(ctx, connect.NewRequest(&gw.ExecSandboxRequest{Id: sb.id, Args: []string{"no-such-command-xyz"}}))
	if err != nil {
		t.Fatal(err)
	}
	var exit *gw.Exit
	for st.Receive() {
		if e := st.Msg().GetExit(); e != nil {
			exit = e
		}
	}
	if err := st.Err(); err != nil || exit == nil || exit.Code != 127 || !strings.Contains(exit.Reason, "no-such-command-xyz") {
		t.Errorf("exec of a missing command: exit %+v, stream %v; want 127 naming it", exit, err)
	}
	changed := strings.Replace(mxcPolicy, "memory: 0", "memory: 0, timeout: 60s", 1)
	_, err = g.cl.Policies.SetPolicy(ctx, connect.NewRequest(&gw.SetPolicyRequest{Id: sb.id, PolicyYaml: changed}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "recreate") {
		t.Errorf("a change MXC cannot apply live: %v, want FailedPrecondition offering recreate", err)
	}
	if h, err := g.cl.Policies.PolicyHistory(ctx, connect.NewRequest(&gw.PolicyHistoryRequest{Id: sb.id})); err != nil || len(h.Msg.Revisions) != 1 {
		t.Errorf("the refused change was stored: %v %v", h, err)
	}

	// Stop deprovisions the session (the record goes); start makes a new
	// one under the same id.
	if _, err := g.cl.StopSandbox(ctx, connect.NewRequest(&gw.StopSandboxRequest{Id: sb.id})); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if n := count(); n != 0 {
		t.Errorf("%d stand-in sessions after the stop", n)
	}
	if _, err := g.cl.StartSandbox(ctx, connect.NewRequest(&gw.StartSandboxRequest{Id: sb.id})); err != nil {
		t.Fatalf("start: %v", err)
	}
	if out := sb.exec("echo", "started"); !strings.HasSuffix(out, "\nstarted\n") || count() != 1 {
		t.Errorf("exec after stop and start: %q, %d sessions", out, count())
	}

	g.stop()
	if rep := g.start(t); !slices.Equal(rep.Adopted, []string{sb.id}) {
		t.Errorf("restart: %+v, want %s adopted", rep, sb.id)
	}
	if out := sb.exec("echo", "again"); !strings.HasSuffix(out, "\nagain\n") {
		t.Errorf("exec after the restart: %q", out)
	}

	t.Setenv("WXC_CRASH_AFTER", "provision") // a session made, its id never printed
	if _, err := g.cl.CreateSandbox(ctx, connect.NewRequest(&gw.CreateSandboxRequest{Provider: "mxc", Workdir: dir, PolicyYaml: mxcPolicy})); err == nil {
		t.Fatal("a create whose provision crashed succeeded")
	}
	t.Setenv("WXC_CRASH_AFTER", "")
	if n := count(); n != 2 {
		t.Fatalf("%d stand-in sessions, want the sandbox's and the orphan", n)
	}
	var rep *gateway.ReconcileReport
	for i := 0; i < 2; i++ {
		g.stop()
		rep = g.start(t)
		if len(rep.Unresolved) != 1 || rep.Unresolved[0].Provider != "mxc" || !strings.Contains(rep.Unresolved[0].Remedy, filepath.Join(dir, "mxc")) || len(rep.Orphans) != 0 {
			t.Fatalf("restart %d: %+v, want the orphan listed (with its record's file), nothing removed", i+1, rep)
		}
		if n := count(); n != 2 {
			t.Errorf("restart %d: %d stand-in sessions: provisioned again?", i+1, n)
		}
	}
	// The operator removes the record named (having checked the agent
	// user).
	rm := rep.Unresolved[0].Remedy
	if err := os.Remove(rm[strings.LastIndex(rm, "rm '")+4 : len(rm)-1]); err != nil {
		t.Fatal(err)
	}
	g.stop()
	if rep := g.start(t); len(rep.Unresolved) != 0 {
		t.Errorf("after the operator removed it: %+v", rep)
	}
	if _, err := g.cl.DeleteSandbox(ctx, connect.NewRequest(&gw.DeleteSandboxRequest{Id: sb.id})); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Errorf("%d stand-in sessions after the delete, want the orphan's alone", n)
	}
}

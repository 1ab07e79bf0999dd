//go:build linux

package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/corral-sandbox/corral/gateway"
	gw "github.com/corral-sandbox/corral/gateway/gen/corral/gateway/v1"
	"github.com/corral-sandbox/corral/gateway/gen/corral/gateway/v1/gatewayv1connect"
	"github.com/corral-sandbox/corral/provider/docker"
	"github.com/corral-sandbox/corral/provider/linux"
)

// gatewayProc is a `corral gateway serve` started by a test.
type gatewayProc struct {
	t      *testing.T
	dir    string // its database and socket live here
	listen string
	cmd    *exec.Cmd
	log    *bytes.Buffer
}

// startGateway starts the gateway (as root) with env and waits until it
// answers.
func startGateway(t *testing.T, dir, listen string, env ...string) *gatewayProc {
	t.Helper()
	return startGatewayArgs(t, dir, listen, nil, env...)
}

// startGatewayArgs is startGateway with extra serve flags.
func startGatewayArgs(t *testing.T, dir, listen string, args []string, env ...string) *gatewayProc {
	t.Helper()
	g := &gatewayProc{t: t, dir: dir, listen: listen, log: &bytes.Buffer{}}
	g.cmd = exec.Command(corralBin, append([]string{"gateway", "serve", "--listen", listen, "--db", filepath.Join(dir, "g.db")}, args...)...)
	g.cmd.Env = append(os.Environ(), env...)
	g.cmd.Stdout, g.cmd.Stderr = g.log, g.log
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.kill)
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if strings.Contains(g.log.String(), "listening on") {
			return g
		}
		if g.cmd.ProcessState != nil {
			break
		}
	}
	t.Fatalf("gateway did not start:\n%s", g.log)
	return nil
}

func (g *gatewayProc) kill() {
	if g.cmd.Process != nil && g.cmd.ProcessState == nil {
		_ = g.cmd.Process.Kill()
		_ = g.cmd.Wait()
	}
}

// waitDead waits for the gateway to die by itself (a fault point).
func (g *gatewayProc) waitDead() {
	done := make(chan struct{})
	go func() { _ = g.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		g.t.Fatalf("the gateway did not die at its fault point:\n%s", g.log)
	}
}

func (g *gatewayProc) client(t *testing.T, token string) *gateway.Clients {
	t.Helper()
	addr := g.listen
	if !strings.HasPrefix(addr, "unix:") {
		addr = "http://" + addr
	}
	c, err := gateway.Client(addr, token, "")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// create makes a sandbox through g and fails the test (with the gateway's
// log) when it cannot.
func (g *gatewayProc) create(t *testing.T, ctx context.Context, c *gateway.Clients, req *gw.CreateSandboxRequest) *gw.Sandbox {
	t.Helper()
	resp, err := c.CreateSandbox(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatalf("create: %v\n%s", err, g.log)
	}
	return resp.Msg.Sandbox
}

// gatewayIdent is root, whom the gateway tests run the gateway as.
func gatewayIdent(t *testing.T) *ident {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the gateway tests run the gateway as root")
	}
	return identities()[0]
}

func createReq(wd string) *gw.CreateSandboxRequest {
	return &gw.CreateSandboxRequest{Provider: "docker", Workdir: wd}
}

// execOut runs args in sandbox id and returns stdout and the exit code.
func execOut(ctx context.Context, c gatewayv1connect.SandboxServiceClient, id string, args ...string) (string, int, error) {
	return execOutReq(ctx, c, &gw.ExecSandboxRequest{Id: id, Args: args})
}

func execOutReq(ctx context.Context, c gatewayv1connect.SandboxServiceClient, req *gw.ExecSandboxRequest) (string, int, error) {
	st, err := c.ExecSandbox(ctx, connect.NewRequest(req))
	if err != nil {
		return "", -1, err
	}
	var out strings.Builder
	code := -1
	for st.Receive() {
		switch o := st.Msg().Output.(type) {
		case *gw.ExecSandboxResponse_Stdout:
			out.Write(o.Stdout)
		case *gw.ExecSandboxResponse_Exit:
			code = int(o.Exit.Code)
		}
	}
	return out.String(), code, st.Err()
}

// managedContainers lists the containers (running or not) of the gateway
// whose database is in dir: its instance id is kept there.
func managedContainers(t *testing.T, dir string) []string {
	t.Helper()
	inst, err := os.ReadFile(filepath.Join(dir, "instance"))
	if err != nil {
		t.Fatalf("the gateway's instance id: %v", err)
	}
	out := dockerCLI(t, "ps", "-a", "--filter", "label=io.corral.managed-by="+strings.TrimSpace(string(inst)), "--format", "{{.Names}}")
	return strings.Fields(out)
}

// The API through a real server: on a unix socket (peer uid checked) and
// on loopback TCP with the bearer token (missing and wrong tokens refused);
// a sandbox is created ready with its layers verified, runs commands,
// stops and is deleted without leaving a container.
func TestGatewayAPI(t *testing.T) {
	id := gatewayIdent(t)
	dockerIdents(t)
	dir := mkdir(t, id, "gwapi")
	wd := dockerWorkdir(t, id, "gwapi-wd")
	ctx := context.Background()

	g := startGateway(t, dir, "unix:"+filepath.Join(dir, "gw.sock"))
	c := g.client(t, "")
	sb := g.create(t, ctx, c, createReq(wd))
	if sb.Phase != "ready" || len(sb.Layers) != 5 || sb.ResourceVersion < 2 {
		t.Fatalf("created sandbox: %+v", sb)
	}
	for _, l := range sb.Layers {
		if l.State != "active" || !strings.Contains(l.Detail, "") {
			t.Errorf("layer %s is %s", l.Layer, l.State)
		}
	}
	out, code, err := execOut(ctx, c, sb.Id, "sh", "-c", "id -u; echo hello > made; exit 5")
	if err != nil || code != 5 || strings.TrimSpace(out) == "0" || readFile(t, filepath.Join(wd, "made")) != "hello\n" {
		t.Errorf("exec: out %q code %d err %v", out, code, err)
	}
	// A command cut short (its timeout) ends alone; the sandbox lives on.
	if _, code, err := execOutReq(ctx, c, &gw.ExecSandboxRequest{Id: sb.Id, Args: []string{"sleep", "30"}, TimeoutSeconds: 1}); err != nil || code != 124 {
		t.Errorf("exec past its timeout: code %d, %v; want 124", code, err)
	}
	if _, err := gateway.Client("http://192.0.2.1:8080", "token", ""); err == nil {
		t.Error("the client would send a token in clear off loopback")
	}
	if o, code, err := execOut(ctx, c, sb.Id, "echo", "still-here"); err != nil || code != 0 || !strings.Contains(o, "still-here") {
		t.Errorf("after a timed-out exec the sandbox is gone: %q %d %v", o, code, err)
	}
	// A second gateway on the same database is refused before it touches anything.
	second := exec.Command(corralBin, "gateway", "serve", "--listen", "unix:"+filepath.Join(dir, "gw2.sock"), "--db", filepath.Join(dir, "g.db"))
	if sout, err := second.CombinedOutput(); err == nil || !strings.Contains(string(sout), "another gateway uses this database") {
		t.Errorf("a second gateway on the same database: %v\n%s", err, sout)
	}
	logs, err := c.LogsSandbox(ctx, connect.NewRequest(&gw.LogsSandboxRequest{Id: sb.Id}))
	if err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	for logs.Receive() {
		logged.Write(logs.Msg().Data)
	}
	if logs.Err() != nil || logged.String() != out+"still-here\n" {
		t.Errorf("logs = %q (%v), want every exec's output in order: %q then still-here", logged.String(), logs.Err(), out)
	}
	if _, err := c.GetSandbox(ctx, connect.NewRequest(&gw.GetSandboxRequest{Id: "corral-000000000000"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("get of an unknown id: %v", err)
	}
	// An unprivileged user cannot use root's socket.
	probe := exec.Command(corralBin, "sandbox", "list", "--gateway", g.listen)
	probe.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(testUser.uid), Gid: uint32(testUser.gid)}}
	if pout, err := probe.CombinedOutput(); err == nil {
		t.Errorf("corral-test listed root's sandboxes:\n%s", pout)
	}
	// The same API as plain HTTP/JSON and as gRPC (HTTP/2 cleartext).
	sockPath := strings.TrimPrefix(g.listen, "unix:")
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sockPath)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: dial}}
	hr, err := hc.Post("http://gw/corral.gateway.v1.SandboxService/GetSandbox", "application/json", strings.NewReader(`{"id":"`+sb.Id+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(hr.Body)
	hr.Body.Close()
	if hr.StatusCode != 200 || !strings.Contains(string(body), `"phase":"ready"`) || !strings.Contains(string(body), `"effective":"running"`) {
		t.Errorf("HTTP/JSON GetSandbox: %d %s", hr.StatusCode, body)
	}
	h2 := &http.Transport{DialContext: dial, Protocols: new(http.Protocols)}
	h2.Protocols.SetUnencryptedHTTP2(true)
	grpc := gatewayv1connect.NewSandboxServiceClient(&http.Client{Transport: h2}, "http://gw", connect.WithGRPC())
	if lr, err := grpc.ListSandboxes(ctx, connect.NewRequest(&gw.ListSandboxesRequest{})); err != nil || len(lr.Msg.Sandboxes) != 1 {
		t.Errorf("gRPC ListSandboxes: %v %v", lr, err)
	}
	// Watch sees the stop; Get sees a workload killed behind the gateway's back.
	wctx, cancelWatch := context.WithCancel(ctx)
	defer cancelWatch()
	ws, err := c.WatchSandbox(wctx, connect.NewRequest(&gw.WatchSandboxRequest{Id: sb.Id}))
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan []string, 1)
	go func() {
		var phases []string
		for ws.Receive() {
			if m := ws.Msg(); m.Sandbox != nil {
				phases = append(phases, m.Sandbox.Phase)
				if m.Sandbox.Phase == "stopped" {
					break
				}
			}
		}
		seen <- phases
	}()
	dockerCLI(t, "kill", sb.Id)
	if gr, err := c.GetSandbox(ctx, connect.NewRequest(&gw.GetSandboxRequest{Id: sb.Id})); err != nil || gr.Msg.Sandbox.Effective != "gone" {
		t.Errorf("a killed container: effective %q (%v), want gone", gr.Msg.Sandbox.GetEffective(), err)
	}
	if _, err := c.StopSandbox(ctx, connect.NewRequest(&gw.StopSandboxRequest{Id: sb.Id})); err != nil {
		t.Fatal(err)
	}
	select {
	case phases := <-seen:
		if len(phases) == 0 || phases[0] != "ready" || phases[len(phases)-1] != "stopped" {
			t.Errorf("watch saw phases %v, want ready ... stopped", phases)
		}
	case <-time.After(10 * time.Second):
		t.Error("watch did not report the stop")
	}
	if _, _, err := execOut(ctx, c, sb.Id, "true"); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("exec in a stopped sandbox: %v", err)
	}
	// Started again: same id, a new container, commands run.
	if sr, err := c.StartSandbox(ctx, connect.NewRequest(&gw.StartSandboxRequest{Id: sb.Id})); err != nil || sr.Msg.Sandbox.Phase != "ready" {
		t.Fatalf("start a stopped sandbox: %v %v", sr, err)
	}
	if o, code, err := execOut(ctx, c, sb.Id, "echo", "again"); err != nil || code != 0 || !strings.Contains(o, "again") {
		t.Errorf("exec after start: %q %d %v", o, code, err)
	}
	if _, err := c.StartSandbox(ctx, connect.NewRequest(&gw.StartSandboxRequest{Id: sb.Id})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("start of a ready sandbox: %v", err)
	}
	if _, err := c.DeleteSandbox(ctx, connect.NewRequest(&gw.DeleteSandboxRequest{Id: sb.Id})); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(managedContainers(t, dir), sb.Id) {
		t.Error("the deleted sandbox's container is still there")
	}
	g.kill()

	// Loopback TCP with a token.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	g = startGateway(t, dir, addr)
	tok, err := os.ReadFile(filepath.Join(dir, "token"))
	if err != nil {
		t.Fatalf("no token file: %v", err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "token")); fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %o", fi.Mode().Perm())
	}
	for name, token := range map[string]string{"missing": "", "wrong": "not-the-token"} {
		_, err := g.client(t, token).ListSandboxes(ctx, connect.NewRequest(&gw.ListSandboxesRequest{}))
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("%s token: %v, want unauthenticated", name, err)
		}
	}
	if _, err := g.client(t, strings.TrimSpace(string(tok))).ListSandboxes(ctx, connect.NewRequest(&gw.ListSandboxesRequest{})); err != nil {
		t.Errorf("right token: %v", err)
	}
}

// A gateway killed with SIGKILL in the middle of create, exec, stop and
// delete, then restarted, ends consistent (checkConsistent), on each
// provider; so does one restarted after a sandbox's workload was killed
// behind its back while it was down: that sandbox is marked lost and what
// is left of it (a linux sandbox's cgroup and state directory) removed;
// and one whose store was lost while it was down removes every sandbox
// it had, orphans now.
//
// The sandbox a crashed exec ran in survives the crash and is adopted —
// the same container or supervisor runs it, after every later restart
// too — and (linux) the command that exec ran ends with its caller.
//
// Mutation-checked on linux (each made it fail, then was undone): Destroy
// a no-op; Destroy keeping the cgroup; Recover always not found, or from
// a sandbox's third adoption on; Managed listing nothing; init not
// killing an exec whose caller went away; reconcile leaving a
// provisioning sandbox (docker too).
//
// mxc (isolation_session through the wxc-exec stand-in) runs the same
// points, and one more, create-orphan: wxc-exec's provision makes a
// session but dies before printing its id, and the gateway dies right
// after; the restarted gateway lists the orphan for the operator (the
// record to remove), at every restart, and never provisions it again.
// killed-while-down is an operator's wxc-exec deprovision behind the
// gateway's back, which the restarted gateway finds through the one check
// the contract allows (a repeated start answered stale_id).
func TestGatewayCrashes(t *testing.T) {
	eachGatewayProvider(t, func(t *testing.T, p *gwProvider) {
		dir := p.dir(t, "gwcrash")
		wd := dockerWorkdir(t, p.id, "gwcrash-wd")
		sock := "unix:" + filepath.Join(dir, "gw.sock")
		ctx := context.Background()
		var known []string             // every sandbox made: ready, or nothing of it left
		adopted := map[string]string{} // the ready ones → what runs them (p.instance), the same after each restart
		// A ready sandbox to stop, delete, exec in and kill under faults.
		ready := func() string {
			g := p.start(t, dir, sock)
			id := g.create(t, ctx, g.client(t, ""), p.req(wd)).Id
			g.kill()
			known = append(known, id)
			return id
		}
		points := []string{"create-after-intent", "create-after-provision", "create-after-start"}
		if p.orphans {
			points = append(points, "create-orphan")
		}
		points = append(points, "exec-started", "stop-after-intent", "delete-after-intent", "killed-while-down", "store-lost")
		for _, point := range points {
			var target, was, sleep string
			var orphans []string
			sessions := len(wxcSessions(dir))
			if !strings.HasPrefix(point, "create") {
				target = ready()
				was = p.instance(t, dir, target)
			}
			switch point {
			case "killed-while-down":
				p.kill(t, dir, target)
			case "store-lost": // every sandbox so far an orphan
				orphans, adopted = p.workloads(t, dir), map[string]string{}
				for _, f := range []string{"g.db", "g.db-wal", "g.db-shm"} {
					if err := os.Remove(filepath.Join(dir, f)); err != nil && !os.IsNotExist(err) {
						t.Fatal(err)
					}
				}
			default:
				env := []string{gateway.FaultEnv + "=" + point}
				if point == "create-orphan" {
					// wxc-exec's provision makes a session and dies before
					// it prints the id; the gateway dies right after.
					env = []string{gateway.FaultEnv + "=create-after-provision", "WXC_CRASH_AFTER=provision"}
				}
				g := p.start(t, dir, sock, env...)
				c := g.client(t, "")
				var err error
				switch {
				case strings.HasPrefix(point, "create"):
					_, err = c.CreateSandbox(ctx, connect.NewRequest(p.req(wd)))
				case point == "exec-started":
					sleep = uniqueSleep(1000)
					_, _, err = execOut(ctx, c, target, "sleep", sleep)
				case point == "stop-after-intent":
					_, err = c.StopSandbox(ctx, connect.NewRequest(&gw.StopSandboxRequest{Id: target}))
				case point == "delete-after-intent":
					_, err = c.DeleteSandbox(ctx, connect.NewRequest(&gw.DeleteSandboxRequest{Id: target}))
				}
				switch connect.CodeOf(err) {
				case connect.CodeFailedPrecondition, connect.CodeNotFound, connect.CodeInvalidArgument:
					t.Fatalf("%s: the gateway answered instead of dying at its fault point: %v\n%s", point, err, g.log)
				}
				if err == nil {
					t.Errorf("%s: the call succeeded although the gateway was to die", point)
				}
				g.waitDead()
			}
			g := p.start(t, dir, sock)
			if point == "create-orphan" {
				g = mxcOrphan(t, p, dir, sock, g, sessions)
			}
			recs := checkConsistent(t, ctx, p, g.client(t, ""), dir, point, known...)
			for id, inst := range adopted {
				if r := recs[id]; r.GetPhase() != "ready" {
					t.Errorf("%s: %s, ready before the restart, was not adopted: %s\n%s", point, id, brief(r), g.log)
					delete(adopted, id)
				} else if now := p.instance(t, dir, id); now != inst {
					t.Errorf("%s: %s was replaced, not adopted: %s before the restart, %s after", point, id, inst, now)
				}
			}
			for id, r := range recs {
				if r.Phase == "ready" {
					adopted[id] = p.instance(t, dir, id)
				}
			}
			r := recs[target]
			switch point {
			case "exec-started":
				if r.GetPhase() != "ready" {
					t.Errorf("%s: the sandbox the exec ran in was not adopted: %s\n%s", point, brief(r), g.log)
				} else if now := p.instance(t, dir, target); now != was {
					t.Errorf("%s: the sandbox was replaced, not adopted: %s before the crash, %s after", point, was, now)
				}
				for end := time.Now().Add(5 * time.Second); len(hostProcsWith(sleep)) > 0 && time.Now().Before(end); {
					time.Sleep(50 * time.Millisecond)
				}
				if left := hostProcsWith(sleep); len(left) > 0 && !p.execOutlivesCaller {
					t.Errorf("%s: the command of the exec whose caller died still runs: pids %v", point, left)
				}
			case "stop-after-intent":
				if r.GetPhase() != "stopped" {
					t.Errorf("%s: the interrupted stop was not finished: %s", point, brief(r))
				}
			case "delete-after-intent":
				if _, err := g.client(t, "").GetSandbox(ctx, connect.NewRequest(&gw.GetSandboxRequest{Id: target})); connect.CodeOf(err) != connect.CodeNotFound {
					t.Errorf("%s: the interrupted delete was not finished: %v", point, err)
				}
			case "killed-while-down":
				if r.GetPhase() != "error" || !strings.Contains(r.GetReason(), "lost") {
					t.Errorf("%s: the sandbox killed while the gateway was down is not marked lost: %s\n%s", point, brief(r), g.log)
				}
			case "store-lost":
				if len(recs) != 0 || len(orphans) < 2 || !strings.Contains(g.log.String(), fmt.Sprintf(" %d orphans removed", len(orphans))) {
					t.Errorf("%s: want no records on a new store (%v) and the %d sandboxes on the host removed as orphans:\n%s", point, recs, len(orphans), g.log)
				}
			default: // an interrupted create: its record says so
				var made []string
				for id, r := range recs {
					if !slices.Contains(known, id) {
						made = append(made, brief(r))
					}
				}
				if len(made) != 1 || !strings.HasPrefix(made[0], "error ") || point == "create-orphan" && !strings.Contains(made[0], "orphan") {
					t.Errorf("%s: want one new record, in phase error (naming the orphan, for an orphan): %v", point, made)
				}
			}
			for id := range recs {
				if !slices.Contains(known, id) {
					known = append(known, id)
				}
			}
			g.kill()
		}
		// Every sandbox deleted, nothing of any is left.
		g := p.start(t, dir, sock)
		c := g.client(t, "")
		resp, err := c.ListSandboxes(ctx, connect.NewRequest(&gw.ListSandboxesRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range resp.Msg.Sandboxes {
			if _, err := c.DeleteSandbox(ctx, connect.NewRequest(&gw.DeleteSandboxRequest{Id: s.Id})); err != nil {
				t.Errorf("delete %s (%s): %v", s.Id, s.Phase, err)
			}
		}
		if recs := checkConsistent(t, ctx, p, c, dir, "after deleting every sandbox", known...); len(recs) != 0 {
			t.Errorf("records left after deleting every sandbox: %v", recs)
		}
	}, mxcGW)
}

// brief is a record's phase and reason.
func brief(r *gw.Sandbox) string {
	if r == nil {
		return "no record"
	}
	return fmt.Sprintf("%s (%s)", r.Phase, r.Reason)
}

// Load: sandboxes created, exec'd once and deleted concurrently through one
// gateway, in rounds. After every round nothing of them may be left —
// store rows, containers, state dirs, output logs, cgroups, processes (the
// container ids come from the daemon's events) — and over a level's rounds
// the gateway's fds may not grow by half an fd per sandbox or more (each
// level is compared with a round at its own concurrency: the connection
// pools grow with it, once). The default is cheap for CI: a warm-up round
// and two measured rounds of 8 on docker and of 20 on linux (docker's
// left out where no Docker daemon with the base image runs, unless
// CORRAL_TEST_DOCKER=1). bench/gateway.sh sets the environment for the
// figures:
//
//	CORRAL_GATEWAY_LOAD       sandboxes at once, one level or a list: 1,8,100, for every provider (default docker 8, linux 20)
//	CORRAL_GATEWAY_PROVIDERS  providers asked of the gateway (default docker,linux); one it refuses is "not available: REASON"
//	CORRAL_GATEWAY_SAMPLES    measured sandboxes per level and provider, at least: max(2, ceil(SAMPLES/N)) rounds
//	CORRAL_GATEWAY_BASELINE=1 the same cycle on plain Docker (no corral), a round after each round, for the ratios
//	CORRAL_GATEWAY_REPORT     FILE: the tables in markdown
func TestGatewayLoad(t *testing.T) {
	id := gatewayIdent(t)
	o := loadOptionsFromEnv(t)
	dir := mkdir(t, id, "gwload")
	wd := dockerWorkdir(t, id, "gwload-wd")
	// The linux sandboxes' StateBase: the caller's (bench/gateway.sh
	// checks it after the test), else one of the gateway's own; all in it
	// is this gateway's.
	base := os.Getenv(linux.StateDirEnv)
	if !filepath.IsAbs(base) {
		base = linuxStateBase(dir)
	}
	g := startGateway(t, dir, "unix:"+filepath.Join(dir, "gw.sock"), linux.StateDirEnv+"="+base)
	c := g.client(t, "")
	ctx := context.Background()
	inst, err := os.ReadFile(filepath.Join(dir, "instance"))
	if err != nil {
		t.Fatalf("the gateway's instance id: %v", err)
	}
	managed := docker.LabelManaged + "=" + strings.TrimSpace(string(inst))
	lp := &leakProbe{t: t, c: c, dir: dir, linuxBase: base, gwPid: g.cmd.Process.Pid, label: managed, rounds: map[string]int{}, leaks: map[string][]string{}}
	var cli *client.Client
	if slices.Contains(o.providers, "docker") || o.baseline {
		cli = dockerAPIClient(t)
		lp.cli, lp.ev = cli, watchDocker(t, cli, managed, true)
	}
	lp.children = len(procsBelow(lp.gwPid))
	t.Cleanup(func() { lp.removeAll(ctx) }) // what a failed round left, before the gateway is killed
	res := &loadResults{o: o, cells: map[string]*loadCell{}, unavailable: map[string]string{}, lp: lp}

	for _, p := range o.providers {
		// Asked once: a refusal is the gateway's answer, not a failure.
		resp, err := c.CreateSandbox(ctx, connect.NewRequest(&gw.CreateSandboxRequest{Provider: p, Workdir: wd}))
		var ce *connect.Error
		if errors.As(err, &ce) && slices.Contains([]connect.Code{connect.CodeInvalidArgument, connect.CodeFailedPrecondition, connect.CodeUnimplemented}, ce.Code()) {
			res.unavailable[p] = ce.Message()
			lp.check(ctx, p+" refused", p, nil)
			continue
		}
		if err != nil {
			t.Errorf("%s: create: %v\n%s", p, err, g.log)
			continue
		}
		if _, err := c.DeleteSandbox(ctx, connect.NewRequest(&gw.DeleteSandboxRequest{Id: resp.Msg.Sandbox.Id})); err != nil {
			t.Errorf("%s: delete: %v", p, err)
		}
		// A round at the first level before the measured ones warms the
		// pools (to the daemon, to clients): what grows after it grows
		// with the sandboxes.
		warm := loadRound(t, ctx, c, p, wd, o.levelsOf(p)[0])
		lp.check(ctx, p+" warm-up", p, append(sampleIDs(warm), resp.Msg.Sandbox.Id))
		res.avail = append(res.avail, p)
	}
	if len(res.avail) == 0 {
		t.Fatalf("no provider of %v available: %v", o.providers, res.unavailable)
	}
	res.warmFDs = lp.fds()
	var plainLabel string
	if o.baseline {
		plainLabel = "io.corral.e2e-plain=" + token()
		t.Cleanup(func() { removePlain(cli, plainLabel) })
		res.plainEv = watchDocker(t, cli, plainLabel, false)
	}
	// Every provider has as many levels (CORRAL_GATEWAY_LOAD's, or its
	// default), and as many rounds at each as its level asks.
	for i := range o.levelsOf("plain") {
		roundsOf := func(p string) int { n := o.levelsOf(p)[i]; return max(2, (o.samples+n-1)/n) }
		rounds := 0
		if o.baseline {
			rounds = roundsOf("plain")
		}
		for _, p := range res.avail {
			rounds = max(rounds, roundsOf(p))
		}
		for r := 1; r <= rounds; r++ {
			for _, p := range res.avail {
				if r > roundsOf(p) {
					continue
				}
				n := o.levelsOf(p)[i]
				cpu0 := cpuTime(lp.gwPid)
				s := loadRound(t, ctx, c, p, wd, n)
				cl := res.cell(p, n)
				cl.cpu += cpuTime(lp.gwPid) - cpu0
				cl.cycles += len(s)
				lp.check(ctx, fmt.Sprintf("%s, %d at once, round %d", p, n, r), p, sampleIDs(s))
				cl.samples = append(cl.samples, succeeded(s)...)
				cl.fds = append(cl.fds, lp.fds())
			}
			if n := o.levelsOf("plain")[i]; o.baseline && r <= roundsOf("plain") {
				s := plainRound(t, ctx, cli, plainLabel, n)
				if left := plainLeft(t, cli, plainLabel); len(left) > 0 {
					t.Errorf("plain docker, %d at once, round %d: containers left: %v", n, r, left)
				}
				res.plainEv.destroyed(sampleIDs(s))
				res.cell("plain", n).samples = append(res.cell("plain", n).samples, succeeded(s)...)
			}
		}
		// The pools grow with the concurrency, once: each level is
		// compared with a round of its own (the warm-up for the first).
		for _, p := range res.avail {
			n := o.levelsOf(p)[i]
			f := res.cell(p, n).fds
			ref, counted := f[0], len(f)-1
			if i == 0 {
				ref, counted = res.warmFDs, len(f)
			}
			if grew := f[len(f)-1] - ref; 2*grew >= n*counted {
				t.Errorf("%s, %d at once: the gateway's fds grew from %d to %d over %d rounds (%v): half an fd per sandbox or more", p, n, ref, f[len(f)-1], counted, f)
			}
		}
	}
	res.auditLogs, res.auditSize = filesSize(filepath.Join(dir, "logs", "*.audit.jsonl"))
	for _, l := range res.lines() {
		t.Log(l)
	}
	if o.report != "" {
		if err := os.WriteFile(o.report, []byte(res.markdown()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// loadResults is what TestGatewayLoad measured.
type loadResults struct {
	o           loadOptions
	cells       map[string]*loadCell // by provider ("plain": plain Docker) and level
	avail       []string             // the providers measured
	unavailable map[string]string    // provider → the gateway's reason
	warmFDs     int                  // the gateway's fds after the warm-up rounds
	lp          *leakProbe
	plainEv     *dockerWatch
	auditLogs   int   // audit logs the gateway keeps (of deleted sandboxes too)
	auditSize   int64 // their bytes
}

// loadCell is one provider's samples at one level, the gateway's fds
// after each round, and the CPU time it used in the rounds for the cycles.
type loadCell struct {
	samples []loadSample
	fds     []int
	cpu     time.Duration
	cycles  int
}

func (r *loadResults) cell(p string, n int) *loadCell {
	k := p + " " + strconv.Itoa(n)
	if r.cells[k] == nil {
		r.cells[k] = &loadCell{}
	}
	return r.cells[k]
}

// lines is the figures in a line per provider and level (the test's log).
func (r *loadResults) lines() []string {
	var out []string
	for p, why := range r.unavailable {
		out = append(out, fmt.Sprintf("%s: not available: %s", p, why))
	}
	ps := r.avail
	if r.o.baseline {
		ps = append(slices.Clone(ps), "plain")
	}
	for _, p := range ps {
		for _, n := range r.o.levelsOf(p) {
			s := r.cell(p, n).samples
			l := fmt.Sprintf("%s, %d at once (%d sandboxes):", p, n, len(s))
			for ph, name := range []string{"create", "exec", "delete", "total"} {
				d := loadPhase(s, ph)
				l += fmt.Sprintf(" %s p50 %s p99 %s;", name, pct(d, 50), pct(d, 99))
			}
			out = append(out, strings.TrimSuffix(l, ";"))
		}
	}
	return out
}

// markdown is the figures as bench/gateway.sh reports them.
func (r *loadResults) markdown() string {
	var md strings.Builder
	stat := func(ds []time.Duration) string { return fmtLoadDur(pct(ds, 50)) + " / " + fmtLoadDur(pct(ds, 99)) }
	ratio := func(a, b []time.Duration) string {
		if len(a) == 0 || len(b) == 0 {
			return "–"
		}
		return fmt.Sprintf("×%.2f / ×%.2f", pct(a, 50).Seconds()/pct(b, 50).Seconds(), pct(a, 99).Seconds()/pct(b, 99).Seconds())
	}
	table := func(p string) {
		md.WriteString("| at once | sandboxes | create p50 / p99 | first exec p50 / p99 | delete p50 / p99 | total p50 / p99 | total vs 1 at once | total vs plain Docker |\n|---|---|---|---|---|---|---|---|\n")
		for _, n := range r.o.levelsOf(p) {
			s := r.cell(p, n).samples
			vs1, vsPlain := "–", "–"
			if one := r.cells[p+" 1"]; one != nil && n != 1 {
				vs1 = ratio(loadPhase(s, totalPhase), loadPhase(one.samples, totalPhase))
			}
			if pl := r.cells["plain "+strconv.Itoa(n)]; pl != nil && p != "plain" {
				vsPlain = ratio(loadPhase(s, totalPhase), loadPhase(pl.samples, totalPhase))
			}
			fmt.Fprintf(&md, "| %d | %d | %s | %s | %s | %s | %s | %s |\n", n, len(s),
				stat(loadPhase(s, createPhase)), stat(loadPhase(s, execPhase)), stat(loadPhase(s, deletePhase)), stat(loadPhase(s, totalPhase)), vs1, vsPlain)
		}
	}
	steps := func(p string, ev *dockerWatch) {
		for _, n := range r.o.levelsOf(p) {
			fmt.Fprintf(&md, "| %s | %d |", p, n)
			for _, s := range ev.segments(r.cell(p, n).samples) {
				fmt.Fprintf(&md, " %s |", fmtLoadDur(pct(s, 50)))
			}
			md.WriteString("\n")
		}
	}
	for _, p := range r.o.providers {
		fmt.Fprintf(&md, "\n## %s\n\n", p)
		if why, ok := r.unavailable[p]; ok {
			fmt.Fprintf(&md, "not available: %s\n", why)
			continue
		}
		if !slices.Contains(r.avail, p) {
			md.WriteString("failed (see the test's output)\n")
			continue
		}
		table(p)
		fmt.Fprintf(&md, "\nLeft behind, checked after each of %d rounds (the warm-up included): ", r.lp.rounds[p])
		if l := r.lp.leaks[p]; len(l) == 0 {
			md.WriteString("nothing (store rows, containers, state dirs, output logs, cgroups, processes).")
		} else {
			fmt.Fprintf(&md, "**%d leftovers**: %s.", len(l), strings.Join(l[:min(len(l), 10)], "; "))
		}
		var fds, cpu []string
		for _, n := range r.o.levelsOf(p) {
			cl := r.cell(p, n)
			fds = append(fds, fmt.Sprintf("%d at once: %d after its first round, %d after its last (%d rounds)", n, cl.fds[0], cl.fds[len(cl.fds)-1], len(cl.fds)))
			cpu = append(cpu, fmt.Sprintf("%d at once %s", n, fmtLoadDur(cl.cpu/time.Duration(max(cl.cycles, 1)))))
		}
		fmt.Fprintf(&md, " The gateway's fds: %d after the warm-up; %s. Its CPU time (user + system) per sandbox: %s. Audit logs kept at the end: %d, %d KiB (delete keeps a sandbox's audit log).\n",
			r.warmFDs, strings.Join(fds, "; "), strings.Join(cpu, "; "), r.auditLogs, r.auditSize>>10)
	}
	if r.o.baseline {
		md.WriteString("\n## plain Docker (the baseline)\n\nThe same cycle without corral, through the Docker API: create + start `corral/base:1` running `sleep` (network none), exec `echo N` (create, attach, read to the end, inspect), remove (forced); a round after each gateway round.\n\n")
		table("plain")
	}
	if slices.Contains(r.avail, "docker") {
		md.WriteString("\n## Where the time goes\n\nMedians of each step, split at the daemon's events for the sandbox's container (`create`, `start`, `exec_create`, `exec_die`, `kill`, `destroy`):\n\n")
		md.WriteString("| | at once | → created | created → started | started → create answered | → exec created | exec created → died | died → exec answered | → kill | kill → destroyed | destroyed → delete answered |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		steps("docker", r.lp.ev)
		if r.plainEv != nil {
			steps("plain", r.plainEv)
		}
	}
	return md.String()
}

// loadOptions is what TestGatewayLoad measures (see its comment).
type loadOptions struct {
	levels    []int // CORRAL_GATEWAY_LOAD's, for every provider; nil: each provider's default (levelsOf)
	providers []string
	samples   int
	baseline  bool
	report    string
}

// defaultLoad is a provider's sandboxes at once when CORRAL_GATEWAY_LOAD
// does not say: linux sandboxes are cheap (a process tree each, no
// daemon), so more of them at once.
var defaultLoad = map[string]int{"docker": 8, "linux": 20}

// levelsOf is provider p's levels (plain Docker's are docker's).
func (o loadOptions) levelsOf(p string) []int {
	if o.levels != nil {
		return o.levels
	}
	if p == "plain" {
		p = "docker"
	}
	if n, ok := defaultLoad[p]; ok {
		return []int{n}
	}
	return []int{8}
}

func loadOptionsFromEnv(t *testing.T) loadOptions {
	t.Helper()
	o := loadOptions{providers: []string{"docker", "linux"}, baseline: os.Getenv("CORRAL_GATEWAY_BASELINE") == "1", report: os.Getenv("CORRAL_GATEWAY_REPORT")}
	list := func(v string) []string {
		return strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' })
	}
	if v := os.Getenv("CORRAL_GATEWAY_LOAD"); v != "" {
		o.levels = nil
		for _, f := range list(v) {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 {
				t.Fatalf("CORRAL_GATEWAY_LOAD=%q: want counts of sandboxes (1,8,100)", v)
			}
			o.levels = append(o.levels, n)
		}
	}
	if v := os.Getenv("CORRAL_GATEWAY_PROVIDERS"); v != "" {
		o.providers = list(v)
	} else if err := exec.Command("docker", "image", "inspect", "corral/base:1").Run(); err != nil && os.Getenv("CORRAL_TEST_DOCKER") != "1" {
		t.Logf("docker left out: no Docker daemon with corral/base:1 here: %v", err)
		o.providers = []string{"linux"}
	}
	if v := os.Getenv("CORRAL_GATEWAY_SAMPLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			t.Fatalf("CORRAL_GATEWAY_SAMPLES=%q: want a count", v)
		}
		o.samples = n
	}
	return o
}

// loadSample is one sandbox's cycle: the times of the create, first exec
// and delete calls (t[0] create sent, t[1] create answered = exec sent,
// t[2] exec's exit = delete sent, t[3] delete answered).
type loadSample struct {
	id     string // "" when the create failed
	t      [4]time.Time
	failed bool // a call failed: not a sample, but what it made is looked for
}

const (
	createPhase = iota
	execPhase
	deletePhase
	totalPhase
)

// loadPhase lists one phase of each sample (totalPhase: the whole cycle).
func loadPhase(s []loadSample, ph int) []time.Duration {
	out := make([]time.Duration, len(s))
	for i, x := range s {
		if ph == totalPhase {
			out[i] = x.t[3].Sub(x.t[0])
		} else {
			out[i] = x.t[ph+1].Sub(x.t[ph])
		}
	}
	return out
}

func sampleIDs(s []loadSample) []string {
	var out []string
	for _, x := range s {
		if x.id != "" {
			out = append(out, x.id)
		}
	}
	return out
}

// succeeded is the samples of s whose calls all succeeded.
func succeeded(s []loadSample) []loadSample {
	return slices.DeleteFunc(slices.Clone(s), func(x loadSample) bool { return x.failed })
}

// loadRound creates, execs in and deletes n sandboxes on provider p
// concurrently.
func loadRound(t *testing.T, ctx context.Context, c gatewayv1connect.SandboxServiceClient, p, wd string, n int) []loadSample {
	t.Helper()
	return cycles(t, n, func(i int, s *loadSample) error {
		resp, err := c.CreateSandbox(ctx, connect.NewRequest(&gw.CreateSandboxRequest{Provider: p, Workdir: wd}))
		if err != nil {
			return fmt.Errorf("%s: create %d: %w", p, i, err)
		}
		s.id, s.t[1] = resp.Msg.Sandbox.Id, time.Now()
		o, code, err := execOut(ctx, c, s.id, "echo", strconv.Itoa(i))
		s.t[2] = time.Now()
		var errs []error
		if err != nil || code != 0 || strings.TrimSpace(o) != strconv.Itoa(i) {
			errs = append(errs, fmt.Errorf("%s: exec %d: %q %d %v", p, i, o, code, err))
		}
		if _, err := c.DeleteSandbox(ctx, connect.NewRequest(&gw.DeleteSandboxRequest{Id: s.id})); err != nil {
			errs = append(errs, fmt.Errorf("%s: delete %d: %w", p, i, err))
		}
		return errors.Join(errs...)
	})
}

// plainRound is loadRound on plain Docker, without corral: the baseline.
func plainRound(t *testing.T, ctx context.Context, cli *client.Client, label string, n int) []loadSample {
	t.Helper()
	k, v, _ := strings.Cut(label, "=")
	return cycles(t, n, func(i int, s *loadSample) error {
		cr, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
			Config:     &container.Config{Image: "corral/base:1", Cmd: []string{"sleep", "86400"}, Labels: map[string]string{k: v}},
			HostConfig: &container.HostConfig{NetworkMode: "none"},
		})
		if err == nil {
			_, err = cli.ContainerStart(ctx, cr.ID, client.ContainerStartOptions{})
		}
		if err != nil {
			return fmt.Errorf("plain docker: create %d: %w", i, err)
		}
		s.id, s.t[1] = cr.ID, time.Now()
		o, code, err := plainExec(ctx, cli, cr.ID, "echo", strconv.Itoa(i))
		s.t[2] = time.Now()
		var errs []error
		if err != nil || code != 0 || !strings.Contains(o, strconv.Itoa(i)) {
			errs = append(errs, fmt.Errorf("plain docker: exec %d: %q %d %v", i, o, code, err))
		}
		if _, err := cli.ContainerRemove(ctx, cr.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
			errs = append(errs, fmt.Errorf("plain docker: remove %d: %w", i, err))
		}
		return errors.Join(errs...)
	})
}

// cycles runs n cycles at once, each timed from its start (t[0]) to its
// return (t[3]); a cycle that failed is reported and marked.
func cycles(t *testing.T, n int, cycle func(i int, s *loadSample) error) []loadSample {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var out []loadSample
	var errs []error
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s loadSample
			s.t[0] = time.Now()
			err := cycle(i, &s)
			s.t[3] = time.Now()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				s.failed = true
			}
			out = append(out, s)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	return out
}

// plainExec runs args in container cid as `docker exec` does: create,
// attach and read to the end, then inspect for the exit code.
func plainExec(ctx context.Context, cli *client.Client, cid string, args ...string) (string, int, error) {
	ex, err := cli.ExecCreate(ctx, cid, client.ExecCreateOptions{Cmd: args, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return "", -1, err
	}
	att, err := cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return "", -1, err
	}
	b, err := io.ReadAll(att.Reader)
	att.Close()
	if err != nil {
		return "", -1, err
	}
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		in, err := cli.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
		if err != nil {
			return "", -1, err
		}
		if !in.Running {
			return string(b), in.ExitCode, nil
		}
	}
	return string(b), -1, errors.New("the exec did not end")
}

func plainLeft(t *testing.T, cli *client.Client, label string) []string {
	t.Helper()
	l, err := cli.ContainerList(context.Background(), client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", label)})
	if err != nil {
		t.Errorf("docker ps: %v", err)
		return nil
	}
	var out []string
	for _, c := range l.Items {
		out = append(out, c.ID[:12])
	}
	return out
}

func removePlain(cli *client.Client, label string) {
	ctx := context.Background()
	l, _ := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", label)})
	for _, c := range l.Items {
		_, _ = cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true})
	}
}

// dockerAPIClient is a client of the local daemon, closed with the test.
func dockerAPIClient(t *testing.T) *client.Client {
	t.Helper()
	cli, err := client.New(client.FromEnv)
	if err == nil {
		_, err = cli.Ping(context.Background(), client.PingOptions{NegotiateAPIVersion: true})
	}
	if err != nil {
		t.Fatalf("docker: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// dockerWatch follows the daemon's events for the containers labelled
// label: each sandbox's container id (by the container's name, which is
// the sandbox's id, or by the container's id) and when each step of its
// life happened.
type dockerWatch struct {
	mu   sync.Mutex
	cond *sync.Cond
	cids map[string]string        // sandbox id → container id
	evs  map[string][]dockerEvent // sandbox id → its events, in order
	err  error
}

type dockerEvent struct {
	action string // create, start, exec_create, exec_die, kill, destroy, ...
	at     time.Time
}

func watchDocker(t *testing.T, cli *client.Client, label string, byName bool) *dockerWatch {
	t.Helper()
	w := &dockerWatch{cids: map[string]string{}, evs: map[string][]dockerEvent{}}
	w.cond = sync.NewCond(&w.mu)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	res := cli.Events(ctx, client.EventsListOptions{Filters: client.Filters{}.Add("type", "container").Add("label", label)})
	go func() {
		for {
			select {
			case m := <-res.Messages:
				name := m.Actor.ID
				if byName {
					name = m.Actor.Attributes["name"]
				}
				action, _, _ := strings.Cut(string(m.Action), ":")
				w.mu.Lock()
				w.cids[name] = m.Actor.ID
				w.evs[name] = append(w.evs[name], dockerEvent{action, time.Unix(0, m.TimeNano)})
				w.cond.Broadcast()
				w.mu.Unlock()
			case err := <-res.Err:
				w.mu.Lock()
				if ctx.Err() == nil {
					w.err = fmt.Errorf("docker events: %v", err)
				}
				w.cond.Broadcast()
				w.mu.Unlock()
				return
			}
		}
	}()
	return w
}

// destroyed waits (up to 5 s) until the daemon has reported the destroy
// of each sandbox's container and returns the container ids, the
// sandboxes of which it said nothing, and why the events stopped.
func (w *dockerWatch) destroyed(ids []string) (cids, unseen []string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	late := false
	timer := time.AfterFunc(5*time.Second, func() { w.mu.Lock(); late = true; w.cond.Broadcast(); w.mu.Unlock() })
	defer timer.Stop()
	gone := func(id string) bool {
		return slices.ContainsFunc(w.evs[id], func(e dockerEvent) bool { return e.action == "destroy" })
	}
	for !late && w.err == nil && slices.ContainsFunc(ids, func(id string) bool { return !gone(id) }) {
		w.cond.Wait()
	}
	for _, id := range ids {
		if c, ok := w.cids[id]; ok {
			cids = append(cids, c)
		} else {
			unseen = append(unseen, id)
		}
	}
	return cids, unseen, w.err
}

// segments splits each sample's cycle at its container's events: before
// docker create, create → start, start → ready; to exec_create, in the
// exec, exec_die → reply; to kill, kill → destroy, destroy → reply.
func (w *dockerWatch) segments(s []loadSample) [9][]time.Duration {
	var out [9][]time.Duration
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, x := range s {
		first := func(action string, after time.Time) (time.Time, bool) {
			for _, e := range w.evs[x.id] {
				if e.action == action && !e.at.Before(after) {
					return e.at, true
				}
			}
			return time.Time{}, false
		}
		cr, ok1 := first("create", x.t[0])
		st, ok2 := first("start", cr)
		ec, ok3 := first("exec_create", x.t[1])
		ed, ok4 := first("exec_die", ec)
		kl, ok5 := first("kill", x.t[2])
		ds, ok6 := first("destroy", kl)
		if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) {
			continue
		}
		for i, d := range []time.Duration{cr.Sub(x.t[0]), st.Sub(cr), x.t[1].Sub(st), ec.Sub(x.t[1]), ed.Sub(ec), x.t[2].Sub(ed), kl.Sub(x.t[2]), ds.Sub(kl), x.t[3].Sub(ds)} {
			out[i] = append(out[i], d)
		}
	}
	return out
}

// leakProbe looks for what a round of sandboxes left behind.
type leakProbe struct {
	t         *testing.T
	c         *gateway.Clients
	cli       *client.Client
	dir       string // the gateway's database dir
	linuxBase string // its linux sandboxes' StateBase
	gwPid     int
	label     string // the gateway's containers' label
	ev        *dockerWatch
	children  int // the gateway's descendants before any sandbox
	rounds    map[string]int
	leaks     map[string][]string // provider → what was left, after each round
}

// check fails the test for everything of sandboxes ids (of provider
// prov) still there 5 s after the round: store rows, the gateway's
// containers, state dirs under /run/corral, anything in its linux
// StateBase and a supervisor of it, output logs, cgroups under
// /sys/fs/cgroup (named after the sandbox or its container, or the
// gateway's own run-PID-…), host processes (in such a cgroup, naming the
// container, or below the gateway beyond those it had).
func (lp *leakProbe) check(ctx context.Context, what, prov string, ids []string) {
	lp.t.Helper()
	var names []string // what a leftover may be named after
	names = append(names, ids...)
	if prov == "docker" {
		cids, unseen, err := lp.ev.destroyed(ids)
		if len(unseen) > 0 || err != nil {
			lp.t.Errorf("%s: the daemon reported no container for %v (%v): the cgroup and process checks would miss them", what, unseen, err)
		}
		names = append(names, cids...)
	}
	var left []string
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		left = lp.leftovers(ctx, ids, names)
		if len(left) == 0 || time.Now().After(end) {
			break
		}
	}
	lp.rounds[prov]++
	for _, l := range left {
		lp.t.Errorf("%s: left behind: %s", what, l)
		lp.leaks[prov] = append(lp.leaks[prov], what+": "+l)
	}
}

func (lp *leakProbe) leftovers(ctx context.Context, ids, names []string) []string {
	var left []string
	resp, err := lp.c.ListSandboxes(ctx, connect.NewRequest(&gw.ListSandboxesRequest{}))
	if err != nil {
		left = append(left, "the store could not be listed: "+err.Error())
	} else {
		for _, s := range resp.Msg.Sandboxes {
			left = append(left, fmt.Sprintf("store row %s (%s)", s.Id, s.Phase))
		}
	}
	if lp.cli != nil {
		l, err := lp.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", lp.label)})
		if err != nil {
			left = append(left, "docker ps: "+err.Error())
		} else {
			for _, c := range l.Items {
				left = append(left, fmt.Sprintf("container %s %v (%s)", c.ID[:12], c.Names, c.State))
			}
		}
	}
	// Whatever is in the gateway's linux StateBase, or supervises a
	// sandbox there, is a sandbox of it.
	states, _ := os.ReadDir(lp.linuxBase)
	for _, e := range states {
		left = append(left, "linux state dir "+filepath.Join(lp.linuxBase, e.Name()))
	}
	for id, pid := range linuxSupervisors(lp.linuxBase) {
		left = append(left, fmt.Sprintf("linux supervisor %d of %s", pid, id))
	}
	named := func(name string) bool {
		return slices.ContainsFunc(names, func(n string) bool { return strings.Contains(name, n) })
	}
	loadWalkDirs("/run/corral", 3, func(p string) {
		if named(filepath.Base(p)) {
			left = append(left, "state dir "+p)
		}
	})
	for _, id := range ids {
		if _, err := os.Stat(filepath.Join(lp.dir, "logs", id+".log")); err == nil {
			left = append(left, "output log "+id+".log")
		}
	}
	own := fmt.Sprintf("run-%d-", lp.gwPid)
	loadWalkDirs("/sys/fs/cgroup", 6, func(p string) {
		if b := filepath.Base(p); named(b) || (strings.HasPrefix(b, own) && filepath.Base(filepath.Dir(p)) == "corral") {
			left = append(left, "cgroup "+p)
		}
	})
	left = append(left, procsNaming(names)...)
	if d := procsBelow(lp.gwPid); len(d) > lp.children {
		left = append(left, fmt.Sprintf("the gateway has %d processes below it, had %d: %v", len(d), lp.children, d))
	}
	return left
}

// removeAll deletes every sandbox the gateway still has, then removes
// what the gateway could not: its linux sandboxes' supervisors, its
// containers and their state dirs.
func (lp *leakProbe) removeAll(ctx context.Context) {
	if resp, err := lp.c.ListSandboxes(ctx, connect.NewRequest(&gw.ListSandboxesRequest{})); err == nil {
		for _, s := range resp.Msg.Sandboxes {
			_, _ = lp.c.DeleteSandbox(ctx, connect.NewRequest(&gw.DeleteSandboxRequest{Id: s.Id}))
		}
	}
	stopLinuxSupervisors(lp.linuxBase)
	if lp.cli == nil {
		return
	}
	l, _ := lp.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", lp.label)})
	for _, c := range l.Items {
		_, _ = lp.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true})
		if d := c.Labels[docker.LabelState]; strings.HasPrefix(d, "/run/corral/") {
			_ = os.RemoveAll(d)
		}
	}
}

// fds counts the gateway's open fds once the count holds still (for
// 300 ms; at most 3 s): what a round closed a moment after its last
// answer is not counted.
func (lp *leakProbe) fds() int {
	n, same := countFDs(lp.gwPid), 0
	for end := time.Now().Add(3 * time.Second); same < 3 && time.Now().Before(end); {
		time.Sleep(100 * time.Millisecond)
		if m := countFDs(lp.gwPid); m == n {
			same++
		} else {
			n, same = m, 0
		}
	}
	return n
}

// loadWalkDirs calls f for each directory below root, down to depth.
func loadWalkDirs(root string, depth int, f func(string)) {
	ents, err := os.ReadDir(root)
	if err != nil || depth == 0 {
		return
	}
	for _, e := range ents {
		if e.IsDir() {
			p := filepath.Join(root, e.Name())
			f(p)
			loadWalkDirs(p, depth-1, f)
		}
	}
}

// procsBelow lists the processes below pid.
func procsBelow(pid int) []int {
	kids := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := procStat(e.Name()); len(f) > 1 {
			pp, _ := strconv.Atoi(f[1])
			kids[pp] = append(kids[pp], p)
		}
	}
	var out []int
	for q := kids[pid]; len(q) > 0; q = q[1:] {
		out = append(out, q[0])
		q = append(q, kids[q[0]]...)
	}
	return out
}

// procStat is the fields of /proc/PID/stat after the command (the state
// first); the command may hold spaces and parentheses.
func procStat(pid string) []string {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	i := bytes.LastIndexByte(b, ')')
	if err != nil || i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// cpuTime is the CPU time (user + system) process pid has used.
func cpuTime(pid int) time.Duration {
	f := procStat(strconv.Itoa(pid))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * time.Second / 100 // in USER_HZ, 100 a second
}

// filesSize is how many files match pattern and their size.
func filesSize(pattern string) (n int, size int64) {
	m, _ := filepath.Glob(pattern)
	for _, f := range m {
		if fi, err := os.Stat(f); err == nil {
			size += fi.Size()
		}
	}
	return len(m), size
}

func countFDs(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents)
}

// fmtLoadDur is d in ms below 10 s, else in s with one decimal.
func fmtLoadDur(d time.Duration) string {
	if d < 10*time.Second {
		return fmt.Sprintf("%d ms", d.Milliseconds())
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

// pct is the p-th percentile (nearest rank) of ds.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (p*len(s)+99)/100 - 1
	return s[max(i, 0)].Round(time.Millisecond)
}

// Policy revisions, on each provider: new egress rules apply live to a
// running sandbox (the next request is decided by them); another change
// is refused as "requires recreate" unless asked, and then the sandbox is
// replaced; the history lists every revision and how it was applied.
func TestGatewayPolicy(t *testing.T) {
	eachGatewayProvider(t, func(t *testing.T, p *gwProvider) {
		dir := p.dir(t, "gwpol")
		wd := dockerWorkdir(t, p.id, "gwpol-wd")
		ctx := context.Background()
		port := upstream(t, "upstream-ok")
		polFor := func(host, limits string) string {
			return fmt.Sprintf("version: 1\nnetwork:\n  mode: proxy\n  allow: [{host: %s, ports: [%d]}]\n  allow_private: [{host: 127.0.0.1}]\n  hosts: {a.test: 127.0.0.1, b.test: 127.0.0.1}\n%s", host, port, limits)
		}
		g := p.start(t, dir, "unix:"+filepath.Join(dir, "gw.sock"))
		c := g.client(t, "")
		req := p.req(wd)
		req.PolicyYaml = polFor("a.test", "")
		sb := g.create(t, ctx, c, req)
		sid := sb.Id
		defer c.DeleteSandbox(ctx, connect.NewRequest(&gw.DeleteSandboxRequest{Id: sid}))
		was := p.instance(t, dir, sid)
		fetch := func(host string) string {
			out, _, err := execOut(ctx, c, sid, "sh", "-c", fmt.Sprintf("wget -q -O- http://%s:%d/ || echo DENIED", host, port))
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		if a, b := fetch("a.test"), fetch("b.test"); !strings.Contains(a, "upstream-ok") || !strings.Contains(b, "DENIED") {
			t.Fatalf("revision 1: a.test %q, b.test %q", a, b)
		}
		sr, err := c.Policies.SetPolicy(ctx, connect.NewRequest(&gw.SetPolicyRequest{Id: sid, PolicyYaml: polFor("b.test", ""), ExpectedRevision: 1}))
		if err != nil || sr.Msg.Policy.Revision != 2 || sr.Msg.Policy.Applied != "live" {
			t.Fatalf("live set: %v %v", sr, err)
		}
		if a, b := fetch("a.test"), fetch("b.test"); !strings.Contains(a, "DENIED") || !strings.Contains(b, "upstream-ok") {
			t.Errorf("revision 2 (live): a.test %q, b.test %q", a, b)
		}
		if now := p.instance(t, dir, sid); now != was {
			t.Errorf("a live change replaced the sandbox: %s before, %s after", was, now)
		}
		if _, err := c.Policies.SetPolicy(ctx, connect.NewRequest(&gw.SetPolicyRequest{Id: sid, PolicyYaml: polFor("b.test", ""), ExpectedRevision: 1})); connect.CodeOf(err) != connect.CodeAborted {
			t.Errorf("set at a stale revision: %v", err)
		}
		limits := "process: {limits: {pids: 64, timeout: 3s}}\n"
		if _, err := c.Policies.SetPolicy(ctx, connect.NewRequest(&gw.SetPolicyRequest{Id: sid, PolicyYaml: polFor("b.test", limits)})); connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "requires recreate") {
			t.Errorf("a limits change without recreate: %v", err)
		}
		sr, err = c.Policies.SetPolicy(ctx, connect.NewRequest(&gw.SetPolicyRequest{Id: sid, PolicyYaml: polFor("b.test", limits), Recreate: true}))
		if err != nil || sr.Msg.Policy.Applied != "recreated" || sr.Msg.Sandbox.Phase != "ready" {
			t.Fatalf("recreate: %v %v\n%s", sr, err, g.log)
		}
		var cg string
		for _, l := range sr.Msg.Sandbox.Layers {
			if l.Layer == "cgroups" {
				cg = l.Detail
			}
		}
		if !strings.Contains(cg, p.pids64) {
			t.Errorf("after recreate the cgroups layer (verified from outside) says %q, want %s", cg, p.pids64)
		}
		if out, code, err := execOut(ctx, c, sid, "echo", "alive"); err != nil || code != 0 || !strings.Contains(out, "alive") {
			t.Errorf("exec after recreate: %q %d %v", out, code, err)
		}
		if a, b := fetch("a.test"), fetch("b.test"); !strings.Contains(a, "DENIED") || !strings.Contains(b, "upstream-ok") {
			t.Errorf("revision 3 (recreated): a.test %q, b.test %q", a, b)
		}
		// The new policy's timeout ends a command that outlasts it, not the sandbox.
		t0 := time.Now()
		if _, code, err := execOut(ctx, c, sid, "sleep", "30"); err != nil || code != 124 || time.Since(t0) > 20*time.Second {
			t.Errorf("an exec past the policy's timeout of 3s: exit %d after %s (%v), want 124", code, time.Since(t0).Round(time.Millisecond), err)
		}
		if out, code, err := execOut(ctx, c, sid, "echo", "alive"); err != nil || code != 0 || !strings.Contains(out, "alive") {
			t.Errorf("exec after a timed-out one: %q %d %v", out, code, err)
		}
		hr, err := c.Policies.PolicyHistory(ctx, connect.NewRequest(&gw.PolicyHistoryRequest{Id: sid}))
		if err != nil || len(hr.Msg.Revisions) != 3 {
			t.Fatalf("history: %v %v", hr, err)
		}
		var applied []string
		for _, r := range hr.Msg.Revisions {
			applied = append(applied, r.Applied)
		}
		if strings.Join(applied, ",") != "created,live,recreated" {
			t.Errorf("history applied = %v", applied)
		}
	})
}

// Interactive exec, on each provider: stdin reaches the command as it is
// sent (the reply to one line comes before the next is sent), and a
// terminal has the size asked for; a delete does not wait for a command
// that would not end: it ends it.
func TestGatewayExecStream(t *testing.T) {
	eachGatewayProvider(t, func(t *testing.T, p *gwProvider) {
		dir := p.dir(t, "gwstream")
		wd := dockerWorkdir(t, p.id, "gwstream-wd")
		ctx := context.Background()
		g := p.start(t, dir, "unix:"+filepath.Join(dir, "gw.sock"))
		c := g.client(t, "")
		sid := g.create(t, ctx, c, p.req(wd)).Id
		defer c.DeleteSandbox(ctx, connect.NewRequest(&gw.DeleteSandboxRequest{Id: sid}))
		st := c.ExecSandboxStream(ctx)
		send := func(r *gw.ExecStreamRequest) {
			if err := st.Send(r); err != nil {
				t.Fatal(err)
			}
		}
		send(&gw.ExecStreamRequest{Input: &gw.ExecStreamRequest_Start{Start: &gw.ExecSandboxRequest{Id: sid, Args: []string{"sh", "-c", "while read l; do echo got-$l; done; exit 6"}}}})
		var out strings.Builder
		code := -1
		readUntil := func(want string) {
			for !strings.Contains(out.String(), want) {
				m, err := st.Receive()
				if err != nil {
					t.Fatalf("waiting for %q: %v (have %q)", want, err, out.String())
				}
				switch o := m.Output.(type) {
				case *gw.ExecSandboxResponse_Stdout:
					out.Write(o.Stdout)
				case *gw.ExecSandboxResponse_Exit:
					code = int(o.Exit.Code)
					return
				}
			}
		}
		send(&gw.ExecStreamRequest{Input: &gw.ExecStreamRequest_Stdin{Stdin: []byte("one\n")}})
		readUntil("got-one") // answered before the second line exists
		send(&gw.ExecStreamRequest{Input: &gw.ExecStreamRequest_Stdin{Stdin: []byte("two\n")}})
		readUntil("got-two")
		send(&gw.ExecStreamRequest{Input: &gw.ExecStreamRequest_StdinEof{StdinEof: true}})
		readUntil("never printed")
		if code != 6 {
			t.Errorf("interactive exec: exit %d, want 6 (output %q)", code, out.String())
		}
		st.CloseRequest()

		// A lifecycle call does not wait for a command that would not end:
		// delete ends it.
		sleep := uniqueSleep(300)
		hung := make(chan int, 1)
		go func() {
			_, code, _ := execOut(ctx, c, sid, "sleep", sleep)
			hung <- code
		}()
		for end := time.Now().Add(10 * time.Second); len(hostProcsWith(sleep)) == 0 && time.Now().Before(end); {
			time.Sleep(50 * time.Millisecond)
		}
		if len(hostProcsWith(sleep)) == 0 {
			t.Fatal("the exec's sleep did not start")
		}
		tt := c.ExecSandboxStream(ctx)
		if err := tt.Send(&gw.ExecStreamRequest{Input: &gw.ExecStreamRequest_Start{Start: &gw.ExecSandboxRequest{Id: sid, Args: []string{"stty", "size"}, Tty: true, Rows: 21, Cols: 77}}}); err != nil {
			t.Fatal(err)
		}
		var tout strings.Builder
		for {
			m, err := tt.Receive()
			if err != nil {
				break
			}
			if o, ok := m.Output.(*gw.ExecSandboxResponse_Stdout); ok {
				tout.Write(o.Stdout)
			}
		}
		if !strings.Contains(tout.String(), "21 77") {
			t.Errorf("terminal size: %q, want 21 77", tout.String())
		}
		t0 := time.Now()
		if _, err := c.DeleteSandbox(ctx, connect.NewRequest(&gw.DeleteSandboxRequest{Id: sid})); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(t0); d > 15*time.Second {
			t.Errorf("delete waited %s for a running exec", d)
		}
		select {
		case code := <-hung:
			if code == 0 {
				t.Error("the exec cut short by delete reported success")
			}
		case <-time.After(10 * time.Second):
			t.Error("the exec did not end when its sandbox was deleted")
		}
		waitNoProcs(t, sleep, 5*time.Second)
	})
}

// Over TLS: the client that trusts the gateway's certificate and sends the
// token gets through; one that does not trust it fails the handshake.
func TestGatewayTLS(t *testing.T) {
	id := gatewayIdent(t)
	dir := mkdir(t, id, "gwtls")
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "corral-gateway-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeFile(t, id, certFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), 0o644)
	writeFile(t, id, keyFile, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})), 0o600)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	startGatewayArgs(t, dir, addr, []string{"--tls-cert", certFile, "--tls-key", keyFile})
	tok, _ := os.ReadFile(filepath.Join(dir, "token"))
	ctx := context.Background()
	c, err := gateway.Client("https://"+addr, strings.TrimSpace(string(tok)), certFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListSandboxes(ctx, connect.NewRequest(&gw.ListSandboxesRequest{})); err != nil {
		t.Errorf("trusted TLS client with the token: %v", err)
	}
	untrusting, _ := gateway.Client("https://"+addr, strings.TrimSpace(string(tok)), "")
	if _, err := untrusting.ListSandboxes(ctx, connect.NewRequest(&gw.ListSandboxesRequest{})); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a client that does not trust the certificate: %v", err)
	}
	plain, _ := gateway.Client("http://"+addr, strings.TrimSpace(string(tok)), "")
	if _, err := plain.ListSandboxes(ctx, connect.NewRequest(&gw.ListSandboxesRequest{})); err == nil {
		t.Error("a cleartext request to the TLS gateway succeeded")
	}
}

// An exec whose command leaves a process running that holds its stdout
// ends when the command does (after a short grace, with a warning), the
// process lives on in the sandbox, and the sandbox can be deleted.
func TestGatewayExecBackground(t *testing.T) {
	eachGatewayProvider(t, func(t *testing.T, p *gwProvider) {
		dir := p.dir(t, "gwbg")
		wd := dockerWorkdir(t, p.id, "gwbg-wd")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		g := p.start(t, dir, "unix:"+filepath.Join(dir, "gw.sock"))
		c := g.client(t, "")
		sid := g.create(t, ctx, c, p.req(wd)).Id
		t0 := time.Now()
		out, code, err := execOut(ctx, c, sid, "sh", "-c", "sleep 1000 & echo started")
		if err != nil || code != 0 || !strings.Contains(out, "started") || time.Since(t0) > 20*time.Second {
			t.Errorf("exec leaving sleep behind: %q exit %d after %s (%v)", out, code, time.Since(t0).Round(time.Millisecond), err)
		}
		if out, code, err := execOut(ctx, c, sid, "sh", "-c", "ps -o comm | grep -c sleep"); err != nil || code != 0 || strings.TrimSpace(out) != "1" {
			t.Errorf("the background sleep: %q exit %d (%v), want it still running", out, code, err)
		}
		dctx, dcancel := context.WithTimeout(ctx, 60*time.Second)
		defer dcancel()
		if _, err := c.DeleteSandbox(dctx, connect.NewRequest(&gw.DeleteSandboxRequest{Id: sid})); err != nil {
			t.Errorf("delete after an exec that left a process: %v", err)
		}
	})
}

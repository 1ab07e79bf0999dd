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

	"github.com/corral-sandbox/corral/gateway"
	gw "github.com/corral-sandbox/corral/gateway/gen/corral/gateway/v1"
	"github.com/corral-sandbox/corral/gateway/gen/corral/gateway/v1/gatewayv1connect"
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

func gatewayIdent(t *testing.T) *ident {
	t.Helper()
	id := dockerIdents(t)[0]
	if !id.isRoot() {
		t.Skip("the gateway tests run the gateway as root")
	}
	return id
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

// checkConsistent asserts the gateway's invariants after a restart: no
// record claims ready for a sandbox that does not run, every container of
// the gateway has a record, and nothing else is left.
func checkConsistent(t *testing.T, ctx context.Context, c gatewayv1connect.SandboxServiceClient, dir, what string) {
	t.Helper()
	resp, err := c.ListSandboxes(ctx, connect.NewRequest(&gw.ListSandboxesRequest{}))
	if err != nil {
		t.Fatalf("%s: list: %v", what, err)
	}
	containers := managedContainers(t, dir)
	recs := map[string]string{}
	for _, s := range resp.Msg.Sandboxes {
		recs[s.Id] = s.Phase
		if s.Phase == "ready" {
			if !slices.Contains(containers, s.Id) {
				t.Errorf("%s: %s is ready but has no container", what, s.Id)
			} else if out, code, err := execOut(ctx, c, s.Id, "echo", "alive"); err != nil || code != 0 || !strings.Contains(out, "alive") {
				t.Errorf("%s: %s is ready but does not run commands: %q %d %v", what, s.Id, out, code, err)
			}
		}
		if s.Phase == "provisioning" || s.Phase == "stopping" || s.Phase == "deleting" {
			t.Errorf("%s: %s left in %s after reconciliation", what, s.Id, s.Phase)
		}
	}
	for _, id := range containers {
		if recs[id] != "ready" {
			t.Errorf("%s: container %s runs without a ready record (%q)", what, id, recs[id])
		}
	}
}

// A gateway killed with SIGKILL in the middle of create, exec, stop and
// delete, then restarted, ends consistent.
func TestGatewayCrashes(t *testing.T) {
	id := gatewayIdent(t)
	dir := mkdir(t, id, "gwcrash")
	wd := dockerWorkdir(t, id, "gwcrash-wd")
	sock := "unix:" + filepath.Join(dir, "gw.sock")
	ctx := context.Background()
	// A ready sandbox to stop, delete and exec in under faults.
	ready := func() string {
		g := startGateway(t, dir, sock)
		id := g.create(t, ctx, g.client(t, ""), createReq(wd)).Id
		g.kill()
		return id
	}
	for _, point := range []string{"create-after-intent", "create-after-provision", "create-after-start", "exec-started", "stop-after-intent", "delete-after-intent"} {
		var target string
		if !strings.HasPrefix(point, "create") {
			target = ready()
		}
		g := startGateway(t, dir, sock, gateway.FaultEnv+"="+point)
		c := g.client(t, "")
		var err error
		switch {
		case strings.HasPrefix(point, "create"):
			_, err = c.CreateSandbox(ctx, connect.NewRequest(createReq(wd)))
		case point == "exec-started":
			_, _, err = execOut(ctx, c, target, "sleep", "1000")
		case point == "stop-after-intent":
			_, err = c.StopSandbox(ctx, connect.NewRequest(&gw.StopSandboxRequest{Id: target}))
		case point == "delete-after-intent":
			_, err = c.DeleteSandbox(ctx, connect.NewRequest(&gw.DeleteSandboxRequest{Id: target}))
		}
		if err == nil {
			t.Errorf("%s: the call succeeded although the gateway was to die", point)
		}
		g.waitDead()
		g = startGateway(t, dir, sock)
		checkConsistent(t, ctx, g.client(t, ""), dir, point)
		if point == "delete-after-intent" {
			if _, err := g.client(t, "").GetSandbox(ctx, connect.NewRequest(&gw.GetSandboxRequest{Id: target})); connect.CodeOf(err) != connect.CodeNotFound {
				t.Errorf("%s: the interrupted delete was not finished: %v", point, err)
			}
		}
		g.kill()
	}
	// Clean up what is left (ready sandboxes).
	g := startGateway(t, dir, sock)
	c := g.client(t, "")
	resp, _ := c.ListSandboxes(ctx, connect.NewRequest(&gw.ListSandboxesRequest{}))
	for _, s := range resp.Msg.Sandboxes {
		_, _ = c.DeleteSandbox(ctx, connect.NewRequest(&gw.DeleteSandboxRequest{Id: s.Id}))
	}
	if left := managedContainers(t, dir); len(left) != 0 {
		t.Errorf("containers left: %v", left)
	}
}

// Load: N sandboxes (CORRAL_GATEWAY_LOAD, default 8) created, exec'd and
// deleted concurrently; nothing leaks; latency percentiles are logged (run
// with CORRAL_GATEWAY_LOAD=100 -v for the benchmark figures).
func TestGatewayLoad(t *testing.T) {
	id := gatewayIdent(t)
	n := 8
	if v, err := strconv.Atoi(os.Getenv("CORRAL_GATEWAY_LOAD")); err == nil && v > 0 {
		n = v
	}
	dir := mkdir(t, id, "gwload")
	wd := dockerWorkdir(t, id, "gwload-wd")
	g := startGateway(t, dir, "unix:"+filepath.Join(dir, "gw.sock"))
	c := g.client(t, "")
	ctx := context.Background()
	// Three rounds: the first warms the connection pools (to Docker, to
	// clients, whose size varies a little); a leak of even one fd per
	// sandbox would add 2n over the next two.
	stateDirs := func() int { ents, _ := os.ReadDir("/run/corral/docker-managed"); return len(ents) }
	dirsBefore := stateDirs()
	var fds [3]int
	var creates, execs []time.Duration
	for round := 0; round < 3; round++ {
		creates, execs = loadRound(t, ctx, c, wd, n)
		resp, err := c.ListSandboxes(ctx, connect.NewRequest(&gw.ListSandboxesRequest{}))
		if err != nil || len(resp.Msg.Sandboxes) != 0 {
			t.Errorf("rows left: %v %v", resp, err)
		}
		if left := managedContainers(t, dir); len(left) != 0 {
			t.Errorf("containers left: %v", left)
		}
		if n := stateDirs(); n > dirsBefore {
			t.Errorf("state dirs left: %d more than before", n-dirsBefore)
		}
		fds[round] = countFDs(g.cmd.Process.Pid)
	}
	if fds[2]-fds[0] >= n {
		t.Errorf("the gateway's fds grew from %d to %d to %d over two more rounds of %d sandboxes", fds[0], fds[1], fds[2], n)
	}
	t.Logf("%d sandboxes: create p50 %s p99 %s; exec p50 %s p99 %s", n, pct(creates, 50), pct(creates, 99), pct(execs, 50), pct(execs, 99))
}

// loadRound creates, execs in and deletes n sandboxes concurrently and
// returns the create and exec latencies.
func loadRound(t *testing.T, ctx context.Context, c gatewayv1connect.SandboxServiceClient, wd string, n int) (creates, execs []time.Duration) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, 3*n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			t0 := time.Now()
			resp, err := c.CreateSandbox(ctx, connect.NewRequest(createReq(wd)))
			if err != nil {
				errs <- fmt.Errorf("create %d: %w", i, err)
				return
			}
			t1 := time.Now()
			out, code, err := execOut(ctx, c, resp.Msg.Sandbox.Id, "echo", strconv.Itoa(i))
			t2 := time.Now()
			if err != nil || code != 0 || strings.TrimSpace(out) != strconv.Itoa(i) {
				errs <- fmt.Errorf("exec %d: %q %d %v", i, out, code, err)
			}
			if _, err := c.DeleteSandbox(ctx, connect.NewRequest(&gw.DeleteSandboxRequest{Id: resp.Msg.Sandbox.Id})); err != nil {
				errs <- fmt.Errorf("delete %d: %w", i, err)
			}
			mu.Lock()
			creates, execs = append(creates, t1.Sub(t0)), append(execs, t2.Sub(t1))
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	return creates, execs
}

func countFDs(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents)
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

// Policy revisions: new egress rules apply live to a running sandbox (the
// next request is decided by them); another change is refused as
// "requires recreate" unless asked, and then the sandbox is replaced; the
// history lists every revision and how it was applied.
func TestGatewayPolicy(t *testing.T) {
	id := gatewayIdent(t)
	dir := mkdir(t, id, "gwpol")
	wd := dockerWorkdir(t, id, "gwpol-wd")
	ctx := context.Background()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "upstream-ok") })}
	go srv.Serve(l)
	defer srv.Close()
	port := l.Addr().(*net.TCPAddr).Port
	polFor := func(host, limits string) string {
		return fmt.Sprintf("version: 1\nnetwork:\n  mode: proxy\n  allow: [{host: %s, ports: [%d]}]\n  allow_private: [{host: 127.0.0.1}]\n  hosts: {a.test: 127.0.0.1, b.test: 127.0.0.1}\n%s", host, port, limits)
	}
	g := startGateway(t, dir, "unix:"+filepath.Join(dir, "gw.sock"))
	c := g.client(t, "")
	sid := g.create(t, ctx, c, &gw.CreateSandboxRequest{Provider: "docker", Workdir: wd, PolicyYaml: polFor("a.test", "")}).Id
	defer c.DeleteSandbox(ctx, connect.NewRequest(&gw.DeleteSandboxRequest{Id: sid}))
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
	if _, err := c.Policies.SetPolicy(ctx, connect.NewRequest(&gw.SetPolicyRequest{Id: sid, PolicyYaml: polFor("b.test", ""), ExpectedRevision: 1})); connect.CodeOf(err) != connect.CodeAborted {
		t.Errorf("set at a stale revision: %v", err)
	}
	limits := "process: {limits: {pids: 64}}\n"
	if _, err := c.Policies.SetPolicy(ctx, connect.NewRequest(&gw.SetPolicyRequest{Id: sid, PolicyYaml: polFor("b.test", limits)})); connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "requires recreate") {
		t.Errorf("a limits change without recreate: %v", err)
	}
	sr, err = c.Policies.SetPolicy(ctx, connect.NewRequest(&gw.SetPolicyRequest{Id: sid, PolicyYaml: polFor("b.test", limits), Recreate: true}))
	if err != nil || sr.Msg.Policy.Applied != "recreated" || sr.Msg.Sandbox.Phase != "ready" {
		t.Fatalf("recreate: %v %v", sr, err)
	}
	var cg string
	for _, l := range sr.Msg.Sandbox.Layers {
		if l.Layer == "cgroups" {
			cg = l.Detail
		}
	}
	if !strings.Contains(cg, "pids 64") {
		t.Errorf("after recreate the cgroups layer (verified from outside) says %q, want pids 64", cg)
	}
	if out, code, err := execOut(ctx, c, sid, "echo", "alive"); err != nil || code != 0 || !strings.Contains(out, "alive") {
		t.Errorf("exec after recreate: %q %d %v", out, code, err)
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
}

// Interactive exec: stdin reaches the command as it is sent (the reply to
// one line comes before the next is sent), and a terminal has the size
// asked for.
func TestGatewayExecStream(t *testing.T) {
	id := gatewayIdent(t)
	dir := mkdir(t, id, "gwstream")
	wd := dockerWorkdir(t, id, "gwstream-wd")
	ctx := context.Background()
	g := startGateway(t, dir, "unix:"+filepath.Join(dir, "gw.sock"))
	c := g.client(t, "")
	sid := g.create(t, ctx, c, createReq(wd)).Id
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
	hung := make(chan int, 1)
	go func() {
		_, code, _ := execOut(ctx, c, sid, "sleep", "300")
		hung <- code
	}()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if len(hostProcsWith("sleep 300")) > 0 {
			break
		}
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

//go:build linux

package gateway_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/corral-sandbox/corral/gateway"
	gw "github.com/corral-sandbox/corral/gateway/gen/corral/gateway/v1"
	"github.com/corral-sandbox/corral/internal/testcert"
	"github.com/corral-sandbox/corral/internal/testorigin"
	"github.com/corral-sandbox/corral/provider/docker"
	"github.com/corral-sandbox/corral/provider/linux"
	"github.com/corral-sandbox/corral/qualify"
	"github.com/corral-sandbox/corral/store"
)

// getArg makes the test binary the client inside the sandboxes: a GET of
// argv[2] through the sandbox's proxy with "Authorization: Bearer
// $API_KEY" (the placeholder), printing the status and the body.
const getArg = "__gateway_test_get"

// TestMain lets the test binary be what the corral binary is to the
// gateway's providers (a linux sandbox's init and supervisor, docker's
// init and exec shim), and the client inside.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case linux.InitArg:
			linux.InitMain()
		case linux.HoldArg:
			linux.HoldMain()
		case linux.PersistArg:
			linux.PersistMain()
		case docker.InitArg:
			docker.InitMain(os.Args[2:])
		case docker.ExecArg:
			docker.ExecMain(os.Args[2:])
		case getArg:
			getMain(os.Args[2])
		}
	}
	dir, err := os.MkdirTemp("", "gateway-test-")
	if err != nil {
		panic(err)
	}
	os.Setenv(linux.StateDirEnv, filepath.Join(dir, "sandboxes"))
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func getMain(url string) {
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+os.Getenv("API_KEY"))
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(0)
	}
	b, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(b))
	os.Exit(0)
}

// gatewayT is a gateway served in this process on a unix socket, with
// its database and logs in dir; stop and start it again to restart it.
type gatewayT struct {
	dir      string
	p        gateway.Provider
	instance string
	st       *store.Store
	srv      *gateway.Server
	cancel   context.CancelFunc
	done     chan struct{}
	cl       *gateway.Clients
}

func (g *gatewayT) start(t *testing.T) *gateway.ReconcileReport {
	t.Helper()
	st, err := store.Open(filepath.Join(g.dir, "db", "gateway.db"))
	if err != nil {
		t.Fatal(err)
	}
	g.st = st
	g.srv = gateway.New(gateway.Config{Store: st, Providers: []gateway.Provider{g.p}, Instance: g.instance, Home: g.dir,
		LogDir: filepath.Join(g.dir, "logs"), Version: "test"})
	rep, err := g.srv.Reconcile(context.Background())
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	sock := filepath.Join(g.dir, "gw.sock")
	l, err := gateway.Listen("unix:"+sock, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel, g.done = cancel, make(chan struct{})
	go func() { _ = gateway.Serve(ctx, l, gateway.Handler(g.srv, "")); close(g.done) }()
	if g.cl, err = gateway.Client("unix:"+sock, "", ""); err != nil {
		t.Fatal(err)
	}
	return &rep
}

// stop ends the gateway as a SIGTERM does: the sandboxes live on.
func (g *gatewayT) stop() {
	if g.cancel == nil {
		return
	}
	g.cancel()
	<-g.done
	g.srv.Close()
	g.st.Close()
	g.cancel = nil
}

// testDir is a t.TempDir that the sandboxes' users can traverse (a
// linux sandbox's init reaches its workdir through it).
func testDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func secret(prefix string) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// A stored credential through the gateway, on linux and docker
// sandboxes: refused at create without its value (nothing made); the
// sandbox sees only its placeholder, the origin gets the value; a
// rotation changes the value under the same placeholder; the value and
// the revocation survive gateway restarts (the recovered session gets
// the stored value again); an expiry ends it; no response, event, log
// or audit line carries a value.
func TestGatewayCredentials(t *testing.T) {
	for _, name := range []string{"linux", "docker"} {
		t.Run(name, func(t *testing.T) {
			var p gateway.Provider = linux.New()
			if name == "docker" {
				p = docker.New()
				if hr := p.Probe(context.Background()); !hr.Available {
					if os.Getenv("CORRAL_TEST_DOCKER") == "1" {
						t.Fatalf("docker: %s", hr.Reason)
					}
					t.Skip("docker: " + hr.Reason)
				}
			}
			testCredentials(t, p)
		})
	}
}

// credOrigin is a TLS origin for api.cred.test on loopback, which logs
// the Authorization header of every request, and the network lines that
// allow it inspected.
type credOrigin struct {
	*testorigin.Server
	net string
	url string
}

// newCredOrigin makes the test's directories (dir; wd, the workdir) and
// its origin.
func newCredOrigin(t *testing.T) (dir, wd string, o *credOrigin) {
	t.Helper()
	dir = testDir(t)
	wd = filepath.Join(dir, "wd")
	if err := os.Mkdir(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "upstream-ca.pem")
	leaf, err := testcert.Issue(caFile, "api.cred.test")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := testorigin.Start("127.0.0.1", 0, &leaf, nil, func(r *http.Request) string { return r.Header.Get("Authorization") })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	srv.Mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello from the origin") })
	o = &credOrigin{Server: srv, url: fmt.Sprintf("https://api.cred.test:%d/v1/models", srv.Port)}
	o.net = "version: 1\nnetwork:\n  mode: proxy\n" + qualify.InspectNet(caFile, qualify.Inspected{Host: "api.cred.test", IP: srv.IP, Port: srv.Port, L7: "tls: inspect"})
	return dir, wd, o
}

// count is how many requests reached the origin; last the last one's
// Authorization.
func (o *credOrigin) count() int { return len(o.Requests()) }

func (o *credOrigin) last() string {
	r := o.Requests()
	if len(r) == 0 {
		return ""
	}
	return r[len(r)-1]
}

// credential is a credentials entry bound to the origin.
func (o *credOrigin) credential(name, source, env string) string {
	return fmt.Sprintf(`  - name: %s
    source: %s
    expose: {env: %s}
    shape: "sk-{random}"
    endpoints:
      - {host: api.cred.test, ports: [%d]}
`, name, source, env, o.Port)
}

// sandboxT is one gateway sandbox of a credential test, with the client
// binary inside.
type sandboxT struct {
	t      *testing.T
	g      *gatewayT
	id     string
	client string
	o      *credOrigin
	values *[]string // none may show in its output
}

func (sb *sandboxT) exec(args ...string) string {
	t := sb.t
	t.Helper()
	st, err := sb.g.cl.ExecSandbox(context.Background(), connect.NewRequest(&gw.ExecSandboxRequest{Id: sb.id, Args: args}))
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	var out strings.Builder
	for st.Receive() {
		out.Write(st.Msg().GetStdout())
		out.Write(st.Msg().GetStderr())
	}
	if err := st.Err(); err != nil {
		t.Fatalf("exec %q: %v", args, err)
	}
	if sb.values != nil {
		assertNoValue(t, "exec output", out.String(), *sb.values)
	}
	return out.String()
}

// env is the sandbox's variable name.
func (sb *sandboxT) env(name string) string { return sb.exec("sh", "-c", `printf %s "$`+name+`"`) }

// call makes the client inside send $API_KEY to the origin: want is the
// value the origin must get, "" when the proxy must refuse it.
func (sb *sandboxT) call(want string) {
	t := sb.t
	t.Helper()
	before := sb.o.count()
	out := sb.exec(sb.client, getArg, sb.o.url)
	if want == "" { // refused by the proxy: the origin hears nothing new
		if strings.HasPrefix(out, "200 ") || sb.o.count() != before {
			t.Errorf("a revoked or expired credential's request got through: %s; the origin got %q", out, sb.o.last())
		}
		return
	}
	if !strings.HasPrefix(out, "200 ") || sb.o.last() != "Bearer "+want {
		t.Errorf("request: %q; the origin got %q, want the value given", out, sb.o.last())
	}
}

// clientIn is the client binary for p's sandboxes: a copy of this one in
// their workdir wd, which both providers show at its path.
func clientIn(t *testing.T, p gateway.Provider, wd string) string {
	t.Helper()
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	client := filepath.Join(wd, "client")
	if err := os.WriteFile(client, self, 0o755); err != nil {
		t.Fatal(err)
	}
	return client
}

func testCredentials(t *testing.T, p gateway.Provider) {
	ctx := context.Background()
	dir, wd, o := newCredOrigin(t)
	pol := o.net + "credentials:\n" + o.credential("api", "{stored: true}", "API_KEY")

	g := &gatewayT{dir: dir, p: p, instance: gateway.InstancePrefix + secret("t")[:17]}
	g.start(t)
	defer g.stop()
	var values []string // every value given: none may show anywhere but at the origin
	newValue := func() string { v := secret("sk-real-"); values = append(values, v); return v }
	req := func(creds ...*gw.CredentialValue) *connect.Request[gw.CreateSandboxRequest] {
		return connect.NewRequest(&gw.CreateSandboxRequest{Provider: p.Name(), Workdir: wd, PolicyYaml: pol, Credentials: creds})
	}

	// Refused before anything is made: no value, a value for a name the
	// policy lacks, a value too short for the reflection guard.
	for what, r := range map[string]*connect.Request[gw.CreateSandboxRequest]{
		"no value":     req(),
		"unknown name": req(&gw.CredentialValue{Name: "api", Value: newValue()}, &gw.CredentialValue{Name: "other", Value: newValue()}),
		"short value":  req(&gw.CredentialValue{Name: "api", Value: "short"}),
		"twice":        req(&gw.CredentialValue{Name: "api", Value: newValue()}, &gw.CredentialValue{Name: "api", Value: newValue()}),
	} {
		_, err := g.cl.CreateSandbox(ctx, r)
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("create with %s: %v, want InvalidArgument", what, err)
		}
		assertNoValue(t, "create's error ("+what+")", fmt.Sprint(err), values)
	}
	if _, err := g.cl.CreateSandbox(ctx, req()); err == nil || !strings.Contains(err.Error(), "--credential api=") {
		t.Errorf("a missing stored value's error does not say how to give it: %v", err)
	}
	if l, err := g.cl.ListSandboxes(ctx, connect.NewRequest(&gw.ListSandboxesRequest{})); err != nil || len(l.Msg.Sandboxes) != 0 {
		t.Fatalf("refused creates left records: %v %v", l, err)
	}

	v1 := newValue()
	cr, err := g.cl.CreateSandbox(ctx, req(&gw.CredentialValue{Name: "api", Value: v1}))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	id := cr.Msg.Sandbox.Id
	defer func() { _, _ = g.cl.DeleteSandbox(ctx, connect.NewRequest(&gw.DeleteSandboxRequest{Id: id})) }()
	sb := &sandboxT{t: t, g: g, id: id, client: clientIn(t, p, wd), o: o}
	call := sb.call
	sb.values = &values
	placeholder := sb.env("API_KEY")
	if !strings.HasPrefix(placeholder, "sk-") || len(placeholder) < 20 {
		t.Fatalf("the sandbox's API_KEY is %q, want a placeholder of shape sk-{random}; env:\n%s", placeholder, sb.exec("env"))
	}
	status := func(want string) {
		t.Helper()
		l, err := g.cl.Credentials.ListCredentials(ctx, connect.NewRequest(&gw.ListCredentialsRequest{Id: id}))
		if err != nil {
			t.Fatalf("list credentials: %v", err)
		}
		if len(l.Msg.Credentials) != 1 || l.Msg.Credentials[0].Name != "api" || l.Msg.Credentials[0].State != want || l.Msg.Credentials[0].Source != "stored" {
			t.Errorf("credentials: %v, want api %s stored", l.Msg.Credentials, want)
		}
		b, _ := protojson.Marshal(l.Msg)
		assertNoValue(t, "ListCredentials", string(b), append(values, placeholder))
	}
	call(v1)
	status("active")

	// Rotation: a new value, the same placeholder.
	v2 := newValue()
	if _, err := g.cl.Credentials.SetCredential(ctx, connect.NewRequest(&gw.SetCredentialRequest{Id: id, Credential: &gw.CredentialValue{Name: "api", Value: v2}})); err != nil {
		t.Fatalf("set: %v", err)
	}
	call(v2)
	if ph := sb.env("API_KEY"); ph != placeholder {
		t.Errorf("the placeholder changed with the rotation: %q, was %q", ph, placeholder)
	}
	for what, r := range map[string]*gw.SetCredentialRequest{
		"unknown name": {Id: id, Credential: &gw.CredentialValue{Name: "nope", Value: newValue()}},
		"short value":  {Id: id, Credential: &gw.CredentialValue{Name: "api", Value: "short"}},
		"past expiry":  {Id: id, Credential: &gw.CredentialValue{Name: "api", Value: newValue(), Expires: "2001-01-01T00:00:00Z"}},
	} {
		_, err := g.cl.Credentials.SetCredential(ctx, connect.NewRequest(r))
		if err == nil {
			t.Errorf("set with %s accepted", what)
		}
		assertNoValue(t, "set's error ("+what+")", fmt.Sprint(err), values)
	}
	call(v2) // the refused sets changed nothing

	// A gateway restart: the adopted sandbox's proxy gets the stored value.
	g.stop()
	if rep := g.start(t); len(rep.Adopted) != 1 {
		t.Fatalf("restart: %+v, want the sandbox adopted", rep)
	}
	call(v2)
	if ph := sb.env("API_KEY"); ph != placeholder {
		t.Errorf("the placeholder changed with the restart: %q, was %q", ph, placeholder)
	}

	// Revocation holds across a restart too.
	if _, err := g.cl.Credentials.RevokeCredential(ctx, connect.NewRequest(&gw.RevokeCredentialRequest{Id: id, Name: "api"})); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	call("")
	status("revoked")
	g.stop()
	if rep := g.start(t); len(rep.Adopted) != 1 {
		t.Fatalf("restart: %+v, want the sandbox adopted", rep)
	}
	call("")
	status("revoked")

	// A set ends the revocation; an expiry ends the credential, also
	// after a stop and a start (which keeps the placeholder).
	v3 := newValue()
	exp := time.Now().Add(4 * time.Second).UTC()
	if _, err := g.cl.Credentials.SetCredential(ctx, connect.NewRequest(&gw.SetCredentialRequest{Id: id, Credential: &gw.CredentialValue{Name: "api", Value: v3, Expires: exp.Format(time.RFC3339)}})); err != nil {
		t.Fatalf("set with expiry: %v", err)
	}
	call(v3)
	status("active")
	time.Sleep(time.Until(exp) + time.Second)
	call("")
	status("expired")
	if _, err := g.cl.StopSandbox(ctx, connect.NewRequest(&gw.StopSandboxRequest{Id: id})); err != nil {
		t.Fatal(err)
	}
	status("expired")
	if _, err := g.cl.StartSandbox(ctx, connect.NewRequest(&gw.StartSandboxRequest{Id: id})); err != nil {
		t.Fatal(err)
	}
	if ph := sb.env("API_KEY"); ph != placeholder {
		t.Errorf("the placeholder changed with a stop and start: %q, was %q", ph, placeholder)
	}
	call("")
	status("expired")

	// Nothing the gateway says or writes holds a value.
	gs, err := g.cl.GetSandbox(ctx, connect.NewRequest(&gw.GetSandboxRequest{Id: id}))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := protojson.Marshal(gs.Msg)
	assertNoValue(t, "GetSandbox (record and events)", string(b), values)
	if !strings.Contains(string(b), "credential") {
		t.Errorf("no event records the credential changes: %s", b)
	}
	_ = filepath.Walk(filepath.Join(dir, "logs"), func(path string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			b, _ := os.ReadFile(path)
			assertNoValue(t, path, string(b), values)
		}
		return nil
	})
	// The database keeps only the value in force; the revoked one is
	// gone from it and its WAL.
	for _, f := range []string{"gateway.db", "gateway.db-wal"} {
		b, _ := os.ReadFile(filepath.Join(dir, "db", f))
		assertNoValue(t, f, string(b), []string{v1, v2})
	}
	if _, err := g.cl.DeleteSandbox(ctx, connect.NewRequest(&gw.DeleteSandboxRequest{Id: id})); err != nil {
		t.Fatal(err)
	}
}

// Sources other than stored in a gateway sandbox: a file is read by the
// gateway at every start and takes no value from the caller; an env
// source is refused (the gateway's environment is not its caller's); a
// file gone when a restarted gateway adopts the sandbox makes that one
// lost, and the gateway serves on.
func TestGatewayCredentialSources(t *testing.T) {
	ctx := context.Background()
	dir, wd, o := newCredOrigin(t)
	keyFile := filepath.Join(dir, "key")
	value := secret("sk-file-")
	if err := os.WriteFile(keyFile, []byte(value+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := linux.New()
	g := &gatewayT{dir: dir, p: p, instance: gateway.InstancePrefix + secret("t")[:17]}
	g.start(t)
	defer g.stop()
	create := func(pol string, creds ...*gw.CredentialValue) (*connect.Response[gw.CreateSandboxResponse], error) {
		return g.cl.CreateSandbox(ctx, connect.NewRequest(&gw.CreateSandboxRequest{Provider: p.Name(), Workdir: wd, PolicyYaml: pol, Credentials: creds}))
	}
	envPol := o.net + "credentials:\n" + o.credential("api", "{env: CORRAL_TEST_GATEWAY_KEY}", "API_KEY")
	if _, err := create(envPol); connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "stored: true") {
		t.Errorf("an env source in a gateway sandbox: %v, want InvalidArgument pointing to stored", err)
	}
	pol := o.net + "credentials:\n" + o.credential("api", fmt.Sprintf("{file: %q}", keyFile), "API_KEY")
	if _, err := create(pol, &gw.CredentialValue{Name: "api", Value: secret("sk-given-")}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("a value for a file credential: %v, want InvalidArgument", err)
	}
	cr, err := create(pol)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	id := cr.Msg.Sandbox.Id
	defer func() { _, _ = g.cl.DeleteSandbox(ctx, connect.NewRequest(&gw.DeleteSandboxRequest{Id: id})) }()
	sb := &sandboxT{t: t, g: g, id: id, client: clientIn(t, p, wd), o: o, values: &[]string{value}}
	sb.call(value)
	_, err = g.cl.Credentials.SetCredential(ctx, connect.NewRequest(&gw.SetCredentialRequest{Id: id, Credential: &gw.CredentialValue{Name: "api", Value: secret("sk-new-")}}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("set of a file credential: %v, want FailedPrecondition", err)
	}
	l, err := g.cl.Credentials.ListCredentials(ctx, connect.NewRequest(&gw.ListCredentialsRequest{Id: id}))
	if err != nil || len(l.Msg.Credentials) != 1 || l.Msg.Credentials[0].Source != "file" {
		t.Errorf("list: %v, %v", l, err)
	}
	g.stop()
	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	rep := g.start(t)
	if len(rep.Lost) != 1 || rep.Lost[0] != id {
		t.Fatalf("restart with the source gone: %+v, want the sandbox lost", rep)
	}
	gs, err := g.cl.GetSandbox(ctx, connect.NewRequest(&gw.GetSandboxRequest{Id: id}))
	if err != nil || gs.Msg.Sandbox.Phase != "error" || !strings.Contains(gs.Msg.Sandbox.Reason, "api") {
		t.Errorf("the sandbox after its source went: %v, %v", gs, err)
	}
}

// A recreate that adds a stored credential takes its value with the new
// policy (refused without one, or without --recreate); the credential
// the sandbox had keeps its placeholder and value; one the policy drops
// is gone from the store.
func TestGatewayCredentialRecreate(t *testing.T) {
	ctx := context.Background()
	dir, wd, o := newCredOrigin(t)
	p := linux.New()
	g := &gatewayT{dir: dir, p: p, instance: gateway.InstancePrefix + secret("t")[:17]}
	g.start(t)
	defer g.stop()
	v1, v2 := secret("sk-one-"), secret("sk-two-")
	pol1 := o.net + "credentials:\n" + o.credential("api", "{stored: true}", "API_KEY")
	cr, err := g.cl.CreateSandbox(ctx, connect.NewRequest(&gw.CreateSandboxRequest{Provider: p.Name(), Workdir: wd, PolicyYaml: pol1,
		Credentials: []*gw.CredentialValue{{Name: "api", Value: v1}}}))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	id := cr.Msg.Sandbox.Id
	defer func() { _, _ = g.cl.DeleteSandbox(ctx, connect.NewRequest(&gw.DeleteSandboxRequest{Id: id})) }()
	sb := &sandboxT{t: t, g: g, id: id, client: clientIn(t, p, wd), o: o, values: &[]string{v1, v2}}
	placeholder := sb.env("API_KEY")
	// The second credential goes to the same origin under another header.
	pol2 := pol1 + strings.Replace(o.credential("second", "{stored: true}", "SECOND_KEY"), "ports: [", `header: "X-Second: {}", ports: [`, 1)
	set := func(pol string, recreate bool, creds ...*gw.CredentialValue) error {
		_, err := g.cl.Policies.SetPolicy(ctx, connect.NewRequest(&gw.SetPolicyRequest{Id: id, PolicyYaml: pol, Recreate: recreate, Credentials: creds}))
		return err
	}
	if err := set(pol2, true); connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "second") {
		t.Errorf("a recreate adding a stored credential without its value: %v", err)
	}
	if err := set(pol2, false, &gw.CredentialValue{Name: "second", Value: v2}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("credential values without --recreate: %v", err)
	}
	if err := set(pol2, true, &gw.CredentialValue{Name: "second", Value: v2}); err != nil {
		t.Fatalf("recreate: %v", err)
	}
	if ph := sb.env("API_KEY"); ph != placeholder {
		t.Errorf("the recreate changed api's placeholder: %q, was %q", ph, placeholder)
	}
	sb.call(v1)
	if ph := sb.env("SECOND_KEY"); !strings.HasPrefix(ph, "sk-") {
		t.Errorf("SECOND_KEY is %q", ph)
	}
	if err := set(pol1, true); err != nil {
		t.Fatalf("recreate without the second: %v", err)
	}
	sb.call(v1)
	l, err := g.cl.Credentials.ListCredentials(ctx, connect.NewRequest(&gw.ListCredentialsRequest{Id: id}))
	if err != nil || len(l.Msg.Credentials) != 1 {
		t.Errorf("after dropping one: %v, %v", l, err)
	}
	for _, f := range []string{"gateway.db", "gateway.db-wal"} {
		b, _ := os.ReadFile(filepath.Join(dir, "db", f))
		assertNoValue(t, f+" after the policy dropped its credential", string(b), []string{v2})
	}
}

func assertNoValue(t *testing.T, where, s string, values []string) {
	t.Helper()
	for _, v := range values {
		if v != "" && strings.Contains(s, v) {
			t.Errorf("%s holds a credential value or placeholder %.12s...", where, v)
		}
	}
}

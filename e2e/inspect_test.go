//go:build linux

package e2e

// Inspected egress, end to end: real clients in real sandboxes reach
// loopback HTTPS origins through the proxy, which terminates their TLS
// with the sandbox's CA (the only way they can succeed: the sandbox does
// not trust the origins' own CA, which only the proxy gets, through
// network.upstream_ca) and decides each request by the allow entry's L7
// rules. Each test checks what the client got (status, protocol, the
// JSON denial) and what reached the origin (only what the rules allow).

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/corral-sandbox/corral/qualify"
)

// curlReq is a shell function: `req LABEL CURL-ARGS...` prints
// "LABEL: STATUS HTTP-VERSION BODY" (the body on one line).
const curlReq = `req() { l=$1; shift; r=$(curl -sS -m 20 -o body -w '%{http_code} %{http_version}' "$@" 2>err); echo "$l: $r $(cat body err 2>/dev/null | tr '\n' ' ')"; rm -f body err; }
`

// TestInspectCurl: curl over HTTP/1.1 and HTTP/2 through the inspecting
// proxy (access: read-only): GETs pass, over h2 end to end when the client
// asks for it and the origin speaks it (the proxy's own leg is h2 to such
// an origin whatever the client speaks; to an HTTP/1.1-only origin both
// legs stay HTTP/1.1), POST and DELETE are refused with the JSON denial
// and never reach the origin, and curl trusts the sandbox's CA from the
// distro bundle path alone too.
func TestInspectCurl(t *testing.T) {
	needTool(t, "curl")
	eachIdent(t, func(t *testing.T, id *ident) { curlCase(t, id, nil) })
}

// TestInspectCurlDocker is TestInspectCurl in a container: the host's
// curl in an image of its own (curlImage).
func TestInspectCurlDocker(t *testing.T) {
	needTool(t, "curl")
	eachDockerIdent(t, func(t *testing.T, id *ident) {
		curlCase(t, id, []string{"--provider", "docker", "--image", curlImage(t)})
	})
}

func curlCase(t *testing.T, id *ident, flags []string) {
	o := newOrigin(t, "api.allowed.test", "127.0.0.21", true)
	o1 := newOrigin(t, "tls.allowed.test", "127.0.0.22", false)
	n := qualify.InspectNet(upstreamCAFile(t, id), o.inspected("access: read-only"), o1.inspected("access: read-only"))
	script := curlReq + fmt.Sprintf(`req get1 --http1.1 %[1]s
req get2 --http2 %[2]s
req post1 --http1.1 -X POST -d x %[3]s
req post2 --http2 -X POST -d x %[3]s
req delete2 --http2 -X DELETE %[3]s
req h1only --http2 %[4]s
(unset CURL_CA_BUNDLE SSL_CERT_FILE SSL_CERT_DIR; req distro --http2 %[5]s)
`, o.url("/r/get1"), o.url("/r/get2"), o.url("/r/write"), o1.url("/r/h1only"), o.url("/r/distro"))
	res, _ := inspectRun(t, id, n, nil, flags, script)
	expectLines(t, res, "get1: 200 1.1 origin-ok GET /r/get1 HTTP/2.0", "get2: 200 2 origin-ok GET /r/get2 HTTP/2.0",
		"post1: 403 1.1 {*", "post2: 403 2 {*", "delete2: 403 2 {*",
		"h1only: 200 1.1 origin-ok GET /r/h1only HTTP/1.1", "distro: 200 2 origin-ok GET /r/distro HTTP/2.0")
	for _, l := range []string{"post1", "post2", "delete2"} {
		if d := denial(t, res, l, o); d.Reason != "" && !strings.Contains(d.Reason, "read-only") {
			t.Errorf("%s: reason %q does not name the access preset", l, d.Reason)
		}
	}
	o.assertRequests(t, "GET /r/get1 HTTP/2.0", "GET /r/get2 HTTP/2.0", "GET /r/distro HTTP/2.0")
	o1.assertRequests(t, "GET /r/h1only HTTP/1.1")
}

// inspectRepo serves, under /git/ of o, the bare repository of
// makeGitRepo with pushes enabled (so that only the proxy's rules can
// refuse one), and returns its canary and path.
func inspectRepo(t *testing.T, o *origin) (canary, bare string) {
	t.Helper()
	canary, bare, g := pushableRepo(t)
	o.mux.Handle("/git/", g)
	return canary, bare
}

// pushableRepo is makeGitRepo's repository with pushes enabled: its
// canary, its path and its git http-backend, to serve under /git/.
func pushableRepo(t *testing.T) (canary, bare string, h http.Handler) {
	t.Helper()
	u := &qualify.Upstream{Mux: http.NewServeMux()}
	canary = makeGitRepo(t, u)
	h, _ = u.Mux.Handler(httptest.NewRequest("GET", "/git/repo.git/info/refs", nil))
	bare = filepath.Join(h.(*cgiHandler).root, "repo.git")
	if out, err := exec.Command("git", "--git-dir", bare, "config", "http.receivepack", "true").CombinedOutput(); err != nil {
		t.Fatalf("git config: %v\n%s", err, out)
	}
	return canary, bare, h
}

// TestInspectGit: Debian's git (GnuTLS) clones over https through the
// proxy with rules that allow exactly the fetch side of smart HTTP (the
// ref advertisement for git-upload-pack and its POSTs); a push, which
// the origin would accept, is refused by the proxy and never reaches it.
// access: read-only alone refuses the clone's POST (git reads with POST).
func TestInspectGit(t *testing.T) {
	needTool(t, "git")
	eachIdent(t, func(t *testing.T, id *ident) {
		o := newOrigin(t, "git.allowed.test", "127.0.0.23", true)
		canary, bare := inspectRepo(t, o)
		head := func() string {
			out, err := exec.Command("git", "--git-dir", bare, "rev-parse", "main").Output()
			if err != nil {
				t.Fatalf("git rev-parse: %v", err)
			}
			return strings.TrimSpace(string(out))
		}
		before := head()
		n := qualify.InspectNet(upstreamCAFile(t, id), o.inspected(`rules: [{method: GET, path: "/**/info/refs", query: {service: git-upload-pack}}, {method: POST, path: "/**/git-upload-pack"}]`))
		script := fmt.Sprintf(`git clone -q %s clone > clone.out 2>&1; echo "clone: $(cat clone/README 2>&1) $(tr '\n' ' ' < clone.out)"
cd clone && echo more > more && git add more && git -c user.name=e2e -c user.email=e2e@example.invalid commit -qm more &&
if git push -q origin HEAD:main > ../push.out 2>&1; then echo "push: pushed"; else echo "push: refused $(tr '\n' ' ' < ../push.out)"; fi
`, o.url("/git/repo.git"))
		res, _ := inspectRun(t, id, n, nil, nil, script)
		expectLines(t, res, "clone: "+canary+"*", "push: refused*")
		if v, _ := lineValue(res.stdout, "push"); !strings.Contains(v, "403") {
			t.Errorf("push: want the proxy's 403 in git's error, got %q", v)
		}
		if after := head(); after != before {
			t.Errorf("the origin's main moved from %s to %s: the push went through", before, after)
		}
		var refs, packs int
		for _, r := range o.requests() {
			switch {
			case strings.HasPrefix(r, "GET /git/repo.git/info/refs?service=git-upload-pack "):
				refs++
			case strings.HasPrefix(r, "POST /git/repo.git/git-upload-pack "):
				packs++
			default:
				t.Errorf("the origin received %q, which the rules do not allow", r)
			}
		}
		if refs == 0 || packs == 0 {
			t.Errorf("the clone's requests did not reach the origin: %q", o.requests())
		}

		// access: read-only alone does not clone: git fetches with POST.
		seen := len(o.requests())
		n = qualify.InspectNet(upstreamCAFile(t, id), o.inspected("access: read-only"))
		res, _ = inspectRun(t, id, n, nil, nil, fmt.Sprintf(`git clone -q %s clone > clone.out 2>&1; echo "clone: $? $(tr '\n' ' ' < clone.out)"`, o.url("/git/repo.git")))
		expectLines(t, res, "clone: 128 *")
		if v, _ := lineValue(res.stdout, "clone"); !strings.Contains(v, "403") {
			t.Errorf("clone with access: read-only: want the proxy's 403 in git's error, got %q", v)
		}
		if got := o.requests()[seen:]; len(got) != 1 || !strings.HasPrefix(got[0], "GET /git/repo.git/info/refs?service=git-upload-pack ") {
			t.Errorf("with access: read-only the origin received %q, want only the ref advertisement", got)
		}
	})
}

const pyClient = `import sys, urllib.request, urllib.error
base = sys.argv[1]
def show(label, status, body):
    print("%s: %s %s" % (label, status, body.strip().replace("\n", " ")))
def get(label, req):
    try:
        r = urllib.request.urlopen(req, timeout=20)
        show(label, r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        show(label, e.code, e.read().decode())
    except Exception as e:
        show(label, "error", repr(e))
get("urllib-get", base + "/py/get")
get("urllib-post", urllib.request.Request(base + "/py/post", data=b"x", method="POST"))
get("urllib-deny", base + "/py/secret/key")
try:
    import requests
except ImportError:
    print("requests: not importable")
    sys.exit(0)
for label, method, path in (("requests-get", "GET", "/py/rget"), ("requests-put", "PUT", "/py/rput")):
    try:
        r = requests.request(method, base + path, data=b"x" if method != "GET" else None, timeout=20)
        show(label, r.status_code, r.text)
    except Exception as e:
        show(label, "error", repr(e))
`

// TestInspectPython: Python's urllib, and requests when the host's
// python3 has it, through the proxy: GETs under /py/ pass, other methods
// and the deny_rules' subtree are refused with the JSON denial.
func TestInspectPython(t *testing.T) {
	needTool(t, python)
	hasRequests := exec.Command(python, "-c", "import requests").Run() == nil
	if !hasRequests {
		t.Log("python3 has no requests module here: urllib only (Debian: python3-requests)")
	}
	eachIdent(t, func(t *testing.T, id *ident) {
		o := newOrigin(t, "api.allowed.test", "127.0.0.24", false)
		n := qualify.InspectNet(upstreamCAFile(t, id), o.inspected(`rules: [{method: GET, path: "/py/**"}], deny_rules: [{path: "/py/secret/**"}]`))
		dir := mkdir(t, id, "pyclient")
		writeFile(t, id, filepath.Join(dir, "client.py"), pyClient, 0o644)
		res, _ := inspectRun(t, id, n, []string{dir}, nil, fmt.Sprintf("%s %s/client.py %s", python, dir, o.url("")))
		lines := []string{"urllib-get: 200 origin-ok GET /py/get HTTP/1.1", "urllib-post: 403 {*", "urllib-deny: 403 {*"}
		reqs := []string{"GET /py/get HTTP/1.1"}
		if hasRequests {
			lines = append(lines, "requests-get: 200 origin-ok GET /py/rget HTTP/1.1", "requests-put: 403 {*")
			reqs = append(reqs, "GET /py/rget HTTP/1.1")
		}
		expectLines(t, res, lines...)
		denial(t, res, "urllib-post", o)
		if d := denial(t, res, "urllib-deny", o); d.Reason != "" && !strings.Contains(d.Reason, "/py/secret/**") {
			t.Errorf("urllib-deny: reason %q does not name the deny rule", d.Reason)
		}
		if hasRequests {
			denial(t, res, "requests-put", o)
		}
		o.assertRequests(t, reqs...)
	})
}

const nodeClient = `const https = require('https');
const base = process.argv[2];
const show = (label, status, body) => console.log(label + ': ' + status + ' ' + String(body).trim().replace(/\n/g, ' '));
async function viaFetch(label, method, path) {
  try {
    const r = await fetch(base + path, {method, body: method === 'GET' ? undefined : 'x'});
    show(label, r.status, await r.text());
  } catch (e) { show(label, 'error', e + ' ' + (e.cause || '')); }
}
function viaHTTPS(label, method, path) {
  return new Promise(done => {
    const q = https.request(base + path, {method}, r => {
      let b = ''; r.on('data', d => b += d); r.on('end', () => { show(label, r.statusCode, b); done(); });
    });
    q.on('error', e => { show(label, 'error', e.message); done(); });
    q.end(method === 'GET' ? undefined : 'x');
  });
}
(async () => {
  await viaFetch('fetch-get', 'GET', '/n/fget');
  await viaFetch('fetch-post', 'POST', '/n/fpost');
  await viaHTTPS('https-get', 'GET', '/n/hget');
  await viaHTTPS('https-delete', 'DELETE', '/n/hdelete');
})();
`

// TestInspectNode: the newest Node here (the OpenClaw install's Node 24,
// else node on PATH) through the proxy with fetch and https.request, both
// on the environment corral sets (HTTPS_PROXY, NODE_USE_ENV_PROXY,
// NODE_EXTRA_CA_CERTS): GETs pass, a POST and a DELETE are refused.
func TestInspectNode(t *testing.T) {
	node, version, why := nodeWithEnvProxy(t)
	if node == "" {
		t.Skip(why)
	}
	t.Logf("node: %s (%s)", node, version)
	eachIdent(t, func(t *testing.T, id *ident) {
		o := newOrigin(t, "api.allowed.test", "127.0.0.25", true)
		n := qualify.InspectNet(upstreamCAFile(t, id), o.inspected("access: read-only"))
		dir := mkdir(t, id, "nodeclient")
		writeFile(t, id, filepath.Join(dir, "client.js"), nodeClient, 0o644)
		res, _ := inspectRun(t, id, n, []string{dir}, nil, fmt.Sprintf("%s %s/client.js %s", node, dir, o.url("")))
		expectLines(t, res, "fetch-get: 200 origin-ok GET /n/fget HTTP/2.0", "https-get: 200 origin-ok GET /n/hget HTTP/2.0",
			"fetch-post: 403 {*", "https-delete: 403 {*")
		denial(t, res, "fetch-post", o)
		denial(t, res, "https-delete", o)
		o.assertRequests(t, "GET /n/fget HTTP/2.0", "GET /n/hget HTTP/2.0")
	})
}

// healthServer is the gRPC origin's service: Check("ok") answers SERVING
// with a header and a trailer, another Check fails with NotFound, Watch
// streams three statuses and ends with Aborted and a trailer, List (which
// the rules refuse) would answer.
type healthServer struct {
	healthpb.UnimplementedHealthServer
	tok  string
	mu   sync.Mutex
	seen []string // full method names and the client's x-e2e-token
}

func (s *healthServer) log(ctx context.Context, method string) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	s.seen = append(s.seen, method+" "+strings.Join(md.Get("x-e2e-token"), ","))
	s.mu.Unlock()
}

func (s *healthServer) Check(ctx context.Context, in *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if in.Service != "ok" {
		return nil, status.Errorf(codes.NotFound, "unknown service %s %s", in.Service, s.tok)
	}
	grpc.SetHeader(ctx, metadata.Pairs("x-e2e-header", s.tok))
	grpc.SetTrailer(ctx, metadata.Pairs("x-e2e-trailer", s.tok))
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (s *healthServer) Watch(in *healthpb.HealthCheckRequest, st grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	for _, v := range []healthpb.HealthCheckResponse_ServingStatus{healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING, healthpb.HealthCheckResponse_SERVING} {
		if err := st.Send(&healthpb.HealthCheckResponse{Status: v}); err != nil {
			return err
		}
	}
	st.SetTrailer(metadata.Pairs("x-e2e-trailer", s.tok))
	return status.Errorf(codes.Aborted, "watch over %s", s.tok)
}

func (s *healthServer) List(context.Context, *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	return &healthpb.HealthListResponse{}, nil
}

// TestInspectGRPC: a grpc-go client (inspectclient, run in the sandbox)
// calls a grpc-go server through the proxy over HTTP/2 end to end: a
// unary call with its header and trailer, a unary call's error status, a
// server-streaming call's messages, final status and trailer; a method
// the rules do not allow fails with PermissionDenied and never reaches
// the server.
func TestInspectGRPC(t *testing.T) {
	dir, bin := inspectClient(t)
	eachIdent(t, func(t *testing.T, id *ident) {
		_, leaf := caCert(t)
		ln, err := net.Listen("tcp", "127.0.0.26:0")
		if err != nil {
			t.Fatal(err)
		}
		hs := &healthServer{tok: token()}
		srv := grpc.NewServer(grpc.Creds(credentials.NewServerTLSFromCert(&leaf)),
			grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				hs.log(ctx, info.FullMethod)
				return h(ctx, req)
			}),
			grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				hs.log(ss.Context(), info.FullMethod)
				return h(srv, ss)
			}))
		healthpb.RegisterHealthServer(srv, hs)
		go srv.Serve(ln)
		t.Cleanup(srv.Stop)
		port := ln.Addr().(*net.TCPAddr).Port
		h := qualify.Inspected{Host: "api.allowed.test", IP: "127.0.0.26", Port: port,
			L7: `rules: [{method: POST, path: /grpc.health.v1.Health/Check}, {method: POST, path: /grpc.health.v1.Health/Watch}]`}
		n := qualify.InspectNet(upstreamCAFile(t, id), h)
		userTok := token()
		res, _ := inspectRun(t, id, n, []string{dir}, nil, fmt.Sprintf("%s grpc api.allowed.test:%d %s", bin, port, userTok))
		tok := hs.tok
		expectLines(t, res, fmt.Sprintf("unary: SERVING header=%s trailer=%s", tok, tok), "unary-error: NotFound unknown service missing "+tok,
			fmt.Sprintf("stream: SERVING,NOT_SERVING,SERVING,end=Aborted watch over %s trailer=%s", tok, tok), "denied: PermissionDenied*")
		if v, _ := lineValue(res.stdout, "denied"); !strings.Contains(v, "403") {
			t.Errorf("denied: want the proxy's 403 in the status message, got %q", v)
		}
		hs.mu.Lock()
		seen := strings.Join(hs.seen, "\n")
		hs.mu.Unlock()
		m := "/grpc.health.v1.Health/"
		if want := strings.Join([]string{m + "Check " + userTok, m + "Check " + userTok, m + "Watch " + userTok}, "\n"); seen != want {
			t.Errorf("the server saw:\n%s\nwant:\n%s", seen, want)
		}
	})
}

// wsEchoHandler accepts a WebSocket and echoes one text message with
// "echo " before it.
func wsEchoHandler(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	typ, b, err := c.Read(ctx)
	if err != nil {
		return
	}
	if c.Write(ctx, typ, append([]byte("echo "), b...)) == nil {
		c.Close(websocket.StatusNormalClosure, "")
	}
}

const nodeWS = `const [u, denied] = process.argv.slice(2);
function open(label, url) {
  return new Promise(done => {
    const ws = new WebSocket(url);
    ws.onopen = () => ws.send('node-ws');
    ws.onmessage = e => { console.log(label + ': ' + e.data); ws.close(); done(); };
    ws.onerror = e => { console.log(label + ': error ' + (e.message || e.error)); done(); };
  });
}
(async () => { await open('node-ws', u); await open('node-ws-denied', denied); })();
`

// TestInspectWebSocket: a WebSocket (coder/websocket in the sandbox and
// at the origin; Node's WebSocket too when Node reads the proxy
// environment) upgrades through the proxy when the rules allow its GET
// and echoes a message; the upgrade of a path the rules do not name is
// refused (with the JSON denial, which Node's WebSocket API does not
// show) and never reaches the origin.
func TestInspectWebSocket(t *testing.T) {
	dir, bin := inspectClient(t)
	node, version, why := nodeWithEnvProxy(t)
	if node == "" {
		t.Log("no Node WebSocket client: " + why)
	} else {
		t.Logf("node: %s (%s)", node, version)
	}
	eachIdent(t, func(t *testing.T, id *ident) {
		o := newOrigin(t, "api.allowed.test", "127.0.0.27", true)
		o.mux.HandleFunc("/ws", wsEchoHandler)
		o.mux.HandleFunc("/ws-denied", wsEchoHandler)
		n := qualify.InspectNet(upstreamCAFile(t, id), o.inspected(`rules: [{method: GET, path: /ws}]`))
		wss := func(p string) string { return "wss" + strings.TrimPrefix(o.url(p), "https") }
		script := fmt.Sprintf("%s ws %s %s", bin, wss("/ws"), wss("/ws-denied"))
		ro := []string{dir}
		lines := []string{"ws: 101 MessageText echo corral-ws-*", "ws-denied: 403 {*"}
		reqs := []string{"GET /ws HTTP/1.1"}
		if node != "" {
			js := mkdir(t, id, "nodews")
			writeFile(t, id, filepath.Join(js, "ws.js"), nodeWS, 0o644)
			script += fmt.Sprintf("; %s %s/ws.js %s %s", node, js, wss("/ws"), wss("/ws-denied"))
			ro = append(ro, js)
			lines = append(lines, "node-ws: echo node-ws", "node-ws-denied: error*")
			reqs = append(reqs, "GET /ws HTTP/1.1")
		}
		res, _ := inspectRun(t, id, n, ro, nil, script)
		expectLines(t, res, lines...)
		if v, _ := lineValue(res.stdout, "ws"); !strings.HasSuffix(v, "same=true") {
			t.Errorf("ws: the echo differs from the message sent: %q", v)
		}
		denial(t, res, "ws-denied", o)
		o.assertRequests(t, reqs...)
	})
}

// TestInspectSSE: an SSE stream through the proxy, HTTP/1.1 on both legs
// (an HTTP/1.1-only origin) and HTTP/2 on both: the origin sends its first
// event and then waits until that event is in the sandbox's file before it
// sends the second and ends, so the test passes only when the proxy relays
// the stream as it comes (a proxy that buffered the response would deliver
// nothing before the end, and the origin gives up waiting after 20 s).
func TestInspectSSE(t *testing.T) {
	needTool(t, "curl")
	eachIdent(t, func(t *testing.T, id *ident) {
		wd := mkdir(t, id, "sse")
		var mu sync.Mutex
		early := map[string]bool{} // stream -> its first event was inside before the origin ended it
		events := func(w http.ResponseWriter, r *http.Request) {
			name := strings.TrimPrefix(r.URL.Path, "/events/")
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "id: 1\ndata: first %s\n\n", name)
			w.(http.Flusher).Flush()
			seen := false
			for deadline := time.Now().Add(20 * time.Second); !seen && time.Now().Before(deadline) && r.Context().Err() == nil; {
				b, _ := os.ReadFile(filepath.Join(wd, name+".txt"))
				if seen = strings.Contains(string(b), "data: first "+name); !seen {
					time.Sleep(20 * time.Millisecond)
				}
			}
			mu.Lock()
			early[name] = seen
			mu.Unlock()
			fmt.Fprintf(w, "id: 2\ndata: second %s\n\n", name)
		}
		o1 := newOrigin(t, "tls.allowed.test", "127.0.0.28", false)
		o2 := newOrigin(t, "api.allowed.test", "127.0.0.29", true)
		o1.mux.HandleFunc("/events/", events)
		o2.mux.HandleFunc("/events/", events)
		n := qualify.InspectNet(upstreamCAFile(t, id), o1.inspected("access: read-only"), o2.inspected("access: read-only"))
		pol := writePolicy(t, id, policy{Network: "proxy", NetRules: n})
		logf := filepath.Join(mkdir(t, id, "sse-audit"), "audit.jsonl")
		script := fmt.Sprintf(`curl -sSN -m 40 --http1.1 %s > h1.txt 2>&1; echo "h1: $?"; curl -sSN -m 40 --http2 %s > h2.txt 2>&1; echo "h2: $?"`, o1.url("/events/h1"), o2.url("/events/h2"))
		res := corral(t, run{id: id, policy: pol, workdir: wd, flags: []string{"--audit", logf}, args: sh(script), timeout: 90 * time.Second})
		expectLines(t, res, "h1: 0", "h2: 0")
		inspected := inspectedEvents(t, logf)
		for s, proto := range map[string]string{"h1": "HTTP/1.1", "h2": "HTTP/2.0"} {
			got := readFile(t, filepath.Join(wd, s+".txt"))
			want := fmt.Sprintf("id: 1\ndata: first %s\n\nid: 2\ndata: second %s\n\n", s, s)
			if got != want {
				t.Errorf("%s stream in the sandbox: %q, want %q", s, got, want)
			}
			// The proxy read the stream it relayed: an inspected GET.
			if e := inspected["GET /events/"+s]; e == nil || e.HTTPRequest.Version != proto || e.HTTPResponse.Code != 200 || e.Traffic.BytesIn != int64(len(want)) {
				t.Errorf("%s: want an inspected GET /events/%s event, %s, code 200, bytes_in %d; got %+v", s, s, proto, len(want), e)
			}
			mu.Lock()
			ok := early[s]
			mu.Unlock()
			if !ok {
				t.Errorf("%s: the first event did not reach the sandbox before the origin ended the stream (buffered)", s)
			}
		}
		o1.assertRequests(t, "GET /events/h1 HTTP/1.1")
		o2.assertRequests(t, "GET /events/h2 HTTP/2.0")
	})
}

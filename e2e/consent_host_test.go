//go:build linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/qualify"
)

// consentHostClient is the host test's workload (the system python3,
// one process throughout): it opens a tunnel to the allowed host and
// sends one request on it; CONNECTs to the host it may ask for, denied
// 403 with a JSON body whose consent field is the request to make; makes
// that request (reason filled in) straight to the consent API, waits for
// the decision; CONNECTs again (now admitted) and sends a request; then
// sends a second request on the first tunnel, opened before the
// approval. It prints "key: value" lines and writes the files ask.json
// and wait.json.
const consentHostClient = `import json, os, socket, sys, time, urllib.request
allowed, asked = sys.argv[1], sys.argv[2]
direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
def consent(method, url, body=None):
    req = urllib.request.Request(url, data=body, method=method)
    try:
        r = direct.open(req, timeout=130)
        return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
def read_resp(f):
    status = f.readline().decode().strip()
    n = 0
    while True:
        l = f.readline().decode().strip()
        if not l:
            break
        k, _, v = l.partition(":")
        if k.lower() == "content-length":
            n = int(v)
    return status, f.read(n).decode()
def tunnel(target):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    f = s.makefile("rb")
    status, body = read_resp(f)
    return s, f, status, body
def get(s, f, target, path):
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (path, target)).encode())
    return read_resp(f)
while not os.path.exists("go"):
    consent("POST", os.environ["CORRAL_CONSENT_URL"] + "/v1/requests", b'{"kind":"folder","target":"/"}')
    time.sleep(0.1)
a, af, st, _ = tunnel(allowed)
print("allowed-connect:", st)
print("allowed-before:", get(a, af, allowed, "/before")[1].strip())
_, _, st, body = tunnel(asked)
print("denied-connect:", st)
hint = json.loads(body).get("consent", "")
print("hint:", hint)
method, url, req = hint.split(" ", 2)
req = json.loads(req)
req["reason"] = "fetch the docs"
code, body = consent(method, url, json.dumps(req).encode())
open("ask.json", "w").write(body)
print("ask-status:", code)
rid = json.loads(body)["id"]
code, body = consent("GET", os.environ["CORRAL_CONSENT_URL"] + "/v1/requests/%s/wait?timeout=120" % rid)
open("wait.json", "w").write(body)
g, gf, st, _ = tunnel(asked)
print("asked-connect:", st)
print("asked-after:", get(g, gf, asked, "/after")[1].strip())
print("allowed-after:", get(a, af, allowed, "/during")[1].strip())
`

// TestConsentHostGrant: with network proxy, a CONNECT to a host the
// ceiling lets the workload ask for (consent.hosts.ask; a loopback
// upstream named through network.hosts) is denied 403 with the consent
// hint in its body; the workload asks as the hint says, `corral
// approvals approve` makes the host a live proxy rule, and the same
// process reaches it without a restart; a tunnel to an already allowed
// host, opened before the approval, carries a request after it (the
// change only added a rule).
func TestConsentHostGrant(t *testing.T) {
	needTool(t, python)
	eachIdent(t, func(t *testing.T, id *ident) {
		ips := map[string][2]string{"root": {"127.0.0.171", "127.0.0.172"}, "user": {"127.0.0.173", "127.0.0.174"}}[id.name]
		al := newUpstream(t, ips[0], 0, false)
		as := newUpstream(t, ips[1], 0, false)
		n := qualify.Egress{
			Allow:   []qualify.Endpoint{ep("api.allowed.test", al.Port)},
			Private: []qualify.Endpoint{ep(al.IP+"/32", al.Port), ep(as.IP+"/32", as.Port)},
			Hosts:   map[string]string{"api.allowed.test": al.IP, "ask.consent.test": as.IP},
		}
		wd := consentWorkdir(t, id)
		writeFile(t, id, filepath.Join(wd, "client.py"), consentHostClient, 0o644)
		pol := writePolicy(t, id, policy{Network: "proxy", NetRules: n.YAML(),
			Credentials: consentSection(t, id, nil, nil, fmt.Sprintf("  hosts:\n    ask: [\"*.consent.test:%d\"]\n", as.Port))})
		allowed, asked := al.HostPort("api.allowed.test"), as.HostPort("ask.consent.test")
		c := startConsentRun(t, id, pol, wd, nil, fmt.Sprintf("exec %s client.py %s %s\n", python, allowed, asked))
		c.goAhead()
		r := c.pending(asked)
		if r.Kind != "host" || r.Reason != "fetch the docs" || r.Ceiling != "consent.hosts.ask[0]" {
			t.Errorf("the pending host request: %+v", r)
		}
		c.approve(r.ID, "")
		res := c.end()
		assertCode(t, res, 0)
		want(t, res, "allowed-connect", "HTTP/1.1 200", true)
		want(t, res, "allowed-before", "upstream-ok "+allowed+" /before", false)
		want(t, res, "denied-connect", "HTTP/1.1 403", true)
		want(t, res, "hint", `POST http://127.0.0.1:3129/v1/requests {"kind":"host","target":"`+asked+`"`, true)
		want(t, res, "ask-status", "202", false)
		want(t, res, "asked-connect", "HTTP/1.1 200", true)
		want(t, res, "asked-after", "upstream-ok "+asked+" /after", false)
		want(t, res, "allowed-after", "upstream-ok "+allowed+" /during", false)
		b, _ := os.ReadFile(filepath.Join(wd, "wait.json"))
		if !strings.Contains(string(b), `"state": "approved"`) || !strings.Contains(string(b), `"effective": true`) {
			t.Errorf("the wait's answer: %s", b)
		}
		if got := as.Requests(); len(got) != 1 || !strings.Contains(got[0], "/after") {
			t.Errorf("the asked host received %q, want only the request made after the approval", got)
		}
	})
}

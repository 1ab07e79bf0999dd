//go:build linux

package e2e

// The consent web page end to end (issue 17, part 6; docs/consent.md,
// "The web page"): a real `corral gateway serve` on loopback TCP, a linux
// sandbox whose workload asks for a folder while it runs, and Debian's
// headless chromium driven by playwright-core (e2e/web/approve.mjs)
// approving the request in the page. The workload that asked then reads
// the folder without a restart.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	browser "github.com/corral-sandbox/corral/e2e/web"
)

// lockedBuf is a strings.Builder safe for a writer goroutine and a
// reader.
type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// consentPageLine is what `corral gateway serve` prints of its page.
var consentPageLine = regexp.MustCompile(`consent page \(loopback only\): (http://\S+/ui/)\?token=\$\(cat (\S+)\)`)

// webWorkload is the script the sandbox runs: it waits for the file
// "go" in the workdir (the page is connected as an approver), asks for
// the folder $1 read-only (again while the answer is not 202 pending: a
// request with no approver connected is denied at once, at most ~20 s),
// long-polls the decision and, in the same shell, reads readme.txt in
// the grant, tries to write it and reads the never path.
const webWorkload = `U="$CORRAL_CONSENT_URL"; T="$1"
echo "url: $U"
echo "uid: $(id -u)"
echo "before: $(ls -A /grants/ro 2>&1 | tr '\n' ' ')"
i=0; until [ -e go ]; do i=$((i+1)); [ $i -gt 600 ] && { echo "no go"; exit 3; }; sleep 0.1; done
n=0
while :; do
  n=$((n+1))
  code=$(curl -s --noproxy '*' -o ask.json -w '%{http_code}' -X POST "$U/v1/requests" \
    -d "{\"kind\":\"folder\",\"target\":\"$T\",\"access\":\"ro\",\"reason\":\"read the readme\"}")
  [ "$code" = 202 ] && break
  [ $n -ge 40 ] && { echo "ask: $code $(cat ask.json)"; exit 4; }
  sleep 0.5
done
echo "asks: $n"
ID=$(sed -n 's/^  "id": "\([^"]*\)".*/\1/p' ask.json)
curl -s --noproxy '*' -o wait.json "$U/v1/requests/$ID/wait?timeout=120"
P=$(sed -n 's/^  "path": "\([^"]*\)".*/\1/p' wait.json)
echo "path: $P"
echo "read: $(cat "$P/readme.txt" 2>&1)"
echo "write: $( { echo x >> "$P/readme.txt"; } 2>&1 )"
echo "mask: $(cat "$P/secret" 2>&1)"
`

// TestConsentWebGateway: `corral gateway serve --listen 127.0.0.1:PORT`
// says where its consent page is; a linux sandbox (network none) with a
// consent ceiling of share/** (never share/docs/secret) runs, through
// `corral sandbox exec`, a shell that asks for share/docs once the page
// is open; chromium signs in with the gateway's token, sees the request
// pending with its target and sandbox, approves it for the session and
// sees the grant in force in that sandbox's section. The same shell then
// reads the folder's file (the sandbox's access changed live), cannot
// write it, cannot read the never path, and `corral approvals grants`
// shows the grant desired and effective. The screenshot stays at
// $CORRAL_WEB_SCREENSHOTS/consent-gateway-approve.png.
func TestConsentWebGateway(t *testing.T) {
	id := gatewayIdent(t)
	b := browser.Need(t, "web", "curl")
	p := *gwProviders[0] // linux
	p.id = id
	dir := p.dir(t, "gwweb")
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	g := p.start(t, dir, listen)

	// The page's address as the gateway printed it, its token file beside
	// its database (printed just after "listening on").
	var m []string
	for end := time.Now().Add(5 * time.Second); m == nil && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		m = consentPageLine.FindStringSubmatch(g.log.String())
	}
	if m == nil || m[1] != "http://"+listen+"/ui/" || m[2] != filepath.Join(dir, "token") {
		t.Fatalf("the gateway did not say where its consent page is (want http://%s/ui/?token=$(cat %s)):\n%s", listen, filepath.Join(dir, "token"), g.log)
	}
	tokenFile := m[2]
	tok := strings.TrimSpace(readFile(t, tokenFile))
	gwFlags := []string{"--gateway", "http://" + listen, "--token-file", tokenFile}

	base := mkdir(t, id, "gwweb-folders")
	share := filepath.Join(base, "share")
	docs := filepath.Join(share, "docs")
	canary, secret := token(), token()
	// World-writable: only the grant's read-only mount may refuse a write
	// (the workload runs as another uid than the file's owner).
	writeFile(t, id, filepath.Join(docs, "readme.txt"), canary+"\n", 0o666)
	writeFile(t, id, filepath.Join(docs, "secret"), secret+"\n", 0o644)
	for _, d := range []string{share, docs} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	wd := mkdir(t, id, "gwweb-wd")
	section := fmt.Sprintf("consent:\n  folders:\n    ask: [%q]\n    never: [%q]\n  persist: %q\n",
		share+"/**", filepath.Join(docs, "secret"), filepath.Join(mkdir(t, id, "gwweb-persist"), "grants.yaml"))
	pol := writePolicy(t, id, policy{Network: "none", Credentials: section})

	cr := corralAs(t, corralBin, id, nil, append([]string{"sandbox", "create", "--provider", "linux", "--policy", pol, "-C", wd}, gwFlags...)...)
	sb := strings.TrimSpace(cr.stdout)
	if cr.code != 0 || sb == "" {
		t.Fatalf("sandbox create: %s\ngateway:\n%s", cr, g.log)
	}
	t.Cleanup(func() { corralAs(t, corralBin, id, nil, append([]string{"sandbox", "delete", sb}, gwFlags...)...) })

	// The workload, started before anything is granted.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ex := exec.CommandContext(ctx, corralBin, append(append([]string{"sandbox", "exec"}, gwFlags...), sb, "--", "/bin/sh", "-c", webWorkload, "sh", docs)...)
	asIdent(ex, id, nil)
	ex.Dir = wd
	var exOut, exErr lockedBuf
	ex.Stdout, ex.Stderr = &exOut, &exErr
	ex.WaitDelay = 5 * time.Second
	if err := ex.Start(); err != nil {
		t.Fatal(err)
	}
	exDone := make(chan error, 1)
	go func() { exDone <- ex.Wait() }()
	t.Cleanup(func() { cancel(); <-exDone })

	// The page, the only approver: once its watch is open the workload
	// may ask.
	shot := browser.Screenshot(t, "consent-gateway-approve.png")
	_ = os.Remove(shot)
	err := b.Run(t, "http://"+listen+"/ui/?token="+tok, []string{"CORRAL_WEB_ACTION=approve", "CORRAL_WEB_SCOPE=session",
		"CORRAL_WEB_EXPECT_REASON=read the readme", "CORRAL_WEB_EXPECT_TARGET=" + docs, "CORRAL_WEB_EXPECT_SANDBOX=" + sb,
		"CORRAL_WEB_SCREENSHOT=" + shot}, func() {
		if err := os.WriteFile(filepath.Join(wd, "go"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	})
	if err != nil {
		t.Errorf("%v\nworkload: %s\n%s\ngateway:\n%s", err, exOut.String(), exErr.String(), g.log)
	}

	var exWait error
	select {
	case exWait = <-exDone:
		exDone <- exWait // for the cleanup
	case <-time.After(2 * time.Minute):
		t.Fatalf("the workload did not end:\n%s\n%s", exOut.String(), exErr.String())
	}
	out := exOut.String()
	res := result{stdout: out, stderr: exErr.String(), err: exWait}
	t.Logf("workload:\n%s", res)
	if exWait != nil {
		t.Errorf("sandbox exec: %v\n%s\ngateway:\n%s", exWait, res, g.log)
	}
	want(t, res, "url", "http://127.0.0.1:3129", false)
	want(t, res, "before", "", false)
	want(t, res, "path", "/grants/ro/docs", false)
	// The file read by the shell that asked, in the sandbox started before
	// the grant: its access changed live.
	want(t, res, "read", canary, false)
	if v, _ := lineValue(out, "write"); !strings.Contains(v, "Read-only file system") {
		t.Errorf("a write into the read-only grant: %q, want EROFS", v)
	}
	if v, _ := lineValue(out, "mask"); !strings.Contains(v, "Permission denied") {
		t.Errorf("the never path inside the grant: %q, want it masked (Permission denied)", v)
	}
	assertNoToken(t, res.combined(), secret)
	if b, _ := os.ReadFile(filepath.Join(docs, "readme.txt")); string(b) != canary+"\n" {
		t.Errorf("the granted file changed on the host: %q", b)
	}

	// The grant, desired and effective (read back), through the CLI.
	gr := corralAs(t, corralBin, id, nil, append([]string{"approvals", "grants"}, gwFlags...)...)
	t.Logf("corral approvals grants:\n%s", gr)
	if gr.code != 0 || !regexp.MustCompile(`(?m)^\S+\s+`+regexp.QuoteMeta(sb)+`\s+folder\s+`+regexp.QuoteMeta(docs)+`\s+ro\s+session\s+true\s+true\s+/grants/ro/docs`).MatchString(gr.stdout) {
		t.Errorf("corral approvals grants: want the grant of %s for %s ro, session, desired and effective at /grants/ro/docs:\n%s", sb, docs, gr)
	}
	gj := corralAs(t, corralBin, id, nil, append([]string{"approvals", "grants", "--sandbox", sb, "-o", "json"}, gwFlags...)...)
	var gs []struct {
		Sandbox, Kind, Target, Access, Scope, Path string
		Desired, Effective                         bool
	}
	if err := json.Unmarshal([]byte(gj.stdout), &gs); err != nil || gj.code != 0 {
		t.Fatalf("corral approvals grants -o json: %v\n%s", err, gj)
	}
	if len(gs) != 1 || gs[0].Sandbox != sb || gs[0].Target != docs || gs[0].Access != "ro" || !gs[0].Desired || !gs[0].Effective || gs[0].Path != "/grants/ro/docs" {
		t.Errorf("grants -o json: %+v, want one ro grant of %s, desired and effective at /grants/ro/docs", gs, docs)
	}

	if fi, err := os.Stat(shot); err != nil || fi.Size() == 0 {
		t.Errorf("no screenshot at %s: %v", shot, err)
	} else {
		t.Logf("screenshot: %s", shot)
	}
}

//go:build linux

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestConsentTTYPrompt: `corral run -t` in a terminal (a tmux pane) is
// the approver: the workload's request is pending at once (no watcher
// connected), the prompt shows who asks for what, the reason and the
// keys; 'y' approves it once, the prompt says it is in force, and the
// workload reads the folder. Skipped, saying so, without tmux.
func TestConsentTTYPrompt(t *testing.T) {
	needTool(t, "curl")
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("SKIPPED: tmux is not installed: corral run -t's consent prompt is not tested (apt-get install tmux; .ci/run installs it)")
	}
	id := rootIdent(t)
	base := mkdir(t, id, "consent-folders")
	canary := token()
	docs := consentFolder(t, id, base, "docs", canary, token())
	wd := consentWorkdir(t, id)
	pol := writePolicy(t, id, policy{Credentials: consentSection(t, id, []string{base + "/**"}, nil, "")})
	script := filepath.Join(wd, "w.sh")
	writeFile(t, id, script, fmt.Sprintf(`U="$CORRAL_CONSENT_URL"
curl -s -o ask.json -w '%%{http_code}' -X POST "$U/v1/requests" -d '{"kind":"folder","target":%q,"reason":"tty docs"}' > ask.code
ID=$(sed -n 's/^  "id": "\([^"]*\)".*/\1/p' ask.json)
curl -s -o wait.json "$U/v1/requests/$ID/wait?timeout=120"
read -r l < /grants/ro/docs/a.txt; echo "read: $l" > read.txt
echo WORKLOAD-DONE
`, docs), 0o644)
	session := "corral-consent-" + token()[6:18]
	tm := func(args ...string) (string, error) {
		out, err := exec.Command(tmux, append([]string{"-L", session}, args...)...).CombinedOutput()
		return string(out), err
	}
	line := fmt.Sprintf("%s run --policy %s -C %s -t -- /bin/sh w.sh; echo EXIT=$?; sleep 600", corralBin, pol, wd)
	if out, err := tm("new-session", "-d", "-s", session, "-x", "200", "-y", "50", line); err != nil {
		t.Fatalf("tmux new-session: %v %s", err, out)
	}
	defer tm("kill-server")
	pane := func() string { out, _ := tm("capture-pane", "-p", "-J", "-t", session); return out }
	waitPane := func(what string) string {
		t.Helper()
		for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if p := pane(); strings.Contains(p, what) {
				return p
			}
		}
		t.Fatalf("the terminal did not show %q within 60 s:\n%s", what, pane())
		return ""
	}
	p := waitPane("[y] once")
	for _, w := range []string{"corral: consent: pid ", "asks for folder " + docs + " (ro)", `reason: "tty docs"`, "allowed to ask by consent.folders.ask[0]", "[n] deny"} {
		if !strings.Contains(p, w) {
			t.Errorf("the prompt lacks %q:\n%s", w, p)
		}
	}
	if out, err := tm("send-keys", "-t", session, "y"); err != nil {
		t.Fatalf("send-keys: %v %s", err, out)
	}
	p = waitPane("EXIT=")
	if !strings.Contains(p, "approved, in force at /grants/ro/docs") || !strings.Contains(p, "WORKLOAD-DONE") || !strings.Contains(p, "EXIT=0") {
		t.Errorf("after 'y':\n%s", p)
	}
	if code := strings.TrimSpace(readFile(t, filepath.Join(wd, "ask.code"))); code != "202" {
		t.Errorf("the request with only the prompt as approver: %s, want 202 pending\n%s", code, readFile(t, filepath.Join(wd, "ask.json")))
	}
	if b, _ := os.ReadFile(filepath.Join(wd, "read.txt")); strings.TrimSpace(string(b)) != "read: "+canary {
		t.Errorf("the workload read %q after the approval at the prompt", b)
	}
}

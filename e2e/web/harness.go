// Package web runs the consent page's browser harness (approve.mjs in
// this directory: playwright-core driving Debian's headless chromium)
// for the Go tests that need a real browser: consent/web's TestBrowser*
// and e2e's TestConsentWebGateway. It finds node, chromium and the
// harness's node_modules, skipping a test loudly where they are missing
// and failing it on CI (CI=true, where .ci/run installs them).
package web

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Browser is what a run of approve.mjs needs: node, the chromium it
// drives and the harness directory (this one, as the test's package sees
// it: a relative path from the test's working directory is fine).
type Browser struct {
	Node, Chromium, Dir string
}

// Need finds node (on PATH), chromium ($CORRAL_CHROMIUM, default
// /usr/bin/chromium, executable) and playwright-core in dir's
// node_modules (npm ci in e2e/web), plus the extra tools named (on PATH,
// e.g. "curl"). A missing one skips t with a message in capitals, except
// on CI (CI=true), where it fails t.
func Need(t testing.TB, dir string, tools ...string) Browser {
	t.Helper()
	b := Browser{Chromium: os.Getenv("CORRAL_CHROMIUM"), Dir: dir}
	if b.Chromium == "" {
		b.Chromium = "/usr/bin/chromium"
	}
	var missing []string
	var err error
	if b.Node, err = exec.LookPath("node"); err != nil {
		missing = append(missing, "node (apt-get install nodejs)")
	}
	if fi, err := os.Stat(b.Chromium); err != nil || fi.Mode()&0o111 == 0 {
		missing = append(missing, b.Chromium+" (apt-get install chromium)")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core", "package.json")); err != nil {
		missing = append(missing, "playwright-core (npm ci in e2e/web)")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		msg := "THE BROWSER TEST DID NOT RUN: missing " + strings.Join(missing, ", ")
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + " (.ci/run installs them)")
		}
		t.Skip(msg)
	}
	return b
}

// Screenshot is the path of the screenshot name (a file name, e.g.
// consent-web-approve.png) in $CORRAL_WEB_SCREENSHOTS, else /tmp/corral-ci
// on CI (CI=true: the CI run keeps that directory as an artifact), else
// t's temporary directory; the directory is made (0755).
func Screenshot(t testing.TB, name string) string {
	t.Helper()
	dir := os.Getenv("CORRAL_WEB_SCREENSHOTS")
	if dir == "" && os.Getenv("CI") == "true" {
		dir = "/tmp/corral-ci"
	}
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, name)
}

// Run runs approve.mjs against url (the page with its token,
// http://127.0.0.1:PORT/ui/?token=TOKEN) with env added to the test's
// environment (CORRAL_WEB_*, described in approve.mjs), for at most 2
// minutes. When the script says "ready" (the page's watch is open: it is
// an approver), ready is called, in this goroutine. It logs what the
// script said and its stderr, and returns an error unless it exited 0
// with "done" as its last line.
func (b Browser) Run(t testing.TB, url string, env []string, ready func()) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.Node, "approve.mjs")
	cmd.Dir = b.Dir
	cmd.Env = append(os.Environ(), append(env, "CORRAL_WEB_URL="+url, "CORRAL_CHROMIUM="+b.Chromium)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	var said []string
	for sc := bufio.NewScanner(out); sc.Scan(); {
		line := strings.TrimSpace(sc.Text())
		said = append(said, line)
		if line == "ready" {
			ready()
		}
	}
	err = cmd.Wait()
	t.Logf("approve.mjs said %q; stderr:\n%s", said, stderr.String())
	if err != nil || len(said) == 0 || said[len(said)-1] != "done" {
		return fmt.Errorf("approve.mjs: %v, said %q", err, said)
	}
	return nil
}

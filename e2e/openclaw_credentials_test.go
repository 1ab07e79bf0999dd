//go:build linux

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/qualify"
)

// The OpenClaw gateway (examples/openclaw) in a service session whose
// model provider is an OpenAI-compatible stand-in (chatOrigin: chat
// completions streamed as SSE, only the real key accepted) behind the
// proxy's inspection, its key a Corral credential: the real value is in
// `corral service start`'s environment only, the gateway's is the
// placeholder. One agent turn through the gateway's own HTTP API: the
// stand-in receives the real key, the streamed answer comes back through
// OpenClaw and into its transcript, and from outside the sandbox no
// process of the agent holds the value, nor does anything corral or the
// gateway wrote: the session home, the logs, the audit log, the record,
// status.
func TestOpenClawCredential(t *testing.T) {
	prefix := openclawInstall(t)
	id := rootIdent(t)
	o := newOrigin(t, "api.allowed.test", "127.0.0.81", true)
	secret := realValue("sk-proj-")
	seen := &seenLog{}
	chatOrigin(o, secret, seen)
	polFile := openclawPolicy(t, id, prefix, nil, qualify.InspectNet(upstreamCAFile(t, id), o.inspected("tls: inspect")), openaiCredential(o.port))

	s := newSvc(t, id)
	name := "e2eclawcred"
	s.must(t, "service", "provision", name, "--policy", polFile)
	rec := s.record(t, name)
	port := freePort(t)
	gwToken := token()
	writeClawConfig(t, rec, port, gwToken, o.url("/v1"))

	// Only the launcher's environment has the real value.
	s.env = []string{"OPENAI_API_KEY=" + secret}
	t0 := time.Now()
	r := startOpenClaw(t, s, name, port, filepath.Join(prefix, "gateway.sh"), fmt.Sprint(port))
	s.env = nil
	t.Logf("ready after %s", time.Since(t0).Round(time.Millisecond))
	assertNoLeak(t, "service start's output", r.stdout+r.stderr, secret)
	placeholder := recordPlaceholder(t, s, name, "openai")
	if !strings.HasPrefix(placeholder, "sk-") || strings.Contains(placeholder, secret) {
		t.Fatalf("the record's placeholder for openai is %q, want sk-{random}", placeholder)
	}

	// One agent turn, asked of the gateway from the host.
	t0 = time.Now()
	reply := clawTurn(t, port, gwToken, "Say hello.")
	t.Logf("turn after %s; the stand-in saw %q", time.Since(t0).Round(time.Millisecond), seen.all())
	answer := strings.Join(chatChunks, "")
	if !strings.Contains(reply, answer) {
		t.Errorf("the gateway's reply does not carry the stand-in's answer %q:\n%s\nworkload log:\n%s", answer, reply, tail(s.run(t, "service", "logs", name).stdout, 40))
	}
	assertNoLeak(t, "the gateway's reply", reply, secret)
	// Every model call the stand-in saw carried the real key and asked
	// for a stream (chatOrigin refuses any other key with a 401).
	got := seen.all()
	for i := 0; i+1 < len(got); i += 2 {
		if got[i] != "auth real" || got[i+1] != "stream true" {
			t.Errorf("the stand-in saw %q, want the real key on streamed requests only", got)
			break
		}
	}
	if len(got) == 0 {
		t.Error("the stand-in saw no model call")
	}

	// From outside: the gateway's processes hold the placeholder, never
	// the value.
	st, sr := s.status(t, name)
	if sr.code != 0 || !st.PostureOK {
		t.Errorf("status: %s", sr)
	}
	var cs struct {
		Credentials []struct{ Name, Source, State string }
	}
	if json.Unmarshal([]byte(sr.stdout), &cs); len(cs.Credentials) != 1 || cs.Credentials[0] != (struct{ Name, Source, State string }{"openai", "env", "active"}) {
		t.Errorf("status lists credentials %+v, want openai from env, active", cs.Credentials)
	}
	if env := environOf(t, st.Workload.PID); !strings.Contains(env, "\x00OPENAI_API_KEY="+placeholder+"\x00") && !strings.HasPrefix(env, "OPENAI_API_KEY="+placeholder+"\x00") {
		t.Errorf("the gateway's /proc/%d/environ has no OPENAI_API_KEY=<placeholder>", st.Workload.PID)
	}
	procs := procsOfUID(rec.UID)
	if len(procs) == 0 {
		t.Errorf("no process of the agent uid %d", rec.UID)
	}
	for _, pid := range procs {
		assertNoLeak(t, fmt.Sprintf("/proc/%d/environ", pid), environOf(t, pid), secret)
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil {
			assertNoLeak(t, fmt.Sprintf("/proc/%d/cmdline", pid), string(b), secret)
		}
	}

	// The transcript in the home holds the answer (the turn is the
	// gateway's own), and the home the placeholder at most.
	if fs := treeWith(rec.Home, answer); len(fs) == 0 {
		t.Errorf("no file in the session home holds the answer %q", answer)
	} else {
		t.Logf("the answer is in %q; the placeholder in %q", fs, treeWith(rec.Home, placeholder))
	}
	// Status, both forms, and the logs as corral shows them.
	assertNoLeak(t, "service status", s.run(t, "service", "status", name).stdout, secret)
	assertNoLeak(t, "service status -o json", sr.stdout, secret)
	assertNoLeak(t, "service logs", s.run(t, "service", "logs", name).stdout, secret)
	assertNoLeak(t, "service logs --supervisor", s.run(t, "service", "logs", name, "--supervisor").stdout, secret)
	// The audit log: the model call allowed, with the credential named.
	var used int
	auditFile := filepath.Join(s.dir, name, "log", "audit.jsonl")
	var other []string
	for _, e := range egressEvents(t, auditFile) {
		if e.Dst.Hostname == "api.allowed.test" && e.ActionID == 1 && strings.Contains(e.raw, `"credentials":"openai"`) {
			used++
		} else {
			other = append(other, fmt.Sprintf("%s %s:%d %s%s", e.Action, e.Dst.Hostname, e.Dst.Port, e.HTTPRequest.Method, e.HTTPRequest.URL.Path))
		}
	}
	// (OpenClaw's memory search tries api.openai.com for embeddings when
	// it sees OPENAI_API_KEY: the policy denies it.)
	t.Logf("the gateway's other egress: %q", other)
	if used == 0 {
		t.Errorf("audit: no allowed request to api.allowed.test naming credential openai")
	}

	// Stopped, then everything corral and the gateway wrote: the session
	// directory (record, status, logs, audit, the home with the
	// gateway's config, state database and transcripts).
	s.must(t, "service", "stop", name)
	assertTreeNoLeak(t, filepath.Join(s.dir, name), secret)
	assertNoLeak(t, "service status (stopped)", s.run(t, "service", "status", name, "-o", "json").stdout, secret)
}

// openclawInstall is the PREFIX of examples/openclaw/install.sh that
// CORRAL_TEST_OPENCLAW names (.ci/run sets it); the test is skipped
// without it.
func openclawInstall(t *testing.T) string {
	t.Helper()
	prefix := os.Getenv("CORRAL_TEST_OPENCLAW")
	if prefix == "" {
		t.Skip("set CORRAL_TEST_OPENCLAW to the PREFIX of examples/openclaw/install.sh (.ci/run does)")
	}
	if _, err := os.Stat(filepath.Join(prefix, "gateway.sh")); err != nil {
		t.Fatalf("CORRAL_TEST_OPENCLAW=%s: %v (run examples/openclaw/install.sh %s)", prefix, err, prefix)
	}
	return prefix
}

// openclawPolicy writes, for id, examples/openclaw/policy.yaml with the
// install at prefix and ro read-only beside it, its allow entries
// replaced by network (lines under network:, as qualify's YAML
// renders them) and extra (top-level sections) appended; it returns
// the file.
func openclawPolicy(t *testing.T, id *ident, prefix string, ro []string, network, extra string) string {
	t.Helper()
	example := readFile(t, filepath.Join("..", "examples", "openclaw", "policy.yaml"))
	grants := fmt.Sprintf("    - %q\n", prefix)
	for _, p := range ro {
		grants += fmt.Sprintf("    - %q\n", p)
	}
	pol := strings.Replace(example, "    - /opt/openclaw ", grants+"    #", 1)
	pol = strings.Replace(pol, "  allow:\n    - {host: api.anthropic.com, ports: [443]}\n    - {host: api.openai.com, ports: [443]}\n", network, 1)
	if pol == example || !strings.Contains(pol, network) || !strings.Contains(pol, grants) {
		t.Fatalf("could not adapt the example policy:\n%s", pol)
	}
	f := filepath.Join(mkdir(t, id, "openclaw-policy"), "policy.yaml")
	writeFile(t, id, f, pol+extra, 0o644)
	return f
}

// startOpenClaw starts session name running cmd (the gateway on inner
// port port), published at the same port on the host's loopback, ready
// when its /readyz answers.
func startOpenClaw(t *testing.T, s *svc, name string, port int, cmd ...string) result {
	t.Helper()
	start := append([]string{"service", "start", name, "--publish", fmt.Sprintf("127.0.0.1:%d", port),
		"--ready-http", fmt.Sprintf("http://127.0.0.1:%d/readyz", port), "--ready-timeout", "300s", "--stop-grace", "60s", "--"}, cmd...)
	r := s.run(t, start...)
	if r.code != 0 && strings.Contains(r.stderr, "state lease heartbeat did not become ready") {
		// OpenClaw gives a worker thread a fixed 5 s to start, which a
		// loaded machine can miss: once more.
		t.Logf("the gateway did not start in time, once more: %s", r.stderr)
		r = s.run(t, start...)
	}
	if r.code != 0 {
		t.Fatalf("corral %s: %s", strings.Join(start, " "), r)
	}
	return r
}

// openaiCredential is the credentials section of a policy for a
// chatOrigin at api.allowed.test:port: openai, read from corral's
// OPENAI_API_KEY, exposed as the sandbox's OPENAI_API_KEY, shaped as
// OpenAI's keys, bound to /v1/.
func openaiCredential(port int) string {
	return fmt.Sprintf(`credentials:
  - name: openai
    source: {env: OPENAI_API_KEY}
    expose: {env: OPENAI_API_KEY}
    shape: "sk-{random}"
    endpoints:
      - {host: api.allowed.test, ports: [%d], path: /v1/}
`, port)
}

// writeClawConfig writes the gateway's config into the session home
// before its first start (gateway.sh keeps one it finds): gateway.sh's
// settings plus the OpenAI-compatible provider at base, its key the
// gateway's OPENAI_API_KEY (an env SecretRef: never copied into a file),
// the default agent's model, and the gateway's /v1/chat/completions.
func writeClawConfig(t *testing.T, rec svcRecord, port int, gwToken, base string) {
	t.Helper()
	home := rec.Home
	cfg := map[string]any{
		"gateway": map[string]any{
			"mode": "local", "bind": "loopback", "port": port,
			"auth": map[string]any{"mode": "token", "token": gwToken},
			"http": map[string]any{"endpoints": map[string]any{"chatCompletions": map[string]any{"enabled": true}}},
		},
		"update":    map[string]any{"checkOnStart": false, "auto": map[string]any{"enabled": false}},
		"discovery": map[string]any{"mdns": map[string]any{"mode": "off"}},
		"cron":      map[string]any{"enabled": false},
		"telemetry": map[string]any{"enabled": false},
		"logging":   map[string]any{"file": filepath.Join(home, ".openclaw", "logs", "gateway.log")},
		"models": map[string]any{
			"catalogRefresh": map[string]any{"enabled": false},
			"mode":           "merge",
			"providers": map[string]any{"e2e": map[string]any{
				"baseUrl": base,
				"apiKey":  map[string]any{"source": "env", "provider": "default", "id": "OPENAI_API_KEY"},
				"api":     "openai-completions",
				"models": []any{map[string]any{
					"id": "gpt-e2e", "name": "Stand-in", "reasoning": false, "input": []string{"text"},
					"contextWindow": 128000, "maxTokens": 1024,
					// chatOrigin reads string contents.
					"compat": map[string]any{"requiresStringContent": true},
				}},
			}},
		},
		"agents": map[string]any{"defaults": map[string]any{"model": map[string]any{"primary": "e2e/gpt-e2e"}}},
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(home, ".openclaw")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "openclaw.json")
	if err := os.WriteFile(f, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, f} {
		if err := os.Lchown(p, rec.UID, rec.GID); err != nil {
			t.Fatal(err)
		}
	}
}

// clawTurn asks the gateway's default agent one question through its
// OpenAI-compatible endpoint on the published port and returns the
// answer's body.
func clawTurn(t *testing.T, port int, gwToken, question string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": "openclaw", "messages": []any{map[string]any{"role": "user", "content": question}}})
	req, err := http.NewRequest("POST", fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+gwToken)
	req.Header.Set("Content-Type", "application/json")
	c := &http.Client{Timeout: 300 * time.Second, Transport: &http.Transport{Proxy: nil}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("the agent turn: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Errorf("the agent turn: %s: %s", resp.Status, b)
	}
	return string(b)
}

// recordPlaceholder is the placeholder the session's record keeps for
// credential name.
func recordPlaceholder(t *testing.T, s *svc, session, name string) string {
	t.Helper()
	var r struct {
		Placeholders map[string]string `json:"placeholders"`
	}
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(s.dir, session, "service.json"))), &r); err != nil {
		t.Fatal(err)
	}
	return r.Placeholders[name]
}

// environOf is /proc/PID/environ, read from outside the sandbox.
func environOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Errorf("environ of %d: %v", pid, err)
	}
	return string(b)
}

// treeWith lists the regular files under dir that contain s.
func treeWith(dir, s string) []string {
	var out []string
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || !fi.Mode().IsRegular() {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), s) {
			out = append(out, strings.TrimPrefix(p, dir+"/"))
		}
		return nil
	})
	return out
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

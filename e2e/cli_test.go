//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// cli runs a corral subcommand (not run) as root and returns its output
// and exit code.
func cli(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(corralBin, args...)
	cmd.Dir = baseDir
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("corral %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// policy validate reports every problem with file:line:column and the
// field path, and exits with policy_rejected (122).
func TestCLIPolicyValidateErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: 1\nfilesystem:\n  read_only: [relative/x]\nprocess:\n  limts: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := cli(t, "policy", "validate", bad)
	if code != 122 {
		t.Errorf("exit %d, want 122\n%s", code, stderr)
	}
	for _, want := range []string{bad + ":3:15: filesystem.read_only[0]", bad + ":5:3: process.limts", `did you mean "limits"`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	good := filepath.Join(dir, "good.json")
	if err := os.WriteFile(good, []byte(`{"version": 1, "network": {"mode": "none"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := cli(t, "policy", "validate", good)
	if code != 0 || !strings.Contains(out, "valid") || !strings.Contains(out, "sha256:") {
		t.Errorf("valid JSON policy: exit %d\n%s%s", code, out, stderr)
	}
}

// policy schema is JSON Schema naming every top-level section.
func TestCLIPolicySchema(t *testing.T) {
	out, _, code := cli(t, "policy", "schema")
	var s map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &s) != nil {
		t.Fatalf("schema is not JSON (exit %d): %.200s", code, out)
	}
	props, _ := s["properties"].(map[string]any)
	for _, k := range []string{"version", "filesystem", "network", "process", "layers"} {
		if _, ok := props[k]; !ok {
			t.Errorf("schema has no property %q", k)
		}
	}
	if s["additionalProperties"] != false {
		t.Error("schema allows unknown top-level fields")
	}
}

// policy explain shows the plan, the layers and the loss report; a policy
// that cannot be enforced is explained and exits 122.
func TestCLIPolicyExplain(t *testing.T) {
	wd := t.TempDir()
	out, stderr, code := cli(t, "policy", "explain", "-C", wd)
	if code != 0 {
		t.Fatalf("explain default: exit %d\n%s", code, stderr)
	}
	for _, want := range []string{"provider: linux", "plan:", "bind    rw " + wd, "mask    ro /etc/shadow", "layer landlock", "loss report:"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain output lacks %q:\n%s", want, out)
		}
	}
	out, _, code = cli(t, "policy", "explain", "-C", wd, "-o", "json")
	var plan struct {
		Provider string `json:"provider"`
		Layers   []struct {
			Layer, State string
		} `json:"layers"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &plan) != nil || plan.Provider != "linux" || len(plan.Layers) != 5 {
		t.Errorf("explain -o json: exit %d, parsed %+v", code, plan)
	}
	p := filepath.Join(wd, "grant-in-deny.yaml")
	sub := filepath.Join(wd, "d", "pub")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	body := "version: 1\nfilesystem:\n  deny: [" + filepath.Join(wd, "d") + "]\n  read_only: [/usr, " + sub + "]\n"
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, code = cli(t, "policy", "explain", p, "-C", wd)
	if code != 122 || !strings.Contains(out, "error") || !strings.Contains(stderr, "inside denied") {
		t.Errorf("grant inside a deny: exit %d, want 122 with the loss shown\n%s%s", code, out, stderr)
	}
}

// version names the providers compiled in; doctor reports the host and
// whether the default policy is enforceable, as text and JSON.
func TestCLIVersionAndDoctor(t *testing.T) {
	out, _, code := cli(t, "version")
	if code != 0 || !strings.Contains(out, "providers: linux, docker, mxc") || !strings.Contains(out, "go: go1.") {
		t.Errorf("version: exit %d\n%s", code, out)
	}
	out, _, code = cli(t, "doctor", "-o", "json")
	var rep struct {
		Host      map[string]string `json:"host"`
		Providers []struct {
			Provider      string            `json:"provider"`
			Available     bool              `json:"available"`
			Facts         map[string]string `json:"facts"`
			DefaultPolicy string            `json:"default_policy"`
		} `json:"providers"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Providers) != 3 || rep.Providers[1].Provider != "docker" || rep.Providers[2].Provider != "mxc" {
		t.Fatalf("doctor -o json: exit %d\n%s", code, out)
	}
	if rep.Providers[2].Available { // no wxc-exec on this host
		t.Errorf("mxc reported available without wxc-exec: %+v", rep.Providers[2])
	}
	p := rep.Providers[0]
	if p.Provider != "linux" || p.Facts["kernel"] == "" || p.Facts["landlock_abi"] == "" || rep.Host["docker_socket"] == "" {
		t.Errorf("doctor facts incomplete: %+v host %+v", p, rep.Host)
	}
	// As root on this host every layer is available.
	if p.Available && p.DefaultPolicy != "enforceable" {
		t.Errorf("default policy: %q", p.DefaultPolicy)
	}
	text, _, _ := cli(t, "doctor")
	if !strings.Contains(text, "default policy:") || !strings.Contains(text, "landlock_abi:") {
		t.Errorf("doctor text:\n%s", text)
	}
}

// A usage error (no command) exits 2, not one of Corral's codes.
func TestCLIUsageError(t *testing.T) {
	_, stderr, code := cli(t, "run")
	if code != 2 || !strings.Contains(stderr, "missing command") {
		t.Errorf("run without a command: exit %d\n%s", code, stderr)
	}
}

// run --trace-startup prints the phases of the supervisor and of the
// sandbox init on one clock: init's marks fall between the supervisor's
// first and last. Without the flag (or after --) nothing is printed.
func TestCLITraceStartup(t *testing.T) {
	wd := mkdir(t, rootIdent(t), "trace")
	_, stderr, code := cli(t, "run", "--trace-startup", "-C", wd, "--", "true")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	at := map[string]float64{} // "proc: phase" -> ms
	for _, line := range strings.Split(stderr, "\n") {
		var ms, delta float64
		var proc string
		if n, _ := fmt.Sscanf(line, "corral: %f (%f) %s", &ms, &delta, &proc); n == 3 {
			at[proc+": "+strings.TrimSpace(line[strings.Index(line, proc)+len(proc):])] = ms
		}
	}
	for _, want := range []string{"supervisor: main (package initialisation done)", "init: main (package initialisation done)",
		"init: mount tree built, root pivoted", "init: landlock applied", "init: capabilities dropped, seccomp installed",
		"supervisor: linux: layers verified from outside", "supervisor: session: deprovisioned"} {
		if _, ok := at[want]; !ok {
			t.Errorf("no mark %q in the trace:\n%s", want, stderr)
		}
	}
	// Causal order across the two processes holds only on one clock:
	// init gets its spec after the clone, and the supervisor hears of
	// the workload's exit after init reaped it.
	for _, c := range [][2]string{{"supervisor: linux: init cloned and exec'd", "init: spec received"}, {"init: workload reaped", "supervisor: linux: workload's exit received"}} {
		a, okA := at[c[0]]
		b, okB := at[c[1]]
		if !okA || !okB || a > b {
			t.Errorf("%q (%v ms) should come before %q (%v ms):\n%s", c[0], a, c[1], b, stderr)
		}
	}
	for _, args := range [][]string{{"run", "-C", wd, "--", "true"}, {"run", "-C", wd, "--", "sh", "-c", "exit 0", "--trace-startup"}} {
		if _, stderr, code := cli(t, args...); code != 0 || strings.Contains(stderr, "start-up trace") {
			t.Errorf("corral %v: exit %d, printed a trace:\n%s", args, code, stderr)
		}
	}
}

// policy import writes a policy that corral then runs, with the loss
// report on stderr; a loss that would loosen the source's rules is exit
// 122 with nothing written, unless --accept-loss; a source that does not
// parse is 122 naming its line; an unknown --from is a usage error (2).
func TestCLIPolicyImport(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "srt.json")
	write := func(s string) {
		if err := os.WriteFile(src, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"filesystem": {"denyRead": ["~/.ssh"], "allowWrite": ["."], "denyWrite": [".env"]},
 "network": {"allowedDomains": ["example.test:443"], "deniedDomains": []}}`)
	out := filepath.Join(dir, "policy.yaml")
	_, stderr, code := cli(t, "policy", "import", "--from", "srt", src, "--out", out)
	if code != 0 || !strings.Contains(stderr, "warning srt.json:1 filesystem:") {
		t.Fatalf("import: exit %d\n%s", code, stderr)
	}
	vout, verr, code := cli(t, "policy", "validate", out)
	if code != 0 {
		t.Fatalf("the imported policy: exit %d\n%s%s", code, vout, verr)
	}
	root := rootIdent(t)
	wd := mkdir(t, root, "import-wd")
	writeFile(t, root, filepath.Join(wd, ".env"), "SECRET=1\n", 0o644)
	res := corral(t, run{id: root, policy: out, workdir: wd, args: sh("echo changed > .env || echo refused")})
	if !strings.Contains(res.stdout, "refused") {
		t.Errorf("the imported denyWrite .env did not hold:\n%s", res)
	}

	write(`{"filesystem": {"denyRead": ["**/.env"], "allowWrite": ["."]}, "network": {"allowedDomains": []}}`)
	loose := filepath.Join(dir, "loose.yaml")
	_, stderr, code = cli(t, "policy", "import", "--from", "srt", src, "--out", loose)
	if code != 122 || !strings.Contains(stderr, "error   srt.json:1 filesystem.denyRead[0]") || exists(loose) {
		t.Errorf("a glob deny: exit %d, written %v\n%s", code, exists(loose), stderr)
	}
	if _, stderr, code = cli(t, "policy", "import", "--from", "srt", "--accept-loss", src, "--out", loose); code != 0 || !exists(loose) {
		t.Errorf("--accept-loss: exit %d\n%s", code, stderr)
	}

	write("{\n  \"filesystem\": {\n    \"denyRead\": [\"a\",\n")
	if _, stderr, code = cli(t, "policy", "import", "--from", "srt", src); code != 122 || !strings.Contains(stderr, src+":") {
		t.Errorf("a broken source: exit %d\n%s", code, stderr)
	}
	if _, stderr, code = cli(t, "policy", "import", "--from", "bwrap", src); code != 2 || !strings.Contains(stderr, "unknown source") {
		t.Errorf("--from bwrap: exit %d\n%s", code, stderr)
	}
}

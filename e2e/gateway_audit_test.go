//go:build linux

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"connectrpc.com/connect"

	gw "github.com/corral-sandbox/corral/gateway/gen/corral/gateway/v1"
)

// auditKinds is the set of "class_uid/activity/action" of the events in
// an OCSF JSONL log.
func auditKinds(t *testing.T, data string) []string {
	t.Helper()
	set := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e struct {
			ClassUID     int    `json:"class_uid"`
			ActivityName string `json:"activity_name"`
			Action       string `json:"action"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		set[fmt.Sprintf("%d/%s/%s", e.ClassUID, e.ActivityName, e.Action)] = true
	}
	var out []string
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// A gateway sandbox is audited as corral run is, on each provider: for
// the same workload (an allowed and a denied request through the proxy, a
// file planted for later) its audit log, read through the API by the
// sandbox's name (corral sandbox audit NAME), holds the same event classes
// as corral run's on that provider: Process Activity Launch and
// Terminate, HTTP Activity allowed and denied, a Detection Finding.
func TestGatewayAuditMatchesRun(t *testing.T) {
	eachGatewayProvider(t, func(t *testing.T, p *gwProvider) {
		id := p.id
		port := upstream(t, "up")
		polText := policy{Limits: "memory: 1G, pids: 512, nofile: 1024", Network: "proxy", NetRules: fmt.Sprintf(
			"  allow: [{host: api.allowed.test, ports: [%d]}]\n  allow_private: [{host: 127.0.0.1}]\n  hosts: {api.allowed.test: 127.0.0.1, evil.test: 127.0.0.1}\n", port)}.yaml(id)
		script := fmt.Sprintf(`wget -q -O- http://api.allowed.test:%d/; wget -q -O- http://evil.test:%d/ || echo DENIED; mkdir -p sub && echo x > sub/.envrc`, port, port)

		// corral run
		runWD := dockerWorkdir(t, id, "gwaudit-run")
		pol := filepath.Join(mkdir(t, id, "gwaudit-pol"), "p.yaml")
		writeFile(t, id, pol, polText, 0o644)
		runAudit := filepath.Join(mkdir(t, id, "gwaudit-log"), "run.jsonl")
		res := corral(t, run{id: id, policy: pol, workdir: runWD, flags: []string{"--provider", p.name, "--audit", runAudit}, args: sh(script)})
		if res.code != 0 || !strings.Contains(res.stdout, "up") || !strings.Contains(res.stdout, "DENIED") {
			t.Fatalf("corral run:\n%s", res)
		}
		want := auditKinds(t, readFile(t, runAudit))

		// the gateway
		dir := p.dir(t, "gwaudit")
		wd := dockerWorkdir(t, id, "gwaudit-wd")
		ctx := context.Background()
		g := p.start(t, dir, "unix:"+filepath.Join(dir, "gw.sock"))
		c := g.client(t, "")
		req := p.req(wd)
		req.PolicyYaml, req.Name = polText, "audited"
		sb := g.create(t, ctx, c, req)
		t.Cleanup(func() {
			_, _ = c.DeleteSandbox(context.Background(), connect.NewRequest(&gw.DeleteSandboxRequest{Id: sb.Id}))
		})
		if sb.Name != "audited" || sb.Provider != p.name {
			t.Errorf("created sandbox: name %q, provider %q", sb.Name, sb.Provider)
		}
		dup := p.req(wd)
		dup.Name = "audited"
		if _, err := c.CreateSandbox(ctx, connect.NewRequest(dup)); connect.CodeOf(err) != connect.CodeAlreadyExists {
			t.Errorf("a second sandbox with the same name: %v", err)
		}
		for _, bad := range []string{"Audited", "-x", "corral-0123456789ab"} { // upper case, a leading dash, an id's shape
			r := p.req(wd)
			r.Name = bad
			if _, err := c.CreateSandbox(ctx, connect.NewRequest(r)); connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("name %q: %v", r.Name, err)
			}
		}
		out, code, err := execOut(ctx, c, "audited", "sh", "-c", script)
		if err != nil || code != 0 || !strings.Contains(out, "DENIED") {
			t.Fatalf("exec by name: %q %d %v\n%s", out, code, err, g.log)
		}
		cli := exec.Command(corralBin, "sandbox", "--gateway", "unix:"+filepath.Join(dir, "gw.sock"), "audit", "audited")
		cli.Stderr = os.Stderr
		data, err := cli.Output()
		if err != nil {
			t.Fatalf("corral sandbox audit: %v", err)
		}
		checkAudit(t, "corral sandbox audit audited", data)
		got := auditKinds(t, string(data))
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("gateway audit classes %v, corral run's %v", got, want)
		}
		for _, k := range []string{"1007/Launch/", "1007/Terminate/", "/Allowed", "/Denied", "2004/Create/"} {
			if !strings.Contains(strings.Join(want, " "), k) {
				t.Errorf("corral run's audit lacks %s: %v", k, want)
			}
		}
		st, err := c.GetSandbox(ctx, connect.NewRequest(&gw.GetSandboxRequest{Id: "audited"}))
		if err != nil || st.Msg.Sandbox.Id != sb.Id {
			t.Errorf("get by name: %v %v", st, err)
		}
		// Delete (by name) removes the record and its logs, audit included.
		if _, err := c.DeleteSandbox(ctx, connect.NewRequest(&gw.DeleteSandboxRequest{Id: "audited"})); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, "logs", sb.Id+".audit.jsonl")); !os.IsNotExist(err) {
			t.Errorf("the audit log stays after delete: %v", err)
		}
	})
}

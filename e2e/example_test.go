//go:build linux

package e2e

// The test twin of examples/agent-api.yaml: the example policy, unchanged
// except that its hosts map points api.github.com at a loopback TLS server
// and allow_private lets the proxy dial exactly that server. (For the
// unprivileged identity, layers.cgroups is also set to optional: cgroups
// are not delegated to it on this host.)

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/corral-sandbox/corral/qualify"
)

// twinPolicy loads the example and rewrites network.hosts and
// network.allow_private (and, for id not root, layers.cgroups).
func twinPolicy(t *testing.T, id *ident, example string, hosts map[string]string, private []qualify.Endpoint) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(root, example))
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		t.Fatalf("%s: %v", example, err)
	}
	top := doc.Content[0]
	lookup := func(m *yaml.Node, key string) *yaml.Node {
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == key {
				return m.Content[i+1]
			}
		}
		return nil
	}
	set := func(m *yaml.Node, key, yamlText string) {
		var v yaml.Node
		if err := yaml.Unmarshal([]byte(yamlText), &v); err != nil {
			t.Fatalf("%s: %v", yamlText, err)
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == key {
				m.Content[i+1] = v.Content[0]
				return
			}
		}
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, v.Content[0])
	}
	network := lookup(top, "network")
	if network == nil {
		t.Fatalf("%s has no network section", example)
	}
	var h, p []string
	for k, v := range hosts {
		h = append(h, fmt.Sprintf("%q: %q", k, v))
	}
	for _, e := range private {
		p = append(p, fmt.Sprintf("{host: %q, ports: %v}", e.Host, strings.ReplaceAll(fmt.Sprint(e.Ports), " ", ", ")))
	}
	set(network, "hosts", "{"+strings.Join(h, ", ")+"}")
	set(network, "allow_private", "["+strings.Join(p, ", ")+"]")
	if !id.isRoot() {
		if lookup(top, "layers") == nil {
			set(top, "layers", "{}")
		}
		set(lookup(top, "layers"), "cgroups", "optional")
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(mkdir(t, id, "policy"), filepath.Base(example))
	writeFile(t, id, f, string(out), 0o644)
	return f
}

// TestExampleAgentAPI: with examples/agent-api.yaml, https://api.github.com/
// (its loopback twin) answers through the proxy; https://example.com/ and
// plain http://api.github.com/ get the proxy's 403, and the denial is an
// OCSF event in the audit log.
func TestExampleAgentAPI(t *testing.T) {
	needTool(t, "curl")
	// The twin must listen on 443: the example allows only that port.
	twin, err := startUpstream("127.0.0.6", 443, true, t)
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.6:443 for the api.github.com twin: %v", err)
	}
	eachIdent(t, func(t *testing.T, id *ident) {
		pol := twinPolicy(t, id, "examples/agent-api.yaml",
			map[string]string{"api.github.com": twin.IP},
			[]qualify.Endpoint{ep(twin.IP+"/32", 443)})
		wd := mkdir(t, id, "agent")
		caPEM, _ := caCert(t)
		writeFile(t, id, filepath.Join(wd, "ca.pem"), string(caPEM), 0o644)
		logf := filepath.Join(mkdir(t, id, "auditlog"), "audit.jsonl")
		script := `echo "github: $(curl -sS -m 10 --cacert ca.pem https://api.github.com/)"
echo "example: $(curl -sS -m 10 -o /dev/null -w '%{http_connect}' https://example.com/ 2>/dev/null)"
echo "github-http: $(curl -sS -m 10 -o /dev/null -w '%{http_code}' http://api.github.com/)"`
		res := corral(t, run{id: id, policy: pol, workdir: wd, flags: []string{"-v", "--audit", logf}, args: sh(script)})
		assertCode(t, res, 0)
		want(t, res, "github", "upstream-ok api.github.com /", false)
		want(t, res, "example", "403", false)
		want(t, res, "github-http", "403", false)
		var denied *ocsfEvent
		evs := egressEvents(t, logf)
		for i := range evs {
			if evs[i].Dst.Hostname == "example.com" && evs[i].Action == "Denied" {
				denied = &evs[i]
			}
		}
		if denied == nil {
			t.Fatalf("no Denied event for example.com in the audit log:\n%s", readFile(t, logf))
		}
		if denied.Dst.Port != 443 || denied.HTTPRequest.Method != "CONNECT" || !strings.Contains(denied.Unmapped.Hint, "example.com") {
			t.Errorf("denied event: want CONNECT example.com:443 with a hint naming it; got %s", denied.raw)
		}
		if !strings.Contains(res.stderr, "corral: egress: denied 1x example.com:443") {
			t.Errorf("-v summary does not list the example.com denial\n%s", res)
		}
		t.Logf("denied event:\n%s", denied.raw)
	})
}

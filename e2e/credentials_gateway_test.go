//go:build linux

package e2e

// Credentials through corral gateway and its CLI (docs/gateway.md,
// "Credentials"): a stored credential's value given at create, rotated,
// revoked and expired without recreating the sandbox, on the linux and
// docker providers.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/qualify"
)

// gwCLI runs `corral sandbox --gateway SOCK ARGS...` as root with env
// added to corral's usual environment.
func gwCLI(t *testing.T, sock string, env []string, args ...string) result {
	t.Helper()
	return corralAs(t, corralBin, identities()[0], env, append([]string{"sandbox", "--gateway", "unix:" + sock}, args...)...)
}

// TestCredentialGateway: a gateway sandbox (linux and docker) with a
// stored credential whose value `corral sandbox create --credential
// NAME=env:VAR` reads from its own environment. curl inside sends the
// placeholder; the origin receives the value. `credential set` rotates it
// (file:PATH, the next request has the new value, the placeholder
// stays), `credential revoke` ends it (the placeholder refused, nothing
// reaches the origin), a set with --expires ends it again when the time
// comes; `credential list` shows each state, never the value or the
// placeholder. No value reaches the CLI's output, the gateway's log, the
// sandbox's audit, and a rotated or revoked one is gone from the
// database and its WAL.
func TestCredentialGateway(t *testing.T) {
	needTool(t, "curl")
	eachGatewayProvider(t, func(t *testing.T, p *gwProvider) {
		dir := p.dir(t, "gwcred")
		sock := filepath.Join(dir, "gw.sock")
		g := p.start(t, dir, "unix:"+sock)
		ip := map[string]string{"linux": "127.0.0.86", "docker": "127.0.0.87"}[p.name]
		o := newOrigin(t, "api.allowed.test", ip, true)
		v1, v2, v3 := realValue("gw1_"), realValue("gw2_"), realValue("gw3_")
		secrets := []string{v1, v2, v3}
		var seen seenLog
		bearerOrigin(o, map[string]string{"v1": v1, "v2": v2, "v3": v3}, &seen)
		creds := fmt.Sprintf(`credentials:
  - name: stored1
    source: {stored: true}
    expose: {env: TOKEN}
    endpoints:
      - {host: api.allowed.test, ports: [%d]}
`, o.port)
		pol := writePolicy(t, p.id, policy{Network: "proxy", NetRules: qualify.InspectNet(upstreamCAFile(t, p.id), o.inspected("access: read-only")), Credentials: creds})
		wd := mkdir(t, p.id, "gwcred-wd")
		create := []string{"create", "-p", pol, "--provider", p.name, "-C", wd, "--name", "gwcred", "--credential", "stored1=env:E2E_GW_REAL"}
		if p.name == "docker" {
			handOver(t, p.id, wd)
			create = append(create, "--image", curlImage(t))
		}
		var outputs []string // everything the CLI printed, for the leak check
		cli := func(env []string, args ...string) result {
			t.Helper()
			r := gwCLI(t, sock, env, args...)
			outputs = append(outputs, r.combined())
			return r
		}
		if r := cli([]string{"E2E_GW_REAL=" + v1}, create...); r.code != 0 {
			t.Fatalf("create: %s\n%s", r, g.log)
		}
		// call makes one request with the placeholder to /bearer/LABEL and
		// returns "PLACEHOLDER STATUS".
		call := func(label string) string {
			t.Helper()
			r := cli(nil, "exec", "gwcred", "--", "sh", "-c", `echo "$TOKEN $(curl -sS -m 20 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TOKEN" `+o.url("/bearer/"+label)+`)"`)
			return strings.TrimSpace(r.stdout)
		}
		received := func(label string) string {
			got, ok := seen.get("/bearer/" + label)
			if !ok {
				return "nothing"
			}
			return who(strings.TrimPrefix(got, "Bearer "), map[string]string{"v1": v1, "v2": v2, "v3": v3}[label[:2]], "")
		}
		ph, status, _ := strings.Cut(call("v1-first"), " ")
		if !strings.HasPrefix(ph, "corral-") || status != "200" || received("v1-first") != "real" {
			t.Errorf("first call: placeholder %q, status %s, the origin received %s (want a placeholder, 200, the real value)", ph, status, received("v1-first"))
		}

		// Rotation: the same placeholder, the new value.
		newKey := filepath.Join(mkdir(t, p.id, "gwcred-key"), "key")
		writeFile(t, p.id, newKey, v2+"\n", 0o600)
		if r := cli(nil, "credential", "set", "gwcred", "stored1", "file:"+newKey); r.code != 0 {
			t.Fatalf("credential set: %s", r)
		}
		if got := call("v2-rotated"); got != ph+" 200" || received("v2-rotated") != "real" {
			t.Errorf("after the rotation: %q, the origin received %s (want %q and the new value)", got, received("v2-rotated"), ph+" 200")
		}
		list := cli(nil, "credential", "list", "gwcred")
		if !strings.Contains(list.stdout, "stored1") || !strings.Contains(list.stdout, "active") || strings.Contains(list.stdout, ph) {
			t.Errorf("credential list: want stored1 active and no placeholder:\n%s", list)
		}
		dbNoLeak := func(when string, gone ...string) {
			t.Helper()
			for _, f := range []string{"g.db", "g.db-wal"} {
				if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
					assertNoLeak(t, f+" "+when, string(b), gone...)
				}
			}
		}
		dbNoLeak("after the rotation", v1)

		// Revocation: the placeholder refused, nothing reaches the origin.
		if r := cli(nil, "credential", "revoke", "gwcred", "stored1"); r.code != 0 {
			t.Fatalf("credential revoke: %s", r)
		}
		if got := call("v2-revoked"); got != ph+" 403" || received("v2-revoked") != "nothing" {
			t.Errorf("after the revocation: %q, the origin received %s (want %q and nothing)", got, received("v2-revoked"), ph+" 403")
		}
		if list := cli(nil, "credential", "list", "gwcred"); !strings.Contains(list.stdout, "revoked") {
			t.Errorf("credential list after revoke: want revoked:\n%s", list)
		}
		dbNoLeak("after the revocation", v1, v2)

		// A set ends the revocation; --expires ends the value again.
		if r := cli([]string{"E2E_GW_REAL=" + v3}, "credential", "set", "gwcred", "stored1", "env:E2E_GW_REAL", "--expires", "4s"); r.code != 0 {
			t.Fatalf("credential set --expires: %s", r)
		}
		if got := call("v3-fresh"); got != ph+" 200" || received("v3-fresh") != "real" {
			t.Errorf("after a set with --expires: %q, the origin received %s (want %q and the value)", got, received("v3-fresh"), ph+" 200")
		}
		time.Sleep(5 * time.Second)
		if got := call("v3-expired"); got != ph+" 403" || received("v3-expired") != "nothing" {
			t.Errorf("after the expiry: %q, the origin received %s (want %q and nothing)", got, received("v3-expired"), ph+" 403")
		}
		if list := cli(nil, "credential", "list", "gwcred"); !strings.Contains(list.stdout, "expired") {
			t.Errorf("credential list after the expiry: want expired:\n%s", list)
		}

		audit := cli(nil, "audit", "gwcred")
		cli(nil, "get", "gwcred")
		if !strings.Contains(audit.stdout, "credential_revoked") {
			t.Errorf("the sandbox's audit has no credential_revoked finding:\n%.2000s", audit.stdout)
		}
		if r := cli(nil, "delete", "gwcred"); r.code != 0 {
			t.Errorf("delete: %s", r)
		}
		assertNoLeak(t, "the CLI's output", strings.Join(outputs, "\n"), secrets...)
		assertNoLeak(t, "the gateway's log", g.log.String(), secrets...)
		dbNoLeak("after the delete", secrets...)
	})
}

//go:build linux

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestConsentGateway: a linux sandbox of `corral gateway serve`, made by
// `corral sandbox create` with a consent policy; a `corral sandbox exec`
// workload asks for a folder; `corral approvals --gateway` (watching, then
// approving) decides it; the same exec reads it; `corral approvals grants
// --gateway` shows it desired and effective (read back: its mount ids)
// while the exec runs, and revoked once the exec that asked has ended
// (scope once).
func TestConsentGateway(t *testing.T) {
	needTool(t, "curl")
	id := gatewayIdent(t)
	p := &gwProvider{name: "linux", id: id}
	dir := p.dir(t, "gwconsent")
	sock := filepath.Join(dir, "gw.sock")
	g := p.start(t, dir, "unix:"+sock)
	base := mkdir(t, id, "consent-folders")
	canary, secret := token(), token()
	docs := consentFolder(t, id, base, "docs", canary, secret)
	wd := mkdir(t, id, "gwconsent-wd")
	pol := writePolicy(t, id, policy{Credentials: consentSection(t, id, []string{base + "/**"}, []string{filepath.Join(docs, "secret")}, "")})
	if r := gwCLI(t, sock, nil, "create", "-p", pol, "--provider", "linux", "-C", wd, "--name", "gwconsent"); r.code != 0 {
		t.Fatalf("create: %s\n%s", r, g.log)
	}
	defer gwCLI(t, sock, nil, "delete", "gwconsent")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	cmd := exec.CommandContext(ctx, corralBin, "sandbox", "--gateway", "unix:"+sock, "exec", "gwconsent", "--", "/bin/sh", "-c", "cd "+wd+" && "+consentPrelude+fmt.Sprintf(`
ask docs '{"kind":"folder","target":%q,"reason":"gateway docs"}'
await docs
read -r l < /grants/ro/docs/a.txt; echo "read: $l"
echo "mask: $(cat /grants/ro/docs/secret/k 2>&1)"
echo > done
until [ -e finish ]; do sleep 0.1; done
`, docs))
	asIdent(cmd, id, nil)
	c := startConsentProc(t, id, wd, cmd, cancel)
	c.approvals = []string{"approvals", "--gateway", "unix:" + sock}
	c.startWatch()
	c.goAhead()
	r := c.pending(docs)
	if r.Sandbox == "" || r.Reason != "gateway docs" || !strings.HasSuffix(r.Requester.Exe, "/curl") {
		t.Errorf("the pending request through the gateway: %+v", r)
	}
	c.approve(r.ID, "/grants/ro/docs")
	c.waitFile("done")
	var gs []cGrant
	c.cliJSON(&gs, "grants", "--sandbox", r.Sandbox)
	if len(gs) != 1 || !gs[0].Desired || !gs[0].Effective || gs[0].Target != docs || gs[0].Folder == nil || gs[0].Folder.State != "effective" || len(gs[0].Folder.MountIDs) == 0 || !gs[0].Folder.Locked {
		t.Errorf("grants --gateway while the exec runs: %+v, want one desired and effective (read back: mount ids, locked)", gs)
	}
	if tx := c.cli("grants"); !strings.Contains(tx.stdout, docs) || !strings.Contains(tx.stdout, "/grants/ro/docs") {
		t.Errorf("grants --gateway (text): %s", tx)
	}
	c.touch("finish")
	res := c.end()
	assertCode(t, res, 0)
	want(t, res, "read", canary, false)
	if v, _ := lineValue(res.stdout, "mask"); !strings.Contains(v, "Permission denied") {
		t.Errorf("the never path in the gateway sandbox's grant: %q", v)
	}
	assertNoToken(t, res.combined(), secret)
	// Scope once: revoked when the exec that asked has ended.
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		c.cliJSON(&gs, "grants", "--sandbox", r.Sandbox)
		if len(gs) == 1 && !gs[0].Desired && !gs[0].Effective {
			break
		}
		if time.Now().After(end) {
			t.Errorf("the once grant after its exec ended: %+v, want revoked", gs)
			break
		}
	}
}

//go:build linux

package e2e

// Consent end to end (docs/consent.md; issue 17, "Checks that must
// hold"): a running `corral run` workload asks for a folder at
// $CORRAL_CONSENT_URL, a person decides with `corral approvals`, and the
// same workload process uses the grant without a restart; the grant
// stays read-only and masked even for host root in the sandbox's
// namespaces; revoking a grant still held open names the holder (and
// kills it on request); prompt spam is rate limited; a request outside
// the ceiling prompts nobody. As root and as corral-test.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestConsentFolderLive: the workload (one sh, started before anything
// was granted) asks for a folder; the request is pending with the
// requester named from the kernel (curl), the reason and the ceiling
// entry; `corral approvals approve` puts it in force and says so; the
// workload's wait reports it effective at /grants/ro/docs, and the same
// shell reads it with a builtin. Writing into it fails (EROFS) and the
// consent.folders.never path inside is unreadable.
func TestConsentFolderLive(t *testing.T) {
	needTool(t, "curl")
	eachIdent(t, func(t *testing.T, id *ident) {
		base := mkdir(t, id, "consent-folders")
		canary, secret := token(), token()
		docs := consentFolder(t, id, base, "docs", canary, secret)
		wd := consentWorkdir(t, id)
		pol := writePolicy(t, id, policy{Credentials: consentSection(t, id, []string{base + "/**"}, []string{filepath.Join(docs, "secret")}, "")})
		c := startConsentRun(t, id, pol, wd, nil, fmt.Sprintf(`
echo "before: $(ls -A /grants/ro | tr '\n' ' ')"
echo "shell: $$"
ask docs '{"kind":"folder","target":%q,"access":"ro","reason":"read the docs"}'
await docs
read -r l < /grants/ro/docs/a.txt; echo "read: $l"
echo "shell-after: $$"
echo "write: $( { echo x >> /grants/ro/docs/a.txt; } 2>&1 )"
echo "create: $(touch /grants/ro/docs/new 2>&1)"
echo "mask: $(cat /grants/ro/docs/secret/k 2>&1)"
`, docs))
		c.goAhead()
		r := c.pending(docs)
		if r.Access != "ro" || r.Reason != "read the docs" || r.Ceiling != "consent.folders.ask[0]" || r.Requester.PID == 0 || !strings.HasSuffix(r.Requester.Exe, "/curl") || r.Requester.Via != "tcp" || !strings.HasPrefix(r.Digest, "sha256:") {
			t.Errorf("the pending request: %+v, want ro, the reason, consent.folders.ask[0], the requester curl named from the kernel (tcp), a digest", r)
		}
		c.approve(r.ID, "/grants/ro/docs")
		res := c.end()
		assertCode(t, res, 0)
		if a := c.answerOf("docs"); a.status != 202 || a.State != statePending || a.ID != r.ID || !strings.Contains(a.WaitURL, r.ID) {
			t.Errorf("the ask's answer: %d %s", a.status, a.raw)
		}
		w := c.waited("docs")
		if w.State != stateApproved || !w.Effective || w.Path != "/grants/ro/docs" || w.Grant == "" || w.Decision == nil || w.Decision.Scope != "once" {
			t.Errorf("the wait's answer: %+v, want approved, effective at /grants/ro/docs, scope once", w)
		}
		want(t, res, "before", "", false)
		if sh, _ := lineValue(res.stdout, "shell"); sh == "" || !strings.Contains(res.stdout, "shell-after: "+sh+"\n") {
			t.Errorf("the shell that read is not the one that asked:\n%s", res.stdout)
		}
		want(t, res, "read", canary, false)
		for _, k := range []string{"write", "create"} {
			if v, _ := lineValue(res.stdout, k); !strings.Contains(v, "Read-only file system") {
				t.Errorf("%s in the read-only grant: %q, want EROFS", k, v)
			}
		}
		if v, _ := lineValue(res.stdout, "mask"); !strings.Contains(v, "Permission denied") {
			t.Errorf("the never path inside the grant: %q, want it masked (Permission denied)", v)
		}
		assertNoToken(t, res.combined(), secret)
		if b, _ := os.ReadFile(filepath.Join(docs, "a.txt")); string(b) != canary+"\n" {
			t.Errorf("the granted file changed on the host: %q", b)
		}
		if exists(filepath.Join(docs, "new")) {
			t.Error("a file was created in the read-only grant's folder")
		}
	})
}

// TestConsentGrantLocked: a read-only grant cannot be made writable from
// inside, and its mask cannot be removed, even by host root in the
// sandbox's mount and pid namespaces (nsenter -m -p: every capability,
// more than any process of the sandbox's user namespace has): the
// kernel locked them when they came by propagation (MNT_LOCK_READONLY,
// MNT_LOCKED, mount_namespaces(7)). The control: the same nsenter
// remounts read-write the policy's own read-only bind, which init made
// itself. The workload still gets EROFS afterwards.
func TestConsentGrantLocked(t *testing.T) {
	needTool(t, "curl")
	id := rootIdent(t)
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		t.Skip("no nsenter (util-linux)")
	}
	base := mkdir(t, id, "consent-folders")
	docs := consentFolder(t, id, base, "docs", token(), token())
	ctl := mkdir(t, id, "consent-control")
	wd := consentWorkdir(t, id)
	pol := writePolicy(t, id, policy{RO: []string{ctl}, Credentials: consentSection(t, id, []string{base + "/**"}, []string{filepath.Join(docs, "secret")}, "")})
	c := startConsentRun(t, id, pol, wd, nil, fmt.Sprintf(`
ask docs '{"kind":"folder","target":%q}'
await docs
echo > granted
until [ -e probed ]; do sleep 0.1; done
echo "write: $(touch /grants/ro/docs/new 2>&1)"
echo "mask: $(cat /grants/ro/docs/secret/k 2>&1)"
echo "control: $(touch %s/made 2>&1 && echo made)"
`, docs, ctl))
	c.goAhead()
	r := c.pending(docs)
	c.approve(r.ID, "/grants/ro/docs")
	c.waitFile("granted")
	init := sandboxInit(t, c.pid())
	in := func(script string) (string, error) {
		out, err := exec.Command(nsenter, "-t", strconv.Itoa(init), "-m", "-p", "--", "/bin/sh", "-c", script).CombinedOutput()
		return string(out), err
	}
	for _, probe := range []string{"mount -o remount,rw /grants/ro/docs", "mount -o remount,bind,rw /grants/ro/docs"} {
		if out, err := in(probe); err == nil || !strings.Contains(out, "ermission denied") {
			t.Errorf("%s as host root in the sandbox's namespaces: %v %q, want EPERM", probe, err, out)
		}
	}
	if out, err := in("umount /grants/ro/docs/secret"); err == nil {
		t.Errorf("umount of the grant's mask: %q, want it refused (EINVAL)", out)
	}
	if out, err := in("mount -o remount,bind,rw " + ctl); err != nil {
		t.Errorf("control: remount read-write init's own read-only bind %s: %v %q (the probe could not have succeeded)", ctl, err, out)
	}
	mi := readFile(t, fmt.Sprintf("/proc/%d/mountinfo", init))
	if !mountHasOpt(mi, "/grants/ro/docs", "ro") {
		t.Errorf("the grant after the probes is not read-only:\n%s", mi)
	}
	c.touch("probed")
	res := c.end()
	assertCode(t, res, 0)
	if v, _ := lineValue(res.stdout, "write"); !strings.Contains(v, "Read-only file system") {
		t.Errorf("the workload's write after the probes: %q, want EROFS", v)
	}
	if v, _ := lineValue(res.stdout, "mask"); !strings.Contains(v, "Permission denied") {
		t.Errorf("the mask after the probes: %q", v)
	}
	// The control remount was real: Landlock still keeps the workload out
	// of a read-only rule, so the write is refused there as well, but not
	// by the mount (EACCES, not EROFS).
	if v, _ := lineValue(res.stdout, "control"); strings.Contains(v, "Read-only file system") {
		t.Errorf("control: the policy's bind is still read-only after its remount: %q", v)
	}
}

// sandboxInit is the host pid of the init of corral run pid's sandbox
// (a descendant of it named corral-init).
func sandboxInit(t *testing.T, pid int) int {
	t.Helper()
	for _, p := range procsBelow(pid) {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p)); strings.HasPrefix(string(b), "corral-init\x00") {
			return p
		}
	}
	t.Fatalf("no corral-init below corral run %d", pid)
	return 0
}

// mountHasOpt says whether mountinfo text has a mount at point whose
// per-mount options include opt.
func mountHasOpt(mi, point, opt string) bool {
	for _, l := range strings.Split(mi, "\n") {
		f := strings.Fields(l)
		if len(f) > 5 && f[4] == point && slices.Contains(strings.Split(f[5], ","), opt) {
			return true
		}
	}
	return false
}

// TestConsentRevokeHeld: the workload shell holds a granted file open on
// fd 5; `corral approvals revoke GRANT -o json` reports the grant
// revoked-held by that shell (its host pid, fd 5); a new open inside
// fails, the held fd keeps reading (the kernel has no revoke). The
// folder asked again is a new grant (docs-2); a sleep holding it on fd 5
// is killed by `revoke --kill-holders` (reported killed; the workload
// sees it die of SIGKILL).
func TestConsentRevokeHeld(t *testing.T) {
	needTool(t, "curl")
	eachIdent(t, func(t *testing.T, id *ident) {
		base := mkdir(t, id, "consent-folders")
		canary := token()
		docs := consentFolder(t, id, base, "docs", canary, token())
		wd := consentWorkdir(t, id)
		pol := writePolicy(t, id, policy{Credentials: consentSection(t, id, []string{base + "/**"}, nil, "")})
		c := startConsentRun(t, id, pol, wd, nil, fmt.Sprintf(`
ask one '{"kind":"folder","target":%[1]q}'
await one
exec 5< /grants/ro/docs/a.txt
echo > opened
until [ -e revoked ]; do sleep 0.1; done
echo "reopen: $(cat /grants/ro/docs/a.txt 2>&1)"
read -r l <&5; echo "held-read: $l"
exec 5<&-
ask two '{"kind":"folder","target":%[1]q}'
await two
sleep 1000 5< /grants/ro/docs-2/a.txt &
echo $! > holder
until [ -e killed ]; do sleep 0.1; done
wait $!; echo "holder-status: $?"
`, docs))
		c.goAhead()
		r1 := c.pending(docs)
		c.approve(r1.ID, "/grants/ro/docs")
		c.waitFile("opened")
		g1 := c.waited("one").Grant
		var g cGrant
		c.cliJSON(&g, "revoke", g1)
		shell := c.workloadShell()
		if g.Desired || g.Effective || g.Folder == nil || g.Folder.State != "revoked-held" || !hasHolderFD(g.Folder.Holders, shell, 5) {
			t.Errorf("revoke of a grant held open: %+v (folder %+v), want revoked-held by the workload shell (host pid %d) on fd 5", g, g.Folder, shell)
		}
		if !strings.Contains(g.Detail, fmt.Sprintf("held: pid %d fd 5", shell)) {
			t.Errorf("the revoke's detail %q does not name the holder pid %d fd 5", g.Detail, shell)
		}
		c.touch("revoked")
		r2 := c.pending(docs, r1.ID)
		c.approve(r2.ID, "/grants/ro/docs-2")
		c.waitFile("holder")
		var k cGrant
		c.cliJSON(&k, "revoke", c.waited("two").Grant, "--kill-holders")
		var killed []int
		if k.Folder != nil {
			for _, h := range k.Folder.Holders {
				if h.FD == 5 && h.Killed {
					killed = append(killed, h.PID)
				}
			}
		}
		if len(killed) != 1 || killed[0] == shell {
			t.Errorf("revoke --kill-holders: %+v, want one holder on fd 5 (the sleep, not the shell) reported killed", k.Folder)
		}
		c.touch("killed")
		res := c.end()
		assertCode(t, res, 0)
		if v, _ := lineValue(res.stdout, "reopen"); !strings.Contains(v, "No such file or directory") || strings.Contains(v, canary) {
			t.Errorf("a new open after the revoke: %q, want ENOENT", v)
		}
		want(t, res, "held-read", canary, false)
		want(t, res, "holder-status", "137", false)
	})
}

func hasHolderFD(hs []cHolder, pid, fd int) bool {
	return slices.ContainsFunc(hs, func(h cHolder) bool { return h.PID == pid && h.FD == fd })
}

// workloadShell is the host pid of the run's workload shell: the process
// below corral run whose command line is the test's script.
func (c *consentRun) workloadShell() int {
	c.t.Helper()
	for _, p := range procsBelow(c.pid()) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		if strings.HasPrefix(string(b), "/bin/sh\x00-c\x00") && strings.Contains(string(b), "until [ -e go ]") {
			return p
		}
	}
	c.t.Fatalf("no workload shell below corral run %d", c.pid())
	return 0
}

// TestConsentSpam: identical pending requests coalesce (one id, asked
// counts them, the longer reason kept) and cost nothing; beyond
// consent.max_pending a new request is refused 429 rate_limited, and
// beyond consent.rate too; none of those reaches the approver (the
// watcher saw a "requested" event only for the requests that were
// pending).
func TestConsentSpam(t *testing.T) {
	needTool(t, "curl")
	eachIdent(t, func(t *testing.T, id *ident) {
		base := mkdir(t, id, "consent-folders")
		var dirs []string
		for i := range 14 {
			d := filepath.Join(base, fmt.Sprintf("f%d", i))
			writeFile(t, id, filepath.Join(d, "a.txt"), "x\n", 0o644)
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
			dirs = append(dirs, d)
		}
		wd := consentWorkdir(t, id)
		pol := writePolicy(t, id, policy{Credentials: consentSection(t, id, []string{base + "/**"}, nil, "  max_pending: 2\n  rate: {burst: 3, per: 1h}\n")})
		q := func(i int) string { return strconv.Quote(dirs[i]) }
		c := startConsentRun(t, id, pol, wd, nil, fmt.Sprintf(`
ask a1 '{"kind":"folder","target":%[1]s,"reason":"r"}'
ask a1b '{"kind":"folder","target":%[1]s,"reason":"a longer reason"}'
ask a1c '{"kind":"folder","target":%[1]s}'
ask a2 '{"kind":"folder","target":%[2]s}'
ask a3 '{"kind":"folder","target":%[3]s}'
echo > phase1
until [ -e phase2 ]; do sleep 0.1; done
ask b3 '{"kind":"folder","target":%[3]s}'
i=4; while [ $i -lt 14 ]; do ask "s$i" "{\"kind\":\"folder\",\"target\":\"%[4]s/f$i\"}"; i=$((i+1)); done
`, q(1), q(2), q(3), base))
		c.goAhead()
		c.waitFile("phase1")
		a1, a1b, a1c, a2, a3 := c.answerOf("a1"), c.answerOf("a1b"), c.answerOf("a1c"), c.answerOf("a2"), c.answerOf("a3")
		if a1.status != 202 || a1b.status != 202 || a1c.status != 202 || a1b.ID != a1.ID || a1c.ID != a1.ID || a1c.Asked != 3 || a1c.Reason != "a longer reason" {
			t.Errorf("identical requests: %d %s, %d %s, %d %s; want one pending id, asked 3, the longer reason", a1.status, a1.ID, a1b.status, a1b.ID, a1c.status, a1c.raw)
		}
		if a2.status != 202 || a2.ID == a1.ID {
			t.Errorf("a second folder: %d %s", a2.status, a2.raw)
		}
		if a3.status != 429 || a3.State != stateRateLimited || !strings.Contains(a3.Detail, "max_pending") {
			t.Errorf("a third pending request with max_pending 2: %d %s, want 429 rate_limited (max_pending)", a3.status, a3.raw)
		}
		var listed []cRequest
		c.cliJSON(&listed, "list")
		if len(listed) != 2 || !slices.ContainsFunc(listed, func(r cRequest) bool { return r.ID == a1.ID && r.Asked == 3 }) {
			t.Errorf("pending after phase 1: %+v, want a1 (asked 3) and a2", listed)
		}
		for _, a := range []answer{a1, a2} {
			if d := c.cli("deny", a.ID, "--reason", "spam"); d.code != 0 || !strings.Contains(d.stdout, "denied") {
				t.Errorf("deny %s: %s", a.ID, d)
			}
		}
		c.touch("phase2")
		res := c.end()
		assertCode(t, res, 0)
		if b3 := c.answerOf("b3"); b3.status != 202 {
			t.Errorf("the last token: %d %s, want pending", b3.status, b3.raw)
		}
		for i := 4; i < 14; i++ {
			s := c.answerOf(fmt.Sprintf("s%d", i))
			if s.status != 429 || s.State != stateRateLimited || !strings.Contains(s.Detail, "consent.rate") {
				t.Errorf("request %d beyond consent.rate: %d %s, want 429 rate_limited (consent.rate)", i, s.status, s.raw)
			}
		}
		var prompted []string
		for _, e := range c.watched() {
			if e.Request != nil && (e.Activity == "requested" || e.Activity == "prompted") && !contains(prompted, e.Request.Target) {
				prompted = append(prompted, e.Request.Target)
			}
		}
		if want := []string{dirs[1], dirs[2], dirs[3]}; !slices.Equal(prompted, want) {
			t.Errorf("the approver was asked about %v, want only %v (the pending ones)", prompted, want)
		}
	})
}

// TestConsentOutsideCeiling: requests outside folders.ask, inside
// folders.never or a filesystem.deny entry, and rw above folders.access,
// are refused 403 at once with the entry that refuses them; the approver
// is never asked about them (no requested or prompted event, no request
// pending), while a request inside the ceiling, asked after them, is
// (the control).
func TestConsentOutsideCeiling(t *testing.T) {
	needTool(t, "curl")
	eachIdent(t, func(t *testing.T, id *ident) {
		base := mkdir(t, id, "consent-folders")
		docs := consentFolder(t, id, base, "docs", token(), token())
		denied := consentFolder(t, id, base, "denied", token(), token())
		outside := consentFolder(t, id, mkdir(t, id, "consent-outside"), "out", token(), token())
		wd := consentWorkdir(t, id)
		pol := writePolicy(t, id, policy{Deny: []string{denied}, Credentials: consentSection(t, id, []string{base + "/**"}, []string{filepath.Join(docs, "secret")}, "")})
		c := startConsentRun(t, id, pol, wd, nil, fmt.Sprintf(`
ask out '{"kind":"folder","target":%q}'
ask never '{"kind":"folder","target":%q}'
ask deny '{"kind":"folder","target":%q}'
ask rw '{"kind":"folder","target":%q,"access":"rw"}'
ask ok '{"kind":"folder","target":%[4]q}'
`, outside, filepath.Join(docs, "secret"), denied, docs))
		c.goAhead()
		ok := c.waitEvent("the control request", func(e cEvent) bool {
			return e.Activity == "requested" && e.Request != nil && e.Request.Target == docs
		})
		res := c.end()
		assertCode(t, res, 0)
		for name, field := range map[string]string{"out": "consent.folders.ask", "never": "consent.folders.never[0]", "deny": fmt.Sprintf("filesystem.deny[%d]", len(systemDeny)), "rw": "consent.folders.access"} {
			a := c.answerOf(name)
			if a.status != 403 || a.State != stateRefused || a.Ceiling != field || !strings.Contains(a.Detail, "nobody was asked") {
				t.Errorf("%s: %d %s, want 403 refused, ceiling %s, nobody asked", name, a.status, a.raw, field)
			}
			for _, e := range c.watched() {
				if e.Request != nil && e.Request.ID == a.ID && e.Activity != "refused" {
					t.Errorf("%s: the approver got a %s event for a request outside the ceiling", name, e.Activity)
				}
			}
		}
		if a := c.answerOf("ok"); a.status != 202 || a.ID != ok.Request.ID {
			t.Errorf("the control request: %d %s", a.status, a.raw)
		}
	})
}

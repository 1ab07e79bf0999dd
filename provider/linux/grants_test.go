//go:build linux

package linux

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/grants"
	"github.com/corral-sandbox/corral/internal/mountinfo"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/provider/providertest"
)

// Live folder grants and the consent channel, in real sandboxes: every
// grant is made while one shell runs inside (started before it, after
// Landlock), and that same shell uses it. TestGrantsUnprivileged runs
// them again as corral-test.

// consentPlan maps the default policy (adjusted) for wd and home with a
// consent section: folders (slots planned) when folders is set.
func consentPlan(t *testing.T, wd, home string, folders bool, adjust func(*policy.Policy)) *provider.Plan {
	t.Helper()
	pol := policy.Default()
	for _, l := range New().Capabilities(context.Background()).Layers {
		if l.State == provider.LayerUnavailable {
			pol.Layers[l.Layer] = policy.Optional
		}
	}
	if adjust != nil {
		adjust(pol)
	}
	r, err := pol.Resolve(policy.Context{Home: home, Workdir: wd, Environ: []string{"PATH=" + policy.DefaultPATH, "LANG=C"}})
	if err != nil {
		t.Fatal(err)
	}
	r.Consent = &policy.ResolvedConsent{}
	if folders {
		r.Consent.Folders = []policy.ConsentGlob{{Glob: "/**", Field: "consent.folders.ask[0]"}}
	}
	plan, loss := New().Map(context.Background(), r)
	if loss.HasErrors() {
		t.Fatal(provider.Rejected(loss))
	}
	return plan
}

// shell is one shell running in a sandbox, fed commands on its stdin.
type shell struct {
	in   *os.File
	out  *bufio.Reader
	pid  int // host pid
	done chan execResult
}

// startShell provisions and starts a per-run sandbox of plan and runs
// one shell in it; the sandbox goes with the test.
func startShell(t *testing.T, plan *provider.Plan) (*Sandbox, *shell) {
	t.Helper()
	ctx := context.Background()
	psb, err := New().Provision(ctx, plan, provider.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sb := psb.(*Sandbox)
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = sb.Stop(c)
		_ = sb.Deprovision(c)
	})
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return sb, runShell(t, sb)
}

// runShell starts bash in sb, its stdin and stdout pipes.
func runShell(t *testing.T, sb provider.Sandbox) *shell {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	sh := &shell{in: inW, out: bufio.NewReader(outR), done: make(chan execResult, 1)}
	started := make(chan int, 1)
	go func() {
		st, err := sb.Exec(context.Background(), provider.ExecSpec{Args: []string{"bash", "--norc", "--noprofile"}, Dir: "/", Stdin: inR, Stdout: outW, Stderr: outW,
			Started: func(pid int) { started <- pid }})
		inR.Close()
		outW.Close()
		sh.done <- execResult{st: st, err: err}
	}()
	select {
	case sh.pid = <-started:
	case r := <-sh.done:
		t.Fatalf("the shell did not start: %+v %v", r.st, r.err)
	case <-time.After(30 * time.Second):
		t.Fatal("the shell did not start")
	}
	t.Cleanup(func() { inW.Close() })
	return sh
}

// run runs cmd in the shell and returns its output (stdout and stderr)
// and exit status.
func (sh *shell) run(t *testing.T, cmd string) (string, int) {
	t.Helper()
	const end = "__corral_end__"
	if _, err := fmt.Fprintf(sh.in, "{ %s ; } 2>&1; printf '\\n%s %%d\\n' $?\n", cmd, end); err != nil {
		t.Fatalf("shell: %v", err)
	}
	var b strings.Builder
	for {
		line, err := sh.out.ReadString('\n')
		if rest, ok := strings.CutPrefix(line, end+" "); ok {
			var code int
			fmt.Sscanf(rest, "%d", &code)
			return strings.TrimSuffix(b.String(), "\n"), code
		}
		b.WriteString(line)
		if err != nil {
			t.Fatalf("shell ended (%v) running %q: %s", err, cmd, b.String())
		}
	}
}

// must runs cmd and fails the test unless it succeeds; it returns the
// output.
func (sh *shell) must(t *testing.T, cmd string) string {
	t.Helper()
	out, code := sh.run(t, cmd)
	if code != 0 {
		t.Fatalf("%s: exit %d: %s", cmd, code, out)
	}
	return out
}

// fails runs cmd and fails the test unless it fails with output
// containing want.
func (sh *shell) fails(t *testing.T, cmd, want string) {
	t.Helper()
	out, code := sh.run(t, cmd)
	if code == 0 || !strings.Contains(out, want) {
		t.Errorf("%s: exit %d, output %q; want a failure saying %q", cmd, code, out, want)
	}
}

// folder makes a host directory for a grant: files, a subdirectory and
// a file to mask, symlinks leading out, a file outside; it returns the
// directory, its FolderGrant (dev and ino as now) and the outside file.
func folder(t *testing.T, label string, ro bool) (string, provider.FolderGrant, string) {
	t.Helper()
	base := t.TempDir()
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, label)
	outside := filepath.Join(base, "secret.txt")
	for p, body := range map[string]string{
		"a.txt":          "granted " + label,
		"held.txt":       "held",
		"private/key":    "private key",
		"sub/b.txt":      "sub file",
		"sub/.env":       "denied file",
		"keep/guard.txt": "protected",
	} {
		p = filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o666); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o666); err != nil { // past the umask: the workload's uid may write
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(outside, []byte("outside secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, filepath.Join(dir, "sub"), filepath.Join(dir, "keep"), filepath.Join(dir, "private")} {
		if err := os.Chmod(d, 0o777); err != nil { // the workload's uid writes in a rw grant
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(dir, "abs-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../secret.txt", filepath.Join(dir, "rel-link")); err != nil {
		t.Fatal(err)
	}
	return dir, grantOf(t, label, dir, ro), outside
}

// grantOf is the FolderGrant of dir as it is now.
func grantOf(t *testing.T, label, dir string, ro bool) provider.FolderGrant {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	return provider.FolderGrant{Label: label, Source: dir, Dev: st.Dev, Ino: st.Ino, ReadOnly: ro}
}

func TestGrantsLive(t *testing.T) {
	needPureGo(t)
	wd, home := workdirs(t, 65534)
	plan := consentPlan(t, wd, home, true, nil)
	sb, sh := startShell(t, plan)
	ctx := context.Background()

	// The slots are there, empty, a read-only slave of the holder's.
	es, err := mountinfo.Read(fmt.Sprintf("/proc/%d/mountinfo", sb.InitPID()))
	if err != nil {
		t.Fatal(err)
	}
	if top, ok := grants.Top(es, provider.GrantSlots); !ok || top.Master() == 0 || !top.ReadOnly() {
		t.Fatalf("%s in the sandbox: %+v (found %v), want a read-only slave", provider.GrantSlots, top, ok)
	}
	if out := sh.must(t, "ls -A /grants/ro /grants/rw"); strings.Contains(out, "docs") {
		t.Errorf("slots before any grant: %q", out)
	}
	sh.fails(t, "mkdir /grants/rw/mine", "")
	if out := sh.must(t, "echo $"+provider.ConsentURLEnv); strings.TrimSpace(out) != "http://127.0.0.1:3129" {
		t.Errorf("%s = %q", provider.ConsentURLEnv, out)
	}
	if out := sh.must(t, "cat "+ConsentDocPath); !strings.Contains(out, "/grants/ro/") || !strings.Contains(out, "/v1/requests") {
		t.Errorf("%s: %q", ConsentDocPath, out)
	}
	sh.fails(t, "echo x >> "+ConsentDocPath, "")

	// A read-only grant, with a mask on a directory and on a file.
	dir, g, _ := folder(t, "docs", true)
	g.Masks = []string{filepath.Join(dir, "private"), filepath.Join(dir, "sub/.env"), filepath.Join(dir, "absent")}
	st, err := sb.GrantFolder(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != provider.GrantEffective || st.Path != "/grants/ro/docs" || !st.Locked || len(st.MountIDs) != 3 || !strings.Contains(st.Detail, "absent") {
		t.Errorf("read-only grant: %+v, want effective, locked, 3 mounts (the grant, 2 masks), the absent mask said", st)
	}
	if out := sh.must(t, "read -r l < /grants/ro/docs/a.txt; echo \"$l\""); strings.TrimSpace(out) != "granted docs" {
		t.Errorf("the shell reads the grant: %q", out)
	}
	sh.must(t, "cat /grants/ro/docs/sub/b.txt")
	sh.fails(t, "echo x >> /grants/ro/docs/a.txt", "Read-only file system")
	sh.fails(t, "touch /grants/ro/docs/new", "Read-only file system")
	sh.fails(t, "ls /grants/ro/docs/private", "Permission denied")
	sh.fails(t, "cat /grants/ro/docs/private/key", "Permission denied")
	sh.fails(t, "cat /grants/ro/docs/sub/.env", "Permission denied")
	// Nothing outside: .. stays in the slot, the links resolve in the
	// sandbox's root.
	if out := sh.must(t, "ls -A /grants/ro/docs/.."); strings.TrimSpace(out) != "docs" {
		t.Errorf("ls /grants/ro/docs/..: %q, want only docs", out)
	}
	sh.fails(t, "ls /grants/ro/docs/../..", "Permission denied")
	for _, l := range []string{"abs-link", "rel-link"} {
		if out, code := sh.run(t, "cat /grants/ro/docs/"+l); code == 0 || strings.Contains(out, "outside secret") {
			t.Errorf("cat %s: exit %d %q, want it to reach nothing", l, code, out)
		}
	}

	// A read-write grant, with a read-only path inside.
	rwdir, rg, _ := folder(t, "proj", false)
	rg.ReadOnlyWithin = []string{filepath.Join(rwdir, "keep")}
	rst, err := sb.GrantFolder(ctx, rg)
	if err != nil {
		t.Fatal(err)
	}
	if rst.State != provider.GrantEffective || rst.Path != "/grants/rw/proj" || rst.ReadOnly || len(rst.MountIDs) != 2 {
		t.Errorf("read-write grant: %+v", rst)
	}
	sh.must(t, "echo written > /grants/rw/proj/new.txt")
	if b, err := os.ReadFile(filepath.Join(rwdir, "new.txt")); err != nil || string(b) != "written\n" {
		t.Errorf("the host's file written through the grant: %q %v", b, err)
	}
	sh.fails(t, "echo x >> /grants/rw/proj/keep/guard.txt", "Read-only file system")

	// Labels are never reused; another mount elsewhere gives nothing.
	if _, err := sb.GrantFolder(ctx, g); provider.CodeOf(err) != provider.CodePolicyRejected {
		t.Errorf("a used label: %v, want policy_rejected", err)
	}
	if _, err := sb.GrantFolder(ctx, provider.FolderGrant{Label: "../x", Source: dir, Dev: g.Dev, Ino: g.Ino}); provider.CodeOf(err) != provider.CodePolicyRejected {
		t.Errorf("a bad label: %v, want policy_rejected", err)
	}

	// Revoke while the shell holds a file open (fd 5) and its cwd is in
	// the grant: new opens fail; the holders are named.
	sh.must(t, "exec 5< /grants/rw/proj/held.txt; cd /grants/rw/proj")
	vst, err := sb.RevokeFolder(ctx, "proj", false)
	if err != nil {
		t.Fatal(err)
	}
	if vst.State != provider.GrantHeld || !hasHolder(vst.Holders, sh.pid, 5) || !hasHolder(vst.Holders, sh.pid, -1) {
		t.Errorf("revoke with a held fd and cwd: %+v, want revoked-held by pid %d fd 5 and its cwd", vst, sh.pid)
	}
	sh.fails(t, "cat /grants/rw/proj/a.txt", "No such file")
	if out := sh.must(t, "read -r l <&5; echo \"$l\""); strings.TrimSpace(out) != "held" {
		t.Errorf("the held fd after the revoke: %q (it keeps working: the kernel has no revoke)", out)
	}
	sh.must(t, "exec 5<&-; cd /")
	all, err := sb.FolderGrants(ctx)
	if err != nil || len(all) != 2 || all[0].State != provider.GrantEffective || all[1].State != provider.GrantRevoked || len(all[1].Holders) != 0 {
		t.Errorf("FolderGrants once the shell let go: %+v %v", all, err)
	}
	if _, err := sb.RevokeFolder(ctx, "nosuch", false); provider.CodeOf(err) != provider.CodeNotFound {
		t.Errorf("revoke of an unknown label: %v", err)
	}
	sh.fails(t, "ls /grants/rw/proj", "No such file")
}

func hasHolder(hs []provider.Holder, pid, fd int) bool {
	return slices.ContainsFunc(hs, func(h provider.Holder) bool { return h.PID == pid && h.FD == fd })
}

// A source swapped for another directory between the request (its dev
// and ino) and the grant is refused, and a symlink put in its place too;
// a mask that cannot be placed (its path goes through a symlink) refuses
// the grant, leaving nothing in the slot, not even the masks placed
// before it.
func TestGrantsRefused(t *testing.T) {
	needPureGo(t)
	wd, home := workdirs(t, 65534)
	sb, sh := startShell(t, consentPlan(t, wd, home, true, nil))
	ctx := context.Background()
	dir, g, _ := folder(t, "swap", true)
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := sb.GrantFolder(ctx, g)
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Code != provider.CodePolicyRejected || pe.Layer != "mounts" || !strings.Contains(pe.Msg, "changed since") {
		t.Errorf("a swapped source: %v, want policy_rejected, layer mounts, changed since", err)
	}
	os.Remove(dir)
	if err := os.Symlink(dir+".old", dir); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.GrantFolder(ctx, g); provider.CodeOf(err) != provider.CodePolicyRejected {
		t.Errorf("a source made a symlink: %v, want policy_rejected", err)
	}
	mdir, mg, _ := folder(t, "masked", true)
	if err := os.Symlink("sub", filepath.Join(mdir, "dirlink")); err != nil {
		t.Fatal(err)
	}
	mg.Masks = []string{filepath.Join(mdir, "private"), filepath.Join(mdir, "dirlink/b.txt")}
	if _, err := sb.GrantFolder(ctx, mg); provider.CodeOf(err) != provider.CodePolicyRejected || !strings.Contains(err.Error(), "cannot be placed") {
		t.Errorf("a mask through a symlink: %v, want policy_rejected: cannot be placed", err)
	}
	if out := sh.must(t, "ls -A /grants/ro /grants/rw"); strings.Contains(out, "masked") || strings.Contains(out, "swap") {
		t.Errorf("the slots after refused grants: %q", out)
	}
	if gs, _ := sb.FolderGrants(ctx); len(gs) != 0 {
		t.Errorf("refused grants listed: %+v", gs)
	}
}

// A sandbox without consent.folders has no slots: a grant is refused,
// naming the layer, and the policy's reason.
func TestGrantsNoSlots(t *testing.T) {
	needPureGo(t)
	wd, home := workdirs(t, 65534)
	plan := consentPlan(t, wd, home, false, nil)
	if plan.Details.(*InitSpec).slots() {
		t.Fatal("slots planned without consent.folders")
	}
	sb, sh := startShell(t, plan)
	_, g, _ := folder(t, "docs", true)
	_, err := sb.GrantFolder(context.Background(), g)
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Code != provider.CodePolicyRejected || pe.Layer != "mounts" || !strings.Contains(pe.Msg, "no consent.folders") {
		t.Errorf("grant without slots: %v", err)
	}
	sh.fails(t, "ls /grants", "No such file")
}

// The kernel keeps a grant read-only and its masks in place even for a
// process with every capability in the sandbox's user namespace: host
// root in the sandbox's mount and pid namespaces (nsenter -m -p; not -U:
// an exec in a user namespace that does not map uid 0 drops every
// capability, capabilities(7), so host root is the strongest such
// process there is). The same remount and umount work on the mounts init
// made itself (a read-only grant and a deny of the policy), which shows
// the probe could.
func TestGrantsLocked(t *testing.T) {
	needPureGo(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: nsenter into the sandbox's mount namespace")
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		t.Skip("no nsenter (util-linux)")
	}
	wd, home := workdirs(t, 65534)
	ctl := providertest.PublicDir(t)
	for _, d := range []string{"ro", "denied"} {
		if err := os.MkdirAll(filepath.Join(ctl, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	plan := consentPlan(t, wd, home, true, func(p *policy.Policy) {
		p.Filesystem.ReadOnly = append(p.Filesystem.ReadOnly, policy.PathRule{Path: filepath.Join(ctl, "ro")})
		p.Filesystem.Deny = append(p.Filesystem.Deny, policy.PathRule{Path: filepath.Join(ctl, "denied")})
	})
	sb, _ := startShell(t, plan)
	dir, g, _ := folder(t, "docs", true)
	g.Masks = []string{filepath.Join(dir, "private")}
	if _, err := sb.GrantFolder(context.Background(), g); err != nil {
		t.Fatal(err)
	}
	in := func(args ...string) (string, error) {
		out, err := exec.Command(nsenter, append([]string{"-t", fmt.Sprint(sb.InitPID()), "-m", "-p", "--"}, args...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := in("mount", "-o", "remount,bind,rw", "/grants/ro/docs"); err == nil || !strings.Contains(out, "ermission denied") {
		t.Errorf("clear RDONLY on the grant: %v %q, want EPERM", err, out)
	}
	if out, err := in("umount", "/grants/ro/docs/private"); err == nil {
		t.Errorf("umount the grant's mask: %q, want EINVAL", out)
	}
	es, _ := mountinfo.Read(fmt.Sprintf("/proc/%d/mountinfo", sb.InitPID()))
	if top, ok := grants.Top(es, "/grants/ro/docs"); !ok || !top.ReadOnly() {
		t.Errorf("the grant after the probes: %+v", top)
	}
	if _, ok := grants.Top(es, "/grants/ro/docs/private"); !ok {
		t.Error("the mask is gone after the probe")
	}
	if out, err := in("mount", "-o", "remount,bind,rw", filepath.Join(ctl, "ro")); err != nil {
		t.Errorf("control: clear RDONLY on init's own read-only bind: %v %q", err, out)
	}
	if out, err := in("umount", filepath.Join(ctl, "denied")); err != nil {
		t.Errorf("control: umount init's own mask: %v %q", err, out)
	}
}

// The consent channel: with network none, and with network proxy (two
// listeners from init, each where it belongs), the workload connects to
// 127.0.0.1:3129 (Landlock allows that port) and ConsentPeer names the
// connecting process from the kernel's tables.
func TestConsentChannel(t *testing.T) {
	needPureGo(t)
	for _, mode := range []policy.NetworkMode{policy.NetworkNone, policy.NetworkProxy} {
		t.Run(string(mode), func(t *testing.T) { testConsentChannel(t, mode) })
	}
}

func testConsentChannel(t *testing.T, mode policy.NetworkMode) {
	wd, home := workdirs(t, 65534)
	sb, sh := startShell(t, consentPlan(t, wd, home, false, func(p *policy.Policy) { p.Network.Mode = mode }))
	l := sb.ConsentListener()
	if l == nil {
		t.Fatal("no consent listener")
	}
	if e := sb.EgressListener(); (e != nil) != (mode == policy.NetworkProxy) {
		t.Fatalf("egress listener %v with network %s", e, mode)
	} else if e != nil {
		if got := e.Addr().(*net.TCPAddr).Port; got != provider.ProxyPort {
			t.Errorf("the egress listener is at port %d, want %d", got, provider.ProxyPort)
		}
	}
	if got := l.Addr().(*net.TCPAddr).Port; got != provider.ConsentPort {
		t.Errorf("the consent listener is at port %d, want %d", got, provider.ConsentPort)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	sh.must(t, "exec 3<>/dev/tcp/127.0.0.1/3129")
	var c net.Conn
	select {
	case c = <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("no connection accepted")
	}
	defer c.Close()
	pid, exe, ok := sb.ConsentPeer(c)
	if !ok || pid != sh.pid || !strings.HasSuffix(exe, "/bash") {
		t.Errorf("ConsentPeer = %d %q %v, want the shell, pid %d (bash)", pid, exe, ok, sh.pid)
	}
	sh.fails(t, "exec 4<>/dev/tcp/127.0.0.1/3130", "")
	sh.must(t, "exec 3<&-")
}

// Map: slots and their Landlock rules with consent.folders; the channel
// (port, connect rule, variable) with a consent section and a network of
// the sandbox's own; with network host no channel, and a warning.
func TestMapConsent(t *testing.T) {
	wd, home := workdirs(t, 65534)
	spec := consentPlan(t, wd, home, true, nil).Details.(*InitSpec)
	if !spec.slots() || !slices.Contains(spec.Landlock.RODirs, provider.GrantSlotRO) || !slices.Contains(spec.Landlock.RWDirs, provider.GrantSlotRW) {
		t.Errorf("slots: %v, landlock ro %v rw %v", spec.slots(), spec.Landlock.RODirs, spec.Landlock.RWDirs)
	}
	if spec.ConsentPort != provider.ConsentPort || !slices.Contains(spec.Landlock.Connects(), provider.ConsentPort) || !slices.Contains(spec.Env, provider.ConsentURLEnv+"=http://127.0.0.1:3129") {
		t.Errorf("channel: port %d, connects %v, env %v", spec.ConsentPort, spec.Landlock.Connects(), spec.Env)
	}
	proxy := consentPlan(t, wd, home, true, func(p *policy.Policy) { p.Network.Mode = policy.NetworkProxy }).Details.(*InitSpec)
	if got := proxy.Landlock.Connects(); !slices.Equal(got, []int{provider.ProxyPort, provider.ConsentPort}) {
		t.Errorf("network proxy: connects %v, want the proxy's and the consent port", got)
	}
	host := consentPlan(t, wd, home, true, func(p *policy.Policy) { p.Network.Mode = policy.NetworkHost })
	hs := host.Details.(*InitSpec)
	if hs.ConsentPort != 0 || slices.ContainsFunc(hs.Env, func(kv string) bool { return strings.HasPrefix(kv, provider.ConsentURLEnv+"=") }) {
		t.Errorf("network host: port %d env %v, want no channel", hs.ConsentPort, hs.Env)
	}
	if !slices.ContainsFunc(host.Loss, func(l provider.Loss) bool {
		return l.Severity == provider.SeverityWarning && l.Field == "consent" && strings.Contains(l.Message, "own network namespace")
	}) {
		t.Errorf("network host: no warning about the consent channel: %+v", host.Loss)
	}
	none := consentPlan(t, wd, home, false, nil).Details.(*InitSpec)
	if none.slots() || slices.Contains(none.Landlock.RODirs, provider.GrantSlotRO) {
		t.Error("slots planned without consent.folders")
	}
	// A grant that shows the state directory (the slot's) is refused.
	t.Setenv(StateDirEnv, filepath.Join(wd, "state"))
	sr := &policy.Resolved{Grants: []policy.PathGrant{{Path: wd, Access: policy.AccessReadWrite, Dir: true, Field: "filesystem.read_write[0]"}}, Consent: &policy.ResolvedConsent{}}
	if loss := planConsent(sr, &InitSpec{NewNet: true}); !provider.LossReport(loss).HasErrors() || loss[0].Field != "filesystem.read_write[0]" {
		t.Errorf("a grant of the state directory: %+v, want an error on the grant", loss)
	}
	// A grant that covers /grants is refused.
	r := &policy.Resolved{Grants: []policy.PathGrant{{Path: "/", Access: policy.AccessReadOnly, Dir: true, Field: "filesystem.read_only[0]"}}, Consent: &policy.ResolvedConsent{Folders: []policy.ConsentGlob{{Glob: "/**"}}}}
	if loss := planConsent(r, &InitSpec{NewNet: true}); !provider.LossReport(loss).HasErrors() {
		t.Errorf("a grant of / with slots: %+v, want an error", loss)
	}
}

// BenchmarkFolderGrant measures one grant (the holder's mount and the
// read-back of the sandbox's mountinfo) and one revoke (detach, read-back,
// the holders' scan) in a running sandbox, reporting their medians.
func BenchmarkFolderGrant(b *testing.B) {
	wd, home := benchDirs(b)
	pol := policy.Default()
	for _, l := range New().Capabilities(context.Background()).Layers {
		if l.State == provider.LayerUnavailable {
			pol.Layers[l.Layer] = policy.Optional
		}
	}
	r, err := pol.Resolve(policy.Context{Home: home, Workdir: wd, Environ: []string{"PATH=" + policy.DefaultPATH}})
	if err != nil {
		b.Fatal(err)
	}
	r.Consent = &policy.ResolvedConsent{Folders: []policy.ConsentGlob{{Glob: "/**"}}}
	plan, loss := New().Map(context.Background(), r)
	if loss.HasErrors() {
		b.Fatal(provider.Rejected(loss))
	}
	ctx := context.Background()
	psb, err := New().Provision(ctx, plan, provider.ProvisionOptions{})
	if err != nil {
		b.Fatal(err)
	}
	sb := psb.(*Sandbox)
	defer func() { _ = sb.Stop(ctx); _ = sb.Deprovision(ctx) }()
	if err := sb.Start(ctx); err != nil {
		b.Fatal(err)
	}
	src := b.TempDir()
	var st syscall.Stat_t
	if err := syscall.Stat(src, &st); err != nil {
		b.Fatal(err)
	}
	var grants, revokes []time.Duration
	i := 0
	for b.Loop() {
		g := provider.FolderGrant{Label: fmt.Sprintf("g%d", i), Source: src, Dev: st.Dev, Ino: st.Ino, ReadOnly: true}
		i++
		t0 := time.Now()
		if _, err := sb.GrantFolder(ctx, g); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := sb.RevokeFolder(ctx, g.Label, false); err != nil {
			b.Fatal(err)
		}
		grants, revokes = append(grants, t1.Sub(t0)), append(revokes, time.Since(t1))
	}
	b.ReportMetric(float64(median(grants).Microseconds()), "grant-p50-µs")
	b.ReportMetric(float64(median(revokes).Microseconds()), "revoke-p50-µs")
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// benchDirs are a workdir and home for a benchmark's sandbox.
func benchDirs(b *testing.B) (wd, home string) {
	var ds [2]string
	for i := range ds {
		d, err := os.MkdirTemp("", "grant-bench-") // not b.TempDir: its parent is 0700
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(d) })
		if err := os.Chmod(d, 0o755); err != nil {
			b.Fatal(err)
		}
		ds[i] = d
	}
	return ds[0], ds[1]
}

// TestGrantsUnprivileged runs the grant tests again as corral-test: the
// slot holder in a user namespace of its own.
func TestGrantsUnprivileged(t *testing.T) {
	if os.Getenv(unprivilegedEnv) != "" || os.Geteuid() != 0 {
		t.Skip("not root: the grant tests themselves run unprivileged")
	}
	out := asTestUser(t, "^(TestGrants(Live|Refused|NoSlots|Persistent)|TestConsentChannel)$")
	out = strings.ReplaceAll(out, "--- PASS: TestConsentChannel/", "(sub) ")
	if n := strings.Count(out, "--- PASS: "); n != 5 {
		t.Fatalf("the grant tests as corral-test: %d passed, want 5:\n%s", n, out)
	}
}

// A persistent sandbox's grants go through its supervisor, whose child
// the slot holder is: a grant, its use by a shell started before it,
// a revoke that kills the holder of an open fd, the consent listener
// handed over at hello. When the supervisor is SIGKILLed the holder
// dies with it and nothing of the slots is mounted on the host.
func TestGrantsPersistent(t *testing.T) {
	needPureGo(t)
	wd, home := workdirs(t, 65534)
	plan := consentPlan(t, wd, home, true, nil)
	ctx := context.Background()
	psb, err := New().Provision(ctx, plan, provider.ProvisionOptions{Persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = New().Destroy(context.Background(), psb.ID()) })
	if err := psb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	sb := psb.(*persistent)
	var lg provider.LiveGrants = sb
	if sb.ConsentListener() == nil {
		t.Error("no consent listener from the supervisor")
	}
	sh := runShell(t, sb)
	_, g, _ := folder(t, "docs", true)
	st, err := lg.GrantFolder(ctx, g)
	if err != nil || st.State != provider.GrantEffective || !st.Locked {
		t.Fatalf("grant: %+v %v", st, err)
	}
	sh.must(t, "exec 5< /grants/ro/docs/held.txt")
	vst, err := lg.RevokeFolder(ctx, "docs", true)
	if err != nil || vst.State != provider.GrantRevoked || !hasHolder(vst.Holders, sh.pid, 5) || !vst.Holders[0].Killed {
		t.Errorf("revoke, killing the holders: %+v %v, want revoked, pid %d fd 5 killed", vst, err, sh.pid)
	}
	select {
	case <-sh.done:
	case <-time.After(10 * time.Second):
		t.Error("the killed shell's exec did not end")
	}
	if gs, err := lg.FolderGrants(ctx); err != nil || len(gs) != 1 || gs[0].State != provider.GrantRevoked {
		t.Errorf("grants: %+v %v", gs, err)
	}
	if _, err := lg.RevokeFolder(ctx, "nosuch", false); provider.CodeOf(err) != provider.CodeNotFound {
		t.Errorf("revoke of an unknown label: %v", err)
	}
	sup := sb.supervisor()
	holder := childRunning(sup.PID, SlotsArg)
	if holder == 0 {
		t.Fatal("no slot holder among the supervisor's children")
	}
	if err := syscall.Kill(sup.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200 && syscall.Kill(holder, 0) == nil; i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if err := syscall.Kill(holder, 0); err == nil {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", holder)); !strings.Contains(string(b), ") Z ") {
			t.Errorf("the slot holder %d outlived its SIGKILLed supervisor", holder)
		}
	}
	es, _ := mountinfo.Read("/proc/self/mountinfo")
	for _, e := range es {
		if strings.HasPrefix(e.Point, StateBase()) {
			t.Errorf("a mount left on the host: %+v", e)
		}
	}
}

// childRunning is the pid of a child of pid whose command line holds
// arg, or 0.
func childRunning(pid int, arg string) int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, tk := range tasks {
		b, _ := os.ReadFile(tk)
		for _, c := range strings.Fields(string(b)) {
			if cmd, _ := os.ReadFile("/proc/" + c + "/cmdline"); strings.Contains(string(cmd), "\x00"+arg+"\x00") {
				var n int
				fmt.Sscanf(c, "%d", &n)
				return n
			}
		}
	}
	return 0
}

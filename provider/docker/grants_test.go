//go:build linux

package docker

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/grants"
	"github.com/corral-sandbox/corral/internal/mountinfo"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/provider/providertest"
)

// consentClientArg makes the test binary, inside a container, a client of
// the consent channel: it sends GET /peer to $CORRAL_CONSENT_URL and
// prints "inside-pid=N" then the answer's body.
const consentClientArg = "__consent-client"

// consentForgeArg makes it, inside, connect to ConsentSocket itself and
// forge init's line; it prints what comes back.
const consentForgeArg = "__consent-forge"

func consentForgeMain() {
	c, err := net.Dial("unix", ConsentSocket)
	if err != nil {
		fmt.Println("dial:", err)
		os.Exit(1)
	}
	fmt.Fprintf(c, "%sGET /peer HTTP/1.0\r\nHost: consent\r\n\r\n", peerLine(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}))
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	b, err := io.ReadAll(c)
	fmt.Printf("got=%q err=%v\n", b, err)
	os.Exit(0)
}

func consentClientMain() {
	u := strings.TrimPrefix(os.Getenv(provider.ConsentURLEnv), "http://")
	c, err := net.Dial("tcp", u)
	if err != nil {
		fmt.Println("dial:", err)
		os.Exit(1)
	}
	fmt.Fprintf(c, "GET /peer HTTP/1.0\r\nHost: consent\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		fmt.Println("read:", err)
		os.Exit(1)
	}
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("inside-pid=%d\n%s\n", os.Getpid(), b)
	os.Exit(0)
}

// consentPolicy is the default policy with consent.folders (built by
// hand: what policy.Resolve makes of `consent: {folders: {ask: [...]}}`).
func consentPolicy(t *testing.T, network policy.NetworkMode) *policy.Resolved {
	t.Helper()
	wd := t.TempDir()
	if err := os.Chmod(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(wd, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	r, err := policy.Default().Resolve(policy.Context{Home: t.TempDir(), Workdir: wd, Environ: []string{"PATH=" + policy.DefaultPATH}})
	if err != nil {
		t.Fatal(err)
	}
	r.Network = network
	r.Consent = &policy.ResolvedConsent{Folders: []policy.ConsentGlob{{Glob: "/tmp/**", Field: "consent.folders.ask[0]"}}, FolderAccess: policy.AccessReadWrite}
	return r
}

// hostTree is a folder to grant, owned by the workload's uid (65534).
func hostTree(t *testing.T) (string, provider.FolderGrant) {
	t.Helper()
	src := t.TempDir()
	for _, d := range []string{"secret", "proto"} {
		if err := os.Mkdir(filepath.Join(src, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, text := range map[string]string{"a.txt": "hello", "secret/s.txt": "S", "proto/p.txt": "P"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_ = filepath.Walk(src, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 65534, 65534) })
	if err := os.Chmod(src, 0o755); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(src, &st); err != nil {
		t.Fatal(err)
	}
	return src, provider.FolderGrant{Source: src, Dev: st.Dev, Ino: st.Ino}
}

// startConsent maps, provisions (with opts, if any) and starts r's
// sandbox; at the end it is removed and its slot must be gone.
func startConsent(t *testing.T, p *Provider, r *policy.Resolved, opts ...provider.ProvisionOptions) *Sandbox {
	t.Helper()
	ctx := context.Background()
	plan, loss := p.Map(ctx, r)
	if loss.HasErrors() {
		t.Fatal(provider.Rejected(loss))
	}
	raw, err := p.Provision(ctx, plan, append(opts, provider.ProvisionOptions{})[0])
	if err != nil {
		t.Fatal(err)
	}
	sb := raw.(*Sandbox)
	t.Cleanup(func() {
		_ = sb.Stop(context.Background())
		if err := sb.Deprovision(context.Background()); err != nil {
			t.Errorf("Deprovision: %v", err)
		}
		if grants := slotPath(sb.state); mountedAt(grants) {
			t.Errorf("the slot %s is still mounted after Deprovision", grants)
		}
	})
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return sb
}

func mountedAt(dir string) bool {
	es, _ := mountinfo.Read("/proc/self/mountinfo")
	return slices.ContainsFunc(es, func(e mountinfo.Entry) bool { return policy.Within(e.Point, dir) })
}

// sh runs script in the sandbox through corral's shim and returns its
// exit code and output.
func sh(t *testing.T, sb *Sandbox, script string) (int, string) {
	t.Helper()
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := sb.Exec(ctx, provider.ExecSpec{Args: []string{"sh", "-c", script}, Stdout: out, Stderr: out})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	b, _ := os.ReadFile(out.Name())
	return st.Code, string(b)
}

// A running container gets folder grants live through the slot: a
// read-only one reads but does not write (EROFS), its mask hides what the
// policy denies, a read-write one writes to the host; revoked, new opens
// fail and the process holding a file is reported, then killed when
// asked; a grant survives docker restart.
func TestLiveGrants(t *testing.T) {
	p := needSandboxes(t)
	if ok, why := p.facts().propagation(); !ok {
		t.Skip(why)
	}
	ctx := context.Background()
	sb := startConsent(t, p, consentPolicy(t, policy.NetworkNone))
	if !sb.spec.Slots || sb.FolderConsentMode() != provider.ConsentLive {
		t.Fatalf("no slots planned (mode %q): %s", sb.FolderConsentMode(), sb.spec.GrantsUnavailable)
	}
	if _, out := sh(t, sb, "ls -A /grants/ro /grants/rw | grep -v : | grep . && echo nonempty; mkdir /grants/ro/x /grants/rw/x 2>/dev/null && echo made; ls /grants/ro >/dev/null && echo listed"); strings.Contains(out, "nonempty") || strings.Contains(out, "made") || !strings.Contains(out, "listed") {
		t.Errorf("the empty slot inside: %s", out)
	}

	src, g := hostTree(t)
	g.Label, g.ReadOnly, g.Masks = "docs", true, []string{filepath.Join(src, "secret")}
	st, err := sb.GrantFolder(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != provider.GrantEffective || st.Path != "/grants/ro/docs" || len(st.MountIDs) < 2 || st.Locked {
		t.Errorf("ro grant status %+v: want effective at /grants/ro/docs, its mask among its mounts, not locked (no user namespace)", st)
	}
	// "hello" and its newline in one write: stdout and stderr reach us as
	// separate streams, so a stderr line could fall between two writes.
	code, out := sh(t, sb, `echo "$(cat /grants/ro/docs/a.txt)"; echo x > /grants/ro/docs/a.txt || echo write-failed; cat /grants/ro/docs/secret/s.txt || echo mask-held; mount -o remount,rw /grants/ro/docs || echo remount-failed`)
	t.Logf("ro grant inside (%d):\n%s", code, out)
	for _, want := range []string{"hello\n", "Read-only file system", "write-failed", "mask-held", "remount-failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("ro grant inside: no %q in\n%s", want, out)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(src, "a.txt")); string(b) != "hello" {
		t.Errorf("the host file changed: %q", b)
	}

	rwSrc, rw := hostTree(t)
	rw.Label, rw.ReadOnlyWithin = "proj", []string{filepath.Join(rwSrc, "proto")}
	if st, err := sb.GrantFolder(ctx, rw); err != nil || st.State != provider.GrantEffective || st.Path != "/grants/rw/proj" {
		t.Fatalf("rw grant: %+v %v", st, err)
	}
	code, out = sh(t, sb, `echo w > /grants/rw/proj/new.txt && echo wrote; echo x > /grants/rw/proj/proto/p.txt || echo proto-held`)
	if !strings.Contains(out, "wrote") || !strings.Contains(out, "proto-held") {
		t.Errorf("rw grant inside (%d): %s", code, out)
	}
	if b, _ := os.ReadFile(filepath.Join(rwSrc, "new.txt")); string(b) != "w\n" {
		t.Errorf("the write did not reach the host: %q", b)
	}
	if _, err := sb.GrantFolder(ctx, rw); provider.CodeOf(err) != provider.CodePolicyRejected {
		t.Errorf("a label used again: %v, want policy_rejected", err)
	}

	// A process holds a file of the ro grant open, its cwd in it.
	holderOut, err := os.CreateTemp(t.TempDir(), "holder")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan provider.ExitStatus, 1)
	go func() {
		st, _ := sb.Exec(ctx, provider.ExecSpec{Args: []string{"sh", "-c", "cd /grants/ro/docs && exec 3<a.txt && echo ready && exec sleep 60"}, Stdout: holderOut, Stderr: holderOut})
		done <- st
	}()
	for i := 0; ; i++ {
		if b, _ := os.ReadFile(holderOut.Name()); strings.Contains(string(b), "ready") {
			break
		}
		if i == 600 {
			t.Fatal("the holder did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // its exec of sleep
	st, err = sb.RevokeFolder(ctx, "docs", false)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != provider.GrantHeld || !slices.ContainsFunc(st.Holders, func(h provider.Holder) bool { return h.FD == 3 }) || !slices.ContainsFunc(st.Holders, func(h provider.Holder) bool { return h.FD == -1 }) {
		t.Errorf("revoked while held: %+v, want revoked-held by fd 3 and a cwd", st)
	}
	if code, out := sh(t, sb, "cat /grants/ro/docs/a.txt"); code == 0 {
		t.Errorf("a new open after revoke succeeded: %s", out)
	}
	st, err = sb.RevokeFolder(ctx, "docs", true)
	if err != nil || st.State != provider.GrantRevoked || len(st.Holders) == 0 || !st.Holders[0].Killed {
		t.Errorf("revoke with kill: %+v %v", st, err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Error("the holder's exec did not end after its process was killed")
	}
	if _, err := sb.RevokeFolder(ctx, "nope", false); provider.CodeOf(err) != provider.CodeNotFound {
		t.Errorf("revoke of an unknown label: %v", err)
	}

	// docker restart: the rw grant is bound again with the slot. The
	// test stands in for the supervisor the restarted init reports to.
	ctl, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(sb.state, "control.sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	_ = os.Chmod(filepath.Join(sb.state, "control.sock"), 0o666)
	before := sb.initPID
	if _, err := sb.cli.ContainerRestart(ctx, sb.cid, client.ContainerRestartOptions{}); err != nil {
		t.Fatal(err)
	}
	_ = ctl.SetDeadline(time.Now().Add(30 * time.Second))
	life, err := ctl.Accept()
	if err != nil {
		t.Fatalf("the restarted init did not report: %v", err)
	}
	defer life.Close()
	if line, err := bufio.NewReader(life).ReadString('\n'); err != nil || strings.Contains(line, `"error"`) {
		t.Fatalf("the restarted init: %q %v", line, err)
	}
	// The kernel reuses mount ids: give the revoked grant's old ids to
	// every mount the restarted container has (as CI once saw for two), so
	// that looking for holders by id alone would find its init's fds.
	now, _ := sb.currentInit(ctx)
	es, err := mountinfo.Read(fmt.Sprintf("/proc/%d/mountinfo", now))
	if err != nil {
		t.Fatal(err)
	}
	sb.grants.mu.Lock()
	sb.grants.list[0].MountIDs = nil
	for _, e := range es {
		sb.grants.list[0].MountIDs = append(sb.grants.list[0].MountIDs, e.ID)
	}
	sb.grants.mu.Unlock()
	list, err := sb.FolderGrants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if now == before || len(list) != 2 || list[1].Label != "proj" || list[1].State != provider.GrantEffective || list[0].State != provider.GrantRevoked {
		t.Errorf("after docker restart (init %d, then %d): %+v", before, now, list)
	}
	if code, out := sh(t, sb, "cat /grants/rw/proj/new.txt && ls /grants/ro"); code != 0 || out != "w\n" {
		t.Errorf("the rw grant after docker restart (%d): %q", code, out)
	}
}

// The container has no user namespace: a process with CAP_SYS_ADMIN in
// its namespaces is host root. Inside, even uid 0 (docker exec -u 0,
// without corral's shim: no Landlock) has no capability, so remounting a
// read-only grant fails; host root entering its mount namespace can, which
// is why the status says not Locked.
func TestReadOnlyGrantRemount(t *testing.T) {
	p := needSandboxes(t)
	if ok, why := p.facts().propagation(); !ok {
		t.Skip(why)
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		t.Skip("no nsenter")
	}
	ctx := context.Background()
	sb := startConsent(t, p, consentPolicy(t, policy.NetworkNone))
	src, g := hostTree(t)
	g.Label, g.ReadOnly = "docs", true
	st, err := sb.GrantFolder(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := sb.cli.ExecCreate(ctx, sb.cid, client.ExecCreateOptions{User: "0:0", AttachStdout: true, AttachStderr: true,
		Cmd: []string{"sh", "-c", "mount -o remount,rw /grants/ro/docs; echo x > /grants/ro/docs/a.txt; grep CapEff /proc/self/status"}})
	if err != nil {
		t.Fatal(err)
	}
	att, err := sb.cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(att.Reader)
	att.Close()
	t.Logf("uid 0 inside: %q", b)
	if data, _ := os.ReadFile(filepath.Join(src, "a.txt")); string(data) != "hello" {
		t.Fatalf("uid 0 inside the container wrote the read-only grant: %q", data)
	}
	if !strings.Contains(string(b), "CapEff:\t0000000000000000") {
		t.Errorf("uid 0 inside has capabilities: %q", b)
	}
	pid, _ := sb.currentInit(ctx)
	out, err := exec.Command(nsenter, "-t", strconv.Itoa(pid), "-m", "-p", "--", "/bin/mount", "-o", "remount,bind,rw", "/grants/ro/docs").CombinedOutput()
	if err != nil {
		t.Fatalf("host root in the container's mount namespace could not remount (then the grant would be locked, and Locked %v says otherwise): %v %s", st.Locked, err, out)
	}
	if st.Locked {
		t.Error("the status says locked, but host root remounted the grant read-write")
	}
}

// The consent channel answers from inside with network none and proxy
// (init's two forwarders, each at its port): the client
// reaches 127.0.0.1:3129 (Landlock allows that port), the supervisor's
// server gets the connection from ConsentListener, and ConsentPeer names
// the client's process (its host pid, whose NSpid ends in the pid the
// client sees inside).
func TestConsentChannel(t *testing.T) {
	for _, mode := range []policy.NetworkMode{policy.NetworkNone, policy.NetworkProxy} {
		t.Run(string(mode), func(t *testing.T) { testConsentChannel(t, mode) })
	}
}

func testConsentChannel(t *testing.T, mode policy.NetworkMode) {
	p := needSandboxes(t)
	r := consentPolicy(t, mode)
	r.Consent.Folders = nil // the channel alone: every daemon
	client := providertest.ProbeBinary(t, r.Workdir)
	sb := startConsent(t, p, r)
	l := sb.ConsentListener()
	if l == nil {
		t.Fatal("no consent listener")
	}
	srv := &http.Server{
		ConnContext: func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) },
		Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			pid, exe, ok := sb.ConsentPeer(req.Context().Value(connKey{}).(net.Conn))
			nspid := "-"
			status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)) // while the client waits
			for _, line := range strings.Split(string(status), "\n") {
				if v, found := strings.CutPrefix(line, "NSpid:"); found {
					nspid = strings.Join(strings.Fields(v), ",")
				}
			}
			fmt.Fprintf(w, "peer=%d ok=%v exe=%s remote=%s nspid=%s", pid, ok, exe, req.RemoteAddr, nspid)
		}),
	}
	go srv.Serve(l)
	defer srv.Close()
	code, out := sh(t, sb, client+" "+consentClientArg)
	t.Logf("inside (%d): %s", code, out)
	var inside, host int
	var ok bool
	var exe, remote, nspid string
	for _, line := range strings.Split(out, "\n") {
		if v, found := strings.CutPrefix(line, "inside-pid="); found {
			inside, _ = strconv.Atoi(v)
		}
		if strings.HasPrefix(line, "peer=") {
			_, _ = fmt.Sscanf(line, "peer=%d ok=%t exe=%s remote=%s nspid=%s", &host, &ok, &exe, &remote, &nspid)
		}
	}
	if code != 0 || !ok || host <= 0 || inside <= 0 || !strings.HasPrefix(remote, "127.0.0.1:") {
		t.Fatalf("consent channel from inside: code %d, %q", code, out)
	}
	if ids := strings.Split(nspid, ","); len(ids) < 2 || ids[0] != strconv.Itoa(host) || ids[len(ids)-1] != strconv.Itoa(inside) {
		t.Errorf("ConsentPeer named host pid %d (NSpid %v), the client is pid %d inside", host, nspid, inside)
	}
	if exe != client {
		t.Errorf("ConsentPeer's exe %q is not the client's", exe)
	}
	if env := sb.spec.Shim.Env; !slices.Contains(env, provider.ConsentURLEnv+"=http://127.0.0.1:3129") {
		t.Errorf("exec env %v has no %s", env, provider.ConsentURLEnv)
	}
}

type connKey struct{}

// Map plans the slot and the channel for consent.folders where the daemon
// propagates; where it cannot (Docker Desktop here) it warns that grants
// require recreating the sandbox, plans no slot, and GrantFolder says so;
// with network host there is no channel.
func TestMapConsent(t *testing.T) {
	p := needDocker(t)
	ask := "version: 1\nconsent:\n  folders: {ask: [\"/srv/corral-consent/**\"]}\n"
	sp, loss := mapPolicy(t, p, ask, userDir(t))
	if loss.HasErrors() {
		t.Fatal(provider.Rejected(loss))
	}
	if sp.Shim.ConsentPort != provider.ConsentPort || !slices.Contains(sp.Shim.Landlock.Connects(), provider.ConsentPort) || !slices.Contains(sp.Env, provider.ConsentURLEnv+"=http://127.0.0.1:3129") {
		t.Errorf("no consent channel: port %d, landlock connects %v, env %v", sp.Shim.ConsentPort, sp.Shim.Landlock.Connects(), sp.Env)
	}
	if ok, why := p.facts().propagation(); ok {
		if !sp.Slots || sp.FolderMode != provider.ConsentLive || !slices.Contains(sp.Shim.Landlock.RODirs, provider.GrantSlotRO) || !slices.Contains(sp.Shim.Landlock.RWDirs, provider.GrantSlotRW) {
			t.Errorf("no slots planned on a daemon that propagates: %+v", sp)
		}
	} else {
		t.Logf("this daemon does not propagate: %s", why)
		if sp.Slots || sp.FolderMode != provider.ConsentRequiresRecreate || !find(loss, provider.SeverityWarning, "consent.folders", grantsRecreate) {
			t.Errorf("slots planned where the daemon cannot propagate: slots %v mode %q, loss %v", sp.Slots, sp.FolderMode, loss)
		}
	}
	if os.Geteuid() != 0 && (sp.Slots || !find(loss, provider.SeverityWarning, "consent.folders", "only root can mount")) {
		t.Errorf("an unprivileged caller: slots %v, loss %v", sp.Slots, loss)
	}

	desktop := New()
	*desktop.facts() = *p.facts()
	desktop.host.osName = "Docker Desktop"
	sp, loss = mapPolicy(t, desktop, ask, userDir(t))
	if sp.Slots || sp.FolderMode != provider.ConsentRequiresRecreate || !find(loss, provider.SeverityWarning, "consent.folders", grantsRecreate) || loss.HasErrors() {
		t.Errorf("Docker Desktop: slots %v mode %q, loss %v", sp.Slots, sp.FolderMode, loss)
	}
	sb := &Sandbox{spec: sp, id: "corral-000000000000"}
	if _, err := sb.GrantFolder(context.Background(), provider.FolderGrant{Label: "x"}); provider.CodeOf(err) != provider.CodeUnavailable || !strings.Contains(err.Error(), grantsRecreate) {
		t.Errorf("GrantFolder where the daemon cannot propagate: %v", err)
	}

	sp, loss = mapPolicy(t, p, ask+"network: {mode: host}\n", userDir(t))
	if sp.Shim.ConsentPort != 0 || slices.Contains(sp.Env, provider.ConsentURLEnv+"=http://127.0.0.1:3129") || !find(loss, provider.SeverityWarning, "consent", "network host") {
		t.Errorf("network host: port %d, loss %v", sp.Shim.ConsentPort, loss)
	}
	sp, _ = mapPolicy(t, p, "version: 1\n", userDir(t))
	if sp.Slots || sp.Shim.ConsentPort != 0 || sp.FolderMode != "" {
		t.Errorf("no consent section, but slots %v port %d mode %q", sp.Slots, sp.Shim.ConsentPort, sp.FolderMode)
	}
}

// A corral killed while its sandbox had a read-write grant leaves the
// slot mounted in its state dir: Sweep (`corral gc`) detaches it and
// removes the dir, and the granted folder's files are untouched (a
// recursive removal through the mount would have deleted them).
func TestSweepDetachesSlot(t *testing.T) {
	p := needDocker(t)
	if os.Geteuid() != 0 {
		t.Skip("the slot needs root")
	}
	base, err := makeStateBase(stateBase())
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	dead := ownerLabel(cmd.Process.Pid)
	_ = cmd.Wait()
	sb := &Sandbox{id: provider.NewID()}
	sb.state = filepath.Join(base, sb.id)
	if err := os.Mkdir(sb.state, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = removeState(sb.state) })
	if err := os.WriteFile(filepath.Join(sb.state, "owner"), []byte(dead), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sb.mountSlot(); err != nil {
		t.Fatal(err)
	}
	src, g := hostTree(t)
	g.Label = "proj"
	if _, err := sb.slot.Grant(grants.Request{Label: g.Label, Source: g.Source, Dev: g.Dev, Ino: g.Ino}); err != nil {
		t.Fatal(err)
	}
	sb.slot.Close() // the process is gone
	removed, err := p.Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(removed, func(r Removed) bool { return r.Sandbox == sb.id && r.Error == "" }) {
		t.Errorf("Sweep did not remove %s: %+v", sb.id, removed)
	}
	if mountedAt(sb.state) {
		t.Errorf("%s keeps a mount after Sweep", sb.state)
	}
	if _, err := os.Stat(sb.state); err == nil {
		t.Errorf("%s is still there", sb.state)
	}
	if b, err := os.ReadFile(filepath.Join(src, "a.txt")); err != nil || string(b) != "hello" {
		t.Errorf("the granted folder's file after Sweep: %q %v", b, err)
	}
}

// A persistent sandbox's grants outlive the process that made them (a
// gateway that restarts): Recover reattaches the slot, FolderGrants reads
// the grant back effective, a revoke works, and Destroy leaves no mount.
func TestLiveGrantsPersistent(t *testing.T) {
	p := needSandboxes(t)
	if ok, why := p.facts().propagation(); !ok {
		t.Skip(why)
	}
	ctx := context.Background()
	sb := startConsent(t, p, consentPolicy(t, policy.NetworkNone), provider.ProvisionOptions{Persistent: true, Owner: "docker-test-" + provider.NewID()})
	slot := slotPath(sb.state)
	t.Cleanup(func() { // before startConsent's
		if err := New().Destroy(context.Background(), sb.ID()); err != nil {
			t.Errorf("Destroy: %v", err)
		}
		if mountedAt(slot) {
			t.Errorf("%s is still mounted after Destroy", slot)
		}
	})
	_, g := hostTree(t)
	g.Label, g.ReadOnly = "docs", true
	if _, err := sb.GrantFolder(ctx, g); err != nil {
		t.Fatal(err)
	}
	// The process ends: its descriptors go, the container and its slot stay.
	sb.placeholders.Close()
	sb.consent.Close()
	sb.slot.Close()
	sb.lifeline.Close()

	raw, err := New().Recover(ctx, nil, sb.State())
	if err != nil {
		t.Fatal(err)
	}
	rec := raw.(*Sandbox)
	defer rec.placeholders.Close()
	list, err := rec.FolderGrants(ctx)
	if err != nil || len(list) != 1 || list[0].Label != "docs" || list[0].State != provider.GrantEffective {
		t.Fatalf("recovered grants: %+v %v", list, err)
	}
	if code, out := sh(t, rec, "cat /grants/ro/docs/a.txt"); code != 0 || out != "hello" {
		t.Errorf("the recovered grant inside (%d): %q", code, out)
	}
	if st, err := rec.RevokeFolder(ctx, "docs", false); err != nil || st.State != provider.GrantRevoked {
		t.Errorf("revoke after Recover: %+v %v", st, err)
	}
}

// TestConsentUnprivileged runs the channel and mapping tests again as
// corral-test: the channel works, folder grants require recreating.
func TestConsentUnprivileged(t *testing.T) {
	asTestUser(t, "^Test(ConsentChannel|MapConsent)$", "TestConsentChannel", "TestMapConsent")
}

// Only init may use the consent socket: a workload that reaches it (with
// network.unix_sockets allow) and forges init's line is turned away before
// the supervisor's server sees a request.
func TestConsentSocketInitOnly(t *testing.T) {
	p := needSandboxes(t)
	r := consentPolicy(t, policy.NetworkNone)
	r.Consent.Folders = nil
	r.Egress.UnixSockets = policy.UnixSocketsAllow
	forger := providertest.ProbeBinary(t, r.Workdir)
	sb := startConsent(t, p, r)
	served := make(chan string, 4)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { served <- req.RemoteAddr })}
	go srv.Serve(sb.ConsentListener())
	defer srv.Close()
	code, out := sh(t, sb, forger+" "+consentForgeArg)
	t.Logf("forger (%d): %s", code, out)
	if code != 0 || !strings.Contains(out, `got="" err=`) || strings.Contains(out, "timeout") {
		t.Errorf("the forger's connection was not closed at once: %d %s", code, out)
	}
	select {
	case a := <-served:
		t.Errorf("the server answered a forged connection (peer %s)", a)
	default:
	}
}

// BenchmarkFolderGrant is one read-only grant to a running container,
// from the call to the read-back in its mountinfo, then its revoke
// (the grant's median reported apart: grant-p50-ms).
func BenchmarkFolderGrant(b *testing.B) {
	p := New()
	if h := p.facts(); h.err != nil || h.binErr != nil {
		b.Skip("no daemon or no static test binary")
	}
	if ok, why := p.facts().propagation(); !ok {
		b.Skip(why)
	}
	ctx := context.Background()
	r, err := policy.Default().Resolve(policy.Context{Home: b.TempDir(), Workdir: b.TempDir(), Environ: []string{"PATH=" + policy.DefaultPATH}})
	if err != nil {
		b.Fatal(err)
	}
	r.Consent = &policy.ResolvedConsent{Folders: []policy.ConsentGlob{{Glob: "/tmp/**", Field: "consent.folders.ask[0]"}}}
	plan, loss := p.Map(ctx, r)
	if loss.HasErrors() {
		b.Fatal(provider.Rejected(loss))
	}
	raw, err := p.Provision(ctx, plan, provider.ProvisionOptions{})
	if err != nil {
		b.Fatal(err)
	}
	sb := raw.(*Sandbox)
	defer func() { _ = sb.Stop(ctx); _ = sb.Deprovision(ctx) }()
	if err := sb.Start(ctx); err != nil {
		b.Fatal(err)
	}
	src := b.TempDir()
	var st unix.Stat_t
	if err := unix.Stat(src, &st); err != nil {
		b.Fatal(err)
	}
	var granting []time.Duration
	i := 0
	for b.Loop() {
		i++
		t0 := time.Now()
		g := provider.FolderGrant{Label: "b" + strconv.Itoa(i), Source: src, Dev: st.Dev, Ino: st.Ino, ReadOnly: true}
		if _, err := sb.GrantFolder(ctx, g); err != nil {
			b.Fatal(err)
		}
		granting = append(granting, time.Since(t0))
		if _, err := sb.RevokeFolder(ctx, g.Label, false); err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(granting)
	b.ReportMetric(float64(granting[len(granting)/2].Microseconds())/1000, "grant-p50-ms")
}

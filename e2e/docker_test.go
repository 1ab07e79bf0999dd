//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The docker provider, end to end, against the real daemon: as root and as
// the unprivileged user in the docker group. Without a daemon the tests
// skip, unless CORRAL_TEST_DOCKER=1 (set by .ci/run) makes that a failure.

// dockerIdents returns the identities that can use the daemon: root, and
// the unprivileged user with the docker group.
func dockerIdents(t *testing.T) []*ident {
	t.Helper()
	if err := exec.Command("docker", "image", "inspect", "corral/base:1").Run(); err != nil {
		if os.Getenv("CORRAL_TEST_DOCKER") == "1" {
			t.Fatalf("docker or its base image unavailable with CORRAL_TEST_DOCKER=1 (run corral image build-base): %v", err)
		}
		t.Skipf("no Docker daemon with corral/base:1 here: %v", err)
	}
	var out []*ident
	if os.Geteuid() == 0 {
		home, _ := os.UserHomeDir()
		out = append(out, &ident{name: "root", uid: 0, gid: 0, home: home})
		if g, err := user.LookupGroup("docker"); err == nil {
			gid, _ := strconv.Atoi(g.Gid)
			u := *testUser
			u.groups = []uint32{uint32(gid)}
			out = append(out, &u)
		}
	} else {
		out = append(out, testUser)
	}
	return out
}

func eachDockerIdent(t *testing.T, f func(t *testing.T, id *ident)) {
	t.Helper()
	for _, id := range dockerIdents(t) {
		t.Run(id.name, func(t *testing.T) {
			t.Parallel()
			f(t, id)
		})
	}
}

// dockerWorkdir is a workdir the workload can write (see handOver).
func dockerWorkdir(t *testing.T, id *ident, name string) string {
	t.Helper()
	d := mkdir(t, id, name)
	handOver(t, id, d)
	return d
}

// handOver gives dir and its contents to nobody when id is root: root's
// workload runs as the workdir's owner, and Docker cannot idmap a
// root-owned tree to make it writable.
func handOver(t *testing.T, id *ident, dir string) {
	t.Helper()
	if !id.isRoot() {
		return
	}
	err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, 65534, 65534)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// containersOf lists the containers (any state) labelled with sandbox ids
// found in text, or all of Corral's when text is "".
func corralContainers(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-a", "--filter", "label=io.corral.sandbox", "--format", "{{.Label \"io.corral.sandbox\"}} {{.Label \"io.corral.owner\"}}").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(strings.TrimSpace(string(out)))
}

func TestDockerRun(t *testing.T) {
	eachDockerIdent(t, func(t *testing.T, id *ident) {
		wd := dockerWorkdir(t, id, "drun")
		ro := mkdir(t, id, "dro")
		tok, secretTok := token(), token()
		writeFile(t, id, filepath.Join(ro, "f"), tok, 0o644)
		writeFile(t, id, filepath.Join(wd, "secret.txt"), secretTok, 0o644)
		handOver(t, id, wd)
		pol := writePolicy(t, id, policy{RO: []string{ro}, Deny: []string{filepath.Join(wd, "secret.txt")}})
		script := `id -u; cat ` + ro + `/f; echo w > ` + ro + `/f && echo RO-WRITTEN; echo made > out.txt; cat secret.txt && echo SECRET-READ;
ls ~/.ssh 2>/dev/null && echo HOME-VISIBLE; cat /etc/shadow && echo SHADOW; read line; echo "in:$line"; echo err >&2; exit 7`
		res := corral(t, run{id: id, policy: pol, workdir: wd, flags: []string{"--provider", "docker", "-v"}, args: sh(script), stdin: "hello\n"})
		assertCode(t, res, 7)
		lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
		if len(lines) == 0 || lines[0] == "0" {
			t.Errorf("the workload ran as root or printed nothing:\n%s", res)
		}
		for _, bad := range []string{"RO-WRITTEN", "SECRET-READ", "HOME-VISIBLE", "SHADOW"} {
			if strings.Contains(res.stdout, bad) {
				t.Errorf("%s:\n%s", bad, res)
			}
		}
		assertNoToken(t, res.combined(), secretTok)
		if !strings.Contains(res.stdout, tok) || !strings.Contains(res.stdout, "in:hello") || !strings.Contains(res.stderr, "err") {
			t.Errorf("read-only grant, stdin or stderr did not pass:\n%s", res)
		}
		if got := readFile(t, filepath.Join(wd, "out.txt")); got != "made\n" {
			t.Errorf("workdir write on the host = %q", got)
		}
		if readFile(t, filepath.Join(ro, "f")) != tok {
			t.Error("the read-only file changed on the host")
		}
		for _, l := range []string{"namespaces", "mounts", "landlock", "seccomp", "cgroups"} {
			if !strings.Contains(res.stderr, fmt.Sprintf("corral: layer %-10s active", l)) {
				t.Errorf("layer %s not reported active:\n%s", l, res.stderr)
			}
		}
		if !strings.Contains(res.stderr, "verified") {
			t.Errorf("no evidence from outside in -v:\n%s", res.stderr)
		}
		res = corral(t, run{id: id, workdir: wd, flags: []string{"--provider", "docker"}, args: []string{"no-such-command-xyz"}})
		assertCode(t, res, 127)
		// The exit status is the command's, whatever its output does: a
		// child keeping stdout open, a command that closed it early.
		res = corral(t, run{id: id, workdir: wd, flags: []string{"--provider", "docker"}, args: sh("sleep 300 & exit 3"), timeout: 20 * time.Second})
		assertCode(t, res, 3)
		res = corral(t, run{id: id, workdir: wd, flags: []string{"--provider", "docker"}, args: sh("exec >/dev/null 2>&1; sleep 1; exit 4")})
		assertCode(t, res, 4)
	})
}

// The sandbox's egress socket on the host serves only the container's
// processes: another host process that connects is turned away without an
// answer. (The control socket is gone once init has reported.)
func TestDockerSocketsRefuseStrangers(t *testing.T) {
	id := dockerIdents(t)[0]
	if !id.isRoot() {
		t.Skip("the state dir of an unprivileged caller is private to it")
	}
	wd := dockerWorkdir(t, id, "dsock")
	pol := writePolicy(t, id, policy{Network: "proxy", NetRules: "  allow: [{host: example.test}]\n"})
	m := uniqueSleep(300)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := run{id: id, policy: pol, workdir: wd, flags: []string{"--provider", "docker"}, args: []string{"sleep", m}}.command(ctx)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	waitProcs(t, m, 20*time.Second)
	socks, _ := filepath.Glob("/run/corral/docker/corral-*/egress.sock")
	if len(socks) == 0 {
		t.Fatal("no egress socket in /run/corral/docker")
	}
	for _, p := range socks {
		c, err := net.Dial("unix", p)
		if err != nil {
			continue // gone with another test's sandbox
		}
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		fmt.Fprintf(c, "CONNECT example.test:443 HTTP/1.1\r\nHost: example.test:443\r\n\r\n")
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		c.Close()
		if n > 0 {
			t.Errorf("%s answered a host process: %q", p, buf[:n])
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Errorf("%s kept a host process's connection open", p)
		}
	}
}

// Timeout, signals and a killed supervisor: nothing keeps running and no
// container is left behind (gc removes what a SIGKILLed corral left).
func TestDockerLifecycle(t *testing.T) {
	ids := dockerIdents(t)
	id := ids[0]
	wd := dockerWorkdir(t, id, "dlife")
	pol := writePolicy(t, id, policy{Limits: "timeout: 2s"})
	m := uniqueSleep(300)
	res := corral(t, run{id: id, policy: pol, workdir: wd, flags: []string{"--provider", "docker"}, args: []string{"sleep", m}})
	assertCode(t, res, 124)
	waitNoProcs(t, m, 5*time.Second)

	// SIGTERM to corral reaches the workload through corral's init.
	m = uniqueSleep(300)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := run{id: id, workdir: wd, flags: []string{"--provider", "docker"}, args: sh("trap 'echo got-term; exit 3' TERM; sleep " + m + " & wait")}.command(ctx)
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitProcs(t, m, 20*time.Second)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 3 || !strings.Contains(out.String(), "got-term") {
		t.Errorf("SIGTERM: exit %d (%v), stdout %q; want the trap's 3", code, err, out.String())
	}
	waitNoProcs(t, m, 10*time.Second)

	// SIGKILL to corral: its container's init loses the lifeline and ends
	// everything inside; gc then removes the container.
	m = uniqueSleep(300)
	cmd = run{id: id, workdir: wd, flags: []string{"--provider", "docker"}, args: []string{"sleep", m}}.command(ctx)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitProcs(t, m, 20*time.Second)
	owner := strconv.Itoa(cmd.Process.Pid)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	waitNoProcs(t, m, 10*time.Second)
	gc := exec.Command(corralBin, "gc", "-o", "json")
	gcOut, err := gc.Output()
	if err != nil {
		t.Fatalf("corral gc: %v\n%s", err, gcOut)
	}
	var removed []struct{ Sandbox, Reason string }
	if err := json.Unmarshal(gcOut, &removed); err != nil {
		t.Fatalf("gc output: %v\n%s", err, gcOut)
	}
	for _, f := range corralContainers(t) {
		if f == owner {
			t.Errorf("a container of the killed corral (pid %s) is still there after gc", owner)
		}
	}
}

// waitProcs waits until a host process has s in its command line.
func waitProcs(t *testing.T, s string, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if len(hostProcsWith(s)) > 0 {
			return
		}
	}
	t.Fatalf("no process with %q started within %s", s, d)
}

// Governed egress from a container: the allowed name through the proxy
// reaches the loopback upstream, another name is refused by the proxy, and
// there is no direct route.
func TestDockerEgress(t *testing.T) {
	eachDockerIdent(t, func(t *testing.T, id *ident) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		tok := token()
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, tok) })}
		go srv.Serve(l)
		defer srv.Close()
		port := l.Addr().(*net.TCPAddr).Port
		wd := dockerWorkdir(t, id, "degress")
		pol := writePolicy(t, id, policy{Network: "proxy", NetRules: fmt.Sprintf(
			"  allow: [{host: api.allowed.test, ports: [%d]}]\n  allow_private: [{host: 127.0.0.1}]\n  hosts: {api.allowed.test: 127.0.0.1, evil.test: 127.0.0.1}\n", port)})
		script := fmt.Sprintf(`wget -q -O- http://api.allowed.test:%d/; echo; wget -q -O- http://evil.test:%d/ || echo DENIED; 
unset http_proxy HTTP_PROXY; wget -q -T 3 -O- http://127.0.0.1:%d/ || echo NO-ROUTE`, port, port, port)
		res := corral(t, run{id: id, policy: pol, workdir: wd, flags: []string{"--provider", "docker"}, args: sh(script)})
		if strings.Count(res.stdout, tok) != 1 || !strings.Contains(res.stdout, "DENIED") || !strings.Contains(res.stdout, "NO-ROUTE") {
			t.Errorf("egress: want one allowed fetch, a denial and no direct route:\n%s", res)
		}
	})
}

// Refusals before anything is created: a missing image, --image without
// the docker provider, extra fds.
func TestDockerRefusals(t *testing.T) {
	id := dockerIdents(t)[0]
	wd := dockerWorkdir(t, id, "dref")
	before := len(corralContainers(t))
	res := corral(t, run{id: id, workdir: wd, flags: []string{"--provider", "docker", "--image", "corral-test/missing:0"}, args: []string{"true"}})
	assertCode(t, res, 122)
	if !strings.Contains(res.stderr, "docker.image") || !strings.Contains(res.stderr, "never pulls") {
		t.Errorf("missing image:\n%s", res)
	}
	res = corral(t, run{id: id, workdir: wd, flags: []string{"--image", "corral/base:1"}, args: []string{"true"}})
	if res.code == 0 || !strings.Contains(res.stderr, "--provider docker") {
		t.Errorf("--image without --provider docker:\n%s", res)
	}
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res = corral(t, run{id: id, workdir: wd, flags: []string{"--provider", "docker", "--preserve-fds", "1"}, extra: []*os.File{f}, args: []string{"true"}})
	assertCode(t, res, 127)
	if !strings.Contains(res.stderr, "--preserve-fds") {
		t.Errorf("extra fds:\n%s", res)
	}
	if after := len(corralContainers(t)); after > before {
		t.Errorf("refused runs left containers: %d before, %d after", before, after)
	}
}

// dockerCLI runs the docker CLI and fails the test on error.
func dockerCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// What the image or Docker put in the environment does not reach the
// command (only the policy's), programs run from /tmp and the home, and an
// OOM kill is reported as such.
func TestDockerEnvExecOOM(t *testing.T) {
	id := dockerIdents(t)[0]
	tag := "corral-e2e/env:" + token()[6:18]
	cid := dockerCLI(t, "create", "corral/base:1", "true")
	dockerCLI(t, "commit", "--change", "ENV LD_PRELOAD=/nonexistent.so", "--change", "ENV LEAK_CANARY=leaked", cid, tag)
	dockerCLI(t, "rm", cid)
	defer exec.Command("docker", "rmi", tag).Run()
	wd := dockerWorkdir(t, id, "denv")
	res := corral(t, run{id: id, workdir: wd, flags: []string{"--provider", "docker", "--image", tag},
		args: sh("env; cp /bin/busybox /tmp/true && /tmp/true true && cp /bin/busybox ~/true && ~/true true && echo EXEC-OK")})
	assertCode(t, res, 0)
	for _, bad := range []string{"LEAK_CANARY", "LD_PRELOAD", "HOSTNAME="} {
		if strings.Contains(res.stdout, bad) {
			t.Errorf("%s reached the command:\n%s", bad, res)
		}
	}
	if !strings.Contains(res.stdout, "EXEC-OK") {
		t.Errorf("programs in /tmp or the home do not run:\n%s", res)
	}
	pol := writePolicy(t, id, policy{Limits: "memory: 64M"})
	res = corral(t, run{id: id, policy: pol, workdir: wd, flags: []string{"--provider", "docker"}, args: sh("head -c 200000000 /dev/zero | tail >/dev/null")})
	if res.code != 137 || !strings.Contains(res.stderr, "OOM killer") {
		t.Errorf("OOM: want 137 and the OOM killer named:\n%s", res)
	}
}

// gc removes only what Corral made: a container that merely carries the
// labels (inherited from an image) stays, a state-dir label pointing
// elsewhere removes nothing there, and a state dir a killed corral left
// without a container goes.
func TestDockerGCScope(t *testing.T) {
	id := dockerIdents(t)[0]
	if !id.isRoot() {
		t.Skip("needs root: writes into /run/corral/docker")
	}
	victim := mkdir(t, id, "dgc-victim")
	writeFile(t, id, filepath.Join(victim, "keep"), "x", 0o644)
	// Looks like Corral's in every way, but its state-dir label climbs out.
	forged := "corral-" + token()[6:18]
	dockerCLI(t, "create", "--name", forged, "--label", "io.corral.sandbox="+forged, "--label", "io.corral.version=docker/1",
		"--label", "io.corral.owner=1 1 x y", "--label", "io.corral.state-dir=/run/corral/docker/"+forged+"/../../../.."+victim, "corral/base:1", "true")
	defer exec.Command("docker", "rm", "-f", forged).Run()
	if err := os.MkdirAll("/run/corral/docker/"+forged, 0o755); err != nil { // so that the climb resolves
		t.Fatal(err)
	}
	defer os.RemoveAll("/run/corral/docker/" + forged)
	// Someone else's container with the labels an image passed on.
	name := "app-" + token()[6:18]
	dockerCLI(t, "create", "--name", name, "--label", "io.corral.sandbox="+name, "--label", "io.corral.owner=1 1 x y", "corral/base:1", "true")
	defer exec.Command("docker", "rm", "-f", name).Run()
	orphan := filepath.Join("/run/corral/docker", "corral-"+token()[6:18])
	if err := os.MkdirAll(orphan, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, id, filepath.Join(orphan, "owner"), "1 1 another-boot pid:[1]", 0o644)
	out, err := exec.Command(corralBin, "gc").CombinedOutput()
	if err != nil {
		t.Fatalf("corral gc: %v\n%s", err, out)
	}
	if !exists(filepath.Join(victim, "keep")) {
		t.Errorf("gc removed %s named by a forged label:\n%s", victim, out)
	}
	if dockerCLI(t, "ps", "-a", "-q", "--filter", "name="+name) == "" {
		t.Errorf("gc removed a container Corral did not make:\n%s", out)
	}
	if exists(orphan) {
		t.Errorf("gc left the orphaned state dir %s:\n%s", orphan, out)
	}
}

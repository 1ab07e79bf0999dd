package mxc

// Tests of process_container sandboxes a control plane keeps
// (container.go) through the stand-in: the relay is this test binary in
// its __relay mode (containerMain), the workload internal/testworkload.
// Wiring, not isolation.

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
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/procid"
	"github.com/corral-sandbox/corral/internal/relay"
	"github.com/corral-sandbox/corral/internal/testworkload"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// serveArg makes the test binary a loopback HTTP server: it prints its
// port, then answers every request with the body "served ARG".
const serveArg = "corral-test-serve"

// containerMain runs the test binary as the relay (__relay) or as the
// HTTP server (serveArg) and exits; it returns otherwise.
func containerMain() {
	if len(os.Args) < 2 {
		return
	}
	switch os.Args[1] {
	case relayArg:
		in, out, err := relay.TakeStdio()
		if err == nil {
			err = relay.Serve(context.Background(), in, out)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "relay:", err)
			os.Exit(120)
		}
		os.Exit(0)
	case serveArg:
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("%d\n", l.Addr().(*net.TCPAddr).Port)
		err = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "served %s", strings.Join(os.Args[2:], " "))
		}))
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// managed provisions and starts a process_container sandbox of owner.
func managed(t *testing.T, p *Provider, owner string, network policy.NetworkMode) *container {
	t.Helper()
	sb, err := p.Provision(context.Background(), mustPlan(t, p, testPolicy(network)), provider.ProvisionOptions{Persistent: true, Owner: owner, ID: provider.NewID()})
	if err != nil {
		t.Fatal(err)
	}
	c, ok := sb.(*container)
	if !ok {
		t.Fatalf("a persistent process_container sandbox is a %T", sb)
	}
	t.Cleanup(func() { _ = c.Deprovision(context.Background()) })
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

// alive reports whether the recorded wxc-exec of id still runs.
func alive(t *testing.T, h *harness, id string) bool {
	t.Helper()
	rec, err := h.provider(BackendProcessContainer).store().read(id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.WxcPID <= 0 {
		t.Fatalf("record %s names no wxc-exec: %+v", id, rec)
	}
	start, ok := procid.Start(rec.WxcPID)
	return ok && start == rec.WxcStart
}

// The request file (the proxy credential, the environment) is gone once
// the relay answers, not left until wxc-exec exits: a gateway that is
// stopped or killed would never remove it.
func TestContainerRequestFileGoneAtStart(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	h := newHarness(t)
	managed(t, h.provider(BackendProcessContainer), "gw-1", policy.NetworkProxy)
	if left, _ := filepath.Glob(filepath.Join(tmp, "corral-mxc-*")); len(left) > 0 {
		t.Fatalf("request files left while the sandbox runs: %v", left)
	}
}

func TestContainerExecDialStop(t *testing.T) {
	h := newHarness(t)
	p := h.provider(BackendProcessContainer)
	c := managed(t, p, "gw-1", policy.NetworkProxy)
	if c.EgressListener() == nil || c.ProxyCredential() == "" {
		t.Errorf("network proxy: listener %v, credential %q", c.EgressListener(), c.ProxyCredential())
	}
	if !c.Running(context.Background()) {
		t.Error("Running is false after Start")
	}
	rec, err := p.store().read(c.ID())
	if err != nil || rec.Backend != BackendProcessContainer || rec.Owner != "gw-1" || rec.PhaseState != StateStarted || !alive(t, h, c.ID()) {
		t.Fatalf("record: %+v, %v", rec, err)
	}
	if ids, err := p.Managed(context.Background(), "gw-1"); err != nil || !slices.Equal(ids, []string{c.ID()}) {
		t.Errorf("Managed = %v, %v", ids, err)
	}
	// The relay runs with the relay's directory granted read-only.
	if fs := c.req.Filesystem; fs == nil || !slices.Contains(fs.ReadonlyPaths, filepath.Dir(c.relay)) {
		t.Errorf("the relay's directory is not granted: %+v", fs)
	}
	// Two execs on the one relay: output, exit codes, the policy's
	// environment (the proxy's too), injected values redacted.
	if r := run(t, c, work("outln=one $X", "errln=$API_TOKEN", "exit=3")); r.err != nil || r.st.Code != 3 || r.stdout != "one abc\n" || r.stderr != "[REDACTED]\n" {
		t.Errorf("exec 1: %+v", r)
	}
	if r := run(t, c, work("outln=${HTTP_PROXY}")); r.err != nil || r.st.Code != 0 || !strings.Contains(r.stdout, "127.0.0.1:") {
		t.Errorf("exec 2: %+v", r)
	}

	// A server started by an exec, reached through DialServed.
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, provider.ExecSpec{Args: []string{testworkload.Args()[0], serveArg, "tok-1"}, Stdout: pw})
		pw.Close()
		done <- err
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("the server's port: %v", err)
	}
	var port int
	fmt.Sscan(line, &port)
	for i := 0; i < 2; i++ { // two connections: a fresh nonce each
		conn, err := c.DialServed(port, 10*time.Second)
		if err != nil {
			t.Fatalf("DialServed %d: %v", port, err)
		}
		fmt.Fprintf(conn, "GET / HTTP/1.0\r\nHost: x\r\n\r\n")
		b, _ := io.ReadAll(conn)
		conn.Close()
		if !strings.HasSuffix(string(b), "served tok-1") {
			t.Errorf("through DialServed: %q", b)
		}
	}
	cancel()
	if err := <-done; err == nil {
		t.Errorf("the cancelled server exec: %v", err)
	}

	pid, relayPID := c.wxc.Process.Pid, c.client.PID() // the stand-in's relay is a host process
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The channel's end ended the relay and so wxc-exec, on its own.
	if ps := c.wxc.ProcessState; ps == nil || ps.ExitCode() != 0 {
		t.Errorf("wxc-exec %d after the channel closed: %v", pid, ps)
	}
	// One wxc-exec for the sandbox's life (the stand-in logs a run at its
	// end): a dry run and the relay's run.
	if n := h.count("oneshot"); n != 2 {
		t.Errorf("%d one-shot runs of wxc-exec, want 2 (a dry run and the relay): %q", n, h.phases())
	}
	if _, ok := procid.Start(pid); ok {
		t.Errorf("wxc-exec %d runs after Stop", pid)
	}
	if _, ok := procid.Start(relayPID); ok || relayPID <= 0 {
		t.Errorf("the relay (%d) runs after Stop", relayPID)
	}
	if c.Running(context.Background()) {
		t.Error("Running after Stop")
	}
	if r := run(t, c, work("exit=0")); r.err == nil {
		t.Errorf("exec after Stop: %+v", r)
	}
	if err := c.Deprovision(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := p.store().read(c.ID()); provider.CodeOf(err) != provider.CodeNotFound {
		t.Errorf("record after Deprovision: %v", err)
	}
	if ids, _ := p.Managed(context.Background(), "gw-1"); len(ids) != 0 {
		t.Errorf("Managed after Deprovision: %v", ids)
	}
}

// A fresh provider (a restarted control plane) cannot reattach: the
// sandbox ended with the process that made it.
func TestContainerRecoverNotFound(t *testing.T) {
	h := newHarness(t)
	c := managed(t, h.provider(BackendProcessContainer), "gw-1", policy.NetworkNone)
	p2 := h.provider(BackendProcessContainer)
	sb, err := p2.Recover(context.Background(), mustPlan(t, p2, testPolicy(policy.NetworkNone)), c.State())
	if sb != nil || provider.CodeOf(err) != provider.CodeNotFound || !strings.Contains(err.Error(), "MXC has no attach") {
		t.Errorf("Recover = %v, %v; want %s", sb, err, provider.CodeNotFound)
	}
}

// Destroy by a fresh provider after a crash kills the recorded wxc-exec
// (alive or already gone), and nothing else: a pid that now names another
// process is left alone.
func TestContainerDestroyAfterCrash(t *testing.T) {
	h := newHarness(t)
	p := h.provider(BackendProcessContainer)
	t.Run("alive", func(t *testing.T) {
		c := managed(t, p, "gw-1", policy.NetworkNone)
		if err := h.provider(BackendProcessContainer).Destroy(context.Background(), c.ID()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-c.exited:
		case <-time.After(30 * time.Second):
			t.Fatal("the recorded wxc-exec runs on after Destroy")
		}
		if ps := c.wxc.ProcessState; ps == nil || ps.Success() {
			t.Errorf("wxc-exec was not killed: %v", ps)
		}
		if _, err := p.store().read(c.ID()); provider.CodeOf(err) != provider.CodeNotFound {
			t.Errorf("record after Destroy: %v", err)
		}
	})
	t.Run("killed", func(t *testing.T) {
		c := managed(t, p, "gw-1", policy.NetworkNone)
		_ = c.wxc.Process.Kill()
		<-c.exited
		if err := h.provider(BackendProcessContainer).Destroy(context.Background(), c.ID()); err != nil {
			t.Fatal(err)
		}
		if ids, _ := p.Managed(context.Background(), "gw-1"); len(ids) != 0 {
			t.Errorf("Managed after Destroy: %v", ids)
		}
	})
	t.Run("reused pid", func(t *testing.T) {
		argv := testworkload.Args("sleep=1h")
		other := exec.Command(argv[0], argv[1:]...)
		if err := other.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
		start, ok := procid.Start(other.Process.Pid)
		if !ok {
			t.Skip("no process start times on this OS")
		}
		id := provider.NewID()
		st := p.store()
		if err := st.write(&Record{LocalID: id, Backend: BackendProcessContainer, PhaseState: StateStarted, Owner: "gw-1", WxcPID: other.Process.Pid, WxcStart: start + 1}); err != nil {
			t.Fatal(err)
		}
		if err := h.provider(BackendProcessContainer).Destroy(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		if got, ok := procid.Start(other.Process.Pid); !ok || got != start {
			t.Fatalf("Destroy killed pid %d, which a record named with another start time", other.Process.Pid)
		}
		if _, err := st.read(id); provider.CodeOf(err) != provider.CodeNotFound {
			t.Errorf("record after Destroy: %v", err)
		}
	})
}

// An exec killed by a signal exits 128+N with Linux's N, for the
// signals seccomp and the kernel send too; an unknown name never reads as
// a clean 128.
func TestSignalNumber(t *testing.T) {
	for name, want := range map[string]int{"SIGKILL": 9, "SIGSYS": 31, "SIGBUS": 7, "SIGXCPU": 24, "SIGNOPE": 127} {
		if got := signalNumber(name); got != want {
			t.Errorf("signalNumber(%s) = %d, want %d", name, got, want)
		}
	}
}

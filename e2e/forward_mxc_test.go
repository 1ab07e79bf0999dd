//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	gw "github.com/corral-sandbox/corral/gateway/gen/corral/gateway/v1"
)

// corral sandbox forward on an mxc process_container sandbox (the
// stand-in): a loopback HTTP server that an exec runs inside is reached
// through the forward on one connection and another (each a relay
// connection with a fresh nonce; each audited); stopping the sandbox ends
// the server's exec and the forward (121), and no process of it is left.
// The sandbox's loopback is the host's here (process_container's loopback
// reach is the host's: docs/providers/mxc.md, Forwarding), so the port is
// one free on the host.
func TestForwardMXC(t *testing.T) {
	root := gatewayIdent(t)
	p := *mxcContainerGW
	p.id = root
	dir := p.dir(t, "gwfwdmxc")
	sock := filepath.Join(dir, "gw.sock")
	g := p.start(t, dir, "unix:"+sock)
	c := g.client(t, "")
	ctx := context.Background()
	wd := dockerWorkdir(t, p.id, "gwfwdmxc-wd")
	sb := g.create(t, ctx, c, p.req(wd))

	www := filepath.Join(dir, "www")
	if err := os.MkdirAll(www, 0o755); err != nil {
		t.Fatal(err)
	}
	body := "forwarded-mxc-" + uniqueSleep(1)
	if err := os.WriteFile(filepath.Join(www, "index.html"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	// The server is the exec's own process, running until the stop.
	served := make(chan error, 1)
	go func() {
		out, code, err := execOut(ctx, c, sb.Id, "python3", "-m", "http.server", "--bind", "127.0.0.1", "--directory", www, port)
		served <- fmt.Errorf("exit %d, %v: %s", code, err, out)
	}()
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if conn, err := net.Dial("tcp", "127.0.0.1:"+port); err == nil {
			conn.Close()
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the server in the sandbox never listened on %s:\n%s", port, g.log)
		}
	}

	f := startForward(t, sock, sb.Id, "0:"+port)
	for i := range 2 {
		got, err := f.get("/")
		if err != nil || got != body {
			t.Fatalf("GET %d through the forward: %q, %v\nforward: %s\ngateway: %s", i, got, err, f.errText(), g.log)
		}
	}
	audit := auditUntil(t, ctx, c, sb.Id, func(a string) bool { return strings.Count(a, `"type_uid":400102`) >= 2 })
	if n := strings.Count(audit, `"type_uid":400101`); n != 2 || !strings.Contains(audit, `"port":`+port+`}`) {
		t.Errorf("the audit log does not have one open per forwarded connection (%d opens):\n%s", n, audit)
	}
	// A client that connects and closes at once: the server inside waits
	// for a request and would keep the connection; the relay cannot
	// half-close it, so it ends once quiet after the caller's close.
	quiet, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	quiet.Close()
	if a := auditUntil(t, ctx, c, sb.Id, func(a string) bool { return strings.Count(a, `"type_uid":400102`) >= 3 }); strings.Count(a, `"type_uid":400102`) < 3 {
		t.Errorf("a connection the caller closed is not closed inside (no Close in the audit log):\n%s", a)
	}

	if _, err := c.StopSandbox(ctx, connect.NewRequest(&gw.StopSandboxRequest{Id: sb.Id})); err != nil {
		t.Fatal(err)
	}
	select {
	case <-served:
	case <-time.After(20 * time.Second):
		t.Error("the server's exec did not end with the sandbox's stop")
	}
	if code := f.exited(t, 20*time.Second); code != 121 {
		t.Errorf("the forward exited %d after the stop, want 121: %s", code, f.errText())
	}
	if left := hostProcsWith(www); len(left) > 0 || len(wxcProcs(dir)) > 0 {
		t.Errorf("left after the stop: server %v, wxc-exec %v", left, wxcProcs(dir))
	}
	if _, err := c.DeleteSandbox(ctx, connect.NewRequest(&gw.DeleteSandboxRequest{Id: sb.Id})); err != nil {
		t.Error(err)
	}
	if left := mxcRecords(dir); len(left) != 0 {
		t.Errorf("mxc records left after the delete: %v", left)
	}
}

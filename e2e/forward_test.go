//go:build linux

package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/corral-sandbox/corral/gateway"
	gw "github.com/corral-sandbox/corral/gateway/gen/corral/gateway/v1"
)

// forwardProc is a running `corral sandbox forward`.
type forwardProc struct {
	cmd    *exec.Cmd
	addr   string // what it listens on, as it printed
	stderr syncBuf
	done   chan struct{}
}

func (f *forwardProc) errText() string { return f.stderr.String() }

// said reports whether the forward's stderr has s, waiting up to 10 s
// for it (what it writes reaches the test through a pipe).
func (f *forwardProc) said(s string) bool {
	for end := time.Now().Add(10 * time.Second); !strings.Contains(f.errText(), s) && time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
	}
	return strings.Contains(f.errText(), s)
}

// startForward starts `corral sandbox forward ID SPEC` against the gateway
// on sock and waits for the address it prints.
func startForward(t *testing.T, sock, id, spec string) *forwardProc {
	t.Helper()
	f := &forwardProc{done: make(chan struct{})}
	f.cmd = exec.Command(corralBin, "sandbox", "forward", "--gateway", "unix:"+sock, id, spec)
	out, err := f.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	f.cmd.Stderr = &f.stderr
	if err := f.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.cmd.Process.Kill(); <-f.done })
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- strings.TrimSpace(l)
		_, _ = io.Copy(io.Discard, out)
		_ = f.cmd.Wait()
		close(f.done)
	}()
	select {
	case f.addr = <-line:
	case <-time.After(20 * time.Second):
	}
	if _, _, err := net.SplitHostPort(f.addr); err != nil {
		t.Fatalf("forward printed no address (%q): %s", f.addr, f.errText())
	}
	return f
}

// exited waits for the forward to end by itself and returns its status.
func (f *forwardProc) exited(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-f.done:
		return f.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		t.Fatalf("the forward still runs after %s: %s", within, f.errText())
		return -1
	}
}

// get fetches path through the forward on a connection of its own.
func (f *forwardProc) get(path string) (string, error) {
	cl := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := cl.Get("http://" + f.addr + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return string(b), err
}

// serveHTTP starts busybox's httpd on 127.0.0.1:port inside sandbox id
// (it detaches), serving index.html with body.
func serveHTTP(t *testing.T, ctx context.Context, c *gateway.Clients, id string, port int, body string) {
	t.Helper()
	dir := fmt.Sprintf("/tmp/www%d", port)
	script := fmt.Sprintf("mkdir -p %s && echo %s > %s/index.html && busybox httpd -p 127.0.0.1:%d -h %s", dir, body, dir, port, dir)
	out, code, err := execOut(ctx, c, id, "sh", "-c", script)
	if err != nil || code != 0 {
		t.Fatalf("httpd in the sandbox: exit %d, %v: %s", code, err, out)
	}
}

// corral sandbox forward, on every gateway provider: a loopback HTTP
// server inside the sandbox is reached with a real HTTP client, on one
// connection and on another; each connection is audited (Network
// Activity open and close); a restarted gateway carries them on; a HOST
// off loopback is refused; a port nobody
// listens on resets the client's connection and the forward goes on (and
// carries that port once something listens there); stopping the sandbox
// ends the forward's open connection and the forward itself (121), and
// deleting one ends its forward with 118.
func TestForward(t *testing.T) {
	eachGatewayProvider(t, func(t *testing.T, p *gwProvider) {
		dir := p.dir(t, "gwfwd")
		sock := filepath.Join(dir, "gw.sock")
		g := p.start(t, dir, "unix:"+sock)
		c := g.client(t, "")
		ctx := context.Background()
		wd := dockerWorkdir(t, p.id, "gwfwd-wd")
		sb := g.create(t, ctx, c, p.req(wd))
		serveHTTP(t, ctx, c, sb.Id, 8080, "forwarded-"+p.name)

		f := startForward(t, sock, sb.Id, "0:8080")
		if !strings.HasPrefix(f.addr, "127.0.0.1:") {
			t.Errorf("the forward listens on %s, not 127.0.0.1", f.addr)
		}
		for i := range 2 {
			body, err := f.get("/")
			if err != nil || strings.TrimSpace(body) != "forwarded-"+p.name {
				t.Fatalf("GET %d through the forward: %q, %v\nforward: %s\ngateway: %s", i, body, err, f.errText(), g.log)
			}
		}
		// The close is written as the gateway's call ends, just after the
		// client has its response.
		audit := auditUntil(t, ctx, c, sb.Id, func(a string) bool { return strings.Count(a, `"type_uid":400102`) >= 2 })
		if n := strings.Count(audit, `"type_uid":400101`); n != 2 || strings.Count(audit, `"type_uid":400102`) != 2 || !strings.Contains(audit, `"dst_endpoint":{"ip":"127.0.0.1","port":8080}`) {
			t.Errorf("the audit log does not have one open and one close per forwarded connection (%d opens):\n%s", n, audit)
		}

		// The gateway killed and started again adopts the sandbox; the
		// forward goes on through the new one.
		g.kill()
		g = p.start(t, dir, "unix:"+sock)
		c = g.client(t, "")
		if body, err := f.get("/"); err != nil || strings.TrimSpace(body) != "forwarded-"+p.name {
			t.Fatalf("GET after a gateway restart: %q, %v\nforward: %s\ngateway: %s", body, err, f.errText(), g.log)
		}

		// A HOST off loopback: refused before anything listens.
		bad := exec.Command(corralBin, "sandbox", "forward", "--gateway", "unix:"+sock, sb.Id, "192.0.2.1:0:8080")
		out, err := bad.CombinedOutput()
		if bad.ProcessState == nil || bad.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), "not a loopback address") {
			t.Errorf("a non-loopback HOST: %v: %s", err, out)
		}

		// Nobody on 8081 yet: the client's connection is reset, the
		// forward goes on, and carries 8081 once httpd listens there.
		f2 := startForward(t, sock, sb.Id, "127.0.0.1:0:8081")
		if body, err := f2.get("/"); err == nil {
			t.Fatalf("a port nobody listens on answered: %q", body)
		} else if !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "reset") {
			t.Errorf("a port nobody listens on: %v, want a reset", err)
		}
		if !f2.said("nothing listens on port 8081") {
			t.Errorf("the forward did not say why: %s", f2.errText())
		}
		serveHTTP(t, ctx, c, sb.Id, 8081, "second-"+p.name)
		if body, err := f2.get("/"); err != nil || strings.TrimSpace(body) != "second-"+p.name {
			t.Fatalf("after the refusal the forward does not carry 8081: %q, %v: %s", body, err, f2.errText())
		}
		if !strings.Contains(auditUntil(t, ctx, c, sb.Id, func(string) bool { return true }), `"activity_name":"Refuse"`) {
			t.Errorf("the refused connection is not in the audit log")
		}

		// A connection held open (keep-alive) ends with the sandbox.
		conn, err := net.Dial("tcp", f.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("a response on the held connection: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		if _, err := c.StopSandbox(ctx, connect.NewRequest(&gw.StopSandboxRequest{Id: sb.Id})); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := br.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("the held connection outlived the sandbox's stop: %v", err)
		}
		if code := f.exited(t, 20*time.Second); code != 121 || !f.said("the sandbox is being stopped") {
			t.Errorf("the forward exited %d after the stop, want 121: %s", code, f.errText())
		}
		if code := f2.exited(t, 20*time.Second); code != 121 {
			t.Errorf("the second forward exited %d after the stop, want 121: %s", code, f2.errText())
		}
		if _, err := c.DeleteSandbox(ctx, connect.NewRequest(&gw.DeleteSandboxRequest{Id: sb.Id})); err != nil {
			t.Error(err)
		}
		// Deleting a sandbox ends its forward with 118 (not found).
		sb2 := g.create(t, ctx, c, p.req(wd))
		f3 := startForward(t, sock, sb2.Id, "0:8080")
		if _, err := c.DeleteSandbox(ctx, connect.NewRequest(&gw.DeleteSandboxRequest{Id: sb2.Id})); err != nil {
			t.Fatal(err)
		}
		if code := f3.exited(t, 20*time.Second); code != 118 {
			t.Errorf("the forward exited %d after the delete, want 118: %s", code, f3.errText())
		}
	})
}

// auditUntil is sandbox id's audit log once done holds of it (or after
// 20 s, as it is then).
func auditUntil(t *testing.T, ctx context.Context, c *gateway.Clients, id string, done func(string) bool) string {
	t.Helper()
	a := auditText(t, ctx, c, id)
	for end := time.Now().Add(20 * time.Second); !done(a) && time.Now().Before(end); a = auditText(t, ctx, c, id) {
		time.Sleep(50 * time.Millisecond)
	}
	return a
}

// auditText is sandbox id's audit log.
func auditText(t *testing.T, ctx context.Context, c *gateway.Clients, id string) string {
	t.Helper()
	st, err := c.AuditSandbox(ctx, connect.NewRequest(&gw.AuditSandboxRequest{Id: id}))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for st.Receive() {
		b.Write(st.Msg().Data)
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

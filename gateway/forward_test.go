//go:build linux

package gateway_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/corral-sandbox/corral/gateway"
	gw "github.com/corral-sandbox/corral/gateway/gen/corral/gateway/v1"
	"github.com/corral-sandbox/corral/provider/linux"
)

// ForwardSandbox's errors, each as its connect code, on a linux
// sandbox: a first message that is not start and ports out of range
// (InvalidArgument), no such sandbox (NotFound), a port nobody listens on
// (Unavailable, audited as a Refuse), a stop under way (Aborted: the stop
// ends the forward, it does not wait for it), a stopped sandbox
// (FailedPrecondition).
func TestForwardErrors(t *testing.T) {
	dir := testDir(t)
	wd := filepath.Join(dir, "wd")
	if err := os.Mkdir(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	g := &gatewayT{dir: dir, p: linux.New(), instance: gateway.InstancePrefix + secret("t")[:17]}
	g.start(t)
	defer g.stop()
	ctx := context.Background()
	// forward opens a forward with first and returns its stream once the
	// gateway said connected, or the error it gave instead.
	forward := func(first *gw.ForwardRequest) (*connect.BidiStreamForClient[gw.ForwardRequest, gw.ForwardResponse], error) {
		st := g.cl.ForwardSandbox(ctx)
		if err := st.Send(first); err != nil {
			return nil, err
		}
		m, err := st.Receive()
		if err != nil {
			return nil, err
		}
		if !m.GetConnected() {
			t.Fatalf("the first response is %v, not connected", m)
		}
		return st, nil
	}
	start := func(id string, port uint32) *gw.ForwardRequest {
		return &gw.ForwardRequest{Input: &gw.ForwardRequest_Start{Start: &gw.ForwardStart{Id: id, Port: port, Peer: "127.0.0.1:4242"}}}
	}
	want := func(what string, code connect.Code, first *gw.ForwardRequest) {
		t.Helper()
		if _, err := forward(first); connect.CodeOf(err) != code {
			t.Errorf("%s: %v, want %s", what, err, code)
		}
	}

	want("no such sandbox", connect.CodeNotFound, start("corral-000000000000", 80))
	resp, err := g.cl.CreateSandbox(ctx, connect.NewRequest(&gw.CreateSandboxRequest{Provider: "linux", Workdir: wd}))
	if err != nil {
		t.Fatal(err)
	}
	id := resp.Msg.Sandbox.Id
	if get, err := g.cl.GetSandbox(ctx, connect.NewRequest(&gw.GetSandboxRequest{Id: id})); err != nil || !get.Msg.Sandbox.PortForwarding {
		t.Errorf("a running linux sandbox: port_forwarding false (%v)", err)
	}
	want("data first", connect.CodeInvalidArgument, &gw.ForwardRequest{Input: &gw.ForwardRequest_Data{Data: []byte("x")}})
	want("port 0", connect.CodeInvalidArgument, start(id, 0))
	want("port 65536", connect.CodeInvalidArgument, start(id, 65536))
	want("a port nobody listens on", connect.CodeUnavailable, start(id, 8080))

	sb := &sandboxT{t: t, g: g, id: id}
	if out := sb.exec("sh", "-c", "mkdir -p /tmp/www && busybox httpd -p 127.0.0.1:8080 -h /tmp/www && echo started"); out != "started\n" {
		t.Fatalf("httpd: %q", out)
	}
	held, err := forward(start(id, 8080))
	if err != nil {
		t.Fatalf("a forward to httpd: %v", err)
	}
	stopped := make(chan error, 1)
	go func() {
		_, err := g.cl.StopSandbox(ctx, connect.NewRequest(&gw.StopSandboxRequest{Id: id}))
		stopped <- err
	}()
	for {
		_, err := held.Receive()
		if err != nil {
			if connect.CodeOf(err) != connect.CodeAborted {
				t.Errorf("a forward held across a stop ended with %v, want Aborted", err)
			}
			break
		}
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	want("a stopped sandbox", connect.CodeFailedPrecondition, start(id, 8080))

	a, err := g.cl.AuditSandbox(ctx, connect.NewRequest(&gw.AuditSandboxRequest{Id: id}))
	if err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	for a.Receive() {
		log.Write(a.Msg().Data)
	}
	for _, s := range []string{`"activity_name":"Refuse"`, `"activity_name":"Open"`, `"status_detail":"the sandbox is being stopped, deleted or recreated"`, `"src_endpoint":{"ip":"127.0.0.1","port":4242}`} {
		if !strings.Contains(log.String(), s) {
			t.Errorf("the audit log has no %s:\n%s", s, log.String())
		}
	}
	if _, err := g.cl.DeleteSandbox(ctx, connect.NewRequest(&gw.DeleteSandboxRequest{Id: id})); err != nil {
		t.Error(err)
	}
}

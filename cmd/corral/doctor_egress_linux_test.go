//go:build linux

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDoctorEgress runs the trust self-test's Go client and curl (when
// the host has it) in real linux sandboxes through the inspecting proxy:
// both trust the sandbox's CA and speak h2 and SSE through it, Go a
// WebSocket too. With the origin allowed but not inspected (the tunnel
// spliced, so the clients see the origin's own certificate, which the
// sandbox does not trust), every client's trusted is no and the exit
// status 1: a client that does not trust what it gets is reported, never
// passed.
func TestDoctorEgress(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real sandboxes (-short)")
	}
	bin := filepath.Join(t.TempDir(), "corral")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	keep := func(c egressClient) bool { return c.script == "" || strings.HasPrefix(c.tool, "curl ") }
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := doctorEgress(ctx, bin, "linux", keep)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range rep.Tools {
		t.Logf("%s: trusted %v, h2 %v, SSE %v, WebSocket %v", tool.Tool, tool.Trusted, tool.H2, tool.SSE, tool.WS)
		want := map[string]string{"trusted": yes, "h2": yes, "SSE": yes, "WebSocket": yes}
		if strings.HasPrefix(tool.Tool, "curl ") {
			want["WebSocket"] = na
		}
		for k, v := range map[string]verdict{"trusted": tool.Trusted, "h2": tool.H2, "SSE": tool.SSE, "WebSocket": tool.WS} {
			if v.State != want[k] {
				t.Errorf("%s: %s %s (%s), want %s", tool.Tool, k, v.State, v.Why, want[k])
			}
		}
	}
	if len(rep.Tools) == 0 || rep.anyNo() {
		t.Fatalf("interception on: %d tools, a no among them: %v", len(rep.Tools), rep.anyNo())
	}

	doctorPassthrough = true
	defer func() { doctorPassthrough = false }()
	rep, err = doctorEgress(ctx, bin, "linux", keep)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range rep.Tools {
		t.Logf("passthrough: %s: trusted %v", tool.Tool, tool.Trusted)
		if tool.Trusted.State != no || !strings.Contains(strings.ToLower(tool.Trusted.Why), "certificate") {
			t.Errorf("passthrough: %s: trusted %s (%s), want no for the origin's certificate", tool.Tool, tool.Trusted.State, tool.Trusted.Why)
		}
	}
	if !rep.anyNo() {
		t.Error("passthrough: no verdict is no, so the exit status would be 0")
	}
}

//go:build linux

package main

import (
	"bytes"
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/consent"
	"github.com/corral-sandbox/corral/internal/peerhttp"
)

// What the workload names (a target directory, the executable it copied)
// reaches the approver's terminal with its escapes visible: no ESC, BEL
// or newline of its own gets through to rewrite the screen or forge a
// line.
func TestApprovalsOutputEscapesWorkloadText(t *testing.T) {
	evil := "/tmp/rv/x\x1b]0;PWNED\a\x1b[2J\nrequested req-fake folder /etc"
	r := consent.Request{ID: "req-1", Kind: consent.KindFolder, Target: evil, Access: "ro", State: consent.StatePending,
		Requester: consent.Requester{PID: 7, Exe: "/tmp/\x1b[31mgit", Via: "tcp"}, Detail: "d\x07", Created: time.Now(), Expires: time.Now()}
	var w bytes.Buffer
	showRequest(&w, r)
	printEvent(&w, consent.Event{Activity: "requested", Time: time.Now(), Request: &r})
	printGrants(&w, []consent.Grant{{ID: "g", Target: evil, Detail: "x\x1b[1m"}})
	out := w.String()
	if strings.ContainsAny(out, "\x1b\a") {
		t.Fatalf("raw escape in the output:\n%q", out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "requested req-fake") || strings.Contains(l, "\trequested req-fake") {
			t.Fatalf("a forged line: %q", l)
		}
	}
	if shown("/home/me/src/ünï docs") != "/home/me/src/ünï docs" {
		t.Fatal("a printable path was quoted")
	}
}

// liveRuns lists a run whose socket answers and removes one nobody
// listens on (a run killed before its cleanup), whatever its pid.
func TestLiveRunsSweepsStaleSockets(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	}
	const live, stale = 999999998, 999999999 // above pid_max: never a process
	l, err := peerhttp.ListenUnix(runSocket(live))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	sl, err := net.Listen("unix", runSocket(stale))
	if err != nil {
		t.Fatal(err)
	}
	sl.(*net.UnixListener).SetUnlinkOnClose(false)
	sl.Close()
	t.Cleanup(func() { os.Remove(runSocket(stale)) })
	if got := liveRuns(); slices.Contains(got, stale) {
		t.Fatalf("liveRuns = %v lists the socket nobody listens on", got)
	}
	if _, err := os.Lstat(runSocket(stale)); err != nil {
		t.Fatalf("a socket made a moment ago was removed (a run between bind and listen): %v", err)
	}
	old := time.Now().Add(-time.Minute)
	if err := os.Chtimes(runSocket(stale), old, old); err != nil {
		t.Fatal(err)
	}
	if got := liveRuns(); !slices.Contains(got, live) || slices.Contains(got, stale) {
		t.Fatalf("liveRuns = %v, want %d and not %d", got, live, stale)
	}
	if _, err := os.Lstat(runSocket(stale)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the stale socket is still there: %v", err)
	}
}

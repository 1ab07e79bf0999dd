package relay

import (
	"io"
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/windows"

	"github.com/corral-sandbox/corral/internal/wine"
)

// alive: pid's process has not exited (GetExitCodeProcess: STILL_ACTIVE).
func alive(pid int) bool {
	h, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, uint32(pid))
	if err != nil {
		return false
	}
	defer windows.CloseHandle(h)
	var code uint32
	return windows.GetExitCodeProcess(h, &code) == nil && code == 259 // STILL_ACTIVE
}

// startRelay runs the test binary as a relay (TakeStdio, then Serve, as
// corral __relay) and opens it.
func startRelay(t *testing.T) (*exec.Cmd, *Client) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	relay := exec.Command(exe)
	relay.Env = append(os.Environ(), "RELAY_HELPER=relay")
	in, err := relay.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := relay.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = relay.Process.Kill(); _ = relay.Wait() })
	c, err := Open(out, in)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return relay, c
}

// TestKilledRelayEndsItsTrees: a relay that is killed (TerminateProcess:
// it cleans nothing up) takes what it started with it, the children of
// its processes too: its jobs' last handles close, and kill on close ends
// them. (On Linux they live on until the container ends: docs/relay.md.)
func TestKilledRelayEndsItsTrees(t *testing.T) {
	relay, c := startRelay(t)
	r, w := io.Pipe()
	cmd := helperCmd("sleep", "tree")
	cmd.Stdout = w
	if _, err := c.StartExec(ctxT(t), cmd); err != nil {
		t.Fatal(err)
	}
	pids := treePIDs(t, r, 2)
	if err := relay.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	gone(t, pids, "the relay's kill")
}

// TestRelayProcessDACL: a process of the relay's own user (a workload)
// may wait for the relay but not open it to duplicate its handles, start
// a process as its child or touch its memory (confine).
func TestRelayProcessDACL(t *testing.T) {
	relay, _ := startRelay(t) // Open read the hello: TakeStdio has run
	pid := uint32(relay.Process.Pid)
	h, err := windows.OpenProcess(windows.SYNCHRONIZE|windows.PROCESS_QUERY_LIMITED_INFORMATION, false, pid)
	if err != nil {
		t.Fatalf("waiting for the relay: %v", err)
	}
	windows.CloseHandle(h)
	for _, access := range []uint32{windows.PROCESS_DUP_HANDLE, windows.PROCESS_CREATE_PROCESS, windows.PROCESS_VM_READ, windows.PROCESS_VM_WRITE, windows.WRITE_DAC} {
		h, err := windows.OpenProcess(access, false, pid)
		if err == nil {
			windows.CloseHandle(h)
			wine.SkipArtifact(t, "a process's DACL is not checked when its own user opens it")
			t.Errorf("the relay opened with access %#x by its own user", access)
		} else if err != windows.ERROR_ACCESS_DENIED {
			t.Errorf("open with access %#x: %v, want access denied", access, err)
		}
	}
}

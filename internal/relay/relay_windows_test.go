package relay

import (
	"io"
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/windows"
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

// TestKilledRelayEndsItsTrees: a relay that is killed (TerminateProcess:
// it cleans nothing up) takes what it started with it, the children of
// its processes too: its jobs' last handles close, and kill on close ends
// them. (On Linux they live on until the container ends: docs/relay.md.)
func TestKilledRelayEndsItsTrees(t *testing.T) {
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
	defer c.Close()
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

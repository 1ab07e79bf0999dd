package relay

import (
	"fmt"
	"os"
	"os/exec"
)

// isolate: Windows has no process groups to signal; the sandbox (MXC's
// container) ends with the relay.
func isolate(*exec.Cmd) {}

func killTree(p *os.Process) { _ = p.Kill() }

// signalTree: every signal is a kill on Windows.
func signalTree(p *os.Process, name string) error {
	switch sigName(name) {
	case "SIGHUP", "SIGINT", "SIGQUIT", "SIGKILL", "SIGTERM", "SIGUSR1", "SIGUSR2":
		return p.Kill()
	}
	return fmt.Errorf("unknown signal %q", name)
}

func exitSignal(*os.ProcessState) string { return "" }

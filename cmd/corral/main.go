// containermaxprocs=0: the runtime must not keep cgroup files open to
// follow CPU limits. Every fd corral holds is one that --preserve-fds could
// mistake for the caller's, and the sandbox init would hold host cgroup files.

//go:debug containermaxprocs=0

// Command corral runs commands in policy-enforced sandboxes.
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"

	"github.com/corral-sandbox/corral/internal/startup"
	"github.com/corral-sandbox/corral/probe"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/service/isolation"
)

// Set by the linker: -X main.version=... -X main.commit=...
var (
	version = "dev"
	commit  = "unknown"
)

// exitError carries an exit status out of a command without printing.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

func main() {
	if traceStartupRequested(os.Args[1:]) {
		startup.Enable()
		startup.Begin("supervisor", startup.Enter())
	}
	// The sandbox init is the same binary; recognise it before anything
	// else runs so its start-up stays minimal.
	osEntry() // the sandbox init and helpers are this binary too
	if len(os.Args) > 1 && os.Args[1] == relayArg {
		os.Exit(relayMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == isolation.SessionCommand {
		os.Exit(serviceSessionMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == probe.Arg {
		os.Exit(probe.Main(os.Args[2:]))
	}
	os.Exit(execute(os.Args[1:]))
}

// buildCommit is the commit the binary was built from: -X main.commit, or
// the VCS stamp `go build` records (debug.ReadBuildInfo).
func buildCommit() string {
	if commit != "unknown" {
		return commit
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if dirty {
				rev += "-dirty"
			}
			return rev
		}
		// With -buildvcs=false the module's pseudo-version still names
		// the commit: v0.0.0-<time>-<commit>[+dirty].
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			return v
		}
	}
	return commit
}

func execute(args []string) int {
	root := newRootCmd()
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	fmt.Fprintf(os.Stderr, "corral: %v\n", err)
	var pe *provider.Error
	if errors.As(err, &pe) {
		return pe.Code.ExitCode()
	}
	if isPolicyError(err) {
		return provider.CodePolicyRejected.ExitCode()
	}
	return 2 // usage
}

// Command corral runs commands in policy-enforced sandboxes.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/provider/linux"
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
	// The sandbox init is the same binary; recognise it before anything
	// else runs so its start-up stays minimal.
	if len(os.Args) > 1 && os.Args[1] == linux.InitArg {
		linux.InitMain()
	}
	if len(os.Args) > 1 && os.Args[1] == linux.HoldArg {
		linux.HoldMain()
	}
	os.Exit(execute(os.Args[1:]))
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

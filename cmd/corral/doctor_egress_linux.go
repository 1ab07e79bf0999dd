//go:build linux

package main

import (
	"os"

	"github.com/corral-sandbox/corral/qualify"
)

// The in-sandbox client of the inspected-egress checks (qualify's P29 and
// P32, doctor --egress's Go client) is this binary, recognised before
// anything else runs as the probes are (main).
func init() {
	if len(os.Args) > 1 && os.Args[1] == qualify.ClientArg {
		os.Exit(qualify.ClientMain(os.Args[2:]))
	}
}

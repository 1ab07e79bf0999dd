//go:build linux

// Command initprog is the sandbox's init alone (linux.InitMain): the small
// program that `go generate ./provider/linux` builds into initbin/ and
// the linux provider then embeds and runs as each sandbox's pid 1, so that
// pid 1 does not start the whole corral binary (its package
// initialisation and the pages it touches; bench/startup.sh measures
// both). It is not for direct use.
package main

import (
	"fmt"
	"os"

	"github.com/corral-sandbox/corral/provider/linux"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == linux.InitArg {
		linux.InitMain()
	}
	fmt.Fprintln(os.Stderr, "corral-init: the sandbox init of corral's linux provider, started by corral; not for direct use")
	os.Exit(2)
}

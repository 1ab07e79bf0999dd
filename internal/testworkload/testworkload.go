// Package testworkload is a workload for tests that run commands (through
// provider/mxc and its stand-in executor, as a credential source): the
// test binary itself, re-executed with a list of steps, so that the tests
// need no shell and run alike on Linux and on Windows.
package testworkload

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Arg, as the first argument, makes the binary the workload (Main).
const Arg = "corral-test-workload"

// Args is the argv running steps in this binary (the test binary), in
// order:
//
//	out=TEXT, outln=TEXT  TEXT ($VAR and ${VAR} expanded) to stdout, outln with "\n"
//	err=TEXT, errln=TEXT  the same to stderr
//	pwd                   the working directory and "\n" to stdout
//	argv                  each later argument, verbatim, as "[ARG]" to stdout; ends the steps
//	sleep=DURATION        a time.ParseDuration duration
//	spawn=STEP            STEP in a child that holds stdout and stderr, not waited for
//	exit=N                exits N (the workload exits 0 after its last step)
func Args(steps ...string) []string {
	self, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return append([]string{self, Arg}, steps...)
}

// Main runs the workload and exits when os.Args[1] is Arg; it returns
// otherwise. Call it first in TestMain.
func Main() {
	if len(os.Args) < 2 || os.Args[1] != Arg {
		return
	}
	os.Exit(run(os.Args[2:]))
}

func run(steps []string) int {
	for i, s := range steps {
		verb, val, _ := strings.Cut(s, "=")
		switch verb {
		case "out", "outln", "err", "errln":
			w := os.Stdout
			if verb[:3] == "err" {
				w = os.Stderr
			}
			text := os.ExpandEnv(val)
			if strings.HasSuffix(verb, "ln") {
				text += "\n"
			}
			fmt.Fprint(w, text)
		case "pwd":
			wd, err := os.Getwd()
			if err != nil {
				return fail(err)
			}
			fmt.Println(wd)
		case "argv":
			for _, a := range steps[i+1:] {
				fmt.Printf("[%s]", a)
			}
			return 0
		case "sleep":
			d, err := time.ParseDuration(val)
			if err != nil {
				return fail(err)
			}
			time.Sleep(d)
		case "spawn":
			c := exec.Command(Args(val)[0], Args(val)[1:]...)
			c.Stdout, c.Stderr = os.Stdout, os.Stderr
			if err := c.Start(); err != nil {
				return fail(err)
			}
		case "exit":
			n, err := strconv.Atoi(val)
			if err != nil {
				return fail(err)
			}
			return n
		default:
			return fail(fmt.Errorf("unknown step %q", s))
		}
	}
	return 0
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "testworkload:", err)
	return 125
}

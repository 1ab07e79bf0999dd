//go:build windows

package wintask

import (
	"slices"
	"testing"

	"golang.org/x/sys/windows"
)

// The Arguments XML writes are read back by CommandLineToArgvW
// (windows.DecomposeCommandLine) as the arguments given, after the
// program Task Scheduler puts first, and are what windows.EscapeArg
// makes of each.
func TestArgumentsRoundTrip(t *testing.T) {
	task := testTask()
	task.Args = append(task.Args, `\`, `\\`, `"`, `\"`, `a\b`, "tab\there", `"quoted"`, `end\\`, "ünïcödé \"x\"")
	b, err := task.XML()
	if err != nil {
		t.Fatal(err)
	}
	p, _ := parse(t, b)
	args := p.Actions.Exec[0].Arguments
	got, err := windows.DecomposeCommandLine(`"` + task.Exe + `" ` + args)
	if err != nil {
		t.Fatal(err)
	}
	if want := append([]string{task.Exe}, task.Args...); !slices.Equal(got, want) {
		t.Errorf("DecomposeCommandLine(%s) =\n%q, want\n%q", args, got, want)
	}
	for _, a := range task.Args {
		if g, w := ComposeArgs([]string{a}), windows.EscapeArg(a); g != w {
			t.Errorf("ComposeArgs(%q) = %s, windows.EscapeArg = %s", a, g, w)
		}
	}
}

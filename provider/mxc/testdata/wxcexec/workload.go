package main

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// workload is the command the stand-in runs as an ordinary child process:
// no containment of any kind.
type workload struct {
	argv        []string // "-- CMD ...": run directly
	commandLine string   // process.commandLine: run by /bin/sh -c (cmd /C on Windows)
	env         []string
	hasEnv      bool
	logon       []string // NAME=VALUE set last, over env or the inherited environment (an exec's profileEnv)
	cwd         string
	timeoutMs   uint64 // 0: none
}

type result struct {
	code     int
	startErr error
	timedOut bool
}

// childEnv: with process.env the child gets exactly those entries, plus the
// host's PATH (and on Windows SystemRoot, ComSpec, PATHEXT) when they are
// not among them, so commands resolve; without process.env it inherits the
// stand-in's environment. Either way the logon entries replace any entry of
// the same name (case-insensitive on Windows).
func (w *workload) childEnv() []string {
	if !w.hasEnv {
		if len(w.logon) == 0 {
			return nil // inherit
		}
		return withLogon(os.Environ(), w.logon)
	}
	return withLogon(w.withHostKeys(), w.logon)
}

// withLogon returns env without the entries named in logon, then logon.
func withLogon(env, logon []string) []string {
	if len(logon) == 0 {
		return env
	}
	out := make([]string, 0, len(env)+len(logon))
	for _, e := range env {
		name, _, _ := strings.Cut(e, "=")
		if !named(logon, name) {
			out = append(out, e)
		}
	}
	return append(out, logon...)
}

// named reports whether an entry of env has that name.
func named(env []string, name string) bool {
	for _, e := range env {
		n, _, _ := strings.Cut(e, "=")
		if n == name || runtime.GOOS == "windows" && strings.EqualFold(n, name) {
			return true
		}
	}
	return false
}

func (w *workload) withHostKeys() []string {
	env := append([]string(nil), w.env...)
	keys := []string{"PATH"}
	if runtime.GOOS == "windows" {
		keys = append(keys, "SystemRoot", "ComSpec", "PATHEXT")
	}
	for _, k := range keys {
		found := false
		for _, e := range env {
			if name, _, _ := strings.Cut(e, "="); strings.EqualFold(name, k) {
				found = true
				break
			}
		}
		if v, ok := os.LookupEnv(k); ok && !found {
			env = append(env, k+"="+v)
		}
	}
	return env
}

func (w *workload) run() result {
	var cmd *exec.Cmd
	switch {
	case len(w.argv) > 0:
		cmd = exec.Command(w.argv[0], w.argv[1:]...)
	case runtime.GOOS == "windows":
		cmd = exec.Command("cmd.exe", "/C", w.commandLine)
	default:
		cmd = exec.Command("/bin/sh", "-c", w.commandLine)
	}
	if cmd.Err != nil {
		return result{startErr: cmd.Err}
	}
	cmd.Env = w.childEnv()
	cmd.Dir = w.cwd
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return result{startErr: err}
	}
	contain(cmd.Process)
	// The child stays in the stand-in's process group, so a caller that
	// signals the group reaches it; a signal to the stand-in alone is
	// forwarded.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwardedSignals...)
	defer signal.Stop(sigs)
	var timeout <-chan time.Time
	if w.timeoutMs > 0 {
		t := time.NewTimer(time.Duration(w.timeoutMs) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timedOut := false
	for {
		select {
		case s := <-sigs:
			_ = cmd.Process.Signal(s)
		case <-timeout:
			timedOut = true
			killTree(cmd.Process)
		case err := <-done:
			r := result{timedOut: timedOut}
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				r.code = exitFail
				return r
			}
			r.code = cmd.ProcessState.ExitCode()
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				r.code = 128 + int(ws.Signal())
			}
			return r
		}
	}
}

//go:build linux

package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/provider/docker"
	"github.com/corral-sandbox/corral/provider/linux"
)

// registry holds the providers compiled into this binary, strongest first.
// Docker is unavailable without a reachable daemon; MXC is there for the
// Windows side and for tests with its stand-in, unavailable (and skipped by
// --provider auto) without wxc-exec.
var registry = []provider.Provider{linux.New(), docker.New(), mxcProvider()}

// osEntry runs the roles this binary plays besides the CLI: the sandbox's
// init, the idmap helper, a persistent linux sandbox's supervisor and slot holder, and the docker provider's init, exec shim and connect helper. It returns only when it is neither.
func osEntry() {
	if len(os.Args) > 1 && os.Args[1] == linux.InitArg {
		linux.InitMain()
	}
	if len(os.Args) > 1 && os.Args[1] == linux.HoldArg {
		linux.HoldMain()
	}
	if len(os.Args) > 1 && os.Args[1] == linux.PersistArg {
		linux.PersistMain()
	}
	if len(os.Args) > 1 && os.Args[1] == linux.SlotsArg {
		linux.SlotsMain()
	}
	if len(os.Args) > 1 && os.Args[1] == docker.InitArg {
		docker.InitMain(os.Args[2:])
	}
	if len(os.Args) > 1 && os.Args[1] == docker.ExecArg {
		docker.ExecMain(os.Args[2:])
	}
	if len(os.Args) > 1 && os.Args[1] == docker.ConnectArg {
		docker.ConnectMain(os.Args[2:])
	}
	serviceSupervisor()
}

// takeFDs returns the caller's fds 3..3+n-1 (each must be open) and marks
// every other fd from 3 up close-on-exec, so nothing else can reach a
// sandbox. It runs before corral opens anything that could take a number
// the caller left free.
func takeFDs(n int) ([]*os.File, error) {
	var out []*os.File
	for fd := 3; fd < 3+n; fd++ {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
			return nil, fmt.Errorf("--preserve-fds %d: fd %d is not open in the caller (pass fds 3..%d)", n, fd, 2+n)
		}
		out = append(out, os.NewFile(uintptr(fd), fmt.Sprintf("fd%d", fd)))
	}
	_ = unix.CloseRange(uint(3+n), ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	return out, nil
}

// attachTerminal puts the caller's terminal (if stdin is one) in raw mode
// and reports its size now and on every SIGWINCH. It returns a function
// that restores the terminal.
func attachTerminal() (func(), <-chan [2]uint16) {
	in := int(os.Stdin.Fd())
	resize := make(chan [2]uint16, 4)
	if !term.IsTerminal(in) {
		close(resize)
		return func() {}, resize
	}
	st, err := term.MakeRaw(in)
	send := func() {
		if rows, cols, err := pty.Getsize(os.Stdin); err == nil {
			select {
			case resize <- [2]uint16{uint16(rows), uint16(cols)}:
			default:
			}
		}
	}
	send()
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	go func() {
		for range winch {
			send()
		}
	}()
	return func() {
		signal.Stop(winch)
		if err == nil {
			_ = term.Restore(in, st)
		}
	}, resize
}

//go:build linux

package linux

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ackWait bounds how long init keeps an exec's exited process unreaped
// for its caller's ack (the caller reads its host pid from /proc first).
const ackWait = 2 * time.Second

// persistentExec is one exec of a persistent sandbox, as init tracks it.
type persistentExec struct {
	pid  int
	sock int       // the exec's socket; -1 once its caller went away
	ack  time.Time // while non-zero: the pid is not reaped before this
}

// servePersistent is init's loop in a persistent sandbox (InitSpec.
// Persistent): each request on the control socket starts one process,
// forked from this locked main thread (so every exec has init's
// namespaces, mount tree, Landlock domain, seccomp filter and no
// capabilities), and brings a socket of its own: init sends the pid, a
// pty master when asked, and the exit on it, and reads acks and signals
// from it. EOF there means the caller went away: the process group is
// killed. Processes an exec leaves in the background live on, as in any
// persistent sandbox, until the sandbox ends. Signals sent to init itself
// are dropped (the workload shares its uid), faults' too (faultSignals).
// It returns never: EOF on the control socket means the supervisor is
// gone, and init exits, which kills every process of the namespace.
func servePersistent(ctl int, buf []byte) {
	dropSignals(unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2, unix.SIGWINCH, unix.SIGCONT)
	if defaultFaultSignals() != nil {
		os.Exit(1)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		os.Exit(1)
	}
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, unix.SIGCHLD)
	go func() {
		one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
		for range chld {
			_, _ = unix.Write(wake, one)
		}
	}()
	oob := make([]byte, unix.CmsgSpace(253*4))
	small := make([]byte, 256)
	buf8 := make([]byte, 8)
	execs := map[int]*persistentExec{}
	for {
		pfds := []unix.PollFd{{Fd: int32(ctl), Events: unix.POLLIN}, {Fd: int32(wake), Events: unix.POLLIN}}
		var order []*persistentExec
		timeout := -1
		for _, e := range execs {
			if e.sock >= 0 {
				pfds = append(pfds, unix.PollFd{Fd: int32(e.sock), Events: unix.POLLIN})
				order = append(order, e)
			}
			if !e.ack.IsZero() {
				ms := int(time.Until(e.ack).Milliseconds()) + 1
				if timeout < 0 || ms < timeout {
					timeout = max(ms, 0)
				}
			}
		}
		if _, err := unix.Poll(pfds, timeout); err != nil && err != unix.EINTR {
			os.Exit(1)
		}
		if pfds[0].Revents != 0 {
			n, oobn, _, _, err := unix.Recvmsg(ctl, buf, oob, unix.MSG_CMSG_CLOEXEC)
			if err != unix.EINTR && err != unix.EAGAIN {
				if err != nil || n == 0 {
					os.Exit(1) // the supervisor is gone: dying as PID 1 kills the namespace
				}
				if e := startExec(buf[:n], rightsOf(oob[:oobn])); e != nil {
					execs[e.pid] = e
				}
			}
		}
		if pfds[1].Revents&unix.POLLIN != 0 {
			_, _ = unix.Read(wake, buf8)
		}
		for i, e := range order {
			if pfds[2+i].Revents == 0 {
				continue
			}
			n, _, _, _, err := unix.Recvmsg(e.sock, small, nil, 0)
			if err == unix.EINTR || err == unix.EAGAIN {
				continue
			}
			var c execCtl
			if err != nil || n == 0 || json.Unmarshal(small[:n], &c) != nil {
				// The caller is gone (or speaks nonsense): end what it
				// started.
				signalGroup(e.pid, unix.SIGKILL)
				unix.Close(e.sock)
				e.sock, e.ack = -1, time.Time{}
				continue
			}
			if c.Ack {
				e.ack = time.Time{}
			}
			if c.Signal > 0 && c.Signal < 65 {
				signalGroup(e.pid, syscall.Signal(c.Signal))
			}
		}
		pending := false
		for _, e := range execs {
			if !e.ack.IsZero() && time.Now().After(e.ack) {
				e.ack = time.Time{}
			}
			pending = pending || !e.ack.IsZero()
		}
		if pending {
			continue // a caller still reads a pid from /proc: reap nothing yet
		}
		reap(func(wpid int, ws unix.WaitStatus) { // every exec that ended, and any orphan re-parented to us
			if e := execs[wpid]; e != nil {
				delete(execs, wpid)
				if e.sock >= 0 {
					send(e.sock, exitMsg(ws))
					unix.Close(e.sock)
				}
			}
		})
	}
}

// faultSignals are the signals the Go runtime takes for a fault of its
// own, and crashes on, unless kill(2) or tgkill(2) sent them (si_code
// SI_USER or SI_TKILL): the workload, which shares init's uid, would end
// the sandbox with one rt_sigqueueinfo(2), rt_tgsigqueueinfo(2) or
// pidfd_send_signal(2) carrying a siginfo of its own (si_code SI_QUEUE).
var faultSignals = []unix.Signal{unix.SIGILL, unix.SIGTRAP, unix.SIGBUS, unix.SIGFPE, unix.SIGSEGV, unix.SIGSTKFLT, unix.SIGSYS}

// defaultFaultSignals sets faultSignals to SIG_DFL in init, past the Go
// runtime (which never installs them again): the kernel then drops them
// when they come from inside init's pid namespace (pid_namespaces(7):
// only signals init has a handler for reach it), while a real fault of
// init's still ends it (force_sig_fault) as the runtime's crash did.
// Processes init starts get SIG_DFL for them anyway (execve(2)).
func defaultFaultSignals() error {
	var sa [4]uint64 // the kernel's struct sigaction: SIG_DFL, no flags, no restorer, empty mask
	for _, sig := range faultSignals {
		if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&sa)), 0, 8, 0, 0); e != 0 {
			return e
		}
	}
	return nil
}

// startExec starts the process of one exec request (fds: its socket,
// then its files) and reports its pid on the socket; nil when it did not
// start (the socket then carries why, and is closed).
func startExec(b []byte, fds []int) *persistentExec {
	closeAll := func(fds []int) {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	if len(fds) == 0 {
		return nil // no socket to answer on
	}
	sock, files := fds[0], fds[1:]
	fail := func(code int, format string, args ...any) *persistentExec {
		closeAll(files)
		send(sock, initMsg{Error: fmt.Sprintf(format, args...), Exited: true, Code: code})
		unix.Close(sock)
		return nil
	}
	var req execRequest
	if err := json.Unmarshal(b, &req); err != nil || len(req.Args) == 0 || req.NFiles != len(files) {
		return fail(127, "init: bad exec request (%d files): %v", len(files), err)
	}
	path, err := lookPath(req.Args[0], req.Env)
	if err != nil {
		return fail(127, "%v", err)
	}
	if req.TTY {
		master, slave, err := openPTY(req.Rows, req.Cols)
		if err != nil {
			return fail(126, "pty: %v", err)
		}
		b, _ := json.Marshal(initMsg{TTY: true})
		err = unix.Sendmsg(sock, b, unix.UnixRights(master), nil, 0)
		unix.Close(master)
		if err != nil {
			unix.Close(slave)
			return fail(126, "pty: %v", err)
		}
		files = append([]int{slave, slave, slave}, files...)
	}
	pid, err := syscall.ForkExec(path, req.Args, &syscall.ProcAttr{
		Dir:   req.Dir,
		Env:   req.Env,
		Files: uintptrs(files),
		Sys:   &syscall.SysProcAttr{Setsid: true, Setctty: req.TTY, Ctty: 0},
	})
	if req.TTY {
		files = files[2:] // the slave once
	}
	if err != nil {
		code := 126
		if errors.Is(err, unix.ENOENT) {
			code = 127
		}
		return fail(code, "exec %s: %v", req.Args[0], err)
	}
	closeAll(files)
	send(sock, initMsg{PID: pid})
	e := &persistentExec{pid: pid, sock: sock}
	if req.Ack {
		e.ack = time.Now().Add(ackWait)
	}
	return e
}

// exitMsg is the exit report of a wait status.
func exitMsg(ws unix.WaitStatus) initMsg {
	m := initMsg{Exited: true}
	switch {
	case ws.Exited():
		m.Code = ws.ExitStatus()
	case ws.Signaled():
		m.Signal = int(ws.Signal())
		m.Code = 128 + m.Signal
	}
	return m
}

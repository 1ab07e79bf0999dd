//go:build linux

package linux

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/landlock"
	"github.com/corral-sandbox/corral/internal/seccomp"
	"github.com/corral-sandbox/corral/internal/startup"
	"github.com/corral-sandbox/corral/policy"
)

// InitArg is argv[1] that makes the corral binary act as the sandbox init.
const InitArg = "__corral_init"

// ctlFD is the control socket's fd number in init (ExtraFiles[0]).
const ctlFD = 3

// socketsFD, when the spec serves (InitSpec.serves), is where init hands out TCP
// sockets made in the sandbox's network namespace (ExtraFiles[1]).
const socketsFD = 4

func init() {
	// The sandbox init does its per-thread work (bounding set, cgroup v1
	// placement) on the main thread, which also forks the workload; lock
	// it from the start so that thread is the thread group leader whose
	// /proc/<pid>/status the supervisor verifies.
	if len(os.Args) > 1 && os.Args[1] == InitArg {
		runtime.LockOSThread()
	}
}

// layerErr is a failure to apply one layer.
type layerErr struct {
	layer policy.Layer
	err   error
}

func (e *layerErr) Error() string { return fmt.Sprintf("layer %s: %v", e.layer, e.err) }

// InitMain is the sandbox's PID 1. It runs inside the new namespaces as the
// workload uid with a few ambient capabilities, builds the mount tree,
// applies Landlock, drops every capability, installs seccomp, reports
// readiness, then runs exec requests, reaps zombies and forwards signals.
// It never returns.
func InitMain() {
	entered := startup.Enter() // recorded once the spec says to trace
	unix.CloseOnExec(ctlFD)
	// Nothing else init inherited may reach the workload: a fork racing in
	// the supervisor can hand init fds opened without O_CLOEXEC (Go's own
	// syscall.writeIDMappings opens /proc/PID/{uid,gid}_map that way).
	_ = unix.CloseRange(ctlFD+1, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0)
	ctl := ctlFD
	buf := make([]byte, 1<<20)
	oob := make([]byte, unix.CmsgSpace(64*4))
	n, oobn, _, _, err := unix.Recvmsg(ctl, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil || n == 0 {
		os.Exit(1)
	}
	fds := rightsOf(oob[:oobn])
	spec, err := decodeSpec(buf[:n])
	if err != nil {
		send(ctl, initMsg{Error: "init: bad spec: " + err.Error()})
		os.Exit(1)
	}
	if spec.Trace {
		startup.Enable()
		startup.Begin("init", entered)
		startup.Add("init", "spec received")
	}
	var idfds, taskfds []int
	for _, m := range spec.Mounts {
		if m.preCloned() && len(fds) > 0 {
			idfds, fds = append(idfds, fds[0]), fds[1:]
		}
	}
	taskfds = fds
	signals := make(chan execSignals, 1)
	if !spec.Persistent {
		go func() { signals <- catchSignals() }()
	}
	ready, err := setup(&spec, idfds, taskfds)
	if err != nil {
		var le *layerErr
		m := initMsg{Error: err.Error()}
		if errors.As(err, &le) {
			m.Layer = string(le.layer)
			m.Error = le.err.Error()
		}
		send(ctl, m)
		os.Exit(1)
	}
	ready.Ready = true
	startup.Add("init", "every layer applied")
	ready.Trace = startup.Take()
	if spec.serves() {
		go socketFactory(socketsFD)
	}
	if len(ready.fds) > 0 {
		// The proxy's and the consent channel's listeners go to the
		// supervisor, which serves them.
		b, _ := json.Marshal(ready)
		if err := unix.Sendmsg(ctl, b, unix.UnixRights(ready.fds...), nil, 0); err != nil {
			os.Exit(1)
		}
		for _, fd := range ready.fds {
			unix.Close(fd)
		}
	} else {
		send(ctl, ready)
	}
	if spec.Persistent {
		servePersistent(ctl, buf)
	}
	serve(ctl, buf, &spec, signals)
}

// execSignals is the signal handling of a one-shot sandbox's init: the
// signals it forwards to the workload (sigs) and SIGCHLD (chld).
type execSignals struct {
	sigs, chld chan os.Signal
	err        error
}

// catchSignals sets up execSignals: run beside the layers' setup (on
// another thread; dispositions are the process's), as it is most of
// init's part of an exec's start. A signal that comes before the
// workload waits in sigs for it.
func catchSignals() execSignals {
	sg := execSignals{sigs: make(chan os.Signal, 16), chld: make(chan os.Signal, 1)}
	signal.Notify(sg.sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2, unix.SIGWINCH, unix.SIGCONT)
	signal.Notify(sg.chld, unix.SIGCHLD)
	// Signals that would make the Go runtime crash init when they come
	// from kill(2) (the workload shares init's uid): caught and dropped.
	// Real faults still crash, as the runtime handles them synchronously.
	dropSignals()
	sg.err = defaultFaultSignals() // as servePersistent: a workload's SI_QUEUE fault signal must not crash init
	startup.Add("init", "signal handling set up (in the background)")
	return sg
}

// decodeSpec reads the supervisor's spec, refusing a field this init does
// not know: an embedded init older than the supervisor's code (built
// before a change, never regenerated) fails closed rather than ignore
// what it was asked to apply.
func decodeSpec(b []byte) (InitSpec, error) {
	var spec InitSpec
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		return spec, fmt.Errorf("%w (an init older than this corral? go generate ./provider/linux builds the current one)", err)
	}
	return spec, nil
}

func send(fd int, m initMsg) {
	b, _ := json.Marshal(m)
	_ = unix.Sendmsg(fd, b, nil, nil, 0)
}

// apply runs one layer's step, honouring its requirement and the testing
// fault injection. An optional layer that fails is skipped and reported.
func apply(spec *InitSpec, l policy.Layer, skipped *[]string, f func() error) error {
	var err error
	if spec.FaultLayer == string(l) {
		err = fmt.Errorf("fault injected (CORRAL_FAULT_LAYER=%s)", l)
	} else {
		err = f()
	}
	if err == nil {
		return nil
	}
	if spec.Layers[l] == policy.Optional {
		*skipped = append(*skipped, fmt.Sprintf("%s: %v", l, err))
		return nil
	}
	return &layerErr{l, err}
}

func rightsOf(oob []byte) []int {
	var fds []int
	if cmsgs, err := unix.ParseSocketControlMessage(oob); err == nil {
		for _, c := range cmsgs {
			if r, err := unix.ParseUnixRights(&c); err == nil {
				fds = append(fds, r...)
			}
		}
	}
	return fds
}

// setup applies every layer, in order, on the locked main thread. idfds are
// the supervisor's idmapped clones; taskfds are open cgroup v1 "tasks"
// files to join.
func setup(spec *InitSpec, idfds, taskfds []int) (initMsg, error) {
	var m initMsg
	if len(taskfds) > 0 {
		if err := apply(spec, policy.LayerCgroups, &m.Skipped, func() error { return joinCgroup(taskfds) }); err != nil {
			return m, err
		}
		startup.Add("init", "cgroup v1 joined")
	}
	if err := apply(spec, policy.LayerNamespaces, &m.Skipped, func() error {
		if spec.Hostname != "" {
			if err := unix.Sethostname([]byte(spec.Hostname)); err != nil {
				return fmt.Errorf("sethostname: %w", err)
			}
		}
		// With network none not even loopback is brought up unless the
		// workload may serve on it: nothing else inside needs it (Landlock
		// refuses TCP), and it costs ~0.6 ms.
		// With network proxy it carries the one way out.
		if spec.ProxyPort == 0 && spec.serves() && spec.NewNet {
			if err := loopbackUp(); err != nil {
				return err
			}
		}
		if spec.ProxyPort != 0 {
			fd, err := proxyListener(spec.ProxyPort, "proxy")
			if err != nil {
				return err
			}
			m.fds = append(m.fds, fd)
		}
		if spec.ConsentPort != 0 {
			fd, err := proxyListener(spec.ConsentPort, "consent")
			if err != nil {
				return err
			}
			m.fds = append(m.fds, fd)
		}
		return nil
	}); err != nil {
		return m, err
	}
	startup.Add("init", "namespaces: hostname, loopback, listeners")
	if err := apply(spec, policy.LayerMounts, &m.Skipped, func() error {
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return fmt.Errorf("make / private: %w", err)
		}
		t, err := buildTree("/tmp", spec.Mounts, spec.UID, spec.GID, idfds)
		if err != nil {
			return err
		}
		m.Trust, m.Store = t.trusted, t.stored
		if err := t.pivot(); err != nil {
			return err
		}
		return remountRO("/")
	}); err != nil {
		return m, err
	}
	startup.Add("init", "mount tree built, root pivoted")
	if err := setRlimits(spec); err != nil {
		return m, &layerErr{policy.LayerCgroups, err}
	}
	if spec.Landlock.Enabled {
		if err := apply(spec, policy.LayerLandlock, &m.Skipped, func() error {
			desc, err := landlock.Apply(spec.Landlock)
			m.Landlock = desc
			return err
		}); err != nil {
			return m, err
		}
		startup.Add("init", "landlock applied")
	}
	// no_new_privs on every thread whatever happens to seccomp: nothing
	// inside may gain privileges through exec.
	if err := allThreadsPrctl(unix.PR_SET_NO_NEW_PRIVS, 1); err != nil {
		return m, &layerErr{policy.LayerNamespaces, fmt.Errorf("no_new_privs: %w", err)}
	}
	if err := dropCapabilities(); err != nil {
		return m, &layerErr{policy.LayerNamespaces, fmt.Errorf("drop capabilities: %w", err)}
	}
	if spec.Seccomp && !(testHooks && spec.DropLayer == string(policy.LayerSeccomp)) {
		install := func() error {
			return seccomp.InstallWith(seccomp.Options{AllowOpenat2: spec.SeccompOpenat2, DenyUnixSockets: spec.SeccompDenyUnix})
		}
		if err := apply(spec, policy.LayerSeccomp, &m.Skipped, install); err != nil {
			return m, err
		}
		startup.Add("init", "capabilities dropped, seccomp installed")
	}
	// Not dumpable: the workload (same uid) cannot read init's memory,
	// environ or fds through /proc/1.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return m, &layerErr{policy.LayerNamespaces, fmt.Errorf("PR_SET_DUMPABLE: %w", err)}
	}
	return m, nil
}

// proxyListener brings loopback up and listens on 127.0.0.1:port in the
// sandbox's network namespace, for what (the egress proxy, the consent
// channel). The fd is handed to the supervisor: a socket keeps the
// namespace it was created in, so the supervisor on the host side
// accepts the sandbox's connections without any veth or privilege.
func proxyListener(port int, what string) (int, error) {
	if err := loopbackUp(); err != nil {
		return -1, err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("%s listener: %w", what, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("%s listener: bind 127.0.0.1:%d: %w", what, port, err)
	}
	if err := unix.Listen(fd, 1024); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("%s listener: %w", what, err)
	}
	return fd, nil
}

// socketFactory answers each byte the supervisor sends on fd with a new,
// unconnected TCP socket of the sandbox's network namespace. The
// supervisor connects it itself (to a served port on the sandbox's
// loopback): Landlock checks connect(2) against the caller's domain, and
// the socket keeps the namespace it was made in.
func socketFactory(fd int) {
	b := make([]byte, 1)
	for {
		n, _, _, _, err := unix.Recvmsg(fd, b, nil, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return
		}
		s, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			_ = unix.Sendmsg(fd, []byte{1}, nil, nil, 0)
			continue
		}
		_ = unix.Sendmsg(fd, []byte{0}, unix.UnixRights(s), nil, 0)
		unix.Close(s)
	}
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	return nil
}

func setRlimits(spec *InitSpec) error {
	set := func(res int, v uint64) error {
		if v == 0 {
			return nil
		}
		if err := unix.Setrlimit(res, &unix.Rlimit{Cur: v, Max: v}); err != nil {
			return fmt.Errorf("setrlimit %d=%d: %w", res, v, err)
		}
		return nil
	}
	if err := unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{}); err != nil {
		return fmt.Errorf("core dumps off: %w", err)
	}
	if err := set(unix.RLIMIT_NOFILE, spec.Nofile); err != nil {
		return err
	}
	return set(unix.RLIMIT_NPROC, spec.Nproc)
}

// allThreadsPrctl runs prctl on every thread: credentials and no_new_privs
// are per thread, and the workload is forked from any of Go's threads.
func allThreadsPrctl(option int, arg2 uintptr) error {
	_, _, e := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, uintptr(option), arg2, 0)
	return allThreadsErr(e)
}

// allThreadsErr explains ENOTSUP: the Go runtime refuses AllThreadsSyscall
// when cgo is linked, so corral must be built with CGO_ENABLED=0.
func allThreadsErr(e syscall.Errno) error {
	switch e {
	case 0:
		return nil
	case syscall.ENOTSUP:
		return errors.New("this corral binary was built with cgo; build it with CGO_ENABLED=0")
	}
	return e
}

// joinCgroup moves the calling (main) thread into the cgroup v1
// hierarchies whose "tasks" files the supervisor opened: writing "0" moves
// only the writer, which the kernel does without the global threadgroup
// lock that makes moving a whole process cost a full RCU grace period
// (kernel/cgroup/cgroup.c, cgroup_procs_write_start). The workload is forked
// from this thread and inherits the cgroup; the permission check uses the
// opener's (root's) credentials (cgroup-v1 __cgroup1_procs_write).
func joinCgroup(taskfds []int) error {
	for _, fd := range taskfds {
		if _, err := unix.Write(fd, []byte("0")); err != nil {
			return fmt.Errorf("join cgroup: %w", err)
		}
		unix.Close(fd)
	}
	// A cgroup namespace rooted here, so the workload does not see the
	// host's cgroup paths (the one from clone was rooted where init
	// started). Like CLONE_NEWUTS, it is per thread and inherited on fork.
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return fmt.Errorf("cgroup namespace: %w", err)
	}
	return nil
}

// dropCapabilities empties the bounding set of the main thread (the one that
// forks the workload: the bounding set only limits what an exec can gain)
// and clears the ambient, effective, permitted and inheritable sets on
// every thread.
func dropCapabilities() error {
	last := 40
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		fmt.Sscanf(strings.TrimSpace(string(b)), "%d", &last)
	}
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("bounding set drop %d: %w", c, err)
		}
	}
	if _, _, e := syscall.AllThreadsSyscall6(syscall.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0, 0); e != 0 {
		return fmt.Errorf("ambient clear: %w", allThreadsErr(e))
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("capset: %w", allThreadsErr(e))
	}
	return nil
}

// serve runs exec requests until the workload exits (one-shot) or the
// supervisor closes the control socket.
func serve(ctl int, buf []byte, spec *InitSpec, signals <-chan execSignals) {
	sg := <-signals
	if sg.err != nil {
		send(ctl, initMsg{Error: "init: fault signals: " + sg.err.Error(), Exited: true, Code: 127})
		os.Exit(1)
	}
	sigs, chld := sg.sigs, sg.chld
	oob := make([]byte, unix.CmsgSpace(253*4))
	n, oobn, _, _, err := unix.Recvmsg(ctl, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil || n == 0 {
		os.Exit(1) // supervisor gone: dying as PID 1 kills the namespace
	}
	var req execRequest
	if err := json.Unmarshal(buf[:n], &req); err != nil {
		send(ctl, initMsg{Error: "init: bad exec request: " + err.Error(), Exited: true, Code: 127})
		os.Exit(1)
	}
	startup.Add("init", "exec request received")
	fds := rightsOf(oob[:oobn])
	path, err := lookPath(req.Args[0], req.Env)
	if err != nil {
		send(ctl, initMsg{Error: err.Error(), Exited: true, Code: 127})
		os.Exit(0)
	}
	startup.Add("init", "command found on PATH")
	if req.TTY {
		master, slave, err := openPTY(req.Rows, req.Cols)
		if err != nil {
			send(ctl, initMsg{Error: "pty: " + err.Error(), Exited: true, Code: 126})
			os.Exit(0)
		}
		b, _ := json.Marshal(initMsg{TTY: true})
		if err := unix.Sendmsg(ctl, b, unix.UnixRights(master), nil, 0); err != nil {
			os.Exit(1)
		}
		unix.Close(master)
		fds = append([]int{slave, slave, slave}, fds...)
	}
	pidfd := -1
	pid, err := syscall.ForkExec(path, req.Args, &syscall.ProcAttr{
		Dir:   req.Dir,
		Env:   req.Env,
		Files: uintptrs(fds),
		Sys:   &syscall.SysProcAttr{Setsid: true, Setctty: req.TTY, Ctty: 0, PidFD: &pidfd},
	})
	for _, fd := range fds {
		unix.Close(fd)
	}
	if err != nil {
		code := 126
		if errors.Is(err, unix.ENOENT) {
			code = 127
		}
		send(ctl, initMsg{Error: fmt.Sprintf("exec %s: %v", req.Args[0], err), Exited: true, Code: code})
		os.Exit(0)
	}
	startup.Add("init", "workload forked and exec'd")
	send(ctl, initMsg{PID: pid})
	if req.Ack {
		// The supervisor looks up the workload's host pid before it can be
		// reaped (a reaped child is gone from /proc/1/task/*/children).
		b := make([]byte, 64)
		if n, _, _, _, err := unix.Recvmsg(ctl, b, nil, 0); err != nil || n == 0 {
			os.Exit(1)
		}
	}
	// Watch the supervisor: EOF on the control socket means it died.
	go func() {
		b := make([]byte, 64)
		for {
			n, _, _, _, err := unix.Recvmsg(ctl, b, nil, 0)
			if err != unix.EINTR && (err != nil || n == 0) {
				os.Exit(1)
			}
		}
	}()
	// Signals are forwarded and children reaped on the locked main thread:
	// with Landlock ABI < 8 each thread was restricted on its own and has
	// its own domain, and signal scoping (ABI 6) only lets a thread signal
	// processes of its domain — the workload is in the main thread's. The
	// main thread sleeps in poll(2) on the workload's pidfd (readable when
	// it exits) and an eventfd that the signal goroutine writes.
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		send(ctl, initMsg{Error: "init: eventfd: " + err.Error(), Exited: true, Code: 127})
		os.Exit(1)
	}
	var mu sync.Mutex
	var pending []syscall.Signal
	go func() {
		one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
		for {
			select {
			case s := <-sigs:
				mu.Lock()
				pending = append(pending, s.(syscall.Signal))
				mu.Unlock()
			case <-chld:
			}
			_, _ = unix.Write(wake, one)
		}
	}()
	buf8 := make([]byte, 8)
	for {
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}, {Fd: int32(wake), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
			send(ctl, initMsg{Error: "init: poll: " + err.Error(), Exited: true, Code: 127})
			os.Exit(1)
		}
		if fds[1].Revents&unix.POLLIN != 0 {
			_, _ = unix.Read(wake, buf8)
			mu.Lock()
			for _, sig := range pending {
				signalGroup(pid, sig)
			}
			pending = pending[:0]
			mu.Unlock()
		}
		reap(func(wpid int, ws unix.WaitStatus) { // the workload, and any orphan re-parented to us
			if wpid == pid {
				exitWith(ctl, ws)
			}
		})
	}
}

// dropSignals catches and drops the signals that would make the Go
// runtime crash init when they come from kill(2) (the workload shares
// init's uid), and extra. Real faults still crash, as the runtime
// handles them synchronously. A caught signal is reset to its default in
// the processes init starts (execve(2)); an ignored one would stay
// ignored there.
func dropSignals(extra ...os.Signal) {
	drop := make(chan os.Signal, 4)
	signal.Notify(drop, append(extra, unix.SIGSEGV, unix.SIGBUS, unix.SIGABRT, unix.SIGFPE, unix.SIGILL, unix.SIGTRAP, unix.SIGSYS, unix.SIGPIPE, unix.SIGSTKFLT, unix.SIGXCPU, unix.SIGXFSZ, unix.SIGPROF, unix.SIGVTALRM, unix.SIGALRM, unix.SIGIO, unix.SIGPWR, unix.SIGTTIN, unix.SIGTTOU, unix.SIGTSTP)...)
	go func() {
		for range drop {
		}
	}()
}

// reap reaps every child that has ended, calling f for each.
func reap(f func(pid int, ws unix.WaitStatus)) {
	for {
		var ws unix.WaitStatus
		wpid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || wpid <= 0 {
			return
		}
		f(wpid, ws)
	}
}

// signalGroup sends sig to process group pid, or to pid alone if that
// fails (the process left its group).
func signalGroup(pid int, sig syscall.Signal) {
	if unix.Kill(-pid, sig) != nil {
		_ = unix.Kill(pid, sig)
	}
}

// exitWith reports the workload's status and exits. Exiting as PID 1 makes
// the kernel kill every remaining process of the namespace: nothing the
// workload started outlives it.
func exitWith(ctl int, ws unix.WaitStatus) {
	startup.Add("init", "workload reaped")
	m := exitMsg(ws)
	m.Trace = startup.Take()
	send(ctl, m)
	os.Exit(0)
}

// openPTY creates a pseudo-terminal in the sandbox's own devpts instance,
// so the workload's terminal is Corral's and resolves to a /dev/pts path
// inside, of rows × cols when given. TIOCGPTPEER (Linux 4.13) opens the
// peer without a path lookup.
func openPTY(rows, cols uint16) (master, slave int, err error) {
	master, err = unix.Open("/dev/pts/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, -1, err
	}
	if rows > 0 && cols > 0 {
		_ = unix.IoctlSetWinsize(master, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}
	if err := unix.IoctlSetPointerInt(master, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(master)
		return -1, -1, fmt.Errorf("unlockpt: %w", err)
	}
	s, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(master), unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if e != 0 {
		unix.Close(master)
		return -1, -1, fmt.Errorf("TIOCGPTPEER: %w", e)
	}
	return master, int(s), nil
}

func uintptrs(fds []int) []uintptr {
	out := make([]uintptr, len(fds))
	for i, fd := range fds {
		out[i] = uintptr(fd)
	}
	return out
}

// lookPath finds file in the PATH of env, like execvp(3).
func lookPath(file string, env []string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, file)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && unix.Access(p, unix.X_OK) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec %s: command not found in the sandbox (PATH=%s)", file, path)
}

//go:build linux

package probe

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func init() {
	probes["spawn"] = probeSpawn
	probes["daemonize"] = probeDaemonize
	probes["status"] = probeStatus
	probes["status-chain"] = probeStatusChain
	probes["tiocsti"] = probeTIOCSTI
	probes["ptrace"] = probePtrace
	probes["syscalls"] = probeSyscalls
	probes["procfs"] = probeProcfs
	probes["fds"] = probeFds
	probes["forkbomb"] = probeForkbomb
	probes["fdflood"] = probeFdflood
}

func errnoName(e syscall.Errno) string {
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return fmt.Sprintf("errno%d", uintptr(e))
}

func unlink(path string) error { return unix.Unlink(path) }

func cpuTime() string {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return ""
	}
	return fmt.Sprintf(", cpu user %.2fs sys %.2fs", time.Duration(ru.Utime.Nano()).Seconds(), time.Duration(ru.Stime.Nano()).Seconds())
}

// selfExe is the path that re-executes this binary.
func selfExe() string {
	if _, err := os.Stat("/proc/self/exe"); err == nil {
		return "/proc/self/exe"
	}
	if p, err := os.Executable(); err == nil {
		return p
	}
	return os.Args[0]
}

// probeCmd is `corral __probe ARGS...` as a child of this process, with
// stdio on /dev/null.
func probeCmd(args ...string) *exec.Cmd {
	c := exec.Command(selfExe(), append([]string{Arg}, args...)...)
	c.Args[0] = os.Args[0]
	return c
}

// runProbe runs a child probe and decodes its Report.
func runProbe(args ...string) (Report, error) {
	var rep Report
	out, err := probeCmd(args...).Output()
	if err != nil {
		return rep, err
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return rep, fmt.Errorf("child report: %v", err)
	}
	return rep, nil
}

// spawnWays are the ways `spawn` starts descendants, used in turn.
var spawnWays = []string{"background", "setsid", "daemon", "nosignals", "setpgid"}

// probeSpawn: spawn MARKER N — starts N descendants that each run
// `corral __probe sleep 300 MARKER`, cycling through spawnWays:
// background child, setsid'd child, double-forked daemon whose parent has
// exited, child ignoring SIGHUP/SIGINT/SIGTERM, child in its own process
// group. One Result per descendant ("spawn WAY", Detail "pid N"), OK when
// it was seen running with MARKER on its command line; then it exits
// without waiting for them.
func probeSpawn(args []string) ([]Result, error) {
	if len(args) != 2 || args[0] == "" {
		return nil, usagef("usage: spawn MARKER N")
	}
	marker := args[0]
	n, err := strconv.Atoi(args[1])
	if err != nil || n < 1 || n > 1000 {
		return nil, usagef("bad N %q (1..1000)", args[1])
	}
	type kid struct {
		way string
		pid int
		err error
	}
	kids := make([]kid, n)
	for i := range kids {
		way := spawnWays[i%len(spawnWays)]
		pid, err := spawnOne(way, marker)
		kids[i] = kid{way, pid, err}
	}
	var rs []Result
	var pids []int
	deadline := time.Now().Add(3 * time.Second)
	for _, k := range kids {
		what := "spawn " + k.way
		if k.err != nil {
			rs = append(rs, result(what, k.err))
			continue
		}
		pids = append(pids, k.pid)
		seen := false
		for {
			if spawnReady(k.pid, k.way, marker) {
				seen = true
				break
			}
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		r := Result{What: what, OK: seen, Detail: fmt.Sprintf("pid %d", k.pid)}
		if !seen {
			r.Detail += " (not seen running with the marker)"
		}
		rs = append(rs, r)
	}
	rs = append(rs, Result{What: "spawned pids", OK: len(pids) == n, Detail: joinInts(pids)})
	return rs, nil
}

// spawnReady reports whether pid runs with marker on its command line and,
// for "nosignals", has SIGTERM ignored already.
func spawnReady(pid int, way, marker string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(b), marker) {
		return false
	}
	if way != "nosignals" {
		return true
	}
	b, err = os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "SigIgn:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && m&(1<<(uint(syscall.SIGTERM)-1)) != 0
		}
	}
	return false
}

func spawnOne(way, marker string) (int, error) {
	var c *exec.Cmd
	switch way {
	case "daemon":
		rep, err := runProbe("daemonize", marker)
		if err != nil {
			return 0, err
		}
		if len(rep.Results) == 0 || !rep.Results[0].OK {
			return 0, fmt.Errorf("daemonize: %+v", rep.Results)
		}
		var pid int
		if _, err := fmt.Sscanf(rep.Results[0].Detail, "pid %d", &pid); err != nil {
			return 0, fmt.Errorf("daemonize: %q", rep.Results[0].Detail)
		}
		return pid, nil
	case "nosignals":
		c = probeCmd("sleep", "300", marker, "ignore")
	default:
		c = probeCmd("sleep", "300", marker)
	}
	switch way {
	case "setsid":
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	case "setpgid":
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	if err := c.Start(); err != nil {
		return 0, err
	}
	pid := c.Process.Pid
	go c.Wait() // reap it should it exit while we still run
	return pid, nil
}

// probeDaemonize: daemonize MARKER — the middle process of the double fork:
// starts a setsid'd `sleep 300 MARKER`, reports its pid and exits.
func probeDaemonize(args []string) ([]Result, error) {
	if len(args) != 1 {
		return nil, usagef("usage: daemonize MARKER")
	}
	c := probeCmd("sleep", "300", args[0])
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.Start(); err != nil {
		return []Result{result("daemonize", err)}, nil
	}
	return []Result{{What: "daemonize", OK: true, Detail: fmt.Sprintf("pid %d", c.Process.Pid)}}, nil
}

// statusFields are the /proc/self/status lines `status` reports.
var statusFields = []string{"Seccomp", "NoNewPrivs", "CapEff", "CapBnd", "Uid", "Groups"}

func statusResults(label string) []Result {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return []Result{result(label+" /proc/self/status", err)}
	}
	vals := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if ok {
			vals[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	var rs []Result
	for _, f := range statusFields {
		v, ok := vals[f]
		r := Result{What: label + " " + f, OK: ok, Detail: v}
		if !ok {
			r.Detail = "missing from /proc/self/status"
		}
		rs = append(rs, r)
	}
	return rs
}

// probeStatus: status — Seccomp, NoNewPrivs, CapEff, CapBnd, Uid and Groups
// of this process ("self FIELD") and of a grandchild it starts by
// re-executing itself twice ("grandchild FIELD").
func probeStatus(args []string) ([]Result, error) {
	if len(args) != 0 {
		return nil, usagef("usage: status")
	}
	rs := statusResults("self")
	rep, err := runProbe("status-chain", "1", "grandchild")
	if err != nil {
		return append(rs, result("grandchild", err)), nil
	}
	return append(rs, rep.Results...), nil
}

// probeStatusChain: status-chain DEPTH LABEL — re-executes itself DEPTH
// more times, and the last one reports statusResults(LABEL).
func probeStatusChain(args []string) ([]Result, error) {
	if len(args) != 2 {
		return nil, usagef("usage: status-chain DEPTH LABEL")
	}
	d, err := strconv.Atoi(args[0])
	if err != nil || d < 0 || d > 8 {
		return nil, usagef("bad DEPTH %q", args[0])
	}
	if d == 0 {
		return statusResults(args[1]), nil
	}
	rep, err := runProbe("status-chain", strconv.Itoa(d-1), args[1])
	if err != nil {
		return []Result{result(args[1], err)}, nil
	}
	return rep.Results, nil
}

// probeTIOCSTI: tiocsti TEXT — ioctl(0, TIOCSTI) for each byte of TEXT.
// OK only when every byte was injected; Errno is the first failure.
func probeTIOCSTI(args []string) ([]Result, error) {
	if len(args) != 1 {
		return nil, usagef("usage: tiocsti TEXT")
	}
	text := []byte(args[0])
	var first syscall.Errno
	n := 0
	for _, b := range text {
		c := b
		_, _, e := unix.Syscall(unix.SYS_IOCTL, 0, unix.TIOCSTI, uintptr(unsafe.Pointer(&c)))
		if e != 0 {
			if first == 0 {
				first = e
			}
			continue
		}
		n++
	}
	_, terr := unix.IoctlGetTermios(0, unix.TCGETS)
	tty := "fd 0 is not a terminal"
	if terr == nil {
		tty = "fd 0 is a terminal"
	}
	r := errnoResult("tiocsti fd 0", first)
	r.OK = first == 0 && n == len(text)
	r.Detail = fmt.Sprintf("%d of %d bytes injected; %s", n, len(text), tty)
	return []Result{r}, nil
}

// probePtrace: ptrace PID...|sibling — PTRACE_ATTACH, PTRACE_SEIZE (each
// detached again on success) and process_vm_readv of 16 bytes for each
// pid. "sibling" starts a sleeping child and targets it.
func probePtrace(args []string) ([]Result, error) {
	if len(args) == 0 {
		return nil, usagef("usage: ptrace PID...|sibling")
	}
	var rs []Result
	for _, a := range args {
		if a == "sibling" {
			c := probeCmd("sleep", "30", "ptrace-sibling")
			if err := c.Start(); err != nil {
				rs = append(rs, result("start sibling", err))
				continue
			}
			time.Sleep(100 * time.Millisecond)
			rs = append(rs, ptraceOne(c.Process.Pid, "sibling ")...)
			c.Process.Kill()
			c.Wait()
			continue
		}
		pid, err := strconv.Atoi(a)
		if err != nil || pid < 1 {
			return nil, usagef("bad PID %q", a)
		}
		rs = append(rs, ptraceOne(pid, "")...)
	}
	return rs, nil
}

const ptraceInterrupt = 0x4207 // PTRACE_INTERRUPT

func ptraceOne(pid int, label string) []Result {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	p := uintptr(pid)
	id := fmt.Sprintf("%s%d", label, pid)
	var rs []Result

	_, _, e := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_ATTACH, p, 0, 0, 0, 0)
	rs = append(rs, errnoResult("ptrace attach "+id, e))
	if e == 0 {
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, unix.WALL, nil)
		_ = unix.PtraceDetach(pid)
	}
	_, _, e = unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, p, 0, 0, 0, 0)
	rs = append(rs, errnoResult("ptrace seize "+id, e))
	if e == 0 {
		_, _, _ = unix.RawSyscall6(unix.SYS_PTRACE, ptraceInterrupt, p, 0, 0, 0, 0)
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, unix.WALL, nil)
		_ = unix.PtraceDetach(pid)
	}

	addr, where := remoteAddr(pid)
	buf := make([]byte, 16)
	local := []unix.Iovec{{Base: &buf[0], Len: uint64(len(buf))}}
	remote := []unix.RemoteIovec{{Base: addr, Len: len(buf)}}
	n, err := unix.ProcessVMReadv(pid, local, remote, 0)
	r := result("process_vm_readv "+id, err)
	if err == nil {
		r.OK = n > 0
		r.Detail = fmt.Sprintf("%d bytes at %#x (%s): %s", n, addr, where, hex.EncodeToString(buf[:n]))
	} else {
		r.Detail = fmt.Sprintf("address %#x (%s)", addr, where)
	}
	return append(rs, r)
}

// remoteAddr picks a mapped address of pid from /proc/PID/maps (the stack
// when listed), else 0x1000.
func remoteAddr(pid int) (uintptr, string) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return 0x1000, "maps unreadable: " + errnoOf(err)
	}
	var first uintptr
	for _, l := range strings.Split(string(b), "\n") {
		start, _, ok := strings.Cut(l, "-")
		if !ok {
			continue
		}
		v, err := strconv.ParseUint(start, 16, 64)
		if err != nil {
			continue
		}
		if strings.HasSuffix(l, "[stack]") {
			return uintptr(v), "stack"
		}
		if first == 0 {
			first = uintptr(v)
		}
	}
	if first != 0 {
		return first, "first mapping"
	}
	return 0x1000, "no mappings listed"
}

// mountTarget is where `syscalls` tries to mount a tmpfs; empty means a
// fresh directory of its own, never over something in use.
var mountTarget = ""

// childWith re-executes `__probe exit 0` with the given clone/unshare flags.
func childWith(attr *syscall.SysProcAttr) error {
	c := probeCmd("exit", "0")
	c.SysProcAttr = attr
	return c.Run()
}

func socketResult(what string, family, typ, proto int) Result {
	fd, err := unix.Socket(family, typ, proto)
	if err == nil {
		unix.Close(fd)
	}
	return result(what, err)
}

func closeOnSuccess(r uintptr, e syscall.Errno) {
	if e == 0 {
		unix.Close(int(r))
	}
}

// probeSyscalls: syscalls — one Result per alternate kernel path; whatever
// succeeds is undone at once.
func probeSyscalls(args []string) ([]Result, error) {
	if len(args) != 0 {
		return nil, usagef("usage: syscalls")
	}
	var rs []Result

	var params [120]byte // struct io_uring_params
	r, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 4, uintptr(unsafe.Pointer(&params[0])), 0)
	closeOnSuccess(r, e)
	rs = append(rs, errnoResult("io_uring_setup", e))

	rs = append(rs,
		socketResult("socket AF_NETLINK NETLINK_AUDIT", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT),
		socketResult("socket AF_NETLINK NETLINK_KOBJECT_UEVENT", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_KOBJECT_UEVENT),
		socketResult("socket AF_PACKET", unix.AF_PACKET, unix.SOCK_RAW, 0x0300), // htons(ETH_P_ALL)
		socketResult("socket AF_VSOCK", unix.AF_VSOCK, unix.SOCK_STREAM, 0),
		socketResult("socket AF_ALG", unix.AF_ALG, unix.SOCK_SEQPACKET, 0),
		socketResult("socket AF_BLUETOOTH", unix.AF_BLUETOOTH, unix.SOCK_RAW, 1), // BTPROTO_HCI
	)

	// A Go process is multithreaded, where unshare(CLONE_NEWUSER) always
	// fails with EINVAL; the forked child is single-threaded.
	rs = append(rs,
		result("unshare CLONE_NEWUSER", childWith(&syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWUSER})),
		result("unshare CLONE_NEWNS", childWith(&syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS})),
		result("clone CLONE_NEWUSER", childWith(&syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER})),
	)

	_, _, e = unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(0xfffffffd) /* KEY_SPEC_SESSION_KEYRING */, 1)
	rs = append(rs, errnoResult("keyctl KEYCTL_GET_KEYRING_ID", e))

	var attr [128]byte
	r, _, e = unix.Syscall(unix.SYS_BPF, 5 /* BPF_PROG_LOAD */, uintptr(unsafe.Pointer(&attr[0])), uintptr(len(attr)))
	closeOnSuccess(r, e)
	rs = append(rs, errnoResult("bpf BPF_PROG_LOAD", e))

	target := mountTarget
	if target == "" {
		if d, err := os.MkdirTemp("", "probe-mnt-"); err == nil {
			target = d
			defer os.Remove(d)
		} else {
			target = "/tmp"
		}
	}
	err := unix.Mount("none", target, "tmpfs", 0, "")
	mr := result("mount tmpfs", err)
	if err == nil {
		mr.Detail = "mounted on " + target + "; unmount: " + resultText(unix.Unmount(target, unix.MNT_DETACH))
	}
	rs = append(rs, mr)

	var pattr unix.PerfEventAttr
	pattr.Type = unix.PERF_TYPE_SOFTWARE
	pattr.Config = unix.PERF_COUNT_SW_CPU_CLOCK
	pattr.Size = uint32(unsafe.Sizeof(pattr))
	pfd, err := unix.PerfEventOpen(&pattr, 0, -1, -1, 0)
	if err == nil {
		unix.Close(pfd)
	}
	rs = append(rs, result("perf_event_open", err))

	r, _, e = unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC, 0, 0)
	closeOnSuccess(r, e)
	rs = append(rs, errnoResult("userfaultfd", e))

	rs = append(rs, result("setns -1 0", unix.Setns(-1, 0)))

	fd, err := unix.OpenByHandleAt(unix.AT_FDCWD, unix.NewFileHandle(1, make([]byte, 8)), unix.O_RDONLY)
	if err == nil {
		unix.Close(fd)
	}
	rs = append(rs, result("open_by_handle_at", err))
	return rs, nil
}

func resultText(err error) string {
	if err == nil {
		return "ok"
	}
	if n := errnoOf(err); n != "" {
		return n
	}
	return err.Error()
}

// coreBytes is how much of /proc/kcore `procfs` tries to read.
const coreBytes = 16

// probeProcfs: procfs — the pids in /proc; readlink /proc/1/root and
// /proc/1/cwd; read /proc/1/cmdline, /proc/1/environ,
// /proc/1/root/etc/shadow and the first bytes of /proc/kcore (hex); write
// "|/bin/false" to /proc/sys/kernel/core_pattern (the old value is put
// back should it succeed) and "h" to /proc/sysrq-trigger.
func probeProcfs(args []string) ([]Result, error) {
	if len(args) != 0 {
		return nil, usagef("usage: procfs")
	}
	pr, _ := pidsResult()
	rs := []Result{pr}
	for _, l := range []string{"/proc/1/root", "/proc/1/cwd"} {
		t, err := os.Readlink(l)
		r := result("readlink "+l, err)
		r.Detail = t
		rs = append(rs, r)
	}
	for _, p := range []string{"/proc/1/cmdline", "/proc/1/environ"} {
		s, err := readBounded(p)
		r := result("read "+p, err)
		r.Detail = nulToSpace(s)
		rs = append(rs, r)
	}
	s, err := readBounded("/proc/1/root/etc/shadow")
	r := result("read /proc/1/root/etc/shadow", err)
	r.Detail = s
	rs = append(rs, r)

	f, err := os.Open("/proc/kcore")
	if err == nil {
		buf := make([]byte, coreBytes)
		var n int
		n, err = io.ReadFull(f, buf)
		f.Close()
		if n > 0 {
			err = nil
		}
		r = result("read /proc/kcore", err)
		r.Detail = hex.EncodeToString(buf[:n])
	} else {
		r = result("read /proc/kcore", err)
	}
	rs = append(rs, r)

	const cp = "/proc/sys/kernel/core_pattern"
	old, _ := os.ReadFile(cp)
	err = writeOnce(cp, "|/bin/false")
	r = result("write "+cp, err)
	if err == nil {
		r.Detail = "written; restore: " + resultText(writeOnce(cp, strings.TrimRight(string(old), "\n")))
	}
	rs = append(rs, r)
	rs = append(rs, result("write /proc/sysrq-trigger", writeOnce("/proc/sysrq-trigger", "h")))
	return rs, nil
}

func writeOnce(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// probeFds: fds — the fds this process inherited through execve (Result
// "fds", Detail the numbers, e.g. "0 1 2"), the fds it opened itself with
// FD_CLOEXEC ("own fds": Go runtime files), and one Result "fd N" per fd
// with its readlink target. The fd used for the listing is left out.
func probeFds(args []string) ([]Result, error) {
	if len(args) != 0 {
		return nil, usagef("usage: fds")
	}
	// Raw syscalls: os.Open would add the runtime poller's fds.
	fd, err := unix.Open("/proc/self/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return []Result{result("fds", err)}, nil
	}
	var names []string
	buf := make([]byte, 8192)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil || n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
	unix.Close(fd)
	var nums []int
	for _, n := range names {
		v, err := strconv.Atoi(n)
		if err == nil && v != fd {
			nums = append(nums, v)
		}
	}
	sort.Ints(nums)
	// The Go runtime (and corral before Main) open files with O_CLOEXEC,
	// for example the cgroup CPU limit files behind GOMAXPROCS. An fd that
	// came through execve cannot carry FD_CLOEXEC, so those are listed
	// apart.
	var inherited, own []int
	for _, n := range nums {
		if fl, err := unix.FcntlInt(uintptr(n), unix.F_GETFD, 0); err == nil && fl&unix.FD_CLOEXEC != 0 {
			own = append(own, n)
		} else {
			inherited = append(inherited, n)
		}
	}
	rs := []Result{
		{What: "fds", OK: true, Detail: joinInts(inherited)},
		{What: "own fds", OK: true, Detail: joinInts(own)},
	}
	for _, n := range nums {
		t, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", n))
		r := result(fmt.Sprintf("fd %d", n), err)
		r.Detail = t
		rs = append(rs, r)
	}
	return rs, nil
}

// probeForkbomb: forkbomb N — starts N children running
// `__probe sleep 30 fb` (left running); reports how many started, the
// first errno and the pids (Detail, bounded). Progress goes to stderr.
func probeForkbomb(args []string) ([]Result, error) {
	if len(args) != 1 {
		return nil, usagef("usage: forkbomb N")
	}
	n, err := strconv.Atoi(args[0])
	if err != nil || n < 1 || n > 100000 {
		return nil, usagef("bad N %q", args[0])
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return []Result{result("open /dev/null", err)}, nil
	}
	defer null.Close()
	nf := null.Fd()
	attr := &syscall.ProcAttr{Files: []uintptr{nf, nf, nf}}
	argv := []string{os.Args[0], Arg, "sleep", "30", "fb"}
	exe := selfExe()
	ok, failed := 0, 0
	var first error
	var pids []int
	for i := 0; i < n; i++ {
		pid, err := syscall.ForkExec(exe, argv, attr)
		if err != nil {
			failed++
			if first == nil {
				first = err
				fmt.Fprintf(os.Stderr, "forkbomb: first failure after %d: %v\n", ok, err)
			}
			continue
		}
		pids = append(pids, pid)
		ok++
		if ok%64 == 0 {
			fmt.Fprintf(os.Stderr, "forkbomb: %d started\n", ok)
		}
	}
	r := result("forkbomb "+args[0], first)
	r.OK = ok == n
	r.Detail = fmt.Sprintf("%d of %d started, %d failed", ok, n, failed)
	if first != nil && r.Errno == "" {
		r.Detail += ": " + first.Error()
	}
	r.Detail += "; pids " + joinInts(pids)
	return []Result{r}, nil
}

// probeFdflood: fdflood — opens /dev/null until that fails (at most 2^20);
// reports the count and the errno. The fds are closed before the report.
func probeFdflood(args []string) ([]Result, error) {
	if len(args) != 0 {
		return nil, usagef("usage: fdflood")
	}
	var fds []int
	var last error
	for len(fds) < 1<<20 {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			last = err
			break
		}
		fds = append(fds, fd)
	}
	n := len(fds)
	for _, fd := range fds {
		unix.Close(fd)
	}
	r := result("fdflood", last)
	r.OK = last == nil
	r.Detail = fmt.Sprintf("%d opened", n)
	return []Result{r}, nil
}

// killSelf: kill SIGNAL — prints its Report, then sends SIGNAL (a name such
// as TERM / SIGKILL, or a number) to itself with the default disposition.
func killSelf(name string, stdout, stderr io.Writer) int {
	sig, ok := parseSignal(name)
	if !ok {
		fmt.Fprintf(stderr, "kill: bad signal %q\n", name)
		return 2
	}
	emit(stdout, "kill", []Result{{What: "kill self " + unix.SignalName(sig), OK: true, Detail: fmt.Sprintf("pid %d", os.Getpid())}})
	if f, ok := stdout.(*os.File); ok {
		f.Sync()
	}
	// A zeroed kernel struct sigaction is SIG_DFL with no flags and an
	// empty mask: the kernel, not the Go runtime, handles the signal.
	var dfl [32]byte
	unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&dfl[0])), 0, 8, 0, 0)
	_ = unix.Kill(os.Getpid(), sig)
	time.Sleep(2 * time.Second)
	return 0
}

func parseSignal(s string) (syscall.Signal, bool) {
	if n, err := strconv.Atoi(s); err == nil {
		return syscall.Signal(n), n > 0 && n < 65
	}
	s = strings.ToUpper(s)
	if !strings.HasPrefix(s, "SIG") {
		s = "SIG" + s
	}
	sig := unix.SignalNum(s)
	return sig, sig != 0
}

//go:build linux && (amd64 || arm64)

package seccomp

// These tests run the real filter in the kernel: the test binary re-executes
// itself (TestHelperProcess, selected by probeEnv), the child calls Install
// and then tries each operation with raw syscalls, reporting errnos as JSON.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	probeEnv    = "CORRAL_SECCOMP_PROBE"
	probeMarker = "CORRAL-SECCOMP-PROBE "
)

// probe is one operation tried in the child. want is the errno the filter
// must produce. distinct marks probes whose arguments make the kernel itself
// answer with something other than want (checked in the unfiltered control
// run as root), which proves the errno came from the filter. noControl
// marks probes that must not run unfiltered (they would act).
type probe struct {
	name      string
	want      syscall.Errno
	distinct  bool
	noControl bool
	call      func() syscall.Errno
}

func sc(trap uintptr, a ...uintptr) syscall.Errno {
	var args [6]uintptr
	copy(args[:], a)
	_, _, e := unix.Syscall6(trap, args[0], args[1], args[2], args[3], args[4], args[5])
	return e
}

// scFD is sc for calls that return a file descriptor, which it closes.
func scFD(trap uintptr, a ...uintptr) syscall.Errno {
	var args [6]uintptr
	copy(args[:], a)
	fd, _, e := unix.Syscall6(trap, args[0], args[1], args[2], args[3], args[4], args[5])
	if e == 0 {
		unix.Close(int(fd))
	}
	return e
}

func str(s string) uintptr {
	p, err := unix.BytePtrFromString(s)
	if err != nil {
		panic(err)
	}
	return uintptr(unsafe.Pointer(p))
}

// onThrowawayThread runs f on an OS thread that is discarded afterwards
// (the goroutine exits still locked), so a per-thread side effect such as
// unshare(CLONE_FILES) — or a namespace change, should the filter fail —
// never leaks into the rest of the child.
func onThrowawayThread(f func() syscall.Errno) syscall.Errno {
	ch := make(chan syscall.Errno)
	go func() {
		runtime.LockOSThread()
		ch <- f()
	}()
	return <-ch
}

const missing = "/nonexistent/corral-seccomp-probe"

// noSuchPid is above PID_MAX_LIMIT (4M), so no process has it.
const noSuchPid = 0x3fffffff

func denyProbes() []probe {
	ps := []probe{
		{name: "ptrace(PTRACE_ATTACH, no such pid)", want: unix.EPERM, distinct: true,
			call: func() syscall.Errno { return sc(unix.SYS_PTRACE, unix.PTRACE_ATTACH, noSuchPid) }},
		{name: "process_vm_readv(flags=1)", want: unix.EPERM, distinct: true,
			call: func() syscall.Errno { return sc(unix.SYS_PROCESS_VM_READV, uintptr(os.Getpid()), 0, 0, 0, 0, 1) }},
		{name: "process_vm_writev(flags=1)", want: unix.EPERM, distinct: true,
			call: func() syscall.Errno { return sc(unix.SYS_PROCESS_VM_WRITEV, uintptr(os.Getpid()), 0, 0, 0, 0, 1) }},
		{name: "mount(missing target)", want: unix.EPERM, distinct: true,
			call: func() syscall.Errno {
				return sc(unix.SYS_MOUNT, str("none"), str(missing), str("tmpfs"), 0, 0)
			}},
		{name: "umount2(missing)", want: unix.EPERM, distinct: true,
			call: func() syscall.Errno { return sc(unix.SYS_UMOUNT2, str(missing), 0) }},
		{name: "pivot_root(missing)", want: unix.EPERM, distinct: true,
			call: func() syscall.Errno { return sc(unix.SYS_PIVOT_ROOT, str(missing), str(missing)) }},
		{name: "fsopen(no such fs)", want: unix.EPERM, distinct: true,
			call: func() syscall.Errno { return scFD(unix.SYS_FSOPEN, str("corral-no-such-fs"), 0) }},
		{name: "open_tree(-1, missing)", want: unix.EPERM, distinct: true,
			call: func() syscall.Errno { return scFD(unix.SYS_OPEN_TREE, ^uintptr(0), str(missing), 0) }},
		// A Go process is multi-threaded, so the kernel itself answers
		// EINVAL to unshare(CLONE_NEWUSER); the filter's EPERM is distinct.
		{name: "unshare(CLONE_NEWUSER)", want: unix.EPERM, distinct: true,
			call: func() syscall.Errno {
				return onThrowawayThread(func() syscall.Errno { return sc(unix.SYS_UNSHARE, unix.CLONE_NEWUSER) })
			}},
		// CLONE_FS with CLONE_NEWUSER (or CLONE_NEWNS) is rejected by
		// copy_process with EINVAL, so nothing is ever created even
		// without the filter.
		{name: "clone(CLONE_NEWUSER|CLONE_FS)", want: unix.EPERM, distinct: true,
			call: func() syscall.Errno {
				return sc(unix.SYS_CLONE, unix.CLONE_NEWUSER|unix.CLONE_FS|uintptr(unix.SIGCHLD))
			}},
		{name: "clone(CLONE_NEWNS|CLONE_FS)", want: unix.EPERM, distinct: true,
			call: func() syscall.Errno {
				return sc(unix.SYS_CLONE, unix.CLONE_NEWNS|unix.CLONE_FS|uintptr(unix.SIGCHLD))
			}},
		{name: "clone3(NULL, 0)", want: unix.ENOSYS, distinct: true,
			call: func() syscall.Errno { return sc(unix.SYS_CLONE3, 0, 0) }},
		{name: "setns(-1, 0)", want: unix.EPERM, distinct: true,
			call: func() syscall.Errno { return sc(unix.SYS_SETNS, ^uintptr(0), 0) }},
		{name: "keyctl(bad op)", want: unix.EPERM, distinct: true,
			call: func() syscall.Errno { return sc(unix.SYS_KEYCTL, 0x7fffffff) }},
		{name: "add_key(NULL)", want: unix.EPERM, distinct: true,
			call: func() syscall.Errno { return sc(unix.SYS_ADD_KEY, 0, 0, 0, 0, 0) }},
		{name: "request_key(NULL)", want: unix.EPERM, distinct: true,
			call: func() syscall.Errno { return sc(unix.SYS_REQUEST_KEY, 0, 0, 0, 0) }},
		{name: "bpf(bad cmd)", want: unix.EPERM, distinct: true,
			call: func() syscall.Errno { return sc(unix.SYS_BPF, 0xffff, 0, 0) }},
		{name: "perf_event_open(NULL)", want: unix.EPERM, distinct: true,
			call: func() syscall.Errno { return scFD(unix.SYS_PERF_EVENT_OPEN, 0, 0, ^uintptr(0), ^uintptr(0), 0) }},
		{name: "userfaultfd(bad flags)", want: unix.EPERM, distinct: true,
			call: func() syscall.Errno { return scFD(unix.SYS_USERFAULTFD, 0x7ffffff0) }},
		// io_uring may be disabled by sysctl (EPERM from the kernel), so
		// these are not marked distinct.
		{name: "io_uring_setup(0, NULL)", want: unix.EPERM,
			call: func() syscall.Errno { return scFD(unix.SYS_IO_URING_SETUP, 0, 0) }},
		{name: "io_uring_enter(-1)", want: unix.EPERM,
			call: func() syscall.Errno { return sc(unix.SYS_IO_URING_ENTER, ^uintptr(0), 0, 0, 0, 0, 0) }},
		{name: "io_uring_register(-1)", want: unix.EPERM,
			call: func() syscall.Errno { return sc(unix.SYS_IO_URING_REGISTER, ^uintptr(0), 0, 0, 0) }},
		{name: "open_by_handle_at(-1, NULL)", want: unix.EPERM, distinct: true,
			call: func() syscall.Errno { return scFD(unix.SYS_OPEN_BY_HANDLE_AT, ^uintptr(0), 0, 0) }},
		{name: "init_module(NULL)", want: unix.EPERM,
			call: func() syscall.Errno { return sc(unix.SYS_INIT_MODULE, 0, 0, 0) }},
		{name: "finit_module(-1)", want: unix.EPERM,
			call: func() syscall.Errno { return sc(unix.SYS_FINIT_MODULE, ^uintptr(0), 0, 0) }},
		{name: "delete_module(no such module)", want: unix.EPERM,
			call: func() syscall.Errno { return sc(unix.SYS_DELETE_MODULE, str("corral_no_such_module"), 0) }},
		{name: "kexec_load(bad flags)", want: unix.EPERM,
			call: func() syscall.Errno { return sc(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0xdead0000) }},
		// Bad magic: EINVAL from the kernel, never a reboot.
		{name: "reboot(bad magic)", want: unix.EPERM, distinct: true,
			call: func() syscall.Errno { return sc(unix.SYS_REBOOT, 0, 0, 0, 0) }},
		{name: "swapoff(missing)", want: unix.EPERM, distinct: true,
			call: func() syscall.Errno { return sc(unix.SYS_SWAPOFF, str(missing)) }},
		// CLOCK_MONOTONIC cannot be set: EINVAL from the kernel.
		{name: "clock_settime(CLOCK_MONOTONIC)", want: unix.EPERM, distinct: true,
			call: func() syscall.Errno {
				ts := unix.Timespec{Sec: 1}
				return sc(unix.SYS_CLOCK_SETTIME, unix.CLOCK_MONOTONIC, uintptr(unsafe.Pointer(&ts)))
			}},
		// settimeofday(NULL, NULL) is a no-op for the kernel.
		{name: "settimeofday(NULL, NULL)", want: unix.EPERM, distinct: true,
			call: func() syscall.Errno { return sc(unix.SYS_SETTIMEOFDAY, 0, 0) }},
		// modes=0 only reads.
		{name: "adjtimex(read)", want: unix.EPERM, distinct: true,
			call: func() syscall.Errno {
				var tx unix.Timex
				return sc(unix.SYS_ADJTIMEX, uintptr(unsafe.Pointer(&tx)))
			}},
		// stdin is /dev/null (exec.Cmd's default): ENOTTY from the kernel.
		{name: "ioctl(0, TIOCSTI)", want: unix.EPERM, distinct: true,
			call: func() syscall.Errno {
				c := byte('x')
				return sc(unix.SYS_IOCTL, 0, unix.TIOCSTI, uintptr(unsafe.Pointer(&c)))
			}},
		{name: "ioctl(0, 0xffffffff00000000|TIOCSTI)", want: unix.EPERM, distinct: true,
			call: func() syscall.Errno {
				c := byte('x')
				return sc(unix.SYS_IOCTL, 0, uintptr(0xffffffff00000000|uint64(unix.TIOCSTI)), uintptr(unsafe.Pointer(&c)))
			}},
		{name: "ioctl(0, TIOCLINUX)", want: unix.EPERM, distinct: true,
			call: func() syscall.Errno {
				c := byte(0)
				return sc(unix.SYS_IOCTL, 0, unix.TIOCLINUX, uintptr(unsafe.Pointer(&c)))
			}},
		// Socket families: the kernel may itself lack a family (and then
		// also answer EAFNOSUPPORT), so only always-present ones are distinct.
		{name: "socket(AF_PACKET)", want: unix.EAFNOSUPPORT, distinct: true,
			call: func() syscall.Errno { return scFD(unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_RAW, 0) }},
		{name: "socket(AF_NETLINK, NETLINK_AUDIT)", want: unix.EAFNOSUPPORT,
			call: func() syscall.Errno { return scFD(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT) }},
		{name: "socket(AF_NETLINK, NETLINK_KOBJECT_UEVENT)", want: unix.EAFNOSUPPORT, distinct: true,
			call: func() syscall.Errno {
				return scFD(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_KOBJECT_UEVENT)
			}},
		{name: "socket(AF_VSOCK)", want: unix.EAFNOSUPPORT,
			call: func() syscall.Errno { return scFD(unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM, 0) }},
		{name: "socket(AF_ALG)", want: unix.EAFNOSUPPORT,
			call: func() syscall.Errno { return scFD(unix.SYS_SOCKET, unix.AF_ALG, unix.SOCK_SEQPACKET, 0) }},
		{name: "socket(AF_BLUETOOTH)", want: unix.EAFNOSUPPORT,
			call: func() syscall.Errno { return scFD(unix.SYS_SOCKET, unix.AF_BLUETOOTH, unix.SOCK_RAW, 0) }},
		{name: "socket(0xffffffff00000000|AF_PACKET)", want: unix.EAFNOSUPPORT, distinct: true,
			call: func() syscall.Errno {
				return scFD(unix.SYS_SOCKET, uintptr(0xffffffff00000000|uint64(unix.AF_PACKET)), unix.SOCK_RAW, 0)
			}},
		{name: "socketpair(AF_PACKET)", want: unix.EAFNOSUPPORT,
			call: func() syscall.Errno {
				var fds [2]int32
				return sc(unix.SYS_SOCKETPAIR, unix.AF_PACKET, unix.SOCK_RAW, 0, uintptr(unsafe.Pointer(&fds)))
			}},
	}
	// Every namespace flag, one at a time. Not run unfiltered: as root
	// unshare(CLONE_NEWNET) and friends would succeed (harmlessly, on a
	// throwaway thread, but proving nothing).
	for _, f := range []struct {
		name string
		flag uintptr
	}{
		{"CLONE_NEWNS", unix.CLONE_NEWNS}, {"CLONE_NEWUTS", unix.CLONE_NEWUTS},
		{"CLONE_NEWIPC", unix.CLONE_NEWIPC}, {"CLONE_NEWPID", unix.CLONE_NEWPID},
		{"CLONE_NEWNET", unix.CLONE_NEWNET}, {"CLONE_NEWCGROUP", unix.CLONE_NEWCGROUP},
		{"CLONE_NEWTIME", unix.CLONE_NEWTIME},
	} {
		flag := f.flag
		ps = append(ps, probe{name: "unshare(" + f.name + ")", want: unix.EPERM, noControl: true,
			call: func() syscall.Errno {
				return onThrowawayThread(func() syscall.Errno { return sc(unix.SYS_UNSHARE, flag) })
			}})
	}
	if x32SyscallBit != 0 {
		// Without the filter: ENOSYS (x32 disabled) or success.
		ps = append(ps, probe{name: "x32 getpid", want: unix.EPERM, distinct: true,
			call: func() syscall.Errno { return sc(x32SyscallBit | unix.SYS_GETPID) }})
	}
	return ps
}

// allowProbes are operations that must keep working under the filter; each
// returns "" on success or a description of the failure.
func allowProbes() map[string]func() string {
	errno := func(e syscall.Errno) string {
		if e != 0 {
			return e.Error()
		}
		return ""
	}
	return map[string]func() string{
		"socket(AF_INET)": func() string { return errno(scFD(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, 0)) },
		"socket(AF_UNIX)": func() string { return errno(scFD(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM, 0)) },
		"socket(AF_NETLINK, NETLINK_ROUTE)": func() string {
			return errno(scFD(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE))
		},
		"socketpair(AF_UNIX)": func() string {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
			if err != nil {
				return err.Error()
			}
			unix.Close(fds[0])
			unix.Close(fds[1])
			return ""
		},
		"unshare(CLONE_FILES)": func() string {
			return errno(onThrowawayThread(func() syscall.Errno { return sc(unix.SYS_UNSHARE, unix.CLONE_FILES) }))
		},
		"exec /bin/true": func() string {
			if err := exec.Command("/bin/true").Run(); err != nil {
				return err.Error()
			}
			return ""
		},
		"read file": func() string {
			b, err := os.ReadFile("/proc/self/cmdline")
			if err != nil {
				return err.Error()
			}
			if len(b) == 0 {
				return "empty read"
			}
			return ""
		},
		"ioctl(0, TIOCGWINSZ)": func() string {
			var ws unix.Winsize
			e := sc(unix.SYS_IOCTL, 0, unix.TIOCGWINSZ, uintptr(unsafe.Pointer(&ws)))
			if e == 0 || e == unix.ENOTTY {
				return ""
			}
			return e.Error()
		},
		"personality(0xffffffff)": func() string { return errno(sc(unix.SYS_PERSONALITY, 0xffffffff)) },
		"new OS threads": func() string {
			// Force the runtime to clone fresh threads after Install.
			done := make(chan struct{})
			for range 4 {
				go func() {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					done <- struct{}{}
				}()
			}
			for range 4 {
				<-done
			}
			return ""
		},
	}
}

type taskStatus struct {
	Tid, Seccomp, NoNewPrivs, CapEff string
}

type probeReport struct {
	Uid        int
	InstallErr string
	Denied     map[string]int // probe name -> errno (0: succeeded)
	Allowed    map[string]string
	Self       taskStatus
	Tasks      []taskStatus
	PreThreads int      // threads that existed before Install
	ParkedTids []string // threads parked before Install, alive until the report
}

func readStatus(path string) (taskStatus, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return taskStatus{}, err
	}
	var st taskStatus
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		v = strings.TrimSpace(v)
		switch k {
		case "Pid":
			st.Tid = v
		case "Seccomp":
			st.Seccomp = v
		case "NoNewPrivs":
			st.NoNewPrivs = v
		case "CapEff":
			st.CapEff = v
		}
	}
	return st, nil
}

// TestHelperProcess is the child side; it does nothing in a normal run.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(probeEnv)
	if mode == "" {
		return
	}
	rep := probeReport{Uid: os.Getuid(), Denied: map[string]int{}, Allowed: map[string]string{}}

	// Park a few goroutines on their own OS threads before Install, so
	// TSYNC has existing threads to synchronise.
	release := make(chan struct{})
	ready := make(chan int)
	for range 4 {
		go func() {
			runtime.LockOSThread()
			ready <- unix.Gettid()
			<-release
		}()
	}
	for range 4 {
		rep.ParkedTids = append(rep.ParkedTids, fmt.Sprint(<-ready))
	}
	if ents, err := os.ReadDir("/proc/self/task"); err == nil {
		rep.PreThreads = len(ents)
	}

	if mode == "filtered" {
		if err := Install(); err != nil {
			rep.InstallErr = err.Error()
		}
	}
	for _, p := range denyProbes() {
		if mode == "control" && p.noControl {
			continue
		}
		rep.Denied[p.name] = int(p.call())
	}
	if mode == "filtered" {
		// PTRACE_ATTACH to the real parent, only once the filter has
		// shown it blocks ptrace (so a broken filter cannot stop the
		// parent test process).
		if rep.Denied["ptrace(PTRACE_ATTACH, no such pid)"] == int(unix.EPERM) {
			rep.Denied["ptrace(PTRACE_ATTACH, parent)"] = int(sc(unix.SYS_PTRACE, unix.PTRACE_ATTACH, uintptr(os.Getppid())))
		}
		for name, f := range allowProbes() {
			rep.Allowed[name] = f()
		}
	}
	rep.Self, _ = readStatus("/proc/self/status")
	ents, _ := os.ReadDir("/proc/self/task")
	for _, e := range ents {
		if st, err := readStatus(filepath.Join("/proc/self/task", e.Name(), "status")); err == nil {
			st.Tid = e.Name()
			rep.Tasks = append(rep.Tasks, st)
		}
	}
	close(release)

	out, _ := json.Marshal(rep)
	fmt.Printf("\n%s%s\n", probeMarker, out)
	os.Exit(0)
}

// runProbe re-executes the test binary as a probe child in the given mode,
// optionally under another uid/gid.
func runProbe(t *testing.T, mode string, cred *syscall.Credential) probeReport {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		// The go test binary usually sits in a 0700 directory; give the
		// unprivileged child a copy it can execute.
		exe = copyExecutable(t, exe)
	}
	cmd := exec.Command(exe, "-test.run=^TestHelperProcess$", "-test.count=1", "-test.timeout=60s")
	cmd.Env = append(os.Environ(), probeEnv+"="+mode)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(90 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("probe %s timed out; stderr:\n%s", mode, stderr.String())
	}
	if err != nil {
		t.Fatalf("probe %s: %v\nstdout:\n%s\nstderr:\n%s", mode, err, stdout.String(), stderr.String())
	}
	for _, line := range strings.Split(stdout.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, probeMarker); ok {
			var rep probeReport
			if err := json.Unmarshal([]byte(rest), &rep); err != nil {
				t.Fatal(err)
			}
			return rep
		}
	}
	t.Fatalf("probe %s printed no report\nstdout:\n%s\nstderr:\n%s", mode, stdout.String(), stderr.String())
	return probeReport{}
}

func copyExecutable(t *testing.T, src string) string {
	t.Helper()
	// Not t.TempDir: its parent directory is 0700.
	dir, err := os.MkdirTemp("", "corral-seccomp-probe-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	dst := filepath.Join(dir, "probe.test")
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return dst
}

func checkFiltered(t *testing.T, rep probeReport) {
	t.Helper()
	if rep.InstallErr != "" {
		t.Fatalf("Install: %s", rep.InstallErr)
	}
	for _, p := range denyProbes() {
		got, ok := rep.Denied[p.name]
		if !ok {
			t.Errorf("%s: not run", p.name)
			continue
		}
		if syscall.Errno(got) != p.want {
			t.Errorf("%s: got %v (%d), want %v", p.name, syscall.Errno(got), got, p.want)
		}
	}
	if got, ok := rep.Denied["ptrace(PTRACE_ATTACH, parent)"]; !ok || syscall.Errno(got) != unix.EPERM {
		t.Errorf("ptrace(PTRACE_ATTACH, parent): got %v (ran: %v), want EPERM", syscall.Errno(got), ok)
	}
	for name := range allowProbes() {
		msg, ok := rep.Allowed[name]
		if !ok {
			t.Errorf("allowed %s: not run", name)
		} else if msg != "" {
			t.Errorf("allowed %s failed under the filter: %s", name, msg)
		}
	}
	if rep.Self.Seccomp != "2" || rep.Self.NoNewPrivs != "1" {
		t.Errorf("/proc/self/status: Seccomp=%q NoNewPrivs=%q, want 2 and 1", rep.Self.Seccomp, rep.Self.NoNewPrivs)
	}
	if rep.PreThreads < 5 {
		t.Errorf("expected >= 5 threads before Install, got %d", rep.PreThreads)
	}
	seen := map[string]bool{}
	for _, task := range rep.Tasks {
		seen[task.Tid] = true
	}
	for _, tid := range rep.ParkedTids {
		if !seen[tid] {
			t.Errorf("thread %s, parked before Install, missing from /proc/self/task", tid)
		}
	}
	for _, task := range rep.Tasks {
		if task.Seccomp != "2" || task.NoNewPrivs != "1" {
			t.Errorf("thread %s: Seccomp=%q NoNewPrivs=%q, want 2 and 1 on every thread", task.Tid, task.Seccomp, task.NoNewPrivs)
		}
	}
}

// TestInstallAsCurrentUser runs the filter in a child with the test's own
// credentials (root in CI).
func TestInstallAsCurrentUser(t *testing.T) {
	rep := runProbe(t, "filtered", nil)
	t.Logf("uid %d, %d threads before Install, %d after", rep.Uid, rep.PreThreads, len(rep.Tasks))
	checkFiltered(t, rep)
}

// TestInstallWithoutCapabilities runs the filter in a child as nobody
// (uid/gid 65534): installation must need no capability.
func TestInstallWithoutCapabilities(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to switch to uid 65534 (TestInstallAsCurrentUser already ran unprivileged)")
	}
	rep := runProbe(t, "filtered", &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}})
	if rep.Uid != 65534 {
		t.Fatalf("child ran as uid %d", rep.Uid)
	}
	if strings.Trim(rep.Self.CapEff, "0") != "" {
		t.Fatalf("child has effective capabilities %s", rep.Self.CapEff)
	}
	checkFiltered(t, rep)
}

// TestProbesAreMeaningful runs the probes without the filter (as root) and
// checks that, for probes marked distinct, the kernel's own answer differs
// from the filter's, so the filtered results cannot be coincidence.
func TestProbesAreMeaningful(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("the control run's expectations assume root")
	}
	rep := runProbe(t, "control", nil)
	if rep.Self.Seccomp != "0" {
		t.Skipf("test process already runs under seccomp mode %s; the control run would not be unfiltered", rep.Self.Seccomp)
	}
	for _, p := range denyProbes() {
		if p.noControl {
			continue
		}
		got := syscall.Errno(rep.Denied[p.name])
		t.Logf("unfiltered %s: %v (%d)", p.name, got, int(got))
		if p.distinct && got == p.want {
			t.Errorf("unfiltered %s already fails with %v: the probe does not prove the filter", p.name, got)
		}
	}
}

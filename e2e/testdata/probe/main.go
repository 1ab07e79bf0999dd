// Command probe is the e2e suite's in-sandbox attack tool. It is built
// statically (CGO_ENABLED=0) by TestMain and granted read-only to the
// sandbox. Each subcommand prints "name: result" lines, where result is
// "ok" when the operation succeeded or the errno name when it failed, so
// the tests decide what is secure.
package main

import (
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: probe SUBCOMMAND [ARGS]")
		os.Exit(2)
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "tiocsti":
		tiocsti(args[0])
	case "ptrace":
		for _, a := range args {
			pid, _ := strconv.Atoi(a)
			ptrace(pid)
		}
	case "syscalls":
		syscalls()
	case "alloc":
		mb, _ := strconv.Atoi(args[0])
		alloc(mb)
	case "fds-forever":
		fdsForever()
	case "connect":
		connect(args[0], args[1])
	case "fds":
		fds()
	case "status":
		status()
	case "mmapwrite":
		mmapWrite(args[0])
	case "rawhttp":
		rawHTTP(args[0], args[1])
	case "rawhttp-all":
		rawHTTPAll(args[0], args[1])
	case "sni":
		sniProbe(args[0], args[1], args[2])
	case "ws":
		wsProbe(args[0], args[1])
	default:
		fmt.Fprintf(os.Stderr, "probe: unknown subcommand %q\n", os.Args[1])
		os.Exit(2)
	}
}

func res(err error) string {
	if err == nil {
		return "ok"
	}
	if e, ok := err.(syscall.Errno); ok {
		return unix.ErrnoName(e)
	}
	if e, ok := err.(*os.SyscallError); ok {
		return res(e.Err)
	}
	return err.Error()
}

func errno(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// tiocsti pushes text and a newline into the input queue of the terminal
// on fd 0, one byte at a time.
func tiocsti(text string) {
	var first error
	n := 0
	for _, b := range []byte(text + "\n") {
		c := b
		_, _, e := unix.Syscall(unix.SYS_IOCTL, 0, unix.TIOCSTI, uintptr(unsafe.Pointer(&c)))
		if e != 0 {
			if first == nil {
				first = e
			}
			continue
		}
		n++
	}
	fmt.Printf("tiocsti: %s (%d bytes injected)\n", res(first), n)
}

func ptrace(pid int) {
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_ATTACH, uintptr(pid), 0, 0, 0, 0)
	fmt.Printf("ptrace_attach %d: %s\n", pid, res(errno(e)))
	if e == 0 {
		_ = unix.PtraceDetach(pid)
	}
	_, _, e = unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(pid), 0, 0, 0, 0)
	fmt.Printf("ptrace_seize %d: %s\n", pid, res(errno(e)))
	if e == 0 {
		_ = unix.PtraceDetach(pid)
	}
	buf := make([]byte, 64)
	local := []unix.Iovec{{Base: &buf[0], Len: uint64(len(buf))}}
	// Read from an address that is mapped in every process: the stack is
	// not known, so use the auxv-independent vsyscall-free approach of
	// reading the remote's own /proc/PID/stat start_code if readable, else
	// a typical text address.
	addr := uintptr(0x400000)
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		if i := strings.LastIndexByte(string(b), ')'); i > 0 {
			f := strings.Fields(string(b)[i+2:])
			if len(f) > 24 {
				if v, err := strconv.ParseUint(f[23], 10, 64); err == nil && v != 0 {
					addr = uintptr(v)
				}
			}
		}
	}
	remote := []unix.RemoteIovec{{Base: addr, Len: len(buf)}}
	n, err := unix.ProcessVMReadv(pid, local, remote, 0)
	fmt.Printf("process_vm_readv %d: %s (%d bytes)\n", pid, res(err), n)
}

func socket(family, typ, proto int) error {
	fd, err := unix.Socket(family, typ, proto)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

func syscalls() {
	var params [120]byte // struct io_uring_params
	r, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 4, uintptr(unsafe.Pointer(&params[0])), 0)
	if e == 0 {
		unix.Close(int(r))
	}
	fmt.Printf("io_uring_setup: %s\n", res(errno(e)))
	fmt.Printf("socket_netlink_audit: %s\n", res(socket(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT)))
	fmt.Printf("socket_netlink_kobject_uevent: %s\n", res(socket(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_KOBJECT_UEVENT)))
	fmt.Printf("socket_packet: %s\n", res(socket(unix.AF_PACKET, unix.SOCK_RAW, 0x0300)))
	fmt.Printf("socket_vsock: %s\n", res(socket(unix.AF_VSOCK, unix.SOCK_STREAM, 0)))
	fmt.Printf("socket_alg: %s\n", res(socket(unix.AF_ALG, unix.SOCK_SEQPACKET, 0)))
	fmt.Printf("socket_bluetooth: %s\n", res(socket(unix.AF_BLUETOOTH, unix.SOCK_RAW, 1)))
	var sp [2]int32
	_, _, e = unix.RawSyscall6(unix.SYS_SOCKETPAIR, unix.AF_PACKET, unix.SOCK_DGRAM, 0, uintptr(unsafe.Pointer(&sp[0])), 0, 0)
	fmt.Printf("socketpair_packet: %s\n", res(errno(e)))
	_, _, e = unix.RawSyscall(unix.SYS_UNSHARE, unix.CLONE_NEWUSER, 0, 0)
	fmt.Printf("unshare_newuser: %s\n", res(errno(e)))
	_, _, e = unix.RawSyscall(unix.SYS_UNSHARE, unix.CLONE_NEWNS, 0, 0)
	fmt.Printf("unshare_newns: %s\n", res(errno(e)))
	// clone(CLONE_NEWUSER) through fork+exec of a program that exits.
	pid, err := syscall.ForkExec("/proc/self/exe", []string{"probe", "status"}, &syscall.ProcAttr{
		Sys: &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER},
	})
	if err == nil {
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, 0, nil)
	}
	fmt.Printf("clone_newuser: %s\n", res(err))
	// keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, create=1)
	_, _, e = unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(0xfffffffd), 1)
	fmt.Printf("keyctl: %s\n", res(errno(e)))
	typ, _ := unix.BytePtrFromString("user")
	desc, _ := unix.BytePtrFromString("corral-e2e")
	payload := []byte("x")
	_, _, e = unix.Syscall6(unix.SYS_ADD_KEY, uintptr(unsafe.Pointer(typ)), uintptr(unsafe.Pointer(desc)), uintptr(unsafe.Pointer(&payload[0])), 1, uintptr(0xfffffffd), 0)
	fmt.Printf("add_key: %s\n", res(errno(e)))
	// bpf(BPF_MAP_CREATE, {BPF_MAP_TYPE_ARRAY, key 4, value 4, max 1})
	attr := [48]byte{}
	*(*uint32)(unsafe.Pointer(&attr[0])) = 2 // BPF_MAP_TYPE_ARRAY
	*(*uint32)(unsafe.Pointer(&attr[4])) = 4
	*(*uint32)(unsafe.Pointer(&attr[8])) = 4
	*(*uint32)(unsafe.Pointer(&attr[12])) = 1
	r, _, e = unix.Syscall(unix.SYS_BPF, 0, uintptr(unsafe.Pointer(&attr[0])), uintptr(len(attr)))
	if e == 0 {
		unix.Close(int(r))
	}
	fmt.Printf("bpf: %s\n", res(errno(e)))
	fmt.Printf("mount: %s\n", res(unix.Mount("none", "/tmp", "tmpfs", 0, "")))
	_, err = unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	fmt.Printf("fsopen: %s\n", res(err))
	_, err = unix.OpenTree(unix.AT_FDCWD, "/tmp", unix.OPEN_TREE_CLONE)
	fmt.Printf("open_tree: %s\n", res(err))
	var pattr unix.PerfEventAttr
	pattr.Type = unix.PERF_TYPE_SOFTWARE
	pattr.Config = unix.PERF_COUNT_SW_CPU_CLOCK
	pattr.Size = uint32(unsafe.Sizeof(pattr))
	pfd, err := unix.PerfEventOpen(&pattr, 0, -1, -1, 0)
	if err == nil {
		unix.Close(pfd)
	}
	fmt.Printf("perf_event_open: %s\n", res(err))
	r, _, e = unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|1 /* UFFD_USER_MODE_ONLY */, 0, 0)
	if e == 0 {
		unix.Close(int(r))
	}
	fmt.Printf("userfaultfd: %s\n", res(errno(e)))
	_, _, e = unix.Syscall(unix.SYS_SETNS, 0, unix.CLONE_NEWNS, 0)
	fmt.Printf("setns: %s\n", res(errno(e)))
}

// alloc allocates and touches mb MiB, then reports.
func alloc(mb int) {
	var chunks [][]byte
	for i := 0; i < mb; i++ {
		c := make([]byte, 1<<20)
		for j := 0; j < len(c); j += 4096 {
			c[j] = 1
		}
		chunks = append(chunks, c)
	}
	fmt.Printf("alloc: ok (%d MiB)\n", len(chunks))
}

func fdsForever() {
	n := 0
	var last error
	for n < 1<<20 {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY, 0)
		if err != nil {
			last = err
			break
		}
		_ = fd
		n++
	}
	fmt.Printf("fds-forever: %s (%d opened)\n", res(last), n)
}

// connect tries network reach: tcp4/tcp6/udp/unix-abstract.
func connect(network, addr string) {
	if network == "udp" {
		c, err := net.DialTimeout("udp", addr, 2*time.Second)
		if err == nil {
			_, err = c.Write([]byte("corral-e2e"))
			c.Close()
		}
		fmt.Printf("connect %s %s: %s\n", network, addr, res(unwrap(err)))
		return
	}
	c, err := net.DialTimeout(network, addr, 2*time.Second)
	if err == nil {
		_, _ = c.Write([]byte("corral-e2e"))
		c.Close()
	}
	fmt.Printf("connect %s %s: %s\n", network, addr, res(unwrap(err)))
}

func unwrap(err error) error {
	for {
		switch e := err.(type) {
		case *net.OpError:
			err = e.Err
		case *os.SyscallError:
			err = e.Err
		default:
			return err
		}
	}
}

// fds lists the open fds other than the one used to read the directory.
func fds() {
	// Raw syscalls: os.Open would add the runtime poller's epoll and
	// eventfd fds.
	fd, err := unix.Open("/proc/self/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		fmt.Printf("fds: %s\n", res(err))
		return
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
	self := strconv.Itoa(fd)
	unix.Close(fd)
	var out []int
	for _, n := range names {
		if n == self {
			continue
		}
		v, _ := strconv.Atoi(n)
		out = append(out, v)
	}
	sort.Ints(out)
	fmt.Printf("fds: %v\n", out)
}

func status() {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		fmt.Printf("status: %s\n", res(err))
		return
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Seccomp:") || strings.HasPrefix(l, "NoNewPrivs:") || strings.HasPrefix(l, "Cap") {
			fmt.Println(l)
		}
	}
}

// mmapWrite writes "XX" at the start of file through a shared mapping, the
// write path that keeps a set-id bit; it exits 1 if the file cannot be
// opened for writing.
func mmapWrite(file string) {
	fd, err := unix.Open(file, unix.O_RDWR, 0)
	if err != nil {
		fmt.Println("open:", res(err))
		os.Exit(1)
	}
	b, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		fmt.Println("mmap:", res(err))
		os.Exit(1)
	}
	copy(b, "XX")
	_ = unix.Msync(b, unix.MS_SYNC)
	fmt.Println("written")
}

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
	"syscall"
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
	case "syscalls":
		syscalls()
	case "mmapwrite":
		mmapWrite(args[0])
	case "rawhttp":
		rawHTTP(args[0], args[1])
	case "rawhttp-all":
		rawHTTPAll(args[0], args[1])
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

// syscalls tries the alternate kernel paths qualify's P14 (the probe
// package) does not: a packet socketpair, add_key, fsopen, open_tree, and
// other forms of bpf, userfaultfd and setns.
func syscalls() {
	var sp [2]int32
	_, _, e := unix.RawSyscall6(unix.SYS_SOCKETPAIR, unix.AF_PACKET, unix.SOCK_DGRAM, 0, uintptr(unsafe.Pointer(&sp[0])), 0, 0)
	fmt.Printf("socketpair_packet: %s\n", res(errno(e)))
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
	r, _, e := unix.Syscall(unix.SYS_BPF, 0, uintptr(unsafe.Pointer(&attr[0])), uintptr(len(attr)))
	if e == 0 {
		unix.Close(int(r))
	}
	fmt.Printf("bpf_map_create: %s\n", res(errno(e)))
	_, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	fmt.Printf("fsopen: %s\n", res(err))
	_, err = unix.OpenTree(unix.AT_FDCWD, "/tmp", unix.OPEN_TREE_CLONE)
	fmt.Printf("open_tree: %s\n", res(err))
	// UFFD_USER_MODE_ONLY: allowed to unprivileged users where
	// vm.unprivileged_userfaultfd is 0.
	r, _, e = unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|1, 0, 0)
	if e == 0 {
		unix.Close(int(r))
	}
	fmt.Printf("userfaultfd_user_mode: %s\n", res(errno(e)))
	_, _, e = unix.Syscall(unix.SYS_SETNS, 0, unix.CLONE_NEWNS, 0)
	fmt.Printf("setns_fd0_newns: %s\n", res(errno(e)))
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

//go:build linux

package seccomp

import (
	"fmt"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Offsets into struct seccomp_data (include/uapi/linux/seccomp.h). Each
// argument is a 64-bit slot; on little-endian machines (amd64, arm64) its
// low 32 bits are at the slot's offset and its high 32 bits at offset+4.
const (
	offNr   = 0
	offArch = 4
)

func offArgLow(i int) uint32 { return uint32(16 + 8*i) }

// Seccomp actions (Documentation/userspace-api/seccomp_filter.rst, "Return
// values").
const (
	retAllow       = unix.SECCOMP_RET_ALLOW
	retKillProcess = unix.SECCOMP_RET_KILL_PROCESS
)

func retErrno(e syscall.Errno) uint32 {
	return unix.SECCOMP_RET_ERRNO | (uint32(e) & unix.SECCOMP_RET_DATA)
}

var (
	retEPERM        = retErrno(unix.EPERM)
	retENOSYS       = retErrno(unix.ENOSYS)
	retEAFNOSUPPORT = retErrno(unix.EAFNOSUPPORT)
)

// nsFlags are the namespace-creating clone/unshare flags.
const nsFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
	unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// cloneNSFlags is nsFlags as seen by legacy clone(2): the low byte of its
// flags is the exit signal (CSIGNAL), and CLONE_NEWTIME (0x80) lies inside
// it, so clone(2) cannot request a time namespace (kernel/fork.c strips
// CSIGNAL from the flags) and the bit must not be read as one.
const cloneNSFlags = nsFlags &^ 0xff

// A check is an argument condition attached to a rule. emit writes a block
// that must end in a return on every path; A holds the syscall number on
// entry and the block may clobber it.
type check interface {
	emit(a *assembler, deny uint32)
	describe() string
}

// anyBits denies when the low 32 bits of argument arg share a bit with mask.
type anyBits struct {
	arg  int
	mask uint32
	what string
}

func (c anyBits) emit(a *assembler, deny uint32) {
	denied := a.newLabel("deny")
	a.load32(offArgLow(c.arg))
	a.jump(bpf.JumpBitsSet, c.mask, denied, "")
	a.ret(retAllow)
	a.label(denied)
	a.ret(deny)
}

func (c anyBits) describe() string { return c.what }

// oneOf denies when the low 32 bits of argument arg equal one of vals.
// Comparing only the low word is deliberate where the kernel truncates the
// argument to 32 bits (ioctl's cmd is unsigned int): a value with high bits
// set must hit the rule, not bypass it.
type oneOf struct {
	arg  int
	vals []uint32
	what string
}

func (c oneOf) emit(a *assembler, deny uint32) {
	denied := a.newLabel("deny")
	a.load32(offArgLow(c.arg))
	for _, v := range c.vals {
		a.jump(bpf.JumpEqual, v, denied, "")
	}
	a.ret(retAllow)
	a.label(denied)
	a.ret(deny)
}

func (c oneOf) describe() string { return c.what }

// familyAllow allows socket(2)/socketpair(2) only for the listed address
// families (argument 0, an int, so its low word); AF_NETLINK is further
// limited to the listed protocols (argument 2). Everything else is denied.
type familyAllow struct {
	families      []uint32
	netlinkProtos []uint32
	what          string
}

func (c familyAllow) emit(a *assembler, deny uint32) {
	allowed, denied := a.newLabel("allow"), a.newLabel("deny")
	a.load32(offArgLow(0))
	for _, f := range c.families {
		a.jump(bpf.JumpEqual, f, allowed, "")
	}
	if len(c.netlinkProtos) > 0 {
		a.jump(bpf.JumpEqual, unix.AF_NETLINK, "", denied)
		a.load32(offArgLow(2))
		for _, p := range c.netlinkProtos {
			a.jump(bpf.JumpEqual, p, allowed, "")
		}
	}
	a.label(denied)
	a.ret(deny)
	a.label(allowed)
	a.ret(retAllow)
}

func (c familyAllow) describe() string { return c.what }

// unixRefused is the socket(2)/socketpair(2) check with network.unix_sockets:
// deny. AF_UNIX gets action: always for socket(2), which is how a socket
// that can name a path (or an abstract name) comes to be; for
// socketpair(2) only when the type (argument 1, low word, without the
// SOCK_NONBLOCK/SOCK_CLOEXEC flags) is not one of pairTypes. A connected
// stream or seqpacket pair cannot be pointed anywhere else (connect gives
// EISCONN, an address to sendmsg EISCONN or is ignored), but a datagram
// pair can connect(2) or sendto(2) any named datagram socket. Other
// families go to rest.
type unixRefused struct {
	action    uint32
	pairTypes []uint32 // nil: socket(2), every AF_UNIX socket refused
	rest      familyAllow
	what      string
}

// sockTypeMask is SOCK_TYPE_MASK (include/linux/net.h).
const sockTypeMask = 0xf

func (c unixRefused) emit(a *assembler, deny uint32) {
	unixSock := a.newLabel("unix")
	a.load32(offArgLow(0))
	a.jump(bpf.JumpEqual, unix.AF_UNIX, unixSock, "")
	c.rest.emit(a, deny)
	a.label(unixSock)
	if len(c.pairTypes) > 0 {
		allowed := a.newLabel("pair_ok")
		a.load32(offArgLow(1))
		a.and32(sockTypeMask)
		for _, t := range c.pairTypes {
			a.jump(bpf.JumpEqual, t, allowed, "")
		}
		a.ret(c.action)
		a.label(allowed)
		a.ret(retAllow)
		return
	}
	a.ret(c.action)
}

func (c unixRefused) describe() string { return c.what }

var (
	unixSocketRule = unixRefused{action: retEPERM, rest: socketRule,
		what: "AF_UNIX; " + socketRule.what}
	unixPairRule = unixRefused{action: retEPERM, pairTypes: []uint32{unix.SOCK_STREAM, unix.SOCK_SEQPACKET}, rest: socketRule,
		what: "AF_UNIX other than SOCK_STREAM/SOCK_SEQPACKET; " + socketRule.what}
)

// rule is one row of the filter table.
type rule struct {
	name     string // syscall name, a key of sysnums
	action   uint32 // returned when the call is denied
	when     check  // nil: always denied
	optional bool   // may be missing from an architecture's table
}

var socketRule = familyAllow{
	families:      []uint32{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6},
	netlinkProtos: []uint32{unix.NETLINK_ROUTE},
	what:          "family not AF_UNIX/AF_INET/AF_INET6/AF_NETLINK+NETLINK_ROUTE",
}

// suidBits denies when mode argument arg has S_ISUID or S_ISGID set.
func suidBits(arg int) check {
	return anyBits{arg: arg, mask: unix.S_ISUID | unix.S_ISGID, what: "mode with S_ISUID/S_ISGID"}
}

// rules is the filter table. Order only affects speed: rules for hot
// syscalls that carry argument checks come first.
var rules = []rule{
	{name: "ioctl", action: retEPERM, when: oneOf{arg: 1, vals: []uint32{unix.TIOCSTI, unix.TIOCLINUX}, what: "TIOCSTI, TIOCLINUX"}},
	{name: "socket", action: retEAFNOSUPPORT, when: socketRule},
	{name: "socketpair", action: retEAFNOSUPPORT, when: socketRule},
	{name: "clone", action: retEPERM, when: anyBits{arg: 0, mask: cloneNSFlags, what: "CLONE_NEW* flags"}},
	// clone3 passes its flags in memory, which a seccomp filter cannot
	// read; ENOSYS makes libc fall back to clone(2) (Docker's default
	// profile does the same, moby/moby#42681).
	{name: "clone3", action: retENOSYS},
	{name: "unshare", action: retEPERM, when: anyBits{arg: 0, mask: nsFlags, what: "CLONE_NEW* flags"}},
	{name: "setns", action: retEPERM},

	// No set-user-ID or set-group-ID bits: a read-write tree of a root
	// caller is idmapped so that files the workload creates are owned by
	// root on disk, and a setuid-root file there would be a way up for
	// anyone on the host. The mode argument is checked on every call that
	// sets or creates a mode; openat2 carries it in memory the filter
	// cannot read, so it gets ENOSYS and libc falls back to openat.
	{name: "chmod", action: retEPERM, when: suidBits(1), optional: true},
	{name: "fchmod", action: retEPERM, when: suidBits(1)},
	{name: "fchmodat", action: retEPERM, when: suidBits(2)},
	{name: "fchmodat2", action: retEPERM, when: suidBits(2)},
	{name: "open", action: retEPERM, when: suidBits(2), optional: true},
	{name: "openat", action: retEPERM, when: suidBits(3)},
	{name: "creat", action: retEPERM, when: suidBits(1), optional: true},
	{name: "mknod", action: retEPERM, when: suidBits(1), optional: true},
	{name: "mknodat", action: retEPERM, when: suidBits(2)},
	{name: "openat2", action: retENOSYS},

	{name: "ptrace", action: retEPERM},
	{name: "process_vm_readv", action: retEPERM},
	{name: "process_vm_writev", action: retEPERM},

	{name: "mount", action: retEPERM},
	{name: "umount2", action: retEPERM},
	{name: "pivot_root", action: retEPERM},
	{name: "move_mount", action: retEPERM},
	{name: "open_tree", action: retEPERM},
	{name: "open_tree_attr", action: retEPERM},
	{name: "fsopen", action: retEPERM},
	{name: "fsconfig", action: retEPERM},
	{name: "fsmount", action: retEPERM},
	{name: "fspick", action: retEPERM},
	{name: "mount_setattr", action: retEPERM},

	{name: "keyctl", action: retEPERM},
	{name: "add_key", action: retEPERM},
	{name: "request_key", action: retEPERM},
	{name: "bpf", action: retEPERM},
	{name: "perf_event_open", action: retEPERM},
	{name: "userfaultfd", action: retEPERM},
	{name: "io_uring_setup", action: retEPERM},
	{name: "io_uring_enter", action: retEPERM},
	{name: "io_uring_register", action: retEPERM},

	{name: "kexec_load", action: retEPERM},
	{name: "kexec_file_load", action: retEPERM},
	{name: "init_module", action: retEPERM},
	{name: "finit_module", action: retEPERM},
	{name: "delete_module", action: retEPERM},
	{name: "open_by_handle_at", action: retEPERM},
	{name: "acct", action: retEPERM},
	{name: "swapon", action: retEPERM},
	{name: "swapoff", action: retEPERM},
	{name: "reboot", action: retEPERM},
	{name: "settimeofday", action: retEPERM},
	{name: "clock_settime", action: retEPERM},
	{name: "clock_adjtime", action: retEPERM},
	{name: "adjtimex", action: retEPERM},
	{name: "quotactl", action: retEPERM},
	{name: "quotactl_fd", action: retEPERM},
	{name: "lookup_dcookie", action: retEPERM},
	{name: "vhangup", action: retEPERM},
	{name: "nfsservctl", action: retEPERM, optional: true},
}

// Denied lists the syscalls the filter denies on this architecture, in table
// order, for reports. A conditionally denied call is written as
// "name(condition)", e.g. "unshare(CLONE_NEW* flags)".
func Denied() []string {
	var out []string
	for _, r := range rules {
		if _, ok := sysnums[r.name]; !ok {
			continue
		}
		if r.when != nil {
			out = append(out, r.name+"("+r.when.describe()+")")
		} else {
			out = append(out, r.name)
		}
	}
	return out
}

// maxInsns is BPF_MAXINSNS from include/uapi/linux/bpf_common.h.
const maxInsns = 4096

// program assembles the filter as x/net/bpf instructions.
// Options vary the filter.
type Options struct {
	// AllowOpenat2 lets openat2(2) through instead of ENOSYS. Its mode
	// lives in memory the filter cannot read, so a set-id bit on a file it
	// creates cannot be refused: only for sandboxes whose writable trees
	// are the workload's own on disk (no idmapped mounts), where such a
	// file would give nobody more than the workload's own uid. Programs
	// that need RESOLVE_BENEATH (OpenClaw's fs-safe) have no fallback.
	AllowOpenat2 bool
	// DenyUnixSockets (network.unix_sockets: deny) refuses socket(AF_UNIX)
	// with EPERM, so the workload can neither connect to nor listen on a
	// unix socket by path or abstract name, whoever made the socket and
	// whenever; socketpair(AF_UNIX) keeps working for SOCK_STREAM and
	// SOCK_SEQPACKET (pipes between processes) and is refused for
	// SOCK_DGRAM, whose sockets can send to any named socket. Unix sockets
	// the workload inherits are not affected.
	DenyUnixSockets bool
}

// when is the check of rule r under o.
func (o Options) when(r rule) check {
	if o.DenyUnixSockets {
		switch r.name {
		case "socket":
			return unixSocketRule
		case "socketpair":
			return unixPairRule
		}
	}
	return r.when
}

func program(o Options) ([]bpf.Instruction, error) {
	if len(sysnums) == 0 {
		return nil, fmt.Errorf("seccomp: unsupported architecture %s", runtime.GOARCH)
	}
	a := newAssembler()

	// 1. Architecture: a syscall made through another ABI (e.g. int 0x80
	// on x86_64, AArch32 compat on arm64) has different numbers, so the
	// table below would not apply; kill (seccomp_filter.rst, "Pitfalls").
	archOK := a.newLabel("arch_ok")
	a.load32(offArch)
	a.jump(bpf.JumpEqual, auditArch, archOK, "")
	a.ret(retKillProcess)
	a.label(archOK)

	// 2. The syscall number; A keeps it for the dispatch below.
	a.load32(offNr)
	dispatch := a.newLabel("dispatch")
	if x32SyscallBit != 0 {
		// x32 syscalls share AUDIT_ARCH_X86_64 but set this bit; deny
		// them all. nr == -1 (used by tracers to skip a call) is left to
		// the kernel, as libseccomp does.
		a.jump(bpf.JumpGreaterOrEqual, x32SyscallBit, "", dispatch)
		a.jump(bpf.JumpEqual, 0xffffffff, dispatch, "")
		a.ret(retEPERM)
	}
	a.label(dispatch)

	// 3. One block per rule: "if nr == N { block }"; every block returns.
	for _, r := range rules {
		if r.name == "openat2" && o.AllowOpenat2 {
			continue
		}
		nr, ok := sysnums[r.name]
		if !ok {
			if r.optional {
				continue
			}
			return nil, fmt.Errorf("seccomp: no syscall number for %q on %s", r.name, runtime.GOARCH)
		}
		next := a.newLabel("after_" + r.name)
		a.jump(bpf.JumpEqual, nr, "", next)
		if when := o.when(r); when == nil {
			a.ret(r.action)
		} else {
			when.emit(a, r.action)
		}
		a.label(next)
	}

	// 4. Default.
	a.ret(retAllow)

	prog, err := a.finish()
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	if len(prog) >= maxInsns {
		return nil, fmt.Errorf("seccomp: program has %d instructions, limit is %d", len(prog), maxInsns)
	}
	return prog, nil
}

// Build returns the filter for the running architecture as a kernel-ready
// sock_filter array.
func Build() ([]unix.SockFilter, error) { return BuildWith(Options{}) }

// BuildWith is Build with options.
func BuildWith(o Options) ([]unix.SockFilter, error) {
	prog, err := program(o)
	if err != nil {
		return nil, err
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("seccomp: assembling filter: %w", err)
	}
	out := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		out[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out, nil
}

// Install sets no_new_privs and loads the filter into every thread of the
// process. It needs no capability: seccomp_filter.rst requires either
// CAP_SYS_ADMIN or no_new_privs, and we always set the latter.
//
// no_new_privs is set on all threads with syscall.AllThreadsSyscall (Go
// refuses that in cgo binaries; then it is set on the calling thread only,
// which suffices because SECCOMP_FILTER_FLAG_TSYNC copies the caller's
// no_new_privs to the threads it synchronises — kernel/seccomp.c,
// seccomp_sync_threads). The filter is loaded with TSYNC, so every existing
// thread gets it and future threads inherit it.
//
// Consequences for the caller after Install: os/exec still works (Go forks
// with clone(2)), but SysProcAttr.UseCgroupFD or CLONE_NEWTIME make Go use
// clone3 and so fail with ENOSYS; personality(2) is left allowed.
func Install() error { return InstallWith(Options{}) }

// InstallWith is Install with options.
func InstallWith(o Options) error {
	filter, err := BuildWith(o)
	if err != nil {
		return err
	}

	// Keep prctl (in the cgo fallback) and seccomp on one thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); e != 0 {
		if e != syscall.ENOTSUP {
			return fmt.Errorf("seccomp: prctl(PR_SET_NO_NEW_PRIVS) on all threads: %w", e)
		}
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("seccomp: prctl(PR_SET_NO_NEW_PRIVS): %w", err)
		}
	}

	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	r, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(filter)
	if e != 0 {
		return fmt.Errorf("seccomp: seccomp(SECCOMP_SET_MODE_FILTER, TSYNC): %w", e)
	}
	if r != 0 {
		// With TSYNC, a positive return is the id of a thread that could
		// not be synchronised (it has a diverging filter or is in strict
		// mode); nothing was installed.
		return fmt.Errorf("seccomp: TSYNC failed: thread %d could not be synchronised", r)
	}
	return nil
}

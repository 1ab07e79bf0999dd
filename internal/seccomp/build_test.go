//go:build linux && (amd64 || arm64)

package seccomp

import (
	"encoding/binary"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

func TestBuildSizeAndShape(t *testing.T) {
	f, err := Build()
	if err != nil {
		t.Fatal(err)
	}
	if len(f) == 0 || len(f) >= maxInsns {
		t.Fatalf("program has %d instructions, want 0 < n < %d", len(f), maxInsns)
	}
	t.Logf("%d instructions", len(f))
	prog, err := program(Options{})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		t.Fatal(err)
	}
	for i := range raw {
		if got := (unix.SockFilter{Code: raw[i].Op, Jt: raw[i].Jt, Jf: raw[i].Jf, K: raw[i].K}); got != f[i] {
			t.Fatalf("insn %d: Build gave %+v, assembler %+v", i, f[i], got)
		}
	}
	// Every path must end in a return: the last instruction is one, and
	// no jump may leave the program (bpf.NewVM checks both).
	if _, err := bpf.NewVM(prog); err != nil {
		t.Fatal(err)
	}
}

func TestTableResolves(t *testing.T) {
	seenName := map[string]bool{}
	seenNr := map[uint32]string{}
	for _, r := range rules {
		if seenName[r.name] {
			t.Errorf("rule %q appears twice", r.name)
		}
		seenName[r.name] = true
		nr, ok := sysnums[r.name]
		if !ok {
			if !r.optional {
				t.Errorf("rule %q has no syscall number on this architecture", r.name)
			}
			continue
		}
		if other, dup := seenNr[nr]; dup {
			t.Errorf("rules %q and %q share syscall number %d", r.name, other, nr)
		}
		seenNr[nr] = r.name
		if r.action == retAllow {
			t.Errorf("rule %q allows: rules must deny", r.name)
		}
	}
	for name := range sysnums {
		if !seenName[name] {
			t.Errorf("sysnums entry %q is used by no rule", name)
		}
	}
}

func TestDeniedNames(t *testing.T) {
	d := Denied()
	for _, want := range []string{"ptrace", "mount", "setns", "bpf", "clone3", "keyctl", "io_uring_setup"} {
		if !slices.Contains(d, want) {
			t.Errorf("Denied() lacks %q: %v", want, d)
		}
	}
	var unshare string
	for _, s := range d {
		if strings.HasPrefix(s, "unshare(") {
			unshare = s
		}
	}
	if unshare == "" {
		t.Errorf("Denied() lacks the conditional unshare rule: %v", d)
	}
}

// seccompData is struct seccomp_data; vmRun encodes it for x/net/bpf's VM,
// which loads words big-endian (network order): storing each native 32-bit
// word big-endian gives the VM the values the kernel's loads would see.
type seccompData struct {
	nr   uint32
	arch uint32
	args [6]uint64
}

func vmRun(t *testing.T, vm *bpf.VM, d seccompData) uint32 {
	t.Helper()
	buf := make([]byte, 64)
	binary.BigEndian.PutUint32(buf[0:], d.nr)
	binary.BigEndian.PutUint32(buf[4:], d.arch)
	for i, a := range d.args {
		binary.BigEndian.PutUint32(buf[16+8*i:], uint32(a))       // low word
		binary.BigEndian.PutUint32(buf[16+8*i+4:], uint32(a>>32)) // high word
	}
	n, err := vm.Run(buf)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(n)
}

// filterVM is the filter built with o, in x/net/bpf's VM.
func filterVM(t *testing.T, o Options) *bpf.VM {
	t.Helper()
	prog, err := program(o)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

// callData is the seccomp_data of syscall name with args.
func callData(t *testing.T, name string, args ...uint64) seccompData {
	t.Helper()
	nr, ok := sysnums[name]
	if !ok {
		t.Fatalf("no number for %s", name)
	}
	d := seccompData{nr: nr, arch: auditArch}
	copy(d.args[:], args)
	return d
}

func TestFilterSemanticsInVM(t *testing.T) {
	vm := filterVM(t, Options{})
	call := func(name string, args ...uint64) seccompData { return callData(t, name, args...) }
	nrCall := func(nr uint32, args ...uint64) seccompData {
		d := seccompData{nr: nr, arch: auditArch}
		copy(d.args[:], args)
		return d
	}
	const hi = 0xffffffff00000000
	type tc struct {
		what string
		d    seccompData
		want uint32
	}
	cases := []tc{
		{"getpid", nrCall(unix.SYS_GETPID), retAllow},
		{"read", nrCall(unix.SYS_READ, 0, 0, 0), retAllow},
		{"foreign arch", seccompData{nr: unix.SYS_GETPID, arch: unix.AUDIT_ARCH_I386}, retKillProcess},
		{"foreign arch, denied nr", seccompData{nr: sysnums["ptrace"], arch: unix.AUDIT_ARCH_ARM}, retKillProcess},
		{"clone3", call("clone3"), retENOSYS},
		{"unshare(CLONE_FILES)", call("unshare", unix.CLONE_FILES), retAllow},
		{"unshare(CLONE_FS|CLONE_SYSVSEM)", call("unshare", unix.CLONE_FS|unix.CLONE_SYSVSEM), retAllow},
		{"clone(fork-like)", call("clone", unix.CLONE_VM|unix.CLONE_VFORK|uint64(unix.SIGCHLD)), retAllow},
		{"clone(thread)", call("clone", unix.CLONE_VM|unix.CLONE_FS|unix.CLONE_FILES|unix.CLONE_SIGHAND|unix.CLONE_THREAD|unix.CLONE_SYSVSEM|unix.CLONE_SETTLS|unix.CLONE_PARENT_SETTID|unix.CLONE_CHILD_CLEARTID), retAllow},
		// Exit signal 0x80 shares its bit with CLONE_NEWTIME, which clone(2) ignores.
		{"clone(exit signal 0x80)", call("clone", 0x80), retAllow},
		{"ioctl(TIOCGWINSZ)", call("ioctl", 0, unix.TIOCGWINSZ), retAllow},
		{"fchmodat(04755)", call("fchmodat", 3, 0, 0o4755), retEPERM},
		{"fchmodat(02755)", call("fchmodat", 3, 0, 0o2755), retEPERM},
		{"fchmodat(0755)", call("fchmodat", 3, 0, 0o755), retAllow},
		{"fchmod(06000)", call("fchmod", 3, 0o6000), retEPERM},
		{"openat(O_CREAT, 04700)", call("openat", 3, 0, unix.O_CREAT, 0o4700), retEPERM},
		{"openat(O_CREAT, 0644)", call("openat", 3, 0, unix.O_CREAT, 0o644), retAllow},
		{"mknodat(S_IFREG|04755)", call("mknodat", 3, 0, unix.S_IFREG|0o4755), retEPERM},
		{"openat2", call("openat2", 3, 0, 0, 24), retENOSYS},
		{"ioctl(TIOCSTI)", call("ioctl", 0, unix.TIOCSTI), retEPERM},
		{"ioctl(hi|TIOCSTI)", call("ioctl", 0, hi|unix.TIOCSTI), retEPERM},
		{"ioctl(TIOCLINUX)", call("ioctl", 0, unix.TIOCLINUX), retEPERM},
		{"ioctl(hi|TIOCLINUX)", call("ioctl", 0, hi|unix.TIOCLINUX), retEPERM},
		{"ioctl(hi|TIOCGWINSZ)", call("ioctl", 0, hi|unix.TIOCGWINSZ), retAllow},
		{"socketpair(AF_UNIX)", call("socketpair", unix.AF_UNIX, unix.SOCK_STREAM), retAllow},
		{"socketpair(AF_PACKET)", call("socketpair", unix.AF_PACKET, unix.SOCK_RAW), retEAFNOSUPPORT},
		{"socket(NETLINK_ROUTE, hi bits)", call("socket", hi|unix.AF_NETLINK, unix.SOCK_RAW, hi|unix.NETLINK_ROUTE), retAllow},
		{"socket(hi|AF_PACKET)", call("socket", hi|unix.AF_PACKET, unix.SOCK_RAW), retEAFNOSUPPORT},
	}
	if x32SyscallBit != 0 {
		cases = append(cases,
			tc{"x32 getpid", nrCall(x32SyscallBit | unix.SYS_GETPID), retEPERM},
			tc{"x32 high nr", nrCall(0xfffffffe), retEPERM},
			tc{"nr -1", nrCall(0xffffffff), retAllow},
		)
	}
	for _, f := range []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6} {
		cases = append(cases, tc{"socket allowed family", call("socket", f, unix.SOCK_STREAM, 0), retAllow})
	}
	for _, f := range []uint64{unix.AF_PACKET, unix.AF_VSOCK, unix.AF_ALG, unix.AF_BLUETOOTH, unix.AF_KEY, unix.AF_CAN, unix.AF_XDP, unix.AF_TIPC, unix.AF_RDS, 0, 255} {
		cases = append(cases, tc{"socket denied family", call("socket", f, unix.SOCK_RAW, 0), retEAFNOSUPPORT})
	}
	for _, p := range []uint64{unix.NETLINK_AUDIT, unix.NETLINK_KOBJECT_UEVENT, unix.NETLINK_NETFILTER, unix.NETLINK_SOCK_DIAG, unix.NETLINK_GENERIC, unix.NETLINK_XFRM} {
		cases = append(cases, tc{"netlink denied protocol", call("socket", unix.AF_NETLINK, unix.SOCK_RAW, p), retEAFNOSUPPORT})
	}
	for _, fl := range []uint64{unix.CLONE_NEWNS, unix.CLONE_NEWUTS, unix.CLONE_NEWIPC, unix.CLONE_NEWUSER, unix.CLONE_NEWPID, unix.CLONE_NEWNET, unix.CLONE_NEWCGROUP, unix.CLONE_NEWTIME} {
		cases = append(cases, tc{"unshare ns flag", call("unshare", fl), retEPERM})
		cases = append(cases, tc{"unshare ns flag + CLONE_FILES", call("unshare", fl|unix.CLONE_FILES), retEPERM})
		if fl != unix.CLONE_NEWTIME {
			cases = append(cases, tc{"clone ns flag", call("clone", fl|uint64(unix.SIGCHLD)), retEPERM})
		}
	}
	for _, r := range rules {
		if r.when != nil {
			continue
		}
		if _, ok := sysnums[r.name]; ok {
			cases = append(cases, tc{r.name, call(r.name), r.action})
		}
	}
	for _, c := range cases {
		if got := vmRun(t, vm, c.d); got != c.want {
			t.Errorf("%s (nr %#x args %#x): got %#x, want %#x", c.what, c.d.nr, c.d.args, got, c.want)
		}
	}
}

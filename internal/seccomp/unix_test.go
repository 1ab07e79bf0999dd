//go:build linux && (amd64 || arm64)

package seccomp

// network.unix_sockets deny (Options.DenyUnixSockets): the filter's
// decisions in the BPF VM, then in the kernel against a real listener.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestDenyUnixSocketsInVM(t *testing.T) {
	for _, deny := range []bool{false, true} {
		vm := filterVM(t, Options{DenyUnixSockets: deny})
		call := func(name string, args ...uint64) seccompData { return callData(t, name, args...) }
		unixWant := func(denied bool) uint32 {
			if deny && denied {
				return retEPERM
			}
			return retAllow
		}
		const hi = 0xffffffff00000000
		const flags = unix.SOCK_NONBLOCK | unix.SOCK_CLOEXEC
		for _, c := range []struct {
			what string
			d    seccompData
			want uint32
		}{
			{"socket(AF_UNIX, SOCK_STREAM)", call("socket", unix.AF_UNIX, unix.SOCK_STREAM), unixWant(true)},
			{"socket(AF_UNIX, SOCK_DGRAM|flags)", call("socket", unix.AF_UNIX, unix.SOCK_DGRAM|flags), unixWant(true)},
			{"socket(AF_UNIX, SOCK_SEQPACKET)", call("socket", unix.AF_UNIX, unix.SOCK_SEQPACKET), unixWant(true)},
			{"socket(hi|AF_UNIX)", call("socket", hi|unix.AF_UNIX, unix.SOCK_STREAM), unixWant(true)},
			{"socketpair(AF_UNIX, SOCK_STREAM)", call("socketpair", unix.AF_UNIX, unix.SOCK_STREAM), retAllow},
			{"socketpair(AF_UNIX, SOCK_STREAM|flags)", call("socketpair", unix.AF_UNIX, unix.SOCK_STREAM|flags), retAllow},
			{"socketpair(AF_UNIX, hi|SOCK_STREAM)", call("socketpair", unix.AF_UNIX, hi|unix.SOCK_STREAM), retAllow},
			{"socketpair(AF_UNIX, SOCK_SEQPACKET|SOCK_CLOEXEC)", call("socketpair", unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC), retAllow},
			{"socketpair(AF_UNIX, SOCK_DGRAM)", call("socketpair", unix.AF_UNIX, unix.SOCK_DGRAM), unixWant(true)},
			{"socketpair(AF_UNIX, SOCK_DGRAM|flags)", call("socketpair", unix.AF_UNIX, unix.SOCK_DGRAM|flags), unixWant(true)},
			{"socketpair(AF_UNIX, SOCK_RAW)", call("socketpair", unix.AF_UNIX, unix.SOCK_RAW), unixWant(true)},
			{"socketpair(hi|AF_UNIX, SOCK_DGRAM)", call("socketpair", hi|unix.AF_UNIX, unix.SOCK_DGRAM), unixWant(true)},
			// The other families are decided as without the option.
			{"socket(AF_INET)", call("socket", unix.AF_INET, unix.SOCK_STREAM), retAllow},
			{"socket(AF_INET6)", call("socket", unix.AF_INET6, unix.SOCK_DGRAM), retAllow},
			{"socket(NETLINK_ROUTE)", call("socket", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE), retAllow},
			{"socket(NETLINK_AUDIT)", call("socket", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT), retEAFNOSUPPORT},
			{"socket(AF_PACKET)", call("socket", unix.AF_PACKET, unix.SOCK_RAW), retEAFNOSUPPORT},
			{"socketpair(AF_PACKET)", call("socketpair", unix.AF_PACKET, unix.SOCK_STREAM), retEAFNOSUPPORT},
			{"openat2", call("openat2"), retENOSYS},
		} {
			if got := vmRun(t, vm, c.d); got != c.want {
				t.Errorf("deny=%v %s: got %#x, want %#x", deny, c.what, got, c.want)
			}
		}
	}
}

const unixProbeEnv = "CORRAL_SECCOMP_UNIX_PROBE"

// unixReport is what the child saw: errno per attempt (0: it worked).
type unixReport struct {
	InstallErr string
	Errno      map[string]int
}

// TestUnixSocketsHelper is the child of TestDenyUnixSocketsInKernel.
func TestUnixSocketsHelper(t *testing.T) {
	sock := os.Getenv(unixProbeEnv)
	if sock == "" {
		return
	}
	rep := unixReport{Errno: map[string]int{}}
	// An AF_UNIX pair made before the filter: what a workload inherits.
	before, pairErr := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if pairErr != nil {
		rep.InstallErr = pairErr.Error()
	}
	if err := InstallWith(Options{DenyUnixSockets: true}); err != nil {
		rep.InstallErr = err.Error()
	}
	errno := func(err error) int {
		var e syscall.Errno
		if err == nil {
			return 0
		}
		if errors.As(err, &e) {
			return int(e)
		}
		return -1
	}
	pair := func(typ int) error {
		fds, err := unix.Socketpair(unix.AF_UNIX, typ, 0)
		if err == nil {
			unix.Close(fds[0])
			unix.Close(fds[1])
		}
		return err
	}
	rep.Errno["socket(AF_UNIX, SOCK_STREAM)"] = int(scFD(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM, 0))
	rep.Errno["socket(AF_UNIX, SOCK_DGRAM)"] = int(scFD(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0))
	rep.Errno["socketpair(AF_UNIX, SOCK_STREAM)"] = errno(pair(unix.SOCK_STREAM | unix.SOCK_CLOEXEC))
	rep.Errno["socketpair(AF_UNIX, SOCK_SEQPACKET)"] = errno(pair(unix.SOCK_SEQPACKET))
	rep.Errno["socketpair(AF_UNIX, SOCK_DGRAM)"] = errno(pair(unix.SOCK_DGRAM))
	rep.Errno["socket(AF_INET)"] = int(scFD(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, 0))
	rep.Errno["socket(AF_PACKET)"] = int(scFD(unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_RAW, 0))
	c, err := net.Dial("unix", sock)
	if err == nil {
		c.Close()
	}
	rep.Errno["connect the listener"] = errno(err)
	if pairErr == nil {
		_, err := unix.Write(before[0], []byte("x"))
		b := make([]byte, 1)
		if err == nil {
			_, err = unix.Read(before[1], b)
		}
		rep.Errno["use a pair made before"] = errno(err)
	}
	out, _ := json.Marshal(rep)
	fmt.Printf("\n%s%s\n", probeMarker, out)
	os.Exit(0)
}

// TestDenyUnixSocketsInKernel: with the option, a child cannot reach a
// listening unix socket (nor make any unix socket by name), while
// socketpair stream/seqpacket, inherited pairs and AF_INET keep working.
func TestDenyUnixSocketsInKernel(t *testing.T) {
	dir, err := os.MkdirTemp("", "corral-seccomp-unix-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
			accepted <- struct{}{}
		}
	}()
	// Control: without the filter the listener is reachable.
	if c, err := net.Dial("unix", sock); err != nil {
		t.Fatalf("control connect: %v", err)
	} else {
		c.Close()
		<-accepted
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestUnixSocketsHelper$", "-test.count=1", "-test.timeout=60s")
	cmd.Env = append(os.Environ(), unixProbeEnv+"="+sock)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var rep unixReport
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, probeMarker); ok {
			if err := json.Unmarshal([]byte(rest), &rep); err != nil {
				t.Fatal(err)
			}
		}
	}
	if rep.Errno == nil || rep.InstallErr != "" {
		t.Fatalf("child report %+v\n%s", rep, out)
	}
	for what, want := range map[string]syscall.Errno{
		"socket(AF_UNIX, SOCK_STREAM)":        unix.EPERM,
		"socket(AF_UNIX, SOCK_DGRAM)":         unix.EPERM,
		"socketpair(AF_UNIX, SOCK_DGRAM)":     unix.EPERM,
		"connect the listener":                unix.EPERM,
		"socket(AF_PACKET)":                   unix.EAFNOSUPPORT,
		"socketpair(AF_UNIX, SOCK_STREAM)":    0,
		"socketpair(AF_UNIX, SOCK_SEQPACKET)": 0,
		"socket(AF_INET)":                     0,
		"use a pair made before":              0,
	} {
		got, ok := rep.Errno[what]
		if !ok || syscall.Errno(got) != want {
			t.Errorf("%s: got %v (%d, ran %v), want %v", what, syscall.Errno(got), got, ok, want)
		}
	}
	select {
	case <-accepted:
		t.Error("the listener accepted a connection from the filtered child")
	default:
	}
}

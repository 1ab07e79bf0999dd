//go:build linux

package probe

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// child runs the test binary as `__probe ARGS...`.
func child(args ...string) *exec.Cmd {
	exe, _ := os.Executable()
	return exec.Command(exe, append([]string{Arg}, args...)...)
}

func killPids(t *testing.T, detail string) {
	for _, f := range strings.Fields(detail) {
		var pid int
		if _, err := fmt.Sscan(f, &pid); err == nil && pid > 1 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func TestSyscalls(t *testing.T) {
	mountTarget = t.TempDir() // never mount over the host's /tmp when run as root
	defer func() { mountTarget = "" }()
	rep := runProbeT(t, "syscalls")
	want := []string{"io_uring_setup", "socket AF_NETLINK NETLINK_AUDIT", "socket AF_NETLINK NETLINK_KOBJECT_UEVENT",
		"socket AF_PACKET", "socket AF_VSOCK", "socket AF_ALG", "socket AF_BLUETOOTH",
		"unshare CLONE_NEWUSER", "unshare CLONE_NEWNS", "clone CLONE_NEWUSER", "keyctl KEYCTL_GET_KEYRING_ID",
		"bpf BPF_PROG_LOAD", "mount tmpfs", "perf_event_open", "userfaultfd", "setns -1 0", "open_by_handle_at"}
	if len(rep.Results) != len(want) {
		t.Fatalf("%d results, want %d: %+v", len(rep.Results), len(want), rep.Results)
	}
	for i, r := range rep.Results {
		if r.What != want[i] {
			t.Errorf("result %d is %q, want %q", i, r.What, want[i])
		}
		if !r.OK && r.Errno == "" {
			t.Errorf("%s failed without errno: %+v", r.What, r)
		}
		t.Logf("%+v", r)
	}
	if r := find(t, rep, "setns -1 0"); r.Errno != "EBADF" && r.Errno != "EPERM" {
		t.Errorf("setns: %+v", r)
	}
	if r := find(t, rep, "bpf BPF_PROG_LOAD"); r.OK {
		t.Errorf("bpf with a zero attr loaded: %+v", r)
	}
}

func TestStatus(t *testing.T) {
	rep := runProbeT(t, "status")
	for _, who := range []string{"self", "grandchild"} {
		for _, f := range statusFields {
			if r := find(t, rep, who+" "+f); !r.OK || r.Detail == "" && f != "Groups" {
				t.Errorf("%s %s: %+v", who, f, r)
			}
		}
	}
	if a, b := find(t, rep, "self CapBnd"), find(t, rep, "grandchild CapBnd"); a.Detail != b.Detail {
		t.Errorf("CapBnd differs: %q vs %q", a.Detail, b.Detail)
	}
}

func TestSpawn(t *testing.T) {
	marker := fmt.Sprintf("probe-test-%d", os.Getpid())
	out, err := child("spawn", marker, "5").Output()
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatal(err)
	}
	all := rep.Results[len(rep.Results)-1]
	defer killPids(t, all.Detail)
	if all.What != "spawned pids" || !all.OK || len(strings.Fields(all.Detail)) != 5 {
		t.Fatalf("pids: %+v", all)
	}
	for i, way := range spawnWays {
		r := rep.Results[i]
		if r.What != "spawn "+way || !r.OK {
			t.Errorf("%s: %+v", way, r)
		}
	}
	// The spawner has exited; every descendant is still running with the
	// marker (the sandbox's job is to kill them, not ours).
	for _, f := range strings.Fields(all.Detail) {
		b, err := os.ReadFile("/proc/" + f + "/cmdline")
		if err != nil || !strings.Contains(string(b), marker) {
			t.Errorf("pid %s: %q %v", f, b, err)
		}
	}
	// The "nosignals" child survives SIGTERM and SIGHUP.
	var pid int
	fmt.Sscanf(rep.Results[3].Detail, "pid %d", &pid)
	syscall.Kill(pid, syscall.SIGTERM)
	syscall.Kill(pid, syscall.SIGHUP)
	time.Sleep(200 * time.Millisecond)
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err != nil || strings.Contains(string(b), ") Z") {
		t.Errorf("nosignals child died on SIGTERM: %q %v", b, err)
	}
}

func TestPtraceSibling(t *testing.T) {
	rep := runProbeT(t, "ptrace", "sibling")
	if len(rep.Results) != 3 {
		t.Fatalf("%+v", rep.Results)
	}
	for _, r := range rep.Results {
		t.Logf("%+v", r)
		if !strings.Contains(r.What, "sibling ") {
			t.Errorf("%+v", r)
		}
	}
	rep = runProbeT(t, "ptrace", "999999999")
	if r := rep.Results[0]; r.OK || r.Errno != "ESRCH" {
		t.Errorf("no such pid: %+v", r)
	}
}

func TestTIOCSTI(t *testing.T) {
	c := child("tiocsti", "echo hi\n")
	c.Stdin = strings.NewReader("") // a pipe, not a terminal
	out, err := c.Output()
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	json.Unmarshal(out, &rep)
	if r := rep.Results[0]; r.OK || r.Errno != "ENOTTY" || !strings.HasPrefix(r.Detail, "0 of 8 bytes") {
		t.Errorf("%+v", r)
	}
}

func TestFds(t *testing.T) {
	c := child("fds")
	out, err := c.Output()
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	json.Unmarshal(out, &rep)
	// The test's own environment may leak fds without FD_CLOEXEC; only
	// those of this process's parent reach the child.
	want := inheritedFds(t)
	if !strings.HasPrefix(want, "0 1 2") {
		t.Skipf("test process lacks fds 0-2: %q", want)
	}
	if r := rep.Results[0]; r.What != "fds" || r.Detail != want {
		t.Errorf("want %q: %+v", want, rep.Results)
	}
	if r := rep.Results[1]; r.What != "own fds" {
		t.Errorf("%+v", r)
	}
	if r := rep.Results[2]; r.What != "fd 0" || r.Detail != "/dev/null" {
		t.Errorf("%+v", r)
	}
}

func TestFdflood(t *testing.T) {
	var old syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old)
	lim := old
	lim.Cur = 200
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skip(err)
	}
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	rep := runProbeT(t, "fdflood")
	if r := rep.Results[0]; r.OK || r.Errno != "EMFILE" || !strings.HasSuffix(r.Detail, " opened") {
		t.Errorf("%+v", r)
	}
}

func TestForkbomb(t *testing.T) {
	rep := runProbeT(t, "forkbomb", "3")
	r := rep.Results[0]
	_, pids, _ := strings.Cut(r.Detail, "pids ")
	defer killPids(t, pids)
	if !r.OK || !strings.HasPrefix(r.Detail, "3 of 3 started") || len(strings.Fields(pids)) != 3 {
		t.Errorf("%+v", r)
	}
}

func TestKill(t *testing.T) {
	c := child("kill", "TERM")
	var out bytes.Buffer
	c.Stdout = &out
	err := c.Run()
	ee, ok := err.(*exec.ExitError)
	if !ok {
		t.Fatalf("err %v", err)
	}
	if ws := ee.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("status %v", ws)
	}
	if !strings.Contains(out.String(), `"kill self SIGTERM"`) {
		t.Errorf("report %q", out.String())
	}
}

func TestEnvProcfs(t *testing.T) {
	t.Setenv("PROBE_CANARY", "tok123")
	rep := runProbeT(t, "env")
	found := false
	for _, r := range rep.Results {
		if r.What == "env" && r.Detail == "PROBE_CANARY=tok123" {
			found = true
		}
	}
	if !found {
		t.Error("env var not reported")
	}
	pr := rep.Results[len(rep.Results)-1]
	if pr.What != "pids" || !strings.Contains(" "+pr.Detail+" ", fmt.Sprintf(" %d ", os.Getpid())) {
		t.Errorf("pids: %+v", pr)
	}
	find(t, rep, fmt.Sprintf("read /proc/%d/cmdline", os.Getpid()))
}

func TestOthers(t *testing.T) {
	rep := runProbeT(t, "busy", "2", "0.1")
	if !rep.Results[0].OK {
		t.Errorf("%+v", rep.Results)
	}
	rep = runProbeT(t, "alloc", "8")
	if r := rep.Results[0]; !r.OK || r.Detail != "8 MiB allocated and touched" {
		t.Errorf("%+v", r)
	}
	rep = runProbeT(t, "sleep", "0.01", "m")
	if !rep.Results[0].OK {
		t.Errorf("%+v", rep.Results)
	}
	sock := "@probe-test-" + fmt.Sprint(os.Getpid())
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	rep = runProbeT(t, "connect", "abstract", sock[1:], sock+"-none")
	if !rep.Results[0].OK || rep.Results[1].Errno != "ECONNREFUSED" {
		t.Errorf("abstract: %+v", rep.Results)
	}
}

// fakeDNS answers every A query with 192.0.2.7 over UDP and TCP.
func fakeDNS(t *testing.T) string {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	ln, err := net.Listen("tcp", pc.LocalAddr().String())
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { ln.Close() })
	answer := func(q []byte) []byte {
		a := append([]byte{}, q...)
		a[2], a[3] = 0x81, 0x80
		a[7] = 1
		a = append(a, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 7)
		return a
	}
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(answer(buf[:n]), from)
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			var l [2]byte
			io.ReadFull(c, l[:])
			q := make([]byte, binary.BigEndian.Uint16(l[:]))
			io.ReadFull(c, q)
			a := answer(q)
			c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(a))), a...))
			c.Close()
		}
	}()
	return pc.LocalAddr().String()
}

func TestDNS(t *testing.T) {
	srv := fakeDNS(t)
	rep := runProbeT(t, "dns", "data.exfil.test", srv)
	for _, n := range []string{"udp", "tcp"} {
		if r := find(t, rep, "dns "+n+" "+srv+" data.exfil.test send"); !r.OK {
			t.Errorf("%s send: %+v", n, r)
		}
		if r := find(t, rep, "dns "+n+" "+srv+" data.exfil.test reply"); !r.OK || r.Detail != "rcode=0 answers=1 A=192.0.2.7" {
			t.Errorf("%s reply: %+v", n, r)
		}
	}
	find(t, rep, "lookup data.exfil.test")

	rep = runProbeT(t, "dns", "x.test", "127.0.0.1:1")
	if r := rep.Results[1]; r.OK || r.Errno != "ECONNREFUSED" {
		t.Errorf("udp reply from closed port: %+v", rep.Results)
	}
	if r := rep.Results[2]; r.OK || r.Errno != "ECONNREFUSED" {
		t.Errorf("tcp to closed port: %+v", rep.Results)
	}
}

// inheritedFds is what `fds` says about the test process itself.
func inheritedFds(t *testing.T) string {
	return find(t, runProbeT(t, "fds"), "fds").Detail
}

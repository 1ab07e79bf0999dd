//go:build linux

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/setid/setidtest"
)

// setIDFiles makes in dir (root's) copies of /bin/true with setidtest.Files:
// one set-uid (4755), one with a file capability but mode 0644. They are
// removed with dir.
func setIDFiles(t *testing.T, dir string) (suid, capNoExec string, data []byte) {
	t.Helper()
	data, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	suid, capNoExec = setidtest.Files(t, dir, data)
	return suid, capNoExec, data
}

// assertUnchanged fails unless the file at p still has data and mode.
func assertUnchanged(t *testing.T, p string, data []byte, mode os.FileMode) {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p); !bytes.Equal(got, data) || st.Mode() != mode {
		t.Errorf("%s changed on the host: mode %v (was %v), content equal %v", filepath.Base(p), st.Mode(), mode, bytes.Equal(got, data))
	}
}

// A read-write grant of a single set-id or file-capability file of root's
// is refused (policy_rejected): idmapped, the workload would own it and
// could write a binary of its choosing through mmap(2), keeping the bit.
func TestSetIDFileReadWriteGrantRefused(t *testing.T) {
	id := rootIdent(t)
	dir := mkdir(t, id, "suidgrant")
	suid, capNoExec, data := setIDFiles(t, dir)
	wd := mkdir(t, id, "suidgrant-wd")
	for _, p := range []string{suid, capNoExec} {
		st, _ := os.Stat(p)
		pol := writePolicy(t, id, policy{RW: []string{p}})
		res := corral(t, run{id: id, policy: pol, workdir: wd, args: sh(probeBin + " mmapwrite " + p + "; chmod 4755 " + p + "; echo ran")})
		if res.code != 122 || strings.Contains(res.stdout, "ran") || !strings.Contains(res.stderr, "set-uid, set-gid or file-capability file") {
			t.Errorf("%s: want policy_rejected (122) naming the file\n%s", filepath.Base(p), res)
		}
		assertUnchanged(t, p, data, st.Mode())
	}
}

// In a root-owned (idmapped) workdir a file with a file capability but no
// exec bit stays read-only: the workload can neither chmod it executable
// nor write it.
func TestCapFileWithoutExecStaysReadOnly(t *testing.T) {
	id := rootIdent(t)
	wd := mkdir(t, id, "capexist")
	_, capNoExec, data := setIDFiles(t, wd)
	pol := writePolicy(t, id, policy{})
	res := corral(t, run{id: id, policy: pol, workdir: wd, args: sh("chmod 755 capfile; echo chmod=$?; " + probeBin + " mmapwrite capfile; echo done")})
	if !strings.Contains(res.stdout, "done") {
		t.Fatalf("script did not run\n%s", res)
	}
	if strings.Contains(res.stdout, "chmod=0") || (!strings.Contains(res.stdout, "open: EROFS") && !strings.Contains(res.stdout, "open: EACCES")) {
		t.Errorf("the workload could chmod or open for writing a file-capability file of root's\n%s", res)
	}
	assertUnchanged(t, capNoExec, data, 0o644)
}

// While a root caller's run is live, a host process of the workload's uid
// (65534) cannot reach the sandbox's tree through /proc/PID/root, so it
// cannot write root's files through the idmapped workdir: the workload is
// in a user namespace owned by root, and ptrace_may_access (which guards
// /proc/PID/root, cwd, fd) requires a caller in the same user namespace or
// with CAP_SYS_PTRACE over it (security/commoncap.c). The control shows
// the same probe does reach an ordinary process of uid 65534.
func TestWorkloadRootClosedToSameUID(t *testing.T) {
	id := rootIdent(t)
	wd := mkdir(t, id, "procroot")
	target := filepath.Join(wd, "file")
	writeFile(t, id, target, "orig\n", 0o644)
	const nobody = 65534
	as := func(script string) (string, error) {
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// The control: a host process of uid 65534 with its cwd in wd.
	ctl := exec.Command("sleep", "30")
	ctl.Dir = wd
	ctl.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
	if err := ctl.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ctl.Process.Kill(); _ = ctl.Wait() }()
	if out, err := as(fmt.Sprintf("cat /proc/%d/cwd/file", ctl.Process.Pid)); err != nil || out != "orig\n" {
		t.Fatalf("control: uid %d cannot read through /proc/PID/cwd of its own process: %v %q", nobody, err, out)
	}

	pause := uniqueSleep(60)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := run{id: id, workdir: wd, args: []string{"sleep", pause}}.command(ctx)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var pid int
	for deadline := time.Now().Add(20 * time.Second); pid == 0; time.Sleep(100 * time.Millisecond) {
		for _, p := range hostProcsWith(pause) {
			if p != cmd.Process.Pid {
				if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p)); strings.TrimSpace(string(b)) == "sleep" {
					pid = p
				}
			}
		}
		if pid == 0 && time.Now().After(deadline) {
			t.Fatalf("the workload did not start\n%s", out.String())
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(fmt.Sprintf("/proc/%d", pid), &st); err != nil || st.Uid != nobody {
		t.Fatalf("workload %d: uid %d (%v), want %d", pid, st.Uid, err, nobody)
	}
	for _, via := range []string{"root" + target, "cwd/file"} {
		p := fmt.Sprintf("/proc/%d/%s", pid, via)
		if o, err := as("cat " + p); err == nil || strings.Contains(o, "orig") {
			t.Errorf("uid %d read %s: %q", nobody, p, o)
		}
		if o, err := as("echo pwned > " + p); err == nil {
			t.Errorf("uid %d wrote %s: %q", nobody, p, o)
		}
	}
	if got := readFile(t, target); got != "orig\n" {
		t.Errorf("root's file in the workdir changed: %q", got)
	}
}

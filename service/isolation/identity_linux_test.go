package isolation

import (
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// identity is checked from outside, on the process's own credentials:
// pass for a process of the agent user, fail for one of the caller's or
// one that is gone. Here the agent user is corral-test (root starts a
// process as it), named as procid.User does on Linux.
func TestIdentity(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("root starts a process as the test user")
	}
	u, err := user.Lookup("corral-test")
	if err != nil {
		t.Skip("no corral-test user: ", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	m := &Manager{}
	rec := &Record{AgentUser: "corral-test", AgentSID: "uid:" + u.Uid}
	if c := m.identity("workload", procOf(cmd.Process.Pid), rec); c.Result != "pass" {
		t.Errorf("the agent user's process: %+v, want pass", c)
	}
	if c := m.identity("workload", procOf(os.Getpid()), rec); c.Result != "fail" || !strings.Contains(c.Detail, "runs as uid:0") {
		t.Errorf("the caller's own process: %+v, want fail", c)
	}
	gone := procOf(cmd.Process.Pid)
	gone.Start++ // the pid, but not the process started then
	if c := m.identity("workload", gone, rec); c.Result != "fail" || !strings.Contains(c.Detail, "not running") {
		t.Errorf("a pid reused: %+v, want fail", c)
	}
	m.Mock = true
	if c := m.identity("workload", procOf(cmd.Process.Pid), rec); c.Result != "mock" {
		t.Errorf("on the stand-in: %+v, want mock", c)
	}
}

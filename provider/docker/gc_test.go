//go:build linux

package docker

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// The owner label survives only as long as its process: a live pid with
// its start time is alive; the same pid with another start time (a reused
// pid), an ended process and a malformed label are not.
func TestOwnerAlive(t *testing.T) {
	if ok, why := ownerAlive(ownerLabel(os.Getpid())); !ok {
		t.Errorf("this process is not alive: %s", why)
	}
	if ok, _ := ownerAlive(fmt.Sprintf("%d %d %s %s", os.Getpid(), startTime(os.Getpid())+1, bootID(), pidNS())); ok {
		t.Error("a reused pid (other start time) counts as the owner")
	}
	if ok, _ := ownerAlive(fmt.Sprintf("%d %d %s %s", os.Getpid(), startTime(os.Getpid()), "another-boot", pidNS())); ok {
		t.Error("an owner from before a reboot counts as alive")
	}
	if ok, _ := ownerAlive(fmt.Sprintf("%d %d %s %s", 999999999, 1, bootID(), "pid:[1]")); !ok {
		t.Error("an owner in another pid namespace (unknowable here) is taken for ended")
	}
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	label := ownerLabel(cmd.Process.Pid)
	_ = cmd.Wait()
	if ok, why := ownerAlive(label); ok {
		t.Errorf("an ended process counts as alive (%s)", label)
	} else if why == "" {
		t.Error("no reason given")
	}
	for _, bad := range []string{"", "x y", "12", "-1 5 a b", "1 2"} {
		if ok, _ := ownerAlive(bad); ok {
			t.Errorf("label %q counts as alive", bad)
		}
	}
}

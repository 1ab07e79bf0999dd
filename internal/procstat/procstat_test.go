//go:build linux

package procstat

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestRead(t *testing.T) {
	self, err := Read(os.Getpid())
	if err != nil || !self.Running() || self.StartTicks == 0 {
		t.Fatalf("self: %+v, %v", self, err)
	}
	// A child that exited and is not yet reaped is a zombie: not running,
	// with the same start time as while it ran.
	cmd := exec.Command("/bin/true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	var st Stat
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if st, err = Read(cmd.Process.Pid); err != nil || st.State == "Z" {
			break
		}
	}
	if err != nil || st.State != "Z" || st.Running() || st.StartTicks < self.StartTicks {
		t.Errorf("zombie child: %+v, %v", st, err)
	}
	if _, err := Read(1 << 30); err == nil {
		t.Error("a pid that cannot exist was read")
	}
}

package consent

import (
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestScopeOnceEndsWithRequester(t *testing.T) {
	f := newRig(t, "")
	b := f.broker(t, Config{})
	ch := rigWatch(t, b)
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // its own session leader
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	r, _ := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: filepath.Join(f.src, "a")}, Requester{PID: cmd.Process.Pid})
	got, err := b.Decide(rigCtx, r.ID, rigApprove(r))
	if err != nil || got.Decision.Scope != ScopeOnce {
		t.Fatalf("%+v %v", got, err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	e := rigNext(t, ch, ActRevoked)
	if e.Grant.ID != got.Grant || !strings.Contains(e.By, "exited") {
		t.Fatalf("once revoke: %+v by %q", e.Grant, e.By)
	}
}

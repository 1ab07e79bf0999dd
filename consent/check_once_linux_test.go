package consent

import (
	"bufio"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// A once grant lasts as long as the requester's command: the leader of
// its session. A process of the session that asks, the leader's exit
// revokes the grant although the asker lives on.
func TestCheckOnceEndsWithSessionLeader(t *testing.T) {
	e := newBkEnv(t, "")
	e.approver(t)
	leader := exec.Command("sh", "-c", "sleep 120 & echo $!; wait")
	leader.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := leader.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	asker, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(asker, syscall.SIGKILL)
		_ = leader.Process.Kill()
		_ = leader.Wait()
	})
	if got := sessionLeader(asker); got != leader.Process.Pid {
		t.Fatalf("session leader of %d: %d, want %d", asker, got, leader.Process.Pid)
	}

	r, err := e.b.Ask(t.Context(), Ask{Kind: KindFolder, Target: e.path("src/a")}, Requester{PID: asker, Via: "tcp"})
	if err != nil || r.State != StatePending {
		t.Fatalf("%+v %v", r, err)
	}
	got := e.decide(t, r, Decision{Approve: true, Scope: ScopeOnce})
	// Another grant, for the session, stays.
	s := e.pending(t, "src/b", "")
	kept := e.decide(t, s, Decision{Approve: true, Scope: ScopeSession})
	if !alive(leader.Process.Pid) || len(e.app.revokedLabels()) != 0 {
		t.Fatal("revoked while the command runs")
	}

	if err := leader.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = leader.Wait()
	if !alive(asker) {
		t.Fatal("the asker ended with its leader: the test shows nothing")
	}
	bkEventually(t, "the once grant is revoked", func() bool { return slices.Equal(e.app.revokedLabels(), []string{"a"}) })
	gs := e.b.Grants(t.Context())
	if g, _ := bkGrant(gs, got.Grant); g.Desired || g.Effective {
		t.Fatalf("once grant after its command: %+v", g)
	}
	if g, _ := bkGrant(gs, kept.Grant); !g.Desired || !g.Effective {
		t.Fatalf("session grant after the command: %+v", g)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.events {
		if ev.Activity == "revoked" && ev.By != "scope once: pid "+strconv.Itoa(leader.Process.Pid)+" exited" {
			t.Fatalf("revoked by %q", ev.By)
		}
	}
}

package consent

import (
	"path/filepath"
	"testing"
)

// A second broker over the same sandbox (a gateway restarted) lists the
// folder grant the first one put in force, reports it effective, does
// not reuse its label, and revokes it.
func TestAdoptGrantsOfAnEarlierBroker(t *testing.T) {
	f := newRig(t, "")
	first := f.broker(t, Config{})
	rigWatch(t, first)
	r, err := first.Ask(rigCtx, Ask{Kind: KindFolder, Target: filepath.Join(f.src, "a")}, Requester{Via: "tcp"})
	if err != nil || r.State != StatePending {
		t.Fatalf("ask: %+v %v", r, err)
	}
	if r, err = first.Decide(rigCtx, r.ID, rigApprove(r)); err != nil || !r.Effective {
		t.Fatalf("decide: %+v %v", r, err)
	}
	second := f.broker(t, Config{})
	if gs := second.Grants(rigCtx); len(gs) != 0 {
		t.Fatalf("before Adopt: %+v", gs)
	}
	n, err := second.Adopt(rigCtx)
	if err != nil || n != 1 {
		t.Fatalf("adopt: %d %v", n, err)
	}
	gs := second.Grants(rigCtx)
	if len(gs) != 1 || !gs[0].Desired || !gs[0].Effective || gs[0].Target != filepath.Join(f.src, "a") || gs[0].Path != r.Path {
		t.Fatalf("adopted grant: %+v", gs)
	}
	if n, _ := second.Adopt(rigCtx); n != 0 {
		t.Fatalf("adopted twice: %d", n)
	}
	if l := second.label(filepath.Join(f.src, "a")); l == gs[0].Folder.Label {
		t.Fatalf("label %s reused", l)
	}
	g, err := second.Revoke(rigCtx, gs[0].ID, "uid 0", false)
	if err != nil || g.Desired || g.Effective {
		t.Fatalf("revoke: %+v %v", g, err)
	}
	if len(f.app.revoked) != 1 || f.app.revoked[0] != gs[0].Folder.Label {
		t.Fatalf("applier revoked %v", f.app.revoked)
	}
}

package mxc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// provisionOwned provisions and starts an isolation_session with opts.
func provisionOwned(t *testing.T, p *Provider, opts provider.ProvisionOptions) provider.Sandbox {
	t.Helper()
	sb, err := p.Provision(context.Background(), mustPlan(t, p, testPolicy(policy.NetworkHost)), opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return sb
}

// sessions lists the stand-in's sessions (what stands on the "host").
func (h *harness) sessions() []string {
	m, _ := filepath.Glob(filepath.Join(h.wxcState, "sessions", "*.json"))
	return m
}

// Managed lists an owner's sandboxes by the caller's ids; Destroy stops
// and deprovisions a started one and removes its record, and is
// idempotent; a caller's id is not provisioned again while its record
// still stands for a session.
func TestManagedDestroy(t *testing.T) {
	h := newHarness(t)
	p := h.provider(BackendIsolationSession)
	ctx := context.Background()
	a, b := provider.NewID(), provider.NewID()
	provisionOwned(t, p, provider.ProvisionOptions{ID: a, Persistent: true, Owner: "gw/1"})
	provisionOwned(t, p, provider.ProvisionOptions{ID: b, Persistent: true, Owner: "gw/2"})
	if ids, err := p.Managed(ctx, "gw/1"); err != nil || !slices.Equal(ids, []string{a}) {
		t.Fatalf("Managed(gw/1) = %v, %v; want [%s]", ids, err, a)
	}
	if rec := record(t, p, a); rec.Owner != "gw/1" || rec.PhaseState != StateStarted {
		t.Errorf("record: %+v", rec)
	}
	_, err := p.Provision(ctx, mustPlan(t, p, testPolicy(policy.NetworkHost)), provider.ProvisionOptions{ID: a, Persistent: true, Owner: "gw/1"})
	wantCode(t, "provision over a standing record", err, provider.CodeStale)
	if n := h.count("provision"); n != 2 {
		t.Errorf("%d provisions, want 2", n)
	}
	for i := 0; i < 2; i++ {
		if err := p.Destroy(ctx, a); err != nil {
			t.Fatalf("Destroy #%d: %v", i+1, err)
		}
	}
	if _, err := os.Stat(p.store().path(a)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record left: %v", err)
	}
	if ids, _ := p.Managed(ctx, "gw/1"); len(ids) != 0 {
		t.Errorf("Managed after Destroy: %v", ids)
	}
	if got := h.count("stop") + h.count("deprovision"); got != 2 || len(h.sessions()) != 1 {
		t.Errorf("stop+deprovision calls %d, sessions %q", got, h.sessions())
	}
	// The id is free again.
	provisionOwned(t, p, provider.ProvisionOptions{ID: a, Persistent: true, Owner: "gw/1"})
	for _, id := range []string{a, b} {
		if err := p.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if len(h.sessions()) != 0 {
		t.Errorf("sessions left: %q", h.sessions())
	}
	if err := p.Destroy(ctx, "../../etc/passwd"); err != nil {
		t.Errorf("Destroy of an id that is not the provider's: %v", err)
	}
}

// Destroy finishes an interrupted deprovision, and one after a stop whose
// answer was lost (the session stopped, the record still started).
func TestDestroyFinishesInterrupted(t *testing.T) {
	h := newHarness(t)
	p := h.provider(BackendIsolationSession)
	ctx := context.Background()
	sb := provisionOwned(t, p, provider.ProvisionOptions{ID: provider.NewID(), Persistent: true, Owner: "gw"})
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	t.Setenv("WXC_FAIL", "deprovision")
	if err := sb.Deprovision(ctx); err == nil {
		t.Fatal("deprovision did not fail")
	}
	if st := record(t, p, sb.ID()).PhaseState; st != StateDeprovisioning {
		t.Fatalf("record %s", st)
	}
	t.Setenv("WXC_FAIL", "")
	if err := p.Destroy(ctx, sb.ID()); err != nil {
		t.Fatal(err)
	}
	if len(h.sessions()) != 0 {
		t.Errorf("sessions left: %q", h.sessions())
	}

	sb = provisionOwned(t, p, provider.ProvisionOptions{ID: provider.NewID(), Persistent: true, Owner: "gw"})
	t.Setenv("WXC_CRASH_AFTER", "stop") // stopped, and no answer
	if err := sb.Stop(ctx); err == nil {
		t.Fatal("stop answered")
	}
	t.Setenv("WXC_CRASH_AFTER", "")
	if st := record(t, p, sb.ID()).PhaseState; st != StateStarted {
		t.Fatalf("record %s", st)
	}
	if err := p.Destroy(ctx, sb.ID()); err != nil {
		t.Fatal(err)
	}
	if len(h.sessions()) != 0 {
		t.Errorf("sessions left: %q", h.sessions())
	}
}

// An orphan (provision created a session but its id never came back) is
// listed, never provisioned again, and left for the operator: Destroy
// answers an *OrphanError naming the record, which stays until removed.
func TestDestroyLeavesOrphans(t *testing.T) {
	h := newHarness(t)
	p := h.provider(BackendIsolationSession)
	ctx := context.Background()
	id := provider.NewID()
	t.Setenv("WXC_CRASH_AFTER", "provision")
	if _, err := p.Provision(ctx, mustPlan(t, p, testPolicy(policy.NetworkHost)), provider.ProvisionOptions{ID: id, Persistent: true, Owner: "gw"}); err == nil {
		t.Fatal("provision answered")
	}
	t.Setenv("WXC_CRASH_AFTER", "")
	if ids, err := p.Managed(ctx, "gw"); err != nil || !slices.Equal(ids, []string{id}) {
		t.Fatalf("Managed = %v, %v; want the orphan", ids, err)
	}
	for i := 0; i < 2; i++ {
		err := p.Destroy(ctx, id)
		var oe *OrphanError
		if !errors.As(err, &oe) || oe.ID != id || oe.Record != p.store().path(id) || provider.CodeOf(err) != provider.CodeStale {
			t.Fatalf("Destroy #%d of an orphan: %v", i+1, err)
		}
		if !strings.Contains(oe.OrphanRemedy(), oe.Record) {
			t.Errorf("the remedy names no file: %s", oe.OrphanRemedy())
		}
	}
	if rec := record(t, p, id); rec.PhaseState != StateOrphaned {
		t.Errorf("record %s", rec.PhaseState)
	}
	if n := h.count("provision"); n != 1 || len(h.sessions()) != 1 {
		t.Errorf("%d provisions, sessions %q: want the one orphan, never provisioned again", n, h.sessions())
	}
	_, err := p.Provision(ctx, mustPlan(t, p, testPolicy(policy.NetworkHost)), provider.ProvisionOptions{ID: id, Persistent: true, Owner: "gw"})
	wantCode(t, "provision over an orphan", err, provider.CodeStale)
	// The operator removes the agent user and the record.
	for _, f := range append(h.sessions(), p.store().path(id)) {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Destroy(ctx, id); err != nil {
		t.Errorf("Destroy after the operator removed the orphan: %v", err)
	}
	if ids, _ := p.Managed(ctx, "gw"); len(ids) != 0 {
		t.Errorf("Managed: %v", ids)
	}
}

// A started session gone behind Corral's back (MXC has no inspect call)
// is found by Recover's repeated start: stale_id makes the record stale
// and the answer CodeNotFound; Destroy then removes only the record. A
// session that stands is recovered, and execs.
func TestRecoverFindsSessionGone(t *testing.T) {
	h := newHarness(t)
	p := h.provider(BackendIsolationSession)
	ctx := context.Background()
	plan := mustPlan(t, p, testPolicy(policy.NetworkHost))
	live := provisionOwned(t, p, provider.ProvisionOptions{ID: provider.NewID(), Persistent: true, Owner: "gw"})
	gone := provisionOwned(t, p, provider.ProvisionOptions{ID: provider.NewID(), Persistent: true, Owner: "gw"})
	sid := record(t, p, gone.ID()).SandboxID
	if err := os.Remove(filepath.Join(h.wxcState, "sessions", strings.TrimPrefix(sid, "iso:")+".json")); err != nil {
		t.Fatal(err)
	}
	p2 := h.provider(BackendIsolationSession)
	if _, err := p2.Recover(ctx, plan, SessionState(gone.ID())); provider.CodeOf(err) != provider.CodeNotFound {
		t.Errorf("Recover of a session gone: %v, want %s", err, provider.CodeNotFound)
	}
	if rec := record(t, p, gone.ID()); rec.PhaseState != StateStale {
		t.Errorf("record %s, want stale", rec.PhaseState)
	}
	rs, err := p2.Recover(ctx, plan, SessionState(live.ID()))
	if err != nil {
		t.Fatal(err)
	}
	if !rs.(provider.Persistent).Running(ctx) {
		t.Error("the live session is not running")
	}
	if r := run(t, rs, work("outln=$X")); r.err != nil || r.stdout != "abc\n" {
		t.Errorf("exec after recover: %+v", r)
	}
	calls := len(h.phases())
	if err := p2.Destroy(ctx, gone.ID()); err != nil {
		t.Fatal(err)
	}
	if len(h.phases()) != calls {
		t.Errorf("Destroy of a stale record called wxc-exec: %q", h.phases()[calls:])
	}
	if ids, _ := p2.Managed(ctx, "gw"); !slices.Equal(ids, []string{live.ID()}) {
		t.Errorf("Managed: %v", ids)
	}
	if err := p2.Destroy(ctx, live.ID()); err != nil {
		t.Fatal(err)
	}
}

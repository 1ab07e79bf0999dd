//go:build linux

package gateway

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/provider/linux"
	"github.com/corral-sandbox/corral/store"
)

// A record of a provider this gateway does not run is left as it is
// (not destroyed, not marked lost: nothing is known of it here) and named
// in the report.
func TestReconcileLeavesForeignRecords(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "g.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rec, err := st.Insert(store.Sandbox{ID: "corral-0123456789ab", Provider: "elsewhere", Phase: store.PhaseReady, Desired: "running", Workdir: "/w"})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Store: st, LogDir: t.TempDir()})
	rep, err := s.Reconcile(context.Background())
	if err != nil || len(rep.Foreign) != 1 || rep.Foreign[0] != rec.ID {
		t.Fatalf("report %+v, %v", rep, err)
	}
	if got, _ := st.Get(rec.ID); got.Phase != store.PhaseReady || got.Version != rec.Version {
		t.Errorf("the foreign record was changed: %+v", got)
	}
}

// failingDestroy is a provider whose Destroy fails for one id and counts
// the others.
type failingDestroy struct {
	Provider
	bad       string
	destroyed []string
}

func (f *failingDestroy) Destroy(_ context.Context, id string) error {
	if id == f.bad {
		return errors.New("deprovision: sharing violation")
	}
	f.destroyed = append(f.destroyed, id)
	return nil
}

// A sandbox the provider cannot reconcile now is reported in Failed and
// left as recorded; the others are reconciled, and the gateway serves.
func TestReconcileGoesOnPastAFailure(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "g.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var recs []store.Sandbox
	for _, id := range []string{"corral-00000000000a", "corral-00000000000b"} {
		rec, err := st.Insert(store.Sandbox{ID: id, Provider: "linux", Phase: store.PhaseStopping, Desired: "stopped", Workdir: "/w"})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	p := &failingDestroy{Provider: linux.New(), bad: recs[0].ID}
	s := New(Config{Store: st, Providers: []Provider{p}, Instance: InstancePrefix + "0000000000000000", LogDir: t.TempDir()})
	rep, err := s.Reconcile(context.Background())
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if len(rep.Failed) != 1 || rep.Failed[0].ID != recs[0].ID || !strings.Contains(rep.Failed[0].Err, "sharing violation") {
		t.Errorf("failed %+v, want %s's deprovision", rep.Failed, recs[0].ID)
	}
	if got, _ := st.Get(recs[0].ID); got.Phase != store.PhaseStopping {
		t.Errorf("the failed sandbox is %s, want it left stopping", got.Phase)
	}
	if got, _ := st.Get(recs[1].ID); got.Phase != store.PhaseStopped || !slices.Contains(p.destroyed, recs[1].ID) {
		t.Errorf("the other sandbox is %s (destroyed %v), want its stop finished", got.Phase, p.destroyed)
	}
}

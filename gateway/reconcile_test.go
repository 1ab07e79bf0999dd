//go:build linux

package gateway

import (
	"context"
	"path/filepath"
	"testing"

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

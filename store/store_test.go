package store

import (
	"errors"
	"path/filepath"
	"sync"
	"testing"
)

func open(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Migrations run once; what was stored survives a reopen; a database from
// a newer corral is refused.
func TestMigrationsAndPersistence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	s := open(t, path)
	if v, err := s.SchemaVersion(); err != nil || v != len(migrations) {
		t.Fatalf("schema version %d, %v; want %d", v, err, len(migrations))
	}
	if _, err := s.Insert(Sandbox{ID: "a", Provider: "docker", Phase: PhaseProvisioning, Desired: "running", Workdir: "/w"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, path)
	if v, _ := s.SchemaVersion(); v != len(migrations) {
		t.Errorf("reopen changed the schema version to %d", v)
	}
	sb, err := s.Get("a")
	if err != nil || sb.Phase != PhaseProvisioning || sb.Version != 1 || sb.CreatedAt.IsZero() {
		t.Fatalf("after reopen: %+v, %v", sb, err)
	}
	if _, err := s.db.Exec(`INSERT INTO schema_migrations (version, applied_at) VALUES (?, 'x')`, len(migrations)+1); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Open(path); err == nil {
		t.Error("a database from a newer schema was opened")
	}
}

// Updates are compare-and-swap: of concurrent writers at the same version
// exactly one wins; the others get ErrStale. Delete is checked the same way.
func TestCompareAndSwap(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "g.db"))
	if _, err := s.Insert(Sandbox{ID: "a", Provider: "docker", Phase: PhaseProvisioning, Desired: "running", Workdir: "/w"}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins, stale := 0, 0
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Update("a", 1, func(sb *Sandbox) { sb.Phase = PhaseReady })
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, ErrStale):
				stale++
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 || stale != 7 {
		t.Errorf("wins %d, stale %d; want 1 and 7", wins, stale)
	}
	sb, _ := s.Get("a")
	if sb.Version != 2 || sb.Phase != PhaseReady {
		t.Errorf("after the race: %+v", sb)
	}
	if err := s.Delete("a", 1); !errors.Is(err, ErrStale) {
		t.Errorf("delete at an old version: %v", err)
	}
	if err := s.AddEvent("a", "ready", "up"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("a", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("a"); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleted sandbox: %v", err)
	}
	if ev, _ := s.Events("a", 0); len(ev) != 0 {
		t.Errorf("events outlived their sandbox: %+v", ev)
	}
	if err := s.Delete("a", 2); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleting twice: %v", err)
	}
}

func TestEventsInOrder(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "g.db"))
	for _, k := range []string{"created", "ready", "exec", "stopped"} {
		if err := s.AddEvent("b", k, k+"!"); err != nil {
			t.Fatal(err)
		}
	}
	ev, err := s.Events("b", 0)
	if err != nil || len(ev) != 4 || ev[0].Kind != "created" || ev[3].Seq != 4 || ev[3].Message != "stopped!" {
		t.Errorf("events %+v, %v", ev, err)
	}
	if ev, err := s.Events("b", 2); err != nil || len(ev) != 2 || ev[0].Seq != 3 {
		t.Errorf("events after 2: %+v, %v", ev, err)
	}
}

// A policy change is a new revision, stored with the record in one
// transaction and compare-and-swap like any update.
func TestPolicyRevisions(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "g.db"))
	sb, err := s.Insert(Sandbox{ID: "a", Provider: "docker", Phase: PhaseReady, Desired: "running", Workdir: "/w", PolicyYAML: "version: 1\n", PolicyHash: "h1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.SetPolicy("a", sb.Version+1, "x", "h2", "live", func(*Sandbox) {}); !errors.Is(err, ErrStale) {
		t.Errorf("set at a wrong version: %v", err)
	}
	sb, rev, err := s.SetPolicy("a", sb.Version, "version: 1\nnetwork: {mode: proxy}\n", "h2", "live", func(*Sandbox) {})
	if err != nil || rev != 2 || sb.PolicyRevision != 2 || sb.PolicyHash != "h2" || sb.Version != 2 {
		t.Fatalf("set: %+v rev %d %v", sb, rev, err)
	}
	revs, err := s.Revisions("a")
	if err != nil || len(revs) != 2 || revs[0].Applied != "created" || revs[0].PolicyHash != "h1" || revs[1].Applied != "live" {
		t.Errorf("history %+v %v", revs, err)
	}
	if err := s.Delete("a", sb.Version); err != nil {
		t.Fatal(err)
	}
	if revs, _ := s.Revisions("a"); len(revs) != 0 {
		t.Errorf("revisions outlived their sandbox: %+v", revs)
	}
}

// A docker sandbox stored before provider_state existed is recovered by
// id: migration 3 gives it the docker provider's state for that id.
func TestProviderStateMigration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	s := open(t, path)
	// Back to schema 2, as an older corral left it, with one sandbox.
	if _, err := s.db.Exec(`DROP TABLE sandboxes; DROP TABLE events; DROP TABLE policy_revisions; DROP TABLE credentials; DELETE FROM schema_migrations`); err != nil {
		t.Fatal(err)
	}
	for v, m := range migrations[:2] {
		if _, err := s.db.Exec(m); err != nil {
			t.Fatal(err)
		}
		if _, err := s.db.Exec(`INSERT INTO schema_migrations (version, applied_at) VALUES (?, 'x')`, v+1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.db.Exec(`INSERT INTO sandboxes (id, provider, phase, desired, version, policy_yaml, policy_hash, workdir, created_at, updated_at)
		VALUES ('corral-0123456789ab', 'docker', 'ready', 'running', 1, '', 'h', '/w', 'x', 'x')`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, path)
	sb, err := s.Get("corral-0123456789ab")
	if err != nil || sb.ProviderState != `{"id":"corral-0123456789ab"}` {
		t.Fatalf("after migration: state %q, %v", sb.ProviderState, err)
	}
}

// Names are unique (an empty name is none) and lead to their id.
func TestNames(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "g.db"))
	for _, id := range []string{"a", "b", "c", "d"} {
		name := map[string]string{"a": "web", "b": "web", "c": "", "d": ""}[id]
		_, err := s.Insert(Sandbox{ID: id, Provider: "docker", Phase: PhaseReady, Desired: "running", Workdir: "/w", Name: name})
		if want := id == "b"; (err != nil) != want || (want && !errors.Is(err, ErrNameTaken)) {
			t.Errorf("insert %s (name %q): %v", id, name, err)
		}
	}
	if id, err := s.IDByName("web"); err != nil || id != "a" {
		t.Errorf("web is %q, %v", id, err)
	}
	if _, err := s.IDByName(""); !errors.Is(err, ErrNotFound) {
		t.Errorf("the empty name found %v", err)
	}
}

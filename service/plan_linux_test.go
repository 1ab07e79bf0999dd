package service

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/provider"
)

// A grant of / overlaps the sessions' base like any grant above it (it
// once passed: "/"+"/" prefixes no path).
func TestPlanRefusesGrantOverBase(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sessions", "s1")
	rec := &Record{Name: "s1", Dir: dir, Home: filepath.Join(dir, "home"), Mode: ModeUser, UID: os.Getuid(), GID: os.Getgid()}
	if err := os.MkdirAll(rec.Home, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, grant := range []string{"/", filepath.Dir(filepath.Dir(dir))} {
		pol := "version: 1\nfilesystem:\n  read_only: [" + grant + "]\n"
		if err := os.WriteFile(Paths{dir}.Policy(), []byte(pol), 0o600); err != nil {
			t.Fatal(err)
		}
		plan, _, err := Plan(context.Background(), rec, nil)
		if err != nil {
			t.Fatalf("read_only %s: %v", grant, err)
		}
		found := false
		for _, l := range plan.Loss {
			found = found || l.Severity == provider.SeverityError && strings.Contains(l.Message, "overlaps "+filepath.Dir(dir))
		}
		if !found {
			t.Errorf("read_only %s: no error for the grant over the sessions' base: %+v", grant, plan.Loss)
		}
	}
}

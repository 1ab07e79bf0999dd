package store

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// A sandbox's credentials are stored with it, changed by name, and gone
// with it; a rotated, revoked or deleted value is left nowhere in the
// database's files (its pages or its WAL).
func TestCredentials(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	s := open(t, path)
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	old, rotated := "sk-old-value-0123456789abcdef", "sk-rotated-value-fedcba9876543210"
	if _, err := s.Insert(Sandbox{ID: "a", Provider: "linux", Phase: PhaseProvisioning, Desired: "running", Workdir: "/w"},
		Credential{Name: "openai", Placeholder: "sk-PLACEHOLDER", Value: old},
		Credential{Name: "gh", Placeholder: "corral-GH"}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Credentials("a")
	if err != nil || len(got) != 2 || got[0].Name != "gh" || got[1].Value != old || got[1].Placeholder != "sk-PLACEHOLDER" || got[1].Revoked || !got[1].Expires.IsZero() {
		t.Fatalf("credentials: %+v, %v", got, err)
	}
	if err := s.SetCredential("a", "openai", rotated, exp); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Credentials("a")
	if c := got[1]; c.Value != rotated || !c.Expires.Equal(exp) || c.Placeholder != "sk-PLACEHOLDER" {
		t.Fatalf("after set: %+v", c)
	}
	inFiles := func(v string) []string {
		var where []string
		for _, p := range []string{path, path + "-wal", path + "-shm"} {
			if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(v)) {
				where = append(where, filepath.Base(p))
			}
		}
		return where
	}
	if w := inFiles(old); len(w) > 0 {
		t.Errorf("the value before rotation is still in %v", w)
	}
	if err := s.RevokeCredential("a", "openai"); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Credentials("a")
	if c := got[1]; !c.Revoked || c.Value != "" {
		t.Fatalf("after revoke: %+v", c)
	}
	if w := inFiles(rotated); len(w) > 0 {
		t.Errorf("the revoked value is still in %v", w)
	}
	if err := s.SetCredential("a", "nope", "x", time.Time{}); !errors.Is(err, ErrNoCredential) {
		t.Errorf("set of an unknown credential: %v", err)
	}
	// A recreate's policy: a new one added first, the dropped one removed after.
	if err := s.PutCredentials("a", []Credential{{Name: "new", Placeholder: "corral-NEW", Value: "v-new-0123456789"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.KeepCredentials("a", []string{"openai", "new"}); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Credentials("a")
	if len(got) != 2 || got[0].Name != "new" || got[1].Name != "openai" {
		t.Fatalf("after put and keep: %+v", got)
	}
	sb, _ := s.Get("a")
	if err := s.Delete("a", sb.Version); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Credentials("a"); len(got) != 0 {
		t.Errorf("credentials outlived their sandbox: %+v", got)
	}
	if w := inFiles("v-new-0123456789"); len(w) > 0 {
		t.Errorf("a deleted sandbox's value is still in %v", w)
	}
}

// The database holds credential values: it and its WAL are the owner's
// alone, even when an older corral or a copy left them readable.
func TestOwnerOnly(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("file modes are POSIX; on Windows the gateway makes the store's directory owner-only (cmd/corral makeGatewayDir, winfile.MakePrivateDir)")
	}
	path := filepath.Join(t.TempDir(), "g.db")
	s := open(t, path)
	if _, err := s.Insert(Sandbox{ID: "a", Provider: "linux", Phase: PhaseReady, Desired: "running", Workdir: "/w"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644) // an empty WAL and shm are valid
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s = open(t, path)
	if _, err := s.Get("a"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s is %04o, want 0600", filepath.Base(p), fi.Mode().Perm())
		}
	}
}

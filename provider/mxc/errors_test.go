package mxc

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// Errors keep their cause: a corrupt record its JSON error, a lock given
// up its context's, a missing wxc-exec the file system's.
func TestErrorsKeepCause(t *testing.T) {
	st := store{dir: t.TempDir()}
	id := newLocalID()
	if err := os.WriteFile(st.path(id), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := st.read(id)
	var syn *json.SyntaxError
	if provider.CodeOf(err) != provider.CodeInternal || !errors.As(err, &syn) {
		t.Errorf("corrupt record: %v, want internal keeping the *json.SyntaxError", err)
	}

	lk, err := st.lock(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := st.lock(ctx, id); provider.CodeOf(err) != provider.CodeStale || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("busy lock: %v, want stale keeping context.DeadlineExceeded", err)
	}

	p := New(Config{WxcExec: filepath.Join(t.TempDir(), "wxc-exec")}, t.TempDir())
	if _, err := p.Provision(context.Background(), mustPlan(t, p, testPolicy(policy.NetworkNone)), provider.ProvisionOptions{}); provider.CodeOf(err) != provider.CodeUnavailable || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing wxc-exec: %v, want unavailable keeping fs.ErrNotExist", err)
	}
}

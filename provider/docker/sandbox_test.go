//go:build linux

package docker

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// Recover says why it cannot reattach and keeps the cause: a saved plan
// that is not there is not_found (the sandbox is gone) with
// fs.ErrNotExist; one that cannot be read is not not_found (nothing is
// known, so the caller must not destroy on a guess) and keeps its errno;
// a container the daemon does not know is not_found with the daemon's
// error.
func TestRecoverKeepsCause(t *testing.T) {
	p := needDocker(t)
	ctx := context.Background()
	id := provider.NewID()
	state := (&Sandbox{id: id}).State()
	_, err := p.Recover(ctx, nil, state)
	if provider.CodeOf(err) != provider.CodeNotFound || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no saved plan: %v (code %s), want not_found keeping fs.ErrNotExist", err, provider.CodeOf(err))
	}

	if _, err := makeStateBase(managedBase()); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(managedBase(), id)
	t.Cleanup(func() { removeState(dir) })
	if err := os.MkdirAll(filepath.Join(dir, "plan.json"), 0o700); err != nil {
		t.Fatal(err)
	}
	_, err = p.Recover(ctx, nil, state)
	var errno syscall.Errno
	if c := provider.CodeOf(err); c == provider.CodeNotFound || c == provider.CodeInternal || !errors.As(err, &errno) || errno != syscall.EISDIR {
		t.Errorf("unreadable saved plan: %v (code %s), want a code other than not_found keeping EISDIR", err, c)
	}

	if err := os.Remove(filepath.Join(dir, "plan.json")); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(savedPlan{Spec: &Spec{}})
	if err := os.WriteFile(filepath.Join(dir, "plan.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = p.Recover(ctx, nil, state)
	if provider.CodeOf(err) != provider.CodeNotFound || !cerrdefs.IsNotFound(err) {
		t.Errorf("no container: %v (code %s), want not_found keeping the daemon's not-found error", err, provider.CodeOf(err))
	}
}

// Destroy of a persistent sandbox whose process is gone (a gateway that
// crashed, then reconciles) removes the placeholders its container had
// mounted: nobody else would, and empty .git, .bashrc ... would stay in
// the person's tree.
func TestDestroyRemovesPlaceholders(t *testing.T) {
	p := needSandboxes(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wd := t.TempDir()
	if err := os.Chmod(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(wd, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	r, err := policy.Default().Resolve(policy.Context{Home: t.TempDir(), Workdir: wd, Environ: []string{"PATH=" + policy.DefaultPATH}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Placeholders) == 0 {
		t.Fatal("the default policy makes no placeholders in an empty workdir")
	}
	plan, loss := p.Map(ctx, r)
	if loss.HasErrors() {
		t.Fatal(provider.Rejected(loss))
	}
	raw, err := p.Provision(ctx, plan, provider.ProvisionOptions{Persistent: true, Owner: "docker-test-" + provider.NewID()})
	if err != nil {
		t.Fatal(err)
	}
	sb := raw.(*Sandbox)
	t.Cleanup(func() { _ = sb.Deprovision(context.Background()) })
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ph := r.Placeholders[0].Path
	if _, err := os.Lstat(ph); err != nil {
		t.Fatalf("placeholder %s while the sandbox runs: %v", ph, err)
	}
	// The process ends: its descriptors (locks, lifeline) go, nothing is
	// removed.
	sb.placeholders.Close()
	sb.lifeline.Close()
	if err := New().Destroy(ctx, sb.ID()); err != nil {
		t.Fatal(err)
	}
	for _, x := range r.Placeholders {
		if _, err := os.Lstat(x.Path); err == nil {
			t.Errorf("placeholder %s (%s) left behind by Destroy", x.Path, x.Field)
		}
	}
}

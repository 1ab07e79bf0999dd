package web

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/corral-sandbox/corral/consent"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// rig is a real consent broker for sandbox sb-1 on a hub, behind the
// approvers' API (consent.ApproverHandler, approver "web page"), putting
// grants in force through a fakeApplier. Its policy's ceiling is
// consent.folders.ask ["~/src/**"] with access rw, in a temporary home.
type rig struct {
	broker  *consent.Broker
	applier *fakeApplier
	api     http.Handler
	src     string // the home's src: what may be asked
	// cookies records any Cookie header the API was handed.
	mu      sync.Mutex
	cookies []string
}

// noConsentOnWindows: policy refuses a Windows policy's consent section.
const noConsentOnWindows = "consent is not available for Windows policies (policy refuses the section): no broker runs on Windows"

func newRig(t *testing.T) *rig {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip(noConsentOnWindows)
	}
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(root, "home")
	rg := &rig{applier: &fakeApplier{status: map[string]provider.GrantStatus{}}, src: filepath.Join(home, "src")}
	for _, d := range []string{filepath.Join(home, "project"), rg.src} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p, err := policy.Parse([]byte("version: 1\nconsent:\n  folders: {ask: [\"~/src/**\"], access: rw}\n"), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Resolve(policy.Context{Home: home, Workdir: filepath.Join(home, "project")})
	if err != nil {
		t.Fatal(err)
	}
	rg.broker = consent.New(consent.Config{Sandbox: "sb-1", Policy: res, Applier: rg.applier})
	t.Cleanup(rg.broker.Close)
	hub := consent.NewHub()
	hub.Add(rg.broker)
	api := consent.ApproverHandler(hub, func(*http.Request) string { return "web page" })
	rg.api = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c := r.Header.Get("Cookie"); c != "" {
			rg.mu.Lock()
			rg.cookies = append(rg.cookies, c)
			rg.mu.Unlock()
		}
		api.ServeHTTP(w, r)
	})
	return rg
}

// folder makes directory name under src (any byte but NUL and '/').
func (rg *rig) folder(t *testing.T, name string) string {
	t.Helper()
	d := filepath.Join(rg.src, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// ask asks the broker for folder name (made under src) as the workload
// would; it must come out pending (an approver is connected).
func (rg *rig) ask(t *testing.T, name string, access policy.Access, reason string, who consent.Requester) consent.Request {
	t.Helper()
	q, err := rg.broker.Ask(context.Background(), consent.Ask{Kind: consent.KindFolder, Target: rg.folder(t, name), Access: access, Reason: reason}, who)
	if err != nil {
		t.Fatal(err)
	}
	if q.State != consent.StatePending {
		t.Fatalf("asked for %s: %s (%s), want pending", name, q.State, q.Detail)
	}
	return q
}

// get is request id as the broker has it now.
func (rg *rig) get(t *testing.T, id string) consent.Request {
	t.Helper()
	q, ok := rg.broker.Get(id)
	if !ok {
		t.Fatalf("no request %s", id)
	}
	return q
}

// fakeApplier records what it is asked to apply, reports it in force,
// and reads back what it applied and revoked (a revoked grant held by
// pid 812 fd 3).
type fakeApplier struct {
	mu      sync.Mutex
	applied []provider.FolderGrant
	status  map[string]provider.GrantStatus
	order   []string
}

func (a *fakeApplier) Mode(consent.Kind) provider.ConsentMode { return provider.ConsentLive }

func (a *fakeApplier) ApplyFolder(_ context.Context, g provider.FolderGrant) (provider.GrantStatus, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.applied = append(a.applied, g)
	slot := provider.GrantSlotRW
	if g.ReadOnly {
		slot = provider.GrantSlotRO
	}
	st := provider.GrantStatus{Label: g.Label, Source: g.Source, Path: slot + "/" + g.Label, ReadOnly: g.ReadOnly,
		State: provider.GrantEffective, MountIDs: []int{400 + len(a.applied)}, Locked: true}
	a.status[g.Label] = st
	a.order = append(a.order, g.Label)
	return st, nil
}

func (a *fakeApplier) RevokeFolder(_ context.Context, label string, kill bool) (provider.GrantStatus, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.status[label]
	st.State, st.MountIDs = provider.GrantHeld, nil
	st.Holders = []provider.Holder{{PID: 812, FD: 3, Path: st.Path + "/a.txt", Exe: "/usr/bin/cat", Killed: kill}}
	a.status[label] = st
	return st, nil
}

func (a *fakeApplier) FolderGrants(context.Context) ([]provider.GrantStatus, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []provider.GrantStatus
	for _, l := range a.order {
		st := a.status[l]
		st.Holders = nil // the broker keeps those reported at revoke
		out = append(out, st)
	}
	return out, nil
}

func (a *fakeApplier) AllowHost(context.Context, string, int) (int, error)    { return 1, nil }
func (a *fakeApplier) DisallowHost(context.Context, string, int) (int, error) { return 2, nil }

func (a *fakeApplier) appliedGrants() []provider.FolderGrant {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]provider.FolderGrant(nil), a.applied...)
}

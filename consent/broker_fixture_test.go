package consent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// rig is a temp home with ~/src/{a,b,c} (~/src/b/secret denied by the
// policy), a workdir ~/project, and a policy whose consent section lets
// the workload ask for ~/src/** read-write and *.example.com:443.
type rig struct {
	home, src string
	r         *policy.Resolved
	app       *rigApplier
	events    *rigLog
}

const rigPolicy = `version: 1
filesystem:
  deny: [~/src/b/secret]
network:
  mode: proxy
consent:
  folders:
    ask: ["~/src/**"]
    never: [~/src/c/never]
    access: rw
  hosts:
    ask: ["*.example.com:443"]
    never: [bad.example.com]
  timeout: 10m
  max_pending: 5
  rate: {burst: 5, per: 1m}
`

var rigCtx = context.Background()

// noConsentOnWindows: policy refuses a Windows policy's consent section.
const noConsentOnWindows = "consent is not available for Windows policies (policy refuses the section): no broker runs on Windows"

func newRig(t testing.TB, src string) *rig {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip(noConsentOnWindows)
	}
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := &rig{home: filepath.Join(root, "home"), app: newRigApplier(), events: &rigLog{}}
	f.src = filepath.Join(f.home, "src")
	for _, d := range []string{"project", "src/a/sub", "src/b/secret", "src/c/never", "src/Weird name ünï"} {
		if err := os.MkdirAll(filepath.Join(f.home, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if src == "" {
		src = rigPolicy
	}
	p, err := policy.Parse([]byte(src), "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f.r, err = p.Resolve(policy.Context{Home: f.home, Workdir: filepath.Join(f.home, "project")})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// broker is a broker over f with cfg's Standing and Now when set.
func (f *rig) broker(t *testing.T, cfg Config) *Broker {
	t.Helper()
	cfg.Sandbox, cfg.Policy, cfg.Applier, cfg.Log = "sb-1", f.r, f.app, f.events.add
	b := New(cfg)
	t.Cleanup(b.Close)
	return b
}

// rigWatch registers an approver on b for the test's life.
func rigWatch(t *testing.T, b *Broker) <-chan Event {
	ch, cancel := b.Watch()
	t.Cleanup(cancel)
	return ch
}

// rigNext is the next event of ch with activity act (others skipped),
// or a failure after 10 s (a deadline for a broken broker, not a timing
// assertion).
func rigNext(t *testing.T, ch <-chan Event, act string) Event {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case e := <-ch:
			if e.Activity == act {
				return e
			}
		case <-deadline:
			t.Fatalf("no %s event", act)
		}
	}
}

func rigApprove(r Request) Decision {
	return Decision{Approve: true, Digest: r.Digest, By: "uid 1000"}
}

type rigLog struct {
	mu sync.Mutex
	ev []Event
}

func (l *rigLog) add(e Event) {
	l.mu.Lock()
	l.ev = append(l.ev, e)
	l.mu.Unlock()
}

func (l *rigLog) activities() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, e := range l.ev {
		out = append(out, e.Activity)
	}
	return out
}

// rigApplier records what the broker asks of the sandbox and answers as
// a live sandbox would (effective, mount ids), or with applyErr / state.
type rigApplier struct {
	mu       sync.Mutex
	mode     provider.ConsentMode
	applied  []provider.FolderGrant
	revoked  []string
	hosts    []string
	unhosts  []string
	grants   map[string]provider.GrantStatus
	applyErr error
	state    provider.GrantState // what ApplyFolder reports; "" effective
	holders  []provider.Holder   // what RevokeFolder reports
	rev      int
}

func newRigApplier() *rigApplier {
	return &rigApplier{mode: provider.ConsentLive, grants: map[string]provider.GrantStatus{}}
}

func (a *rigApplier) Mode(Kind) provider.ConsentMode {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mode
}

func (a *rigApplier) ApplyFolder(ctx context.Context, g provider.FolderGrant) (provider.GrantStatus, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.applied = append(a.applied, g)
	if a.applyErr != nil {
		return provider.GrantStatus{}, a.applyErr
	}
	slot := provider.GrantSlotRW
	if g.ReadOnly {
		slot = provider.GrantSlotRO
	}
	st := provider.GrantStatus{Label: g.Label, Source: g.Source, Path: slot + "/" + g.Label, ReadOnly: g.ReadOnly,
		State: provider.GrantEffective, MountIDs: []int{100 + len(a.applied)}, Locked: true}
	if a.state != "" {
		st.State = a.state
	}
	a.grants[g.Label] = st
	return st, nil
}

func (a *rigApplier) RevokeFolder(ctx context.Context, label string, kill bool) (provider.GrantStatus, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st, ok := a.grants[label]
	if !ok {
		return provider.GrantStatus{}, errors.New("no grant " + label)
	}
	a.revoked = append(a.revoked, label)
	st.State, st.MountIDs = provider.GrantRevoked, nil
	for _, h := range a.holders {
		h.Killed = kill
		st.Holders = append(st.Holders, h)
	}
	if len(st.Holders) > 0 && !kill {
		st.State = provider.GrantHeld
	}
	a.grants[label] = st
	return st, nil
}

func (a *rigApplier) FolderGrants(ctx context.Context) ([]provider.GrantStatus, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []provider.GrantStatus
	for _, st := range a.grants {
		out = append(out, st)
	}
	return out, nil
}

func (a *rigApplier) AllowHost(ctx context.Context, host string, port int) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rev++
	a.hosts = append(a.hosts, host)
	return a.rev, nil
}

func (a *rigApplier) DisallowHost(ctx context.Context, host string, port int) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rev++
	a.unhosts = append(a.unhosts, host)
	return a.rev, nil
}

func (a *rigApplier) appliedN() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.applied)
}

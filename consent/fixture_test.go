package consent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// fakeApplier records every call; it can fail, report a grant that is
// not effective, or hold ApplyFolder until released.
type fakeApplier struct {
	mu    sync.Mutex
	modes map[Kind]provider.ConsentMode // missing: live
	// applyErr fails ApplyFolder and AllowHost; revokeErr RevokeFolder
	// and DisallowHost; readErr FolderGrants.
	applyErr, revokeErr, readErr error
	// shows is the state ApplyFolder reads back ("" effective).
	shows provider.GrantState
	// hold, when set, makes ApplyFolder signal applying and wait for it to
	// be closed.
	hold     chan struct{}
	applying chan struct{}
	holders  []provider.Holder // RevokeFolder reports these

	modeCalls  int
	folders    []provider.FolderGrant
	revoked    []string // labels
	kills      []bool
	allowed    []string // host:port
	disallowed []string
	reads      int
	status     map[string]provider.GrantStatus // by label, what FolderGrants reads back
}

func newFake() *fakeApplier { return &fakeApplier{status: map[string]provider.GrantStatus{}} }

func (f *fakeApplier) Mode(k Kind) provider.ConsentMode {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.modeCalls++
	if m, ok := f.modes[k]; ok {
		return m
	}
	return provider.ConsentLive
}

func (f *fakeApplier) ApplyFolder(ctx context.Context, g provider.FolderGrant) (provider.GrantStatus, error) {
	f.mu.Lock()
	f.folders = append(f.folders, g)
	hold, applying := f.hold, f.applying
	f.mu.Unlock()
	if hold != nil {
		applying <- struct{}{}
		<-hold
	}
	if err := ctx.Err(); err != nil {
		return provider.GrantStatus{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.applyErr != nil {
		return provider.GrantStatus{}, f.applyErr
	}
	slot := provider.GrantSlotRW
	if g.ReadOnly {
		slot = provider.GrantSlotRO
	}
	st := provider.GrantStatus{Label: g.Label, Source: g.Source, Path: slot + "/" + g.Label, ReadOnly: g.ReadOnly,
		State: provider.GrantEffective, MountIDs: []int{100 + len(f.folders)}, Locked: true}
	if f.shows != "" {
		st.State = f.shows
	}
	f.status[g.Label] = st
	return st, nil
}

func (f *fakeApplier) RevokeFolder(_ context.Context, label string, kill bool) (provider.GrantStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.revoked = append(f.revoked, label)
	f.kills = append(f.kills, kill)
	if f.revokeErr != nil {
		return provider.GrantStatus{}, f.revokeErr
	}
	st := f.status[label]
	st.State, st.Holders = provider.GrantRevoked, nil
	if len(f.holders) > 0 {
		st.State = provider.GrantHeld
		for _, h := range f.holders {
			h.Killed = kill
			st.Holders = append(st.Holders, h)
		}
	}
	f.status[label] = st
	return st, nil
}

func (f *fakeApplier) FolderGrants(context.Context) ([]provider.GrantStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if f.readErr != nil {
		return nil, f.readErr
	}
	var out []provider.GrantStatus
	for _, st := range f.status {
		out = append(out, st)
	}
	return out, nil
}

func (f *fakeApplier) AllowHost(_ context.Context, host string, port int) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.applyErr != nil {
		return 0, f.applyErr
	}
	f.allowed = append(f.allowed, hostPortString(host, port))
	return len(f.allowed) + len(f.disallowed), nil
}

func (f *fakeApplier) DisallowHost(_ context.Context, host string, port int) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.revokeErr != nil {
		return 0, f.revokeErr
	}
	f.disallowed = append(f.disallowed, hostPortString(host, port))
	return len(f.allowed) + len(f.disallowed), nil
}

func hostPortString(host string, port int) string {
	return host + ":" + itoa(port)
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// touched is whether anything but Mode was called.
func (f *fakeApplier) touched() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.folders)+len(f.revoked)+len(f.allowed)+len(f.disallowed) > 0
}

func (f *fakeApplier) applied() []provider.FolderGrant {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]provider.FolderGrant(nil), f.folders...)
}

func (f *fakeApplier) revokedLabels() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.revoked...)
}

func (f *fakeApplier) set(fn func(*fakeApplier)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// env is a broker over a real resolved policy in a temp home: ~/src/a,
// ~/src/b, ~/src/never (consent.folders.never), ~/src/secret
// (filesystem.deny), ~/other (outside folders.ask).
type env struct {
	home string
	pol  *policy.Resolved
	app  *fakeApplier
	b    *Broker

	mu     sync.Mutex
	events []Event
}

// baseConsent is the consent section of every fixture, before the
// per-test lines.
const basePolicy = `filesystem:
  deny: [~/src/secret]
network:
  mode: proxy
consent:
  folders:
    ask: ["~/src/**"]
    never: [~/src/never]
    access: rw
  hosts:
    ask: ["*.a.test:443"]
    never: [bad.a.test]
`

// newEnv builds the fixture; extra is appended to the consent section
// (indented two spaces: "  timeout: 200ms\n").
func newEnv(t *testing.T, extra string) *env {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(root, "home")
	for _, d := range []string{"project", "src/a", "src/b", "src/never", "src/secret", "other"} {
		if err := os.MkdirAll(filepath.Join(home, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p, err := policy.Parse([]byte("version: 1\n"+basePolicy+extra), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.Resolve(policy.Context{Home: home, Workdir: filepath.Join(home, "project")})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{home: home, pol: r, app: newFake()}
	e.b = New(Config{Sandbox: "sb-1", Policy: r, Applier: e.app, Log: e.log})
	t.Cleanup(e.b.Close)
	return e
}

func (e *env) log(ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, ev)
}

// activities are the logged activities of request id, in order.
func (e *env) activities(id string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.events {
		if ev.Request != nil && ev.Request.ID == id {
			out = append(out, ev.Activity)
		}
	}
	return out
}

// count is how many logged events have activity a.
func (e *env) count(a string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.events {
		if ev.Activity == a {
			n++
		}
	}
	return n
}

func (e *env) path(rel string) string { return filepath.Join(e.home, rel) }

// approver registers a watcher for the test's length; the channel is
// drained so it never drops.
func (e *env) approver(t *testing.T) {
	t.Helper()
	ch, cancel := e.b.Watch()
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-ch:
			case <-done:
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); close(done) })
}

func (e *env) ask(t *testing.T, kind Kind, target string, access policy.Access, reason string) Request {
	t.Helper()
	r, err := e.b.Ask(context.Background(), Ask{Kind: kind, Target: target, Access: access, Reason: reason}, Requester{Via: "test"})
	if err != nil {
		t.Fatalf("Ask(%s %s %s): %v", kind, target, access, err)
	}
	return r
}

func (e *env) askFolder(t *testing.T, rel string, access policy.Access) Request {
	t.Helper()
	return e.ask(t, KindFolder, e.path(rel), access, "")
}

// pending asks for folder rel with an approver connected and wants it
// pending.
func (e *env) pending(t *testing.T, rel string, access policy.Access) Request {
	t.Helper()
	r := e.askFolder(t, rel, access)
	if r.State != StatePending {
		t.Fatalf("ask %s: state %s (%s), want pending", rel, r.State, r.Detail)
	}
	return r
}

func (e *env) decide(t *testing.T, r Request, d Decision) Request {
	t.Helper()
	if d.Digest == "" {
		d.Digest = r.Digest
	}
	got, err := e.b.Decide(context.Background(), r.ID, d)
	if err != nil {
		t.Fatalf("Decide(%s): %v", r.ID, err)
	}
	return got
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// eventually polls cond until it holds or 10 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func grantByID(gs []Grant, id string) (Grant, bool) {
	for _, g := range gs {
		if g.ID == id {
			return g, true
		}
	}
	return Grant{}, false
}

var errApply = errors.New("mount failed: EPERM")

func hasAll(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}

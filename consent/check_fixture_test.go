package consent

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// bkApplier is the rig's applier (rigApplier: a live sandbox's answers,
// its records) with what these tests need besides: a count of Mode
// calls, a read-back or revoke that fails, a host grant that fails, and
// an ApplyFolder held until released.
type bkApplier struct {
	*rigApplier
	// revokeErr fails RevokeFolder and DisallowHost, readErr
	// FolderGrants, hostErr AllowHost.
	revokeErr, readErr, hostErr error
	// hold, when set, makes ApplyFolder signal applying and wait until
	// hold is closed.
	hold      chan struct{}
	applying  chan struct{}
	modeCalls int
}

func newBkApplier() *bkApplier { return &bkApplier{rigApplier: newRigApplier()} }

func (f *bkApplier) Mode(k Kind) provider.ConsentMode {
	f.mu.Lock()
	f.modeCalls++
	f.mu.Unlock()
	return f.rigApplier.Mode(k)
}

func (f *bkApplier) ApplyFolder(ctx context.Context, g provider.FolderGrant) (provider.GrantStatus, error) {
	f.mu.Lock()
	hold, applying := f.hold, f.applying
	f.mu.Unlock()
	if hold != nil {
		applying <- struct{}{}
		<-hold
	}
	if err := ctx.Err(); err != nil {
		return provider.GrantStatus{}, err
	}
	return f.rigApplier.ApplyFolder(ctx, g)
}

// fails is err, read under the lock.
func (f *bkApplier) fails(err *error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return *err
}

func (f *bkApplier) RevokeFolder(ctx context.Context, label string, kill bool) (provider.GrantStatus, error) {
	if err := f.fails(&f.revokeErr); err != nil {
		return provider.GrantStatus{}, err
	}
	return f.rigApplier.RevokeFolder(ctx, label, kill)
}

func (f *bkApplier) FolderGrants(ctx context.Context) ([]provider.GrantStatus, error) {
	if err := f.fails(&f.readErr); err != nil {
		return nil, err
	}
	return f.rigApplier.FolderGrants(ctx)
}

func (f *bkApplier) AllowHost(ctx context.Context, host string, port int) (int, error) {
	if err := f.fails(&f.hostErr); err != nil {
		return 0, err
	}
	return f.rigApplier.AllowHost(ctx, host, port)
}

func (f *bkApplier) DisallowHost(ctx context.Context, host string, port int) (int, error) {
	if err := f.fails(&f.revokeErr); err != nil {
		return 0, err
	}
	return f.rigApplier.DisallowHost(ctx, host, port)
}

// touched is whether anything but Mode was called.
func (f *bkApplier) touched() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.applied)+len(f.revoked)+len(f.hosts)+len(f.unhosts) > 0
}

// folders are the grants ApplyFolder was given.
func (f *bkApplier) folders() []provider.FolderGrant {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]provider.FolderGrant(nil), f.applied...)
}

// revokedLabels are the labels revoked, in order.
func (f *bkApplier) revokedLabels() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.revoked...)
}

// set changes f under its lock.
func (f *bkApplier) set(fn func(*bkApplier)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// bkEnv is a broker over a real resolved policy in a temp home: ~/src/a,
// ~/src/b, ~/src/never (consent.folders.never), ~/src/secret
// (filesystem.deny), ~/other (outside folders.ask).
type bkEnv struct {
	home string
	pol  *policy.Resolved
	app  *bkApplier
	b    *Broker

	mu     sync.Mutex
	events []Event
}

// bkPolicy is every fixture's policy, its consent section last (a test
// appends lines to it).
const bkPolicy = `filesystem:
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

// newBkEnv builds the fixture; extra is appended to the consent section
// (indented two spaces: "  timeout: 200ms\n").
func newBkEnv(t *testing.T, extra string) *bkEnv {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip(noConsentOnWindows)
	}
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
	p, err := policy.Parse([]byte("version: 1\n"+bkPolicy+extra), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.Resolve(policy.Context{Home: home, Workdir: filepath.Join(home, "project")})
	if err != nil {
		t.Fatal(err)
	}
	e := &bkEnv{home: home, pol: r, app: newBkApplier()}
	e.b = New(Config{Sandbox: "sb-1", Policy: r, Applier: e.app, Log: e.log})
	t.Cleanup(e.b.Close)
	return e
}

func (e *bkEnv) log(ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, ev)
}

// activities are the logged activities of request id, in order.
func (e *bkEnv) activities(id string) []string {
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
func (e *bkEnv) count(a string) int {
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

func (e *bkEnv) path(rel string) string { return filepath.Join(e.home, rel) }

// approver registers a watcher for the test's length; the channel is
// drained so it never drops.
func (e *bkEnv) approver(t *testing.T) {
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

func (e *bkEnv) ask(t *testing.T, kind Kind, target string, access policy.Access, reason string) Request {
	t.Helper()
	r, err := e.b.Ask(context.Background(), Ask{Kind: kind, Target: target, Access: access, Reason: reason}, Requester{Via: "test"})
	if err != nil {
		t.Fatalf("Ask(%s %s %s): %v", kind, target, access, err)
	}
	return r
}

func (e *bkEnv) askFolder(t *testing.T, rel string, access policy.Access) Request {
	t.Helper()
	return e.ask(t, KindFolder, e.path(rel), access, "")
}

// pending asks for folder rel with an approver connected and wants it
// pending.
func (e *bkEnv) pending(t *testing.T, rel string, access policy.Access) Request {
	t.Helper()
	r := e.askFolder(t, rel, access)
	if r.State != StatePending {
		t.Fatalf("ask %s: state %s (%s), want pending", rel, r.State, r.Detail)
	}
	return r
}

func (e *bkEnv) decide(t *testing.T, r Request, d Decision) Request {
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

// waitAsync runs Wait(id, timeout) in the background: the channel gets
// its answer.
func (e *bkEnv) waitAsync(t *testing.T, ctx context.Context, id string, timeout time.Duration) <-chan Request {
	ch := make(chan Request, 1)
	go func() {
		got, err := e.b.Wait(ctx, id, timeout)
		if err != nil {
			t.Error(err)
		}
		ch <- got
	}()
	return ch
}

// decideAsync runs an approval of r in the background: the channel gets
// its answer.
func (e *bkEnv) decideAsync(r Request) <-chan Request {
	ch := make(chan Request, 1)
	go func() {
		got, _ := e.b.Decide(context.Background(), r.ID, Decision{Approve: true, Digest: r.Digest})
		ch <- got
	}()
	return ch
}

// bkEventually polls cond until it holds or 10 s pass.
func bkEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func bkGrant(gs []Grant, id string) (Grant, bool) {
	for _, g := range gs {
		if g.ID == id {
			return g, true
		}
	}
	return Grant{}, false
}

func bkHasAll(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}

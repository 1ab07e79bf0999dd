//go:build linux

package linux

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/provider/providertest"
)

// A credential exposed as a file: the sandbox sees a read-only file
// holding the placeholder, which nothing inside can change, move,
// replace or unmount, in directories made in the sandbox's own tree
// (the root, /tmp, the private home), never on the host; the file Corral
// wrote is in the state directory, out of every grant's reach, and goes
// with it. The variable holds the placeholder and the value is nowhere
// inside. Real sandboxes; TestCredentialUnprivileged runs these again as
// corral-test.

// credSandbox is a sandbox's credentials: where their files go, their
// placeholders, and the value the caller's environment holds.
type credSandbox struct {
	plan   *provider.Plan
	bin    string            // the probe binary, granted read-only
	files  map[string]string // path inside -> placeholder
	byName map[string]string // credential name -> placeholder
	env    string            // OPENAI_API_KEY's placeholder
	value  string            // the real value, in this process's environment only
	top    string            // the directory below /run the first file's parents start at, absent on the host
	wd     string
	home   string
}

// credPlan maps a policy that inspects egress with three credentials
// exposed as files, as policy.Resolve makes them: one below /run, absent
// in the sandbox's tree, one in the private home (~), one in /tmp, each
// in directories the sandbox lacks; openai's also in OPENAI_API_KEY,
// the variable its value is read from. The real value is in the
// caller's environment (and this process's), where nothing may take it
// from.
func credPlan(t *testing.T) *credSandbox {
	t.Helper()
	wd, home := workdirs(t, 65534)
	bin := probeBinary(t)
	id := strings.TrimPrefix(provider.NewID(), "corral-")
	c := &credSandbox{bin: bin, files: map[string]string{}, byName: map[string]string{}, wd: wd, home: home, top: "/run/corral-cred-" + id,
		value: "real-value-" + id}
	t.Setenv("OPENAI_API_KEY", c.value)
	pol := policy.Default()
	for _, l := range New().Capabilities(context.Background()).Layers {
		if l.State == provider.LayerUnavailable {
			pol.Layers[l.Layer] = policy.Optional
		}
	}
	inspecting(pol)
	grantProbe(bin)(pol)
	for _, f := range []struct{ name, file, env string }{
		{"openai", c.top + "/secrets/openai", "OPENAI_API_KEY"},
		{"github", "~/.config/gh/token", ""},
		{"npm", "/tmp/cred-" + id + "/npm", ""},
	} {
		pol.Credentials = append(pol.Credentials, policy.Credential{Name: f.name, Source: policy.CredentialSource{Env: "OPENAI_API_KEY"},
			Expose: policy.CredentialExpose{Env: f.env, File: f.file}, Endpoints: []policy.CredentialEndpoint{{Host: "api.allowed.test"}}})
	}
	r, err := pol.Resolve(policy.Context{Home: home, Workdir: wd, Environ: []string{"PATH=" + policy.DefaultPATH, "LANG=C", "OPENAI_API_KEY=" + c.value}})
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range r.Credentials {
		c.files[rc.File] = rc.Placeholder
		c.byName[rc.Name] = rc.Placeholder
	}
	c.env = c.byName["openai"]
	plan, loss := New().Map(context.Background(), r)
	if loss.HasErrors() {
		t.Fatal(provider.Rejected(loss))
	}
	c.plan = plan
	providertest.CheckCredentialLoss(t, loss, c.files)
	return c
}

// checkInside runs the credential probe in sb (one exec: a per-run
// sandbox runs one) and checks what it saw; the state directory, dir
// in it and StateBase must be out of its sight.
func checkInside(t *testing.T, sb provider.Sandbox, c *credSandbox, dir string) {
	t.Helper()
	paths := slices.Sorted(maps.Keys(c.files))
	r := run(t, sb, providertest.CredentialProbeArgs(c.bin, paths, []string{StateBase(), dir, filepath.Join(dir, "credential-openai")})...)
	if r.err != nil || r.st.Code != 0 {
		t.Fatalf("the probe: %+v %v %s", r.st, r.err, r.stderr)
	}
	providertest.CheckCredentialProbe(t, r.stdout, c.files, "OPENAI_API_KEY="+c.env, c.value)
}

// hostClean fails the test if the host has any of the credential files'
// directories (they are made inside only) or a file the sandbox made in
// the workdir or home.
func hostClean(t *testing.T, c *credSandbox, wdBefore []string) {
	t.Helper()
	for _, p := range []string{c.top, filepath.Join(c.home, ".config")} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists on the host: %v", p, err)
		}
	}
	for f := range c.files {
		if strings.HasPrefix(f, "/tmp/") {
			if _, err := os.Lstat(filepath.Dir(f)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s exists on the host: %v", filepath.Dir(f), err)
			}
		}
	}
	if after := entries(t, c.wd); !slices.Equal(after, wdBefore) {
		t.Errorf("the workdir had %v and has %v", wdBefore, after)
	}
}

// hostFiles checks the credential files in state directory dir: each
// 0444, of this uid, one link, holding its placeholder and not the
// value.
func hostFiles(t *testing.T, c *credSandbox, dir string) {
	t.Helper()
	for _, name := range []string{"openai", "github", "npm"} {
		p := filepath.Join(dir, "credential-"+name)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Errorf("the credential file %s: %v", p, err)
			continue
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&0o7777 != 0o444 || int(st.Uid) != os.Geteuid() || st.Nlink != 1 {
			t.Errorf("%s: mode %o, uid %d, %d links; want a regular file, 0444, uid %d, 1 link", p, st.Mode, st.Uid, st.Nlink, os.Geteuid())
		}
		if b, _ := os.ReadFile(p); string(b) != c.byName[name] {
			t.Errorf("%s holds %q, want the placeholder %q", p, b, c.byName[name])
		}
	}
}

// runDir is the one per-run state directory of this process in
// StateBase.
func runDir(t *testing.T) string {
	t.Helper()
	ents, _ := os.ReadDir(StateBase())
	var dirs []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), fmt.Sprintf("run-%d-", os.Getpid())) {
			dirs = append(dirs, filepath.Join(StateBase(), e.Name()))
		}
	}
	if len(dirs) != 1 {
		t.Fatalf("per-run state directories of this process: %v, want one", dirs)
	}
	return dirs[0]
}

// A per-run sandbox: the files inside hold their placeholders and resist
// every attack; the host has only the state directory's files, which go
// with Deprovision.
func TestCredentialFile(t *testing.T) { testCredentialFiles(t, false) }

// A persistent sandbox keeps its files across Recover (a fresh provider,
// as a restarted gateway), and Destroy removes them.
func TestCredentialPersistent(t *testing.T) { testCredentialFiles(t, true) }

func testCredentialFiles(t *testing.T, persist bool) {
	needPureGo(t)
	c := credPlan(t)
	before := entries(t, c.wd)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := provider.ProvisionOptions{Trust: []byte("bundle\n")}
	if persist {
		opts.Persistent, opts.Owner = true, owner(t)
	}
	sb, err := New().Provision(ctx, c.plan, opts)
	if err != nil {
		t.Fatal(err)
	}
	end := func() error { _ = sb.Stop(ctx); return sb.Deprovision(ctx) }
	if persist {
		end = func() error { return New().Destroy(ctx, sb.ID()) }
	}
	t.Cleanup(func() { _ = end() })
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var dir string
	if persist {
		dir = sb.(*persistent).dir
	} else {
		dir = runDir(t)
	}
	hostFiles(t, c, dir)
	checkInside(t, sb, c, dir)
	if persist {
		rec, err := New().Recover(ctx, c.plan, sb.(provider.Persistent).State())
		if err != nil {
			t.Fatal(err)
		}
		checkInside(t, rec, c, dir)
	}
	if err := end(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the state directory %s is left after the sandbox: %v", dir, err)
	}
	noRunDirs(t)
	hostClean(t, c, before)
}

// A file that cannot go in the sandbox's own tree fails the start,
// saying why, and creates nothing on the host: in a grant (the workdir),
// in a denied directory, over a mount (/tmp itself); a path that is not
// absolute and clean is an error of Map.
func TestCredentialRefused(t *testing.T) {
	needPureGo(t)
	bad := func(name, file string) policy.ResolvedCredential {
		return policy.ResolvedCredential{Credential: policy.Credential{Name: name, Expose: policy.CredentialExpose{File: file}},
			Field: "credentials[3]", Placeholder: "corral-" + name, File: file}
	}
	wd, home := workdirs(t, 65534)
	denied := filepath.Join(wd, "denied")
	if err := os.Mkdir(denied, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		file, want string
	}{
		{filepath.Join(wd, "planted"), "not the sandbox's own tree"},
		{filepath.Join(denied, "planted"), "not the sandbox's own tree"},
		{"/tmp", "would cover the mount"},
	} {
		t.Run(strings.ReplaceAll(x.file, "/", "_"), func(t *testing.T) {
			plan, err := planFor(wd, home, func(p *policy.Policy) {
				inspecting(p)
				p.Filesystem.Deny = append(p.Filesystem.Deny, policy.PathRule{Path: denied})
			})
			if err != nil {
				t.Fatal(err)
			}
			plan.Policy.Credentials = []policy.ResolvedCredential{bad("bad", x.file)}
			_, err = runOnce(t, plan, "bundle\n", "", "true")
			t.Logf("%v", err)
			if provider.CodeOf(err) != provider.CodeStartFailed || !strings.Contains(err.Error(), x.want) || !strings.Contains(err.Error(), "credentials[3].expose.file") {
				t.Errorf("Start with a credential file at %s: %v, want %s saying %q", x.file, err, provider.CodeStartFailed, x.want)
			}
			for _, p := range []string{filepath.Join(wd, "planted"), filepath.Join(denied, "planted")} {
				if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s exists on the host: %v", p, err)
				}
			}
			noRunDirs(t)
		})
	}
	for _, f := range []string{"run/x", "/run/../etc/x"} {
		plan, err := planFor(wd, home, inspecting)
		if err != nil {
			t.Fatal(err)
		}
		r := *plan.Policy
		r.Credentials = []policy.ResolvedCredential{bad("x", f)}
		if _, loss := New().Map(context.Background(), &r); !slices.ContainsFunc(loss.Errors(), func(l provider.Loss) bool { return strings.Contains(l.Message, f) }) {
			t.Errorf("a credential file at %q: %v, want an error loss naming it", f, loss.Errors())
		}
	}
}

// TestCredentialUnprivileged runs the TestCredential tests again as
// corral-test: there the workload's uid owns the files on the host.
func TestCredentialUnprivileged(t *testing.T) {
	if os.Getenv(unprivilegedEnv) != "" || os.Geteuid() != 0 {
		t.Skip("not root: the TestCredential tests themselves run unprivileged")
	}
	if out := asTestUser(t, "^TestCredential(File|Persistent|Refused)$"); len(regexp.MustCompile(`(?m)^--- PASS: TestCredential`).FindAllString(out, -1)) != 3 {
		t.Fatalf("the TestCredential tests as corral-test did not all run:\n%s", out)
	}
}

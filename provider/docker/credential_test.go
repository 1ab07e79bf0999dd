//go:build linux

package docker

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/provider/providertest"
)

// A credential exposed as a file, in real containers: the workload sees
// a read-only file holding the placeholder that nothing inside can
// change, move, replace or unmount, at its path in the image's tree or
// on a private tmpfs (the directories it lacks made in the container's
// own layer), and at /.corral/run, where the state dir is bound
// read-only; the host has only the state dir's file, which goes with the
// container. The variable holds the placeholder; the value is nowhere
// inside. TestCredentialUnprivileged runs them again as corral-test.

// credPolicy resolves a policy that inspects egress, granting dir
// read-only (the probe's), changed by adjust, for a fresh workdir and
// home, in the caller's environment environ (PATH too).
func credPolicy(t *testing.T, dir string, adjust func(pol *policy.Policy, wd string), environ ...string) (*policy.Resolved, string) {
	t.Helper()
	wd := providertest.PublicDir(t)
	if os.Geteuid() == 0 {
		if err := os.Chown(wd, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	pol := policy.Default()
	pol.Network.Mode = policy.NetworkProxy
	pol.Network.Allow = []policy.Endpoint{{Host: "api.allowed.test", Access: policy.HTTPReadOnly}}
	pol.Filesystem.ReadOnly = append(pol.Filesystem.ReadOnly, policy.PathRule{Path: dir})
	if adjust != nil {
		adjust(pol, wd)
	}
	r, err := pol.Resolve(policy.Context{Home: providertest.PublicDir(t), Workdir: wd, Environ: append([]string{"PATH=" + policy.DefaultPATH}, environ...)})
	if err != nil {
		t.Fatal(err)
	}
	return r, wd
}

func TestCredentialFile(t *testing.T)       { testCredentialFiles(t, false) }
func TestCredentialPersistent(t *testing.T) { testCredentialFiles(t, true) }

// TestCredentialUnprivileged runs the TestCredential tests again as
// corral-test, whose state dirs and files are its own.
func TestCredentialUnprivileged(t *testing.T) {
	asTestUser(t, "^TestCredential(File|Persistent|Refused)$", "TestCredentialFile", "TestCredentialPersistent", "TestCredentialRefused")
}

// testCredentialFiles runs a container (persist: a persistent one,
// recovered by a fresh provider and checked again) with three
// credential files and checks them inside and on the host.
func testCredentialFiles(t *testing.T, persist bool) {
	p := needSandboxes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := providertest.PublicDir(t)
	bin := providertest.ProbeBinary(t, dir)
	id := strings.TrimPrefix(provider.NewID(), "corral-")
	value := "real-value-" + id
	t.Setenv("OPENAI_API_KEY", value) // the caller's; nothing may take it inside
	top := "/run/corral-cred-" + id
	// In the image's tree, absent there; on the private /tmp; on the
	// private home, and in the variable the value is read from.
	r, wd := credPolicy(t, dir, func(pol *policy.Policy, _ string) {
		for name, x := range map[string]policy.CredentialExpose{"openai": {File: top + "/secrets/openai"}, "tmp": {File: "/tmp/cred-" + id + "/x"},
			"home": {File: "~/.config/gh/token", Env: "OPENAI_API_KEY"}} {
			pol.Credentials = append(pol.Credentials, policy.Credential{Name: name, Source: policy.CredentialSource{Env: "OPENAI_API_KEY"},
				Expose: x, Endpoints: []policy.CredentialEndpoint{{Host: "api.allowed.test"}}})
		}
	}, "OPENAI_API_KEY="+value)
	home := filepath.Join(r.Home, ".config/gh/token")
	files := map[string]string{} // path inside -> placeholder
	for _, c := range r.Credentials {
		files[c.File] = c.Placeholder
	}
	plan, loss := p.Map(ctx, r)
	if loss.HasErrors() {
		t.Fatal(provider.Rejected(loss))
	}
	providertest.CheckCredentialLoss(t, loss, files)
	if !slices.ContainsFunc(loss, func(l provider.Loss) bool {
		return l.Severity == provider.SeverityInfo && strings.Contains(l.Message, "as root's") && strings.Contains(l.Message, home)
	}) {
		t.Errorf("Map does not say the directories above %s are root's: %v", home, loss)
	}
	before, _ := os.ReadDir(wd)
	opts := provider.ProvisionOptions{Trust: []byte("bundle\n")}
	if persist {
		opts.Persistent, opts.Owner = true, "docker-test-"+provider.NewID()
	}
	raw, err := p.Provision(ctx, plan, opts)
	if err != nil {
		t.Fatal(err)
	}
	sb := raw.(*Sandbox)
	var rec *Sandbox // persist: sb recovered by a fresh provider
	end := func() error { _ = sb.Stop(ctx); return sb.Deprovision(ctx) }
	if persist {
		// As a gateway that ends: this process's hold of the
		// placeholders goes, then a fresh provider destroys it.
		end = func() error {
			sb.placeholders.Close()
			if rec != nil {
				rec.placeholders.Close()
			}
			return New().Destroy(ctx, sb.ID())
		}
	}
	t.Cleanup(func() { _ = end() })
	if err := sb.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if d := sb.Layers(); !slices.ContainsFunc(d, func(l provider.LayerStatus) bool {
		return l.Layer == policy.LayerMounts && strings.Contains(l.Detail, "credential's file at "+home)
	}) {
		t.Errorf("the mounts layer does not say the credential files were verified: %v", d)
	}
	state := sb.state
	for _, c := range r.Credentials {
		path := filepath.Join(state, "credential-"+c.Name)
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&0o7777 != 0o444 || int(st.Uid) != os.Geteuid() || st.Nlink != 1 {
			t.Errorf("%s on the host: %v, mode %o uid %d links %d; want a regular file, 0444, uid %d, one link", path, err, st.Mode, st.Uid, st.Nlink, os.Geteuid())
		}
		if b, _ := os.ReadFile(path); string(b) != c.Placeholder {
			t.Errorf("%s on the host holds %q, want %q", path, b, c.Placeholder)
		}
	}
	// Where the state dir shows it inside (read-only, like the rest).
	inside := maps.Clone(files)
	inside[RunDir+"/credential-home"] = files[home]
	check := func(s provider.Sandbox) {
		t.Helper()
		out, err := os.CreateTemp(t.TempDir(), "out")
		if err != nil {
			t.Fatal(err)
		}
		paths := slices.Sorted(maps.Keys(inside))
		st, err := s.Exec(ctx, provider.ExecSpec{Args: providertest.CredentialProbeArgs(bin, paths, []string{stateBase(), state}), Stdout: out, Stderr: out})
		b, _ := os.ReadFile(out.Name())
		if err != nil || st.Code != 0 {
			t.Fatalf("the probe: %+v %v %s", st, err, b)
		}
		providertest.CheckCredentialProbe(t, string(b), inside, "OPENAI_API_KEY="+files[home], value)
	}
	check(sb)
	if persist {
		r, err := New().Recover(ctx, nil, sb.State())
		if err != nil {
			t.Fatal(err)
		}
		rec = r.(*Sandbox)
		check(rec)
	}
	if err := end(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(state); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the state dir %s is left after the container: %v", state, err)
	}
	for _, p := range []string{top, "/tmp/cred-" + id, filepath.Join(r.Home, ".config")} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists on the host: %v", p, err)
		}
	}
	if after, _ := os.ReadDir(wd); len(after) != len(before) {
		t.Errorf("the workdir had %d entries and has %d", len(before), len(after))
	}
}

// A file that cannot go in the container's own tree is an error loss of
// Map naming the credential's field: in a grant (the workdir), in a
// denied directory, over /tmp's tmpfs, over the CA bundle, in /.corral,
// where an image's symlink leads into the workdir; a path that is not
// absolute and clean too.
func TestCredentialRefused(t *testing.T) {
	p := needSandboxes(t)
	ctx := context.Background()
	dir := providertest.PublicDir(t) // granted read-only
	tag := linkImage(t, p.facts().cli, map[string]string{"run/credlink": dir})
	for _, c := range []struct{ name, file, want string }{
		{"grant", "WD/planted", "a host path"},
		{"denied", "WD/denied/planted", "inside the mask"},
		{"tmpfs", "/tmp", "a tmpfs mount"},
		{"bundle", provider.TrustBundlePath, "another of corral's files"},
		{"corral", RunDir + "/x", "corral's own"},
		{"symlink", "/run/credlink/planted", "the image's symlinks lead"},
		{"relative", "run/x", "not an absolute, clean path"},
		{"dots", "/run/../etc/x", "not an absolute, clean path"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, wd := credPolicy(t, dir, func(pol *policy.Policy, wd string) {
				pol.Docker = &policy.Docker{Image: tag}
				if err := os.Mkdir(filepath.Join(wd, "denied"), 0o755); err != nil {
					t.Fatal(err)
				}
				pol.Filesystem.Deny = append(pol.Filesystem.Deny, policy.PathRule{Path: filepath.Join(wd, "denied")})
			})
			file := strings.Replace(c.file, "WD", wd, 1)
			r.Credentials = []policy.ResolvedCredential{{Credential: policy.Credential{Name: "bad", Expose: policy.CredentialExpose{File: file}},
				Field: "credentials[3]", Placeholder: "corral-bad", File: file}}
			_, loss := p.Map(ctx, r)
			i := slices.IndexFunc(loss, func(l provider.Loss) bool {
				return l.Severity == provider.SeverityError && strings.Contains(l.Message, c.want)
			})
			if i < 0 || !strings.HasPrefix(loss[i].Field, "credentials") {
				t.Errorf("a credential file at %s: %v, want an error loss saying %q", file, loss.Errors(), c.want)
			} else {
				t.Logf("%s: %s", loss[i].Field, loss[i].Message)
			}
		})
	}
}

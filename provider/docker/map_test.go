//go:build linux

package docker

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// needDocker returns the provider on this host's daemon. Without a daemon
// the test is skipped, unless CORRAL_TEST_DOCKER=1 (CI) makes that a
// failure.
func needDocker(t *testing.T) *Provider {
	t.Helper()
	p := New()
	if h := p.facts(); h.err != nil {
		if os.Getenv("CORRAL_TEST_DOCKER") == "1" {
			t.Fatalf("docker provider unavailable with CORRAL_TEST_DOCKER=1: %v", h.err)
		}
		t.Skipf("no Docker daemon here: %v", h.err)
	}
	// The test binary is linked dynamically; these tests only map.
	p.facts().binErr = nil
	return p
}

// mapPolicy parses src, resolves it for workdir and maps it.
func mapPolicy(t *testing.T, p *Provider, src, workdir string) (*Spec, provider.LossReport) {
	t.Helper()
	pol, err := policy.Parse([]byte(src), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	r, err := pol.Resolve(policy.Context{Home: home, Workdir: workdir, Environ: []string{"PATH=/usr/bin:/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	plan, loss := p.Map(context.Background(), r)
	return plan.Details.(*Spec), loss
}

func find(loss provider.LossReport, sev provider.Severity, field, text string) bool {
	for _, l := range loss {
		if l.Severity == sev && l.Field == field && strings.Contains(l.Message, text) {
			return true
		}
	}
	return false
}

func bindAt(sp *Spec, target string) (Bind, bool) {
	for _, b := range sp.Binds {
		if b.Target == target {
			return b, true
		}
	}
	return Bind{}, false
}

// A workdir owned by an unprivileged uid, so that root's runs do not add
// the root-owned warning.
func userDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	if os.Getuid() == 0 {
		if err := os.Chown(d, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// The built-in default: the system directories come from the image, the
// workdir is bound read-write at its host path, /tmp and the home are
// private tmpfs, every layer active, and nothing is an error.
func TestMapDefaultPolicy(t *testing.T) {
	p := needDocker(t)
	wd := userDir(t)
	sp, loss := mapPolicy(t, p, "version: 1\n", wd)
	if loss.HasErrors() {
		t.Fatalf("default policy rejected: %+v", loss.Errors())
	}
	if !find(loss, provider.SeverityInfo, "filesystem.read_only", "served by the image") {
		t.Errorf("no info that the image serves /usr: %+v", loss)
	}
	if !slices.Contains(sp.ImageServed, "/usr") || !slices.Contains(sp.ImageServed, "/etc") {
		t.Errorf("image-served = %v", sp.ImageServed)
	}
	if b, ok := bindAt(sp, wd); !ok || b.ReadOnly || b.Source != wd {
		t.Errorf("workdir bind = %+v, %v", b, ok)
	}
	if _, ok := bindAt(sp, "/usr"); ok {
		t.Error("/usr is bound from the host; the image serves it")
	}
	var tmpfs []string
	for _, m := range sp.Tmpfs {
		tmpfs = append(tmpfs, m.Path)
	}
	if !slices.Contains(tmpfs, "/tmp") || len(tmpfs) != 2 {
		t.Errorf("tmpfs = %v, want /tmp and the home", tmpfs)
	}
	if sp.Network != "none" || sp.UID == 0 || sp.Image != policy.DefaultDockerImage || !sp.Cgroups || sp.Memory != 2<<30 || sp.Pids != 1024 {
		t.Errorf("spec = %+v", sp)
	}
	if !sp.Shim.Landlock.Enabled || !sp.Shim.Seccomp || !slices.Contains(sp.Shim.Landlock.RWDirs, wd) || !slices.Contains(sp.Shim.Landlock.RODirs, "/bin") {
		t.Errorf("shim = %+v", sp.Shim)
	}
}

// Each thing Docker cannot do as written is in the loss report with the
// documented severity (docs/providers/docker.md).
func TestMapLosses(t *testing.T) {
	p := needDocker(t)
	wd := userDir(t)
	t.Run("network host", func(t *testing.T) {
		sp, loss := mapPolicy(t, p, "version: 1\nnetwork: {mode: host}\n", wd)
		if sp.Network != "host" || !find(loss, provider.SeverityWarning, "network.mode", "unfiltered") {
			t.Errorf("network %q, loss %+v", sp.Network, loss)
		}
	})
	t.Run("network proxy", func(t *testing.T) {
		sp, loss := mapPolicy(t, p, "version: 1\nnetwork: {mode: proxy, allow: [{host: example.test}]}\n", wd)
		if sp.Shim.ProxyPort != provider.ProxyPort || !slices.Contains(sp.Env, "HTTPS_PROXY=http://127.0.0.1:3128") || sp.Network != "none" ||
			sp.Shim.Landlock.ConnectPort != provider.ProxyPort || !find(loss, provider.SeverityInfo, "network.mode", "no per-host rules") {
			t.Errorf("spec %+v, loss %+v", sp, loss)
		}
	})
	rootDir := t.TempDir()
	dataParent := "/nonexistent-data-root-parent"
	if root := p.facts().dataRoot; root != "" {
		dataParent = filepath.Dir(root)
	}
	cases := []struct {
		name, policy string
		sev          provider.Severity
		field, text  string
		rootOnly     bool // run_as_user and the root-owned warning are for root callers
	}{
		{"missing image", "docker: {image: corral-test/no-such-image:0}", provider.SeverityError, "docker.image", "not on the daemon", false},
		{"untagged missing image", "docker: {image: corral-test/untagged}", provider.SeverityError, "docker.image", "corral-test/untagged:latest", false},
		{"ui", "ui: {windows: true}", provider.SeverityInfo, "ui", "no desktop", false},
		{"grant of /", "filesystem: {read_only: [/usr, /]}", provider.SeverityError, "filesystem.read_only[1]", "container's root", false},
		{"grant holding the daemon's data root", "filesystem: {read_only: [/usr, {path: " + dataParent + ", optional: true}]}", provider.SeverityError, "filesystem.read_only[1]", "data root", false},
		{"unknown run_as_user", "process: {run_as_user: corral-no-such-user}", provider.SeverityError, "process.run_as_user", "no such user", true},
		{"uid beyond the runtime's range", "process: {run_as_user: \"4294967294\"}", provider.SeverityError, "process.run_as_user", "2147483647", true},
		{"root-owned read-write tree", "filesystem: {read_write: [" + rootDir + "]}", provider.SeverityWarning, "filesystem.read_write", rootDir, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.rootOnly && os.Getuid() != 0 {
				t.Skip("applies to root callers only")
			}
			_, loss := mapPolicy(t, p, "version: 1\n"+c.policy+"\n", wd)
			if !find(loss, c.sev, c.field, c.text) {
				t.Errorf("want %s %s containing %q; loss %+v", c.sev, c.field, c.text, loss)
			}
		})
	}
}

// A layer the host cannot apply: an error when required, information when
// optional (and then not in the plan).
func TestMapLayerRequirement(t *testing.T) {
	p := needDocker(t)
	wd := userDir(t)
	h := p.facts()
	savedABI, savedSeccomp := h.landlockABI, h.seccomp
	h.landlockABI, h.seccomp = 0, false
	defer func() { h.landlockABI, h.seccomp = savedABI, savedSeccomp }()
	_, loss := mapPolicy(t, p, "version: 1\n", wd)
	if !find(loss, provider.SeverityError, "layers.landlock", "cannot be applied") || !find(loss, provider.SeverityError, "layers.seccomp", "no seccomp") {
		t.Errorf("required layers unavailable: %+v", loss)
	}
	sp, loss := mapPolicy(t, p, "version: 1\nlayers: {landlock: optional, seccomp: optional}\n", wd)
	if loss.HasErrors() || sp.Shim.Landlock.Enabled || sp.Shim.Seccomp {
		t.Errorf("optional layers: errors %+v, shim %+v", loss.Errors(), sp.Shim)
	}
	if !find(loss, provider.SeverityWarning, "layers.landlock", "readable inside") {
		t.Errorf("no warning that the image's other directories are readable without Landlock: %+v", loss)
	}
}

// Denied paths inside a grant are masked (the source is made by
// Provision, never a path in the image); a grant inside a denied tree is
// an error; a unix socket inside a grant is masked; the Docker socket
// inside a grant is an error.
func TestMapMasks(t *testing.T) {
	p := needDocker(t)
	wd := userDir(t)
	for _, d := range []string{"secret", "open"} {
		if err := os.MkdirAll(filepath.Join(wd, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(wd, "key.pem"), []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	sp, loss := mapPolicy(t, p, `version: 1
filesystem:
  deny: ["{workdir}/secret", "{workdir}/key.pem", /etc/shadow]
`, wd)
	if loss.HasErrors() {
		t.Fatalf("errors: %+v", loss.Errors())
	}
	for _, tc := range []struct {
		target string
		dir    bool
	}{{filepath.Join(wd, "secret"), true}, {filepath.Join(wd, "key.pem"), false}, {"/etc/shadow", false}} {
		b, ok := bindAt(sp, tc.target)
		if !ok || !b.Mask || !b.ReadOnly || b.Source != "" || b.Dir != tc.dir {
			t.Errorf("mask of %s = %+v, %v", tc.target, b, ok)
		}
	}
	if err := os.MkdirAll(filepath.Join(wd, "secret", "open"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, loss = mapPolicy(t, p, `version: 1
filesystem:
  read_only: [/usr, "{workdir}/secret/open"]
  deny: ["{workdir}/secret"]
`, wd)
	if !find(loss, provider.SeverityError, "filesystem.read_only[1]", "inside a denied directory") {
		t.Errorf("grant inside a denied tree: %+v", loss)
	}

	// A nested repository's .git inside the read-write workdir stays
	// read-only, as the top one does.
	if err := os.MkdirAll(filepath.Join(wd, "open", "sub", ".git", "hooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	sp, _ = mapPolicy(t, p, "version: 1\n", wd)
	if b, ok := bindAt(sp, filepath.Join(wd, "open", "sub", ".git")); !ok || !b.ReadOnly || b.Mask || !strings.Contains(b.Field, "nested .git") {
		t.Errorf("nested .git: %+v, %v", b, ok)
	}
	sock := filepath.Join(wd, "open", "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sp, _ = mapPolicy(t, p, "version: 1\n", wd)
	if b, ok := bindAt(sp, sock); !ok || !b.Mask || !strings.Contains(b.Field, "unix socket hidden") {
		t.Errorf("socket in the workdir: %+v, %v", b, ok)
	}
	t.Setenv("DOCKER_HOST", "unix://"+sock) // the daemon's socket inside the workdir
	_, loss = mapPolicy(t, p, "version: 1\n", wd)
	if !find(loss, provider.SeverityError, "filesystem.include_workdir", "Docker socket") {
		t.Errorf("docker socket in a grant: %+v", loss)
	}
}

// Map reports policy.Lint's findings as losses: a grant of the home that
// exposes ~/.ssh warns here too, and so does a policy without /usr.
func TestMapReportsLint(t *testing.T) {
	p := needDocker(t)
	home := t.TempDir()
	if err := os.Mkdir(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Parse([]byte("version: 1\nfilesystem: {read_only: [\"~\"], include_workdir: false}\n"), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r, err := pol.Resolve(policy.Context{Home: home, Workdir: userDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	_, loss := p.Map(context.Background(), r)
	if !find(loss, provider.SeverityWarning, "filesystem", "~/.ssh") || !find(loss, provider.SeverityWarning, "filesystem.read_only", "/usr is not granted") {
		t.Errorf("want the credentials and /usr warnings: %+v", loss)
	}
}

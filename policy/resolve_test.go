//go:build !windows

// Linux policies: their paths resolve on a Linux host only (a Windows host
// refuses them). The Windows policy tests are winpath_test.go and
// winresolve_windows_test.go.

package policy

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// canon returns the canonical form of p (t.TempDir may sit behind symlinks).
func canon(t *testing.T, p string) string {
	t.Helper()
	c, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mkdirs(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func touch(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		mkdirs(t, filepath.Dir(p))
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// parse parses src (a policy body without the version line).
func parse(t *testing.T, src string) *Policy {
	t.Helper()
	p, err := Parse([]byte("version: 1\n"+src), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// env is a fixture: a temp home and workdir.
type env struct{ home, work string }

func newEnv(t *testing.T) env {
	root := canon(t, t.TempDir())
	e := env{home: filepath.Join(root, "home"), work: filepath.Join(root, "home", "project")}
	mkdirs(t, e.work)
	return e
}

func (e env) ctx() Context { return Context{Home: e.home, Workdir: e.work} }

func grantOf(r *Resolved, path string) (PathGrant, bool) {
	for _, g := range r.Grants {
		if g.Path == path {
			return g, true
		}
	}
	return PathGrant{}, false
}

func TestDangerousGrants(t *testing.T) {
	e := newEnv(t)
	ln, err := net.Listen("unix", filepath.Join(e.work, "d.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cases := []struct{ src, field, msg string }{
		{"filesystem:\n  read_write: [/etc]\n", "filesystem.read_write[0]", "modify the host system"},
		{"filesystem:\n  read_write: [/]\n", "filesystem.read_write[0]", "modify the host system"},
		{"filesystem:\n  read_write: [~]\n", "filesystem.read_write[0]", "home directory"},
		{"filesystem:\n  read_write: [\"~/\"]\n", "filesystem.read_write[0]", "home directory"},
		{"filesystem:\n  read_write: [/dev/null]\n", "filesystem.read_write[0]", "under /dev"},
		{"filesystem:\n  read_write: [/proc/sys]\n", "filesystem.read_write[0]", "under /proc"},
		{"filesystem:\n  read_write: [\"{workdir}/d.sock\"]\n", "filesystem.read_write[0]", "unix socket"},
		{"filesystem:\n  read_only: [\"{workdir}/d.sock\"]\n", "filesystem.read_only[0]", "unix socket"},
		// Whole system trees, not only their roots: a root caller's writes
		// land as root on disk (/etc/profile.d, /usr/local/bin, cron).
		{"filesystem:\n  read_write: [/etc/profile.d]\n", "filesystem.read_write[0]", "under /etc"},
		{"filesystem:\n  read_write: [/usr/local/bin]\n", "filesystem.read_write[0]", "under /usr"},
		{"filesystem:\n  read_write: [/var/spool]\n", "filesystem.read_write[0]", "under /var/spool"},
		{"filesystem:\n  read_write: [/home]\n", "filesystem.read_write[0]", "modify the host system"},
		{"filesystem:\n  read_write: [/tmp]\n", "filesystem.read_write[0]", "modify the host system"},
		// Sockets of host services: not even read-only.
		{"filesystem:\n  read_only: [/run]\n", "filesystem.read_only[0]", "sockets"},
	}
	for _, c := range cases {
		_, err := parse(t, c.src).Resolve(e.ctx())
		got := only(t, err)
		if got.Field != c.field || !strings.Contains(got.Msg, c.msg) || got.Hint == "" {
			t.Errorf("%q: got %v", c.src, got)
		}
		if got.File != "p.yaml" || got.Line != 3 {
			t.Errorf("%q: error not positioned: %s:%d", c.src, got.File, got.Line)
		}
	}
	// Denying a socket is fine.
	r, err := parse(t, "filesystem:\n  deny: [\"{workdir}/d.sock\"]\n").Resolve(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := grantOf(r, filepath.Join(e.work, "d.sock")); !ok || g.Access != AccessDeny {
		t.Errorf("socket deny grant = %+v, %v", g, ok)
	}
}

func TestDangerousWorkdir(t *testing.T) {
	e := newEnv(t)
	for _, wd := range []string{e.home, "/"} {
		_, err := Default().Resolve(Context{Home: e.home, Workdir: wd})
		got := only(t, err)
		if got.Field != "filesystem.include_workdir" || !strings.Contains(got.Hint, "include_workdir: false") ||
			!strings.Contains(got.Hint, "cd into a project directory") {
			t.Errorf("workdir %s: got %v", wd, got)
		}
	}
	// Without include_workdir the home is an acceptable working directory.
	p := Default()
	off := false
	p.Filesystem.IncludeWorkdir = &off
	r, err := p.Resolve(Context{Home: e.home, Workdir: e.home})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := grantOf(r, e.home); ok {
		t.Error("home granted although include_workdir is false")
	}
	// Bad working directories.
	file := filepath.Join(e.work, "f")
	touch(t, file)
	for _, wd := range []string{"", "rel", filepath.Join(e.work, "missing"), file, "/proc/self/cwd", "/proc"} {
		_, err := Default().Resolve(Context{Home: e.home, Workdir: wd})
		if got := only(t, err); got.Field != "workdir" {
			t.Errorf("workdir %q: got %v", wd, got)
		}
	}
}

func TestMissingVersusOptional(t *testing.T) {
	e := newEnv(t)
	src := "filesystem:\n  read_only:\n    - \"{workdir}/there\"\n    - {path: \"{workdir}/gone\", optional: true}\n    - \"{workdir}/nope\"\n"
	mkdirs(t, filepath.Join(e.work, "there"))
	_, err := parse(t, src).Resolve(e.ctx())
	got := only(t, err)
	expectAt(t, got, "filesystem.read_only[2]", 6, 7, "does not exist")
	if !strings.Contains(got.Hint, "optional: true") {
		t.Errorf("hint %q", got.Hint)
	}
	mkdirs(t, filepath.Join(e.work, "nope"))
	r, err := parse(t, src).Resolve(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := grantOf(r, filepath.Join(e.work, "gone")); ok {
		t.Error("optional missing path was granted")
	}
	if g, ok := grantOf(r, filepath.Join(e.work, "there")); !ok || g.Access != AccessReadOnly || !g.Dir {
		t.Errorf("grant = %+v, %v", g, ok)
	}
	// "~" without a home is an error.
	_, err = parse(t, "filesystem:\n  read_only: [~/x]\n").Resolve(Context{Workdir: e.work})
	if got := only(t, err); !strings.Contains(got.Msg, "home directory is unknown") {
		t.Errorf("got %v", got)
	}
}

func TestSymlinkFollowsTarget(t *testing.T) {
	e := newEnv(t)
	// A link corral trusts: root's, in a system directory it never grants
	// read-write (TestPlantedLinkRefused covers the others).
	fi, err := os.Lstat("/bin")
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Skip("no merged-/usr /bin link on this host")
	}
	real, err := filepath.EvalSymlinks("/bin")
	if err != nil {
		t.Fatal(err)
	}
	r, err := parse(t, "filesystem:\n  read_only: [/bin, /bin/ls]\n").Resolve(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := grantOf(r, "/bin"); ok {
		t.Error("grant kept the symlink path")
	}
	g, ok := grantOf(r, real)
	if !ok || g.Access != AccessReadOnly || !g.Dir || g.Field != "filesystem.read_only[0]" {
		t.Errorf("grant of target = %+v, %v", g, ok)
	}
	if g, ok := grantOf(r, filepath.Join(real, "ls")); !ok || g.Dir {
		t.Errorf("file grant = %+v, %v", g, ok)
	}
}

func TestPrecedenceSamePath(t *testing.T) {
	e := newEnv(t)
	for _, d := range []string{"a", "b", "c"} {
		mkdirs(t, filepath.Join(e.work, d))
	}
	// The same path written two ways (links that could redirect a grant
	// are refused: TestPlantedLinkRefused).
	src := `filesystem:
  include_workdir: false
  read_write: ["{workdir}/a", "{workdir}/b", "~/project/c"]
  read_only: ["{workdir}/a", "{workdir}/b"]
  deny: ["{workdir}/a", "{workdir}/c"]
`
	r, err := parse(t, src).Resolve(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Access{"a": AccessDeny, "b": AccessReadOnly, "c": AccessDeny}
	if len(r.Grants) != len(want) {
		t.Errorf("grants = %+v, want one per path", r.Grants)
	}
	for d, acc := range want {
		if g, ok := grantOf(r, filepath.Join(e.work, d)); !ok || g.Access != acc {
			t.Errorf("%s: grant %+v, want %s", d, g, acc)
		}
	}
	if g, _ := grantOf(r, filepath.Join(e.work, "b")); g.Field != "filesystem.read_only[1]" {
		t.Errorf("winning field = %q", g.Field)
	}
}

func TestNestedOrdering(t *testing.T) {
	e := newEnv(t)
	mkdirs(t, filepath.Join(e.work, "a", "b", "c"), filepath.Join(e.work, "a-b"), filepath.Join(e.work, "z"))
	src := `filesystem:
  read_only: ["{workdir}/a/b/c", "{workdir}/a-b", "{workdir}/a"]
  deny: ["{workdir}/a/b"]
  read_write: ["{workdir}/z"]
  protected: []
`
	r, err := parse(t, src).Resolve(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Grants) != 6 {
		t.Fatalf("want 6 grants, got %+v", r.Grants)
	}
	for i, gi := range r.Grants {
		for j, gj := range r.Grants {
			if strings.HasPrefix(gj.Path, gi.Path+"/") && j < i {
				t.Errorf("child %s (%d) precedes parent %s (%d)", gj.Path, j, gi.Path, i)
			}
		}
	}
	if !slices.IsSortedFunc(r.Grants, func(a, b PathGrant) int {
		if d := depth(a.Path) - depth(b.Path); d != 0 {
			return d
		}
		return strings.Compare(a.Path, b.Path)
	}) {
		t.Errorf("grants not sorted by (depth, path): %+v", r.Grants)
	}
	if r.Grants[0].Path != e.work {
		t.Errorf("first grant %s, want the workdir", r.Grants[0].Path)
	}
	if g, _ := grantOf(r, filepath.Join(e.work, "a", "b")); g.Access != AccessDeny {
		t.Errorf("nested deny lost: %+v", g)
	}
}

func TestProtectedDefaults(t *testing.T) {
	e := newEnv(t)
	hooks := filepath.Join(e.work, ".git", "hooks")
	config := filepath.Join(e.work, ".git", "config")
	mkdirs(t, hooks)
	touch(t, config)
	other := filepath.Join(e.home, "other")
	mkdirs(t, other)
	touch(t, filepath.Join(other, ".bashrc"))
	// A symlinked .ssh leaving the writable roots cannot be protected by a
	// bind; it is reported as skipped, and its target is not exposed.
	outside := filepath.Join(e.home, "secret-ssh")
	mkdirs(t, outside)
	if err := os.Symlink(outside, filepath.Join(e.work, ".ssh")); err != nil {
		t.Fatal(err)
	}

	r, err := parse(t, "filesystem:\n  read_write: [~/other]\n").Resolve(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	gitDir := filepath.Join(e.work, ".git")
	for path, field := range map[string]string{
		gitDir:                          "filesystem.protected[0]",
		filepath.Join(other, ".bashrc"): "filesystem.protected[3]",
	} {
		g, ok := grantOf(r, path)
		if !ok || g.Access != AccessReadOnly || g.Field != field {
			t.Errorf("%s: grant %+v, %v; want ro from %s", path, g, ok, field)
		}
	}
	if g, _ := grantOf(r, gitDir); !g.Dir {
		t.Error(".git not marked as a directory")
	}
	// hooks and config are covered by the read-only .git (no own grant).
	for _, p := range []string{hooks, config} {
		if g, ok := grantOf(r, p); ok {
			t.Errorf("%s has a grant of its own: %+v", p, g)
		}
	}
	if _, ok := grantOf(r, outside); ok {
		t.Error("symlink target outside the rw roots was granted")
	}
	if !slices.Contains(r.Skipped, filepath.Join(e.work, ".ssh")) {
		t.Errorf("Skipped lacks the symlinked .ssh: %v", r.Skipped)
	}
	// Absent names become placeholders (empty directories), one per root.
	for _, want := range []Placeholder{
		{Path: filepath.Join(e.work, ".bashrc"), Dir: true, Field: "filesystem.protected[3]"},
		{Path: filepath.Join(other, ".git"), Dir: true, Field: "filesystem.protected[0]"},
		{Path: filepath.Join(e.work, ".mcp.json"), Dir: true, Field: "filesystem.protected[15]"},
		{Path: filepath.Join(e.work, ".vscode"), Dir: true, Field: "filesystem.protected[21]"},
	} {
		if !slices.Contains(r.Placeholders, want) {
			t.Errorf("Placeholders lack %+v: %+v", want, r.Placeholders)
		}
	}
	// .config/corral without .config: no placeholder (it would hold all
	// of .config), listed for the scan after the run instead.
	if !slices.Contains(r.Skipped, filepath.Join(e.work, ".config", "corral")) {
		t.Errorf("Skipped lacks .config/corral: %v", r.Skipped)
	}
	if slices.ContainsFunc(r.Placeholders, func(ph Placeholder) bool {
		return ph.Path == gitDir || strings.HasPrefix(ph.Path, e.home+"/.") || strings.HasSuffix(ph.Path, "/.config")
	}) {
		t.Errorf("placeholder for an existing name or outside the rw roots: %+v", r.Placeholders)
	}
	if slices.Contains(r.Skipped, hooks) || slices.Contains(r.Skipped, filepath.Join(e.home, ".bashrc")) {
		t.Errorf("Skipped has existing or home paths: %v", r.Skipped)
	}
	if !slices.IsSorted(r.Skipped) {
		t.Errorf("Skipped not sorted: %v", r.Skipped)
	}

	// protected: [] disables protection.
	r, err = parse(t, "filesystem:\n  read_only: []\n  deny: []\n  protected: []\n").Resolve(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Grants) != 1 || len(r.Skipped) != 0 {
		t.Errorf("with protection off: grants %+v skipped %v", r.Grants, r.Skipped)
	}
}

func TestProtectedNeverExposes(t *testing.T) {
	e := newEnv(t)
	mkdirs(t, filepath.Join(e.work, ".git", "hooks"), filepath.Join(e.home, "elsewhere"))
	// .git is denied, so .git/hooks must not be bound back on top of it; an
	// absolute protected path outside every grant must not become visible.
	src := "filesystem:\n  deny: [\"{workdir}/.git\"]\n  protected: [.git/hooks, ~/elsewhere, \"{workdir}/missing\"]\n"
	r, err := parse(t, src).Resolve(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := grantOf(r, filepath.Join(e.work, ".git", "hooks")); ok {
		t.Error("protected path re-exposed inside a denied directory")
	}
	if _, ok := grantOf(r, filepath.Join(e.home, "elsewhere")); ok {
		t.Error("absolute protected path outside the grants became visible")
	}
	if !slices.Contains(r.Placeholders, Placeholder{Path: filepath.Join(e.work, "missing"), Dir: true, Field: "filesystem.protected[2]"}) {
		t.Errorf("Placeholders = %+v", r.Placeholders)
	}
	// An absolute protected path inside the workdir becomes ro.
	mkdirs(t, filepath.Join(e.work, "keep"))
	r, err = parse(t, "filesystem:\n  protected: [\"{workdir}/keep\"]\n").Resolve(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := grantOf(r, filepath.Join(e.work, "keep")); !ok || g.Access != AccessReadOnly {
		t.Errorf("absolute protected grant = %+v, %v", g, ok)
	}
}

func TestEnvScrubbing(t *testing.T) {
	e := newEnv(t)
	c := e.ctx()
	c.Environ = []string{"CANARY=leak", "LC_ALL=C.UTF-8", "HOME=/root", "TERM=xterm", "LANG=en", "LANG=second", "AWS_SECRET_ACCESS_KEY=x", "junk"}
	r, err := parse(t, "process:\n  env:\n    set: {TERM: dumb, EXTRA: \"1\"}\n").Resolve(c)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"EXTRA=1", "LANG=en", "LC_ALL=C.UTF-8", "PATH=" + DefaultPATH, "TERM=dumb"}
	if !slices.Equal(r.Env, want) {
		t.Errorf("Env = %v\nwant  %v", r.Env, want)
	}
	// Even a catch-all pass never lets HOME through; a passed PATH is kept.
	c.Environ = append(c.Environ, "PATH=/custom")
	r, err = parse(t, "process:\n  env:\n    pass: [\"*\"]\n").Resolve(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range r.Env {
		if strings.HasPrefix(kv, "HOME=") {
			t.Errorf("HOME passed: %v", r.Env)
		}
	}
	if !slices.Contains(r.Env, "CANARY=leak") || !slices.Contains(r.Env, "PATH=/custom") {
		t.Errorf("pass * lost variables: %v", r.Env)
	}
	// pass: [] passes nothing but PATH's default.
	r, err = parse(t, "process:\n  env:\n    pass: []\n").Resolve(c)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Env, []string{"PATH=" + DefaultPATH}) {
		t.Errorf("pass [] Env = %v", r.Env)
	}
}

func TestResolveCarriesPolicyFields(t *testing.T) {
	e := newEnv(t)
	p := parse(t, "network: {mode: host}\nprocess:\n  run_as_user: alice\n  limits: {pids: 9}\nlayers: {landlock: optional}\n")
	r, err := p.Resolve(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	if r.Network != NetworkHost || r.RunAs != "alice" || r.Limits.Pids != 9 || r.Layers.Requirement(LayerLandlock) != Optional ||
		r.Hash != Hash(p) || r.Home != e.home || r.Policy != p {
		t.Errorf("resolved = %+v", r)
	}
}

func TestResolveValidatesPoliciesBuiltInCode(t *testing.T) {
	p := Default()
	p.Process.RunAsUser = "root"
	p.Filesystem.ReadOnly = append(p.Filesystem.ReadOnly, PathRule{Path: "relative"})
	_, err := p.Resolve(newEnv(t).ctx())
	es := problems(t, err)
	if len(es) != 2 || es[0].Line != 0 {
		t.Errorf("got %v", err)
	}
	var pe *Error
	if !errors.As(err, &pe) {
		t.Error("errors.As(*Error) failed")
	}
}

func TestDefaultResolves(t *testing.T) {
	e := newEnv(t)
	r, err := Default().Resolve(Context{Home: e.home, Workdir: e.work, Environ: []string{"PATH=/bin", "CANARY=x"}})
	if err != nil {
		t.Fatalf("default policy: %v", err)
	}
	if g, ok := grantOf(r, e.work); !ok || g.Access != AccessReadWrite {
		t.Errorf("workdir grant = %+v, %v", g, ok)
	}
	if usr, err := filepath.EvalSymlinks("/usr"); err == nil {
		if g, ok := grantOf(r, usr); !ok || g.Access != AccessReadOnly {
			t.Errorf("/usr grant = %+v, %v", g, ok)
		}
	}
	if shadow, err := filepath.EvalSymlinks("/etc/shadow"); err == nil {
		if g, ok := grantOf(r, shadow); !ok || g.Access != AccessDeny {
			t.Errorf("/etc/shadow grant = %+v, %v", g, ok)
		}
	}
	seen := map[string]bool{}
	for _, g := range r.Grants {
		if seen[g.Path] {
			t.Errorf("duplicate grant %s", g.Path)
		}
		seen[g.Path] = true
		if strings.HasPrefix(g.Path, e.home) && g.Path != e.work && g.Access != AccessReadOnly {
			t.Errorf("unexpected grant under home: %+v", g)
		}
	}
	if !slices.Equal(r.Env, []string{"PATH=/bin"}) {
		t.Errorf("Env = %v", r.Env)
	}
	if r.Network != NetworkNone || r.Limits.Memory != 2<<30 || r.Limits.Pids != 1024 || r.Hash != Hash(Default()) {
		t.Errorf("resolved default = %+v", r)
	}
	if err := Default().Validate(); err != nil {
		t.Errorf("default policy invalid: %v", err)
	}
}

// A protected path that is a symlink to a place inside a read-write root:
// the target becomes read-only, and the link itself, which a workload could
// replace, is reported.
func TestProtectedSymlinkReported(t *testing.T) {
	e := newEnv(t)
	mkdirs(t, filepath.Join(e.work, "dotfiles"))
	touch(t, filepath.Join(e.work, "dotfiles", "bashrc"))
	link := filepath.Join(e.work, ".bashrc")
	if err := os.Symlink("dotfiles/bashrc", link); err != nil {
		t.Fatal(err)
	}
	r, err := Default().Resolve(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := grantOf(r, filepath.Join(e.work, "dotfiles", "bashrc")); !ok || g.Access != AccessReadOnly {
		t.Errorf("symlink target not read-only: %+v %v", g, ok)
	}
	if !slices.Contains(r.Skipped, link) {
		t.Errorf("the replaceable link is not reported: %v", r.Skipped)
	}
}

// A read-write grant inside a protected path would make it writable.
func TestReadWriteInsideProtectedRefused(t *testing.T) {
	e := newEnv(t)
	ssh := filepath.Join(e.home, ".ssh")
	objects := filepath.Join(e.work, ".git", "objects")
	mkdirs(t, ssh, objects)
	for _, wd := range []string{ssh, objects} {
		_, err := Default().Resolve(Context{Home: e.home, Workdir: wd})
		if got := only(t, err); !strings.Contains(got.Msg, "inside the protected path") {
			t.Errorf("workdir %s: %v", wd, got)
		}
	}
}

// A grant through a link that the workload or another user could have
// planted is refused, naming the link, its target and what to write; the
// same link in a directory only root can write is followed.
func TestPlantedLinkRefused(t *testing.T) {
	e := newEnv(t)
	host := filepath.Join(e.home, "host", ".config")
	mkdirs(t, filepath.Join(host, "autostart"))
	if err := os.Symlink(host, filepath.Join(e.work, "cache")); err != nil { // planted by an earlier run
		t.Fatal(err)
	}
	src := "filesystem:\n  read_write: [\"{workdir}/cache\"]\n  read_only: [\"{workdir}/cache/autostart\"]\n  deny: [{path: \"{workdir}/cache/x\", optional: true}]\n"
	_, err := parse(t, src).Resolve(e.ctx())
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 3 {
		t.Fatalf("want three errors (rw, ro and deny through the link, the deny although its target is missing), got %v", err)
	}
	for _, want := range []string{"p.yaml:3:16", "filesystem.read_write[0]", "symlink " + filepath.Join(e.work, "cache") + " -> " + host, "read-write grant", `write "` + host + `"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	// Granting the target explicitly works.
	if _, err := parse(t, "filesystem:\n  read_write: [\""+host+"\"]\n").Resolve(e.ctx()); err != nil {
		t.Errorf("explicit target: %v", err)
	}
	// A link owned by another user, or in a directory others can write,
	// is refused wherever it is; the workdir given through one too.
	other := filepath.Join(e.home, "shared")
	mkdirs(t, other)
	if err := os.Chmod(other, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(e.work, filepath.Join(other, "w")); err != nil {
		t.Fatal(err)
	}
	if _, err := Default().Resolve(Context{Home: e.home, Workdir: filepath.Join(other, "w")}); err == nil || !strings.Contains(err.Error(), "others can write") {
		t.Errorf("workdir through a link in a world-writable directory: %v", err)
	}
	if os.Getuid() == 0 {
		if err := os.Lchown(filepath.Join(e.work, "cache"), 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := parse(t, src).Resolve(e.ctx()); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Errorf("link owned by nobody: %v", err)
		}
	}
}

// core.hooksPath names a hooks directory as dangerous as .git/hooks.
func TestHooksPathProtected(t *testing.T) {
	e := newEnv(t)
	mkdirs(t, filepath.Join(e.work, ".git"), filepath.Join(e.work, ".husky", "_"))
	if err := os.WriteFile(filepath.Join(e.work, ".git", "config"), []byte("[core]\n\tbare = false\n[core]\n\thooksPath = .husky/_ ; husky\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := parse(t, "filesystem:\n  protected: [.git/hooks]\n").Resolve(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := grantOf(r, filepath.Join(e.work, ".husky", "_")); !ok || g.Access != AccessReadOnly || !strings.Contains(g.Field, "core.hooksPath") {
		t.Errorf("hooksPath grant = %+v, %v", g, ok)
	}
}

// In git commit mode the repository's data is writable and what runs
// commands is not; a missing part gets a placeholder.
func TestGitCommitMode(t *testing.T) {
	e := newEnv(t)
	mkdirs(t, filepath.Join(e.work, ".git", "hooks"), filepath.Join(e.work, ".git", "objects"))
	touch(t, filepath.Join(e.work, ".git", "config"))
	r, err := parse(t, "filesystem:\n  git: commit\n").Resolve(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := grantOf(r, filepath.Join(e.work, ".git")); ok {
		t.Errorf(".git has a grant of its own in commit mode: %+v", g)
	}
	for _, p := range []string{".git/hooks", ".git/config"} {
		if g, ok := grantOf(r, filepath.Join(e.work, p)); !ok || g.Access != AccessReadOnly {
			t.Errorf("%s: %+v, %v", p, g, ok)
		}
	}
	if !slices.Contains(r.Placeholders, Placeholder{Path: filepath.Join(e.work, ".git", "info"), Dir: true, Field: "filesystem.protected[0]"}) {
		t.Errorf("no placeholder for .git/info: %+v", r.Placeholders)
	}
	if !r.ProtectedNames()[".git"] {
		t.Error("nested repositories are not kept read-only in commit mode")
	}
	if _, err := Parse([]byte("version: 1\nfilesystem:\n  git: yes\n"), "p.yaml"); err == nil || !strings.Contains(err.Error(), "p.yaml:3:8") {
		t.Errorf("bad git mode: %v", err)
	}
}

func TestParseGitConfig(t *testing.T) {
	src := "# c\n[core]\n\tfsmonitor = \"touch /tmp/x\" # run\n[filter \"lfs\"]\n\tsmudge = a \\\n b\n[includeIf \"gitdir:~/w/\"]\n path = x\n[remote.origin]\n url = u\n[alias] st = status\n"
	got := ParseGitConfig([]byte(src))
	want := []GitVar{
		{Key: "core.fsmonitor", Value: "touch /tmp/x", Line: 3},
		{Key: "filter.lfs.smudge", Value: "a  b", Line: 5},
		{Key: "includeif.gitdir:~/w/.path", Value: "x", Line: 8},
		{Key: "remote.origin.url", Value: "u", Line: 10},
		{Key: "alias.st", Value: "status", Line: 11},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	for _, v := range got {
		if GitCommandKey(v.Key) != (v.Key != "remote.origin.url" && v.Key != "alias.st") {
			t.Errorf("GitCommandKey(%s) = %v", v.Key, GitCommandKey(v.Key))
		}
	}
}

// As root, a root-owned link in a directory an earlier run could have
// been granted read-write (its files are root's on disk) is not trusted;
// only the system directories corral never grants read-write hold
// trusted links.
func TestRootLinkOutsideSystemDirs(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: the links in question are root's")
	}
	e := newEnv(t)
	secret := filepath.Join(e.home, "secret")
	mkdirs(t, secret)
	if err := os.Symlink(secret, filepath.Join(e.home, "wd")); err != nil { // "planted by an earlier run in ~"
		t.Fatal(err)
	}
	_, err := Default().Resolve(Context{Home: e.home, Workdir: filepath.Join(e.home, "wd")})
	if err == nil || !strings.Contains(err.Error(), "system directories") {
		t.Errorf("workdir through a root link outside the system directories: %v", err)
	}
}

// What git reads for a linked worktree comes from the main repository's
// config; an include.path inside the tree is configuration too.
func TestGitReadsWorktreeAndIncludes(t *testing.T) {
	e := newEnv(t)
	main := filepath.Join(e.home, "main", ".git")
	wtDir := filepath.Join(main, "worktrees", "wt")
	mkdirs(t, wtDir, filepath.Join(e.work, "tools"))
	if err := os.WriteFile(filepath.Join(main, "config"), []byte("[core]\n\thooksPath = .githooks\n[include]\n\tpath = "+filepath.Join(e.work, "tools", "git.cfg")+"\n\tpath = "+filepath.Join(e.work, "tools", "missing.cfg")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	touch(t, filepath.Join(e.work, "tools", "git.cfg"))
	if err := os.WriteFile(filepath.Join(wtDir, "commondir"), []byte("../..\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.work, ".git"), []byte("gitdir: "+wtDir+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Default().Resolve(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := grantOf(r, filepath.Join(e.work, "tools", "git.cfg")); !ok || g.Access != AccessReadOnly {
		t.Errorf("an included config in the tree is writable: %+v %v", g, ok)
	}
	if !slices.Contains(r.Skipped, filepath.Join(e.work, "tools", "missing.cfg")) {
		t.Errorf("a missing include in the tree is not listed for the scan: %v", r.Skipped)
	}
	if !slices.ContainsFunc(r.Placeholders, func(ph Placeholder) bool { return ph.Path == filepath.Join(e.work, ".githooks") && ph.Dir }) {
		t.Errorf("the worktree's hooks directory (the main repository's core.hooksPath) is not held: %+v", r.Placeholders)
	}
}

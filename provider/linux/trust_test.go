//go:build linux

package linux

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/provider/providertest"
)

// The CA bundle of a sandbox whose policy inspects egress, at the
// provider's level (the conformance suite's InspectedEgress tests take
// it through the session core with real clients): where init puts it
// among symlinks planted to lead it astray, when a grant covers /run,
// and SetTrust's rewrite in place, which follows no link. Real
// sandboxes; TestTrustUnprivileged runs these again as corral-test.

// inspecting makes a policy's egress inspect one host.
func inspecting(p *policy.Policy) {
	p.Network.Mode = policy.NetworkProxy
	p.Network.Allow = []policy.Endpoint{{Host: "api.allowed.test", Access: policy.HTTPReadOnly}}
}

// withTrustPaths points the distro bundle paths at paths for the test.
func withTrustPaths(t *testing.T, paths ...string) {
	old := trustPaths
	trustPaths = paths
	t.Cleanup(func() { trustPaths = old })
}

// withStorePaths points the distro Java store paths at paths.
func withStorePaths(t *testing.T, paths ...string) {
	old := storePaths
	storePaths = paths
	t.Cleanup(func() { storePaths = old })
}

// catEach is a script that prints "PATH: " and the first line of each
// path (or cat's error), one line each, after the trust variables.
func catEach(paths ...string) string {
	var b strings.Builder
	b.WriteString(`echo "SSL_CERT_FILE: $SSL_CERT_FILE"; echo "GIT_SSL_CAINFO: $GIT_SSL_CAINFO"; echo "JAVA_TOOL_OPTIONS: ${JAVA_TOOL_OPTIONS-(unset)}"` + "\n")
	for _, p := range paths {
		b.WriteString(`echo "` + p + `: $(head -n1 '` + p + `' 2>&1 | sed 's/^head: //')"` + "\n")
	}
	return b.String()
}

// lines is r's stdout as "PATH: line" pairs.
func lines(r execResult) map[string]string {
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if k, v, ok := strings.Cut(l, ": "); ok {
			out[k] = v
		}
	}
	return out
}

// runOnce provisions a per-run sandbox of plan with bundle and store
// (Trust, TrustStore), starts it, runs script and removes it.
func runOnce(t *testing.T, plan *provider.Plan, bundle, store, script string) (execResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := New().Provision(ctx, plan, provider.ProvisionOptions{Trust: []byte(bundle), TrustStore: []byte(store)})
	if err != nil {
		return execResult{}, err
	}
	defer func() { _ = sb.Stop(ctx); _ = sb.Deprovision(ctx) }()
	if err := sb.Start(ctx); err != nil {
		return execResult{}, err
	}
	return run(t, sb, "sh", "-c", script), nil
}

// noRunDirs fails the test if a per-run state directory of this process
// is left in StateBase.
func noRunDirs(t *testing.T) {
	t.Helper()
	ents, _ := os.ReadDir(StateBase())
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "run-") {
			t.Errorf("per-run state directory %s left in %s", e.Name(), StateBase())
		}
	}
}

// The bundle, and the Java store by the same rules, go over each distro
// path that is a readable regular file of a grant, symlinks followed
// inside the sandbox's root only: a link to a grant's file covers that
// file; one to a host file outside every grant (absolute, or climbing
// out with ..) or into /proc covers nothing; a directory, a denied file,
// an absent name neither. The host sees none of it. JAVA_TOOL_OPTIONS
// names the store when no distro path holds it, and is unset when one
// does.
func TestTrustPaths(t *testing.T) {
	needPureGo(t)
	t.Run("bundle", func(t *testing.T) { testTrustPaths(t, false) })
	t.Run("store", func(t *testing.T) { testTrustPaths(t, true) })
}

// testTrustPaths is TestTrustPaths with the test's distro paths those of
// the bundle (the store's none) or of the store (the bundle's none).
func testTrustPaths(t *testing.T, store bool) {
	wd, home := workdirs(t, 65534)
	outside := filepath.Join(t.TempDir(), "x.crt") // no grant reaches it
	files := map[string]string{"plain.crt": "plain", "sub/target.crt": "target", "denied.crt": "denied"}
	for name, body := range files {
		p := filepath.Join(wd, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(outside, []byte("outside\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(wd, "dir.crt"), 0o755); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{"link.pem": "sub/target.crt", "abs.pem": outside,
		"escape.pem": strings.Repeat("../", 12) + strings.TrimPrefix(outside, "/"), "proc.pem": "/proc/version"}
	for name, to := range links {
		if err := os.Symlink(to, filepath.Join(wd, name)); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(wd, "escape.pem")); err != nil || string(b) != "outside\n" {
		t.Fatalf("escape.pem does not reach %s on the host: %q %v", outside, b, err)
	}
	var paths []string
	for _, n := range []string{"absent.crt", "plain.crt", "link.pem", "abs.pem", "escape.pem", "proc.pem", "dir.crt", "denied.crt"} {
		paths = append(paths, filepath.Join(wd, n))
	}
	bundle, jks := "bundle-"+provider.NewID(), "store-"+provider.NewID()
	want, opts := bundle, "-Djavax.net.ssl.trustStore="+provider.JavaTrustStorePath+" -Djavax.net.ssl.trustStoreType=JKS"
	if store {
		withTrustPaths(t)
		withStorePaths(t, paths...)
		want, opts = jks, "(unset)"
	} else {
		withTrustPaths(t, paths...)
		withStorePaths(t)
	}
	before := entries(t, wd)
	plan, err := planFor(wd, home, func(p *policy.Policy) {
		inspecting(p)
		p.Filesystem.Deny = append(p.Filesystem.Deny, policy.PathRule{Path: filepath.Join(wd, "denied.crt")})
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(plan.Loss, func(l provider.Loss) bool {
		return l.Severity == provider.SeverityInfo && strings.Contains(l.Message, provider.TrustBundlePath)
	}) {
		t.Errorf("Map says nothing of the CA bundle: %v", plan.Loss)
	}
	r, err := runOnce(t, plan, bundle+"\n", jks+"\n", catEach(append([]string{provider.TrustBundlePath, provider.JavaTrustStorePath, filepath.Join(wd, "sub/target.crt")}, paths...)...))
	if err != nil || r.err != nil || r.st.Code != 0 {
		t.Fatalf("sandbox: %v %v %+v %s", err, r.err, r.st, r.stderr)
	}
	got := lines(r)
	t.Logf("inside:\n%s", r.stdout)
	wants := map[string]string{
		"SSL_CERT_FILE": provider.TrustBundlePath, "GIT_SSL_CAINFO": provider.TrustBundlePath, "JAVA_TOOL_OPTIONS": opts,
		provider.TrustBundlePath: bundle, provider.JavaTrustStorePath: jks,
		"plain.crt": want, "link.pem": want, "sub/target.crt": want,
		"absent.crt": "No such file", "abs.pem": "No such file", "escape.pem": "No such file",
		"dir.crt": "Is a directory", "denied.crt": "Permission denied",
	}
	for k, w := range wants {
		p := k
		if !strings.HasPrefix(k, "/") && !strings.Contains(k, "_") {
			p = filepath.Join(wd, k)
		}
		if v := got[p]; !strings.Contains(v, w) || w != want && strings.Contains(v, want) {
			t.Errorf("%s inside: %q, want %q", p, v, w)
		}
	}
	if v := got[filepath.Join(wd, "proc.pem")]; strings.Contains(v, want) {
		t.Errorf("the trust file went over /proc through proc.pem: %q", v)
	}
	if b, _ := os.ReadFile(outside); string(b) != "outside\n" {
		t.Errorf("the host file outside the grants now holds %q", b)
	}
	for name, body := range files {
		if b, _ := os.ReadFile(filepath.Join(wd, name)); string(b) != body+"\n" {
			t.Errorf("host %s now holds %q", name, b)
		}
	}
	if after := entries(t, wd); !slices.Equal(after, before) {
		t.Errorf("the workdir had %v and has %v", before, after)
	}
	noRunDirs(t)
}

// A policy that denies /run (policy resolution refuses grants there): the
// bundle and the Java store cannot be at provider.TrustBundlePath and
// JavaTrustStorePath, so Map warns, naming the grant, and they go over
// the distro paths only, the first of which the variables name; with
// none of them in the sandbox, Start fails for the bundle and nothing is
// left, while a store with nowhere to go is no error (nothing names it).
func TestTrustRunDenied(t *testing.T) {
	needPureGo(t)
	wd, home := workdirs(t, 65534)
	plain, cacerts := filepath.Join(wd, "plain.crt"), filepath.Join(wd, "cacerts")
	for _, f := range []string{plain, cacerts} {
		if err := os.WriteFile(f, []byte("plain\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	absent := filepath.Join(wd, "absent.crt")
	plan, err := planFor(wd, home, func(p *policy.Policy) {
		inspecting(p)
		p.Filesystem.Deny = append(p.Filesystem.Deny, policy.PathRule{Path: "/run"})
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(plan.Loss, func(l provider.Loss) bool {
		return l.Severity == provider.SeverityWarning && strings.HasPrefix(l.Field, "filesystem.deny") && strings.Contains(l.Message, provider.TrustBundlePath)
	}) {
		t.Errorf("Map does not warn that /run is denied: %v", plan.Loss)
	}
	if !slices.ContainsFunc(plan.Loss, func(l provider.Loss) bool {
		return l.Severity == provider.SeverityWarning && strings.HasPrefix(l.Field, "filesystem.deny") && strings.Contains(l.Message, provider.JavaTrustStorePath)
	}) {
		t.Errorf("Map does not warn that /run is denied, for the Java store: %v", plan.Loss)
	}
	withTrustPaths(t, absent, plain)
	withStorePaths(t, absent, cacerts)
	bundle, store := "bundle-"+provider.NewID(), "store-"+provider.NewID()
	r, err := runOnce(t, plan, bundle+"\n", store+"\n", catEach(provider.TrustBundlePath, plain, provider.JavaTrustStorePath, cacerts))
	if err != nil || r.err != nil || r.st.Code != 0 {
		t.Fatalf("sandbox: %v %v %+v %s", err, r.err, r.st, r.stderr)
	}
	got := lines(r)
	if got["SSL_CERT_FILE"] != plain || got[plain] != bundle || strings.Contains(got[provider.TrustBundlePath], bundle) {
		t.Errorf("with /run denied: %v, want SSL_CERT_FILE %s holding %s", got, plain, bundle)
	}
	if got[cacerts] != store || strings.Contains(got[provider.JavaTrustStorePath], store) || got["JAVA_TOOL_OPTIONS"] != "(unset)" {
		t.Errorf("with /run denied: %v, want the Java store at %s only, and no JAVA_TOOL_OPTIONS", got, cacerts)
	}
	for _, l := range plan.Loss {
		if strings.Contains(l.Message, provider.TrustBundlePath) || strings.Contains(l.Message, provider.JavaTrustStorePath) {
			t.Logf("Map: %s %s: %s", l.Severity, l.Field, l.Message)
		}
	}
	withStorePaths(t, absent)
	r, err = runOnce(t, plan, bundle+"\n", store+"\n", catEach(plain, cacerts))
	if err != nil || r.err != nil || r.st.Code != 0 {
		t.Fatalf("a sandbox whose Java store has nowhere to go: %v %v %+v %s", err, r.err, r.st, r.stderr)
	}
	if got := lines(r); got[plain] != bundle || got[cacerts] != "plain" || got["JAVA_TOOL_OPTIONS"] != "(unset)" {
		t.Errorf("with nowhere for the Java store: %v, want the bundle at %s, %s as it was, no JAVA_TOOL_OPTIONS", got, plain, cacerts)
	}
	withTrustPaths(t, absent)
	_, err = runOnce(t, plan, bundle+"\n", store+"\n", "true")
	t.Logf("Start with nowhere for the bundle: %v", err)
	if provider.CodeOf(err) != provider.CodeStartFailed || !strings.Contains(err.Error(), "nowhere") || !strings.Contains(err.Error(), "filesystem.deny") {
		t.Errorf("with nowhere for the bundle: %v, want %s saying why", err, provider.CodeStartFailed)
	}
	noRunDirs(t)
}

// SetTrust rewrites a persistent sandbox's bundle and Java store in
// place: a fresh provider's recovered sandbox shows the new ones at
// once, longer or shorter, at every place; a nil store leaves the store
// as it is. It refuses a file that is no longer the one Provision wrote
// (a symlink, a hard link) without touching what it leads to, and a
// sandbox made without a bundle.
func TestTrustSetTrust(t *testing.T) {
	needPureGo(t)
	plan, wd := persistPlan(t, inspecting)
	cacerts := filepath.Join(wd, "cacerts")
	if err := os.WriteFile(cacerts, []byte("plain\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	withStorePaths(t, cacerts)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first := "first-" + provider.NewID()
	sb, err := New().Provision(ctx, plan, provider.ProvisionOptions{Persistent: true, Owner: owner(t), Trust: []byte(first + "\n"), TrustStore: []byte("store-" + first + "\n")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = New().Destroy(context.Background(), sb.ID()) })
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	places := []string{provider.TrustBundlePath, provider.TrustBundlePaths[0]}
	stores := []string{provider.JavaTrustStorePath, cacerts}
	check := func(s provider.Sandbox, want, wantStore string) {
		t.Helper()
		got := lines(run(t, s, "sh", "-c", catEach(append(places, stores...)...)))
		for _, p := range places {
			if got[p] != want {
				t.Errorf("%s: %q, want %q", p, got[p], want)
			}
		}
		for _, p := range stores {
			if got[p] != wantStore {
				t.Errorf("%s: %q, want %q", p, got[p], wantStore)
			}
		}
	}
	check(sb, first, "store-"+first)
	rec, err := New().Recover(ctx, plan, sb.(provider.Persistent).State())
	if err != nil {
		t.Fatal(err)
	}
	tu, ok := rec.(provider.TrustUpdater)
	if !ok {
		t.Fatalf("a recovered linux sandbox (%T) is no provider.TrustUpdater", rec)
	}
	for _, b := range []string{"longer-" + provider.NewID() + provider.NewID() + "\nmore\n", "short\n"} {
		if err := tu.SetTrust([]byte(b), []byte("store-"+b)); err != nil {
			t.Fatalf("SetTrust: %v", err)
		}
		l := strings.SplitN(b, "\n", 2)[0]
		check(rec, l, "store-"+l)
	}
	if err := tu.SetTrust([]byte("pem-only\n"), nil); err != nil {
		t.Fatalf("SetTrust: %v", err)
	}
	check(rec, "pem-only", "store-short")
	bundle, jks := trustKinds()[0].Name, trustKinds()[1].Name
	for f, attack := range map[string][2][]byte{bundle: {[]byte("attack\n"), nil}, jks: {[]byte("pem-only\n"), []byte("attack\n")}} {
		file := filepath.Join(sb.(*persistent).dir, f)
		if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o444 {
			t.Errorf("%s after SetTrust: %v %v, want mode 0444", f, fi, err)
		}
		victim := filepath.Join(t.TempDir(), "victim")
		if err := os.WriteFile(victim, []byte("victim\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file, file+".old"); err != nil {
			t.Fatal(err)
		}
		for name, plant := range map[string]func() error{"symlink": func() error { return os.Symlink(victim, file) }, "hard link": func() error { return os.Link(victim, file) }} {
			os.Remove(file)
			if err := plant(); err != nil {
				t.Fatal(err)
			}
			if err := tu.SetTrust(attack[0], attack[1]); err == nil {
				t.Errorf("SetTrust wrote through a %s at %s", name, f)
			}
			if b, _ := os.ReadFile(victim); string(b) != "victim\n" {
				t.Errorf("SetTrust through a %s at %s changed its target: %q", name, f, b)
			}
		}
		os.Remove(file)
		if err := os.Rename(file+".old", file); err != nil {
			t.Fatal(err)
		}
	}
	check(rec, "pem-only", "store-short")

	plain, _ := persistPlan(t, nil)
	sb2, err := New().Provision(ctx, plain, provider.ProvisionOptions{Persistent: true, Owner: owner(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = New().Destroy(context.Background(), sb2.ID()) })
	if err := sb2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb2.(provider.TrustUpdater).SetTrust([]byte("x\n"), nil); err == nil || !strings.Contains(err.Error(), "without a CA bundle") {
		t.Errorf("SetTrust of a sandbox made without a bundle: %v", err)
	}
	if r := run(t, sb2, "sh", "-c", `echo "[$SSL_CERT_FILE]"`); r.stdout != "[]\n" {
		t.Errorf("a sandbox without a bundle has SSL_CERT_FILE %q", r.stdout)
	}
}

// A JVM whose distro store is out of reach (the policy denies
// /etc/ssl/certs/java, where the host JDK's cacerts leads): the
// sandbox's Java store is at JavaTrustStorePath alone and
// JAVA_TOOL_OPTIONS names it, after the options the policy gives, which
// stay; the host's JVM inside trusts the inspected origin with no
// option of its own, and does not without JAVA_TOOL_OPTIONS (the
// conformance suite's InspectedEgress tests the distro path, where
// nothing is set).
func TestTrustJava(t *testing.T) {
	needPureGo(t)
	h := harness()
	if !slices.Contains(h.Tools, "java") {
		t.Skip("no java on PATH: the JVM's trust was not tried (.ci/run installs default-jre-headless)")
	}
	h.Tools = []string{"java"}
	h.Inspect = func(p *policy.Policy) {
		p.Filesystem.Deny = append(p.Filesystem.Deny, policy.PathRule{Path: filepath.Dir(provider.JavaTrustStorePaths[0])})
		p.Process.Env.Set = map[string]string{"JAVA_TOOL_OPTIONS": "-Dcorral.test=kept"}
	}
	providertest.RunInspected(t, h)
}

// TestTrustUnprivileged runs the TestTrust tests again as corral-test:
// there the workload's uid owns the bundle's file on the host.
func TestTrustUnprivileged(t *testing.T) {
	if os.Getenv(unprivilegedEnv) != "" || os.Geteuid() != 0 {
		t.Skip("not root: the TestTrust tests themselves run unprivileged")
	}
	want := 3
	if slices.Contains(harness().Tools, "java") {
		want++ // TestTrustJava too
	}
	if out := asTestUser(t, "^TestTrust(Paths|RunDenied|SetTrust|Java)$"); len(regexp.MustCompile(`(?m)^--- PASS: TestTrust`).FindAllString(out, -1)) != want {
		t.Fatalf("the TestTrust tests as corral-test did not all run:\n%s", out)
	}
}

// TestTrustLossStateGrant: Map refuses an inspecting policy whose grant
// shows StateBase (where the trust files are kept), not only Provision.
func TestTrustLossStateGrant(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(StateDirEnv, filepath.Join(dir, "state"))
	r := &policy.Resolved{Network: policy.NetworkProxy, Egress: policy.Network{Allow: []policy.Endpoint{{Host: "api.allowed.test", Access: policy.HTTPReadOnly}}},
		Grants: []policy.PathGrant{{Path: dir, Access: policy.AccessReadWrite, Dir: true, Field: "filesystem.read_write[0]"}}}
	loss := trustLoss(r)
	if len(loss) != 1 || loss[0].Severity != provider.SeverityError || loss[0].Field != "filesystem.read_write[0]" {
		t.Errorf("trustLoss with StateBase granted: %+v, want one error loss on the grant", loss)
	}
	r.Grants = nil
	if loss := trustLoss(r); provider.LossReport(loss).HasErrors() {
		t.Errorf("trustLoss without the grant: %+v", loss)
	}
}

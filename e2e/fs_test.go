//go:build linux

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// P01: a read-only grant is readable but not writable; a read-write grant
// is writable and the change reaches the host.
func TestP01_ReadOnlyVsReadWrite(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		tok1, tok2 := token(), token()
		d1 := mkdir(t, id, "p01-ro")
		d2 := mkdir(t, id, "p01-rw")
		wd := mkdir(t, id, "p01-wd")
		writeFile(t, id, filepath.Join(d1, "f"), tok1, 0o644)
		writeFile(t, id, filepath.Join(d2, "f"), tok2, 0o644)
		pol := writePolicy(t, id, policy{RO: []string{d1}, RW: []string{d2}})
		script := `
cat "$D1/f"; echo
cat "$D2/f"; echo
if echo pwned > "$D1/f"; then echo W1=ok; else echo W1=fail; fi
if touch "$D1/new"; then echo T1=ok; else echo T1=fail; fi
if rm -f "$D1/f"; then echo R1=ok; else echo R1=fail; fi
if echo changed > "$D2/f"; then echo W2=ok; else echo W2=fail; fi
if mkdir "$D2/sub" && echo x > "$D2/sub/new"; then echo T2=ok; else echo T2=fail; fi
`
		r := corral(t, run{id: id, policy: pol, workdir: wd, args: []string{"/bin/sh", "-c", "D1=" + d1 + " D2=" + d2 + "; " + script}})
		assertCode(t, r, 0)
		for _, want := range []string{tok1, tok2, "W1=fail", "T1=fail", "R1=fail", "W2=ok", "T2=ok"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("stdout lacks %q\n%s", want, r)
			}
		}
		if !strings.Contains(r.stderr, "Read-only file system") && !strings.Contains(r.stderr, "Permission denied") {
			t.Errorf("writes to the read-only grant did not fail with EROFS/EACCES\n%s", r)
		}
		if got := readFile(t, filepath.Join(d1, "f")); got != tok1 {
			t.Errorf("read-only host file changed: %q", got)
		}
		if exists(filepath.Join(d1, "new")) {
			t.Errorf("a file was created in the read-only grant on the host")
		}
		if got := readFile(t, filepath.Join(d2, "f")); got != "changed\n" {
			t.Errorf("write to the read-write grant not visible on the host: %q", got)
		}
		if got := readFile(t, filepath.Join(d2, "sub", "new")); got != "x\n" {
			t.Errorf("new file in the read-write grant not visible on the host: %q", got)
		}
	})
}

// P02: with the default grants, host credentials and other homes are
// unreadable and no canary token reaches the output.
func TestP02_UnapprovedPaths(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		tok := token()
		home := mkdir(t, id, "p02-home")
		files := []string{
			".ssh/id_test", ".aws/credentials", ".bashrc",
			".mozilla/firefox/abcd.default-release/cookies.sqlite",
			".config/google-chrome/Default/Cookies",
		}
		for _, f := range files {
			writeFile(t, id, filepath.Join(home, f), tok+"-"+f, 0o600)
		}
		// Another user's home with a canary: the test user's home when we
		// are root, root's home when we are the test user.
		other := testUser.home
		if !id.isRoot() {
			other = "/root"
		}
		otherTok := token()
		if os.Geteuid() == 0 {
			p := filepath.Join(other, ".corral-e2e-"+otherTok)
			owner := testUser
			if other == "/root" {
				owner = &ident{uid: 0, gid: 0}
			}
			if err := os.WriteFile(p, []byte(otherTok), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove(p) })
			chown(t, owner, p)
		}
		wd := mkdir(t, id, "p02-wd")
		var b strings.Builder
		b.WriteString("echo HOME=$HOME; ls -la \"$HOME\"; ")
		for _, f := range files {
			b.WriteString("cat '" + filepath.Join(home, f) + "'; ")
		}
		b.WriteString("ls -la /root /home " + other + "; cat /root/.corral-e2e-* " + other + "/.corral-e2e-*; cat /etc/shadow /etc/gshadow; ")
		b.WriteString("ls -laR '" + home + "' | head -50; grep -rs canary '" + home + "' /root " + other + " /etc; echo done")
		// root runs the built-in default policy; the test user cannot
		// (cgroups are not delegated), so it gets the same grants with
		// cgroups optional.
		r := run{id: id, workdir: wd, env: []string{"HOME=" + home}, args: sh(b.String())}
		if !id.isRoot() {
			r.policy = writePolicy(t, id, policy{})
		}
		res := corral(t, r)
		assertCode(t, res, 0)
		if !strings.Contains(res.stdout, "done") || !strings.Contains(res.stdout, "HOME="+home) {
			t.Fatalf("script did not run to the end with HOME=%s\n%s", home, res)
		}
		assertNoToken(t, res.combined(), tok, otherTok)
		if strings.Contains(res.stdout, "root:") {
			t.Errorf("/etc/shadow content visible\n%s", res)
		}
	})
}

// P03: symlinks, .. walks, // and relative paths never read the denied
// tree nor write outside the writable one.
func TestP03_PathTricks(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		tok := token()
		parent := mkdir(t, id, "p03")
		w := filepath.Join(parent, "w")
		s := filepath.Join(parent, "secret")
		ro := filepath.Join(parent, "ro")
		for _, d := range []string{w, s, ro} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
			chown(t, id, d)
		}
		writeFile(t, id, filepath.Join(s, "token"), tok, 0o644)
		writeFile(t, id, filepath.Join(ro, "file"), "original", 0o644)
		// W is the workdir (include_workdir grants it read-write). Writes
		// to W's parent land in the private /tmp (the test dirs live under
		// /tmp) or fail: what matters is the host.
		pol := writePolicy(t, id, policy{RO: []string{ro}, Deny: []string{s}})
		script := `
cd "$W" || exit 99
ln -s "$S/token" l1; cat l1
ln -s "$S" l2; ls -la l2/; cat l2/token
ln -s "$RO/file" l3; if echo pwned > l3; then echo L3=ok; else echo L3=fail; fi
ln "$S/token" hard 2>&1; cat hard
cat "$W/../secret/token" ../secret/token ./../secret/token "//$S//token" "/./$S/./token" "$W/./../../$(basename "$P")/secret/token"
mkdir -p sub/deeper && cd sub/deeper && cat ../../../secret/token
if echo x > ../../../escape1; then echo E1=ok; else echo E1=fail; fi
if echo x > "$W/../escape2"; then echo E2=ok; else echo E2=fail; fi
if echo x > "//$P//escape3"; then echo E3=ok; else echo E3=fail; fi
cd "$W" && if mv "$W/l1" ../escape4; then echo E4=ok; else echo E4=fail; fi
if echo x > "$S/new"; then echo E5=ok; else echo E5=fail; fi
cp -r "$S" copied; cat copied/token
echo done
`
		res := corral(t, run{id: id, policy: pol, workdir: w,
			args: sh("P=" + parent + " W=" + w + " S=" + s + " RO=" + ro + "; " + script)})
		if !strings.Contains(res.stdout, "done") {
			t.Fatalf("script did not finish\n%s", res)
		}
		assertNoToken(t, res.combined(), tok)
		for _, want := range []string{"L3=fail", "E5=fail"} {
			if !strings.Contains(res.stdout, want) {
				t.Errorf("stdout lacks %q\n%s", want, res)
			}
		}
		if got := readFile(t, filepath.Join(ro, "file")); got != "original" {
			t.Errorf("read-only file written through a symlink: %q", got)
		}
		if got := readFile(t, filepath.Join(s, "token")); got != tok {
			t.Errorf("denied file changed: %q", got)
		}
		ents, _ := os.ReadDir(parent)
		for _, e := range ents {
			if n := e.Name(); n != "w" && n != "secret" && n != "ro" {
				t.Errorf("file written outside the writable root: %s", filepath.Join(parent, n))
			}
		}
		if exists(filepath.Join(s, "new")) {
			t.Errorf("file created in the denied tree")
		}
		if wents, _ := os.ReadDir(s); len(wents) != 1 {
			t.Errorf("denied dir content changed: %v", wents)
		}
	})
}

// P17: hostile workdirs are rejected (or confined), and the caller's open
// fds do not reach the workload.
func TestP17_LauncherInputs(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		pol := writePolicy(t, id, policy{})
		base := mkdir(t, id, "p17")
		linkEtc := filepath.Join(base, "to-etc")
		linkRoot := filepath.Join(base, "to-root")
		for l, target := range map[string]string{linkEtc: "/etc", linkRoot: "/"} {
			if err := os.Symlink(target, l); err != nil {
				t.Fatal(err)
			}
			chown(t, id, l)
		}
		dots := base + strings.Repeat("/..", 12)
		cases := []struct {
			name, workdir string
			extra         []*os.File
		}{
			{"proc-self-fd", "/proc/self/fd/3", nil},
			{"proc-1-cwd", "/proc/1/cwd", nil},
			{"proc-self-cwd", "/proc/self/cwd", nil},
			{"symlink-to-etc", linkEtc, nil},
			{"symlink-to-root", linkRoot, nil},
			{"dotdot-chain-to-root", dots, nil},
			{"home", id.home, nil},
		}
		dirf, err := os.Open(base)
		if err != nil {
			t.Fatal(err)
		}
		defer dirf.Close()
		cases[0].extra = []*os.File{dirf}
		for _, c := range cases {
			marker := filepath.Join(base, "marker-"+c.name)
			res := corral(t, run{id: id, policy: pol, workdir: c.workdir, extra: c.extra,
				args: sh("touch " + marker + " ./marker-" + c.name + "; echo ran")})
			if res.code != 122 {
				t.Errorf("%s: -C %s: exit %d, want 122 (policy rejected)\n%s", c.name, c.workdir, res.code, res)
			}
			if strings.Contains(res.stdout, "ran") || exists(marker) {
				t.Errorf("%s: the command ran", c.name)
			}
		}
		// A benign .. chain resolves to the workdir itself and confines.
		sub := filepath.Join(base, "a")
		if err := os.MkdirAll(filepath.Join(sub, "b"), 0o755); err != nil {
			t.Fatal(err)
		}
		chown(t, id, sub)
		chown(t, id, filepath.Join(sub, "b"))
		res := corral(t, run{id: id, policy: pol, workdir: sub + "/b/../b/..",
			args: sh("pwd; touch ok; touch ../escape")})
		assertCode(t, res, 0, 1)
		if !exists(filepath.Join(sub, "ok")) || exists(filepath.Join(base, "escape")) {
			t.Errorf(".. chain workdir not confined to %s\n%s", sub, res)
		}

		// fds 3..64 open in the caller.
		tok := token()
		secret := filepath.Join(base, "secret")
		writeFile(t, id, secret, tok, 0o644)
		var extra []*os.File
		for i := 3; i <= 64; i++ {
			f, err := os.Open(secret)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			extra = append(extra, f)
		}
		wd := mkdir(t, id, "p17-wd")
		res = corral(t, run{id: id, policy: pol, workdir: wd, extra: extra,
			args: sh(probeBin + " fds; ls /proc/self/fd; for n in 3 4 5 10 63 64; do cat /proc/self/fd/$n; done 2>/dev/null; echo done")})
		assertCode(t, res, 0)
		if v, _ := lineValue(res.stdout, "fds"); v != "[0 1 2]" {
			t.Errorf("workload fds are %q, want [0 1 2]\n%s", v, res)
		}
		assertNoToken(t, res.combined(), tok)
	})
}

// P18: protected paths inside a writable root stay read-only; the private
// home does not persist.
func TestP18_Persistence(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		repo := mkdir(t, id, "p18-repo")
		git := exec.Command("git", "init", "-q", repo)
		if out, err := git.CombinedOutput(); err != nil {
			t.Fatalf("git init: %v: %s", err, out)
		}
		for _, f := range []string{".bashrc", ".profile"} {
			writeFile(t, id, filepath.Join(repo, f), "# original "+f+"\n", 0o644)
		}
		_ = filepath.Walk(repo, func(p string, _ os.FileInfo, _ error) error { chown(t, id, p); return nil })
		home := mkdir(t, id, "p18-home")
		writeFile(t, id, filepath.Join(home, ".bashrc"), "# home bashrc\n", 0o644)
		writeFile(t, id, filepath.Join(home, ".profile"), "# home profile\n", 0o644)
		before := snapshot(t, repo, home)
		r := run{id: id, workdir: repo, env: []string{"HOME=" + home}, args: sh(`
for f in .git/hooks/pre-commit .git/config .bashrc .profile "$HOME/.bashrc" "$HOME/.profile" "` + home + `/.bashrc" "` + home + `/.profile"; do
  if echo 'touch /tmp/pwned' >> "$f"; then echo "W $f ok"; else echo "W $f fail"; fi
done
chmod +x .git/hooks/pre-commit
rm -rf .git/hooks; mv .git/config .git/config.bak; ln -sf /tmp/x .git/hooks/post-checkout
echo done`)}
		if !id.isRoot() {
			r.policy = writePolicy(t, id, policy{})
		}
		res := corral(t, r)
		if !strings.Contains(res.stdout, "done") {
			t.Fatalf("script did not finish\n%s", res)
		}
		for _, f := range []string{".git/hooks/pre-commit", ".git/config", ".bashrc", ".profile"} {
			if !strings.Contains(res.stdout, "W "+f+" fail") {
				t.Errorf("write to protected %s did not fail\n%s", f, res)
			}
		}
		after := snapshot(t, repo, home)
		diffSnapshots(t, before, after)
	})
}

// P18 (rename variant): renaming the directory that contains a protected
// mount point (.git) and recreating it must not let the workload plant git
// config or hooks that run on the host later.
func TestP18_PersistenceRenameParent(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		repo := mkdir(t, id, "p18r-repo")
		if out, err := exec.Command("git", "init", "-q", repo).CombinedOutput(); err != nil {
			t.Fatalf("git init: %v: %s", err, out)
		}
		_ = filepath.Walk(repo, func(p string, _ os.FileInfo, _ error) error { chown(t, id, p); return nil })
		before := snapshot(t, repo)
		r := run{id: id, workdir: repo, args: sh(`
mv .git .git-moved && echo MOVED
mkdir -p .git/hooks && cp -a .git-moved/HEAD .git-moved/objects .git-moved/refs .git/ 2>/dev/null
printf '[core]\n\trepositoryformatversion = 0\n\tfsmonitor = touch /tmp/pwned\n' > .git/config && echo PLANTED-CONFIG
printf '#!/bin/sh\ntouch /tmp/pwned\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit && echo PLANTED-HOOK
mv .git-moved/hooks .git-moved/hooks2 2>/dev/null && echo MOVED-HOOKS
echo done`)}
		if !id.isRoot() {
			r.policy = writePolicy(t, id, policy{})
		}
		res := corral(t, r)
		if !strings.Contains(res.stdout, "done") {
			t.Fatalf("script did not finish\n%s", res)
		}
		cfg := filepath.Join(repo, ".git", "config")
		if b, err := os.ReadFile(cfg); err != nil || strings.Contains(string(b), "fsmonitor") {
			t.Errorf("after the run the host's %s is %q (err %v): the workload replaced the protected git config by renaming .git\n%s", cfg, b, err, res)
		}
		if exists(filepath.Join(repo, ".git", "hooks", "pre-commit")) {
			t.Errorf("the workload planted %s on the host by renaming .git\n%s", filepath.Join(repo, ".git/hooks/pre-commit"), res)
		}
		if exists(filepath.Join(repo, ".git-moved")) {
			t.Errorf("the workload renamed the directory holding protected paths (.git -> .git-moved)")
		}
		_ = before
	})
}

// snapshot records the content of every regular file under the roots.
func snapshot(t *testing.T, roots ...string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, root := range roots {
		_ = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				return nil
			}
			switch {
			case fi.Mode().IsRegular():
				b, _ := os.ReadFile(p)
				m[p] = string(b) + "|" + fi.Mode().String()
			case fi.Mode()&os.ModeSymlink != 0:
				l, _ := os.Readlink(p)
				m[p] = "symlink:" + l
			case fi.IsDir():
				m[p] = "dir"
			}
			return nil
		})
	}
	return m
}

func diffSnapshots(t *testing.T, before, after map[string]string) {
	t.Helper()
	for p, v := range before {
		if a, ok := after[p]; !ok {
			t.Errorf("host path %s was removed", p)
		} else if a != v {
			t.Errorf("host path %s changed: %q -> %q", p, v, a)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("host path %s was created", p)
		}
	}
}

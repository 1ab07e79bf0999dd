//go:build linux

package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// A root caller's read-write tree is idmapped, so files the workload
// creates are root's on disk: setuid and setgid bits must never be set
// there, or anyone on the host could run them as root.
func TestNoSetuidFilesInRootOwnedWorkdir(t *testing.T) {
	id := rootIdent(t)
	wd := mkdir(t, id, "suid")
	res := corral(t, run{id: id, workdir: wd, args: sh(`
cp /bin/true t && chmod 4755 t; echo "chmod=$?"
chmod g+s t; echo "chmod-g=$?"
install -m 6755 /bin/true t2; echo "install=$?"
echo done`)})
	if !strings.Contains(res.stdout, "done") {
		t.Fatalf("script did not run\n%s", res)
	}
	for _, f := range []string{"t", "t2"} {
		st, err := os.Stat(filepath.Join(wd, f))
		if err != nil {
			continue // not created is fine
		}
		if st.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("%s on the host has mode %v", f, st.Mode())
		}
		if s := st.Sys().(*syscall.Stat_t); s.Uid != 0 {
			t.Errorf("%s is owned by uid %d on the host, want 0 (idmapped workdir)", f, s.Uid)
		}
	}
	if !strings.Contains(res.stdout, "chmod=1") || !strings.Contains(res.stdout, "chmod-g=1") {
		t.Errorf("chmod with set-id bits did not fail\n%s", res)
	}
}

// A root caller's supplementary groups (group root among them) do not reach
// the workload.
func TestRootCallerGroupsDropped(t *testing.T) {
	id := rootIdent(t)
	wd := mkdir(t, id, "groups")
	secretDir := mkdir(t, id, "groups-secret")
	tok := token()
	secret := filepath.Join(secretDir, "secret")
	writeFile(t, id, secret, tok, 0o640) // root:root, group-readable
	pol := writePolicy(t, id, policy{RO: []string{secretDir}})
	cmd := run{id: id, policy: pol, workdir: wd, args: sh(`grep '^Groups' /proc/self/status; cat ` + secret)}.command(t.Context())
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{0, 4}}}
	out, _ := cmd.CombinedOutput()
	if strings.Contains(string(out), tok) {
		t.Errorf("the workload read a group-root file through the caller's groups:\n%s", out)
	}
	if !strings.Contains(string(out), "Groups:\t\n") && !strings.Contains(string(out), "Groups:\t \n") {
		t.Errorf("supplementary groups inside:\n%s", out)
	}
}

// git reads hooks and config through .git/commondir (and config.worktree,
// modules/): all of .git is read-only, so none of them can be planted.
func TestGitCommondirCannotBePlanted(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		repo := mkdir(t, id, "commondir")
		if out, err := exec.Command("git", "init", "-q", repo).CombinedOutput(); err != nil {
			t.Fatalf("git init: %v: %s", err, out)
		}
		_ = filepath.Walk(repo, func(p string, _ os.FileInfo, _ error) error { chown(t, id, p); return nil })
		r := run{id: id, workdir: repo, args: sh(`
mkdir -p evil/hooks && printf '#!/bin/sh\ntouch /tmp/pwned\n' > evil/hooks/pre-commit
echo ../evil > .git/commondir; echo "commondir=$?"
echo '[core]' > .git/config.worktree; echo "worktree=$?"
mkdir .git/modules; echo "modules=$?"
git status --short >/dev/null; echo "status=$?"`)}
		if !id.isRoot() {
			r.policy = writePolicy(t, id, policy{})
		}
		res := corral(t, r)
		for _, f := range []string{"commondir", "config.worktree", "modules"} {
			if exists(filepath.Join(repo, ".git", f)) {
				t.Errorf(".git/%s was created on the host\n%s", f, res)
			}
		}
		if !strings.Contains(res.stdout, "status=0") {
			t.Errorf("git status does not work with a read-only .git\n%s", res)
		}
	})
}

// Signals the Go runtime would crash on, sent by the workload to init,
// do not end the sandbox.
func TestInitSurvivesFatalSignals(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		wd := mkdir(t, id, "sigs")
		r := run{id: id, workdir: wd, args: sh(`for s in SEGV BUS ABRT FPE ILL TRAP SYS PIPE; do kill -$s 1; done; sleep 0.2; echo alive`)}
		if !id.isRoot() {
			r.policy = writePolicy(t, id, policy{})
		}
		res := corral(t, r)
		assertCode(t, res, 0)
		if !strings.Contains(res.stdout, "alive") {
			t.Errorf("the workload did not survive signalling init\n%s", res)
		}
	})
}

// --preserve-fds takes only fds the caller really has open.
func TestPreserveFDsMustBeOpen(t *testing.T) {
	id := rootIdent(t)
	wd := mkdir(t, id, "pfd")
	res := corral(t, run{id: id, workdir: wd, flags: []string{"--preserve-fds", "2"}, args: []string{"true"}})
	if res.code == 0 || !strings.Contains(res.stderr, "fd 3 is not open") {
		t.Errorf("--preserve-fds with no fds open: %s", res)
	}
	f, err := os.Open("/etc/hostname")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res = corral(t, run{id: id, workdir: wd, flags: []string{"--preserve-fds", "1"}, extra: []*os.File{f}, args: sh(`ls /proc/self/fd/3 >/dev/null && echo has3; ls /proc/self/fd/4 2>/dev/null || echo no4`)})
	if !strings.Contains(res.stdout, "has3") || !strings.Contains(res.stdout, "no4") {
		t.Errorf("preserved fds wrong\n%s", res)
	}
}

// The audit log is not followed through a symlink a sandbox could plant.
func TestAuditRefusesSymlink(t *testing.T) {
	id := rootIdent(t)
	wd := mkdir(t, id, "auditsym")
	logs := mkdir(t, id, "auditsym-logs") // outside the sandbox's grants
	victim := filepath.Join(logs, "victim")
	writeFile(t, id, victim, "keep\n", 0o600)
	link := filepath.Join(logs, "audit.jsonl")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	res := corral(t, run{id: id, workdir: wd, flags: []string{"--audit", link}, args: []string{"true"}})
	if res.code == 0 || !strings.Contains(res.stderr, "symlink") {
		t.Errorf("--audit through a symlink: %s", res)
	}
	if readFile(t, victim) != "keep\n" {
		t.Error("the symlink target was written")
	}
	// Inside the workdir the log is refused outright: the workload could
	// rewrite it.
	res = corral(t, run{id: id, workdir: wd, flags: []string{"--audit", filepath.Join(wd, "a.jsonl")}, args: []string{"true"}})
	if res.code == 0 || !strings.Contains(res.stderr, "which the sandbox can write") {
		t.Errorf("--audit inside the workdir: %s", res)
	}
}

// A root caller's private files granted read-only (a module cache under
// root's 0700 home) are readable by the unprivileged workload through an
// idmapped mount, and stay read-only.
func TestRootPrivateReadOnlyGrant(t *testing.T) {
	id := rootIdent(t)
	home := mkdir(t, id, "rohome")
	if err := os.Chmod(home, 0o700); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(home, "cache")
	if err := os.Mkdir(cache, 0o700); err != nil {
		t.Fatal(err)
	}
	tok := token()
	writeFile(t, id, filepath.Join(cache, "mod"), tok, 0o600)
	wd := mkdir(t, id, "rowd")
	pol := writePolicy(t, id, policy{RO: []string{cache}})
	res := corral(t, run{id: id, policy: pol, workdir: wd, env: []string{"HOME=" + home}, args: sh(`
cat ` + cache + `/mod; echo
touch ` + cache + `/new; echo "touch=$?"
echo x >> ` + cache + `/mod; echo "append=$?"`)})
	if !strings.Contains(res.stdout, tok) {
		t.Errorf("read-only grant of a root-private file is not readable\n%s", res)
	}
	if !strings.Contains(res.stdout, "touch=1") || strings.Contains(res.stdout, "append=0") || exists(filepath.Join(cache, "new")) {
		t.Errorf("read-only grant is writable\n%s", res)
	}
	if readFile(t, filepath.Join(cache, "mod")) != tok {
		t.Error("the granted file changed on the host")
	}
}

// In a root-owned (idmapped) workdir the workload owns root's files; an
// existing set-id file there stays read-only, since a write through mmap
// would keep its set-id bit.
func TestExistingSetuidFileStaysReadOnly(t *testing.T) {
	id := rootIdent(t)
	wd := mkdir(t, id, "suidexist")
	su := filepath.Join(wd, "bin-su")
	data, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(su, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(su, 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	pol := writePolicy(t, id, policy{RO: []string{probeDir}})
	res := corral(t, run{id: id, policy: pol, workdir: wd, args: []string{probeBin, "mmapwrite", su}})
	if !strings.Contains(res.stdout, "open: EROFS") && !strings.Contains(res.stdout, "open: EACCES") {
		t.Errorf("the workload could open a set-id root file for writing\n%s", res)
	}
	if got, _ := os.ReadFile(su); !bytes.Equal(got, data) {
		t.Error("the set-id file changed on the host")
	}
}

// Repositories nested anywhere in a read-write tree keep their .git
// read-only, like the one at its root.
func TestNestedGitProtected(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		wd := mkdir(t, id, "nested")
		for _, d := range []string{"a", "deep/b"} {
			if out, err := exec.Command("git", "init", "-q", filepath.Join(wd, d)).CombinedOutput(); err != nil {
				t.Fatalf("git init: %v: %s", err, out)
			}
		}
		_ = filepath.Walk(wd, func(p string, _ os.FileInfo, _ error) error { chown(t, id, p); return nil })
		r := run{id: id, workdir: wd, args: sh(`echo 'touch /tmp/pwned' > a/.git/hooks/pre-commit; git -C deep/b config core.fsmonitor 'touch /tmp/pwned'; echo done`)}
		if !id.isRoot() {
			r.policy = writePolicy(t, id, policy{})
		}
		res := corral(t, r)
		if !strings.Contains(res.stdout, "done") {
			t.Fatalf("script did not run\n%s", res)
		}
		if exists(filepath.Join(wd, "a/.git/hooks/pre-commit")) {
			t.Error("a hook was planted in a nested repository")
		}
		if b, _ := os.ReadFile(filepath.Join(wd, "deep/b/.git/config")); strings.Contains(string(b), "fsmonitor") {
			t.Error("a nested repository's config was changed")
		}
	})
}

// As root, a workdir owned by a user but by root's group runs the workload
// as that user with a non-root group: gid 0 would read root-group files.
func TestWorkloadNeverGetsRootGroup(t *testing.T) {
	root := rootIdent(t)
	wd := mkdir(t, root, "gid-wd")
	if err := os.Chown(wd, testUser.uid, 0); err != nil {
		t.Fatal(err)
	}
	res := corral(t, run{id: root, workdir: wd, args: sh("id -u; id -g; id -G")})
	assertCode(t, res, 0)
	f := strings.Fields(res.stdout)
	if len(f) < 3 || f[0] != strconv.Itoa(testUser.uid) {
		t.Fatalf("want uid %d, then groups\n%s", testUser.uid, res)
	}
	for _, g := range f[1:] {
		if g == "0" {
			t.Fatalf("the workload has root's group\n%s", res)
		}
	}
	if f[1] != strconv.Itoa(testUser.gid) {
		t.Errorf("gid %s, want the owner's primary group %d\n%s", f[1], testUser.gid, res)
	}
}

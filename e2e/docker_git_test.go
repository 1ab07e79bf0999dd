//go:build linux

package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/corral-sandbox/corral/internal/mountinfo"
)

// git in the docker provider (issue 22): `git status` in the caller's own
// repository works as root (a root-owned tree, which corral idmaps so the
// workload, nobody, owns it inside) and as corral-test (its own tree, its
// own uid), while a repository planted in the tree by another uid is still
// refused by git ("dubious ownership"), as git refuses it on the host.

var gitImg struct {
	once sync.Once
	tag  string
	err  error
}

// gitImage is corral/base:1 with the host's git and the shared libraries
// it loads, at their paths, tagged by a hash of them and the base image;
// built once, nothing pulled.
func gitImage(t *testing.T) string {
	t.Helper()
	gitImg.once.Do(func() { gitImg.tag, gitImg.err = hostToolImage("git") })
	if gitImg.err != nil {
		t.Fatalf("git image: %v", gitImg.err)
	}
	return gitImg.tag
}

// hostToolImage builds corral-e2e/NAME:HASH from corral/base:1 and the
// host's /usr/bin/NAME with what ldd lists for it.
func hostToolImage(name string) (string, error) {
	bin := "/usr/bin/" + name
	libs, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return "", fmt.Errorf("ldd %s: %v", bin, err)
	}
	paths := []string{bin}
	for _, m := range regexp.MustCompile(`(/\S+) \(0x`).FindAllStringSubmatch(string(libs), -1) {
		paths = append(paths, m[1])
	}
	base, err := exec.Command("docker", "image", "inspect", "-f", "{{.Id}}", "corral/base:1").Output()
	if err != nil {
		return "", fmt.Errorf("docker image inspect corral/base:1: %v", err)
	}
	dir, err := os.MkdirTemp("", "corral-e2e-"+name+"img-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	sum := sha256.New()
	sum.Write(base)
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(sum, "%s %d\n", p, len(data))
		sum.Write(data)
		at := filepath.Join(dir, "root", p)
		if err := os.MkdirAll(filepath.Dir(at), 0o755); err == nil {
			err = os.WriteFile(at, data, 0o755)
		}
		if err != nil {
			return "", err
		}
	}
	tag := "corral-e2e/" + name + ":" + hex.EncodeToString(sum.Sum(nil))[:12]
	if exec.Command("docker", "image", "inspect", tag).Run() == nil {
		return tag, nil
	}
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM corral/base:1\nCOPY root/ /\n"), 0o644); err != nil {
		return "", err
	}
	if out, err := exec.Command("docker", "build", "-q", "-t", tag, dir).CombinedOutput(); err != nil {
		return "", fmt.Errorf("docker build: %v\n%s", err, out)
	}
	return tag, nil
}

// hostGit runs git on the host in dir (safe.directory for the repositories
// the test made, whoever owns them).
func hostGit(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "safe.directory=*", "-c", "user.email=e2e@corral.test", "-c", "user.name=e2e", "-C", dir}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v in %s: %v\n%s", args, dir, err, out)
	}
}

// chownTree gives dir and everything below it to uid:gid.
func chownTree(t *testing.T, dir string, uid, gid int) {
	t.Helper()
	err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err == nil {
			err = os.Lchown(p, uid, gid)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDockerGit: root in its root-owned repository and corral-test in its
// own run `git status` and write a file there; a repository planted in a
// subdirectory by another uid (uid 1000 in root's tree and, for root, one
// by nobody, the workload's own uid on disk; root's in corral-test's) is
// refused with "dubious ownership"; the file is the caller's on the host
// and no idmapped mount of the tree stays behind.
func TestDockerGit(t *testing.T) {
	eachDockerIdent(t, func(t *testing.T, id *ident) {
		img := gitImage(t)
		repo := mkdir(t, id, "repo")
		hostGit(t, repo, "init", "-q")
		if err := os.WriteFile(filepath.Join(repo, "a.txt"), []byte("a\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		hostGit(t, repo, "add", "a.txt")
		hostGit(t, repo, "commit", "-qm", "first")
		planted := map[string]int{"planted-root": 0} // another uid for corral-test
		if id.isRoot() {
			planted = map[string]int{"planted-1000": 1000, "planted-nobody": 65534}
		}
		for d := range planted {
			hostGit(t, repo, "init", "-q", d)
		}
		chownTree(t, repo, id.uid, id.gid)
		for d, uid := range planted {
			chownTree(t, filepath.Join(repo, d), uid, uid)
		}
		script := `git status && echo STATUS-OK
for d in planted-*; do (cd "$d" && git status) >/dev/null 2>"/tmp/$d.err"; echo "$d exit $?"; grep -c 'dubious ownership' "/tmp/$d.err"; done
echo b > b.txt`
		res := corral(t, run{id: id, workdir: repo, flags: []string{"--provider", "docker", "--image", img}, args: sh(script)})
		assertCode(t, res, 0)
		if !strings.Contains(res.stdout, "STATUS-OK") || !strings.Contains(res.stdout, "On branch") {
			t.Errorf("git status failed in the caller's own repository:\n%s", res)
		}
		for d := range planted {
			if !strings.Contains(res.stdout, d+" exit 128\n1\n") {
				t.Errorf("git did not refuse the repository %s planted by another uid:\n%s", d, res)
			}
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(repo, "b.txt"), &st); err != nil || int(st.Uid) != id.uid {
			t.Errorf("b.txt written inside: uid %d (%v), want the caller's %d", st.Uid, err, id.uid)
		}
		es, _ := mountinfo.Read("/proc/self/mountinfo")
		for _, e := range es {
			if e.Root == repo || strings.HasPrefix(e.Root, repo+"/") {
				t.Errorf("a mount of the repository stays after the run: %+v", e)
			}
		}
	})
}

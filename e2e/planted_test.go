//go:build linux

package e2e

// The "persistence for later" reproductions qualify's P25-P27 do not cover
// (a service session across starts, git commit mode, a denied file
// replaced while the sandbox is built), as root and as the unprivileged
// user.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// gitInit makes dir a repository owned by id.
func gitInit(t *testing.T, id *ident, dir string) {
	t.Helper()
	if out, err := exec.Command("git", "init", "-q", dir).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	_ = filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { chown(t, id, p); return nil })
}

// The service form of reproduction 4: a session's policy grants
// ~/work (optional) read-write; run 1 links it to a host directory that
// the agent could write; the next start is refused naming the link, and
// nothing is written there.
func TestPlantedSymlinkService(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		s := newSvc(t, id)
		name := "plantlink" + id.name
		target := mkdir(t, id, "plant-svc-target")
		if err := os.Chmod(target, 0o777); err != nil {
			t.Fatal(err)
		}
		s.must(t, "service", "provision", name, "--policy", writePolicy(t, id, policy{RW: []string{`{path: "~/work", optional: true}`}}))
		s.must(t, "service", "start", name, "--settle", "1s", "--", "/bin/sh", "-c", "ln -s "+target+" ~/work && echo LINKED && exec sleep 300")
		s.must(t, "service", "stop", name)
		res := s.run(t, "service", "start", name, "--settle", "1s", "--", "/bin/sh", "-c", "echo pwned > ~/work/x; exec sleep 300")
		if res.code == 0 {
			t.Errorf("the second start ran over the planted link\n%s", res)
		}
		if !strings.Contains(res.combined(), "symlink") || !strings.Contains(res.combined(), target) {
			t.Errorf("the refusal does not name the link and its target\n%s", res)
		}
		if exists(filepath.Join(target, "x")) {
			t.Errorf("the second run wrote through the planted link into %s", target)
		}
	})
}

// Git commit mode: the agent can commit in the workdir's repository,
// while hooks and config stay read-only.
func TestGitCommitMode(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		w := mkdir(t, id, "gitcommit")
		gitInit(t, id, w)
		writeFile(t, id, filepath.Join(w, "a.txt"), "a\n", 0o644)
		p := writePolicy(t, id, policy{})
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		commit := filepath.Join(filepath.Dir(p), "commit.yaml")
		if err := os.WriteFile(commit, []byte(strings.Replace(string(b), "  include_workdir:", "  git: commit\n  include_workdir:", 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		chown(t, id, commit)
		script := `export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@b
git add a.txt && git commit -q -m first && echo COMMITTED
echo 'touch /tmp/x' > .git/hooks/pre-commit && echo HOOK-WRITTEN
git config core.fsmonitor 'touch /tmp/x' && echo CONFIG-WRITTEN
echo done`
		res := corral(t, run{id: id, workdir: w, policy: commit, args: sh(script)})
		if !strings.Contains(res.stdout, "done") {
			t.Fatalf("script did not finish\n%s", res)
		}
		if !strings.Contains(res.stdout, "COMMITTED") {
			t.Errorf("git commit failed in commit mode\n%s", res)
		}
		for _, w := range []string{"HOOK-WRITTEN", "CONFIG-WRITTEN"} {
			if strings.Contains(res.stdout, w) {
				t.Errorf("%s in commit mode\n%s", w, res)
			}
		}
		log := exec.Command("git", "-C", w, "log", "--oneline")
		asIdent(log, id, nil)
		if out, err := log.CombinedOutput(); err != nil || !strings.Contains(string(out), "first") {
			t.Errorf("the host does not see the commit: %v %s", err, out)
		}
		// The default (read-only) mode refuses the commit.
		res = corral(t, run{id: id, workdir: w, policy: p, args: sh(strings.ReplaceAll(script, "first", "second"))})
		if strings.Contains(res.stdout, "COMMITTED") {
			t.Errorf("git commit succeeded with .git read-only\n%s", res)
		}
	})
}

// A denied file the host replaces by rename while sandboxes are built (as
// useradd rewrites /etc/shadow) must not make a run fail: the mount point
// is resolved again. Without the retry about 1 run in 30 failed here.
func TestDenyTargetReplacedByRename(t *testing.T) {
	id := rootIdent(t)
	dir := mkdir(t, id, "rename-race")
	f := filepath.Join(dir, "f")
	writeFile(t, id, f, "x\n", 0o644)
	p := writePolicy(t, id, policy{RO: []string{dir}, Deny: []string{f}})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			tmp := fmt.Sprintf("%s.new%d", f, w)
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = os.WriteFile(tmp, []byte("y\n"), 0o644)
				_ = os.Rename(tmp, f)
			}
		}(w)
	}
	failed := 0
	for i := 0; i < 80; i++ {
		if res := corral(t, run{id: id, policy: p, workdir: mkdir(t, id, "rename-race-wd"), args: []string{"true"}}); res.code != 0 {
			failed++
			t.Logf("run %d: %s", i, res)
		}
	}
	close(stop)
	wg.Wait()
	if failed > 0 {
		t.Errorf("%d of 80 runs failed while the denied file was being replaced", failed)
	}
}

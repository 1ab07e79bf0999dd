//go:build linux

package e2e

// The reproductions of "persistence for later" escapes (issue: writable
// trees that cannot be turned against the host), as root and as the
// unprivileged user: each planted file is refused during the run or
// reported after it, and nothing Corral made stays on the host.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// findings reads the Detection Findings of an audit log: path -> event.
func findings(t *testing.T, path string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		if ev["class_uid"] == float64(2004) {
			res := ev["resources"].([]any)[0].(map[string]any)
			out[res["name"].(string)] = ev
		}
	}
	return out
}

// Reproduction 1: a repository planted in a new subdirectory would run a
// command at the next `git status` there. It is reported (stderr, an OCSF
// Detection Finding naming the key); --strict-tree fails the run with 116
// and moves it aside, so git no longer runs it.
func TestPlantedNestedRepository(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		w := mkdir(t, id, "plant-w")
		gitInit(t, id, w)
		auditDir := mkdir(t, id, "plant-audit")
		log := filepath.Join(auditDir, "audit.jsonl")
		marker := filepath.Join(auditDir, "planted")
		script := `mkdir sub && git -C sub init -q && git -C sub config core.fsmonitor "touch ` + marker + `" && echo PLANTED`
		r := run{id: id, workdir: w, flags: []string{"--audit", log}, args: sh(script)}
		if !id.isRoot() {
			r.policy = writePolicy(t, id, policy{})
		}
		res := corral(t, r)
		assertCode(t, res, 0)
		if !strings.Contains(res.stdout, "PLANTED") {
			t.Fatalf("the workload could not make a repository in a new subdirectory (the test needs it to)\n%s", res)
		}
		sub := filepath.Join(w, "sub", ".git")
		if !strings.Contains(res.stderr, "planted for later: "+sub) || !strings.Contains(res.stderr, "core.fsmonitor = touch "+marker) {
			t.Errorf("no warning naming %s and its key\n%s", sub, res)
		}
		f, ok := findings(t, log)[sub]
		if !ok {
			t.Fatalf("no Detection Finding for %s in the audit log", sub)
		}
		if keys := f["unmapped"].(map[string]any)["keys"].([]any); !slices.Contains(keys, any("core.fsmonitor = touch "+marker)) {
			t.Errorf("finding keys = %v", keys)
		}

		// Strict: the run fails and the repository is disarmed.
		r.args = sh(strings.ReplaceAll(script, "sub", "sub2"))
		r.flags = append(r.flags, "--strict-tree")
		res = corral(t, r)
		assertCode(t, res, 116)
		if exists(filepath.Join(w, "sub2", ".git")) || !exists(filepath.Join(w, "sub2", ".git.corral-quarantine")) {
			t.Errorf("the planted repository was not moved aside\n%s", res)
		}
		git := exec.Command("git", "-C", filepath.Join(w, "sub2"), "status")
		asIdent(git, id, nil)
		_ = git.Run()
		if exists(marker) {
			t.Errorf("git status in the disarmed tree ran the planted fsmonitor")
		}
	})
}

// Reproduction 2: names absent at the start (.bashrc, .mcp.json, .git in
// a tree without one) cannot be created at the top of the workdir, and no
// placeholder is left on the host.
func TestPlantedAbsentNames(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		w := mkdir(t, id, "plant-absent")
		r := run{id: id, workdir: w, args: sh(`git init -q . 2>/dev/null && echo INIT-OK
echo "echo hi" > .bashrc && echo BASHRC-OK
echo "{}" > .mcp.json && echo MCP-OK
mkdir -p .git/hooks && echo HOOKS-OK
mkdir -p .claude && echo '{}' > .claude/settings.json && echo CLAUDE-OK
ls -A
echo data > notes.txt && echo done`)}
		if !id.isRoot() {
			r.policy = writePolicy(t, id, policy{})
		}
		res := corral(t, r)
		if !strings.Contains(res.stdout, "done") {
			t.Fatalf("script did not finish\n%s", res)
		}
		for _, w := range []string{"INIT-OK", "BASHRC-OK", "MCP-OK", "HOOKS-OK", "CLAUDE-OK"} {
			if strings.Contains(res.stdout, w) {
				t.Errorf("%s: an absent protected name was created\n%s", w, res)
			}
		}
		ents, err := os.ReadDir(w)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != 1 || ents[0].Name() != "notes.txt" {
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			t.Errorf("after the run the workdir holds %v, want only notes.txt (placeholders must not stay)", names)
		}
	})
}

// Reproduction 3: agent, IDE and tool configuration that exists is
// read-only under the default policy.
func TestPlantedToolConfig(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		w := mkdir(t, id, "plant-cfg")
		files := []string{".vscode/tasks.json", ".idea/workspace.xml", ".claude/settings.json", ".codex/config.toml", ".mcp.json",
			".gitconfig", ".gitmodules", ".npmrc", ".envrc", ".docker/config.json", ".kube/config", ".aws/config"}
		for _, f := range files {
			writeFile(t, id, filepath.Join(w, f), "original\n", 0o644)
		}
		before := snapshot(t, w)
		var script strings.Builder
		for _, f := range files {
			script.WriteString(`if echo '{"tasks":[{"runOptions":{"runOn":"folderOpen"}}]}' > ` + f + `; then echo "W ` + f + ` ok"; fi; rm -f ` + f + ` 2>/dev/null && echo "RM ` + f + `"` + "\n")
		}
		script.WriteString("echo done\n")
		r := run{id: id, workdir: w, args: sh(script.String())}
		if !id.isRoot() {
			r.policy = writePolicy(t, id, policy{})
		}
		res := corral(t, r)
		if !strings.Contains(res.stdout, "done") {
			t.Fatalf("script did not finish\n%s", res)
		}
		if strings.Contains(res.stdout, "W ") || strings.Contains(res.stdout, "RM ") {
			t.Errorf("tool configuration was writable\n%s", res)
		}
		diffSnapshots(t, before, snapshot(t, w))
	})
}

// Reproduction 4: a read_write entry that is a symlink (planted by an
// earlier run) is refused at load, naming the link, its target and the
// line to write; nothing is written through it.
func TestPlantedSymlinkGrant(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		host := mkdir(t, id, "plant-hosthome")
		autostart := filepath.Join(host, ".config", "autostart")
		if err := os.MkdirAll(autostart, 0o755); err != nil {
			t.Fatal(err)
		}
		w := mkdir(t, id, "plant-w3")
		link := filepath.Join(w, "cache")
		if err := os.Symlink(filepath.Join(host, ".config"), link); err != nil {
			t.Fatal(err)
		}
		chown(t, id, link)
		p := writePolicy(t, id, policy{RW: []string{link}})
		res := corral(t, run{id: id, workdir: w, policy: p, flags: []string{"-v"}, args: sh("echo x > " + link + "/autostart/evil.desktop; echo ran")})
		assertCode(t, res, 122)
		for _, want := range []string{p + ":", "symlink " + link + " -> " + filepath.Join(host, ".config"), `write "` + filepath.Join(host, ".config") + `"`} {
			if !strings.Contains(res.stderr, want) {
				t.Errorf("error lacks %q\n%s", want, res)
			}
		}
		if strings.Contains(res.stdout, "ran") || exists(filepath.Join(autostart, "evil.desktop")) {
			t.Errorf("the workload ran and wrote through the planted link\n%s", res)
		}
	})
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

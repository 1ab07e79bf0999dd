//go:build linux

package planted

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/policy"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// resolved is the default policy over workdir w.
func resolved(t *testing.T, w string) *policy.Resolved {
	t.Helper()
	r, err := resolvedB(w)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func resolvedB(w string) (*policy.Resolved, error) {
	return policy.Default().Resolve(policy.Context{Home: "/nonexistent-home", Workdir: w})
}

// A tick of the coarse clock, so that what was written before Now is older.
func tick() { time.Sleep(30 * time.Millisecond) }

func TestScan(t *testing.T) {
	w, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Before the run: the person's own nested repository with a command
	// key, and an old .vscode.
	write(t, filepath.Join(w, "old", ".git", "config"), "[core]\n\tfsmonitor = mine\n")
	write(t, filepath.Join(w, "old", ".vscode", "settings.json"), "{}")
	r := resolved(t, w)
	tick()
	since := Now()
	// The run: a new repository with keys and a hook, a gitdir file, a
	// nested rc file and IDE task, a plain file, and a file in the old
	// .vscode.
	write(t, filepath.Join(w, "sub", ".git", "config"), "[core]\n\tfsmonitor = touch /tmp/x\n[filter \"a\"]\n\tsmudge = evil\n[user]\n\tname = x\n")
	write(t, filepath.Join(w, "sub", ".git", "hooks", "post-checkout"), "#!/bin/sh\n")
	if err := os.Chmod(filepath.Join(w, "sub", ".git", "hooks", "post-checkout"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(w, "wt", ".git"), "gitdir: /elsewhere\x1b[2J\n")
	write(t, filepath.Join(w, "a", "b", ".bashrc"), "evil")
	write(t, filepath.Join(w, "a", ".vscode", "tasks.json"), "{}")
	write(t, filepath.Join(w, "plain.txt"), "data")
	write(t, filepath.Join(w, "old", ".vscode", "tasks.json"), "{}")
	got := Scan(r, since)
	byPath := map[string]Finding{}
	for _, f := range got {
		byPath[strings.TrimPrefix(f.Path, w+"/")] = f
	}
	if len(byPath) != 5 {
		t.Errorf("want 5 findings, got %d: %+v", len(got), got)
	}
	repo := byPath["sub/.git"]
	if repo.Kind != KindRepository || !slices.Contains(repo.Keys, "core.fsmonitor = touch /tmp/x") || !slices.Contains(repo.Keys, "filter.a.smudge = evil") || len(repo.Keys) != 2 || !strings.Contains(repo.What, "post-checkout") {
		t.Errorf("sub/.git: %+v", repo)
	}
	if f := byPath["wt/.git"]; f.Kind != KindGitFile || !strings.Contains(f.What, `gitdir: /elsewhere\x1b[2J`) {
		t.Errorf("wt/.git: %+v", f)
	}
	if f := byPath["a/b/.bashrc"]; f.Kind != KindProtected {
		t.Errorf("a/b/.bashrc: %+v", f)
	}
	if f := byPath["a/.vscode"]; f.Kind != KindProtected || !strings.Contains(f.What, "tasks.json") {
		t.Errorf("a/.vscode: %+v", f)
	}
	if f := byPath["old/.vscode"]; !strings.Contains(f.What, "tasks.json") || strings.Contains(f.What, "settings.json") {
		t.Errorf("old/.vscode: %+v", f)
	}
	if _, ok := byPath["old/.git"]; ok {
		t.Error("the person's own old repository was reported")
	}
	// A later scan sees none of it; Disarm moves them aside.
	tick()
	if again := Scan(r, Now()); len(again) != 0 {
		t.Errorf("a scan after nothing changed: %+v", again)
	}
	for _, f := range Disarm(got) {
		moved := !exists(f.Path) && exists(f.Path+QuarantineSuffix) && strings.Contains(f.What, "moved aside")
		if old := strings.HasPrefix(f.Path, filepath.Join(w, "old")+"/"); moved == old {
			t.Errorf("moved aside: %v, want %v (only what the run created): %+v", moved, !old, f)
		}
	}
}

// Nothing planted can stall the scan or make it read through a link: a
// fifo named like git configuration, a .gitmodules linking to a file
// outside the tree.
func TestScanFifoAndLinks(t *testing.T) {
	w, _ := filepath.EvalSymlinks(t.TempDir())
	secret := filepath.Join(t.TempDir(), "secret")
	write(t, secret, "[core]\n\tpager = SECRET\n")
	r := resolved(t, w)
	tick()
	since := Now()
	if err := os.MkdirAll(filepath.Join(w, "a", ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(w, "a", ".git", "config"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(w, "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(w, "b", ".gitmodules")); err != nil {
		t.Fatal(err)
	}
	done := make(chan []Finding)
	go func() { done <- Scan(r, since) }()
	select {
	case got := <-done:
		if len(got) != 2 {
			t.Errorf("want the fifo repository and the link, got %+v", got)
		}
		for _, f := range got {
			if strings.Contains(f.String(), "SECRET") {
				t.Errorf("read through a planted link: %s", f)
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the scan blocked on a planted fifo")
	}
}

// A read-write tree below a read-only grant below a read-write root is
// scanned too.
func TestScanNestedRoots(t *testing.T) {
	w, _ := filepath.EvalSymlinks(t.TempDir())
	inner := filepath.Join(w, "ro", "rw2")
	if err := os.MkdirAll(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := policy.Default().Resolve(policy.Context{Home: "/nonexistent-home", Workdir: w})
	if err != nil {
		t.Fatal(err)
	}
	r.Grants = append(r.Grants, policy.PathGrant{Path: filepath.Join(w, "ro"), Access: policy.AccessReadOnly, Dir: true},
		policy.PathGrant{Path: inner, Access: policy.AccessReadWrite, Dir: true})
	tick()
	since := Now()
	write(t, filepath.Join(inner, "sub", ".git", "config"), "[core]\n\tfsmonitor = x\n")
	if got := Scan(r, since); len(got) != 1 || got[0].Path != filepath.Join(inner, "sub", ".git") {
		t.Errorf("got %+v", got)
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// An unreadable directory the workload made is reported, not skipped.
func TestScanUnreadable(t *testing.T) {
	if os.Getuid() == 0 {
		t.Skip("root reads every directory")
	}
	w, _ := filepath.EvalSymlinks(t.TempDir())
	r := resolved(t, w)
	tick()
	since := Now()
	d := filepath.Join(w, "hidden")
	write(t, filepath.Join(d, ".git", "config"), "[core]\n\tpager = x\n")
	if err := os.Chmod(d, 0); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(d, 0o755)
	got := Scan(r, since)
	if len(got) != 1 || got[0].Kind != KindUnscanned || got[0].Path != d {
		t.Errorf("got %+v", got)
	}
}

// A bare repository is found by its shape, as git finds it.
func TestScanBare(t *testing.T) {
	w, _ := filepath.EvalSymlinks(t.TempDir())
	r := resolved(t, w)
	tick()
	since := Now()
	write(t, filepath.Join(w, "src", "HEAD"), "ref: refs/heads/main\n")
	write(t, filepath.Join(w, "src", "config"), "[core]\n\tbare = false\n\tworktree = ..\n\tfsmonitor = touch /tmp/x\n")
	for _, d := range []string{"objects", "refs"} {
		if err := os.MkdirAll(filepath.Join(w, "src", d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got := Scan(r, since)
	if len(got) != 1 || got[0].Path != filepath.Join(w, "src") || got[0].Kind != KindRepository || len(got[0].Keys) != 1 {
		t.Errorf("got %+v", got)
	}
}

// What git reads for an existing nested repository (a submodule's
// hooksPath, an included file) is reported when changed, and so is a
// protected path the workload moved away (docker does not pin parents).
func TestScanGitReadsAndMoved(t *testing.T) {
	w, _ := filepath.EvalSymlinks(t.TempDir())
	write(t, filepath.Join(w, "sub", ".git", "config"), "[core]\n\thooksPath = .githooks\n[include]\n\tpath = ../extra.cfg\n")
	write(t, filepath.Join(w, "sub", "extra.cfg"), "")
	write(t, filepath.Join(w, ".config", "corral", "x"), "")
	r := resolved(t, w)
	tick()
	since := Now()
	write(t, filepath.Join(w, "sub", ".githooks", "pre-commit"), "#!/bin/sh\n")
	write(t, filepath.Join(w, "sub", "extra.cfg"), "[core]\n\tfsmonitor = x\n")
	if err := os.Rename(filepath.Join(w, ".config"), filepath.Join(w, ".config.old")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(w, ".config", "corral", "x"), "planted")
	got := Scan(r, since)
	var sub, moved bool
	for _, f := range got {
		switch f.Path {
		case filepath.Join(w, "sub", ".git"):
			sub = strings.Contains(f.What, "hooks directory") && strings.Contains(f.What, "extra.cfg")
		case filepath.Join(w, ".config", "corral"):
			moved = strings.Contains(f.What, "moved away") && f.Created
		}
	}
	if !sub || !moved {
		t.Errorf("sub/.git reported: %v, moved .config/corral reported: %v; got %+v", sub, moved, got)
	}
}

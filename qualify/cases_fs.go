//go:build linux

package qualify

// Filesystem cases: P01 grants, P02 unapproved paths, P03 path tricks,
// P17 launcher inputs, P18 persistence.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/corral-sandbox/corral/probe"
)

func init() {
	Register(Case{ID: "P01", Title: "read-only vs read-write grants", Applies: linuxKernel, Run: runP01})
	Register(Case{ID: "P02", Title: "unapproved host paths", Applies: linuxKernel, Run: runP02})
	Register(Case{ID: "P03", Title: "path tricks", Applies: linuxKernel, Run: runP03})
	Register(Case{ID: "P17", Title: "launcher inputs", Applies: linuxKernel, Run: runP17})
	Register(Case{ID: "P18", Title: "persistence for later", Applies: linuxKernel, Run: runP18})
}

// P01: ro: [D1], rw: [D2]; read and write in both.
func runP01(ctx context.Context, e *Env) Result {
	r := newResult()
	tok1, tok2 := newToken(), newToken()
	d1, d2 := e.TempDir("p01-ro"), e.TempDir("p01-rw")
	f1, f2 := filepath.Join(d1, "f"), filepath.Join(d2, "f")
	for f, c := range map[string]string{f1: tok1, f2: tok2} {
		if err := writeHostFile(f, c, 0o644); err != nil {
			failNow(e, &r, "set up "+f, err)
			return r
		}
	}
	before := snapshot(d1)
	o, err := e.Corral(ctx, Run{
		Policy: e.policyFor(pol{RO: []string{d1}, RW: []string{d2}}),
		Args: e.steps(
			step{Label: "read-ro", Args: []string{"read", f1}},
			step{Label: "read-rw", Args: []string{"read", f2}},
			step{Label: "write-ro", Args: []string{"write", f1}},
			step{Label: "create-ro", Args: []string{"write", filepath.Join(d1, "new")}},
			step{Label: "unlink-ro", Args: []string{"unlink", f1}},
			step{Label: "mkdir-ro", Args: []string{"mkdir", filepath.Join(d1, "sub")}},
			step{Label: "write-rw", Args: []string{"write", f2}},
			step{Label: "mkdir-rw", Args: []string{"mkdir", filepath.Join(d2, "sub")}},
			step{Label: "create-rw", Args: []string{"write", filepath.Join(d2, "sub", "new")}},
		),
	})
	if err != nil {
		failNow(e, &r, "corral run", err)
		return r
	}
	s := parseSteps(o)
	e.Check(&r, "run the probes (ro: [D1], rw: [D2])", brief(o), o.Code == 0, "corral exited "+fmt.Sprint(o.Code))
	e.Check(&r, "read D1/f (read-only grant)", s["read-ro"].String(), s["read-ro"].ok() && strings.Contains(s["read-ro"].Text, tok1), "the read-only grant is not readable")
	e.Check(&r, "read D2/f (read-write grant)", s["read-rw"].String(), s["read-rw"].ok() && strings.Contains(s["read-rw"].Text, tok2), "the read-write grant is not readable")
	for _, k := range []string{"write-ro", "create-ro", "unlink-ro", "mkdir-ro"} {
		st := s[k]
		if mustFail(e, &r, k+" in D1", st, k+" in the read-only grant succeeded") {
			for _, en := range st.errnos() {
				if en != "EROFS" && en != "EACCES" && en != "EPERM" {
					e.Check(&r, k+" errno", en, false, k+" failed with "+en+", want EROFS/EACCES")
				}
			}
		}
	}
	mustSucceed(e, &r, "write D2/f", s["write-rw"], "the read-write grant is not writable")
	mustSucceed(e, &r, "mkdir D2/sub and create D2/sub/new", s["create-rw"], "cannot create a file in the read-write grant")
	diff := diffSnapshots(before, snapshot(d1))
	e.Check(&r, "host: D1 unchanged", strings.Join(diff, "; "), len(diff) == 0, "the read-only grant changed on the host: "+strings.Join(diff, "; "))
	got2, got3 := hostRead(f2), hostRead(filepath.Join(d2, "sub", "new"))
	e.Check(&r, "host: D2/f and D2/sub/new carry the write", clip(got2, 80)+" / "+clip(got3, 80), got2 == tok2+probe.WriteLine && got3 == probe.WriteLine, "the write to the read-write grant is not visible on the host")
	return r
}

// P02: defaults; read the throwaway home's canaries, /root, /etc/shadow,
// another user's home and a browser profile.
func runP02(ctx context.Context, e *Env) Result {
	r := newResult()
	toks := e.homeTokens()
	// Another home with a canary, as a real host would have: /root when
	// qualify runs as root (the canary is removed afterwards; another
	// user's home when corral runs as Options.User), and the homes of the
	// accounts in /home.
	var otherFiles []string
	if e.st != nil && e.st.run.hostRoot {
		t := newToken()
		toks = append(toks, t)
		p := filepath.Join("/root", ".corral-qualify-"+e.uniqueName())
		if err := writeHostFile(p, t, 0o644); err == nil {
			defer os.Remove(p)
			otherFiles = append(otherFiles, p)
		}
	}
	if ents, err := os.ReadDir("/home"); err == nil {
		for _, ent := range ents {
			otherFiles = append(otherFiles, filepath.Join("/home", ent.Name(), ".bashrc"))
		}
	}
	var ss []step
	for rel := range e.Tokens {
		ss = append(ss, step{Label: "read ~/" + rel, Args: []string{"read", filepath.Join(e.Home, rel)}})
	}
	ss = append(ss,
		step{Label: "list ~", Args: []string{"list", e.Home}},
		step{Label: "list ~/.mozilla", Args: []string{"list", filepath.Join(e.Home, ".mozilla")}},
		step{Label: "list /root", Args: []string{"list", "/root"}},
		step{Label: "read /etc/shadow", Args: []string{"read", "/etc/shadow"}},
		step{Label: "read /etc/gshadow", Args: []string{"read", "/etc/gshadow"}},
	)
	for _, f := range otherFiles {
		ss = append(ss, step{Label: "read " + f, Args: []string{"read", f}})
	}
	// A control: a system file that must be readable (the probe works).
	ss = append(ss, step{Label: "control", Args: []string{"read", "/etc/passwd"}})
	o, err := e.Corral(ctx, Run{Policy: e.policyFor(pol{}), Args: e.steps(ss...)})
	if err != nil {
		failNow(e, &r, "corral run", err)
		return r
	}
	s := parseSteps(o)
	e.Check(&r, "run the probes with the default grants", brief(o), o.Code == 0, "corral exited "+fmt.Sprint(o.Code))
	mustSucceed(e, &r, "control: read /etc/passwd", s["control"], "the control read failed: the probe cannot read granted files")
	for _, st := range ss {
		if st.Label == "control" || strings.HasPrefix(st.Label, "list") {
			continue
		}
		mustFail(e, &r, st.Label, s[st.Label], st.Label+" succeeded inside the sandbox")
	}
	for _, l := range []string{"list ~", "list ~/.mozilla", "list /root"} {
		// Listing may succeed on an empty private home; what matters is
		// that none of the canaries' names show up.
		got := s[l].String()
		ok := !strings.Contains(got, "id_test") && !strings.Contains(got, "credentials") && !strings.Contains(strings.ToLower(got), "cookies") && !strings.Contains(got, ".corral-qualify-")
		e.Check(&r, l, got, ok, l+" shows the host's files")
	}
	lk := leaked(o.Stdout+o.Stderr, toks...)
	e.Check(&r, "no canary token in the output", fmt.Sprintf("%d tokens checked, %d found", len(toks), len(lk)), len(lk) == 0, "canary tokens leaked: "+strings.Join(lk, ", "))
	if strings.Contains(o.Stdout, "root:$") || strings.Contains(o.Stdout, "root:!") || strings.Contains(o.Stdout, "root:*:") {
		e.Check(&r, "/etc/shadow content", "root's shadow entry in stdout", false, "/etc/shadow content visible")
	}
	checkNoShadowHash(e, &r, o)
	return r
}

// checkNoShadowHash fails r when a password hash of the host's
// /etc/shadow (when qualify can read it) is in o's output.
func checkNoShadowHash(e *Env, r *Result, o Outcome) {
	b, err := os.ReadFile("/etc/shadow")
	if err != nil {
		return
	}
	n, found := 0, 0
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Split(l, ":"); len(f) > 2 && len(f[1]) > 4 {
			n++
			if strings.Contains(o.Stdout+o.Stderr, f[1]) {
				found++
			}
		}
	}
	e.Check(r, "host: /etc/shadow's password hashes in the output", fmt.Sprintf("%d of %d found", found, n), found == 0, "a host password hash is visible inside")
}

// P03: rw: [W], deny: [S]; symlinks, .. walks, // and relative paths.
func runP03(ctx context.Context, e *Env) Result {
	r := newResult()
	tok := newToken()
	parent := e.TempDir("p03")
	w, sec, ro := filepath.Join(parent, "w"), filepath.Join(parent, "secret"), filepath.Join(parent, "ro")
	for _, d := range []string{w, sec, ro} {
		if err := os.Mkdir(d, 0o755); err != nil {
			failNow(e, &r, "mkdir "+d, err)
			return r
		}
	}
	if err := writeHostFile(filepath.Join(sec, "token"), tok, 0o644); err != nil {
		failNow(e, &r, "set up", err)
		return r
	}
	if err := writeHostFile(filepath.Join(ro, "file"), "original", 0o644); err != nil {
		failNow(e, &r, "set up", err)
		return r
	}
	before := snapshot(parent)
	delete(before, w)
	base := filepath.Base(parent)
	reads := []string{
		"l1",                     // symlink to S/token
		"l2/token",               // symlink to S
		"../secret/token",        // relative .. walk
		"./../secret/token",      //
		w + "/../secret/token",   // absolute .. walk
		"//" + sec + "//token",   // doubled slashes
		"/./" + sec + "/./token", //
		w + "/./../../" + base + "/secret/token",
		"hard",         // hard link attempt (below)
		sec + "/token", // the denied file itself
	}
	ss := []step{
		{Label: "symlink l1", Args: []string{"symlink", sec + "/token", "l1"}},
		{Label: "symlink l2", Args: []string{"symlink", sec, "l2"}},
		{Label: "symlink l3", Args: []string{"symlink", ro + "/file", "l3"}},
		{Label: "hardlink", Shell: "ln " + shq(sec+"/token") + " hard 2>&1; echo ln=$?"},
	}
	for i, p := range reads {
		ss = append(ss, step{Label: fmt.Sprintf("read %d", i), Args: []string{"read", p}})
	}
	ss = append(ss,
		step{Label: "list S", Args: []string{"list", sec}},
		step{Label: "write via l3", Args: []string{"write", "l3"}},
		step{Label: "write ../escape1", Args: []string{"write", "../escape1"}},
		step{Label: "write W/../escape2", Args: []string{"write", w + "/../escape2"}},
		step{Label: "write //P//escape3", Args: []string{"write", "//" + parent + "//escape3"}},
		step{Label: "write S/new", Args: []string{"write", sec + "/new"}},
		step{Label: "mkdir S/d", Args: []string{"mkdir", sec + "/d"}},
		step{Label: "control: write W/ok", Args: []string{"write", w + "/ok"}},
		step{Label: "rename W/ok ../escape4", Args: []string{"rename", w + "/ok", "../escape4"}},
	)
	o, err := e.Corral(ctx, Run{
		Policy:  e.policyFor(pol{RO: []string{ro}, Deny: []string{sec}}),
		Workdir: w,
		Args:    e.steps(ss...),
	})
	if err != nil {
		failNow(e, &r, "corral run", err)
		return r
	}
	s := parseSteps(o)
	e.Check(&r, "run the probes (workdir W read-write, deny S)", brief(o), s["end"].Ran, "the script did not finish")
	mustSucceed(e, &r, "control: write W/ok", s["control: write W/ok"], "the workdir is not writable: the case cannot test escapes")
	for i, p := range reads {
		mustFail(e, &r, "read "+p, s[fmt.Sprintf("read %d", i)], "read "+p+" succeeded: the denied tree is readable")
	}
	for _, k := range []string{"write via l3", "write ../escape1", "write W/../escape2", "write //P//escape3", "write S/new", "mkdir S/d", "rename W/ok ../escape4"} {
		st := s[k]
		// A write to W's parent may land in the sandbox's private view
		// (it is not granted): the host check below decides for those.
		if k == "write ../escape1" || k == "write W/../escape2" || k == "write //P//escape3" || k == "rename W/ok ../escape4" {
			e.Check(&r, k, st.String(), true, "")
			continue
		}
		mustFail(e, &r, k, st, k+" succeeded")
	}
	e.Check(&r, "list S", s["list S"].String(), !strings.Contains(s["list S"].Text, "token"), "the denied directory's entries are visible")
	lk := leaked(o.Stdout+o.Stderr, tok)
	e.Check(&r, "the denied file's token is not in the output", fmt.Sprintf("%d found", len(lk)), len(lk) == 0, "the denied file's content was read")
	after := snapshot(parent)
	for p := range after {
		if p == w || strings.HasPrefix(p, w+"/") {
			delete(after, p)
		}
	}
	diff := diffSnapshots(before, after)
	e.Check(&r, "host: nothing outside W changed (S, RO, W's parent)", strings.Join(diff, "; "), len(diff) == 0, "written outside the writable root: "+strings.Join(diff, "; "))
	return r
}

// P17: hostile workdirs and the caller's open fds.
func runP17(ctx context.Context, e *Env) Result {
	r := newResult()
	base := e.TempDir("p17")
	linkEtc, linkRoot := filepath.Join(base, "to-etc"), filepath.Join(base, "to-root")
	_ = os.Symlink("/etc", linkEtc)
	_ = os.Symlink("/", linkRoot)
	dirf, err := os.Open(base)
	if err != nil {
		failNow(e, &r, "open "+base, err)
		return r
	}
	defer dirf.Close()
	policy := e.policyFor(pol{})
	cases := []struct {
		name, workdir string
		extra         []*os.File
	}{
		{"proc-self-fd", "/proc/self/fd/3", []*os.File{dirf}},
		{"proc-1-cwd", "/proc/1/cwd", nil},
		{"proc-self-cwd", "/proc/self/cwd", nil},
		{"symlink-to-etc", linkEtc, nil},
		{"symlink-to-root", linkRoot, nil},
		{"dotdot-chain-to-root", base + strings.Repeat("/..", 12), nil},
		{"home", e.Home, nil},
		{"root", "/", nil},
	}
	for _, c := range cases {
		m := filepath.Join(base, "marker-"+c.name)
		o, err := e.rawCorral(ctx, rawRun{Policy: policy, Workdir: c.workdir, Extra: c.extra,
			Args: script("touch " + shq(m) + " ./marker-" + c.name + "; echo ran")}, 20*time.Second)
		if err != nil {
			failNow(e, &r, "-C "+c.workdir, err)
			continue
		}
		ok := o.Code == 122 && !strings.Contains(o.Stdout, "ran") && !hostExists(m)
		e.Check(&r, "-C "+c.workdir+" ("+c.name+")", brief(o), ok, "-C "+c.workdir+" was not rejected as a policy error (122), or the command ran")
		if c.name == "home" {
			// The home was not written.
			if hostExists(filepath.Join(e.Home, "marker-home")) {
				e.Check(&r, "host: "+e.Home+"/marker-home", "exists", false, "the workload wrote into the caller's home")
			}
		}
	}
	// A benign .. chain resolves to a directory and stays confined to it.
	sub := filepath.Join(base, "a")
	_ = os.MkdirAll(filepath.Join(sub, "b"), 0o755)
	o, err := e.rawCorral(ctx, rawRun{Policy: policy, Workdir: sub + "/b/../b/..",
		Args: script("touch ok; touch ../escape; echo done")}, 20*time.Second)
	if err == nil {
		ok := hostExists(filepath.Join(sub, "ok")) && !hostExists(filepath.Join(base, "escape"))
		e.Check(&r, "-C "+sub+"/b/../b/.. (a benign .. chain), touch ok ../escape", brief(o), ok, "the .. chain workdir was not confined to "+sub)
	} else {
		failNow(e, &r, "benign .. chain", err)
	}
	// fds 3..64 open in the caller (a secret file each).
	tok := newToken()
	secret := filepath.Join(base, "secret")
	if err := writeHostFile(secret, tok, 0o644); err != nil {
		failNow(e, &r, "set up", err)
		return r
	}
	var extra []*os.File
	for i := 3; i <= 64; i++ {
		f, err := os.Open(secret)
		if err != nil {
			failNow(e, &r, "open", err)
			return r
		}
		defer f.Close()
		extra = append(extra, f)
	}
	wd := e.TempDir("p17-wd")
	o, err = e.rawCorral(ctx, rawRun{Policy: policy, Workdir: wd, Extra: extra,
		Args: e.steps(
			step{Label: "fds", Args: []string{"fds"}},
			step{Label: "read fds", Shell: "for n in 3 4 5 10 63 64; do cat /proc/self/fd/$n; done 2>&1"},
		)}, 20*time.Second)
	if err != nil {
		failNow(e, &r, "fds run", err)
		return r
	}
	s := parseSteps(o)
	fds := s["fds"]
	var open []string
	for _, res := range fds.Results {
		open = append(open, res.What+"="+res.Detail)
	}
	ok := fds.reported() && onlyStdFDs(fds)
	e.Check(&r, "fds 3..64 open in the caller; the workload lists its fds", fds.String(), ok, "fds beyond 0-2 reached the workload: "+strings.Join(open, " "))
	lk := leaked(o.Stdout+o.Stderr, tok)
	e.Check(&r, "read /proc/self/fd/{3,4,5,10,63,64}", clip(s["read fds"].Text, 300), len(lk) == 0, "the secret behind the caller's fds was read")
	return r
}

// onlyStdFDs reads the fds probe's "fds" result (Detail: the open fd
// numbers).
func onlyStdFDs(s stepOut) bool {
	r, ok := find(s.Results, "fds")
	if !ok || !r.OK {
		return false
	}
	return strings.Join(strings.Fields(r.Detail), " ") == "0 1 2"
}

// P18: rw: [REPO]; plant hooks, git config and shell start-up files.
func runP18(ctx context.Context, e *Env) Result {
	r := newResult()
	repo := e.TempDir("p18-repo")
	if out, err := exec.Command("git", "init", "-q", repo).CombinedOutput(); err != nil {
		// Without git, make the layout git would.
		if err := writeHostFile(filepath.Join(repo, ".git", "config"), "[core]\n\trepositoryformatversion = 0\n", 0o644); err != nil {
			failNow(e, &r, "git init: "+string(out), err)
			return r
		}
		_ = os.MkdirAll(filepath.Join(repo, ".git", "hooks"), 0o755)
	}
	for _, f := range []string{".bashrc", ".profile"} {
		_ = writeHostFile(filepath.Join(repo, f), "# original "+f+"\n", 0o644)
	}
	_ = writeHostFile(filepath.Join(e.Home, ".profile"), "# home profile\n", 0o644)
	before := snapshot(repo, e.Home)
	targets := []string{".git/hooks/pre-commit", ".git/config", ".bashrc", ".profile"}
	var ss []step
	for _, t := range targets {
		ss = append(ss, step{Label: "write " + t, Args: []string{"write", t}})
	}
	// The sandbox's home is private (an empty tmpfs at $HOME): writes
	// there may succeed but must not reach the host's HOME (the snapshot
	// below decides).
	homeSteps := []string{"write $HOME/.bashrc", "write $HOME/.profile"}
	for _, l := range homeSteps {
		ss = append(ss, step{Label: l, Shell: e.probeLine("write") + ` "$HOME/` + strings.TrimPrefix(l, "write $HOME/") + `"`})
	}
	// Renaming the directory holding the protected paths and planting a
	// new .git in its place; the host checks below decide.
	replant := "mv .git .git-moved 2>&1 && echo MOVED; mkdir -p .git/hooks 2>&1; " +
		`printf '[core]\n\tfsmonitor = touch /tmp/pwned\n' > .git/config 2>&1 && echo PLANTED-CONFIG; ` +
		`printf '#!/bin/sh\ntouch /tmp/pwned\n' > .git/hooks/pre-commit 2>&1 && echo PLANTED-HOOK; ` +
		"mv .git-moved/hooks .git-moved/hooks2 2>&1 && echo MOVED-HOOKS; true"
	ss = append(ss,
		step{Label: "rename .git and plant another", Shell: replant},
		step{Label: "rename .git", Args: []string{"rename", ".git", ".git-moved"}},
		step{Label: "unlink .git/config", Args: []string{"unlink", ".git/config"}},
		step{Label: "mkdir .git/hooks2", Args: []string{"mkdir", ".git/hooks2"}},
		step{Label: "symlink .git/hooks/post-checkout", Args: []string{"symlink", "/tmp/x", ".git/hooks/post-checkout"}},
		step{Label: "control: write REPO/file", Args: []string{"write", "file"}},
	)
	args := e.steps(ss...)
	o, err := e.Corral(ctx, Run{Policy: e.policyFor(pol{}), Workdir: repo, Args: args})
	if err != nil {
		failNow(e, &r, "corral run", err)
		return r
	}
	s := parseSteps(o)
	e.Check(&r, "run the probes (workdir REPO read-write)", brief(o), s["end"].Ran, "the script did not finish")
	mustSucceed(e, &r, "control: write REPO/file", s["control: write REPO/file"], "the repository is not writable: the case cannot test protection")
	for _, st := range ss {
		if strings.HasPrefix(st.Label, "control") {
			continue
		}
		if strings.HasPrefix(st.Label, "write $HOME") {
			e.Check(&r, st.Label+" (the sandbox's private home; must not reach the host)", s[st.Label].String(), true, "")
			continue
		}
		if st.Label == "rename .git and plant another" {
			t := s[st.Label].Text
			cfg := hostRead(filepath.Join(repo, ".git", "config"))
			ok := !strings.Contains(t, "MOVED") && !strings.Contains(cfg, "fsmonitor") && !hostExists(filepath.Join(repo, ".git", "hooks", "pre-commit")) && !hostExists(filepath.Join(repo, ".git-moved"))
			e.Check(&r, st.Label+" (host: .git/config, .git/hooks/pre-commit, .git-moved)", clip(t, 300), ok, "the workload renamed .git or planted git config or hooks through the rename")
			continue
		}
		mustFail(e, &r, st.Label, s[st.Label], st.Label+" succeeded: a protected path is writable")
	}
	after := snapshot(repo, e.Home)
	delete(after, filepath.Join(repo, "file"))
	diff := diffSnapshots(before, after)
	e.Check(&r, "host: REPO/.git, REPO's and HOME's start-up files unchanged", strings.Join(diff, "; "), len(diff) == 0, "protected host paths changed: "+strings.Join(diff, "; "))
	return r
}

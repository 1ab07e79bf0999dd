//go:build linux

package qualify

// Cases of the "persistence for later" kind: P25 planted for later, P26
// tool and agent configuration, P27 symlinked grants.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

func init() {
	Register(Case{ID: "P25", Title: "planted for later", Applies: linuxKernel, Run: runP25})
	Register(Case{ID: "P26", Title: "tool and agent configuration", Applies: linuxKernel, Run: runP26})
	Register(Case{ID: "P27", Title: "symlinked grants", Applies: linuxKernel, Run: runP27})
}

// plantShell is a shell step that writes content to path (printf %s, so
// the probe's fixed line is not enough) and says whether it could.
func plantShell(label, path, content string) step {
	return step{Label: label, Shell: fmt.Sprintf(`mkdir -p %s 2>/dev/null; if printf '%%s' %s > %s 2>/dev/null; then echo PLANT-OK; else echo PLANT-FAILED; fi`,
		shq(filepath.Dir(path)), shq(content), shq(path))}
}

// P25: rw: [W] (a git repository) and W2 (a plain directory); plant a
// repository with command keys in a new subdirectory, a .git file, and
// the top-level names W2 and W lack. The top-level ones must be refused;
// the nested ones reported as findings (stderr and audit), the run failed
// in strict-tree mode, and after it no host git runs the planted command.
// Through the gateway, which has no strict-tree mode (an exec's plants
// are reported: stderr, events, audit), the main run is the report mode
// the W0 run checks for corral run: the refusals, the reports and the
// findings are checked; exit 116, the quarantine and the host git after
// it are not there to check, and the evidence says so.
func runP25(ctx context.Context, e *Env) Result {
	gateway := e.Provider == LinuxGateway
	r := newResult()
	w := e.TempDir("p25-repo")
	hasGit := exec.Command("git", "init", "-q", w).Run() == nil
	if !hasGit {
		_ = writeHostFile(filepath.Join(w, ".git", "config"), "[core]\n\trepositoryformatversion = 0\n", 0o644)
	}
	w2 := e.TempDir("p25-plain") // a second read-write root, with no .git
	mark := filepath.Join(e.TempDir("p25-mark"), "ran")
	cfg := "[core]\n\trepositoryformatversion = 0\n\tfsmonitor = touch " + mark + "\n\thooksPath = hooks2\n[filter \"x\"]\n\tsmudge = touch " + mark + "\n"
	auditLog := filepath.Join(e.TempDir("p25-audit"), "audit.jsonl")
	ss := []step{
		plantShell("plant sub/.git/config", filepath.Join(w, "sub", ".git", "config"), cfg),
		plantShell("plant sub/.git/HEAD", filepath.Join(w, "sub", ".git", "HEAD"), "ref: refs/heads/main\n"),
		{Label: "mkdir sub/.git/objects", Shell: "mkdir -p sub/.git/objects sub/.git/refs && echo PLANT-OK"},
		plantShell("plant wt/.git (gitdir file)", filepath.Join(w, "wt", ".git"), "gitdir: /elsewhere\n"),
		plantShell("plant deep/.bashrc", filepath.Join(w, "deep", ".bashrc"), "touch "+mark+"\n"),
		{Label: "create W/.bashrc", Args: []string{"write", ".bashrc"}},
		{Label: "create W/.mcp.json", Args: []string{"write", ".mcp.json"}},
		{Label: "mkdir W/.vscode", Args: []string{"mkdir", ".vscode"}},
		{Label: "create W2/.git", Args: []string{"mkdir", filepath.Join(w2, ".git")}},
		{Label: "create W2/.envrc", Args: []string{"write", filepath.Join(w2, ".envrc")}},
		{Label: "create W/.claude/settings.json", Args: []string{"write", ".claude/settings.json"}},
		{Label: "git init W2", Shell: "(cd " + shq(w2) + " && if command -v git >/dev/null 2>&1; then git init -q . >/dev/null 2>&1 && echo INIT-OK; echo git-init-done; else echo no-git; fi)"},
		{Label: "control: write W/file", Args: []string{"write", "file"}},
	}
	// Without --strict-tree a plant is reported too, and the run keeps the
	// workload's exit status.
	w0 := e.TempDir("p25-report")
	_ = exec.Command("git", "init", "-q", w0).Run()
	cfg0 := "[core]\n\trepositoryformatversion = 0\n\tfsmonitor = touch " + filepath.Join(e.TempDir("p25-mark0"), "ran") + "\n"
	o0, err := e.Corral(ctx, Run{Policy: e.policyFor(pol{}), Workdir: w0, Args: e.steps(
		plantShell("config", filepath.Join(w0, "sub", ".git", "config"), cfg0),
		plantShell("HEAD", filepath.Join(w0, "sub", ".git", "HEAD"), "ref: refs/heads/main\n"),
		step{Label: "dirs", Shell: "mkdir -p sub/.git/objects sub/.git/refs"},
	)})
	if err != nil {
		failNow(e, &r, "corral run (without --strict-tree)", err)
		return r
	}
	e.Check(&r, "without --strict-tree: a repository planted in W0/sub is reported, exit 0", brief(o0),
		o0.Code == 0 && strings.Contains(o0.Stderr, "planted for later: "+filepath.Join(w0, "sub", ".git")) && strings.Contains(o0.Stderr, "core.fsmonitor = touch "),
		"without --strict-tree the planted repository was not reported, or the run did not keep the workload's exit status")
	flags := []string{"--strict-tree", "--audit", auditLog}
	if gateway {
		flags = flags[1:]
	}
	o, err := e.Corral(ctx, Run{Policy: e.policyFor(pol{RW: []string{w2}}), Workdir: w, Flags: flags, Args: e.steps(ss...)})
	if err != nil {
		failNow(e, &r, "corral run", err)
		return r
	}
	s := parseSteps(o)
	e.Check(&r, "run the steps (W read-write)", brief(o), s["end"].Ran, "the script did not finish")
	mustSucceed(e, &r, "control: write W/file", s["control: write W/file"], "W is not writable: the case cannot test planting")
	for _, st := range ss[:5] {
		e.Check(&r, st.Label+" (nested: cannot be pre-empted, must be reported)", strings.TrimSpace(s[st.Label].Text), strings.Contains(s[st.Label].Text, "PLANT-OK"),
			st.Label+": the workload could not plant it, so the report is not tested")
	}
	for _, st := range ss[5:11] {
		mustFail(e, &r, st.Label+" (absent at the start: must not be creatable)", s[st.Label], st.Label+" succeeded: an absent protected name was created at the top of a read-write root")
	}
	gi := strings.TrimSpace(s["git init W2"].Text)
	e.Check(&r, "git init in W2 (no .git at the start)", gi, !strings.Contains(gi, "INIT-OK") && (strings.Contains(gi, "git-init-done") || gi == "no-git"), "git init made a repository at the top of W2")
	if gateway {
		e.Check(&r, "gateway (no strict-tree mode): the exec keeps the workload's exit status, 0", fmt.Sprintf("exit %d", o.Code), o.Code == 0, "the exec did not keep the workload's exit status")
	} else {
		e.Check(&r, "strict-tree: the run fails with 116", fmt.Sprintf("exit %d", o.Code), o.Code == 116, "the run did not fail although the workload planted files")
	}
	for _, p := range []string{"sub/.git", "wt/.git", "deep/.bashrc"} {
		e.Check(&r, "reported on stderr: "+p, grepLine(o.Stderr, filepath.Join(w, p)), strings.Contains(o.Stderr, "planted for later: "+filepath.Join(w, p)), p+" was planted and not reported")
	}
	e.Check(&r, "the report names the key", grepLine(o.Stderr, "core.fsmonitor"), strings.Contains(o.Stderr, "core.fsmonitor = touch "+mark), "the planted core.fsmonitor is not named")
	found := findings(auditLog)
	subGit := filepath.Join(w, "sub", ".git")
	_, ok := found[subGit]
	e.Check(&r, "audit: Detection Findings (class 2004)", strings.Join(slices.Sorted(maps.Keys(found)), ", "), ok, "the audit log has no finding for sub/.git")
	e.Check(&r, "audit: the finding for sub/.git names the key", strings.Join(found[subGit], "; "), slices.Contains(found[subGit], "core.fsmonitor = touch "+mark), "the finding does not name the planted core.fsmonitor")
	if gateway {
		e.Check(&r, "not checked through the gateway: the quarantine of --strict-tree, and a host git status after it", "the gateway has no strict-tree mode: sub/.git stays where it was planted, reported (above)", true, "")
	} else {
		e.Check(&r, "strict-tree: sub/.git moved aside", fmt.Sprintf("sub/.git exists: %v, sub/.git.corral-quarantine exists: %v", hostExists(subGit), hostExists(subGit+".corral-quarantine")),
			!hostExists(subGit) && hostExists(subGit+".corral-quarantine"), "the planted repository was not moved aside")
	}
	// At the top: what was there and what the workload made below it,
	// nothing else (no placeholder, no protected name created).
	tops := map[string][]string{w: {".git", "deep", "file", "sub", "wt"}, w2: nil}
	for _, d := range []string{w, w2} {
		var extra []string
		ents, _ := os.ReadDir(d)
		for _, ent := range ents {
			if !slices.Contains(tops[d], ent.Name()) {
				extra = append(extra, filepath.Join(d, ent.Name()))
			}
		}
		e.Check(&r, "host: nothing left at the top of "+d+" (no placeholder, nothing created)", strings.Join(extra, ", "), len(extra) == 0, "left on the host: "+strings.Join(extra, ", "))
	}
	if hasGit && !gateway {
		for _, d := range []string{"sub", "deep", "wt"} {
			// As the tree's owner would, and past git's ownership check
			// (the tree may be another uid's: docker's nobody).
			git := exec.Command("git", "-c", "safe.directory=*", "-C", filepath.Join(w, d), "status")
			git.Env = []string{"PATH=" + hostPath, "HOME=" + e.Home}
			e.asUser(git)
			_ = git.Run()
		}
		e.Check(&r, "host: git status in the planted directories runs nothing", fmt.Sprintf("marker exists: %v", hostExists(mark)), !hostExists(mark), "a host git ran the planted command")
	}
	return r
}

// grepLine returns the first line of s containing sub, or "(none)".
func grepLine(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return "(none)"
}

// findings maps the resource of each Detection Finding in an audit log to
// the configuration keys it names.
func findings(path string) map[string][]string {
	b, err := os.ReadFile(path)
	if err != nil {
		return map[string][]string{"<" + err.Error() + ">": nil}
	}
	out := map[string][]string{}
	for _, line := range strings.Split(string(b), "\n") {
		var ev struct {
			ClassUID  int `json:"class_uid"`
			Resources []struct {
				Name string `json:"name"`
			} `json:"resources"`
			Unmapped struct {
				Keys []string `json:"keys"`
			} `json:"unmapped"`
		}
		if json.Unmarshal([]byte(line), &ev) == nil && ev.ClassUID == 2004 && len(ev.Resources) > 0 {
			out[ev.Resources[0].Name] = ev.Unmapped.Keys
		}
	}
	return out
}

// p26Files is the tool and agent configuration P26 rewrites.
var p26Files = []string{".mcp.json", ".vscode/tasks.json", ".idea/workspace.xml", ".claude/settings.json", ".codex/config.toml", ".aws/config",
	".gitconfig", ".gitmodules", ".npmrc", ".envrc", ".docker/config.json", ".kube/config"}

// P26: defaults, rw: [W] holding agent, IDE and tool configuration;
// rewrite, replace and remove each.
func runP26(ctx context.Context, e *Env) Result {
	r := newResult()
	w := e.TempDir("p26-w")
	for _, f := range p26Files {
		if err := writeHostFile(filepath.Join(w, f), "# original "+f+"\n", 0o644); err != nil {
			failNow(e, &r, "set up "+f, err)
			return r
		}
	}
	before := snapshot(w)
	var ss []step
	for _, f := range p26Files {
		ss = append(ss,
			step{Label: "write " + f, Args: []string{"write", f}},
			step{Label: "unlink " + f, Args: []string{"unlink", f}},
			step{Label: "rename " + f, Args: []string{"rename", f, f + ".moved"}})
	}
	ss = append(ss, step{Label: "control: write W/file", Args: []string{"write", "file"}})
	o, err := e.Corral(ctx, Run{Policy: e.policyFor(pol{}), Workdir: w, Args: e.steps(ss...)})
	if err != nil {
		failNow(e, &r, "corral run", err)
		return r
	}
	s := parseSteps(o)
	e.Check(&r, "run the probes (W read-write)", brief(o), s["end"].Ran, "the script did not finish")
	mustSucceed(e, &r, "control: write W/file", s["control: write W/file"], "W is not writable: the case cannot test protection")
	for _, st := range ss[:len(ss)-1] {
		mustFail(e, &r, st.Label, s[st.Label], st.Label+" succeeded: tool configuration is writable")
	}
	after := snapshot(w)
	delete(after, filepath.Join(w, "file"))
	diff := diffSnapshots(before, after)
	e.Check(&r, "host: configuration unchanged", strings.Join(diff, "; "), len(diff) == 0, "changed on the host: "+strings.Join(diff, "; "))
	return r
}

// P27: grants through symlinks someone else could have planted: rw
// through a link in W to a directory outside W and to W's parent, ro and
// deny through a link in a world-writable directory. Each policy is
// refused at load naming the link and its target; nothing runs, nothing
// outside the entries becomes writable. Control: the targets granted
// explicitly are accepted.
func runP27(ctx context.Context, e *Env) Result {
	r := newResult()
	w := e.TempDir("p27-w")
	outside := e.TempDir("p27-outside")
	shared := e.TempDir("p27-shared")
	if err := os.Chmod(shared, 0o777); err != nil {
		failNow(e, &r, "chmod", err)
		return r
	}
	_ = os.MkdirAll(filepath.Join(outside, "sub"), 0o755)
	_ = os.MkdirAll(filepath.Join(outside, "sub2"), 0o755)
	links := map[string]string{filepath.Join(w, "cache"): outside, filepath.Join(w, "up"): filepath.Dir(w), filepath.Join(shared, "l"): outside}
	for link, target := range links {
		if err := os.Symlink(target, link); err != nil {
			failNow(e, &r, "symlink", err)
			return r
		}
	}
	e.handOver(w)
	mark := filepath.Join(outside, "written")
	// resolved is what the refusal suggests writing instead.
	cases := []struct {
		label, yaml, link, target, resolved string
	}{
		{"rw through W/cache -> outside", "filesystem:\n  read_write: [" + shq(filepath.Join(w, "cache")) + "]\n", filepath.Join(w, "cache"), outside, outside},
		{"rw through W/up -> W's parent", "filesystem:\n  read_write: [" + shq(filepath.Join(w, "up", "x")) + "]\n", filepath.Join(w, "up"), filepath.Dir(w), filepath.Join(filepath.Dir(w), "x")},
		{"ro through a link in a world-writable directory", "filesystem:\n  read_only: [" + shq(filepath.Join(shared, "l", "sub")) + "]\n", filepath.Join(shared, "l"), outside, filepath.Join(outside, "sub")},
		{"deny through a link in a world-writable directory", "filesystem:\n  deny: [" + shq(filepath.Join(shared, "l", "sub2")) + "]\n", filepath.Join(shared, "l"), outside, filepath.Join(outside, "sub2")},
	}
	_ = os.MkdirAll(filepath.Join(filepath.Dir(w), "x"), 0o755)
	defer os.Remove(filepath.Join(filepath.Dir(w), "x"))
	for _, c := range cases {
		o, err := e.Corral(ctx, Run{Policy: e.SystemPolicy(c.yaml), Workdir: w, Args: script("touch " + shq(mark) + " " + shq(filepath.Join(w, "cache", "x")) + "; echo RAN")})
		if err != nil {
			failNow(e, &r, "corral run: "+c.label, err)
			return r
		}
		named := strings.Contains(o.Stderr, "symlink "+c.link+" -> "+c.target)
		e.Check(&r, c.label+": refused at load (122) naming the link and its target", brief(o), o.Code == 122 && named && !strings.Contains(o.Stdout, "RAN"),
			c.label+": the policy was not refused, or the refusal does not name the link and its target")
		// Where it is, and what to write instead.
		at := e.PolicyPath(e.SystemPolicy(c.yaml)) + ":"
		hint := `write "` + c.resolved + `"`
		e.Check(&r, c.label+": the refusal names the policy line and suggests "+hint, grepLine(o.Stderr, "symlink "+c.link), strings.Contains(o.Stderr, at) && strings.Contains(o.Stderr, hint),
			c.label+": the refusal does not name "+at+" or suggest "+hint)
	}
	e.Check(&r, "host: nothing written outside the entries", fmt.Sprintf("%s exists: %v", mark, hostExists(mark)), !hostExists(mark), "the workload wrote through a planted link")
	// Control: the same grant written as its target is accepted.
	o, err := e.Corral(ctx, Run{Policy: e.SystemPolicy("filesystem:\n  read_only: [" + shq(outside) + "]\n"), Workdir: w, Args: script("echo RAN")})
	if err != nil {
		failNow(e, &r, "corral run: control", err)
		return r
	}
	e.Check(&r, "control: the target granted explicitly runs", brief(o), o.Code == 0 && strings.Contains(o.Stdout, "RAN"), "the explicit grant was refused: the case cannot tell a link refusal from any other")
	return r
}

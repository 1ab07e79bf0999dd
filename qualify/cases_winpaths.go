//go:build linux

package qualify

// P35: Windows path forms, on the mxc provider. A Windows policy's paths
// are checked and mapped by the binary under test (corral policy explain
// --os windows --provider mxc -o json, resolved lexically on this Linux
// host), and every document it maps is validated by the executor
// (wxc-exec --dry-run: the stand-in checks it against the shipped MXC
// schemas).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

func init() {
	Register(Case{ID: "P35", Title: "Windows path forms (mxc)", Applies: mxcOnly, Run: runP35})
}

// mxcOnly: the case is about the Windows provider's paths.
func mxcOnly(e *Env) (bool, string) {
	if e.Provider != "mxc" {
		return false, "not applicable to provider " + e.Provider + " (Windows path forms are the mxc provider's)"
	}
	return true, ""
}

// p35Workdir and p35Profile are the Windows caller the policies resolve
// for.
const (
	p35Profile = `C:\Users\q`
	p35Workdir = `C:\Users\q\work`
)

// p35Plan is what the case reads of explain's JSON.
type p35Plan struct {
	Details struct {
		Request json.RawMessage `json:"request"`
	} `json:"details"`
}

// p35FS is a document's filesystem section, each list case-folded and
// sorted: two documents that decide alike compare equal.
type p35FS struct {
	RO   []string `json:"readonlyPaths"`
	RW   []string `json:"readwritePaths"`
	Deny []string `json:"deniedPaths"`
}

func (f p35FS) folded() string {
	fold := func(l []string) []string {
		out := make([]string, len(l))
		for i, s := range l {
			out[i] = strings.ToLower(s)
		}
		slices.Sort(out)
		return out
	}
	return fmt.Sprintf("ro %v rw %v deny %v", fold(f.RO), fold(f.RW), fold(f.Deny))
}

// explain runs corral policy explain on a Windows policy; the document's
// filesystem section when it maps without error.
func (e *Env) p35Explain(ctx context.Context, policy string) (Outcome, *p35FS, json.RawMessage, error) {
	f, err := e.rawPolicy(policy)
	if err != nil {
		return Outcome{}, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.Bin, "policy", "explain", "--os", "windows", "--provider", "mxc", "-o", "json", "-C", p35Workdir, f)
	cmd.Env = append([]string{"PATH=" + hostPath, "HOME=" + e.Home, "LANG=C", "USERPROFILE=" + p35Profile}, providerEnv()...)
	cmd.Dir = e.Dir
	e.asUser(cmd)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	o := Outcome{Stdout: out.String(), Stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		o.Code = ee.ExitCode()
	case err != nil:
		return o, nil, nil, err
	}
	if o.Code != 0 {
		return o, nil, nil, nil
	}
	var plan p35Plan
	if err := json.Unmarshal([]byte(o.Stdout), &plan); err != nil {
		return o, nil, nil, fmt.Errorf("explain printed no plan: %v", err)
	}
	var doc struct {
		Filesystem p35FS `json:"filesystem"`
	}
	if err := json.Unmarshal(plan.Details.Request, &doc); err != nil {
		return o, nil, nil, fmt.Errorf("the plan has no MXC document: %v", err)
	}
	return o, &doc.Filesystem, plan.Details.Request, nil
}

// dryRun has the executor validate doc (wxc-exec --dry-run, with a
// command), as the runner does before every run.
func (e *Env) p35DryRun(ctx context.Context, doc json.RawMessage) (string, bool) {
	bin := os.Getenv("CORRAL_MXC_WXC_EXEC")
	if bin == "" {
		if p, err := exec.LookPath("wxc-exec"); err == nil {
			bin = p
		}
	}
	if bin == "" {
		return "no executor: CORRAL_MXC_WXC_EXEC is unset and wxc-exec is not in PATH", false
	}
	f := filepath.Join(e.TempDir("p35-doc"), "request.json")
	if err := os.WriteFile(f, doc, 0o600); err != nil {
		return err.Error(), false
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--dry-run", "--config", f, "--", "cmd", "/c", "exit", "0")
	cmd.Env = append([]string{"PATH=" + hostPath, "LANG=C"}, providerEnv()...)
	out, err := cmd.CombinedOutput()
	return fmt.Sprintf("%s --dry-run: %v %s", filepath.Base(bin), err, bound(strings.TrimSpace(string(out)), 500)), err == nil
}

// P35: a baseline Windows policy (rw {workdir}\out, ro C:\Tools\Git, deny
// {workdir}\out\secret) maps to a document the executor accepts. The same
// rules written in other forms — mixed case, "/" separators, a lower-case
// drive, doubled and trailing separators, "." components — map to the same
// decisions. Each dangerous form, written as a read-only grant and as a
// deny, is refused with a file:line:col error naming it and maps nothing:
// UNC (\\server\share, //server/share, \\?\UNC\...), device paths
// (\\.\PhysicalDrive0, \\.\pipe\docker_engine, \\?\GLOBALROOT\...), a
// verbatim \\?\C:\ path, drive-relative C:foo, a rooted \foo, an
// alternate data stream, a trailing dot or space, NUL/CON/COM1, "..", and
// an 8.3 alias (only the Windows host can expand it). Dangerous grants are
// refused too: C:\ or C:\Windows\Temp read-write, another user's profile,
// Docker's trees. Links and junctions are resolved on the Windows host
// only (the policy package's Windows-host tests); a lexical resolution
// follows none, and the evidence says so.
func runP35(ctx context.Context, e *Env) Result {
	r := newResult()
	rules := func(rw, ro, deny string) string {
		return fmt.Sprintf("version: 1\nfilesystem:\n  include_workdir: false\n  protected: []\n  read_write: [%s]\n  read_only: [%s]\n  deny: [%s]\n", sq(rw), sq(ro), sq(deny))
	}
	base := rules(`{workdir}\out`, `C:\Tools\Git`, `{workdir}\out\secret`)
	o, fs, doc, err := e.p35Explain(ctx, base)
	if err != nil || fs == nil {
		failNow(e, &r, "explain the baseline policy", fmt.Errorf("%v: %s", err, o))
		return r
	}
	want := fs.folded()
	e.Check(&r, "explain the baseline", want, strings.Contains(want, `c:\users\q\work\out\secret`) && strings.Contains(want, `c:\tools\git`), "the baseline document lacks its grants: "+want)
	got, ok := e.p35DryRun(ctx, doc)
	e.Check(&r, "executor validates the baseline document", got, ok, "the executor refused the baseline document")

	for _, f := range [][3]string{
		{`C:/users/Q/WORK/out`, `c:\tools\GIT`, `C:\USERS\Q\WORK\OUT\SECRET`},
		{`c:\Users\q\work\\out\`, `C:/Tools//Git/`, `{workdir}/out/./secret`},
		{`~\work\out`, `C:\.\Tools\Git`, `~/work/out/secret/`},
	} {
		what := fmt.Sprintf("rw %s, ro %s, deny %s", f[0], f[1], f[2])
		o, fs, doc, err := e.p35Explain(ctx, rules(f[0], f[1], f[2]))
		if err != nil || fs == nil {
			e.Check(&r, "explain "+what, fmt.Sprintf("%v: %s", err, o), false, what+" was not mapped")
			continue
		}
		e.Check(&r, "explain "+what, fs.folded(), fs.folded() == want, what+" decides unlike the plain long paths")
		got, ok := e.p35DryRun(ctx, doc)
		e.Check(&r, "executor validates the document of "+what, got, ok, "the executor refused the document of "+what)
	}

	position := regexp.MustCompile(`policy-[0-9]+\.yaml:[0-9]+:[0-9]+`)
	refuse := func(src, what, why string) {
		o, fs, _, err := e.p35Explain(ctx, src)
		ok := err == nil && fs == nil && o.Code == 122 && position.MatchString(o.Stderr) && strings.Contains(o.Stderr, why) && !strings.Contains(o.Stdout, "readonlyPaths")
		e.Check(&r, "explain "+what, fmt.Sprintf("exit %d: %s", o.Code, bound(strings.TrimSpace(o.Stderr), 600)), ok,
			what+" was not refused with a positioned error naming "+why)
	}
	for _, c := range [][2]string{
		{`\\server\share\data`, "network share"},
		{`//server/share`, "network share"},
		{`\\?\UNC\server\share`, "network share"},
		{`\\.\PhysicalDrive0`, "device namespace"},
		{`\\.\pipe\docker_engine`, "device namespace"},
		{`\\?\GLOBALROOT\Device\HarddiskVolume1`, "device namespace"},
		{`\\?\C:\Tools\Git`, "verbatim"},
		{`C:Tools`, "drive-relative"},
		{`\Tools\Git`, "no drive"},
		{`C:\Tools\Git\git.exe:payload`, "alternate data stream"},
		{`C:\Tools\Git.`, "dot or a space"},
		{`C:\Tools\Git `, "dot or a space"},
		{`C:\Tools\NUL`, "reserved device name"},
		{`C:\Tools\CON.txt`, "reserved device name"},
		{`C:\Tools\COM1`, "reserved device name"},
		{`C:\Tools\Git\..\..\Users\other`, `".."`},
		{`C:\PROGRA~1\Git`, "8.3 short name"},
	} {
		refuse(rules(`{workdir}\out`, c[0], `{workdir}\out\secret`), "read-only "+c[0], c[1])
		refuse(rules(`{workdir}\out`, `C:\Tools\Git`, c[0]), "deny "+c[0], c[1])
	}
	for _, c := range [][3]string{
		{"read_write", `C:\`, "drive root"},
		{"read_write", `C:\Windows\Temp`, "would let the workload modify the host"},
		{"read_write", `~`, "your profile"},
		{"read_only", `C:\Users\other\Documents`, "another user's profile"},
		{"read_only", `C:\ProgramData\DockerDesktop`, "Docker"},
	} {
		refuse(fmt.Sprintf("version: 1\nfilesystem:\n  include_workdir: false\n  %s: [%s]\n", c[0], sq(c[1])), c[0]+" "+c[1], c[2])
	}
	// Not a check: nothing is attempted, and the evidence says so.
	r.Evidence = append(r.Evidence, Evidence{Attempt: "links and junctions out of a granted folder",
		Got: "not tested here: this resolution is lexical (a Linux host has no Windows links); on the Windows host a grant through a link inside a read-write grant, or one a user made, is refused and the system's own are followed (policy TestWindowsLinksFollowTargetAndPlantedRefused; under Wine, which cannot make junctions, skipped as a Wine artifact)"})
	return r
}

// sq is s as a single-quoted YAML scalar (no escapes: Windows paths).
func sq(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

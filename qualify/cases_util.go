//go:build linux

package qualify

// Helpers shared by the adversarial cases (cases_*.go): policy fragments,
// in-sandbox scripts made of probes, parsing of the probes' reports, host
// side checks (files, processes, cgroups) and loopback upstreams.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/corral-sandbox/corral/internal/mountinfo"
	"github.com/corral-sandbox/corral/probe"
)

// newResult starts a case's result: it passes unless a check fails.
func newResult() Result { return Result{Status: Pass} }

// skip returns a skipped result with why.
func skip(r Result, why string) Result {
	r.Status = Skipped
	r.Reason = why
	return r
}

// failNow records a setup error as a failure.
func failNow(e *Env, r *Result, attempt string, err error) {
	e.Check(r, attempt, "error: "+err.Error(), false, attempt+": "+err.Error())
}

// linuxKernel is the Applies of cases that need a Linux kernel under the
// sandbox: the linux and docker providers, and the gateway's linux
// sandboxes.
func linuxKernel(e *Env) (bool, string) {
	if e.Provider == LinuxService {
		if e.st != nil && slices.Contains(ServiceCases, e.st.caseID) {
			return true, ""
		}
		return false, "not among the cases a service session is qualified on (" + strings.Join(ServiceCases, ", ") + ")"
	}
	if e.Provider != "linux" && e.Provider != "docker" && e.Provider != LinuxGateway {
		return false, "not applicable to provider " + e.Provider
	}
	return true, ""
}

// newToken returns a random canary.
func newToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "qcanary" + hex.EncodeToString(b[:])
}

// uniqueSeconds returns a unique sleep duration such as "3171.482913",
// usable as a marker in a command line.
func uniqueSeconds(base int) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	n := (int(b[0])<<24 | int(b[1])<<16 | int(b[2])<<8 | int(b[3])) % 1000000
	if n < 0 {
		n = -n
	}
	return fmt.Sprintf("%d.%06d", base, n)
}

// pol is the case's part of a policy, rendered as YAML for
// Env.SystemPolicy (which adds the system directories and the corral
// binary's directory read-only).
type pol struct {
	RO, RW, Deny []string
	NoWorkdir    bool
	Protected    []string // nil: the default list
	Network      string   // "" : none (the default)
	NetRules     string   // YAML lines under network:, indented two spaces
	Limits       string   // flow mapping body, e.g. "pids: 64, timeout: 5s"
	Layers       map[string]string
	EnvPass      []string
}

func yamlList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = strconv.Quote(x)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func (p pol) yaml() string {
	var b strings.Builder
	if len(p.RO)+len(p.RW)+len(p.Deny) > 0 || p.NoWorkdir || p.Protected != nil {
		b.WriteString("filesystem:\n")
	}
	if len(p.RO) > 0 {
		fmt.Fprintf(&b, "  read_only: %s\n", yamlList(p.RO))
	}
	if len(p.RW) > 0 {
		fmt.Fprintf(&b, "  read_write: %s\n", yamlList(p.RW))
	}
	if len(p.Deny) > 0 {
		fmt.Fprintf(&b, "  deny: %s\n", yamlList(p.Deny))
	}
	if p.NoWorkdir {
		b.WriteString("  include_workdir: false\n")
	}
	if p.Protected != nil {
		fmt.Fprintf(&b, "  protected: %s\n", yamlList(p.Protected))
	}
	if p.Network != "" {
		fmt.Fprintf(&b, "network:\n  mode: %s\n%s", p.Network, p.NetRules)
	}
	if p.Limits != "" || p.EnvPass != nil {
		b.WriteString("process:\n")
		if p.EnvPass != nil {
			fmt.Fprintf(&b, "  env:\n    pass: %s\n", yamlList(p.EnvPass))
		}
		if p.Limits != "" {
			fmt.Fprintf(&b, "  limits: {%s}\n", p.Limits)
		}
	}
	if len(p.Layers) > 0 {
		b.WriteString("layers:\n")
		var ks []string
		for k := range p.Layers {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		for _, k := range ks {
			fmt.Fprintf(&b, "  %s: %s\n", k, p.Layers[k])
		}
	}
	return b.String()
}

// policyFor returns the full policy YAML for p on e.
func (e *Env) policyFor(p pol) string { return e.SystemPolicy(p.yaml()) }

// shq quotes s for sh.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// probeLine is a shell command line running one probe inside the sandbox
// (the corral binary is granted read-only at its host path).
func (e *Env) probeLine(args ...string) string {
	q := []string{shq(e.Bin), probe.Arg}
	for _, a := range args {
		q = append(q, shq(a))
	}
	return strings.Join(q, " ")
}

// script is an Args running lines with /bin/sh.
func script(lines ...string) []string {
	return []string{"/bin/sh", "-c", strings.Join(lines, "\n")}
}

// reports parses every probe report (one JSON line each) in stdout.
func reports(stdout string) []probe.Report {
	var out []probe.Report
	sc := bufio.NewScanner(strings.NewReader(stdout))
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var r probe.Report
		if json.Unmarshal([]byte(l), &r) == nil && r.Probe != "" {
			out = append(out, r)
		}
	}
	return out
}

// results is every probe result in o's stdout, in order.
func results(o Outcome) []probe.Result {
	var out []probe.Result
	if o.Report != nil {
		return append(out, o.Report.Results...)
	}
	for _, r := range reports(o.Stdout) {
		out = append(out, r.Results...)
	}
	return out
}

// find returns the first result whose What starts with prefix.
func find(rs []probe.Result, prefix string) (probe.Result, bool) {
	for _, r := range rs {
		if strings.HasPrefix(r.What, prefix) {
			return r, true
		}
	}
	return probe.Result{}, false
}

// findAll returns every result whose What starts with prefix.
func findAll(rs []probe.Result, prefix string) []probe.Result {
	var out []probe.Result
	for _, r := range rs {
		if strings.HasPrefix(r.What, prefix) {
			out = append(out, r)
		}
	}
	return out
}

// show renders a probe result as evidence.
func show(r probe.Result) string {
	s := "ok"
	if !r.OK {
		s = "failed"
		if r.Errno != "" {
			s += " " + r.Errno
		}
	}
	if r.Detail != "" {
		s += ": " + clip(r.Detail, 300)
	}
	return s
}

// clip bounds s for evidence.
func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return s[:n] + fmt.Sprintf("... (%d bytes)", len(s))
	}
	return s
}

// brief renders an outcome as evidence.
func brief(o Outcome) string {
	s := fmt.Sprintf("exit %d", o.Code)
	if st := clip(o.Stderr, 600); st != "" {
		s += "; stderr: " + st
	}
	return s
}

// briefOut renders an outcome with its stdout.
func briefOut(o Outcome) string {
	s := brief(o)
	if out := clip(o.Stdout, 800); out != "" {
		s += "; stdout: " + out
	}
	return s
}

// leaked returns the tokens found in s.
func leaked(s string, toks ...string) []string {
	var out []string
	for _, t := range toks {
		if t != "" && strings.Contains(s, t) {
			out = append(out, t)
		}
	}
	return out
}

// homeTokens returns the tokens of the canaries in e.Home.
func (e *Env) homeTokens() []string {
	var out []string
	for _, t := range e.Tokens {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// deniedErrno reports whether a failed result failed as a refusal.
func deniedErrno(r probe.Result, ok ...string) bool {
	if r.OK {
		return false
	}
	if len(ok) == 0 {
		return true
	}
	for _, e := range ok {
		if r.Errno == e {
			return true
		}
	}
	return false
}

// writeHostFile writes content to path, creating its directory.
func writeHostFile(path, content string, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		return err
	}
	return os.Chmod(path, mode)
}

func hostExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func hostRead(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

// snapshot records every path under roots with its content and mode.
func snapshot(roots ...string) map[string]string {
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
				m[p] = "dir|" + fi.Mode().String()
			default:
				m[p] = fi.Mode().String()
			}
			return nil
		})
	}
	return m
}

// diffSnapshots lists what changed between two snapshots.
func diffSnapshots(before, after map[string]string) []string {
	var out []string
	for p, v := range before {
		if a, ok := after[p]; !ok {
			out = append(out, "removed "+p)
		} else if a != v {
			out = append(out, fmt.Sprintf("changed %s: %q -> %q", p, clip(v, 60), clip(a, 60)))
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			out = append(out, "created "+p)
		}
	}
	slices.Sort(out)
	return out
}

// waitNoProcs polls until no host process has marker in its command line
// and returns the ones still alive after d.
func (e *Env) waitNoProcs(marker string, d time.Duration) []int {
	deadline := time.Now().Add(d)
	for {
		ps := e.ProcsWith(marker)
		if len(ps) == 0 || time.Now().After(deadline) {
			return ps
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// killProcs SIGKILLs pids (leftovers a failed case must not leave behind).
func killProcs(pids []int) {
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

// corralCgroupDirs lists the cgroup directories corral made for the
// supervisor with pid (…/corral/run-<pid>-…).
func corralCgroupDirs(pid int) []string {
	var out []string
	prefix := fmt.Sprintf("run-%d-", pid)
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if strings.HasPrefix(d.Name(), prefix) && filepath.Base(filepath.Dir(p)) == "corral" {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// rawRun is a corral invocation that a case starts itself (for signals,
// terminals, extra fds, hostile workdirs): the same environment as the
// runner's, with the policy written to a file.
type rawRun struct {
	Policy  string // YAML; "" = the built-in default
	Workdir string
	Env     []string
	Flags   []string
	Args    []string
	Extra   []*os.File
}

// rawPolicy writes a rawRun's policy to a file of its own in the case
// dir.
func (e *Env) rawPolicy(text string) (string, error) {
	f, err := os.CreateTemp(e.Dir, "policy-*.yaml")
	if err != nil {
		return "", err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return "", err
	}
	f.Close()
	return f.Name(), os.Chmod(f.Name(), 0o644)
}

// command builds the exec.Cmd (not started) for r.
func (e *Env) command(ctx context.Context, r rawRun) (*exec.Cmd, error) {
	e.handOver(e.Dir)
	args := e.runArgs()
	if r.Policy != "" {
		f, err := e.rawPolicy(r.Policy)
		if err != nil {
			return nil, err
		}
		args = append(args, "--policy", f)
	}
	if r.Workdir != "" {
		args = append(args, "-C", r.Workdir)
	}
	if slices.Contains(r.Flags, "--provider") {
		args = []string{"run"} // the case names its own
	}
	args = append(args, r.Flags...)
	args = append(args, "--")
	args = append(args, r.Args...)
	cmd := exec.CommandContext(ctx, e.Bin, args...)
	cmd.Env = append([]string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + e.Home,
		"LANG=C",
	}, r.Env...)
	cmd.Dir = e.Dir
	cmd.ExtraFiles = r.Extra
	cmd.WaitDelay = 5 * time.Second
	e.asUser(cmd)
	return cmd, nil
}

// rawCorral runs r to completion and returns its outcome.
func (e *Env) rawCorral(ctx context.Context, r rawRun, timeout time.Duration) (Outcome, error) {
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	if e.Provider == LinuxGateway {
		// A sandbox of its own: created with the policy, workdir, flags
		// and the caller's fds (which the clients have open), exec'd,
		// deleted.
		raw := &gwRun{workdir: r.Workdir, flags: r.Flags, extra: r.Extra}
		if r.Policy != "" {
			f, err := e.rawPolicy(r.Policy)
			if err != nil {
				return Outcome{}, err
			}
			raw.policy = f
		}
		run, err := e.gatewayStart(ctx, Run{Args: r.Args, Env: r.Env, Timeout: timeout}, raw)
		if err != nil {
			return Outcome{}, err
		}
		return run.Wait()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd, err := e.command(ctx, r)
	if err != nil {
		return Outcome{}, err
	}
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	t0 := time.Now()
	err = cmd.Run()
	o := Outcome{Stdout: out.String(), Stderr: errb.String(), Elapsed: time.Since(t0)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		o.Code = ee.ExitCode()
	default:
		return o, err
	}
	if ctx.Err() != nil {
		return o, fmt.Errorf("corral did not finish within %s", timeout)
	}
	return o, nil
}

// hostMounts are the mounts in the host's (our) namespace, keyed by
// mount id and point (an id is reused once its mount is gone), leaving
// out the container runtime's own (its image layers and container
// namespaces come and go with any container on the host, a docker
// sandbox's or not). nil when mountinfo cannot be read.
func hostMounts() map[string]string {
	es, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	m := map[string]string{}
	for _, e := range es {
		if mp := e.Point; strings.HasPrefix(mp, "/var/lib/docker/") || strings.HasPrefix(mp, "/run/docker/") || strings.HasPrefix(mp, "/run/containerd/") {
			continue
		}
		m[strconv.Itoa(e.ID)+" "+e.Point] = e.Point
	}
	return m
}

// newHostMounts are the mount points of the host's mounts that are not
// in before, after waiting up to grace for them to go: another sandbox
// running beside the case (a docker sandbox's grant slot is a host
// mount while it runs) unmounts its own when it ends.
func newHostMounts(before map[string]string, grace time.Duration) []string {
	var added []string
	for end := time.Now().Add(grace); ; time.Sleep(200 * time.Millisecond) {
		added = added[:0]
		for id, mp := range hostMounts() {
			if _, ok := before[id]; !ok {
				added = append(added, mp)
			}
		}
		if len(added) == 0 || time.Now().After(end) {
			break
		}
	}
	sort.Strings(added)
	return added
}

// step is one labelled probe invocation of a script.
type step struct {
	Label string
	Args  []string // probe name and arguments
	Shell string   // instead of Args: a shell command line
}

const labelPrefix = "@@qualify-step "

// steps renders steps as one /bin/sh script; each step's output follows a
// label line so that it can be told apart from the others' (see sections).
func (e *Env) steps(ss ...step) []string {
	var lines []string
	for _, s := range ss {
		lines = append(lines, "echo "+shq(labelPrefix+s.Label))
		if s.Shell != "" {
			lines = append(lines, s.Shell)
		} else {
			lines = append(lines, e.probeLine(s.Args...))
		}
	}
	lines = append(lines, "echo "+shq(labelPrefix+"end"))
	return script(lines...)
}

// sections splits a steps script's stdout by label.
func sections(stdout string) map[string]string {
	out := map[string]string{}
	cur := ""
	for _, l := range strings.Split(stdout, "\n") {
		if v, ok := strings.CutPrefix(l, labelPrefix); ok {
			cur = v
			if _, seen := out[cur]; !seen {
				out[cur] = ""
			}
			continue
		}
		if cur != "" {
			out[cur] += l + "\n"
		}
	}
	return out
}

// stepOut is one step's output: its probe results and its raw text.
type stepOut struct {
	Ran     bool // the label was printed: the step was reached
	Results []probe.Result
	Text    string
}

// parseSteps returns each step's output.
func parseSteps(o Outcome) map[string]stepOut {
	out := map[string]stepOut{}
	for label, text := range sections(o.Stdout) {
		var rs []probe.Result
		for _, r := range reports(text) {
			rs = append(rs, r.Results...)
		}
		out[label] = stepOut{Ran: true, Results: rs, Text: text}
	}
	return out
}

// ok reports whether the step's probe reported and every result
// succeeded.
func (s stepOut) ok() bool {
	if len(s.Results) == 0 {
		return false
	}
	for _, r := range s.Results {
		if !r.OK {
			return false
		}
	}
	return true
}

// anyOK reports whether any result succeeded.
func (s stepOut) anyOK() bool {
	for _, r := range s.Results {
		if r.OK {
			return true
		}
	}
	return false
}

// reported reports whether the probe printed a report.
func (s stepOut) reported() bool { return len(s.Results) > 0 }

// String renders the step's output as evidence.
func (s stepOut) String() string {
	if !s.Ran {
		return "step not reached"
	}
	if len(s.Results) == 0 {
		return "no probe report: " + clip(s.Text, 300)
	}
	var parts []string
	for _, r := range s.Results {
		parts = append(parts, r.What+" => "+show(r))
	}
	return strings.Join(parts, "; ")
}

// errnos lists the errnos of the step's failed results.
func (s stepOut) errnos() []string {
	var out []string
	for _, r := range s.Results {
		if !r.OK {
			out = append(out, r.Errno)
		}
	}
	return out
}

// mustFail checks that the step ran its probe and that nothing it tried
// succeeded. A step whose probe did not report fails the check too: an
// attack that was not really attempted proves nothing.
func mustFail(e *Env, r *Result, attempt string, s stepOut, whyFail string) bool {
	ok := s.reported() && !s.anyOK()
	why := whyFail
	if !s.reported() {
		why = attempt + ": the probe did not report, so the attack was not verified"
	}
	e.Check(r, attempt, s.String(), ok, why)
	return ok
}

// mustSucceed checks a control step: it must have reported success.
func mustSucceed(e *Env, r *Result, attempt string, s stepOut, whyFail string) bool {
	ok := s.ok()
	e.Check(r, attempt, s.String(), ok, whyFail)
	return ok
}

//go:build linux

// Package e2e is Corral's end-to-end test suite: each test runs the real
// corral binary and checks the outcome on the host. The adversarial cases
// of /work/shared/cases/ADVERSARIAL.md (P01...) are qualify's, run by
// TestQualify on every provider; the other tests cover what they do not.
// Tests run as the current user (root in CI) and, where it is meaningful,
// as the unprivileged user "corral-test".
package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

var (
	corralBin string // the corral binary under test
	probeDir  string // directory holding the probe binary (granted read-only)
	probeBin  string
	baseDir   string // 0755 base for every test's directories
	testUser  *ident // the unprivileged identity; nil when not available
	setupErr  error
)

// ident is one identity corral is run as.
type ident struct {
	name     string // "root" or "user"
	uid, gid int
	home     string
	groups   []uint32 // supplementary groups corral runs with (none by default)
}

func (id *ident) isRoot() bool { return id.uid == 0 }

func TestMain(m *testing.M) {
	code := func() int {
		dir, err := os.MkdirTemp("", "corral-e2e-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		if err := os.Chmod(dir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		baseDir = dir
		if err := setup(dir); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: setup:", err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err == nil {
		if p := strings.TrimSpace(string(out)); p != "" && p != os.DevNull {
			return filepath.Dir(p), nil
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return filepath.Dir(wd), nil
}

func setup(dir string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	bin := filepath.Join(dir, "bin")
	probeDir = filepath.Join(dir, "probe")
	for _, d := range []string{bin, probeDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	corralBin = filepath.Join(bin, "corral")
	probeBin = filepath.Join(probeDir, "probe")
	builds := []struct{ out, pkg string }{{corralBin, "./cmd/corral"}, {probeBin, "./e2e/testdata/probe"}}
	if prebuilt := os.Getenv("CORRAL_E2E_BIN"); prebuilt != "" {
		// Test a binary built elsewhere (e.g. a release build).
		b, err := os.ReadFile(prebuilt)
		if err != nil {
			return err
		}
		if err := os.WriteFile(corralBin, b, 0o755); err != nil {
			return err
		}
		builds = builds[1:]
	}
	for _, b := range builds {
		cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
		}
		if err := os.Chmod(b.out, 0o755); err != nil {
			return err
		}
	}
	testUser, err = lookupTestUser()
	return err
}

// lookupTestUser finds (or, as root, creates) the unprivileged user. When
// not root, the unprivileged identity is the caller itself.
func lookupTestUser() (*ident, error) {
	if os.Geteuid() != 0 {
		home, _ := os.UserHomeDir()
		return &ident{name: "user", uid: os.Getuid(), gid: os.Getgid(), home: home}, nil
	}
	u, err := user.Lookup("corral-test")
	if err != nil {
		if out, err := exec.Command("useradd", "--create-home", "corral-test").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("useradd corral-test: %v: %s", err, out)
		}
		if u, err = user.Lookup("corral-test"); err != nil {
			return nil, err
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &ident{name: "user", uid: uid, gid: gid, home: u.HomeDir}, nil
}

// identities returns the identities to table-drive a case over: the
// current user when root, and the unprivileged user.
func identities() []*ident {
	var out []*ident
	if os.Geteuid() == 0 {
		home, _ := os.UserHomeDir()
		out = append(out, &ident{name: "root", uid: 0, gid: 0, home: home})
	}
	return append(out, testUser)
}

// eachIdent runs f as a parallel subtest per identity.
func eachIdent(t *testing.T, f func(t *testing.T, id *ident)) {
	t.Helper()
	for _, id := range identities() {
		t.Run(id.name, func(t *testing.T) {
			t.Parallel()
			f(t, id)
		})
	}
}

func rootIdent(t *testing.T) *ident {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: cgroups are only writable by root on this host (cgroup v1, not delegated)")
	}
	home, _ := os.UserHomeDir()
	return &ident{name: "root", uid: 0, gid: 0, home: home}
}

// token returns a random hex canary.
func token() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "canary" + hex.EncodeToString(b[:])
}

// mkdir makes a fresh 0755 directory under baseDir owned by id.
func mkdir(t *testing.T, id *ident, name string) string {
	t.Helper()
	d, err := os.MkdirTemp(baseDir, name+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	chown(t, id, d)
	return d
}

func chown(t *testing.T, id *ident, path string) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	if err := os.Lchown(path, id.uid, id.gid); err != nil {
		t.Fatal(err)
	}
}

// writeFile writes content to path (creating parents) owned by id.
func writeFile(t *testing.T, id *ident, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	chown(t, id, path)
	chown(t, id, filepath.Dir(path))
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return string(b)
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// policy is a policy file, built as YAML text.
type policy struct {
	RO, RW, Deny []string
	NoWorkdir    bool
	Layers       map[string]string // layer -> required|optional
	Limits       string            // YAML flow mapping body, e.g. "pids: 64, timeout: 1s"
	Network      string
	NetRules     string   // YAML lines under network: (indented two spaces), e.g. from qualify.Egress.YAML()
	EnvPass      []string // nil: default
	Protected    []string // nil: default
	Credentials  string   // the credentials section's YAML lines (top level, "credentials:" first)
}

// systemRO are the system directories a policy file must list itself
// (copied from policy.Default()).
var systemRO = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/usr/local"}
var systemDeny = []string{"/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/sudoers.d", "/etc/ssh"}

func (p policy) yaml(id *ident) string {
	var b strings.Builder
	q := strconv.Quote
	b.WriteString("version: 1\nfilesystem:\n  read_only:\n")
	for _, d := range systemRO {
		fmt.Fprintf(&b, "    - {path: %s, optional: true}\n", q(d))
	}
	fmt.Fprintf(&b, "    - %s\n", q(probeDir))
	for _, d := range p.RO {
		fmt.Fprintf(&b, "    - %s\n", q(d))
	}
	if len(p.RW) > 0 {
		b.WriteString("  read_write:\n")
		for _, d := range p.RW {
			if strings.HasPrefix(d, "{path:") { // a rule written out, e.g. optional
				fmt.Fprintf(&b, "    - %s\n", d)
			} else {
				fmt.Fprintf(&b, "    - %s\n", q(d))
			}
		}
	}
	b.WriteString("  deny:\n")
	for _, d := range systemDeny {
		fmt.Fprintf(&b, "    - {path: %s, optional: true}\n", q(d))
	}
	for _, d := range p.Deny {
		fmt.Fprintf(&b, "    - %s\n", q(d))
	}
	fmt.Fprintf(&b, "  include_workdir: %v\n", !p.NoWorkdir)
	if p.Protected != nil {
		b.WriteString("  protected: [")
		for i, s := range p.Protected {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(q(s))
		}
		b.WriteString("]\n")
	}
	if p.Network != "" {
		fmt.Fprintf(&b, "network:\n  mode: %s\n", p.Network)
		b.WriteString(p.NetRules)
	}
	b.WriteString(p.Credentials)
	b.WriteString("process:\n")
	if p.EnvPass != nil {
		b.WriteString("  env:\n    pass: [")
		for i, s := range p.EnvPass {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(q(s))
		}
		b.WriteString("]\n")
	}
	lim := p.Limits
	if lim == "" {
		lim = "memory: 1G, pids: 512, nofile: 1024, timeout: 60s"
	}
	fmt.Fprintf(&b, "  limits: {%s}\n", lim)
	layers := map[string]string{}
	for k, v := range p.Layers {
		layers[k] = v
	}
	if id != nil && !id.isRoot() {
		if _, set := layers["cgroups"]; !set {
			// cgroups are not delegated to unprivileged users here.
			layers["cgroups"] = "optional"
		}
	}
	if len(layers) > 0 {
		b.WriteString("layers:\n")
		for _, l := range []string{"namespaces", "mounts", "landlock", "seccomp", "cgroups"} {
			if v, ok := layers[l]; ok {
				fmt.Fprintf(&b, "  %s: %s\n", l, v)
			}
		}
	}
	return b.String()
}

// writePolicy writes p to a file readable by id and returns its path.
func writePolicy(t *testing.T, id *ident, p policy) string {
	t.Helper()
	d := mkdir(t, id, "policy")
	f := filepath.Join(d, "policy.yaml")
	writeFile(t, id, f, p.yaml(id), 0o644)
	return f
}

// run describes one corral invocation.
type run struct {
	id      *ident
	policy  string // policy file path ("" = built-in default)
	workdir string // -C
	env     []string
	flags   []string // extra corral run flags (-v, -t, --audit F)
	args    []string // the command
	stdin   string
	extra   []*os.File
	timeout time.Duration
}

type result struct {
	stdout, stderr string
	code           int
	err            error
	pid            int
}

func (r result) combined() string { return r.stdout + r.stderr }

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s\n--- stderr:\n%s", r.code, r.stdout, r.stderr)
}

// command builds the exec.Cmd for r.
func (r run) command(ctx context.Context) *exec.Cmd {
	args := []string{"run"}
	if r.policy != "" {
		args = append(args, "--policy", r.policy)
	}
	if r.workdir != "" {
		args = append(args, "-C", r.workdir)
	}
	args = append(args, r.flags...)
	args = append(args, "--")
	args = append(args, r.args...)
	cmd := exec.CommandContext(ctx, corralBin, args...)
	asIdent(cmd, r.id, r.env)
	cmd.ExtraFiles = r.extra
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// asIdent makes cmd run as id from baseDir with corral's usual
// environment (PATH, HOME=id's, LANG=C) plus env.
func asIdent(cmd *exec.Cmd, id *ident, env []string) {
	cmd.Env = append([]string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + id.home,
		"LANG=C",
	}, env...)
	cmd.Dir = baseDir
	if id.uid != os.Geteuid() {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(id.uid), Gid: uint32(id.gid), Groups: append([]uint32{}, id.groups...)}}
	}
}

// corral runs corral and waits for it.
func corral(t *testing.T, r run) result {
	t.Helper()
	if r.timeout == 0 {
		r.timeout = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	cmd := r.command(ctx)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if r.stdin != "" {
		cmd.Stdin = strings.NewReader(r.stdin)
	}
	err := cmd.Run()
	res := result{stdout: out.String(), stderr: errb.String(), err: err}
	if cmd.Process != nil {
		res.pid = cmd.Process.Pid
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	default:
		t.Fatalf("corral %v: %v\n%s", r.args, err, res)
	}
	if ctx.Err() != nil {
		t.Fatalf("corral %v did not finish within %s\n%s", r.args, r.timeout, res)
	}
	for i, f := range r.flags {
		if f == "--audit" && i+1 < len(r.flags) {
			checkAuditFile(t, r.flags[i+1])
		}
	}
	return res
}

// corralAs runs bin (a corral binary) ARGS, a subcommand other than run,
// as id with env added to asIdent's environment, and waits for it; a
// signal's death is exit 128+N.
func corralAs(t *testing.T, bin string, id *ident, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	asIdent(cmd, id, env)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := result{stdout: out.String(), stderr: errb.String(), err: err}
	if ee, ok := err.(*exec.ExitError); ok {
		res.code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.code = 128 + int(ws.Signal())
		}
	} else if err != nil {
		t.Fatalf("corral %v: %v", args, err)
	}
	return res
}

// sh runs a shell script in the sandbox.
func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

func assertNoToken(t *testing.T, out string, toks ...string) {
	t.Helper()
	for _, tok := range toks {
		if strings.Contains(out, tok) {
			t.Errorf("canary token %s leaked into the output:\n%s", tok, out)
		}
	}
}

func assertCode(t *testing.T, r result, want ...int) {
	t.Helper()
	for _, w := range want {
		if r.code == w {
			return
		}
	}
	t.Fatalf("exit status %d, want %v\n%s", r.code, want, r)
}

// lineValue returns the value after "key: " on the first line starting with key.
func lineValue(out, key string) (string, bool) {
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// hostProcsWith lists host pids, other than corral's own, whose command
// line contains s.
func hostProcsWith(s string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		argv := strings.Split(string(b), "\x00")
		if filepath.Base(argv[0]) == "corral" || argv[0] == "corral-init" {
			continue // the supervisor's own command line names the workload
		}
		if strings.Contains(strings.Join(argv, " "), s) {
			out = append(out, pid)
		}
	}
	return out
}

// waitNoProcs polls until no host process has s in its command line.
func waitNoProcs(t *testing.T, s string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ps := hostProcsWith(s)
		if len(ps) == 0 {
			return
		}
		if time.Now().After(deadline) {
			var desc []string
			for _, p := range ps {
				b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
				desc = append(desc, fmt.Sprintf("%d: %q", p, strings.ReplaceAll(string(b), "\x00", " ")))
			}
			t.Fatalf("processes with %q still alive on the host after %s:\n%s", s, d, strings.Join(desc, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// uniqueSleep returns a unique sleep duration argument such as "3171.482913".
func uniqueSleep(base int) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	n := (int(b[0])<<24 | int(b[1])<<16 | int(b[2])<<8 | int(b[3])) % 1000000
	return fmt.Sprintf("%d.%06d", base, n)
}

//go:build linux

// Package windows runs corral.exe, the Windows build, under Wine through
// its real CLI (the CI's Windows lane, scripts/windows-lane.sh): version,
// policy explain and validate, and run through the MXC stand-in executor
// (provider/mxc/testdata/wxcexec) built for Windows. The stand-in runs the
// workload as a plain child process: these tests prove the Windows CLI's
// wiring (policy, plan, exit codes, output), never isolation.
//
// CORRAL_TEST_WINE=1 runs them, with WINEPREFIX a prefix of
// scripts/wine/setup.sh; CORRAL_WINE_CORRAL_EXE and CORRAL_WINE_WXCEXEC
// name the binaries (built here when unset). With CI=true a missing piece
// fails them instead of skipping.
package windows

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// lane is what the tests run: the module root (for scripts/wine/exec and
// the shipped MXC schemas next to it) and the two Windows binaries.
type lane struct {
	root, corralExe, wxc string
}

var (
	setupOnce sync.Once
	theLane   *lane
	setupErr  error
	buildDir  string // binaries built here, removed by TestMain
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// need returns the lane, skipping t unless CORRAL_TEST_WINE=1; a lane that
// cannot be set up fails t on CI, skips it elsewhere.
func need(t *testing.T) *lane {
	t.Helper()
	if os.Getenv("CORRAL_TEST_WINE") != "1" {
		t.Skip("CORRAL_TEST_WINE=1 runs corral.exe under Wine (scripts/windows-lane.sh)")
	}
	setupOnce.Do(func() { theLane, setupErr = setup() })
	if setupErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(setupErr)
		}
		t.Skip(setupErr)
	}
	return theLane
}

func setup() (*lane, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		return nil, fmt.Errorf("go env GOMOD: %v", err)
	}
	l := &lane{root: filepath.Dir(strings.TrimSpace(string(out)))}
	if p := os.Getenv("WINEPREFIX"); p == "" {
		return nil, errors.New("WINEPREFIX is not set: scripts/wine/setup.sh makes a prefix and prints it")
	} else if _, err := os.Stat(filepath.Join(p, "system.reg")); err != nil {
		return nil, fmt.Errorf("WINEPREFIX %s is not a booted prefix (scripts/wine/setup.sh): %v", p, err)
	}
	if _, err := exec.LookPath("wine"); err != nil {
		return nil, fmt.Errorf("wine: %v (scripts/wine/setup.sh installs it)", err)
	}
	for _, b := range []struct {
		dst *string
		env string
		pkg string
	}{{&l.corralExe, "CORRAL_WINE_CORRAL_EXE", "./cmd/corral"}, {&l.wxc, "CORRAL_WINE_WXCEXEC", "./provider/mxc/testdata/wxcexec"}} {
		if *b.dst = os.Getenv(b.env); *b.dst != "" {
			continue
		}
		if buildDir == "" {
			if buildDir, err = os.MkdirTemp("", "corral-e2e-windows-"); err != nil {
				return nil, err
			}
		}
		*b.dst = filepath.Join(buildDir, filepath.Base(b.pkg)+".exe")
		cmd := exec.Command("go", "build", "-o", *b.dst, b.pkg)
		cmd.Dir = l.root
		cmd.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building %s for Windows: %v\n%s", b.pkg, err, out)
		}
	}
	return l, nil
}

// winPath is a Unix path as a Windows program under Wine names it (Wine
// maps drive Z: to /).
func winPath(p string) string { return "Z:" + strings.ReplaceAll(p, "/", `\`) }

type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
}

// corral runs `wine corral.exe args...` in dir (the workdir) with env
// added to this process's environment.
func (l *lane) corral(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(l.root, "scripts", "wine", "exec"), append([]string{l.corralExe}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	// Wine artifact: a Wine service started on behalf of corral.exe (seen
	// on a cold wineserver: explorer.exe, rpcss.exe...) can inherit its
	// stdout and stderr and keep them open after corral.exe exits, which
	// hung TestBadPolicy in CI; stop waiting for them 10 s after the exit
	// (what corral.exe wrote is kept).
	cmd.WaitDelay = 10 * time.Second
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("wine corral.exe %s: %v\n%s", strings.Join(args, " "), err, e.String())
	}
	return result{cmd.ProcessState.ExitCode(), o.String(), e.String()}
}

// standIn is the environment that points corral.exe's mxc provider at the
// stand-in, with its state and log (WXC_LOG, returned as a Unix path) in
// a directory of the test's.
func (l *lane) standIn(t *testing.T) (env []string, log string) {
	dir := t.TempDir()
	log = filepath.Join(dir, "wxc.log")
	return []string{
		"CORRAL_MXC_WXC_EXEC=" + winPath(l.wxc),
		"WXC_SCHEMA_DIR=" + winPath(filepath.Join(filepath.Dir(l.root), "shared", "reference", "mxc")),
		"CORRAL_MXC_STATE=" + winPath(filepath.Join(dir, "state")),
		"WXC_STATE_DIR=" + winPath(filepath.Join(dir, "wxc")),
		"WXC_LOG=" + winPath(log),
	}, log
}

const mock = "mock — not evidence of OS enforcement"

func TestVersion(t *testing.T) {
	l := need(t)
	r := l.corral(t, t.TempDir(), nil, "version")
	if r.code != 0 || !strings.Contains(r.stdout, "platform: windows/amd64") || !strings.Contains(r.stdout, "providers: mxc") {
		t.Errorf("corral.exe version:\n%s", r)
	}
}

// policy explain --provider mxc shows the MXC plan of the Windows default
// policy with no wxc-exec anywhere: its absence is a host fact.
func TestPolicyExplainWithoutExecutor(t *testing.T) {
	l := need(t)
	wd := t.TempDir()
	r := l.corral(t, wd, nil, "policy", "explain", "--provider", "mxc", "-o", "json")
	var out struct {
		Host struct {
			Available bool
			Reason    string
		}
		Details struct {
			Request struct {
				Containment string
				Filesystem  struct {
					ReadonlyPaths, ReadwritePaths []string
				}
			}
		}
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil {
		t.Fatalf("corral.exe policy explain --provider mxc:\n%s", r)
	}
	req := out.Details.Request
	if out.Host.Available || !strings.Contains(out.Host.Reason, "wxc-exec") {
		t.Errorf("host: %+v, want mxc unavailable for want of wxc-exec", out.Host)
	}
	if req.Containment != "processcontainer" || len(req.Filesystem.ReadwritePaths) != 1 ||
		!strings.EqualFold(req.Filesystem.ReadwritePaths[0], winPath(wd)) {
		t.Errorf("the plan's request: %+v, want processcontainer with the workdir %s read-write", req, winPath(wd))
	}
	windir := false
	for _, p := range req.Filesystem.ReadonlyPaths {
		windir = windir || strings.EqualFold(p, `C:\windows`)
	}
	if !windir {
		t.Errorf("read-only paths %q lack C:\\Windows", req.Filesystem.ReadonlyPaths)
	}
}

// corral.exe run --provider mxc with the default Windows policy: the
// workload's exit code comes back through the stand-in.
func TestRunExitCode(t *testing.T) {
	l := need(t)
	env, log := l.standIn(t)
	r := l.corral(t, t.TempDir(), env, "run", "--provider", "mxc", "--", "cmd", "/c", "exit", "7")
	if r.code != 7 || !strings.Contains(r.stderr, mock) {
		t.Fatalf("run -- cmd /c exit 7: want exit 7 through the stand-in\n%s", r)
	}
	b, err := os.ReadFile(log)
	if err != nil || !strings.Contains(string(b), "phase=oneshot sandboxId= exit=7") {
		t.Errorf("the stand-in's log %q (%v) has no one-shot run that exited 7", b, err)
	}
}

func TestRunOutput(t *testing.T) {
	l := need(t)
	env, _ := l.standIn(t)
	r := l.corral(t, t.TempDir(), env, "run", "--provider", "mxc", "--", "cmd", "/c", "echo", "hello-from-wine")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "hello-from-wine" {
		t.Errorf("run -- cmd /c echo: want hello-from-wine on stdout\n%s", r)
	}
}

// A policy that is not valid is refused with exit 122 and its position,
// by validate and by run (before wxc-exec is called), in the syntax and
// in a Windows path.
func TestBadPolicy(t *testing.T) {
	l := need(t)
	wd := t.TempDir()
	for name, c := range map[string]struct{ src, want string }{
		"mode.yaml": {"version: 1\nnetwork:\n  mode: sometimes\n", `(?m)^corral: mode\.yaml:3:9: network\.mode: unknown network mode "sometimes"`},
		"unc.yaml":  {"version: 1\nfilesystem:\n  read_only: ['\\\\server\\share']\n", `(?m)^corral: unc\.yaml:3:\d+: filesystem\.read_only\[0\]: .*\(UNC\)`},
	} {
		if err := os.WriteFile(filepath.Join(wd, name), []byte(c.src), 0o644); err != nil {
			t.Fatal(err)
		}
		env, log := l.standIn(t)
		for _, args := range [][]string{{"policy", "validate", name}, {"run", "--provider", "mxc", "--policy", name, "--", "cmd", "/c", "exit", "0"}} {
			r := l.corral(t, wd, env, args...)
			if r.code != 122 || !regexp.MustCompile(c.want).MatchString(r.stderr) {
				t.Errorf("%s: want exit 122 and an error matching %s\n%s", strings.Join(args, " "), c.want, r)
			}
		}
		if b, _ := os.ReadFile(log); strings.Contains(string(b), "phase=oneshot") {
			t.Errorf("%s: wxc-exec ran a workload: %s", name, b)
		}
	}
}

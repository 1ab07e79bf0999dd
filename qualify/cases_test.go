//go:build linux

package qualify

// The suite's self-test: a deliberately broken sandbox makes the right
// case fail. That every case passes against a fresh build, on each
// provider, as root and as an unprivileged user, is the e2e suite's
// TestQualify.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// buildCorral builds ./cmd/corral into dir. When that build does not
// dispatch `corral __probe` yet, it is built again with a file that does
// (added through -overlay: the repository is not changed).
func buildCorral(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	bin := filepath.Join(dir, "corral")
	build := func(extra ...string) {
		args := append([]string{"build"}, extra...)
		args = append(args, "-o", bin, "./cmd/corral")
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build ./cmd/corral: %v\n%s", err, out)
		}
	}
	build()
	if out, err := exec.Command(bin, "__probe", "exit", "0").Output(); err == nil && strings.Contains(string(out), `"probe":"exit"`) {
		return bin
	}
	src := filepath.Join(dir, "zz_probe.go")
	if err := os.WriteFile(src, []byte(`package main

import (
	"os"

	"github.com/corral-sandbox/corral/probe"
)

func init() {
	if len(os.Args) > 1 && os.Args[1] == probe.Arg {
		os.Exit(probe.Main(os.Args[2:]))
	}
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlay, []byte(fmt.Sprintf(`{"Replace":{%q:%q}}`, filepath.Join(root, "cmd/corral/zz_qualify_probe.go"), src)), 0o644); err != nil {
		t.Fatal(err)
	}
	build("-overlay", overlay)
	return bin
}

func needRootLinux(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the linux provider's cases need linux")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: the self-tests break a layer of a real sandbox and assert that the case fails, as root (cgroups, docker)")
	}
	if testing.Short() {
		t.Skip("runs real sandboxes (-short)")
	}
}

func logResult(t *testing.T, res Result) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %s (%s) %s\n", res.ID, res.Title, res.Status, res.Duration, res.Reason)
	for _, ev := range res.Evidence {
		fmt.Fprintf(&b, "    - %s => %s\n", ev.Attempt, strings.ReplaceAll(ev.Got, "\n", "\n      "))
	}
	t.Log(b.String())
}

// TestCasesCanFail: with the seccomp layer broken on purpose (made to
// fail on apply and marked optional, so the run goes on without it), P14
// fails: the suite notices a sandbox that lacks a layer. Through the
// gateway too (its sandboxes' gateway started with CORRAL_FAULT_LAYER),
// whose evidence shows the sandboxes, their layers and their delete, and
// the run's gateway stopped with nothing of them left.
func TestCasesCanFail(t *testing.T) {
	needRootLinux(t)
	bin := buildCorral(t)
	p14Fault = "seccomp"
	defer func() { p14Fault = "" }()
	for _, prov := range []string{"linux", LinuxGateway} {
		t.Run(prov, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			rep, err := Qualify(ctx, Options{Bin: bin, Providers: []string{prov}, Cases: []string{"P14"}, PerfRuns: -1})
			if err != nil {
				t.Fatalf("Qualify: %v", err)
			}
			res := rep.Providers[0].Results[0]
			logResult(t, res)
			if res.Status != Fail {
				t.Fatalf("P14 with seccomp broken: %s, want fail", res.Status)
			}
			// It fails for the right reason: syscalls that seccomp refuses
			// went through.
			if !strings.Contains(res.Reason, "io_uring_setup") && !strings.Contains(res.Reason, "AF_") && !strings.Contains(res.Reason, "setns") {
				t.Errorf("P14 failed, but not on the calls seccomp guards: %s", res.Reason)
			}
			if prov != LinuxGateway {
				return
			}
			var sandboxes, stop string
			for _, ev := range res.Evidence {
				switch {
				case strings.HasPrefix(ev.Attempt, "runner: through the gateway: corral sandbox create"):
					sandboxes += ev.Got + "\n"
				case strings.HasPrefix(ev.Attempt, "runner: stop the run's gateway"):
					stop = ev.Got
				}
			}
			if !strings.Contains(sandboxes, "seccomp skipped") || !strings.Contains(sandboxes, "deleted: no supervisor, state dir or cgroup left") {
				t.Errorf("the evidence does not show the sandboxes, their layers and their delete:\n%s", sandboxes)
			}
			if !strings.Contains(stop, "exit 0") || !strings.Contains(stop, "left on the host (supervisors, state dirs, cgroups): 0") {
				t.Errorf("the run's gateway: %s", stop)
			}
		})
	}
}

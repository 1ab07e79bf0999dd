//go:build linux

package qualify

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// standInEnv builds the wxc-exec stand-in and points the mxc provider
// (CORRAL_MXC_WXC_EXEC, which qualify hands on to corral) at it.
func standInEnv(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "wxc-exec")
	cmd := exec.Command("go", "build", "-o", bin, "./provider/mxc/testdata/wxcexec")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the stand-in: %v\n%s", err, out)
	}
	t.Setenv("CORRAL_MXC_WXC_EXEC", bin)
	t.Setenv("WXC_SCHEMA_DIR", filepath.Join("..", "..", "shared", "reference", "mxc"))
	t.Setenv("CORRAL_MXC_STATE", filepath.Join(dir, "state"))
}

func runP35For(t *testing.T, bin string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := Qualify(ctx, Options{Bin: bin, Providers: []string{"mxc"}, Cases: []string{"P35"}, PerfRuns: -1})
	if err != nil {
		t.Fatalf("Qualify: %v", err)
	}
	if len(rep.Providers) != 1 || len(rep.Providers[0].Results) != 1 {
		t.Fatalf("report: %+v", rep.Providers)
	}
	res := rep.Providers[0].Results[0]
	logResult(t, res)
	return res
}

// TestWindowsPathCase: P35 passes on mxc through the stand-in (a mock
// pass: wiring, not OS enforcement).
func TestWindowsPathCase(t *testing.T) {
	standInEnv(t)
	res := runP35For(t, buildCorral(t))
	if res.Status != Pass || !strings.Contains(res.Reason, MockNote) {
		t.Fatalf("P35: %s (%s), want a mock pass", res.Status, res.Reason)
	}
}

// TestWindowsPathCaseCatchesTheHole: a corral whose policy files have the
// network share and the alternate data stream rewritten to a plain path
// before it reads them (as a mapper that ignored those forms would treat
// them) fails P35, naming both.
func TestWindowsPathCaseCatchesTheHole(t *testing.T) {
	standInEnv(t)
	real := buildCorral(t)
	wrapper := filepath.Join(filepath.Dir(real), "corral-weak")
	script := "#!/bin/sh\n" +
		`if [ "$1" = policy ]; then for f; do :; done; sed -i -e 's/\\\\server\\share\\data/C:\\Tools\\Git/' -e 's/:payload//' "$f"; fi` + "\n" +
		"exec " + real + ` "$@"` + "\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	res := runP35For(t, wrapper)
	if res.Status != Fail {
		t.Fatalf("P35 with the forms accepted: %s, want fail", res.Status)
	}
	for _, want := range []string{`read-only \\server\share\data was not refused`, `deny C:\Tools\Git\git.exe:payload was not refused`} {
		if !strings.Contains(res.Reason, want) {
			t.Errorf("reason %q lacks %q", res.Reason, want)
		}
	}
}

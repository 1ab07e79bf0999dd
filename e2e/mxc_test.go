//go:build linux

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// corral run --provider mxc through the wxc-exec stand-in: the workload's
// output and exit code pass through, the stand-in says it is a mock, and a
// policy the mapper cannot enforce is rejected before wxc-exec is called.
func TestMXCThroughStandIn(t *testing.T) {
	id := rootIdent(t)
	dir := mkdir(t, id, "mxc")
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	wxc := filepath.Join(dir, "wxc-exec")
	build := exec.Command("go", "build", "-o", wxc, "./provider/mxc/testdata/wxcexec")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the stand-in: %v\n%s", err, out)
	}
	logf := filepath.Join(dir, "wxc.log")
	env := []string{"CORRAL_MXC_WXC_EXEC=" + wxc, "WXC_SCHEMA_DIR=" + filepath.Join(root, "..", "shared", "reference", "mxc"),
		"WXC_LOG=" + logf, "CORRAL_MXC_STATE=" + filepath.Join(dir, "state")}
	pol := filepath.Join(dir, "mxc.yaml")
	writeFile(t, id, pol, "version: 1\nfilesystem: {read_only: [], deny: [], include_workdir: false, protected: []}\n"+
		"layers: {landlock: optional, seccomp: optional, cgroups: optional, namespaces: optional}\n"+
		"process: {limits: {memory: 0, pids: 0, cpu: 0, nofile: 0}}\n", 0o644)
	res := corral(t, run{id: id, policy: pol, workdir: dir, env: env, flags: []string{"--provider", "mxc"}, args: sh("echo hello-from-mxc; exit 7")})
	assertCode(t, res, 7)
	if !strings.Contains(res.stdout, "hello-from-mxc") || !strings.Contains(res.stderr, "mock — not evidence of OS enforcement") {
		t.Errorf("run through the stand-in:\n%s", res)
	}
	// runs counts wxc-exec invocations that were not the host probe.
	runs := func() int {
		n := 0
		for _, l := range strings.Split(readFile(t, logf), "\n") {
			if l != "" && !strings.HasPrefix(l, "phase=probe ") {
				n++
			}
		}
		return n
	}
	calls := runs()
	// The default policy names Linux paths (/usr...) and needs Landlock:
	// rejected by the mapper, and wxc-exec never runs anything (only the
	// host probe).
	res = corral(t, run{id: id, workdir: dir, env: env, flags: []string{"--provider", "mxc"}, args: []string{"true"}})
	assertCode(t, res, 122)
	if !strings.Contains(res.stderr, "layers.landlock") || runs() != calls {
		t.Errorf("default policy on mxc: want a rejection naming layers.landlock and no wxc-exec call\n%s", res)
	}
}

//go:build linux

package linux

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/provider/providertest"
)

// TestMain lets the test binary be the sandbox's init and the idmap
// helper, as the corral binary is (Start runs /proc/self/exe).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == InitArg {
		InitMain()
	}
	if len(os.Args) > 1 && os.Args[1] == HoldArg {
		HoldMain()
	}
	if len(os.Args) > 1 && os.Args[1] == PersistArg {
		PersistMain()
	}
	if len(os.Args) > 1 && os.Args[1] == SlotsArg {
		SlotsMain()
	}
	if len(os.Args) > 1 && os.Args[1] == providertest.ProbeArg {
		providertest.ProbeMain(os.Args[2:])
	}
	if len(os.Args) > 1 && os.Args[1] == providertest.CredentialProbeArg {
		providertest.CredentialProbeMain(os.Args[2:])
	}
	// Persistent sandboxes of this test binary keep their state apart
	// (census lists it), removed afterwards.
	dir, err := os.MkdirTemp("", "linux-state-")
	if err != nil {
		panic(err)
	}
	os.Setenv(StateDirEnv, filepath.Join(dir, "sandboxes"))
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestConformance runs the provider conformance suite as the current user
// (root in CI: TestConformanceUnprivileged repeats it as corral-test).
func TestConformance(t *testing.T) {
	needPureGo(t)
	providertest.Run(t, harness())
}

// harness is the suite's view of the provider: the inspected-egress
// tests' clients are the host's and the test binary's Go one.
func harness() providertest.Harness {
	return providertest.Harness{
		New:      func() provider.Provider { return New() },
		ExecOnce: true, // init runs one workload
		Census:   census,
		Tools:    hostTools("curl", "python3", "java"),
		Probe:    true,
	}
}

// hostTools are those of names on the host's PATH: a sandbox of the
// default policy sees them.
func hostTools(names ...string) []string {
	var out []string
	for _, n := range names {
		if _, err := exec.LookPath(n); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// needPureGo fails the test in a binary built with cgo: the Go runtime
// refuses the all-threads system calls init makes (the test binary is
// init), so the suite would fail in every Start.
func needPureGo(t *testing.T) {
	t.Helper()
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_GETPID, 0, 0, 0); e == syscall.ENOTSUP {
		t.Fatal("this test binary was built with cgo; run it with CGO_ENABLED=0 (README's test command)")
	}
}

// unprivilegedEnv marks the run of TestConformance as corral-test.
const unprivilegedEnv = "CORRAL_CONFORMANCE_UNPRIVILEGED"

// TestConformanceUnprivileged runs TestConformance again as the
// unprivileged user corral-test (.ci/run creates it), from a copy of the
// test binary it can execute: its sandboxes are made from a user
// namespace of its own, without cgroups (not delegated here).
func TestConformanceUnprivileged(t *testing.T) {
	if os.Getenv(unprivilegedEnv) != "" || os.Geteuid() != 0 {
		t.Skip("not root: TestConformance itself runs unprivileged")
	}
	needPureGo(t)
	u, err := user.Lookup("corral-test")
	if err != nil {
		t.Skipf("no user corral-test (.ci/run creates it): %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir, err := os.MkdirTemp("", "conformance-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "linux.test")
	if err := copyFile(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	args := []string{"-test.run=^TestConformance$", "-test.count=1", "-test.v"}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + u.HomeDir, "LANG=C", unprivilegedEnv + "=1"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestConformance ") {
		t.Fatalf("TestConformance as corral-test (uid %d): %v\n%s", uid, err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "made optional") {
			t.Logf("as corral-test (uid %d): %s", uid, strings.TrimSpace(l))
		}
	}
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// census lists this process's sandbox cgroups (run-PID-*, in every
// cgroup hierarchy), its init processes still running, and its
// persistent sandboxes' state directories and supervisors.
func census(t *testing.T) []string {
	var out []string
	prefix := fmt.Sprintf("run-%d-", os.Getpid())
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mi), "\n") {
		_, post, ok := strings.Cut(line, " - ")
		f := strings.Fields(line)
		if !ok || len(f) < 5 || !(strings.HasPrefix(post, "cgroup ") || strings.HasPrefix(post, "cgroup2 ")) {
			continue
		}
		root := f[4]
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if strings.HasPrefix(d.Name(), prefix) {
				out = append(out, "cgroup "+p)
				return fs.SkipDir
			}
			if strings.Count(strings.TrimPrefix(p, root), "/") > 6 {
				return fs.SkipDir
			}
			return nil
		})
	}
	ents, _ := os.ReadDir(StateBase())
	for _, e := range ents {
		out = append(out, "state "+e.Name())
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if _, arg, ok := strings.Cut(string(b), "\x00"+PersistArg+"\x00"); err == nil && ok && strings.HasPrefix(arg, StateBase()+"/") {
			out = append(out, "supervisor "+strings.TrimSuffix(arg, "\x00"))
			continue
		}
		if err != nil || !strings.HasPrefix(string(b), "corral-init\x00"+InitArg) {
			continue
		}
		st, err := os.ReadFile(filepath.Join(filepath.Dir(p), "stat"))
		if i := strings.LastIndexByte(string(st), ')'); err == nil && i > 0 {
			if f := strings.Fields(string(st)[i+1:]); len(f) > 1 && f[1] == strconv.Itoa(os.Getpid()) {
				out = append(out, "init "+filepath.Base(filepath.Dir(p)))
			}
		}
	}
	return out
}

//go:build linux

package docker

import (
	"context"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/moby/moby/client"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/provider/providertest"
)

// TestMain lets the test binary be corral's init and exec shim inside the
// containers, as the corral binary is (it is mounted into each).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == InitArg {
		InitMain(os.Args[2:])
	}
	if len(os.Args) > 1 && os.Args[1] == ExecArg {
		ExecMain(os.Args[2:])
	}
	if len(os.Args) > 1 && os.Args[1] == providertest.ProbeArg {
		providertest.ProbeMain(os.Args[2:])
	}
	if len(os.Args) > 1 && os.Args[1] == providertest.CredentialProbeArg {
		providertest.CredentialProbeMain(os.Args[2:])
	}
	if len(os.Args) > 1 && os.Args[1] == consentClientArg {
		consentClientMain()
	}
	if len(os.Args) > 1 && os.Args[1] == consentForgeArg {
		consentForgeMain()
	}
	os.Exit(m.Run())
}

// TestConformance runs the provider conformance suite on this host's
// daemon.
func TestConformance(t *testing.T) {
	p := needSandboxes(t)
	providertest.Run(t, harness(t, p, true))
}

// harness is the suite's view of p: the inspected-egress tests' clients
// are the test binary's Go one (the base image has no curl or python3)
// and, when the host has one, the JVM of javaImage in its distro
// layout or not, whose image the inspected-egress tests' policy names.
func harness(t *testing.T, p *Provider, distro bool) providertest.Harness {
	h := providertest.Harness{
		New:    func() provider.Provider { return New() },
		Census: func(t *testing.T) []string { return census(t, p.facts().cli) },
		Probe:  true,
	}
	img, why := javaImage(t, p.facts().cli, distro)
	if why != "" {
		t.Log(why)
		return h
	}
	h.Tools = []string{"java"}
	h.Inspect = func(pol *policy.Policy) { pol.Docker = &policy.Docker{Image: img} }
	return h
}

// unprivilegedEnv marks the run of TestInspected as corral-test.
const unprivilegedEnv = "CORRAL_DOCKER_UNPRIVILEGED"

// TestInspected runs the suite's inspected-egress tests alone, as root
// and (TestInspectedUnprivileged, with TestTrustJava) again as
// corral-test, a member of the docker group whose state dirs and bundle
// files are its own.
func TestInspected(t *testing.T) {
	providertest.RunInspected(t, harness(t, needSandboxes(t), true))
}

func TestInspectedUnprivileged(t *testing.T) {
	asTestUser(t, "^(TestInspected|TestTrustJava)$", "TestInspected", "TestTrustJava")
}

// asTestUser runs this binary's tests that match pattern as corral-test
// (in the docker group) and fails unless each of want passed.
func asTestUser(t *testing.T, pattern string, want ...string) {
	t.Helper()
	if os.Getenv(unprivilegedEnv) != "" || os.Geteuid() != 0 {
		t.Skip("not root: the tests themselves run unprivileged")
	}
	needSandboxes(t)
	u, err := user.Lookup("corral-test")
	if err != nil {
		t.Skipf("no user corral-test (.ci/run creates it): %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir := providertest.PublicDir(t)
	bin := filepath.Join(dir, "docker.test")
	if b, err := os.ReadFile(os.Args[0]); err != nil || os.WriteFile(bin, b, 0o755) != nil {
		t.Fatalf("copy the test binary: %v", err)
	}
	docker, err := user.LookupGroup("docker")
	if err != nil {
		t.Skipf("no group docker: %v", err)
	}
	dgid, _ := strconv.Atoi(docker.Gid)
	cmd := exec.Command(bin, "-test.run="+pattern, "-test.count=1", "-test.v")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + policy.DefaultPATH, "HOME=" + u.HomeDir, "LANG=C", unprivilegedEnv + "=1", "CORRAL_TEST_DOCKER=1"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{uint32(dgid)}}}
	out, err := cmd.CombinedOutput()
	passed := !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(string(out), "--- PASS: "+w+" ") })
	if err != nil || !passed {
		t.Fatalf("%s as corral-test (uid %d): %v\n%s", pattern, uid, err, out)
	}
}

// needSandboxes returns the provider when it can run containers here: a
// daemon, corral/base:1 (`corral image build-base`) and a static test
// binary (CGO_ENABLED=0). Otherwise the test is skipped, unless
// CORRAL_TEST_DOCKER=1 (CI) makes that a failure.
func needSandboxes(t *testing.T) *Provider {
	t.Helper()
	p := New()
	h := p.facts()
	why := ""
	switch {
	case h.err != nil:
		why = "no Docker daemon here: " + h.err.Error()
	case h.binErr != nil:
		why = "the test binary cannot run in a container (CGO_ENABLED=0 go test): " + h.binErr.Error()
	default:
		if _, err := h.cli.ImageInspect(context.Background(), policy.DefaultDockerImage); err != nil {
			why = "no " + policy.DefaultDockerImage + " (corral image build-base): " + err.Error()
		}
	}
	if why != "" {
		if os.Getenv("CORRAL_TEST_DOCKER") == "1" {
			t.Fatalf("docker provider unusable with CORRAL_TEST_DOCKER=1: %s", why)
		}
		t.Skip(why)
	}
	return p
}

// census lists the containers this process made (by their owner label)
// and the state dirs it made, per-run and persistent.
func census(t *testing.T, cli *client.Client) []string {
	var out []string
	me := ownerLabel(os.Getpid())
	list, err := cli.ContainerList(context.Background(), client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", LabelOwner+"="+me)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range list.Items {
		out = append(out, "container "+c.Labels[LabelSandbox]+" "+string(c.State))
	}
	for _, base := range []string{stateBase(), managedBase()} {
		ents, _ := os.ReadDir(base)
		for _, e := range ents {
			if b, err := os.ReadFile(filepath.Join(base, e.Name(), "owner")); err == nil && string(b) == me {
				out = append(out, "state "+filepath.Join(base, e.Name()))
			}
		}
	}
	return out
}

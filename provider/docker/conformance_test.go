//go:build linux

package docker

import (
	"context"
	"os"
	"path/filepath"
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
	os.Exit(m.Run())
}

// TestConformance runs the provider conformance suite on this host's
// daemon.
func TestConformance(t *testing.T) {
	p := needSandboxes(t)
	providertest.Run(t, providertest.Harness{
		New:    func() provider.Provider { return New() },
		Census: func(t *testing.T) []string { return census(t, p.facts().cli) },
	})
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

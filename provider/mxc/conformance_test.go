package mxc

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/corral-sandbox/corral/internal/testworkload"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/provider/providertest"
)

// The conformance suite against both backends, through the stand-in
// executor (wiring, not isolation: see runner_test.go).
func TestConformance(t *testing.T) {
	for _, b := range []Backend{BackendProcessContainer, BackendIsolationSession} {
		t.Run(string(b), func(t *testing.T) {
			h := newHarness(t)
			providertest.Run(t, providertest.Harness{
				New:    func() provider.Provider { return h.provider(b) },
				Adjust: noLinuxPaths,
				Census: h.census,
				// Map refuses it: the sandbox cannot be given the CA.
				NoInspection: true,
				Workload:     testworkload.Args,
			})
		})
	}
}

// census lists the records not deprovisioned (or never provisioned) and
// the stand-in's sessions and workspaces.
func (h *harness) census(t *testing.T) []string {
	var out []string
	recs, err := h.provider(BackendIsolationSession).Records()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		switch r.PhaseState {
		case StateDeprovisioned, StateFailed:
		default:
			out = append(out, "record "+r.LocalID+" "+string(r.PhaseState))
		}
	}
	for _, d := range []string{"sessions", "workspaces"} {
		ents, err := os.ReadDir(filepath.Join(h.wxcState, d))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, e := range ents {
			out = append(out, "wxc "+d+"/"+e.Name())
		}
	}
	return out
}

// noLinuxPaths drops the default policy's grants, Linux paths that mxc
// does not translate (process_container) or takes none of
// (isolation_session).
func noLinuxPaths(p *policy.Policy) {
	include := false
	p.Filesystem.ReadOnly, p.Filesystem.Deny, p.Filesystem.IncludeWorkdir = nil, nil, &include
}

//go:build linux

package e2e

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var allLayers = []string{"namespaces", "mounts", "landlock", "seccomp", "cgroups"}

// layerStates parses the -v lines "corral: layer NAME STATE REQ DETAIL".
func layerStates(stderr string) map[string]string {
	re := regexp.MustCompile(`(?m)^corral: layer (\S+)\s+(\S+)\s+(\S+)`)
	out := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(stderr, -1) {
		out[m[1]] = m[2]
	}
	return out
}

// P08 + P16: a required layer that fails to apply refuses the run, naming
// the layer, and nothing runs; an optional one is skipped and reported
// while the others stay active.
func TestP08_P16_LayerFaults(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		for _, layer := range allLayers {
			t.Run(layer, func(t *testing.T) {
				t.Run("required", func(t *testing.T) {
					wd := mkdir(t, id, "p08")
					marker := filepath.Join(wd, "marker")
					layers := map[string]string{}
					if !id.isRoot() && layer != "cgroups" {
						layers["cgroups"] = "optional"
					}
					if layer == "cgroups" {
						layers["cgroups"] = "required"
					}
					pol := writePolicy(t, id, policy{Layers: layers})
					res := corral(t, run{id: id, policy: pol, workdir: wd, flags: []string{"-v"},
						env: []string{"CORRAL_FAULT_LAYER=" + layer}, args: []string{"touch", marker}})
					want := 125
					switch {
					case layer == "cgroups" && !id.isRoot():
						want = 122 // not available at all for this user
					case layer == "cgroups":
						want = 123
					}
					assertCode(t, res, want)
					if !strings.Contains(res.stderr, layer) {
						t.Errorf("the error does not name the layer %s\n%s", layer, res)
					}
					if exists(marker) {
						t.Errorf("the command ran although required layer %s failed", layer)
					}
				})
				t.Run("optional", func(t *testing.T) {
					wd := mkdir(t, id, "p16")
					marker := filepath.Join(wd, "marker")
					pol := writePolicy(t, id, policy{Layers: map[string]string{layer: "optional"}})
					res := corral(t, run{id: id, policy: pol, workdir: wd, flags: []string{"-v"},
						env: []string{"CORRAL_FAULT_LAYER=" + layer}, args: []string{"touch", marker}})
					st := layerStates(res.stderr)
					if res.code != 0 {
						// Refusing is also secure, but must name the layer.
						if !strings.Contains(res.stderr, layer) {
							t.Errorf("refused without naming %s\n%s", layer, res)
						}
						if exists(marker) {
							t.Errorf("the command ran although the run was refused")
						}
						if layer != "namespaces" && layer != "mounts" {
							t.Errorf("optional layer %s failing refused the run (exit %d); want it skipped\n%s", layer, res.code, res)
						}
						return
					}
					if !exists(marker) {
						t.Errorf("exit 0 but the command did not run\n%s", res)
					}
					if st[layer] != "skipped" {
						t.Errorf("-v reports layer %s as %q, want skipped\n%s", layer, st[layer], res)
					}
					for _, other := range allLayers {
						if other == layer {
							continue
						}
						want := "active"
						if other == "cgroups" && !id.isRoot() {
							want = "skipped" // not delegated to this user
						}
						if st[other] != want {
							t.Errorf("-v reports layer %s as %q, want %s\n%s", other, st[other], want, res)
						}
					}
				})
			})
		}
	})
}

// P08: real unavailability — an unprivileged user has no cgroups here, so
// the default policy (all layers required) is rejected before anything runs.
func TestP08_UnprivilegedCgroupsRequired(t *testing.T) {
	id := testUser
	wd := mkdir(t, id, "p08u")
	marker := filepath.Join(wd, "marker")
	res := corral(t, run{id: id, workdir: wd, args: []string{"touch", marker}})
	if res.code == 0 && exists("/sys/fs/cgroup/cgroup.controllers") {
		t.Skip("cgroups are delegated to the unprivileged user on this host (cgroup v2): the default policy legitimately runs")
	}
	assertCode(t, res, 122)
	if !strings.Contains(res.stderr, "layers.cgroups") {
		t.Errorf("rejection does not name layers.cgroups\n%s", res)
	}
	if exists(marker) {
		t.Errorf("the command ran although the policy was rejected")
	}
}

//go:build linux

package qualify

// Fail-closed cases: P08 no fallback, P16 silent fail-open. A layer is
// made to fail on apply with corral's fault injection (CORRAL_FAULT_LAYER).

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
)

func init() {
	Register(Case{ID: "P08", Title: "no fallback", Applies: linuxKernel, Run: runP08})
	Register(Case{ID: "P16", Title: "silent fail-open", Applies: linuxKernel, Run: runP16})
}

var allLayers = []string{"namespaces", "mounts", "landlock", "seccomp", "cgroups"}

// faultEnv is corral's fault injection: the named layer fails on apply.
const faultEnv = "CORRAL_FAULT_LAYER"

// layerStates parses `-v` lines "corral: layer NAME STATE ..." (and
// `corral sandbox get`'s "layer NAME STATE ...", which LinuxGateway's -v
// is).
func layerStates(stderr string) map[string]string {
	re := regexp.MustCompile(`(?m)^(?:corral: )?layer (\S+)\s+(\S+)`)
	out := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(stderr, -1) {
		out[m[1]] = m[2]
	}
	return out
}

// cgroupsUsable reports whether the cgroups layer can be applied here.
func (e *Env) cgroupsUsable() bool {
	return e.Root || (e.st != nil && e.st.run.cgroupsOK[e.Provider])
}

// refusedRun runs `write MARKER` with layer made to fail and required;
// it checks the run is refused naming the layer and nothing ran.
func refusedRun(ctx context.Context, e *Env, r *Result, what, layer string, env []string, flags []string) {
	wd := e.TempDir("p08")
	mk := filepath.Join(wd, "marker")
	p := pol{Layers: map[string]string{layer: "required"}}
	if layer != "cgroups" && !e.cgroupsUsable() {
		p.Layers["cgroups"] = "optional"
	}
	o, err := e.Corral(ctx, Run{Policy: e.policyFor(p), Workdir: wd, Env: env, Flags: flags, Probe: []string{"write", mk}})
	if err != nil {
		failNow(e, r, what, err)
		return
	}
	// A layer fails to start (125); cgroups are made before the start on
	// linux (123 provision_failed), or the policy is rejected when this
	// user has none (122). Through the gateway it is the create that is
	// refused: 123, the sandbox could not be made (docs/gateway.md).
	want := map[int]bool{125: true}
	switch {
	case layer == "cgroups" && !e.cgroupsUsable():
		want = map[int]bool{122: true}
	case e.Provider == LinuxGateway:
		want = map[int]bool{123: true}
	case layer == "cgroups":
		want[123] = true
	}
	e.Check(r, what+": exit status", fmt.Sprint("exit ", o.Code), want[o.Code], fmt.Sprintf("%s: exit %d, want a refusal (125 start_failed; for cgroups 123 provision_failed, or 122 when unavailable; through the gateway, 123 from sandbox create)", what, o.Code))
	el := errorLines(o.Stderr)
	name := layer
	if layer == "cgroups" && !e.cgroupsUsable() {
		name = "layers.cgroups" // rejected at load: the policy's line
	}
	e.Check(r, what+": the error names the layer", el, strings.Contains(el, name), what+": the error does not name "+name)
	e.Check(r, what+": nothing ran (marker file)", fmt.Sprint("exists: ", hostExists(mk)), !hostExists(mk) && o.Report == nil, what+": the command ran although a required layer failed")
}

// P08: a required layer is unavailable: Landlock off, user namespaces
// refused, the provider missing.
func runP08(ctx context.Context, e *Env) Result {
	r := newResult()
	refusedRun(ctx, e, &r, "Landlock made unavailable ("+faultEnv+"=landlock), landlock required", "landlock", []string{faultEnv + "=landlock"}, nil)
	refusedRun(ctx, e, &r, "namespaces refused ("+faultEnv+"=namespaces), namespaces required", "namespaces", []string{faultEnv + "=namespaces"}, nil)
	// A provider this binary does not have: refused, never run elsewhere.
	wd := e.TempDir("p08-prov")
	mk := filepath.Join(wd, "marker")
	o, err := e.rawCorral(ctx, rawRun{Policy: e.policyFor(pol{}), Workdir: wd, Flags: []string{"--provider", "vmware"},
		Args: []string{e.Bin, "__probe", "write", mk}}, 0)
	switch {
	case err != nil:
		failNow(e, &r, "--provider vmware", err)
	case e.Provider == LinuxGateway:
		// A create naming a provider the gateway does not run is an
		// invalid request (122, docs/gateway.md).
		e.Check(&r, "sandbox create --provider vmware (not a provider of this gateway)", brief(o), o.Code == 122 && strings.Contains(o.Stderr, "vmware") && !hostExists(mk), "a provider the gateway does not run did not refuse the create with 122 naming it")
	default:
		e.Check(&r, "--provider vmware (not in this build)", brief(o), o.Code == 121 && !hostExists(mk), "a missing provider did not refuse the run with 121 unavailable")
	}
	// Real unavailability: cgroups for a user they are not delegated to.
	if !e.cgroupsUsable() {
		refusedRun(ctx, e, &r, "cgroups required but not available to this user", "cgroups", nil, nil)
	}
	return r
}

// P16: every layer in turn fails on apply: refused when required; when
// optional the run goes on and -v reports exactly that layer skipped.
func runP16(ctx context.Context, e *Env) Result {
	r := newResult()
	for _, layer := range allLayers {
		env := []string{faultEnv + "=" + layer}
		refusedRun(ctx, e, &r, layer+" fails on apply, required", layer, env, []string{"-v"})
		wd := e.TempDir("p16")
		mk := filepath.Join(wd, "marker")
		p := pol{Layers: map[string]string{layer: "optional"}}
		if !e.cgroupsUsable() {
			p.Layers["cgroups"] = "optional"
		}
		o, err := e.Corral(ctx, Run{Policy: e.policyFor(p), Workdir: wd, Env: env, Flags: []string{"-v"}, Probe: []string{"write", mk}})
		if err != nil {
			failNow(e, &r, layer+" optional", err)
			continue
		}
		st := layerStates(o.Stderr)
		what := layer + " fails on apply, optional"
		if o.Code != 0 {
			// Refusing is also fail-closed, but only namespaces and
			// mounts are too fundamental to be skipped.
			el := errorLines(o.Stderr)
			ok := (layer == "namespaces" || layer == "mounts") && strings.Contains(el, layer) && !hostExists(mk)
			e.Check(&r, what+": refused", fmt.Sprintf("exit %d: %s", o.Code, el), ok, what+": the run was refused (exit "+fmt.Sprint(o.Code)+"); want it to run with the layer reported skipped")
			continue
		}
		e.Check(&r, what+": the command ran", fmt.Sprint("marker exists: ", hostExists(mk)), hostExists(mk), what+": exit 0 but the command did not run")
		var got []string
		for _, l := range allLayers {
			got = append(got, l+"="+st[l])
		}
		ok := st[layer] == "skipped"
		for _, other := range allLayers {
			if other == layer {
				continue
			}
			want := "active"
			if other == "cgroups" && !e.cgroupsUsable() {
				want = "skipped"
			}
			ok = ok && st[other] == want
		}
		e.Check(&r, what+": -v lists the layers in force", strings.Join(got, " "), ok, what+": -v does not report "+layer+" skipped and the others active: "+strings.Join(got, " "))
	}
	return r
}

// errorLines is corral's stderr without the informational lines (-v
// layers, info and warning losses): the error itself.
func errorLines(stderr string) string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if l == "" || strings.HasPrefix(l, "corral: info:") || strings.HasPrefix(l, "corral: warning:") || strings.HasPrefix(l, "corral: layer ") {
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

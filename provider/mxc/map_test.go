package mxc

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

const (
	pc  = BackendProcessContainer
	iso = BackendIsolationSession
)

// base is a resolved policy that maps cleanly on process_container except
// for what a case changes: Windows paths, every layer optional, no limits.
func base() *policy.Resolved {
	return &policy.Resolved{
		Workdir: `C:\work`,
		Grants: []policy.PathGrant{
			{Path: `C:\work`, Access: policy.AccessReadWrite, Dir: true, Field: "filesystem.include_workdir"},
		},
		Env:     []string{`PATH=C:\Windows\System32`, "TERM=xterm"},
		Network: policy.NetworkNone,
		Egress:  policy.Network{UnixSockets: policy.UnixSocketsAllow},
		Layers: policy.Layers{
			policy.LayerNamespaces: policy.Optional, policy.LayerMounts: policy.Optional,
			policy.LayerLandlock: policy.Optional, policy.LayerSeccomp: policy.Optional, policy.LayerCgroups: policy.Optional,
		},
	}
}

// baseISO is base made acceptable to isolation_session: no grants, host.
func baseISO() *policy.Resolved {
	r := base()
	r.Grants = nil
	r.Network = policy.NetworkHost
	return r
}

// creds are credentials of those names, each exposed in a variable and
// a file, as policy.Resolve makes them.
func creds(names ...string) []policy.ResolvedCredential {
	var out []policy.ResolvedCredential
	for i, n := range names {
		out = append(out, policy.ResolvedCredential{
			Credential: policy.Credential{Name: n, Source: policy.CredentialSource{Env: "KEY"},
				Expose: policy.CredentialExpose{Env: "KEY", File: "/run/secrets/" + n}, Endpoints: []policy.CredentialEndpoint{{Host: "api.example.com"}}},
			Field: fmt.Sprintf("credentials[%d]", i), Placeholder: "corral-placeholder" + n, File: "/run/secrets/" + n})
	}
	return out
}

type lossKey struct {
	Sev   provider.Severity
	Area  string
	Field string
}

func keys(l provider.LossReport, area string) []lossKey {
	var out []lossKey
	for _, x := range l {
		if area == "" || x.Area == area {
			out = append(out, lossKey{x.Severity, x.Area, x.Field})
		}
	}
	return out
}

// fragment returns the JSON of one top-level key of the document ("null"
// when absent), keys sorted.
func fragment(t *testing.T, req *Request, key string) string {
	t.Helper()
	b, err := req.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(m[key])
	return string(out)
}

type mapCase struct {
	name    string
	backend Backend
	r       func() *policy.Resolved
	proxy   string
	area    string            // loss area compared exactly
	want    map[string]string // top-level key -> exact JSON
	loss    []lossKey         // exact loss items of area, in order
	errors  bool              // whether the whole report has errors
}

var e, w, i = provider.SeverityError, provider.SeverityWarning, provider.SeverityInfo

func mapCases() []mapCase {
	with := func(b func() *policy.Resolved, f func(r *policy.Resolved)) func() *policy.Resolved {
		return func() *policy.Resolved { r := b(); f(r); return r }
	}
	grants := func(g ...policy.PathGrant) func(r *policy.Resolved) {
		return func(r *policy.Resolved) { r.Grants = g }
	}
	g := func(path string, a policy.Access, field string) policy.PathGrant {
		return policy.PathGrant{Path: path, Access: a, Field: field}
	}
	lim := func(l policy.Limits) func(r *policy.Resolved) { return func(r *policy.Resolved) { r.Limits = l } }
	layers := func(req policy.Requirement) func(r *policy.Resolved) {
		return func(r *policy.Resolved) {
			r.Layers = policy.Layers{}
			for _, l := range policy.AllLayers {
				r.Layers[l] = req
			}
		}
	}
	return []mapCase{
		// ---- filesystem × process_container
		{name: "fs/pc/workdir", backend: pc, r: base, area: "filesystem",
			want: map[string]string{"filesystem": `{"readwritePaths":["C:\\work"]}`, "process": `{"cwd":"C:\\work","env":["PATH=C:\\Windows\\System32","TERM=xterm"]}`}},
		{name: "fs/pc/lists", backend: pc, area: "filesystem",
			r: with(base, grants(
				g(`C:\tools`, policy.AccessReadOnly, "filesystem.read_only[0]"),
				g(`C:/work`, policy.AccessReadWrite, "filesystem.include_workdir"),
				g(`D:/cache//go-build/`, policy.AccessReadWrite, "filesystem.read_write[0]"),
				g(`C:\Users\me\.aws`, policy.AccessDeny, "filesystem.deny[0]"),
			)),
			want: map[string]string{"filesystem": `{"deniedPaths":["C:\\Users\\me\\.aws"],"readonlyPaths":["C:\\tools"],"readwritePaths":["C:\\work","D:\\cache\\go-build"]}`}},
		{name: "fs/pc/deny-in-rw", backend: pc, area: "filesystem",
			r: with(base, grants(
				g(`C:\work`, policy.AccessReadWrite, "filesystem.include_workdir"),
				g(`C:\work\secret`, policy.AccessDeny, "filesystem.deny[0]"),
			)),
			want: map[string]string{"filesystem": `{"deniedPaths":["C:\\work\\secret"],"readwritePaths":["C:\\work"]}`},
			loss: []lossKey{{w, "filesystem", "filesystem.deny"}}},
		// P35: a network share or device path is never mapped, whatever
		// the policy's OS (a Windows policy refuses them at parse).
		{name: "fs/pc/unc-device", backend: pc, area: "filesystem", errors: true,
			r: with(base, grants(
				g(`C:\work`, policy.AccessReadWrite, "filesystem.include_workdir"),
				g(`\\srv\share\data`, policy.AccessReadOnly, "filesystem.read_only[0]"),
				g(`\\.\PhysicalDrive0`, policy.AccessReadOnly, "filesystem.read_only[1]"),
				g(`\\?\GLOBALROOT\Device\HarddiskVolume1`, policy.AccessReadWrite, "filesystem.read_write[0]"),
			)),
			want: map[string]string{"filesystem": `{"readwritePaths":["C:\\work"]}`},
			loss: []lossKey{{e, "filesystem", "filesystem.read_only[0]"}, {e, "filesystem", "filesystem.read_only[1]"}, {e, "filesystem", "filesystem.read_write[0]"}}},
		{name: "fs/pc/linux-rooted", backend: pc, area: "filesystem", errors: true,
			r: with(base, grants(
				g(`/usr`, policy.AccessReadOnly, "filesystem.read_only[0]"),
				g(`/etc/shadow`, policy.AccessDeny, "filesystem.deny[0]"),
				g(`C:\work`, policy.AccessReadWrite, "filesystem.include_workdir"),
			)),
			want: map[string]string{"filesystem": `{"readwritePaths":["C:\\work"]}`},
			loss: []lossKey{{e, "filesystem", "filesystem.read_only[0]"}, {e, "filesystem", "filesystem.deny[0]"}}},
		{name: "fs/pc/linux-workdir", backend: pc, area: "filesystem", errors: true,
			r: with(base, func(r *policy.Resolved) {
				r.Workdir = "/home/me/src"
				r.Grants = []policy.PathGrant{g("/home/me/src", policy.AccessReadWrite, "filesystem.include_workdir")}
			}),
			want: map[string]string{"filesystem": `null`},
			loss: []lossKey{{e, "filesystem", "filesystem.include_workdir"}, {i, "filesystem", "filesystem.include_workdir"}}},
		{name: "fs/pc/relative", backend: pc, area: "filesystem", errors: true,
			r:    with(base, grants(g(`C:relative`, policy.AccessReadOnly, "filesystem.read_only[0]"))),
			loss: []lossKey{{e, "filesystem", "filesystem.read_only[0]"}, {i, "filesystem", "filesystem.include_workdir"}}},
		{name: "fs/pc/protected-nested", backend: pc, area: "filesystem",
			r: with(base, func(r *policy.Resolved) {
				r.Grants = append(r.Grants, g(`C:\work\.git`, policy.AccessReadOnly, "filesystem.protected[0]"))
				r.Skipped = []string{`C:\work\.envrc`}
				r.Placeholders = []policy.Placeholder{{Path: `C:\work\.bashrc`, Field: "filesystem.protected[3]"}}
			}),
			want: map[string]string{"filesystem": `{"readonlyPaths":["C:\\work\\.git"],"readwritePaths":["C:\\work"]}`},
			loss: []lossKey{{w, "filesystem", "filesystem.protected[0]"}, {w, "filesystem", "filesystem.protected"}, {w, "filesystem", "filesystem.protected"}}},
		{name: "fs/pc/no-workdir", backend: pc, area: "filesystem",
			r:    with(base, grants(g(`C:\tools`, policy.AccessReadOnly, "filesystem.read_only[0]"))),
			want: map[string]string{"filesystem": `{"readonlyPaths":["C:\\tools"]}`, "process": `{"env":["PATH=C:\\Windows\\System32","TERM=xterm"]}`},
			loss: []lossKey{{i, "filesystem", "filesystem.include_workdir"}}},
		{name: "fs/pc/workdir-denied", backend: pc, area: "filesystem",
			r:    with(base, grants(g(`C:\`, policy.AccessReadOnly, "filesystem.read_only[0]"), g(`C:\work`, policy.AccessDeny, "filesystem.deny[0]"))),
			want: map[string]string{"filesystem": `{"deniedPaths":["C:\\work"],"readonlyPaths":["C:\\"]}`},
			loss: []lossKey{{i, "filesystem", "filesystem.include_workdir"}}},
		// ---- filesystem × isolation_session
		{name: "fs/iso/none", backend: iso, r: baseISO, area: "filesystem",
			want: map[string]string{"filesystem": `null`, "process": `{"env":["PATH=C:\\Windows\\System32","TERM=xterm"]}`},
			loss: []lossKey{{w, "filesystem", "filesystem"}}},
		{name: "fs/iso/grants", backend: iso, area: "filesystem", errors: true,
			r: with(baseISO, grants(
				g(`C:\work`, policy.AccessReadWrite, "filesystem.include_workdir"),
				g(`C:\tools`, policy.AccessReadOnly, "filesystem.read_only[0]"),
				g(`C:\work\.git`, policy.AccessReadOnly, "filesystem.protected[0]"),
				g(`C:\secret`, policy.AccessDeny, "filesystem.deny[0]"),
			)),
			want: map[string]string{"filesystem": `null`},
			loss: []lossKey{{e, "filesystem", "filesystem.include_workdir"}, {e, "filesystem", "filesystem.read_only[0]"}, {e, "filesystem", "filesystem.deny[0]"}, {w, "filesystem", "filesystem"}}},

		// ---- ui (the policy has no ui section yet: always absent)
		{name: "ui/pc/absent", backend: pc, r: base, area: "ui",
			want: map[string]string{"ui": `{"clipboard":"none","disable":true,"injection":false}`}},
		{name: "ui/iso/absent", backend: iso, r: baseISO, area: "ui",
			want: map[string]string{"ui": `null`}},

		// ---- network × process_container
		{name: "net/pc/none", backend: pc, r: base, area: "network",
			want: map[string]string{"network": `{"egress":{"default":"deny"},"ingress":{"default":"deny","hostLoopback":"deny"}}`, "runtimeConfig": `null`}},
		{name: "net/pc/proxy", backend: pc, proxy: "127.0.0.1:49152", area: "network",
			r:    with(base, func(r *policy.Resolved) { r.Network = policy.NetworkProxy }),
			want: map[string]string{"network": `{"egress":{"default":"deny"},"ingress":{"default":"deny"}}`, "runtimeConfig": `{"networkProxy":"http://127.0.0.1:49152"}`},
			loss: []lossKey{{w, "network", "network.mode"}}},
		{name: "net/pc/proxy-inspected", backend: pc, proxy: "127.0.0.1:49152", area: "network", errors: true,
			r: with(base, func(r *policy.Resolved) {
				r.Network = policy.NetworkProxy
				r.Egress.Allow = []policy.Endpoint{{Host: "pass.example.com"}, {Host: "api.example.com", Access: policy.HTTPReadOnly},
					{Host: "tls.example.com", TLS: policy.TLSInspect}, {Host: "plain.example.com", TLS: policy.TLSPassthrough}}
			}),
			want: map[string]string{"network": `{"egress":{"default":"deny"},"ingress":{"default":"deny"}}`},
			loss: []lossKey{{w, "network", "network.mode"}, {e, "network", "network.allow[1]"}, {e, "network", "network.allow[2]"}}},
		{name: "net/pc/proxy-no-listener", backend: pc, area: "network", errors: true,
			r:    with(base, func(r *policy.Resolved) { r.Network = policy.NetworkProxy }),
			want: map[string]string{"network": `null`, "runtimeConfig": `null`},
			loss: []lossKey{{e, "network", "network.mode"}}},
		{name: "net/pc/proxy-not-loopback", backend: pc, proxy: "0.0.0.0:3128", area: "network", errors: true,
			r:    with(base, func(r *policy.Resolved) { r.Network = policy.NetworkProxy }),
			want: map[string]string{"network": `null`, "runtimeConfig": `null`},
			loss: []lossKey{{e, "network", "network.mode"}}},
		{name: "net/pc/unix-deny", backend: pc, r: with(base, func(r *policy.Resolved) { r.Egress.UnixSockets = policy.UnixSocketsDeny }), area: "network",
			want: map[string]string{"network": `{"egress":{"default":"deny"},"ingress":{"default":"deny","hostLoopback":"deny"}}`},
			loss: []lossKey{{w, "network", "network.unix_sockets"}}},
		{name: "net/pc/host", backend: pc, area: "network", errors: true,
			r:    with(base, func(r *policy.Resolved) { r.Network = policy.NetworkHost }),
			want: map[string]string{"network": `null`},
			loss: []lossKey{{e, "network", "network.mode"}}},
		// ---- network × isolation_session
		{name: "net/iso/host", backend: iso, r: baseISO, area: "network",
			want: map[string]string{"network": `{"allowLocalNetwork":true,"defaultPolicy":"allow"}`, "runtimeConfig": `null`},
			loss: []lossKey{{i, "network", "network.mode"}}},
		{name: "net/iso/none", backend: iso, area: "network", errors: true,
			r:    with(baseISO, func(r *policy.Resolved) { r.Network = policy.NetworkNone }),
			want: map[string]string{"network": `null`},
			loss: []lossKey{{e, "network", "network.mode"}}},
		{name: "net/iso/proxy", backend: iso, proxy: "127.0.0.1:49152", area: "network", errors: true,
			r:    with(baseISO, func(r *policy.Resolved) { r.Network = policy.NetworkProxy }),
			want: map[string]string{"network": `null`, "runtimeConfig": `null`},
			loss: []lossKey{{e, "network", "network.mode"}}},

		// ---- process × both backends
		{name: "proc/pc/run_as_user", backend: pc, area: "process", errors: true,
			r:    with(base, func(r *policy.Resolved) { r.RunAs = "builder" }),
			loss: []lossKey{{e, "process", "process.run_as_user"}}},
		{name: "proc/iso/run_as_user", backend: iso, area: "process", errors: true,
			r:    with(baseISO, func(r *policy.Resolved) { r.RunAs = "builder" }),
			loss: []lossKey{{e, "process", "process.run_as_user"}}},
		{name: "proc/pc/limits", backend: pc, area: "process",
			r:    with(base, lim(policy.Limits{Memory: 2 << 30, Pids: 1024, CPU: 2, Nofile: 4096, Timeout: policy.Duration(90 * time.Second)})),
			want: map[string]string{"process": `{"cwd":"C:\\work","env":["PATH=C:\\Windows\\System32","TERM=xterm"],"timeout":90000}`},
			loss: []lossKey{{w, "process", "process.limits.memory"}, {w, "process", "process.limits.pids"}, {w, "process", "process.limits.cpu"}, {w, "process", "process.limits.nofile"}}},
		{name: "proc/iso/limits", backend: iso, area: "process",
			r:    with(baseISO, lim(policy.Limits{Memory: 1 << 20, Timeout: policy.Duration(time.Minute)})),
			want: map[string]string{"process": `{"env":["PATH=C:\\Windows\\System32","TERM=xterm"],"timeout":60000}`},
			loss: []lossKey{{w, "process", "process.limits.memory"}}},
		{name: "proc/pc/timeout-cap", backend: pc, area: "process",
			r:    with(base, lim(policy.Limits{Timeout: policy.Duration(50 * 24 * time.Hour)})),
			want: map[string]string{"process": `{"cwd":"C:\\work","env":["PATH=C:\\Windows\\System32","TERM=xterm"],"timeout":4294967295}`},
			loss: []lossKey{{w, "process", "process.limits.timeout"}}},
		{name: "proc/pc/env-set", backend: pc, area: "process",
			r:    with(base, func(r *policy.Resolved) { r.Env = []string{"CI=1", `PATH=C:\bin`} }),
			want: map[string]string{"process": `{"cwd":"C:\\work","env":["CI=1","PATH=C:\\bin"]}`}},

		// ---- layers × both backends
		{name: "layers/pc/optional", backend: pc, r: base, area: "layers",
			loss: []lossKey{{i, "layers", "layers.namespaces"}, {i, "layers", "layers.mounts"}, {w, "layers", "layers.landlock"}, {w, "layers", "layers.seccomp"}, {w, "layers", "layers.cgroups"}}},
		{name: "layers/pc/required", backend: pc, area: "layers", errors: true,
			r:    with(base, layers(policy.Required)),
			loss: []lossKey{{w, "layers", "layers.namespaces"}, {i, "layers", "layers.mounts"}, {e, "layers", "layers.landlock"}, {e, "layers", "layers.seccomp"}, {e, "layers", "layers.cgroups"}}},
		{name: "layers/pc/absent-means-required", backend: pc, area: "layers", errors: true,
			r:    with(base, func(r *policy.Resolved) { r.Layers = nil }),
			loss: []lossKey{{w, "layers", "layers.namespaces"}, {i, "layers", "layers.mounts"}, {e, "layers", "layers.landlock"}, {e, "layers", "layers.seccomp"}, {e, "layers", "layers.cgroups"}}},
		{name: "layers/iso/optional", backend: iso, r: baseISO, area: "layers",
			loss: []lossKey{{i, "layers", "layers.namespaces"}, {w, "layers", "layers.mounts"}, {w, "layers", "layers.landlock"}, {w, "layers", "layers.seccomp"}, {w, "layers", "layers.cgroups"}}},
		{name: "layers/iso/required", backend: iso, area: "layers", errors: true,
			r:    with(baseISO, layers(policy.Required)),
			loss: []lossKey{{w, "layers", "layers.namespaces"}, {e, "layers", "layers.mounts"}, {e, "layers", "layers.landlock"}, {e, "layers", "layers.seccomp"}, {e, "layers", "layers.cgroups"}}},

		// ---- credentials × both backends: refused however the egress is
		{name: "cred/pc/proxy", backend: pc, proxy: "127.0.0.1:49152", area: "credentials", errors: true,
			r: with(base, func(r *policy.Resolved) {
				r.Network = policy.NetworkProxy
				r.Credentials = creds("openai", "github")
			}),
			loss: []lossKey{{e, "credentials", "credentials[0]"}, {e, "credentials", "credentials[1]"}}},
		{name: "cred/pc/none", backend: pc, area: "credentials", errors: true,
			r:    with(base, func(r *policy.Resolved) { r.Credentials = creds("openai") }),
			loss: []lossKey{{e, "credentials", "credentials[0]"}}},
		{name: "cred/iso/host", backend: iso, area: "credentials", errors: true,
			r:    with(baseISO, func(r *policy.Resolved) { r.Credentials = creds("openai") }),
			loss: []lossKey{{e, "credentials", "credentials[0]"}}},

		// ---- document head
		{name: "head/pc", backend: pc, r: base, area: "provider",
			want: map[string]string{"version": `"0.8.0-alpha"`, "containment": `"processcontainer"`, "phase": `null`}},
		{name: "head/iso", backend: iso, r: baseISO, area: "provider",
			want: map[string]string{"version": `"0.9.0-alpha"`, "containment": `"isolation_session"`, "phase": `null`}},
	}
}

func TestMapTable(t *testing.T) {
	for _, c := range mapCases() {
		t.Run(c.name, func(t *testing.T) {
			req, loss := Map(c.r(), Config{Backend: c.backend}, c.proxy)
			for k, want := range c.want {
				if got := fragment(t, req, k); got != want {
					t.Errorf("%s = %s\nwant %s", k, got, want)
				}
			}
			if got := keys(loss, c.area); !reflect.DeepEqual(got, c.loss) {
				t.Errorf("%s losses = %v\nwant %v\nall: %v", c.area, got, c.loss, loss)
			}
			if loss.HasErrors() != c.errors {
				t.Errorf("HasErrors = %v, want %v: %v", loss.HasErrors(), c.errors, loss)
			}
			for _, l := range loss {
				if l.Message == "" || l.Field == "" || l.Area == "" {
					t.Errorf("incomplete loss item %+v", l)
				}
			}
		})
	}
}

// A policy with credentials is refused with a message that says why and
// what to use instead, naming the credential, never its placeholder.
func TestMapCredentials(t *testing.T) {
	r := base()
	r.Network = policy.NetworkProxy
	r.Credentials = creds("openai")
	_, loss := Map(r, Config{}, "127.0.0.1:49152")
	var msg string
	for _, l := range loss.Errors() {
		if l.Field == "credentials[0]" {
			msg = l.Message
		}
	}
	t.Logf("%s", msg)
	for _, want := range []string{`"openai"`, "inspected", "CA", "linux or docker provider"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the credential's error %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, r.Credentials[0].Placeholder) {
		t.Errorf("the credential's error holds its placeholder: %q", msg)
	}
}

// The base policies map with no error on their backend, so every error in
// the table comes from the area under test.
func TestBaseIsClean(t *testing.T) {
	if _, loss := Map(base(), Config{}, ""); loss.HasErrors() {
		t.Fatalf("process_container: %v", loss.Errors())
	}
	if _, loss := Map(baseISO(), Config{Backend: iso}, ""); loss.HasErrors() {
		t.Fatalf("isolation_session: %v", loss.Errors())
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg   Config
		field string
	}{
		{Config{Backend: "hyperv"}, "provider.backend"},
		{Config{SchemaVersion: "0.7.0-alpha"}, "provider.schema_version"},
		{Config{Backend: iso, SchemaVersion: Schema08}, "provider.schema_version"},
	} {
		r := base()
		if c.cfg.Backend == iso {
			r = baseISO()
		}
		_, loss := Map(r, c.cfg, "")
		if got := keys(loss, "provider"); !reflect.DeepEqual(got, []lossKey{{e, "provider", c.field}}) {
			t.Errorf("%+v: %v", c.cfg, got)
		}
	}
	// 0.9 on process_container is accepted and versioned 0.9.0-alpha.
	req, loss := Map(base(), Config{SchemaVersion: Schema09}, "")
	if loss.HasErrors() || req.Version != "0.9.0-alpha" || req.Containment != "processcontainer" {
		t.Errorf("0.9 process_container: %+v %v", req, loss)
	}
}

// The default policy's layers (all required) reject on both backends, and
// the rejection names every Linux-only layer.
func TestPlanRejects(t *testing.T) {
	r := base()
	r.Layers = nil
	plan := NewPlan(r, Config{}, "")
	if !plan.Loss.HasErrors() {
		t.Fatal("plan with required landlock accepted")
	}
	err := provider.Rejected(plan.Loss)
	for _, l := range []string{"landlock", "seccomp", "cgroups"} {
		if !strings.Contains(err.Error(), l) {
			t.Errorf("rejection does not name %s: %v", l, err)
		}
	}
	if d := plan.Details.(*Details); d.Backend != pc || d.SchemaVersion != Schema08 || d.Request == nil {
		t.Errorf("details %+v", d)
	}
	if len(plan.Layers) != len(policy.AllLayers) {
		t.Errorf("layers %v", plan.Layers)
	}
}

func TestCapabilities(t *testing.T) {
	p := Capabilities(Config{})
	if p.Provider != "mxc" || p.Version != provider.CapabilitiesVersion || !p.FilesystemGrants || !p.FilesystemDeny || !p.UIPolicy ||
		p.SupportsLivePolicyUpdates || !p.ReportsRuntimeReadiness ||
		!reflect.DeepEqual(p.NetworkModes, []policy.NetworkMode{policy.NetworkNone, policy.NetworkProxy}) ||
		!reflect.DeepEqual(p.SessionLifetimes, []provider.SessionLifetime{provider.LifetimePerRun, provider.LifetimeManaged}) ||
		!reflect.DeepEqual(p.ResourceLimits, []string{"timeout"}) {
		t.Errorf("process_container: %+v", p)
	}
	s := Capabilities(Config{Backend: iso})
	if s.FilesystemGrants || s.FilesystemDeny || s.UIPolicy || s.SupportsLivePolicyUpdates || !s.ReportsRuntimeReadiness ||
		!reflect.DeepEqual(s.NetworkModes, []policy.NetworkMode{policy.NetworkHost}) ||
		!reflect.DeepEqual(s.SessionLifetimes, []provider.SessionLifetime{provider.LifetimePerRun, provider.LifetimePersistent}) {
		t.Errorf("isolation_session: %+v", s)
	}
	want := map[Backend]map[policy.Layer]provider.LayerState{
		pc:  {policy.LayerNamespaces: provider.LayerActive, policy.LayerMounts: provider.LayerActive, policy.LayerLandlock: provider.LayerUnavailable, policy.LayerSeccomp: provider.LayerUnavailable, policy.LayerCgroups: provider.LayerUnavailable},
		iso: {policy.LayerNamespaces: provider.LayerActive, policy.LayerMounts: provider.LayerUnavailable, policy.LayerLandlock: provider.LayerUnavailable, policy.LayerSeccomp: provider.LayerUnavailable, policy.LayerCgroups: provider.LayerUnavailable},
	}
	for b, states := range want {
		for _, st := range Capabilities(Config{Backend: b}).Layers {
			if st.State != states[st.Layer] || st.Detail == "" {
				t.Errorf("%s %s: %+v", b, st.Layer, st)
			}
		}
	}
}

func TestForPhase(t *testing.T) {
	req, _ := Map(baseISO(), Config{Backend: iso}, "")
	prov, err := req.ForPhase(PhaseProvision, "ignored")
	if err != nil || prov.Process != nil || prov.SandboxID != "" || prov.Network == nil || prov.Phase != PhaseProvision {
		t.Errorf("provision: %+v %v", prov, err)
	}
	ex, err := req.ForPhase(PhaseExec, "iso:abc")
	if err != nil || ex.Process == nil || ex.SandboxID != "iso:abc" || ex.Network != nil {
		t.Errorf("exec: %+v %v", ex, err)
	}
	st, err := req.ForPhase(PhaseStop, "iso:abc")
	if err != nil || st.Process != nil || st.Network != nil || st.SandboxID != "iso:abc" {
		t.Errorf("stop: %+v %v", st, err)
	}
	if _, err := req.ForPhase(PhaseStart, ""); err == nil {
		t.Error("start without sandboxId accepted")
	}
	one, _ := Map(base(), Config{}, "")
	if _, err := one.ForPhase(PhaseProvision, ""); err == nil {
		t.Error("phase on a process_container document accepted")
	}
}

func TestWinPath(t *testing.T) {
	for _, c := range []struct{ in, out, problem string }{
		{`C:\x\y`, `C:\x\y`, ""},
		{`c:/x//y/`, `C:\x\y`, ""},
		{`C:/`, `C:\`, ""},
		{`\\srv\share\d`, "", "network share"},
		{`//srv/share`, "", "network share"},
		{`\\?\C:\long`, "", "verbatim"},
		{`\\.\pipe\docker_engine`, "", "device namespace"},
		{`C:\x\f.txt:s`, "", "alternate data stream"},
		{`C:\x\NUL`, "", "reserved device name"},
		{`C:\x.`, "", "dot or a space"},
		{`/usr`, "", "Linux-rooted"},
		{`\etc`, "", "no drive"},
		{`C:rel`, "", "drive-relative"},
		{`rel\x`, "", "relative path"},
		{`~\x`, "", "not a drive path"},
	} {
		out, problem := winPath(c.in)
		if out != c.out || !strings.Contains(problem, c.problem) || (c.problem == "") != (problem == "") {
			t.Errorf("winPath(%q) = %q, %q; want %q, %q", c.in, out, problem, c.out, c.problem)
		}
	}
}

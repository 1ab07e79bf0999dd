package policyimport

import (
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/egress"
	"github.com/corral-sandbox/corral/policy"
)

// imported is the import of testdata/NAME from src (see load).
func imported(t *testing.T, src Source, name string) (*Result, *policy.Policy) {
	t.Helper()
	file := filepath.Join("testdata", name)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return load(t, src, file, data)
}

// load imports data, the file named file, from src, parses the result
// back and, on Linux, resolves it for a fresh home and working directory
// (so it is a policy corral runs).
func load(t *testing.T, src Source, file string, data []byte) (*Result, *policy.Policy) {
	t.Helper()
	res, err := Import(src, file, data)
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.ParseFor(res.YAML, filepath.Base(file)+".yaml", policy.OSLinux)
	if err != nil {
		t.Fatalf("the imported policy does not parse: %v\n%s", err, res.YAML)
	}
	if runtime.GOOS != "linux" {
		return res, p // a Linux policy resolves against a Linux host
	}
	home := t.TempDir()
	wd := filepath.Join(home, "project")
	if err := os.Mkdir(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Resolve(policy.Context{Home: home, Workdir: wd}); err != nil {
		t.Fatalf("the imported policy does not resolve: %v\n%s", err, res.YAML)
	}
	return res, p
}

// wantLosses checks res's loss report is exactly want: "severity key"
// entries, in the report's order (by source line).
func wantLosses(t *testing.T, res *Result, want ...string) {
	t.Helper()
	var got []string
	for _, l := range res.Losses {
		got = append(got, string(l.Severity)+" "+l.Key)
		if l.Message == "" {
			t.Errorf("loss %+v: no message", l)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("losses:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func paths(rs []policy.PathRule) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Path)
	}
	return out
}

func hosts(es []policy.Endpoint) []string {
	var out []string
	for _, e := range es {
		s := e.Host
		for _, p := range e.Ports {
			s += ":" + strconv.Itoa(p)
		}
		out = append(out, s)
	}
	return out
}

// wantIn fails unless every one of want is in got.
func wantIn(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("%s %q: want %q in it", what, got, w)
		}
	}
}

// wantOut fails if one of bad is in got.
func wantOut(t *testing.T, what string, got []string, bad ...string) {
	t.Helper()
	for _, b := range bad {
		if slices.Contains(got, b) {
			t.Errorf("%s %q: %q must not be in it", what, got, b)
		}
	}
}

func TestSRT(t *testing.T) {
	res, p := imported(t, SRT, "srt/settings.json")
	wantIn(t, "read_write", paths(p.Filesystem.ReadWrite), "{workdir}/src", "{workdir}/test", "~/.cache/npm")
	wantOut(t, "read_write", paths(p.Filesystem.ReadWrite), "/tmp")
	// Absolute and ~ paths are denied even where Corral seems not to
	// grant them: the working directory may be among them.
	wantIn(t, "deny", paths(p.Filesystem.Deny), "/etc/ssl/private", "{workdir}/secrets", "/etc/shadow", "~/.ssh", "~/.aws/credentials")
	wantIn(t, "protected", p.Filesystem.Protected, ".env", "config/production.json", ".git", ".bashrc")
	if p.Network.Mode != policy.NetworkProxy {
		t.Errorf("network mode %q, want proxy", p.Network.Mode)
	}
	wantIn(t, "allow", hosts(p.Network.Allow), "github.com", "**.githubusercontent.com", "registry.npmjs.org:443")
	wantIn(t, "allow_private", hosts(p.Network.AllowPrivate), "127.0.0.1:3000")
	wantIn(t, "deny", hosts(p.Network.Deny), "malicious.com")
	wantOut(t, "env pass", p.Process.Env.Pass, "TERM")
	wantIn(t, "env pass", p.Process.Env.Pass, "PATH")
	if !strings.Contains(string(res.YAML), `{host: "registry.npmjs.org", ports: [443]}  # srt settings.json:6 network.allowedDomains[2]`) {
		t.Errorf("no comment naming the source line of registry.npmjs.org:\n%s", res.YAML)
	}
	wantLosses(t, res,
		"warning network.allowedDomains",
		"info network.deniedDomains[1]",
		"info network.deniedDomainReasons",
		"info network.allowUnixSockets",
		"warning filesystem",
		"error filesystem.denyRead[2]",
		"info filesystem.allowWrite[3]",
		"info filesystem.allowWrite[5]",
		"error filesystem.denyWrite[2]",
		"warning credentials.envVars[0]",
		"info credentials.envVars[1]",
	)
	if !res.HasErrors() {
		t.Error("HasErrors is false with two error losses")
	}
}

// TestSRTDefaults: the settings srt's README starts from (network off,
// writes to the working directory) are Corral's default, with nothing
// lost but the note that srt reads everywhere.
func TestSRTDefaults(t *testing.T) {
	res, p := imported(t, SRT, "srt/minimal.json")
	if p.Network.Mode != policy.NetworkNone || len(p.Filesystem.ReadWrite) != 0 {
		t.Errorf("network %q, read_write %v: want none and nothing beyond the workdir", p.Network.Mode, p.Filesystem.ReadWrite)
	}
	wantLosses(t, res, "warning filesystem")
	if res.HasErrors() {
		t.Error("HasErrors")
	}
}

func TestImportErrors(t *testing.T) {
	if _, err := Import("bwrap", "x", nil); err == nil || !strings.Contains(err.Error(), "unknown source") {
		t.Errorf("unknown source: %v", err)
	}
	for _, c := range []struct {
		src  Source
		data string
		want string
	}{
		{SRT, "{\n  \"filesystem\": [1,\n", "f.json:"},
		{SRT, "[1, 2]", "f.json:1:1: the top level is not a mapping"},
	} {
		_, err := Import(c.src, "f.json", []byte(c.data))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %q: %v, want %q", c.src, c.data, err, c.want)
		}
	}
}

func TestCodexWorkspaceWrite(t *testing.T) {
	res, p := imported(t, Codex, "codex/workspace-write.toml")
	if p.Filesystem.IncludeWorkdir == nil || !*p.Filesystem.IncludeWorkdir || p.Network.Mode != policy.NetworkHost {
		t.Errorf("include_workdir %v, network %q: want the workdir read-write and network host (network_access)", p.Filesystem.IncludeWorkdir, p.Network.Mode)
	}
	wantIn(t, "read_write", paths(p.Filesystem.ReadWrite), "/home/dev/.cache/go-build", "/home/dev/go/pkg/mod", "/home/dev/shared/fixtures")
	if got := p.Process.Env.Pass; !slices.Equal(got, []string{"PATH", "LANG", "LC_ALL", "LC_CTYPE"}) {
		t.Errorf("env pass %q: want inherit = core less what Corral sets itself", got)
	}
	if p.Process.Env.Set["CI"] != "1" || p.Process.Env.Set["GOFLAGS"] != "-mod=mod" {
		t.Errorf("env set %v", p.Process.Env.Set)
	}
	wantLosses(t, res,
		"info approval_policy",
		"warning sandbox_mode",
		"info sandbox_mode",
		"warning sandbox_workspace_write.network_access",
		"info shell_environment_policy.inherit",
		"info shell_environment_policy.ignore_default_excludes",
		"info shell_environment_policy.exclude[0]",
		"info shell_environment_policy.exclude[1]",
	)
}

// TestCodexActiveProfile: the file's profile picks the sandbox_mode
// (read-only here), and [sandbox_workspace_write] is then unused.
func TestCodexActiveProfile(t *testing.T) {
	res, p := imported(t, Codex, "codex/read-only.toml")
	if p.Filesystem.IncludeWorkdir == nil || *p.Filesystem.IncludeWorkdir || !slices.Contains(paths(p.Filesystem.ReadOnly), "{workdir}") {
		t.Errorf("include_workdir %v, read_only %v: want the workdir read-only", p.Filesystem.IncludeWorkdir, paths(p.Filesystem.ReadOnly))
	}
	wantOut(t, "read_write", paths(p.Filesystem.ReadWrite), "/home/dev/project-docs")
	wantIn(t, "env pass", p.Process.Env.Pass, "PATH", "LC_*", "TERM", "GOPATH")
	wantOut(t, "env pass", p.Process.Env.Pass, "HOME", "USER")
	if p.Network.Mode != policy.NetworkNone {
		t.Errorf("network %q", p.Network.Mode)
	}
	wantLosses(t, res,
		"info approval_policy",
		"info sandbox_workspace_write",
		"info shell_environment_policy.include_only",
		"warning sandbox_mode",
	)
}

// TestCodexPermissions: a [permissions.NAME] profile extending
// :workspace, with extra workspace roots, scoped denies (one a glob, an
// error), write and deny paths, and domains behind the network proxy.
func TestCodexPermissions(t *testing.T) {
	res, p := imported(t, Codex, "codex/permissions.toml")
	wantIn(t, "read_write", paths(p.Filesystem.ReadWrite), "/home/dev/.npm", "/home/dev/project", "/home/dev/libs/common")
	wantIn(t, "deny", paths(p.Filesystem.Deny), "{workdir}/secrets", "/home/dev/project/secrets", "/home/dev/libs/common/secrets")
	wantIn(t, "deny", paths(p.Filesystem.Deny), "/home/dev/.ssh")
	if p.Network.Mode != policy.NetworkProxy {
		t.Fatalf("network %q, want proxy (features.network_proxy with domains)", p.Network.Mode)
	}
	wantIn(t, "allow", hosts(p.Network.Allow), "registry.npmjs.org", "**.github.com", "github.com")
	wantIn(t, "deny", hosts(p.Network.Deny), "metadata.google.internal")
	wantLosses(t, res,
		"info approval_policy",
		"warning permissions.project-edit",
		"info shell_environment_policy.inherit",
		"info permissions.project-edit.filesystem.:tmpdir",
		"error permissions.project-edit.filesystem.:workspace_roots.**/*.env",
		"error permissions.project-edit.filesystem.:workspace_roots.**/*.env",
		"error permissions.project-edit.filesystem.:workspace_roots.**/*.env",
		"info permissions.project-edit.network.domains",
	)
}

// TestCodexBareProfile: a profile without extends reads only what it
// lists; Corral always grants the system directories, which is an error
// unless it lists :minimal. Limited network mode is access: read-only.
func TestCodexBareProfile(t *testing.T) {
	data := []byte(`default_permissions = "locked"
[features]
network_proxy = true
[permissions.locked.filesystem]
"/srv/data" = "read"
[permissions.locked.network]
enabled = true
mode = "limited"
[permissions.locked.network.domains]
"api.example.com" = "allow"
`)
	res, p := load(t, Codex, "config.toml", data)
	if !res.HasErrors() || !strings.Contains(string(res.YAML), `{host: "api.example.com", access: "read-only"}`) || *p.Filesystem.IncludeWorkdir {
		t.Errorf("errors %v, workdir %v:\n%s", res.Losses, *p.Filesystem.IncludeWorkdir, res.YAML)
	}
	wantIn(t, "read_only", paths(p.Filesystem.ReadOnly), "/srv/data")
}

// endpoint is the allow entry for host (nil when none).
func endpoint(p *policy.Policy, host string) *policy.Endpoint {
	for i, e := range p.Network.Allow {
		if e.Host == host {
			return &p.Network.Allow[i]
		}
	}
	return nil
}

// TestOpenShellDefault: filesystem lists, presets as access, and every
// binary-scoped entry an error (Corral's rules bind every process).
func TestOpenShellDefault(t *testing.T) {
	res, p := imported(t, OpenShell, "openshell/01-default-like.yaml")
	wantIn(t, "read_only", paths(p.Filesystem.ReadOnly), "/app", "/var/log")
	wantOut(t, "read_only", paths(p.Filesystem.ReadOnly), "/proc", "/dev/urandom")
	wantIn(t, "read_write", paths(p.Filesystem.ReadWrite), "/sandbox")
	wantOut(t, "read_write", paths(p.Filesystem.ReadWrite), "/tmp", "/dev/null")
	if e := endpoint(p, "api.github.com"); e == nil || e.Access != "read-only" || !slices.Equal(e.Ports, []int{443}) {
		t.Errorf("api.github.com: %+v, want access read-only on 443", e)
	}
	if e := endpoint(p, "pypi.org"); e == nil || e.HasL7() {
		t.Errorf("pypi.org: %+v, want a passthrough entry", e)
	}
	wantLosses(t, res,
		"info filesystem_policy",
		"info filesystem_policy.read_only[2]",
		"info filesystem_policy.read_only[3]",
		"info filesystem_policy.read_write[1]",
		"info filesystem_policy.read_write[2]",
		"info landlock",
		"info process",
		"error network_policies.claude_code.binaries",
		"warning network_policies",
		"error network_policies.github_rest_api.binaries",
		"error network_policies.pypi.binaries",
		"error network_policies.npm_registry.binaries",
		"warning network_policies.npm_registry.endpoints[0]",
		"warning network_policies.npm_registry.endpoints[0].allow_encoded_slash",
	)
}

// TestOpenShellL7: REST rules with query matchers, an endpoint path
// selector with a preset as rules on that path, deny rules, a GraphQL
// endpoint left out, allowed_ips as allow_private, a TCP endpoint.
func TestOpenShellL7(t *testing.T) {
	res, p := imported(t, OpenShell, "openshell/02-l7-rules.yaml")
	gh := endpoint(p, "github.com")
	if gh == nil || len(gh.Rules) != 2 || gh.Rules[0].Method != "GET" || !slices.Equal(gh.Rules[0].Query["service"], policy.Globs{"git-upload-pack"}) {
		t.Errorf("github.com: %+v", gh)
	}
	api := endpoint(p, "api.github.com")
	if api == nil || len(api.Rules) != 6 || api.Rules[0].Path != "/repos/**" || len(api.DenyRules) != 2 || api.Access != "" {
		t.Errorf("api.github.com: %+v, want the read-write methods on /repos/** and two deny rules", api)
	}
	wantIn(t, "allow_private", hosts(p.Network.AllowPrivate), "10.20.0.0/16:443:8443")
	wantIn(t, "allow", hosts(p.Network.Allow), "db.example.internal:5432", "*.svc.example.internal:443:8443")
	wantLosses(t, res,
		"info filesystem_policy",
		"warning filesystem_policy",
		"info filesystem_policy.read_only[3]",
		"info filesystem_policy.read_only[4]",
		"info filesystem_policy.read_write[1]",
		"info filesystem_policy.read_write[2]",
		"info landlock",
		"info process",
		"error network_policies.git_smart_http_readonly.binaries",
		"warning network_policies",
		"error network_policies.github_api_rw_guarded.binaries",
		"warning network_policies.github_api_rw_guarded.endpoints[1]",
		"error network_policies.internal_services.binaries",
		"warning network_policies.internal_services.endpoints[0]",
		"info network_policies.internal_services.endpoints[0].allowed_ips",
		"error network_policies.postgres.binaries",
		"warning network_policies.postgres.endpoints[0]",
	)
}

// TestOpenShellUnmapped: MCP and WebSocket rules leave their endpoints
// out, credential fields and middlewares are reported, tls: skip is
// passthrough.
func TestOpenShellUnmapped(t *testing.T) {
	res, p := imported(t, OpenShell, "openshell/03-mcp-credentials-middleware.yaml")
	if e := endpoint(p, "mtls.partner.example"); e == nil || e.TLS != policy.TLSPassthrough {
		t.Errorf("mtls.partner.example: %+v, want tls passthrough", e)
	}
	var kinds []string
	for _, l := range res.Losses {
		if l.Severity == Warning {
			kinds = append(kinds, l.Key)
		}
	}
	wantIn(t, "warnings", kinds, "network_policies.mcp_tools.endpoints[0]", "network_policies.realtime.endpoints[0]",
		"network_policies.gcs.endpoints[0].credential_binding", "network_middlewares")
	for _, e := range p.Network.Allow {
		if strings.Contains(e.Host, "mcp") || strings.Contains(e.Host, "realtime") {
			t.Errorf("%s allowed though its rules were not imported", e.Host)
		}
	}
}

func TestOpenClaw(t *testing.T) {
	res, p := imported(t, OpenClaw, "openclaw/01-single-agent-locked-down.json5")
	wantIn(t, "read_only", paths(p.Filesystem.ReadOnly), "/srv/openclaw/reference")
	wantIn(t, "read_write", paths(p.Filesystem.ReadWrite), "/srv/openclaw/out", "/srv/openclaw/cache")
	l := p.Process.Limits
	if !*p.Filesystem.IncludeWorkdir || p.Network.Mode != policy.NetworkNone || l.Memory != 2<<30 || l.Pids != 256 || l.CPU != 2 || l.Nofile != 4096 {
		t.Errorf("workdir %v, network %q, limits %+v", *p.Filesystem.IncludeWorkdir, p.Network.Mode, l)
	}
	if len(p.Process.Env.Pass) != 0 || p.Process.Env.Set["PIP_INDEX_URL"] != "https://pypi.internal.example/simple" {
		t.Errorf("env %+v: want nothing passed, docker.env set", p.Process.Env)
	}
	if res.HasErrors() {
		t.Errorf("errors: %v", res.Losses)
	}
}

// TestOpenClawAgents: the default agent's own sandbox (main, off) wins
// over the defaults, other agents' are reported, elevated exec warned
// about, the legacy agents.list read too.
func TestOpenClawAgents(t *testing.T) {
	res, p := imported(t, OpenClaw, "openclaw/02-multi-agent-overrides.json5")
	if *p.Filesystem.IncludeWorkdir || p.Process.Limits.Memory != 1<<30 {
		t.Errorf("workdir %v, memory %d: want none (the default) and 1G", *p.Filesystem.IncludeWorkdir, p.Process.Limits.Memory)
	}
	wantLosses(t, res,
		"info agents.defaults.sandbox.docker.image",
		"info agents.defaults.sandbox.docker.env",
		"info agents.defaults.sandbox.workspaceAccess",
		"info agents.defaults.sandbox.docker.binds[0]",
		"warning agents.entries.main.sandbox.mode",
		"info agents.entries.research.sandbox",
		"info agents.entries.family.sandbox",
		"info tools.sandbox.tools",
		"warning tools.elevated",
	)
	res, _ = imported(t, OpenClaw, "openclaw/03-legacy-agents-list.json5")
	var keys []string
	for _, l := range res.Losses {
		keys = append(keys, l.Key)
	}
	wantIn(t, "losses", keys, "agents.list[1].sandbox", "agents.list[0].sandbox.mode")
}

func TestJSON5(t *testing.T) {
	src := "{\n  // a comment\n  a: 'it''s',\n  \"b\": [1, 2,],\n  /* two\n  lines */ c: {d: true,},\n}\n"
	src = strings.Replace(src, "'it''s'", `'it\'s'`, 1)
	js, err := json5ToJSON([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	root, err := parseTree("x.json5", js)
	if err != nil {
		t.Fatalf("%v\n%s", err, js)
	}
	if str(get(root, "a")) != "it's" || len(items(get(root, "b"))) != 2 || str(get(get(root, "c"), "d")) != "true" {
		t.Errorf("decoded wrong:\n%s", js)
	}
	if line(get(root, "c")) != 6 || line(get(root, "b")) != 4 {
		t.Errorf("lines: c %d (want 6), b %d (want 4)\n%s", line(get(root, "c")), line(get(root, "b")), js)
	}
}

// TestHostileKeys: a source's key with a line break cannot end a comment
// and add a line of its own to the policy.
func TestHostileKeys(t *testing.T) {
	data := []byte("default_permissions = \"p\"\n[permissions.p.filesystem]\n\":minimal\" = \"read\"\n\"/srv/x\\nnetwork:\\n  mode: host\" = \"read\"\n")
	res, p := load(t, Codex, "config.toml", data)
	if p.Network.Mode != policy.NetworkNone || strings.Contains(string(res.YAML), "\n  mode: host") {
		t.Errorf("a key's line break reached the policy:\n%s", res.YAML)
	}
}

// TestAbsoluteDenyInWorkdir: an absolute deny is kept though the path
// looks ungranted (it may be the working directory's), and a pattern
// rooted at / is an error (it can match under granted directories).
func TestAbsoluteDenyInWorkdir(t *testing.T) {
	data := []byte(`{"filesystem": {"denyRead": ["/srv/proj/.env", "/**/*.key"], "denyWrite": ["/srv/proj/sub"], "allowWrite": ["."]}}`)
	res, p := load(t, SRT, "s.json", data)
	wantIn(t, "deny", paths(p.Filesystem.Deny), "/srv/proj/.env")
	wantIn(t, "protected", p.Filesystem.Protected, "/srv/proj/sub")
	wantLosses(t, res, "warning filesystem", "error filesystem.denyRead[1]")
}

// lossOf is the first loss of res with key (nil when none).
func lossOf(res *Result, key string) *Loss {
	for i, l := range res.Losses {
		if l.Key == key {
			return &res.Losses[i]
		}
	}
	return nil
}

// wantLoss fails unless res has a loss of severity sev at key.
func wantLoss(t *testing.T, res *Result, sev Severity, key string) {
	t.Helper()
	for _, l := range res.Losses {
		if l.Key == key && l.Severity == sev {
			return
		}
	}
	t.Errorf("no %s loss at %s in %+v\n%s", sev, key, res.Losses, res.YAML)
}

// TestCodexGrantsBeforeDenies: a deny is judged after every grant of the
// profile, whatever the file's order: a deny of a working-directory path
// written before the entry that grants the working directory is kept.
func TestCodexGrantsBeforeDenies(t *testing.T) {
	data := []byte(`default_permissions = "p"
[permissions.p.filesystem]
":minimal" = "read"
":project_roots" = { "secrets" = "deny" }
":workspace_roots" = { "." = "write" }
`)
	res, p := load(t, Codex, "config.toml", data)
	if !*p.Filesystem.IncludeWorkdir {
		t.Fatalf("the working directory is not granted:\n%s", res.YAML)
	}
	wantIn(t, "deny", paths(p.Filesystem.Deny), "{workdir}/secrets")
}

// TestCodexReadInWritableRoot: a read entry inside a writable root
// outside the working directory stays read-only there (protected), in
// either order of the two entries.
func TestCodexReadInWritableRoot(t *testing.T) {
	for _, body := range []string{
		"\"/srv/shared\" = \"write\"\n\"/srv/shared/golden\" = \"read\"\n",
		"\"/srv/shared/golden\" = \"read\"\n\"/srv/shared\" = \"write\"\n",
	} {
		data := []byte("default_permissions = \"p\"\n[permissions.p]\nextends = \":workspace\"\n[permissions.p.filesystem]\n" + body)
		res, p := load(t, Codex, "config.toml", data)
		wantIn(t, "read_write", paths(p.Filesystem.ReadWrite), "/srv/shared")
		if !slices.Contains(p.Filesystem.Protected, "/srv/shared/golden") && !slices.Contains(paths(p.Filesystem.ReadOnly), "/srv/shared/golden") {
			t.Errorf("/srv/shared/golden is writable:\n%s", res.YAML)
		}
	}
}

// TestCodexEnv: shell_environment_policy as Codex's populate_env: the
// inherit set narrowed by include_only (never widened), the default
// excludes applied first (so include_only cannot bring a *TOKEN* back),
// patterns compared without case, set variables that include_only does
// not match dropped, patterns Corral cannot write left out.
func TestCodexEnv(t *testing.T) {
	for _, c := range []struct {
		name, env        string
		pass, notPass    []string
		set, notSet      []string
		warnKey, infoKey string
	}{
		{name: "default excludes before include_only",
			env:  "inherit = \"all\"\nignore_default_excludes = false\ninclude_only = [\"PATH\", \"LANG\", \"GITHUB_TOKEN\", \"lc_*\", \"*PATH\"]\nset = { FOO = \"1\", MANPATH = \"/x\" }\n",
			pass: []string{"PATH", "LANG"}, notPass: []string{"GITHUB_TOKEN", "*PATH", "lc_*"},
			set: []string{"MANPATH"}, notSet: []string{"FOO"},
			warnKey: "shell_environment_policy.include_only"},
		{name: "include_only narrows core",
			env:  "inherit = \"core\"\ninclude_only = [\"path\", \"FOO\"]\n",
			pass: []string{"PATH"}, notPass: []string{"FOO", "path", "LANG"}},
		{name: "include_only narrows none",
			env:     "inherit = \"none\"\ninclude_only = [\"PATH\"]\n",
			notPass: []string{"PATH"}},
		{name: "exclude without case and by wildcard",
			env:  "inherit = \"all\"\ninclude_only = [\"GITHUB_USER\", \"AWS_REGION\", \"TERM\"]\nexclude = [\"github_*\", \"AWS_?EGION\"]\n",
			pass: []string{"TERM"}, notPass: []string{"GITHUB_USER", "AWS_REGION"}},
		{name: "a prefix an exclude cuts into",
			env:  "inherit = \"all\"\nignore_default_excludes = false\n",
			pass: []string{"PATH", "LC_ALL", "LC_CTYPE"}, notPass: []string{"LC_*"},
			warnKey: "shell_environment_policy.ignore_default_excludes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, p := load(t, Codex, "config.toml", []byte("[shell_environment_policy]\n"+c.env))
			wantIn(t, "env pass", p.Process.Env.Pass, c.pass...)
			wantOut(t, "env pass", p.Process.Env.Pass, c.notPass...)
			for _, k := range c.set {
				if _, ok := p.Process.Env.Set[k]; !ok {
					t.Errorf("%s not set: %v", k, p.Process.Env.Set)
				}
			}
			for _, k := range c.notSet {
				if _, ok := p.Process.Env.Set[k]; ok {
					t.Errorf("%s set, though include_only drops it: %v", k, p.Process.Env.Set)
				}
			}
			if c.warnKey != "" {
				wantLoss(t, res, Warning, c.warnKey)
			}
		})
	}
}

// TestSRTResolvedAddresses: deniedResolvedAddresses are judged by their
// whole range: already so only when every address of it is one Corral's
// proxy refuses (egress.Classify).
func TestSRTResolvedAddresses(t *testing.T) {
	ranges := []string{"10.0.0.0/8", "10.0.0.0/7", "172.16.0.0/11", "8.8.8.8", "169.254.169.254", "fc00::/7",
		"::ffff:10.0.0.0/104", "224.0.0.0/3", "0.0.0.0/0", "192.168.1.0/24", "2001:db8::/31", "::/0"}
	want := []Severity{Info, Error, Error, Error, Info, Info, Info, Info, Error, Info, Error, Error}
	q := make([]string, len(ranges))
	for i, r := range ranges {
		q[i] = strconv.Quote(r)
	}
	data := []byte(`{"network": {"allowedDomains": ["example.com"], "deniedResolvedAddresses": [` + strings.Join(q, ", ") + `]}}`)
	res, _ := load(t, SRT, "s.json", data)
	for i, r := range ranges {
		l := lossOf(res, idx("network.deniedResolvedAddresses", i))
		if l == nil || l.Severity != want[i] {
			t.Errorf("%s: %+v, want %s", r, l, want[i])
		}
	}
}

// TestProxyRefusedAgrees: every address of each proxyRefused range is
// one egress.Classify blocks (checked at its ends and middle), and the
// ranges proxyDepends names are not judged refused.
func TestProxyRefusedAgrees(t *testing.T) {
	for _, r := range proxyRefused {
		first := r.Masked().Addr()
		last := lastAddr(r)
		mid := netip.PrefixFrom(first, r.Bits()+1)
		for _, a := range []netip.Addr{first, last, lastAddr(mid), lastAddr(mid).Next()} {
			if inDepends(a) {
				continue
			}
			if blocked, class := egress.Classify(a); !blocked {
				t.Errorf("%s in refused %s is %s to egress.Classify", a, r, class)
			}
		}
	}
	for _, d := range proxyDepends {
		if proxyRefuses(d) {
			t.Errorf("%s judged refused", d)
		}
	}
	if a := netip.MustParseAddr("::ffff:8.8.8.8"); !inDepends(a) {
		t.Error("the IPv4-mapped range is not in proxyDepends")
	} else if blocked, _ := egress.Classify(a); blocked {
		t.Errorf("%s blocked", a)
	}
}

func inDepends(a netip.Addr) bool {
	return slices.ContainsFunc(proxyDepends, func(d netip.Prefix) bool { return d.Contains(a) })
}

// lastAddr is the last address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// TestOpenShellSelectorAndRulePath: a rule with its own path is kept only
// within the endpoint's path selector: inside it as written, outside it
// dropped (no request reaches it there), and where Corral cannot write
// the intersection, left out with a warning, never widened.
func TestOpenShellSelectorAndRulePath(t *testing.T) {
	data := []byte(`version: 1
network_policies:
  api:
    endpoints:
      - host: api.example.com
        port: 443
        protocol: rest
        enforcement: enforce
        path: "/repos/**"
        rules:
          - allow: {method: get, path: "/repos/*/issues"}
          - allow: {method: GET, path: "/user/**"}
          - allow: {method: POST}
      - {host: other.example.com, port: 443, protocol: rest, enforcement: enforce, path: "/v*/items",
         rules: [{allow: {method: GET, path: "/*/items"}}, {allow: {method: GET, path: "/v2/items"}}]}
`)
	res, p := load(t, OpenShell, "policy.yaml", data)
	api := endpoint(p, "api.example.com")
	if api == nil {
		t.Fatalf("api.example.com not allowed:\n%s", res.YAML)
	}
	var got []string
	for _, r := range api.Rules {
		got = append(got, r.Method+" "+r.Path)
	}
	if !slices.Equal(got, []string{"GET /repos/*/issues", "POST /repos/**"}) {
		t.Errorf("api.example.com rules %q, want GET /repos/*/issues and POST /repos/** (nothing outside /repos)", got)
	}
	wantLoss(t, res, Info, "network_policies.api.endpoints[0].rules[1]")
	other := endpoint(p, "other.example.com")
	if other == nil || len(other.Rules) != 1 || other.Rules[0].Path != "/v2/items" {
		t.Errorf("other.example.com: %+v, want only GET /v2/items", other)
	}
	wantLoss(t, res, Warning, "network_policies.api.endpoints[1].rules[0]")
}

// TestOpenShellAllowedIPs: an endpoint's allowed_ips become allow_private,
// which holds for every allowed host on those ports: an error when a
// wildcard host shares a port, or when the range is not RFC 1918 (which
// OpenShell lets exact hosts reach anyway); info otherwise.
func TestOpenShellAllowedIPs(t *testing.T) {
	data := []byte(`version: 1
network_policies:
  internal:
    endpoints:
      - {host: git.corp.example, port: 443, allowed_ips: ["10.1.0.0/16"]}
      - {host: "*.cdn.example.com", port: 443}
      - {host: cache.corp.example, port: 8080, allowed_ips: ["10.2.0.0/16"]}
      - {host: metrics.corp.example, port: 9090, allowed_ips: ["100.64.0.0/10"]}
      - {host: dash.corp.example, port: 9090}
`)
	res, p := load(t, OpenShell, "policy.yaml", data)
	wantIn(t, "allow_private", hosts(p.Network.AllowPrivate), "10.1.0.0/16:443", "10.2.0.0/16:8080")
	wantLoss(t, res, Error, "network_policies.internal.endpoints[0].allowed_ips")
	wantLoss(t, res, Info, "network_policies.internal.endpoints[2].allowed_ips")
	wantLoss(t, res, Error, "network_policies.internal.endpoints[3].allowed_ips")
}

// TestContainerSystemDirs: OpenShell and OpenClaw run in a container,
// whose system directories are its image's: the import says Corral grants
// the host's in their place, and does not grant /opt, which neither
// source shows (unless it lists it).
func TestContainerSystemDirs(t *testing.T) {
	for _, c := range []struct {
		src       Source
		file, key string
		data      string
	}{
		{OpenShell, "policy.yaml", "filesystem_policy", "version: 1\nfilesystem_policy: {include_workdir: true, read_only: [/usr]}\n"},
		{OpenClaw, "openclaw.json", "agents.defaults.sandbox.docker.image", `{agents: {defaults: {sandbox: {mode: "all", workspaceAccess: "rw"}}}}`},
	} {
		res, p := load(t, c.src, c.file, []byte(c.data))
		wantOut(t, string(c.src)+" read_only", paths(p.Filesystem.ReadOnly), "/opt")
		wantIn(t, string(c.src)+" read_only", paths(p.Filesystem.ReadOnly), "/usr", "/etc")
		if l := lossOf(res, c.key); l == nil || !strings.Contains(l.Message, "host's /usr") || !strings.Contains(l.Message, "/etc") {
			t.Errorf("%s: no loss naming the host's system directories: %+v", c.src, res.Losses)
		}
	}
	res, p := load(t, OpenShell, "policy.yaml", []byte("version: 1\nfilesystem_policy: {read_only: [/opt/tools]}\n"))
	wantIn(t, "read_only", paths(p.Filesystem.ReadOnly), "/opt/tools")
	if !strings.Contains(string(res.YAML), `"/opt/tools", optional: true}  # openshell`) {
		t.Errorf("/opt/tools not granted from the source:\n%s", res.YAML)
	}
}

// TestUnvalidatedValues: a value the policy would refuse never reaches
// it (Import would fail with "internal error"): each is a loss at its
// key, a warning where leaving it out is stricter, an error where it is
// looser (a deny).
func TestUnvalidatedValues(t *testing.T) {
	for _, c := range []struct {
		src       Source
		data      string
		sev       Severity
		key       string
		wantAllow string // a host:port the result allows (hosts() form), if any
	}{
		{SRT, `{"network": {"allowedDomains": ["[::1]:8080"]}}`, "", "", "::1:8080"},
		{SRT, `{"network": {"allowedDomains": ["*example.com"]}}`, Warning, "network.allowedDomains[0]", ""},
		{SRT, `{"network": {"allowedDomains": ["*.com"]}}`, Warning, "network.allowedDomains[0]", ""},
		{SRT, `{"network": {"allowedDomains": ["intranet"]}}`, Warning, "network.allowedDomains[0]", ""},
		{SRT, `{"network": {"allowedDomains": ["a.example.com"], "deniedDomains": ["*.com"]}}`, Error, "network.deniedDomains[0]", ""},
		{SRT, `{"network": {"allowedDomains": ["a.example.com"], "deniedDomains": ["*example.com"]}}`, Info, "network.deniedDomains[0]", ""},
		{SRT, `{"filesystem": {"allowWrite": ["~/../x"]}}`, Warning, "filesystem.allowWrite[0]", ""},
		{SRT, `{"filesystem": {"denyRead": ["~/../x"]}}`, Error, "filesystem.denyRead[0]", ""},
		{SRT, `{"filesystem": {"denyRead": ["~/../~/.ssh"]}}`, Error, "filesystem.denyRead[0]", ""},
		{SRT, `{"filesystem": {"allowWrite": ["/var/tmp"]}}`, Warning, "filesystem.allowWrite[0]", ""},
		{OpenShell, "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - {host: \"*-x.googleapis.com\", port: 443}\n", Warning, "network_policies.p.endpoints[0]", ""},
		{OpenShell, "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - {host: a.example.com, port: 0}\n", Warning, "network_policies.p.endpoints[0].port", ""},
		{OpenShell, "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - {host: a.example.com, ports: [443, 70000]}\n", Warning, "network_policies.p.endpoints[0].ports", ""},
		{OpenShell, "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - {host: a.example.com}\n", Warning, "network_policies.p.endpoints[0]", ""},
		{OpenShell, "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - {host: a.example.com, port: 443, protocol: rest, enforcement: enforce, access: readonly}\n", Warning, "network_policies.p.endpoints[0].access", ""},
		{OpenShell, "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - {host: a.example.com, port: 443, protocol: rest, enforcement: enforce, rules: [{allow: {method: FETCH}}]}\n", Warning, "network_policies.p.endpoints[0].rules[0]", ""},
		{Codex, "default_permissions = \"p\"\n[features]\nnetwork_proxy = true\n[permissions.p]\nextends = \":workspace\"\n[permissions.p.network]\nenabled = true\n[permissions.p.network.domains]\n\"api.example.com:8443\" = \"allow\"\n", "", "", "api.example.com"},
		{Codex, "default_permissions = \"p\"\n[features]\nnetwork_proxy = true\n[permissions.p]\nextends = \":workspace\"\n[permissions.p.network]\nenabled = true\n[permissions.p.network.domains]\n\"a.example.com\" = \"allow\"\n\"api-*.example.com\" = \"deny\"\n", Error, "permissions.p.network.domains.api-*.example.com", ""},
		{OpenClaw, `{agents: {defaults: {sandbox: {docker: {env: {"A=B": "1", "OK": "2"}}}}}}`, Warning, "agents.defaults.sandbox.docker.env.A=B", ""},
		{OpenClaw, `{agents: {defaults: {sandbox: {docker: {cpus: -1}}}}}`, Warning, "agents.defaults.sandbox.docker.cpus", ""},
		{OpenClaw, `{agents: {defaults: {sandbox: {docker: {cpus: 0.001}}}}}`, Warning, "agents.defaults.sandbox.docker.cpus", ""},
		{OpenClaw, `{agents: {defaults: {sandbox: {docker: {memory: "-5m"}}}}}`, Warning, "agents.defaults.sandbox.docker.memory", ""},
		{Codex, "[shell_environment_policy]\ninherit = \"all\"\ninclude_only = [\"A=B\"]\n", Warning, "shell_environment_policy.include_only[0]", ""},
	} {
		res, err := Import(c.src, "f", []byte(c.data))
		if err != nil {
			t.Errorf("%s %s: %v", c.src, c.data, err)
			continue
		}
		p, err := policy.ParseFor(res.YAML, "x.yaml", policy.OSLinux)
		if err != nil {
			t.Errorf("%s %s: %v", c.src, c.data, err)
			continue
		}
		if c.key != "" {
			wantLoss(t, res, c.sev, c.key)
		}
		if c.wantAllow != "" {
			wantIn(t, "allow", append(hosts(p.Network.Allow), hosts(p.Network.AllowPrivate)...), c.wantAllow)
		}
	}
}

// TestSRTDenyWriteWorkdir: denyWrite of the working directory makes it
// read-only (a protected {workdir} is refused when corral runs), and
// beats an allowWrite inside it, as srt's denyWrite beats allowWrite.
func TestSRTDenyWriteWorkdir(t *testing.T) {
	res, p := load(t, SRT, "s.json", []byte(`{"filesystem": {"allowWrite": [".", "src", "/srv/out"], "denyWrite": [".", "/srv"]}}`))
	if *p.Filesystem.IncludeWorkdir || !slices.Contains(paths(p.Filesystem.ReadOnly), "{workdir}") {
		t.Errorf("include_workdir %v, read_only %v: want the working directory read-only", *p.Filesystem.IncludeWorkdir, paths(p.Filesystem.ReadOnly))
	}
	wantOut(t, "read_write", paths(p.Filesystem.ReadWrite), "{workdir}/src", "/srv/out")
	wantOut(t, "protected", p.Filesystem.Protected, "{workdir}")
	wantIn(t, "read_only", paths(p.Filesystem.ReadOnly), "/srv/out")
	wantLoss(t, res, Info, "filesystem.denyWrite[0]")
}

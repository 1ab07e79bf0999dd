package main

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/egress"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/session"
)

// egressCases are network sections on which `corral policy validate` and
// `corral run` once disagreed (validate passed, the run's proxy refused
// the rules), and controls both accept.
var egressCases = []struct {
	name, network string
	valid         bool
}{
	{"zone in an allow host", `allow: [{host: "fe80::1%lo"}]`, false},
	{"zone in a deny host", `deny: [{host: "fe80::1%eth0"}]`, false},
	{"zone in allow_private", `allow_private: [{host: "fe80::1%lo"}]`, false},
	{"zone in a hosts value", `hosts: {x: "fe80::1%lo"}`, false},
	{"IP with a trailing dot", `allow: [{host: "203.0.113.7."}]`, false},
	{"IPv6 with a trailing dot", `deny: [{host: "::1."}]`, false},
	{"CIDR with a trailing dot", `allow: [{host: "10.0.0.0/8."}]`, false},
	{"allow_private IP with a trailing dot", `allow_private: [{host: "127.0.0.1."}]`, false},
	{"short IPv4", `allow: [{host: "127.1"}]`, false},
	{"IPv4 with a leading zero", `deny: [{host: "010.0.0.1"}]`, false},
	{"numeric top-level label", `allow: [{host: "example.123"}]`, false},
	{"wildcard over a numeric name", `allow: [{host: "*.10.0.0"}]`, false},
	{"name longer than 253 bytes", `allow: [{host: "` + strings.Repeat("a.", 127) + `com"}]`, false},
	{"Kelvin sign", "allow: [{host: \"\u212a.example.com\"}]", false},
	{"IP as a hosts key", `hosts: {"10.0.0.1": 10.0.0.2}`, false},
	{"CIDR as a hosts key", `hosts: {"10.0.0.0/8": 10.0.0.2}`, false},
	{"short IPv4 as a hosts key", `hosts: {"127.1": 10.0.0.2}`, false},
	{"hosts keys differing in case", `hosts: {Example.com: 10.0.0.2, example.com: 10.0.0.3}`, false},
	{"hosts keys differing in a trailing dot", `hosts: {"example.com.": 10.0.0.2, example.com: 10.0.0.3}`, false},
	{"wildcard hosts key", `hosts: {"*.example.com": 10.0.0.2}`, false},
	{"name", `allow: [{host: api.example.com, ports: [443]}]`, true},
	{"wildcards", `allow: [{host: "*.example.com"}, {host: "**.Example.COM."}]`, true},
	{"IPs and CIDRs", `allow: [{host: 203.0.113.7}, {host: "::ffff:1.2.3.4"}, {host: 10.0.0.0/8}]`, true},
	{"digits in a first label", `allow: [{host: 1e100.net}, {host: 3com.example}]`, true},
	{"punycode", `allow: [{host: xn--bcher-kva.example}]`, true},
	{"name with a trailing dot", `deny: [{host: example.com.}]`, true},
	{"hosts", `hosts: {db.internal: 10.0.0.5, "api.example.com.": "::1"}`, true},
}

// positioned matches an error that starts with FILE:LINE:COL (FILE may
// start with a drive, C:\...).
var positioned = regexp.MustCompile(`^(?:[A-Za-z]:)?[^:]+:\d+:\d+: `)

// `corral policy validate` (the command as the CLI runs it) and the run
// path (load, resolve, the egress proxy's rule check in session) give the
// same verdict on every case, and validate's refusal carries a position.
func TestPolicyValidateAgreesWithRun(t *testing.T) {
	dir := t.TempDir()
	for i, c := range egressCases {
		file := filepath.Join(dir, "p"+string(rune('a'+i))+".yaml")
		src := "version: 1\nnetwork:\n  mode: proxy\n  " + c.network + "\n"
		if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		verr := runValidate(t, file, dir)
		validated := !isPolicyError(verr) // a host without a provider is not the policy's fault
		rerr := runCheck(file, dir)
		if validated != (rerr == nil) || validated != c.valid {
			t.Errorf("%s: validate: %v; run: %v; want valid %v", c.name, verr, rerr, c.valid)
			continue
		}
		if !validated && !positioned.MatchString(verr.Error()) {
			t.Errorf("%s: validate's error has no file:line:col: %v", c.name, verr)
		}
	}
}

// runValidate runs `corral policy validate -C dir FILE`, its output
// discarded.
func runValidate(t *testing.T, file, dir string) error {
	t.Helper()
	out, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	stdout := os.Stdout
	os.Stdout = out
	defer func() { os.Stdout = stdout }()
	cmd := newPolicyCmd()
	cmd.SetArgs([]string{"validate", "-C", dir, file})
	cmd.SetOut(out)
	cmd.SetErr(out)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	return cmd.Execute()
}

// runCheck is what `corral run` checks of a policy before anything runs:
// load, resolve, then the egress proxy's rules (session.Open's
// checkEgress).
func runCheck(file, dir string) error {
	p, err := loadPolicy(file)
	if err != nil {
		return err
	}
	r, err := resolvePolicy(p, dir)
	if err != nil {
		return err
	}
	if r.Network != policy.NetworkProxy {
		return nil
	}
	return session.CheckRules(r.Egress)
}

// FuzzPolicyRefusesWhatProxyRefuses: every endpoint host, hosts key and
// hosts value the egress proxy refuses, policy validation refuses too
// (with a position, when written in a file), so no front end starts a
// sandbox on rules its proxy will not take. Policy may refuse more (a
// bracketed IP, a single-label allow host without single_label).
func FuzzPolicyRefusesWhatProxyRefuses(f *testing.F) {
	for _, s := range []string{"fe80::1%lo", "1.2.3.4.", "10.0.0.0/8.", "127.1", "010.0.0.1", "example.123", "*.10.0.0",
		"\u212a.example.com", "api.example.com", "*.example.com", "**.a.b", "::1", "[::1]", "10.0.0.0/8", "a..b", "-a.b", "a_b.c",
		"Example.COM.", " a.b", "1e100.net", "x", "*", "*.com", strings.Repeat("a.", 127) + "com"} {
		f.Add(s, "10.0.0.1")
	}
	for _, s := range [][2]string{{"GET", "/a/**"}, {"get", "/a/**b"}, {"", "read-only"}, {"*", ""}, {"inspect", "/x?y"}, {"passthrough", "/"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, host, addr string) {
		check := func(what string, n policy.Network) {
			n.Mode = policy.NetworkProxy
			p := &policy.Policy{Version: policy.Version, Network: n}
			if session.CheckRules(n) != nil && p.Validate() == nil {
				t.Errorf("%s: the proxy refuses %+v, policy validation accepts it", what, n)
			}
		}
		check("deny host", policy.Network{Deny: []policy.Endpoint{{Host: host}}})
		check("allow_private host", policy.Network{AllowPrivate: []policy.Endpoint{{Host: host}}})
		check("allow host", policy.Network{Allow: []policy.Endpoint{{Host: host, SingleLabel: !strings.Contains(host, ".")}}})
		check("hosts key", policy.Network{Hosts: map[string]string{host: "10.0.0.1"}})
		check("hosts value", policy.Network{Hosts: map[string]string{"h.example": addr}})
		check("hosts keys", policy.Network{Hosts: map[string]string{host: "10.0.0.1", strings.ToLower(strings.TrimSuffix(host, ".")): "10.0.0.2"}})
		check("L7 rule", policy.Network{Allow: []policy.Endpoint{{Host: "a.example.com", Access: policy.HTTPAccess(addr),
			Rules: []policy.HTTPRule{{Method: host, Path: addr, Query: map[string]policy.Globs{host: {addr}}}}}}})
		check("L7 deny rule", policy.Network{Allow: []policy.Endpoint{{Host: "a.example.com", TLS: policy.TLSMode(host),
			DenyRules: []policy.HTTPRule{{Method: addr, Path: host}}}}})
	})
}

// `corral policy explain` shows each credential: where its value is read
// (never the value), what the sandbox sees, on_mismatch and each
// endpoint's places; the JSON form carries no value either.
func TestExplainCredentials(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("EXPLAIN_KEY", "real-value-never-shown")
	file := filepath.Join(dir, "p.yaml")
	src := `version: 1
network:
  mode: proxy
  allow: [{host: api.example.com, tls: inspect}]
credentials:
  - name: model
    source: {env: EXPLAIN_KEY}
    expose: {env: MODEL_KEY, file: /run/secrets/model}
    shape: "sk-{random}"
    endpoints: [{host: api.example.com, path: /v1/}]
  - name: gh
    source: {command: [gh, auth, token, --secret-arg]}
    expose: {env: GH_TOKEN}
    on_mismatch: forward
    endpoints: [{host: api.example.com, basic: password, query: t, body: {max: 1M}}]
`
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := loadPolicy(file)
	if err != nil {
		t.Fatal(err)
	}
	r, err := resolvePolicy(p, dir)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(credentialLines(r.Credentials), "\n")
	for _, want := range []string{
		"model (credentials[0])",
		"value:    read from the caller's variable EXPLAIN_KEY (never in the sandbox)",
		"a placeholder shaped sk-{random} in $MODEL_KEY and /run/secrets/model",
		"on_mismatch deny: the placeholder anywhere but the places below is refused (403)",
		`to api.example.com:443 /v1/: header "Authorization: Bearer {}"`,
		"value:    the output of gh (3 arguments; timeout 10s)",
		"on_mismatch forward:",
		"to api.example.com:443 any path: Basic auth password, query t, bodies up to 1M",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("explain lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "--secret-arg") {
		t.Errorf("explain shows a command's arguments:\n%s", got)
	}
	// The command as run: text and JSON, when a provider can map the policy here.
	for _, args := range [][]string{{"explain", "-C", dir, file}, {"explain", "-o", "json", "-C", dir, file}} {
		text, err := runPolicyCmd(t, args...)
		if len(text) == 0 {
			t.Logf("%v: no plan here (%v)", args, err)
			continue
		}
		if strings.Contains(string(text), "real-value-never-shown") {
			t.Errorf("%v shows the value:\n%s", args, text)
		}
		if args[1] != "-o" && !strings.Contains(string(text), "\ncredentials:\n  model (credentials[0])") {
			t.Errorf("%v has no credentials section:\n%s", args, text)
		}
	}
}

// FuzzCredentialReachAgreesWithProxy: policy validation accepts a
// credential endpoint (whose own syntax is valid) exactly when the egress
// proxy takes its binding at start (an inspected allow rule admits its
// host and port, no deny rule matches), so that validate and run agree,
// and policy's copy of the host matching is the proxy's.
func FuzzCredentialReachAgreesWithProxy(f *testing.F) {
	for _, s := range []struct {
		allow      string
		tls        uint8
		allowPort  uint16
		deny, host string
		port       uint16
	}{
		{"api.a.test", 1, 0, "", "api.a.test", 0},
		{"api.a.test", 0, 0, "", "api.a.test", 0},
		{"api.a.test", 2, 0, "", "api.a.test", 0},
		{"*.a.test", 1, 0, "", "api.a.test", 0},
		{"*.a.test", 1, 0, "", "x.api.a.test", 0},
		{"**.a.test", 1, 0, "", "x.api.a.test", 0},
		{"**.a.test", 1, 0, "api.a.test", "api.a.test", 0},
		{"**.a.test", 1, 0, "*.a.test", "x.api.a.test", 0},
		{"API.A.test.", 1, 8443, "", "api.a.test", 8443},
		{"api.a.test", 1, 8443, "", "api.a.test", 0},
		{"10.0.0.0/8", 1, 0, "", "10.1.2.3", 0},
		{"::ffff:10.0.0.0/104", 1, 0, "", "10.1.2.3", 0},
		{"10.0.0.0/8", 1, 0, "10.1.0.0/16", "10.1.2.3", 0},
		{"::/0", 1, 0, "", "::1", 443},
		{"::/0", 1, 0, "", "10.1.2.3", 443},
		{"a.test", 1, 0, "", "a.test", 80},
	} {
		f.Add(s.allow, s.tls, s.allowPort, s.deny, s.host, s.port)
	}
	f.Fuzz(func(t *testing.T, allow string, tls uint8, allowPort uint16, deny, host string, port uint16) {
		mode := []policy.TLSMode{"", policy.TLSInspect, policy.TLSPassthrough}[tls%3]
		ports := func(p uint16) []int {
			if p == 0 {
				return nil
			}
			return []int{int(p)}
		}
		mk := func(n policy.Network) *policy.Policy {
			n.Mode = policy.NetworkProxy
			return &policy.Policy{Version: policy.Version, Network: n, Credentials: []policy.Credential{{
				Name: "x", Source: policy.CredentialSource{Env: "K"}, Expose: policy.CredentialExpose{Env: "K"},
				Endpoints: []policy.CredentialEndpoint{{Host: host, Ports: ports(port)}}}}}
		}
		// The endpoint's own syntax: valid when an entry for exactly it is.
		if mk(policy.Network{Allow: []policy.Endpoint{{Host: host, TLS: policy.TLSInspect, Ports: ports(port), SingleLabel: !strings.Contains(host, ".")}}}).Validate() != nil {
			return
		}
		n := policy.Network{Allow: []policy.Endpoint{{Host: allow, TLS: mode, Ports: ports(allowPort), SingleLabel: !strings.Contains(allow, ".")}}}
		if deny != "" {
			n.Deny = []policy.Endpoint{{Host: deny}}
		}
		p := mk(n)
		if (&policy.Policy{Version: policy.Version, Network: p.Network}).Validate() != nil {
			return // the rules themselves are refused
		}
		validated := p.Validate()
		rules := session.Rules(p.Network)
		ca, err := egress.NewCA(rules)
		if err != nil {
			if validated == nil {
				t.Errorf("policy accepts %+v, which inspects nothing the proxy can serve: %v", p.Network, err)
			}
			return
		}
		c := &egress.Credential{Name: "x", Placeholder: "corral-0123456789abcdefghijklmnopqrstuv", Bindings: []egress.Binding{{Host: host, Ports: ports(port)}}}
		c.SetValue("value-0123456789", time.Time{})
		px, perr := egress.New(egress.Config{Policy: rules, CA: ca, Credentials: []*egress.Credential{c}})
		if perr == nil {
			px.Close()
		}
		if (validated == nil) != (perr == nil) {
			t.Errorf("endpoint %s port %d with allow %q (%q, ports %v), deny %q: policy: %v; proxy: %v", host, port, allow, mode, ports(allowPort), deny, validated, perr)
		}
	})
}

// `corral policy explain` prints the consent ceiling.
func TestExplainConsent(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("consent is not available for Windows policies (policy refuses the section)")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "p.yaml")
	src := "version: 1\nnetwork: {mode: proxy}\nconsent:\n  folders: {ask: [\"" + dir + "/src/**\"], never: [\"" + dir + "/src/.ssh\"]}\n  hosts: {ask: [\"*.example.com\"]}\n  timeout: 2m\n"
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	text, err := runPolicyCmd(t, "explain", "-C", dir, file)
	if len(text) == 0 {
		t.Skipf("no plan here (%v)", err)
	}
	canon, _ := filepath.EvalSymlinks(dir)
	for _, want := range []string{"\nconsent:\n  folders may be asked for", canon + "/src/**  (consent.folders.ask[0])", "never " + canon + "/src/.ssh",
		"read-only only", "*.example.com:443  (consent.hosts.ask[0])", "timeout 2m0s"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("explain lacks %q:\n%s", want, text)
		}
	}
}

// runPolicyCmd runs `corral policy ARGS...` and returns what it printed.
func runPolicyCmd(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = f
	cmd := newPolicyCmd()
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err = cmd.Execute()
	os.Stdout = stdout
	f.Close()
	text, _ := os.ReadFile(out)
	return text, err
}

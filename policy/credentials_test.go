//go:build !windows

// Linux policies: their paths resolve on a Linux host only (a Windows host
// refuses them). The Windows policy tests are winpath_test.go and
// winresolve_windows_test.go.

package policy

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

// credNetwork is the network section the credential tests bind to: lines
// 2 to 14 of credPolicy, so that the credentials section starts at line
// 15 and its first entry at line 16.
const credNetwork = `network:
  mode: proxy
  allow:
    - {host: api.a.test, tls: inspect}
    - {host: "*.b.test"}
    - {host: c.test, tls: passthrough}
    - {host: d.test, tls: inspect, ports: [8443]}
    - {host: "**.a.test", tls: inspect}
    - {host: "10.1.0.0/16", rules: [{path: /**}]}
  deny:
    - {host: e.a.test}
    - {host: 10.9.0.0/16}
  hosts: {f.a.test: 10.9.0.1}
`

// credPolicy is a policy whose credentials section holds entries (YAML
// lines, each entry starting "  - "), followed by extra top-level text.
func credPolicy(entries, extra string) string {
	return "version: 1\n" + credNetwork + "credentials:\n" + entries + extra
}

// okEntry is a credential every check accepts.
const okEntry = "  - {name: x, source: {env: X_KEY}, expose: {env: X_KEY}, endpoints: [{host: api.a.test}]}\n"

// positionOf is the 1-based line and column of the first occurrence of
// at in src.
func positionOf(t *testing.T, src, at string) (int, int) {
	t.Helper()
	i := strings.Index(src, at)
	if i < 0 {
		t.Fatalf("%q not in the policy:\n%s", at, src)
	}
	line := strings.Count(src[:i], "\n") + 1
	return line, i - strings.LastIndexByte(src[:i], '\n')
}

// goodCredentials is a credentials section with every field, which
// Parse and the schema accept.
const goodCredentials = `  - name: openai
    source: {env: OPENAI_API_KEY}
    expose: {env: OPENAI_API_KEY, file: /run/secrets/openai}
    shape: "sk-{random}"
    on_mismatch: forward
    endpoints:
      - {host: api.a.test, path: /v1/, header: "Authorization: Bearer {}"}
      - {host: x.a.test, ports: [443], path: /v1/chat/completions, query: api_key, body: {max: 1M}}
  - name: github
    source: {command: [gh, auth, token], timeout: 5s}
    expose: {env: GH_TOKEN}
    shape: "ghp_{random:36}"
    endpoints:
      - {host: d.test, ports: [8443], basic: password}
      - {host: 10.1.2.3, header: "X-Api-Key:{}"}
  - {name: file_1, source: {file: ~/.key}, expose: {file: ~/.config/key}, endpoints: [{host: api.a.test, basic: user}]}
  - {name: store-2, source: {stored: true}, expose: {env: S}, endpoints: [{host: api.a.test, path: /}]}
`

func TestCredentialsAccepted(t *testing.T) {
	src := credPolicy(goodCredentials, "")
	p, err := Parse([]byte(src), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c := p.Credentials
	if len(c) != 4 || c[0].Endpoints[1].Body.Max != 1<<20 || c[1].Source.Timeout.String() != "5s" || c[0].OnMismatch != MismatchForward {
		t.Errorf("credentials = %+v", c)
	}
}

func TestCredentialsRefused(t *testing.T) {
	two := func(a, b string) string { return a + b }
	for _, c := range []struct {
		name, entries, extra string
		field, at, msg       string
	}{
		{"name syntax", "  - {name: X, source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].name", "X, source", "not lower-case letters"},
		{"name too long", "  - {name: " + strings.Repeat("a", 65) + ", source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].name", "aaaa", "65 bytes long, more than 64"},
		{"name missing", "  - {source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].name", "{source", "needs a name"},
		{"name twice", two(okEntry, "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test}]}\n"), "",
			"credentials[1].name", "x, source: {env: K}", "credentials[0] is named \"x\" too"},
		{"no source", "  - {name: x, source: {}, expose: {env: K}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].source", "{}, expose", "has no source"},
		{"source absent", "  - {name: x, expose: {env: K}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].source", "{name", "has no source"},
		{"two sources", "  - {name: x, source: {env: K, file: /k}, expose: {env: K}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].source.file", "/k}", "both env and file"},
		{"stored with env", "  - {name: x, source: {env: K, stored: true}, expose: {env: K}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].source.stored", "true}", "both env and stored"},
		{"source env name", "  - {name: x, source: {env: 1K}, expose: {env: K}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].source.env", "1K}", "not an environment variable name"},
		{"source env empty", "  - {name: x, source: {env: \"\"}, expose: {env: K}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].source.env", "\"\"}", "not an environment variable name"},
		{"source file relative", "  - {name: x, source: {file: key.txt}, expose: {env: K}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].source.file", "key.txt", "relative path"},
		{"source file dotdot", "  - {name: x, source: {file: ~/../k}, expose: {env: K}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].source.file", "~/../k", `".." component`},
		{"command empty", "  - {name: x, source: {command: []}, expose: {env: K}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].source.command", "[]}", "the command is empty"},
		{"command program empty", "  - {name: x, source: {command: [\"\", a]}, expose: {env: K}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].source.command[0]", "\"\", a]", "program is empty"},
		{"timeout without command", "  - {name: x, source: {env: K, timeout: 5s}, expose: {env: K}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].source.timeout", "5s}", "only to a command"},
		{"timeout too long", "  - {name: x, source: {command: [gh], timeout: 6m}, expose: {env: K}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].source.timeout", "6m}", "longer than 5m0s"},
		{"timeout zero", "  - {name: x, source: {command: [gh], timeout: 0}, expose: {env: K}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].source.timeout", "0}", "greater than 0"},
		{"exposes nothing", "  - {name: x, source: {env: K}, expose: {}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].expose", "{}, endpoints", "exposes nothing"},
		{"expose absent", "  - {name: x, source: {env: K}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].expose", "{name", "exposes nothing"},
		{"expose HOME", "  - {name: x, source: {env: K}, expose: {env: HOME}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].expose.env", "HOME}", "the sandbox's own"},
		{"expose PATH", "  - {name: x, source: {env: K}, expose: {env: PATH}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].expose.env", "PATH}", "the sandbox's own"},
		{"expose env name", "  - {name: x, source: {env: K}, expose: {env: A-B}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].expose.env", "A-B}", "not an environment variable name"},
		{"expose env also set", okEntry, "process:\n  env: {set: {X_KEY: v}}\n",
			"credentials[0].expose.env", "X_KEY}, endpoints", "process.env.set sets X_KEY too"},
		{"expose env twice", two(okEntry, "  - {name: y, source: {env: Y}, expose: {env: X_KEY}, endpoints: [{host: x.a.test}]}\n"), "",
			"credentials[1].expose.env", "X_KEY}, endpoints: [{host: x.a.test", "credentials[0] exposes X_KEY too"},
		{"expose file relative", "  - {name: x, source: {env: K}, expose: {file: run/k}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].expose.file", "run/k", "relative path"},
		{"expose file unclean", "  - {name: x, source: {env: K}, expose: {file: /run/s/../k}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].expose.file", "/run/s/../k", "not clean"},
		{"expose file trailing slash", "  - {name: x, source: {env: K}, expose: {file: ~/k/}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].expose.file", "~/k/", "not clean"},
		{"expose file /proc", "  - {name: x, source: {env: K}, expose: {file: /proc/k}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].expose.file", "/proc/k", "under /proc"},
		{"expose file /dev", "  - {name: x, source: {env: K}, expose: {file: /dev/shm/k}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].expose.file", "/dev/shm/k", "under /dev"},
		{"expose file /run/corral", "  - {name: x, source: {env: K}, expose: {file: /run/corral/k}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].expose.file", "/run/corral/k", "under /run/corral"},
		{"expose file workdir", "  - {name: x, source: {env: K}, expose: {file: \"{workdir}/k\"}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].expose.file", "\"{workdir}/k\"", "working directory, which is a grant"},
		{"expose file home", "  - {name: x, source: {env: K}, expose: {file: \"~\"}, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].expose.file", "\"~\"", "a directory, not a file"},
		{"expose file twice", two("  - {name: x, source: {env: K}, expose: {file: /run/k}, endpoints: [{host: api.a.test}]}\n", "  - {name: y, source: {env: K}, expose: {file: /run/k}, endpoints: [{host: x.a.test}]}\n"), "",
			"credentials[1].expose.file", "/run/k}, endpoints: [{host: x.a.test", "credentials[0] exposes /run/k too"},
		{"shape short", "  - {name: x, source: {env: K}, expose: {env: K}, shape: \"sk-{random:21}\", endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].shape", "\"sk-", "needs N from 22 to 128"},
		{"shape long", "  - {name: x, source: {env: K}, expose: {env: K}, shape: \"{random:129}\", endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].shape", "\"{random:129}", "needs N from 22 to 128"},
		{"shape twice", "  - {name: x, source: {env: K}, expose: {env: K}, shape: \"{random}{random}\", endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].shape", "\"{random}{", "more than one"},
		{"shape none", "  - {name: x, source: {env: K}, expose: {env: K}, shape: sk-key, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].shape", "sk-key", "has no {random}"},
		{"shape token", "  - {name: x, source: {env: K}, expose: {env: K}, shape: \"{rand}\", endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].shape", "\"{rand}\"", "is not {random}"},
		{"shape literal", "  - {name: x, source: {env: K}, expose: {env: K}, shape: \"sk {random}\", endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].shape", "\"sk {", `" " is not a letter`},
		{"on_mismatch", "  - {name: x, source: {env: K}, expose: {env: K}, on_mismatch: drop, endpoints: [{host: api.a.test}]}\n", "",
			"credentials[0].on_mismatch", "drop", `"drop" is not deny or forward`},
		{"no endpoints", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: []}\n", "",
			"credentials[0].endpoints", "[]}", "has no endpoints"},
		{"endpoints absent", "  - {name: x, source: {env: K}, expose: {env: K}}\n", "",
			"credentials[0].endpoints", "{name", "has no endpoints"},
		{"host missing", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{path: /}]}\n", "",
			"credentials[0].endpoints[0].host", "{path: /}", "empty host"},
		{"host wildcard", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: \"*.a.test\"}]}\n", "",
			"credentials[0].endpoints[0].host", "\"*.a.test\"", "without wildcards"},
		{"host CIDR", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: 10.1.0.0/16}]}\n", "",
			"credentials[0].endpoints[0].host", "10.1.0.0/16}", "not a CIDR"},
		{"host upper case", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: API.a.test}]}\n", "",
			"credentials[0].endpoints[0].host", "API.a.test", "not in canonical form"},
		{"host trailing dot", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test.}]}\n", "",
			"credentials[0].endpoints[0].host", "api.a.test.}", "not in canonical form"},
		{"host mapped IP", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: \"::ffff:10.1.2.3\"}]}\n", "",
			"credentials[0].endpoints[0].host", "\"::ffff", "not in canonical form"},
		{"host name", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: a_b.a.test}]}\n", "",
			"credentials[0].endpoints[0].host", "a_b.a.test", "not a valid host name"},
		{"port range", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test, ports: [443, 0]}]}\n", "",
			"credentials[0].endpoints[0].ports[1]", "0]", "outside 1-65535"},
		{"port 80", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test, ports: [80]}]}\n", "",
			"credentials[0].endpoints[0].ports[0]", "80]", "plain HTTP"},
		{"path relative", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test, path: v1/}]}\n", "",
			"credentials[0].endpoints[0].path", "v1/}", "does not start with /"},
		{"path glob", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test, path: /v1/*}]}\n", "",
			"credentials[0].endpoints[0].path", "/v1/*", "not a glob"},
		{"path dotdot", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test, path: /a/../b}]}\n", "",
			"credentials[0].endpoints[0].path", "/a/../b", `".." segment`},
		{"path escaped", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test, path: /a%41/}]}\n", "",
			"credentials[0].endpoints[0].path", "/a%41/", "percent-escape"},
		{"path query", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test, path: \"/a?b\"}]}\n", "",
			"credentials[0].endpoints[0].path", "\"/a?b\"", "query or fragment"},
		{"path control", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test, path: \"/a\\tb\"}]}\n", "",
			"credentials[0].endpoints[0].path", "\"/a\\tb\"", "control byte"},
		{"header no colon", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test, header: \"Authorization Bearer {}\"}]}\n", "",
			"credentials[0].endpoints[0].header", "\"Authorization Bearer", "no ':'"},
		{"header no {}", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test, header: \"Authorization: Bearer\"}]}\n", "",
			"credentials[0].endpoints[0].header", "\"Authorization: Bearer\"", `"{}" 0 times`},
		{"header two {}", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test, header: \"X-Key: {}{}\"}]}\n", "",
			"credentials[0].endpoints[0].header", "\"X-Key", `"{}" 2 times`},
		{"header name", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test, header: \"X Key: {}\"}]}\n", "",
			"credentials[0].endpoints[0].header", "\"X Key", "not an HTTP field name"},
		{"header empty", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test, header: \"\"}]}\n", "",
			"credentials[0].endpoints[0].header", "\"\"}", "no ':'"},
		{"header Host", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test, header: \"host: {}\"}]}\n", "",
			"credentials[0].endpoints[0].header", "\"host", "the proxy's or the connection's"},
		{"header Proxy-Authorization", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test, header: \"Proxy-Authorization: Basic {}\"}]}\n", "",
			"credentials[0].endpoints[0].header", "\"Proxy-", "the proxy's or the connection's"},
		{"header template control", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test, header: \"X-Key: a\\r\\nb {}\"}]}\n", "",
			"credentials[0].endpoints[0].header", "\"X-Key", "control or non-ASCII"},
		{"basic", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test, basic: token}]}\n", "",
			"credentials[0].endpoints[0].basic", "token}", "not user or password"},
		{"query empty", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test, query: \"\"}]}\n", "",
			"credentials[0].endpoints[0].query", "\"\"}", "query parameter name"},
		{"body too large", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test, body: {max: 17M}}]}\n", "",
			"credentials[0].endpoints[0].body.max", "17M", "outside 0-16M"},
		// Reachability: the network section of credPolicy.
		{"passthrough host", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: c.test}]}\n", "",
			"credentials[0].endpoints[0].host", "c.test}]", "network.allow[2] (c.test) has tls: passthrough"},
		{"uninspected wildcard", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: x.b.test}]}\n", "",
			"credentials[0].endpoints[0].host", "x.b.test", "network.allow[1] (*.b.test) admits it uninspected"},
		{"port not allowed", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: d.test}]}\n", "",
			"credentials[0].endpoints[0].host", "d.test}", "admits d.test on ports 8443, not 443"},
		{"written port not allowed", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: d.test, ports: [8443, 9443]}]}\n", "",
			"credentials[0].endpoints[0].ports[1]", "9443", "admits d.test on ports 8443, not 9443"},
		{"unlisted host", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: z.test}]}\n", "",
			"credentials[0].endpoints[0].host", "z.test", "z.test:443 is not in network.allow"},
		{"unlisted IP", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: \"::1\"}]}\n", "",
			"credentials[0].endpoints[0].host", "\"::1\"", "[::1]:443 is not in network.allow"},
		{"denied host", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: e.a.test}]}\n", "",
			"credentials[0].endpoints[0].host", "e.a.test}]}", "network.deny[0] (e.a.test) refuses e.a.test:443"},
		{"denied IP", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: 10.9.8.7}]}\n", "",
			"credentials[0].endpoints[0].host", "10.9.8.7", "network.deny[1] (10.9.0.0/16) refuses 10.9.8.7:443"},
		{"denied mapped address", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: f.a.test}]}\n", "",
			"credentials[0].endpoints[0].host", "f.a.test}", "network.hosts maps f.a.test to 10.9.0.1, which network.deny[1]"},
		{"second endpoint", "  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test}, {host: c.test}]}\n", "",
			"credentials[0].endpoints[1].host", "c.test}]", "has tls: passthrough"},
	} {
		src := credPolicy(c.entries, c.extra)
		_, err := Parse([]byte(src), "p.yaml")
		errs := asErrors(err)
		line, col := positionOf(t, src, c.at)
		if len(errs) != 1 || errs[0].Field != c.field || errs[0].Line != line || errs[0].Column != col || !strings.Contains(errs[0].Msg, c.msg) || errs[0].Hint == "" {
			t.Errorf("%s: got %v; want one error, %s at %d:%d containing %q with a hint", c.name, err, c.field, line, col, c.msg)
		}
	}
}

// The hints say what to write.
func TestCredentialReachHints(t *testing.T) {
	for _, c := range []struct{ host, hint string }{
		{"c.test", "change network.allow[2] to tls: inspect"},
		{"x.b.test", "add {host: x.b.test, tls: inspect} to network.allow, or add tls: inspect to network.allow[1]"},
		{"d.test", "add 443 to network.allow[3].ports"},
		{"z.test", "add {host: z.test, tls: inspect} to network.allow"},
		{"e.a.test", "remove network.deny[0]"},
	} {
		src := credPolicy("  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: "+c.host+"}]}\n", "")
		_, err := Parse([]byte(src), "p.yaml")
		if errs := asErrors(err); len(errs) != 1 || !strings.Contains(errs[0].Hint, c.hint) {
			t.Errorf("%s: %v; want the hint %q", c.host, err, c.hint)
		}
	}
	src := "version: 1\nnetwork:\n  mode: proxy\n  allow: [{host: other.test}]\ncredentials:\n  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: intranet, ports: [8443]}]}\n"
	if _, err := Parse([]byte(src), "p.yaml"); err == nil || !strings.Contains(err.Error(), "add {host: intranet, tls: inspect, ports: [8443], single_label: true} to network.allow") {
		t.Errorf("single label: %v", err)
	}
}

// Credentials need the proxy: one error at the section, none per endpoint.
func TestCredentialsNeedProxy(t *testing.T) {
	for _, mode := range []string{"", "network: {mode: host}\n"} {
		src := "version: 1\n" + mode + "credentials:\n" + okEntry
		_, err := Parse([]byte(src), "p.yaml")
		line, col := positionOf(t, src, "- {name")
		if errs := asErrors(err); len(errs) != 1 || errs[0].Field != "credentials" || errs[0].Line != line || errs[0].Column != col || !strings.Contains(errs[0].Msg, "need network.mode: proxy") {
			t.Errorf("mode %q: %v", mode, err)
		}
	}
	// A policy built in code is checked too, without positions.
	p := Default()
	p.Network = Network{Mode: NetworkProxy, Allow: []Endpoint{{Host: "api.a.test"}}}
	p.Credentials = []Credential{{Name: "x", Source: CredentialSource{Env: "K"}, Expose: CredentialExpose{Env: "K"}, Endpoints: []CredentialEndpoint{{Host: "api.a.test"}}}}
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "admits it uninspected") {
		t.Errorf("code-built passthrough binding: %v", err)
	}
	p.Network.Allow[0].TLS = TLSInspect
	if err := p.Validate(); err != nil {
		t.Errorf("code-built inspected binding: %v", err)
	}
}

// ruleMatchesHost matches as the egress proxy's rules do.
func TestRuleMatchesHost(t *testing.T) {
	for _, c := range []struct {
		rule, host string
		want       bool
	}{
		{"api.a.test", "api.a.test", true},
		{"API.a.test.", "api.a.test", true},
		{"api.a.test", "x.api.a.test", false},
		{"*.a.test", "api.a.test", true},
		{"*.a.test", "x.api.a.test", false},
		{"*.a.test", "a.test", false},
		{"**.a.test", "x.api.a.test", true},
		{"**.a.test", "a.test", false},
		{"**.a.test", "xa.test", false},
		{"10.0.0.0/8", "10.1.2.3", true},
		{"10.0.0.0/8", "11.1.2.3", false},
		{"::ffff:10.0.0.0/104", "10.1.2.3", true},
		{"::ffff:10.1.2.3", "10.1.2.3", true},
		{"10.1.2.3", "10.1.2.3", true},
		{"::1", "::1", true},
		{"::/0", "10.1.2.3", false},
		{"10.0.0.0/8", "ten.a.test", false},
		{"api.a.test", "10.1.2.3", false},
	} {
		if got := ruleMatchesHost(c.rule, c.host); got != c.want {
			t.Errorf("ruleMatchesHost(%q, %q) = %v, want %v", c.rule, c.host, got, c.want)
		}
	}
}

// credEnv is a fixture for Resolve: a home, a workdir inside it, and a
// policy whose credentials are entries.
func resolveCreds(t *testing.T, e env, ctx Context, entries, extra string) (*Resolved, error) {
	t.Helper()
	p, err := Parse([]byte(credPolicy(entries, extra)), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p.Resolve(ctx)
}

func envValue(env []string, name string) (string, bool) {
	for _, kv := range env {
		if n, v, _ := strings.Cut(kv, "="); n == name {
			return v, true
		}
	}
	return "", false
}

// The placeholder takes the place of a passed variable of its name, so
// the real value never enters the sandbox; defaults are written out.
func TestResolveCredentialEnv(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx()
	ctx.Environ = []string{"X_KEY=real-secret-value", "LANG=C", "OTHER=o"}
	r, err := resolveCreds(t, e, ctx, okEntry, "process:\n  env: {pass: [X_*, LANG, PATH]}\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Credentials) != 1 {
		t.Fatalf("credentials = %+v", r.Credentials)
	}
	rc := r.Credentials[0]
	if v, _ := envValue(r.Env, "X_KEY"); v != rc.Placeholder || strings.Contains(strings.Join(r.Env, "\n"), "real-secret-value") {
		t.Errorf("env = %v, want X_KEY=%s and no real value", r.Env, rc.Placeholder)
	}
	if !slices.IsSorted(r.Env) {
		t.Errorf("env not sorted: %v", r.Env)
	}
	if v, _ := envValue(r.Env, "LANG"); v != "C" {
		t.Errorf("LANG = %q: other passed variables stay", v)
	}
	ep := rc.Endpoints[0]
	if rc.Field != "credentials[0]" || rc.Shape != DefaultShape || rc.OnMismatch != MismatchDeny || !slices.Equal(ep.Ports, []int{443}) || ep.Header != DefaultCredentialHeader {
		t.Errorf("resolved = %+v: want field, defaults written out", rc)
	}
	if p := r.Policy.Credentials[0]; p.Shape != "" || p.Endpoints[0].Ports != nil || p.Endpoints[0].Header != "" {
		t.Errorf("the policy changed: %+v", p)
	}
	// Defaults of the other kinds.
	r, err = resolveCreds(t, e, e.ctx(), "  - {name: c, source: {command: [gh]}, expose: {env: C}, endpoints: [{host: api.a.test, body: {}}, {host: api.a.test, query: k}]}\n", "")
	if err != nil {
		t.Fatal(err)
	}
	rc = r.Credentials[0]
	if rc.Source.Timeout != DefaultCommandTimeout || rc.Endpoints[0].Body.Max != DefaultBodyMax || rc.Endpoints[0].Header != "" || rc.Endpoints[1].Header != "" {
		t.Errorf("resolved = %+v", rc)
	}
}

// A source variable the sandbox would get under its own name is refused.
func TestResolveCredentialSourceEnvLeaks(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct{ name, entry, extra, at, msg string }{
		{"pattern", "  - {name: x, source: {env: OPENAI_KEY}, expose: {env: K}, endpoints: [{host: api.a.test}]}\n", "process:\n  env: {pass: [PATH, OPENAI_*]}\n", "OPENAI_KEY}",
			"process.env.pass[1] (OPENAI_*) passes OPENAI_KEY into the sandbox"},
		{"exact", "  - {name: x, source: {env: OPENAI_KEY}, expose: {env: K}, endpoints: [{host: api.a.test}]}\n", "process:\n  env: {pass: [OPENAI_KEY]}\n", "OPENAI_KEY}",
			"process.env.pass[0] (OPENAI_KEY) passes OPENAI_KEY"},
		{"default pass", "  - {name: x, source: {env: LC_TOKEN}, expose: {env: K}, endpoints: [{host: api.a.test}]}\n", "", "LC_TOKEN",
			"the default process.env.pass (LC_*) passes LC_TOKEN"},
		{"exposed by another", "  - {name: x, source: {env: OPENAI_KEY}, expose: {env: K}, endpoints: [{host: api.a.test}]}\n  - {name: y, source: {env: K}, expose: {env: OPENAI_KEY}, endpoints: [{host: api.a.test}]}\n", "process:\n  env: {pass: [PATH, OPENAI_*, K]}\n", "",
			""},
		{"set", "  - {name: x, source: {env: OPENAI_KEY}, expose: {env: K}, endpoints: [{host: api.a.test}]}\n", "process:\n  env: {set: {OPENAI_KEY: x}}\n", "OPENAI_KEY}",
			"process.env.set gives the sandbox OPENAI_KEY"},
	} {
		src := credPolicy(c.entry, c.extra)
		p, err := Parse([]byte(src), "p.yaml")
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Resolve(e.ctx())
		if c.at == "" {
			if err != nil {
				t.Errorf("%s: %v; want no error: the variable is a placeholder inside", c.name, err)
			}
			continue
		}
		errs := asErrors(err)
		line, col := positionOf(t, src, c.at)
		if len(errs) != 1 || errs[0].Field != "credentials[0].source.env" || errs[0].Line != line || errs[0].Column != col || !strings.Contains(errs[0].Msg, c.msg) || errs[0].Hint == "" {
			t.Errorf("%s: %v; want credentials[0].source.env at %d:%d containing %q", c.name, err, line, col, c.msg)
		}
	}
}

var placeholderRE = regexp.MustCompile(`^[A-Za-z0-9]+$`)

// Placeholders: the shape's literal text around random letters and
// digits, fresh per Resolve, kept when the caller gives them, unique.
func TestResolveCredentialPlaceholders(t *testing.T) {
	e := newEnv(t)
	entries := "  - {name: a, source: {env: A}, expose: {env: A}, shape: \"sk-{random}\", endpoints: [{host: api.a.test}]}\n" +
		"  - {name: b, source: {env: B}, expose: {env: B}, shape: \"ghp_{random:22}.x\", endpoints: [{host: api.a.test}]}\n" +
		"  - {name: c, source: {env: C}, expose: {env: C}, endpoints: [{host: api.a.test}]}\n" +
		"  - {name: d, source: {env: D}, expose: {env: D}, shape: \"{random:128}\", endpoints: [{host: api.a.test}]}\n"
	r1, err := resolveCreds(t, e, e.ctx(), entries, "")
	if err != nil {
		t.Fatal(err)
	}
	r2, err := resolveCreds(t, e, e.ctx(), entries, "")
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		prefix, suffix string
		n              int
	}{{"sk-", "", 32}, {"ghp_", ".x", 22}, {"corral-", "", 32}, {"", "", 128}} {
		ph := r1.Credentials[i].Placeholder
		mid, ok := strings.CutPrefix(ph, c.prefix)
		mid, ok2 := strings.CutSuffix(mid, c.suffix)
		if !ok || !ok2 || len(mid) != c.n || !placeholderRE.MatchString(mid) {
			t.Errorf("placeholder %q: want %s + %d letters and digits + %s", ph, c.prefix, c.n, c.suffix)
		}
		if ph == r2.Credentials[i].Placeholder {
			t.Errorf("placeholder %q drawn twice", ph)
		}
	}
	// Kept ones are kept; the others drawn.
	ctx := e.ctx()
	keep := "sk-kept0123456789abcdefghijklmnop"
	ctx.Placeholders = map[string]string{"a": keep, "gone": "whatever"}
	r, err := resolveCreds(t, e, ctx, entries, "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Credentials[0].Placeholder != keep || !strings.HasPrefix(r.Credentials[2].Placeholder, "corral-") {
		t.Errorf("placeholders = %q, %q", r.Credentials[0].Placeholder, r.Credentials[2].Placeholder)
	}
	if v, _ := envValue(r.Env, "A"); v != keep {
		t.Errorf("A = %q, want the kept placeholder", v)
	}
	for _, c := range []struct {
		kept  map[string]string
		field string
		msg   string
	}{
		{map[string]string{"a": keep, "b": keep}, "credentials[1]", "the same or one holds the other"},
		{map[string]string{"a": keep, "c": keep + "x"}, "credentials[2]", "the same or one holds the other"},
		{map[string]string{"b": "short"}, "credentials[1]", "fewer than 22"},
		{map[string]string{"b": ""}, "credentials[1]", "fewer than 22"},
		{map[string]string{"c": strings.Repeat("a", 30) + " b"}, "credentials[2]", "other than a letter"},
	} {
		ctx.Placeholders = c.kept
		_, err := resolveCreds(t, e, ctx, entries, "")
		if errs := asErrors(err); len(errs) != 1 || errs[0].Field != c.field || !strings.Contains(errs[0].Msg, c.msg) || errs[0].Line == 0 {
			t.Errorf("kept %v: %v; want %s: %q, positioned", c.kept, err, c.field, c.msg)
		}
	}
}

// A source file the sandbox sees, or could replace, is refused; one
// outside every grant resolves to its canonical path, missing or not.
func TestResolveCredentialSourceFile(t *testing.T) {
	e := newEnv(t)
	touch(t, filepath.Join(e.home, ".key"), filepath.Join(e.work, "key"), filepath.Join(e.work, "denied", "key"), filepath.Join(e.home, "ro", "key"))
	if err := os.Symlink(filepath.Join(e.work, "key"), filepath.Join(e.home, ".link")); err != nil {
		t.Fatal(err)
	}
	entry := func(file string) string {
		return "  - {name: x, source: {file: \"" + file + "\"}, expose: {env: K}, endpoints: [{host: api.a.test}]}\n"
	}
	extra := "filesystem:\n  read_only: [~/ro]\n  deny: [\"{workdir}/denied/key\"]\n"
	for _, c := range []struct{ file, msg string }{
		{"{workdir}/key", "is visible inside the sandbox (filesystem.include_workdir grants " + e.work + " rw)"},
		{"~/ro/key", "is visible inside the sandbox (filesystem.read_only[0] grants " + filepath.Join(e.home, "ro") + " ro)"},
		{"~/.link", filepath.Join(e.work, "key") + " is visible inside the sandbox"},
		{"{workdir}/denied/key", "in a directory the workload can write"},
		{"{workdir}/absent", "does not exist, and the workload could make it"},
	} {
		src := credPolicy(entry(c.file), extra)
		p, err := Parse([]byte(src), "p.yaml")
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Resolve(e.ctx())
		errs := asErrors(err)
		line, col := positionOf(t, src, `"`+c.file)
		if len(errs) != 1 || errs[0].Field != "credentials[0].source.file" || errs[0].Line != line || errs[0].Column != col || !strings.Contains(errs[0].Msg, c.msg) {
			t.Errorf("%s: %v; want credentials[0].source.file at %d:%d containing %q", c.file, err, line, col, c.msg)
		}
	}
	for file, want := range map[string]string{"~/.key": filepath.Join(e.home, ".key"), "~/absent/k": filepath.Join(e.home, "absent", "k")} {
		r, err := resolveCreds(t, e, e.ctx(), entry(file), extra)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if got := r.Credentials[0].SourceFile; got != want {
			t.Errorf("%s: SourceFile = %q, want %q", file, got, want)
		}
	}
}

// An exposed file goes outside every grant; "~" is the sandbox's home.
func TestResolveCredentialExposeFile(t *testing.T) {
	e := newEnv(t)
	entry := func(file string) string {
		return "  - {name: x, source: {env: K}, expose: {file: \"" + file + "\"}, endpoints: [{host: api.a.test}]}\n"
	}
	r, err := resolveCreds(t, e, e.ctx(), entry("~/.config/x/key"), "")
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Credentials[0].File; got != filepath.Join(e.home, ".config/x/key") {
		t.Errorf("File = %q", got)
	}
	if _, ok := envValue(r.Env, "K"); ok {
		t.Errorf("env = %v: nothing exposed in it", r.Env)
	}
	mkdirs(t, filepath.Join(e.home, "tools", "bin"))
	extra := "filesystem:\n  read_only: [~/tools/bin]\n"
	for _, c := range []struct {
		file string
		ctx  func(*Context)
		msg  string
	}{
		{"~/project/key", nil, "inside the grant " + e.work + " (filesystem.include_workdir)"},
		{"~/tools", nil, "inside the grant " + filepath.Join(e.home, "tools", "bin")},
		{"~/key", func(c *Context) { c.WritableHome = true }, "inside the grant " + e.home + " (service home)"},
		{"~/key", func(c *Context) { c.Home = ""; extra = "" }, "the home directory is unknown"},
	} {
		ctx := e.ctx()
		if c.ctx != nil {
			c.ctx(&ctx)
		}
		src := credPolicy(entry(c.file), extra)
		p, err := Parse([]byte(src), "p.yaml")
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Resolve(ctx)
		errs := asErrors(err)
		line, col := positionOf(t, src, `"`+c.file)
		if len(errs) != 1 || errs[0].Field != "credentials[0].expose.file" || errs[0].Line != line || errs[0].Column != col || !strings.Contains(errs[0].Msg, c.msg) {
			t.Errorf("%s: %v; want credentials[0].expose.file at %d:%d containing %q", c.file, err, line, col, c.msg)
		}
	}
	// Grants are canonical: a home behind a link is compared as its target.
	link := filepath.Join(filepath.Dir(e.home), "homelink")
	if err := os.Symlink(e.home, link); err != nil {
		t.Fatal(err)
	}
	ctx := Context{Home: link, Workdir: e.work, WritableHome: true}
	if _, err := resolveCreds(t, e, ctx, entry("~/key"), ""); err == nil || !strings.Contains(err.Error(), "inside the grant "+e.home+" (service home)") {
		t.Errorf("home behind a link: %v", err)
	}
	// The same file written two ways.
	two := entry("~/key") + "  - {name: y, source: {env: K}, expose: {file: \"" + filepath.Join(e.home, "key") + "\"}, endpoints: [{host: api.a.test}]}\n"
	if _, err := resolveCreds(t, e, e.ctx(), two, ""); err == nil || !strings.Contains(err.Error(), "credentials[0] exposes "+filepath.Join(e.home, "key")+" too") {
		t.Errorf("two ways: %v", err)
	}
}

// The schema knows every field of the credential types and accepts what
// Parse accepts.
func TestSchemaCredentials(t *testing.T) {
	var s map[string]any
	if err := json.Unmarshal(Schema(), &s); err != nil {
		t.Fatal(err)
	}
	defs := s["$defs"].(map[string]any)
	for def, typ := range map[string]reflect.Type{"credential": reflect.TypeOf(Credential{}), "credentialEndpoint": reflect.TypeOf(CredentialEndpoint{})} {
		props := defs[def].(map[string]any)["properties"].(map[string]any)
		names, _ := structFields(typ)
		for _, n := range names {
			if _, ok := props[n]; !ok {
				t.Errorf("schema %s lacks %q", def, n)
			}
		}
		if len(props) != len(names) {
			t.Errorf("schema %s has %d properties, the type %d", def, len(props), len(names))
		}
	}
	for def, typ := range map[string]reflect.Type{"source": reflect.TypeOf(CredentialSource{}), "expose": reflect.TypeOf(CredentialExpose{})} {
		props := defs["credential"].(map[string]any)["properties"].(map[string]any)[def].(map[string]any)["properties"].(map[string]any)
		names, _ := structFields(typ)
		if len(props) != len(names) {
			t.Errorf("schema %s: %v, the type %v", def, props, names)
		}
		for _, n := range names {
			if _, ok := props[n]; !ok {
				t.Errorf("schema %s lacks %q", def, n)
			}
		}
	}
	check := compiledSchema(t)
	good := credPolicy(goodCredentials, "")
	if _, err := Parse([]byte(good), "p.yaml"); err != nil {
		t.Fatal(err)
	}
	if err := check(good); err != nil {
		t.Errorf("schema refuses a valid policy: %v", err)
	}
	for _, bad := range []string{
		"  - {name: X, source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test}]}\n",
		"  - {name: x, source: {env: K}, expose: {}, endpoints: [{host: api.a.test}]}\n",
		"  - {name: x, source: {env: K}, expose: {env: K}, endpoints: []}\n",
		"  - {name: x, source: {env: K}, expose: {env: K}, shape: sk, endpoints: [{host: api.a.test}]}\n",
		"  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test, ports: [80]}]}\n",
		"  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: \"*.a.test\"}]}\n",
		"  - {name: x, source: {env: K}, expose: {env: K}, on_mismatch: drop, endpoints: [{host: api.a.test}]}\n",
		"  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test, header: \"X-Key: k\"}]}\n",
		"  - {name: x, source: {env: K}, expose: {env: K}, endpoints: [{host: api.a.test, cookie: k}]}\n",
	} {
		if err := check(credPolicy(bad, "")); err == nil {
			t.Errorf("schema accepts %s", bad)
		}
	}
}

// compiledSchema compiles Schema and returns a check of a YAML policy
// against it.
func compiledSchema(t *testing.T) func(src string) error {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(Schema()))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	// The schema's patterns are ECMA-262 (\u0000); Go's regexp writes \x{0000}.
	c.UseRegexpEngine(func(re string) (jsonschema.Regexp, error) {
		return regexp.Compile(regexp.MustCompile(`\\u([0-9a-fA-F]{4})`).ReplaceAllString(re, `\x{$1}`))
	})
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return func(src string) error {
		var v any
		if err := yaml.Unmarshal([]byte(src), &v); err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(v)
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		return sch.Validate(inst)
	}
}

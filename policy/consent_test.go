//go:build !windows

// Linux policies: their paths resolve on a Linux host only (a Windows host
// refuses them). The Windows policy tests are winpath_test.go and
// winresolve_windows_test.go.

package policy

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// consentEnv is a fixture: a temp home (with ~/src/a, ~/src/b/.git/hooks,
// ~/src/b/secret, ~/.ssh, ~/docs -> ~/real/docs), a workdir ~/project,
// and a policy whose consent section is section.
type consentEnv struct {
	env
	r *Resolved
}

func newConsentEnv(t *testing.T, src string) consentEnv {
	t.Helper()
	e := newEnv(t)
	mkdirs(t, filepath.Join(e.home, "src", "a", "deep"), filepath.Join(e.home, "src", "b", ".git", "hooks"),
		filepath.Join(e.home, "src", "b", "secret"), filepath.Join(e.home, ".ssh"), filepath.Join(e.home, "real", "docs", "x"),
		filepath.Join(e.home, "src", "proj-1"), filepath.Join(e.home, "src", "proj-2", "sub"))
	touch(t, filepath.Join(e.home, "src", "b", ".envrc"))
	if err := os.Symlink(filepath.Join(e.home, "real", "docs"), filepath.Join(e.home, "docs")); err != nil {
		t.Fatal(err)
	}
	p := parse(t, src)
	r, err := p.Resolve(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	return consentEnv{e, r}
}

const consentFolders = `filesystem:
  deny: [~/src/b/secret]
consent:
  folders:
    ask: ["~/src/**", "~/docs/*", "~/src/proj-*/sub"]
    never: [~/src/a/deep, ~/.ssh]
    access: rw
`

func TestAskFolder(t *testing.T) {
	e := newConsentEnv(t, consentFolders)
	h := e.home
	for _, c := range []struct {
		name, path string
		access     Access
		field      string // the allowing entry, or the refusing one
		refused    bool
		masks      []string
		readOnly   []string
	}{
		{"inside ask", h + "/src/a", AccessReadOnly, "consent.folders.ask[0]", false, []string{h + "/src/a/deep"}, nil},
		{"** matches zero components", h + "/src", AccessReadOnly, "consent.folders.ask[0]", false, []string{h + "/src/a/deep", h + "/src/b/secret"}, nil},
		{"** matches several", h + "/src/proj-2/sub", AccessReadOnly, "consent.folders.ask[0]", false, nil, nil},
		{"outside ask", h + "/real", AccessReadOnly, "consent.folders.ask", true, nil, nil},
		{"the home", h, AccessReadOnly, "consent.folders.ask", true, nil, nil},
		{"in never", h + "/src/a/deep", AccessReadOnly, "consent.folders.never[0]", true, nil, nil},
		{"inside deny", h + "/src/b/secret", AccessReadOnly, "filesystem.deny[0]", true, nil, nil},
		{"containing deny: masked, protected read-only", h + "/src/b", AccessReadWrite, "consent.folders.ask[0]", false,
			[]string{h + "/src/b/secret"}, []string{h + "/src/b/.envrc", h + "/src/b/.git"}},
		{"symlinked ask prefix, * one component", h + "/real/docs/x", AccessReadOnly, "consent.folders.ask[1]", false, nil, nil},
		{"* is one component only", h + "/real/docs", AccessReadOnly, "consent.folders.ask", true, nil, nil},
		{"not canonical", h + "/docs/x", AccessReadOnly, RefusedRequest, true, nil, nil},
		{"not clean", h + "/src/a/../a", AccessReadOnly, RefusedRequest, true, nil, nil},
		{"missing", h + "/src/none", AccessReadOnly, RefusedRequest, true, nil, nil},
		{"bad access", h + "/src/a", "x", RefusedRequest, true, nil, nil},
		{"rw inside a protected path", h + "/src/b/.git/hooks", AccessReadWrite, "filesystem.protected[0]", true, nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ref := e.r.AskFolder(c.path, c.access)
			if c.refused {
				if ref == nil {
					t.Fatalf("AskFolder(%s) = %+v, want refused by %s", c.path, got, c.field)
				}
				if ref.Field != c.field || ref.Reason == "" {
					t.Fatalf("refusal %+v, want field %s", ref, c.field)
				}
				return
			}
			if ref != nil {
				t.Fatalf("AskFolder(%s) refused: %v", c.path, ref)
			}
			if got.Field != c.field || !slices.Equal(got.Masks, c.masks) || !slices.Equal(got.ReadOnly, c.readOnly) {
				t.Errorf("AskFolder(%s) = %+v, want field %s masks %v read-only %v", c.path, got, c.field, c.masks, c.readOnly)
			}
		})
	}
}

func TestAskFolderAccessCeiling(t *testing.T) {
	e := newConsentEnv(t, "consent:\n  folders: {ask: [\"~/src/**\"]}\n")
	if _, ref := e.r.AskFolder(e.home+"/src/a", AccessReadOnly); ref != nil {
		t.Fatalf("ro refused: %v", ref)
	}
	if _, ref := e.r.AskFolder(e.home+"/src/a", AccessReadWrite); ref == nil || ref.Field != "consent.folders.access" {
		t.Fatalf("rw above an ro ceiling: %v", ref)
	}
	if _, ref := e.r.AskFolder(e.home+"/src/a", ""); ref != nil {
		t.Fatalf(`"" (ro) refused: %v`, ref)
	}
}

func TestAskFolderNoConsent(t *testing.T) {
	e := newConsentEnv(t, "network: {mode: proxy}\nconsent:\n  hosts: {ask: [api.a.test]}\n")
	if _, ref := e.r.AskFolder(e.home+"/src/a", AccessReadOnly); ref == nil || ref.Field != "consent.folders" {
		t.Fatalf("no folders: %v", ref)
	}
}

func TestAskHost(t *testing.T) {
	e := newConsentEnv(t, `network:
  mode: proxy
  allow: [{host: api.a.test}]
  deny: [{host: bad.a.test}, {host: 10.9.0.0/16, ports: [443]}]
  hosts: {mapped.a.test: 10.9.0.1}
consent:
  hosts:
    ask: ["*.a.test:443", "**.b.test:*", "10.0.0.0/8", "[2001:db8::1]:8443", "mapped.a.test", "[fd00::/8]:*"]
    never: [secret.a.test, "x.y.b.test:22"]
`)
	for _, c := range []struct {
		host    string
		port    int
		field   string
		refused bool
	}{
		{"api.a.test", 443, "consent.hosts.ask[0]", false},
		{"API.a.test.", 443, "consent.hosts.ask[0]", false},
		{"api.a.test", 80, "consent.hosts.ask", true},       // the entry's port only
		{"x.api.a.test", 443, "consent.hosts.ask", true},    // "*." is one label
		{"a.test", 443, "consent.hosts.ask", true},          // not the domain itself
		{"x.y.b.test", 8080, "consent.hosts.ask[1]", false}, // "**." any depth, any port
		{"x.y.b.test", 22, "consent.hosts.never[1]", true},  // never on its port
		{"secret.a.test", 443, "consent.hosts.never[0]", true},
		{"bad.a.test", 443, "network.deny[0]", true},
		{"10.1.2.3", 443, "consent.hosts.ask[2]", false},
		{"10.9.1.1", 443, "network.deny[1]", true},
		{"10.9.1.1", 8443, "consent.hosts.ask", true},   // 10.0.0.0/8 without a port is 443
		{"mapped.a.test", 443, "network.deny[1]", true}, // network.hosts maps it into the deny
		{"[2001:db8::1]", 8443, "consent.hosts.ask[3]", false},
		{"2001:db8::1", 8443, "consent.hosts.ask[3]", false},
		{"fd00::5", 22, "consent.hosts.ask[5]", false},
		{"*.a.test", 443, RefusedRequest, true},
		{"api.a.test", 0, RefusedRequest, true},
		{"a..test", 443, RefusedRequest, true},
	} {
		field, ref := e.r.AskHost(c.host, c.port)
		switch {
		case c.refused && (ref == nil || ref.Field != c.field):
			t.Errorf("AskHost(%s, %d) = %q, %v; want refused by %s", c.host, c.port, field, ref, c.field)
		case !c.refused && (ref != nil || field != c.field):
			t.Errorf("AskHost(%s, %d) = %q, %v; want allowed by %s", c.host, c.port, field, ref, c.field)
		}
	}
}

func TestAskHostNeedsHosts(t *testing.T) {
	e := newConsentEnv(t, consentFolders)
	if _, ref := e.r.AskHost("api.a.test", 443); ref == nil || ref.Field != "consent.hosts" {
		t.Fatalf("no hosts: %v", ref)
	}
}

func TestConsentResolve(t *testing.T) {
	e := newConsentEnv(t, `consent:
  folders:
    ask: ["~/docs/*", "{workdir}/**", "/opt/x*/y"]
    never: [~/.ssh, ~/missing/x, ~/docs/x]
  timeout: 1h
  rate: {per: 2m}
`)
	c := e.r.Consent
	h := e.home
	want := []ConsentGlob{{h + "/real/docs/*", "consent.folders.ask[0]"}, {e.work + "/**", "consent.folders.ask[1]"}, {"/opt/x*/y", "consent.folders.ask[2]"}}
	if !slices.Equal(c.Folders, want) {
		t.Errorf("Folders = %v, want %v", c.Folders, want)
	}
	never := []ConsentPath{{h + "/.ssh", "consent.folders.never[0]"}, {h + "/missing/x", "consent.folders.never[1]"}, {h + "/real/docs/x", "consent.folders.never[2]"}}
	if !slices.Equal(c.FolderNever, never) {
		t.Errorf("FolderNever = %v, want %v", c.FolderNever, never)
	}
	if c.FolderAccess != AccessReadOnly || c.Timeout != time.Hour || c.MaxPending != DefaultConsentMaxPending ||
		c.Burst != DefaultConsentBurst || c.Per != 2*time.Minute || c.Persist != h+"/.config/corral/grants.local.yaml" {
		t.Errorf("defaults: %+v", c)
	}
	if !slices.Contains(c.State, h+"/.config/corral") || !slices.Contains(c.State, c.Persist) || !slices.Contains(c.State, "/var/lib/corral") {
		t.Errorf("State = %v", c.State)
	}
}

// consentErr parses and resolves src in e, and returns the one error.
func consentErr(t *testing.T, e env, src string) *Error {
	t.Helper()
	p, err := Parse([]byte(src), "p.yaml")
	if err == nil {
		_, err = p.Resolve(e.ctx())
	}
	var pe *Error
	if err == nil || !errors.As(err, &pe) {
		t.Fatalf("no error for\n%s", src)
	}
	if es, ok := err.(Errors); ok && len(es) > 1 {
		t.Fatalf("several errors for\n%s\n%v", src, err)
	}
	return pe
}

func TestConsentErrors(t *testing.T) {
	e := newEnv(t)
	mkdirs(t, filepath.Join(e.home, "state"))
	for _, c := range []struct {
		src   string // the consent section, and what follows
		at    string // where the error points (first occurrence in the file)
		field string
		msg   string // part of the message
	}{
		{"consent: {}\n", "{}", "consent", "no folders and no hosts"},
		{"consent: {folders: {ask: []}}\n", "[]", "consent.folders.ask", "no ask globs"},
		{"consent: {folders: {ask: [src/**]}}\n", "src/**", "consent.folders.ask[0]", "relative path"},
		{"consent: {folders: {ask: [\"~/src/../x\"]}}\n", "\"~/src/../x\"", "consent.folders.ask[0]", `".." component`},
		{"consent: {folders: {ask: [\"~/src/a**\"]}}\n", "\"~/src/a**\"", "consent.folders.ask[0]", "** must be a whole component"},
		{"consent: {folders: {ask: [\"/**\"]}}\n", "\"/**\"", "consent.folders.ask[0]", "matches /"},
		{"consent: {folders: {ask: [\"/*\"]}}\n", "\"/*\"", "consent.folders.ask[0]", "/proc"},
		{"consent: {folders: {ask: [\"/pro*/x\"]}}\n", "\"/pro*/x\"", "consent.folders.ask[0]", "/proc"},
		{"consent: {folders: {ask: [\"/run/user/**\"]}}\n", "\"/run/user/**\"", "consent.folders.ask[0]", "/run"},
		{"consent: {folders: {ask: [\"~/**\"]}}\n", "\"~/**\"", "consent.folders.ask[0]", "holds your home"},
		{"consent: {folders: {ask: [~]}}\n", "~]", "consent.folders.ask[0]", "holds your home"},
		{"consent: {folders: {ask: [\"/*/*/*\"]}}\n", "\"/*/*/*\"", "consent.folders.ask[0]", "/proc"},
		{"consent: {folders: {ask: [\"~/.config/**\"]}}\n", "\"~/.config/**\"", "consent.folders.ask[0]", "Corral's own state"},
		{"consent: {folders: {ask: [\"/var/lib/*\"]}}\n", "\"/var/lib/*\"", "consent.folders.ask[0]", "Corral's own state"},
		{"consent: {folders: {ask: [\"~/src/**\"], never: [\"a/b\"]}}\n", "\"a/b\"", "consent.folders.never[0]", "relative path"},
		{"consent: {folders: {ask: [\"~/src/**\"], access: write}}\n", "write", "consent.folders.access", "not ro or rw"},
		{"consent: {folders: {ask: [\"~/src/**\"]}, colour: red}\n", "colour", "consent.colour", "unknown field"},
		{"consent: {folders: {ask: [\"~/src/**\"], nver: [~/.ssh]}}\n", "nver", "consent.folders.nver", `unknown field "nver"`},
		{"consent: {hosts: {ask: [api.a.test]}}\n", "{ask", "consent.hosts", "host grants are proxy rules"},
		{"network: {mode: proxy}\nconsent: {hosts: {ask: [\"*.com\"]}}\n", "\"*.com\"", "consent.hosts.ask[0]", "top-level domain"},
		{"network: {mode: proxy}\nconsent: {hosts: {ask: [\"a.test:0\"]}}\n", "\"a.test:0\"", "consent.hosts.ask[0]", "1 to 65535"},
		{"network: {mode: proxy}\nconsent: {hosts: {ask: [\"a.test:70000\"]}}\n", "\"a.test:70000\"", "consent.hosts.ask[0]", "1 to 65535"},
		{"network: {mode: proxy}\nconsent: {hosts: {ask: [\"a.test:\"]}}\n", "\"a.test:\"", "consent.hosts.ask[0]", "empty port"},
		{"network: {mode: proxy}\nconsent: {hosts: {ask: [intranet]}}\n", "intranet", "consent.hosts.ask[0]", "single DNS label"},
		{"network: {mode: proxy}\nconsent: {hosts: {ask: [a.test], never: [\"[10.0.0.1]:22\"]}}\n", "\"[10.0.0.1]:22\"", "consent.hosts.never[0]", "only an IPv6 address or CIDR"},
		{"network: {mode: proxy}\nconsent: {hosts: {ask: [\"a_b.test\"]}}\n", "\"a_b.test\"", "consent.hosts.ask[0]", "not a valid host name"},
		{"consent: {folders: {ask: [\"~/src/**\"]}, timeout: 0}\n", "0}", "consent.timeout", "expire every request"},
		{"consent: {folders: {ask: [\"~/src/**\"]}, timeout: 25h}\n", "25h", "consent.timeout", "longer than 24h"},
		{"consent: {folders: {ask: [\"~/src/**\"]}, max_pending: 101}\n", "101", "consent.max_pending", "outside 1-100"},
		{"consent: {folders: {ask: [\"~/src/**\"]}, max_pending: 0}\n", "0}", "consent.max_pending", "outside 1-100"},
		{"consent: {folders: {ask: [\"~/src/**\"]}, rate: {burst: 1001}}\n", "1001", "consent.rate.burst", "outside 1-1000"},
		{"consent: {folders: {ask: [\"~/src/**\"]}, rate: {per: 0}}\n", "0}", "consent.rate.per", "longer than 0"},
		{"consent: {folders: {ask: [\"~/src/**\"]}, persist: \"{workdir}/g.yaml\"}\n", "\"{workdir}/g.yaml\"", "consent.persist", "inside the workdir"},
		{"consent: {folders: {ask: [\"~/src/**\"]}, persist: ~/state/}\n", "~/state/", "consent.persist", "names a directory"},
		{"consent: {folders: {ask: [\"~/src/**\"]}, persist: \"" + e.work + "/g.yaml\"}\n", "\"" + e.work, "consent.persist", "inside the workdir"},
		{"filesystem: {include_workdir: false}\nconsent: {folders: {ask: [\"~/src/**\"]}, persist: \"" + e.work + "/g.yaml\"}\n", "\"" + e.work, "consent.persist", "inside the workdir"},
		{"filesystem: {read_only: [~/state]}\nconsent: {folders: {ask: [\"~/src/**\"]}, persist: ~/state/g.yaml}\n", "~/state/g.yaml", "consent.persist", "could read every standing decision"},
		{"filesystem: {read_write: [~/state]}\nconsent: {folders: {ask: [\"~/src/**\"]}, persist: ~/state/g.yaml}\n", "~/state/g.yaml", "consent.persist", "plant standing grants"},
	} {
		src := "version: 1\n" + c.src
		err := consentErr(t, e, src)
		line, col := positionOf(t, src, c.at)
		if err.Field != c.field || err.Line != line || err.Column != col || !strings.Contains(err.Msg, c.msg) || err.Hint == "" {
			t.Errorf("%s:\n got %v (%d:%d)\nwant %s at %d:%d with %q and a hint", c.src, err, err.Line, err.Column, c.field, line, col, c.msg)
		}
	}
}

// Corral's own state and a credential's source inside an asked folder:
// masked read-only, refused read-write (the workload could move the
// masked directory away and write its own).
func TestAskFolderState(t *testing.T) {
	e := newEnv(t)
	mkdirs(t, filepath.Join(e.home, ".config", "corral"), filepath.Join(e.home, ".config", "app"), filepath.Join(e.home, "keys"))
	touch(t, filepath.Join(e.home, "keys", "api"))
	p := parse(t, `network: {mode: proxy, allow: [{host: api.a.test, tls: inspect}]}
credentials:
  - {name: x, source: {file: ~/keys/api}, expose: {env: X}, endpoints: [{host: api.a.test}]}
consent:
  folders: {ask: ["~/*", "~/.config/app"], access: rw}
`)
	r, err := p.Resolve(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	h := e.home
	got, ref := r.AskFolder(h+"/.config", AccessReadOnly)
	if ref != nil || !slices.Equal(got.Masks, []string{h + "/.config/corral"}) {
		t.Errorf("ro ~/.config: %+v %v, want ~/.config/corral masked", got, ref)
	}
	if _, ref := r.AskFolder(h+"/.config", AccessReadWrite); ref == nil || ref.Field != RefusedBuiltIn || !strings.Contains(ref.Reason, "Corral's own state") {
		t.Errorf("rw ~/.config: %v, want refused (built-in)", ref)
	}
	if _, ref := r.AskFolder(h+"/.config/corral", AccessReadOnly); ref == nil || ref.Field != "consent.folders.ask" {
		t.Errorf("ro ~/.config/corral: %v, want refused: no glob may match it (Resolve)", ref)
	}
	// Should a glob match it (Resolve refuses one that can), the state is
	// refused still.
	r.Consent.Folders = append(r.Consent.Folders, ConsentGlob{Glob: h + "/*/*", Field: "test"})
	if _, ref := r.AskFolder(h+"/.config/corral", AccessReadOnly); ref == nil || ref.Field != RefusedBuiltIn {
		t.Errorf("ro ~/.config/corral: %v, want refused (built-in)", ref)
	}
	if _, ref := r.AskFolder(h+"/.config/app", AccessReadWrite); ref != nil {
		t.Errorf("rw ~/.config/app: %v", ref)
	}
	got, ref = r.AskFolder(h+"/keys", AccessReadOnly)
	if ref != nil || !slices.Equal(got.Masks, []string{h + "/keys/api"}) {
		t.Errorf("ro ~/keys: %+v %v, want the source masked", got, ref)
	}
	if _, ref := r.AskFolder(h+"/keys", AccessReadWrite); ref == nil || ref.Field != "credentials[0].source.file" {
		t.Errorf("rw ~/keys: %v, want refused by credentials[0].source.file", ref)
	}
}

// A glob whose literal prefix leads, through a symlink, into what may
// never be asked is refused at Resolve, where it is canonical.
func TestConsentGlobThroughLink(t *testing.T) {
	e := newEnv(t)
	if err := os.Symlink("/proc", filepath.Join(e.home, "p")); err != nil {
		t.Fatal(err)
	}
	src := "version: 1\nconsent: {folders: {ask: [\"~/p/**\"]}}\n"
	err := consentErr(t, e, src)
	if line, col := positionOf(t, src, `"~/p/**"`); err.Field != "consent.folders.ask[0]" || err.Line != line || err.Column != col ||
		!strings.Contains(err.Msg, "resolves to /proc/**") || err.Hint == "" {
		t.Errorf("got %v", err)
	}
}

// With consent.folders, nothing may be granted under /grants, where the
// slots are mounted; without it, such a grant is the policy's own affair.
func TestConsentGrantsDir(t *testing.T) {
	e := newEnv(t)
	src := "version: 1\nfilesystem: {read_only: [/usr, {path: /grants/x, optional: true}]}\nconsent: {folders: {ask: [\"~/src/**\"]}}\n"
	err := consentErr(t, e, src)
	if line, col := positionOf(t, src, "/grants/x"); err.Field != "filesystem.read_only[1]" || err.Line != line || err.Column != col || !strings.Contains(err.Msg, "consent.folders mounts") {
		t.Errorf("got %v", err)
	}
	p := parse(t, "filesystem: {read_only: [/usr, {path: /grants/x, optional: true}]}\n")
	if _, err := p.Resolve(e.ctx()); err != nil {
		t.Errorf("without consent: %v", err)
	}
}

// The hash covers the section, and spelling out its defaults does not
// change it.
func TestConsentHash(t *testing.T) {
	base := parse(t, "consent: {folders: {ask: [\"~/src/**\"]}}\n")
	spelled := parse(t, "consent: {folders: {ask: [\"~/src/**\"], access: ro}, timeout: 10m, max_pending: 5, rate: {burst: 5, per: 1m}, persist: ~/.config/corral/grants.local.yaml}\n")
	if Hash(base) != Hash(spelled) {
		t.Errorf("spelled-out defaults change the hash")
	}
	for _, other := range []string{
		"consent: {folders: {ask: [\"~/src/*\"]}}\n",
		"consent: {folders: {ask: [\"~/src/**\"], never: [~/.ssh]}}\n",
		"consent: {folders: {ask: [\"~/src/**\"], access: rw}}\n",
		"consent: {folders: {ask: [\"~/src/**\"]}, timeout: 1m}\n",
		"consent: {folders: {ask: [\"~/src/**\"]}, rate: {burst: 6}}\n",
		"consent: {folders: {ask: [\"~/src/**\"]}, persist: ~/g.yaml}\n",
		"",
	} {
		if Hash(parse(t, other)) == Hash(base) {
			t.Errorf("%q hashes as the base", other)
		}
	}
	if base.Consent.Rate != nil || base.Consent.Folders.Access != "" {
		t.Errorf("Hash changed the policy: %+v", base.Consent)
	}
	// Marshalled to JSON and parsed back, it is the same policy.
	full := parse(t, "network: {mode: proxy}\nconsent: {folders: {ask: [\"~/src/**\"], never: [~/.ssh], access: rw}, hosts: {ask: [\"[::1]:*\"]}, timeout: 1m, max_pending: 2, rate: {burst: 3, per: 5s}, persist: ~/g.yaml}\n")
	data, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(data, "p.json")
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if Hash(back) != Hash(full) {
		t.Errorf("the JSON round trip changed the policy:\n%s", data)
	}
}

func TestConsentDescribe(t *testing.T) {
	e := newConsentEnv(t, "network: {mode: proxy}\n"+strings.Replace(consentFolders, "consent:\n", "consent:\n  hosts: {ask: [\"*.a.test\"], never: [\"[::1]:*\"]}\n", 1))
	text := strings.Join(e.r.Consent.Describe(), "\n")
	for _, want := range []string{e.home + "/src/**  (consent.folders.ask[0])", "never " + e.home + "/.ssh  (consent.folders.never[1])",
		"read-write at most", "*.a.test:443  (consent.hosts.ask[0])", "never [::1]:*  (consent.hosts.never[0])",
		"timeout 10m0s", "at most 5 pending", "5 new requests per 1m0s", "standing (always) grants: " + e.home + "/.config/corral/grants.local.yaml"} {
		if !strings.Contains(text, want) {
			t.Errorf("Describe lacks %q:\n%s", want, text)
		}
	}
}

// The schema knows every field of the consent types and refuses the
// shapes Parse refuses.
func TestSchemaConsent(t *testing.T) {
	sch := compiledSchema(t)
	good := "version: 1\nnetwork: {mode: proxy}\nconsent:\n  folders: {ask: [\"~/src/**\", \"{workdir}/x/*\"], never: [~/.ssh], access: rw}\n  hosts: {ask: [\"*.a.test:443\", \"[::1]:*\", 10.0.0.0/8, \"[fd00::/8]:22\"], never: [b.a.test]}\n  timeout: 10m\n  max_pending: 5\n  rate: {burst: 5, per: 1m}\n  persist: ~/.config/corral/g.yaml\n"
	if _, err := Parse([]byte(good), "p.yaml"); err != nil {
		t.Fatal(err)
	}
	if err := sch(good); err != nil {
		t.Errorf("schema refuses a valid policy: %v", err)
	}
	for _, bad := range []string{
		"consent: {folders: {ask: []}}",
		"consent: {folders: {never: [~/.ssh]}}",
		"consent: {folders: {ask: [src]}}",
		"consent: {folders: {ask: [\"~/a**\"]}}",
		"consent: {folders: {ask: [\"~/a\"], access: write}}",
		"consent: {folders: {ask: [\"~/a\"]}, max_pending: 0}",
		"consent: {folders: {ask: [\"~/a\"]}, rate: {burst: 1001}}",
		"consent: {folders: {ask: [\"~/a\"]}, commands: {ask: true}}",
		"consent: {hosts: {ask: [\"a b\"]}}",
	} {
		if err := sch("version: 1\n" + bad + "\n"); err == nil {
			t.Errorf("schema accepts %s", bad)
		}
		if _, err := Parse([]byte("version: 1\nnetwork: {mode: proxy}\n"+bad+"\n"), "p.yaml"); err == nil {
			t.Errorf("Parse accepts %s", bad)
		}
	}
	var s map[string]any
	if err := json.Unmarshal(Schema(), &s); err != nil {
		t.Fatal(err)
	}
	defs := s["$defs"].(map[string]any)
	props := defs["consent"].(map[string]any)["properties"].(map[string]any)
	for name, typ := range map[string]reflect.Type{"": reflect.TypeOf(Consent{}), "folders": reflect.TypeOf(ConsentFolders{}), "hosts": reflect.TypeOf(ConsentHosts{}), "rate": reflect.TypeOf(ConsentRate{})} {
		ps := props
		if name != "" {
			ps = props[name].(map[string]any)["properties"].(map[string]any)
		}
		names, _ := structFields(typ)
		if len(ps) != len(names) {
			t.Errorf("schema consent %s: %d properties, the type %d", name, len(ps), len(names))
		}
		for _, n := range names {
			if _, ok := ps[n]; !ok {
				t.Errorf("schema consent %s lacks %q", name, n)
			}
		}
	}
}

// The examples of docs/policy.md's consent section and of Consent's doc
// comment are policies Parse accepts and Resolve resolves.
func TestConsentDocExamples(t *testing.T) {
	doc, err := os.ReadFile("../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, _ := strings.Cut(string(doc), "\n## consent\n")
	_, block, _ := strings.Cut(sec, "```yaml\n")
	block, _, _ = strings.Cut(block, "```")
	src, err := os.ReadFile("consent.go")
	if err != nil {
		t.Fatal(err)
	}
	var comment []string
	_, typ, _ := strings.Cut(string(src), "// Consent is the consent section")
	for _, line := range strings.Split(typ, "\n") {
		if l, ok := strings.CutPrefix(line, "//\t"); ok {
			comment = append(comment, l)
		}
	}
	e := newEnv(t)
	for name, ex := range map[string]string{"docs/policy.md": block, "Consent": strings.Join(comment, "\n") + "\n"} {
		if !strings.HasPrefix(ex, "consent:\n") {
			t.Fatalf("%s: no example found: %q", name, ex)
		}
		p, err := Parse([]byte("version: 1\nnetwork: {mode: proxy}\n"+ex), name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := p.Resolve(e.ctx()); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A filesystem.deny entry missing when the policy was resolved is refused
// still once it exists, and masked in a folder holding it.
func TestAskFolderDenyMadeLater(t *testing.T) {
	e := newEnv(t)
	mkdirs(t, filepath.Join(e.home, "src"))
	p := parse(t, "filesystem: {deny: [{path: ~/src/later, optional: true}]}\nconsent: {folders: {ask: [\"~/src/**\"]}}\n")
	r, err := p.Resolve(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	later := filepath.Join(e.home, "src", "later")
	mkdirs(t, later)
	if _, ref := r.AskFolder(later, AccessReadOnly); ref == nil || ref.Field != "filesystem.deny[0]" {
		t.Errorf("made later: %v, want refused by filesystem.deny[0]", ref)
	}
	if got, ref := r.AskFolder(filepath.Join(e.home, "src"), AccessReadOnly); ref != nil || !slices.Equal(got.Masks, []string{later}) {
		t.Errorf("holding it: %+v %v, want it masked", got, ref)
	}
}

// A system tree may be granted read-only, never read-write.
func TestAskFolderSystemTree(t *testing.T) {
	e := newEnv(t)
	r, err := parse(t, "consent: {folders: {ask: [\"/usr/*\"], access: rw}}\n").Resolve(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	dir := canon(t, "/usr/share")
	if _, ref := r.AskFolder(dir, AccessReadOnly); ref != nil {
		t.Errorf("ro %s: %v", dir, ref)
	}
	if _, ref := r.AskFolder(dir, AccessReadWrite); ref == nil || ref.Field != RefusedBuiltIn || !strings.Contains(ref.Reason, "modify the host system") {
		t.Errorf("rw %s: %v, want refused (built-in)", dir, ref)
	}
}

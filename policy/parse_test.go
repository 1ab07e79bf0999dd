//go:build !windows

// Linux policies: their paths resolve on a Linux host only (a Windows host
// refuses them). The Windows policy tests are winpath_test.go and
// winresolve_windows_test.go.

package policy

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// writePolicy writes src to a file in a fresh temp dir and returns its path.
func writePolicy(t *testing.T, name, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestUnknownFieldHasPositionAndSuggestion(t *testing.T) {
	path := writePolicy(t, "p.yaml", "version: 1\nfilesystem:\n  read_onyl:\n    - /usr\n")
	_, err := Load(path)
	e := only(t, err)
	expectAt(t, e, "filesystem.read_onyl", 3, 3, `unknown field "read_onyl"`)
	if e.File != path {
		t.Errorf("File = %q, want %q", e.File, path)
	}
	if !strings.Contains(e.Hint, `did you mean "read_only"`) {
		t.Errorf("hint %q lacks the suggestion", e.Hint)
	}
	want := path + `:3:3: filesystem.read_onyl: unknown field "read_onyl" (hint: did you mean "read_only"?)`
	if e.Error() != want {
		t.Errorf("Error() = %q\nwant      %q", e.Error(), want)
	}
}

func TestUnknownFieldHints(t *testing.T) {
	cases := []struct{ src, field, hint string }{
		{"version: 1\nmode: host\n", "mode", "network.mode"},                                     // misplaced
		{"version: 1\nfilesystem:\n  read-write: []\n", "filesystem.read-write", `"read_write"`}, // dash for underscore
		{"version: 1\nprocess:\n  zzz: 1\n", "process.zzz", "valid fields of process are env, run_as_user, limits"},
		{"version: 1\nfilesystem:\n  read_only:\n    - {path: /usr, optinal: true}\n", "filesystem.read_only[0].optinal", `"optional"`},
	}
	for _, c := range cases {
		e := only(t, func() error { _, err := Parse([]byte(c.src), "p.yaml"); return err }())
		if e.Field != c.field || !strings.Contains(e.Hint, c.hint) {
			t.Errorf("%q: got field %q hint %q; want field %q hint containing %q", c.src, e.Field, e.Hint, c.field, c.hint)
		}
	}
}

func TestBadTypes(t *testing.T) {
	cases := []struct {
		src, field string
		line, col  int
		msg        string
	}{
		{"version: 1\nprocess:\n  limits:\n    pids: \"many\"\n", "process.limits.pids", 4, 11, "expected an integer"},
		{"version: 1\nprocess:\n  limits:\n    pids: 1.5\n", "process.limits.pids", 4, 11, "expected an integer"},
		{"version: 1\nfilesystem:\n  - /usr\n", "filesystem", 3, 3, "expected a mapping, got a list"},
		{"version: 1\nfilesystem:\n  read_only: /usr\n", "filesystem.read_only", 3, 14, "expected a list"},
		{"version: 1\nfilesystem:\n  include_workdir: \"yes\"\n", "filesystem.include_workdir", 3, 20, "expected true or false"},
		{"version: \"1\"\n", "version", 1, 10, "expected an integer"},
		{"version: 1\nnetwork:\n  mode: [none]\n", "network.mode", 3, 9, "expected a string"},
		{"version: 1\nprocess:\n  limits:\n    cpu: two\n", "process.limits.cpu", 4, 10, "expected a number"},
		{"version: 1\nfilesystem:\n  read_only:\n    - [/usr]\n", "filesystem.read_only[0]", 4, 7, "expected a path or {path, optional}"},
		{"version: 1\nprocess:\n  env:\n    set:\n      - A=b\n", "process.env.set", 5, 7, "expected a mapping"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.src), "p.yaml")
		expectAt(t, only(t, err), c.field, c.line, c.col, c.msg)
	}
}

func TestVersion(t *testing.T) {
	_, err := Parse([]byte("network:\n  mode: host\n"), "p.yaml")
	e := only(t, err)
	if e.Field != "version" || !strings.Contains(e.Msg, "no version") || !strings.Contains(e.Hint, "version: 1") {
		t.Errorf("missing version: got %v", e)
	}
	_, err = Parse([]byte("version: 2\n"), "p.yaml")
	e = only(t, err)
	expectAt(t, e, "version", 1, 10, "unsupported policy version 2")
	if !strings.Contains(e.Hint, "version: 1") {
		t.Errorf("wrong version hint %q", e.Hint)
	}
	if _, err := Parse([]byte("version: 1\n"), "p.yaml"); err != nil {
		t.Errorf("minimal policy rejected: %v", err)
	}
}

func TestPathSyntax(t *testing.T) {
	cases := []struct{ path, msg string }{
		{"src", "relative path"},
		{"./src", "relative path"},
		{"/usr/../etc", `".." component`},
		{`"{workdir}/../x"`, `".." component`},
		{"~/a/..", `".." component`},
		{"/proc/self/root", "/proc entry"},
		{"/proc/thread-self", "/proc entry"},
		{"/proc/1234/root", "/proc entry"},
		{"//proc/./self/cwd", "/proc entry"},
		{"~bob/x", "~user is not supported"},
		{`"{home}/x"`, "unknown placeholder"},
		{"/a/{workdir}", "placeholder in the middle"},
		{`"/a\0b"`, "NUL"},
	}
	for _, c := range cases {
		src := "version: 1\nfilesystem:\n  read_write:\n    - /tmp\n    - " + c.path + "\n"
		_, err := Parse([]byte(src), "p.yaml")
		expectAt(t, only(t, err), "filesystem.read_write[1]", 5, 7, c.msg)
	}
	// Mapping form: the position is that of the path scalar.
	_, err := Parse([]byte("version: 1\nfilesystem:\n  deny:\n    - optional: true\n      path: rel\n"), "p.yaml")
	expectAt(t, only(t, err), "filesystem.deny[0]", 5, 13, "relative path")
	// Relative entries are fine in protected, ".." is not.
	if _, err := Parse([]byte("version: 1\nfilesystem:\n  protected: [.git/hooks, /srv/x, ~/.netrc]\n"), "p.yaml"); err != nil {
		t.Errorf("relative protected entry rejected: %v", err)
	}
	_, err = Parse([]byte("version: 1\nfilesystem:\n  protected: [.git/hooks, ../x]\n"), "p.yaml")
	expectAt(t, only(t, err), "filesystem.protected[1]", 3, 27, `".."`)
}

func TestPathRuleForms(t *testing.T) {
	p, err := Parse([]byte("version: 1\nfilesystem:\n  read_only:\n    - /usr\n    - {path: ~/opt, optional: true}\n"), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := []PathRule{{Path: "/usr"}, {Path: "~/opt", Optional: true}}
	if !reflect.DeepEqual(p.Filesystem.ReadOnly, want) {
		t.Errorf("ReadOnly = %+v, want %+v", p.Filesystem.ReadOnly, want)
	}
	_, err = Parse([]byte("version: 1\nfilesystem:\n  read_only:\n    - {optional: true}\n"), "p.yaml")
	expectAt(t, only(t, err), "filesystem.read_only[0]", 4, 7, `no "path"`)
}

func TestSeveralProblemsAreAllReported(t *testing.T) {
	src := "version: 1\nfilesystem:\n  read_only: [rel]\nnetwork:\n  mode: proxi\nprocess:\n  limits:\n    pids: -1\n  colour: red\n"
	_, err := Parse([]byte(src), "p.yaml")
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("want Errors, got %T: %v", err, err)
	}
	var fields []string
	for _, e := range es {
		fields = append(fields, e.Field)
	}
	want := []string{"filesystem.read_only[0]", "network.mode", "process.limits.pids", "process.colour"}
	if !reflect.DeepEqual(fields, want) {
		t.Errorf("fields = %v, want %v (in line order)", fields, want)
	}
	if n := strings.Count(err.Error(), "\n"); n != len(want)-1 {
		t.Errorf("Errors.Error() has %d newlines, want %d:\n%s", n, len(want)-1, err)
	}
	// errors.As finds an individual *Error inside Errors.
	var one *Error
	if !errors.As(err, &one) || one.Field != "filesystem.read_only[0]" {
		t.Errorf("errors.As(*Error) = %v", one)
	}
}

func TestDecodeErrorsSuppressFollowOnValidation(t *testing.T) {
	// A version of the wrong type must not also be reported as missing.
	_, err := Parse([]byte("version: [1]\n"), "p.yaml")
	expectAt(t, only(t, err), "version", 1, 10, "expected an integer")
}

func TestNetworkMode(t *testing.T) {
	_, err := Parse([]byte("version: 1\nnetwork:\n  mode: proxy\n  allow: [{host: api.example.com, ports: [443]}, {host: \"*.pkg.dev\"}]\n  allow_private: [{host: 127.0.0.1/32, ports: [11434]}]\n  hosts: {api.example.com: 127.0.0.2}\n"), "p.yaml")
	if err != nil {
		t.Fatalf("a proxy policy: %v", err)
	}
	// Egress rules belong to mode proxy.
	_, err = Parse([]byte("version: 1\nnetwork:\n  mode: none\n  allow: [{host: a.example.com}]\n"), "p.yaml")
	expectAt(t, only(t, err), "network.allow", 4, 10, "only applies to mode proxy")
	for src, want := range map[string]string{
		"[{host: \"*\"}]":                       "every host",
		"[{host: \"*.com\"}]":                   "top-level domain",
		"[{host: \"a.*.example.com\"}]":         "wildcard outside the first label",
		"[{host: api.example.com, ports: [0]}]": "outside 1-65535",
		"[{host: \"bad_name\"}]":                "not a valid host name",
	} {
		_, err = Parse([]byte("version: 1\nnetwork:\n  mode: proxy\n  allow: "+src+"\n"), "p.yaml")
		if e := only(t, err); !strings.Contains(e.Msg, want) || e.Line != 4 {
			t.Errorf("allow %s: got %v, want %q at line 4", src, e, want)
		}
	}
	_, err = Parse([]byte("version: 1\nnetwork:\n  mode: proxy\n  allow_private: [{host: localhost}]\n"), "p.yaml")
	if e := only(t, err); !strings.Contains(e.Msg, "not an IP address or CIDR") {
		t.Errorf("allow_private name: %v", e)
	}
	_, err = Parse([]byte("version: 1\nnetwork:\n  mode: proxy\n  hosts: {api.example.com: nowhere}\n"), "p.yaml")
	if e := only(t, err); !strings.Contains(e.Msg, "not an IP literal") {
		t.Errorf("hosts value: %v", e)
	}
	_, err = Parse([]byte("version: 1\nnetwork:\n  mode: hots\n"), "p.yaml")
	if e := only(t, err); !strings.Contains(e.Hint, `did you mean "host"`) {
		t.Errorf("unknown mode hint %q", e.Hint)
	}
	p, err := Parse([]byte("version: 1\nnetwork: {}\n"), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.Resolve(Context{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if r.Network != NetworkNone {
		t.Errorf("empty mode resolved to %q, want none", r.Network)
	}
}

func TestLimits(t *testing.T) {
	p, err := Parse([]byte("version: 1\nprocess:\n  limits:\n    memory: 1.5G\n    pids: 100\n    cpu: 0.5\n    nofile: 1024\n    timeout: 1m30s\n"), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := Limits{Memory: 3 << 29, Pids: 100, CPU: 0.5, Nofile: 1024, Timeout: Duration(90 * time.Second)}
	if p.Process.Limits != want {
		t.Errorf("limits = %+v, want %+v", p.Process.Limits, want)
	}
	bad := []struct{ line, field, msg string }{
		{"memory: -1", "memory", "negative"},
		{"memory: \"-1G\"", "memory", "negative"},
		{"memory: 12Q", "memory", "invalid size"},
		{"memory: 1.5", "memory", "expected a size"},
		{"memory: \"0.5\"", "memory", "fraction of a byte"},
		{"memory: 99999999T", "memory", "too large"},
		{"pids: -5", "pids", "negative"},
		{"nofile: -5", "nofile", "negative"},
		{"cpu: -1", "cpu", "greater than 0"},
		{"cpu: 0.001", "cpu", "minimum"},
		{"cpu: .nan", "cpu", "finite"},
		{"timeout: -5s", "timeout", "negative"},
		{"timeout: 30", "timeout", "needs a unit"},
		{"timeout: soon", "timeout", "invalid duration"},
	}
	for _, b := range bad {
		_, err := Parse([]byte("version: 1\nprocess:\n  limits:\n    "+b.line+"\n"), "p.yaml")
		e := only(t, err)
		if e.Field != "process.limits."+b.field || e.Line != 4 || !strings.Contains(e.Msg, b.msg) {
			t.Errorf("%s: got %v", b.line, e)
		}
	}
}

func TestParseByteSize(t *testing.T) {
	good := map[string]ByteSize{
		"512": 512, "512B": 512, "256K": 256 << 10, "256k": 256 << 10, "256M": 256 << 20, "256Mi": 256 << 20,
		"256MiB": 256 << 20, "256MB": 256 << 20, "1G": 1 << 30, "1.5G": 3 << 29, "2T": 2 << 40, "1.1K": 1126, " 3 G ": 3 << 30,
	}
	for s, want := range good {
		got, err := ParseByteSize(s)
		if err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "G", "1X", "1GG", "-1G", "1e3", "1.5", "1 GiBs"} {
		if _, err := ParseByteSize(s); err == nil {
			t.Errorf("ParseByteSize(%q) succeeded", s)
		}
	}
	if s := ByteSize(2 << 30).String(); s != "2G" {
		t.Errorf("String() = %q", s)
	}
}

func TestLayers(t *testing.T) {
	p, err := Parse([]byte("version: 1\nlayers:\n  landlock: optional\n"), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p.Layers.Requirement(LayerLandlock) != Optional || p.Layers.Requirement(LayerSeccomp) != Required {
		t.Errorf("layers = %v", p.Layers)
	}
	_, err = Parse([]byte("version: 1\nlayers:\n  seccmp: optional\n"), "p.yaml")
	e := only(t, err)
	expectAt(t, e, "layers.seccmp", 3, 3, "unknown layer")
	if !strings.Contains(e.Hint, `"seccomp"`) {
		t.Errorf("hint %q", e.Hint)
	}
	_, err = Parse([]byte("version: 1\nlayers:\n  seccomp: maybe\n"), "p.yaml")
	expectAt(t, only(t, err), "layers.seccomp", 3, 12, "invalid requirement")
}

func TestEnvAndUserValidation(t *testing.T) {
	cases := []struct{ src, field, msg string }{
		{"process:\n  env:\n    set:\n      HOME: /x\n", "process.env.set.HOME", "HOME cannot be set"},
		{"process:\n  env:\n    pass: [HOME]\n", "process.env.pass[0]", "HOME cannot be passed"},
		{"process:\n  env:\n    pass: [\"A=B\"]\n", "process.env.pass[0]", "invalid variable name"},
		{"process:\n  env:\n    pass: [\"\"]\n", "process.env.pass[0]", "empty variable name"},
		{"process:\n  env:\n    pass: [\"A*B\"]\n", "process.env.pass[0]", "invalid variable name"},
		{"process:\n  env:\n    set: {\"A=B\": x}\n", "process.env.set.A=B", "invalid variable name"},
		{"process:\n  run_as_user: root\n", "process.run_as_user", "root"},
		{"process:\n  run_as_user: 0\n", "process.run_as_user", "root"},
		{"process:\n  run_as_user: \"000\"\n", "process.run_as_user", "root"},
		{"process:\n  run_as_user: -3\n", "process.run_as_user", "out of range"},
	}
	for _, c := range cases {
		_, err := Parse([]byte("version: 1\n"+c.src), "p.yaml")
		e := only(t, err)
		if e.Field != c.field || !strings.Contains(e.Msg, c.msg) || e.Line == 0 {
			t.Errorf("%q: got %v (line %d)", c.src, e, e.Line)
		}
	}
	p, err := Parse([]byte("version: 1\nprocess:\n  run_as_user: 1000\n  env:\n    pass: [LC_*, FOO]\n    set: {N: 1}\n"), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p.Process.RunAsUser != "1000" || p.Process.Env.Set["N"] != "1" {
		t.Errorf("process = %+v", p.Process)
	}
}

func TestDuplicateKey(t *testing.T) {
	_, err := Parse([]byte("version: 1\nnetwork:\n  mode: none\n  mode: host\n"), "p.yaml")
	e := only(t, err)
	expectAt(t, e, "network.mode", 4, 3, "duplicate key")
	if !strings.Contains(e.Hint, "line 3") {
		t.Errorf("hint %q", e.Hint)
	}
}

func TestSyntaxAndFileErrors(t *testing.T) {
	_, err := Parse([]byte("version: 1\nnetwork:\n  mode: [none\n"), "p.yaml")
	e := only(t, err)
	if e.Line == 0 || !strings.Contains(e.Msg, "invalid YAML") {
		t.Errorf("syntax error = %v", e)
	}
	for _, src := range []string{"", "# only a comment\n", "~\n"} {
		if _, err := Parse([]byte(src), "p.yaml"); err == nil || !strings.Contains(err.Error(), "empty") {
			t.Errorf("Parse(%q) = %v, want 'empty'", src, err)
		}
	}
	_, err = Parse([]byte("version: 1\n---\nversion: 1\n"), "p.yaml")
	if e := only(t, err); !strings.Contains(e.Msg, "more than one YAML document") {
		t.Errorf("multi-doc: %v", e)
	}
	_, err = Parse([]byte("- version: 1\n"), "p.yaml")
	expectAt(t, only(t, err), "", 1, 1, "expected a mapping")

	_, err = Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load of a missing file: %v, want fs.ErrNotExist", err)
	}
	if e := only(t, err); !strings.Contains(e.Error(), "nope.yaml: cannot read policy file") {
		t.Errorf("Load error = %q", e.Error())
	}
}

const jsonPolicy = "{\n\t\"version\": 1,\n\t\"filesystem\": {\n\t\t\"read_only\": [\"/usr\", {\"path\": \"/opt\", \"optional\": true}],\n\t\t\"protected\": []\n\t},\n\t\"network\": {\"mode\": \"host\"},\n\t\"process\": {\"limits\": {\"memory\": \"1G\", \"timeout\": \"5m\"}, \"env\": {\"set\": {\"A\": \"b\"}}}\n}\n"

const yamlPolicy = `# same as jsonPolicy
version: 1
network:
  mode: host
process:
  env:
    set:
      A: b
  limits:
    timeout: 5m
    memory: 1073741824
filesystem:
  protected: []
  read_only:
    - /usr
    - path: /opt
      optional: true
`

func TestJSONInput(t *testing.T) {
	p, err := Load(writePolicy(t, "p.json", jsonPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if p.Network.Mode != NetworkHost || p.Process.Limits.Memory != 1<<30 || p.Process.Limits.Timeout != Duration(5*time.Minute) ||
		len(p.Filesystem.ReadOnly) != 2 || !p.Filesystem.ReadOnly[1].Optional || p.Filesystem.Protected == nil {
		t.Errorf("JSON policy decoded as %+v", p)
	}
	// Errors in JSON carry positions too.
	_, err = Parse([]byte("{\n  \"version\": 1,\n  \"netwrok\": {}\n}"), "p.json")
	expectAt(t, only(t, err), "netwrok", 3, 3, "unknown field")
}

func TestProtectedNilVersusEmpty(t *testing.T) {
	p1, err := Parse([]byte("version: 1\nfilesystem:\n  protected: []\n"), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p2, err := Parse([]byte("version: 1\nfilesystem:\n  protected:\n"), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p1.Filesystem.Protected == nil || len(p1.Filesystem.Protected) != 0 {
		t.Errorf("protected: [] decoded as %#v", p1.Filesystem.Protected)
	}
	if p2.Filesystem.Protected != nil {
		t.Errorf("protected: (null) decoded as %#v", p2.Filesystem.Protected)
	}
	if Hash(p1) == Hash(p2) {
		t.Error("disabling protection does not change the hash")
	}
	// JSON keeps the distinction.
	data, _ := json.Marshal(p1)
	if !strings.Contains(string(data), `"protected":[]`) {
		t.Errorf("marshalled: %s", data)
	}
}

func TestHash(t *testing.T) {
	pj, err := Parse([]byte(jsonPolicy), "p.json")
	if err != nil {
		t.Fatal(err)
	}
	py, err := Parse([]byte(yamlPolicy), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	h := Hash(pj)
	if !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(h) {
		t.Fatalf("Hash = %q", h)
	}
	if Hash(py) != h {
		t.Error("equivalent YAML and JSON policies hash differently")
	}
	// Spelling out defaults does not change the hash.
	d1, _ := Parse([]byte("version: 1\n"), "a")
	d2, _ := Parse([]byte("version: 1\nnetwork: {mode: none}\nfilesystem: {include_workdir: true}\nlayers: {seccomp: required}\n"), "b")
	if Hash(d1) != Hash(d2) {
		t.Error("explicit defaults change the hash")
	}
	py.Process.Limits.Pids = 7
	if Hash(py) == h {
		t.Error("changing a limit does not change the hash")
	}
	if Hash(Default()) != Hash(Default()) {
		t.Error("Default hash unstable")
	}
}

// TestMarshalRoundTrip checks that a policy marshalled to JSON parses back
// to the same policy (durations are strings, protected [] survives).
func TestMarshalRoundTrip(t *testing.T) {
	p := Default()
	p.Process.Limits.Timeout = Duration(90 * time.Second)
	p.Filesystem.Protected = []string{}
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	q, err := Parse(data, "rt.json")
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if Hash(p) != Hash(q) {
		t.Errorf("round trip changed the policy:\n%s", data)
	}
}

func TestSchema(t *testing.T) {
	var s map[string]any
	if err := json.Unmarshal(Schema(), &s); err != nil {
		t.Fatalf("Schema is not JSON: %v", err)
	}
	if s["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
		t.Errorf("$schema = %v", s["$schema"])
	}
	props, _ := s["properties"].(map[string]any)
	names, _ := structFields(reflect.TypeOf(Policy{}))
	if len(props) != len(names) {
		t.Errorf("top-level properties %v, want %v", props, names)
	}
	for _, n := range names {
		if _, ok := props[n]; !ok {
			t.Errorf("schema lacks top-level field %q", n)
		}
	}
	// Every object schema with properties forbids additional ones, and every
	// field of the Go types appears as a property somewhere.
	seen := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if ps, ok := v["properties"].(map[string]any); ok {
				if v["additionalProperties"] != false {
					t.Errorf("object with properties %v allows additional properties", reflect.ValueOf(ps).MapKeys())
				}
				for k := range ps {
					seen[k] = true
				}
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(s)
	for _, p := range append(allFieldPaths(), "path", "optional") {
		last := p[strings.LastIndexByte(p, '.')+1:]
		if !seen[last] {
			t.Errorf("schema has no property %q (%s)", last, p)
		}
	}
	for _, l := range AllLayers {
		if !seen[string(l)] {
			t.Errorf("schema lacks layer %q", l)
		}
	}
}

// A policy file states only what it changes: absent fields take the
// default's values, written ones replace them.
func TestParseFillsAbsentFieldsFromDefault(t *testing.T) {
	p, err := Parse([]byte("version: 1\nfilesystem:\n  read_write: [/tmp]\nprocess:\n  limits:\n    pids: 5\n    memory: 0\n"), "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	def := Default()
	if len(p.Filesystem.ReadOnly) != len(def.Filesystem.ReadOnly) || p.Filesystem.ReadOnly[0].Path != "/usr" {
		t.Errorf("read_only = %v, want the default system dirs", p.Filesystem.ReadOnly)
	}
	if len(p.Filesystem.Deny) != len(def.Filesystem.Deny) {
		t.Errorf("deny = %v, want the default deny list", p.Filesystem.Deny)
	}
	l := p.Process.Limits
	if l.Pids != 5 || l.Memory != 0 || l.Nofile != def.Process.Limits.Nofile || l.CPU != def.Process.Limits.CPU {
		t.Errorf("limits = %+v: want pids 5 and memory 0 as written, nofile and cpu from the default", l)
	}
	p2, err := Parse([]byte("version: 1\nfilesystem:\n  read_only: []\n  deny: []\n"), "y.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(p2.Filesystem.ReadOnly) != 0 || len(p2.Filesystem.Deny) != 0 {
		t.Errorf("explicit empty lists must stay empty, got ro=%v deny=%v", p2.Filesystem.ReadOnly, p2.Filesystem.Deny)
	}
}

// The printable default policy file is the built-in default.
func TestDefaultYAMLIsDefault(t *testing.T) {
	p, err := Parse(DefaultYAML, "default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := Hash(p), Hash(Default()); got != want {
		t.Errorf("default.yaml hashes to %s, Default() to %s", got, want)
	}
}

func TestPosition(t *testing.T) {
	p, err := Parse([]byte("version: 1\nlayers:\n  cgroups: required\nfilesystem:\n  read_only: [/usr, /etc]\n"), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for field, want := range map[string]string{
		"layers.cgroups":          "p.yaml:3:12",
		"filesystem.read_only[1]": "p.yaml:5:21",
		"layers.landlock":         "p.yaml:3:3", // not written: its section is
		"process.limits.memory":   "",
	} {
		if got := p.Position(field); got != want {
			t.Errorf("Position(%q) = %q, want %q", field, got, want)
		}
	}
	if Default().Position("layers.cgroups") != "" {
		t.Error("the built-in default has no file positions")
	}
}

func TestUISection(t *testing.T) {
	p, err := Parse([]byte("version: 1\nui:\n  windows: true\n  clipboard: read\n"), "p.yaml")
	if err != nil || p.UI == nil || !p.UI.Windows || p.UI.Clipboard != "read" || p.UI.InputInjection {
		t.Fatalf("ui = %+v, %v", p.UI, err)
	}
	_, err = Parse([]byte("version: 1\nui:\n  clipboard: everything\n"), "p.yaml")
	expectAt(t, only(t, err), "ui.clipboard", 3, 14, "unknown clipboard access")
	if p, _ := Parse([]byte("version: 1\n"), "p.yaml"); p.UI != nil {
		t.Error("an absent ui section must stay nil (the restrictive posture)")
	}
}

func TestDockerSection(t *testing.T) {
	p, err := Parse([]byte("version: 1\ndocker:\n  image: debian:bookworm-slim\n"), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p.Docker == nil || p.Docker.Image != "debian:bookworm-slim" {
		t.Fatalf("docker = %+v", p.Docker)
	}
	for _, bad := range []struct{ ref, msg string }{
		{"'-v'", "starts with '-'"},
		{"'docker://x'", "URL scheme"},
		{"'a b'", "whitespace"},
		{"'x:'", "incomplete"},
	} {
		_, err := Parse([]byte("version: 1\ndocker:\n  image: "+bad.ref+"\n"), "p.yaml")
		expectAt(t, only(t, err), "docker.image", 3, 10, bad.msg)
	}
	_, err = Parse([]byte("version: 1\ndocker:\n  imag: x\n"), "p.yaml")
	expectAt(t, only(t, err), "docker.imag", 3, 3, "unknown field")
}

// A Limits written to JSON reads back as it was (the persistent linux
// sandbox's supervisor is handed its plan so); a bad duration is refused.
func TestLimitsJSONRoundTrip(t *testing.T) {
	want := Limits{Memory: 256 << 20, Pids: 64, CPU: 1.5, Nofile: 1024, Timeout: Duration(90 * time.Second)}
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var got Limits
	if err := json.Unmarshal(b, &got); err != nil || got != want {
		t.Fatalf("%s read back as %+v, %v; want %+v", b, got, err, want)
	}
	for in, ok := range map[string]bool{`{"timeout":0}`: true, `{"timeout":"0s"}`: true, `{"timeout":"soon"}`: false, `{"timeout":30}`: false} {
		var l Limits
		if err := json.Unmarshal([]byte(in), &l); (err == nil) != ok {
			t.Errorf("%s: error %v, want ok=%v", in, err, ok)
		}
	}
}

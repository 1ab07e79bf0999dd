package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/corral-sandbox/corral/internal/hostpkg"
	"github.com/corral-sandbox/corral/provider"
)

// noData are the commands that print no data, so take no -o: what they
// print is a workload's output, a document in its own format, an archive
// or one line saying what was done.
var noData = map[string]string{
	"corral run":                       "the workload's output",
	"corral service run":               "the workload's output",
	"corral sandbox exec":              "the workload's output",
	"corral gateway serve":             "a daemon",
	"corral image build-base":          "one line: the image built",
	"corral policy default":            "a policy file",
	"corral policy schema":             "a JSON Schema document",
	"corral service logs":              "a log stream",
	"corral service export":            "an archive",
	"corral service import":            "one line: the session made",
	"corral service provision":         "one line: what was made",
	"corral service deprovision":       "one line: what was removed",
	"corral service start":             "one line: the session started",
	"corral service stop":              "one line: the session stopped",
	"corral service restart":           "one line: the session restarted",
	"corral service autostart enable":  "one line: the unit written",
	"corral service autostart disable": "one line: the unit removed",
}

// commands is every runnable command of the tree, by path.
func commands(c *cobra.Command) map[string]*cobra.Command {
	out := map[string]*cobra.Command{}
	if c.Runnable() && !c.Hidden && c.Name() != "help" {
		out[c.CommandPath()] = c
	}
	for _, k := range c.Commands() {
		for p, kc := range commands(k) {
			out[p] = kc
		}
	}
	return out
}

// TestEveryCommandTakesOutput: a command that prints data takes -o text,
// json and yaml, and refuses any other format with the fix.
func TestEveryCommandTakesOutput(t *testing.T) {
	for path, c := range commands(newRootCmd()) {
		f := c.LocalFlags().Lookup("output")
		if f == nil {
			f = c.InheritedFlags().Lookup("output")
		}
		if _, exempt := noData[path]; exempt || c.Annotations[noDataAnnotation] != "" {
			continue
		}
		if f == nil || f.Shorthand != "o" {
			t.Errorf("%s prints data but takes no -o/--output (or list it in noData with the reason)", path)
			continue
		}
		for _, v := range []string{"json", "yaml", "text"} {
			if err := f.Value.Set(v); err != nil {
				t.Errorf("%s -o %s: %v", path, v, err)
			}
		}
		if err := f.Value.Set("out.json"); err == nil || !strings.Contains(err.Error(), "--out FILE") {
			t.Errorf("%s -o out.json: got %v, want an error naming --out FILE", path, err)
		}
	}
	if runtime.GOOS != "linux" {
		return // noData is the Linux tree's; corral.exe lacks some
	}
	for path := range noData {
		if _, ok := commands(newRootCmd())[path]; !ok {
			t.Errorf("noData lists %s, which is not a command", path)
		}
	}
}

// TestEveryCommandDocumentsExitStatus: every command's help says its exit
// statuses (its own paragraph, or its group's).
func TestEveryCommandDocumentsExitStatus(t *testing.T) {
	for path, c := range commands(newRootCmd()) {
		if !strings.Contains(c.Long, "Exit status") {
			t.Errorf("%s: its help (Long) does not say its exit statuses (\"Exit status: ...\")", path)
		}
	}
}

// TestOutputYAMLIsTheJSON: -o yaml is the json's fields, in its order,
// and reads back to the same value.
func TestOutputYAMLIsTheJSON(t *testing.T) {
	v := struct {
		Name  string            `json:"name"`
		Zero  int               `json:"zero"`
		Flag  bool              `json:"flag"`
		Text  string            `json:"text"`
		Looks string            `json:"looks"`
		List  []string          `json:"list"`
		Map   map[string]string `json:"map"`
	}{"b", 0, true, "two\nlines", "true", []string{"x", "y"}, map[string]string{"k": "v"}}
	var j, y bytes.Buffer
	if err := outputFormat("json").write(&j, v); err != nil {
		t.Fatal(err)
	}
	if err := outputFormat("yaml").write(&y, v); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(y.String(), "{") || strings.Contains(y.String(), "\"name\"") {
		t.Errorf("yaml is in JSON's flow style:\n%s", y.String())
	}
	if i, k := strings.Index(y.String(), "name:"), strings.Index(y.String(), "zero:"); i < 0 || k < i {
		t.Errorf("yaml lost the fields' order:\n%s", y.String())
	}
	var fromJ, fromY any
	if err := json.Unmarshal(j.Bytes(), &fromJ); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(y.Bytes(), &fromY); err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(fromJ)
	b, _ := json.Marshal(fromY)
	if !bytes.Equal(a, b) {
		t.Errorf("yaml reads back as %s, json as %s", b, a)
	}
}

// Markers of docs/exit-codes.md's generated section.
const (
	exitDocBegin = "<!-- per-command: generated from each command's help by TestExitCodesDoc; CORRAL_UPDATE_DOCS=1 go test ./cmd/corral -run TestExitCodesDoc rewrites it -->\n"
	exitDocEnd   = "<!-- end per-command -->\n"
)

// TestExitCodesDoc: docs/exit-codes.md's per-command table is what each
// command's --help says (Linux's command tree; corral.exe's service
// commands are in their help and docs/service.md).
func TestExitCodesDoc(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the table is of the Linux build's commands")
	}
	status := func(c *cobra.Command) string {
		i := strings.Index(c.Long, "Exit status")
		if i < 0 {
			return ""
		}
		p := c.Long[i:]
		p = strings.TrimPrefix(strings.TrimPrefix(p, "Exit status:"), "Exit status")
		return strings.Join(strings.Fields(p), " ")
	}
	rows := map[string]string{}
	var walk func(c *cobra.Command, group *cobra.Command)
	walk = func(c *cobra.Command, group *cobra.Command) {
		st := status(c)
		if st != "" && c.Name() != "help" && !c.Hidden && (c.Runnable() || c.HasSubCommands()) {
			if group != nil && status(group) == st {
				st = "as `" + group.CommandPath() + "`"
			} else {
				group = c
			}
			rows[c.CommandPath()] = fmt.Sprintf("| `%s` | %s |\n", c.CommandPath(), strings.ReplaceAll(st, "|", "\\|"))
		}
		for _, k := range c.Commands() {
			walk(k, group)
		}
	}
	walk(newRootCmd(), nil)
	paths := make([]string, 0, len(rows))
	for p := range rows {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	want := exitDocBegin + "| command | exit status |\n|---|---|\n"
	for _, p := range paths {
		want += rows[p]
	}
	want += exitDocEnd
	const file = "../../docs/exit-codes.md"
	doc, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	i, j := bytes.Index(doc, []byte(exitDocBegin)), bytes.Index(doc, []byte(exitDocEnd))
	if i < 0 || j < i {
		t.Fatalf("%s has no generated section (%q ... %q)", file, exitDocBegin, exitDocEnd)
	}
	got := string(doc[i : j+len(exitDocEnd)])
	if got == want {
		return
	}
	if os.Getenv("CORRAL_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(file, []byte(string(doc[:i])+want+string(doc[j+len(exitDocEnd):])), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's per-command table is not the commands' help; rerun with CORRAL_UPDATE_DOCS=1. Want:\n%s", file, want)
}

// TestDoctorPackageFix: a docker provider without a Docker Engine on the
// host gets, first, the host's package manager's install command.
func TestDoctorPackageFix(t *testing.T) {
	t.Setenv("PATH", filepath.Join(os.TempDir(), "corral-test-no-such-dir")) // no dockerd
	rep := doctorReport{Host: map[string]string{}, Providers: []doctorProvider{
		{HostReport: provider.HostReport{Provider: "docker", Fixes: []string{"start the Docker daemon"}}},
		{HostReport: provider.HostReport{Provider: "linux", Available: true}},
	}}
	packageFixes(&rep, hostpkg.Detect([]byte("ID=ubuntu\nID_LIKE=debian\n")))
	if f := rep.Providers[0].Fixes; len(f) != 2 || !strings.Contains(f[0], "apt-get install -y docker.io") {
		t.Errorf("docker's fixes: %q, want the apt-get install first", f)
	}
	if len(rep.Providers[1].Fixes) != 0 {
		t.Errorf("an available provider got fixes: %q", rep.Providers[1].Fixes)
	}
	if rep.Host["installed_by"] == "" {
		t.Error("no installed_by host fact")
	}
}

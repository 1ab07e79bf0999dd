//go:build linux

package qualify

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/execfile"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/net/html"
)

// sampleReport is a fake run's report with a perf section and a policy.
func sampleReport(t *testing.T) *Report {
	t.Helper()
	cs := fakeCases()
	cs = append(cs, Case{ID: "T07", Title: "writes a policy", Run: cs[0].Run})
	withCases(t, cs...)
	rep := qualifyFake(t, Options{Providers: []string{"all"}})
	rep.Policies["linux/T07/policy-1.yaml"] = PolicyRecord{SHA256: strings.Repeat("0", 64), Text: "version: 1\n"}
	rep.Providers[0].Perf = &Perf{Runs: 15, ColdStart: 80 * time.Millisecond, WarmStart: 40 * time.Millisecond, PeakRSSKiB: 12000, CPU: 20 * time.Millisecond,
		Tools: []ToolPerf{
			{Name: "git status", Command: "git status --short", Sandbox: 50 * time.Millisecond, Host: 5 * time.Millisecond, Ratio: 10},
			{Name: "python3 -c pass", Command: "python3 -c pass", Skipped: "python3 is not installed on the host"},
		}}
	return rep
}

func validator(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(Schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestReportValidatesAgainstSchema(t *testing.T) {
	s := validator(t)
	rep := sampleReport(t)
	dir := t.TempDir()
	if err := rep.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	inst, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(inst); err != nil {
		t.Fatalf("report.json does not validate: %v", err)
	}

	// Every target qualify knows is a provider name (and a policy key's
	// first part) the schema takes.
	for _, name := range KnownProviders {
		r := *rep
		r.Providers = []ProviderReport{rep.Providers[0]}
		r.Providers[0].Name = name
		r.Policies = map[string]PolicyRecord{name + "/P01/policy-1.yaml": {SHA256: strings.Repeat("0", 64), Text: "version: 1\n"}}
		js, _ := r.JSON()
		inst, _ := jsonschema.UnmarshalJSON(bytes.NewReader(js))
		if err := s.Validate(inst); err != nil {
			t.Errorf("provider %s: %v", name, err)
		}
	}

	// The schema is not vacuous: a skipped result without a reason, a
	// status outside the three, or an unknown field fail it.
	for name, mutate := range map[string]func(m map[string]any){
		"bad status": func(m map[string]any) { result0(m)["status"] = "green" },
		"skip without reason": func(m map[string]any) {
			r := result0(m)
			r["status"] = "skipped"
			delete(r, "reason")
		},
		"unknown field": func(m map[string]any) { m["extra"] = 1 },
		"bad sha256":    func(m map[string]any) { m["binary"].(map[string]any)["sha256"] = "xyz" },
	} {
		js, _ := rep.JSON()
		var m map[string]any
		if err := json.Unmarshal(js, &m); err != nil {
			t.Fatal(err)
		}
		mutate(m)
		b, _ := json.Marshal(m)
		inst, _ := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if s.Validate(inst) == nil {
			t.Errorf("%s: validates", name)
		}
	}
}

func result0(m map[string]any) map[string]any {
	return m["providers"].([]any)[0].(map[string]any)["results"].([]any)[0].(map[string]any)
}

func TestMarkdownMatrix(t *testing.T) {
	md := sampleReport(t).Markdown()
	for _, want := range []string{
		"## Matrix",
		"| case | what is attacked | linux | docker | mxc |",
		"| T01 | passes | ✅ pass | ⏭ skipped | ⏭ skipped |",
		"| T02 | fails <script>alert(1)</script> | ❌ fail |",
		"| T03 | does not apply | ⏭ skipped |",
		"## Failures",
		"### T04 panics — linux",
		"- attempt: read <script>alert(1)</script>",
		"## Skipped (not counted as passes)",
		"- T03 does not apply on linux: needs a thing",
		"## Performance: linux",
		"| `git status --short` | 50.0 ms | 5.0 ms | 10.00× |",
		"| linux/T07/policy-1.yaml |",
		"**FAIL: 3 case(s) failed**",
		"- every case on docker: provider not built in\n",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(md)
	}
}

// voidElements have no end tag.
var voidElements = map[string]bool{"area": true, "base": true, "br": true, "col": true, "embed": true, "hr": true, "img": true, "input": true, "link": true, "meta": true, "source": true, "track": true, "wbr": true}

func TestHTMLWellFormedAndEscaped(t *testing.T) {
	var buf bytes.Buffer
	if err := sampleReport(t).WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	page := buf.String()

	// Every element is closed, in order.
	z := html.NewTokenizer(strings.NewReader(page))
	var stack []string
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			if z.Err() != io.EOF {
				t.Fatal(z.Err())
			}
			break
		}
		name, _ := z.TagName()
		switch tt {
		case html.StartTagToken:
			if !voidElements[string(name)] {
				stack = append(stack, string(name))
			}
		case html.EndTagToken:
			if len(stack) == 0 || stack[len(stack)-1] != string(name) {
				t.Fatalf("</%s> does not close %v", name, stack)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) != 0 {
		t.Fatalf("unclosed elements: %v", stack)
	}

	// The evidence's <script> is text, not an element; no external resources.
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	var scripts, details, texts int
	var cellClasses []string
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			switch n.Data {
			case "script":
				scripts++
			case "details":
				details++
			case "link", "img":
				t.Errorf("external resource element <%s>", n.Data)
			case "td":
				for _, a := range n.Attr {
					if a.Key == "class" && strings.HasPrefix(a.Val, "cell ") {
						cellClasses = append(cellClasses, strings.TrimPrefix(a.Val, "cell "))
					}
				}
			}
		}
		if n.Type == html.TextNode && strings.Contains(n.Data, "<script>alert('x')</script>") {
			texts++
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	if scripts != 0 {
		t.Errorf("%d <script> elements: evidence not escaped", scripts)
	}
	if texts == 0 {
		t.Error("the evidence text is missing")
	}
	if strings.Contains(page, "<script>alert") || !strings.Contains(page, "&lt;script&gt;alert") {
		t.Error("raw <script> in the page")
	}
	// 7 cases × 3 providers, each a cell with the evidence behind it.
	if len(cellClasses) != 21 || details < 21 {
		t.Errorf("cells %d (%v), details %d", len(cellClasses), cellClasses, details)
	}
	for _, want := range []string{"td.pass { background: #d4f7d4; }", "td.fail { background: #fbd5d5; }", "td.skipped { background: #e4e4e4; }"} {
		if !strings.Contains(page, want) {
			t.Errorf("css lacks %q", want)
		}
	}
}

func TestVerify(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "corral")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := execfile.Copy(self, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	sum, err := fileSHA256(bin)
	if err != nil {
		t.Fatal(err)
	}
	rep := &Report{SchemaVersion: SchemaVersion, Date: time.Now(), Host: hostInfo(), Binary: BinaryInfo{Path: bin, SHA256: sum},
		Policies: map[string]PolicyRecord{}}
	rs := &runState{policies: rep.Policies}
	rs.recordPolicy("linux/P01/policy-1.yaml", "version: 1\n")
	if err := rep.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "report.json")
	if err := Verify(path, bin); err != nil {
		t.Fatalf("Verify on the same binary: %v", err)
	}

	// The binary changes by one byte.
	f, err := os.OpenFile(bin, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{0})
	f.Close()
	err = Verify(path, bin)
	if err == nil || !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "report was made with a different corral binary") {
		t.Fatalf("Verify after the binary changed: %v", err)
	}

	// An edited policy text, another kernel.
	rep.Binary.SHA256, _ = fileSHA256(bin)
	rep.Policies["linux/P01/policy-1.yaml"] = PolicyRecord{SHA256: rep.Policies["linux/P01/policy-1.yaml"].SHA256, Text: "version: 1\nnetwork: {mode: host}\n"}
	rep.Host.Kernel = "0.0.1-other"
	rep.Host.LandlockABI += 1
	if err := rep.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	err = Verify(path, bin)
	for _, want := range []string{"policy linux/P01/policy-1.yaml", "another kernel", "Landlock ABI"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Verify error %v lacks %q", err, want)
		}
	}
	if err := Verify(filepath.Join(dir, "missing.json"), bin); err == nil || errors.Is(err, ErrMismatch) {
		t.Errorf("missing report: %v", err)
	}
}

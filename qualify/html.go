//go:build linux

package qualify

import (
	"html/template"
	"io"
	"maps"
	"slices"
	"sync"
	"time"
)

// htmlRow is one case of the matrix.
type htmlRow struct {
	ID, Title string
	Cells     []*Result // one per provider; nil: not run there
}

type htmlPolicy struct {
	Name string
	PolicyRecord
}

type htmlData struct {
	*Report
	OK       bool
	Verdict  string
	Rows     []htmlRow
	Policies []htmlPolicy
}

var htmlFuncs = template.FuncMap{
	"ms":    ms,
	"ratio": ratio,
	"secs":  func(d time.Duration) string { return d.Round(100 * time.Millisecond).String() },
	"date":  func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
}

var htmlTmpl = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("report").Funcs(htmlFuncs).Parse(htmlReport))
})

// htmlReport is the report page's template (parsed on first use).
const htmlReport = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Corral qualification report {{date .Date}}</title>
<style>
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 72em; padding: 0 1em; color: #1d1d1f; }
h1 { font-size: 1.6em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { border: 1px solid #ccc; padding: .3em .6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
code, pre { font: 12px/1.4 ui-monospace, SFMono-Regular, Menlo, monospace; }
pre { white-space: pre-wrap; word-break: break-all; background: #f7f7f7; padding: .4em; margin: .2em 0 .6em; max-height: 24em; overflow: auto; }
.verdict { padding: .6em 1em; border-radius: 4px; font-weight: bold; }
.verdict.ok { background: #d4f7d4; color: #0a5c0a; } .verdict.bad { background: #fbd5d5; color: #8a1010; }
td.pass { background: #d4f7d4; } td.fail { background: #fbd5d5; } td.skipped { background: #e4e4e4; } td.none { background: #fafafa; color: #999; }
td.cell { min-width: 12em; }
summary { cursor: pointer; font-weight: 600; }
.reason { margin: .3em 0; }
dl { margin: .2em 0; } dt { font-weight: 600; margin-top: .4em; } dd { margin: 0 0 0 .8em; }
.small { color: #555; font-size: 12px; }
</style>
</head>
<body>
<h1>Corral qualification report</h1>
<p class="verdict {{if .OK}}ok{{else}}bad{{end}}">{{.Verdict}}</p>
<table>
<tr><th>date</th><td>{{date .Date}}</td></tr>
<tr><th>binary</th><td><code>{{.Binary.Path}}</code> {{.Binary.Version}}</td></tr>
<tr><th>binary sha256</th><td><code>{{.Binary.SHA256}}</code></td></tr>
<tr><th>host</th><td>kernel {{.Host.Kernel}}, Landlock ABI {{.Host.LandlockABI}}, {{.Host.OS}}/{{.Host.Arch}}, cgroup {{.Host.Cgroup}}, uid {{.Host.UID}}</td></tr>
<tr><th>strict</th><td>{{if .Strict}}yes: skips are failures{{else}}no: skips are reported, never counted as passes{{end}}</td></tr>
</table>
<p class="small">Check that this report belongs to a binary: <code>corral qualify verify report.json --bin PATH</code>.</p>

<h2>Summary</h2>
<table>
<tr><th>provider</th><th>version</th><th>pass</th><th>fail</th><th>skipped</th><th>note</th></tr>
{{range .Providers}}<tr><td>{{.Name}}</td><td>{{.Version}}</td><td>{{.Summary.Pass}}</td><td>{{.Summary.Fail}}</td><td>{{.Summary.Skipped}}</td><td>{{.Note}}</td></tr>
{{end}}</table>

<h2>Matrix</h2>
<p class="small">Open a cell for the reason and the evidence: what was attempted and what came back.</p>
<table class="matrix">
<tr><th>case</th><th>what is attacked</th>{{range .Providers}}<th>{{.Name}}</th>{{end}}</tr>
{{range .Rows}}<tr id="{{.ID}}"><td>{{.ID}}</td><td>{{.Title}}</td>{{range .Cells}}{{if .}}<td class="cell {{.Status}}"><details><summary>{{.Status}} <span class="small">{{secs .Duration}}</span></summary>
{{if .Reason}}<p class="reason">{{.Reason}}</p>{{end}}<dl>{{range .Evidence}}<dt>{{.Attempt}}</dt><dd><pre>{{.Got}}</pre></dd>{{else}}<dd class="small">no evidence</dd>{{end}}</dl></details></td>{{else}}<td class="cell none">—</td>{{end}}{{end}}</tr>
{{end}}</table>

{{range $p := .Providers}}{{with $p.Perf}}<h2>Performance: {{$p.Name}}</h2>
<p class="small">Medians over {{.Runs}} runs. Cold start is the first run of this qualify run (no cache dropped).</p>
{{if .Error}}<p class="reason">Error: {{.Error}}</p>{{end}}
<table>
<tr><th>cold start <code>corral run -- true</code></th><td>{{ms .ColdStart}}</td></tr>
<tr><th>warm start (median)</th><td>{{ms .WarmStart}}</td></tr>
<tr><th>peak RSS, largest process of the tree (GNU time %M)</th><td>{{.PeakRSSKiB}} KiB</td></tr>
<tr><th>CPU time user+sys (median)</th><td>{{ms .CPU}}</td></tr>
</table>
<table>
<tr><th>tool</th><th>through corral</th><th>on the host</th><th>ratio</th><th>note</th></tr>
{{range .Tools}}<tr><td><code>{{.Command}}</code></td><td>{{ms .Sandbox}}</td><td>{{ms .Host}}</td><td>{{ratio .Ratio}}</td><td>{{.Skipped}}{{.Error}}</td></tr>
{{end}}</table>
{{end}}{{end}}

{{if .Policies}}<h2>Policies</h2>
{{range .Policies}}<details><summary><code>{{.Name}}</code> <span class="small">sha256 {{.SHA256}}</span></summary><pre>{{.Text}}</pre></details>
{{end}}{{end}}
</body>
</html>
`

// WriteHTML writes report.html: self-contained (inline CSS, no scripts),
// the case × provider matrix colour-coded (pass green, fail red, skipped
// grey), each cell expandable to its reason and evidence. Everything from
// the run is escaped by html/template.
func (r *Report) WriteHTML(w io.Writer) error {
	d := htmlData{Report: r, OK: r.OK(), Verdict: r.Verdict()}
	ids, titles := r.caseIDs()
	for _, id := range ids {
		row := htmlRow{ID: id, Title: titles[id]}
		for i := range r.Providers {
			row.Cells = append(row.Cells, r.Providers[i].result(id))
		}
		d.Rows = append(d.Rows, row)
	}
	for _, k := range slices.Sorted(maps.Keys(r.Policies)) {
		d.Policies = append(d.Policies, htmlPolicy{Name: k, PolicyRecord: r.Policies[k]})
	}
	return htmlTmpl().Execute(w, d)
}

//go:build linux

package qualify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/provider"
)

// SchemaVersion is report.json's schema_version (schema.json).
const SchemaVersion = 1

// Report is what `corral qualify` produced, bound to what it tested: the
// binary's sha256, each policy's text and sha256, the host's kernel and
// Landlock ABI and the date.
type Report struct {
	SchemaVersion int        `json:"schema_version"`
	Date          time.Time  `json:"date"`
	Host          HostInfo   `json:"host"`
	Binary        BinaryInfo `json:"binary"`
	Strict        bool       `json:"strict"` // skips were failures
	// Policies are the policy files the cases ran with, by
	// "provider/case/file": each one's text and its sha256.
	Policies  map[string]PolicyRecord `json:"policies"`
	Providers []ProviderReport        `json:"providers"`
}

// HostInfo is the host the report was made on.
type HostInfo struct {
	Kernel      string `json:"kernel"`       // uname -r
	LandlockABI int    `json:"landlock_abi"` // 0: no Landlock
	OS          string `json:"os"`           // "linux (Debian GNU/Linux 13 (trixie))"
	Arch        string `json:"arch"`         // GOARCH
	Cgroup      string `json:"cgroup"`       // "v1", "v2", "none"
	UID         int    `json:"uid"`          // the user qualify (and corral) ran as
}

// BinaryInfo is the corral binary under test.
type BinaryInfo struct {
	Path    string `json:"path"`
	SHA256  string `json:"sha256"`
	Version string `json:"version"` // `corral version`: version, commit, Go
}

// PolicyRecord is one policy a case ran with.
type PolicyRecord struct {
	SHA256 string `json:"sha256"`
	Text   string `json:"text"`
}

// ProviderReport is the suite's outcome for one provider.
type ProviderReport struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// Skipped says why no case could run (provider not built in, not
	// available here); every result is then skipped with that reason.
	Skipped string `json:"skipped,omitempty"`
	// Mock: the provider's executor is a stand-in (MXC's wxc-exec
	// stand-in reports tier "mock"); its results prove wiring, not OS
	// enforcement, and every cell says so.
	Mock    bool              `json:"mock,omitempty"`
	Facts   map[string]string `json:"facts,omitempty"` // corral doctor's host facts for it
	Results []Result          `json:"results"`
	Perf    *Perf             `json:"perf,omitempty"`
	Summary Summary           `json:"summary"`
}

// MockNote marks every result of a provider whose executor is a stand-in.
const MockNote = provider.MockNote

// Note is the summary's note for p: why it was skipped, or that it is a
// mock.
func (p ProviderReport) Note() string {
	if p.Mock && p.Skipped != "" {
		return MockNote + "; " + p.Skipped
	}
	if p.Mock {
		return MockNote
	}
	return p.Skipped
}

// Summary counts results. A skip is never a pass.
type Summary struct {
	Pass    int `json:"pass"`
	Fail    int `json:"fail"`
	Skipped int `json:"skipped"`
}

func summarize(rs []Result) Summary {
	var s Summary
	for _, r := range rs {
		switch r.Status {
		case Pass:
			s.Pass++
		case Skipped:
			s.Skipped++
		default:
			s.Fail++
		}
	}
	return s
}

// Totals sums the providers' summaries.
func (r *Report) Totals() Summary {
	var t Summary
	for _, p := range r.Providers {
		t.Pass += p.Summary.Pass
		t.Fail += p.Summary.Fail
		t.Skipped += p.Summary.Skipped
	}
	return t
}

// realPasses counts the passes of providers whose executor is real: a
// stand-in's pass is not evidence of OS enforcement (see MockNote).
func (r *Report) realPasses() int {
	n := 0
	for _, p := range r.Providers {
		if !p.Mock {
			n += p.Summary.Pass
		}
	}
	return n
}

// OK is true when no case failed and at least one ran on a real provider
// (a suite where everything was skipped, or only a stand-in ran, qualified
// nothing).
func (r *Report) OK() bool {
	return r.Totals().Fail == 0 && r.realPasses() > 0
}

// ExitCode is `corral qualify`'s exit status for r: 0 when OK, 1 when a
// case failed, none ran, or only stand-in providers passed.
func (r *Report) ExitCode() int {
	if r.OK() {
		return 0
	}
	return 1
}

// Verdict is "PASS" or "FAIL" with the reason.
func (r *Report) Verdict() string {
	t := r.Totals()
	switch {
	case t.Fail > 0:
		return fmt.Sprintf("FAIL: %d case(s) failed", t.Fail)
	case t.Pass == 0:
		return "FAIL: no case ran (everything was skipped)"
	case r.realPasses() == 0:
		return "FAIL: only stand-in (mock) providers ran; nothing was qualified"
	case t.Skipped > 0:
		return fmt.Sprintf("PASS: every case that ran passed (%d skipped, not counted as passes)", t.Skipped)
	}
	return "PASS: every case passed"
}

// caseIDs is every case of the report, in order, with its title.
func (r *Report) caseIDs() (ids []string, titles map[string]string) {
	titles = map[string]string{}
	for _, p := range r.Providers {
		for _, res := range p.Results {
			if _, ok := titles[res.ID]; !ok {
				ids = append(ids, res.ID)
			}
			if titles[res.ID] == "" {
				titles[res.ID] = res.Title
			}
		}
	}
	slices.Sort(ids)
	return ids, titles
}

// result finds provider p's result for case id.
func (p *ProviderReport) result(id string) *Result {
	for i := range p.Results {
		if p.Results[i].ID == id {
			return &p.Results[i]
		}
	}
	return nil
}

// WriteFiles writes report.json, report.md and report.html to dir
// (created when missing).
func (r *Report) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := r.JSON()
	if err != nil {
		return err
	}
	var html bytes.Buffer
	if err := r.WriteHTML(&html); err != nil {
		return err
	}
	for name, data := range map[string][]byte{"report.json": js, "report.md": []byte(r.Markdown()), "report.html": html.Bytes()} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// JSON is report.json: indented, with a final newline.
func (r *Report) JSON() ([]byte, error) {
	if r.Policies == nil {
		r.Policies = map[string]PolicyRecord{}
	}
	if r.Providers == nil {
		r.Providers = []ProviderReport{}
	}
	for i := range r.Providers {
		if r.Providers[i].Results == nil {
			r.Providers[i].Results = []Result{}
		}
		for j := range r.Providers[i].Results {
			if r.Providers[i].Results[j].Evidence == nil {
				r.Providers[i].Results[j].Evidence = []Evidence{}
			}
		}
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// statusMark is a result's cell text.
func statusMark(s Status) string {
	switch s {
	case Pass:
		return "✅ pass"
	case Fail:
		return "❌ fail"
	case Skipped:
		return "⏭ skipped"
	}
	return string(s)
}

func mdCell(s string) string {
	s = strings.ReplaceAll(s, "\r", "")
	s = strings.ReplaceAll(s, "\n", " ")
	s = strings.ReplaceAll(s, "|", `\|`)
	return s
}

// fence returns a code fence longer than any run of backticks in s.
func fence(s string) string {
	n, run := 3, 0
	for _, c := range s {
		if c == '`' {
			run++
			if run >= n {
				n = run + 1
			}
		} else {
			run = 0
		}
	}
	return strings.Repeat("`", n)
}

// Markdown is report.md: the verdict, what was tested, the case ×
// provider matrix, the failures with their evidence, the skips with their
// reasons, the performance section and the policies' hashes.
func (r *Report) Markdown() string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# Corral qualification report\n\n")
	w("**%s**\n\n", r.Verdict())
	w("- Date: %s\n", r.Date.UTC().Format(time.RFC3339))
	w("- Binary: `%s` %s\n", r.Binary.Path, r.Binary.Version)
	w("- Binary sha256: `%s`\n", r.Binary.SHA256)
	w("- Host: kernel %s, Landlock ABI %d, %s/%s, cgroup %s, uid %d\n", r.Host.Kernel, r.Host.LandlockABI, r.Host.OS, r.Host.Arch, r.Host.Cgroup, r.Host.UID)
	w("- Strict (skips fail): %v\n", r.Strict)
	w("- Check the binding: `corral qualify verify report.json`\n\n")

	w("## Summary\n\n| provider | version | pass | fail | skipped | note |\n|---|---|---|---|---|---|\n")
	for _, p := range r.Providers {
		w("| %s | %s | %d | %d | %d | %s |\n", p.Name, mdCell(p.Version), p.Summary.Pass, p.Summary.Fail, p.Summary.Skipped, mdCell(p.Note()))
	}

	ids, titles := r.caseIDs()
	w("\n## Matrix\n\n| case | what is attacked |")
	for _, p := range r.Providers {
		w(" %s |", p.Name)
	}
	w("\n|---|---|")
	for range r.Providers {
		w("---|")
	}
	w("\n")
	for _, id := range ids {
		w("| %s | %s |", id, mdCell(titles[id]))
		for i := range r.Providers {
			if res := r.Providers[i].result(id); res != nil {
				w(" %s |", statusMark(res.Status))
			} else {
				w(" — |")
			}
		}
		w("\n")
	}

	var fails, skips []*Result
	var provSkips []string
	for i := range r.Providers {
		if p := &r.Providers[i]; p.Skipped != "" && p.Summary.Fail == 0 {
			provSkips = append(provSkips, fmt.Sprintf("- every case on %s: %s\n", p.Name, mdCell(p.Skipped)))
			continue
		}
		for j := range r.Providers[i].Results {
			switch res := &r.Providers[i].Results[j]; res.Status {
			case Pass:
			case Skipped:
				skips = append(skips, res)
			default:
				fails = append(fails, res)
			}
		}
	}
	if len(fails) > 0 {
		w("\n## Failures\n")
		for _, res := range fails {
			w("\n### %s %s — %s\n\n%s\n", res.ID, res.Title, res.Provider, res.Reason)
			writeMDEvidence(&b, res.Evidence)
		}
	}
	if len(skips)+len(provSkips) > 0 {
		w("\n## Skipped (not counted as passes)\n\n")
		for _, l := range provSkips {
			w("%s", l)
		}
		for _, res := range skips {
			w("- %s %s on %s: %s\n", res.ID, res.Title, res.Provider, mdCell(res.Reason))
		}
	}
	for _, p := range r.Providers {
		if p.Perf != nil {
			w("\n## Performance: %s\n\n", p.Name)
			p.Perf.markdown(&b)
		}
	}
	if len(r.Policies) > 0 {
		w("\n## Policies\n\n| policy | sha256 |\n|---|---|\n")
		for _, k := range slices.Sorted(maps.Keys(r.Policies)) {
			w("| %s | `%s` |\n", mdCell(k), r.Policies[k].SHA256)
		}
	}
	return b.String()
}

func writeMDEvidence(b *strings.Builder, ev []Evidence) {
	if len(ev) == 0 {
		b.WriteString("\n(no evidence)\n")
		return
	}
	for _, e := range ev {
		f := fence(e.Got)
		fmt.Fprintf(b, "\n- attempt: %s\n\n  %stext\n%s\n  %s\n", mdCell(e.Attempt), f, indent(e.Got, "  "), f)
	}
}

func indent(s, pre string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = pre + lines[i]
	}
	return strings.Join(lines, "\n")
}

// TextSummary is the few lines `corral qualify` prints at the end.
func (r *Report) TextSummary() string {
	var b strings.Builder
	for _, p := range r.Providers {
		fmt.Fprintf(&b, "%s: %d pass, %d fail, %d skipped", p.Name, p.Summary.Pass, p.Summary.Fail, p.Summary.Skipped)
		if p.Skipped != "" {
			fmt.Fprintf(&b, " (%s)", p.Skipped)
		}
		b.WriteString("\n")
		for _, res := range p.Results {
			if res.Status == Fail {
				fmt.Fprintf(&b, "  FAIL %s %s: %s\n", res.ID, res.Title, bound(res.Reason, 300))
			}
		}
	}
	b.WriteString(r.Verdict() + "\n")
	return b.String()
}

// ---- host facts ----

func hostInfo() HostInfo {
	h := HostInfo{Kernel: kernelRelease(), LandlockABI: landlockABI(), OS: runtime.GOOS, Arch: runtime.GOARCH, UID: os.Geteuid()}
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
				h.OS += " (" + strings.Trim(v, `"'`) + ")"
			}
		}
	}
	switch {
	case fileExists("/sys/fs/cgroup/cgroup.controllers"):
		h.Cgroup = "v2"
	case fileExists("/sys/fs/cgroup/memory") || fileExists("/sys/fs/cgroup/pids"):
		h.Cgroup = "v1"
	default:
		h.Cgroup = "none"
	}
	return h
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// landlockABI is the kernel's Landlock ABI version, 0 without Landlock.
func landlockABI() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0
	}
	return int(v)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

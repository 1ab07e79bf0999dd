//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/corral-sandbox/corral/qualify"
)

// Exit statuses of `corral qualify` (docs/qualify.md).
const (
	qualifyExitFailed  = 1 // a case failed, or none ran; verify: mismatch
	qualifyExitCantRun = 2 // usage, or the suite could not run
)

func newQualifyCmd() *cobra.Command {
	var (
		provs, cases, out, bin string
		strict                 bool
		perfRuns               int
		output                 outputFormat
	)
	c := &cobra.Command{
		Use:   "qualify [--provider linux,docker,mxc,linux-service,linux-gateway|all] [--cases P01,...] [--out DIR] [--strict]",
		Short: "Run the adversarial suite against providers and write a report bound to this binary",
		Long: `Run every adversarial case (P01...) that applies to each provider, each as a
real sandbox with its own throwaway home, canaries, loopback listeners and
policy, then a performance section. Writes report.json (with a JSON Schema),
report.md and a self-contained report.html to --out, bound to this binary's
sha256, each policy's sha256, the kernel and the Landlock ABI; check the
binding later with 'corral qualify verify'.

A case that cannot run here is skipped with its reason and never counted as
a pass; --strict makes any skip a failure. A provider not built into this
binary (docker today) has every case skipped; a provider whose cases do not
apply (mxc: the cases are Linux cases) has them skipped with that reason,
and one whose executor is a stand-in is marked "mock — not evidence of OS
enforcement". linux-service runs the cases with 'corral service run';
linux-gateway runs them on persistent linux sandboxes of a gateway qualify
starts ('corral gateway serve'), each command a sandbox of its own:
'corral sandbox create', 'exec' and 'delete', after which nothing of it may
be left.

Exit status: 0 when every case that ran passed (and at least one passed
on a real, not stand-in, provider), 1 when a case failed, none ran or
only a stand-in passed, 2 on a usage error or when the suite could not
run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if perfRuns < 0 {
				return fmt.Errorf("--perf-runs: %d is negative", perfRuns)
			}
			if out == "" {
				out = "corral-qualify-" + time.Now().Format("20060102-150405")
			}
			o := qualify.Options{Bin: bin, Out: out, Strict: strict, Progress: os.Stderr, PerfRuns: perfRuns}
			if perfRuns == 0 {
				o.PerfRuns = -1
			}
			o.Providers = splitList(provs)
			o.Cases = splitList(cases)
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			rep, err := qualify.Qualify(ctx, o)
			if rep == nil {
				return err
			}
			if output.data() {
				if werr := output.write(os.Stdout, rep); werr != nil {
					return werr
				}
			} else {
				fmt.Print(rep.TextSummary())
				abs, _ := filepath.Abs(out)
				fmt.Printf("report: %s\n        %s\n        %s\n", filepath.Join(abs, "report.json"), filepath.Join(abs, "report.md"), filepath.Join(abs, "report.html"))
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "corral: qualify: %v\n", err)
				return exitError{code: qualifyExitCantRun}
			}
			return exitError{code: rep.ExitCode()}
		},
	}
	f := c.Flags()
	f.StringVar(&provs, "provider", "linux", "providers, comma-separated: linux, docker, mxc, linux-service (service sessions), linux-gateway (the gateway's linux sandboxes), or all (the first three)")
	f.StringVar(&cases, "cases", "", "case IDs, comma-separated (default: every case)")
	f.StringVar(&out, "out", "", "report directory (default: ./corral-qualify-DATE-TIME)")
	f.BoolVar(&strict, "strict", false, "a skipped case is a failure")
	f.IntVar(&perfRuns, "perf-runs", 15, "repetitions for the performance medians; 0 skips the performance section")
	f.StringVar(&bin, "bin", "", "the corral binary to qualify (default: this one)")
	outputFlag(c, &output)
	c.AddCommand(newQualifyVerifyCmd())
	return c
}

// verification is `corral qualify verify`'s result.
type verification struct {
	Report  string `json:"report"`
	Binary  string `json:"binary"`
	Matches bool   `json:"matches"`
	Verdict string `json:"verdict,omitempty"` // the report's own, when it matches
	Error   string `json:"error,omitempty"`   // the mismatch, or why the report cannot be read
}

func newQualifyVerifyCmd() *cobra.Command {
	var bin string
	var output outputFormat
	c := &cobra.Command{
		Use:   "verify REPORT.json [--bin PATH]",
		Short: "Check that a qualify report binds this binary, kernel and Landlock ABI",
		Long: `Re-hash the corral binary (default: this one) and compare it, the kernel
release and the Landlock ABI with what report.json recorded, and check each
recorded policy text against its sha256.

Exit status: 0 when everything matches, 1 on a mismatch (each one is
printed), 2 when the report cannot be read.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if bin == "" {
				exe, err := os.Executable()
				if err != nil {
					return err
				}
				bin = exe
			}
			err := qualify.Verify(args[0], bin)
			res := verification{Report: args[0], Binary: bin, Matches: err == nil}
			code := 0
			switch {
			case err == nil:
				res.Verdict = reportVerdict(args[0])
			case errors.Is(err, qualify.ErrMismatch):
				res.Error, code = err.Error(), qualifyExitFailed
			default:
				res.Error, code = err.Error(), qualifyExitCantRun
			}
			if output.data() {
				if werr := output.write(os.Stdout, res); werr != nil {
					return werr
				}
			} else if err == nil {
				fmt.Printf("ok: %s matches %s, this kernel and Landlock ABI\n", args[0], bin)
				fmt.Printf("the report's verdict: %s\n", res.Verdict)
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "corral: qualify verify: %v\n", err)
				return exitError{code: code}
			}
			return nil
		},
	}
	outputFlag(c, &output)
	c.Flags().StringVar(&bin, "bin", "", "the corral binary to check (default: this one)")
	return c
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// reportVerdict reads the report's own verdict: PASS when every case that
// ran passed, else FAIL with the counts.
func reportVerdict(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "unreadable: " + err.Error()
	}
	var r qualify.Report
	if err := json.Unmarshal(b, &r); err != nil {
		return "unreadable: " + err.Error()
	}
	pass, fail, skip := 0, 0, 0
	for _, p := range r.Providers {
		pass, fail, skip = pass+p.Summary.Pass, fail+p.Summary.Fail, skip+p.Summary.Skipped
	}
	v := "FAIL"
	if r.OK() {
		v = "PASS"
	}
	return fmt.Sprintf("%s (%d pass, %d fail, %d skipped)", v, pass, fail, skip)
}

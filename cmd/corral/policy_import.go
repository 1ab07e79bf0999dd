package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/policyimport"
	"github.com/corral-sandbox/corral/provider"
)

func newPolicyImportCmd() *cobra.Command {
	var from, out string
	var acceptLoss bool
	var output outputFormat
	names := make([]string, len(policyimport.Sources))
	for i, s := range policyimport.Sources {
		names[i] = string(s)
	}
	c := &cobra.Command{
		Use:   "import --from " + strings.Join(names, "|") + " FILE [--out FILE] [-o text|json|yaml]",
		Short: "Translate another sandbox's configuration into a Corral policy, with a loss report",
		Long: `Translate another sandbox's configuration into a Corral policy:
  srt        Anthropic sandbox-runtime settings (~/.srt-settings.json)
  codex      an OpenAI Codex CLI config.toml (sandbox_mode, sandbox_workspace_write,
             [permissions.*] profiles)
  openshell  an NVIDIA OpenShell sandbox policy (YAML)
  openclaw   an OpenClaw configuration's sandbox settings (openclaw.json, JSON5)

The policy starts from Corral's built-in default and adds what the source
grants and denies; a comment beside each entry names the source line it
came from. It is written to --out FILE (created 0644, replacing one there
atomically) or to stdout. The loss report goes to stderr: info (carried
over, Corral at least as strict), warning (Corral stricter than the source:
the workload may need an entry), error (Corral would allow what the source
denies). With -o json or yaml, stdout gets the report as data instead:
{source, file, policy (its text; omitted when --out wrote it, or when an
error loss kept it back), written, losses}.

Exit status: 0 when written; 122 when the source does not parse, or when a loss is
an error (nothing is written then unless --accept-loss); 2 for a usage
error.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if from == "" {
				return fmt.Errorf("--from is required: one of %s", strings.Join(names, ", "))
			}
			data, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			res, err := policyimport.Import(policyimport.Source(from), args[0], data)
			if err != nil {
				if strings.HasPrefix(err.Error(), "unknown source") {
					return err
				}
				fmt.Fprintf(os.Stderr, "corral: policy import: %v\n", err)
				return exitError{code: provider.CodePolicyRejected.ExitCode()}
			}
			refused := res.HasErrors() && !acceptLoss
			toFile := out != "" && out != "-"
			if !refused && toFile {
				if err := atomicfile.Write(out, res.YAML, 0o644); err != nil {
					return err
				}
			}
			if output.data() {
				rep := importReport{Source: from, File: args[0], Losses: res.Losses}
				if !refused {
					if toFile {
						rep.Written = out
					} else {
						rep.Policy = string(res.YAML)
					}
				}
				if err := output.write(os.Stdout, rep); err != nil {
					return err
				}
			} else {
				printImportLosses(args[0], res)
			}
			switch {
			case refused:
				fmt.Fprintln(os.Stderr, "corral: policy import: the policy would allow what the source denies (errors above); nothing written (--accept-loss writes it anyway)")
				return exitError{code: provider.CodePolicyRejected.ExitCode()}
			case toFile:
				fmt.Fprintf(os.Stderr, "corral: policy import: wrote %s; check it with `corral policy validate %s`\n", out, out)
			case !output.data():
				_, err := os.Stdout.Write(res.YAML)
				return err
			}
			return nil
		},
	}
	c.Flags().StringVar(&from, "from", "", "the source's format: "+strings.Join(names, ", "))
	c.Flags().StringVar(&out, "out", "", "write the policy to this file (default: stdout)")
	c.Flags().BoolVar(&acceptLoss, "accept-loss", false, "write the policy even when it would allow what the source denies")
	outputFlag(c, &output)
	return c
}

// importReport is `corral policy import -o json|yaml`'s output.
type importReport struct {
	Source  string              `json:"source"`
	File    string              `json:"file"`
	Policy  string              `json:"policy,omitempty"`
	Written string              `json:"written,omitempty"`
	Losses  []policyimport.Loss `json:"losses"`
}

// printImportLosses writes res's loss report, one line per loss, to stderr.
func printImportLosses(file string, res *policyimport.Result) {
	for _, l := range res.Losses {
		at := filepath.Base(file)
		if l.Line > 0 {
			at = fmt.Sprintf("%s:%d", at, l.Line)
		}
		fmt.Fprintf(os.Stderr, "  %-7s %s %s: %s\n", l.Severity, at, l.Key, l.Message)
	}
}

package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

func newPolicyCmd() *cobra.Command {
	c := &cobra.Command{Use: "policy", Short: "Validate, explain and describe policies"}
	var syntaxOnly bool
	var vworkdir, vprov, vos string
	var vout outputFormat
	validate := &cobra.Command{
		Use:   "validate FILE",
		Short: "Check a policy file and that it can be enforced here; errors carry file:line:column and the field path",
		Long: `Check a policy file: its syntax and fields, then (unless --syntax-only)
its paths against this host (existence, symlinks, dangerous grants) resolved
for the working directory, and that a provider can enforce it here.

--os windows checks a Windows policy (drive paths, ~\ the profile) from any
host: off Windows its paths are resolved lexically (existence, links and
8.3 names are the Windows host's to check) and mapped by the mxc provider,
whose executor need not be present.
-o json or yaml prints the result as data, errors included: valid, the
policy's os, version and hash, the workdir and provider it was checked for,
and each error's file, line, column, field, message and hint.

Exit status: 0 when valid; 122 when not (the policy's errors, or no
provider can enforce it here); 121 when --provider names one this build
lacks; 2 for a bad flag.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := validatePolicy(args[0], vos, vworkdir, vprov, syntaxOnly)
			if res == nil {
				return err
			}
			if vout.data() {
				if werr := vout.write(os.Stdout, res); werr != nil {
					return werr
				}
				return err // said on stderr too, with its exit status
			}
			if err != nil {
				return err
			}
			switch {
			case syntaxOnly:
				fmt.Printf("%s: syntax valid (%s policy version %d, %s); host checks not run\n", res.File, res.OS, res.Version, res.Hash)
			case res.Lexical != "":
				fmt.Printf("%s: valid (%s policy version %d, %s) for workdir %s; mapped by the %s provider with no error (%s)\n", res.File, res.OS, res.Version, res.Hash, res.Workdir, res.Provider, res.Lexical)
			default:
				fmt.Printf("%s: valid (policy version %d, %s); enforceable here by the %s provider for workdir %s\n", res.File, res.Version, res.Hash, res.Provider, res.Workdir)
			}
			return nil
		},
	}
	outputFlag(validate, &vout)
	validate.Flags().BoolVar(&syntaxOnly, "syntax-only", false, "check syntax and fields only, not this host")
	validate.Flags().StringVarP(&vworkdir, "workdir", "C", "", "working directory to resolve against (default: the current one; for --os windows off Windows: ~\\work)")
	validate.Flags().StringVar(&vprov, "provider", "auto", "provider that must be able to enforce it")
	validate.Flags().StringVar(&vos, "os", "", "the OS the policy's paths are written for: linux or windows (default: this host's)")
	c.AddCommand(validate)
	c.AddCommand(newPolicyImportCmd())
	var dos string
	def := &cobra.Command{
		Use:   "default",
		Short: "Print the built-in default policy as a commented policy file",
		Long: `Print the built-in default policy (what corral run enforces without
--policy) as a commented policy file, for --os linux or windows.

Exit status: 0; 2 for a bad flag.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			target, err := policy.ParseOS(dos)
			if err != nil {
				return err
			}
			_, err = os.Stdout.Write(policy.DefaultYAMLFor(target))
			return err
		},
	}
	def.Flags().StringVar(&dos, "os", "", "the OS whose default to print: linux or windows (default: this host's)")
	c.AddCommand(def)
	c.AddCommand(&cobra.Command{
		Use:   "schema",
		Short: "Print the policy's JSON Schema (for editor completion and checks)",
		Long: `Print the policy file's JSON Schema (draft 2020-12), for editors'
completion and checks.

Exit status: 0.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := os.Stdout.Write(policy.Schema())
			return err
		},
	})
	var prov, workdir, eos string
	var output outputFormat
	explain := &cobra.Command{
		Use:   "explain [FILE]",
		Short: "Show the plan, loss report and layers a provider would use (default policy without FILE)",
		Long: `Show the plan, loss report and layers a provider would use for the
policy (the built-in default without FILE), resolved for the working
directory. With --provider NAME the plan is shown even when that provider
is not available on this host (its absence is a host fact in the output):
--provider mxc explains on any host, without wxc-exec. --os windows reads
a Windows policy (the default: the Windows default policy), resolved
lexically off Windows.

Exit status: 0 when the plan has no error loss; 122 when the policy is
invalid or a loss is an error (the plan is still shown); 121 when no
provider can run here or --provider names one this build lacks; 2 for a
bad flag.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			target, err := policy.ParseOS(eos)
			if err != nil {
				return err
			}
			path := ""
			if len(args) == 1 {
				path = args[0]
			}
			p, err := loadPolicyFor(path, target)
			if err != nil {
				return err
			}
			r, err := resolvePolicy(p, workdir)
			if err != nil {
				return err
			}
			_, plan, serr := explainProvider(prov, r)
			if plan == nil {
				return serr
			}
			if output.data() {
				if err := output.write(os.Stdout, plan); err != nil {
					return err
				}
				return serr
			}
			printPlan(plan)
			return serr
		},
	}
	explain.Flags().StringVar(&prov, "provider", "auto", "provider to map the policy onto")
	explain.Flags().StringVarP(&workdir, "workdir", "C", "", "working directory to resolve against")
	explain.Flags().StringVar(&eos, "os", "", "the OS the policy's paths are written for: linux or windows (default: this host's)")
	outputFlag(explain, &output)
	c.AddCommand(explain)
	c.AddCommand(policyGatewayCmds()...)
	return c
}

func printPlan(plan *provider.Plan) {
	r := plan.Policy
	home, canon := "private, empty", r.Home
	same := func(a, b string) bool { return a == b }
	if r.Policy.OS() == policy.OSWindows {
		// MXC gives no private profile: the real one, reachable as far as
		// the grants say; names compare without case.
		home, same = "not granted", strings.EqualFold
	}
	if r.Lexical == "" {
		if p, err := policy.Canonical(r.Home); err == nil { // grants are canonical
			canon = p
		}
	}
	for _, g := range r.Grants {
		if (same(g.Path, r.Home) || same(g.Path, canon)) && g.Access != policy.AccessDeny { // else the private home covers any grant above it
			home = "the real one, granted by " + g.Field
		}
	}
	fmt.Printf("provider: %s\npolicy:   %s (%s)\nworkdir:  %s\nhome:     %s (%s)\nnetwork:  %s (unix sockets: %s)\n", plan.Provider, r.Hash, r.Policy.OS(), r.Workdir, r.Home, home, r.Network, r.UnixSockets())
	if plan.Host != nil && !plan.Host.Available {
		fmt.Printf("host:     %s is not available here: %s; the plan is what it would run\n", plan.Provider, plan.Host.Reason)
	}
	if r.Lexical != "" {
		fmt.Printf("paths:    %s\n", r.Lexical)
	}
	l := r.Limits
	timeout := "none"
	if l.Timeout > 0 {
		timeout = l.Timeout.String()
	}
	fmt.Printf("limits:   memory %s, pids %d, cpu %g cores, nofile %d, timeout %s (0: no limit)\n", l.Memory, l.Pids, l.CPU, l.Nofile, timeout)
	fmt.Println("\nfilesystem:")
	for _, g := range r.Grants {
		fmt.Printf("  %-5s %s    (%s)\n", g.Access, g.Path, g.Field)
	}
	if r.Network == policy.NetworkProxy {
		fmt.Println("\negress:")
		for _, line := range egressLines(r.Egress) {
			fmt.Println("  " + line)
		}
	}
	if len(r.Credentials) > 0 {
		fmt.Println("\ncredentials:")
		for _, line := range credentialLines(r.Credentials) {
			fmt.Println("  " + line)
		}
	}
	if r.Consent != nil {
		fmt.Println("\nconsent:")
		for _, line := range r.Consent.Describe() {
			fmt.Println("  " + line)
		}
	}
	if d, ok := plan.Details.(provider.Summarizer); ok {
		fmt.Println("\nplan:")
		for _, line := range d.Summary() {
			fmt.Println("  " + line)
		}
	}
	fmt.Println("\nlayers:")
	printLayers(os.Stdout, "  ", plan.Layers)
	fmt.Println("\nloss report:")
	if len(plan.Loss) == 0 {
		fmt.Println("  none: the plan enforces the policy as written")
	}
	for _, l := range plan.Loss {
		fmt.Printf("  %-7s %-10s %s: %s\n", l.Severity, l.Area, l.Field, l.Message)
	}
}

// egressLines describes the proxy's rules: per allow entry its ports and
// whether its TLS is inspected, and why.
func egressLines(n policy.Network) []string {
	ports := func(e policy.Endpoint, def string) string {
		if len(e.Ports) == 0 {
			return def
		}
		return strings.Trim(strings.ReplaceAll(fmt.Sprint(e.Ports), " ", ","), "[]")
	}
	var out []string
	for i, e := range n.Allow {
		how := "passthrough: no L7 rules, the tunnel is spliced unread"
		switch {
		case e.TLS == policy.TLSPassthrough:
			how = "passthrough: tls: passthrough"
		case e.Inspected():
			var why []string
			if e.TLS == policy.TLSInspect {
				why = append(why, "tls: inspect")
			}
			if e.Access != "" {
				why = append(why, "access "+string(e.Access))
			}
			if len(e.Rules) > 0 {
				why = append(why, fmt.Sprintf("%d rules", len(e.Rules)))
			}
			if len(e.DenyRules) > 0 {
				why = append(why, fmt.Sprintf("%d deny_rules", len(e.DenyRules)))
			}
			how = "inspected (" + strings.Join(why, ", ") + "): TLS terminated with the sandbox's CA, every request (plain HTTP too) decided by the rules"
		}
		out = append(out, fmt.Sprintf("allow[%d] %s:%s  %s", i, e.Host, ports(e, "80,443"), how))
	}
	for i, e := range n.Deny {
		out = append(out, fmt.Sprintf("deny[%d]  %s:%s", i, e.Host, ports(e, "any")))
	}
	for i, e := range n.AllowPrivate {
		out = append(out, fmt.Sprintf("allow_private[%d] %s:%s", i, e.Host, ports(e, "any")))
	}
	if n.UpstreamCA != "" {
		out = append(out, "upstream_ca "+n.UpstreamCA+" (trusted with the host's roots for inspected upstreams)")
	}
	if len(out) == 0 {
		out = append(out, "nothing allowed")
	}
	return out
}

// credentialLines describes the credentials: per credential where its
// value is read (the kind and the name or path, never the value), what the
// sandbox sees, on_mismatch, and each endpoint with its places.
func credentialLines(creds []policy.ResolvedCredential) []string {
	var out []string
	for _, c := range creds {
		src := c.Source
		from := "stored by corral gateway (given at create)"
		switch {
		case src.Env != "":
			from = "read from the caller's variable " + src.Env
		case src.File != "":
			from = "read from the file " + c.SourceFile
		case len(src.Command) > 0:
			// The program, not its arguments: they may say more than they should.
			from = fmt.Sprintf("the output of %s (%d arguments; timeout %s)", src.Command[0], len(src.Command)-1, src.Timeout)
		}
		var sees []string
		if c.Expose.Env != "" {
			sees = append(sees, "$"+c.Expose.Env)
		}
		if c.File != "" {
			sees = append(sees, c.File)
		}
		mismatch := "refused (403)"
		if c.OnMismatch == policy.MismatchForward {
			mismatch = "sent on as it is"
		}
		out = append(out, c.Name+" ("+c.Field+")",
			"  value:    "+from+" (never in the sandbox)",
			"  sandbox:  a placeholder shaped "+c.Shape+" in "+strings.Join(sees, " and "),
			"  on_mismatch "+string(c.OnMismatch)+": the placeholder anywhere but the places below is "+mismatch+" (in a body: sent on); a finding either way")
		for _, e := range c.Endpoints {
			var places []string
			if e.Header != "" {
				places = append(places, fmt.Sprintf("header %q", e.Header))
			}
			if e.Basic != "" {
				places = append(places, "Basic auth "+e.Basic)
			}
			if e.Query != "" {
				places = append(places, "query "+e.Query)
			}
			if e.Body != nil {
				places = append(places, "bodies up to "+e.Body.Max.String())
			}
			path := e.Path
			if path == "" || path == "/" {
				path = "any path"
			}
			ports := strings.Trim(strings.ReplaceAll(fmt.Sprint(e.Ports), " ", ","), "[]")
			out = append(out, fmt.Sprintf("  to %s:%s %s: %s", e.Host, ports, path, strings.Join(places, ", ")))
		}
	}
	return out
}

// validation is `corral policy validate`'s result.
type validation struct {
	File       string          `json:"file"`
	Valid      bool            `json:"valid"`
	SyntaxOnly bool            `json:"syntax_only,omitempty"`
	OS         policy.OS       `json:"os,omitempty"`
	Version    int             `json:"version,omitempty"`
	Hash       string          `json:"hash,omitempty"`
	Workdir    string          `json:"workdir,omitempty"`
	Provider   string          `json:"provider,omitempty"`
	Lexical    string          `json:"lexical,omitempty"` // why paths were resolved lexically (a Windows policy off Windows)
	Errors     []validationErr `json:"errors,omitempty"`
}

// validationErr is one policy error (policy.Error) as data.
type validationErr struct {
	File   string `json:"file,omitempty"`
	Line   int    `json:"line,omitempty"`
	Column int    `json:"column,omitempty"`
	Field  string `json:"field,omitempty"`
	Msg    string `json:"message"`
	Hint   string `json:"hint,omitempty"`
}

// validatePolicy checks the policy file: its syntax for the OS named os
// ("" this host's), then unless syntaxOnly its paths resolved for workdir
// and a provider's mapping (prov, or "auto"). The result is nil only when
// the flags are bad; otherwise it records what was learnt, with err the
// reason it is not valid.
func validatePolicy(file, os, workdir, prov string, syntaxOnly bool) (*validation, error) {
	target, err := policy.ParseOS(os)
	if err != nil {
		return nil, err
	}
	res := &validation{File: file, SyntaxOnly: syntaxOnly}
	fail := func(err error) (*validation, error) {
		var pe *policy.Error
		var pes policy.Errors
		switch {
		case asErr(err, &pes):
		case asErr(err, &pe):
			pes = policy.Errors{pe}
		default:
			pes = policy.Errors{{Msg: err.Error()}}
		}
		for _, e := range pes {
			res.Errors = append(res.Errors, validationErr{File: e.File, Line: e.Line, Column: e.Column, Field: e.Field, Msg: e.Msg, Hint: e.Hint})
		}
		return res, err
	}
	p, err := policy.LoadFor(file, target)
	if err != nil {
		return fail(err)
	}
	res.OS, res.Version, res.Hash = p.OS(), p.Version, policy.Hash(p)
	if syntaxOnly {
		res.Valid = true
		return res, nil
	}
	r, err := resolvePolicy(p, workdir)
	if err != nil {
		return fail(err)
	}
	res.Hash, res.Workdir, res.Lexical = r.Hash, r.Workdir, r.Lexical
	if r.Lexical != "" {
		res.Provider, _, err = explainProvider(prov, r)
	} else {
		var pv provider.Provider
		if pv, _, err = selectProvider(prov, r); pv != nil {
			res.Provider = pv.Name()
		}
	}
	if err != nil {
		return fail(err)
	}
	res.Valid = true
	return res, nil
}

package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/session"
)

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "corral",
		Short:         "Run AI agents' tools in policy-enforced sandboxes",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newRunCmd(), newVersionCmd(), newPolicyCmd(), newDoctorCmd(), newQualifyCmd())
	root.AddCommand(osCommands()...)
	root.AddCommand(newManCmd())
	inheritExitStatus(root, "")
	return root
}

// inheritExitStatus gives each command whose help does not say its exit
// statuses its group's paragraph (from "Exit status"), so that every
// command's --help says them (docs/exit-codes.md lists them all).
func inheritExitStatus(c *cobra.Command, group string) {
	if i := strings.Index(c.Long, "Exit status"); i >= 0 {
		group = c.Long[i:]
	} else if group != "" && c.Runnable() {
		long := c.Long
		if long == "" {
			long = c.Short + "."
		}
		c.Long = long + "\n\n" + group
	}
	for _, k := range c.Commands() {
		inheritExitStatus(k, group)
	}
}

// providers lists the providers compiled into this binary, strongest first.
func providers() []provider.Provider { return registry }

// warmProviders probes, in the background, the providers selection will
// ask first, so that host facts are ready when it does (Probe caches what
// it reads): the one named, or with "auto" the strongest. Probing the
// others on every run (the docker daemon, wxc-exec) would be wasted work
// competing with the run's start-up.
func warmProviders(name string) {
	for _, p := range registry {
		if name == p.Name() || name == "auto" {
			go p.Probe(contextBackground())
			return
		}
	}
}

func newVersionCmd() *cobra.Command {
	var output outputFormat
	c := &cobra.Command{
		Use:   "version",
		Short: "Print version, commit, Go version and the providers compiled in",
		Long: `Print corral's version, the commit it was built from, the Go version, the
platform and the providers compiled in.

Exit status: 0.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var names []string
			for _, p := range providers() {
				names = append(names, p.Name())
			}
			info := map[string]any{"version": version, "commit": buildCommit(), "go": runtime.Version(),
				"platform": runtime.GOOS + "/" + runtime.GOARCH, "providers": names}
			if output.data() {
				return output.write(os.Stdout, info)
			}
			fmt.Printf("corral %s\ncommit: %s\ngo: %s\nplatform: %s/%s\nproviders: %s\n",
				version, buildCommit(), runtime.Version(), runtime.GOOS, runtime.GOARCH, strings.Join(names, ", "))
			return nil
		},
	}
	outputFlag(c, &output)
	return c
}

// loadPolicy reads the policy file, or the built-in default when path is
// "", for this host's OS.
func loadPolicy(path string) (*policy.Policy, error) { return loadPolicyFor(path, policy.HostOS()) }

// loadPolicyFor is loadPolicy for a policy written for target.
func loadPolicyFor(path string, target policy.OS) (*policy.Policy, error) {
	if path == "" {
		return policy.DefaultFor(target), nil
	}
	return policy.LoadFor(path, target)
}

func isPolicyError(err error) bool {
	var pe *policy.Error
	var pes policy.Errors
	return asErr(err, &pe) || asErr(err, &pes)
}

// resolvePolicy resolves p for the caller in workdir. A Windows policy on
// another host is resolved lexically (policy.Resolve) for the profile
// %USERPROFILE% when that is a Windows path, else C:\Users\$USER, and for
// workdir, by default the profile's "work" folder.
func resolvePolicy(p *policy.Policy, workdir string) (*policy.Resolved, error) {
	if p.OS() != policy.HostOS() {
		home := os.Getenv("USERPROFILE")
		if len(home) < 3 || home[1] != ':' {
			user := os.Getenv("USER")
			if user == "" {
				user = "user"
			}
			home = `C:\Users\` + user
		}
		if workdir == "" {
			workdir = home + `\work`
		}
		return p.Resolve(policy.Context{Home: home, Workdir: workdir})
	}
	home, _ := os.UserHomeDir()
	if home == "" {
		home = "/nonexistent"
	}
	if workdir == "" {
		// The kernel's cwd, not $PWD (os.Getwd prefers it): the path a
		// shell reached through a symlink is the caller's own choice, and
		// a grant-through-link check (policy) is for paths written down.
		wd, err := syscall.Getwd()
		if err != nil {
			return nil, fmt.Errorf("working directory: %w", err)
		}
		workdir = wd
	}
	return p.Resolve(policy.Context{Home: home, Workdir: workdir, Environ: os.Environ()})
}

// selectProvider is session.Select over this build's providers.
func selectProvider(name string, r *policy.Resolved) (provider.Provider, *provider.Plan, error) {
	return session.Select(contextBackground(), providers(), name, r)
}

// explainProvider is selectProvider for policy explain and validate: a
// provider named explicitly maps r even when it is not available on this
// host (its HostReport goes in the plan), and a Windows policy resolved
// off Windows (r.Lexical) is the mxc provider's whatever name says, "auto"
// included. Error losses give the plan and CodePolicyRejected.
func explainProvider(name string, r *policy.Resolved) (string, *provider.Plan, error) {
	if r.Lexical != "" {
		if name != "auto" && name != "mxc" {
			return "", nil, &provider.Error{Code: provider.CodeUnavailable, Msg: fmt.Sprintf("a Windows policy maps onto the mxc provider only, not %s", name)}
		}
		name = "mxc"
	}
	if name == "auto" {
		p, plan, err := selectProvider(name, r)
		if p == nil {
			return "", plan, err
		}
		return p.Name(), plan, err
	}
	for _, p := range providers() {
		if p.Name() != name {
			continue
		}
		hr := p.Probe(contextBackground())
		plan, err := session.Plan(contextBackground(), p, r)
		if plan != nil {
			plan.Host = &hr
		}
		return name, plan, err
	}
	return "", nil, &provider.Error{Code: provider.CodeUnavailable, Msg: fmt.Sprintf("no provider named %q in this build", name)}
}

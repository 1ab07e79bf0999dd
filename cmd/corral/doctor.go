package main

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/corral-sandbox/corral/internal/hostpkg"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// doctorReport is `corral doctor`'s output.
type doctorReport struct {
	Host      map[string]string `json:"host"`
	Providers []doctorProvider  `json:"providers"`
}

type doctorProvider struct {
	provider.HostReport
	Layers        []provider.LayerStatus `json:"layers"`
	DefaultPolicy string                 `json:"default_policy"` // "enforceable" or why not
	DefaultLosses provider.LossReport    `json:"default_policy_losses,omitempty"`
}

func newDoctorCmd() *cobra.Command {
	var (
		output     outputFormat
		egress     bool
		egressProv string
	)
	c := &cobra.Command{
		Use:   "doctor [--egress [--provider linux|docker]]",
		Short: "Report what this host offers each provider and whether it can enforce the default policy",
		Long: `Report what this host offers each provider: kernel, Landlock ABI, seccomp,
user namespaces, cgroups, Docker socket, wxc-exec, and whether the built-in
default policy can be enforced here. Exit 0 when some provider can enforce
it, 121 (unavailable) when none can.

--egress runs the trust self-test of inspected egress instead: each client
this host has (curl, git, python3 urllib and requests, node https/http2 and
fetch/WebSocket, Go's net/http, java, cargo) in a real sandbox of --provider
(default linux), through the inspecting proxy, against a loopback HTTPS
origin (h2 and http/1.1, an SSE stream, a WebSocket echo, git smart HTTP, a
cargo sparse registry), and a table per client: trusted, h2, SSE, WebSocket,
each yes, no or n.a. with the reason. A client that does not trust the
sandbox's CA is a no.

Exit status: 0 when some provider can enforce the default policy, 121
(unavailable) when none can; with --egress 0 when no verdict is no, 1 when
one is; 2 for a bad flag.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if egress {
				return runDoctorEgress(contextBackground(), egressProv, output)
			}
			if cmd.Flags().Changed("provider") {
				return errors.New("--provider goes with --egress (the host report covers every provider)")
			}
			rep := doctorReport{Host: map[string]string{}}
			if s, err := os.Stat("/var/run/docker.sock"); err == nil && s.Mode()&os.ModeSocket != 0 {
				rep.Host["docker_socket"] = "/var/run/docker.sock"
			} else {
				rep.Host["docker_socket"] = "absent"
			}
			if p, err := exec.LookPath("wxc-exec"); err == nil {
				rep.Host["wxc_exec"] = p
			} else {
				rep.Host["wxc_exec"] = "absent"
			}
			ctx := contextBackground()
			wd, _ := os.MkdirTemp("", "corral-doctor-")
			defer os.RemoveAll(wd)
			enforceable := false
			for _, p := range providers() {
				hr := p.Probe(ctx)
				dp := doctorProvider{HostReport: hr, Layers: p.Capabilities(ctx).Layers}
				for i := range dp.Layers {
					if dp.Layers[i].State == provider.LayerActive {
						dp.Layers[i].State = "available" // a host probe: nothing is in force yet
					}
				}
				r, err := policy.DefaultFor(policy.HostOS()).Resolve(policy.Context{Home: homeDir(), Workdir: wd, Environ: os.Environ()})
				switch {
				case err != nil:
					dp.DefaultPolicy = "default policy does not resolve: " + err.Error()
				case !hr.Available:
					dp.DefaultPolicy = "provider unavailable: " + hr.Reason
				default:
					_, loss := p.Map(ctx, r)
					for _, l := range loss {
						if l.Severity != provider.SeverityInfo { // info items name doctor's scratch dir
							dp.DefaultLosses = append(dp.DefaultLosses, l)
						}
					}
					dp.DefaultPolicy = "enforceable"
					if loss.HasErrors() {
						dp.DefaultPolicy = "not enforceable (the errors below)"
					} else {
						enforceable = true
					}
				}
				rep.Providers = append(rep.Providers, dp)
			}
			packageFixes(&rep, hostpkg.Host())
			if output.data() {
				if err := output.write(os.Stdout, rep); err != nil {
					return err
				}
			} else {
				printDoctor(rep)
			}
			if !enforceable {
				return exitError{code: provider.CodeUnavailable.ExitCode()}
			}
			return nil
		},
	}
	outputFlag(c, &output)
	c.Flags().BoolVar(&egress, "egress", false, "run the trust self-test of inspected egress (each client on this host, in a real sandbox, through the inspecting proxy)")
	c.Flags().StringVar(&egressProv, "provider", "linux", "with --egress: the provider whose sandboxes run the clients")
	return c
}

// packageFixes puts first, for a provider that lacks software this host's
// package manager m installs, the command that installs it; and names in
// rep.Host how corral itself was installed (installedBy).
func packageFixes(rep *doctorReport, m hostpkg.Manager) {
	rep.Host["installed_by"] = installedBy()
	for i := range rep.Providers {
		dp := &rep.Providers[i]
		if dp.Provider != "docker" || dp.Available {
			continue
		}
		if _, err := exec.LookPath("dockerd"); err == nil {
			continue // installed; the provider's own fix says how to reach it
		}
		if cmd := m.Command(hostpkg.Docker); cmd != "" {
			dp.Fixes = append([]string{"install Docker Engine: " + cmd + ", then start it (systemctl start docker)"}, dp.Fixes...)
		}
	}
}

// installedBy says which package manager installed this corral: "dpkg
// (package corral)" when dpkg's file list of the package corral names this
// executable, else "not a package (a build)".
func installedBy() string {
	exe, err := os.Executable()
	if err != nil {
		return "unknown"
	}
	if b, err := os.ReadFile("/var/lib/dpkg/info/corral.list"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if line == exe {
				return "dpkg (package corral: apt-get install --reinstall corral repairs it)"
			}
		}
	}
	return "not a package (a build)"
}

func printDoctor(rep doctorReport) {
	for _, k := range slices.Sorted(maps.Keys(rep.Host)) {
		fmt.Printf("%-16s %s\n", k+":", rep.Host[k])
	}
	for _, dp := range rep.Providers {
		fmt.Printf("\nprovider %s: available=%v", dp.Provider, dp.Available)
		if dp.Reason != "" {
			fmt.Printf(" (%s)", dp.Reason)
		}
		fmt.Println()
		for _, k := range slices.Sorted(maps.Keys(dp.Facts)) {
			fmt.Printf("  %-16s %s\n", k+":", dp.Facts[k])
		}
		printLayers(os.Stdout, "  ", dp.Layers)
		fmt.Printf("  default policy: %s\n", dp.DefaultPolicy)
		for _, l := range dp.DefaultLosses {
			fmt.Printf("    %s: %s: %s\n", l.Severity, l.Field, l.Message)
		}
		for _, f := range dp.Fixes {
			fmt.Printf("  fix: %s\n", f)
		}
	}
}

func homeDir() string {
	h, _ := os.UserHomeDir()
	if h == "" {
		return "/nonexistent"
	}
	return h
}

//go:build linux || windows

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/corral-sandbox/corral/internal/procid"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/provider/mxc"
	"github.com/corral-sandbox/corral/service"
	"github.com/corral-sandbox/corral/service/isolation"
)

// ServiceProviderEnv selects corral service's backend on Linux: "mxc"
// runs it on MXC isolation sessions (through the executor stand-in here),
// as on Windows, where it is the only one.
const ServiceProviderEnv = "CORRAL_SERVICE_PROVIDER"

// serviceSessionMain is `corral __service-session`, run by wxc-exec inside
// a session as its agent user.
func serviceSessionMain(args []string) int {
	return isolation.RunInSession(args, os.Stdout, os.Stderr)
}

// serviceManager is the launcher of corral service on MXC isolation
// sessions: the mxc provider on its isolation_session backend (wxc-exec
// from CORRAL_MXC_WXC_EXEC or PATH), each session's records in its own
// directory.
func serviceManager() (*isolation.Manager, error) {
	base, err := isolation.Base()
	if err != nil {
		return nil, err
	}
	wxc := os.Getenv("CORRAL_MXC_WXC_EXEC")
	newProvider := func(state string) *mxc.Provider {
		return mxc.New(mxc.Config{Backend: mxc.BackendIsolationSession, WxcExec: wxc}, state)
	}
	m := &isolation.Manager{Base: base, Provider: newProvider, Version: version, Resolve: func(path string) (*policy.Resolved, error) {
		p, err := policy.Load(path)
		if err != nil {
			return nil, err
		}
		return p.Resolve(policy.Context{Home: homeDir(), Workdir: filepath.Dir(path), Environ: os.Environ()})
	}}
	return m, nil
}

// probeMock asks wxc-exec --probe whether it is the stand-in (tier mock);
// an unavailable executor is an error naming the fix.
func probeMock(ctx context.Context, m *isolation.Manager) (bool, error) {
	rep := m.Provider(filepath.Join(m.Base, ".probe")).Probe(ctx)
	if rep.Reason != "" && rep.Facts["tier"] == "" {
		return false, provider.Errorf(provider.CodeUnavailable, "mxc: %s (%s)", rep.Reason, strings.Join(rep.Fixes, "; "))
	}
	return rep.Facts["tier"] == "mock", nil
}

func newServiceMXCCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "service",
		Short: "Run a long-lived agent gateway in an MXC isolation session with its own agent user",
		Long: `A service is a persistent MXC isolation session for one long-lived agent
gateway: an agent user Windows mints for it, that user's own profile keeping
the gateway's state across restarts and reboots, and a supervisor inside the
session that restarts the gateway and records its status. A short-lived
launcher (this command, as you) provisions the session, stages corral and the
gateway's files into it, starts the supervisor and exits; service status
checks from outside that the gateway runs as the agent user.

The boundary is an identity boundary: an isolation session has no filesystem
grants and cannot filter the network, so a policy must say network: host and
grant no paths. See docs/service.md, "On Windows".

Exit status (where a command's help gives none of its own): 0 done; 2 a bad
argument; 117 refused by the session's state (a name taken, running); 118 no
such session; 121 MXC is not available; 122 the policy is rejected; 123
provisioning failed (undone).`,
	}
	c.AddCommand(mxcProvisionCmd(), mxcStartCmd(), mxcStatusCmd(), mxcStopCmd(), mxcRestartCmd(), mxcLogsCmd(),
		mxcListCmd(), mxcDeprovisionCmd(), mxcExportCmd(), mxcImportCmd(), mxcReconcileCmd(), mxcAutostartCmd())
	return c
}

// withManager runs f with the launcher, interrupted by Ctrl-C.
func withManager(f func(ctx context.Context, m *isolation.Manager) error) error {
	m, err := serviceManager()
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	return f(ctx, m)
}

func printLoss(loss provider.LossReport) {
	for _, l := range loss {
		if l.Severity != provider.SeverityInfo {
			fmt.Fprintf(os.Stderr, "%s: %s: %s\n", l.Severity, l.Field, l.Message)
		}
	}
}

func mxcProvisionCmd() *cobra.Command {
	var pol string
	c := &cobra.Command{
		Use:   "provision NAME --policy FILE",
		Short: "Create a session: an MXC isolation session with its own agent user",
		Long: `Create session NAME: a durable record first, then the MXC isolation session
(its agent user, profile and staging directory), recorded with its sandbox id
and agent user. The policy must map without errors: network: host (an
isolation session cannot filter egress; writing host is how a policy accepts
that) and no filesystem grants (examples/openclaw/policy-windows.yaml).
A failure undoes what was made; a crash before MXC named the session leaves an
orphan record that corral service reconcile lists with its remedy. Never
retried blindly: an existing name is refused (exit 117).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if pol == "" {
				return fmt.Errorf("--policy is required: an isolation session needs a policy that says network: host and grants no paths (start from examples/openclaw/policy-windows.yaml)")
			}
			return withManager(func(ctx context.Context, m *isolation.Manager) error {
				mock, err := probeMock(ctx, m)
				if err != nil {
					return err
				}
				abs, err := filepath.Abs(pol)
				if err != nil {
					return err
				}
				rec, loss, err := m.Provision(ctx, args[0], abs)
				printLoss(loss)
				if err != nil {
					return err
				}
				fmt.Printf("service %s provisioned: MXC session %s, agent user %s (%s)\n", rec.Name, rec.SandboxID, service.Printable(rec.AgentUser), service.Printable(rec.AgentSID))
				if mock {
					fmt.Printf("executor: the stand-in (%s)\n", isolation.MockNote)
				}
				return nil
			})
		},
	}
	c.Flags().StringVarP(&pol, "policy", "p", "", "policy file (YAML or JSON): network: host, no filesystem grants")
	return c
}

func mxcStartCmd() *cobra.Command {
	var (
		spec                        isolation.StartSpec
		grace, readyTimeout, settle time.Duration
	)
	c := &cobra.Command{
		Use:   "start NAME [flags] [-- COMMAND [ARG...]]",
		Short: "Stage the gateway into the session, start it under the in-session supervisor, wait until it is up",
		Long: `Start the workload of session NAME and return once it is up: the supervisor
started, the host's readiness probe passing (--ready-port: a TCP port on the
host's loopback accepts a connection, --ready-http: a loopback URL answers
2xx; the session shares the host's network) and the workload still the same
process after --settle. Without COMMAND the last start's command and flags run
again (autostart does this).

corral itself and --payload DIR (the gateway's files) are staged into the
session's staging directory and copied into the agent user's profile by the
in-session corral, which checks each against the SHA-256 the launcher staged;
nothing runs from the staging directory after that. "{payload}" in the
command is that copy. A workload not up in time is stopped again.
Exit status: 0 up, 117 already running, 122 policy rejected, 124 not ready in time,
125 could not start.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, command := args[0], args[1:]
			if cmd.ArgsLenAtDash() > 1 || (cmd.ArgsLenAtDash() < 0 && len(command) > 0) {
				return fmt.Errorf("put the command after --: corral service start %s -- COMMAND [ARG...]", name)
			}
			var sp *isolation.StartSpec
			if len(command) > 0 {
				spec.Command, spec.StopGrace, spec.ReadyTimeout, spec.Settle = command, isolation.Duration(grace), isolation.Duration(readyTimeout), isolation.Duration(settle)
				if spec.Payload != "" {
					abs, err := filepath.Abs(spec.Payload)
					if err != nil {
						return err
					}
					spec.Payload = abs
				}
				if err := spec.Validate(); err != nil {
					return fmt.Errorf("%v", err)
				}
				sp = &spec
			} else {
				for _, f := range []string{"payload", "ready-port", "ready-http", "restart", "stop-grace", "ready-timeout", "settle"} {
					if cmd.Flags().Changed(f) {
						return fmt.Errorf("--%s goes with a command: corral service start %s [flags] -- COMMAND (without one, the last start's settings run again)", f, name)
					}
				}
			}
			return withManager(func(ctx context.Context, m *isolation.Manager) error {
				st, err := m.Start(ctx, name, sp)
				if err != nil {
					return err
				}
				fmt.Printf("service %s running: supervisor pid %d, workload pid %d (as the session reports them; corral service status %s checks)\n", name, st.Supervisor.PID, st.Workload.PID, name)
				return nil
			})
		},
	}
	f := c.Flags()
	f.StringVar(&spec.Payload, "payload", "", "a directory staged into the session at each start (the gateway's files); {payload} in the command is its copy")
	f.IntVar(&spec.ReadyPort, "ready-port", 0, "ready when this TCP port on the host's loopback accepts a connection")
	f.StringVar(&spec.ReadyHTTP, "ready-http", "", "ready when this loopback URL answers 2xx")
	f.StringVar(&spec.Restart, "restart", "on-failure", "restart policy: always, on-failure or never")
	f.DurationVar(&grace, "stop-grace", 30*time.Second, "on stop, time between the polite end and the kill")
	f.DurationVar(&readyTimeout, "ready-timeout", 120*time.Second, "how long to wait for readiness")
	f.DurationVar(&settle, "settle", 2*time.Second, "how long the workload must stay up once ready")
	return c
}

func mxcStatusCmd() *cobra.Command {
	var output outputFormat
	c := &cobra.Command{
		Use:   "status NAME",
		Short: "Show the session's state and check from outside that the gateway runs as its agent user",
		Long: `Show what the in-session supervisor recorded (the agent user's account of
itself, never evidence by itself), probe readiness from the host now, and
check from outside that the supervisor and the gateway are alive and run as
the session's agent user, not as you (their process tokens). What cannot be
verified from the host is listed. On the executor stand-in every check says
mock. Exit status: 0 running with no check failing, 1 a check failed, 3 not running.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withManager(func(ctx context.Context, m *isolation.Manager) error {
				mock, err := probeMock(ctx, m)
				if err != nil {
					return err
				}
				m.Mock = mock
				r, err := m.Status(ctx, args[0])
				if err != nil && r == nil {
					return err
				}
				if output.data() {
					if werr := output.write(os.Stdout, r); werr != nil {
						return werr
					}
				} else {
					printIsolationStatus(os.Stdout, r)
				}
				if err != nil {
					return err
				}
				switch {
				case !r.Running():
					return exitError{code: 3}
				case r.Failed():
					return exitError{code: 1}
				}
				return nil
			})
		},
	}
	outputFlag(c, &output)
	return c
}

// oneLine is s escaped to one line of plain text: service.Printable,
// newlines and tabs as \n and \t, and Unicode format characters
// (bidirectional overrides, zero-width ones) as \u{XXXX}, so that what the
// agent wrote cannot pass for a line of corral's own.
func oneLine(s string) string {
	var b strings.Builder
	for _, r := range service.Printable(s) {
		switch {
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case unicode.Is(unicode.Cf, r):
			fmt.Fprintf(&b, `\u{%04x}`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// printIsolationStatus writes r for a person; what the session wrote is
// escaped (it is the agent user's).
func printIsolationStatus(w io.Writer, r *isolation.Report) {
	P := oneLine
	fmt.Fprintf(w, "service %s: %s", r.Name, r.Phase)
	if r.Session != nil {
		fmt.Fprintf(w, ", %s (the session says)", P(string(r.Session.State)))
	}
	fmt.Fprintln(w)
	if r.Mock != "" {
		fmt.Fprintf(w, "  executor:   the stand-in: %s\n", r.Mock)
	}
	fmt.Fprintf(w, "  session:    %s, agent user %s (%s)\n", P(r.SandboxID), P(r.AgentUser), P(r.AgentSID))
	if len(r.Command) > 0 {
		fmt.Fprintf(w, "  command:    %s\n", P(strings.Join(r.Command, " ")))
	}
	if s := r.Session; s != nil {
		fmt.Fprintf(w, "  supervisor: pid %d; workload pid %d; restarts %d\n", s.Supervisor.PID, s.Workload.PID, s.Restarts)
		if s.LastExit != nil {
			fmt.Fprintf(w, "  last exit:  %d %s at %s\n", s.LastExit.Code, P(s.LastExit.Reason), s.LastExit.At.Format(time.RFC3339))
		}
		if s.Error != "" {
			fmt.Fprintf(w, "  error:      %s\n", P(s.Error))
		}
	}
	if r.Probe != nil {
		fmt.Fprintf(w, "  probe:      ok=%v %s\n", r.Probe.OK, P(r.Probe.Detail))
	}
	for _, c := range r.Checks {
		fmt.Fprintf(w, "  check:      %-10s %s: %s\n", c.Result, c.Name, P(c.Detail))
	}
	fmt.Fprintf(w, "  boundary:   %s\n", r.Boundary)
	for _, u := range r.Unverified {
		fmt.Fprintf(w, "  unverified: %s\n", u)
	}
	if r.Autostart != "" {
		fmt.Fprintf(w, "  autostart:  %s\n", r.Autostart)
	}
	for _, x := range r.Warnings {
		fmt.Fprintf(w, "  warning:    %s\n", P(x))
	}
}

func mxcStopCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "stop NAME",
		Short: "Stop the gateway (its grace, then a kill) and the in-session supervisor",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withManager(func(ctx context.Context, m *isolation.Manager) error {
				if err := m.Stop(ctx, args[0]); err != nil {
					return err
				}
				fmt.Printf("service %s stopped\n", args[0])
				return nil
			})
		},
	}
}

func mxcRestartCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "restart NAME",
		Short: "Stop, then start with the last start's command and settings",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withManager(func(ctx context.Context, m *isolation.Manager) error {
				st, err := m.Restart(ctx, args[0])
				if err != nil {
					return err
				}
				fmt.Printf("service %s running: supervisor pid %d, workload pid %d\n", args[0], st.Supervisor.PID, st.Workload.PID)
				return nil
			})
		},
	}
}

func mxcLogsCmd() *cobra.Command {
	var sup bool
	var max int64
	c := &cobra.Command{
		Use:   "logs NAME [--supervisor] [--max BYTES]",
		Short: "Print the end of the gateway's output, or of the supervisor's log",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if max <= 0 || max > 64<<20 {
				return fmt.Errorf("--max %d: want 1 to %d bytes", max, 64<<20)
			}
			var w io.Writer = os.Stdout
			if term.IsTerminal(int(os.Stdout.Fd())) {
				w = service.PrintableWriter{W: os.Stdout} // the workload's bytes must not drive the terminal
			}
			return withManager(func(ctx context.Context, m *isolation.Manager) error {
				return m.Logs(ctx, args[0], sup, max, w)
			})
		},
	}
	c.Flags().BoolVar(&sup, "supervisor", false, "the supervisor's log instead")
	c.Flags().Int64Var(&max, "max", 1<<20, "at most this many bytes, the last ones")
	return c
}

func mxcListCmd() *cobra.Command {
	var output outputFormat
	c := &cobra.Command{
		Use:   "list",
		Short: "List your sessions (from their records; no session is contacted)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := serviceManager()
			if err != nil {
				return err
			}
			rows, err := m.List()
			if err != nil {
				return err
			}
			if output.data() {
				if rows == nil {
					rows = []isolation.Summary{}
				}
				return output.write(os.Stdout, rows)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tPHASE\tDESIRED\tSESSION\tAGENT USER")
			for _, r := range rows {
				if r.Error != "" {
					fmt.Fprintf(tw, "%s\t\t\t\terror: %s\n", r.Name, r.Error)
					continue
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Name, r.Phase, r.Desired, r.SandboxID, service.Printable(r.AgentUser))
			}
			return tw.Flush()
		},
	}
	outputFlag(c, &output)
	return c
}

func mxcDeprovisionCmd() *cobra.Command {
	var force bool
	c := &cobra.Command{
		Use:   "deprovision NAME [--force]",
		Short: "Remove a session: its gateway, MXC session, agent user, profile, staging directory and record",
		Long: `Remove session NAME: the gateway stopped, the MXC session deprovisioned
(MXC removes the agent user, its profile and the staging directory), the
autostart task removed, the record removed. Refused while the profile holds
state no export has taken since the gateway last started (corral service
export NAME --out FILE), unless --force. An interrupted removal is finished by
corral service reconcile.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withManager(func(ctx context.Context, m *isolation.Manager) error {
				if err := m.Deprovision(ctx, args[0], force); err != nil {
					return err
				}
				fmt.Printf("service %s deprovisioned\n", args[0])
				return nil
			})
		},
	}
	c.Flags().BoolVar(&force, "force", false, "remove the session even if its state was never exported")
	return c
}

func mxcExportCmd() *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "export NAME --out FILE",
		Short: "Write a stopped session's home, policy and start settings as a .tar.zst",
		Long: `Write session NAME (its gateway stopped) to FILE as a zstd-compressed tar:
its policy, start settings and the gateway's home, packed inside the session
and checked on the host (no links, no absolute or .. names, bounded sizes)
before it is taken in. The home holds the agent's own credentials: keep the
export as you would keep those.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" || out == "-" {
				return errors.New("--out FILE is required (an export is written to a new file, never to standard output)")
			}
			f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if errors.Is(err, os.ErrExist) {
				return fmt.Errorf("%s exists: an export never overwrites a file; remove it or pick another name", out)
			}
			if err != nil {
				return err
			}
			return withManager(func(ctx context.Context, m *isolation.Manager) error {
				st, err := m.Export(ctx, args[0], f)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					os.Remove(out)
					return err
				}
				fmt.Printf("service %s exported to %s: %d files, %d directories, %d bytes\n", args[0], out, st.Files, st.Dirs, st.Bytes)
				if len(st.Skipped) > 0 {
					fmt.Fprintf(os.Stderr, "left out (links and special files are not state an export carries): %s\n", service.Printable(strings.Join(st.Skipped, ", ")))
				}
				return nil
			})
		},
	}
	c.Flags().StringVar(&out, "out", "", "the export file to create (not overwritten)")
	return c
}

func mxcImportCmd() *cobra.Command {
	var in string
	c := &cobra.Command{
		Use:   "import [NAME] -i FILE",
		Short: "Provision a session from an export: its policy, start settings and home",
		Long: `Provision session NAME (the export's own name without one) from FILE: the
export is checked whole first (names, types, sizes), then the session is
provisioned with the export's policy and the home unpacked into the new agent
user's profile. A failure deprovisions what it made. Then: corral service
start NAME.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if in == "" {
				return errors.New("-i FILE is required")
			}
			f, err := os.Open(in)
			if err != nil {
				return err
			}
			defer f.Close()
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			return withManager(func(ctx context.Context, m *isolation.Manager) error {
				rec, loss, err := m.Import(ctx, name, f)
				printLoss(loss)
				if err != nil {
					return err
				}
				fmt.Printf("service %s imported: MXC session %s, agent user %s\n", rec.Name, rec.SandboxID, service.Printable(rec.AgentUser))
				if st := rec.Start; st != nil {
					// The export's, not yours: a payload directory is copied
					// into the session at each start.
					fmt.Printf("the export's start: %s", service.Printable(strings.Join(st.Command, " ")))
					if st.Payload != "" {
						fmt.Printf(", payload %s (copied into the session at each start)", service.Printable(st.Payload))
					}
					fmt.Printf("\ncheck them, then: corral service start %s (or give your own: corral service start %s [flags] -- COMMAND)\n", rec.Name, rec.Name)
				} else {
					fmt.Printf("start it with corral service start %s -- COMMAND\n", rec.Name)
				}
				return nil
			})
		},
	}
	c.Flags().StringVarP(&in, "input", "i", "", "the export to read")
	return c
}

func mxcReconcileCmd() *cobra.Command {
	var dry bool
	var forget string
	var output outputFormat
	c := &cobra.Command{
		Use:   "reconcile [--dry-run] [--forget NAME]",
		Short: "Finish or undo interrupted provisions and removals; list orphans with their remedy",
		Long: `Look at every session record: an interrupted provision is undone, an
interrupted deprovision finished, a session MXC no longer has reported lost.
A provision that died before MXC named its session may have made an agent
user nothing can address: it is listed as an orphan with what to do, and its
record stays until --forget NAME, after you removed what it made.
Exit status: 0, or 1 when something is left for you.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withManager(func(ctx context.Context, m *isolation.Manager) error {
				if forget != "" {
					if err := m.Forget(forget); err != nil {
						return err
					}
					fmt.Printf("service %s: record removed\n", forget)
					return nil
				}
				acts, err := m.Reconcile(ctx, dry)
				if err != nil {
					return err
				}
				if output.data() {
					if acts == nil {
						acts = []isolation.Action{}
					}
					if err := output.write(os.Stdout, acts); err != nil {
						return err
					}
				}
				left := false
				for _, a := range acts {
					if !output.data() {
						fmt.Printf("%s: %s: %s\n", a.Name, a.Action, oneLine(a.Detail))
						if a.Remedy != "" {
							fmt.Printf("  remedy: %s\n", a.Remedy)
						}
					}
					left = left || a.Action == "orphan" || a.Action == "lost" || a.Action == "failed"
				}
				if left {
					return exitError{code: 1}
				}
				return nil
			})
		},
	}
	c.Flags().BoolVar(&dry, "dry-run", false, "report what would be done, do nothing")
	c.Flags().StringVar(&forget, "forget", "", "remove the orphan record of NAME (after you removed what it made)")
	outputFlag(c, &output)
	return c
}

func mxcAutostartCmd() *cobra.Command {
	c := &cobra.Command{Use: "autostart", Short: "Start a session at your logon with a Task Scheduler task (Windows)"}
	toggle := func(enable bool) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			if runtime.GOOS != "windows" {
				return provider.Errorf(provider.CodeUnavailable, "autostart of a service on MXC is a Task Scheduler logon task: Windows only")
			}
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			me, err := procid.User(os.Getpid())
			if err != nil {
				return fmt.Errorf("your account's SID: %w", err)
			}
			return withManager(func(ctx context.Context, m *isolation.Manager) error {
				path, err := m.Autostart(ctx, args[0], exe, me, enable)
				if err != nil {
					return err
				}
				if enable {
					fmt.Printf("service %s starts at your logon (task definition %s)\n", args[0], path)
				} else {
					fmt.Printf("service %s: logon task removed\n", args[0])
				}
				return nil
			})
		}
	}
	c.AddCommand(&cobra.Command{
		Use:   "enable NAME",
		Short: "Register a logon task that runs corral service start NAME as you",
		Long: `Write the task definition (owner-only) next to the session's record and
register it with Task Scheduler: at your logon it runs this corral's
service start NAME with your least-privilege token. Headless operation (a
session started at boot without a logon) is not solved: the task runs only
while you are logged on. corral service status warns when the definition or
the corral it runs can be changed by anyone but you, SYSTEM and
Administrators (the agent user included).`,
		Args: cobra.ExactArgs(1),
		RunE: toggle(true),
	}, &cobra.Command{
		Use:   "disable NAME",
		Short: "Remove the logon task",
		Args:  cobra.ExactArgs(1),
		RunE:  toggle(false),
	})
	return c
}

//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/corral-sandbox/corral/consent"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/service"
	"github.com/corral-sandbox/corral/session"
)

// Exit statuses of corral service status, as systemctl status and the
// LSB init-script actions use them: 0 running and every check passed,
// 1 running but a posture check failed, 3 not running.
const (
	statusPostureFailed = 1
	statusNotRunning    = 3
)

// serviceSupervisor runs the session supervisor (argv: corral
// __service-supervise DIR, with the launcher's pipe at fd 3).
func serviceSupervisor() {
	if len(os.Args) != 3 || os.Args[1] != service.SupervisorArg {
		return
	}
	launch := os.NewFile(3, "launch")
	if err := session.CheckResolver(); err != nil {
		fmt.Fprintf(os.Stderr, "corral service: %v\n", err)
		os.Exit(1)
	}
	// The launcher's handoff (the variables credentials read) comes on
	// stdin, before anything else is done.
	os.Exit(service.Supervise(os.Args[2], launch, service.SupervisorOptions{Version: version, Environ: service.ReadHandoff(os.Stdin)}))
}

func newServiceRunCmd() *cobra.Command {
	var pol, workdir, auditPath string
	var strictTree bool
	c := &cobra.Command{
		Use:   "run [--policy FILE] [-C DIR] -- COMMAND [ARG...]",
		Short: "Run one command in a fresh, throwaway session, as a gateway would run",
		Long: `Run COMMAND once in a fresh session built as corral service provision and
start build one — its own agent user (root), a session home, the supervisor —
but in the foreground: the command has this terminal's stdio, signals are
passed to it, the policy's timeout applies, and the session is removed when it
ends. Use it to try a gateway's policy, and to qualify sessions (corral qualify
--provider linux-service). -C DIR is the working directory (granted as the
policy's include_workdir says); without it the command starts in the home.
Exit status as corral run's.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("missing command: corral service run [flags] -- COMMAND [ARG...]")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			file, shown, done, err := policyFile(pol)
			if err != nil {
				return err
			}
			defer done()
			if workdir != "" {
				abs, err := filepath.Abs(workdir)
				if err != nil {
					return err
				}
				workdir = abs
			}
			if auditPath != "" {
				abs, err := filepath.Abs(auditPath)
				if err != nil {
					return err
				}
				auditPath = abs
			}
			if err := session.CheckResolver(); err != nil {
				return err
			}
			so := service.SupervisorOptions{Version: version}
			so.AuditPath = auditPath
			so.StrictTree = strictTree
			code := service.Run(context.Background(), service.RunOptions{PolicyFile: file, PolicyName: shown, Workdir: workdir, Command: args, Supervisor: so})
			if code != 0 {
				return exitError{code: code}
			}
			return nil
		},
	}
	f := c.Flags()
	f.SetInterspersed(false)
	f.StringVarP(&pol, "policy", "p", "", "policy file (YAML or JSON); default: the built-in policy")
	f.StringVarP(&workdir, "workdir", "C", "", "working directory (default: the session's home)")
	f.StringVar(&auditPath, "audit", "", "append OCSF JSONL audit events to this file (default: the session's log, removed with it)")
	f.BoolVar(&strictTree, "strict-tree", false, "exit 116 when the command planted files that would make a host tool run code, and move each aside (as corral run --strict-tree)")
	return c
}

func newServiceCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "service",
		Short: "Run a long-lived agent gateway inside a persistent, contained session",
		Long: `A service is a persistent session for one long-lived agent gateway: an
identity of its own (as root, a dedicated system user, corral-NAME), a home
that keeps its state across restarts and reboots, and the policy's layers and
governed egress around everything it runs. A short-lived launcher (service
start) sets it up and exits; a supervisor outside the sandbox restarts the
workload and records its status; service status checks the posture from
outside. See docs/service.md.`,
	}
	c.AddCommand(newServiceProvisionCmd(), newServiceStartCmd(), newServiceStatusCmd(), newServiceStopCmd(),
		newServiceRestartCmd(), newServiceLogsCmd(), newServiceListCmd(), newServiceDeprovisionCmd(),
		newServiceExportCmd(), newServiceImportCmd(), newServiceReconcileCmd(), newServiceAutostartCmd(), newServiceRunCmd())
	for _, k := range c.Commands() {
		if st, ok := serviceExits[k.Name()]; ok {
			k.Long += "\n\nExit status: " + st
		}
	}
	return c
}

// serviceExits are the service commands' exit statuses (docs/service.md's
// table of commands; docs/exit-codes.md): 118 whenever the named session
// does not exist, 2 for a bad argument.
var serviceExits = map[string]string{
	"provision": "0; 117 the name is taken; 122 the policy is rejected; 123 provisioning failed (undone).",
	"start": "0 up; 117 already running; 118 no such session; 122 the policy is rejected; 124 not ready in time; " +
		"125 could not start (a layer, a port taken, the workload exited or the launcher was interrupted); " +
		"127 the command was not found or not executable.",
	"status":      "0 running and every check passes; 1 a check failed (it names the layer); 3 not running; 118 no such session.",
	"stop":        "0; 118 no such session.",
	"restart":     "as start.",
	"logs":        "0; 118 no such session.",
	"list":        "0.",
	"deprovision": "0; 117 refused (running, or its home holds state no export has taken); 118 no such session.",
	"export":      "0; 117 running; 118 no such session.",
	"import":      "as provision; 123 extraction failed (undone).",
	"reconcile":   "0; 1 a repair failed (the finding says which).",
	"autostart":   "0; 118 no such session.",
}

func newServiceProvisionCmd() *cobra.Command {
	var pol string
	c := &cobra.Command{
		Use:   "provision NAME [--policy FILE]",
		Short: "Create a session: its identity, home and policy",
		Long: `Create session NAME: a durable record first, then (as root) the agent user
corral-NAME, the session directory with its home, and a copy of the policy,
which must map without errors. A failure undoes everything; a crash leaves a
record that corral service reconcile undoes. Not retried blindly: provisioning
an existing name fails (exit 117).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			file, shown, done, err := policyFile(pol)
			if err != nil {
				return err
			}
			defer done()
			rec, err := service.Provision(context.Background(), service.ProvisionOptions{Name: args[0], PolicyFile: file, PolicyName: shown})
			if err != nil {
				return err
			}
			printProvisioned(rec)
			return nil
		},
	}
	c.Flags().StringVarP(&pol, "policy", "p", "", "policy file (YAML or JSON); default: the built-in policy")
	return c
}

// policyFile returns the policy file to give a session and how to name
// it in errors: path itself, or the built-in default written to a
// temporary file (removed by done).
func policyFile(path string) (file, shown string, done func(), err error) {
	if path != "" {
		return path, path, func() {}, nil
	}
	f, err := os.CreateTemp("", "corral-default-*.yaml")
	if err != nil {
		return "", "", nil, err
	}
	done = func() { os.Remove(f.Name()) }
	if _, err := f.Write(policy.DefaultYAML); err != nil {
		f.Close()
		done()
		return "", "", nil, err
	}
	f.Close()
	return f.Name(), "the built-in default policy", done, nil
}

func printProvisioned(rec *service.Record) {
	who := fmt.Sprintf("agent user %s (uid %d)", rec.User, rec.UID)
	if rec.Mode == service.ModeUser {
		who = fmt.Sprintf("your own uid %d in a user namespace (unprivileged: a weaker, same-uid boundary)", rec.UID)
	}
	fmt.Printf("service %s provisioned: %s, home %s\n", rec.Name, who, rec.Home)
}

func newServiceStartCmd() *cobra.Command {
	var (
		readyPort                   int
		readyHTTP, restart, web     string
		publish                     []string
		grace, readyTimeout, settle time.Duration
	)
	c := &cobra.Command{
		Use:   "start NAME [flags] [-- COMMAND [ARG...]]",
		Short: "Start the session's workload and wait until it is up",
		Long: `Start the workload of session NAME under a supervisor and return once it is
up: started, ready (--ready-port: a TCP port inside accepts connections;
--ready-http: a URL answers 2xx) and still the same process after --settle.
Without COMMAND the command (and flags) of the last start run again. The
launcher then exits; the supervisor stays, outside the sandbox, restarting
the workload per --restart, each time in a fresh sandbox over the same home.

--publish [HOST:]PORT[:INNER] forwards a loopback address of the host to
port INNER (default PORT) on the session's own loopback, where the workload
listens; HOST must be a loopback address (default 127.0.0.1).

A workload that does not start, stay up or become ready in time is stopped;
the error carries the last lines of the logs. Exit: 0 up, 117 already
running, 122 policy rejected, 124 not ready in time, 125 could not start.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, command := args[0], args[1:]
			if cmd.ArgsLenAtDash() > 1 || (cmd.ArgsLenAtDash() < 0 && len(command) > 0) {
				return fmt.Errorf("put the command after --: corral service start %s -- COMMAND [ARG...]", name)
			}
			var spec *service.StartSpec
			changed := false
			for _, f := range []string{"ready-port", "ready-http", "publish", "restart", "stop-grace", "ready-timeout", "settle", "web"} {
				changed = changed || cmd.Flags().Changed(f)
			}
			if len(command) > 0 {
				spec = &service.StartSpec{Command: command, Restart: restart, ReadyPort: readyPort, ReadyHTTP: readyHTTP, StopGrace: service.Duration(grace),
					ReadyTimeout: service.Duration(readyTimeout), Settle: service.Duration(settle), Web: web}
				if web != "" {
					if ap, err := netip.ParseAddrPort(web); err != nil || !ap.Addr().IsLoopback() {
						return fmt.Errorf("--web %q: want a loopback IP:PORT, e.g. 127.0.0.1:8790 (the page's token must not cross the network)", web)
					}
				}
				switch restart {
				case "always", "on-failure", "never":
				default:
					return fmt.Errorf("--restart %q: use always, on-failure or never", restart)
				}
				if readyPort < 0 || readyPort > 65535 {
					return fmt.Errorf("--ready-port %d: want 1-65535", readyPort)
				}
				if readyHTTP != "" && !strings.HasPrefix(readyHTTP, "http://") {
					return fmt.Errorf("--ready-http %q: want an http:// URL (normally a published port: http://127.0.0.1:PORT/...)", readyHTTP)
				}
				for _, p := range publish {
					pub, err := parsePublish(p)
					if err != nil {
						return err
					}
					spec.Publish = append(spec.Publish, pub)
				}
			} else if changed {
				return fmt.Errorf("flags such as --publish go with a command: corral service start %s [flags] -- COMMAND (without one, the last start's settings run again)", name)
			}
			if readyTimeout <= 0 || settle < 0 {
				return fmt.Errorf("--ready-timeout must be positive and --settle not negative")
			}
			return startAndReport(name, spec)
		},
	}
	f := c.Flags()
	f.IntVar(&readyPort, "ready-port", 0, "ready when this TCP port inside the session accepts a connection")
	f.StringVar(&readyHTTP, "ready-http", "", "ready when this URL (from the host, e.g. a published port) answers 2xx")
	f.StringVar(&web, "web", "", "serve the consent web page on this loopback IP:PORT (a policy with a consent section; its token is the session's web.token)")
	f.StringArrayVar(&publish, "publish", nil, "[HOST:]PORT[:INNER]: forward host loopback HOST:PORT to port INNER inside (repeatable)")
	f.StringVar(&restart, "restart", "on-failure", "restart policy: always, on-failure or never")
	f.DurationVar(&grace, "stop-grace", 30*time.Second, "on stop, time between SIGTERM and SIGKILL")
	f.DurationVar(&readyTimeout, "ready-timeout", 120*time.Second, "how long to wait for the start and readiness")
	f.DurationVar(&settle, "settle", 2*time.Second, "how long the workload must stay up once ready")
	return c
}

// parsePublish reads [HOST:]PORT[:INNER]; HOST must be loopback.
func parsePublish(s string) (service.Publish, error) {
	bad := func(why string) (service.Publish, error) {
		return service.Publish{}, fmt.Errorf("--publish %q: %s (want [HOST:]PORT[:INNER], HOST a loopback address such as 127.0.0.1 or [::1])", s, why)
	}
	host, rest := "127.0.0.1", s
	if strings.Count(s, ":") > 2 && !strings.HasPrefix(s, "[") {
		return bad("an IPv6 address goes in brackets: [::1]:PORT")
	}
	if strings.HasPrefix(s, "localhost:") {
		s = "127.0.0.1" + strings.TrimPrefix(s, "localhost")
		rest = s
	}
	if strings.HasPrefix(s, "[") { // [::1]:PORT[:INNER]
		i := strings.Index(s, "]")
		if i < 0 || i+1 >= len(s) || s[i+1] != ':' {
			return bad("unclosed [")
		}
		host, rest = s[1:i], s[i+2:]
	} else if parts := strings.Split(s, ":"); len(parts) == 3 || (len(parts) == 2 && strings.Contains(parts[0], ".")) {
		host, rest = parts[0], strings.Join(parts[1:], ":")
	}
	addr, err := netip.ParseAddr(host)
	if err != nil || !addr.IsLoopback() {
		return bad(host + " is not a loopback address: a published port is reachable from this host only")
	}
	outer, inner, _ := strings.Cut(rest, ":")
	if inner == "" {
		inner = outer
	}
	op, err1 := strconv.Atoi(outer)
	ip, err2 := strconv.Atoi(inner)
	if err1 != nil || err2 != nil || op < 1 || op > 65535 || ip < 1 || ip > 65535 {
		return bad("ports must be 1-65535")
	}
	return service.Publish{Host: net.JoinHostPort(addr.String(), strconv.Itoa(op)), Port: ip}, nil
}

// selfExe is this corral binary's path, for the supervisor and units.
func selfExe() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(exe)
}

type statusOut struct {
	*service.Status
	Mode      service.Mode           `json:"mode"`
	User      string                 `json:"user,omitempty"`
	UID       int                    `json:"uid"`
	Home      string                 `json:"home"`
	Command   []string               `json:"command,omitempty"`
	Publish   []service.Publish      `json:"publish,omitempty"`
	Probe     *service.Probe         `json:"probe,omitempty"` // checked now, from this process
	Posture   []service.PostureCheck `json:"posture,omitempty"`
	PostureOK bool                   `json:"posture_ok"`
	Unit      string                 `json:"autostart_unit,omitempty"`
	Warnings  []string               `json:"warnings,omitempty"`
	// Grants are the session's consent grants, desired against
	// effective, read back now from the supervisor (a consent policy).
	Grants []consent.Grant `json:"grants,omitempty"`
	Web    string          `json:"consent_page,omitempty"`
}

func newServiceStatusCmd() *cobra.Command {
	var output outputFormat
	c := &cobra.Command{
		Use:   "status NAME",
		Short: "Show a session's state and check its posture from outside",
		Long: `Show what the supervisor recorded, probe readiness now, and check the
workload's posture from outside it (/proc and the cgroup files; what the
workload says about itself is never evidence): identity, namespaces,
NoNewPrivs, seccomp, the mount root and cgroup limits. Exit: 0 running with
every check passing, 1 a check failed (the layer is named), 3 not running.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, rec, err := service.Open(args[0])
			if err != nil {
				return err
			}
			st, err := service.ReadStatus(p)
			if err != nil {
				return err
			}
			live := st.Live()
			out := statusOut{Status: st, Mode: rec.Mode, User: rec.User, UID: rec.UID, Home: rec.Home}
			if rec.Start != nil {
				out.Command, out.Publish = rec.Start.Command, rec.Start.Publish
			}
			out.Unit, out.Warnings = autostartInfo(rec, out.Warnings)
			if live {
				pol, err := policy.Load(p.Policy())
				if err != nil {
					return err
				}
				out.Posture, out.PostureOK = service.Posture(rec, st, pol.Layers, pol.Network.Mode)
				if rec.Start != nil && (len(rec.Start.Publish) > 0 || rec.Start.ReadyHTTP != "") {
					pr := probeNow(rec.Start)
					out.Probe = &pr
				}
				if pol.Consent != nil {
					if cl, err := consent.NewClient("unix:"+p.Approvals(), ""); err == nil {
						if out.Grants, err = cl.Grants(cmd.Context(), ""); err != nil {
							out.Warnings = append(out.Warnings, "consent grants: "+err.Error())
						}
					}
					if rec.Start != nil && rec.Start.Web != "" {
						out.Web = fmt.Sprintf("http://%s/ui/?token=$(cat %s)", rec.Start.Web, p.WebToken())
					}
				}
			}
			if output.data() {
				if err := output.write(os.Stdout, out); err != nil {
					return err
				}
			} else {
				printStatus(os.Stdout, rec, out)
			}
			switch {
			case !live || st.State != service.StateRunning:
				return exitError{code: statusNotRunning}
			case !out.PostureOK:
				return exitError{code: statusPostureFailed}
			}
			return nil
		},
	}
	outputFlag(c, &output)
	return c
}

func autostartInfo(rec *service.Record, warnings []string) (string, []string) {
	unit, ws := service.AutostartWarnings(rec)
	return unit, append(warnings, ws...)
}

// probeNow checks, from this process on the host, the published ports
// (a TCP connect) and the readiness URL.
func probeNow(st *service.StartSpec) service.Probe {
	check := *st
	check.ReadyPort = 0 // inside the session: only the supervisor reaches it
	r := service.Check(&check, nil)
	var parts []string
	if r.Detail != "" {
		parts = append(parts, r.Detail)
	}
	for _, p := range st.Publish {
		c, err := net.DialTimeout("tcp", p.Host, 2*time.Second)
		if err != nil {
			r.OK = false
			parts = append(parts, fmt.Sprintf("published %s: %v", p.Host, err))
			continue
		}
		// The supervisor accepts on the host side and closes at once when
		// nothing listens inside: an immediate EOF tells them apart from a
		// server that waits for the client to speak.
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		_, rerr := c.Read(make([]byte, 1))
		c.Close()
		if errors.Is(rerr, io.EOF) {
			r.OK = false
			parts = append(parts, fmt.Sprintf("published %s: nothing answers on port %d inside", p.Host, p.Port))
			continue
		}
		parts = append(parts, fmt.Sprintf("published %s reaches port %d inside", p.Host, p.Port))
	}
	r.Detail = strings.Join(parts, "; ")
	return r
}

func printStatus(w io.Writer, rec *service.Record, o statusOut) {
	st := o.Status
	fmt.Fprintf(w, "service %s: %s\n", st.Name, st.State)
	who := fmt.Sprintf("%s (uid %d)", rec.User, rec.UID)
	if rec.Mode == service.ModeUser {
		who = fmt.Sprintf("uid %d (unprivileged session)", rec.UID)
	}
	fmt.Fprintf(w, "  identity:   %s, home %s\n", who, rec.Home)
	if len(o.Command) > 0 {
		fmt.Fprintf(w, "  command:    %s\n", strings.Join(o.Command, " "))
	}
	if o.Web != "" {
		fmt.Fprintf(w, "  consent:    %s\n", o.Web)
	}
	for _, g := range o.Grants {
		fmt.Fprintf(w, "  grant:      %s %s %s %s, desired %t, effective %t %s %s\n", g.ID, g.Kind, g.Target, g.Access, g.Desired, g.Effective, g.Path, g.Detail)
	}
	if st.Supervisor.PID != 0 {
		fmt.Fprintf(w, "  supervisor: pid %d\n", st.Supervisor.PID)
	}
	if st.Workload.PID != 0 {
		fmt.Fprintf(w, "  workload:   pid %d since %s, %d restarts\n", st.Workload.PID, st.Started.Local().Format(time.DateTime), st.Restarts)
	}
	for _, p := range o.Publish {
		fmt.Fprintf(w, "  publish:    %s -> port %d inside\n", p.Host, p.Port)
	}
	if st.Ready != nil {
		fmt.Fprintf(w, "  ready:      %v (%s, supervisor, %s)\n", st.Ready.OK, st.Ready.Detail, st.Ready.At.Local().Format(time.TimeOnly))
	}
	if o.Probe != nil {
		fmt.Fprintf(w, "  probe now:  %v (%s)\n", o.Probe.OK, o.Probe.Detail)
	}
	if st.LastExit != nil {
		fmt.Fprintf(w, "  last exit:  %d%s at %s %s\n", st.LastExit.Code, service.WithSignal(st.LastExit.Signal), st.LastExit.At.Local().Format(time.DateTime), st.LastExit.Reason)
	}
	for _, c := range st.Credentials {
		exp := ""
		if !c.Expires.IsZero() {
			exp = ", expires " + c.Expires.Local().Format(time.DateTime)
		}
		fmt.Fprintf(w, "  credential: %s (%s, source %s%s)\n", c.Name, c.State, c.Source, exp)
	}
	if a := st.Audit; a != nil {
		fmt.Fprintf(w, "  audit:      %d events (%d egress allowed, %d denied", a.Events, a.Allowed, a.Denied)
		if a.Aggregated > 0 {
			fmt.Fprintf(w, ", %d of them aggregated", a.Aggregated)
		}
		if a.LostInRotated > 0 {
			fmt.Fprintf(w, "; %d events removed by rotation", a.LostInRotated)
		}
		fmt.Fprintln(w, ")")
	}
	if st.Error != "" {
		fmt.Fprintf(w, "  error:      %s\n", st.Error)
	}
	if len(o.Posture) > 0 {
		fmt.Fprintf(w, "  posture (checked from outside):\n")
		for _, c := range o.Posture {
			fmt.Fprintf(w, "    %-12s %-13s %s\n", c.Check, c.Verdict, c.Detail)
		}
	}
	if o.Unit != "" {
		fmt.Fprintf(w, "  autostart:  %s\n", o.Unit)
	}
	for _, l := range st.Loss {
		if l.Severity == provider.SeverityWarning {
			fmt.Fprintf(w, "  warning:    %s: %s\n", l.Field, l.Message)
		}
	}
	for _, m := range o.Warnings {
		fmt.Fprintf(w, "  warning:    %s\n", m)
	}
}

func newServiceStopCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "stop NAME",
		Short: "Stop the workload (SIGTERM, then SIGKILL after the stop grace) and its supervisor",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := service.Stop(args[0])
			if err != nil {
				return err
			}
			fmt.Printf("service %s: %s\n", args[0], st.State)
			return nil
		},
	}
}

func newServiceRestartCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "restart NAME",
		Short: "Stop, then start with the last start's command and settings",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := service.Stop(args[0]); err != nil {
				return err
			}
			return startAndReport(args[0], nil)
		},
	}
}

// startAndReport runs the launcher and says what is running.
func startAndReport(name string, spec *service.StartSpec) error {
	exe, err := selfExe()
	if err != nil {
		return err
	}
	st, err := service.Start(context.Background(), name, spec, service.StartOptions{Exe: exe})
	if err != nil {
		return err
	}
	ready := ""
	if st.Ready != nil {
		ready = "; ready: " + st.Ready.Detail
	}
	fmt.Printf("service %s running: supervisor pid %d, workload pid %d%s\n", name, st.Supervisor.PID, st.Workload.PID, ready)
	return nil
}

func newServiceLogsCmd() *cobra.Command {
	var follow, sup bool
	c := &cobra.Command{
		Use:   "logs NAME [-f] [--supervisor]",
		Short: "Print the workload's output (stdout and stderr), or the supervisor's log",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, _, err := service.Open(args[0])
			if err != nil {
				return err
			}
			path := p.Workload()
			if sup {
				path = p.SupLog()
			}
			var w io.Writer = os.Stdout
			if term.IsTerminal(int(os.Stdout.Fd())) {
				w = service.PrintableWriter{W: os.Stdout} // the workload's bytes must not drive the terminal
			}
			return service.Tail(cmd.Context(), path, w, follow)
		},
	}
	c.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing what is written (across rotation) until interrupted")
	c.Flags().BoolVar(&sup, "supervisor", false, "the supervisor's log (restarts, start failures) instead")
	return c
}

func newServiceListCmd() *cobra.Command {
	var output outputFormat
	c := &cobra.Command{
		Use:   "list",
		Short: "List this user's sessions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			base, err := service.Base()
			if err != nil {
				return err
			}
			names, err := service.List(base)
			if err != nil {
				return err
			}
			type row struct {
				Name     string        `json:"name"`
				Phase    service.Phase `json:"phase"`
				Mode     service.Mode  `json:"mode"`
				User     string        `json:"user,omitempty"`
				State    service.State `json:"state"`
				PID      int           `json:"workload_pid,omitempty"`
				Restarts int           `json:"restarts"`
				Error    string        `json:"error,omitempty"`
			}
			var rows []row
			for _, n := range names {
				p, rec, err := service.Open(n)
				if err != nil {
					rows = append(rows, row{Name: n, Error: err.Error()})
					continue
				}
				st, err := service.ReadStatus(p)
				if err != nil {
					rows = append(rows, row{Name: n, Phase: rec.Phase, Mode: rec.Mode, User: rec.User, Error: err.Error()})
					continue
				}
				st.Live()
				rows = append(rows, row{n, rec.Phase, rec.Mode, rec.User, st.State, st.Workload.PID, st.Restarts, ""})
			}
			if output.data() {
				if rows == nil {
					rows = []row{}
				}
				return output.write(os.Stdout, rows)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tPHASE\tMODE\tUSER\tSTATE\tPID\tRESTARTS")
			for _, r := range rows {
				if r.Error != "" {
					fmt.Fprintf(tw, "%s\t%s\t\t\terror: %s\n", r.Name, r.Phase, r.Error)
					continue
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\n", r.Name, r.Phase, r.Mode, r.User, r.State, r.PID, r.Restarts)
			}
			return tw.Flush()
		},
	}
	outputFlag(c, &output)
	return c
}

func newServiceDeprovisionCmd() *cobra.Command {
	var force bool
	c := &cobra.Command{
		Use:   "deprovision NAME [--force]",
		Short: "Remove a stopped session: autostart unit, agent user, home, logs, record",
		Long: `Remove session NAME. Refused while it runs, and while its home holds state
that no export has taken since the workload last ran (corral service export
NAME -o NAME.tar.zst), unless --force. An interrupted removal is finished by
corral service reconcile.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := service.Deprovision(args[0], force); err != nil {
				return err
			}
			fmt.Printf("service %s deprovisioned\n", args[0])
			return nil
		},
	}
	c.Flags().BoolVar(&force, "force", false, "remove the home even if its state was never exported")
	return c
}

func newServiceExportCmd() *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "export NAME [--out FILE]",
		Short: "Write a stopped session's home, policy and start settings as a .tar.zst",
		Long: `Write session NAME (stopped) to FILE or standard output as a zstd-compressed
tar: its policy, start settings and home. The home holds the agent's own
credentials (tokens, keys): files that look like secrets are listed on
standard error. Keep the export as you would keep those secrets.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var w io.Writer = os.Stdout
			if out == "" || out == "-" {
				if term.IsTerminal(int(os.Stdout.Fd())) {
					return errors.New("the export is binary: redirect it (corral service export NAME > NAME.tar.zst) or use --out FILE")
				}
			} else {
				f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
				if err != nil {
					return err
				}
				defer f.Close()
				w = f
				// Interrupted, the partial file goes, as on an error.
				sigs := make(chan os.Signal, 1)
				signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
				defer signal.Stop(sigs)
				go func() {
					sig := <-sigs
					os.Remove(out)
					os.Exit(128 + int(sig.(syscall.Signal)))
				}()
			}
			secrets, err := service.Export(args[0], w, version)
			if err != nil {
				if out != "" && out != "-" {
					os.Remove(out)
				}
				return err
			}
			if len(secrets) > 0 {
				fmt.Fprintf(os.Stderr, "corral: the export holds %d files that look like secrets (tokens, keys, passwords); protect it as you would them:\n", len(secrets))
				for _, s := range secrets {
					fmt.Fprintf(os.Stderr, "  %s\n", s)
				}
			}
			return nil
		},
	}
	c.Flags().StringVar(&out, "out", "", "write to FILE (created 0600, never overwritten) instead of standard output")
	return c
}

func newServiceImportCmd() *cobra.Command {
	var in string
	c := &cobra.Command{
		Use:   "import [NAME] [-i FILE]",
		Short: "Provision a session from an export (its name, or NAME)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var r io.Reader = os.Stdin
			if in != "" && in != "-" {
				f, err := os.Open(in)
				if err != nil {
					return err
				}
				defer f.Close()
				r = f
			}
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			rec, err := service.Import(context.Background(), name, r)
			if err != nil {
				return err
			}
			printProvisioned(rec)
			// What the export brought is the caller's to check before a start.
			fmt.Printf("policy from the export: %s (%s)\n", filepath.Join(filepath.Dir(rec.Home), "policy.yaml"), rec.PolicyHash)
			if rec.Start != nil {
				fmt.Printf("start command from the export: %s\n", strings.Join(rec.Start.Command, " "))
			}
			return nil
		},
	}
	c.Flags().StringVarP(&in, "input", "i", "", "read FILE instead of standard input")
	return c
}

func newServiceReconcileCmd() *cobra.Command {
	var output outputFormat
	var dry bool
	c := &cobra.Command{
		Use:   "reconcile [--dry-run]",
		Short: "Repair what interrupted operations left: records without resources and resources without records",
		Long: `Compare session records with what exists (agent users, session
directories, supervisor processes, cgroups) and repair: an interrupted
provision is undone, an interrupted deprovision finished, a ready session's
missing user or home made again, supervisors without a ready record stopped,
agent users and empty directories without a record removed, dead sandboxes'
cgroups swept. A directory without a record whose home holds data is listed
and kept. --dry-run only lists.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			fs, err := service.Reconcile(dry)
			if err != nil {
				return err
			}
			failed := 0
			for _, f := range fs {
				if strings.HasPrefix(f.Action, "failed:") {
					failed++
				}
			}
			if output.data() {
				if fs == nil {
					fs = []service.Finding{}
				}
				if err := output.write(os.Stdout, fs); err != nil {
					return err
				}
			} else {
				if len(fs) == 0 {
					fmt.Println("nothing to reconcile")
				}
				for _, f := range fs {
					fmt.Printf("%s %s: %s -> %s\n", f.Resource, f.Service, f.Finding, f.Action)
				}
			}
			if failed > 0 {
				fmt.Fprintf(os.Stderr, "corral: %d repairs failed\n", failed)
				return exitError{code: 1}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&dry, "dry-run", false, "list what would be done, change nothing")
	outputFlag(c, &output)
	return c
}

func newServiceAutostartCmd() *cobra.Command {
	c := &cobra.Command{Use: "autostart", Short: "Start a session at boot (root) or logon (user) with a systemd unit"}
	c.AddCommand(&cobra.Command{
		Use:   "enable NAME",
		Short: "Write and enable the unit that runs corral service start NAME",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			exe, err := selfExe()
			if err != nil {
				return err
			}
			unit, err := service.EnableAutostart(args[0], exe)
			if err != nil {
				return err
			}
			fmt.Printf("autostart enabled: %s\n", unit)
			return nil
		},
	}, &cobra.Command{
		Use:   "disable NAME",
		Short: "Remove the unit",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, rec, err := service.Open(args[0])
			if err != nil {
				return err
			}
			if err := service.DisableAutostart(rec); err != nil {
				return err
			}
			fmt.Printf("autostart disabled for %s\n", args[0])
			return nil
		},
	})
	return c
}

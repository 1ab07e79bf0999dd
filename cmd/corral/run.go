package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"

	"sync"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/corral-sandbox/corral/audit"
	"github.com/corral-sandbox/corral/internal/planted"
	"github.com/corral-sandbox/corral/internal/startup"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/session"
)

func contextBackground() context.Context { return context.Background() }

func asErr[T any](err error, target *T) bool { return errors.As(err, target) }

type runOpts struct {
	policy, provider, workdir, audit, image string
	tty, verbose, strictTree                bool
	preserveFDs                             int
}

// traceStartupEnv, set to 1, is --trace-startup for every corral run the
// process starts (a benchmark's, a test's).
const traceStartupEnv = "CORRAL_TRACE_STARTUP"

// traceStartupRequested reports whether args (os.Args[1:]) are a run with
// --trace-startup among its flags, or traceStartupEnv is 1: main decides
// before cobra parses anything, so package initialisation and parsing
// are phases of the trace too.
func traceStartupRequested(args []string) bool {
	if os.Getenv(traceStartupEnv) == "1" {
		return true
	}
	if len(args) == 0 || args[0] != "run" {
		return false
	}
	for _, a := range args[1:] {
		if a == "--" {
			break
		}
		if a == "--trace-startup" || a == "--trace-startup=true" {
			return true
		}
	}
	return false
}

func newRunCmd() *cobra.Command {
	var o runOpts
	c := &cobra.Command{
		Use:   "run [flags] -- COMMAND [ARG...]",
		Short: "Run one command in a sandbox",
		Long: `Run one command in a fresh sandbox and exit with its status.

Without --policy the built-in default applies: system directories read-only,
the working directory read-write, a private /tmp and an empty private home,
no network, a scrubbed environment and resource limits.

Exit status: the command's own (128+N when killed by signal N), 124 when the
policy's timeout expired, or one of Corral's codes (docs/exit-codes.md):
121 unavailable, 122 policy rejected, 123 provision failed, 125 start failed,
127 command not found; with --strict-tree, 116 when the command planted
files that would run code outside the sandbox (they are always reported).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("missing command: corral run [flags] -- COMMAND [ARG...]")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			// An empty value is a mistake (an unset variable), not "use
			// the default": running on another policy than meant, or
			// without the audit asked for, must not happen silently.
			for _, name := range []string{"policy", "audit", "workdir", "image"} {
				if f := cmd.Flags().Lookup(name); f.Changed && f.Value.String() == "" {
					return fmt.Errorf("--%s: empty value", name)
				}
			}
			if o.image != "" && o.provider != "docker" {
				return fmt.Errorf("--image applies to the docker provider: add --provider docker")
			}
			if o.preserveFDs < 0 {
				return fmt.Errorf("--preserve-fds: %d is negative", o.preserveFDs)
			}
			return runMain(o, args)
		},
	}
	f := c.Flags()
	f.SetInterspersed(false)
	f.StringVarP(&o.policy, "policy", "p", "", "policy file (YAML or JSON); default: the built-in policy")
	f.StringVar(&o.provider, "provider", "auto", "provider: auto, linux, docker or mxc")
	f.StringVar(&o.image, "image", "", "with --provider docker: the image to run (sets the policy's docker.image; default "+policy.DefaultDockerImage+")")
	f.StringVarP(&o.workdir, "workdir", "C", "", "working directory (default: the current directory)")
	f.StringVar(&o.audit, "audit", "", "append OCSF JSONL audit events to this file")
	f.BoolVarP(&o.tty, "tty", "t", false, "give the command a terminal owned by corral")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "print the layers in force and the loss report to stderr")
	f.IntVar(&o.preserveFDs, "preserve-fds", 0, "pass N extra fds (3..3+N-1) to the command")
	// Decided in main (traceStartupRequested), before cobra parses.
	f.Bool("trace-startup", false, "print where the run's time went, phase by phase, in each of corral's processes, to stderr when it ends (also "+traceStartupEnv+"=1)")
	f.BoolVar(&o.strictTree, "strict-tree", false, "exit 116 when the command left files in a read-write tree that would make a host tool run code (a nested repository, a shell rc file, IDE or agent configuration), and move each aside to NAME"+planted.QuarantineSuffix)
	return c
}

func runMain(o runOpts, args []string) error {
	startup.Add("supervisor", "command line parsed")
	if startup.Enabled() {
		defer startup.Write(os.Stderr)
	}
	// Nothing but fds 0-2 (and those asked for) may reach the sandbox.
	// The preserved ones are taken now, before corral opens anything that
	// could take a number the caller left free.
	preserved, err := takeFDs(o.preserveFDs)
	if err != nil {
		return err
	}
	warmProviders(o.provider)
	pol, err := loadPolicy(o.policy)
	if err != nil {
		return err
	}
	startup.Add("supervisor", "policy loaded")
	if o.image != "" { // part of the policy, so its hash names the image run
		pol.Docker = &policy.Docker{Image: o.image}
		if err := pol.Validate(); err != nil {
			return fmt.Errorf("--image: %w", err)
		}
	}
	res, err := resolvePolicy(pol, o.workdir)
	if err != nil {
		return err
	}
	startup.Add("supervisor", "policy resolved")
	prov, plan, err := selectProvider(o.provider, res)
	startup.Add("supervisor", "provider selected, policy mapped to a plan")
	if plan != nil && err == nil {
		for _, l := range plan.Loss {
			if l.Severity == provider.SeverityWarning || (o.verbose && l.Severity == provider.SeverityInfo) {
				fmt.Fprintf(os.Stderr, "corral: %s: %s: %s\n", l.Severity, l.Field, l.Message)
			}
		}
	}
	if err != nil {
		return err
	}
	if o.audit != "" {
		if err := session.CheckLogOutside(o.audit, res, "put it outside, e.g. --audit ~/corral-audit.jsonl"); err != nil {
			return fmt.Errorf("--audit: %w", err)
		}
	}
	log, err := openAudit(o.audit)
	if err != nil {
		return err
	}
	defer log.Close()

	spec := provider.ExecSpec{Args: args, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
	spec.ExtraFiles = preserved
	if o.tty {
		spec.TTY = true
		restore, resize := attachTerminal()
		spec.Resize = resize
		defer restore()
	}

	if !o.tty && term.IsTerminal(int(os.Stdin.Fd())) {
		// The command shares the caller's terminal: put its settings back
		// however the command left them.
		if st, err := term.GetState(int(os.Stdin.Fd())); err == nil {
			defer func() { _ = term.Restore(int(os.Stdin.Fd()), st) }()
		}
	}

	var mu sync.Mutex
	var sess *session.Session
	var killedBy string
	var killedSig os.Signal
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		n := 0
		for s := range sigs {
			n++
			mu.Lock()
			cur := sess
			if cur == nil || n > 1 {
				// Not started yet, or asked twice: stop everything.
				killedBy, killedSig = s.String(), s
			}
			mu.Unlock()
			if cur == nil || n > 1 {
				fmt.Fprintf(os.Stderr, "corral: %s: killing the sandbox\n", s)
				cancel()
				continue
			}
			_ = cur.Signal(s)
		}
	}()
	killed := func() string {
		mu.Lock()
		defer mu.Unlock()
		if killedBy != "" {
			return "corral received " + killedBy
		}
		return ""
	}
	opened, err := openSession(ctx, session.Config{Provider: prov, Plan: plan, Log: log, Version: version, Command: args}, &mu, &sess, killed)
	var st provider.ExitStatus
	if err == nil {
		if o.verbose {
			printLayers(os.Stderr, "corral: ", opened.Layers())
		}
		var prompt *ttyPrompt
		if o.tty && opened.Consent() != nil && term.IsTerminal(int(os.Stdin.Fd())) {
			if prompt, err = newTTYPrompt(os.Stdin, os.Stderr); err == nil {
				spec.Stdin = prompt.Stdin
			}
		}
		var stopConsent func()
		if err == nil {
			stopConsent, err = serveRunConsent(opened, prompt)
		}
		if err == nil {
			st, err = opened.Exec(ctx, session.Exec{ExecSpec: spec, UID: -1, Killed: killed})
			startup.Add("supervisor", "workload done")
			stopConsent()
		}
		if cerr := opened.Close(); err == nil && cerr != nil {
			err = cerr
		}
		startup.Add("supervisor", "session closed")
		if res.Network == policy.NetworkProxy {
			if o.verbose {
				opened.EgressSummary(os.Stderr)
			} else {
				opened.WarnAggregated(os.Stderr)
			}
		}
	}
	mu.Lock()
	by, sig := killedBy, killedSig
	mu.Unlock()
	if sig != nil && st.Code == 0 { // stopped before the workload ran
		st.Code = 128 + int(sig.(syscall.Signal))
	}
	found := 0
	if opened != nil {
		found = len(opened.CheckPlanted(os.Stderr, o.strictTree)) // strict: the run fails, and nothing it planted stays armed
		startup.Add("supervisor", "planted-file check")
	}
	if err != nil {
		if by != "" {
			return exitError{code: st.Code}
		}
		return err
	}
	if found > 0 && o.strictTree {
		return &provider.Error{Code: provider.CodePlanted, Msg: fmt.Sprintf("--strict-tree: the command left %d planted path(s) (listed above; it exited %d)", found, st.Code)}
	}
	if st.Reason != "" {
		fmt.Fprintf(os.Stderr, "corral: %s\n", st.Reason)
	}
	if st.TimedOut {
		fmt.Fprintf(os.Stderr, "corral: timeout: the policy's limit of %s expired; the sandbox was killed\n", res.Limits.Timeout)
	}
	if st.Code != 0 {
		return exitError{code: st.Code}
	}
	return nil
}

// openSession opens the run's session and publishes it under mu, so that
// a signal from then on is forwarded to the workload; a signal that came
// while it was being made (ctx cancelled) ends it before the workload
// starts, and the record says why (killed).
func openSession(ctx context.Context, cfg session.Config, mu *sync.Mutex, out **session.Session, killed func() string) (*session.Session, error) {
	s, err := session.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	mu.Lock()
	*out = s
	mu.Unlock()
	if err := ctx.Err(); err != nil {
		s.NotLaunched(cfg.Command, killed())
		_ = s.Close()
		return s, err
	}
	return s, nil
}

// openAudit opens corral run's audit log (nil without --audit): not
// rotated, one window for the whole run.
func openAudit(path string) (*audit.Log, error) {
	if path == "" {
		return nil, nil
	}
	return audit.OpenLog(path, audit.LogOptions{}) // "audit: open PATH: ..." names the flag's value
}

// printLayers prints one line per layer, each line starting with prefix.
func printLayers(w io.Writer, prefix string, ls []provider.LayerStatus) {
	for _, l := range ls {
		fmt.Fprintf(w, "%slayer %-10s %-11s %-8s %s\n", prefix, l.Layer, l.State, l.Required, l.Detail)
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"

	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/corral-sandbox/corral/audit"
	"github.com/corral-sandbox/corral/egress"
	"github.com/corral-sandbox/corral/internal/planted"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

func contextBackground() context.Context { return context.Background() }

func asErr[T any](err error, target *T) bool { return errors.As(err, target) }

type runOpts struct {
	policy, provider, workdir, audit, image string
	tty, verbose, strictTree                bool
	preserveFDs                             int
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
	f.BoolVar(&o.strictTree, "strict-tree", false, "exit 116 when the command left files in a read-write tree that would make a host tool run code (a nested repository, a shell rc file, IDE or agent configuration), and move each aside to NAME"+planted.QuarantineSuffix)
	return c
}

func runMain(o runOpts, args []string) error {
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
	prov, plan, err := selectProvider(o.provider, res)
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
	if err := auditOutside(o.audit, res); err != nil {
		return err
	}
	sink, err := openAudit(o.audit)
	if err != nil {
		return err
	}
	defer sink.Close()

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
	var sb provider.Sandbox
	var killedBy string
	var proxyErr error // set when the egress proxy could not start (fail closed)
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
			cur := sb
			mu.Unlock()
			if cur == nil || n > 1 {
				// Not started yet, or asked twice: stop everything.
				mu.Lock()
				killedBy, killedSig = s.String(), s
				mu.Unlock()
				fmt.Fprintf(os.Stderr, "corral: %s: killing the sandbox\n", s)
				cancel()
				continue
			}
			_ = cur.Signal(s)
		}
	}()
	info := audit.RunInfo{PolicyHash: res.Hash, Provider: prov.Name(), Version: version}
	workload := audit.Proc{CmdLine: args, UID: uidOf(plan)}
	if sink != nil {
		// Called once, with the host pid, before init may reap it.
		spec.Started = func(pid int) {
			mu.Lock()
			defer mu.Unlock()
			workload.PID = pid
			_ = sink.Emit(audit.Launch(info, workload))
		}
	}
	elog := &egressLog{sink: sink, info: func() audit.RunInfo { mu.Lock(); defer mu.Unlock(); return info }}
	var proxy *egress.Proxy
	var proxyCfg egress.Config
	if res.Network == policy.NetworkProxy {
		resolve, err := egressResolver()
		if err != nil {
			return err
		}
		proxyCfg = egress.Config{Policy: egressRules(res.Egress), Log: elog.record, Resolve: resolve}
		if _, err := egress.New(proxyCfg); err != nil { // the rules, checked before anything runs
			return &provider.Error{Code: provider.CodePolicyRejected, Msg: "network: " + err.Error()}
		}
		defer func() {
			if proxy != nil {
				proxy.Close()
			}
			if o.verbose {
				elog.summary(os.Stderr)
			} else {
				elog.mu.Lock()
				elog.warnDropped(os.Stderr)
				elog.mu.Unlock()
			}
		}()
	}
	since := planted.Now() // what changes after this is the workload's (planted.Scan)
	st, err := provider.Run(ctx, prov, plan, spec, func(s provider.Sandbox) {
		mu.Lock()
		sb = s
		info.SandboxID = s.ID()
		info.Layers = audit.LayersOf(s.Layers())
		mu.Unlock()
		if o.verbose {
			printLayers(os.Stderr, "corral: ", s.Layers())
		}
		if l := s.EgressListener(); l != nil && res.Network == policy.NetworkProxy {
			// The sandbox's only way out: served here, on the host side.
			// A listener others could reach (MXC's is on host loopback)
			// comes with a per-sandbox credential.
			cfg := proxyCfg
			if c, ok := s.(provider.ProxyAuthenticator); ok {
				cfg.Credential = c.ProxyCredential()
			}
			p, err := egress.New(cfg)
			if err != nil { // fail closed: no proxy, no workload
				mu.Lock()
				proxyErr = &provider.Error{Code: provider.CodeStartFailed, Msg: "egress proxy: " + err.Error()}
				mu.Unlock()
				cancel()
				return
			}
			proxy = p
			go func() { _ = p.Serve(l) }()
		}
	})
	mu.Lock()
	by, sig := killedBy, killedSig
	if proxyErr != nil {
		err = proxyErr
	}
	mu.Unlock()
	if sig != nil && st.Code == 0 { // stopped before the workload ran
		st.Code = 128 + int(sig.(syscall.Signal))
	}
	if sink != nil {
		ex := audit.Exit{Code: st.Code, Signal: st.Signal, TimedOut: st.TimedOut, Duration: st.Duration}
		if by != "" {
			ex.Killed, ex.Reason = true, "corral received "+by
		}
		if st.Reason != "" && ex.Reason == "" {
			ex.Reason = st.Reason
		}
		if err != nil && ex.Reason == "" {
			ex.Reason = err.Error() // e.g. the command was not found (and no Launch)
		}
		mu.Lock()
		_ = sink.Emit(audit.Terminate(info, workload, ex))
		mu.Unlock()
	}
	found := checkPlanted(res, since, sink, info, o.strictTree)
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

// checkPlanted scans the run's read-write trees for what the workload
// planted for later (internal/planted), warns on stderr and records each
// finding in the audit log; it returns how many there were.
func checkPlanted(res *policy.Resolved, since time.Time, sink *audit.Sink, info audit.RunInfo, strict bool) int {
	found := planted.Report(os.Stderr, res, since, strict) // strict: the run fails, and nothing it planted stays armed
	for _, f := range found {
		_ = sink.Emit(audit.Planted(info, f.Path, f.Kind, f.What, f.Keys, strict))
	}
	return len(found)
}

func uidOf(plan *provider.Plan) int {
	if u, ok := plan.Details.(provider.WorkloadIdentity); ok {
		return u.WorkloadUID()
	}
	return -1
}

// auditOutside refuses an audit log that the sandbox could write: one
// inside a read-write grant could be truncated or forged by the workload.
func auditOutside(path string, res *policy.Resolved) error {
	if path == "" {
		return nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	if dir, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		abs = filepath.Join(dir, filepath.Base(abs))
	}
	var best policy.PathGrant
	for _, g := range res.Grants {
		if within(abs, g.Path) && len(g.Path) > len(best.Path) {
			best = g
		}
	}
	if best.Access == policy.AccessReadWrite {
		return fmt.Errorf("--audit %s: the log is inside %s, which the sandbox can write (%s): the workload could rewrite it; put it outside, e.g. --audit ~/corral-audit.jsonl", path, best.Path, best.Field)
	}
	return nil
}

// within reports whether path is dir or lies under it. filepath.Rel makes
// it portable: separators, and case-insensitive names on Windows.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && !filepath.IsAbs(rel) && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

func openAudit(path string) (*audit.Sink, error) {
	if path == "" {
		return nil, nil
	}
	s, err := audit.Open(path)
	if err != nil {
		return nil, err // "audit: open PATH: ..." names the flag's value
	}
	return s, nil
}

// printLayers prints one line per layer, each line starting with prefix.
func printLayers(w io.Writer, prefix string, ls []provider.LayerStatus) {
	for _, l := range ls {
		fmt.Fprintf(w, "%slayer %-10s %-11s %-8s %s\n", prefix, l.Layer, l.State, l.Required, l.Detail)
	}
}

//go:build linux || windows

package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"golang.org/x/term"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/corral-sandbox/corral/consent"
	"github.com/corral-sandbox/corral/gateway"
	gw "github.com/corral-sandbox/corral/gateway/gen/corral/gateway/v1"
	"github.com/corral-sandbox/corral/internal/peerhttp"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/session"
	"github.com/corral-sandbox/corral/store"
)

func newGatewayCmd() *cobra.Command {
	c := &cobra.Command{Use: "gateway", Short: "The control plane for long-lived sandboxes"}
	var listen, db, tokenFile, tlsCert, tlsKey, defProvider string
	var providers []string
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Serve the sandbox API (Connect, gRPC, HTTP/JSON) until SIGINT or SIGTERM",
		Long: `Serve the sandbox API. State is kept in a SQLite database; on start the
gateway reconciles it with the running sandboxes (adopts live ones, marks
lost ones, finishes interrupted stops and deletes, removes orphans) and
prints what it did, listing any identity a provider will not remove on a
guess (an mxc provision that never returned an id) with the file to remove.
Sandboxes outlive the gateway (stopping it stops none), except mxc
process_container ones, which end with it (MXC has no attach).

--listen ` + peerhttp.LocalForm + ` (default: ` + gateway.DefaultAddr() + `): only this
user and ` + peerhttp.Superuser + ` may connect. --listen IP:PORT: clients send the bearer
token from --token-file (created readable by this user only, with a random
token, when missing); off loopback --tls-cert and --tls-key are required.

Sandboxes run on linux (a supervisor of its own per sandbox, which
outlives the gateway), docker (containers) and mxc (Windows MXC through
wxc-exec, on the backend CORRAL_MXC_BACKEND names: isolation_session
sessions, adopted after a restart, or process_container ones, one relay
each; docs/providers/mxc.md), each where this host has it (--provider
picks; here its default is ` + strings.Join(defaultGatewayProviders, ",") + `, and the gateway runs ` + strings.Join(gatewayProviderNames, ", ") + `).
A create names its provider, or gets the default (docker when it is run,
else the first); "auto" takes the first, in --provider's order, that can
enforce the policy with the image it names.

Exit status: 0 after SIGINT/SIGTERM, 121 when a provider asked for (or,
by default, every one) is unavailable, 2 for bad flags, a listener that
cannot be opened, or a database another gateway uses.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			provs, err := gatewayProviders(providers, cmd.Flags().Changed("provider"), defProvider)
			if err != nil {
				return err
			}
			return gatewayServe(listen, db, tokenFile, tlsCert, tlsKey, provs, defProvider)
		},
	}
	serve.Flags().StringSliceVar(&providers, "provider", defaultGatewayProviders, "providers to run sandboxes on ("+strings.Join(gatewayProviderNames, ", ")+"), in the order auto tries them")
	serve.Flags().StringVar(&defProvider, "default-provider", "", "provider of a create that names none (default: docker if run, else the first)")
	serve.Flags().StringVar(&listen, "listen", gateway.DefaultAddr(), peerhttp.LocalForm+" or loopback IP:PORT")
	serve.Flags().StringVar(&db, "db", gateway.DefaultDB(), "SQLite database of the gateway's state")
	serve.Flags().StringVar(&tokenFile, "token-file", "", "bearer token file for TCP (default: beside the database)")
	serve.Flags().StringVar(&tlsCert, "tls-cert", "", "PEM certificate: serve TCP over TLS (needed off loopback)")
	serve.Flags().StringVar(&tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	c.AddCommand(serve)
	return c
}

// gatewayProviders are the gateway's providers, from names: each must be
// available when named explicitly; by default the unavailable ones are
// left out (and none available is an error). def, when set, must be one.
func gatewayProviders(names []string, explicit bool, def string) ([]gateway.Provider, error) {
	var out []gateway.Provider
	var reasons []string
	for _, n := range names {
		p := gatewayProvider(n)
		if p == nil {
			return nil, fmt.Errorf("--provider %q: the gateway runs sandboxes on %s here", n, strings.Join(gatewayProviderNames, ", "))
		}
		hr := p.Probe(context.Background())
		if hr.Available && gatewayLifetime(p) == "" {
			hr.Available, hr.Reason = false, "its sandboxes do not outlive the run that makes them (no persistent or managed lifetime), which a gateway's must"
		}
		if !hr.Available {
			if explicit {
				return nil, &provider.Error{Code: provider.CodeUnavailable, Msg: fmt.Sprintf("%s: %s (fix: %s)", n, hr.Reason, strings.Join(hr.Fixes, "; "))}
			}
			reasons = append(reasons, n+": "+hr.Reason)
			continue
		}
		if hr.Facts["tier"] == "mock" { // MXC's executor stand-in
			fmt.Fprintf(os.Stderr, "corral gateway: %s's executor is a stand-in (tier mock): its sandboxes are %s\n", n, provider.MockNote)
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, &provider.Error{Code: provider.CodeUnavailable, Msg: "no provider available: " + strings.Join(reasons, "; ")}
	}
	if def != "" && !slices.ContainsFunc(out, func(p gateway.Provider) bool { return p.Name() == def }) {
		return nil, fmt.Errorf("--default-provider %q is not among the gateway's providers", def)
	}
	return out, nil
}

// gatewayLifetime is how long p's gateway sandboxes live: persistent
// (they outlive the gateway and are adopted by the next one), managed
// (they end with this gateway: mxc process_container), or "" when p has
// neither.
func gatewayLifetime(p gateway.Provider) provider.SessionLifetime {
	lts := p.Capabilities(context.Background()).SessionLifetimes
	for _, lt := range []provider.SessionLifetime{provider.LifetimePersistent, provider.LifetimeManaged} {
		if slices.Contains(lts, lt) {
			return lt
		}
	}
	return ""
}

func gatewayServe(listen, db, tokenFile, tlsCert, tlsKey string, provs []gateway.Provider, def string) error {
	var tlsCfg *tls.Config
	if (tlsCert == "") != (tlsKey == "") {
		return fmt.Errorf("--tls-cert and --tls-key go together")
	}
	if tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(tlsCert, tlsKey)
		if err != nil {
			return fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	}
	if def == "" && slices.ContainsFunc(provs, func(p gateway.Provider) bool { return p.Name() == "docker" }) {
		def = "docker" // what a create without --provider made before linux sandboxes were managed
	}
	// The address first: a refused one leaves nothing behind.
	l, err := gateway.Listen(listen, tlsCfg)
	if err != nil {
		return err
	}
	defer l.Close()
	token := ""
	if !peerhttp.IsLocal(listen) {
		if tokenFile == "" {
			tokenFile = filepath.Join(filepath.Dir(db), "token")
		}
		var err error
		if token, err = loadToken(tokenFile); err != nil {
			return err
		}
	}
	// The database's directory (the instance id, the lock, the logs, and
	// by default the token) is the gateway's alone. One gateway per
	// database: a second one would reconcile the first's work away.
	if err := makeGatewayDir(filepath.Dir(db)); err != nil {
		return fmt.Errorf("database directory %s: %w", filepath.Dir(db), err)
	}
	release, err := lockGatewayDB(db)
	if err != nil {
		return err
	}
	defer release()
	instance, err := instanceID(filepath.Join(filepath.Dir(db), "instance"))
	if err != nil {
		return err
	}
	st, err := store.Open(db)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := session.CheckResolver(); err != nil {
		return err
	}
	home, _ := os.UserHomeDir()
	// The sandboxes' output and audit logs: the gateway's alone, made (or
	// found) in directories no other user controls, before any policy is
	// checked against it (session.CheckLogOutside resolves its links).
	logDir := filepath.Join(filepath.Dir(db), "logs")
	if err := makeGatewayDir(logDir); err != nil {
		return fmt.Errorf("log directory %s: %w", logDir, err)
	}
	for _, p := range provs {
		if gatewayLifetime(p) == provider.LifetimeManaged {
			fmt.Fprintf(os.Stderr, "corral gateway: %s sandboxes end with this gateway (their channel is the gateway's, and MXC has no attach): after a restart they are lost, and what is left of them is removed\n", p.Name())
		}
	}
	srv := gateway.New(gateway.Config{Store: st, Providers: provs, Default: def, MaxStarts: map[string]int{"linux": max(runtime.NumCPU(), 2)}, Home: home, Instance: instance, LogDir: logDir, Version: version})
	defer srv.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := srv.Reconcile(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	fmt.Fprintf(os.Stderr, "corral gateway: reconciled: %d adopted, %d lost, %d finished, %d orphans removed\n", len(rep.Adopted), len(rep.Lost), len(rep.Finished), len(rep.Orphans))
	if len(rep.Unresolved) > 0 {
		fmt.Fprintf(os.Stderr, "corral gateway: %d orphan identities need an operator (never provisioned again, nothing removed on a guess):\n", len(rep.Unresolved))
		for _, u := range rep.Unresolved {
			fmt.Fprintf(os.Stderr, "corral gateway:   orphan %s (%s): %s\n", u.ID, u.Provider, u.Remedy)
		}
	}
	if len(rep.Failed) > 0 {
		fmt.Fprintf(os.Stderr, "corral gateway: %d sandboxes could not be reconciled (left as recorded, nothing removed on a guess; tried again at the next start, and by a delete):\n", len(rep.Failed))
		for _, f := range rep.Failed {
			fmt.Fprintf(os.Stderr, "corral gateway:   %s: %s\n", f.ID, f.Err)
		}
	}
	if len(rep.Foreign) > 0 {
		fmt.Fprintf(os.Stderr, "corral gateway: %d sandboxes are on providers this gateway does not run, left as they are: %s\n", len(rep.Foreign), strings.Join(rep.Foreign, ", "))
	}
	fmt.Fprintf(os.Stderr, "corral gateway: listening on %s (database %s)\n", listenAddr(listen, l), db)
	if !peerhttp.IsLocal(listen) {
		scheme := "http"
		if tlsCert != "" {
			scheme = "https"
		}
		tok := "$(cat " + tokenFile + ")"
		if runtime.GOOS == "windows" {
			tok = "<the token in " + tokenFile + ">"
		}
		fmt.Fprintf(os.Stderr, "corral gateway: consent page (loopback only): %s://%s/ui/?token=%s\n", scheme, l.Addr(), tok)
	}
	return gateway.Serve(ctx, l, gateway.Handler(srv, token))
}

// listenAddr is the address the gateway listens on, as --listen says it:
// a TCP port 0 given as the one the kernel chose.
func listenAddr(listen string, l net.Listener) string {
	if peerhttp.IsLocal(listen) {
		return listen
	}
	return l.Addr().String()
}

// instanceID reads the gateway's instance id from path, or creates it
// (gateway.InstancePrefix + 16 random hex digits).
func instanceID(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		if id := strings.TrimSpace(string(b)); strings.HasPrefix(id, gateway.InstancePrefix) {
			return id, nil
		}
		return "", fmt.Errorf("%s: not a gateway instance id", path)
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	id := gateway.InstancePrefix + hex.EncodeToString(b)
	return id, os.WriteFile(path, []byte(id+"\n"), 0o600)
}

// newToken is a fresh bearer token: 32 random bytes in hex.
func newToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// readToken reads the token in a token file from r: at most 4 KiB, space
// trimmed. name names the file in errors; ifEmpty ends the error of an
// empty one (the fix).
func readToken(r io.Reader, name, ifEmpty string) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, 4096))
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%s is empty%s", name, ifEmpty)
	}
	return tok, nil
}

// gatewayFlags are the flags every `corral sandbox` command shares.
type gatewayFlags struct {
	addr, tokenFile, caFile string
	output                  outputFormat
}

func (f *gatewayFlags) add(c *cobra.Command) {
	def := os.Getenv("CORRAL_GATEWAY")
	if def == "" {
		def = gateway.DefaultAddr()
	}
	c.PersistentFlags().StringVar(&f.addr, "gateway", def, "gateway address: "+peerhttp.LocalForm+", http://IP:PORT or https://HOST:PORT (env CORRAL_GATEWAY)")
	c.PersistentFlags().StringVar(&f.tokenFile, "token-file", "", "bearer token file (TCP gateways)")
	c.PersistentFlags().StringVar(&f.caFile, "ca-file", "", "PEM certificates to trust for an https:// gateway")
	outputFlag(c, &f.output, true)
}

func (f *gatewayFlags) client() (clientT, error) {
	tok := ""
	if f.tokenFile != "" {
		var err error
		if tok, err = readClientToken(f.tokenFile); err != nil {
			return nil, err
		}
	}
	return gateway.Client(f.addr, tok, f.caFile)
}

// grants are sandbox id's consent grants (the gateway's approvers' API).
func (f *gatewayFlags) grants(ctx context.Context, id string) ([]consent.Grant, error) {
	tok := ""
	if f.tokenFile != "" {
		var err error
		if tok, err = readClientToken(f.tokenFile); err != nil {
			return nil, err
		}
	}
	cl, err := consent.NewClient(f.addr, tok)
	if err != nil {
		return nil, err
	}
	return cl.Grants(ctx, id)
}

type clientT = *gateway.Clients

// apiErr maps an API error to Corral's exit codes (docs/exit-codes.md).
func apiErr(err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err
	}
	code := provider.CodeInternal
	switch ce.Code() {
	case connect.CodeUnavailable:
		code = provider.CodeUnavailable
	case connect.CodeNotFound:
		code = provider.CodeNotFound
	case connect.CodeInvalidArgument, connect.CodeFailedPrecondition:
		code = provider.CodePolicyRejected
	case connect.CodeAborted, connect.CodeAlreadyExists: // a change came first; a name taken
		code = provider.CodeStale
	case connect.CodeUnknown:
		code = provider.CodeProvisionFailed
	case connect.CodeUnauthenticated, connect.CodePermissionDenied:
		code = provider.CodeUnavailable
	}
	msg := ce.Message()
	for _, c := range []provider.Code{provider.CodePolicyRejected, provider.CodeProvisionFailed, provider.CodeStartFailed, provider.CodeUnavailable} {
		msg = strings.TrimPrefix(msg, string(c)+": ") // the code is said once, by corral
	}
	return &provider.Error{Code: code, Msg: "gateway: " + msg}
}

// apiErrIn is apiErr for a call that sent policy file path: the
// gateway places errors in "policy:LINE:COL", which become
// path:LINE:COL, as corral run gives them.
func apiErrIn(err error, path string) error {
	err = apiErr(err)
	var pe *provider.Error
	if path != "" && errors.As(err, &pe) {
		pe.Msg = regexp.MustCompile(`\bpolicy:(\d+:\d+:)`).ReplaceAllString(pe.Msg, strings.ReplaceAll(path, "$", "$$")+":${1}")
	}
	return err
}

// show prints m as json or yaml, or calls text.
func (f *gatewayFlags) show(m proto.Message, text func(io.Writer)) error {
	if f.output.data() {
		b, err := protojson.MarshalOptions{Indent: "  ", EmitUnpopulated: true}.Marshal(m)
		if err != nil {
			return err
		}
		return f.output.writeJSON(os.Stdout, b)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	text(tw)
	return tw.Flush()
}

func sandboxRow(w io.Writer, s *gw.Sandbox) {
	image := s.Image
	if image == "" {
		image = "-"
	}
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Id, s.Phase, s.Effective, s.Provider, image, s.CreatedAt, s.Reason)
}

func newSandboxCmd() *cobra.Command {
	var f gatewayFlags
	c := &cobra.Command{Use: "sandbox", Short: "Manage long-lived sandboxes through a corral gateway",
		Long: `Create, list, inspect, run commands in, stop and delete sandboxes that a
corral gateway manages (corral gateway serve). Every command takes a
sandbox's name (create --name) where it takes its ID.

Exit status: exec exits with the command's; otherwise 0, 117 stale (another change came first), 118 no
such sandbox, 121 gateway unreachable or refused, 122 policy rejected, 123
the sandbox could not be made.`}
	f.add(c)
	ctx := context.Background()
	var polFile, workdir, image, name, prov string
	var credSpecs []string
	create := &cobra.Command{Use: "create", Short: "Create a sandbox (default policy without --policy)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := f.client()
			if err != nil {
				return err
			}
			req := &gw.CreateSandboxRequest{Provider: prov, Image: image, Name: name}
			if req.Credentials, err = credentialFlags(credSpecs, os.Stdin); err != nil {
				return err
			}
			if polFile != "" {
				if _, err := policy.Load(polFile); err != nil { // positioned errors here, not from the gateway
					return err
				}
				b, err := os.ReadFile(polFile)
				if err != nil {
					return err
				}
				req.PolicyYaml = string(b)
			}
			if workdir == "" {
				workdir, _ = syscall.Getwd() // the kernel's, not $PWD, as corral run
			}
			if req.Workdir, err = filepath.Abs(workdir); err != nil {
				return err
			}
			resp, err := cl.CreateSandbox(ctx, connect.NewRequest(req))
			if err != nil {
				return apiErrIn(err, polFile)
			}
			return f.show(resp.Msg, func(w io.Writer) { fmt.Fprintln(w, resp.Msg.Sandbox.Id) })
		}}
	create.Flags().StringVarP(&polFile, "policy", "p", "", "policy file")
	create.Flags().StringVarP(&workdir, "workdir", "C", "", "working directory (default: the current one)")
	create.Flags().StringVar(&image, "image", "", "image (sets the policy's docker.image)")
	create.Flags().StringVar(&name, "name", "", "name the sandbox (unique, a DNS label); every command takes the name for the id")
	create.Flags().StringVar(&prov, "provider", "", "linux, docker, mxc, or auto (the first of the gateway's that enforces the policy; default: the gateway's default)")
	create.Flags().StringArrayVar(&credSpecs, "credential", nil, "NAME=env:VAR, NAME=file:PATH or NAME=- (one line from stdin): the value of the policy's stored credential NAME, read here and sent to the gateway, which stores it (repeatable)")

	list := &cobra.Command{Use: "list", Short: "List sandboxes", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := f.client()
			if err != nil {
				return err
			}
			resp, err := cl.ListSandboxes(ctx, connect.NewRequest(&gw.ListSandboxesRequest{}))
			if err != nil {
				return apiErr(err)
			}
			return f.show(resp.Msg, func(w io.Writer) {
				fmt.Fprintln(w, "ID\tPHASE\tEFFECTIVE\tPROVIDER\tIMAGE\tCREATED\tREASON")
				for _, s := range resp.Msg.Sandboxes {
					sandboxRow(w, s)
				}
			})
		}}
	get := &cobra.Command{Use: "get ID", Short: "Show a sandbox: phase, layers in force, loss report, events", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := f.client()
			if err != nil {
				return err
			}
			resp, err := cl.GetSandbox(ctx, connect.NewRequest(&gw.GetSandboxRequest{Id: args[0]}))
			if err != nil {
				return apiErr(err)
			}
			s := resp.Msg.Sandbox
			return f.show(resp.Msg, func(w io.Writer) {
				fmt.Fprintf(w, "id:\t%s\nname:\t%s\nphase:\t%s\t%s\neffective:\t%s\ndesired:\t%s\nimage:\t%s\nworkdir:\t%s\npolicy:\t%s\nversion:\t%d\n", s.Id, s.Name, s.Phase, s.Reason, s.Effective, s.Desired, s.Image, s.Workdir, s.PolicyHash, s.ResourceVersion)
				for _, l := range s.Layers {
					fmt.Fprintf(w, "layer %s\t%s\t%s\t%s\n", l.Layer, l.State, l.Requirement, l.Detail)
				}
				for _, l := range s.Losses {
					fmt.Fprintf(w, "%s\t%s: %s\n", l.Severity, l.Field, l.Message)
				}
				for _, e := range resp.Msg.Events {
					fmt.Fprintf(w, "event %d\t%s\t%s\t%s\n", e.Seq, e.Time, e.Kind, e.Message)
				}
				// Consent grants, desired against effective (read back
				// now); JSON: corral approvals grants --sandbox ID -o json.
				if gs, err := f.grants(ctx, s.Id); err != nil {
					fmt.Fprintf(w, "grants:\tcannot read them: %v\n", err)
				} else {
					for _, g := range gs {
						fmt.Fprintf(w, "grant %s\t%s %s %s\tdesired %t\teffective %t\t%s\t%s\n", g.ID, g.Kind, g.Target, g.Access, g.Desired, g.Effective, g.Path, g.Detail)
					}
				}
			})
		}}
	var timeout time.Duration
	var interactive, tty bool
	execc := &cobra.Command{Use: "exec ID -- COMMAND [ARG...]", Short: "Run a command in a sandbox; exits with its status", Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := f.client()
			if err != nil {
				return err
			}
			cmdArgs := args[1:]
			if cmdArgs[0] == "--" {
				cmdArgs = cmdArgs[1:]
			}
			if len(cmdArgs) == 0 {
				return fmt.Errorf("missing command: corral sandbox exec ID -- COMMAND [ARG...]")
			}
			if timeout < 0 {
				return fmt.Errorf("--timeout %s is negative", timeout)
			}
			// Whole seconds, rounded up: a limit is never shorter than asked.
			req := &gw.ExecSandboxRequest{Id: args[0], Args: cmdArgs, TimeoutSeconds: int64((timeout + time.Second - 1) / time.Second), Tty: tty}
			if interactive || tty {
				return execInteractive(ctx, cl, req)
			}
			// Without -i the command gets no stdin (as docker exec).
			stream, err := cl.ExecSandbox(ctx, connect.NewRequest(req))
			if err != nil {
				return apiErr(err)
			}
			return printExec(stream.Receive, stream.Msg, stream.Err)
		}}
	execc.Flags().DurationVar(&timeout, "timeout", 0, "kill the command after this long (0: the policy's timeout)")
	execc.Flags().BoolVarP(&interactive, "interactive", "i", false, "pass stdin to the command (streamed as it comes); without it the command's stdin is empty")
	execc.Flags().BoolVarP(&tty, "tty", "t", false, "give the command a terminal (implies -i)")
	execc.Flags().SetInterspersed(false)
	stop := &cobra.Command{Use: "stop ID", Short: "Stop a sandbox (its record stays until delete)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := f.client()
			if err != nil {
				return err
			}
			resp, err := cl.StopSandbox(ctx, connect.NewRequest(&gw.StopSandboxRequest{Id: args[0]}))
			if err != nil {
				return apiErr(err)
			}
			return f.show(resp.Msg, func(w io.Writer) { sandboxRow(w, resp.Msg.Sandbox) })
		}}
	start := &cobra.Command{Use: "start ID", Short: "Start a stopped sandbox again (same id and policy, a new container)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := f.client()
			if err != nil {
				return err
			}
			resp, err := cl.StartSandbox(ctx, connect.NewRequest(&gw.StartSandboxRequest{Id: args[0]}))
			if err != nil {
				return apiErr(err)
			}
			return f.show(resp.Msg, func(w io.Writer) { sandboxRow(w, resp.Msg.Sandbox) })
		}}
	del := &cobra.Command{Use: "delete ID", Short: "Delete a sandbox and its record", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := f.client()
			if err != nil {
				return err
			}
			resp, err := cl.DeleteSandbox(ctx, connect.NewRequest(&gw.DeleteSandboxRequest{Id: args[0]}))
			if err != nil {
				return apiErr(err)
			}
			return f.show(resp.Msg, func(w io.Writer) { fmt.Fprintf(w, "%s deleted\n", args[0]) })
		}}
	watch := &cobra.Command{Use: "watch ID", Short: "Follow a sandbox's status and events until it is deleted or Ctrl-C", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := f.client()
			if err != nil {
				return err
			}
			wctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
			defer stop()
			stream, err := cl.WatchSandbox(wctx, connect.NewRequest(&gw.WatchSandboxRequest{Id: args[0]}))
			if err != nil {
				return apiErr(err)
			}
			for stream.Receive() {
				m := stream.Msg()
				if err := f.show(m, func(w io.Writer) {
					if m.Sandbox != nil {
						fmt.Fprintf(w, "status\t%s\t%s\t%s\n", m.Sandbox.Phase, m.Sandbox.Effective, m.Sandbox.Reason)
					}
					for _, e := range m.Events {
						fmt.Fprintf(w, "event %d\t%s\t%s\t%s\n", e.Seq, e.Time, e.Kind, e.Message)
					}
				}); err != nil {
					return err
				}
			}
			if err := stream.Err(); err != nil && wctx.Err() == nil {
				return apiErr(err)
			}
			return nil
		}}
	logs := f.copyCmd("logs ID", "Print the output of every command run in a sandbox", "keep printing new output",
		func(ctx context.Context, cl clientT, id string, follow bool) (*dataStream, error) {
			st, err := cl.LogsSandbox(ctx, connect.NewRequest(&gw.LogsSandboxRequest{Id: id, Follow: follow}))
			return chunks(st, err, (*gw.LogsSandboxResponse).GetData)
		})
	auditc := f.copyCmd("audit ID", "Print a sandbox's audit log (OCSF 1.3.0 JSON Lines: execs, egress decisions, planted files)", "keep printing new events",
		func(ctx context.Context, cl clientT, id string, follow bool) (*dataStream, error) {
			st, err := cl.AuditSandbox(ctx, connect.NewRequest(&gw.AuditSandboxRequest{Id: id, Follow: follow}))
			return chunks(st, err, (*gw.AuditSandboxResponse).GetData)
		})
	c.AddCommand(create, list, get, execc, logs, auditc, watch, start, stop, del, credentialCmd(&f), forwardCmd(&f))
	return c
}

// credentialCmd is `corral sandbox credential set|revoke|list`.
func credentialCmd(f *gatewayFlags) *cobra.Command {
	ctx := context.Background()
	c := &cobra.Command{Use: "credential", Short: "Rotate, revoke and list a sandbox's credentials without recreating it",
		Long: `A sandbox sees only its credentials' placeholders; the gateway's proxy puts
the value in their place for the endpoints the policy binds. set gives a
stored credential (source: {stored: true}) a new value — the placeholder stays,
so nothing inside changes — optionally until --expires; revoke ends any
credential (its placeholder is refused wherever it is sent) until a set gives
it a value again. Both are stored first and hold across stops, starts and
gateway restarts. SPEC is env:VAR, file:PATH or - (one line from stdin,
without echo on a terminal), read here: never the value itself, which would
stay in the shell's history and show in ps.`}
	row := func(w io.Writer, cr *gw.Credential) {
		exp := cr.Expires
		if exp == "" {
			exp = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", cr.Name, cr.State, exp, cr.Source)
	}
	var expires string
	set := &cobra.Command{Use: "set ID NAME SPEC", Short: "Give a stored credential a new value (the sandbox keeps its placeholder)", Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := readCredential(args[1], args[2], os.Stdin, new(bool))
			if err != nil {
				return err
			}
			cv := &gw.CredentialValue{Name: args[1], Value: v}
			if cv.Expires, err = expiresAt(expires, time.Now()); err != nil {
				return err
			}
			cl, err := f.client()
			if err != nil {
				return err
			}
			resp, err := cl.Credentials.SetCredential(ctx, connect.NewRequest(&gw.SetCredentialRequest{Id: args[0], Credential: cv}))
			if err != nil {
				return apiErr(err)
			}
			return f.show(resp.Msg, func(w io.Writer) { row(w, resp.Msg.Credential) })
		}}
	set.Flags().StringVar(&expires, "expires", "", "end the credential after DURATION (1h, 30m) or at an RFC 3339 time")
	revoke := &cobra.Command{Use: "revoke ID NAME", Short: "Revoke a credential: its placeholder is refused from now on", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := f.client()
			if err != nil {
				return err
			}
			resp, err := cl.Credentials.RevokeCredential(ctx, connect.NewRequest(&gw.RevokeCredentialRequest{Id: args[0], Name: args[1]}))
			if err != nil {
				return apiErr(err)
			}
			return f.show(resp.Msg, func(w io.Writer) { row(w, resp.Msg.Credential) })
		}}
	list := &cobra.Command{Use: "list ID", Short: "List a sandbox's credentials: name, state, expiry, source (never a value)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := f.client()
			if err != nil {
				return err
			}
			resp, err := cl.Credentials.ListCredentials(ctx, connect.NewRequest(&gw.ListCredentialsRequest{Id: args[0]}))
			if err != nil {
				return apiErr(err)
			}
			return f.show(resp.Msg, func(w io.Writer) {
				fmt.Fprintln(w, "NAME\tSTATE\tEXPIRES\tSOURCE")
				for _, cr := range resp.Msg.Credentials {
					row(w, cr)
				}
			})
		}}
	c.AddCommand(set, revoke, list)
	return c
}

// credentialFlags reads the values of --credential NAME=SPEC flags (at
// most one from stdin).
func credentialFlags(specs []string, stdin *os.File) ([]*gw.CredentialValue, error) {
	var out []*gw.CredentialValue
	usedStdin := false
	for _, arg := range specs {
		name, spec, ok := strings.Cut(arg, "=")
		if !ok || name == "" {
			// Never quoted: it may be the value itself.
			return nil, fmt.Errorf("--credential: want NAME=env:VAR, NAME=file:PATH or NAME=- (one line from stdin)")
		}
		v, err := readCredential(name, spec, stdin, &usedStdin)
		if err != nil {
			return nil, err
		}
		out = append(out, &gw.CredentialValue{Name: name, Value: v})
	}
	return out, nil
}

// readCredential reads the value SPEC names, here, on the client:
// env:VAR from this process's environment, file:PATH, or - one line from
// stdin (without echo on a terminal; once: usedStdin). Anything else
// would be the value itself on the command line — in the shell's
// history, in ps for every user — and is refused without being quoted.
// The value is trimmed of surrounding white space, as the sources of
// corral run are.
func readCredential(name, spec string, stdin *os.File, usedStdin *bool) (string, error) {
	switch {
	case strings.HasPrefix(spec, "env:"):
		v, ok := os.LookupEnv(spec[len("env:"):])
		if !ok || strings.TrimSpace(v) == "" {
			return "", fmt.Errorf("credential %s: %s is not set in this environment (or is empty)", name, spec[len("env:"):])
		}
		return strings.TrimSpace(v), nil
	case strings.HasPrefix(spec, "file:"):
		f, err := os.Open(spec[len("file:"):])
		if err != nil {
			return "", fmt.Errorf("credential %s: %w", name, err)
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, session.MaxCredentialBytes+1))
		if err != nil {
			return "", fmt.Errorf("credential %s: %w", name, err)
		}
		if len(b) > session.MaxCredentialBytes {
			return "", fmt.Errorf("credential %s: %s is longer than %d bytes", name, spec[len("file:"):], session.MaxCredentialBytes)
		}
		return strings.TrimSpace(string(b)), nil
	case spec == "-":
		if *usedStdin {
			return "", fmt.Errorf("credential %s: only one credential can be read from stdin (-)", name)
		}
		*usedStdin = true
		if term.IsTerminal(int(stdin.Fd())) {
			fmt.Fprintf(os.Stderr, "value of credential %s: ", name)
			b, err := term.ReadPassword(int(stdin.Fd()))
			fmt.Fprintln(os.Stderr)
			if err != nil {
				return "", fmt.Errorf("credential %s: %w", name, err)
			}
			return strings.TrimSpace(string(b)), nil
		}
		line, err := bufio.NewReaderSize(io.LimitReader(stdin, session.MaxCredentialBytes+2), 4096).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return "", fmt.Errorf("credential %s: stdin: %w", name, err)
		}
		if err != nil && len(line) > session.MaxCredentialBytes {
			return "", fmt.Errorf("credential %s: the line on stdin is longer than %d bytes", name, session.MaxCredentialBytes)
		}
		return strings.TrimSpace(line), nil
	}
	return "", fmt.Errorf("credential %s: the value must not be on the command line (it would stay in the shell's history and show in ps): give env:VAR, file:PATH or - (one line from stdin)", name)
}

// expiresAt is --expires as RFC 3339: a duration from now, or a time.
func expiresAt(s string, now time.Time) (string, error) {
	if s == "" {
		return "", nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return "", fmt.Errorf("--expires %s: want a positive duration", s)
		}
		return now.Add(d).UTC().Format(time.RFC3339), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return "", fmt.Errorf("--expires %q: want a duration (1h, 30m) or an RFC 3339 time (2026-01-02T15:04:05Z)", s)
	}
	return t.UTC().Format(time.RFC3339), nil
}

// policyGatewayCmds are `corral policy get|set|history`: a gateway
// sandbox's policy and its revisions.
func policyGatewayCmds() []*cobra.Command {
	ctx := context.Background()
	var f gatewayFlags
	show := func(r *gw.PolicyRevision) func(io.Writer) {
		return func(w io.Writer) {
			fmt.Fprintf(w, "# revision %d (%s, %s) %s\n%s", r.Revision, r.Applied, r.CreatedAt, r.PolicyHash, r.PolicyYaml)
		}
	}
	get := &cobra.Command{Use: "get ID", Short: "Print a gateway sandbox's policy in force", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := f.client()
			if err != nil {
				return err
			}
			resp, err := cl.Policies.GetPolicy(ctx, connect.NewRequest(&gw.GetPolicyRequest{Id: args[0]}))
			if err != nil {
				return apiErr(err)
			}
			return f.show(resp.Msg, show(resp.Msg.Policy))
		}}
	var recreate bool
	var expect int64
	var credSpecs []string
	set := &cobra.Command{Use: "set ID FILE", Short: "Give a gateway sandbox a new policy (egress rules live; anything else with --recreate)", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := policy.Load(args[1]); err != nil {
				return err
			}
			creds, err := credentialFlags(credSpecs, os.Stdin)
			if err != nil {
				return err
			}
			b, err := os.ReadFile(args[1])
			if err != nil {
				return err
			}
			cl, err := f.client()
			if err != nil {
				return err
			}
			resp, err := cl.Policies.SetPolicy(ctx, connect.NewRequest(&gw.SetPolicyRequest{Id: args[0], PolicyYaml: string(b), Recreate: recreate, ExpectedRevision: expect, Credentials: creds}))
			if err != nil {
				return apiErrIn(err, args[1])
			}
			return f.show(resp.Msg, func(w io.Writer) {
				how := map[string]string{"live": "applied live", "recreated": "applied by recreating the sandbox", "created": "(unchanged: the policy in force)"}[resp.Msg.Policy.Applied]
				fmt.Fprintf(w, "%s: policy revision %d %s\n", args[0], resp.Msg.Policy.Revision, how)
			})
		}}
	set.Flags().BoolVar(&recreate, "recreate", false, "replace the sandbox when the change cannot apply live")
	set.Flags().Int64Var(&expect, "expect-revision", 0, "refuse unless this revision is in force")
	set.Flags().StringArrayVar(&credSpecs, "credential", nil, "NAME=env:VAR, NAME=file:PATH or NAME=-: the value of a stored credential the new policy adds (with --recreate; repeatable)")
	history := &cobra.Command{Use: "history ID", Short: "List a gateway sandbox's policy revisions", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := f.client()
			if err != nil {
				return err
			}
			resp, err := cl.Policies.PolicyHistory(ctx, connect.NewRequest(&gw.PolicyHistoryRequest{Id: args[0]}))
			if err != nil {
				return apiErr(err)
			}
			return f.show(resp.Msg, func(w io.Writer) {
				fmt.Fprintln(w, "REVISION\tAPPLIED\tCREATED\tHASH")
				for _, r := range resp.Msg.Revisions {
					fmt.Fprintf(w, "%d\t%s\t%s\t%s\n", r.Revision, r.Applied, r.CreatedAt, r.PolicyHash)
				}
			})
		}}
	for _, c := range []*cobra.Command{get, set, history} {
		f.add(c)
		c.Long = c.Short + ` (corral sandbox's gateway, --gateway).

Exit status: 0; 118 no such sandbox or revision; 121 the gateway cannot be
reached or refused the token; 122 (set) the policy is invalid or cannot be
enforced; 117 (set) another change came first; 2 for a bad argument.`
	}
	return []*cobra.Command{get, set, history}
}

// printExec prints an exec's output stream and returns its exit status as
// corral's (exitError for a non-zero code).
func printExec(receive func() bool, msg func() *gw.ExecSandboxResponse, errFn func() error) error {
	var exit *gw.Exit
	for receive() {
		switch o := msg().Output.(type) {
		case *gw.ExecSandboxResponse_Stdout:
			os.Stdout.Write(o.Stdout)
		case *gw.ExecSandboxResponse_Stderr:
			os.Stderr.Write(o.Stderr)
		case *gw.ExecSandboxResponse_Exit:
			exit = o.Exit
		}
	}
	if err := errFn(); err != nil {
		if exit == nil && connect.CodeOf(err) != connect.CodeFailedPrecondition && connect.CodeOf(err) != connect.CodeNotFound {
			return &provider.Error{Code: provider.CodeUnavailable, Msg: "gateway: the exec's stream broke before its exit status (did the gateway go away?): " + err.Error()}
		}
		return apiErr(err)
	}
	if exit == nil {
		return &provider.Error{Code: provider.CodeUnavailable, Msg: "gateway: the stream ended without an exit status"}
	}
	if exit.Reason != "" {
		fmt.Fprintf(os.Stderr, "corral: %s\n", exit.Reason)
	}
	if exit.Code != 0 {
		return exitError{code: int(exit.Code)}
	}
	return nil
}

// execInteractive runs req over ExecSandboxStream: stdin streamed as it
// comes and, with a terminal, the caller's terminal raw and its size
// followed.
func execInteractive(ctx context.Context, cl *gateway.Clients, req *gw.ExecSandboxRequest) error {
	stream := cl.ExecSandboxStream(ctx)
	var resize <-chan [2]uint16
	if req.Tty {
		restore, rs := attachTerminal()
		defer restore()
		resize = rs
		select {
		case sz, ok := <-rs:
			if ok {
				req.Rows, req.Cols = uint32(sz[0]), uint32(sz[1])
			}
		default:
		}
	}
	var sendMu sync.Mutex // a stream's Send is not safe for concurrent use
	send := func(r *gw.ExecStreamRequest) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(r)
	}
	if err := send(&gw.ExecStreamRequest{Input: &gw.ExecStreamRequest_Start{Start: req}}); err != nil {
		return apiErr(err)
	}
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := os.Stdin.Read(buf)
			if n > 0 && send(&gw.ExecStreamRequest{Input: &gw.ExecStreamRequest_Stdin{Stdin: append([]byte(nil), buf[:n]...)}}) != nil {
				return
			}
			if err != nil {
				_ = send(&gw.ExecStreamRequest{Input: &gw.ExecStreamRequest_StdinEof{StdinEof: true}})
				return
			}
		}
	}()
	if resize != nil {
		go func() {
			for sz := range resize {
				_ = send(&gw.ExecStreamRequest{Input: &gw.ExecStreamRequest_Resize{Resize: &gw.TerminalSize{Rows: uint32(sz[0]), Cols: uint32(sz[1])}}})
			}
		}()
	}
	var msg *gw.ExecSandboxResponse
	var rerr error
	return printExec(func() bool {
		msg, rerr = stream.Receive()
		return rerr == nil
	}, func() *gw.ExecSandboxResponse { return msg }, func() error {
		if errors.Is(rerr, io.EOF) {
			return nil
		}
		return rerr
	})
}

// dataStream is a server stream of byte chunks (LogsSandbox, AuditSandbox).
type dataStream struct {
	next func() ([]byte, bool)
	err  func() error
}

// chunks is the dataStream of st, each message's bytes by data.
func chunks[T any](st *connect.ServerStreamForClient[T], err error, data func(*T) []byte) (*dataStream, error) {
	if err != nil {
		return nil, err
	}
	return &dataStream{next: func() ([]byte, bool) {
		if !st.Receive() {
			return nil, false
		}
		return data(st.Msg()), true
	}, err: st.Err}, nil
}

// copyCmd is a command that copies a sandbox's stream (open) to stdout,
// with -f to follow it, until it ends or SIGINT/SIGTERM.
func (f *gatewayFlags) copyCmd(use, short, followHelp string, open func(ctx context.Context, cl clientT, id string, follow bool) (*dataStream, error)) *cobra.Command {
	var follow bool
	c := &cobra.Command{Use: use, Short: short, Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := f.client()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			stream, err := open(ctx, cl, args[0], follow)
			if err != nil {
				return apiErr(err)
			}
			for b, ok := stream.next(); ok; b, ok = stream.next() {
				os.Stdout.Write(b)
			}
			if err := stream.err(); err != nil && ctx.Err() == nil {
				return apiErr(err)
			}
			return nil
		}}
	c.Flags().BoolVarP(&follow, "follow", "f", false, followHelp)
	return c
}

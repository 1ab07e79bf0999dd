//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/corral-sandbox/corral/consent"
	"github.com/corral-sandbox/corral/gateway"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/service"
)

// approvalsFlags say whose consent requests `corral approvals` decides:
// one `corral run` in progress, a service's supervisor, or a gateway.
type approvalsFlags struct {
	run         int
	svc, socket string
	gw          gatewayFlags
	output      outputFormat
	sandbox     string
}

func newApprovalsCmd() *cobra.Command {
	var f approvalsFlags
	c := &cobra.Command{
		Use:   "approvals",
		Short: "Decide what sandboxed workloads ask for while they run (folders, hosts)",
		Long: `A workload whose policy has a consent section may ask for a folder or a host
while it runs (POST $CORRAL_CONSENT_URL/v1/requests); a person decides here.
Requests outside the policy's consent ceiling are refused without asking.

Whose requests: --run PID (a corral run in progress; with none of the flags,
the only one running), --service NAME (a service's supervisor), or --gateway
ADDR (a gateway's sandboxes; --sandbox ID narrows). A request is pending only
while an approver is connected (this command's watch, corral run -t's prompt,
the gateway's web page); otherwise it is denied at once ("no approver").

Exit status: 0; 117 (stale) when a decision was refused (already decided by
someone else, the request changed since it was shown, the grant could not be
put in force); 118 for an unknown id; 2 for a bad argument.`,
	}
	pf := c.PersistentFlags()
	pf.IntVar(&f.run, "run", 0, "the pid of a corral run in progress")
	pf.StringVar(&f.svc, "service", "", "a corral service session's name")
	pf.StringVar(&f.socket, "socket", "", "an approvals socket path")
	pf.StringVar(&f.sandbox, "sandbox", "", "only this sandbox's requests and grants (gateway)")
	pf.StringVar(&f.gw.addr, "gateway", "", "gateway address: unix:PATH or http://IP:PORT (env CORRAL_GATEWAY)")
	pf.StringVar(&f.gw.tokenFile, "token-file", "", "bearer token file (TCP gateways)")
	outputFlag(c, &f.output, true)

	var all bool
	list := &cobra.Command{Use: "list", Short: "List pending requests (--all: decided ones too)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := f.client()
			if err != nil {
				return err
			}
			state := consent.StatePending
			if all {
				state = ""
			}
			rs, err := cl.List(cmd.Context(), f.sandbox, state)
			if err != nil {
				return err
			}
			return f.print(cmd.OutOrStdout(), rs, func(w io.Writer) {
				tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tSANDBOX\tSTATE\tKIND\tTARGET\tACCESS\tREQUESTER\tASKED\tEXPIRES")
				for _, r := range rs {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", r.ID, r.Sandbox, r.State, r.Kind, shown(r.Target), r.Access, requester(r.Requester), r.Asked, r.Expires.Local().Format(time.TimeOnly))
				}
				tw.Flush()
			})
		}}
	list.Flags().BoolVar(&all, "all", false, "decided requests too")

	show := &cobra.Command{Use: "show ID", Short: "Show one request whole (reason, requester, ceiling entry, digest)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := f.client()
			if err != nil {
				return err
			}
			r, err := cl.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return f.print(cmd.OutOrStdout(), r, func(w io.Writer) { showRequest(w, r) })
		}}

	var session, always, ro bool
	var ttl time.Duration
	var digest string
	approve := &cobra.Command{Use: "approve ID", Short: "Approve a request: once (default), --session, --for DURATION or --always", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			scope, n := consent.ScopeOnce, 0
			if session {
				scope, n = consent.ScopeSession, n+1
			}
			if always {
				scope, n = consent.ScopeAlways, n+1
			}
			if ttl != 0 {
				if ttl < 0 {
					return usageErr("--for %s: want a positive duration, e.g. 2h", ttl)
				}
				scope, n = consent.ScopeTTL, n+1
			}
			if n > 1 {
				return usageErr("--session, --for and --always: give one scope")
			}
			return f.decide(cmd, args[0], digest, consent.Decision{Approve: true, Scope: scope, TTL: policy.Duration(ttl), ReadOnly: ro})
		}}
	approve.Flags().BoolVar(&session, "session", false, "for the rest of the session: identical requests are approved without asking")
	approve.Flags().DurationVar(&ttl, "for", 0, "for this long, then revoked (e.g. 2h)")
	approve.Flags().BoolVar(&always, "always", false, "also in later sessions: written to the policy's standing grants file (consent.persist; the diff is printed)")
	approve.Flags().BoolVar(&ro, "ro", false, "grant a read-write request read-only")
	approve.Flags().StringVar(&digest, "digest", "", "the digest you were shown (default: the request's now)")

	var reason string
	var forSession bool
	deny := &cobra.Command{Use: "deny ID", Short: "Deny a request (--reason is returned to the workload)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.decide(cmd, args[0], digest, consent.Decision{Reason: reason, ForSession: forSession})
		}}
	deny.Flags().StringVar(&reason, "reason", "", "why, for the workload")
	deny.Flags().BoolVar(&forSession, "for-session", false, "deny identical requests for the rest of the session without asking")
	deny.Flags().StringVar(&digest, "digest", "", "the digest you were shown (default: the request's now)")

	grants := &cobra.Command{Use: "grants", Short: "List grants, desired against effective (read back from the kernel and the proxy)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := f.client()
			if err != nil {
				return err
			}
			gs, err := cl.Grants(cmd.Context(), f.sandbox)
			if err != nil {
				return err
			}
			return f.print(cmd.OutOrStdout(), gs, func(w io.Writer) { printGrants(w, gs) })
		}}

	var kill bool
	revoke := &cobra.Command{Use: "revoke GRANT", Short: "Revoke a grant; processes still holding a folder open are listed (--kill-holders kills them)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := f.client()
			if err != nil {
				return err
			}
			g, err := cl.Revoke(cmd.Context(), args[0], kill)
			if err != nil {
				return decisionErr(err)
			}
			return f.print(cmd.OutOrStdout(), g, func(w io.Writer) { printGrants(w, []consent.Grant{g}) })
		}}
	revoke.Flags().BoolVar(&kill, "kill-holders", false, "SIGKILL the processes still holding a revoked folder")

	watch := &cobra.Command{Use: "watch", Short: "Stay connected as an approver and print every request and decision as it happens", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := f.client()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			w := cmd.OutOrStdout()
			err = cl.Watch(ctx, func(e consent.Event) {
				if f.output.data() {
					_ = f.output.write(w, e)
					return
				}
				printEvent(w, e)
			})
			if ctx.Err() != nil {
				return nil
			}
			return err
		}}
	c.AddCommand(list, show, approve, deny, grants, revoke, watch)
	return c
}

// usageErr is a bad argument: exit status 2 (docs/exit-codes.md).
func usageErr(format string, a ...any) error { return fmt.Errorf(format, a...) }

// decisionErr is a refused decision or revocation: already decided, the
// request changed since it was shown, not put in force (exit 117, stale:
// look again and retry).
func decisionErr(err error) error {
	var pe *provider.Error
	if err == nil || errors.As(err, &pe) {
		return err
	}
	return &provider.Error{Code: provider.CodeStale, Msg: err.Error()}
}

// decide answers request id with d, bound to digest (or to the request's
// digest now, which the person was shown by list/show).
func (f *approvalsFlags) decide(cmd *cobra.Command, id, digest string, d consent.Decision) error {
	cl, err := f.client()
	if err != nil {
		return err
	}
	if digest == "" {
		r, err := cl.Get(cmd.Context(), id)
		if err != nil {
			return err
		}
		digest = r.Digest
	}
	d.Digest = digest
	var r consent.Request
	if d.Approve {
		r, err = cl.Approve(cmd.Context(), id, d)
	} else {
		r, err = cl.Deny(cmd.Context(), id, d)
	}
	if err != nil {
		return decisionErr(err)
	}
	if err := f.print(cmd.OutOrStdout(), r, func(w io.Writer) {
		fmt.Fprintf(w, "%s %s%s\n", r.ID, r.State, effectiveNote(r))
		if r.Diff != "" {
			fmt.Fprint(w, r.Diff)
		}
	}); err != nil {
		return err
	}
	if d.Approve && r.State != consent.StateApproved {
		return decisionErr(fmt.Errorf("%s: %s: %s", r.ID, r.State, shown(r.Detail)))
	}
	return nil
}

// client connects to the approvals API the flags name.
func (f *approvalsFlags) client() (*consent.Client, error) {
	n := 0
	for _, set := range []bool{f.run != 0, f.svc != "", f.socket != "", f.gw.addr != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		return nil, usageErr("--run, --service, --socket and --gateway: give one")
	}
	switch {
	case f.run != 0:
		return consent.NewClient("unix:"+runSocket(f.run), "")
	case f.socket != "":
		return consent.NewClient("unix:"+f.socket, "")
	case f.svc != "":
		base, err := service.Base()
		if err != nil {
			return nil, err
		}
		return consent.NewClient("unix:"+service.Paths{Dir: filepath.Join(base, f.svc)}.Approvals(), "")
	case f.gw.addr != "":
		tok := ""
		if f.gw.tokenFile != "" {
			var err error
			if tok, err = readClientToken(f.gw.tokenFile); err != nil {
				return nil, err
			}
		}
		return consent.NewClient(f.gw.addr, tok)
	}
	if env := os.Getenv("CORRAL_GATEWAY"); env != "" {
		return consent.NewClient(env, "")
	}
	// The only corral run in progress, else the gateway.
	runs := liveRuns()
	switch len(runs) {
	case 1:
		return consent.NewClient("unix:"+runSocket(runs[0]), "")
	case 0:
		return consent.NewClient("unix:"+gateway.DefaultSocket(), "")
	}
	return nil, usageErr("%d corral runs ask for approvals (pids %v): say which with --run PID", len(runs), runs)
}

// liveRuns are the pids of the corral runs in progress serving approvals:
// their sockets in runSocketDir that a server answers. A socket nobody
// listens on (ECONNREFUSED) is what a run killed before its cleanup left
// (its pid may be another process's by now): it is removed, unless it is
// a few seconds old (a run between its bind and its listen).
func liveRuns() []int {
	ents, _ := os.ReadDir(runSocketDir())
	var pids []int
	for _, e := range ents {
		s, ok := strings.CutSuffix(e.Name(), ".sock")
		pid, err := strconv.Atoi(s)
		if !ok || err != nil || e.Type()&os.ModeSocket == 0 {
			continue
		}
		path := runSocket(pid)
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			pids = append(pids, pid)
		} else if fi, ierr := e.Info(); errors.Is(err, syscall.ECONNREFUSED) && ierr == nil && time.Since(fi.ModTime()) > 5*time.Second {
			_ = os.Remove(path) // not one made a moment ago, between its bind and its listen
		}
	}
	return pids
}

func (f *approvalsFlags) print(w io.Writer, v any, text func(io.Writer)) error {
	if f.output.data() {
		return f.output.write(w, v)
	}
	text(w)
	return nil
}

func requester(r consent.Requester) string {
	if r.PID == 0 {
		return "(" + r.Via + ")"
	}
	return fmt.Sprintf("%d %s", r.PID, shown(filepath.Base(r.Exe)))
}

func showRequest(w io.Writer, r consent.Request) {
	fmt.Fprintf(w, "request   %s (sandbox %s)\n", r.ID, r.Sandbox)
	fmt.Fprintf(w, "state     %s%s\n", r.State, effectiveNote(r))
	fmt.Fprintf(w, "asks for  %s %s %s\n", r.Kind, shown(r.Target), r.Access)
	if r.Reason != "" {
		fmt.Fprintf(w, "reason    %s\n", strconv.Quote(r.Reason))
	}
	fmt.Fprintf(w, "requester pid %d %s (via %s)\n", r.Requester.PID, shown(r.Requester.Exe), r.Requester.Via)
	fmt.Fprintf(w, "ceiling   %s\n", r.Ceiling)
	fmt.Fprintf(w, "asked     %d time(s), first at %s; expires %s\n", r.Asked, r.Created.Local().Format(time.DateTime), r.Expires.Local().Format(time.DateTime))
	fmt.Fprintf(w, "digest    %s\n", r.Digest)
	if r.Detail != "" {
		fmt.Fprintf(w, "detail    %s\n", shown(r.Detail))
	}
}

func printGrants(w io.Writer, gs []consent.Grant) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GRANT\tSANDBOX\tKIND\tTARGET\tACCESS\tSCOPE\tDESIRED\tEFFECTIVE\tWHERE\tDETAIL")
	for _, g := range gs {
		where := g.Path
		if g.Kind == consent.KindHost && g.Revision > 0 {
			where = fmt.Sprintf("rules rev %d", g.Revision)
		}
		detail := shown(g.Detail)
		if g.Folder != nil {
			for _, h := range g.Folder.Holders {
				fd := "fd " + strconv.Itoa(h.FD)
				if h.FD == -1 {
					fd = "cwd"
				} else if h.FD == -2 {
					fd = "root"
				}
				detail += fmt.Sprintf(" held: pid %d %s (%s)", h.PID, fd, shown(h.Path))
				if h.Killed {
					detail += " killed"
				}
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%t\t%t\t%s\t%s\n", g.ID, g.Sandbox, g.Kind, shown(g.Target), g.Access, g.Scope, g.Desired, g.Effective, where, strings.TrimSpace(detail))
	}
	tw.Flush()
}

func printEvent(w io.Writer, e consent.Event) {
	t := e.Time.Local().Format(time.TimeOnly)
	switch {
	case e.Request != nil:
		r := e.Request
		fmt.Fprintf(w, "%s %-12s %s %s %s %s %s", t, e.Activity, r.ID, r.Kind, shown(r.Target), r.Access, requester(r.Requester))
		if r.Reason != "" {
			fmt.Fprintf(w, " reason=%s", strconv.Quote(r.Reason))
		}
		if r.Detail != "" {
			fmt.Fprintf(w, " (%s)", shown(r.Detail))
		}
		fmt.Fprintln(w)
		if e.Activity == "requested" && r.State == consent.StatePending {
			fmt.Fprintf(w, "    corral approvals approve %s [--session|--for 2h|--always]   |   corral approvals deny %s\n", r.ID, r.ID)
		}
	case e.Grant != nil:
		g := e.Grant
		fmt.Fprintf(w, "%s %-12s %s %s %s effective=%t %s\n", t, e.Activity, g.ID, g.Kind, shown(g.Target), g.Effective, shown(g.Detail))
	default:
		fmt.Fprintf(w, "%s %s\n", t, e.Activity)
	}
}

// shown is s as a terminal may print it: as it is when every rune is
// printable, else Go-quoted (escapes visible). Targets, executables,
// details and holders' paths come from the workload (a directory it
// named, a binary it copied): raw, an escape sequence in them would
// rewrite the approver's terminal or forge lines.
func shown(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

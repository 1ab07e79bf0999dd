//go:build linux

package service

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/provider/linux"
	"github.com/corral-sandbox/corral/session"
)

// Environ is the environment a session's policy takes process.env.pass
// from: fixed, so that a start by hand, by restart and by autostart at
// boot run the same workload. Anything else comes from process.env.set.
var Environ = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}

// Plan maps a session's policy to a linux plan: the policy resolved with
// the agent's home as both "~" and the working directory, that home bound
// read-write (the session's state, kept across restarts), the agent user
// as the workload's identity, no run timeout (a service runs until
// stopped), and the ports of st served on the session's loopback. The
// loss report includes the service's own losses.
func Plan(ctx context.Context, rec *Record, st *StartSpec) (*provider.Plan, *policy.Policy, error) {
	pol, err := policy.Load(Paths{rec.Dir}.Policy())
	if err != nil {
		return nil, nil, err
	}
	workdir := rec.Workdir
	if workdir == "" {
		workdir = rec.Home
		no := false
		pol.Filesystem.IncludeWorkdir = &no // the home is granted below, as the session's state
	}
	if rec.Mode == ModeSystem {
		pol.Process.RunAsUser = rec.User
	}
	environ := Environ
	if rec.Owner != nil {
		environ = os.Environ() // a one-shot run passes its caller's, as corral run does
	}
	res, err := pol.Resolve(policy.Context{Home: rec.Home, Workdir: workdir, Environ: environ, WritableHome: true, Placeholders: rec.Placeholders})
	if err != nil {
		return nil, pol, err
	}
	var extra provider.LossReport
	// The sessions' base directory is the supervisors': records,
	// policies, status, locks, logs and the other sessions' homes stay
	// out of the workload's view entirely (a read-only view would still
	// let it hold a lock or read another agent's state).
	base := filepath.Dir(rec.Dir)
	for _, g := range res.Grants {
		inHome := policy.Within(g.Path, rec.Home) && g.Path != rec.Home
		if g.Access != policy.AccessDeny && g.Field != "service home" && !inHome && (policy.Within(base, g.Path) || policy.Within(g.Path, base)) {
			extra = append(extra, provider.Loss{Severity: provider.SeverityError, Area: "filesystem", Field: g.Field,
				Message: fmt.Sprintf("%s (%s) overlaps %s, where the sessions' records, status, logs and homes are, which must stay out of the workload's view: grant something narrower", g.Path, g.Access, base)})
		}
	}
	if res.Limits.Timeout > 0 && rec.Owner == nil {
		extra = append(extra, provider.Loss{Severity: provider.SeverityInfo, Area: "process", Field: "process.limits.timeout",
			Message: "a service runs until stopped: the timeout of " + res.Limits.Timeout.String() + " is not applied"})
		res.Limits.Timeout = 0
	}
	if rec.Mode == ModeUser {
		extra = append(extra, provider.Loss{Severity: provider.SeverityWarning, Area: "identity", Field: "service",
			Message: "unprivileged session: the workload runs as your own uid in a user namespace, a weaker same-uid boundary than a dedicated agent user (provision as root for one)"})
	}
	plan, _ := session.Plan(ctx, linux.New(), res) // its error losses are in plan.Loss, with the session's below: the caller refuses them
	plan.Loss = append(plan.Loss, extra...)
	spec := plan.Details.(*linux.InitSpec)
	if spec.UID != rec.UID {
		plan.Loss = append(plan.Loss, provider.Loss{Severity: provider.SeverityError, Area: "identity", Field: "process.run_as_user",
			Message: fmt.Sprintf("the workload would run as uid %d, not the agent user's %d", spec.UID, rec.UID)})
	}
	if st != nil {
		spec.Serve(st.ports())
	}
	// The agent's writable trees are its own on disk (no idmap): openat2
	// is let through, as gateways such as OpenClaw need RESOLVE_BENEATH.
	if !spec.AllowOpenat2() {
		plan.Loss = append(plan.Loss, provider.Loss{Severity: provider.SeverityInfo, Area: "process", Field: "layers.seccomp",
			Message: "openat2(2) stays refused (ENOSYS): an idmapped working directory is granted, where a created file is root's on disk"})
	}
	return plan, pol, nil
}

// ports are the ports the workload serves: published ones and the
// readiness port.
func (s *StartSpec) ports() []int {
	var out []int
	seen := map[int]bool{}
	add := func(p int) {
		if p > 0 && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, p := range s.Publish {
		add(p.Port)
	}
	add(s.ReadyPort)
	return out
}

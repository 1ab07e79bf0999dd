package session

import (
	"context"
	"fmt"
	"strings"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// Select picks the provider named from ps (strongest first), or with
// "auto" the first available one, and maps r onto it (Plan). It never
// falls back to a weaker provider once one rejected the policy
// (CodePolicyRejected is final), and never runs unconfined: no available
// provider is CodeUnavailable with each one's reason and fix.
func Select(ctx context.Context, ps []provider.Provider, name string, r *policy.Resolved) (provider.Provider, *provider.Plan, error) {
	var reasons []string
	for _, p := range ps {
		if name != "auto" && name != p.Name() {
			continue
		}
		hr := p.Probe(ctx)
		if !hr.Available {
			reasons = append(reasons, fmt.Sprintf("%s: %s", p.Name(), hr.Reason))
			if name == "auto" {
				continue
			}
			return nil, nil, &provider.Error{Code: provider.CodeUnavailable, Msg: fmt.Sprintf("provider %s: %s (fix: %s)", p.Name(), hr.Reason, strings.Join(hr.Fixes, "; "))}
		}
		plan, err := Plan(ctx, p, r)
		return p, plan, err
	}
	if len(reasons) == 0 {
		return nil, nil, &provider.Error{Code: provider.CodeUnavailable, Msg: fmt.Sprintf("no provider named %q in this build", name)}
	}
	return nil, nil, &provider.Error{Code: provider.CodeUnavailable, Msg: "no provider available: " + strings.Join(reasons, "; ")}
}

// Plan maps r onto p. A mapping with error losses gives the plan and
// CodePolicyRejected, each error placed in the policy file
// (file:line:col) where it has a position.
func Plan(ctx context.Context, p provider.Provider, r *policy.Resolved) (*provider.Plan, error) {
	plan, loss := p.Map(ctx, r)
	if loss.HasErrors() {
		return plan, provider.RejectedIn(r.Policy, loss)
	}
	return plan, nil
}

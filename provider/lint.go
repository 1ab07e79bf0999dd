package provider

import "github.com/corral-sandbox/corral/policy"

// LintLoss is policy.Lint's findings as loss-report items: the checks
// that hold whatever provider maps the policy, for a provider's Map to
// add to its own.
func LintLoss(r *policy.Resolved) LossReport {
	var out LossReport
	for _, f := range policy.Lint(r) {
		out = append(out, Loss{Severity: Severity(f.Severity), Area: f.Area, Field: f.Field, Message: f.Message})
	}
	return out
}

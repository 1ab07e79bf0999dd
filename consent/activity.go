package consent

// The activities of an Event, one per transition (docs/consent.md).
const (
	ActRequested   = "requested"    // a request came (again: Asked counts them), or was answered at once
	ActPrompted    = "prompted"     // an approver was shown it
	ActApproved    = "approved"     // decided yes (applied or apply_failed follows)
	ActDenied      = "denied"       // decided no, or no approver, or denied for the session
	ActExpired     = "expired"      // nobody answered in time, or the session ended: a deny
	ActApplied     = "applied"      // in force, read back (mount ids, rule revision)
	ActApplyFailed = "apply_failed" // approved, not in force
	ActRevoked     = "revoked"      // its grant revoked (holders reported)
	ActRateLimited = "rate_limited" // over consent.rate or max_pending: nobody was asked
	ActRefused     = "refused"      // outside the ceiling: nobody was asked
)

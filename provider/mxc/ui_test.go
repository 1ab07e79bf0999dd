package mxc

import (
	"testing"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// The policy's ui section maps to MXC's ui on process_container (omitted
// fields deny) and is an error on isolation_session.
func TestUIMapping(t *testing.T) {
	r := base()
	r.Policy = &policy.Policy{UI: &policy.UI{Windows: true, Clipboard: "read"}}
	req, loss := Map(r, Config{Backend: pc}, "")
	if loss.HasErrors() {
		t.Fatalf("losses: %+v", loss)
	}
	u := req.UI
	if u == nil || *u.Disable || u.Clipboard != "read" || *u.Injection {
		t.Errorf("ui = %+v, want windows allowed, clipboard read, no injection", u)
	}
	r.Policy = &policy.Policy{UI: &policy.UI{}} // all omitted: deny
	req, _ = Map(r, Config{Backend: pc}, "")
	if u := req.UI; u == nil || !*u.Disable || u.Clipboard != "none" || *u.Injection {
		t.Errorf("empty ui = %+v, want the restrictive posture", u)
	}
	ri := baseISO()
	ri.Policy = &policy.Policy{UI: &policy.UI{}}
	req, loss = Map(ri, Config{Backend: iso}, "")
	found := false
	for _, l := range loss {
		found = found || (l.Severity == provider.SeverityError && l.Field == "ui")
	}
	if !found || req.UI != nil {
		t.Errorf("isolation_session with a ui section: losses %+v, ui %+v", loss, req.UI)
	}
}

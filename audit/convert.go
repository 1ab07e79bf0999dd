package audit

import (
	"github.com/corral-sandbox/corral/egress"
	"github.com/corral-sandbox/corral/provider"
)

// LayersOf is the layers in force, as events record them.
func LayersOf(ls []provider.LayerStatus) []Layer {
	var out []Layer
	for _, l := range ls {
		out = append(out, Layer{Layer: string(l.Layer), Requirement: string(l.Required), State: string(l.State), Detail: l.Detail})
	}
	return out
}

// EgressOf is one decision of the egress proxy, as Egress records it.
func EgressOf(d egress.Decision) EgressDecision {
	ip := ""
	if d.Addr.IsValid() {
		ip = d.Addr.Addr().String()
	}
	return EgressDecision{Time: d.Time, Allowed: d.Allowed, Failed: d.Allowed && d.Reason != "" && !d.Local, Method: d.Method, Host: d.Host, Port: d.Port, IP: ip,
		URL: d.URL, Status: d.Status, Rule: d.Rule, Reason: d.Reason, Hint: d.Hint,
		Inspected: d.Inspected, Proto: d.Proto, BytesOut: d.BytesOut, BytesIn: d.BytesIn, Credentials: d.Credentials}
}

// CredentialUseOf is one credential finding of the egress proxy, as
// CredentialFinding records it.
func CredentialUseOf(f egress.CredentialFinding) CredentialUse {
	return CredentialUse{Time: f.Time, Kind: string(f.Kind), Credential: f.Credential, Host: f.Host, Port: f.Port,
		Method: f.Method, Path: f.Path, Where: f.Where, Action: f.Action}
}

package mxc

import (
	"encoding/json"
	"fmt"
)

// Request is one wxc-exec configuration document, in the field names of the
// shipped MXC schemas (mxc-config.schema.0.8.0-alpha.json and
// mxc-config.schema.0.9.0-dev.json under shared/reference/mxc). Only the
// fields Corral sets are modelled; every one exists in both schemas except
// Phase and SandboxID (0.9 only). All are omitted when empty, so a document
// never carries a field the mapper did not decide on.
type Request struct {
	Version       string         `json:"version,omitempty"`
	Containment   string         `json:"containment,omitempty"`
	Phase         Phase          `json:"phase,omitempty"`     // 0.9 state-aware requests only
	SandboxID     string         `json:"sandboxId,omitempty"` // 0.9, every phase but provision
	Filesystem    *Filesystem    `json:"filesystem,omitempty"`
	Network       *Network       `json:"network,omitempty"`
	UI            *UI            `json:"ui,omitempty"`
	RuntimeConfig *RuntimeConfig `json:"runtimeConfig,omitempty"`
	// Process is required (may be empty) by the 0.8 schema; one-shot
	// requests always carry it. The runner supplies the command, either
	// here (CommandLine) or as wxc-exec's trailing "-- CMD ...".
	Process *Process `json:"process,omitempty"`
}

// Filesystem is MXC's filesystem section: default deny outside the grants;
// deniedPaths override broader grants.
type Filesystem struct {
	ReadonlyPaths  []string `json:"readonlyPaths,omitempty"`
	ReadwritePaths []string `json:"readwritePaths,omitempty"`
	DeniedPaths    []string `json:"deniedPaths,omitempty"`
}

// Network is MXC's network section. A request uses either the legacy fields
// (DefaultPolicy, AllowLocalNetwork: what IsolationSession requires) or the
// directional 0.8 fields (Egress, Ingress: what ProcessContainer gets),
// never both.
type Network struct {
	DefaultPolicy     string   `json:"defaultPolicy,omitempty"` // allow | block
	AllowLocalNetwork *bool    `json:"allowLocalNetwork,omitempty"`
	Egress            *Egress  `json:"egress,omitempty"`
	Ingress           *Ingress `json:"ingress,omitempty"`
}

// Egress is the outbound policy. Corral never writes rules: the host-side
// egress proxy enforces the policy's allow/deny lists.
type Egress struct {
	Default string `json:"default,omitempty"` // allow | deny
}

// Ingress is the inbound and host-loopback policy.
type Ingress struct {
	Default      string `json:"default,omitempty"`      // allow | deny
	HostLoopback string `json:"hostLoopback,omitempty"` // allow | deny
}

// UI is MXC's cross-platform UI section; omitted fields deny.
type UI struct {
	Disable   *bool  `json:"disable,omitempty"`
	Clipboard string `json:"clipboard,omitempty"` // none | read | write | all
	Injection *bool  `json:"injection,omitempty"`
}

// RuntimeConfig carries run-time values kept apart from policy.
type RuntimeConfig struct {
	NetworkProxy string `json:"networkProxy,omitempty"` // http://127.0.0.1:PORT
}

// Process is the workload's process section.
type Process struct {
	CommandLine string   `json:"commandLine,omitempty"`
	Cwd         string   `json:"cwd,omitempty"`
	Env         []string `json:"env,omitempty"`     // "KEY=VALUE"
	Timeout     *uint32  `json:"timeout,omitempty"` // milliseconds
}

// Phase is a state-aware lifecycle phase (0.9 schema).
type Phase string

const (
	PhaseProvision   Phase = "provision"
	PhaseStart       Phase = "start"
	PhaseExec        Phase = "exec"
	PhaseStop        Phase = "stop"
	PhaseDeprovision Phase = "deprovision"
)

// Containment values Corral emits.
const (
	containmentProcessContainer = "processcontainer"
	containmentIsolationSession = "isolation_session"
)

// JSON returns the document as wxc-exec reads it (--config-base64 carries
// these bytes base64-encoded).
func (r *Request) JSON() ([]byte, error) { return json.Marshal(r) }

// ForPhase derives, from the document Map returned for the
// isolation_session backend, the request of one lifecycle phase:
//
//   - provision: everything but the process section (network included:
//     provision requires defaultPolicy allow with allowLocalNetwork);
//   - exec: version, containment, phase, sandboxId and process;
//   - start, stop, deprovision: version, containment, phase, sandboxId.
//
// sandboxID is ignored for provision and required otherwise. It fails for
// a one-shot (process_container) document.
func (r *Request) ForPhase(p Phase, sandboxID string) (*Request, error) {
	if r.Containment != containmentIsolationSession {
		return nil, fmt.Errorf("mxc: phase %q requested for a %q document: only isolation_session is state-aware", p, r.Containment)
	}
	out := &Request{Version: r.Version, Containment: r.Containment, Phase: p}
	switch p {
	case PhaseProvision:
		out.Filesystem, out.Network, out.UI, out.RuntimeConfig = r.Filesystem, r.Network, r.UI, r.RuntimeConfig
		return out, nil
	case PhaseExec:
		out.Process = r.Process
		if out.Process == nil {
			out.Process = &Process{}
		}
	case PhaseStart, PhaseStop, PhaseDeprovision:
	default:
		return nil, fmt.Errorf("mxc: unknown phase %q", p)
	}
	if sandboxID == "" {
		return nil, fmt.Errorf("mxc: phase %q needs the sandboxId returned by provision", p)
	}
	out.SandboxID = sandboxID
	return out, nil
}

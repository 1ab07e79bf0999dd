// Package mxc is Corral's Windows provider on Microsoft MXC, driven through
// the wxc-exec executor (contract: shared/reference/mxc/CONTRACT.md): the
// provider configuration, the capabilities of each backend, the mapper from
// a resolved policy to a wxc-exec configuration document plus the loss
// report (mxc.go, map.go), and the runner that execs wxc-exec with durable
// records for sessions (runner.go, record.go). It is plain Go: it builds
// and is tested on every OS, against a stand-in executor
// (testdata/wxcexec) that runs workloads as ordinary processes.
//
// Two backends are chosen in provider configuration, never per request:
//
//   - process_container (default): an AppContainer/BaseContainer per run,
//     with read-only/read-write/denied path grants and default deny,
//     default-deny egress with Corral's host-side egress proxy as the only
//     reachable endpoint, and a restrictive UI posture.
//   - isolation_session (experimental in MXC): a long-lived session of a
//     separate, OS-minted agent user. It takes no filesystem grants and no UI
//     section and cannot filter the network.
//
// Every policy rule either maps to the document or is listed in the loss
// report; an error item means the policy must be rejected before wxc-exec
// is ever called (provider.Run and Provision refuse such plans).
package mxc

import (
	"fmt"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// Name is the provider's stable name.
const Name = "mxc"

// Backend is the MXC containment backend.
type Backend string

const (
	BackendProcessContainer Backend = "process_container" // default
	BackendIsolationSession Backend = "isolation_session"
)

// Schema versions: the names of the shipped schema files. The document's
// "version" field carries the semver MXC accepts for that line.
const (
	Schema08 = "0.8.0-alpha" // stable; one-shot requests
	Schema09 = "0.9.0-dev"   // dev line; state-aware requests, isolation_session
)

// wireVersion is the document "version" for each schema file: the 0.9 dev
// schema's accepted version is 0.9.0-alpha (schema-version.json
// maxSupported), not the file suffix.
var wireVersion = map[string]string{Schema08: "0.8.0-alpha", Schema09: "0.9.0-alpha"}

// Config is the provider configuration.
type Config struct {
	// Backend defaults to process_container.
	Backend Backend
	// SchemaVersion is the MXC schema the documents follow: Schema08 or
	// Schema09. Empty means Schema08 for process_container and Schema09 for
	// isolation_session (which the 0.8 schema does not know).
	SchemaVersion string
	// WxcExec is the path of wxc-exec; empty means look it up in PATH. The
	// mapper does not use it.
	WxcExec string
	// Relay is the corral binary whose `__relay` mode is the one process
	// of a process_container sandbox a control plane keeps (container.go,
	// docs/relay.md); empty means this executable (os.Executable).
	Relay string
}

// withDefaults fills the empty fields.
func (c Config) withDefaults() Config {
	if c.Backend == "" {
		c.Backend = BackendProcessContainer
	}
	if c.SchemaVersion == "" {
		c.SchemaVersion = Schema08
		if c.Backend == BackendIsolationSession {
			c.SchemaVersion = Schema09
		}
	}
	return c
}

// check reports configuration errors as loss items (area "provider"), so
// a bad configuration rejects like any other unenforceable policy.
func (c Config) check() provider.LossReport {
	var loss provider.LossReport
	switch c.Backend {
	case BackendProcessContainer, BackendIsolationSession:
	default:
		loss = append(loss, provider.Loss{Severity: provider.SeverityError, Area: "provider", Field: "provider.backend",
			Message: fmt.Sprintf("unknown mxc backend %q (want %s or %s)", c.Backend, BackendProcessContainer, BackendIsolationSession)})
	}
	if _, ok := wireVersion[c.SchemaVersion]; !ok {
		loss = append(loss, provider.Loss{Severity: provider.SeverityError, Area: "provider", Field: "provider.schema_version",
			Message: fmt.Sprintf("unsupported MXC schema version %q (want %s or %s)", c.SchemaVersion, Schema08, Schema09)})
	} else if c.Backend == BackendIsolationSession && c.SchemaVersion == Schema08 {
		loss = append(loss, provider.Loss{Severity: provider.SeverityError, Area: "provider", Field: "provider.schema_version",
			Message: fmt.Sprintf("isolation_session needs the %s schema: %s has no isolation_session containment and no lifecycle phases", Schema09, Schema08)})
	}
	return loss
}

// Capabilities describes what the configured backend can enforce. It is
// static: what the host really offers (tier, deny-path support, whether
// IsolationSession is available) is for the runner's probe.
func Capabilities(cfg Config) provider.Capabilities {
	cfg = cfg.withDefaults()
	c := provider.Capabilities{
		Version:                   provider.CapabilitiesVersion,
		Provider:                  Name,
		ResourceLimits:            []string{"timeout"}, // process.timeout; nothing else in the schema
		SupportsLivePolicyUpdates: false,
		ReportsRuntimeReadiness:   true,
		Layers:                    layerStatus(cfg.Backend, nil),
	}
	switch cfg.Backend {
	case BackendIsolationSession:
		c.FilesystemGrants, c.FilesystemDeny = false, false
		c.NetworkModes = []policy.NetworkMode{policy.NetworkHost}
		// The session is separated from the desktop by being another
		// user's session, but it takes no ui section: no UI policy.
		c.UIPolicy = false
		c.SessionLifetimes = []provider.SessionLifetime{provider.LifetimePerRun, provider.LifetimePersistent}
		c.HostPathProjection = false
		c.StagingChannel = true // the provisioned ephemeralWorkspacePath
	default:
		c.FilesystemGrants, c.FilesystemDeny = true, true
		c.NetworkModes = []policy.NetworkMode{policy.NetworkNone, policy.NetworkProxy}
		c.UIPolicy = true
		// A control plane's sandboxes end with it: their channel is
		// wxc-exec's stdio, and MXC has no attach.
		c.SessionLifetimes = []provider.SessionLifetime{provider.LifetimePerRun, provider.LifetimeManaged}
		c.HostPathProjection = true // grants apply to the host paths themselves
		c.StagingChannel = false
	}
	return c
}

// layerStatus says what becomes of each of Corral's (Linux) layers on a
// backend. None of them exists on Windows; the honest mapping is:
//
//   - landlock, seccomp: no Windows equivalent is applied → unavailable.
//   - cgroups: MXC exposes no resource control besides the timeout →
//     unavailable.
//   - mounts (the filesystem view): replaced on process_container by MXC's
//     path grants (active, as a substitute); isolation_session takes no
//     grants → unavailable.
//   - namespaces: replaced in part by the container boundary
//     (AppContainer/BaseContainer, or the agent user's own session):
//     active as a substitute, but with no PID or mount namespace, which the
//     loss report states.
//
// An unavailable layer that is optional is reported skipped.
func layerStatus(b Backend, req policy.Layers) []provider.LayerStatus {
	var out []provider.LayerStatus
	for _, l := range policy.AllLayers {
		st := provider.LayerStatus{Layer: l, Required: req.Requirement(l), State: provider.LayerUnavailable}
		switch l {
		case policy.LayerLandlock:
			st.Detail = "Linux Landlock does not exist on Windows; MXC applies no equivalent"
		case policy.LayerSeccomp:
			st.Detail = "Linux seccomp does not exist on Windows; MXC applies no system-call filter"
		case policy.LayerCgroups:
			st.Detail = "MXC exposes no memory, CPU or process-count limits (only process.timeout)"
		case policy.LayerMounts:
			if b == BackendIsolationSession {
				st.Detail = "isolation_session takes no filesystem grants: the agent user sees what host ACLs allow it"
			} else {
				st.State, st.Detail = provider.LayerActive, "substitute: MXC ProcessContainer path grants (readonly/readwrite/denied paths, default deny), not a private mount tree"
			}
		case policy.LayerNamespaces:
			if b == BackendIsolationSession {
				st.State, st.Detail = provider.LayerActive, "substitute (partial): a separate agent user and logon session; no PID or mount isolation"
			} else {
				st.State, st.Detail = provider.LayerActive, "substitute (partial): AppContainer/BaseContainer object and capability isolation; no PID or mount isolation"
			}
		}
		if st.State == provider.LayerUnavailable && st.Required == policy.Optional {
			st.State = provider.LayerSkipped
		}
		out = append(out, st)
	}
	return out
}

// Package provider is the seam between Corral's policy and the containment
// mechanisms that enforce it. A Provider probes its host, describes what it
// can enforce (Capabilities), maps a resolved policy to a Plan plus a
// LossReport, and runs sandboxes through a fixed lifecycle:
//
//	Provision → Start → Exec → Stop → Deprovision
//
// The shape follows mature driver interfaces such as HashiCorp Nomad's task
// driver plugin API (capabilities, fingerprint, start/wait/stop/destroy,
// recover). This package has no OS-specific code.
package provider

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/corral-sandbox/corral/policy"
)

// Provider is one containment mechanism.
type Provider interface {
	// Name is the provider's stable name ("linux", "docker", "mxc").
	Name() string
	// Probe inspects the host. It never fails: what is missing is reported
	// in the HostReport.
	Probe(ctx context.Context) HostReport
	// Capabilities describes what this provider can enforce on this host.
	Capabilities(ctx context.Context) Capabilities
	// Map turns a resolved policy into a plan. The loss report lists every
	// difference between policy and plan; any error item means the policy
	// must be rejected before anything is created.
	Map(ctx context.Context, p *policy.Resolved) (*Plan, LossReport)
	// Provision creates the sandbox's resources (cgroups, state) without
	// running anything. A plan with error losses is refused with
	// CodePolicyRejected; options the provider cannot honour (Persistent
	// without LifetimePersistent) with CodeUnavailable.
	Provision(ctx context.Context, plan *Plan, opts ProvisionOptions) (Sandbox, error)
	// Recover reattaches to a persistent sandbox that an earlier process
	// provisioned (Nomad's RecoverTask), from the opaque state its
	// Persistent.State returned, which the caller stored. plan is the
	// caller's mapping of the sandbox's policy now; a provider that saved
	// the plan it provisioned (what the sandbox enforces) uses that and
	// may ignore it. The layers are verified from outside anew.
	// CodeNotFound: the sandbox is gone (always, for a provider without
	// persistent sandboxes); any other code: nothing is known, so the
	// caller must not destroy anything on a guess.
	Recover(ctx context.Context, plan *Plan, state []byte) (Sandbox, error)
}

// ProvisionOptions are the caller's choices for one sandbox, the same for
// every provider (never provider-specific edits of a plan's Details).
type ProvisionOptions struct {
	// ID names the sandbox (NewID's shape); empty: the provider makes one.
	ID string
	// Persistent asks for a sandbox that outlives the calling process
	// (LifetimePersistent in Capabilities.SessionLifetimes). Its sandbox
	// implements Persistent.
	Persistent bool
	// Owner names the control-plane instance a persistent sandbox belongs
	// to (Manager.Managed lists by it; sweeps of per-run leftovers skip
	// it).
	Owner string
	// Trust, when the policy inspects egress, is the PEM bundle the
	// sandbox's TLS clients must trust: the host's roots and the
	// sandbox's egress CA (never its key). The provider shows it
	// read-only at TrustBundlePath and over the distro bundle paths
	// (TrustBundlePaths) and sets its variables (WithTrustEnv); a provider that cannot
	// reports an error loss for an inspected policy in Map.
	Trust []byte
	// TrustStore is the same trust as a Java KeyStore (internal/jks,
	// password "changeit"), for the JVM, which reads no PEM: shown
	// read-only at JavaTrustStorePath and over the distro Java trust
	// stores (JavaTrustStorePaths). Set whenever Trust is.
	TrustStore []byte
}

// JavaTrustStorePath is where a sandbox finds its Java trust store
// (TrustStore).
const JavaTrustStorePath = "/run/corral/ca-bundle.jks"

// JavaTrustStorePaths are the distro paths of the JVM's default trust
// store (the JDK's lib/security/cacerts links to one of them): Debian,
// Ubuntu and Alpine; RHEL and Fedora. A JVM that finds the sandbox's
// store there needs no option.
var JavaTrustStorePaths = []string{
	"/etc/ssl/certs/java/cacerts",
	"/etc/pki/ca-trust/extracted/java/cacerts",
}

// TrustBundlePath is where a sandbox finds its trust bundle (Trust):
// the file TrustEnv's variables name.
const TrustBundlePath = "/run/corral/ca-bundle.pem"

// TrustBundlePaths are the distro paths of the system bundle that tools
// read when no variable names one (GnuTLS's git, Go, Ruby, .NET,
// OpenSSL's default): Debian, Ubuntu and Alpine; RHEL and Fedora; SUSE;
// Alpine and macOS (/etc/ssl/cert.pem). A provider puts the bundle over
// those that exist in the sandbox's tree.
var TrustBundlePaths = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// TrustEnv returns the variables that point the common runtimes at the
// bundle at path (docs/egress.md, "Trust inside"; each tool's own docs
// name its variable): OpenSSL and
// everything on it (SSL_CERT_FILE: curl, Python's ssl, Ruby, PHP, .NET
// on Linux, Go's crypto/x509), curl (CURL_CA_BUNDLE), git
// (GIT_SSL_CAINFO: Debian's GnuTLS git ignores SSL_CERT_FILE), Python's
// requests and pip (REQUESTS_CA_BUNDLE, PIP_CERT), Node and Bun
// (NODE_EXTRA_CA_CERTS, which adds to Node's own roots), npm
// (npm_config_cafile), cargo (CARGO_HTTP_CAINFO), the AWS CLI
// (AWS_CA_BUNDLE), Deno (DENO_CERT), gRPC's C-core
// (GRPC_DEFAULT_SSL_ROOTS_FILE_PATH), gcloud
// (CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE), Nix (NIX_SSL_CERT_FILE) and
// httplib2 (HTTPLIB2_CA_CERTS).
func TrustEnv(path string) []string {
	var env []string
	for _, k := range []string{"SSL_CERT_FILE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "REQUESTS_CA_BUNDLE", "PIP_CERT",
		"NODE_EXTRA_CA_CERTS", "npm_config_cafile", "CARGO_HTTP_CAINFO", "AWS_CA_BUNDLE", "DENO_CERT",
		"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", "CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE", "NIX_SSL_CERT_FILE", "HTTPLIB2_CA_CERTS"} {
		env = append(env, k+"="+path)
	}
	return env
}

// WithTrustEnv is env (the workload's: KEY=VALUE) with TrustEnv(bundle)
// set and, for the JVM, which reads none of those, JAVA_TOOL_OPTIONS
// naming the Java trust store when store (the paths inside where the
// provider put TrustStore, JavaTrustStorePath and the distro ones) is
// JavaTrustStorePath alone: "-Djavax.net.ssl.trustStore=<it>
// -Djavax.net.ssl.trustStoreType=JKS", after the options env already has
// (later ones win; none is dropped). When a distro path holds the store,
// the JVM finds it with no option, and nothing is set (no "Picked up
// JAVA_TOOL_OPTIONS" on every java's stderr); when nothing does, neither.
func WithTrustEnv(env []string, bundle string, store []string) []string {
	env = WithEnv(env, TrustEnv(bundle))
	if !slices.Equal(store, []string{JavaTrustStorePath}) {
		return env
	}
	opts := "-Djavax.net.ssl.trustStore=" + JavaTrustStorePath + " -Djavax.net.ssl.trustStoreType=JKS"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "JAVA_TOOL_OPTIONS="); ok { // the first, as getenv(3) reads it
			if strings.TrimSpace(v) != "" {
				opts = v + " " + opts
			}
			break
		}
	}
	return WithEnv(env, []string{"JAVA_TOOL_OPTIONS=" + opts})
}

// TrustFile is one of the files that carry a sandbox's trust: the PEM
// bundle (ProvisionOptions.Trust) or the Java store (TrustStore).
type TrustFile struct {
	Name  string   // its name in a provider's state directory
	Path  string   // where it goes inside (TrustBundlePath, JavaTrustStorePath)
	Over  []string // the distro paths it covers
	What  string   // what it is, for messages
	Store bool     // the Java store
}

// Of is, of a sandbox's bundle pem and Java store, f's content.
func (f TrustFile) Of(pem, store []byte) []byte {
	if f.Store {
		return store
	}
	return pem
}

// TrustFiles are the bundle's and the Java store's, covering the distro
// paths bundleOver and storeOver (TrustBundlePaths, JavaTrustStorePaths;
// a test may pass a tree of its own).
func TrustFiles(bundleOver, storeOver []string) []TrustFile {
	return []TrustFile{
		{Name: "ca-bundle.pem", Path: TrustBundlePath, Over: bundleOver, What: "CA bundle"},
		{Name: "ca-bundle.jks", Path: JavaTrustStorePath, Over: storeOver, What: "Java trust store", Store: true},
	}
}

// TrustUpdater is a sandbox whose trust can be replaced while it runs: a
// recovered session mints a new CA, since the old key died with the
// process that held it. SetTrust rewrites the sandbox's files in place
// (their binds show the new contents at once): pem, the bundle
// (ProvisionOptions.Trust's shape), and store, the same as a Java
// KeyStore (TrustStore's; nil, or a sandbox made without one: left
// alone). An error for a sandbox made without a bundle, or whose files
// are no longer the ones the provider wrote.
type TrustUpdater interface {
	SetTrust(pem, store []byte) error
}

// NewID returns a fresh sandbox id: "corral-" and 12 lower-case hex
// digits (48 random bits), a valid container name and DNS label.
func NewID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "corral-" + hex.EncodeToString(b)
}

// IsID reports whether id has NewID's shape.
func IsID(id string) bool {
	if len(id) != 19 || !strings.HasPrefix(id, "corral-") {
		return false
	}
	for _, c := range id[7:] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Optional abilities. A provider or sandbox has one when it implements the
// interface; callers check with a type assertion on these names, never on
// a concrete provider type.

// Persistent is a sandbox provisioned with ProvisionOptions.Persistent:
// it outlives the process that made it.
type Persistent interface {
	// State is what Recover needs to reattach to the sandbox: opaque to
	// the caller, which stores it with its own record.
	State() []byte
	// Running reports whether the sandbox's environment runs now,
	// checked from outside (not the workload's word).
	Running(ctx context.Context) bool
}

// Manager is a provider whose persistent sandboxes a control plane owns.
type Manager interface {
	// Managed lists the ids of owner's persistent sandboxes, running or
	// not.
	Managed(ctx context.Context, owner string) ([]string, error)
	// Destroy removes a persistent sandbox by id, whatever state it is in;
	// nothing there is not an error.
	Destroy(ctx context.Context, id string) error
}

// ProxyAuthenticator is a sandbox whose egress listener other local
// processes can reach too (MXC's, on the host's loopback): the proxy
// serving it must demand this per-sandbox credential.
type ProxyAuthenticator interface {
	ProxyCredential() string
}

// PortDialer is a sandbox whose own loopback the supervisor can reach:
// for published ports and readiness checks.
type PortDialer interface {
	// DialServed connects to port on the sandbox's loopback.
	DialServed(port int, timeout time.Duration) (net.Conn, error)
}

// HostView is a sandbox whose host-side resources a supervisor can show:
// its init's host pid and its cgroup (directories, limit files).
type HostView interface {
	InitPID() int
	Cgroup() (dirs []string, limits map[string]string)
}

// WorkloadIdentity is a plan's Details that know the workload's uid.
type WorkloadIdentity interface {
	WorkloadUID() int
}

// Summarizer is a plan's Details that describe themselves in lines, for
// `corral policy explain`.
type Summarizer interface {
	Summary() []string
}

// Sandbox is one provisioned sandbox. Methods are called in lifecycle order.
type Sandbox interface {
	ID() string
	// Start brings up the sandbox's isolated environment and its init.
	Start(ctx context.Context) error
	// Exec runs one process inside the sandbox and waits for it.
	Exec(ctx context.Context, spec ExecSpec) (ExitStatus, error)
	// Signal forwards a signal to the running workload.
	Signal(sig os.Signal) error
	// Stop terminates everything running inside; it is idempotent.
	Stop(ctx context.Context) error
	// Deprovision removes every resource Provision created; idempotent.
	Deprovision(ctx context.Context) error
	// Layers reports the layers in force, verified from outside the
	// workload where the provider can (valid after Start).
	Layers() []LayerStatus
	// EgressListener is, for network proxy, the listener inside the
	// sandbox that the caller must serve with Corral's egress proxy (the
	// sandbox's only way out); nil otherwise. Valid after Start.
	EgressListener() net.Listener
}

// ExecSpec is one process to run inside a sandbox.
type ExecSpec struct {
	Args   []string // argv; Args[0] is looked up in the sandbox's PATH
	Dir    string   // working directory inside; empty means the plan's workdir
	Stdin  *os.File
	Stdout *os.File
	Stderr *os.File
	// TTY asks for a pseudo-terminal created inside the sandbox (so
	// the process sees a terminal of its own, never the caller's) that
	// becomes its controlling terminal; the provider copies Stdin to it
	// and its output to Stdout. Stderr is not used.
	TTY bool
	// Resize, with TTY, carries window sizes (rows, columns) to apply.
	Resize <-chan [2]uint16
	// ExtraFiles are passed as fds 3, 4, ... ; nothing else is inherited.
	ExtraFiles []*os.File
	// Started, if set, is called once, on Exec's goroutine, when the
	// workload runs, with its pid as seen from the host (0 when the
	// provider could not learn it); Exec returns after it.
	Started func(hostPID int)
}

// ExitStatus is how a workload ended.
type ExitStatus struct {
	Code     int    // exit code, or 128+signal when killed
	Signal   string // signal name when killed by a signal, else ""
	TimedOut bool   // killed because the policy timeout expired
	// Reason explains an end the workload did not choose (e.g. the
	// sandbox was killed); empty otherwise.
	Reason   string
	Duration time.Duration
}

// TimedOutStatus is the status of a workload the provider killed (SIGKILL)
// because the policy's timeout expired after d: exit 124, as timeout(1).
func TimedOutStatus(d time.Duration) ExitStatus {
	return ExitStatus{Code: CodeTimeout.ExitCode(), Signal: "SIGKILL", TimedOut: true, Duration: d}
}

// CancelledStatus is the status and error of a workload the provider
// killed (SIGKILL) because the caller's context ended with err after d.
func CancelledStatus(d time.Duration, err error) (ExitStatus, error) {
	return ExitStatus{Code: 128 + 9, Signal: "SIGKILL", Duration: d}, Wrap(CodeTimeout, "", err)
}

// HostReport is what Probe found.
type HostReport struct {
	Provider  string            `json:"provider"`
	Available bool              `json:"available"`
	Reason    string            `json:"reason,omitempty"` // why not available
	Facts     map[string]string `json:"facts"`            // kernel, landlock_abi, cgroup, ...
	Fixes     []string          `json:"fixes,omitempty"`  // commands or settings that would help
}

// MockNote marks whatever ran on a provider whose HostReport has the fact
// tier "mock" (MXC's executor stand-in, shared/reference/mxc/CONTRACT.md).
const MockNote = "mock — not evidence of OS enforcement"

// CapabilitiesVersion is the version of the Capabilities descriptor shape.
const CapabilitiesVersion = 1

// SessionLifetime says how long a provider's environment lives.
type SessionLifetime string

const (
	LifetimePerRun     SessionLifetime = "per-run"
	LifetimePersistent SessionLifetime = "persistent"
	// LifetimeManaged: the sandbox lives as long as the control-plane
	// process that made it and no longer (MXC process_container: its
	// channel is wxc-exec's stdio, and MXC has no attach). The provider
	// accepts ProvisionOptions.Persistent for it and gives a Persistent
	// sandbox, but never claims it outlives its maker: once that process
	// is gone Recover answers CodeNotFound and Manager.Destroy removes
	// what is left.
	LifetimeManaged SessionLifetime = "managed"
)

// Capabilities is a versioned description of what a provider can enforce.
type Capabilities struct {
	Version                   int                  `json:"version"`
	Provider                  string               `json:"provider"`
	FilesystemGrants          bool                 `json:"filesystem_grants"`
	FilesystemDeny            bool                 `json:"filesystem_deny"`
	NetworkModes              []policy.NetworkMode `json:"network_modes"`
	ResourceLimits            []string             `json:"resource_limits"` // memory, pids, cpu, nofile, timeout
	UIPolicy                  bool                 `json:"ui_policy"`
	SupportsLivePolicyUpdates bool                 `json:"supports_live_policy_updates"`
	SessionLifetimes          []SessionLifetime    `json:"session_lifetimes"`
	HostPathProjection        bool                 `json:"host_path_projection"` // host paths appear at the same path inside
	StagingChannel            bool                 `json:"staging_channel"`      // files can be copied in/out
	ReportsRuntimeReadiness   bool                 `json:"reports_runtime_readiness"`
	Layers                    []LayerStatus        `json:"layers"` // what each layer can do on this host
}

// Plan is what a provider will do for a policy. Details is provider-specific
// and serialisable (it is shown by `corral policy explain`).
type Plan struct {
	Provider string           `json:"provider"`
	Policy   *policy.Resolved `json:"policy"`
	Layers   []LayerStatus    `json:"layers"`
	Details  any              `json:"details"`
	Loss     LossReport       `json:"loss_report"`
	// Host is what the provider's probe found on this host, when the plan
	// was made for explaining (corral policy explain --provider NAME) and
	// not for running: a plan for a provider absent here says so.
	Host *HostReport `json:"host,omitempty"`
}

// LayerState is whether a layer is (or will be) in force.
type LayerState string

const (
	LayerActive      LayerState = "active"      // applied (or will be)
	LayerUnavailable LayerState = "unavailable" // cannot be applied on this host
	LayerSkipped     LayerState = "skipped"     // optional and not applied
)

// LayerStatus is one layer's state with evidence.
type LayerStatus struct {
	Layer    policy.Layer       `json:"layer"`
	Required policy.Requirement `json:"requirement"`
	State    LayerState         `json:"state"`
	Detail   string             `json:"detail,omitempty"` // evidence or reason
}

// Severity grades a loss.
type Severity string

const (
	SeverityError   Severity = "error"   // the policy cannot be enforced: reject
	SeverityWarning Severity = "warning" // enforced more weakly than written
	SeverityInfo    Severity = "info"    // worth knowing, no weaker enforcement
)

// Loss is one difference between a policy and its plan.
type Loss struct {
	Severity Severity `json:"severity"`
	Area     string   `json:"area"`  // filesystem, network, process, layers, ...
	Field    string   `json:"field"` // policy field path, e.g. "layers.landlock"
	Message  string   `json:"message"`
}

// LossReport lists every loss of a mapping.
type LossReport []Loss

// HasErrors reports whether any item has severity error.
func (r LossReport) HasErrors() bool {
	for _, l := range r {
		if l.Severity == SeverityError {
			return true
		}
	}
	return false
}

// Errors returns the error items.
func (r LossReport) Errors() LossReport {
	var out LossReport
	for _, l := range r {
		if l.Severity == SeverityError {
			out = append(out, l)
		}
	}
	return out
}

// FaultEnv names the environment variable that makes one layer fail when
// applied, for testing fail-closed behaviour (qualify P08, P16). It can
// only make a run fail or drop a layer the policy already marked optional.
const FaultEnv = "CORRAL_FAULT_LAYER"

// ProxyPort is where the egress proxy listens inside a sandbox with
// network proxy: 127.0.0.1:3128 (the port squid made customary). It is the
// sandbox's own loopback, in its own network namespace.
const ProxyPort = 3128

// ProxyEnv returns the variables that point common clients at the egress
// proxy at 127.0.0.1:port: curl, wget, git, pip, Python, Go and npm read
// the *_PROXY pair (both cases), and so does grpc-go (HTTPS_PROXY, through
// net/http's ProxyFromEnvironment); gRPC's C-core (C++, Python's grpcio,
// Ruby, PHP) reads grpc_proxy before https_proxy, and GRPC_PROXY, the
// upper-case spelling, is set too; gcloud's proxy properties come from
// CLOUDSDK_PROXY_TYPE, CLOUDSDK_PROXY_ADDRESS and CLOUDSDK_PROXY_PORT; Node's
// fetch needs NODE_USE_ENV_PROXY=1 (Node 22.21+, 24+); npm also reads
// npm_config_*. NO_PROXY is empty so nothing bypasses it (bypassing would
// fail anyway: there is no other route).
func ProxyEnv(port int) []string {
	return ProxyEnvAuth(port, "", "")
}

// ProxyEnvAuth is ProxyEnv for a proxy that wants Basic credentials (the
// mxc provider's, on the host's loopback): user and pass go into every
// proxy URL and into gcloud's CLOUDSDK_PROXY_USERNAME and _PASSWORD. An
// empty user gives ProxyEnv's variables.
func ProxyEnvAuth(port int, user, pass string) []string {
	pu := &url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	if user != "" {
		pu.User = url.UserPassword(user, pass)
	}
	u := pu.String()
	var env []string
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "GRPC_PROXY"} {
		env = append(env, k+"="+u, strings.ToLower(k)+"="+u)
	}
	env = append(env, "NO_PROXY=", "no_proxy=", "NODE_USE_ENV_PROXY=1",
		"npm_config_proxy="+u, "npm_config_https_proxy="+u,
		"CLOUDSDK_PROXY_TYPE=http", "CLOUDSDK_PROXY_ADDRESS=127.0.0.1", "CLOUDSDK_PROXY_PORT="+strconv.Itoa(port))
	if user != "" {
		env = append(env, "CLOUDSDK_PROXY_USERNAME="+user, "CLOUDSDK_PROXY_PASSWORD="+pass)
	}
	return env
}

// StateOf is the state of layer l in ls (LayerUnavailable when absent).
func StateOf(ls []LayerStatus, l policy.Layer) LayerState {
	for _, s := range ls {
		if s.Layer == l {
			return s.State
		}
	}
	return LayerUnavailable
}

// WithEnv returns env ("NAME=value" entries) with the variables of set
// replacing any of the same name, set's appended last (getenv(3) returns
// the first match, so no duplicates may stay).
func WithEnv(env, set []string) []string {
	names := map[string]bool{}
	for _, kv := range set {
		k, _, _ := strings.Cut(kv, "=")
		names[k] = true
	}
	var out []string
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); !names[k] {
			out = append(out, kv)
		}
	}
	return append(out, set...)
}

package mxc

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// Details is the provider-specific part of a Plan (shown by
// `corral policy explain`).
type Details struct {
	Backend       Backend  `json:"backend"`
	SchemaVersion string   `json:"schema_version"`
	Request       *Request `json:"request"`
}

// NewPlan maps r (see Map) into a provider.Plan whose Details is *Details.
func NewPlan(r *policy.Resolved, cfg Config, proxyAddr string) *provider.Plan {
	cfg = cfg.withDefaults()
	req, loss := Map(r, cfg, proxyAddr)
	return &provider.Plan{
		Provider: Name,
		Policy:   r,
		Layers:   layerStatus(cfg.Backend, r.Layers),
		Details:  &Details{Backend: cfg.Backend, SchemaVersion: cfg.SchemaVersion, Request: req},
		Loss:     loss,
	}
}

// Map turns a resolved policy into the wxc-exec document for cfg's backend
// and lists every loss. proxyAddr is the per-sandbox egress-proxy listener
// on the host ("127.0.0.1:PORT"), used only for network mode proxy.
//
// For process_container the document is the one-shot request (the runner
// adds the command). For isolation_session it is the base of the
// state-aware requests: derive each phase's with Request.ForPhase.
//
// The document is always returned, error items or not, so explain can show
// it; a fragment whose policy rule cannot be enforced is left out rather
// than weakened (in particular, network allow is never written for a policy
// that did not say host).
//
// UI: the policy's ui{windows, clipboard: none|read|write|all,
// input_injection} maps to MXC's ui{disable, clipboard, injection}, omitted
// fields denying; absent means the restrictive posture on process_container
// (ui{disable: true, clipboard: none, injection: false}). isolation_session
// takes no ui section: an explicit one is an error.
func Map(r *policy.Resolved, cfg Config, proxyAddr string) (*Request, provider.LossReport) {
	cfg = cfg.withDefaults()
	m := &mapper{r: r, cfg: cfg, iso: cfg.Backend == BackendIsolationSession}
	m.loss = cfg.check()
	m.req = &Request{Version: wireVersion[cfg.SchemaVersion], Containment: containmentProcessContainer, Process: &Process{}}
	if m.iso {
		m.req.Containment = containmentIsolationSession
	}
	m.layers()
	m.filesystem()
	m.ui()
	m.network(proxyAddr)
	m.process()
	m.credentials()
	m.consent()
	m.managed()
	return m.req, m.loss
}

// managed: what a process_container sandbox a control plane keeps
// (container.go) adds to the document and its reach, said in every
// process_container plan since Map cannot know who will keep it.
func (m *mapper) managed() {
	if m.iso {
		return
	}
	m.add(provider.SeverityInfo, "relay", "filesystem", "kept by a control plane (corral gateway), the sandbox runs Corral's relay and so is also granted read access to the directory of Corral's own binary: it can read whatever else is there")
	m.add(provider.SeverityWarning, "relay", "forward", "kept by a control plane (corral gateway), a `corral sandbox forward` reaches the loopback as seen from inside, which on process_container is the host's (its loopback reach is broader than the proxy: other host loopback services), not only the sandbox's own servers")
}

// consent: MXC applies a document once, at the start; nothing can be
// granted to a running sandbox, so a policy whose workload may ask is
// refused rather than given a broker nobody could satisfy.
func (m *mapper) consent() {
	if m.r.Consent != nil {
		m.add(provider.SeverityError, "consent", "consent", "mxc cannot change what a running sandbox may reach, so no consent request could ever be granted; remove the consent section (grant the folders and hosts in the policy), or use the linux or docker provider")
	}
}

type mapper struct {
	r    *policy.Resolved
	cfg  Config
	iso  bool
	req  *Request
	loss provider.LossReport
}

func (m *mapper) add(sev provider.Severity, area, field, format string, args ...any) {
	m.loss = append(m.loss, provider.Loss{Severity: sev, Area: area, Field: field, Message: fmt.Sprintf(format, args...)})
}

// layers: see layerStatus for the mapping of each layer. For a Windows
// policy an optional layer is not applicable, an info item: the layers are
// Linux mechanisms, and a Windows policy's rules (paths, network) are
// mapped onto MXC's own boundary, each with its own losses below.
func (m *mapper) layers() {
	windows := m.r.Policy != nil && m.r.Policy.OS() == policy.OSWindows
	for _, st := range layerStatus(m.cfg.Backend, m.r.Layers) {
		l := st.Layer
		field := "layers." + string(l)
		opt := st.Required == policy.Optional
		switch {
		case windows && opt:
			m.add(provider.SeverityInfo, "layers", field, "not applicable to a Windows policy (a Linux mechanism): %s", st.Detail)
		case l == policy.LayerNamespaces:
			if opt {
				m.add(provider.SeverityInfo, "layers", field, "Linux namespaces do not exist on Windows; %s", st.Detail)
			} else {
				m.add(provider.SeverityWarning, "layers", field, "required layer namespaces is replaced, more weakly, by the MXC boundary: %s (write \"layers: {namespaces: optional}\" to accept that)", st.Detail)
			}
		case l == policy.LayerMounts && st.State == provider.LayerActive:
			m.add(provider.SeverityInfo, "layers", field, "Linux mounts do not exist on Windows; %s", st.Detail)
		case opt:
			m.add(provider.SeverityWarning, "layers", field, "optional layer %s is not applied by mxc %s: %s", l, m.cfg.Backend, st.Detail)
		default:
			m.add(provider.SeverityError, "layers", field, "required layer %s cannot be applied by mxc %s: %s (run without it by writing \"layers: {%s: optional}\" in the policy)", l, m.cfg.Backend, st.Detail, l)
		}
	}
}

func (m *mapper) filesystem() {
	r := m.r
	if m.iso {
		for _, g := range r.Grants {
			if strings.HasPrefix(g.Field, "filesystem.protected") {
				continue // derived from a read-write grant, itself an error
			}
			hint := "remove it"
			if g.Field == "filesystem.include_workdir" {
				hint = "set filesystem.include_workdir: false; exchange files through the session's staging directory"
			}
			m.add(provider.SeverityError, "filesystem", g.Field, "isolation_session takes no filesystem grants (%s %s): %s", accessName(g.Access), g.Path, hint)
		}
		m.add(provider.SeverityWarning, "filesystem", "filesystem", "isolation_session does not enforce default deny: the agent user can read whatever host ACLs let any user read")
		return
	}
	fs := &Filesystem{}
	var rw []string
	type ro struct{ path, field string }
	var ros []ro
	for _, g := range r.Grants {
		p, problem := winPath(g.Path)
		if problem != "" {
			m.add(provider.SeverityError, "filesystem", g.Field, "%s", problem)
			continue
		}
		switch g.Access {
		case policy.AccessReadOnly:
			fs.ReadonlyPaths = append(fs.ReadonlyPaths, p)
			ros = append(ros, ro{p, g.Field})
		case policy.AccessReadWrite:
			fs.ReadwritePaths = append(fs.ReadwritePaths, p)
			rw = append(rw, p)
		case policy.AccessDeny:
			fs.DeniedPaths = append(fs.DeniedPaths, p)
		}
	}
	// Grants are sorted parents first, so every read-write root is known
	// here. Denied paths are documented to override broader grants; a
	// read-only path inside a read-write one is not (on the AppContainer
	// tier the inherited write ACE may still apply).
	for _, o := range ros {
		for _, w := range rw {
			if policy.WinWithin(o.path, w) {
				m.add(provider.SeverityWarning, "filesystem", o.field, "%s is read-only inside the read-write %s: MXC does not document that the nested read-only grant wins, so it may stay writable", o.path, w)
				break
			}
		}
	}
	for _, d := range fs.DeniedPaths {
		for _, w := range rw {
			if policy.WinWithin(d, w) && !policy.WinWithin(w, d) {
				m.add(provider.SeverityWarning, "filesystem", "filesystem.deny", "%s is denied inside the read-write %s: the workload may rename or delete what contains it there, and MXC does not document that a denied path follows a rename", d, w)
				break
			}
		}
	}
	if len(r.Skipped) > 0 && r.Lexical != "" {
		m.add(provider.SeverityWarning, "filesystem", "filesystem.protected", "%d protected paths were not checked off the Windows host: where one exists the Windows host grants it read-only; one that is absent MXC cannot keep from being created: %s", len(r.Skipped), someOf(r.Skipped))
	} else if len(r.Skipped) > 0 {
		m.add(provider.SeverityWarning, "filesystem", "filesystem.protected", "%d protected paths are symlinks or absent, so no read-only grant covers them (a workload can replace or create them): %s", len(r.Skipped), someOf(r.Skipped))
	}
	if len(r.Placeholders) > 0 {
		// MXC's filesystem policy is ACLs on existing paths; Corral
		// cannot hold an absent name in it.
		absent := make([]string, len(r.Placeholders))
		for i, ph := range r.Placeholders {
			absent[i] = ph.Path
		}
		m.add(provider.SeverityWarning, "filesystem", "filesystem.protected", "%d protected names do not exist, and MXC cannot keep a name that does not exist from being created: a workload can create them inside the read-write grants: %s", len(absent), someOf(absent))
	}
	if len(fs.ReadonlyPaths)+len(fs.ReadwritePaths)+len(fs.DeniedPaths) > 0 {
		m.req.Filesystem = fs
	}
	if wd, problem := winPath(r.Workdir); problem == "" && visible(fs, wd) {
		m.req.Process.Cwd = wd
	} else if r.Workdir != "" {
		m.add(provider.SeverityInfo, "filesystem", "filesystem.include_workdir", "the workdir %s is not granted, so wxc-exec picks the working directory (first read-write, else read-only grant, else the system drive root)", r.Workdir)
	}
}

// someOf is the first paths of a list for a loss message, and how many
// more (the plan's policy has them all: corral policy explain -o json).
func someOf(paths []string) string {
	const n = 6
	if len(paths) <= n {
		return strings.Join(paths, ", ")
	}
	return fmt.Sprintf("%s and %d more (corral policy explain -o json lists them)", strings.Join(paths[:n], ", "), len(paths)-n)
}

// visible reports whether path is inside a grant and not inside a denied
// path.
func visible(fs *Filesystem, path string) bool {
	for _, d := range fs.DeniedPaths {
		if policy.WinWithin(path, d) {
			return false
		}
	}
	for _, g := range append(append([]string{}, fs.ReadwritePaths...), fs.ReadonlyPaths...) {
		if policy.WinWithin(path, g) {
			return true
		}
	}
	return false
}

func accessName(a policy.Access) string {
	switch a {
	case policy.AccessReadOnly:
		return "read-only"
	case policy.AccessReadWrite:
		return "read-write"
	}
	return "deny"
}

func (m *mapper) ui() {
	var u *policy.UI
	if m.r.Policy != nil {
		u = m.r.Policy.UI
	}
	if m.iso {
		if u != nil {
			m.add(provider.SeverityError, "ui", "ui", "isolation_session rejects any ui section; remove it (the session's UI is the agent user's own)")
		}
		return // absent is the only ui isolation_session accepts
	}
	// Absent: the restrictive posture; omitted fields deny.
	disable, inject, clip := true, false, "none"
	if u != nil {
		disable, inject = !u.Windows, u.InputInjection
		if u.Clipboard != "" {
			clip = u.Clipboard
		}
	}
	m.req.UI = &UI{Disable: &disable, Clipboard: clip, Injection: &inject}
}

func (m *mapper) network(proxyAddr string) {
	const field = "network.mode"
	mode := m.r.Network
	if m.iso {
		switch mode {
		case policy.NetworkHost:
			t := true
			m.req.Network = &Network{DefaultPolicy: "allow", AllowLocalNetwork: &t}
			m.add(provider.SeverityInfo, "network", field, "host: isolation_session runs with default-allow egress and local-network access (network.defaultPolicy allow, allowLocalNetwork true), unfiltered")
		default:
			m.add(provider.SeverityError, "network", field, "%s: isolation_session cannot filter the network (it requires default-allow egress); only an explicit mode: host is accepted, or use the process_container backend", mode)
		}
		return
	}
	if m.r.Egress.UnixSocketsMode() == policy.UnixSocketsDeny {
		m.add(provider.SeverityWarning, "network", "network.unix_sockets", "deny is not enforced: MXC has no way to refuse socket(AF_UNIX); on Windows a unix socket is a file, so the workload reaches only those the path grants let it open (write unix_sockets: allow to say so)")
	}
	switch mode {
	case policy.NetworkNone:
		m.req.Network = &Network{Egress: &Egress{Default: "deny"}, Ingress: &Ingress{Default: "deny", HostLoopback: "deny"}}
	case policy.NetworkProxy:
		port, err := proxyPort(proxyAddr)
		if err != nil {
			m.add(provider.SeverityError, "network", field, "proxy: %v", err)
			return
		}
		// MXC 0.8 "model 2": egress denied with no rules, and the one
		// loopback proxy Corral serves for this sandbox reachable. The
		// proxy enforces the policy's endpoints on the host. The proxy
		// credentials are per sandbox and are the runner's to add (with
		// the *_PROXY environment, and redacted from output): the
		// document and the plan never carry a secret.
		m.req.Network = &Network{Egress: &Egress{Default: "deny"}, Ingress: &Ingress{Default: "deny"}}
		m.req.RuntimeConfig = &RuntimeConfig{NetworkProxy: "http://127.0.0.1:" + strconv.Itoa(port)}
		m.add(provider.SeverityWarning, "network", field, "proxy: the sandbox reaches Corral's egress proxy on host loopback 127.0.0.1:%d, and MXC's loopback reach covers other services listening on the host's loopback too", port)
		m.inspected()
	default:
		m.add(provider.SeverityError, "network", field, "%s: process_container offers network none and proxy only (it never runs with default-allow egress)", mode)
	}
}

// inspected refuses allow entries whose TLS the proxy would terminate
// (tls: inspect, or L7 rules): their clients must trust the sandbox's
// CA, and Corral cannot give an MXC sandbox its trust bundle yet
// (provider.ProvisionOptions.Trust: no mount, and Windows tools read the
// certificate store), so every inspected connection would fail.
func (m *mapper) inspected() {
	for i, e := range m.r.Egress.Allow {
		if e.Inspected() {
			m.add(provider.SeverityError, "network", fmt.Sprintf("network.allow[%d]", i), "%s: an inspected host (tls: inspect, or access/rules/deny_rules) needs the sandbox to trust Corral's egress CA, which mxc cannot install in the sandbox yet; use tls: passthrough without L7 rules, or the linux or docker provider", e.Host)
		}
	}
}

// credentials refuses every credential of the policy: the proxy puts a
// credential's value in only over TLS it terminates (an inspected
// endpoint), which needs the sandbox to trust Corral's egress CA, and
// Corral cannot give an MXC sandbox its trust bundle yet (inspected).
// Refused on either backend, network mode or not: a placeholder nobody
// substitutes is no credential.
func (m *mapper) credentials() {
	for _, c := range m.r.Credentials {
		m.add(provider.SeverityError, "credentials", c.Field, "credential %q: its value goes only into inspected requests (tls: inspect), which need the sandbox to trust Corral's egress CA, and mxc cannot install it in the sandbox yet; use the linux or docker provider for a policy with credentials", c.Name)
	}
}

// proxyPort checks that addr is a loopback IPv4 listener with a port.
func proxyPort(addr string) (int, error) {
	if addr == "" {
		return 0, fmt.Errorf("no per-sandbox egress proxy listener address was given")
	}
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, fmt.Errorf("proxy listener %q: %v", addr, err)
	}
	if host != "127.0.0.1" {
		return 0, fmt.Errorf("proxy listener %q is not on 127.0.0.1 (the only loopback address MXC's proxy model reaches)", addr)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 {
		return 0, fmt.Errorf("proxy listener %q has no valid port", addr)
	}
	return port, nil
}

func (m *mapper) process() {
	r := m.r
	if r.RunAs != "" {
		m.add(provider.SeverityError, "process", "process.run_as_user", "%q: mxc has no enforced Windows equivalent of running as another user", r.RunAs)
	}
	// (run_as_group, when the policy gains it, maps the same way.)
	if len(r.Env) > 0 {
		m.req.Process.Env = append([]string(nil), r.Env...)
	}
	if !m.iso && privateTemp(r) {
		m.add(provider.SeverityInfo, "process", "process.env", "TEMP and TMP name a folder of the sandbox's own, made read-write at provision and removed after the run")
	}
	lim := r.Limits
	if lim.Timeout > 0 {
		ms := time.Duration(lim.Timeout).Milliseconds()
		if ms < 1 {
			ms = 1
		}
		if ms > math.MaxUint32 {
			m.add(provider.SeverityWarning, "process", "process.limits.timeout", "%s is longer than MXC's largest timeout; it is capped at %s", lim.Timeout, time.Duration(math.MaxUint32)*time.Millisecond)
			ms = math.MaxUint32
		}
		v := uint32(ms)
		m.req.Process.Timeout = &v
	}
	unenforced := func(name string, v any) {
		m.add(provider.SeverityWarning, "process", "process.limits."+name, "%s limit %v is not enforced: MXC has no %s limit", name, v, name)
	}
	if lim.Memory > 0 {
		unenforced("memory", lim.Memory)
	}
	if lim.Pids > 0 {
		unenforced("pids", lim.Pids)
	}
	if lim.CPU > 0 {
		unenforced("cpu", lim.CPU)
	}
	if lim.Nofile > 0 {
		unenforced("nofile", lim.Nofile)
	}
}

// MarshalJSON shows the plan (corral policy explain -o json) with the
// environment's values masked: explain output ends up in logs, and the
// values may be secrets.
func (d Details) MarshalJSON() ([]byte, error) {
	type plain Details
	out := plain(d)
	if d.Request != nil && d.Request.Process != nil && len(d.Request.Process.Env) > 0 {
		req := cloneRequest(d.Request)
		env := make([]string, len(req.Process.Env))
		for i, kv := range req.Process.Env {
			name, _, _ := strings.Cut(kv, "=")
			env[i] = name + "=[REDACTED]"
		}
		req.Process.Env = env
		out.Request = req
	}
	return json.Marshal(out)
}

// Package policy defines Corral's declarative sandbox policy (version 1):
// what a sandboxed workload may read, write, reach on the network and use of
// the machine. It loads policies from YAML or JSON with file:line:column
// errors, validates and canonicalises them, and supplies the built-in default.
//
// A policy file looks like this (every section is optional except version;
// quote "{workdir}/..." in YAML flow lists; Schema returns the JSON Schema):
//
//	version: 1
//	filesystem:
//	  read_only: [/usr, /etc, {path: /opt/tools, optional: true}]
//	  read_write: [~/.cache/go-build, "{workdir}/../x"]  # error: no ".."
//	  deny: [~/.aws]
//	  include_workdir: true               # default
//	  protected: [.git/hooks, .envrc]     # default: DefaultProtected
//	network:
//	  mode: none                          # none (default) or host
//	process:
//	  env: {pass: [PATH, LANG, "LC_*"], set: {CI: "1"}}
//	  run_as_user: builder
//	  limits: {memory: 2G, pids: 1024, cpu: 1.5, nofile: 4096, timeout: 30m}
//	layers:
//	  landlock: optional                  # others stay required
//	docker: {image: corral/base:1}        # docker provider only
//	consent:                              # what the workload may ask for live
//	  folders: {ask: ["~/src/**"], never: [~/.ssh]}
//
// Load and Parse decode strictly and run the static checks (Validate);
// Resolve then checks the policy against the host and a caller (Context)
// and produces the Resolved form that providers map. Default is used when
// no file is given.
//
// The package imports nothing else of the project.
package policy

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Version is the only policy schema version this package understands.
const Version = 1

// Policy is one sandbox policy. The zero value is not valid; use Load,
// Parse or Default and then Resolve against a host context.
type Policy struct {
	Version    int        `json:"version" yaml:"version"`
	Filesystem Filesystem `json:"filesystem" yaml:"filesystem"`
	Network    Network    `json:"network" yaml:"network"`
	Process    Process    `json:"process" yaml:"process"`
	Layers     Layers     `json:"layers" yaml:"layers"`
	// Credentials stay host-side: the sandbox sees placeholders, the
	// egress proxy substitutes the values for their endpoints
	// (credentials.go).
	Credentials []Credential `json:"credentials,omitempty" yaml:"credentials"`
	// Consent is the ceiling of what the workload may ask a person for
	// while it runs (consent.go); nil: nothing.
	Consent *Consent `json:"consent,omitempty" yaml:"consent"`
	// UI is what the workload may do with the desktop (providers that
	// have one, e.g. mxc). Nil means the restrictive posture: no windows,
	// no clipboard, no input injection.
	UI *UI `json:"ui,omitempty" yaml:"ui"`
	// Docker is the docker provider's own section; other providers
	// ignore it. Nil means the defaults (DefaultDockerImage).
	Docker *Docker `json:"docker,omitempty" yaml:"docker"`

	file string              // the file it was parsed from, for error messages
	pos  map[string]position // field path -> position of its value in file
	os   OS                  // the platform its paths are written for; "" is HostOS
}

// OS is the platform the policy's paths are written for (ParseFor,
// DefaultFor): HostOS unless it was parsed or built for another.
func (p *Policy) OS() OS {
	if p.os == "" {
		return HostOS()
	}
	return p.os
}

// UI is the ui section. Omitted fields deny.
type UI struct {
	Windows        bool   `json:"windows,omitempty" yaml:"windows"`                 // may create windows
	Clipboard      string `json:"clipboard,omitempty" yaml:"clipboard"`             // none (default), read, write, all
	InputInjection bool   `json:"input_injection,omitempty" yaml:"input_injection"` // may inject input into other windows
}

// DefaultDockerImage is the image the docker provider uses when neither
// the policy nor --image names one: the base image `corral image
// build-base` builds from the host's Debian packages.
const DefaultDockerImage = "corral/base:1"

// Docker is the docker section: settings only the docker provider reads.
type Docker struct {
	// Image is the image reference the container runs (its system
	// directories serve the policy's read_only grants of them). It must
	// already be on the daemon: Corral never pulls.
	Image string `json:"image,omitempty" yaml:"image"`
}

// Source returns the file name the policy was parsed from ("" for Default
// or a policy built in code).
func (p *Policy) Source() string { return p.file }

// Position returns "FILE:LINE:COL" of field (a field path such as
// "layers.cgroups" or "filesystem.read_only[2]") in the file the policy
// came from, or of its nearest written ancestor; "" when the policy was not
// read from a file or nothing on the path was written.
func (p *Policy) Position(field string) string {
	if p == nil || p.file == "" {
		return ""
	}
	if pos, ok := p.nearest(field); ok {
		return fmt.Sprintf("%s:%d:%d", p.file, pos.line, pos.col)
	}
	return ""
}

// nearest is the position of field, or of its nearest written ancestor.
func (p *Policy) nearest(field string) (position, bool) {
	for f := field; f != ""; {
		if pos, ok := p.pos[f]; ok {
			return pos, true
		}
		i := strings.LastIndexAny(f, ".[")
		if i < 0 {
			break
		}
		f = f[:i]
	}
	return position{}, false
}

// Filesystem lists path grants. Each path is absolute ("/..."), or starts
// with "~" / "~/" (the caller's home) or "{workdir}"; relative paths, ".."
// components, NUL bytes and /proc/self, /proc/thread-self, /proc/<pid>
// paths are errors. Rules follow symlinks: a grant applies to the canonical
// target. When one canonical path is named in several lists, deny beats
// read_only beats read_write; otherwise the most specific (deepest) path
// wins, so {workdir}/vendor in read_only stays read-only inside a
// read-write workdir. Anything not granted is invisible to the workload.
type Filesystem struct {
	ReadOnly  []PathRule `json:"read_only,omitempty" yaml:"read_only"`
	ReadWrite []PathRule `json:"read_write,omitempty" yaml:"read_write"`
	Deny      []PathRule `json:"deny,omitempty" yaml:"deny"`
	// IncludeWorkdir grants the working directory read-write (default true).
	IncludeWorkdir *bool `json:"include_workdir,omitempty" yaml:"include_workdir"`
	// Protected paths stay read-only inside writable roots. An absolute
	// entry names one path; a relative entry (".git/hooks") is matched under
	// every read-write root (not the home: the sandbox home is a private,
	// empty tmpfs). Entries that do not exist are reported in
	// Resolved.Skipped. Nil means DefaultProtected; an empty list disables
	// protection (so this field is never omitted from JSON).
	Protected []string `json:"protected" yaml:"protected"`
	// Git says how much of a repository's .git directory the workload may
	// change: GitReadOnly (the default, also when empty) keeps all of it
	// read-only; GitCommit lets it commit (GitCommitProtected lists what
	// stays read-only). It has effect only while ".git" is protected.
	Git GitMode `json:"git,omitempty" yaml:"git"`
}

// GitMode is the filesystem.git setting.
type GitMode string

const (
	GitReadOnly GitMode = "read-only" // all of .git read-only
	GitCommit   GitMode = "commit"    // objects, refs, index and logs writable; hooks, config, info, modules read-only
)

// PathRule is one path grant. In YAML it is either a plain string or a
// mapping {path: P, optional: true}. A missing path is an error unless
// Optional is set.
type PathRule struct {
	Path     string `json:"path" yaml:"path"`
	Optional bool   `json:"optional,omitempty" yaml:"optional"`
}

// NetworkMode selects how the sandbox reaches the network.
type NetworkMode string

const (
	NetworkNone  NetworkMode = "none"  // own network namespace, no interface up
	NetworkHost  NetworkMode = "host"  // the host's network, unfiltered
	NetworkProxy NetworkMode = "proxy" // own network namespace; Corral's egress proxy is the only way out
)

// Network is the network section.
type Network struct {
	Mode NetworkMode `json:"mode,omitempty" yaml:"mode"`
	// Allow lists the endpoints the egress proxy may reach (mode proxy).
	Allow []Endpoint `json:"allow,omitempty" yaml:"allow"`
	// Deny lists endpoints refused even when an allow rule matches.
	Deny []Endpoint `json:"deny,omitempty" yaml:"deny"`
	// AllowPrivate lists IP/CIDR endpoints the proxy may dial although
	// they are loopback, private or link-local (e.g. a local model server).
	AllowPrivate []Endpoint `json:"allow_private,omitempty" yaml:"allow_private"`
	// Hosts maps names to IP literals, consulted by the proxy before DNS.
	Hosts map[string]string `json:"hosts,omitempty" yaml:"hosts"`
	// UpstreamCA is a PEM file of certificates the proxy trusts, besides
	// the host's roots, when it verifies an inspected host's certificate
	// (a private CA). Read by corral at start, outside the sandbox.
	UpstreamCA string `json:"upstream_ca,omitempty" yaml:"upstream_ca"`
	// UnixSockets is whether the workload may make unix sockets that
	// reach others by name (UnixSocketsDeny, UnixSocketsAllow); empty
	// means DefaultUnixSockets. It applies in every mode.
	UnixSockets UnixSockets `json:"unix_sockets,omitempty" yaml:"unix_sockets"`
}

// Endpoint is a host with ports. Host is an exact name, a wildcard first
// label ("*.example.com": exactly one label below example.com;
// "**.example.com": one or more), an IP literal or a CIDR. Empty Ports
// means 80 and 443 (for allow_private: any port). SingleLabel must be set
// for an allow entry whose host is a single label other than localhost
// ("intranet"); deny entries never need it.
//
// An allow entry may carry L7 rules, applied to each HTTP request the
// proxy sees for the host: over TLS it terminates the connection with the
// sandbox's CA (inspection), over plain HTTP (port 80) it reads the
// request as it forwards it. Access and Rules are two ways to say what
// may pass (not both); DenyRules win over either.
type Endpoint struct {
	Host        string `json:"host" yaml:"host"`
	Ports       []int  `json:"ports,omitempty" yaml:"ports"`
	SingleLabel bool   `json:"single_label,omitempty" yaml:"single_label"`
	// TLS is inspect or passthrough; empty means inspect when the entry
	// has L7 rules, else passthrough (the tunnel is spliced unread).
	TLS TLSMode `json:"tls,omitempty" yaml:"tls"`
	// Access is a method preset: read-only (GET, HEAD, OPTIONS),
	// read-write (also POST, PUT, PATCH) or full (every method).
	Access HTTPAccess `json:"access,omitempty" yaml:"access"`
	// Rules, when set, is an allow list: a request passes only when one
	// rule matches it.
	Rules []HTTPRule `json:"rules,omitempty" yaml:"rules"`
	// DenyRules refuse the requests they match, whatever Access or Rules
	// say.
	DenyRules []HTTPRule `json:"deny_rules,omitempty" yaml:"deny_rules"`
}

// Inspected reports whether the proxy terminates TLS for e: tls: inspect,
// or L7 rules without tls: passthrough (which validation refuses).
func (e Endpoint) Inspected() bool {
	return e.TLS == TLSInspect || e.TLS == "" && e.HasL7()
}

// HasL7 reports whether e carries L7 rules.
func (e Endpoint) HasL7() bool {
	return e.Access != "" || len(e.Rules) > 0 || len(e.DenyRules) > 0
}

// TLSMode says whether the proxy terminates an allow entry's TLS.
type TLSMode string

const (
	TLSInspect     TLSMode = "inspect"
	TLSPassthrough TLSMode = "passthrough"
)

// HTTPAccess is an L7 method preset (OpenShell's access values).
type HTTPAccess string

const (
	HTTPReadOnly  HTTPAccess = "read-only"  // GET, HEAD, OPTIONS
	HTTPReadWrite HTTPAccess = "read-write" // and POST, PUT, PATCH
	HTTPFull      HTTPAccess = "full"       // every method
)

// HTTPRule matches HTTP requests. Method is an RFC 9110 method (or
// PATCH, RFC 5789) or "*" (empty: any). Path is a glob over the request's
// path segments, starting with "/": "*" matches within one segment, a
// "**" segment any number of segments (empty: any path). Query maps a
// parameter name to globs ("*" any run of characters); a request matches
// when it has the parameter and every value of it matches one of them.
// A rule matches when all its parts do. Deny rules match more: method,
// path and query names compare without case, a trailing "/" is ignored,
// and one matching value of a parameter is enough (egress/l7 Decide).
type HTTPRule struct {
	Method string           `json:"method,omitempty" yaml:"method"`
	Path   string           `json:"path,omitempty" yaml:"path"`
	Query  map[string]Globs `json:"query,omitempty" yaml:"query"`
}

// Globs is a list of glob patterns; in a policy file one pattern may be
// written without the list.
type Globs []string

// Process is the process section: environment, identity and limits.
type Process struct {
	Env Env `json:"env" yaml:"env"`
	// RunAsUser is a user name or numeric uid for the workload. Root (0) is
	// rejected. Empty means the caller's uid, or, when the caller is root,
	// the owner of the workdir if that is not root, else "nobody".
	RunAsUser string `json:"run_as_user,omitempty" yaml:"run_as_user"`
	Limits    Limits `json:"limits" yaml:"limits"`
}

// Env says which variables reach the workload. Everything not passed or set
// is scrubbed.
type Env struct {
	// Pass is an allowlist of variable names copied from the caller. A
	// trailing "*" matches a prefix ("LC_*"). Nil means DefaultEnvPass; an
	// empty list passes nothing (so this field is never omitted from JSON).
	// HOME is never passed.
	Pass []string `json:"pass" yaml:"pass"`
	// Set assigns variables; it wins over Pass. HOME cannot be set.
	Set map[string]string `json:"set,omitempty" yaml:"set"`
}

// Limits are resource limits. Zero means "no limit" for that resource.
type Limits struct {
	// Memory in bytes (cgroup memory.max); written as a plain byte count or
	// "256M", "1.5G" (binary units, see ParseByteSize).
	Memory ByteSize `json:"memory,omitempty" yaml:"memory"`
	// Pids is the maximum number of tasks (cgroup pids.max).
	Pids int `json:"pids,omitempty" yaml:"pids"`
	// CPU is the CPU bandwidth in cores (1.5 = 150% of one core); at least
	// 0.01 when set.
	CPU float64 `json:"cpu,omitempty" yaml:"cpu"`
	// Nofile is RLIMIT_NOFILE (soft and hard).
	Nofile int `json:"nofile,omitempty" yaml:"nofile"`
	// Timeout is the wall-clock limit of the run; written as a Go duration
	// ("30s", "5m", "1h30m"); the integer 0 is also accepted.
	Timeout Duration `json:"timeout,omitempty" yaml:"timeout"`
}

// ByteSize is a size in bytes. In a policy file it is an integer (bytes) or
// a string parsed by ParseByteSize. It marshals to JSON as an integer.
type ByteSize int64

// String formats s with the largest binary unit that divides it ("2G").
func (s ByteSize) String() string {
	n := int64(s)
	for _, u := range []string{"T", "G", "M", "K"} {
		shift := uint(strings.Index("KMGT", u)+1) * 10
		if n != 0 && n%(1<<shift) == 0 {
			return strconv.FormatInt(n>>shift, 10) + u
		}
	}
	return strconv.FormatInt(n, 10)
}

// Duration is a time.Duration written as a Go duration string ("30s").
type Duration time.Duration

// String formats d as a Go duration ("1m30s").
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as a Go duration string, which Parse and
// UnmarshalJSON read back.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(strconv.Quote(d.String())), nil
}

// UnmarshalJSON reads what MarshalJSON writes (a Go duration string such
// as "1m30s"), or the number 0, as a policy file may write it.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if string(b) == "0" {
		*d = 0
		return nil
	}
	s, err := strconv.Unquote(string(b))
	if err != nil {
		return fmt.Errorf("duration %s: want a string such as \"30s\"", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Requirement says whether a layer must be applied.
type Requirement string

const (
	Required Requirement = "required"
	Optional Requirement = "optional"
)

// Layer names an enforcement mechanism.
type Layer string

const (
	LayerNamespaces Layer = "namespaces"
	LayerMounts     Layer = "mounts"
	LayerLandlock   Layer = "landlock"
	LayerSeccomp    Layer = "seccomp"
	LayerCgroups    Layer = "cgroups"
)

// AllLayers lists the layers in the order they are applied.
var AllLayers = []Layer{LayerNamespaces, LayerMounts, LayerLandlock, LayerSeccomp, LayerCgroups}

// Layers maps each layer to its requirement; an absent entry is Required.
// In a policy file: layers: {landlock: optional}.
type Layers map[Layer]Requirement

// Requirement returns the requirement of layer l (Required when unset).
func (ls Layers) Requirement(l Layer) Requirement {
	if r, ok := ls[l]; ok && r != "" {
		return r
	}
	return Required
}

package policy

// Credentials keep secrets host-side. The sandbox sees only a random
// placeholder (in an environment variable and/or a file); the egress proxy
// puts the real value in its place only in the places an endpoint names,
// only for requests to that endpoint that the network rules admitted, and
// only over inspected TLS (tls: inspect), so that nobody but the endpoint
// ever reads it. In a policy file:
//
//	credentials:
//	  - name: openai
//	    source: {env: OPENAI_API_KEY}          # or {file: ~/.openai}, {command: [pass, show, openai], timeout: 5s}, {stored: true}
//	    expose: {env: OPENAI_API_KEY}          # and/or {file: /run/secrets/openai}
//	    shape: "sk-{random}"                   # what the placeholder looks like
//	    endpoints:
//	      - host: api.openai.com               # must be an inspected allow entry
//	        path: /v1/                         # optional prefix
//	        header: "Authorization: Bearer {}" # the default when no place is named
//	  - name: github
//	    source: {command: [gh, auth, token]}
//	    expose: {env: GH_TOKEN}
//	    endpoints:
//	      - {host: github.com, basic: password}    # git over https
//	      - {host: api.github.com, header: "Authorization: token {}"}
//
// docs/egress.md ("Credentials") has the rules of substitution, mismatch
// and the reflection guard.

// Credential is one entry of the credentials section.
type Credential struct {
	// Name identifies the credential in findings, the gateway's
	// --credential NAME=... and status: [a-z0-9][a-z0-9_-]*, unique.
	Name   string           `json:"name" yaml:"name"`
	Source CredentialSource `json:"source" yaml:"source"`
	Expose CredentialExpose `json:"expose" yaml:"expose"`
	// Shape is the placeholder's form: literal text around one
	// "{random}" (32 random letters and digits, 190 bits) or
	// "{random:N}" (N from 22 to 128), so that SDKs that check a key's
	// prefix accept it ("sk-{random}", "ghp_{random:36}"). Empty means
	// DefaultShape. The literal text is letters, digits, "-", "_" and ".".
	Shape     string               `json:"shape,omitempty" yaml:"shape"`
	Endpoints []CredentialEndpoint `json:"endpoints" yaml:"endpoints"`
	// OnMismatch is what the proxy does with a request that carries the
	// placeholder where it is not substituted (another host, another
	// header, the URL, a cookie; encoded or not): MismatchDeny (the
	// default) refuses it (403), MismatchForward sends it on with the
	// placeholder as it is. A placeholder in a request body is data (an
	// agent's transcript that quotes it) and is always forwarded as it
	// is. Either way the proxy records a finding, and the value never
	// goes anywhere but a named place of a matching endpoint.
	OnMismatch Mismatch `json:"on_mismatch,omitempty" yaml:"on_mismatch"`
}

// DefaultShape is the placeholder's form when Credential.Shape is empty.
const DefaultShape = "corral-{random}"

// Mismatch is a credential's on_mismatch setting.
type Mismatch string

const (
	MismatchDeny    Mismatch = "deny"
	MismatchForward Mismatch = "forward"
)

// CredentialSource is where corral reads the value, outside the sandbox,
// when the session starts (and again when a service's workload restarts).
// Exactly one field is set.
type CredentialSource struct {
	Env  string `json:"env,omitempty" yaml:"env"`   // a variable of the caller's environment
	File string `json:"file,omitempty" yaml:"file"` // a file ("~", "{workdir}" expand), no grant may show it to the sandbox
	// Command runs on the host (no shell), its standard output trimmed
	// of surrounding white space is the value; Timeout bounds it.
	Command []string `json:"command,omitempty" yaml:"command"`
	Timeout Duration `json:"timeout,omitempty" yaml:"timeout"` // command only; default DefaultCommandTimeout
	// Stored says the value is given to corral gateway at create
	// (corral sandbox create --credential NAME=...), which stores it and
	// never returns it; other front ends refuse it.
	Stored bool `json:"stored,omitempty" yaml:"stored"`
}

// Kind names the source: env, file, command or stored ("" for none).
func (s CredentialSource) Kind() string {
	switch {
	case s.Stored:
		return "stored"
	case s.File != "":
		return "file"
	case len(s.Command) > 0:
		return "command"
	case s.Env != "":
		return "env"
	}
	return ""
}

// DefaultCommandTimeout bounds a source command without a timeout.
const DefaultCommandTimeout = Duration(10e9)

// CredentialExpose is what the sandbox sees: the placeholder in an
// environment variable, a file, or both (at least one).
type CredentialExpose struct {
	Env string `json:"env,omitempty" yaml:"env"`
	// File is an absolute path inside the sandbox ("~" is the sandbox's
	// home) outside every filesystem grant; the provider puts a
	// read-only file holding the placeholder (no newline) there.
	File string `json:"file,omitempty" yaml:"file"`
}

// CredentialEndpoint is where the value may go: requests to Host on one
// of Ports whose canonical path starts with Path, in the places named.
// When none of Header, Basic, Query and Body is set, Header is
// DefaultCredentialHeader.
type CredentialEndpoint struct {
	// Host is an exact name or IP literal (no wildcards), which an
	// inspected allow entry must admit on every port.
	Host  string `json:"host" yaml:"host"`
	Ports []int  `json:"ports,omitempty" yaml:"ports"` // default [443]
	// Path is a prefix of the canonical path by whole segments ("/v1/"
	// and "/v1" match /v1 and /v1/x, not /v10): decoded, without query
	// or globs. Empty or "/" means any path.
	Path string `json:"path,omitempty" yaml:"path"`
	// Header is "Name: template", the template holding "{}" once: a
	// request header of that name whose value is the template with the
	// placeholder for "{}" (the template's text compared without case,
	// as auth schemes are, RFC 9110 11.1) gets the value instead.
	Header string `json:"header,omitempty" yaml:"header"`
	// Basic is "user" or "password": in Authorization: Basic (RFC 7617),
	// that half, when it is the placeholder, gets the value, and the
	// header is encoded again (git over https).
	Basic string `json:"basic,omitempty" yaml:"basic"`
	// Query names a query parameter whose value, when it is the
	// placeholder, gets the value.
	Query string `json:"query,omitempty" yaml:"query"`
	// Body, when set, substitutes every occurrence of the placeholder
	// in request bodies of at most Body.Max bytes (larger ones are
	// refused, 413), which are read whole to do it.
	Body *CredentialBody `json:"body,omitempty" yaml:"body"`
}

// DefaultCredentialHeader is an endpoint's place when it names none.
const DefaultCredentialHeader = "Authorization: Bearer {}"

// CredentialBody is an endpoint's body substitution.
type CredentialBody struct {
	Max ByteSize `json:"max,omitempty" yaml:"max"` // default DefaultBodyMax, at most MaxBodyMax
}

const (
	DefaultBodyMax ByteSize = 256 << 10
	MaxBodyMax     ByteSize = 16 << 20
)

// ResolvedCredential is a credential made concrete for one sandbox. Its
// Credential is the policy's entry with every default written out (Shape,
// OnMismatch, a command's Timeout, each endpoint's Ports, its place when
// it names none, Body.Max), in slices of its own.
type ResolvedCredential struct {
	Credential
	Field string `json:"field"` // "credentials[2]"
	// Placeholder is what the sandbox sees (not a secret: the value is
	// never in the sandbox). Resolve draws it at random, or takes
	// Context.Placeholders[Name] (a recovered sandbox keeps its own).
	Placeholder string `json:"placeholder"`
	// File is Expose.File with "~" expanded to the sandbox's home.
	File string `json:"file,omitempty"`
	// SourceFile is Source.File expanded and canonical (host side).
	SourceFile string `json:"source_file,omitempty"`
}

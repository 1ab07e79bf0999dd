package policy

// Context is what Resolve needs to know about the caller.
type Context struct {
	Home    string   // the caller's home directory, absolute ("~" expands to it)
	Workdir string   // the working directory, absolute ("{workdir}" expands to it)
	Environ []string // the caller's environment, "NAME=value"
}

// Access is the effective access to one path.
type Access string

const (
	AccessReadOnly  Access = "ro"
	AccessReadWrite Access = "rw"
	AccessDeny      Access = "deny"
)

// PathGrant is one canonical path with its effective access.
type PathGrant struct {
	Path   string `json:"path"`   // absolute, symlinks resolved, clean
	Access Access `json:"access"` // ro, rw or deny
	Dir    bool   `json:"dir"`    // true for a directory
	Field  string `json:"field"`  // where it came from, e.g. "filesystem.read_only[2]"
}

// Resolved is a policy made concrete for one caller: every path expanded,
// canonicalised and checked, precedence applied, environment computed. It is
// what providers map.
type Resolved struct {
	Policy  *Policy `json:"-"`
	Hash    string  `json:"policy_hash"` // sha256 of the canonical JSON of Policy, "sha256:<hex>"
	Home    string  `json:"home"`        // the caller's home; the sandbox gets an empty private home at this path
	Workdir string  `json:"workdir"`     // canonical working directory
	// Grants are sorted by Path (so a parent precedes its children); each
	// path appears once. Protected paths that exist appear here as ro
	// entries under their rw root.
	Grants []PathGrant `json:"grants"`
	// Skipped lists protected paths that did not exist (so nothing could be
	// bound over them), for the loss report.
	Skipped []string    `json:"skipped_protected,omitempty"`
	Env     []string    `json:"-"` // the workload's environment, sorted "NAME=value"; HOME not included
	Network NetworkMode `json:"network"`
	Limits  Limits      `json:"limits"`
	Layers  Layers      `json:"layers"`
	RunAs   string      `json:"run_as_user,omitempty"`
}

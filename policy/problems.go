package policy

import (
	"fmt"
	"strings"
)

// The static checks a policy file's values pass, exported for tools that
// write policies (policyimport) so that what they write is refused or
// accepted by the same rules as `corral policy validate`. Each returns
// an empty msg for an acceptable value, else what is wrong and a hint.

// PathProblem checks s as a Linux policy path (filesystem.read_only,
// read_write, deny; with allowRelative, filesystem.protected): it starts
// with /, ~/ or {workdir}, has no ".." component, no NUL, no /proc/self or
// /proc/<pid> path and no placeholder but a leading {workdir}
// (checkPathSyntax; docs/policy.md "filesystem"). Existence, links and
// the read-write refusals are decided when the policy is resolved.
func PathProblem(s string, allowRelative bool) (msg, hint string) {
	return checkPathSyntax(s, allowRelative)
}

// EndpointHostProblem checks host as a network.allow or network.deny host
// (ipOnly: an allow_private one, an IP literal or CIDR): the egress proxy's
// rules (checkEndpointHost; docs/egress.md "Policy"). It does not check
// the single-label rule of allow entries: see IsSingleLabel.
func EndpointHostProblem(host string, ipOnly bool) (msg, hint string) {
	return checkEndpointHost(host, ipOnly)
}

// IsSingleLabel reports whether host, accepted by EndpointHostProblem, is
// a single DNS label other than localhost (no dot, no wildcard, not an IP
// or CIDR): an allow entry for it must say single_label: true.
func IsSingleLabel(host string) bool { return singleLabel(host) }

// PortProblem checks a network entry's port: a TCP port, 1-65535.
func PortProblem(port int) (msg, hint string) {
	if port < 1 || port > 65535 {
		return fmt.Sprintf("port %d is outside 1-65535", port), "use a TCP port number"
	}
	return "", ""
}

// EnvPassProblem checks a process.env.pass entry: a variable name or a
// prefix ending in "*" (LC_*), without '=', another '*' or NUL, and not
// HOME (the sandbox's own).
func EnvPassProblem(name string) (msg, hint string) {
	switch pattern := strings.TrimSuffix(name, "*"); {
	case name == "":
		return "empty variable name", "remove the entry"
	case strings.ContainsAny(pattern, "=*\x00"):
		return fmt.Sprintf("invalid variable name or pattern %q", name), "write a name such as LANG, or a prefix ending in * such as LC_*"
	case name == "HOME":
		return "HOME cannot be passed", "the sandbox sets HOME to its own private home; remove the entry"
	}
	return "", ""
}

// EnvSetProblem checks a process.env.set entry: the name is not empty,
// has no '=', '*' or NUL and is not HOME; the value has no NUL. inKey
// reports whether the problem is the name's (else the value's).
func EnvSetProblem(name, value string) (msg, hint string, inKey bool) {
	switch {
	case name == "" || strings.ContainsAny(name, "=*\x00"):
		return fmt.Sprintf("invalid variable name %q", name), "variable names cannot be empty or contain '=', '*' or NUL", true
	case name == "HOME":
		return "HOME cannot be set", "the sandbox sets HOME to its own private home; remove the entry", true
	case strings.ContainsRune(value, 0):
		return "value contains a NUL byte", "", false
	}
	return "", "", false
}

package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Finding is one remark of Lint on a resolved policy, shaped as a
// provider's loss-report item (provider.LintLoss converts it).
type Finding struct {
	Severity string // FindingWarning or FindingInfo
	Area     string // filesystem, process, network
	Field    string // the policy field it concerns, e.g. "filesystem.read_only"
	Message  string
}

// Severities of a Finding: the loss report's (provider.Severity).
const (
	FindingWarning = "warning" // the policy does less than it likely means
	FindingInfo    = "info"    // worth knowing
)

// Lint makes the checks of a resolved policy that hold whatever provider
// maps it, which the linux and docker providers each made in their Map:
//   - credentials of the real home that a grant of ~ or of a tree inside
//     it exposes (warning; grants above ~ do not count, the private home
//     covers them);
//   - /usr not visible, so most commands will not be found (warning;
//     not on Windows, which has no /usr);
//   - protected paths absent with their directory, so no placeholder
//     holds them (info).
func Lint(r *Resolved) []Finding {
	var out []Finding
	add := func(sev, area, field, format string, args ...any) {
		out = append(out, Finding{Severity: sev, Area: area, Field: field, Message: fmt.Sprintf(format, args...)})
	}
	if exposed := r.exposedCredentials(); len(exposed) > 0 {
		add(FindingWarning, "filesystem", "filesystem", "credentials in the real home are visible to the workload through a grant: %s (add them to filesystem.deny unless the workload needs them)", strings.Join(exposed, ", "))
	}
	if (r.Policy == nil || r.Policy.OS() != OSWindows) && !r.Visible("/usr/bin") {
		add(FindingWarning, "filesystem", "filesystem.read_only", "/usr is not granted, so most commands will not be found inside (a read_only list replaces the default one: keep /usr, /etc and the other system directories in it; see corral policy default)")
	}
	if _, absent := r.SkippedLinks(); len(absent) > 0 {
		add(FindingInfo, "filesystem", "filesystem.protected", "%d protected paths are absent with their directory, so no placeholder holds them (one the workload creates is reported after the run): %s", len(absent), strings.Join(absent, ", "))
	}
	return out
}

// credentialPaths are well-known credential stores under a home directory
// (SSH and GnuPG keys, cloud, container, Kubernetes and package-registry
// tokens, git and netrc passwords), relative to it.
var credentialPaths = []string{".ssh", ".gnupg", ".aws", ".azure", ".config/gcloud", ".config/gh", ".kube",
	".docker/config.json", ".netrc", ".git-credentials", ".npmrc", ".pypirc"}

// exposedCredentials lists ("~/.ssh", ...) the credentialPaths of the real
// home that exist and that a grant of ~ or of a tree inside it makes
// visible, other than a grant of that very path (which says the workload
// needs it). Grants above ~ do not count: the private home covers them.
func (r *Resolved) exposedCredentials() []string {
	if r.Home == "" || r.Home == "/" {
		return nil
	}
	home := r.Home // grants are canonical; a home may be a link (/home -> /var/home)
	if real, err := filepath.EvalSymlinks(home); err == nil {
		home = real
	}
	var out []string
	for _, c := range credentialPaths {
		p := filepath.Join(home, filepath.FromSlash(c))
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		best := r.Covering(p)
		byName := best.Path == p && !strings.HasPrefix(best.Field, "filesystem.protected")
		if Within(best.Path, home) && best.Access != AccessDeny && !byName {
			out = append(out, "~/"+c)
		}
	}
	return out
}

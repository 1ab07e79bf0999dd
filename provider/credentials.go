package provider

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/corral-sandbox/corral/policy"
)

// A credential exposed as a file (policy.CredentialExpose.File) is shown
// to the sandbox as a read-only file holding its placeholder, exactly
// (no newline): the provider writes it in its state directory for the
// sandbox, which no grant reaches (created only if absent, following no
// symlink, mode 0444, as the trust files are), and binds it read-only at
// the credential's path inside. Directories above that path the
// sandbox's tree lacks are made in the sandbox's own tree, never on a
// host path, and a path that cannot take the bind is an error, never a
// sandbox without the file. The file is removed with the state
// directory, after the run (a persistent sandbox's, at Destroy).

// CredentialFile is one credential's placeholder file.
type CredentialFile struct {
	Credential string // the credential's name
	Field      string // its policy field ("credentials[2]")
	Name       string // the file's name in a provider's state directory
	Path       string // where it goes inside (policy.ResolvedCredential.File)
	Data       []byte // the placeholder
}

// CredentialFiles are r's credentials' placeholder files, in the
// policy's order; an error (naming the credential's field) for a path
// inside that is not absolute and clean, a name that could name another
// file, or an empty placeholder.
func CredentialFiles(r *policy.Resolved) ([]CredentialFile, error) {
	var out []CredentialFile
	for _, c := range r.Credentials {
		if c.File == "" {
			continue
		}
		f, err := credentialFile(c)
		if err != nil {
			return nil, fmt.Errorf("%s.expose.file: %w", c.Field, err)
		}
		out = append(out, f)
	}
	return out, nil
}

func credentialFile(c policy.ResolvedCredential) (CredentialFile, error) {
	if !path.IsAbs(c.File) || path.Clean(c.File) != c.File || c.File == "/" {
		return CredentialFile{}, fmt.Errorf("%q is not an absolute, clean path of a file inside the sandbox", c.File)
	}
	// The name is the policy's [a-z0-9][a-z0-9_-]*; anything else could
	// name another file of the state directory.
	if c.Name == "" || strings.Trim(c.Name, "abcdefghijklmnopqrstuvwxyz0123456789_-") != "" {
		return CredentialFile{}, fmt.Errorf("credential name %q is not of the form [a-z0-9][a-z0-9_-]*", c.Name)
	}
	if c.Placeholder == "" {
		return CredentialFile{}, fmt.Errorf("credential %q has no placeholder", c.Name)
	}
	return CredentialFile{Credential: c.Name, Field: c.Field, Name: "credential-" + c.Name, Path: c.File, Data: []byte(c.Placeholder)}, nil
}

// providerSetEnv are the variables every sandbox with governed egress
// gets from its provider (ProxyEnvAuth, TrustEnv, the Java options),
// which win over the workload's environment.
func providerSetEnv() []string {
	var out []string
	for _, kv := range append(append(ProxyEnvAuth(1, "u", "p"), TrustEnv(TrustBundlePath)...), "JAVA_TOOL_OPTIONS=") {
		k, _, _ := strings.Cut(kv, "=")
		out = append(out, k)
	}
	return out
}

// CredentialLoss is what Map says of r's credentials: an exposed variable
// the provider sets itself (the placeholder would never be seen: an
// error), and where each file goes (info; never the placeholder), or why
// it cannot (an error).
func CredentialLoss(r *policy.Resolved) LossReport {
	var out LossReport
	set := providerSetEnv()
	for _, c := range r.Credentials {
		if e := c.Expose.Env; e != "" && slices.Contains(set, e) {
			out = append(out, Loss{Severity: SeverityError, Area: "credentials", Field: c.Field + ".expose.env",
				Message: fmt.Sprintf("credential %q: the provider sets %s itself (governed egress, or the sandbox's trust), so the workload would never see the placeholder there: expose it under another name", c.Name, e)})
		}
		if c.File == "" {
			continue
		}
		field := c.Field + ".expose.file"
		if _, err := credentialFile(c); err != nil {
			out = append(out, Loss{Severity: SeverityError, Area: "credentials", Field: field, Message: err.Error()})
			continue
		}
		out = append(out, Loss{Severity: SeverityInfo, Area: "credentials", Field: field,
			Message: fmt.Sprintf("credential %q: a read-only file holding its placeholder (not the value, which stays with corral) is bound at %s; the directories above it that the sandbox lacks are made in the sandbox's own tree", c.Name, c.File)})
	}
	return out
}

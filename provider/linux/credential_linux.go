//go:build linux

package linux

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/corral-sandbox/corral/internal/trustfile"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// A credential exposed as a file (provider.CredentialFiles) is written,
// like the trust files, in the sandbox's state directory (0444,
// O_EXCL|O_NOFOLLOW, a directory no grant reaches: stateGrant) and bound
// read-only at its path inside (MountCredential, after every other
// mount), which must lie in a tree the sandbox's init made itself (the
// root, a private tmpfs), where the directories it lacks are made;
// Landlock lets it be read. A persistent sandbox's stay while its init
// runs (Recover reattaches to the same mounts) and go with its state
// directory at Destroy.

// hasCredentialFiles reports whether r exposes a credential as a file.
func hasCredentialFiles(r *policy.Resolved) bool {
	return slices.ContainsFunc(r.Credentials, func(c policy.ResolvedCredential) bool { return c.File != "" })
}

// credentialLoss is what Map says of r's credential files
// (provider.CredentialLoss), and the error of a grant that shows
// StateBase, where they are kept (trustLoss says it for a policy that
// inspects egress).
func credentialLoss(r *policy.Resolved) []provider.Loss {
	loss := provider.CredentialLoss(r)
	if !hasCredentialFiles(r) {
		return loss
	}
	if err := refuseStateGrant(r); err != nil && !r.InspectsEgress() {
		loss = append(loss, provider.Loss{Severity: provider.SeverityError, Area: "filesystem", Field: stateGrant(r, StateBase()).Field, Message: err.Error()})
	}
	return loss
}

// credentialSpec writes r's credential files to state directory dir and
// returns a copy of spec that binds them.
func credentialSpec(spec *InitSpec, r *policy.Resolved, dir string) (*InitSpec, error) {
	files, err := provider.CredentialFiles(r)
	if err != nil {
		return nil, provider.Wrap(provider.CodePolicyRejected, "linux", err)
	}
	if len(files) == 0 {
		return spec, nil
	}
	cp := *spec
	cp.Mounts, cp.Landlock.ROFiles = slices.Clip(cp.Mounts), slices.Clip(cp.Landlock.ROFiles)
	for _, f := range files {
		src := filepath.Join(dir, f.Name)
		if err := trustfile.Create(src, f.Data); err != nil {
			return nil, provider.Wrap(provider.CodeProvisionFailed, fmt.Sprintf("linux: credential %q", f.Credential), err)
		}
		// As root, the supervisor clones it (dir is root's, 0700).
		cp.Mounts = append(cp.Mounts, MountSpec{Kind: MountCredential, Path: f.Path, Source: src, ReadOnly: true, HostClone: os.Getuid() == 0,
			Field: fmt.Sprintf("%s.expose.file (credential %q)", f.Field, f.Credential)})
		cp.Landlock.ROFiles = append(cp.Landlock.ROFiles, f.Path)
	}
	return &cp, nil
}

// credential binds a credential's file (the detached read-only mount fd)
// at m.Path: only in the sandbox's own tree (below the root or a private
// tmpfs init made, where mountpoint makes what is missing), never over
// another mount or on a host path's bind, which would change what a
// grant shows or create the name on the host.
func (t *tree) credential(fd int, m MountSpec) error {
	if slices.Contains(t.placed, m.Path) {
		return fmt.Errorf("the credential's file would cover the mount at %s", m.Path)
	}
	if in := t.enclosing(m.Path); !t.isSynthetic(in) {
		return fmt.Errorf("the credential's file %s would be on %s, which is not the sandbox's own tree (a grant, a mask or a trust file): it goes only where no grant reaches", m.Path, in)
	}
	return t.attach(fd, m.Path, false)
}

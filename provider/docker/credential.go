//go:build linux

package docker

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/corral-sandbox/corral/internal/trustfile"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// A credential exposed as a file (provider.CredentialFiles) is written by
// Provision in the container's own state dir (0444, O_EXCL|O_NOFOLLOW, in
// the dir just made, as the trust files: addCredentials) and bound
// read-only at its path, where Map found it can go (credentialPlace): on
// a private tmpfs or in the image's tree, where the runtime creates what
// is missing in the container's own layer, never on a host bind; Landlock
// lets it be read and Start verifies each from outside (verifyTrust). No
// other container binds it. A persistent container's saved plan names
// them, and Destroy removes them with its state dir.

// mapCredentials plans the binds of r's credential files (Spec.Credentials),
// with an error loss for each that cannot go where the policy says, and
// says where each goes (provider.CredentialLoss). After mapTrust: a
// credential's file may not take a trust file's place.
func (p *Provider) mapCredentials(ctx context.Context, r *policy.Resolved, sp *Spec, add func(provider.Severity, string, string, string, ...any)) {
	for _, l := range provider.CredentialLoss(r) {
		add(l.Severity, l.Area, l.Field, "%s", l.Message)
	}
	files, err := provider.CredentialFiles(r)
	if err != nil || len(files) == 0 || sp.ImageID == "" { // an error, or no image: said already
		return
	}
	var paths []string
	for _, f := range files {
		paths = append(paths, f.Path)
	}
	inImage, err := p.imagePaths(ctx, sp.ImageID, paths...)
	if err != nil {
		add(provider.SeverityError, "credentials", "credentials", "where the container's credential files can go is not known: %v", err)
		return
	}
	for _, f := range files {
		if err := credentialPlace(sp, f.Path, func(x string) imagePath { return inImage[x] }); err != nil {
			add(provider.SeverityError, "credentials", f.Field+".expose.file", "credential %q: %v", f.Credential, err)
			continue
		}
		sp.Credentials = append(sp.Credentials, Trust{Targets: []string{f.Path}})
		sp.Shim.Landlock.ROFiles = append(sp.Shim.Landlock.ROFiles, f.Path)
		if t := tmpfsOf(sp, f.Path); t != "" && filepath.Dir(f.Path) != t {
			add(provider.SeverityInfo, "credentials", f.Field+".expose.file", "credential %q: the directories between %s and its file %s are made by Docker, as root's: the workload cannot add files beside it (a path directly in %s has none)", f.Credential, t, f.Path, t)
		}
	}
}

// tmpfsOf is the path of the innermost tmpfs of sp that holds p nearer
// than any bind ("" for none).
func tmpfsOf(sp *Spec, p string) string {
	if _, tmpfs := sp.mountOf(p); !tmpfs {
		return ""
	}
	best := ""
	for _, t := range sp.Tmpfs {
		if policy.Within(p, t.Path) && len(t.Path) > len(best) {
			best = t.Path
		}
	}
	return best
}

// credentialPlace says why a credential's file cannot be bound at file
// in sp's container (nil: it can): inside /.corral, at a place another
// file of corral's takes, over a mount, inside a host bind or a mask, or
// where the image's symlinks lead into one (resolve, as trustTargets
// does: the runtime would create the file on the host), or to something
// that is not a file.
func credentialPlace(sp *Spec, file string, resolve func(string) imagePath) error {
	if policy.Within(file, filepath.Dir(BinPath)) {
		return fmt.Errorf("%s is inside %s, corral's own", file, filepath.Dir(BinPath))
	}
	taken := slices.ContainsFunc(sp.Credentials, func(c Trust) bool { return slices.Contains(c.Targets, file) })
	for _, tr := range []*Trust{sp.Trust, sp.Store} {
		taken = taken || tr != nil && slices.Contains(tr.Targets, file)
	}
	if taken {
		return fmt.Errorf("%s is where another of corral's files goes (a trust file, another credential's)", file)
	}
	hostBind := func(p string) error {
		b, tmpfs := sp.mountOf(p)
		switch {
		case tmpfs && slices.ContainsFunc(sp.Tmpfs, func(t Tmpfs) bool { return t.Path == p }):
			return fmt.Errorf("%s is a tmpfs mount, which the file would cover", p)
		case tmpfs || b == nil:
			return nil
		case b.Target == p:
			return fmt.Errorf("%s is a bind of %s, which the file would cover", p, b.Field)
		case b.Mask:
			return fmt.Errorf("%s is inside the mask of %s (%s)", p, b.Target, b.Field)
		}
		return fmt.Errorf("%s is inside %s (%s), a host path: the file goes only where no grant reaches", p, b.Target, b.Field)
	}
	if err := hostBind(file); err != nil {
		return err
	}
	if _, tmpfs := sp.mountOf(file); tmpfs {
		return nil // a tmpfs starts empty
	}
	r := resolve(file)
	switch {
	case r.err != nil:
		return fmt.Errorf("%s: %v", file, r.err)
	case r.real == "":
		return fmt.Errorf("%s: not resolved in the image", file) // never: imagePaths resolved it
	case r.real != file:
		if err := hostBind(r.real); err != nil {
			return fmt.Errorf("the image's symlinks lead %s to %s, where the runtime would bind it: %v", file, r.real, err)
		}
		if policy.Within(r.real, filepath.Dir(BinPath)) {
			return fmt.Errorf("the image's symlinks lead %s into %s, corral's own", file, filepath.Dir(BinPath))
		}
	}
	return nil
}

// addCredentials writes the plan's credential files to the state dir
// and names them as their binds' sources.
func (s *Sandbox) addCredentials() error {
	files, err := provider.CredentialFiles(s.plan.Policy)
	if err != nil {
		return err
	}
	sp := s.spec
	if len(files) != len(sp.Credentials) {
		return provider.Errorf(provider.CodeInternal, "docker: the plan binds %d credential files, the policy has %d", len(sp.Credentials), len(files))
	}
	sp.Credentials = slices.Clone(sp.Credentials) // the plan stays as mapped
	for i, f := range files {
		if !slices.Equal(sp.Credentials[i].Targets, []string{f.Path}) {
			return provider.Errorf(provider.CodeInternal, "docker: the plan binds credential file %d at %v, the policy says %s", i, sp.Credentials[i].Targets, f.Path)
		}
		src := filepath.Join(s.state, f.Name)
		if err := trustfile.Create(src, f.Data); err != nil {
			return fmt.Errorf("credential %q: %w", f.Credential, err)
		}
		sp.Credentials[i].Source = src
	}
	return nil
}

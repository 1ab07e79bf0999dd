//go:build linux

package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// A container whose policy inspects egress gets its CA bundle
// (provider.ProvisionOptions.Trust) from a file in its state dir (made
// with O_EXCL|O_NOFOLLOW in the dir Provision just created, which only
// this uid can write and no grant may show: stateExposed), bound
// read-only at provider.TrustBundlePath and over the distro bundle paths
// where Map found they can go (trustTargets); every command gets
// provider.TrustEnv of the first, and Landlock lets the bundle be read.
// Start verifies each from outside (verifyTrust). SetTrust rewrites the
// same inode, which every bind shows at once.

// trustFile is the bundle's name in a sandbox's state dir.
const trustFile = "ca-bundle.pem"

// Trust is where a container's CA bundle is bound (Spec.Trust).
type Trust struct {
	Source  string   `json:"source"`  // the host file, in the state dir
	Targets []string `json:"targets"` // inside, each read-only; TrustEnv names the first
}

// inspects reports whether r's proxy terminates TLS for some allow entry.
func inspects(r *policy.Resolved) bool {
	return r.Network == policy.NetworkProxy && slices.ContainsFunc(r.Egress.Allow, policy.Endpoint.Inspected)
}

// trustTargets are the paths inside where the bundle goes, of
// provider.TrustBundlePath and provider.TrustBundlePaths in that order,
// and why others are left out (notes): a regular file of a host bind
// reached with no symlink (nothing is ever created on the host), or a
// path the image serves, as resolve finds it in the image (each symlink
// followed within the container's root, as the runtime will follow it
// when it mounts: the file it leads to is covered, and Docker creates it
// if it is absent) unless it leads into a host bind or a mask. A mask, a
// bind of that very path, a directory, anything not a regular file on
// the host are left alone.
func trustTargets(sp *Spec, resolve func(string) (string, error)) (targets, notes []string) {
	for _, p := range append([]string{provider.TrustBundlePath}, provider.TrustBundlePaths...) {
		in, tmpfs := sp.mountOf(p)
		switch {
		case tmpfs:
			targets = append(targets, p)
		case in == nil:
			real, err := resolve(p)
			if err != nil {
				notes = append(notes, fmt.Sprintf("%s: %v", p, err))
				break
			}
			if b, tmpfs := sp.mountOf(real); b != nil && !tmpfs {
				notes = append(notes, fmt.Sprintf("%s: the image's symlink leads to %s, inside %s (%s), where the runtime would create it on the host", p, real, b.Target, b.Field))
				break
			}
			targets = append(targets, p)
		case in.Mask || in.Target == p:
		case hostFile(filepath.Join(in.Source, strings.TrimPrefix(p, in.Target))):
			targets = append(targets, p)
		}
	}
	return targets, notes
}

// mountOf is the innermost bind of sp holding p, or whether a tmpfs
// nearer than any bind does (nil, false: the image's own).
func (sp *Spec) mountOf(p string) (b *Bind, tmpfs bool) {
	for i := range sp.Binds {
		x := &sp.Binds[i]
		if policy.Within(p, x.Target) && (b == nil || len(x.Target) > len(b.Target)) {
			b = x
		}
	}
	for _, t := range sp.Tmpfs {
		if policy.Within(p, t.Path) && (b == nil || len(t.Path) > len(b.Target)) {
			return nil, true
		}
	}
	return b, false
}

// errNotFile is what a path of an image that cannot take a file bind
// leads to.
var errNotFile = errors.New("cannot take the CA bundle")

// imagePath is where a path leads in an image (imageResolver).
type imagePath struct {
	real string
	err  error
}

// imagePaths resolves provider.TrustBundlePath and TrustBundlePaths in
// image (an image id, whose files never change) with imageResolver,
// once per image in this process.
func (p *Provider) imagePaths(ctx context.Context, image string) (map[string]imagePath, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m, ok := p.images[image]; ok {
		return m, nil
	}
	resolve, done, err := p.imageResolver(ctx, image)
	if err != nil {
		return nil, err
	}
	defer done()
	m := map[string]imagePath{}
	for _, x := range append([]string{provider.TrustBundlePath}, provider.TrustBundlePaths...) {
		real, err := resolve(x)
		if err != nil && !errors.Is(err, errNotFile) {
			return nil, err // the daemon's: nothing is known, nothing kept
		}
		m[x] = imagePath{real, err}
	}
	if p.images == nil {
		p.images = map[string]map[string]imagePath{}
	}
	p.images[image] = m
	return m, nil
}

// imageResolver resolves paths in image as the runtime will (its
// symlinks followed within its root; the result absolute, existing or
// not), by stat calls on a container made from it and never started,
// removed by done (labelled as a sandbox of this process, so that Sweep
// removes it should this process die first). A path that leads to
// something other than a regular file is an error.
func (p *Provider) imageResolver(ctx context.Context, image string) (resolve func(string) (string, error), done func(), err error) {
	cli := p.facts().cli
	id := provider.NewID()
	labels := map[string]string{LabelSandbox: id, LabelOwner: ownerLabel(os.Getpid()), LabelState: filepath.Join(stateBase(), id), LabelVersion: labelSchemeVer}
	c, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: id, Config: &container.Config{Image: image, Entrypoint: []string{"/corral-never-started"}, Labels: labels}})
	if err != nil {
		return nil, nil, fmt.Errorf("look inside image %s: %w", image, err)
	}
	done = func() {
		c2, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = cli.ContainerRemove(c2, c.ID, client.ContainerRemoveOptions{Force: true})
	}
	stats := map[string]container.PathStat{}
	stat := func(name string) (container.PathStat, bool, error) {
		if st, ok := stats[name]; ok {
			return st, true, nil
		}
		res, err := cli.ContainerStatPath(ctx, c.ID, client.ContainerStatPathOptions{Path: name})
		if cerrdefs.IsNotFound(err) {
			return container.PathStat{}, false, nil
		}
		if err != nil {
			return container.PathStat{}, false, err
		}
		stats[name] = res.Stat
		return res.Stat, true, nil
	}
	resolve = func(name string) (string, error) {
		cur, rest := "/", strings.Split(strings.TrimPrefix(name, "/"), "/")
		for len(rest) > 0 {
			next := path.Join(cur, rest[0])
			rest = rest[1:]
			st, ok, err := stat(next)
			if err != nil {
				return "", err
			}
			if !ok {
				return path.Join(append([]string{next}, rest...)...), nil // created by the runtime
			}
			if st.Mode&os.ModeSymlink != 0 {
				next = path.Clean("/" + st.LinkTarget) // resolved in the container's root by the daemon
			} else if len(rest) > 0 && !st.Mode.IsDir() {
				return "", fmt.Errorf("%s in the image is not a directory: %w", next, errNotFile)
			}
			cur = next
		}
		st, ok, err := stat(cur)
		if err != nil {
			return "", err
		}
		if ok && !st.Mode.IsRegular() {
			return "", fmt.Errorf("%s in the image is not a regular file (%v): %w", cur, st.Mode, errNotFile)
		}
		return cur, nil
	}
	return resolve, done, nil
}

// hostFile reports whether path is a regular file on the host, reached
// with no symlink in any component.
func hostFile(path string) bool {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG
}

// mapTrust plans, for a policy that inspects egress, where the CA
// bundle goes (trustTargets, looking inside the image): an error loss
// when nowhere, a warning for each path left out.
func (p *Provider) mapTrust(ctx context.Context, r *policy.Resolved, sp *Spec, add func(provider.Severity, string, string, string, ...any)) {
	if !inspects(r) || sp.ImageID == "" {
		return
	}
	paths, err := p.imagePaths(ctx, sp.ImageID)
	if err != nil {
		add(provider.SeverityError, "network", "network.allow", "the policy inspects egress, and where the container's CA bundle can go is not known: %v", err)
		return
	}
	targets, notes := trustTargets(sp, func(p string) (string, error) { r := paths[p]; return r.real, r.err })
	for _, n := range notes {
		add(provider.SeverityWarning, "network", "network.allow", "the container's CA bundle is not bound over %s", n)
	}
	if len(targets) == 0 {
		add(provider.SeverityError, "network", "network.allow", "the policy inspects egress, and the container's CA bundle has nowhere to go: masks or binds of the policy cover %s and each of %s", provider.TrustBundlePath, strings.Join(provider.TrustBundlePaths, ", "))
		return
	}
	sp.Trust = &Trust{Targets: targets}
	add(provider.SeverityInfo, "network", "network.allow", "the policy inspects egress: the container's CA bundle (the host's roots and its own CA) is bound read-only at %s (Docker creates those the image lacks), and SSL_CERT_FILE, CURL_CA_BUNDLE, GIT_SSL_CAINFO, NODE_EXTRA_CA_CERTS and the other variables name the first", strings.Join(targets, ", "))
}

// addTrust writes pem to the state dir's bundle and binds it where Map
// planned (Spec.Trust's targets).
func (s *Sandbox) addTrust(pem []byte) error {
	sp := s.spec
	if sp.Trust == nil {
		return provider.Errorf(provider.CodeInternal, "docker: the plan binds no CA bundle: it was mapped for a policy that does not inspect egress")
	}
	targets := sp.Trust.Targets
	src := filepath.Join(s.state, trustFile)
	f, err := os.OpenFile(src, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(pem)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	sp.Trust = &Trust{Source: src, Targets: targets}
	sp.Env = provider.WithEnv(sp.Env, provider.TrustEnv(targets[0]))
	sp.Shim.Env = sp.Env
	sp.Shim.Landlock.ROFiles = append(slices.Clip(sp.Shim.Landlock.ROFiles), targets[0])
	return nil
}

// SetTrust replaces the sandbox's CA bundle (provider.TrustUpdater): its
// file rewritten in place, never through a symlink or another link, so
// that every bind of it shows the new one (a reader may see a mix while
// it is written). An error for a sandbox made without one.
func (s *Sandbox) SetTrust(pem []byte) error {
	if s.spec.Trust == nil {
		return provider.Errorf(provider.CodeInternal, "docker sandbox %s was made without a CA bundle (its policy did not inspect egress then): recreate it", s.id)
	}
	f, err := os.OpenFile(filepath.Join(s.state, trustFile), os.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == nil {
		defer f.Close()
		var st unix.Stat_t
		if err = unix.Fstat(int(f.Fd()), &st); err == nil && (st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 || int(st.Uid) != os.Getuid()) {
			err = fmt.Errorf("%s is not the bundle corral wrote (mode %o, owner %d, %d links)", f.Name(), st.Mode, st.Uid, st.Nlink)
		}
	}
	if err == nil {
		if _, err = f.WriteAt(pem, 0); err == nil {
			err = f.Truncate(int64(len(pem)))
		}
	}
	if err != nil {
		return provider.Wrap(provider.CodeInternal, "docker sandbox "+s.id+": CA bundle", err)
	}
	return nil
}

// verifyTrust checks from outside that every trust target resolves, in
// the container's root (its symlinks followed there), to the bundle's
// own inode on a read-only mount.
func verifyTrust(tr *Trust, pid int) error {
	var want unix.Stat_t
	if err := unix.Stat(tr.Source, &want); err != nil {
		return err
	}
	root, err := unix.Open(fmt.Sprintf("/proc/%d/root", pid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("the container's root: %w", err)
	}
	defer unix.Close(root)
	for _, p := range tr.Targets {
		fd, err := unix.Openat2(root, strings.TrimPrefix(p, "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
		if err != nil {
			return fmt.Errorf("the CA bundle at %s: %w", p, err)
		}
		var st unix.Stat_t
		var fs unix.Statfs_t
		err = unix.Fstat(fd, &st)
		if err == nil {
			err = unix.Fstatfs(fd, &fs)
		}
		unix.Close(fd)
		if err != nil || st.Dev != want.Dev || st.Ino != want.Ino {
			return fmt.Errorf("%s in the container is not the CA bundle %s (%v)", p, tr.Source, err)
		}
		if fs.Flags&unix.ST_RDONLY == 0 {
			return fmt.Errorf("the CA bundle at %s is not read-only in the container", p)
		}
	}
	return nil
}

// stateExposed is the error loss of a grant that shows base (where
// containers keep their sockets, masks and CA bundles) inside, if any:
// the workload could change its own or another container's.
func stateExposed(r *policy.Resolved, base string) *provider.Loss {
	g := r.Covering(base)
	if g.Path == "" || g.Access == policy.AccessDeny {
		g = policy.PathGrant{}
		for _, x := range r.Grants {
			if x.Access != policy.AccessDeny && policy.Within(x.Path, base) {
				g = x
				break
			}
		}
	}
	if g.Path == "" {
		return nil
	}
	return &provider.Loss{Severity: provider.SeverityError, Area: "filesystem", Field: g.Field,
		Message: fmt.Sprintf("%s would put %s in the container, where corral keeps its containers' sockets, masks and CA bundles: its workload could change them (deny %s in the policy or grant less)", g.Path, base, base)}
}

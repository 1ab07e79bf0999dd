//go:build linux

package docker

import (
	"context"
	"errors"
	"fmt"
	"maps"
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

	"github.com/corral-sandbox/corral/internal/trustfile"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// A container whose policy inspects egress gets its CA bundle
// (provider.ProvisionOptions.Trust) and the same trust as a Java store
// (TrustStore) from files in its state dir (made with O_EXCL|O_NOFOLLOW
// in the dir Provision just created, which only this uid can write and
// no grant may show: stateExposed), bound read-only at
// provider.TrustBundlePath and JavaTrustStorePath and over the distro
// paths of each where Map found they can go (trustTargets); every
// command gets provider.WithTrustEnv of them, and Landlock lets the first
// of each be read. Start verifies each from outside (verifyTrust).
// SetTrust rewrites the same inodes, which every bind shows at once.

// Trust is where one of a container's trust files (Spec.Trust,
// Spec.Store) or credential files (Spec.Credentials) is bound.
type Trust struct {
	Source  string   `json:"source"`  // the host file, in the state dir
	Targets []string `json:"targets"` // inside, each read-only; WithTrustEnv names the first
}

// trustKind is one of a container's trust files. The Java store goes
// only over distro paths the image or a bind has: one Docker created
// would hide from WithTrustEnv that the JVM's own store is elsewhere (a
// JDK's tarball, say), and the JVM would trust neither.
type trustKind = provider.TrustFile

// trustKinds are the bundle's and the Java store's.
var trustKinds = provider.TrustFiles(provider.TrustBundlePaths, provider.JavaTrustStorePaths)

// trustOf is sp's binds of the trust file of kind k (nil: none).
func (sp *Spec) trustOf(k trustKind) **Trust {
	if k.Store {
		return &sp.Store
	}
	return &sp.Trust
}

// trustTargets are the paths inside where the trust file of kind k
// goes, of k.Path and k.Over in that order, and why others are left out
// (notes): a regular file of a host bind reached with no symlink
// (nothing is ever created on the host), or a path the image serves, as
// resolve finds it in the image (each symlink followed within the
// container's root, as the runtime will follow it when it mounts: the
// file it leads to is covered, and Docker creates it if it is absent,
// but for the Java store's distro paths, which must be there) unless it
// leads into a host bind or a mask. A mask, a bind of that very path, a
// directory, anything not a regular file on the host are left alone.
func trustTargets(sp *Spec, k trustKind, resolve func(string) imagePath) (targets, notes []string) {
	for _, p := range append([]string{k.Path}, k.Over...) {
		mayCreate := !k.Store || p == k.Path
		in, tmpfs := sp.mountOf(p)
		switch {
		case tmpfs:
			if mayCreate { // a tmpfs starts empty
				targets = append(targets, p)
			}
		case in == nil:
			r := resolve(p)
			if r.err != nil {
				notes = append(notes, fmt.Sprintf("%s: %v", p, r.err))
				break
			}
			if b, tmpfs := sp.mountOf(r.real); b != nil && !tmpfs {
				notes = append(notes, fmt.Sprintf("%s: the image's symlink leads to %s, inside %s (%s), where the runtime would create it on the host", p, r.real, b.Target, b.Field))
				break
			}
			if r.exists || mayCreate {
				targets = append(targets, p)
			}
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
var errNotFile = errors.New("cannot take a trust file")

// imagePath is where a path leads in an image (imageResolver): real,
// which exists there or not, or err.
type imagePath struct {
	real   string
	exists bool
	err    error
}

// imagePaths resolves, with imageResolver, the paths of every trust kind
// and extra in image (an image id, whose files never change), each once
// per image in this process: a map that is never changed once returned
// (more paths make a new one).
func (p *Provider) imagePaths(ctx context.Context, image string, extra ...string) (map[string]imagePath, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	want := slices.Clone(extra)
	for _, k := range trustKinds {
		want = append(want, k.Path)
		want = append(want, k.Over...)
	}
	old := p.images[image]
	missing := slices.DeleteFunc(want, func(x string) bool { _, ok := old[x]; return ok })
	if len(missing) == 0 {
		return old, nil
	}
	resolve, done, err := p.imageResolver(ctx, image)
	if err != nil {
		return nil, err
	}
	defer done()
	m := maps.Clone(old)
	if m == nil {
		m = map[string]imagePath{}
	}
	for _, x := range missing {
		r := resolve(x)
		if r.err != nil && !errors.Is(r.err, errNotFile) {
			return nil, r.err // the daemon's: nothing is known, nothing kept
		}
		m[x] = r
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
func (p *Provider) imageResolver(ctx context.Context, image string) (resolve func(string) imagePath, done func(), err error) {
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
	resolve = func(name string) imagePath {
		cur, rest := "/", strings.Split(strings.TrimPrefix(name, "/"), "/")
		for len(rest) > 0 {
			next := path.Join(cur, rest[0])
			rest = rest[1:]
			st, ok, err := stat(next)
			if err != nil {
				return imagePath{err: err}
			}
			if !ok {
				return imagePath{real: path.Join(append([]string{next}, rest...)...)} // created by the runtime
			}
			if st.Mode&os.ModeSymlink != 0 {
				next = path.Clean("/" + st.LinkTarget) // resolved in the container's root by the daemon
			} else if len(rest) > 0 && !st.Mode.IsDir() {
				return imagePath{err: fmt.Errorf("%s in the image is not a directory: %w", next, errNotFile)}
			}
			cur = next
		}
		st, ok, err := stat(cur)
		if err != nil {
			return imagePath{err: err}
		}
		if ok && !st.Mode.IsRegular() {
			return imagePath{err: fmt.Errorf("%s in the image is not a regular file (%v): %w", cur, st.Mode, errNotFile)}
		}
		return imagePath{real: cur, exists: ok}
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
// bundle and the Java store go (trustTargets, looking inside the image):
// an error loss when the bundle has nowhere to go, a warning for each
// path left out.
func (p *Provider) mapTrust(ctx context.Context, r *policy.Resolved, sp *Spec, add func(provider.Severity, string, string, string, ...any)) {
	if !r.InspectsEgress() || sp.ImageID == "" {
		return
	}
	paths, err := p.imagePaths(ctx, sp.ImageID)
	if err != nil {
		add(provider.SeverityError, "network", "network.allow", "the policy inspects egress, and where the container's CA bundle can go is not known: %v", err)
		return
	}
	for _, k := range trustKinds {
		targets, notes := trustTargets(sp, k, func(p string) imagePath { return paths[p] })
		for _, n := range notes {
			add(provider.SeverityWarning, "network", "network.allow", "the container's %s is not bound over %s", k.What, n)
		}
		switch {
		case len(targets) > 0:
			*sp.trustOf(k) = &Trust{Targets: targets}
		case k.Store:
			add(provider.SeverityWarning, "network", "network.allow", "the policy inspects egress, and the container's Java trust store has nowhere to go (masks or binds of the policy cover %s and the image has none of %s): a JVM inside does not trust the container's CA", k.Path, strings.Join(k.Over, ", "))
		default:
			add(provider.SeverityError, "network", "network.allow", "the policy inspects egress, and the container's CA bundle has nowhere to go: masks or binds of the policy cover %s and each of %s", k.Path, strings.Join(k.Over, ", "))
			return
		}
	}
	java := "nowhere"
	if sp.Store != nil {
		java = strings.Join(sp.Store.Targets, ", ")
	}
	add(provider.SeverityInfo, "network", "network.allow", "the policy inspects egress: the container's CA bundle (the host's roots and its own CA) is bound read-only at %s (Docker creates those the image lacks), and SSL_CERT_FILE, CURL_CA_BUNDLE, GIT_SSL_CAINFO, NODE_EXTRA_CA_CERTS and the other variables name the first; the same as a Java trust store at %s (JAVA_TOOL_OPTIONS names it when the image has none of %s)", strings.Join(sp.Trust.Targets, ", "), java, strings.Join(provider.JavaTrustStorePaths, ", "))
}

// addTrust writes pem and store (when set) to the state dir's trust
// files and binds them where Map planned (Spec.Trust's and Spec.Store's
// targets).
func (s *Sandbox) addTrust(pem, store []byte) error {
	sp := s.spec
	if sp.Trust == nil {
		return provider.Errorf(provider.CodeInternal, "docker: the plan binds no CA bundle: it was mapped for a policy that does not inspect egress")
	}
	for _, k := range trustKinds {
		tr, data := sp.trustOf(k), k.Of(pem, store)
		if len(data) == 0 || *tr == nil {
			*tr = nil // nothing to bind (a plan without the store, or no store given)
			continue
		}
		src := filepath.Join(s.state, k.Name)
		if err := trustfile.Create(src, data); err != nil {
			return err
		}
		*tr = &Trust{Source: src, Targets: (*tr).Targets}
		sp.Shim.Landlock.ROFiles = append(slices.Clip(sp.Shim.Landlock.ROFiles), (*tr).Targets[0])
	}
	var java []string // where the Java store went
	if sp.Store != nil {
		java = sp.Store.Targets
	}
	sp.Env = provider.WithTrustEnv(sp.Env, sp.Trust.Targets[0], java)
	sp.Shim.Env = sp.Env
	return nil
}

// SetTrust replaces the sandbox's CA bundle and Java store
// (provider.TrustUpdater): their files rewritten in place, never through
// a symlink or another link, so that every bind of them shows the new
// ones (a reader may see a mix while they are written). An error for a
// sandbox made without a bundle; one made without a store keeps none.
func (s *Sandbox) SetTrust(pem, store []byte) error {
	if s.spec.Trust == nil {
		return provider.Errorf(provider.CodeInternal, "docker sandbox %s was made without a CA bundle (its policy did not inspect egress then): recreate it", s.id)
	}
	for _, k := range trustKinds {
		tr, data := s.spec.trustOf(k), k.Of(pem, store)
		if *tr == nil || k.Store && data == nil {
			continue
		}
		if err := trustfile.Rewrite(filepath.Join(s.state, k.Name), data); err != nil {
			return provider.Wrap(provider.CodeInternal, "docker sandbox "+s.id+": "+k.What, err)
		}
	}
	return nil
}

// verifyTrust checks from outside that every target of a trust or
// credential file resolves, in the container's root (its symlinks followed there), to
// the file's own inode on a read-only mount.
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
			return fmt.Errorf("corral's file at %s: %w", p, err)
		}
		var st unix.Stat_t
		var fs unix.Statfs_t
		err = unix.Fstat(fd, &st)
		if err == nil {
			err = unix.Fstatfs(fd, &fs)
		}
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("corral's file at %s in the container: %w", p, err)
		}
		if st.Dev != want.Dev || st.Ino != want.Ino {
			return fmt.Errorf("%s in the container is another file than corral's %s (device %d inode %d, want %d %d)", p, tr.Source, st.Dev, st.Ino, want.Dev, want.Ino)
		}
		if fs.Flags&unix.ST_RDONLY == 0 {
			return fmt.Errorf("corral's file at %s is not read-only in the container", p)
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

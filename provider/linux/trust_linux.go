//go:build linux

package linux

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/trust"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// A sandbox whose policy inspects egress gets its trust bundle
// (provider.ProvisionOptions.Trust) from a file Corral writes in the
// sandbox's state directory (a persistent sandbox's, or StateBase/run-ID
// for a per-run one): 0444, created with O_EXCL|O_NOFOLLOW in a directory
// just made, which no grant may reach (stateGrant). Init binds it
// read-only at provider.TrustBundlePath and over the distro bundle paths
// the sandbox has (tree.trust), Landlock lets it be read, and every exec
// gets provider.TrustEnv of the first place it went. SetTrust rewrites
// the same inode, which every bind shows at once.

// trustFile is the bundle's name in a sandbox's state directory.
const trustFile = "ca-bundle.pem"

// trustPaths are the distro bundle paths a sandbox's bundle covers
// (provider.TrustBundlePaths; a test points them at a tree of its own).
var trustPaths = provider.TrustBundlePaths

// inspects reports whether r's proxy terminates TLS for some allow entry.
func inspects(r *policy.Resolved) bool {
	return r.Network == policy.NetworkProxy && slices.ContainsFunc(r.Egress.Allow, policy.Endpoint.Inspected)
}

// trustLoss is what Map says of the bundle of a policy that inspects
// egress: where it goes, or (a warning) that a grant covers
// provider.TrustBundlePath, so only the distro paths carry it.
func trustLoss(r *policy.Resolved) []provider.Loss {
	if !inspects(r) {
		return nil
	}
	if g := r.Covering(provider.TrustBundlePath); g.Path != "" {
		return []provider.Loss{{Severity: provider.SeverityWarning, Area: "network", Field: g.Field,
			Message: fmt.Sprintf("the policy inspects egress, and %s (%s) covers %s, where the sandbox's CA bundle goes: it is bound only over the distro bundle paths the sandbox has (%s), the variables name the first, and the sandbox does not start without one (narrow that rule so that it leaves %s alone)",
				g.Path, g.Access, provider.TrustBundlePath, strings.Join(trustPaths, ", "), filepath.Dir(provider.TrustBundlePath))}}
	}
	return []provider.Loss{{Severity: provider.SeverityInfo, Area: "network", Field: "network.allow",
		Message: fmt.Sprintf("the policy inspects egress: the sandbox's CA bundle (the host's roots and its own CA) is bound read-only at %s and over the distro bundle paths the sandbox has (%s), and SSL_CERT_FILE, CURL_CA_BUNDLE, GIT_SSL_CAINFO, NODE_EXTRA_CA_CERTS and the other variables name it",
			provider.TrustBundlePath, strings.Join(trustPaths, ", "))}}
}

// refuseStateGrant is the error for a policy whose sandbox would see
// StateBase, where the sandbox's own bundle and every persistent
// sandbox's records and sockets are kept (nil when none does).
func refuseStateGrant(r *policy.Resolved) error {
	g := stateGrant(r, StateBase())
	if g.Path == "" {
		return nil
	}
	return provider.Errorf(provider.CodePolicyRejected, "linux: %s (%s) would put %s in the sandbox, where sandboxes keep their CA bundles and persistent ones their supervisors' sockets and records: its workload could then change what a sandbox trusts, make a sandbox outlive Destroy or hide it (deny %s in the policy, narrow the grant, or set %s to a directory no grant covers)",
		g.Path, g.Field, StateBase(), StateBase(), StateDirEnv)
}

// runTrustDir makes StateBase/id, the state directory of per-run sandbox
// id, for its bundle; stale ones of callers that are gone are removed
// first (sweepRuns).
func runTrustDir(r *policy.Resolved, id string) (string, error) {
	if err := refuseStateGrant(r); err != nil {
		return "", err
	}
	if err := trust.MkdirAll(StateBase(), 0o700, uint32(os.Geteuid()), nil); err != nil {
		return "", provider.Wrap(provider.CodeProvisionFailed, "linux: state directory", err)
	}
	sweepRuns(StateBase())
	dir := filepath.Join(StateBase(), id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", provider.Wrap(provider.CodeProvisionFailed, "linux: sandbox "+id, err)
	}
	return dir, nil
}

// sweepRuns removes the per-run state directories in base (run-PID-...)
// whose caller PID is gone: a per-run sandbox killed with its caller
// never reached Deprovision. (A reused pid keeps one until it ends.)
func sweepRuns(base string) {
	ents, _ := os.ReadDir(base)
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "run-")
		ps, _, ok2 := strings.Cut(rest, "-")
		if pid, err := strconv.Atoi(ps); ok && ok2 && err == nil && pid > 0 && unix.Kill(pid, 0) == unix.ESRCH {
			_ = os.RemoveAll(filepath.Join(base, e.Name()))
		}
	}
}

// trustSpec writes pem to the bundle of state directory dir and returns
// a copy of spec that binds it (withTrust).
func trustSpec(spec *InitSpec, r *policy.Resolved, dir string, pem []byte) (*InitSpec, error) {
	src, err := writeTrust(dir, pem)
	if err != nil {
		return nil, err
	}
	return withTrust(spec, r, src), nil
}

// writeTrust creates dir/ca-bundle.pem holding pem, 0444, and returns its
// path. dir is a state directory just made, of this uid, 0700.
func writeTrust(dir string, pem []byte) (string, error) {
	path := filepath.Join(dir, trustFile)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o444)
	if err != nil {
		return "", provider.Wrap(provider.CodeProvisionFailed, "linux: trust bundle", err)
	}
	_, err = f.Write(pem)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return "", provider.Wrap(provider.CodeProvisionFailed, "linux: trust bundle", err)
	}
	return path, nil
}

// withTrust is a copy of spec that binds the bundle at src (MountTrust,
// last: over every other mount) at provider.TrustBundlePath unless a
// grant of r covers it, and over trustPaths; Landlock lets it be read.
// As root, the supervisor clones src (its directory is root's, 0700, and
// the workload's uid, which init runs as, cannot enter it).
func withTrust(spec *InitSpec, r *policy.Resolved, src string) *InitSpec {
	cp := *spec
	m := MountSpec{Kind: MountTrust, Path: provider.TrustBundlePath, Source: src, ReadOnly: true, HostClone: os.Getuid() == 0,
		Over: slices.Clone(trustPaths), Field: "builtin (CA bundle: the policy inspects egress)"}
	if g := r.Covering(provider.TrustBundlePath); g.Path != "" {
		m.Path = ""
		m.Field = fmt.Sprintf("builtin (CA bundle: not at %s, which %s covers: %s)", provider.TrustBundlePath, g.Field, g.Path)
	} else {
		cp.Landlock.ROFiles = append(slices.Clip(cp.Landlock.ROFiles), provider.TrustBundlePath)
	}
	cp.Mounts = append(slices.Clip(cp.Mounts), m)
	return &cp
}

// hasTrust reports whether spec binds a trust bundle.
func hasTrust(spec *InitSpec) bool {
	return slices.ContainsFunc(spec.Mounts, func(m MountSpec) bool { return m.Kind == MountTrust })
}

// rewriteTrust replaces the contents of the bundle at path in place (the
// same inode, which the sandbox's binds show), following no symlink in
// any component: it must be a regular file of this uid with one link,
// as writeTrust made it. It is made writable for the write and 0444
// again after. A reader inside may see a mix of old and new while it
// is written.
func rewriteTrust(path string, pem []byte) error {
	fd, err := openNoSymlinks(path)
	if errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%s does not exist: the sandbox was made without a CA bundle (its policy did not inspect egress then); recreate it", path)
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() || st.Nlink != 1 {
		return fmt.Errorf("%s is not the bundle corral wrote (mode %o, owner %d, %d links)", path, st.Mode, st.Uid, st.Nlink)
	}
	self := fmt.Sprintf("/proc/self/fd/%d", fd)
	if err := unix.Chmod(self, 0o600); err != nil {
		return err
	}
	defer unix.Chmod(self, 0o444)
	w, err := os.OpenFile(self, os.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	_, err = w.WriteAt(pem, 0)
	if err == nil {
		err = w.Truncate(int64(len(pem)))
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return err
}

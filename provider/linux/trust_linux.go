//go:build linux

package linux

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/trust"
	"github.com/corral-sandbox/corral/internal/trustfile"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// A sandbox whose policy inspects egress gets its trust bundle
// (provider.ProvisionOptions.Trust) and the same trust as a Java store
// (TrustStore) from files Corral writes in the sandbox's state directory
// (a persistent sandbox's, or StateBase/run-ID for a per-run one): 0444,
// created with O_EXCL|O_NOFOLLOW in a directory just made, which no
// grant may reach (stateGrant). Init binds each read-only at its path
// (provider.TrustBundlePath, JavaTrustStorePath) and over the distro
// paths of its kind the sandbox has (tree.trust), Landlock lets them be
// read, and every exec gets provider.WithTrustEnv of where they went.
// SetTrust rewrites the same inodes, which every bind shows at once.

// trustPaths and storePaths are the distro paths a sandbox's bundle and
// Java store cover (provider.TrustBundlePaths, JavaTrustStorePaths; a
// test points them at a tree of its own).
var (
	trustPaths = provider.TrustBundlePaths
	storePaths = provider.JavaTrustStorePaths
)

// trustKind is one of a sandbox's trust files.
type trustKind = provider.TrustFile

// trustKinds are the bundle's and the Java store's.
func trustKinds() []trustKind { return provider.TrustFiles(trustPaths, storePaths) }

// trustLoss is what Map says of the trust files of a policy that
// inspects egress: an error when a grant shows StateBase (where they are
// kept), else where they go, or (a warning) that a grant covers
// provider.TrustBundlePath or JavaTrustStorePath, so only the distro
// paths carry that file.
func trustLoss(r *policy.Resolved) []provider.Loss {
	if !r.InspectsEgress() {
		return nil
	}
	if err := refuseStateGrant(r); err != nil { // known now, not only at Provision
		return []provider.Loss{{Severity: provider.SeverityError, Area: "filesystem", Field: stateGrant(r, StateBase()).Field, Message: err.Error()}}
	}
	var loss []provider.Loss
	for _, k := range trustKinds() {
		if g := r.Covering(k.Path); g.Path != "" {
			then := "the variables name the first, and the sandbox does not start without one"
			if k.Store {
				then = "and a JVM whose own store is elsewhere does not trust the sandbox's CA"
			}
			loss = append(loss, provider.Loss{Severity: provider.SeverityWarning, Area: "network", Field: g.Field,
				Message: fmt.Sprintf("the policy inspects egress, and %s (%s) covers %s, where the sandbox's %s goes: it is bound only over the distro paths the sandbox has (%s), %s (narrow that rule so that it leaves %s alone)",
					g.Path, g.Access, k.Path, k.What, strings.Join(k.Over, ", "), then, filepath.Dir(k.Path))})
		}
	}
	if len(loss) > 0 {
		return loss
	}
	return []provider.Loss{{Severity: provider.SeverityInfo, Area: "network", Field: "network.allow",
		Message: fmt.Sprintf("the policy inspects egress: the sandbox's CA bundle (the host's roots and its own CA) is bound read-only at %s and over the distro bundle paths the sandbox has (%s), and SSL_CERT_FILE, CURL_CA_BUNDLE, GIT_SSL_CAINFO, NODE_EXTRA_CA_CERTS and the other variables name it; the same as a Java trust store at %s and over the distro Java stores the sandbox has (%s), JAVA_TOOL_OPTIONS naming it when it has none",
			provider.TrustBundlePath, strings.Join(trustPaths, ", "), provider.JavaTrustStorePath, strings.Join(storePaths, ", "))}}
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
// id, for its trust and credential files; stale ones of callers that are gone are removed
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

// stateFiles writes the files of opts' trust (trustSpec), r's
// credentials (credentialSpec) and the consent channel's note
// (consentDocSpec) to state directory dir and returns a copy of spec that
// binds them, in that order.
func stateFiles(spec *InitSpec, r *policy.Resolved, dir string, opts provider.ProvisionOptions) (*InitSpec, error) {
	var err error
	if len(opts.Trust) > 0 {
		if spec, err = trustSpec(spec, r, dir, opts.Trust, opts.TrustStore); err != nil {
			return nil, err
		}
	}
	if spec, err = credentialSpec(spec, r, dir); err != nil {
		return nil, err
	}
	return consentDocSpec(spec, r, dir)
}

// trustSpec writes pem to the bundle of state directory dir and store
// (when set) to its Java store, and returns a copy of spec that binds
// them (withTrust).
func trustSpec(spec *InitSpec, r *policy.Resolved, dir string, pem, store []byte) (*InitSpec, error) {
	for _, k := range trustKinds() {
		data := k.Of(pem, store)
		if len(data) == 0 {
			continue
		}
		src := filepath.Join(dir, k.Name)
		if err := trustfile.Create(src, data); err != nil {
			return nil, provider.Wrap(provider.CodeProvisionFailed, "linux: "+k.What, err)
		}
		spec = withTrust(spec, r, k, src)
	}
	return spec, nil
}

// withTrust is a copy of spec that binds the trust file of kind k at src
// (MountTrust, last: over every other mount) at k.Path unless a grant of
// r covers it, and over k.Over; Landlock lets it be read. As root, the
// supervisor clones src (its directory is root's, 0700, and the
// workload's uid, which init runs as, cannot enter it).
func withTrust(spec *InitSpec, r *policy.Resolved, k trustKind, src string) *InitSpec {
	cp := *spec
	m := MountSpec{Kind: MountTrust, Path: k.Path, Source: src, ReadOnly: true, HostClone: os.Getuid() == 0,
		Over: slices.Clone(k.Over), Store: k.Store, Field: "builtin (" + k.What + ": the policy inspects egress)"}
	if g := r.Covering(k.Path); g.Path != "" {
		m.Path = ""
		m.Field = fmt.Sprintf("builtin (%s: not at %s, which %s covers: %s)", k.What, k.Path, g.Field, g.Path)
	} else {
		cp.Landlock.ROFiles = append(slices.Clip(cp.Landlock.ROFiles), k.Path)
	}
	cp.Mounts = append(slices.Clip(cp.Mounts), m)
	return &cp
}

// hasTrust reports whether spec binds a trust bundle.
func hasTrust(spec *InitSpec) bool {
	return slices.ContainsFunc(spec.Mounts, func(m MountSpec) bool { return m.Kind == MountTrust && !m.Store })
}

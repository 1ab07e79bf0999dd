package session

import (
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/corral-sandbox/corral/egress"
	"github.com/corral-sandbox/corral/internal/jks"
	"github.com/corral-sandbox/corral/internal/pemcert"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// trust is what a session that inspects egress holds: the sandbox's CA
// (its key in this process only), the bundle the sandbox trusts, and the
// roots upstream certificates are verified against.
type trust struct {
	ca     *egress.CA
	bundle []byte // PEM: the host's roots and the CA
	store  []byte // the same as a Java KeyStore
	roots  *x509.CertPool
}

// newTrust mints the CA for n's inspected hosts and assembles the
// sandbox's bundle: the host's roots (the first of
// provider.TrustBundlePaths the host has, so passthrough hosts still
// verify inside) and the CA. Nil when nothing is inspected. Errors are
// CodePolicyRejected (upstream_ca) or CodeStartFailed.
func newTrust(n policy.Network) (*trust, error) {
	rules := Rules(n)
	if len(egress.InspectedHosts(rules)) == 0 {
		return nil, nil
	}
	roots, err := upstreamRoots(n.UpstreamCA)
	if err != nil {
		return nil, provider.Wrap(provider.CodePolicyRejected, "network.upstream_ca", err)
	}
	ca, err := egress.NewCA(rules)
	if err != nil {
		return nil, provider.Wrap(provider.CodeStartFailed, "egress CA", err)
	}
	host, err := hostRootsPEM()
	if err != nil {
		return nil, provider.Wrap(provider.CodeStartFailed, "egress CA bundle", err)
	}
	bundle := append(append(host, '\n'), ca.CertPEM()...)
	ders, _ := pemcert.Split(bundle)
	store, err := jks.TrustStore(ders, "changeit", time.Now())
	if err != nil {
		return nil, provider.Wrap(provider.CodeStartFailed, "egress CA trust store", err)
	}
	return &trust{ca: ca, bundle: bundle, store: store, roots: roots}, nil
}

// checkUpstreamCA refuses an upstream_ca the workload could write: the
// proxy reads it at start and on every live change, so a workload that
// could replace it would choose the roots its inspected upstreams are
// verified against.
func checkUpstreamCA(r *policy.Resolved, path string) error {
	if path == "" {
		return nil
	}
	p := path
	if real, err := filepath.EvalSymlinks(path); err == nil {
		p = real // grants are canonical
	}
	if g := r.Covering(p); g.Access == policy.AccessReadWrite {
		return provider.Errorf(provider.CodePolicyRejected, "network.upstream_ca: %s is inside the read-write grant %s (%s), so the workload could change the roots the proxy trusts: keep the file outside every read-write grant", path, g.Path, g.Field)
	}
	return nil
}

// hostRootsPEM reads the host's system bundle.
func hostRootsPEM() ([]byte, error) {
	for _, p := range provider.TrustBundlePaths {
		if b, err := os.ReadFile(p); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("the host has no system CA bundle at any of " + strings.Join(provider.TrustBundlePaths, ", ") + ": install the distribution's ca-certificates package")
}

// upstreamRoots is the host's root pool plus the certificates of the
// PEM file at path (none when empty).
func upstreamRoots(path string) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if path == "" {
		return pool, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

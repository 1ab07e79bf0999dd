package session

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/egress"
	"github.com/corral-sandbox/corral/policy"
)

var inspected = policy.Endpoint{Host: "api.allowed.test", Access: policy.HTTPReadOnly}

// liveSession is a session with network proxy and rules n as attach
// leaves it, without a sandbox.
func liveSession(t *testing.T, n policy.Network) *Session {
	t.Helper()
	n.Mode = policy.NetworkProxy
	s := &Session{pol: &policy.Resolved{Network: policy.NetworkProxy, Egress: n}, stats: &egressStats{}}
	tr, err := newTrust(n)
	if err != nil {
		t.Fatal(err)
	}
	s.trust = tr
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	cfg := s.proxyConfig(n, "", nil)
	p, err := egress.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.sw = newEgressSwitch(l, p, "")
	t.Cleanup(s.sw.Close)
	return s
}

func TestTrustBundleHoldsTheCA(t *testing.T) {
	tr, err := newTrust(policy.Network{Allow: []policy.Endpoint{inspected, {Host: "pypi.org"}}})
	if err != nil || tr == nil {
		t.Fatalf("newTrust: %v %v", tr, err)
	}
	if !strings.Contains(string(tr.bundle), string(tr.ca.CertPEM())) || strings.Contains(string(tr.bundle), "PRIVATE KEY") {
		t.Error("the bundle lacks the CA or holds a key")
	}
	if tr, err := newTrust(policy.Network{Allow: []policy.Endpoint{{Host: "pypi.org"}}}); tr != nil || err != nil {
		t.Errorf("nothing inspected: %v %v, want no trust", tr, err)
	}
	bad := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(bad, []byte("not pem"), 0o644)
	if _, err := newTrust(policy.Network{Allow: []policy.Endpoint{inspected}, UpstreamCA: bad}); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("upstream_ca without a certificate: %v", err)
	}
}

// TestLiveRulesStayWithinTheCA: a live change may not inspect a host the
// sandbox's CA was not minted for, nor start inspecting in a sandbox
// started without it; within the constraints it applies.
func TestLiveRulesStayWithinTheCA(t *testing.T) {
	plain := liveSession(t, policy.Network{Allow: []policy.Endpoint{{Host: "pypi.org"}}})
	if _, err := plain.PrepareEgress(policy.Network{Mode: policy.NetworkProxy, Allow: []policy.Endpoint{inspected}}); err == nil || !strings.Contains(err.Error(), "started without inspection") {
		t.Errorf("inspecting in a sandbox without a CA: %v", err)
	}
	s := liveSession(t, policy.Network{Allow: []policy.Endpoint{inspected}})
	if _, err := s.PrepareEgress(policy.Network{Mode: policy.NetworkProxy, Allow: []policy.Endpoint{{Host: "other.test", Access: policy.HTTPFull}}}); err == nil || !strings.Contains(err.Error(), "not all within the hosts the sandbox's CA was minted for (api.allowed.test)") {
		t.Errorf("inspecting a host outside the CA: %v", err)
	}
	apply, err := s.PrepareEgress(policy.Network{Mode: policy.NetworkProxy, Allow: []policy.Endpoint{{Host: "api.allowed.test", Access: policy.HTTPReadWrite}}})
	if err != nil {
		t.Fatalf("a change within the CA: %v", err)
	}
	if err := apply(true); err != nil {
		t.Fatal(err)
	}
}

func TestUpstreamCAOutsideWritableGrants(t *testing.T) {
	dir := t.TempDir()
	r := &policy.Resolved{Grants: []policy.PathGrant{{Path: dir, Access: policy.AccessReadWrite, Field: "filesystem.read_write[0]"}}}
	if err := checkUpstreamCA(r, filepath.Join(dir, "ca.pem")); err == nil || !strings.Contains(err.Error(), "could change the roots") {
		t.Errorf("upstream_ca in a read-write grant: %v", err)
	}
	r.Grants[0].Access = policy.AccessReadOnly
	if err := checkUpstreamCA(r, filepath.Join(dir, "ca.pem")); err != nil {
		t.Errorf("upstream_ca in a read-only grant: %v", err)
	}
}
